//! `tokenizer.ggml.model = "llama"`: a SentencePiece BPE vocabulary with scores.
//!
//! Built the way transformers' `LlamaConverter` (legacy layout, that of Llama-2's and
//! Mistral-7B's `tokenizer.json`) builds it: normalizer `Prepend("▁")` (when
//! `add_space_prefix`, default on) + `Replace(" ", "▁")`, no pre-tokenizer, BPE with byte
//! fallback and fused unknowns, merges recovered from the scores, decoder
//! `Replace("▁", " ")` + `ByteFallback` + `Fuse` + `Strip(1 leading space)`, BOS added by default.
//!
//! SentencePiece's BPE repeatedly merges the adjacent pair whose concatenation is the
//! highest-scoring token; BPE with the merges `generate_merges` derives (each token's splits
//! into two vocabulary tokens, ranked by the token's score) does the same.

use std::collections::HashMap;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::{DecoderWrapper, NormalizerWrapper, Tokenizer as HfTokenizer};

use super::byte_map::SPM_SPACE;
use super::gguf_bpe::named;
use super::gguf_vocab::{GgufVocab, KEY_MERGES, KEY_SCORES, KEY_TOKENS};
use super::special_tokens::{bos_eos_post_processor, gguf_added_tokens};
use super::TokenizerError;

/// transformers' `generate_merges(vocab, vocab_scores)`, order included: for each token (in
/// first-appearance order) its splits into two vocabulary tokens, sorted by the ids of the
/// halves; then all of them sorted by (score, length of left, length of right), best first
/// when `scores` is given (ascending by id when not), ties kept in order. Lengths count
/// characters; a token appearing twice has its last id and last score.
pub fn generate_merges(tokens: &[String], scores: Option<&[f32]>) -> Vec<(String, String)> {
    let mut vocab: HashMap<&str, u32> = HashMap::with_capacity(tokens.len());
    let mut order: Vec<&str> = Vec::with_capacity(tokens.len());
    let mut score_of: HashMap<&str, f64> = HashMap::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        if vocab.insert(t.as_str(), i as u32).is_none() {
            order.push(t.as_str());
        }
        let s = scores.and_then(|s| s.get(i)).map_or(i as f64, |&s| s as f64);
        score_of.insert(t.as_str(), s);
    }
    struct Merge<'a> {
        left: &'a str,
        right: &'a str,
        score: f64,
        left_len: usize,
        right_len: usize,
    }
    let mut merges: Vec<Merge> = Vec::new();
    let mut local: Vec<Merge> = Vec::new();
    for &token in &order {
        let score = score_of[token];
        local.clear();
        let n_chars = token.chars().count();
        for (k, (at, _)) in token.char_indices().enumerate().skip(1) {
            let (left, right) = token.split_at(at);
            if vocab.contains_key(left) && vocab.contains_key(right) {
                local.push(Merge { left, right, score, left_len: k, right_len: n_chars - k });
            }
        }
        local.sort_by_key(|m| (vocab[m.left], vocab[m.right]));
        merges.append(&mut local);
    }
    let key_cmp = |a: &Merge, b: &Merge| {
        a.score
            .partial_cmp(&b.score)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.left_len.cmp(&b.left_len))
            .then(a.right_len.cmp(&b.right_len))
    };
    if scores.is_some() {
        merges.sort_by(|a, b| key_cmp(b, a));
    } else {
        merges.sort_by(key_cmp);
    }
    merges.into_iter().map(|m| (m.left.to_string(), m.right.to_string())).collect()
}

pub fn build(vocab: &GgufVocab) -> Result<HfTokenizer, TokenizerError> {
    let map: Vocab = vocab.tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
    let merges = match (&vocab.merges, &vocab.scores) {
        (Some(m), _) => m.clone(),
        (None, Some(scores)) => generate_merges(&vocab.tokens, Some(scores)),
        (None, None) => {
            return Err(TokenizerError::metadata(
                KEY_SCORES,
                format!("missing: a SentencePiece vocabulary needs {KEY_SCORES} or {KEY_MERGES}"),
            ))
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
    let mut builder = BPE::builder().vocab_and_merges(map, merges).fuse_unk(true).byte_fallback(true);
    if let Some(unk) = vocab.token(vocab.ids.unk) {
        builder = builder.unk_token(unk.to_string());
    }
    let bpe = builder
        .build()
        .map_err(|e| TokenizerError::metadata(KEY_TOKENS, format!("cannot build BPE: {e}")))?;
    let mut tok = HfTokenizer::new(bpe);

    let space = SPM_SPACE.to_string();
    let prefix = vocab.add_space_prefix.unwrap_or(true);
    let replace = Replace::new(" ", space.as_str()).map_err(|e| TokenizerError::backend("normalizer", e))?;
    let mut norm: Vec<NormalizerWrapper> = Vec::new();
    if prefix {
        norm.push(Prepend::new(space.clone()).into());
    }
    norm.push(replace.into());
    tok.with_normalizer(Some(NormalizerSequence::new(norm)))
        .map_err(|e| TokenizerError::backend("normalizer", e))?;

    let dec_replace = tokenizers::decoders::DecoderWrapper::Replace(
        Replace::new(space.as_str(), " ").map_err(|e| TokenizerError::backend("decoder", e))?,
    );
    let mut dec: Vec<DecoderWrapper> = vec![dec_replace, ByteFallback::new().into(), Fuse::new().into()];
    if prefix {
        dec.push(Strip::new(' ', 1, 0).into());
    }
    tok.with_decoder(Some(DecoderSequence::new(dec)));

    let (specials, plain) = gguf_added_tokens(vocab);
    tok.add_special_tokens(specials).map_err(|e| TokenizerError::backend("adding special tokens", e))?;
    tok.add_tokens(plain).map_err(|e| TokenizerError::backend("adding user-defined tokens", e))?;

    // transformers and llama.cpp both add BOS to a SentencePiece vocabulary that does not say otherwise.
    let bos = vocab.add_bos.unwrap_or(true).then(|| named(vocab, vocab.ids.bos)).flatten();
    let eos = vocab.add_eos.unwrap_or(false).then(|| named(vocab, vocab.ids.eos)).flatten();
    tok.with_post_processor(Some(bos_eos_post_processor(bos, eos)?));
    Ok(tok)
}
