//! Log lines on stderr: text for people, or one JSON object per line (`--json-output`)
//! for log collectors, as TGI's flag of the same name.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

#[derive(Clone, Copy, Debug)]
pub struct Logger {
    json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Error,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
        }
    }
}

impl Logger {
    pub fn new(json: bool) -> Self {
        Self { json }
    }

    /// One event: a message and structured fields (`("status", 200.into())`, …).
    pub fn log(&self, level: Level, message: &str, fields: &[(&str, Value)]) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let line = if self.json {
            let mut m = Map::new();
            m.insert("timestamp".into(), Value::from(rfc3339(now.as_secs(), now.subsec_millis())));
            m.insert("level".into(), Value::from(level.name()));
            m.insert("message".into(), Value::from(message));
            for (k, v) in fields {
                m.insert((*k).into(), v.clone());
            }
            Value::Object(m).to_string()
        } else {
            let mut s =
                format!("{} {:5} {message}", rfc3339(now.as_secs(), now.subsec_millis()), level.name());
            for (k, v) in fields {
                match v {
                    Value::String(t) => s.push_str(&format!(" {k}={t}")),
                    other => s.push_str(&format!(" {k}={other}")),
                }
            }
            s
        };
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{line}");
    }

    pub fn info(&self, message: &str, fields: &[(&str, Value)]) {
        self.log(Level::Info, message, fields);
    }

    pub fn warn(&self, message: &str, fields: &[(&str, Value)]) {
        self.log(Level::Warn, message, fields);
    }

    pub fn error(&self, message: &str, fields: &[(&str, Value)]) {
        self.log(Level::Error, message, fields);
    }
}

/// `2026-11-22T10:04:05.123Z` from Unix seconds (UTC; civil-from-days, H. Hinnant).
pub fn rfc3339(secs: u64, millis: u32) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn timestamps_are_utc_civil_dates() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(rfc3339(1_795_305_845, 123), "2026-11-22T00:04:05.123Z");
    }
}
