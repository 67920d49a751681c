//! TGI's API: `POST /generate`, `POST /generate_stream`, `POST /` (either, by its
//! `stream` field; what huggingface_hub's InferenceClient calls) and `GET /info`.
//!
//! TGI's rules apply: sampling happens when `do_sample` is set or any warper is
//! (temperature ≠ 1, top_k, top_p, typical_p); temperature must be > 0, top_p and
//! typical_p in (0, 1); validation errors are 422 `{"error", "error_type"}`. Every
//! token carries its logprob, and the token that ended generation (eos) is the last
//! of `details.tokens` / of the stream, marked `special`, as in TGI.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use peregrine_engine::request::{Event, FinishReason, GenerateRequest, StopMatch, TokenLogprob};
use peregrine_engine::sampler::SamplingParams;
use peregrine_model::tokenizer::Tokenizer;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult, Flavor};
use crate::generation::Generation;
use crate::openai::{engine_error, start_all, token_text};
use crate::sse;
use crate::state::{AppState, Backend};
use crate::validate::{self, TGI};

#[derive(Deserialize, Debug)]
struct TgiRequest {
    inputs: String,
    #[serde(default)]
    parameters: Parameters,
    #[serde(default)]
    stream: bool,
}

#[derive(Deserialize, Debug, Default)]
struct Parameters {
    best_of: Option<usize>,
    temperature: Option<f32>,
    repetition_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    top_k: Option<i64>,
    top_p: Option<f32>,
    typical_p: Option<f32>,
    #[serde(default)]
    do_sample: bool,
    max_new_tokens: Option<usize>,
    return_full_text: Option<bool>,
    #[serde(default)]
    stop: Vec<String>,
    truncate: Option<usize>,
    #[serde(default)]
    watermark: bool,
    #[serde(default)]
    details: bool,
    #[serde(default)]
    decoder_input_details: bool,
    seed: Option<u64>,
    top_n_tokens: Option<usize>,
    grammar: Option<Value>,
    adapter_id: Option<String>,
}

/// TGI's default when `max_new_tokens` is absent (capped by what the context leaves).
const DEFAULT_MAX_NEW_TOKENS: usize = 100;

/// A validated TGI request.
struct Prepared {
    req: GenerateRequest,
    /// The seed reported in `details` (sampling only).
    seed: Option<u64>,
    details: bool,
    decoder_input_details: bool,
    top_n: usize,
    full_text_prefix: Option<String>,
}

fn invalid(field: &str, message: String) -> ApiError {
    ApiError::invalid(format!("parameters.{field}"), format!("Input validation error: {message}"))
}

