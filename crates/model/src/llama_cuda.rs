//! The Llama-family forward pass on the GPU: the same steps as `llama.rs`, read top
//! to bottom, each one a kernel or a cuBLAS GEMM (see `peregrine_compute::cuda`).
//!
//! Weights live on the device in bf16 (GGUF quantized weights are dequantized at
//! load), with Q/K/V fused into one [q + 2·kv, d] matrix and gate/up into one
//! [2·ff, d] matrix so each sub-block is one GEMM. The residual stream and GEMM
//! outputs are f32; GEMM inputs and the paged KV cache are bf16. Shapes: n tokens
//! in the batch, d hidden, hd head dim, nh / nkv heads, ff intermediate, m logit rows.

use half::bf16;
use peregrine_compute::cpu::RopeStyle;
use peregrine_compute::cuda::{AttentionArgs, DeviceBuffer, Gpu};
use peregrine_compute::quant::WeightFormat;

use crate::config::{ModelConfig, RopeScaling};
use crate::llama::Batch;
use crate::weights::{Tensor, WeightSet};
use crate::ModelError;

struct Layer {
    attn_norm: DeviceBuffer<f32>,
    /// [q_dim + 2·kv_dim, d]: rows of Wq, then Wk, then Wv.
    wqkv: DeviceBuffer<bf16>,
    bias_qkv: Option<DeviceBuffer<f32>>,
    wo: DeviceBuffer<bf16>,
    ffn_norm: DeviceBuffer<f32>,
    /// [2·ff, d]: rows of W_gate, then W_up.
    w_gate_up: DeviceBuffer<bf16>,
    w_down: DeviceBuffer<bf16>,
}

/// Paged K/V for every layer: per layer [num_blocks · block_size, nkv, hd] bf16, K and V apart.
pub struct CudaKvCache {
    layers: Vec<(DeviceBuffer<bf16>, DeviceBuffer<bf16>)>,
    pub num_blocks: usize,
    pub block_size: usize,
    pub kv_dim: usize,
}

