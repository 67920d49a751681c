//! Weight tensors and where they come from: a GGUF file, Hugging Face
//! safetensors files (memory-mapped), or random values (`--load-format dummy`).
//!
//! Every source answers by llama.cpp's tensor names (`blk.3.attn_q.weight`, …);
//! the safetensors source translates Hugging Face names into them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use half::{bf16, f16};
use peregrine_compute::cpu::QMatrix;
use peregrine_compute::quant::{dequantize_row, WeightFormat};
use rand::{Rng, SeedableRng};

use crate::config::ModelConfig;
use crate::gguf::GgufFile;
use crate::storage::Storage;
use crate::ModelError;

/// A tensor whose bytes live in shared storage. `shape` is row-major (outermost
/// first, as in PyTorch): a matrix is `[rows, cols]`, each row contiguous.
#[derive(Clone)]
pub struct Tensor {
    pub name: String,
    pub format: WeightFormat,
    pub shape: Vec<usize>,
    storage: Arc<Storage>,
    offset: usize,
    len: usize,
}

impl Tensor {
    pub fn bytes(&self) -> &[u8] {
        &self.storage.bytes()[self.offset..self.offset + self.len]
    }

    pub fn n_elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// The tensor as a matrix `[rows, cols]` (a 1-D tensor is one row).
    pub fn matrix(&self) -> QMatrix<'_> {
        let cols = *self.shape.last().unwrap_or(&1);
        let rows = self.n_elements() / cols.max(1);
        QMatrix::new(self.format, rows, cols, self.bytes()).expect("tensor size checked when loaded")
    }

    /// All values as f32 (for norms and biases, which are small).
    pub fn to_f32(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.n_elements()];
        dequantize_row(self.format, self.bytes(), &mut out).expect("tensor size checked when loaded");
        out
    }

    pub fn check_shape(&self, want: &[usize]) -> Result<(), ModelError> {
        if self.shape != want {
            return Err(ModelError::Weights(format!(
                "{}: shape {:?}, expected {:?}",
                self.name, self.shape, want
            )));
        }
        Ok(())
    }
}

/// A set of named tensors.
pub struct WeightSet {
    tensors: HashMap<String, Tensor>,
    /// Where the weights came from, for logs and `model inspect`.
    pub description: String,
}

impl WeightSet {
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.tensors.get(name)
    }

    pub fn require(&self, name: &str) -> Result<&Tensor, ModelError> {
        self.get(name).ok_or_else(|| ModelError::Weights(format!("tensor {name} is missing")))
    }

    pub fn iter(&self) -> impl Iterator<Item = &Tensor> {
        self.tensors.values()
    }

    pub fn total_bytes(&self) -> usize {
        self.tensors.values().map(|t| t.len).sum()
    }

    /// The tensors of a GGUF file; dims reversed from ggml order into row-major.
    pub fn from_gguf(f: &GgufFile) -> Self {
        let tensors = f
            .tensors
            .iter()
            .map(|t| {
                let tensor = Tensor {
                    name: t.name.clone(),
                    format: t.format,
                    shape: t.dims.iter().rev().map(|&d| d as usize).collect(),
                    storage: f.storage().clone(),
                    offset: t.offset as usize,
                    len: t.n_bytes as usize,
                };
                (t.name.clone(), tensor)
            })
            .collect();
        Self { tensors, description: "gguf".into() }
    }

    /// The tensors of one or more `.safetensors` files, renamed to llama.cpp names.
    pub fn from_safetensors(files: &[PathBuf], num_layers: usize) -> Result<Self, ModelError> {
        let names = hf_name_map(num_layers);
        let mut tensors = HashMap::new();
        for path in files {
            let storage = Arc::new(Storage::mmap(path).map_err(|e| ModelError::io(path, e))?);
            let bytes = storage.bytes();
            let st = safetensors::SafeTensors::deserialize(bytes)
                .map_err(|e| ModelError::Weights(format!("{}: {e}", path.display())))?;
            let base = bytes.as_ptr() as usize;
            for (hf_name, view) in st.tensors() {
                let Some(name) = names.get(hf_name.as_str()) else { continue };
                let format = match view.dtype() {
                    safetensors::Dtype::F32 => WeightFormat::F32,
                    safetensors::Dtype::F16 => WeightFormat::F16,
                    safetensors::Dtype::BF16 => WeightFormat::BF16,
                    other => {
                        return Err(ModelError::Unsupported(format!(
                            "{}: tensor {hf_name} has dtype {other:?} (F32, F16 and BF16 are supported)",
                            path.display()
                        )))
                    }
                };
                let data = view.data();
                let tensor = Tensor {
                    name: name.clone(),
                    format,
                    shape: view.shape().to_vec(),
                    storage: storage.clone(),
                    offset: data.as_ptr() as usize - base,
                    len: data.len(),
                };
                tensors.insert(name.clone(), tensor);
            }
        }
        Ok(Self { tensors, description: format!("safetensors ({} files)", files.len()) })
    }

    /// No tensors (a model loaded for its config alone).
    pub fn empty() -> Self {
        Self { tensors: HashMap::new(), description: "none (config only)".into() }
    }

    /// Random weights for `cfg` (`--load-format dummy`): matrices N(0, 0.02²) in
    /// `format` (F32, F16 or BF16), norms 1, biases 0. Deterministic for a seed.
    pub fn dummy(cfg: &ModelConfig, format: WeightFormat, seed: u64) -> Result<Self, ModelError> {
        if format.is_quantized() {
            return Err(ModelError::Unsupported(format!("dummy weights in {format} (use F32, F16 or BF16)")));
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut tensors = HashMap::new();
        for (name, shape) in llama_tensor_shapes(cfg) {
            let n: usize = shape.iter().product();
            let is_norm = name.ends_with("norm.weight");
            let is_bias = name.ends_with(".bias");
            let values = (0..n).map(|_| {
                if is_norm {
                    1.0
                } else if is_bias {
                    0.0
                } else {
                    // Sum of uniforms: cheap, close enough to normal for load tests.
                    (rng.random::<f32>() + rng.random::<f32>() + rng.random::<f32>() - 1.5) * 0.04
                }
            });
            let bytes: Vec<u8> = match format {
                WeightFormat::F32 => values.flat_map(f32::to_le_bytes).collect(),
                WeightFormat::F16 => values.flat_map(|v| f16::from_f32(v).to_le_bytes()).collect(),
                _ => values.flat_map(|v| bf16::from_f32(v).to_le_bytes()).collect(),
            };
            let len = bytes.len();
            let tensor = Tensor {
                name: name.clone(),
                format,
                shape,
                storage: Arc::new(Storage::Owned(bytes)),
                offset: 0,
                len,
            };
            tensors.insert(name, tensor);
        }
        Ok(Self { tensors, description: format!("dummy ({format}, seed {seed})") })
    }
}

