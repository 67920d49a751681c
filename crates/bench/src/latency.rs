//! vLLM's `benchmark_latency.py`: one batch of `batch_size` random prompts of
//! `input_len` tokens, each generating exactly `output_len` tokens, run to completion;
//! `num_iters_warmup` unmeasured runs, then `num_iters` timed ones. Reports the mean
//! and the 10/25/50/75/90/99th percentiles of the per-batch wall time.

use std::time::Instant;

use anyhow::{bail, Result};
use peregrine_engine::engine::Engine;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::stats::{mean, percentiles, py_float};
use crate::{check_requests, progress_bar, run_to_completion, BenchRequest};

/// The percentiles vLLM reports.
pub const PERCENTAGES: [u32; 6] = [10, 25, 50, 75, 90, 99];

/// vLLM draws dummy prompt ids below this (`np.random.randint(10000, ...)`).
pub const DUMMY_TOKEN_LIMIT: usize = 10_000;

#[derive(Clone, Debug)]
pub struct LatencyConfig {
    pub batch_size: usize,
    pub input_len: usize,
    pub output_len: usize,
    pub num_iters_warmup: usize,
    pub num_iters: usize,
    /// Seed of the dummy prompts.
    pub seed: u64,
    /// The model's vocabulary size: prompt ids are drawn below min(10000, vocab_size).
    pub vocab_size: usize,
    /// Progress bars on stderr (when it is a terminal).
    pub progress: bool,
}

impl Default for LatencyConfig {
    /// vLLM's defaults.
    fn default() -> Self {
        Self {
            batch_size: 8,
            input_len: 32,
            output_len: 128,
            num_iters_warmup: 10,
            num_iters: 30,
            seed: 0,
            vocab_size: DUMMY_TOKEN_LIMIT,
            progress: true,
        }
    }
}

/// The results; serializes to vLLM's `--output-json` object
/// (`avg_latency`, `latencies`, `percentiles`).
#[derive(Clone, Debug, Serialize)]
pub struct LatencyResult {
    /// Mean of `latencies`, seconds.
    pub avg_latency: f64,
    /// Wall time of each timed iteration, seconds.
    pub latencies: Vec<f64>,
    pub percentiles: Percentiles,
    /// Generated tokens of each request of each timed iteration (all `output_len`).
    #[serde(skip)]
    pub output_tokens: Vec<usize>,
    /// Prompt tokens over the timed iterations, and how many came from the prefix
    /// cache (the same prompts run every iteration, as in vLLM).
    #[serde(skip)]
    pub prompt_tokens: usize,
    #[serde(skip)]
    pub cached_prompt_tokens: usize,
}

/// (percentage, seconds) in `PERCENTAGES` order; serializes as the JSON object
/// `{"10": …, "25": …}` Python's `json.dump` makes of `dict(zip(percentages, …))`.
#[derive(Clone, Debug, PartialEq)]
pub struct Percentiles(pub Vec<(u32, f64)>);

impl Serialize for Percentiles {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (p, v) in &self.0 {
            map.serialize_entry(&p.to_string(), v)?;
        }
        map.end()
    }
}

impl LatencyResult {
    /// Statistics of measured latencies (seconds), as vLLM computes them.
    pub fn from_latencies(latencies: Vec<f64>) -> Self {
        let qs: Vec<f64> = PERCENTAGES.iter().map(|&p| f64::from(p)).collect();
        let values = percentiles(&latencies, &qs).unwrap_or_else(|| vec![f64::NAN; qs.len()]);
        Self {
            avg_latency: mean(&latencies),
            percentiles: Percentiles(PERCENTAGES.iter().copied().zip(values).collect()),
            latencies,
            output_tokens: Vec::new(),
            prompt_tokens: 0,
            cached_prompt_tokens: 0,
        }
    }

    /// vLLM's printout: `Avg latency: X seconds`, then `P% percentile latency: X seconds`
    /// per percentile, floats as Python prints them.
    pub fn report(&self) -> String {
        let mut out = format!("Avg latency: {} seconds\n", py_float(self.avg_latency));
        for (p, v) in &self.percentiles.0 {
            out.push_str(&format!("{p}% percentile latency: {} seconds\n", py_float(*v)));
        }
        out
    }
}

