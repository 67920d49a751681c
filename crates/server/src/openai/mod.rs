//! The OpenAI API (`/v1/completions`, `/v1/chat/completions`, `/v1/models`), with
//! vLLM's extra sampling fields. This file: the fields both routes share, and
//! gathering a finished generation into choices.

pub mod chat;
pub mod completions;
pub mod models;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use peregrine_engine::request::{Event, FinishReason, GenerateRequest, StopMatch, TokenLogprob, Usage};
use peregrine_engine::sampler::SamplingParams;
use peregrine_model::tokenizer::Tokenizer;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::generation::Generation;
use crate::sse::Sink;
use crate::state::{AppState, Backend};
use crate::validate::{self, FieldNames};

/// `stop`: one string or a list.
#[derive(Deserialize, Clone, Debug)]
#[serde(untagged)]
pub enum StopInput {
    One(String),
    Many(Vec<String>),
}

impl StopInput {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            StopInput::One(s) => vec![s],
            StopInput::Many(v) => v,
        }
    }
}

#[derive(Deserialize, Clone, Debug, Default)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
    /// vLLM: usage on every chunk.
    #[serde(default)]
    pub continuous_usage_stats: bool,
}

/// The fields `/v1/completions` and `/v1/chat/completions` share (OpenAI's, then vLLM's).
#[derive(Deserialize, Debug, Default)]
pub struct CommonFields {
    pub model: Option<String>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub n: Option<usize>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub stop: Option<StopInput>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    /// Token id (as a string) → bias in [-100, 100].
    pub logit_bias: Option<HashMap<String, f32>>,
    pub seed: Option<i64>,
    pub user: Option<String>,
    // vLLM's extras.
    pub best_of: Option<usize>,
    /// -1 or 0: off.
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub typical_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub ignore_eos: Option<bool>,
    pub min_tokens: Option<usize>,
    pub stop_token_ids: Option<Vec<u32>>,
    pub skip_special_tokens: Option<bool>,
    pub include_stop_str_in_output: Option<bool>,
    /// Keep only the last k prompt tokens.
    pub truncate_prompt_tokens: Option<usize>,
}

impl CommonFields {
    pub fn streaming(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    pub fn include_usage(&self) -> bool {
        self.stream_options.as_ref().is_some_and(|o| o.include_usage || o.continuous_usage_stats)
    }

    pub fn continuous_usage(&self) -> bool {
        self.stream_options.as_ref().is_some_and(|o| o.continuous_usage_stats)
    }

    pub fn n(&self) -> usize {
        self.n.unwrap_or(1)
    }

    fn sampling(&self) -> ApiResult<SamplingParams> {
        let top_k = match self.top_k {
            None | Some(-1) | Some(0) => 0,
            Some(k) if k > 0 => k as usize,
            Some(k) => {
                return Err(ApiError::invalid("top_k", format!("top_k must be -1 (off) or >= 1, got {k}")))
            }
        };
        let mut logit_bias = Vec::new();
        for (token, &bias) in self.logit_bias.iter().flatten() {
            let id: u32 = token.parse().map_err(|_| {
                ApiError::invalid("logit_bias", format!("logit_bias keys must be token ids, got {token:?}"))
            })?;
            logit_bias.push((id, bias));
        }
        logit_bias.sort_by_key(|&(t, _)| t);
        let p = SamplingParams {
            // OpenAI's default temperature is 1.
            temperature: self.temperature.unwrap_or(1.0),
            top_k,
            top_p: self.top_p.unwrap_or(1.0),
            min_p: self.min_p.unwrap_or(0.0),
            typical_p: self.typical_p.unwrap_or(1.0),
            repetition_penalty: self.repetition_penalty.unwrap_or(1.0),
            frequency_penalty: self.frequency_penalty.unwrap_or(0.0),
            presence_penalty: self.presence_penalty.unwrap_or(0.0),
            logit_bias,
            seed: self.seed.map(|s| s as u64),
        };
        validate::check_sampling(&p)?;
        Ok(p)
    }

    /// The engine request for one prompt, after every check.
    pub fn request(
        &self,
        state: &AppState,
        backend: &Backend,
        names: FieldNames,
        mut prompt: Vec<u32>,
        max_tokens: Option<usize>,
    ) -> ApiResult<GenerateRequest> {
        if self.include_stop_str_in_output == Some(true) {
            return Err(ApiError::not_supported(
                "include_stop_str_in_output",
                "include_stop_str_in_output=true",
            ));
        }
        if let Some(k) = self.truncate_prompt_tokens {
            if k == 0 {
                return Err(ApiError::invalid(
                    "truncate_prompt_tokens",
                    "truncate_prompt_tokens must be >= 1",
                ));
            }
            prompt.drain(..prompt.len().saturating_sub(k));
        }
        let limits = &state.config.limits;
        let max_tokens = validate::check_lengths(backend, names, &prompt, max_tokens)?;
        let stop = self.stop.clone().map(StopInput::into_vec).unwrap_or_default();
        validate::check_stops(limits, &stop, "stop")?;
        let n = self.n();
        let best_of = self.best_of.unwrap_or(n);
        validate::check_samples(backend, limits, n, best_of)?;
        let vocab = backend.model.vocab_size;
        if let Some(t) = self.stop_token_ids.iter().flatten().find(|&&t| t as usize >= vocab) {
            return Err(ApiError::invalid(
                "stop_token_ids",
                format!("token id {t} is outside the vocabulary ({vocab})"),
            ));
        }
        let mut req = GenerateRequest::new(prompt, self.sampling()?);
        if let Some((t, _)) = req.params.logit_bias.iter().find(|(t, _)| *t as usize >= vocab) {
            return Err(ApiError::invalid(
                "logit_bias",
                format!("token id {t} is outside the vocabulary ({vocab})"),
            ));
        }
        req.max_tokens = Some(max_tokens);
        req.min_tokens = self.min_tokens.unwrap_or(0);
        req.stop = stop;
        req.stop_token_ids = self.stop_token_ids.clone().unwrap_or_default();
        req.ignore_eos = self.ignore_eos.unwrap_or(false);
        req.n = n;
        req.best_of = best_of;
        req.skip_special_tokens = self.skip_special_tokens.unwrap_or(true);
        Ok(req)
    }
}

/// One choice, gathered from a generation's events.
#[derive(Clone, Debug, Default)]
pub struct ChoiceOut {
    pub text: String,
    pub tokens: Vec<u32>,
    pub logprobs: Vec<TokenLogprob>,
    pub finish: Option<FinishReason>,
}

/// A finished generation: its choices, prompt logprobs and usage.
#[derive(Debug, Default)]
pub struct Collected {
    pub choices: Vec<ChoiceOut>,
    pub prompt_logprobs: Option<Vec<Option<TokenLogprob>>>,
    pub usage: Usage,
}

/// Reads a generation to its end.
pub async fn collect(gen: &mut Generation, n: usize) -> ApiResult<Collected> {
    let mut out = Collected { choices: vec![ChoiceOut::default(); n], ..Default::default() };
    while let Some(e) = gen.next().await {
        match e {
            Event::Token { index, token, text, logprob, .. } => {
                let c = &mut out.choices[index];
                c.text.push_str(&text);
                c.tokens.push(token);
                c.logprobs.extend(logprob);
            }
            Event::Finished { index, reason, text, .. } => {
                out.choices[index].text.push_str(&text);
                out.choices[index].finish = Some(reason);
            }
            Event::PromptLogprobs(p) => out.prompt_logprobs = Some(p),
            Event::Done(u) => out.usage = u,
            Event::Error(m) => return Err(engine_error(m)),
            Event::Scheduled => {}
        }
    }
    Ok(out)
}

/// An engine `Error` event as an API error.
pub fn engine_error(message: String) -> ApiError {
    let kind = if message.contains("shutting down") || message.contains("stopped") {
        ErrorKind::Unavailable
    } else {
        ErrorKind::Generation
    };
    ApiError::new(kind, message)
}

/// What every streamed chunk of one response repeats, and the stream's ending.
pub struct ChunkHeader {
    pub id: String,
    /// "text_completion" or "chat.completion.chunk".
    pub object: &'static str,
    pub created: u64,
    pub model: String,
}

impl ChunkHeader {
    /// A chunk with one choice (index, its delta or text, `logprobs`, finish and
    /// vLLM's `stop_reason`); `usage` on it when given.
    pub fn chunk(&self, choice: Value, finish: Option<&FinishReason>, usage: Option<Value>) -> Value {
        let choice = with_finish(choice, finish);
        let mut c = json!({
            "id": self.id, "object": self.object, "created": self.created, "model": self.model,
            "choices": [choice],
        });
        if let Some(u) = usage {
            c["usage"] = u;
        }
        c
    }

