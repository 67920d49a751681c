//! vLLM's `benchmark_throughput.py`: every request submitted at once, the engine run
//! until all finish; requests, total tokens and output tokens per second of wall time.
//! Requests are random token prompts (`random_requests`) or conversations sampled
//! from a ShareGPT JSON file (`sample_sharegpt`), as vLLM samples them.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use peregrine_engine::engine::Engine;
use peregrine_model::tokenizer::Tokenizer;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::Value;

use crate::{check_requests, progress_bar, run_to_completion, BenchRequest};

/// vLLM's ShareGPT filter: prompts and outputs under 4 tokens are dropped, and so
/// are prompts over 1024 tokens and prompt + output over 2048.
pub const MIN_LEN: usize = 4;
pub const MAX_PROMPT_LEN: usize = 1024;
pub const MAX_TOTAL_LEN: usize = 2048;

/// The results; serializes to vLLM's `--output-json` object (`elapsed_time`,
/// `num_requests`, `total_num_tokens`, `requests_per_second`, `tokens_per_second`)
/// plus `output_tokens_per_second`.
#[derive(Clone, Debug, Serialize)]
pub struct ThroughputResult {
    /// Seconds from the first submission to the last request's end.
    pub elapsed_time: f64,
    pub num_requests: usize,
    /// Prompt + generated tokens.
    pub total_num_tokens: usize,
    pub requests_per_second: f64,
    /// Prompt + generated tokens per second.
    pub tokens_per_second: f64,
    pub output_tokens_per_second: f64,
    #[serde(skip)]
    pub total_prompt_tokens: usize,
    #[serde(skip)]
    pub total_output_tokens: usize,
    /// Prompt tokens found in the prefix cache.
    #[serde(skip)]
    pub cached_prompt_tokens: usize,
}

impl ThroughputResult {
    pub fn new(elapsed_time: f64, num_requests: usize, prompt_tokens: usize, output_tokens: usize) -> Self {
        let total = prompt_tokens + output_tokens;
        Self {
            elapsed_time,
            num_requests,
            total_num_tokens: total,
            requests_per_second: num_requests as f64 / elapsed_time,
            tokens_per_second: total as f64 / elapsed_time,
            output_tokens_per_second: output_tokens as f64 / elapsed_time,
            total_prompt_tokens: prompt_tokens,
            total_output_tokens: output_tokens,
            cached_prompt_tokens: 0,
        }
    }

    /// vLLM's printout.
    pub fn report(&self) -> String {
        format!(
            "Throughput: {:.2} requests/s, {:.2} total tokens/s, {:.2} output tokens/s\n\
             Total num prompt tokens:  {}\n\
             Total num output tokens:  {}\n",
            self.requests_per_second,
            self.tokens_per_second,
            self.output_tokens_per_second,
            self.total_prompt_tokens,
            self.total_output_tokens
        )
    }
}

/// `num` prompts of `input_len` token ids drawn uniformly from the vocabulary, each to
/// generate `output_len` tokens (vLLM's random dataset, without its decode/re-encode
/// round trip: the ids go to the engine as they are).
pub fn random_requests(
    num: usize,
    input_len: usize,
    output_len: usize,
    vocab_size: usize,
    seed: u64,
) -> Vec<BenchRequest> {
    let vocab = vocab_size.max(1) as u32;
    let mut rng = StdRng::seed_from_u64(seed);
    (0..num)
        .map(|_| BenchRequest {
            prompt: (0..input_len).map(|_| rng.random_range(0..vocab)).collect(),
            output_len,
        })
        .collect()
}

