//! Causal attention of one query token over one sequence's cached keys and values.

use super::{axpy, dot_f32, softmax_in_place};

/// Heads and sizes; `n_heads` is a multiple of `n_kv_heads` (grouped-query attention).
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// Query head `h` of one token over its sequence's cached keys and values:
/// out = Σ_j softmax_j(q·k[j, h/g] · scale) · v[j, h/g] for j in 0..n_ctx, g = n_heads / n_kv_heads.
/// q, out: [head_dim]; k, v: [n_ctx, n_kv_heads, head_dim]; `scores`: scratch of at least n_ctx.
/// One call per (token, head) so even a single decode token spreads over the threads.
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
    attention_rows(shape, h, q, k, v, n_ctx, |j| j, scale, scores, out)
}

/// The kernel behind contiguous and paged attention: row `row_of(j)` of `k`/`v`
/// ([rows, n_kv_heads · head_dim]) holds position j.
#[allow(clippy::too_many_arguments)]
pub(super) fn attention_rows(
    shape: AttentionShape,
    h: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    n_ctx: usize,
    row_of: impl Fn(usize) -> usize,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let AttentionShape { n_heads, n_kv_heads, head_dim } = shape;
    let off = (h / (n_heads / n_kv_heads)) * head_dim;
    let d = n_kv_heads * head_dim;
    let scores = &mut scores[..n_ctx];
    for (j, s) in scores.iter_mut().enumerate() {
        *s = dot_f32(q, &k[row_of(j) * d + off..][..head_dim]) * scale;
    }
    softmax_in_place(scores);
    out.fill(0.0);
    for (j, &p) in scores.iter().enumerate() {
        axpy(p, &v[row_of(j) * d + off..][..head_dim], out);
    }
}
