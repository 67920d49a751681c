//! Tokenizer and chat template (DESIGN.md §5): from a GGUF file's `tokenizer.*` metadata or a
//! Hugging Face directory's `tokenizer.json` + `tokenizer_config.json`, behaving as transformers'
//! tokenizer for the same files does (`scripts/reference.py` records what that is).
//!
//! The work is done by the `tokenizers` library; this module builds its pipeline from GGUF
//! metadata (`gguf_bpe`, `gguf_spm`, `pretokenize`), applies transformers' rules for special
//! tokens and BOS/EOS, and exposes what the engine needs: ids, text, the raw bytes of each token
//! (for incremental detokenization) and the end-of-generation ids.

pub mod byte_map;
mod chat_template;
mod error;
mod gguf_bpe;
pub mod gguf_spm;
mod gguf_vocab;
mod hf_config;
pub mod pretokenize;
pub mod pyjson;
mod special_tokens;
pub mod strftime;

use std::collections::HashSet;
use std::path::Path;
use std::str::FromStr;

use serde_json::Value as Json;

pub use byte_map::ByteEncoding;
pub use chat_template::{ChatTemplate, ChatTemplateError};
pub use error::TokenizerError;

use crate::gguf::GgufFile;
use gguf_vocab::{GgufVocab, KEY_CHAT_TEMPLATE, KEY_MODEL};
use hf_config::HfTokenizerConfig;

/// A token id and its span of the encoded text, in characters (start, end).
pub type TokenSpan = (u32, (usize, usize));

/// A text ↔ token-id mapping with its special tokens and chat template.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    encoding: ByteEncoding,
    strips_leading_space: bool,
    clean_up_spaces: bool,
    bos_token_id: Option<u32>,
    file_eos_ids: Vec<u32>,
    extra_eos_ids: Vec<u32>,
    add_bos: bool,
    add_eos: bool,
    n_ids: usize,
    token_bytes: Vec<Box<[u8]>>,
    special_ids: HashSet<u32>,
    chat_template: Option<ChatTemplate>,
    named_chat_templates: Vec<(String, ChatTemplate)>,
    chat_template_error: Option<ChatTemplateError>,
}

/// Special-token strings handed to the chat template.
#[derive(Default)]
struct TemplateTokens<'a> {
    bos: Option<&'a str>,
    eos: Option<&'a str>,
    unk: Option<&'a str>,
    pad: Option<&'a str>,
}