/// Samples up to `num` requests from a ShareGPT dataset (a JSON list of
/// `{"conversations": [{"from": …, "value": …}, …]}`), as vLLM does: conversations
/// with fewer than two turns are dropped, the rest shuffled with `seed`; the first
/// turn is the prompt and the second's token count the output length (or
/// `fixed_output_len`); those failing vLLM's length filter are skipped until `num`
/// are found. `encode` tokenizes a text as the model's tokenizer does by default
/// (special tokens added, as `tokenizer(text).input_ids`). Fewer than `num` come
/// back when the dataset runs out.
pub fn sample_sharegpt(
    json: &str,
    num: usize,
    seed: u64,
    fixed_output_len: Option<usize>,
    mut encode: impl FnMut(&str) -> Result<Vec<u32>>,
) -> Result<Vec<BenchRequest>> {
    let data: Vec<Value> = serde_json::from_str(json).context("a ShareGPT dataset is a JSON list")?;
    let mut pairs: Vec<(&str, &str)> = data
        .iter()
        .filter_map(|entry| {
            let turns = entry.get("conversations")?.as_array()?;
            if turns.len() < 2 {
                return None;
            }
            Some((turns[0].get("value")?.as_str()?, turns[1].get("value")?.as_str()?))
        })
        .collect();
    pairs.shuffle(&mut StdRng::seed_from_u64(seed));
    let mut out = Vec::new();
    for (prompt, completion) in pairs {
        if out.len() == num {
            break;
        }
        let prompt = encode(prompt)?;
        let output_len = match fixed_output_len {
            Some(n) => n,
            None => encode(completion)?.len(),
        };
        if is_valid_sequence(prompt.len(), output_len, fixed_output_len.is_some()) {
            out.push(BenchRequest { prompt, output_len });
        }
    }
    Ok(out)
}

/// vLLM's `is_valid_sequence` with its defaults; a fixed output length skips the
/// minimum-output check.
pub fn is_valid_sequence(prompt_len: usize, output_len: usize, skip_min_output_check: bool) -> bool {
    let too_short = prompt_len < MIN_LEN || (!skip_min_output_check && output_len < MIN_LEN);
    let too_long = prompt_len > MAX_PROMPT_LEN || prompt_len + output_len > MAX_TOTAL_LEN;
    !(too_short || too_long)
}

/// `sample_sharegpt` over a file, tokenized with `tokenizer`.
pub fn load_sharegpt(
    path: &Path,
    tokenizer: &Tokenizer,
    num: usize,
    seed: u64,
    fixed_output_len: Option<usize>,
) -> Result<Vec<BenchRequest>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    sample_sharegpt(&text, num, seed, fixed_output_len, |s| Ok(tokenizer.encode(s, true)?))
        .with_context(|| format!("sampling {}", path.display()))
}

