//! `POST /v1/chat/completions`: messages through the model's chat template, then the
//! same engine request as a completion. Tools and structured output answer a clear
//! 400 ("not supported yet") rather than being silently ignored.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use peregrine_engine::request::{Event, FinishReason, TokenLogprob, Usage};
use peregrine_model::tokenizer::Tokenizer;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{collect, response_id, start_all, stream_error, unix_now, usage_json, with_finish};
use super::{ChunkHeader, CommonFields};
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::sse;
use crate::state::{AppState, Backend};
use crate::validate::{self, OPENAI_CHAT};

#[derive(Deserialize, Debug)]
struct ChatFields {
    messages: Vec<Value>,
    max_tokens: Option<usize>,
    /// OpenAI's newer name for max_tokens; wins when both are given.
    max_completion_tokens: Option<usize>,
    logprobs: Option<bool>,
    top_logprobs: Option<usize>,
    response_format: Option<Value>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    add_generation_prompt: Option<bool>,
    continue_final_message: Option<bool>,
    /// Extra template variables (`enable_thinking`, …).
    chat_template_kwargs: Option<Map<String, Value>>,
}

const ROLES: &[&str] = &["system", "developer", "user", "assistant", "tool"];

/// Checks the messages and flattens content parts (`[{"type": "text", "text": …}]`)
/// into strings, as vLLM does; other part types are not supported yet.
fn normalize_messages(messages: &[Value]) -> ApiResult<Vec<Value>> {
    if messages.is_empty() {
        return Err(ApiError::invalid("messages", "`messages` must contain at least one message"));
    }
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let Some(obj) = m.as_object() else {
            return Err(ApiError::invalid(format!("messages[{i}]"), "each message must be an object"));
        };
        match obj.get("role").and_then(Value::as_str) {
            Some(r) if ROLES.contains(&r) => {}
            Some(r) => {
                return Err(ApiError::invalid(
                    format!("messages[{i}].role"),
                    format!("unknown role {r:?} (expected one of {})", ROLES.join(", ")),
                ))
            }
            None => {
                return Err(ApiError::invalid(
                    format!("messages[{i}].role"),
                    "`role` is required and must be a string",
                ))
            }
        }
        let mut obj = obj.clone();
        match obj.get("content") {
            None | Some(Value::Null) | Some(Value::String(_)) => {}
            Some(Value::Array(parts)) => {
                let mut texts = Vec::with_capacity(parts.len());
                for (j, p) in parts.iter().enumerate() {
                    let field = format!("messages[{i}].content[{j}]");
                    match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                        (Some("text"), Some(t)) => texts.push(t.to_string()),
                        (Some("text"), None) => {
                            return Err(ApiError::invalid(field, "a text part needs `text`"))
                        }
                        (Some(other), _) => {
                            return Err(ApiError::not_supported(
                                &field,
                                &format!("content of type {other:?}"),
                            ))
                        }
                        (None, _) => {
                            return Err(ApiError::invalid(field, "each content part needs a `type`"))
                        }
                    }
                }
                obj.insert("content".into(), Value::from(texts.join("\n")));
            }
            Some(_) => {
                return Err(ApiError::invalid(
                    format!("messages[{i}].content"),
                    "`content` must be a string or a list of content parts",
                ))
            }
        }
        out.push(Value::Object(obj));
    }
    Ok(out)
}

/// The prompt text and tokens for `messages` under the model's chat template.
pub fn render_chat(
    backend: &Backend,
    messages: &[Value],
    add_generation_prompt: bool,
    kwargs: Option<&Map<String, Value>>,
) -> ApiResult<(String, Vec<u32>)> {
    let messages = normalize_messages(messages)?;
    let template = backend.tokenizer.chat_template().ok_or_else(|| {
        ApiError::invalid("messages", "this model has no chat template; use /v1/completions with a prompt")
    })?;
    let text = template
        .render(&Value::Array(messages), add_generation_prompt, kwargs)
        .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    // The template writes any BOS it wants itself.
    let ids =
        backend.tokenizer.encode(&text, false).map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    Ok((text, ids))
}

fn check_unsupported(fields: &ChatFields) -> ApiResult<()> {
    if let Some(rf) = &fields.response_format {
        match rf.get("type").and_then(Value::as_str) {
            Some("text") => {}
            other => {
                return Err(ApiError::not_supported(
                    "response_format",
                    &format!("response_format of type {}", other.unwrap_or("?")),
                ))
            }
        }
    }
    if fields.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(ApiError::not_supported("tools", "tool calling"));
    }
    match &fields.tool_choice {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "none" || s == "auto" => {}
        Some(_) => return Err(ApiError::not_supported("tool_choice", "tool calling")),
    }
    if fields.continue_final_message == Some(true) {
        return Err(ApiError::not_supported("continue_final_message", "continue_final_message"));
    }
    if fields.top_logprobs.is_some() && fields.logprobs != Some(true) {
        return Err(ApiError::invalid("top_logprobs", "`top_logprobs` needs `logprobs: true`"));
    }
    Ok(())
}

