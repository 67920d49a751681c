//! `peregrine bench latency` and `peregrine bench throughput`: vLLM's offline
//! benchmarks (`benchmark_latency.py`, `benchmark_throughput.py`) over the engine,
//! same options, same printout, same `--output-json` keys. Results go to stdout,
//! progress bars and the setup to stderr.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use peregrine_bench::latency::LatencyConfig;
use peregrine_bench::{latency, throughput, write_json};
use peregrine_engine::engine::Engine;
use peregrine_model::load::Model;

use crate::engine_args::EngineArgs;
use crate::ModelArgs;

#[derive(Args, Debug)]
pub struct LatencyArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Requests in the batch.
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Prompt tokens of each request (random ids).
    #[arg(long, default_value_t = 32)]
    pub input_len: usize,
    /// Tokens each request generates (end-of-sequence ignored).
    #[arg(long, default_value_t = 128)]
    pub output_len: usize,
    /// Untimed iterations first.
    #[arg(long, default_value_t = 10)]
    pub num_iters_warmup: usize,
    /// Timed iterations.
    #[arg(long, default_value_t = 30)]
    pub num_iters: usize,
    /// Seed of the random prompts.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write the results as JSON (avg_latency, latencies, percentiles) to this file.
    #[arg(long)]
    pub output_json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ThroughputArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// A ShareGPT JSON file to sample prompts from (default: random token prompts).
    #[arg(long)]
    pub dataset: Option<PathBuf>,
    /// Prompt tokens of each random request (required without --dataset).
    #[arg(long, conflicts_with = "dataset", required_unless_present = "dataset")]
    pub input_len: Option<usize>,
    /// Tokens each request generates (default: 128 for random prompts; with --dataset,
    /// overrides each conversation's completion length).
    #[arg(long)]
    pub output_len: Option<usize>,
    /// Requests to run.
    #[arg(long, default_value_t = 1000)]
    pub num_prompts: usize,
    /// Seed of the random prompts or of the dataset sampling.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write the results as JSON (elapsed_time, num_requests, total_num_tokens,
    /// requests_per_second, tokens_per_second, output_tokens_per_second) to this file.
    #[arg(long)]
    pub output_json: Option<PathBuf>,
}

/// vLLM's random-dataset output length when none is given.
const DEFAULT_RANDOM_OUTPUT_LEN: usize = 128;

/// Loads the model and builds its engine on `--device` (on the CPU the KV cache is
/// committed as it fills), as `generate` does.
fn load(model: &ModelArgs, engine: &EngineArgs) -> Result<(Arc<Model>, Engine)> {
    let device = model.device()?;
    let m = model.load_reporting(device)?;
    let (e, plan) = engine.build_on(m.clone(), device, model.threads, false)?;
    eprintln!("{plan}");
    Ok((m, e))
}

/// `peregrine bench latency`.
pub fn latency(args: LatencyArgs) -> Result<()> {
    let (model, mut engine) = load(&args.model, &args.engine)?;
    run_latency(&args, &mut engine, &model)
}

/// The latency benchmark on a built engine for `model`.
pub fn run_latency(args: &LatencyArgs, engine: &mut Engine, model: &Model) -> Result<()> {
    let config = LatencyConfig {
        batch_size: args.batch_size,
        input_len: args.input_len,
        output_len: args.output_len,
        num_iters_warmup: args.num_iters_warmup,
        num_iters: args.num_iters,
        seed: args.seed,
        vocab_size: model.config.vocab_size,
        progress: true,
    };
    eprintln!(
        "latency: batch {} × ({} prompt + {} generated tokens); {} warm-up, {} timed iterations",
        config.batch_size, config.input_len, config.output_len, config.num_iters_warmup, config.num_iters
    );
    let result = latency::run(engine, &config)?;
    if result.cached_prompt_tokens > 0 {
        eprintln!(
            "prefix cache: {} of {} prompt tokens (every iteration repeats the same prompts; \
             --no-prefix-caching turns it off)",
            result.cached_prompt_tokens, result.prompt_tokens
        );
    }
    print!("{}", result.report());
    if let Some(path) = &args.output_json {
        write_json(path, &result)?;
    }
    Ok(())
}

/// `peregrine bench throughput`.
pub fn throughput(args: ThroughputArgs) -> Result<()> {
    let (model, mut engine) = load(&args.model, &args.engine)?;
    run_throughput(&args, &mut engine, &model)
}

/// The throughput benchmark on a built engine for `model`.
pub fn run_throughput(args: &ThroughputArgs, engine: &mut Engine, model: &Model) -> Result<()> {
    if args.num_prompts == 0 {
        bail!("--num-prompts must be at least 1");
    }
    let requests = match &args.dataset {
        Some(path) => {
            let tokenizer = model.tokenizer().context("--dataset needs the model's tokenizer")?;
            let reqs =
                throughput::load_sharegpt(path, tokenizer, args.num_prompts, args.seed, args.output_len)?;
            if reqs.len() < args.num_prompts {
                eprintln!(
                    "warning: {} has {} usable conversations, fewer than --num-prompts {}",
                    path.display(),
                    reqs.len(),
                    args.num_prompts
                );
            }
            reqs
        }
        None => {
            let input_len = args.input_len.context("--input-len is needed without --dataset")?;
            let output_len = args.output_len.unwrap_or(DEFAULT_RANDOM_OUTPUT_LEN);
            if input_len == 0 {
                bail!("--input-len must be at least 1");
            }
            throughput::random_requests(
                args.num_prompts,
                input_len,
                output_len,
                model.config.vocab_size,
                args.seed,
            )
        }
    };
    if requests.is_empty() {
        bail!("no requests to run");
    }
    let prompt: usize = requests.iter().map(|r| r.prompt.len()).sum();
    let output: usize = requests.iter().map(|r| r.output_len).sum();
    eprintln!("throughput: {} requests, {prompt} prompt + {output} generated tokens", requests.len());
    let result = throughput::run(engine, &requests, true)?;
    if result.cached_prompt_tokens > 0 {
        eprintln!(
            "prefix cache: {} of {} prompt tokens",
            result.cached_prompt_tokens, result.total_prompt_tokens
        );
    }
    print!("{}", result.report());
    if let Some(path) = &args.output_json {
        write_json(path, &result)?;
    }
    Ok(())
}
