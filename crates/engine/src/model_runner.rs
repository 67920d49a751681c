//! The model runner: executes one scheduled step on a device. The engine builds a
//! flat `Batch` (tokens, positions, block tables, rows wanting logits); a runner
//! owns the weights and the KV pool and returns those rows' logits. The CPU
//! runner is below; the CUDA backend implements the same trait.

use std::sync::Arc;

use peregrine_compute::cpu::{Cpu, KvDtype, KvPool};
use peregrine_model::config::ModelConfig;
use peregrine_model::llama::Batch;
use peregrine_model::load::Model;
use peregrine_model::ModelError;

use crate::block_manager::BlockId;

pub trait ModelRunner: Send {
    /// Runs the forward pass; returns logits [batch.logits_for.len(), vocab].
    fn execute(&mut self, batch: &Batch<'_>) -> Result<Vec<f32>, ModelError>;
    /// Copy-on-write copies (src, dst) of whole blocks, before the next `execute`.
    fn copy_blocks(&mut self, copies: &[(BlockId, BlockId)]);
    fn vocab_size(&self) -> usize;
    fn num_blocks(&self) -> usize;
    fn block_size(&self) -> usize;
}

/// How the KV pool is sized.
#[derive(Clone, Debug, PartialEq)]
pub struct KvCacheConfig {
    pub block_size: usize,
    pub dtype: KvDtype,
    /// Bytes for K and V over all layers (vLLM CPU's VLLM_CPU_KVCACHE_SPACE).
    pub memory_bytes: usize,
    /// Exact block count, overriding `memory_bytes` (tests, tiny pools).
    pub num_blocks: Option<usize>,
}

impl Default for KvCacheConfig {
    fn default() -> Self {
        Self { block_size: 16, dtype: KvDtype::F32, memory_bytes: 4 << 30, num_blocks: None }
    }
}

/// What the pool will hold for a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvPlan {
    pub num_blocks: usize,
    pub block_size: usize,
    pub bytes: usize,
}

impl KvPlan {
    pub fn tokens(&self) -> usize {
        self.num_blocks * self.block_size
    }
}

impl KvCacheConfig {
    pub fn plan(&self, config: &ModelConfig) -> Result<KvPlan, String> {
        if self.block_size == 0 {
            return Err("block_size must be at least 1".into());
        }
        let (layers, kv_dim) = (config.num_layers, config.kv_dim());
        let block_bytes = KvPool::block_bytes(layers, self.block_size, kv_dim, self.dtype);
        let num_blocks = self.num_blocks.unwrap_or_else(|| {
            KvPool::blocks_for_budget(self.memory_bytes, layers, self.block_size, kv_dim, self.dtype)
        });
        if num_blocks == 0 {
            return Err(format!(
                "kv_cache_memory of {} bytes holds no block: one {}-token block takes {block_bytes} bytes",
                self.memory_bytes, self.block_size
            ));
        }
        Ok(KvPlan { num_blocks, block_size: self.block_size, bytes: num_blocks * block_bytes })
    }
}

/// The CPU backend: the model's forward pass over a paged KV pool in host memory.
pub struct CpuModelRunner {
    model: Arc<Model>,
    cpu: Cpu,
    kv: KvPool,
}

impl CpuModelRunner {
    pub fn new(model: Arc<Model>, cpu: Cpu, plan: KvPlan, dtype: KvDtype) -> Result<Self, ModelError> {
        let kv = model.llama()?.new_kv_pool(plan.num_blocks, plan.block_size, dtype);
        Ok(Self { model, cpu, kv })
    }

    /// Commits the KV pool's memory now (see `KvPool::prefault`).
    pub fn prefault(mut self) -> Self {
        self.kv.prefault();
        self
    }
}

impl ModelRunner for CpuModelRunner {
    fn execute(&mut self, batch: &Batch<'_>) -> Result<Vec<f32>, ModelError> {
        self.model.llama()?.forward(&self.cpu, batch, &mut self.kv)
    }

    fn copy_blocks(&mut self, copies: &[(BlockId, BlockId)]) {
        for &(src, dst) in copies {
            self.kv.copy_block(src as usize, dst as usize);
        }
    }

    fn vocab_size(&self) -> usize {
        self.model.config.vocab_size
    }

    fn num_blocks(&self) -> usize {
        self.kv.num_blocks
    }

    fn block_size(&self) -> usize {
        self.kv.block_size
    }
}
