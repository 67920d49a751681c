//! Chat templates: the Jinja2 templates of Hugging Face tokenizers, rendered with minijinja the
//! way transformers' `apply_chat_template` renders them.
//!
//! transformers compiles with `ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)`
//! (trailing newline of the template dropped), adds `raise_exception`, `strftime_now`, a
//! Python-`json.dumps` `tojson`, and renders with `messages`, `tools`, `documents`,
//! `add_generation_prompt`, the special tokens (`bos_token`, `eos_token`, …) and any extra keyword
//! arguments. Python methods on values (`.strip()`, `.startswith()`, `.items()`, …) come from
//! `minijinja_contrib::pycompat`; printed values use Python's spelling (`None`, `True`, `['a']`).
//! `{% generation %}` blocks (an HF extension for assistant masks) render their body.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Output, State, Value};
use serde_json::{Map, Value as Json};

use super::pyjson::{dumps, py_str, DumpOptions};
use super::strftime::DateTime;

const TEMPLATE_NAME: &str = "chat";
/// Instructions a template may run before it is stopped (a template is data from the model file).
const FUEL: u64 = 20_000_000;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ChatTemplateError {
    /// The template does not parse.
    #[error("chat template does not compile: {0}")]
    Syntax(String),
    /// The template called `raise_exception(message)`; displays as the message alone, as
    /// transformers' `TemplateError` does.
    #[error("{message}")]
    Raised { message: String },
    /// Any other failure while rendering.
    #[error("chat template failed to render: {0}")]
    Render(String),
    /// The messages are not a list of objects.
    #[error("invalid chat messages: {0}")]
    InvalidInput(String),
}

/// The error `raise_exception` attaches as the source of the minijinja error, so the message
/// survives however minijinja wraps it.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