/// The llama.cpp name and row-major shape of every weight of a Llama-family model.
pub fn llama_tensor_shapes(cfg: &ModelConfig) -> Vec<(String, Vec<usize>)> {
    let (h, ff, v) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let (q, kv) = (cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim);
    let mut out =
        vec![("token_embd.weight".to_string(), vec![v, h]), ("output_norm.weight".to_string(), vec![h])];
    if !cfg.tie_word_embeddings {
        out.push(("output.weight".to_string(), vec![v, h]));
    }
    for i in 0..cfg.num_layers {
        let b = |s: &str| format!("blk.{i}.{s}");
        out.extend([
            (b("attn_norm.weight"), vec![h]),
            (b("attn_q.weight"), vec![q, h]),
            (b("attn_k.weight"), vec![kv, h]),
            (b("attn_v.weight"), vec![kv, h]),
            (b("attn_output.weight"), vec![h, q]),
            (b("ffn_norm.weight"), vec![h]),
            (b("ffn_gate.weight"), vec![ff, h]),
            (b("ffn_up.weight"), vec![ff, h]),
            (b("ffn_down.weight"), vec![h, ff]),
        ]);
        if cfg.qkv_bias {
            out.extend([
                (b("attn_q.bias"), vec![q]),
                (b("attn_k.bias"), vec![kv]),
                (b("attn_v.bias"), vec![kv]),
            ]);
        }
    }
    out
}

/// Hugging Face parameter names → llama.cpp names.
fn hf_name_map(num_layers: usize) -> HashMap<String, String> {
    let mut m = HashMap::new();
    m.insert("model.embed_tokens.weight".into(), "token_embd.weight".into());
    m.insert("model.norm.weight".into(), "output_norm.weight".into());
    m.insert("lm_head.weight".into(), "output.weight".into());
    for i in 0..num_layers {
        let hf = |s: &str| format!("model.layers.{i}.{s}");
        let gg = |s: &str| format!("blk.{i}.{s}");
        for (a, b) in [
            ("input_layernorm.weight", "attn_norm.weight"),
            ("self_attn.q_proj.weight", "attn_q.weight"),
            ("self_attn.k_proj.weight", "attn_k.weight"),
            ("self_attn.v_proj.weight", "attn_v.weight"),
            ("self_attn.q_proj.bias", "attn_q.bias"),
            ("self_attn.k_proj.bias", "attn_k.bias"),
            ("self_attn.v_proj.bias", "attn_v.bias"),
            ("self_attn.o_proj.weight", "attn_output.weight"),
            ("post_attention_layernorm.weight", "ffn_norm.weight"),
            ("mlp.gate_proj.weight", "ffn_gate.weight"),
            ("mlp.up_proj.weight", "ffn_up.weight"),
            ("mlp.down_proj.weight", "ffn_down.weight"),
        ] {
            m.insert(hf(a), gg(b));
        }
    }
    m
}

/// The safetensors files of a Hugging Face directory: the shards named by
/// `model.safetensors.index.json`, else `model.safetensors`, else every `*.safetensors`.
pub fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(|e| ModelError::io(&index, e))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| ModelError::Weights(format!("{}: {e}", index.display())))?;
        let map = v
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| ModelError::Weights(format!("{}: no weight_map", index.display())))?;
        let mut files: Vec<PathBuf> = map.values().filter_map(|f| f.as_str()).map(|f| dir.join(f)).collect();
        files.sort();
        files.dedup();
        return Ok(files);
    }
    let single = dir.join("model.safetensors");
    if single.exists() {
        return Ok(vec![single]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| ModelError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(ModelError::NotFound(format!("{}: no .safetensors files", dir.display())));
    }
    Ok(files)
}
