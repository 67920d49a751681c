//! The typed messages between the engine and its callers: what a request asks for,
//! and the events its stream carries back.

use crate::sampler::SamplingParams;

pub type RequestId = u64;

/// One generation request, already tokenized and validated by the caller.
#[derive(Clone, Debug)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    /// Generated tokens at most (`None`: up to the model's context length).
    pub max_tokens: Option<usize>,
    /// End-of-sequence and stop tokens are suppressed until this many were generated.
    pub min_tokens: usize,
    /// Text that ends generation; it is not part of the output.
    pub stop: Vec<String>,
    /// Tokens that end generation (besides eos); they are not part of the text.
    pub stop_token_ids: Vec<u32>,
    pub ignore_eos: bool,
    /// Samples returned.
    pub n: usize,
    /// Samples generated, the `n` with the highest cumulative logprob returned
    /// (≥ n; when > n, the samples arrive only once all have finished).
    pub best_of: usize,
    /// Logprobs of each generated token with this many alternatives (`Some(0)`: the chosen one only).
    pub logprobs: Option<usize>,
    /// Logprobs of the prompt tokens with this many alternatives; turns off prefix-cache
    /// hits for this request, as in vLLM, since cached positions produce no logits.
    pub prompt_logprobs: Option<usize>,
    /// Kirchenbauer watermark on this request's sampling (TGI's `watermark: true`).
    pub watermark: bool,
    pub skip_special_tokens: bool,
    /// Anything besides the tokens that changes the KV (an adapter id); part of the
    /// prefix-cache key.
    pub cache_salt: u64,
}

impl GenerateRequest {
    pub fn new(prompt: Vec<u32>, params: SamplingParams) -> Self {
        Self {
            prompt,
            params,
            max_tokens: Some(16),
            min_tokens: 0,
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            n: 1,
            best_of: 1,
            logprobs: None,
            prompt_logprobs: None,
            watermark: false,
            skip_special_tokens: true,
            cache_salt: 0,
        }
    }

    /// The first invalid field, named as in the OpenAI / vLLM APIs.
    pub fn validate(&self) -> Result<(), String> {
        self.params.validate()?;
        if self.prompt.is_empty() {
            return Err("prompt must contain at least one token".into());
        }
        if self.n == 0 {
            return Err("n must be at least 1".into());
        }
        if self.best_of < self.n {
            return Err(format!("best_of ({}) must be >= n ({})", self.best_of, self.n));
        }
        if self.best_of > 1 && self.params.temperature == 0.0 {
            // Greedy samples would all be equal: vLLM rejects this too.
            return Err("best_of/n > 1 needs temperature > 0 (greedy samples are identical)".into());
        }
        if self.max_tokens == Some(0) {
            return Err("max_tokens must be at least 1".into());
        }
        if let Some(m) = self.max_tokens {
            if self.min_tokens > m {
                return Err(format!("min_tokens ({}) must be <= max_tokens ({m})", self.min_tokens));
            }
        }
        for (name, v) in [("logprobs", self.logprobs), ("prompt_logprobs", self.prompt_logprobs)] {
            if v.is_some_and(|k| k > 20) {
                return Err(format!("{name} must be <= 20"));
            }
        }
        Ok(())
    }
}

/// Why a sample ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// `max_tokens` or the context length was reached.
    Length,
    /// A stop string or stop token matched (which one is in `StopMatch`).
    Stop(StopMatch),
    /// The model produced an end-of-sequence token.
    Eos(u32),
    /// The caller aborted or went away.
    Abort,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopMatch {
    Text(String),
    Token(u32),
}

impl FinishReason {
    /// The OpenAI name: "length" or "stop" ("abort" for aborted).
    pub fn openai(&self) -> &'static str {
        match self {
            FinishReason::Length => "length",
            FinishReason::Stop(_) | FinishReason::Eos(_) => "stop",
            FinishReason::Abort => "abort",
        }
    }

    /// The TGI name: "length", "eos_token" or "stop_sequence".
    pub fn tgi(&self) -> &'static str {
        match self {
            FinishReason::Length | FinishReason::Abort => "length",
            FinishReason::Eos(_) => "eos_token",
            FinishReason::Stop(_) => "stop_sequence",
        }
    }
}

/// The log-probability of one token and its most likely alternatives, under the
/// model's raw distribution (log-softmax of the logits before any processing,
/// vLLM's default).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
    /// 1 = the most likely token.
    pub rank: usize,
    /// (token, logprob), most likely first.
    pub top: Vec<(u32, f32)>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Over all returned samples.
    pub completion_tokens: usize,
    /// Prompt tokens found in the prefix cache.
    pub cached_prompt_tokens: usize,
}

/// What a request's stream carries, in order: `Scheduled`, optional `PromptLogprobs`, then for each
/// sample any number of `Token`s and one `Finished`, then `Done` (or a lone `Error`).
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The request left the queue: its first prompt chunk is in this step (queue time ends).
    Scheduled,
    /// One per prompt token (`None` for the first, which has no context).
    PromptLogprobs(Vec<Option<TokenLogprob>>),
    /// A generated token of sample `index` and the text it completes (possibly empty:
    /// part of a character, or text held back as a possible stop string). Tokens that
    /// end generation (eos, stop tokens) are reported in `Finished`, not here.
    /// `last`: the sample ends with this token (a `Finished` follows at once).
    Token { index: usize, token: u32, text: String, logprob: Option<TokenLogprob>, last: bool },
    /// Sample `index` ended; `text` is anything still held back, emitted now.
    Finished {
        index: usize,
        reason: FinishReason,
        text: String,
        /// When logprobs were computed (asked for, or best_of > n).
        cumulative_logprob: Option<f64>,
        /// The logprob of the token that ended the sample, when that token is not in a
        /// `Token` event (eos, stop token; its id is in `reason`) and logprobs were computed.
        logprob: Option<TokenLogprob>,
    },
    /// Every sample has finished. The last event.
    Done(Usage),
    /// The request was refused (never fits, invalid); the last event.
    Error(String),
}
