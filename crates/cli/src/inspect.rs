//! `peregrine model inspect`: what a model is, without running it.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use clap::Args;
use peregrine_model::config::RopeScaling;
use peregrine_model::load::Model;

use crate::ModelArgs;

#[derive(Args, Debug)]
pub struct InspectArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Also list every GGUF metadata key.
    #[arg(long)]
    pub metadata: bool,
    /// Print the whole chat template.
    #[arg(long)]
    pub template: bool,
}

fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

pub fn run(args: InspectArgs) -> Result<()> {
    let model = Model::load(&args.model.model, args.model.load_format())
        .with_context(|| format!("loading model {}", args.model.model))?;
    let c = &model.config;
    println!("model:          {}", model.source.path().display());
    println!("weights:        {}", model.weights.description);
    println!("architecture:   {}", c.architecture.name());
    println!("parameters:     {:.1} M", c.parameter_count() as f64 / 1e6);
    println!("layers:         {}", c.num_layers);
    println!("hidden size:    {}  (intermediate {})", c.hidden_size, c.intermediate_size);
    println!(
        "attention:      {} heads, {} kv heads (GQA group {}), head dim {}{}",
        c.num_heads,
        c.num_kv_heads,
        c.num_heads / c.num_kv_heads,
        c.head_dim,
        if c.qkv_bias { ", qkv bias" } else { "" }
    );
    let scaling = match &c.rope_scaling {
        RopeScaling::None => "none".to_string(),
        RopeScaling::Linear { factor } => format!("linear ×{factor}"),
        RopeScaling::Llama3 { factor, .. } => format!("llama3 ×{factor}"),
        RopeScaling::FreqFactors(f) => format!("per-frequency factors ({})", f.len()),
    };
    println!("rope:           theta {}, scaling {scaling}", c.rope_theta);
    println!("context length: {}", c.max_position_embeddings);
    println!("rms norm eps:   {}", c.rms_norm_eps);
    println!(
        "vocabulary:     {}{}",
        c.vocab_size,
        if c.tie_word_embeddings { " (tied embeddings)" } else { "" }
    );

    let mut mix: BTreeMap<&str, (usize, u64, u64)> = BTreeMap::new();
    for t in model.weights.iter() {
        let e = mix.entry(t.format.name()).or_default();
        e.0 += 1;
        e.1 += t.n_elements() as u64;
        e.2 += t.bytes().len() as u64;
    }
    println!("weights size:   {}", human_bytes(model.weights.total_bytes() as u64));
    println!("quantization mix:");
    for (name, (n, elems, bytes)) in &mix {
        println!(
            "  {name:<6} {n:>4} tensors  {:>9.2} M values  {:>10}  ({:.2} bits/value)",
            *elems as f64 / 1e6,
            human_bytes(*bytes),
            *bytes as f64 * 8.0 / (*elems).max(1) as f64
        );
    }
    match &model.tokenizer {
        None => println!("tokenizer:      none"),
        Some(t) => {
            let name = |id: Option<u32>| id.and_then(|i| t.id_to_token(i)).unwrap_or_else(|| "-".into());
            println!("tokenizer:      {:?} ({} tokens)", t.byte_encoding(), t.vocab_size());
            println!("  bos:          {} ({:?})", name(t.bos_token_id()), t.bos_token_id());
            let eos: Vec<String> =
                model.eos_token_ids.iter().map(|&i| format!("{} ({i})", name(Some(i)))).collect();
            println!("  eos:          {}", eos.join(", "));
            match t.chat_template() {
                None => println!("chat template:  none"),
                Some(tpl) if args.template => println!("chat template:\n{}", tpl.source()),
                Some(tpl) => {
                    let src = tpl.source();
                    let head: String = src.chars().take(120).collect();
                    println!("chat template:  {} chars: {head:?}…  (--template prints it all)", src.len());
                }
            }
        }
    }
    if let Some(f) = &model.gguf {
        println!(
            "gguf:           version {}, {} tensors, {} metadata keys, alignment {}",
            f.version,
            f.tensors.len(),
            f.metadata.len(),
            f.alignment
        );
        if args.metadata {
            for (k, v) in &f.metadata {
                println!("  {k} = {v}");
            }
        }
    }
    Ok(())
}
