//! `POST /tokenize` and `POST /detokenize`.
//!
//! `/tokenize` answers both dialects by the body's shape: TGI's `{"inputs": …}` gets
//! TGI's list of `{id, text, start, stop}` (character offsets); vLLM's
//! `{"prompt": …}` or `{"messages": …}` gets `{tokens, count, max_model_len}`.
//! `/detokenize` is vLLM's: `{"tokens": […]}` → `{"prompt": …}`.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::openai::chat::render_chat;
use crate::openai::token_text;
use crate::state::AppState;

#[derive(Deserialize)]
struct TgiTokenize {
    inputs: String,
}

#[derive(Deserialize)]
struct VllmTokenize {
    model: Option<String>,
    prompt: Option<String>,
    messages: Option<Vec<Value>>,
    /// Default: true for a prompt, false for messages (the template writes them).
    add_special_tokens: Option<bool>,
    add_generation_prompt: Option<bool>,
    chat_template_kwargs: Option<Map<String, Value>>,
    #[serde(default)]
    return_token_strs: bool,
}

pub async fn tokenize(State(state): State<Arc<AppState>>, body: JsonBody) -> ApiResult<Json<Value>> {
    let backend = state.backend()?;
    let tok = &backend.tokenizer;
    if body.value.get("inputs").is_some() {
        let r: TgiTokenize = body.typed()?;
        let spans = tok
            .encode_with_offsets(&r.inputs, true)
            .map_err(|e| ApiError::invalid("inputs", e.to_string()))?;
        let chars: Vec<char> = r.inputs.chars().collect();
        let list: Vec<Value> = spans
            .into_iter()
            .map(|(id, (start, stop))| {
                let text: String =
                    chars.get(start..stop.min(chars.len())).unwrap_or_default().iter().collect();
                json!({"id": id, "text": text, "start": start, "stop": stop})
            })
            .collect();
        return Ok(Json(Value::Array(list)));
    }
    let r: VllmTokenize = body.typed()?;
    state.resolve_model(r.model.as_deref())?;
    let tokens = match (&r.prompt, &r.messages) {
        (Some(p), None) => tok
            .encode(p, r.add_special_tokens.unwrap_or(true))
            .map_err(|e| ApiError::invalid("prompt", e.to_string()))?,
        (None, Some(m)) => {
            let add_gen = r.add_generation_prompt.unwrap_or(true);
            let (text, ids) = render_chat(backend, m, add_gen, r.chat_template_kwargs.as_ref())?;
            if r.add_special_tokens == Some(true) {
                tok.encode(&text, true).map_err(|e| ApiError::invalid("messages", e.to_string()))?
            } else {
                ids
            }
        }
        _ => {
            return Err(ApiError::invalid(
                "prompt",
                "give exactly one of `prompt`, `messages` (or TGI's `inputs`)",
            ))
        }
    };
    let mut out = json!({"count": tokens.len(), "max_model_len": backend.max_total_tokens, "tokens": tokens});
    if r.return_token_strs {
        out["token_strs"] = tokens.iter().map(|&t| Value::from(token_text(tok, t))).collect();
    }
    Ok(Json(out))
}

#[derive(Deserialize)]
struct Detokenize {
    model: Option<String>,
    tokens: Vec<u32>,
}

pub async fn detokenize(State(state): State<Arc<AppState>>, body: JsonBody) -> ApiResult<Json<Value>> {
    let backend = state.backend()?;
    let r: Detokenize = body.typed()?;
    state.resolve_model(r.model.as_deref())?;
    let vocab = backend.model.vocab_size;
    if let Some(t) = r.tokens.iter().find(|&&t| t as usize >= vocab) {
        return Err(ApiError::invalid("tokens", format!("token id {t} is outside the vocabulary ({vocab})")));
    }
    let prompt =
        backend.tokenizer.decode(&r.tokens, false).map_err(|e| ApiError::invalid("tokens", e.to_string()))?;
    Ok(Json(json!({"prompt": prompt})))
}
