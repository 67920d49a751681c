//! Causal attention of one query token over one sequence's cached keys and values.

use super::{axpy, dot_f32, softmax_in_place};

/// Heads and sizes; `n_heads` is a multiple of `n_kv_heads` (grouped-query attention).
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// out[h] = Σ_j softmax_j(q[h]·k[j, h/g] · scale) · v[j, h/g] for j in 0..n_ctx
///
/// q: [n_heads, head_dim]; k, v: [n_ctx, n_kv_heads, head_dim]; out: [n_heads, head_dim];
/// `scores`: scratch of at least n_ctx.
#[allow(clippy::too_many_arguments)] // the kernel's operands, each a distinct tensor
pub fn attention_one(
    shape: AttentionShape,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    n_ctx: usize,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let hd = shape.head_dim;
    for h in 0..shape.n_heads {
        let (qh, oh) = (&q[h * hd..(h + 1) * hd], &mut out[h * hd..(h + 1) * hd]);
        attention_head(shape, h, qh, k, v, n_ctx, scale, scores, oh);
    }
}

/// One query head `h` of [`attention_one`]: q, out: [head_dim]. Separate so a
/// single decode token can spread its heads over threads.
#[allow(clippy::too_many_arguments)] // the kernel's operands, each a distinct tensor
pub fn attention_head(
    shape: AttentionShape,
    h: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    n_ctx: usize,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let AttentionShape { n_heads, n_kv_heads, head_dim } = shape;
    let kvh = h / (n_heads / n_kv_heads);
    let kv_stride = n_kv_heads * head_dim;
    let scores = &mut scores[..n_ctx];
    for (j, s) in scores.iter_mut().enumerate() {
        *s = dot_f32(q, &k[j * kv_stride + kvh * head_dim..][..head_dim]) * scale;
    }
    softmax_in_place(scores);
    out.fill(0.0);
    for (j, &p) in scores.iter().enumerate() {
        axpy(p, &v[j * kv_stride + kvh * head_dim..][..head_dim], out);
    }
}