impl CudaKvCache {
    pub fn new(
        gpu: &Gpu,
        config: &ModelConfig,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<Self, ModelError> {
        let kv_dim = config.kv_dim();
        let rows = num_blocks * block_size;
        let layers = (0..config.num_layers)
            .map(|_| Ok((DeviceBuffer::zeros(gpu, rows * kv_dim)?, DeviceBuffer::zeros(gpu, rows * kv_dim)?)))
            .collect::<Result<_, ModelError>>()?;
        Ok(Self { layers, num_blocks, block_size, kv_dim })
    }

    /// Bytes of one block over all layers, K and V.
    pub fn block_bytes(config: &ModelConfig, block_size: usize) -> usize {
        2 * config.num_layers * block_size * config.kv_dim() * 2
    }

    /// Copies block `src` to `dst` in every layer (copy-on-write of a shared prefix).
    pub fn copy_block(&self, gpu: &Gpu, src: usize, dst: usize) -> Result<(), ModelError> {
        let row = self.block_size * self.kv_dim;
        let bytes = row * std::mem::size_of::<bf16>();
        for (k, v) in &self.layers {
            gpu.copy_device(k.ptr_at(src * row), k.ptr_at(dst * row), bytes)?;
            gpu.copy_device(v.ptr_at(src * row), v.ptr_at(dst * row), bytes)?;
        }
        Ok(())
    }
}

/// Activation buffers, sized for the largest batch seen so far (grown, never shrunk).
#[derive(Default)]
struct Workspace {
    tokens: usize,
    rows: usize,
    meta_seqs: usize,
    bufs: Option<Buffers>,
}

struct Buffers {
    x: DeviceBuffer<f32>,         // [n, d] residual stream
    xn: DeviceBuffer<bf16>,       // [n, d] normed input of a sub-block
    qkv: DeviceBuffer<f32>,       // [n, q_dim + 2·kv_dim]
    attn: DeviceBuffer<bf16>,     // [n, q_dim]
    proj: DeviceBuffer<f32>,      // [n, d] output of Wo / W_down
    gate_up: DeviceBuffer<f32>,   // [n, 2·ff]
    act: DeviceBuffer<bf16>,      // [n, ff]
    last: DeviceBuffer<bf16>,     // [m, d] normed rows that want logits
    logits: DeviceBuffer<f32>,    // [m, vocab]
    tokens: DeviceBuffer<u32>,    // [n]
    positions: DeviceBuffer<i32>, // [n]
    slots: DeviceBuffer<i64>,     // [n]
    seq_of: DeviceBuffer<u32>,    // [n]
    rows: DeviceBuffer<u32>,      // [m]
    tables: DeviceBuffer<u32>,    // [num_seqs, max_blocks]
}

/// Where decode-step time goes (with `CudaLlama::profile` on): device work, the
/// logits copy, and host time between steps (sampling, scheduling).
#[derive(Clone, Copy, Debug, Default)]
pub struct StepTimes {
    pub steps: usize,
    pub device_s: f64,
    pub download_s: f64,
    pub host_s: f64,
}

pub struct CudaLlama {
    pub config: ModelConfig,
    /// Synchronize before the logits copy and accumulate `times` (decode steps only).
    pub profile: bool,
    pub times: StepTimes,
    last_end: Option<std::time::Instant>,
    embed: DeviceBuffer<bf16>,
    layers: Vec<Layer>,
    final_norm: DeviceBuffer<f32>,
    /// None when the model ties the head to the embedding.
    lm_head: Option<DeviceBuffer<bf16>>,
    inv_freq: DeviceBuffer<f32>,
    interleaved: bool,
    ws: Workspace,
}

/// A host tensor as bf16 (bf16 files are copied as they are; others dequantized).
fn host_bf16(t: &Tensor) -> Vec<bf16> {
    if t.format == WeightFormat::BF16 {
        return t.bytes().chunks_exact(2).map(|b| bf16::from_le_bytes([b[0], b[1]])).collect();
    }
    t.to_f32().into_iter().map(bf16::from_f32).collect()
}

impl CudaLlama {
    /// Uploads llama.cpp-named weights (see `Llama::new` for names and `rope_style`).
    pub fn new(
        gpu: &Gpu,
        config: ModelConfig,
        w: &WeightSet,
        rope_style: RopeStyle,
    ) -> Result<Self, ModelError> {
        let c = &config;
        let (h, ff, v) = (c.hidden_size, c.intermediate_size, c.vocab_size);
        let (q_dim, kv_dim) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
        let matrix = |names: &[(&str, usize)], cols: usize| -> Result<DeviceBuffer<bf16>, ModelError> {
            let mut host = Vec::new();
            for &(name, rows) in names {
                let t = w.require(name)?;
                t.check_shape(&[rows, cols])?;
                host.extend(host_bf16(t));
            }
            Ok(DeviceBuffer::from_host(gpu, &host)?)
        };
        let vector = |name: &str, n: usize| -> Result<Vec<f32>, ModelError> {
            let t = w.require(name)?;
            t.check_shape(&[n])?;
            Ok(t.to_f32())
        };
        let mut layers = Vec::with_capacity(c.num_layers);
        for i in 0..c.num_layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            let bias_qkv = if c.qkv_bias {
                let mut b = vector(&n("attn_q.bias"), q_dim)?;
                b.extend(vector(&n("attn_k.bias"), kv_dim)?);
                b.extend(vector(&n("attn_v.bias"), kv_dim)?);
                Some(DeviceBuffer::from_host(gpu, &b)?)
            } else {
                None
            };
            layers.push(Layer {
                attn_norm: DeviceBuffer::from_host(gpu, &vector(&n("attn_norm.weight"), h)?)?,
                wqkv: matrix(
                    &[
                        (&n("attn_q.weight"), q_dim),
                        (&n("attn_k.weight"), kv_dim),
                        (&n("attn_v.weight"), kv_dim),
                    ],
                    h,
                )?,
                bias_qkv,
                wo: matrix(&[(&n("attn_output.weight"), h)], q_dim)?,
                ffn_norm: DeviceBuffer::from_host(gpu, &vector(&n("ffn_norm.weight"), h)?)?,
                w_gate_up: matrix(&[(&n("ffn_gate.weight"), ff), (&n("ffn_up.weight"), ff)], h)?,
                w_down: matrix(&[(&n("ffn_down.weight"), h)], ff)?,
            });
        }
        let embed = matrix(&[("token_embd.weight", v)], h)?;
        let lm_head = match w.get("output.weight") {
            Some(_) if !c.tie_word_embeddings => Some(matrix(&[("output.weight", v)], h)?),
            _ => None,
        };
        let mut config = config.clone();
        if let Some(freqs) = w.get("rope_freqs.weight") {
            config.rope_scaling = RopeScaling::FreqFactors(freqs.to_f32());
        }
        let final_norm = DeviceBuffer::from_host(gpu, &vector("output_norm.weight", h)?)?;
        Self::assemble(gpu, config, embed, layers, final_norm, lm_head, rope_style)
    }

