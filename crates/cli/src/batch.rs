//! `peregrine generate --input prompts.jsonl`: offline batch mode. Every line is a
//! request; all are submitted at once and the engine batches them (up to
//! --max-num-seqs at a time). One JSON result per line goes to --output, and the
//! aggregate throughput to stderr.

use std::io::{BufRead, Write};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use peregrine_engine::handle::EngineHandle;
use peregrine_engine::request::{Event, GenerateRequest};
use peregrine_engine::sampler::SamplingParams;
use peregrine_model::load::Model;
use serde_json::{json, Value};

use crate::generate::GenerateArgs;

pub fn run(
    args: &GenerateArgs,
    model: &Model,
    handle: &EngineHandle,
    defaults: SamplingParams,
    input: &str,
) -> Result<()> {
    let tokenizer = model.tokenizer()?;
    let file = std::fs::File::open(input).with_context(|| format!("opening {input}"))?;
    let mut requests = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {input}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value =
            serde_json::from_str(&line).with_context(|| format!("{input}:{}: not valid JSON", i + 1))?;
        let req = request_from_json(&v, args, tokenizer, defaults.clone())
            .with_context(|| format!("{input}:{}", i + 1))?;
        requests.push(req);
    }
    if requests.is_empty() {
        bail!("{input} has no requests");
    }

    let t0 = Instant::now();
    let streams: Vec<_> = requests.into_iter().map(|r| handle.submit(r)).collect();
    let mut results = Vec::with_capacity(streams.len());
    let (mut generated, mut prompt, mut cached) = (0usize, 0usize, 0usize);
    // The engine runs them all at once; reading the streams in order only collects.
    for (index, stream) in streams.into_iter().enumerate() {
        // Per sample: (text, token ids, finish reason).
        let mut outputs: Vec<(String, Vec<u32>, String)> = Vec::new();
        for event in stream.collect_blocking() {
            match event {
                Event::Token { index, token, text, .. } => {
                    grow_to(&mut outputs, index);
                    outputs[index].0.push_str(&text);
                    outputs[index].1.push(token);
                }
                Event::Finished { index, reason, text, .. } => {
                    grow_to(&mut outputs, index);
                    outputs[index].0.push_str(&text);
                    outputs[index].2 = reason.openai().to_string();
                }
                Event::Done(u) => {
                    generated += u.completion_tokens;
                    prompt += u.prompt_tokens;
                    cached += u.cached_prompt_tokens;
                }
                Event::Error(e) => bail!("request {index}: {e}"),
                Event::PromptLogprobs(_) | Event::Scheduled => {}
            }
        }
        let outputs: Vec<Value> = outputs
            .into_iter()
            .enumerate()
            .map(|(i, (text, ids, reason))| {
                json!({"index": i, "text": text, "token_ids": ids, "finish_reason": reason})
            })
            .collect();
        results.push(json!({"index": index, "outputs": outputs}));
    }
    let secs = t0.elapsed().as_secs_f64();

    let mut out: Box<dyn Write> = match args.output.as_str() {
        "-" => Box::new(std::io::stdout().lock()),
        path => Box::new(std::fs::File::create(path).with_context(|| format!("creating {path}"))?),
    };
    for r in &results {
        writeln!(out, "{r}")?;
    }
    out.flush()?;
    let stats = handle.stats();
    eprintln!(
        "requests: {}; prefix cache: {cached} of {prompt} prompt tokens; preemptions: {}; steps: {}",
        results.len(),
        stats.preemptions_total,
        stats.steps
    );
    eprintln!(
        "aggregate: {generated} generated tokens, {prompt} prompt tokens in {secs:.3}s ({:.1} generated tok/s)",
        generated as f64 / secs
    );
    handle.shutdown();
    Ok(())
}

/// Makes `v[i]` exist.
fn grow_to<T: Default + Clone>(v: &mut Vec<T>, i: usize) {
    if v.len() <= i {
        v.resize(i + 1, T::default());
    }
}

/// One JSONL line → a request; fields absent from the line take the command line's values.
fn request_from_json(
    v: &Value,
    args: &GenerateArgs,
    tokenizer: &peregrine_model::tokenizer::Tokenizer,
    mut params: SamplingParams,
) -> Result<GenerateRequest> {
    let prompt = if let Some(ids) = v.get("prompt_token_ids") {
        serde_json::from_value::<Vec<u32>>(ids.clone()).context("prompt_token_ids must be a list of ids")?
    } else if let Some(m) = v.get("messages") {
        let template = tokenizer.chat_template().context("messages: this model has no chat template")?;
        tokenizer.encode(&template.render(m, true, None)?, false)?
    } else if let Some(p) = v.get("prompt") {
        tokenizer.encode(p.as_str().context("prompt must be a string")?, true)?
    } else {
        bail!("each line needs \"prompt\", \"messages\" or \"prompt_token_ids\"");
    };
    let f32_field = |k: &str| v.get(k).and_then(Value::as_f64).map(|x| x as f32);
    let u64_field = |k: &str| v.get(k).and_then(Value::as_u64);
    for (key, slot) in [
        ("temperature", &mut params.temperature),
        ("top_p", &mut params.top_p),
        ("min_p", &mut params.min_p),
        ("typical_p", &mut params.typical_p),
        ("repetition_penalty", &mut params.repetition_penalty),
        ("frequency_penalty", &mut params.frequency_penalty),
        ("presence_penalty", &mut params.presence_penalty),
    ] {
        if let Some(x) = f32_field(key) {
            *slot = x;
        }
    }
    if let Some(t) = u64_field("top_k") {
        params.top_k = t as usize;
    }
    if let Some(s) = u64_field("seed") {
        params.seed = Some(s);
    }
    let mut req = GenerateRequest::new(prompt, params);
    req.max_tokens = Some(u64_field("max_tokens").map_or(args.max_tokens, |m| m as usize));
    req.ignore_eos = v.get("ignore_eos").and_then(Value::as_bool).unwrap_or(args.ignore_eos);
    req.min_tokens = u64_field("min_tokens").map_or(args.min_tokens, |m| m as usize);
    req.stop = match v.get("stop") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a.iter().filter_map(|s| s.as_str().map(String::from)).collect(),
        _ => args.stop.clone(),
    };
    if let Some(n) = u64_field("n") {
        req.n = n as usize;
        req.best_of = req.n;
    }
    req.watermark = v.get("watermark").and_then(Value::as_bool).unwrap_or(args.watermark);
    req.validate().map_err(anyhow::Error::msg)?;
    Ok(req)
}