impl Tokenizer {
    /// A Hugging Face tokenizer: `tokenizer.json`, and `tokenizer_config.json` for the special
    /// tokens, `add_bos_token`/`add_eos_token` and the chat template.
    ///
    /// As transformers 5 does: when the config states `add_bos_token` or `add_eos_token`, the
    /// post-processor becomes `[bos] $A [eos]` per those flags (an absent flag is off); otherwise
    /// `tokenizer.json`'s post-processor stays. Special tokens named in the config but missing
    /// from `tokenizer.json` are added. Truncation and padding stored in the file are ignored.
    pub fn from_file(tokenizer_json: &Path, tokenizer_config: Option<&Path>) -> Result<Self, TokenizerError> {
        let path = tokenizer_json.display().to_string();
        let text = std::fs::read_to_string(tokenizer_json)
            .map_err(|source| TokenizerError::Io { path: path.clone(), source })?;
        let mut inner =
            tokenizers::Tokenizer::from_str(&text).map_err(|e| TokenizerError::backend(&path, e))?;
        inner.with_truncation(None).map_err(|e| TokenizerError::backend(&path, e))?;
        inner.with_padding(None);
        let cfg = match tokenizer_config {
            Some(p) => HfTokenizerConfig::read(p)?,
            None => HfTokenizerConfig::default(),
        };

        let present: HashSet<String> =
            inner.get_added_tokens_decoder().into_values().map(|t| t.content).collect();
        let named = [&cfg.bos_token, &cfg.eos_token, &cfg.unk_token, &cfg.pad_token];
        let missing: Vec<_> = named
            .into_iter()
            .flatten()
            .chain(&cfg.extra_special_tokens)
            .filter(|t| !present.contains(*t))
            .map(|t| special_tokens::special(t))
            .collect();
        if !missing.is_empty() {
            inner
                .add_special_tokens(missing)
                .map_err(|e| TokenizerError::backend("adding special tokens", e))?;
        }

        let id_of = |t: &Option<String>| t.as_deref().and_then(|t| inner.token_to_id(t));
        let bos_token_id = id_of(&cfg.bos_token);
        let eos_token_id = id_of(&cfg.eos_token);
        if cfg.add_bos_token.is_some() || cfg.add_eos_token.is_some() {
            fn with(flag: Option<bool>, t: &Option<String>, id: Option<u32>) -> Option<(&str, u32)> {
                flag.unwrap_or(false).then(|| Some((t.as_deref()?, id?))).flatten()
            }
            let pp = special_tokens::bos_eos_post_processor(
                with(cfg.add_bos_token, &cfg.bos_token, bos_token_id),
                with(cfg.add_eos_token, &cfg.eos_token, eos_token_id),
            )?;
            inner.with_post_processor(Some(pp));
        }
        // What the post-processor adds around a text, whichever kind it is.
        let probe = |add: bool| inner.encode_fast("a", add).map(|e| e.get_ids().to_vec());
        let full = probe(true).map_err(|e| TokenizerError::backend(&path, e))?;
        let plain = probe(false).map_err(|e| TokenizerError::backend(&path, e))?;
        let at = full.windows(plain.len().max(1)).position(|w| w == plain.as_slice()).unwrap_or(0);
        let (before, after) = (&full[..at], full.get(at + plain.len()..).unwrap_or(&[]));
        let add_bos = bos_token_id.is_some_and(|id| before.contains(&id));
        let add_eos = eos_token_id.is_some_and(|id| after.contains(&id));

        let (encoding, strips_leading_space) = decoder_kind(&inner);
        let tokens = TemplateTokens {
            bos: cfg.bos_token.as_deref(),
            eos: cfg.eos_token.as_deref(),
            unk: cfg.unk_token.as_deref(),
            pad: cfg.pad_token.as_deref(),
        };
        let mut tok = Self::assemble(
            inner,
            encoding,
            strips_leading_space,
            bos_token_id,
            eos_token_id.into_iter().collect(),
        );
        tok.clean_up_spaces = cfg.clean_up_tokenization_spaces;
        tok.add_bos = add_bos;
        tok.add_eos = add_eos;
        tok.set_templates(cfg.chat_template.as_deref(), &cfg.named_chat_templates, &tokens);
        Ok(tok)
    }

