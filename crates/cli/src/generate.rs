//! `peregrine generate`: one prompt (or chat), streamed to stdout, speeds at the end.

use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use peregrine_engine::handle::EngineHandle;
use peregrine_engine::request::{Event, GenerateRequest};
use peregrine_engine::sampler::SamplingParams;
use serde_json::{json, Value};

use crate::engine_args::EngineArgs;
use crate::{batch, ModelArgs};

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Offline batch mode: a JSONL file of requests ({"prompt": …} or {"messages": …},
    /// optional "max_tokens", "temperature", …), all run through the engine at once.
    #[arg(long, conflicts_with_all = ["prompt", "messages"])]
    pub input: Option<String>,
    /// Where batch mode writes one JSON result per input line ("-": stdout).
    #[arg(long, default_value = "-", requires = "input")]
    pub output: String,
    /// The prompt (raw text, or the user message with --chat); @file reads a file.
    #[arg(long, short = 'p')]
    pub prompt: Option<String>,
    /// Wrap --prompt in the model's chat template as a user message.
    #[arg(long)]
    pub chat: bool,
    /// System message for --chat.
    #[arg(long)]
    pub system: Option<String>,
    /// Chat messages as JSON ([{"role": "user", "content": "…"}]) or @file.json.
    #[arg(long, conflicts_with = "prompt")]
    pub messages: Option<String>,
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Keep tokens with probability ≥ min_p · the most likely one's (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    /// Locally typical sampling mass (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub typical_p: f32,
    /// > 1 discourages tokens of the prompt and output (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub repetition_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Keep generating past end-of-sequence tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Stop at this text (not included in the output); repeatable.
    #[arg(long)]
    pub stop: Vec<String>,
    /// Suppress end-of-sequence and stops until this many tokens were generated.
    #[arg(long, default_value_t = 0)]
    pub min_tokens: usize,
    /// Watermark the output (Kirchenbauer et al.; see `peregrine watermark detect`).
    #[arg(long)]
    pub watermark: bool,
    /// Benchmarks: repeat the tokenized prompt cyclically to exactly this many tokens
    /// (as llama-bench's pp tests use a fixed prompt length).
    #[arg(long)]
    pub prompt_tokens: Option<usize>,
}

pub fn run(args: GenerateArgs) -> Result<()> {
    let params = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        typical_p: args.typical_p,
        repetition_penalty: args.repetition_penalty,
        frequency_penalty: args.frequency_penalty,
        presence_penalty: args.presence_penalty,
        seed: args.seed,
        logit_bias: Vec::new(),
    };
    if let Err(e) = params.validate() {
        bail!("{e}");
    }
    let device = args.model.device()?;
    let model = args.model.load_reporting(device)?;
    let (engine, plan) = args.engine.build_on(model.clone(), device, args.model.threads, false)?;
    eprintln!("{plan}");
    let handle = EngineHandle::spawn(engine);
    if let Some(input) = &args.input {
        return batch::run(&args, &model, &handle, params, input);
    }
    let tokenizer = model.tokenizer()?;

    let prompt_ids = if let Some(messages) = chat_messages(&args)? {
        let template = tokenizer
            .chat_template()
            .context("this model has no chat template; use --prompt without --chat")?;
        let text = template.render(&messages, true, None)?;
        // The template already contains any BOS it wants.
        tokenizer.encode(&text, false)?
    } else {
        let prompt = args.prompt.as_deref().context("give --prompt or --messages")?;
        match prompt.strip_prefix('@') {
            Some(path) => {
                let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
                tokenizer.encode(&text, true)?
            }
            None => tokenizer.encode(prompt, true)?,
        }
    };
    let prompt_ids = match args.prompt_tokens {
        Some(n) if !prompt_ids.is_empty() => prompt_ids.iter().copied().cycle().take(n).collect(),
        _ => prompt_ids,
    };
    if prompt_ids.is_empty() {
        bail!("the prompt is empty after tokenization");
    }

    let n_prompt = prompt_ids.len();
    let mut req = GenerateRequest::new(prompt_ids, params);
    req.max_tokens = Some(args.max_tokens);
    req.ignore_eos = args.ignore_eos;
    req.stop = args.stop.clone();
    req.min_tokens = args.min_tokens;
    req.watermark = args.watermark;
    let mut stream = handle.submit(req);

    // The first token comes with the prefill; the rest are decode steps.
    let t0 = Instant::now();
    let (mut t_first, mut generated) = (None, 0usize);
    let mut stdout = std::io::stdout().lock();
    while let Some(event) = stream.blocking_next() {
        match event {
            Event::Token { text, .. } => {
                t_first.get_or_insert_with(Instant::now);
                generated += 1;
                stdout.write_all(text.as_bytes())?;
                stdout.flush()?;
            }
            Event::Finished { text, .. } => stdout.write_all(text.as_bytes())?,
            Event::Error(e) => bail!("{e}"),
            Event::Done(_) | Event::PromptLogprobs(_) | Event::Scheduled => {}
        }
    }
    writeln!(stdout)?;
    let end = Instant::now();
    let t_first = t_first.unwrap_or(end);
    let prefill_s = (t_first - t0).as_secs_f64();
    let decode_s = (end - t_first).as_secs_f64();
    let decode_steps = generated.saturating_sub(1);
    eprintln!(
        "prompt: {n_prompt} tokens in {:.3}s ({:.1} tok/s); generation: {} tokens in {:.3}s ({:.1} tok/s)",
        prefill_s,
        n_prompt as f64 / prefill_s,
        generated,
        decode_s,
        if decode_s > 0.0 { decode_steps as f64 / decode_s } else { 0.0 }
    );
    handle.shutdown();
    Ok(())
}

/// The chat messages, if this is a chat request.
pub fn chat_messages(args: &GenerateArgs) -> Result<Option<Value>> {
    if let Some(m) = &args.messages {
        let text = match m.strip_prefix('@') {
            Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?,
            None => m.clone(),
        };
        let v: Value = serde_json::from_str(&text).context("--messages is not valid JSON")?;
        if !v.is_array() {
            bail!("--messages must be a JSON array of {{\"role\", \"content\"}} objects");
        }
        return Ok(Some(v));
    }
    if !args.chat {
        return Ok(None);
    }
    let prompt = args.prompt.as_deref().context("--chat needs --prompt")?;
    let prompt = match prompt.strip_prefix('@') {
        Some(path) => &std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?,
        None => prompt,
    };
    let mut messages = Vec::new();
    if let Some(s) = &args.system {
        messages.push(json!({"role": "system", "content": s}));
    }
    messages.push(json!({"role": "user", "content": prompt}));
    Ok(Some(Value::Array(messages)))
}