fn prepare(state: &AppState, backend: &Backend, r: TgiRequest) -> ApiResult<Prepared> {
    let p = r.parameters;
    let limits = &state.config.limits;
    if r.inputs.is_empty() {
        return Err(ApiError::invalid("inputs", "Input validation error: `inputs` cannot be empty"));
    }
    if let Some(t) = p.temperature.filter(|&t| t.is_nan() || t <= 0.0) {
        return Err(invalid("temperature", format!("`temperature` must be strictly positive. Given: {t}")));
    }
    for (name, v) in [("top_p", p.top_p), ("typical_p", p.typical_p)] {
        if let Some(v) = v.filter(|&v| !(v > 0.0 && v < 1.0)) {
            return Err(invalid(name, format!("`{name}` must be > 0.0 and < 1.0. Given: {v}")));
        }
    }
    if let Some(k) = p.top_k.filter(|&k| k <= 0) {
        return Err(invalid("top_k", format!("`top_k` must be strictly positive. Given: {k}")));
    }
    if let Some(r) = p.repetition_penalty.filter(|&r| r.is_nan() || r <= 0.0) {
        return Err(invalid(
            "repetition_penalty",
            format!("`repetition_penalty` must be strictly positive. Given: {r}"),
        ));
    }
    if let Some(f) = p.frequency_penalty.filter(|f| !(-2.0..=2.0).contains(f)) {
        return Err(invalid(
            "frequency_penalty",
            format!("`frequency_penalty` must be >= -2.0 and <= 2.0. Given: {f}"),
        ));
    }
    if p.grammar.is_some() {
        return Err(ApiError::not_supported("parameters.grammar", "grammar-constrained generation"));
    }
    if p.adapter_id.as_deref().is_some_and(|a| !a.is_empty()) {
        return Err(ApiError::not_supported("parameters.adapter_id", "LoRA adapters"));
    }
    let top_n = p.top_n_tokens.unwrap_or(0);
    if top_n > limits.max_top_n_tokens {
        return Err(invalid(
            "top_n_tokens",
            format!("`top_n_tokens` must be >= 0 and <= {}. Given: {top_n}", limits.max_top_n_tokens),
        ));
    }
    let best_of = p.best_of.unwrap_or(1);
    if best_of == 0 || best_of > limits.max_best_of {
        return Err(invalid(
            "best_of",
            format!("`best_of` must be > 0 and <= {}. Given: {best_of}", limits.max_best_of),
        ));
    }
    let sampling = p.do_sample
        || p.temperature.is_some_and(|t| t != 1.0)
        || p.top_k.is_some()
        || p.top_p.is_some()
        || p.typical_p.is_some();
    if best_of > 1 && !sampling {
        return Err(invalid("best_of", "you must use sampling when `best_of` is > 1".into()));
    }
    if r.stream && best_of > 1 {
        return Err(invalid("best_of", "`best_of` != 1 is not supported when streaming tokens".into()));
    }
    if r.stream && p.decoder_input_details {
        return Err(invalid(
            "decoder_input_details",
            "`decoder_input_details` == true is not supported when streaming tokens".into(),
        ));
    }
    validate::check_stops(limits, &p.stop, "parameters.stop")?;

    let mut prompt =
        backend.tokenizer.encode(&r.inputs, true).map_err(|e| ApiError::invalid("inputs", e.to_string()))?;
    if let Some(t) = p.truncate {
        if t == 0 || t > backend.max_input_tokens {
            return Err(invalid(
                "truncate",
                format!(
                    "`truncate` must be strictly positive and less than {}. Given: {t}",
                    backend.max_input_tokens
                ),
            ));
        }
        prompt.drain(..prompt.len().saturating_sub(t));
    }
    let max_new = match p.max_new_tokens {
        Some(m) => Some(m),
        None => {
            Some(DEFAULT_MAX_NEW_TOKENS.min(backend.max_total_tokens.saturating_sub(prompt.len()).max(1)))
        }
    };
    let max_new = validate::check_lengths(backend, TGI, &prompt, max_new)?;
    let seed = sampling.then(|| p.seed.unwrap_or_else(rand::random));
    let params = SamplingParams {
        temperature: if sampling { p.temperature.unwrap_or(1.0) } else { 0.0 },
        top_k: p.top_k.unwrap_or(0) as usize,
        top_p: p.top_p.unwrap_or(1.0),
        typical_p: p.typical_p.unwrap_or(1.0),
        repetition_penalty: p.repetition_penalty.unwrap_or(1.0),
        frequency_penalty: p.frequency_penalty.unwrap_or(0.0),
        seed,
        ..SamplingParams::default()
    };
    validate::check_sampling(&params)?;
    let mut req = GenerateRequest::new(prompt, params);
    req.max_tokens = Some(max_new);
    req.stop = p.stop;
    req.watermark = p.watermark;
    // TGI reports every token's logprob; best_of ranks all samples, so all come back.
    req.logprobs = Some(top_n);
    req.n = best_of;
    req.best_of = best_of;
    if p.decoder_input_details {
        req.prompt_logprobs = Some(0);
    }
    validate::check_request(&req)?;
    Ok(Prepared {
        req,
        seed,
        details: p.details,
        decoder_input_details: p.decoder_input_details,
        top_n,
        full_text_prefix: p.return_full_text.unwrap_or(false).then_some(r.inputs),
    })
}

/// One TGI token object. `text`: what the token adds to the output, decoded
/// incrementally ("" while a character is incomplete), so that the texts add up to
/// `generated_text`, as TGI's do; `None` for a token outside the text (eos).
fn token_json(tokenizer: &Tokenizer, id: u32, text: Option<&str>, logprob: Option<f32>) -> Value {
    let text = text.map_or_else(|| token_text(tokenizer, id), str::to_string);
    json!({"id": id, "text": text, "logprob": logprob, "special": tokenizer.is_special(id)})
}

fn top_tokens_json(tokenizer: &Tokenizer, lp: Option<&TokenLogprob>) -> Value {
    let top = lp.map(|lp| lp.top.as_slice()).unwrap_or_default();
    Value::Array(top.iter().map(|&(t, l)| token_json(tokenizer, t, None, Some(l))).collect())
}

/// The token that ended a sample outside the text (eos or a stop token), if any.
fn ending_token(reason: &FinishReason) -> Option<u32> {
    match reason {
        FinishReason::Eos(t) | FinishReason::Stop(StopMatch::Token(t)) => Some(*t),
        _ => None,
    }
}

