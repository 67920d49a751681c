//! The `tokenizer.*` metadata of a GGUF file, read and checked.
//!
//! Key names and token types follow llama.cpp (`gguf-py/gguf/constants.py`): token type 1 is
//! normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.

use crate::gguf::{GgufFile, MetaValue};

use super::TokenizerError;

pub const KEY_MODEL: &str = "tokenizer.ggml.model";
pub const KEY_PRE: &str = "tokenizer.ggml.pre";
pub const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
pub const KEY_SCORES: &str = "tokenizer.ggml.scores";
pub const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
pub const KEY_MERGES: &str = "tokenizer.ggml.merges";
pub const KEY_ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
pub const KEY_CHAT_TEMPLATE: &str = "tokenizer.chat_template";
pub const KEY_CHAT_TEMPLATES: &str = "tokenizer.chat_templates";

pub const TOKEN_TYPE_CONTROL: i32 = 3;
pub const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// A special-token id and the key it came from.
#[derive(Clone, Copy, Debug, Default)]
pub struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
}

/// Everything a tokenizer is built from, validated: lengths agree, ids are in range.
pub struct GgufVocab {
    pub model: String,
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    pub scores: Option<Vec<f32>>,
    pub token_types: Option<Vec<i32>>,
    pub merges: Option<Vec<(String, String)>>,
    pub ids: SpecialIds,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    pub add_space_prefix: Option<bool>,
    pub chat_template: Option<String>,
    /// `tokenizer.chat_template.<name>` for each name in `tokenizer.chat_templates`.
    pub named_chat_templates: Vec<(String, String)>,
}