/// `batch_size` prompts of `input_len` ids drawn uniformly below min(10000, vocab_size)
/// from a seeded generator (vLLM: `np.random.randint(10000, size=(batch_size, input_len))`).
pub fn dummy_prompts(batch_size: usize, input_len: usize, vocab_size: usize, seed: u64) -> Vec<Vec<u32>> {
    let limit = DUMMY_TOKEN_LIMIT.min(vocab_size).max(1) as u32;
    let mut rng = StdRng::seed_from_u64(seed);
    (0..batch_size).map(|_| (0..input_len).map(|_| rng.random_range(0..limit)).collect()).collect()
}

/// Runs the benchmark on an idle engine.
pub fn run(engine: &mut Engine, config: &LatencyConfig) -> Result<LatencyResult> {
    if config.batch_size == 0 || config.input_len == 0 || config.output_len == 0 {
        bail!("batch size, input length and output length must be at least 1");
    }
    if config.num_iters == 0 {
        bail!("--num-iters must be at least 1");
    }
    let requests: Vec<BenchRequest> =
        dummy_prompts(config.batch_size, config.input_len, config.vocab_size, config.seed)
            .into_iter()
            .map(|prompt| BenchRequest { prompt, output_len: config.output_len })
            .collect();
    check_requests(engine, &requests)?;

    // One iteration: the whole batch submitted, run until every request is done.
    let run_once = |engine: &mut Engine| -> Result<(f64, Vec<crate::Completed>)> {
        let t0 = Instant::now();
        let done = run_to_completion(engine, &requests, || {})?;
        let secs = t0.elapsed().as_secs_f64();
        if let Some(c) = done.iter().find(|c| c.tokens != config.output_len) {
            bail!("a request generated {} tokens instead of {}", c.tokens, config.output_len);
        }
        Ok((secs, done))
    };

    if config.num_iters_warmup > 0 {
        let bar = progress_bar(config.num_iters_warmup, "Warmup iterations", config.progress);
        for _ in 0..config.num_iters_warmup {
            run_once(engine)?;
            bar.inc(1);
        }
        bar.finish();
    }

    let bar = progress_bar(config.num_iters, "Profiling iterations", config.progress);
    let mut latencies = Vec::with_capacity(config.num_iters);
    let (mut output_tokens, mut prompt_tokens, mut cached) = (Vec::new(), 0, 0);
    for _ in 0..config.num_iters {
        let (secs, done) = run_once(engine)?;
        latencies.push(secs);
        for c in done {
            output_tokens.push(c.tokens);
            prompt_tokens += c.usage.prompt_tokens;
            cached += c.usage.cached_prompt_tokens;
        }
        bar.inc(1);
    }
    bar.finish();
    let mut result = LatencyResult::from_latencies(latencies);
    result.output_tokens = output_tokens;
    result.prompt_tokens = prompt_tokens;
    result.cached_prompt_tokens = cached;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::to_json_string;

    #[test]
    fn json_has_vllms_keys_in_vllms_layout() {
        let r = LatencyResult::from_latencies(vec![4.0, 2.0, 1.0, 3.0]);
        let text = to_json_string(&r);
        let expected = r#"{
    "avg_latency": 2.5,
    "latencies": [
        4.0,
        2.0,
        1.0,
        3.0
    ],
    "percentiles": {
        "10": 1.3,
        "25": 1.75,
        "50": 2.5,
        "75": 3.25,
        "90": 3.7,
        "99": 3.9699999999999998
    }
}"#;
        assert_eq!(text, expected);
    }

    #[test]
    fn report_reads_as_vllms() {
        let r = LatencyResult::from_latencies(vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(
            r.report(),
            "Avg latency: 2.5 seconds\n\
             10% percentile latency: 1.3 seconds\n\
             25% percentile latency: 1.75 seconds\n\
             50% percentile latency: 2.5 seconds\n\
             75% percentile latency: 3.25 seconds\n\
             90% percentile latency: 3.7 seconds\n\
             99% percentile latency: 3.9699999999999998 seconds\n"
        );
    }

    #[test]
    fn dummy_prompts_are_seeded_and_bounded() {
        let a = dummy_prompts(3, 5, 50_000, 7);
        assert_eq!(a, dummy_prompts(3, 5, 50_000, 7));
        assert_ne!(a, dummy_prompts(3, 5, 50_000, 8));
        assert_eq!(a.len(), 3);
        assert!(a.iter().all(|p| p.len() == 5 && p.iter().all(|&t| t < 10_000)));
        let small = dummy_prompts(4, 64, 100, 0);
        assert!(small.iter().flatten().all(|&t| t < 100));
    }
}