    /// The end of a stream: a usage chunk with no choices (when asked), then `[DONE]`.
    pub async fn finish(&self, sink: &Sink, usage: Option<&Usage>) {
        if let Some(u) = usage {
            let last = json!({
                "id": self.id, "object": self.object, "created": self.created, "model": self.model,
                "choices": [], "usage": usage_json(u),
            });
            if !sink.json(&last).await {
                return;
            }
        }
        sink.data("[DONE]").await;
    }
}

/// An engine error after the stream has started, as OpenAI's streaming error event.
pub async fn stream_error(sink: &Sink, message: String) {
    sink.json(&json!({"error": engine_error(message).body()["error"]})).await;
}

pub fn usage_json(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_prompt_tokens},
    })
}

/// A choice with its `finish_reason` (OpenAI's name; "abort" as vLLM reports it) and
/// vLLM's `stop_reason`: the stop string or stop token id that matched, else null.
pub fn with_finish(mut choice: Value, finish: Option<&FinishReason>) -> Value {
    let stop_reason = match finish {
        Some(FinishReason::Stop(StopMatch::Text(s))) => Value::from(s.as_str()),
        Some(FinishReason::Stop(StopMatch::Token(t))) => Value::from(*t),
        _ => Value::Null,
    };
    choice["finish_reason"] = json!(finish.map(FinishReason::openai));
    choice["stop_reason"] = stop_reason;
    choice
}

/// A token's text as logprobs report it (its bytes, lossily as UTF-8).
pub fn token_text(tokenizer: &Tokenizer, id: u32) -> String {
    String::from_utf8_lossy(&tokenizer.token_bytes(id)).into_owned()
}

/// `cmpl-…` / `chatcmpl-…`: unique per response.
pub fn response_id(prefix: &str) -> String {
    format!("{prefix}-{:032x}", rand::random::<u128>())
}

pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Starts one generation per request under one admission ticket.
pub fn start_all(
    state: &Arc<AppState>,
    backend: &Backend,
    requests: Vec<GenerateRequest>,
    route: &'static str,
) -> ApiResult<Vec<Generation>> {
    let lens: Vec<usize> = requests.iter().map(|r| r.prompt.len()).collect();
    let ticket = Arc::new(state.admission.admit(&lens)?);
    Ok(requests
        .into_iter()
        .map(|r| {
            Generation::start(
                &backend.engine,
                r,
                ticket.clone(),
                state.metrics.clone(),
                state.tracer.clone(),
                route,
            )
        })
        .collect())
}