impl GgufVocab {
    pub fn read(gguf: &GgufFile) -> Result<Self, TokenizerError> {
        let model = required_str(gguf, KEY_MODEL)?.to_string();
        let pre = optional_str(gguf, KEY_PRE)?.map(str::to_string);
        let tokens: Vec<String> = string_array(gguf, KEY_TOKENS)?
            .ok_or_else(|| TokenizerError::metadata(KEY_TOKENS, "missing"))?
            .into_iter()
            .map(str::to_string)
            .collect();
        if tokens.is_empty() {
            return Err(TokenizerError::metadata(KEY_TOKENS, "the vocabulary is empty"));
        }
        if u32::try_from(tokens.len()).is_err() {
            return Err(TokenizerError::metadata(
                KEY_TOKENS,
                format!("{} tokens do not fit u32 ids", tokens.len()),
            ));
        }
        let n = tokens.len();
        let scores = match gguf.get(KEY_SCORES) {
            None => None,
            Some(v) => Some(numeric_array(v, KEY_SCORES, n, |x| x.as_f64().map(|f| f as f32))?),
        };
        let token_types = match gguf.get(KEY_TOKEN_TYPE) {
            None => None,
            Some(v) => {
                Some(numeric_array(v, KEY_TOKEN_TYPE, n, |x| x.as_i64().and_then(|i| i32::try_from(i).ok()))?)
            }
        };
        let merges = match string_array(gguf, KEY_MERGES)? {
            None => None,
            Some(list) => Some(
                list.iter()
                    .enumerate()
                    .map(|(i, m)| {
                        m.split_once(' ').map(|(a, b)| (a.to_string(), b.to_string())).ok_or_else(|| {
                            TokenizerError::metadata(
                                KEY_MERGES,
                                format!("merge #{i} {m:?} is not two tokens separated by a space"),
                            )
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        let ids = SpecialIds {
            bos: token_id(gguf, "tokenizer.ggml.bos_token_id", n)?,
            eos: token_id(gguf, "tokenizer.ggml.eos_token_id", n)?,
            unk: token_id(gguf, "tokenizer.ggml.unknown_token_id", n)?,
            pad: token_id(gguf, "tokenizer.ggml.padding_token_id", n)?,
            eot: token_id(gguf, "tokenizer.ggml.eot_token_id", n)?,
            eom: token_id(gguf, "tokenizer.ggml.eom_token_id", n)?,
        };
        let mut named_chat_templates = Vec::new();
        if let Some(names) = string_array(gguf, KEY_CHAT_TEMPLATES)? {
            for name in names {
                let key = format!("{KEY_CHAT_TEMPLATE}.{name}");
                if let Some(src) = optional_str(gguf, &key)? {
                    named_chat_templates.push((name.to_string(), src.to_string()));
                }
            }
        }
        Ok(Self {
            model,
            pre,
            tokens,
            scores,
            token_types,
            merges,
            ids,
            add_bos: optional_bool(gguf, "tokenizer.ggml.add_bos_token")?,
            add_eos: optional_bool(gguf, "tokenizer.ggml.add_eos_token")?,
            add_space_prefix: optional_bool(gguf, KEY_ADD_SPACE_PREFIX)?,
            chat_template: optional_str(gguf, KEY_CHAT_TEMPLATE)?.map(str::to_string),
            named_chat_templates,
        })
    }

    pub fn token_type(&self, id: usize) -> Option<i32> {
        self.token_types.as_ref().and_then(|t| t.get(id).copied())
    }

    pub fn token(&self, id: Option<u32>) -> Option<&str> {
        id.and_then(|i| self.tokens.get(i as usize)).map(String::as_str)
    }
}

fn wrong_type(key: &str, expected: &str, found: &MetaValue) -> TokenizerError {
    TokenizerError::metadata(key, format!("expected {expected}, found {}", found.type_name()))
}

fn required_str<'a>(gguf: &'a GgufFile, key: &str) -> Result<&'a str, TokenizerError> {
    optional_str(gguf, key)?.ok_or_else(|| TokenizerError::metadata(key, "missing"))
}

fn optional_str<'a>(gguf: &'a GgufFile, key: &str) -> Result<Option<&'a str>, TokenizerError> {
    match gguf.get(key) {
        None => Ok(None),
        Some(v) => v.as_str().map(Some).ok_or_else(|| wrong_type(key, "a string", v)),
    }
}

fn optional_bool(gguf: &GgufFile, key: &str) -> Result<Option<bool>, TokenizerError> {
    match gguf.get(key) {
        None => Ok(None),
        Some(v) => v.as_bool().map(Some).ok_or_else(|| wrong_type(key, "a bool", v)),
    }
}

fn string_array<'a>(gguf: &'a GgufFile, key: &str) -> Result<Option<Vec<&'a str>>, TokenizerError> {
    let Some(v) = gguf.get(key) else { return Ok(None) };
    let items = v.as_array().ok_or_else(|| wrong_type(key, "an array of strings", v))?;
    items
        .iter()
        .enumerate()
        .map(|(i, x)| {
            x.as_str().ok_or_else(|| {
                TokenizerError::metadata(key, format!("element {i} is a {}, not a string", x.type_name()))
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn numeric_array<T>(
    v: &MetaValue,
    key: &str,
    n: usize,
    conv: impl Fn(&MetaValue) -> Option<T>,
) -> Result<Vec<T>, TokenizerError> {
    let items = v.as_array().ok_or_else(|| wrong_type(key, "an array", v))?;
    if items.len() != n {
        return Err(TokenizerError::metadata(
            key,
            format!("has {} entries but {KEY_TOKENS} has {n}", items.len()),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, x)| {
            conv(x).ok_or_else(|| {
                TokenizerError::metadata(key, format!("element {i} ({x}, {}) is out of range", x.type_name()))
            })
        })
        .collect()
}

/// A token id: absent, negative or `u32::MAX` (llama.cpp's "none", -1, however it was stored)
/// gives `None`; any other id past the vocabulary is an error.
fn token_id(gguf: &GgufFile, key: &str, n: usize) -> Result<Option<u32>, TokenizerError> {
    let Some(v) = gguf.get(key) else { return Ok(None) };
    if v.as_i64().is_some_and(|i| i < 0) || v.as_u64() == Some(u32::MAX as u64) {
        return Ok(None);
    }
    let id = v
        .as_u64()
        .filter(|_| !matches!(v, MetaValue::Bool(_)))
        .ok_or_else(|| wrong_type(key, "an integer", v))?;
    if id >= n as u64 {
        return Err(TokenizerError::metadata(
            key,
            format!("token id {id} is past the vocabulary of {n} tokens"),
        ));
    }
    Ok(Some(id as u32))
}