    /// The tokenizer a GGUF file describes in its `tokenizer.ggml.*` metadata: byte-level BPE
    /// (`model = "gpt2"`) or SentencePiece BPE (`model = "llama"`). Errors name the offending key.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self, TokenizerError> {
        let vocab = GgufVocab::read(gguf)?;
        let spm_prefix = vocab.add_space_prefix.unwrap_or(true);
        let (inner, encoding, strips) = match vocab.model.as_str() {
            "gpt2" => (gguf_bpe::build(&vocab)?, ByteEncoding::ByteLevel, false),
            "llama" => (gguf_spm::build(&vocab)?, ByteEncoding::SentencePiece, spm_prefix),
            other => {
                return Err(TokenizerError::Unsupported(format!(
                    "{KEY_MODEL} = {other:?} (Peregrine reads \"gpt2\" byte-level BPE \
                     and \"llama\" SentencePiece vocabularies)"
                )))
            }
        };
        let ids = vocab.ids;
        let mut eos: Vec<u32> = Vec::new();
        for id in [ids.eos, ids.eot, ids.eom].into_iter().flatten() {
            if !eos.contains(&id) {
                eos.push(id);
            }
        }
        let mut tok = Self::assemble(inner, encoding, strips, ids.bos, eos);
        tok.n_ids = tok.n_ids.max(vocab.tokens.len());
        if tok.token_bytes.len() < tok.n_ids {
            tok.token_bytes.resize(tok.n_ids, Box::default());
        }
        let default_bos = vocab.model == "llama";
        tok.add_bos = vocab.add_bos.unwrap_or(default_bos) && ids.bos.is_some();
        tok.add_eos = vocab.add_eos.unwrap_or(false) && ids.eos.is_some();
        let tokens = TemplateTokens {
            bos: vocab.token(ids.bos),
            eos: vocab.token(ids.eos),
            unk: vocab.token(ids.unk),
            pad: vocab.token(ids.pad),
        };
        tok.set_templates(vocab.chat_template.as_deref(), &vocab.named_chat_templates, &tokens);
        if let (Some(e), Some(_)) = (&tok.chat_template_error, &vocab.chat_template) {
            log::warn!("{KEY_CHAT_TEMPLATE}: {e}");
        }
        Ok(tok)
    }

    fn assemble(
        inner: tokenizers::Tokenizer,
        encoding: ByteEncoding,
        strips_leading_space: bool,
        bos_token_id: Option<u32>,
        file_eos_ids: Vec<u32>,
    ) -> Self {
        let added = inner.get_added_tokens_decoder();
        let special_ids = added.iter().filter(|(_, t)| t.special).map(|(&id, _)| id).collect();
        let vocab = inner.get_vocab(true);
        let n_ids = vocab.values().map(|&id| id as usize + 1).max().unwrap_or(0);
        let mut token_bytes: Vec<Box<[u8]>> = vec![Box::default(); n_ids];
        for (token, id) in &vocab {
            // An added token's text wins over a model token with the same id, as in `decode`.
            let text = added.get(id).map_or(token.as_str(), |t| t.content.as_str());
            token_bytes[*id as usize] = byte_map::token_bytes(text, encoding).into_boxed_slice();
        }
        Self {
            inner,
            encoding,
            strips_leading_space,
            clean_up_spaces: false,
            bos_token_id,
            file_eos_ids,
            extra_eos_ids: Vec::new(),
            add_bos: false,
            add_eos: false,
            n_ids,
            token_bytes,
            special_ids,
            chat_template: None,
            named_chat_templates: Vec::new(),
            chat_template_error: None,
        }
    }

    fn set_templates(&mut self, default: Option<&str>, named: &[(String, String)], tokens: &TemplateTokens) {
        let compile = |src: &str| -> Result<ChatTemplate, ChatTemplateError> {
            let mut t = ChatTemplate::new(src, tokens.bos, tokens.eos)?;
            for (name, v) in [("unk_token", tokens.unk), ("pad_token", tokens.pad)] {
                if let Some(v) = v {
                    t = t.with_global(name, Json::String(v.to_string()));
                }
            }
            Ok(t)
        };
        if let Some(src) = default {
            match compile(src) {
                Ok(t) => self.chat_template = Some(t),
                Err(e) => self.chat_template_error = Some(e),
            }
        }
        for (name, src) in named {
            match compile(src) {
                Ok(t) => self.named_chat_templates.push((name.clone(), t)),
                Err(e) => log::warn!("chat template {name:?}: {e}"),
            }
        }
    }

    /// Token ids of `text`. `add_special_tokens`: add BOS/EOS as the tokenizer is configured to.
    /// Special-token text in `text` (e.g. `<|im_start|>`) always maps to its single id.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizerError> {
        let enc = self
            .inner
            .encode_fast(text, add_special_tokens)
            .map_err(|e| TokenizerError::backend("encode", e))?;
        Ok(enc.get_ids().to_vec())
    }

    /// `encode`, with each token's span of `text` in characters (start, end); special
    /// tokens added around the text have an empty span.
    pub fn encode_with_offsets(
        &self,
        text: &str,
        add_special_tokens: bool,
    ) -> Result<Vec<TokenSpan>, TokenizerError> {
        let enc = self
            .inner
            .encode_char_offsets(text, add_special_tokens)
            .map_err(|e| TokenizerError::backend("encode", e))?;
        Ok(enc.get_ids().iter().copied().zip(enc.get_offsets().iter().copied()).collect())
    }

    /// Text of `ids`; ids the vocabulary does not have are skipped (as `tokenizers` does).
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokenizerError> {
        let text =
            self.inner.decode(ids, skip_special_tokens).map_err(|e| TokenizerError::backend("decode", e))?;
        Ok(if self.clean_up_spaces { clean_up_tokenization(&text) } else { text })
    }

    /// Number of ids: one past the largest id of the vocabulary and the added tokens.
    pub fn vocab_size(&self) -> usize {
        self.n_ids
    }

    pub fn bos_token_id(&self) -> Option<u32> {
        self.bos_token_id
    }

    /// Ids that end generation: the file's EOS (and GGUF's EOT/EOM), then those set with
    /// [`Self::set_extra_eos_token_ids`] (e.g. `generation_config.json`'s `eos_token_id` list).
    pub fn eos_token_ids(&self) -> Vec<u32> {
        let mut ids = self.file_eos_ids.clone();
        for &id in &self.extra_eos_ids {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    }

    pub fn set_extra_eos_token_ids(&mut self, ids: &[u32]) {
        self.extra_eos_ids = ids.to_vec();
    }

    /// Whether `encode(text, true)` starts with BOS / ends with EOS.
    pub fn add_bos_token(&self) -> bool {
        self.add_bos
    }

    pub fn add_eos_token(&self) -> bool {
        self.add_eos
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Whether `id` is a special token (skipped by `decode(…, true)`).
    pub fn is_special(&self, id: u32) -> bool {
        self.special_ids.contains(&id)
    }

    /// The raw bytes `id` stands for (empty for an unknown id): byte-level tokens mapped back
    /// through GPT-2's alphabet, SentencePiece `▁` as a space and `<0xXX>` as that byte. The
    /// leading space a SentencePiece decoder strips from the first token is not stripped here;
    /// see [`Self::decode_strips_leading_space`].
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        self.token_bytes_ref(id).to_vec()
    }

    pub fn token_bytes_ref(&self, id: u32) -> &[u8] {
        self.token_bytes.get(id as usize).map_or(&[], |b| b)
    }

    pub fn byte_encoding(&self) -> ByteEncoding {
        self.encoding
    }

    /// Whether `decode` drops one leading space of its output (SentencePiece with a space prefix).
    pub fn decode_strips_leading_space(&self) -> bool {
        self.strips_leading_space
    }

    /// The default chat template, if the files have one that compiles.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat_template.as_ref()
    }

    /// A named chat template (`tool_use`, …).
    pub fn named_chat_template(&self, name: &str) -> Option<&ChatTemplate> {
        self.named_chat_templates.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// Why the files' default chat template could not be compiled, if it could not.
    pub fn chat_template_error(&self) -> Option<&ChatTemplateError> {
        self.chat_template_error.as_ref()
    }

    /// The underlying `tokenizers` pipeline.
    pub fn backend(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

/// From the decoder of a `tokenizer.json`: how tokens spell bytes, and whether the first
/// token's leading space is dropped (`Strip` of a space, or `Metaspace` with a prepend scheme).
fn decoder_kind(inner: &tokenizers::Tokenizer) -> (ByteEncoding, bool) {
    let Some(json) = inner.get_decoder().and_then(|d| serde_json::to_value(d).ok()) else {
        return (ByteEncoding::Plain, false);
    };
    let mut parts = Vec::new();
    collect_decoders(&json, &mut parts);
    let ty = |p: &Json| p.get("type").and_then(Json::as_str).unwrap_or("").to_string();
    let encoding = if parts.iter().any(|p| ty(p) == "ByteLevel") {
        ByteEncoding::ByteLevel
    } else if parts.iter().any(|p| {
        matches!(ty(p).as_str(), "ByteFallback" | "Metaspace")
            || (ty(p) == "Replace" && p.to_string().contains(byte_map::SPM_SPACE))
    }) {
        ByteEncoding::SentencePiece
    } else {
        ByteEncoding::Plain
    };
    let strips = parts.iter().any(|p| match ty(p).as_str() {
        "Strip" => {
            p.get("content").and_then(Json::as_str) == Some(" ")
                && p.get("start").and_then(Json::as_u64) > Some(0)
        }
        "Metaspace" => matches!(p.get("prepend_scheme").and_then(Json::as_str), Some("always" | "first")),
        _ => false,
    });
    (encoding, strips)
}

fn collect_decoders(v: &Json, out: &mut Vec<Json>) {
    match v.get("decoders").and_then(Json::as_array) {
        Some(list) => list.iter().for_each(|d| collect_decoders(d, out)),
        None => out.push(v.clone()),
    }
}

/// transformers' `clean_up_tokenization`: drops the space before punctuation and contractions.
fn clean_up_tokenization(s: &str) -> String {
    s.replace(" .", ".")
        .replace(" ?", "?")
        .replace(" !", "!")
        .replace(" ,", ",")
        .replace(" ' ", "'")
        .replace(" n't", "n't")
        .replace(" 'm", "'m")
        .replace(" 's", "'s")
        .replace(" 've", "'ve")
        .replace(" 're", "'re")
}