    /// Random weights made on the device (`--load-format dummy` on the GPU): matrices
    /// uniform in [-1e-3, 1e-3) as vLLM's dummy loader, norms 1, biases 0. No host copy.
    pub fn dummy(gpu: &Gpu, config: ModelConfig, seed: u64) -> Result<Self, ModelError> {
        let c = &config;
        let (h, ff, v) = (c.hidden_size, c.intermediate_size, c.vocab_size);
        let (q_dim, kv_dim) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
        let mut next_seed = seed;
        let mut random = |n: usize| -> Result<DeviceBuffer<bf16>, ModelError> {
            let b = DeviceBuffer::zeros(gpu, n)?;
            next_seed = next_seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            gpu.fill_uniform(b.ptr(), n, next_seed, -1e-3, 1e-3)?;
            Ok(b)
        };
        let ones = vec![1f32; h];
        let mut layers = Vec::with_capacity(c.num_layers);
        for _ in 0..c.num_layers {
            layers.push(Layer {
                attn_norm: DeviceBuffer::from_host(gpu, &ones)?,
                wqkv: random((q_dim + 2 * kv_dim) * h)?,
                bias_qkv: if c.qkv_bias { Some(DeviceBuffer::zeros(gpu, q_dim + 2 * kv_dim)?) } else { None },
                wo: random(h * q_dim)?,
                ffn_norm: DeviceBuffer::from_host(gpu, &ones)?,
                w_gate_up: random(2 * ff * h)?,
                w_down: random(h * ff)?,
            });
        }
        let embed = random(v * h)?;
        let lm_head = if c.tie_word_embeddings { None } else { Some(random(v * h)?) };
        let final_norm = DeviceBuffer::from_host(gpu, &ones)?;
        Self::assemble(gpu, config, embed, layers, final_norm, lm_head, RopeStyle::Neox)
    }

    fn assemble(
        gpu: &Gpu,
        config: ModelConfig,
        embed: DeviceBuffer<bf16>,
        layers: Vec<Layer>,
        final_norm: DeviceBuffer<f32>,
        lm_head: Option<DeviceBuffer<bf16>>,
        rope_style: RopeStyle,
    ) -> Result<Self, ModelError> {
        if config.head_dim > 256 || !config.head_dim.is_multiple_of(2) {
            return Err(ModelError::Unsupported(format!(
                "head_dim {} on the GPU (even, ≤ 256)",
                config.head_dim
            )));
        }
        let inv_freq = DeviceBuffer::from_host(gpu, &config.rope_inv_freq())?;
        gpu.synchronize()?;
        Ok(Self {
            config,
            embed,
            layers,
            final_norm,
            lm_head,
            inv_freq,
            interleaved: rope_style == RopeStyle::Interleaved,
            ws: Workspace::default(),
            profile: std::env::var_os("PEREGRINE_CUDA_PROFILE").is_some(),
            times: StepTimes::default(),
            last_end: None,
        })
    }

    /// Bytes of weights on the device.
    pub fn weight_bytes(&self) -> usize {
        let l = &self.layers[0];
        let per_layer = 2 * (l.wqkv.len() + l.wo.len() + l.w_gate_up.len() + l.w_down.len())
            + 4 * (l.attn_norm.len() + l.ffn_norm.len() + l.bias_qkv.as_ref().map_or(0, |b| b.len()));
        per_layer * self.layers.len() + 2 * (self.embed.len() + self.lm_head.as_ref().map_or(0, |h| h.len()))
    }

