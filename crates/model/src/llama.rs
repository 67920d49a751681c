//! The Llama-family forward pass (Llama 2/3/3.1, Mistral, Qwen2, SmolLM), read top to bottom.
//!
//! Input is a flat batch: token i is `tokens[i]` at position `positions[i]` of the
//! sequence whose block table is `block_tables[seq[i]]`. Several sequences and several
//! positions of one sequence may share a batch (decode tokens beside prefill chunks);
//! a token attends to positions 0..=its own of its sequence, reading K/V from the
//! paged pool through the block table, so earlier chunks and cached prefixes are
//! simply blocks already written. Shapes below: n = tokens in the batch, d = hidden
//! size, hd = head dim, nh / nkv = query / key-value heads, ff = intermediate size.

use peregrine_compute::cpu::{
    add_in_place, rms_norm, rope_in_place, silu_mul, AttentionShape, Cpu, KvDtype, KvPool, RopeStyle,
    RopeTable,
};
use rayon::prelude::*;

use crate::config::{ModelConfig, RopeScaling};
use crate::weights::{Tensor, WeightSet};
use crate::ModelError;

struct Layer {
    attn_norm: Vec<f32>,
    wq: Tensor,
    wk: Tensor,
    wv: Tensor,
    bias_q: Option<Vec<f32>>,
    bias_k: Option<Vec<f32>>,
    bias_v: Option<Vec<f32>>,
    wo: Tensor,
    ffn_norm: Vec<f32>,
    w_gate: Tensor,
    w_up: Tensor,
    w_down: Tensor,
}

pub struct Llama {
    pub config: ModelConfig,
    embed: Tensor,
    layers: Vec<Layer>,
    final_norm: Vec<f32>,
    /// The embedding itself when the model ties them.
    lm_head: Tensor,
    rope: RopeTable,
}

/// One forward call's tokens.
pub struct Batch<'a> {
    pub tokens: &'a [u32],
    pub positions: &'a [usize],
    /// Index into `block_tables` for each token.
    pub seq: &'a [usize],
    /// Per sequence: the KV blocks holding positions 0, block_size, 2·block_size, …
    /// Must already cover every position in the batch.
    pub block_tables: &'a [&'a [u32]],
    /// Tokens (indices into `tokens`) whose logits are wanted, in output order.
    pub logits_for: &'a [usize],
}

impl Batch<'_> {
    /// Checks the batch against a vocabulary and a pool of `num_blocks` blocks of
    /// `block_size` (every backend runs this before its forward pass).
    pub fn check(&self, vocab_size: usize, num_blocks: usize, block_size: usize) -> Result<(), ModelError> {
        let (b, n) = (self, self.tokens.len());
        let bad = |m: String| Err(ModelError::Config(format!("batch: {m}")));
        if b.positions.len() != n || b.seq.len() != n {
            return bad(format!(
                "{n} tokens but {} positions and {} sequence ids",
                b.positions.len(),
                b.seq.len()
            ));
        }
        if let Some(&t) = b.tokens.iter().find(|&&t| t as usize >= vocab_size) {
            return bad(format!("token id {t} is outside the vocabulary of {vocab_size}"));
        }
        if let Some(&s) = b.seq.iter().find(|&&s| s >= b.block_tables.len()) {
            return bad(format!("sequence index {s} but only {} block tables", b.block_tables.len()));
        }
        for (s, table) in b.block_tables.iter().enumerate() {
            if let Some(&blk) = table.iter().find(|&&blk| blk as usize >= num_blocks) {
                return bad(format!("block {blk} of sequence {s} is outside the pool of {num_blocks}"));
            }
        }
        for (&s, &pos) in b.seq.iter().zip(b.positions) {
            let blocks = b.block_tables[s].len();
            if pos / block_size >= blocks {
                return bad(format!("position {pos} of sequence {s} is beyond its {blocks} blocks"));
            }
        }
        if let Some(&i) = b.logits_for.iter().find(|&&i| i >= n) {
            return bad(format!("logits requested for token {i} of {n}"));
        }
        Ok(())
    }
}

