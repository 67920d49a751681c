//! Python's `json.dumps` and `str()` of values, for chat templates written against Jinja2.
//!
//! transformers replaces Jinja's `tojson` with `json.dumps(x, ensure_ascii=False, indent=None,
//! separators=None, sort_keys=False)` (no HTML escaping, `", "` and `": "` separators), and
//! Jinja2 prints values with Python's `str()`: `None`, `True`, `['a', 1]`, `{'k': 'v'}`.

use serde_json::Value;

/// Options of `json.dumps` that templates use.
#[derive(Clone, Debug, Default)]
pub struct DumpOptions {
    pub ensure_ascii: bool,
    /// `None`: one line. `Some(s)`: newlines, each level indented by `s`.
    pub indent: Option<String>,
    /// `(item, key)` separators; default `(", ", ": ")`, or `(",", ": ")` with an indent.
    pub separators: Option<(String, String)>,
    pub sort_keys: bool,
}

pub fn dumps(v: &Value, opts: &DumpOptions) -> String {
    let (item_sep, key_sep) = match (&opts.separators, &opts.indent) {
        (Some((a, b)), _) => (a.clone(), b.clone()),
        (None, Some(_)) => (",".to_string(), ": ".to_string()),
        (None, None) => (", ".to_string(), ": ".to_string()),
    };
    let mut out = String::new();
    write_json(&mut out, v, opts, &item_sep, &key_sep, 0);
    out
}

fn newline(out: &mut String, indent: &Option<String>, level: usize) {
    if let Some(s) = indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(s);
        }
    }
}

fn write_json(out: &mut String, v: &Value, opts: &DumpOptions, item_sep: &str, key_sep: &str, level: usize) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => out.push_str(&i.to_string()),
            (_, Some(u), _) => out.push_str(&u.to_string()),
            (_, _, Some(f)) => out.push_str(&float_repr(f, true)),
            _ => out.push_str(&n.to_string()),
        },
        Value::String(s) => json_string(out, s, opts.ensure_ascii),
        Value::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, &opts.indent, level + 1);
                write_json(out, item, opts, item_sep, key_sep, level + 1);
            }
            newline(out, &opts.indent, level);
            out.push(']');
        }
        Value::Object(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if opts.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (k, val)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, &opts.indent, level + 1);
                json_string(out, k, opts.ensure_ascii);
                out.push_str(key_sep);
                write_json(out, val, opts, item_sep, key_sep, level + 1);
            }
            newline(out, &opts.indent, level);
            out.push('}');
        }
    }
}

fn json_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && !(' '..='~').contains(&c)) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: shortest round-trip digits, exponent form outside 1e-4..1e16.
/// `json`: NaN/inf spelled as `json.dumps` does (`NaN`, `Infinity`) rather than `nan`, `inf`.
pub fn float_repr(f: f64, json: bool) -> String {
    if f.is_nan() {
        return if json { "NaN" } else { "nan" }.to_string();
    }
    if f.is_infinite() {
        let s = if json { "Infinity" } else { "inf" };
        return if f < 0.0 { format!("-{s}") } else { s.to_string() };
    }
    // `{:e}` gives the shortest round-trip digits: "1.5e-7", "-1e20", "0e0".
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = mantissa.strip_prefix('-').map_or(("", mantissa), |m| ("-", m));
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        let (int_part, frac_part) = if point <= 0 {
            ("0".to_string(), format!("{}{digits}", "0".repeat((-point) as usize)))
        } else if point as usize >= digits.len() {
            (format!("{digits}{}", "0".repeat(point as usize - digits.len())), String::new())
        } else {
            (digits[..point as usize].to_string(), digits[point as usize..].to_string())
        };
        let frac = if frac_part.is_empty() { "0".to_string() } else { frac_part };
        format!("{sign}{int_part}.{frac}")
    } else {
        let m = if digits.len() > 1 { format!("{}.{}", &digits[..1], &digits[1..]) } else { digits };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{m}e{esign}{:02}", exp.abs())
    }
}

/// Python's `repr(str)`.
pub fn str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7f..=0xa0).contains(&(c as u32)) => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `repr()` of a JSON-like value (strings quoted).
pub fn repr(v: &Value) -> String {
    match v {
        Value::String(s) => str_repr(s),
        other => py_str(other),
    }
}

/// Python's `str()` of a JSON-like value (what Jinja2 prints for `{{ value }}`).
pub fn py_str(v: &Value) -> String {
    match v {
        Value::Null => "None".to_string(),
        Value::Bool(b) => if *b { "True" } else { "False" }.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) => float_repr(f, false),
            _ => n.to_string(),
        },
        Value::String(s) => s.clone(),
        Value::Array(items) => format!("[{}]", items.iter().map(repr).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter().map(|(k, v)| format!("{}: {}", str_repr(k), repr(v))).collect::<Vec<_>>().join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_like_python() {
        for (f, s) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e16, "1e+16"),
            (123456789012345.0, "123456789012345.0"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1.5e300, "1.5e+300"),
            (0.0, "0.0"),
        ] {
            assert_eq!(float_repr(f, false), s, "{f}");
        }
    }

    #[test]
    fn dumps_like_python() {
        let v = json!({"b": [1, 2.5, "é\n\"x\""], "a": {}, "c": null, "d": true});
        let plain = dumps(&v, &DumpOptions::default());
        assert_eq!(plain, r#"{"b": [1, 2.5, "é\n\"x\""], "a": {}, "c": null, "d": true}"#);
        let opts = DumpOptions {
            ensure_ascii: true,
            indent: Some("  ".into()),
            sort_keys: true,
            ..Default::default()
        };
        assert_eq!(
            dumps(&v, &opts),
            "{\n  \"a\": {},\n  \"b\": [\n    1,\n    2.5,\n    \"\\u00e9\\n\\\"x\\\"\"\n  ],\n  \"c\": null,\n  \"d\": true\n}"
        );
        assert_eq!(py_str(&json!(["it's", {"k": null}])), r#"["it's", {'k': None}]"#);
    }
}
