//! Turning API fields into an engine request: sampling parameters, limits, lengths.
//! Shared by the OpenAI and TGI routes; each error names the field as the route's API
//! calls it (`max_tokens` vs `max_new_tokens`, `prompt` vs `inputs`).

use peregrine_engine::request::GenerateRequest;
use peregrine_engine::sampler::SamplingParams;

use crate::config::Limits;
use crate::error::{ApiError, ApiResult};
use crate::state::Backend;

/// What a route calls its prompt and its output-length fields.
#[derive(Clone, Copy, Debug)]
pub struct FieldNames {
    pub prompt: &'static str,
    pub max_tokens: &'static str,
}

pub const OPENAI_COMPLETION: FieldNames = FieldNames { prompt: "prompt", max_tokens: "max_tokens" };
pub const OPENAI_CHAT: FieldNames = FieldNames { prompt: "messages", max_tokens: "max_tokens" };
pub const TGI: FieldNames = FieldNames { prompt: "inputs", max_tokens: "max_new_tokens" };

/// The field a validation message is about: its leading identifier
/// ("temperature must be >= 0" → "temperature").
pub fn param_of(message: &str) -> String {
    message.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

pub fn check_sampling(params: &SamplingParams) -> ApiResult<()> {
    params.validate().map_err(|m| ApiError::invalid(param_of(&m), m))
}

/// Checks the prompt against the vocabulary and the length limits; returns the
/// generated-token budget (`max_tokens`, or what is left of the context when absent).
pub fn check_lengths(
    backend: &Backend,
    names: FieldNames,
    prompt: &[u32],
    max_tokens: Option<usize>,
) -> ApiResult<usize> {
    if prompt.is_empty() {
        return Err(ApiError::invalid(names.prompt, format!("`{}` cannot be empty", names.prompt)));
    }
    let vocab = backend.model.vocab_size;
    if let Some(t) = prompt.iter().find(|&&t| t as usize >= vocab) {
        return Err(ApiError::invalid(
            names.prompt,
            format!("token id {t} is outside the vocabulary (size {vocab})"),
        ));
    }
    let (max_input, max_total) = (backend.max_input_tokens, backend.max_total_tokens);
    if prompt.len() > max_input {
        return Err(ApiError::invalid(
            names.prompt,
            format!(
                "`{}` must have at most {max_input} tokens (--max-input-tokens). Given: {}",
                names.prompt,
                prompt.len()
            ),
        ));
    }
    match max_tokens {
        Some(0) => {
            Err(ApiError::invalid(names.max_tokens, format!("`{}` must be at least 1", names.max_tokens)))
        }
        Some(m) if prompt.len() + m > max_total => Err(ApiError::invalid(
            names.max_tokens,
            format!(
                "This model's maximum context length is {max_total} tokens. However, you requested {} \
                 tokens ({} in the {}, {m} in `{}`). Please reduce the length of the {} or `{}`.",
                prompt.len() + m,
                prompt.len(),
                names.prompt,
                names.max_tokens,
                names.prompt,
                names.max_tokens
            ),
        )),
        Some(m) => Ok(m),
        None => Ok(max_total - prompt.len()),
    }
}

pub fn check_stops(limits: &Limits, stop: &[String], field: &str) -> ApiResult<()> {
    if stop.len() > limits.max_stop_sequences {
        return Err(ApiError::invalid(
            field,
            format!(
                "`{field}` supports up to {} stop sequences (--max-stop-sequences). Given: {}",
                limits.max_stop_sequences,
                stop.len()
            ),
        ));
    }
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::invalid(field, format!("`{field}` cannot contain an empty string")));
    }
    Ok(())
}

/// `n` and `best_of` against the engine's and the server's limits.
pub fn check_samples(backend: &Backend, limits: &Limits, n: usize, best_of: usize) -> ApiResult<()> {
    let max_seqs = backend.engine.info.max_num_seqs;
    if n == 0 || n > max_seqs {
        return Err(ApiError::invalid(
            "n",
            format!("`n` must be in [1, {max_seqs}] (--max-num-seqs). Given: {n}"),
        ));
    }
    if best_of < n {
        return Err(ApiError::invalid("best_of", format!("`best_of` ({best_of}) must be >= `n` ({n})")));
    }
    if best_of > n && best_of > limits.max_best_of {
        return Err(ApiError::invalid(
            "best_of",
            format!("`best_of` must be <= {} (--max-best-of). Given: {best_of}", limits.max_best_of),
        ));
    }
    Ok(())
}

/// The engine's own checks (min_tokens vs max_tokens, logprob counts, greedy best_of, …).
pub fn check_request(req: &GenerateRequest) -> ApiResult<()> {
    req.validate().map_err(|m| ApiError::invalid(param_of(&m), m))
}

#[cfg(test)]
mod tests {
    use super::param_of;

    #[test]
    fn params_are_the_leading_identifier() {
        assert_eq!(param_of("temperature must be >= 0, got -1"), "temperature");
        assert_eq!(param_of("best_of/n > 1 needs temperature > 0"), "best_of");
        assert_eq!(param_of("min_tokens (9) must be <= max_tokens (8)"), "min_tokens");
    }
}