/// A compiled chat template with its default variables (special tokens).
#[derive(Clone)]
pub struct ChatTemplate {
    source: String,
    env: Environment<'static>,
    globals: Map<String, Json>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("source", &self.source).field("globals", &self.globals).finish()
    }
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token`/`eos_token` become the variables of the same names.
    pub fn new(
        source: impl Into<String>,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
    ) -> Result<Self, ChatTemplateError> {
        let source = source.into();
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_fuel(Some(FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(python_formatter);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned(TEMPLATE_NAME, rewrite_generation_tags(&source))
            .map_err(|e| ChatTemplateError::Syntax(describe(&e)))?;
        let mut globals = Map::new();
        for (name, value) in [("bos_token", bos_token), ("eos_token", eos_token)] {
            if let Some(v) = value {
                globals.insert(name.to_string(), Json::String(v.to_string()));
            }
        }
        Ok(Self { source, env, globals })
    }

    /// Sets a default variable (e.g. `unk_token`, `pad_token`); `extra` in `render` overrides it.
    pub fn with_global(mut self, name: &str, value: Json) -> Self {
        self.globals.insert(name.to_string(), value);
        self
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders `messages` (a list of message objects). `extra`: further template variables
    /// (`tools`, `documents`, `enable_thinking`, …), overriding the special tokens.
    pub fn render(
        &self,
        messages: &Json,
        add_generation_prompt: bool,
        extra: Option<&Map<String, Json>>,
    ) -> Result<String, ChatTemplateError> {
        let list = messages.as_array().ok_or_else(|| {
            ChatTemplateError::InvalidInput(format!(
                "expected a list of messages, found {}",
                json_kind(messages)
            ))
        })?;
        let mut aliased = Vec::with_capacity(list.len());
        for (i, m) in list.iter().enumerate() {
            let obj = m.as_object().ok_or_else(|| {
                ChatTemplateError::InvalidInput(format!(
                    "message {i} should be an object, found {}",
                    json_kind(m)
                ))
            })?;
            aliased.push(Json::Object(alias_reasoning_fields(obj)));
        }
        let mut ctx = self.globals.clone();
        ctx.insert("tools".into(), Json::Null);
        ctx.insert("documents".into(), Json::Null);
        if let Some(extra) = extra {
            for (k, v) in extra {
                ctx.insert(k.clone(), v.clone());
            }
        }
        ctx.insert("messages".into(), Json::Array(aliased));
        ctx.insert("add_generation_prompt".into(), Json::Bool(add_generation_prompt));
        let template =
            self.env.get_template(TEMPLATE_NAME).map_err(|e| ChatTemplateError::Syntax(describe(&e)))?;
        template.render(Value::from_serialize(&ctx)).map_err(|e| match raised_message(&e) {
            Some(message) => ChatTemplateError::Raised { message },
            None => ChatTemplateError::Render(describe(&e)),
        })
    }
}

/// transformers' `_alias_reasoning_fields`: a message's reasoning under any of its names is
/// also given as `thinking` (first) and `reasoning_content`.
fn alias_reasoning_fields(m: &Map<String, Json>) -> Map<String, Json> {
    let reasoning = ["reasoning_content", "thinking", "reasoning"]
        .iter()
        .find_map(|k| m.get(*k).filter(|v| !v.is_null()));
    let Some(r) = reasoning.cloned() else { return m.clone() };
    let mut out = Map::new();
    out.insert("thinking".into(), r.clone());
    for (k, v) in m {
        out.insert(k.clone(), v.clone());
    }
    out.insert("reasoning_content".into(), r);
    out
}

/// A short name for a JSON value's type, for messages (values themselves can be long).
pub(crate) fn json_kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a bool",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    }
}

fn raised_message(e: &Error) -> Option<String> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<Raised>() {
            return Some(r.0.clone());
        }
        cur = err.source();
    }
    None
}

/// The error and its chain on one line.
fn describe(e: &Error) -> String {
    let mut s = e.to_string();
    let mut cur = std::error::Error::source(e);
    while let Some(err) = cur {
        let _ = write!(s, ": {err}");
        cur = err.source();
    }
    s
}

fn raise_exception(message: Value) -> Result<Value, Error> {
    let text = match message.as_str() {
        Some(s) => s.to_string(),
        None => message.to_string(),
    };
    Err(Error::new(ErrorKind::InvalidOperation, format!("raise_exception: {text}")).with_source(Raised(text)))
}

fn strftime_now(format: String) -> String {
    DateTime::now_utc().format(&format)
}

fn to_json(value: &Value) -> Result<Json, Error> {
    serde_json::to_value(value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("value cannot be written as JSON: {e}")))
}

/// `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let mut opts = DumpOptions {
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
        ..Default::default()
    };
    opts.sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    if let Some(indent) = kwargs.get::<Option<Value>>("indent")? {
        opts.indent = match indent.kind() {
            ValueKind::None | ValueKind::Undefined => None,
            ValueKind::String => Some(indent.as_str().unwrap_or_default().to_string()),
            ValueKind::Number => Some(" ".repeat(i64::try_from(indent)?.clamp(0, 64) as usize)),
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: indent must be a number or a string",
                ))
            }
        };
    }
    if let Some(seps) = kwargs.get::<Option<Vec<String>>>("separators")? {
        match seps.as_slice() {
            [a, b] => opts.separators = Some((a.clone(), b.clone())),
            _ => return Err(Error::new(ErrorKind::InvalidOperation, "tojson: separators must be a pair")),
        }
    }
    kwargs.assert_all_used()?;
    Ok(Value::from_safe_string(dumps(&to_json(&value)?, &opts)))
}

/// Prints values as Jinja2 does (Python's `str()`); strings and other kinds as minijinja does.
fn python_formatter(out: &mut Output, state: &State, value: &Value) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined => Ok(()),
        ValueKind::None | ValueKind::Bool | ValueKind::Number | ValueKind::Seq | ValueKind::Map => {
            match to_json(value) {
                Ok(j) => out.write_str(&py_str(&j)).map_err(Error::from),
                Err(_) => minijinja::escape_formatter(out, state, value),
            }
        }
        _ => minijinja::escape_formatter(out, state, value),
    }
}

/// Turns `{% generation %}…{% endgeneration %}` into `{% if true %}…{% endif %}`, keeping the
/// whitespace-control markers, so the body renders as transformers renders it.
fn rewrite_generation_tags(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        // Search past the opening "{%": in "{%}" the "%}" overlaps it (found by the fuzzer).
        let Some(end) = tag[2..].find("%}").map(|e| e + 2) else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let (lead, body) = split_marker_front(inner);
        let (body, trail) = split_marker_back(body);
        let replacement = match body.trim() {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replacement {
            Some(r) => {
                let _ = write!(out, "{{%{lead} {r} {trail}%}}");
            }
            None => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

fn split_marker_front(s: &str) -> (&str, &str) {
    match s.chars().next() {
        Some(c @ ('-' | '+')) => s.split_at(c.len_utf8()),
        _ => ("", s),
    }
}

fn split_marker_back(s: &str) -> (&str, &str) {
    match s.chars().last() {
        Some(c @ ('-' | '+')) => s.split_at(s.len() - c.len_utf8()),
        _ => (s, ""),
    }
}