    /// Allocates activations for batches of up to `tokens` tokens and `rows` logit rows
    /// now, so the KV cache can be sized from what memory is left.
    pub fn reserve(
        &mut self,
        gpu: &Gpu,
        tokens: usize,
        rows: usize,
        seqs: usize,
        max_blocks: usize,
    ) -> Result<(), ModelError> {
        let c = &self.config;
        let ws = &mut self.ws;
        if ws.bufs.is_some() && tokens <= ws.tokens && rows <= ws.rows && seqs * max_blocks <= ws.meta_seqs {
            return Ok(());
        }
        let (n, m) = (tokens.max(ws.tokens), rows.max(ws.rows));
        let tables = (seqs * max_blocks).max(ws.meta_seqs);
        ws.bufs = None; // free before allocating the larger set
        let (d, q_dim, kv_dim, ff) =
            (c.hidden_size, c.num_heads * c.head_dim, c.kv_dim(), c.intermediate_size);
        ws.bufs = Some(Buffers {
            x: DeviceBuffer::zeros(gpu, n * d)?,
            xn: DeviceBuffer::zeros(gpu, n * d)?,
            qkv: DeviceBuffer::zeros(gpu, n * (q_dim + 2 * kv_dim))?,
            attn: DeviceBuffer::zeros(gpu, n * q_dim)?,
            proj: DeviceBuffer::zeros(gpu, n * d)?,
            gate_up: DeviceBuffer::zeros(gpu, n * 2 * ff)?,
            act: DeviceBuffer::zeros(gpu, n * ff)?,
            last: DeviceBuffer::zeros(gpu, m * d)?,
            logits: DeviceBuffer::zeros(gpu, m * c.vocab_size)?,
            tokens: DeviceBuffer::zeros(gpu, n)?,
            positions: DeviceBuffer::zeros(gpu, n)?,
            slots: DeviceBuffer::zeros(gpu, n)?,
            seq_of: DeviceBuffer::zeros(gpu, n)?,
            rows: DeviceBuffer::zeros(gpu, m)?,
            tables: DeviceBuffer::zeros(gpu, tables)?,
        });
        (ws.tokens, ws.rows, ws.meta_seqs) = (n, m, tables);
        Ok(())
    }

