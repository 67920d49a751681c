//! `strftime_now(format)` for chat templates (Llama 3.1 prints today's date with it).
//!
//! Python's `datetime.now().strftime(format)` in local time; servers run in UTC and the
//! standard library has no time zones, so this formats the current UTC time. Supports the C89
//! directives plus `%e`, `%F`, `%T`, `%D`, `%R`, `%s`; others are copied through, as glibc does.

use std::time::{SystemTime, UNIX_EPOCH};

const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// A broken-down UTC time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DateTime {
    pub year: i64,
    /// 1..=12
    pub month: u32,
    /// 1..=31
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    /// 0 = Monday
    pub weekday: u32,
    /// 1..=366
    pub yearday: u32,
    pub unix: i64,
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

impl DateTime {
    /// From seconds since the Unix epoch (Howard Hinnant's `civil_from_days`).
    pub fn from_unix(secs: i64) -> Self {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        const CUM: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
        let yearday = CUM[(month - 1) as usize] + day + u32::from(month > 2 && is_leap(year));
        Self {
            year,
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: (rem / 60 % 60) as u32,
            second: (rem % 60) as u32,
            // 1970-01-01 was a Thursday (3).
            weekday: (days + 3).rem_euclid(7) as u32,
            yearday,
            unix: secs,
        }
    }

    pub fn now_utc() -> Self {
        let secs = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_secs() as i64,
            Err(e) => -(e.duration().as_secs() as i64),
        };
        Self::from_unix(secs)
    }

    pub fn format(&self, fmt: &str) -> String {
        let mut out = String::with_capacity(fmt.len() + 16);
        let mut chars = fmt.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let Some(d) = chars.next() else {
                out.push('%');
                break;
            };
            let hour12 = match self.hour % 12 {
                0 => 12,
                h => h,
            };
            let day_name = DAYS[self.weekday as usize % 7];
            let month_name = MONTHS[(self.month as usize).clamp(1, 12) - 1];
            match d {
                'Y' => out.push_str(&self.year.to_string()),
                'y' => out.push_str(&format!("{:02}", self.year.rem_euclid(100))),
                'C' => out.push_str(&format!("{:02}", self.year.div_euclid(100))),
                'm' => out.push_str(&format!("{:02}", self.month)),
                'd' => out.push_str(&format!("{:02}", self.day)),
                'e' => out.push_str(&format!("{:2}", self.day)),
                'j' => out.push_str(&format!("{:03}", self.yearday)),
                'H' => out.push_str(&format!("{:02}", self.hour)),
                'I' => out.push_str(&format!("{hour12:02}")),
                'M' => out.push_str(&format!("{:02}", self.minute)),
                'S' => out.push_str(&format!("{:02}", self.second)),
                'p' => out.push_str(if self.hour < 12 { "AM" } else { "PM" }),
                'a' => out.push_str(&day_name[..3]),
                'A' => out.push_str(day_name),
                'b' | 'h' => out.push_str(&month_name[..3]),
                'B' => out.push_str(month_name),
                'w' => out.push_str(&((self.weekday + 1) % 7).to_string()),
                'u' => out.push_str(&(self.weekday + 1).to_string()),
                'F' => out.push_str(&format!("{}-{:02}-{:02}", self.year, self.month, self.day)),
                'D' => out.push_str(&format!(
                    "{:02}/{:02}/{:02}",
                    self.month,
                    self.day,
                    self.year.rem_euclid(100)
                )),
                'T' => out.push_str(&format!("{:02}:{:02}:{:02}", self.hour, self.minute, self.second)),
                'R' => out.push_str(&format!("{:02}:{:02}", self.hour, self.minute)),
                'c' => out.push_str(&format!(
                    "{} {} {:2} {:02}:{:02}:{:02} {}",
                    &day_name[..3],
                    &month_name[..3],
                    self.day,
                    self.hour,
                    self.minute,
                    self.second,
                    self.year
                )),
                'x' => out.push_str(&format!(
                    "{:02}/{:02}/{:02}",
                    self.month,
                    self.day,
                    self.year.rem_euclid(100)
                )),
                'X' => out.push_str(&format!("{:02}:{:02}:{:02}", self.hour, self.minute, self.second)),
                's' => out.push_str(&self.unix.to_string()),
                'Z' => out.push_str("UTC"),
                'z' => out.push_str("+0000"),
                'n' => out.push('\n'),
                't' => out.push('\t'),
                '%' => out.push('%'),
                other => {
                    out.push('%');
                    out.push(other);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::DateTime;

    #[test]
    fn known_dates() {
        let t = DateTime::from_unix(0);
        assert_eq!(t.format("%Y-%m-%d %H:%M:%S %a %j"), "1970-01-01 00:00:00 Thu 001");
        // 2024-02-29 13:05:09 UTC, a Thursday in a leap year.
        let t = DateTime::from_unix(1_709_211_909);
        assert_eq!(t.format("%d %b %Y, %A %I:%M %p, day %j"), "29 Feb 2024, Thursday 01:05 PM, day 060");
        let t = DateTime::from_unix(1_735_689_599); // 2024-12-31 23:59:59
        assert_eq!(t.format("%F %T %j %%"), "2024-12-31 23:59:59 366 %");
    }
}
