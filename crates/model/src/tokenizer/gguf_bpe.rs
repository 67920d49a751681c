//! `tokenizer.ggml.model = "gpt2"`: byte-level BPE from the vocabulary and merges.
//!
//! What transformers' `byte_level_tokenizer` + `add_gguf_special_tokens` + `set_split_regex`
//! build (`integrations/gguf/gguf_tokenizer_mapping.py`), with the word splitting of llama.cpp's
//! `tokenizer.ggml.pre` table (see `pretokenize`): BPE without unknown token or byte fallback
//! (every byte is a token), the ByteLevel decoder, BOS/EOS per `add_bos_token`/`add_eos_token`
//! (default off for this model type).

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::Tokenizer as HfTokenizer;

use super::byte_map::bytes_to_byte_level;
use super::gguf_spm::generate_merges;
use super::gguf_vocab::{GgufVocab, KEY_MERGES, KEY_TOKENS};
use super::pretokenize::{byte_level_pre_tokenizer, for_gguf_pre};
use super::special_tokens::{bos_eos_post_processor, gguf_added_tokens, keeps_spelling};
use super::TokenizerError;

/// The vocabulary as `tokenizers` sees it: tokens outside the byte alphabet respelled (as
/// transformers does), except control/user-defined ones, which are matched as text.
/// Returns the token → id map (a later duplicate wins, as in a Python dict).
fn byte_level_vocab(vocab: &GgufVocab) -> (Vocab, Vec<String>) {
    let spelled: Vec<String> = vocab
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if keeps_spelling(t, vocab.token_type(i)) {
                t.clone()
            } else {
                bytes_to_byte_level(t.as_bytes())
            }
        })
        .collect();
    let map = spelled.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
    (map, spelled)
}

pub fn build(vocab: &GgufVocab) -> Result<HfTokenizer, TokenizerError> {
    let (map, spelled) = byte_level_vocab(vocab);
    let merges = match &vocab.merges {
        Some(m) => m.clone(),
        None => {
            log::info!(
                "GGUF byte-level vocabulary without {KEY_MERGES}: deriving merges from the token order"
            );
            generate_merges(&spelled, None)
        }
    };
    if let Some((i, (a, b))) =
        merges.iter().enumerate().find(|(_, (a, b))| !map.contains_key(a) || !map.contains_key(b))
    {
        return Err(TokenizerError::metadata(
            KEY_MERGES,
            format!("merge #{i} \"{a} {b}\" uses a token that is not in {KEY_TOKENS}"),
        ));
    }
    let bpe = BPE::builder()
        .vocab_and_merges(map, merges)
        .build()
        .map_err(|e| TokenizerError::metadata(KEY_MERGES, format!("cannot build BPE: {e}")))?;
    let mut tok = HfTokenizer::new(bpe);
    tok.with_pre_tokenizer(Some(byte_level_pre_tokenizer(for_gguf_pre(vocab.pre.as_deref()))?));
    tok.with_decoder(Some(ByteLevelDecoder::default()));

    let (specials, plain) = gguf_added_tokens(vocab);
    tok.add_special_tokens(specials).map_err(|e| TokenizerError::backend("adding special tokens", e))?;
    tok.add_tokens(plain).map_err(|e| TokenizerError::backend("adding user-defined tokens", e))?;

    let bos = vocab.add_bos.unwrap_or(false).then(|| named(vocab, vocab.ids.bos)).flatten();
    let eos = vocab.add_eos.unwrap_or(false).then(|| named(vocab, vocab.ids.eos)).flatten();
    tok.with_post_processor(Some(bos_eos_post_processor(bos, eos)?));
    Ok(tok)
}

pub(crate) fn named(vocab: &GgufVocab, id: Option<u32>) -> Option<(&str, u32)> {
    Some((vocab.token(id)?, id?))
}
