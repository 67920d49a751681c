//! `/metrics` in the Prometheus text format (0.0.4).
//!
//! Names follow vLLM's (`vllm:` prefix) so that dashboards and benchmark tools built
//! for vLLM (happy_vllm's among them) read ours unchanged; what vLLM has no name for
//! is under `peregrine:`. Every sample carries `model_name`. Request-level series
//! (latency histograms, finish reasons) are recorded by `generation.rs`; engine
//! gauges and counters are read from the engine's per-step statistics at scrape time.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use peregrine_engine::engine::EngineStats;

use crate::admission::Counts;

const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
];
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
];
const REQUEST_SECONDS_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
];
const TOKEN_BUCKETS: &[f64] =
    &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0];

/// A cumulative histogram with fixed upper bounds.
#[derive(Clone, Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations ≤ bounds[i] (not yet cumulative); the last slot is +Inf.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self { bounds, counts: vec![0; bounds.len() + 1], sum: 0.0, count: 0 }
    }

    pub fn observe(&mut self, v: f64) {
        let i = self.bounds.iter().position(|&b| v <= b).unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    pub fn count(&self) -> u64 {
        self.count
    }
}

/// Which request-level histogram an observation goes to.
#[derive(Clone, Copy, Debug)]
pub enum Series {
    TimeToFirstToken,
    InterTokenLatency,
    EndToEnd,
    QueueTime,
    PromptTokens,
    GenerationTokens,
}

struct Recorded {
    finished: BTreeMap<&'static str, u64>,
    rejected: BTreeMap<&'static str, u64>,
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
    queue: Histogram,
    prompt_tokens: Histogram,
    generation_tokens: Histogram,
}

pub struct Metrics {
    model_name: String,
    recorded: Mutex<Recorded>,
}

impl Metrics {
    pub fn new(model_name: &str) -> Self {
        Self {
            model_name: model_name.to_string(),
            recorded: Mutex::new(Recorded {
                finished: BTreeMap::new(),
                rejected: BTreeMap::new(),
                ttft: Histogram::new(TTFT_BUCKETS),
                itl: Histogram::new(ITL_BUCKETS),
                e2e: Histogram::new(REQUEST_SECONDS_BUCKETS),
                queue: Histogram::new(REQUEST_SECONDS_BUCKETS),
                prompt_tokens: Histogram::new(TOKEN_BUCKETS),
                generation_tokens: Histogram::new(TOKEN_BUCKETS),
            }),
        }
    }

    pub fn observe(&self, series: Series, v: f64) {
        let mut r = self.recorded.lock().expect("metrics lock");
        match series {
            Series::TimeToFirstToken => r.ttft.observe(v),
            Series::InterTokenLatency => r.itl.observe(v),
            Series::EndToEnd => r.e2e.observe(v),
            Series::QueueTime => r.queue.observe(v),
            Series::PromptTokens => r.prompt_tokens.observe(v),
            Series::GenerationTokens => r.generation_tokens.observe(v),
        }
    }

    /// A request ended: "stop", "length" or "abort" (OpenAI's names).
    pub fn finished(&self, reason: &'static str) {
        *self.recorded.lock().expect("metrics lock").finished.entry(reason).or_default() += 1;
    }

    /// A request was refused before reaching the engine ("overloaded", "invalid", …).
    pub fn rejected(&self, reason: &'static str) {
        *self.recorded.lock().expect("metrics lock").rejected.entry(reason).or_default() += 1;
    }

