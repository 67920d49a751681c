//! Added tokens and the BOS/EOS post-processor, shared by the GGUF and Hugging Face loaders.

use serde_json::json;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::AddedToken;

use super::byte_map::is_byte_level_spelling;
use super::gguf_vocab::{GgufVocab, TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED};
use super::TokenizerError;

/// transformers' `TokenizersBackend.update_post_processor`: `[bos] $A [eos]` (and the pair form).
/// Built through serde so token text with spaces or colons stays one piece.
pub fn bos_eos_post_processor(
    bos: Option<(&str, u32)>,
    eos: Option<(&str, u32)>,
) -> Result<PostProcessorWrapper, TokenizerError> {
    let special = |t: &str, type_id: u32| json!({"SpecialToken": {"id": t, "type_id": type_id}});
    let seq = |id: &str, type_id: u32| json!({"Sequence": {"id": id, "type_id": type_id}});
    let mut single = Vec::new();
    let mut pair = Vec::new();
    for (part, type_id) in [("A", 0), ("B", 1)] {
        let target = if part == "A" { &mut single } else { &mut pair };
        if let Some((t, _)) = bos {
            target.push(special(t, type_id));
        }
        target.push(seq(part, type_id));
        if let Some((t, _)) = eos {
            target.push(special(t, type_id));
        }
    }
    let pair: Vec<_> = single.iter().cloned().chain(pair).collect();
    let mut tokens = serde_json::Map::new();
    for (t, id) in bos.into_iter().chain(eos) {
        tokens.insert(t.to_string(), json!({"id": t, "ids": [id], "tokens": [t]}));
    }
    let value =
        json!({"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": tokens});
    serde_json::from_value(value).map_err(|e| TokenizerError::backend("BOS/EOS post-processor", e))
}

/// A special (control) token: matched whole in raw text, skipped by `decode(…, true)`.
pub fn special(content: &str) -> AddedToken {
    AddedToken::from(content.to_string(), true).normalized(false)
}

/// A user-defined token: matched whole in raw text but kept by `decode(…, true)`.
pub fn user_defined(content: &str) -> AddedToken {
    AddedToken::from(content.to_string(), false).normalized(false)
}

/// The added tokens of a GGUF vocabulary, as transformers' `add_gguf_special_tokens` and
/// `TokenizersBackend` make them: control tokens and the named bos/eos/unk/pad tokens special,
/// user-defined tokens plain. `byte_level`: a control token outside GGUF's byte alphabet is
/// still added (transformers skips it, llama.cpp matches it; we follow llama.cpp and keep the
/// file's spelling for it in the vocabulary, see `gguf_bpe`).
pub fn gguf_added_tokens(vocab: &GgufVocab) -> (Vec<AddedToken>, Vec<AddedToken>) {
    let mut specials = Vec::new();
    let mut plain = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, tok) in vocab.tokens.iter().enumerate() {
        match vocab.token_type(i) {
            Some(TOKEN_TYPE_CONTROL) if seen.insert(tok.as_str()) => specials.push(special(tok)),
            Some(TOKEN_TYPE_USER_DEFINED) if seen.insert(tok.as_str()) => plain.push(user_defined(tok)),
            _ => {}
        }
    }
    let ids = vocab.ids;
    for id in [ids.bos, ids.eos, ids.unk, ids.pad] {
        if let Some(tok) = vocab.token(id) {
            if seen.insert(tok) {
                specials.push(special(tok));
            }
        }
    }
    (specials, plain)
}

/// Whether a byte-level vocabulary keeps `token` as the file spells it (instead of respelling
/// its UTF-8 in the byte alphabet): tokens already in the alphabet, and control/user-defined
/// tokens, which are matched as whole strings in the input.
pub fn keeps_spelling(token: &str, token_type: Option<i32>) -> bool {
    is_byte_level_spelling(token) || matches!(token_type, Some(TOKEN_TYPE_CONTROL | TOKEN_TYPE_USER_DEFINED))
}
