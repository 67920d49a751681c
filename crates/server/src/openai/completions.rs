//! `POST /v1/completions`: raw prompts (text, token ids, or a list of either).
//! Choice `i·n + j` is sample `j` of prompt `i`, as in OpenAI and vLLM.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use peregrine_engine::request::{Event, FinishReason, TokenLogprob, Usage};
use peregrine_model::tokenizer::Tokenizer;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{collect, response_id, start_all, stream_error, token_text, unix_now, usage_json, with_finish};
use super::{ChoiceOut, ChunkHeader, CommonFields};
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::sse;
use crate::state::AppState;
use crate::validate::{self, OPENAI_COMPLETION};

/// `prompt`: a text, a list of texts, token ids, or a list of token-id lists.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum PromptInput {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

#[derive(Deserialize, Debug)]
struct CompletionFields {
    prompt: PromptInput,
    /// OpenAI's default is 16.
    max_tokens: Option<usize>,
    /// Alternatives per token (0–20).
    logprobs: Option<usize>,
    echo: Option<bool>,
    suffix: Option<String>,
    prompt_logprobs: Option<usize>,
}

/// One prompt: its tokens, and its text for `echo`.
struct Prompt {
    ids: Vec<u32>,
    text: String,
}

fn prompts(input: PromptInput, tokenizer: &Tokenizer) -> ApiResult<Vec<Prompt>> {
    let encode = |text: String| -> ApiResult<Prompt> {
        let ids = tokenizer.encode(&text, true).map_err(|e| ApiError::invalid("prompt", e.to_string()))?;
        Ok(Prompt { ids, text })
    };
    let from_ids = |ids: Vec<u32>| Prompt { text: tokenizer.decode(&ids, false).unwrap_or_default(), ids };
    match input {
        PromptInput::Text(t) => Ok(vec![encode(t)?]),
        PromptInput::Texts(ts) => ts.into_iter().map(encode).collect(),
        PromptInput::Tokens(ids) => Ok(vec![from_ids(ids)]),
        PromptInput::TokenLists(lists) => Ok(lists.into_iter().map(from_ids).collect()),
    }
}

pub async fn completions(State(state): State<Arc<AppState>>, body: JsonBody) -> ApiResult<Response> {
    let backend = state.backend()?;
    let common: CommonFields = body.typed()?;
    let fields: CompletionFields = body.typed()?;
    let model = state.resolve_model(common.model.as_deref())?;
    if fields.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::not_supported("suffix", "suffix"));
    }
    let prompts = prompts(fields.prompt, &backend.tokenizer)?;
    let max_batch = state.config.limits.max_client_batch_size;
    if prompts.is_empty() || prompts.len() > max_batch {
        return Err(ApiError::invalid(
            "prompt",
            format!(
                "give between 1 and {max_batch} prompts (--max-client-batch-size); got {}",
                prompts.len()
            ),
        ));
    }
    let echo = fields.echo.unwrap_or(false);
    let mut requests = Vec::with_capacity(prompts.len());
    for p in &prompts {
        let mut r = common.request(
            &state,
            backend,
            OPENAI_COMPLETION,
            p.ids.clone(),
            Some(fields.max_tokens.unwrap_or(16)),
        )?;
        r.logprobs = fields.logprobs;
        // Echoed prompt tokens get their logprobs too.
        r.prompt_logprobs =
            if echo && fields.logprobs.is_some() { fields.logprobs } else { fields.prompt_logprobs };
        validate::check_request(&r)?;
        requests.push(r);
    }
    let n = common.n();
    let mut gens = start_all(&state, backend, requests, "/v1/completions")?;
    let (id, created) = (response_id("cmpl"), unix_now());
    let tokenizer = backend.tokenizer.clone();

    if !common.streaming() {
        let mut choices = Vec::new();
        let mut usage = Usage::default();
        for (i, (gen, prompt)) in gens.iter_mut().zip(&prompts).enumerate() {
            let c = collect(gen, n).await?;
            add_usage(&mut usage, &c.usage);
            for (j, choice) in c.choices.into_iter().enumerate() {
                let echoed = echo.then_some((prompt, c.prompt_logprobs.as_deref()));
                let mut v = choice_json(&tokenizer, i * n + j, choice, echoed, fields.logprobs.is_some());
                if let (Some(plp), Some(_)) = (&c.prompt_logprobs, fields.prompt_logprobs) {
                    v["prompt_logprobs"] = prompt_logprobs_json(&tokenizer, plp);
                }
                choices.push(v);
            }
        }
        let body = json!({
            "id": id, "object": "text_completion", "created": created, "model": model,
            "choices": choices, "usage": usage_json(&usage),
        });
        return Ok(Json(body).into_response());
    }

    let want_logprobs = fields.logprobs.is_some();
    let (include_usage, continuous) = (common.include_usage(), common.continuous_usage());
    let prompt_texts: Vec<String> = prompts.into_iter().map(|p| p.text).collect();
    let header = ChunkHeader { id, object: "text_completion", created, model };
    Ok(sse::response(true, move |sink| async move {
        let chunk = |index: usize, text: &str, logprobs: Value, finish: Option<&FinishReason>, usage| {
            header.chunk(json!({"index": index, "text": text, "logprobs": logprobs}), finish, usage)
        };
        // Per choice: characters emitted so far (logprobs' text_offset).
        let mut offsets = vec![0usize; gens.len() * n];
        if echo {
            for (i, text) in prompt_texts.iter().enumerate() {
                for j in 0..n {
                    offsets[i * n + j] = text.chars().count();
                    if !sink.json(&chunk(i * n + j, text, Value::Null, None, None)).await {
                        return;
                    }
                }
            }
        }
        let mut usage = Usage::default();
        let mut live = vec![Usage::default(); gens.len()];
        while let Some((g, event)) = sse::next_event(&mut gens, &sink).await {
            let sent = match event {
                Event::Token { index, token, text, logprob, .. } => {
                    let choice = g * n + index;
                    live[g].completion_tokens += 1;
                    live[g].prompt_tokens = gens[g].prompt_len();
                    if text.is_empty() && !want_logprobs {
                        continue;
                    }
                    let lp = match (&logprob, want_logprobs) {
                        (Some(lp), true) => logprobs_json(&tokenizer, &[(token, Some(lp))], offsets[choice]),
                        _ => Value::Null,
                    };
                    offsets[choice] += text.chars().count();
                    let u = continuous.then(|| usage_json(&live[g]));
                    sink.json(&chunk(choice, &text, lp, None, u)).await
                }
                Event::Finished { index, reason, text, .. } => {
                    let u = continuous.then(|| usage_json(&live[g]));
                    sink.json(&chunk(g * n + index, &text, Value::Null, Some(&reason), u)).await
                }
                Event::Done(u) => {
                    add_usage(&mut usage, &u);
                    true
                }
                Event::Error(m) => return stream_error(&sink, m).await,
                Event::Scheduled | Event::PromptLogprobs(_) => true,
            };
            if !sent {
                return;
            }
        }
        header.finish(&sink, include_usage.then_some(&usage)).await;
    }))
}