    /// The exposition: engine statistics (`None` while loading) and admission counts.
    pub fn render(&self, engine: Option<&EngineStats>, admission: Counts) -> String {
        let mut w =
            Writer { out: String::new(), labels: format!("model_name=\"{}\"", escape(&self.model_name)) };
        w.gauge("peregrine:model_loaded", "1 once the model has loaded and the server is ready.", |w| {
            w.sample("peregrine:model_loaded", "", engine.is_some() as u64 as f64)
        });
        let e = engine.cloned().unwrap_or_default();
        let gauges: [(&str, &str, f64); 5] = [
            ("vllm:num_requests_running", "Sequences in the running batch.", e.running as f64),
            ("vllm:num_requests_waiting", "Sequences waiting to be scheduled.", e.waiting as f64),
            ("vllm:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (1 = full).", e.kv_usage),
            ("vllm:gpu_cache_usage_perc", "Alias of vllm:kv_cache_usage_perc (vLLM v0's name).", e.kv_usage),
            (
                "peregrine:prefix_cache_hit_rate",
                "Prefix-cache hits / queries since start (0 before any query).",
                if e.prefix_cache_queries > 0 {
                    e.prefix_cache_hits as f64 / e.prefix_cache_queries as f64
                } else {
                    0.0
                },
            ),
        ];
        for (name, help, v) in gauges {
            w.gauge(name, help, |w| w.sample(name, "", v));
        }
        let block = e.block_size as u64;
        let counters: [(&str, &str, u64); 6] = [
            (
                "vllm:prompt_tokens",
                "Prompt tokens computed (prefix-cache hits excluded).",
                e.prompt_tokens_total,
            ),
            ("vllm:generation_tokens", "Tokens generated.", e.generation_tokens_total),
            ("vllm:num_preemptions", "Sequences preempted for lack of KV blocks.", e.preemptions_total),
            (
                "vllm:prefix_cache_queries",
                "Prompt tokens looked up in the prefix cache (in whole blocks).",
                e.prefix_cache_queries * block,
            ),
            (
                "vllm:prefix_cache_hits",
                "Prompt tokens found in the prefix cache.",
                e.prefix_cache_hits * block,
            ),
            ("peregrine:engine_steps", "Engine steps (forward passes) run.", e.steps),
        ];
        for (name, help, v) in counters {
            w.counter(name, help, |w| w.sample(&format!("{name}_total"), "", v as f64));
        }
        let more_gauges: [(&str, &str, f64); 4] = [
            ("peregrine:kv_cache_blocks", "KV-cache blocks in the pool.", e.num_blocks as f64),
            (
                "peregrine:http_requests_in_flight",
                "HTTP generation requests admitted.",
                admission.active as f64,
            ),
            (
                "peregrine:queue_requests",
                "Requests admitted but not yet scheduled.",
                admission.queued_requests as f64,
            ),
            ("peregrine:queue_tokens", "Prompt tokens of queued requests.", admission.queued_tokens as f64),
        ];
        for (name, help, v) in more_gauges {
            w.gauge(name, help, |w| w.sample(name, "", v));
        }

        let r = self.recorded.lock().expect("metrics lock");
        w.counter("vllm:request_success", "Requests finished, by finish reason.", |w| {
            for reason in ["stop", "length", "abort"] {
                let n = r.finished.get(reason).copied().unwrap_or(0);
                w.sample("vllm:request_success_total", &format!("finished_reason=\"{reason}\""), n as f64);
            }
        });
        w.counter("peregrine:requests_rejected", "Requests refused before reaching the engine.", |w| {
            for (reason, n) in &r.rejected {
                w.sample("peregrine:requests_rejected_total", &format!("reason=\"{reason}\""), *n as f64);
            }
        });
        let histograms: [(&str, &str, &Histogram); 6] = [
            ("vllm:time_to_first_token_seconds", "Arrival to first token.", &r.ttft),
            ("vllm:inter_token_latency_seconds", "Time between consecutive tokens of a sample.", &r.itl),
            ("vllm:e2e_request_latency_seconds", "Arrival to last token.", &r.e2e),
            ("vllm:request_queue_time_seconds", "Arrival to first scheduled.", &r.queue),
            ("vllm:request_prompt_tokens", "Prompt tokens per request.", &r.prompt_tokens),
            ("vllm:request_generation_tokens", "Generated tokens per request.", &r.generation_tokens),
        ];
        for (name, help, h) in histograms {
            w.histogram(name, help, h);
        }
        w.out
    }
}

struct Writer {
    out: String,
    /// `model_name="…"`, on every sample.
    labels: String,
}

impl Writer {
    fn family(&mut self, name: &str, kind: &str, help: &str, body: impl FnOnce(&mut Self)) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        body(self);
    }

    fn gauge(&mut self, name: &str, help: &str, body: impl FnOnce(&mut Self)) {
        self.family(name, "gauge", help, body);
    }

    /// Declared with the `_total` name, as promtool's lint expects.
    fn counter(&mut self, name: &str, help: &str, body: impl FnOnce(&mut Self)) {
        self.family(&format!("{name}_total"), "counter", help, body);
    }

    fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        self.family(name, "histogram", help, |w| {
            let mut cumulative = 0;
            for (i, n) in h.counts.iter().enumerate() {
                cumulative += n;
                let le = h.bounds.get(i).map_or("+Inf".to_string(), |b| format!("{b}"));
                w.sample(&format!("{name}_bucket"), &format!("le=\"{le}\""), cumulative as f64);
            }
            w.sample(&format!("{name}_sum"), "", h.sum);
            w.sample(&format!("{name}_count"), "", h.count as f64);
        });
    }

    fn sample(&mut self, name: &str, extra_labels: &str, v: f64) {
        let sep = if extra_labels.is_empty() { "" } else { "," };
        let _ = writeln!(self.out, "{name}{{{}{sep}{extra_labels}}} {}", self.labels, number(v));
    }
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_with_sum_and_count() {
        let m = Metrics::new("m\"x");
        for v in [0.0005, 0.05, 0.05, 3000.0] {
            m.observe(Series::TimeToFirstToken, v);
        }
        let text = m.render(None, Counts::default());
        let line = |prefix: &str| {
            text.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("{prefix} in\n{text}"))
        };
        assert!(line("vllm:time_to_first_token_seconds_bucket{model_name=\"m\\\"x\",le=\"0.001\"}")
            .ends_with(" 1"));
        assert!(line("vllm:time_to_first_token_seconds_bucket{model_name=\"m\\\"x\",le=\"0.06\"}")
            .ends_with(" 3"));
        assert!(line("vllm:time_to_first_token_seconds_bucket{model_name=\"m\\\"x\",le=\"2560\"}")
            .ends_with(" 3"));
        assert!(line("vllm:time_to_first_token_seconds_bucket{model_name=\"m\\\"x\",le=\"+Inf\"}")
            .ends_with(" 4"));
        assert!(line("vllm:time_to_first_token_seconds_count").ends_with(" 4"));
        assert!(line("peregrine:model_loaded").ends_with(" 0"));
    }
}