impl Llama {
    /// Builds the model from llama.cpp-named weights. `rope_style` is Interleaved
    /// for GGUF llama files (Q/K rows permuted by the converter), Neox otherwise.
    pub fn new(config: ModelConfig, w: &WeightSet, rope_style: RopeStyle) -> Result<Self, ModelError> {
        let c = &config;
        let (h, ff, v) = (c.hidden_size, c.intermediate_size, c.vocab_size);
        let (q_dim, kv_dim) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
        let matrix = |name: &str, rows: usize, cols: usize| -> Result<Tensor, ModelError> {
            let t = w.require(name)?.clone();
            t.check_shape(&[rows, cols])?;
            Ok(t)
        };
        let vector = |name: &str, n: usize| -> Result<Vec<f32>, ModelError> {
            let t = w.require(name)?;
            t.check_shape(&[n])?;
            Ok(t.to_f32())
        };
        let bias = |name: &str, n: usize| if c.qkv_bias { vector(name, n).map(Some) } else { Ok(None) };
        let mut layers = Vec::with_capacity(c.num_layers);
        for i in 0..c.num_layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            layers.push(Layer {
                attn_norm: vector(&n("attn_norm.weight"), h)?,
                wq: matrix(&n("attn_q.weight"), q_dim, h)?,
                wk: matrix(&n("attn_k.weight"), kv_dim, h)?,
                wv: matrix(&n("attn_v.weight"), kv_dim, h)?,
                bias_q: bias(&n("attn_q.bias"), q_dim)?,
                bias_k: bias(&n("attn_k.bias"), kv_dim)?,
                bias_v: bias(&n("attn_v.bias"), kv_dim)?,
                wo: matrix(&n("attn_output.weight"), h, q_dim)?,
                ffn_norm: vector(&n("ffn_norm.weight"), h)?,
                w_gate: matrix(&n("ffn_gate.weight"), ff, h)?,
                w_up: matrix(&n("ffn_up.weight"), ff, h)?,
                w_down: matrix(&n("ffn_down.weight"), h, ff)?,
            });
        }
        let embed = matrix("token_embd.weight", v, h)?;
        let lm_head = match w.get("output.weight") {
            Some(_) if !c.tie_word_embeddings => matrix("output.weight", v, h)?,
            _ => embed.clone(),
        };
        let mut config = config.clone();
        if let Some(freqs) = w.get("rope_freqs.weight") {
            config.rope_scaling = RopeScaling::FreqFactors(freqs.to_f32());
        }
        let rope = RopeTable { inv_freq: config.rope_inv_freq(), attention_factor: 1.0, style: rope_style };
        Ok(Self { config, embed, layers, final_norm: vector("output_norm.weight", h)?, lm_head, rope })
    }

    /// A KV pool shaped for this model.
    pub fn new_kv_pool(&self, num_blocks: usize, block_size: usize, dtype: KvDtype) -> KvPool {
        KvPool::new(self.config.num_layers, num_blocks, block_size, self.kv_dim(), dtype)
    }

    pub fn kv_dim(&self) -> usize {
        self.config.kv_dim()
    }

    /// Runs the batch; returns logits [batch.logits_for.len(), vocab].
    pub fn forward(&self, cpu: &Cpu, batch: &Batch<'_>, kv: &mut KvPool) -> Result<Vec<f32>, ModelError> {
        let c = &self.config;
        let n = batch.tokens.len();
        let (d, hd) = (c.hidden_size, c.head_dim);
        let (q_dim, kv_dim, ff) = (c.num_heads * hd, c.num_kv_heads * hd, c.intermediate_size);
        self.check_batch(batch, kv)?;

        // x: [n, d] — the residual stream, starting from the token embeddings.
        let mut x = vec![0f32; n * d];
        let emb = self.embed.matrix();
        for (row, &tok) in x.chunks_exact_mut(d).zip(batch.tokens) {
            emb.dequantize_row_into(tok as usize, row);
        }

        let mut xn = vec![0f32; n * d]; // normed input of each sub-block
        let mut q = vec![0f32; n * q_dim]; // [n, nh, hd]
        let mut k = vec![0f32; n * kv_dim]; // [n, nkv, hd]
        let mut v = vec![0f32; n * kv_dim]; // [n, nkv, hd]
        let mut attn = vec![0f32; n * q_dim]; // [n, nh, hd]
        let mut proj = vec![0f32; n * d]; // [n, d]
        let mut gate = vec![0f32; n * ff]; // [n, ff]
        let mut up = vec![0f32; n * ff]; // [n, ff]
        let shape = AttentionShape { n_heads: c.num_heads, n_kv_heads: c.num_kv_heads, head_dim: hd };
        let scale = 1.0 / (hd as f32).sqrt();

        for (li, layer) in self.layers.iter().enumerate() {
            // --- attention block: x += Wo · attn(rope(Wq·xn), rope(Wk·xn), Wv·xn)
            rms_norm(&x, &layer.attn_norm, c.rms_norm_eps, &mut xn);
            cpu.matmul_group(
                &xn,
                &mut [(layer.wq.matrix(), &mut q), (layer.wk.matrix(), &mut k), (layer.wv.matrix(), &mut v)],
            );
            for (buf, b) in [(&mut q, &layer.bias_q), (&mut k, &layer.bias_k), (&mut v, &layer.bias_v)] {
                if let Some(b) = b {
                    buf.chunks_exact_mut(b.len()).for_each(|row| add_in_place(row, b));
                }
            }
            for i in 0..n {
                let pos = batch.positions[i];
                rope_in_place(&mut q[i * q_dim..(i + 1) * q_dim], hd, pos, &self.rope);
                rope_in_place(&mut k[i * kv_dim..(i + 1) * kv_dim], hd, pos, &self.rope);
                let slot = kv.slot(batch.block_tables[batch.seq[i]], pos);
                kv.write(li, slot, &k[i * kv_dim..(i + 1) * kv_dim], &v[i * kv_dim..(i + 1) * kv_dim]);
            }
            // Every token of the batch is in the pool now; each attends to 0..=pos.
            let kv_ro: &KvPool = kv;
            // One task per (token, head): a lone decode token still uses every thread.
            cpu.install(|| {
                attn.par_chunks_mut(hd).enumerate().for_each(|(i, out)| {
                    let (t, h) = (i / c.num_heads, i % c.num_heads);
                    let table = batch.block_tables[batch.seq[t]];
                    let n_ctx = batch.positions[t] + 1;
                    let mut scores = vec![0f32; n_ctx];
                    let qh = &q[t * q_dim + h * hd..][..hd];
                    kv_ro.attention_head(shape, li, h, qh, table, n_ctx, scale, &mut scores, out);
                });
            });
            cpu.matmul(&layer.wo.matrix(), &attn, &mut proj);
            add_in_place(&mut x, &proj);

            // --- feed-forward block: x += W_down · (silu(W_gate·xn) ⊙ W_up·xn)
            rms_norm(&x, &layer.ffn_norm, c.rms_norm_eps, &mut xn);
            cpu.matmul_group(&xn, &mut [(layer.w_gate.matrix(), &mut gate), (layer.w_up.matrix(), &mut up)]);
            let act = &mut gate; // silu(gate) ⊙ up, in place of gate
            silu_mul(&act.clone(), &up, act);
            cpu.matmul(&layer.w_down.matrix(), act, &mut proj);
            add_in_place(&mut x, &proj);
        }

        // --- logits of the requested rows only: [m, vocab] = norm(x[rows]) · W_headᵀ
        let m = batch.logits_for.len();
        let mut last = vec![0f32; m * d];
        for (dst, &i) in last.chunks_exact_mut(d).zip(batch.logits_for) {
            dst.copy_from_slice(&x[i * d..(i + 1) * d]);
        }
        let mut normed = vec![0f32; m * d];
        rms_norm(&last, &self.final_norm, c.rms_norm_eps, &mut normed);
        let mut logits = vec![0f32; m * c.vocab_size];
        cpu.matmul(&self.lm_head.matrix(), &normed, &mut logits);
        Ok(logits)
    }

    fn check_batch(&self, b: &Batch<'_>, kv: &KvPool) -> Result<(), ModelError> {
        if kv.num_layers != self.config.num_layers || kv.kv_dim != self.kv_dim() {
            return Err(ModelError::Config(format!(
                "batch: KV pool has {} layers × {} values per token, the model needs {} × {}",
                kv.num_layers,
                kv.kv_dim,
                self.config.num_layers,
                self.kv_dim()
            )));
        }
        b.check(self.config.vocab_size, kv.num_blocks, kv.block_size)
    }
}
