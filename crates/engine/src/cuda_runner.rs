//! The CUDA model runner: the GPU forward pass (`peregrine_model::llama_cuda`) over
//! a paged KV cache in device memory, sized from `--gpu-memory-utilization` after
//! the weights and the activation buffers are in place (as vLLM does).

use peregrine_compute::cuda::Gpu;
use peregrine_model::llama::Batch;
use peregrine_model::llama_cuda::{CudaKvCache, CudaLlama};
use peregrine_model::load::Model;
use peregrine_model::ModelError;

use crate::block_manager::BlockId;
use crate::model_runner::ModelRunner;

/// How to place a model on a GPU.
#[derive(Clone, Debug)]
pub struct CudaRunnerConfig {
    pub ordinal: usize,
    /// Fraction of the device's memory this process may use (weights + activations + KV).
    pub gpu_memory_utilization: f64,
    pub block_size: usize,
    /// Exact block count (overrides the utilization budget).
    pub num_blocks: Option<usize>,
    /// Largest step, in tokens and in sequences (sizes the activation buffers).
    pub max_num_batched_tokens: usize,
    pub max_num_seqs: usize,
    /// Random weights made on the device (`--load-format dummy`).
    pub dummy_weights: bool,
}

/// What start-up placed in device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuMemoryPlan {
    pub total: usize,
    pub weights: usize,
    pub activations: usize,
    pub kv_bytes: usize,
    pub num_blocks: usize,
    pub block_size: usize,
}

impl GpuMemoryPlan {
    /// KV blocks that fit: the budget `total × utilization` minus everything already in
    /// use (`total − free`, which counts weights, activations, the CUDA context and
    /// other processes), in whole blocks.
    pub fn kv_blocks(
        total: usize,
        free: usize,
        utilization: f64,
        block_bytes: usize,
    ) -> Result<usize, String> {
        if !(0.0..=1.0).contains(&utilization) || utilization == 0.0 {
            return Err(format!("--gpu-memory-utilization must be in (0, 1], got {utilization}"));
        }
        let budget = (total as f64 * utilization) as usize;
        let used = total.saturating_sub(free);
        let left = budget.saturating_sub(used);
        let blocks = left / block_bytes.max(1);
        if blocks == 0 {
            return Err(format!(
                "no room for the KV cache: {:.2} GiB of {:.2} GiB in use, budget {:.2} GiB \
                 (raise --gpu-memory-utilization or lower --max-num-batched-tokens)",
                gib(used),
                gib(total),
                gib(budget)
            ));
        }
        Ok(blocks)
    }

    pub fn describe(&self, device: &str) -> String {
        format!(
            "GPU {device}: weights {:.2} GiB, activations {:.2} GiB, KV cache {:.2} GiB = {} blocks × {} tokens = {} tokens (bf16), of {:.2} GiB",
            gib(self.weights),
            gib(self.activations),
            gib(self.kv_bytes),
            self.num_blocks,
            self.block_size,
            self.num_blocks * self.block_size,
            gib(self.total)
        )
    }
}

fn gib(b: usize) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

pub struct CudaModelRunner {
    gpu: Gpu,
    llama: CudaLlama,
    kv: CudaKvCache,
    pub plan: GpuMemoryPlan,
    device_name: String,
}

