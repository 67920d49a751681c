//! `peregrine watermark detect`: scores text for the Kirchenbauer et al. green-list
//! watermark (see `peregrine_engine::watermark`) and prints one JSON object.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{ArgGroup, Args};
use peregrine_engine::watermark::WatermarkConfig;
use peregrine_model::load::Model;
use serde_json::json;

use crate::ModelArgs;

/// Score text for the green-list watermark; prints one JSON object.
#[derive(Args, Debug)]
#[command(group(ArgGroup::new("input").required(true).args(["text", "file"])))]
pub struct WatermarkDetectArgs {
    // The model whose tokenizer generated the text.
    #[command(flatten)]
    pub model: ModelArgs,
    /// The text to score ("-" reads stdin).
    #[arg(long)]
    pub text: Option<String>,
    /// A file holding the text to score ("-" reads stdin).
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Fraction of the vocabulary in each green list; must match the generator's.
    #[arg(long, default_value_t = WatermarkConfig::default().gamma)]
    pub gamma: f32,
    /// Secret key of the green lists; must match the generator's.
    #[arg(long, default_value_t = WatermarkConfig::default().key)]
    pub key: u64,
    /// Report `watermarked` when the z-score exceeds this.
    #[arg(long, default_value_t = 4.0)]
    pub threshold: f64,
}

pub fn run(args: WatermarkDetectArgs) -> Result<()> {
    let config = WatermarkConfig { gamma: args.gamma, key: args.key, ..WatermarkConfig::default() };
    if let Err(e) = config.validate() {
        bail!("{e}");
    }
    let text = read_text(&args)?;
    let model = Model::load(&args.model.model, args.model.load_format())
        .with_context(|| format!("loading model {}", args.model.model))?;
    let tokenizer = model.tokenizer()?;
    // The generated text alone, as the generator saw its own tokens: no BOS or other specials.
    let tokens = tokenizer.encode(&text, false)?;
    let d = config.detect(&tokens);
    let out = json!({
        "tokens_scored": d.tokens_scored,
        "green": d.green,
        "green_fraction": d.green_fraction,
        "z_score": d.z_score,
        "p_value": d.p_value,
        "watermarked": d.z_score > args.threshold,
    });
    println!("{out}");
    Ok(())
}

fn read_text(args: &WatermarkDetectArgs) -> Result<String> {
    let stdin = || -> Result<String> {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).context("reading stdin")?;
        Ok(s)
    };
    match (&args.text, &args.file) {
        (Some(t), _) if t == "-" => stdin(),
        (Some(t), _) => Ok(t.clone()),
        (None, Some(p)) if p.as_os_str() == "-" => stdin(),
        (None, Some(p)) => std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display())),
        (None, None) => bail!("give --text or --file"),
    }
}