/// One sample gathered for a non-streamed answer.
#[derive(Default)]
struct Sequence {
    text: String,
    tokens: Vec<Value>,
    top_tokens: Vec<Value>,
    finish: Option<FinishReason>,
    cumulative: f64,
}

pub async fn generate(State(state): State<Arc<AppState>>, body: JsonBody) -> Response {
    run(state, body, Some(false)).await.unwrap_or_else(|e| e.flavor(Flavor::Tgi).into_response())
}

pub async fn generate_stream(State(state): State<Arc<AppState>>, body: JsonBody) -> Response {
    run(state, body, Some(true)).await.unwrap_or_else(|e| e.flavor(Flavor::Tgi).into_response())
}

/// `POST /`: TGI's compatibility route, streaming or not by the body's `stream`; the
/// non-streamed answer is a one-element list.
pub async fn compat(State(state): State<Arc<AppState>>, body: JsonBody) -> Response {
    run(state, body, None).await.unwrap_or_else(|e| e.flavor(Flavor::Tgi).into_response())
}

async fn run(state: Arc<AppState>, body: JsonBody, stream: Option<bool>) -> ApiResult<Response> {
    let backend = state.backend()?;
    let mut r: TgiRequest = body.typed()?;
    let compat = stream.is_none();
    r.stream = stream.unwrap_or(r.stream);
    let streaming = r.stream;
    let prepared = prepare(&state, backend, r)?;
    let route = if streaming { "/generate_stream" } else { "/generate" };
    let mut gens = start_all(&state, backend, vec![prepared.req.clone()], route)?;
    let gen = gens.pop().expect("one generation");
    let tokenizer = backend.tokenizer.clone();
    if streaming {
        return Ok(stream_response(gen, prepared, tokenizer));
    }
    let answer = collect(gen, &prepared, &tokenizer).await?;
    Ok(if compat { Json(json!([answer])) } else { Json(answer) }.into_response())
}

async fn collect(mut gen: Generation, p: &Prepared, tokenizer: &Tokenizer) -> ApiResult<Value> {
    let mut seqs: Vec<Sequence> = (0..p.req.n).map(|_| Sequence::default()).collect();
    let mut prefill = Vec::new();
    while let Some(e) = gen.next().await {
        match e {
            Event::Token { index, token, text, logprob, .. } => {
                let s = &mut seqs[index];
                s.text.push_str(&text);
                s.tokens.push(token_json(tokenizer, token, Some(&text), logprob.as_ref().map(|l| l.logprob)));
                s.top_tokens.push(top_tokens_json(tokenizer, logprob.as_ref()));
            }
            Event::Finished { index, reason, text, cumulative_logprob, logprob } => {
                let s = &mut seqs[index];
                s.text.push_str(&text);
                // Text held back until the end (a possible stop string) belongs to the last token.
                if let Some(last) = s.tokens.last_mut().filter(|_| !text.is_empty()) {
                    let t = format!("{}{text}", last["text"].as_str().unwrap_or(""));
                    last["text"] = Value::from(t);
                }
                if let Some(t) = ending_token(&reason) {
                    s.tokens.push(token_json(tokenizer, t, None, logprob.as_ref().map(|l| l.logprob)));
                    s.top_tokens.push(top_tokens_json(tokenizer, logprob.as_ref()));
                }
                s.cumulative = cumulative_logprob.unwrap_or(0.0);
                s.finish = Some(reason);
            }
            Event::PromptLogprobs(lps) => {
                prefill = gen_prefill(tokenizer, &p.req.prompt, &lps);
            }
            Event::Error(m) => return Err(engine_error(m)),
            Event::Done(_) | Event::Scheduled => {}
        }
    }
    // best_of: the most likely sample answers; the others are listed in details.
    seqs.sort_by(|a, b| b.cumulative.total_cmp(&a.cumulative));
    let prefix = p.full_text_prefix.as_deref().unwrap_or("");
    let details_of = |s: &Sequence, with_prefill: bool| {
        let mut d = json!({
            "finish_reason": s.finish.as_ref().map(FinishReason::tgi),
            "generated_tokens": s.tokens.len(),
            "seed": p.seed,
            "prefill": if with_prefill { Value::Array(prefill.clone()) } else { json!([]) },
            "tokens": s.tokens,
        });
        if p.top_n > 0 {
            d["top_tokens"] = Value::Array(s.top_tokens.clone());
        }
        d
    };
    let best = &seqs[0];
    let mut answer = json!({"generated_text": format!("{prefix}{}", best.text)});
    if p.details || p.decoder_input_details {
        let mut details = details_of(best, p.decoder_input_details);
        if seqs.len() > 1 {
            let others: Vec<Value> = seqs[1..]
                .iter()
                .map(|s| {
                    let mut d = details_of(s, p.decoder_input_details);
                    d["generated_text"] = Value::from(format!("{prefix}{}", s.text));
                    d
                })
                .collect();
            details["best_of_sequences"] = Value::Array(others);
        }
        answer["details"] = details;
    }
    Ok(answer)
}