impl CudaModelRunner {
    /// Opens the GPU, uploads (or makes) the weights, reserves activations for the
    /// largest step, and gives the KV cache what the budget leaves.
    pub fn load(model: &Model, cfg: &CudaRunnerConfig) -> Result<Self, ModelError> {
        let gpu = Gpu::new(cfg.ordinal)?;
        let (free0, total) = gpu.memory()?;
        let mut llama = if cfg.dummy_weights {
            CudaLlama::dummy(&gpu, model.config.clone(), 0)?
        } else {
            CudaLlama::new(&gpu, model.config.clone(), &model.weights, model.rope_style)?
        };
        let (free1, _) = gpu.memory()?;
        let max_len = model.config.max_position_embeddings.max(1);
        let max_blocks = max_len.div_ceil(cfg.block_size);
        let rows = cfg.max_num_seqs.min(cfg.max_num_batched_tokens).max(1);
        llama.reserve(&gpu, cfg.max_num_batched_tokens.max(1), rows, cfg.max_num_seqs.max(1), max_blocks)?;
        gpu.synchronize()?;
        let (free2, _) = gpu.memory()?;
        let block_bytes = CudaKvCache::block_bytes(&model.config, cfg.block_size);
        let num_blocks = match cfg.num_blocks {
            Some(n) => n,
            None => GpuMemoryPlan::kv_blocks(total, free2, cfg.gpu_memory_utilization, block_bytes)
                .map_err(ModelError::Config)?,
        };
        let kv = CudaKvCache::new(&gpu, &model.config, num_blocks, cfg.block_size)?;
        let plan = GpuMemoryPlan {
            total,
            weights: free0.saturating_sub(free1).max(llama.weight_bytes()),
            activations: free1.saturating_sub(free2),
            kv_bytes: num_blocks * block_bytes,
            num_blocks,
            block_size: cfg.block_size,
        };
        let device_name = gpu.name.clone();
        Ok(Self { gpu, llama, kv, plan, device_name })
    }

    pub fn describe(&self) -> String {
        self.plan.describe(&self.device_name)
    }
}

impl Drop for CudaModelRunner {
    fn drop(&mut self) {
        let t = self.llama.times;
        if self.llama.profile && t.steps > 0 {
            let ms = |s: f64| s * 1e3 / t.steps as f64;
            eprintln!(
                "PEREGRINE_CUDA_PROFILE: {} decode steps: device {:.3} ms, logits copy {:.3} ms, host between steps {:.3} ms (per step)",
                t.steps,
                ms(t.device_s),
                ms(t.download_s),
                ms(t.host_s)
            );
        }
    }
}

impl ModelRunner for CudaModelRunner {
    fn execute(&mut self, batch: &Batch<'_>) -> Result<Vec<f32>, ModelError> {
        self.llama.forward(&self.gpu, batch, &self.kv)
    }

    fn copy_blocks(&mut self, copies: &[(BlockId, BlockId)]) {
        for &(src, dst) in copies {
            // A failed device copy surfaces as an error at the next execute's sync.
            let _ = self.kv.copy_block(&self.gpu, src as usize, dst as usize);
        }
    }

    fn vocab_size(&self) -> usize {
        self.llama.config.vocab_size
    }

    fn num_blocks(&self) -> usize {
        self.kv.num_blocks
    }

    fn block_size(&self) -> usize {
        self.kv.block_size
    }
}

#[cfg(test)]
mod tests {
    use super::GpuMemoryPlan;

    const GIB: usize = 1 << 30;

    #[test]
    fn kv_blocks_take_what_the_budget_leaves() {
        // 80 GiB card, 0.9 → 72 GiB budget; 20 GiB in use → 52 GiB for KV.
        let blocks = GpuMemoryPlan::kv_blocks(80 * GIB, 60 * GIB, 0.9, 2 * 1024 * 1024).unwrap();
        assert_eq!(blocks, 52 * 512);
    }

    #[test]
    fn kv_blocks_report_no_room_and_bad_fractions() {
        let e = GpuMemoryPlan::kv_blocks(80 * GIB, 5 * GIB, 0.9, 1 << 20).unwrap_err();
        assert!(e.contains("no room"), "{e}");
        assert!(GpuMemoryPlan::kv_blocks(80 * GIB, 70 * GIB, 1.5, 1 << 20).is_err());
        assert!(GpuMemoryPlan::kv_blocks(80 * GIB, 70 * GIB, 0.0, 1 << 20).is_err());
    }
}
