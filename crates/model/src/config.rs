//! The hyper-parameters of a Llama-family model, read from a Hugging Face
//! `config.json` or from GGUF metadata.

use serde_json::Value;

use crate::gguf::GgufFile;
use crate::ModelError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    /// Llama 2/3/3.1, CodeLlama, SmolLM: the base case.
    Llama,
    /// Llama with sliding-window attention in its config (we attend to the full context).
    Mistral,
    /// Llama with a bias on the q/k/v projections.
    Qwen2,
}

impl Architecture {
    pub fn name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Mistral => "mistral",
            Self::Qwen2 => "qwen2",
        }
    }
}

/// How positions are stretched beyond the trained context.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor` (all frequencies divided by it).
    Linear {
        factor: f64,
    },
    /// Llama 3.1's frequency-dependent scaling.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: f64,
    },
    /// Per-frequency divisors stored in a GGUF `rope_freqs.weight` tensor (llama.cpp's
    /// encoding of Llama 3.1 scaling), filled in by the GGUF loader.
    FreqFactors(Vec<f32>),
}

#[derive(Clone, Debug)]
pub struct ModelConfig {
    pub architecture: Architecture,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f64,
    pub rope_scaling: RopeScaling,
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    pub qkv_bias: bool,
}

fn need_usize(v: &Value, key: &str) -> Result<usize, ModelError> {
    v.get(key)
        .and_then(Value::as_u64)
        .map(|x| x as usize)
        .ok_or_else(|| ModelError::Config(format!("config.json: `{key}` is missing or not an integer")))
}

