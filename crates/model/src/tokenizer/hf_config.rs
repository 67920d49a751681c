//! `tokenizer_config.json` of a Hugging Face model directory: special tokens, BOS/EOS flags and
//! chat templates.
//!
//! Special tokens are written either as a string or as a serialized `AddedToken`
//! (`{"content": "<s>", ...}`); `chat_template` either as one string or as a list of
//! `{"name", "template"}` (the one named "default" is the default). transformers 5 may keep the
//! template in a `chat_template.jinja` next to the config instead.

use std::path::Path;

use serde_json::Value;

use super::chat_template::json_kind;
use super::TokenizerError;

#[derive(Clone, Debug, Default)]
pub struct HfTokenizerConfig {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub unk_token: Option<String>,
    pub pad_token: Option<String>,
    /// `additional_special_tokens` (transformers 4) / `extra_special_tokens` (5).
    pub extra_special_tokens: Vec<String>,
    pub add_bos_token: Option<bool>,
    pub add_eos_token: Option<bool>,
    pub clean_up_tokenization_spaces: bool,
    /// The default chat template.
    pub chat_template: Option<String>,
    /// The named ones, "default" included when the config lists them by name.
    pub named_chat_templates: Vec<(String, String)>,
}

fn bad(path: &Path, reason: String) -> TokenizerError {
    TokenizerError::Config { path: path.display().to_string(), reason }
}

/// A special-token value: a string, an `AddedToken` object, or null.
fn token_text(path: &Path, key: &str, v: &Value) -> Result<Option<String>, TokenizerError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        Value::Object(o) => match o.get("content") {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            _ => Err(bad(path, format!("{key:?} is an object without a string \"content\""))),
        },
        other => Err(bad(
            path,
            format!("{key:?} must be a string or an AddedToken object, found {}", json_kind(other)),
        )),
    }
}

fn flag(
    path: &Path,
    root: &serde_json::Map<String, Value>,
    key: &str,
) -> Result<Option<bool>, TokenizerError> {
    match root.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(bad(path, format!("{key:?} must be a bool, found {}", json_kind(other)))),
    }
}

impl HfTokenizerConfig {
    pub fn read(path: &Path) -> Result<Self, TokenizerError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| TokenizerError::Io { path: path.display().to_string(), source })?;
        let value: Value = serde_json::from_str(&text)
            .map_err(|source| TokenizerError::Json { path: path.display().to_string(), source })?;
        let mut cfg = Self::from_json(path, &value)?;
        if cfg.chat_template.is_none() && cfg.named_chat_templates.is_empty() {
            let jinja = path.with_file_name("chat_template.jinja");
            if jinja.is_file() {
                cfg.chat_template =
                    Some(std::fs::read_to_string(&jinja).map_err(|source| TokenizerError::Io {
                        path: jinja.display().to_string(),
                        source,
                    })?);
            }
        }
        Ok(cfg)
    }

    pub fn from_json(path: &Path, value: &Value) -> Result<Self, TokenizerError> {
        let root = value.as_object().ok_or_else(|| bad(path, "the top level is not a JSON object".into()))?;
        let tok = |key: &str| match root.get(key) {
            None => Ok(None),
            Some(v) => token_text(path, key, v),
        };
        let mut cfg = Self {
            bos_token: tok("bos_token")?,
            eos_token: tok("eos_token")?,
            unk_token: tok("unk_token")?,
            pad_token: tok("pad_token")?,
            add_bos_token: flag(path, root, "add_bos_token")?,
            add_eos_token: flag(path, root, "add_eos_token")?,
            clean_up_tokenization_spaces: flag(path, root, "clean_up_tokenization_spaces")?.unwrap_or(false),
            ..Self::default()
        };
        for key in ["additional_special_tokens", "extra_special_tokens"] {
            match root.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    for v in items {
                        cfg.extra_special_tokens.extend(token_text(path, key, v)?);
                    }
                }
                // transformers 5 also allows a {name: token} map of named extra tokens.
                Some(Value::Object(map)) => {
                    for v in map.values() {
                        cfg.extra_special_tokens.extend(token_text(path, key, v)?);
                    }
                }
                Some(other) => {
                    return Err(bad(path, format!("{key:?} must be a list, found {}", json_kind(other))))
                }
            }
        }
        match root.get("chat_template") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => cfg.chat_template = Some(s.clone()),
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    let name = item.get("name").and_then(Value::as_str);
                    let template = item.get("template").and_then(Value::as_str);
                    let (Some(name), Some(template)) = (name, template) else {
                        return Err(bad(
                            path,
                            format!("chat_template[{i}] is not a {{\"name\", \"template\"}} object"),
                        ));
                    };
                    if name == "default" {
                        cfg.chat_template = Some(template.to_string());
                    }
                    cfg.named_chat_templates.push((name.to_string(), template.to_string()));
                }
            }
            Some(other) => {
                return Err(bad(
                    path,
                    format!("\"chat_template\" must be a string or a list, found {}", json_kind(other)),
                ))
            }
        }
        Ok(cfg)
    }
}
