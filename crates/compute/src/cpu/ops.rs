//! Element-wise and per-row kernels of the Llama-family forward pass.

/// out = x / rms(x) · w, per row of `w.len()` values. x, out: [n, d]
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let ss: f32 = xr.iter().map(|v| v * v).sum::<f32>() / d as f32;
        let inv = 1.0 / (ss + eps).sqrt();
        for ((o, &xv), &wv) in or.iter_mut().zip(xr).zip(w) {
            *o = xv * inv * wv;
        }
    }
}

/// x += y
pub fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// out = silu(gate) · up, where silu(g) = g / (1 + e^-g). gate, up, out: [n, ff]
pub fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = g / (1.0 + (-g).exp()) * u;
    }
}

/// Numerically stable softmax of one row.
pub fn softmax_in_place(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// Which dimensions RoPE rotates together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs (2i, 2i+1): GGUF llama files, whose Q/K rows llama.cpp's converter permuted.
    Interleaved,
    /// Pairs (i, i + d/2): Hugging Face's `rotate_half` ("NeoX").
    Neox,
}

/// The rotation frequencies of one head: inv_freq[i] for i in 0..head_dim/2,
/// already adjusted by any rope scaling.
#[derive(Clone, Debug)]
pub struct RopeTable {
    pub inv_freq: Vec<f32>,
    /// Multiplies cos and sin (YaRN's attention factor; 1 otherwise).
    pub attention_factor: f32,
    pub style: RopeStyle,
}

/// Rotates every head of one token's q or k vector (`x`: [n_heads, head_dim]) to position `pos`.
pub fn rope_in_place(x: &mut [f32], head_dim: usize, pos: usize, rope: &RopeTable) {
    let half = head_dim / 2;
    for head in x.chunks_exact_mut(head_dim) {
        for i in 0..half {
            // Angles in f64: positions in the tens of thousands lose digits in f32
            // before the sin/cos, which transformers computes in f32 on a product
            // pos*inv_freq too; f64 here keeps us at least as accurate.
            let angle = pos as f64 * rope.inv_freq[i] as f64;
            let (s, c) = angle.sin_cos();
            let (s, c) = ((s as f32) * rope.attention_factor, (c as f32) * rope.attention_factor);
            let (a, b) = match rope.style {
                RopeStyle::Interleaved => (2 * i, 2 * i + 1),
                RopeStyle::Neox => (i, i + half),
            };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0 * c - x1 * s;
            head[b] = x0 * s + x1 * c;
        }
    }
}