impl ModelConfig {
    /// From a Hugging Face `config.json`.
    pub fn from_hf_json(v: &Value) -> Result<Self, ModelError> {
        let arch_name = v
            .get("architectures")
            .and_then(|a| a.get(0))
            .and_then(Value::as_str)
            .or_else(|| v.get("model_type").and_then(Value::as_str))
            .unwrap_or("");
        let architecture = match arch_name {
            "LlamaForCausalLM" | "llama" => Architecture::Llama,
            "MistralForCausalLM" | "mistral" => Architecture::Mistral,
            "Qwen2ForCausalLM" | "qwen2" => Architecture::Qwen2,
            other => {
                return Err(ModelError::Unsupported(format!(
                "architecture {other:?} (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM)"
            )))
            }
        };
        let hidden_size = need_usize(v, "hidden_size")?;
        let num_heads = need_usize(v, "num_attention_heads")?;
        let num_kv_heads =
            v.get("num_key_value_heads").and_then(Value::as_u64).map_or(num_heads, |x| x as usize);
        let head_dim =
            v.get("head_dim").and_then(Value::as_u64).map_or(hidden_size / num_heads.max(1), |x| x as usize);
        let f = |key: &str, default: f64| v.get(key).and_then(Value::as_f64).unwrap_or(default);
        let rope_scaling = match v.get("rope_scaling").or_else(|| v.get("rope_parameters")) {
            None | Some(Value::Null) => RopeScaling::None,
            Some(rs) => {
                let ty = rs
                    .get("rope_type")
                    .or_else(|| rs.get("type"))
                    .and_then(Value::as_str)
                    .unwrap_or("default");
                let g = |key: &str, default: f64| rs.get(key).and_then(Value::as_f64).unwrap_or(default);
                match ty {
                    "default" => RopeScaling::None,
                    "linear" => RopeScaling::Linear { factor: g("factor", 1.0) },
                    "llama3" => RopeScaling::Llama3 {
                        factor: g("factor", 8.0),
                        low_freq_factor: g("low_freq_factor", 1.0),
                        high_freq_factor: g("high_freq_factor", 4.0),
                        original_max_position_embeddings: g("original_max_position_embeddings", 8192.0),
                    },
                    other => return Err(ModelError::Unsupported(format!("rope scaling type {other:?}"))),
                }
            }
        };
        let rope_theta = v
            .get("rope_theta")
            .or_else(|| v.get("rope_parameters").and_then(|r| r.get("rope_theta")))
            .and_then(Value::as_f64)
            .unwrap_or(10000.0);
        let cfg = Self {
            architecture,
            hidden_size,
            intermediate_size: need_usize(v, "intermediate_size")?,
            num_layers: need_usize(v, "num_hidden_layers")?,
            num_heads,
            num_kv_heads,
            head_dim,
            vocab_size: need_usize(v, "vocab_size")?,
            rms_norm_eps: f("rms_norm_eps", 1e-6) as f32,
            rope_theta,
            rope_scaling,
            max_position_embeddings: v.get("max_position_embeddings").and_then(Value::as_u64).unwrap_or(4096)
                as usize,
            tie_word_embeddings: v.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false),
            qkv_bias: v
                .get("attention_bias")
                .and_then(Value::as_bool)
                .unwrap_or(architecture == Architecture::Qwen2),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// From GGUF metadata (`<arch>.*` keys). `vocab_size` falls back to the token list.
    pub fn from_gguf(f: &GgufFile) -> Result<Self, ModelError> {
        let arch = f
            .architecture()
            .ok_or_else(|| ModelError::Config("GGUF: general.architecture is missing".into()))?;
        let architecture = match arch {
            "llama" => Architecture::Llama,
            "mistral" => Architecture::Mistral,
            "qwen2" => Architecture::Qwen2,
            other => return Err(ModelError::Unsupported(format!("GGUF architecture {other:?}"))),
        };
        let key = |k: &str| format!("{arch}.{k}");
        let need = |k: &str| {
            f.get_u64(&key(k))
                .map(|x| x as usize)
                .ok_or_else(|| ModelError::Config(format!("GGUF: {} is missing or not an integer", key(k))))
        };
        let hidden_size = need("embedding_length")?;
        let num_heads = need("attention.head_count")?;
        let num_kv_heads = f.get_u64(&key("attention.head_count_kv")).map_or(num_heads, |x| x as usize);
        let head_dim = f
            .get_u64(&key("attention.key_length"))
            .or_else(|| f.get_u64(&key("rope.dimension_count")))
            .map_or(hidden_size / num_heads.max(1), |x| x as usize);
        let vocab_size = match f.get_u64(&key("vocab_size")) {
            Some(v) => v as usize,
            None => f.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()).map(|a| a.len()).ok_or_else(
                || ModelError::Config("GGUF: no vocab_size and no tokenizer.ggml.tokens".into()),
            )?,
        };
        let rope_scaling = match f.get_str(&key("rope.scaling.type")) {
            None | Some("none") => RopeScaling::None,
            Some("linear") => {
                RopeScaling::Linear { factor: f.get_f64(&key("rope.scaling.factor")).unwrap_or(1.0) }
            }
            Some(other) => return Err(ModelError::Unsupported(format!("GGUF rope scaling type {other:?}"))),
        };
        let cfg = Self {
            architecture,
            hidden_size,
            intermediate_size: need("feed_forward_length")?,
            num_layers: need("block_count")?,
            num_heads,
            num_kv_heads,
            head_dim,
            vocab_size,
            rms_norm_eps: f.get_f64(&key("attention.layer_norm_rms_epsilon")).unwrap_or(1e-5) as f32,
            rope_theta: f.get_f64(&key("rope.freq_base")).unwrap_or(10000.0),
            rope_scaling,
            max_position_embeddings: f.get_u64(&key("context_length")).unwrap_or(4096) as usize,
            tie_word_embeddings: f.tensor("output.weight").is_none(),
            qkv_bias: f.tensor("blk.0.attn_q.bias").is_some(),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ModelError> {
        let bad = |m: String| Err(ModelError::Config(m));
        if self.num_heads == 0 || self.num_kv_heads == 0 || !self.num_heads.is_multiple_of(self.num_kv_heads)
        {
            return bad(format!(
                "num_attention_heads ({}) must be a positive multiple of num_key_value_heads ({})",
                self.num_heads, self.num_kv_heads
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return bad(format!("head_dim ({}) must be even and positive", self.head_dim));
        }
        if self.hidden_size == 0
            || self.num_layers == 0
            || self.vocab_size == 0
            || self.intermediate_size == 0
        {
            return bad(
                "hidden_size, num_hidden_layers, vocab_size and intermediate_size must be positive".into()
            );
        }
        Ok(())
    }

    /// RoPE inverse frequencies of one head (head_dim / 2 values), scaling applied,
    /// as transformers' `_compute_default_rope_parameters` / `_compute_llama3_parameters`.
    pub fn rope_inv_freq(&self) -> Vec<f32> {
        let d = self.head_dim;
        let base: Vec<f64> =
            (0..d / 2).map(|i| 1.0 / self.rope_theta.powf((2 * i) as f64 / d as f64)).collect();
        match &self.rope_scaling {
            RopeScaling::None => base.iter().map(|&x| x as f32).collect(),
            RopeScaling::Linear { factor } => base.iter().map(|&x| (x / factor) as f32).collect(),
            RopeScaling::FreqFactors(ff) => {
                base.iter().zip(ff).map(|(&x, &f)| (x / f as f64) as f32).collect()
            }
            &RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => {
                let low_wavelen = original_max_position_embeddings / low_freq_factor;
                let high_wavelen = original_max_position_embeddings / high_freq_factor;
                base.iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f64::consts::PI / f;
                        let scaled = if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (original_max_position_embeddings / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        };
                        scaled as f32
                    })
                    .collect()
            }
        }
    }

    /// Parameters in the weight matrices (embeddings counted once when tied).
    /// n_kv_heads · head_dim: one token's K (or V) in one layer.
    pub fn kv_dim(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }

    pub fn parameter_count(&self) -> u64 {
        let (h, ff, v) = (self.hidden_size as u64, self.intermediate_size as u64, self.vocab_size as u64);
        let q = (self.num_heads * self.head_dim) as u64;
        let kv = (self.num_kv_heads * self.head_dim) as u64;
        let per_layer = h * q + 2 * h * kv + q * h + 3 * h * ff + 2 * h;
        let head = if self.tie_word_embeddings { 0 } else { v * h };
        v * h + head + self.num_layers as u64 * per_layer + h
    }
}