fn add_usage(total: &mut Usage, u: &Usage) {
    total.prompt_tokens += u.prompt_tokens;
    total.completion_tokens += u.completion_tokens;
    total.cached_prompt_tokens += u.cached_prompt_tokens;
}

fn choice_json(
    tokenizer: &Tokenizer,
    index: usize,
    choice: ChoiceOut,
    echoed: Option<(&Prompt, Option<&[Option<TokenLogprob>]>)>,
    want_logprobs: bool,
) -> Value {
    let mut text = String::new();
    let mut entries: Vec<(u32, Option<&TokenLogprob>)> = Vec::new();
    if let Some((prompt, plp)) = echoed {
        text.push_str(&prompt.text);
        if let Some(plp) = plp {
            entries.extend(prompt.ids.iter().zip(plp).map(|(&t, lp)| (t, lp.as_ref())));
        }
    }
    text.push_str(&choice.text);
    entries.extend(choice.tokens.iter().zip(&choice.logprobs).map(|(&t, lp)| (t, Some(lp))));
    let logprobs = if want_logprobs { logprobs_json(tokenizer, &entries, 0) } else { Value::Null };
    with_finish(json!({"index": index, "text": text, "logprobs": logprobs}), choice.finish.as_ref())
}

/// OpenAI's legacy logprobs object: parallel lists of tokens, their logprobs, the
/// alternatives (token text → logprob) and each token's character offset.
fn logprobs_json(
    tokenizer: &Tokenizer,
    entries: &[(u32, Option<&TokenLogprob>)],
    first_offset: usize,
) -> Value {
    let mut tokens = Vec::with_capacity(entries.len());
    let mut token_logprobs = Vec::with_capacity(entries.len());
    let mut top_logprobs = Vec::with_capacity(entries.len());
    let mut offsets = Vec::with_capacity(entries.len());
    let mut offset = first_offset;
    for &(token, lp) in entries {
        let text = token_text(tokenizer, token);
        offsets.push(offset);
        offset += text.chars().count();
        tokens.push(Value::from(text));
        match lp {
            Some(lp) => {
                token_logprobs.push(json!(lp.logprob));
                let mut top = serde_json::Map::new();
                for &(t, l) in &lp.top {
                    top.insert(token_text(tokenizer, t), json!(l));
                }
                top.insert(token_text(tokenizer, lp.token), json!(lp.logprob));
                top_logprobs.push(Value::Object(top));
            }
            // The first prompt token has no context, hence no logprob.
            None => {
                token_logprobs.push(Value::Null);
                top_logprobs.push(Value::Null);
            }
        }
    }
    json!({"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs, "text_offset": offsets})
}

/// vLLM's `prompt_logprobs`: per prompt token null (the first) or
/// {token id: {logprob, rank, decoded_token}} for the token and its alternatives.
fn prompt_logprobs_json(tokenizer: &Tokenizer, plp: &[Option<TokenLogprob>]) -> Value {
    let entry = |lp: &TokenLogprob| {
        let mut m = serde_json::Map::new();
        for (rank, &(t, l)) in lp.top.iter().enumerate() {
            m.insert(
                t.to_string(),
                json!({"logprob": l, "rank": rank + 1, "decoded_token": token_text(tokenizer, t)}),
            );
        }
        m.insert(
            lp.token.to_string(),
            json!({"logprob": lp.logprob, "rank": lp.rank, "decoded_token": token_text(tokenizer, lp.token)}),
        );
        Value::Object(m)
    };
    Value::Array(plp.iter().map(|lp| lp.as_ref().map_or(Value::Null, entry)).collect())
}
