//! Engine options shared by `generate` and `serve` (names as in vLLM and TGI), and
//! building the engine from them.

use std::sync::Arc;

use anyhow::{anyhow, Result};
use clap::Args;
use peregrine_compute::cpu::{Cpu, KvDtype};
use peregrine_engine::engine::{Engine, EngineConfig};
use peregrine_engine::model_runner::{CpuModelRunner, KvCacheConfig, ModelRunner};
use peregrine_engine::scheduler::SchedulerConfig;
use peregrine_engine::watermark::WatermarkConfig;
use peregrine_model::load::Model;

use crate::Device;

#[derive(Args, Clone, Debug)]
pub struct EngineArgs {
    /// Tokens per KV-cache block.
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,
    /// Memory for the KV cache, in bytes (suffixes K, M, G, KiB, MiB, GiB accepted).
    #[arg(long, default_value = "4GiB", value_parser = parse_bytes, env = "PEREGRINE_KV_CACHE_MEMORY")]
    pub kv_cache_memory: usize,
    /// Exact number of KV blocks (overrides --kv-cache-memory).
    #[arg(long)]
    pub num_kv_blocks: Option<usize>,
    /// Storage type of the KV cache: auto (f32 on the CPU), f32, f16, bf16.
    #[arg(long, default_value = "auto")]
    pub kv_cache_dtype: String,
    /// Turn off automatic prefix caching.
    #[arg(long)]
    pub no_prefix_caching: bool,
    /// Token budget of one step (prompt chunks + decodes).
    #[arg(long, default_value_t = 512, alias = "max-batch-prefill-tokens", env = "MAX_BATCH_PREFILL_TOKENS")]
    pub max_num_batched_tokens: usize,
    /// Sequences running at once.
    #[arg(long, default_value_t = 256)]
    pub max_num_seqs: usize,
    /// Compute each prompt in one step instead of chunks (then TGI's
    /// --waiting-served-ratio / --max-waiting-tokens apply).
    #[arg(long)]
    pub no_chunked_prefill: bool,
    /// Longest prompt + output (default: the model's context, capped by the KV cache).
    #[arg(long)]
    pub max_model_len: Option<usize>,
    /// TGI: new requests join a running batch only when ratio × running can join.
    #[arg(long, env = "WAITING_SERVED_RATIO")]
    pub waiting_served_ratio: Option<f32>,
    /// TGI: … or after this many steps without joining.
    #[arg(long, default_value_t = 20, env = "MAX_WAITING_TOKENS")]
    pub max_waiting_tokens: usize,
    /// GPU: fraction of device memory for weights, activations and the KV cache.
    #[arg(long, default_value_t = 0.9)]
    pub gpu_memory_utilization: f64,
    /// Watermark: fraction of the vocabulary in each green list.
    #[arg(long, default_value_t = 0.5)]
    pub watermark_gamma: f32,
    /// Watermark: logit bias added to green tokens.
    #[arg(long, default_value_t = 2.0)]
    pub watermark_delta: f32,
}

/// "4GiB", "512M", "1000000" → bytes.
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("{s:?} is not a size in bytes (e.g. 4GiB, 512M)"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        u => return Err(format!("unknown size unit {u:?} (use K, M, G, KiB, MiB, GiB)")),
    };
    Ok((n * mult) as usize)
}

impl EngineArgs {
    pub fn kv_dtype(&self) -> Result<KvDtype> {
        match self.kv_cache_dtype.as_str() {
            "auto" => Ok(KvDtype::F32),
            s => s.parse().map_err(|e: String| anyhow!("--kv-cache-dtype: {e}")),
        }
    }

    /// The engine for `model` on `device`, and a line describing its memory plan.
    /// `prefault`: commit the CPU KV cache's memory now (the server), not as it fills.
    pub fn build_on(
        &self,
        model: Arc<Model>,
        device: Device,
        threads: usize,
        prefault: bool,
    ) -> Result<(Engine, String)> {
        if let Device::Cuda(ordinal) = device {
            return self.build_cuda(model, ordinal);
        }
        let kv = KvCacheConfig {
            block_size: self.block_size,
            dtype: self.kv_dtype()?,
            memory_bytes: self.kv_cache_memory,
            num_blocks: self.num_kv_blocks,
        };
        let plan = kv.plan(&model.config).map_err(|e| anyhow!("--kv-cache-memory: {e}"))?;
        let cpu = Cpu::new(threads);
        let threads = cpu.threads();
        let mut runner = CpuModelRunner::new(model.clone(), cpu, plan, kv.dtype)?;
        if prefault {
            runner = runner.prefault();
        }
        let engine = self.engine(&model, Box::new(runner))?;
        let plan_line = format!(
            "KV cache: {} blocks × {} tokens = {} tokens ({}, {:.1} MiB); max model len {}; \
             prefix caching {}; {} CPU threads",
            plan.num_blocks,
            plan.block_size,
            plan.tokens(),
            kv.dtype,
            plan.bytes as f64 / (1024.0 * 1024.0),
            engine.max_model_len(),
            if self.no_prefix_caching { "off" } else { "on" },
            threads
        );
        Ok((engine, plan_line))
    }

    /// The engine around `runner`, with these options and the model's tokenizer and eos ids.
    fn engine(&self, model: &Model, runner: Box<dyn ModelRunner>) -> Result<Engine> {
        Engine::new(
            runner,
            model.tokenizer.clone(),
            model.eos_token_ids.clone(),
            model.config.max_position_embeddings,
            self.engine_config(),
        )
        .map_err(|e| anyhow!("{e}"))
    }

    fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            scheduler: SchedulerConfig {
                max_num_batched_tokens: self.max_num_batched_tokens,
                max_num_seqs: self.max_num_seqs,
                chunked_prefill: !self.no_chunked_prefill,
                waiting_served_ratio: self.waiting_served_ratio,
                max_waiting_tokens: self.max_waiting_tokens,
            },
            prefix_caching: !self.no_prefix_caching,
            max_model_len: self.max_model_len,
            watermark: WatermarkConfig {
                gamma: self.watermark_gamma,
                delta: self.watermark_delta,
                ..WatermarkConfig::default()
            },
        }
    }

    #[cfg(feature = "cuda")]
    fn build_cuda(&self, model: Arc<Model>, ordinal: usize) -> Result<(Engine, String)> {
        use peregrine_engine::cuda_runner::{CudaModelRunner, CudaRunnerConfig};
        let cfg = CudaRunnerConfig {
            ordinal,
            gpu_memory_utilization: self.gpu_memory_utilization,
            block_size: self.block_size,
            num_blocks: self.num_kv_blocks,
            max_num_batched_tokens: self.max_num_batched_tokens,
            max_num_seqs: self.max_num_seqs,
            dummy_weights: model.llama.is_none(),
        };
        let runner = CudaModelRunner::load(&model, &cfg).map_err(|e| anyhow!("{e}"))?;
        let line = runner.describe();
        let engine = self.engine(&model, Box::new(runner))?;
        let line = format!("{line}; max model len {}", engine.max_model_len());
        Ok((engine, line))
    }

    #[cfg(not(feature = "cuda"))]
    fn build_cuda(&self, _model: Arc<Model>, _ordinal: usize) -> Result<(Engine, String)> {
        Err(anyhow!("this binary was built without CUDA support"))
    }
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_bytes("4GiB"), Ok(4 << 30));
        assert_eq!(parse_bytes("512M"), Ok(512_000_000));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert_eq!(parse_bytes("1.5KiB"), Ok(1536));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("3 parsecs").is_err());
    }
}
