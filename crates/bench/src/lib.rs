//! Offline benchmarks of the engine, after vLLM's `benchmarks/benchmark_latency.py`
//! (`latency`: the wall time of one batch run to completion, repeated) and
//! `benchmarks/benchmark_throughput.py` (`throughput`: many requests submitted at once,
//! requests and tokens per second). Both drive an already-built [`Engine`] on the
//! calling thread, step by step, as vLLM's `LLM.generate` drives its engine; their
//! results serialize to the JSON vLLM writes with `--output-json`.
//!
//! `stats` has numpy's mean and percentiles, computed as numpy does.

pub mod latency;
pub mod stats;
pub mod throughput;

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use peregrine_engine::engine::Engine;
use peregrine_engine::request::{Event, GenerateRequest, RequestId, Usage};
use peregrine_engine::sampler::SamplingParams;
use serde::Serialize;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// One benchmark request: prompt token ids and exactly how many tokens to generate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BenchRequest {
    pub prompt: Vec<u32>,
    pub output_len: usize,
}

impl BenchRequest {
    /// The engine request: greedy, `max_tokens = output_len` and `ignore_eos`, so that
    /// every request generates exactly `output_len` tokens (vLLM's benchmarks sample at
    /// temperature 1; greedy keeps runs reproducible and costs the same per token).
    pub fn to_request(&self) -> GenerateRequest {
        let mut req = GenerateRequest::new(self.prompt.clone(), SamplingParams::default());
        req.max_tokens = Some(self.output_len);
        req.ignore_eos = true;
        req
    }
}

/// What one request produced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completed {
    /// `Token` events received: the generated tokens.
    pub tokens: usize,
    /// The engine's count (prompt, completion, prompt tokens found in the prefix cache).
    pub usage: Usage,
}

/// Checks that the engine can run each request to its full length before anything
/// is timed: it accepts the prompt, and prompt + output fits in max_model_len (else
/// the request would stop early and the benchmark would measure less work).
pub fn check_requests(engine: &Engine, requests: &[BenchRequest]) -> Result<()> {
    let max_len = engine.max_model_len();
    for (i, r) in requests.iter().enumerate() {
        if r.output_len == 0 {
            bail!("request {i}: output length must be at least 1");
        }
        if r.prompt.len() + r.output_len > max_len {
            bail!(
                "request {i}: prompt ({}) + output ({}) tokens exceed max_model_len {max_len} \
                 (raise --max-model-len or --kv-cache-memory, or shorten the request)",
                r.prompt.len(),
                r.output_len
            );
        }
        engine.check(&r.to_request()).map_err(|e| anyhow::anyhow!("request {i}: {e}"))?;
    }
    Ok(())
}

/// Submits every request at once and steps the engine until all have finished, on this
/// thread. `on_done` is called as each request finishes (for a progress bar). Returns
/// what each produced, in order. The engine must be idle; it is idle again on return,
/// also on error (unfinished requests are aborted).
pub fn run_to_completion(
    engine: &mut Engine,
    requests: &[BenchRequest],
    mut on_done: impl FnMut(),
) -> Result<Vec<Completed>> {
    if engine.has_work() {
        bail!("the engine already has requests in flight");
    }
    let mut receivers: Vec<Option<UnboundedReceiver<Event>>> = Vec::with_capacity(requests.len());
    let mut results = vec![Completed::default(); requests.len()];
    for (i, r) in requests.iter().enumerate() {
        let (tx, rx) = unbounded_channel();
        if let Err(e) = engine.add_request(i as RequestId, r.to_request(), tx) {
            abort_all(engine, i);
            bail!("request {i} refused: {e}");
        }
        receivers.push(Some(rx));
    }
    let mut open = requests.len();
    // Steps that computed nothing while requests were open: the scheduler is stuck.
    let mut idle_steps = 0usize;
    while open > 0 {
        let computed = engine.step();
        for (i, slot) in receivers.iter_mut().enumerate() {
            let Some(rx) = slot else { continue };
            while let Ok(event) = rx.try_recv() {
                match event {
                    Event::Token { .. } => results[i].tokens += 1,
                    Event::Done(usage) => {
                        results[i].usage = usage;
                        *slot = None;
                        open -= 1;
                        on_done();
                        break;
                    }
                    Event::Error(e) => {
                        abort_all(engine, requests.len());
                        bail!("request {i} failed: {e}");
                    }
                    Event::Scheduled | Event::PromptLogprobs(_) | Event::Finished { .. } => {}
                }
            }
        }
        idle_steps = if computed == 0 { idle_steps + 1 } else { 0 };
        if open > 0 && (idle_steps > 1000 || !engine.has_work()) {
            abort_all(engine, requests.len());
            bail!("the engine stopped making progress with {open} requests unfinished");
        }
    }
    Ok(results)
}

/// Aborts requests 0..n (those not finished) and lets the engine settle.
fn abort_all(engine: &mut Engine, n: usize) {
    for id in 0..n {
        engine.abort(id as RequestId);
    }
    while engine.has_work() && engine.step() > 0 {}
}

/// A tqdm-like bar on stderr (`desc:  40%|████      | 4/10 [2s<3s, 2.00it/s]`), its
/// clock redrawn twice a second so that long iterations show progress; hidden when
/// `visible` is false or stderr is not a terminal.
pub fn progress_bar(len: usize, desc: &str, visible: bool) -> ProgressBar {
    if !visible {
        return ProgressBar::with_draw_target(Some(len as u64), ProgressDrawTarget::hidden());
    }
    let bar = ProgressBar::with_draw_target(Some(len as u64), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{msg}: {percent:>3}%|{wide_bar}| {pos}/{len} [{elapsed}<{eta}, {rate}]",
    )
    .expect("valid template")
    .with_key("rate", |state: &ProgressState, w: &mut dyn std::fmt::Write| {
        // tqdm's rate: items per second, or seconds per item when slower than one a second.
        let per_sec = state.per_sec();
        let _ = if state.pos() == 0 || !per_sec.is_finite() {
            write!(w, "?it/s")
        } else if per_sec >= 1.0 {
            write!(w, "{per_sec:.2}it/s")
        } else {
            write!(w, "{:.2}s/it", 1.0 / per_sec)
        };
    })
    .progress_chars("█▉▊▋▌▍▎▏ ");
    bar.set_style(style);
    bar.set_message(desc.to_string());
    bar.enable_steady_tick(Duration::from_millis(500));
    bar
}

/// JSON as Python's `json.dump(results, f, indent=4)` lays it out.
pub fn to_json_string<T: Serialize>(value: &T) -> String {
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    value.serialize(&mut ser).expect("benchmark results serialize");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Writes `value` to `path` as `to_json_string` lays it out.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    std::fs::write(path, to_json_string(value)).with_context(|| format!("writing {}", path.display()))
}
