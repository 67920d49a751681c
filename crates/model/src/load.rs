//! Loading a whole model: weights, config, tokenizer and generation defaults,
//! from a GGUF file, a Hugging Face directory, or random weights.

use std::path::Path;
use std::sync::Arc;

use peregrine_compute::cpu::RopeStyle;
use peregrine_compute::quant::WeightFormat;
use serde_json::Value;

use crate::config::{Architecture, ModelConfig};
use crate::gguf::GgufFile;
use crate::llama::Llama;
use crate::source::{resolve, ModelSource};
use crate::tokenizer::Tokenizer;
use crate::weights::{safetensors_files, WeightSet};
use crate::ModelError;

/// `--load-format`: read the weights, or make random ones from the config alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LoadFormat {
    #[default]
    Auto,
    /// Random weights in the given float format (`--load-format dummy`).
    Dummy(WeightFormat),
    /// Config and tokenizer only, no weights on the host: a device backend makes its
    /// own random weights (`--load-format dummy` with `--device cuda`).
    ConfigOnly,
}

/// A model ready to run.
pub struct Model {
    pub source: ModelSource,
    pub config: ModelConfig,
    /// The CPU forward pass; `None` for `LoadFormat::ConfigOnly`.
    pub llama: Option<Llama>,
    pub weights: WeightSet,
    /// How Q/K rows pair up for RoPE in these weights (GGUF llama files: interleaved).
    pub rope_style: RopeStyle,
    /// `None` for dummy models of a bare config.json. Shared: the engine's
    /// detokenizers and the server's request validation hold it too.
    pub tokenizer: Option<Arc<Tokenizer>>,
    /// Tokens that end generation: the tokenizer's eos plus generation_config.json's.
    pub eos_token_ids: Vec<u32>,
    /// The GGUF file, kept for `model inspect`.
    pub gguf: Option<GgufFile>,
}

impl Model {
    /// Resolves `spec` (path or hub id) and loads it.
    pub fn load(spec: &str, format: LoadFormat) -> Result<Self, ModelError> {
        let source = resolve(spec).or_else(|e| match format {
            // A dummy model needs only a config: accept a config.json file too.
            LoadFormat::Dummy(_) | LoadFormat::ConfigOnly
                if Path::new(spec).is_file() && spec.ends_with(".json") =>
            {
                Ok(ModelSource::HfDir(Path::new(spec).parent().unwrap_or(Path::new(".")).to_path_buf()))
            }
            _ => Err(e),
        })?;
        match &source {
            ModelSource::Gguf(path) => Self::load_gguf(source.clone(), path, format),
            ModelSource::HfDir(dir) => Self::load_hf(source.clone(), dir, format),
        }
    }

    fn load_gguf(source: ModelSource, path: &Path, format: LoadFormat) -> Result<Self, ModelError> {
        let f = GgufFile::open(path)?;
        let config = ModelConfig::from_gguf(&f)?;
        let weights = match format {
            LoadFormat::Auto => WeightSet::from_gguf(&f),
            LoadFormat::Dummy(wf) => WeightSet::dummy(&config, wf, 0)?,
            LoadFormat::ConfigOnly => WeightSet::empty(),
        };
        // llama.cpp's converter permutes Q/K of llama-arch models into interleaved
        // RoPE pairs; qwen2 files keep the Hugging Face (NeoX) layout.
        let rope = match config.architecture {
            Architecture::Llama | Architecture::Mistral => RopeStyle::Interleaved,
            Architecture::Qwen2 => RopeStyle::Neox,
        };
        let llama = Self::cpu_forward(&config, &weights, rope, format)?;
        let tokenizer = Tokenizer::from_gguf(&f).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        let eos_token_ids = tokenizer.eos_token_ids();
        Ok(Self {
            source,
            config,
            llama,
            weights,
            rope_style: rope,
            tokenizer: Some(Arc::new(tokenizer)),
            eos_token_ids,
            gguf: Some(f),
        })
    }

    fn load_hf(source: ModelSource, dir: &Path, format: LoadFormat) -> Result<Self, ModelError> {
        let config_path = dir.join("config.json");
        let config_json = read_json(&config_path)?;
        let config = ModelConfig::from_hf_json(&config_json)?;
        let weights = match format {
            LoadFormat::Auto => WeightSet::from_safetensors(&safetensors_files(dir)?, config.num_layers)?,
            LoadFormat::Dummy(wf) => WeightSet::dummy(&config, wf, 0)?,
            LoadFormat::ConfigOnly => WeightSet::empty(),
        };
        let llama = Self::cpu_forward(&config, &weights, RopeStyle::Neox, format)?;
        let tokenizer_path = dir.join("tokenizer.json");
        let tokenizer = if tokenizer_path.is_file() {
            let tc = dir.join("tokenizer_config.json");
            let tc = tc.is_file().then_some(tc);
            Some(Arc::new(
                Tokenizer::from_file(&tokenizer_path, tc.as_deref())
                    .map_err(|e| ModelError::Tokenizer(e.to_string()))?,
            ))
        } else {
            None
        };
        let mut eos_token_ids = tokenizer.as_deref().map(Tokenizer::eos_token_ids).unwrap_or_default();
        let gen_path = dir.join("generation_config.json");
        let gen_eos =
            if gen_path.is_file() { eos_ids(read_json(&gen_path)?.get("eos_token_id")) } else { Vec::new() };
        for id in gen_eos.into_iter().chain(eos_ids(config_json.get("eos_token_id"))) {
            if !eos_token_ids.contains(&id) {
                eos_token_ids.push(id);
            }
        }
        Ok(Self {
            source,
            config,
            llama,
            weights,
            rope_style: RopeStyle::Neox,
            tokenizer,
            eos_token_ids,
            gguf: None,
        })
    }

    fn cpu_forward(
        config: &ModelConfig,
        weights: &WeightSet,
        rope: RopeStyle,
        format: LoadFormat,
    ) -> Result<Option<Llama>, ModelError> {
        match format {
            LoadFormat::ConfigOnly => Ok(None),
            _ => Ok(Some(Llama::new(config.clone(), weights, rope)?)),
        }
    }

    /// The CPU forward pass, or an error for a model loaded without host weights.
    pub fn llama(&self) -> Result<&Llama, ModelError> {
        self.llama.as_ref().ok_or_else(|| {
            ModelError::Unsupported("this model was loaded without host weights (config only)".into())
        })
    }

    /// The tokenizer, or an error saying this model has none.
    pub fn tokenizer(&self) -> Result<&Arc<Tokenizer>, ModelError> {
        self.tokenizer.as_ref().ok_or_else(|| {
            ModelError::Tokenizer(format!("{} has no tokenizer.json", self.source.path().display()))
        })
    }
}

/// `eos_token_id` as an int or a list of ints.
fn eos_ids(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().map(|x| vec![x as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_u64).map(|x| x as u32).collect(),
        _ => Vec::new(),
    }
}

fn read_json(path: &Path) -> Result<Value, ModelError> {
    let text = std::fs::read_to_string(path).map_err(|e| ModelError::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| ModelError::Config(format!("{}: {e}", path.display())))
}
