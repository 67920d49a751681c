//! happy_vllm's extra routes, which its benchmark (the model-card report) reads:
//! `/v1/info`, `/v1/launch_arguments`, `/v1/metadata_text`, `/v1/split_text`,
//! `/liveness`, `/readiness`.
//!
//! One deliberate difference: `/readiness` answers 503 (not 200) with `{"ready": "ko"}`
//! while the model loads, so that a Kubernetes readiness probe, which reads only the
//! status, works.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use peregrine_model::tokenizer::Tokenizer;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// Our truncation (TGI's `truncate`, vLLM's `truncate_prompt_tokens`) keeps the last
/// tokens: it cuts on the left.
const TRUNCATION_SIDE: &str = "left";

pub async fn liveness() -> Json<Value> {
    Json(json!({"alive": "ok"}))
}

pub async fn readiness(State(state): State<Arc<AppState>>) -> Response {
    if state.is_ready() {
        Json(json!({"ready": "ok"})).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"ready": "ko"}))).into_response()
    }
}

pub async fn info(State(state): State<Arc<AppState>>) -> Json<Value> {
    let backend = state.loaded();
    Json(json!({
        "application": "peregrine",
        "version": env!("CARGO_PKG_VERSION"),
        "vllm_version": null,
        "model_name": state.model_name(),
        "truncation_side": TRUNCATION_SIDE,
        "max_length": backend.map(|b| b.max_total_tokens),
        "model": backend.map(|b| json!({
            "source": b.model.source,
            "architecture": b.model.architecture,
            "dtype": b.model.dtype,
            "device": b.model.device,
            "context_length": b.model.context_length,
            "num_layers": b.model.num_layers,
            "vocab_size": b.model.vocab_size,
        })),
        "engine": backend.map(|b| json!({
            "max_model_len": b.engine.info.max_model_len,
            "kv_cache_blocks": b.engine.info.num_blocks,
            "block_size": b.engine.info.block_size,
            "kv_cache_tokens": b.engine.info.num_blocks * b.engine.info.block_size,
            "max_num_seqs": b.engine.info.max_num_seqs,
            "max_num_batched_tokens": b.engine.info.max_num_batched_tokens,
        })),
    }))
}

pub async fn launch_arguments(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(Value::Object(state.config.launch_arguments.clone()))
}

#[derive(Deserialize)]
struct MetadataText {
    text: String,
    truncation_side: Option<String>,
    max_length: Option<usize>,
}

/// `{text, truncation_side?, max_length?}` → `{tokens_nb, truncated_text}`: how many
/// tokens the text has, and the part truncation to `max_length` would cut off.
pub async fn metadata_text(State(state): State<Arc<AppState>>, body: JsonBody) -> ApiResult<Json<Value>> {
    let backend = state.backend()?;
    let r: MetadataText = body.typed()?;
    let side = r.truncation_side.as_deref().unwrap_or(TRUNCATION_SIDE);
    if side != "left" && side != "right" {
        return Err(ApiError::invalid(
            "truncation_side",
            format!("must be \"left\" or \"right\", got {side:?}"),
        ));
    }
    let max_length = r.max_length.unwrap_or(backend.max_total_tokens);
    let ids = plain_tokens(&backend.tokenizer, &r.text)?;
    let cut: &[u32] = if ids.len() <= max_length {
        &[]
    } else if side == "right" {
        &ids[max_length..]
    } else {
        &ids[..ids.len() - max_length]
    };
    Ok(Json(json!({"tokens_nb": ids.len(), "truncated_text": plain_text(&backend.tokenizer, cut)})))
}

#[derive(Deserialize)]
struct SplitText {
    text: String,
    num_tokens_in_chunk: Option<usize>,
    separators: Option<Vec<String>>,
}

/// Splits a text into chunks of at least `num_tokens_in_chunk` tokens, each ending
/// at a separator (matched on tokens), as happy_vllm does.
pub async fn split_text(State(state): State<Arc<AppState>>, body: JsonBody) -> ApiResult<Json<Value>> {
    let backend = state.backend()?;
    let r: SplitText = body.typed()?;
    let n = r.num_tokens_in_chunk.unwrap_or(200);
    if n == 0 {
        return Err(ApiError::invalid("num_tokens_in_chunk", "`num_tokens_in_chunk` must be >= 1"));
    }
    let separators = r
        .separators
        .unwrap_or_else(|| [".", "!", "?", "|", " .", " !", " ?", " |"].map(String::from).to_vec());
    let tok = &backend.tokenizer;
    let mut seps: Vec<Vec<u32>> = Vec::new();
    for s in &separators {
        let ids = plain_tokens(tok, s)?;
        if !ids.is_empty() && !seps.contains(&ids) {
            seps.push(ids);
        }
    }
    let ids = plain_tokens(tok, &r.text)?;
    Ok(Json(
        json!({"split_text": split_at_separators(&ids, &seps, n).iter().map(|c| plain_text(tok, c)).filter(|s| !s.is_empty()).collect::<Vec<_>>()}),
    ))
}

/// Chunks of `ids`: a chunk ends after the first separator at which it has ≥ `n` tokens.
pub fn split_at_separators<'a>(ids: &'a [u32], seps: &[Vec<u32>], n: usize) -> Vec<&'a [u32]> {
    let mut ends: Vec<usize> = (0..ids.len())
        .filter(|&i| seps.iter().any(|s| i + 1 >= s.len() && ids[i + 1 - s.len()..=i] == s[..]))
        .collect();
    ends.dedup();
    let (mut chunks, mut start) = (Vec::new(), 0);
    for i in ends {
        if i + 1 - start >= n {
            chunks.push(&ids[start..=i]);
            start = i + 1;
        }
    }
    chunks.push(&ids[start..]);
    chunks
}

/// Tokens of a piece of text as it appears inside a longer one: no special tokens and
/// no SentencePiece space prefix (encoded after a long word, which is then dropped).
fn plain_tokens(tok: &Tokenizer, text: &str) -> ApiResult<Vec<u32>> {
    const PREFIX: &str = "thisisareallybigwordisntit";
    let err = |e: peregrine_model::tokenizer::TokenizerError| ApiError::invalid("text", e.to_string());
    let prefix = tok.encode(PREFIX, false).map_err(err)?;
    let full = tok.encode(&format!("{PREFIX}{text}"), false).map_err(err)?;
    if full.starts_with(&prefix) {
        Ok(full[prefix.len()..].to_vec())
    } else {
        tok.encode(text, false).map_err(err)
    }
}

/// The exact text of tokens (their bytes, without any decoder's space stripping).
fn plain_text(tok: &Tokenizer, ids: &[u32]) -> String {
    let bytes: Vec<u8> = ids.iter().flat_map(|&t| tok.token_bytes_ref(t).iter().copied()).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::split_at_separators;

    #[test]
    fn chunks_end_at_the_first_separator_past_the_minimum() {
        // Separator token 9; chunks of at least 3 tokens.
        let ids = [1, 2, 9, 3, 9, 4, 5, 6, 9, 7];
        let chunks = split_at_separators(&ids, &[vec![9]], 3);
        assert_eq!(chunks, vec![&[1, 2, 9][..], &[3, 9, 4, 5, 6, 9][..], &[7][..]]);
        // A two-token separator matches only as a whole.
        let chunks = split_at_separators(&ids, &[vec![6, 9]], 1);
        assert_eq!(chunks, vec![&[1, 2, 9, 3, 9, 4, 5, 6, 9][..], &[7][..]]);
    }
}