/// Runs every request at once on an idle engine, timing from the first submission to
/// the last completion. `progress`: a bar over finished requests on stderr.
pub fn run(engine: &mut Engine, requests: &[BenchRequest], progress: bool) -> Result<ThroughputResult> {
    if requests.is_empty() {
        bail!("no requests to run");
    }
    check_requests(engine, requests)?;
    let bar = progress_bar(requests.len(), "Processed prompts", progress);
    let t0 = Instant::now();
    let done = run_to_completion(engine, requests, || bar.inc(1))?;
    let elapsed = t0.elapsed().as_secs_f64();
    bar.finish();
    let prompt_tokens = done.iter().map(|c| c.usage.prompt_tokens).sum();
    let output_tokens = done.iter().map(|c| c.usage.completion_tokens).sum();
    let mut result = ThroughputResult::new(elapsed, requests.len(), prompt_tokens, output_tokens);
    result.cached_prompt_tokens = done.iter().map(|c| c.usage.cached_prompt_tokens).sum();
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::to_json_string;

    /// One token per whitespace-separated word, plus a BOS (id 1) as a tokenizer
    /// that adds special tokens would.
    fn words(text: &str) -> Result<Vec<u32>> {
        Ok(std::iter::once(1).chain(text.split_whitespace().map(|w| w.len() as u32 + 2)).collect())
    }

    fn convo(prompt: &str, completion: &str) -> Value {
        serde_json::json!({"id": "x", "conversations": [
            {"from": "human", "value": prompt},
            {"from": "gpt", "value": completion},
        ]})
    }

    fn dataset() -> String {
        let long_prompt = vec!["w"; 1100].join(" ");
        let long_completion = vec!["w"; 1100].join(" ");
        let medium_prompt = vec!["w"; 1000].join(" ");
        serde_json::to_string(&serde_json::json!([
            convo("a b c d", "e f g h i"),                       // 5 + 6: kept
            convo("a b", "c d e f g"),                           // prompt 3 < 4: dropped
            convo("a b c d e", "f g"),                           // output 3 < 4: dropped
            convo(&long_prompt, "a b c d"),                      // prompt 1101 > 1024: dropped
            convo(&medium_prompt, &long_completion),             // 1001 + 1101 > 2048: dropped
            {"id": "one turn", "conversations": [{"from": "human", "value": "a b c d e f"}]},
            {"id": "no turns", "conversations": []},
            convo("one two three four five", "six seven eight"), // 6 + 4: kept
            convo("p q r s t u v", "w x y z"),                   // 8 + 5: kept
        ]))
        .unwrap()
    }

    #[test]
    fn sharegpt_keeps_what_vllms_filter_keeps() {
        let mut got = sample_sharegpt(&dataset(), 100, 0, None, words).unwrap();
        got.sort_by_key(|r| r.prompt.len());
        let lens: Vec<(usize, usize)> = got.iter().map(|r| (r.prompt.len(), r.output_len)).collect();
        assert_eq!(lens, vec![(5, 6), (6, 4), (8, 5)]);
        // The prompt is the first turn's tokens, BOS included.
        assert_eq!(got[0].prompt, words("a b c d").unwrap());
    }

    #[test]
    fn sharegpt_samples_num_with_a_fixed_seed() {
        let a = sample_sharegpt(&dataset(), 2, 42, None, words).unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a, sample_sharegpt(&dataset(), 2, 42, None, words).unwrap());
        // Over the seeds, each of the three valid conversations gets sampled.
        let mut seen = std::collections::HashSet::new();
        for seed in 0..20 {
            for r in sample_sharegpt(&dataset(), 1, seed, None, words).unwrap() {
                seen.insert(r.prompt.len());
            }
        }
        assert_eq!(seen.len(), 3);
    }

    #[test]
    fn sharegpt_fixed_output_len_overrides_and_skips_the_minimum() {
        let got = sample_sharegpt(&dataset(), 100, 0, Some(2), words).unwrap();
        // "a b c d e" / "f g" now passes (its output length is fixed at 2), and so does
        // the 1001-token prompt whose completion made it too long.
        assert_eq!(got.len(), 5);
        assert!(got.iter().all(|r| r.output_len == 2));
        // A fixed length still counts towards the 2048 total.
        let got = sample_sharegpt(&dataset(), 100, 0, Some(1100), words).unwrap();
        assert!(got.iter().all(|r| r.prompt.len() + 1100 <= MAX_TOTAL_LEN));
        assert_eq!(got.len(), 4);
    }

    #[test]
    fn sharegpt_rejects_what_is_not_a_list() {
        assert!(sample_sharegpt("{\"conversations\": []}", 1, 0, None, words).is_err());
        assert!(sample_sharegpt("[]", 1, 0, None, words).unwrap().is_empty());
    }

    #[test]
    fn random_requests_are_seeded() {
        let a = random_requests(5, 7, 3, 100, 1);
        assert_eq!(a, random_requests(5, 7, 3, 100, 1));
        assert!(a.iter().all(|r| r.prompt.len() == 7 && r.output_len == 3));
        assert!(a.iter().flat_map(|r| &r.prompt).all(|&t| t < 100));
    }

    #[test]
    fn json_and_report_read_as_vllms() {
        let r = ThroughputResult::new(2.0, 4, 100, 60);
        assert_eq!(
            to_json_string(&r),
            "{\n    \"elapsed_time\": 2.0,\n    \"num_requests\": 4,\n    \"total_num_tokens\": 160,\n    \
             \"requests_per_second\": 2.0,\n    \"tokens_per_second\": 80.0,\n    \
             \"output_tokens_per_second\": 30.0\n}"
        );
        assert_eq!(
            r.report(),
            "Throughput: 2.00 requests/s, 80.00 total tokens/s, 30.00 output tokens/s\n\
             Total num prompt tokens:  100\nTotal num output tokens:  60\n"
        );
    }
}