    /// Runs the batch; returns logits [batch.logits_for.len(), vocab].
    pub fn forward(
        &mut self,
        gpu: &Gpu,
        batch: &Batch<'_>,
        kv: &CudaKvCache,
    ) -> Result<Vec<f32>, ModelError> {
        let n = batch.tokens.len();
        let m = batch.logits_for.len();
        let t0 = std::time::Instant::now();
        let decode = self.profile && n == m;
        if let (true, Some(end)) = (decode, self.last_end) {
            self.times.host_s += (t0 - end).as_secs_f64();
        }
        batch.check(self.config.vocab_size, kv.num_blocks, kv.block_size)?;
        if n == 0 {
            return Ok(Vec::new());
        }
        // Block tables padded to the longest: [num_seqs, max_blocks].
        let max_blocks = batch.block_tables.iter().map(|t| t.len()).max().unwrap_or(1).max(1);
        let mut tables = vec![0u32; batch.block_tables.len() * max_blocks];
        for (dst, t) in tables.chunks_exact_mut(max_blocks).zip(batch.block_tables) {
            dst[..t.len()].copy_from_slice(t);
        }
        let slots: Vec<i64> = (0..n)
            .map(|i| {
                let (pos, table) = (batch.positions[i], batch.block_tables[batch.seq[i]]);
                (table[pos / kv.block_size] as usize * kv.block_size + pos % kv.block_size) as i64
            })
            .collect();
        let positions: Vec<i32> = batch.positions.iter().map(|&p| p as i32).collect();
        let seq_of: Vec<u32> = batch.seq.iter().map(|&s| s as u32).collect();
        let rows: Vec<u32> = batch.logits_for.iter().map(|&r| r as u32).collect();
        self.reserve(gpu, n, m, batch.block_tables.len(), max_blocks)?;

        let c = &self.config;
        let (d, hd, nh, nkv, ff, vocab) =
            (c.hidden_size, c.head_dim, c.num_heads, c.num_kv_heads, c.intermediate_size, c.vocab_size);
        let (q_dim, kv_dim) = (nh * hd, nkv * hd);
        let eps = c.rms_norm_eps;
        let b = self.ws.bufs.as_mut().expect("reserved above");
        b.tokens.upload(gpu, batch.tokens)?;
        b.positions.upload(gpu, &positions)?;
        b.slots.upload(gpu, &slots)?;
        b.seq_of.upload(gpu, &seq_of)?;
        b.rows.upload(gpu, &rows)?;
        b.tables.upload(gpu, &tables)?;

        // x: [n, d] — the residual stream, starting from the token embeddings.
        gpu.embedding(b.tokens.ptr(), self.embed.ptr(), b.x.ptr(), n, d)?;
        for (li, layer) in self.layers.iter().enumerate() {
            let (k_cache, v_cache) = &kv.layers[li];
            // --- attention block: x += Wo · attn(rope(Wq·xn), rope(Wk·xn), Wv·xn)
            // (the previous layer's W_down output is added to x here, fused with the norm)
            let delta = (li > 0).then(|| b.proj.ptr());
            gpu.add_rms_norm(b.x.ptr(), delta, layer.attn_norm.ptr(), b.xn.ptr(), n, d, eps)?;
            gpu.matmul_bf16(b.xn.ptr(), layer.wqkv.ptr(), b.qkv.ptr(), n, q_dim + 2 * kv_dim, d)?;
            gpu.rope_kv_write(
                b.qkv.ptr(),
                layer.bias_qkv.as_ref().map(|x| x.ptr()),
                b.positions.ptr(),
                b.slots.ptr(),
                self.inv_freq.ptr(),
                k_cache.ptr(),
                v_cache.ptr(),
                n,
                (nh, nkv, hd),
                self.interleaved,
                1.0,
            )?;
            // Every token of the batch is in the cache now; each attends to 0..=pos.
            gpu.paged_attention(&AttentionArgs {
                q: b.qkv.ptr(),
                q_stride: q_dim + 2 * kv_dim,
                k_cache: k_cache.ptr(),
                v_cache: v_cache.ptr(),
                block_tables: b.tables.ptr(),
                max_blocks,
                seq_of: b.seq_of.ptr(),
                positions: b.positions.ptr(),
                out: b.attn.ptr(),
                n,
                n_heads: nh,
                n_kv_heads: nkv,
                head_dim: hd,
                block_size: kv.block_size,
                scale: 1.0 / (hd as f32).sqrt(),
            })?;
            gpu.matmul_bf16(b.attn.ptr(), layer.wo.ptr(), b.proj.ptr(), n, d, q_dim)?;

            // --- feed-forward block: x += W_down · (silu(W_gate·xn) ⊙ W_up·xn)
            gpu.add_rms_norm(b.x.ptr(), Some(b.proj.ptr()), layer.ffn_norm.ptr(), b.xn.ptr(), n, d, eps)?;
            gpu.matmul_bf16(b.xn.ptr(), layer.w_gate_up.ptr(), b.gate_up.ptr(), n, 2 * ff, d)?;
            gpu.silu_mul(b.gate_up.ptr(), b.act.ptr(), n, ff)?;
            gpu.matmul_bf16(b.act.ptr(), layer.w_down.ptr(), b.proj.ptr(), n, d, ff)?;
        }

        // --- logits of the requested rows only: [m, vocab] = norm(x + last delta)[rows] · W_headᵀ
        gpu.add_rms_norm(b.x.ptr(), Some(b.proj.ptr()), self.final_norm.ptr(), b.xn.ptr(), n, d, eps)?;
        if m == 0 {
            gpu.synchronize()?;
            return Ok(Vec::new());
        }
        gpu.gather_rows(b.xn.ptr(), b.rows.ptr(), b.last.ptr(), m, d)?;
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        gpu.matmul_bf16(b.last.ptr(), head.ptr(), b.logits.ptr(), m, vocab, d)?;
        if !decode {
            self.last_end = None;
            return Ok(b.logits.download(gpu, m * vocab)?);
        }
        gpu.synchronize()?;
        let t1 = std::time::Instant::now();
        let logits = b.logits.download(gpu, m * vocab)?;
        let t2 = std::time::Instant::now();
        self.times.steps += 1;
        self.times.device_s += (t1 - t0).as_secs_f64();
        self.times.download_s += (t2 - t1).as_secs_f64();
        self.last_end = Some(t2);
        Ok(logits)
    }
}