fn gen_prefill(tokenizer: &Tokenizer, prompt: &[u32], lps: &[Option<TokenLogprob>]) -> Vec<Value> {
    prompt
        .iter()
        .zip(lps)
        .map(|(&id, lp)| json!({"id": id, "text": token_text(tokenizer, id), "logprob": lp.as_ref().map(|l| l.logprob)}))
        .collect()
}

fn stream_response(mut gen: Generation, p: Prepared, tokenizer: Arc<Tokenizer>) -> Response {
    sse::response(false, move |sink| async move {
        let mut text = p.full_text_prefix.clone().unwrap_or_default();
        let mut index = 0usize;
        // (token, its text, logprob) of a `last` token, waiting for its `Finished`.
        let mut last: Option<(u32, String, Option<TokenLogprob>)> = None;
        loop {
            let event = tokio::select! {
                e = gen.next() => e,
                _ = sink.closed() => return,
            };
            let Some(event) = event else { return };
            let (token, token_text, logprob, end) = match event {
                Event::Token { token, text: t, logprob, last: is_last, .. } => {
                    text.push_str(&t);
                    if is_last {
                        last = Some((token, t, logprob));
                        continue;
                    }
                    (token, Some(t), logprob, None)
                }
                Event::Finished { reason, text: t, logprob, .. } => {
                    text.push_str(&t);
                    let (token, token_text, logprob) = match (ending_token(&reason), last.take()) {
                        // eos: its own text; any held-back text was sent with the tokens before.
                        (Some(id), _) => (id, None, logprob),
                        (None, Some((id, held, lp))) => (id, Some(format!("{held}{t}")), lp),
                        // Aborted between tokens: nothing to report.
                        (None, None) => return,
                    };
                    (token, token_text, logprob, Some(reason))
                }
                Event::Error(m) => {
                    sink.json(&engine_error(m).flavor(Flavor::Tgi).body()).await;
                    return;
                }
                Event::Done(_) => return,
                Event::Scheduled | Event::PromptLogprobs(_) => continue,
            };
            index += 1;
            let mut e = json!({
                "index": index,
                "token": token_json(&tokenizer, token, token_text.as_deref(), logprob.as_ref().map(|l| l.logprob)),
                "generated_text": null,
                "details": null,
            });
            if p.top_n > 0 {
                e["top_tokens"] = top_tokens_json(&tokenizer, logprob.as_ref());
            }
            if let Some(reason) = &end {
                e["generated_text"] = Value::from(text.as_str());
                if p.details {
                    e["details"] = json!({
                        "finish_reason": reason.tgi(),
                        "generated_tokens": index,
                        "seed": p.seed,
                        "input_length": p.req.prompt.len(),
                    });
                }
            }
            if !sink.json(&e).await {
                return;
            }
        }
    })
}

/// `GET /info`: the model and the limits, as TGI's router reports them.
pub async fn info(State(state): State<Arc<AppState>>) -> ApiResult<Json<Value>> {
    let backend = state.backend()?;
    let l = &state.config.limits;
    let e = &backend.engine.info;
    Ok(Json(json!({
        "model_id": state.model_name(),
        "model_sha": null,
        "model_dtype": backend.model.dtype,
        "model_device_type": backend.model.device,
        "model_pipeline_tag": "text-generation",
        "max_concurrent_requests": l.max_concurrent_requests,
        "max_best_of": l.max_best_of,
        "max_stop_sequences": l.max_stop_sequences,
        "max_input_tokens": backend.max_input_tokens,
        "max_input_length": backend.max_input_tokens,
        "max_total_tokens": backend.max_total_tokens,
        "max_batch_total_tokens": e.num_blocks * e.block_size,
        "max_batch_prefill_tokens": e.max_num_batched_tokens,
        "max_batch_size": e.max_num_seqs,
        "max_client_batch_size": l.max_client_batch_size,
        "validation_workers": 1,
        "router": "peregrine",
        "version": env!("CARGO_PKG_VERSION"),
        "sha": null,
        "docker_label": null,
    })))
}