pub async fn chat_completions(State(state): State<Arc<AppState>>, body: JsonBody) -> ApiResult<Response> {
    let backend = state.backend()?;
    let common: CommonFields = body.typed()?;
    let fields: ChatFields = body.typed()?;
    let model = state.resolve_model(common.model.as_deref())?;
    check_unsupported(&fields)?;
    let add_generation_prompt = fields.add_generation_prompt.unwrap_or(true);
    let (_, prompt) =
        render_chat(backend, &fields.messages, add_generation_prompt, fields.chat_template_kwargs.as_ref())?;
    let max_tokens = fields.max_completion_tokens.or(fields.max_tokens);
    let mut req = common.request(&state, backend, OPENAI_CHAT, prompt, max_tokens)?;
    if fields.logprobs == Some(true) {
        req.logprobs = Some(fields.top_logprobs.unwrap_or(0));
    }
    validate::check_request(&req)?;
    let n = req.n;
    let mut gens = start_all(&state, backend, vec![req], "/v1/chat/completions")?;
    let (id, created) = (response_id("chatcmpl"), unix_now());
    let tokenizer = backend.tokenizer.clone();
    let want_logprobs = fields.logprobs == Some(true);

    if !common.streaming() {
        let c = collect(&mut gens[0], n).await?;
        let choices: Vec<Value> = c
            .choices
            .into_iter()
            .enumerate()
            .map(|(i, ch)| {
                let logprobs = want_logprobs.then(|| {
                    let content: Vec<Value> =
                        ch.logprobs.iter().map(|lp| logprob_entry(&tokenizer, lp)).collect();
                    json!({"content": content})
                });
                let message = json!({"role": "assistant", "content": ch.text});
                with_finish(json!({"index": i, "message": message, "logprobs": logprobs}), ch.finish.as_ref())
            })
            .collect();
        let body = json!({
            "id": id, "object": "chat.completion", "created": created, "model": model,
            "choices": choices, "usage": usage_json(&c.usage),
        });
        return Ok(Json(body).into_response());
    }

    let (include_usage, continuous) = (common.include_usage(), common.continuous_usage());
    let header = ChunkHeader { id, object: "chat.completion.chunk", created, model };
    Ok(sse::response(true, move |sink| async move {
        let chunk = |index: usize, delta: Value, logprobs: Value, finish: Option<&FinishReason>, usage| {
            header.chunk(json!({"index": index, "delta": delta, "logprobs": logprobs}), finish, usage)
        };
        for i in 0..n {
            if !sink
                .json(&chunk(i, json!({"role": "assistant", "content": ""}), Value::Null, None, None))
                .await
            {
                return;
            }
        }
        let mut live = Usage { prompt_tokens: gens[0].prompt_len(), ..Usage::default() };
        let mut usage = None;
        while let Some((_, event)) = sse::next_event(&mut gens, &sink).await {
            let sent = match event {
                Event::Token { index, text, logprob, .. } => {
                    live.completion_tokens += 1;
                    if text.is_empty() && !want_logprobs {
                        continue;
                    }
                    let lp = match (&logprob, want_logprobs) {
                        (Some(lp), true) => json!({"content": [logprob_entry(&tokenizer, lp)]}),
                        _ => Value::Null,
                    };
                    let u = continuous.then(|| usage_json(&live));
                    sink.json(&chunk(index, json!({"content": text}), lp, None, u)).await
                }
                Event::Finished { index, reason, text, .. } => {
                    let delta = if text.is_empty() { json!({}) } else { json!({"content": text}) };
                    let u = continuous.then(|| usage_json(&live));
                    sink.json(&chunk(index, delta, Value::Null, Some(&reason), u)).await
                }
                Event::Done(u) => {
                    usage = Some(u);
                    true
                }
                Event::Error(m) => return stream_error(&sink, m).await,
                Event::Scheduled | Event::PromptLogprobs(_) => true,
            };
            if !sent {
                return;
            }
        }
        header.finish(&sink, usage.as_ref().filter(|_| include_usage)).await;
    }))
}

/// One token of chat logprobs: its text, logprob, UTF-8 bytes and the alternatives.
fn logprob_entry(tokenizer: &Tokenizer, lp: &TokenLogprob) -> Value {
    let entry = |t: u32, l: f32| {
        let bytes = tokenizer.token_bytes(t);
        json!({"token": String::from_utf8_lossy(&bytes), "logprob": l, "bytes": bytes})
    };
    let mut e = entry(lp.token, lp.logprob);
    e["top_logprobs"] = Value::Array(lp.top.iter().map(|&(t, l)| entry(t, l)).collect());
    e
}
