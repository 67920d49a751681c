//! Causal attention of one query token over one sequence's cached keys and values.

#[cfg(target_arch = "x86_64")]
use std::sync::OnceLock;

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

#[cfg(target_arch = "x86_64")]
use super::simd::has_avx2_fma;
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
    attention_rows(shape, h, q, k, v, n_ctx, |j| j, scale, scores, out, &mut [])
}

/// Rows of cached keys or values as the attention kernel reads them: f32 as is,
/// f16/bf16 converted to f32 into a scratch row first (so the arithmetic after the
/// conversion is the f32 kernel's, bit for bit).
pub(super) trait KvRows {
    /// q · self[start..start + len], over the shorter of q and the row.
    fn dot(&self, q: &[f32], start: usize, len: usize, scratch: &mut [f32]) -> f32;
    /// out += p · self[start..start + len], over the shorter of out and the row.
    fn axpy(&self, p: f32, start: usize, len: usize, out: &mut [f32], scratch: &mut [f32]);
}

impl KvRows for [f32] {
    #[inline(always)]
    fn dot(&self, q: &[f32], start: usize, len: usize, _: &mut [f32]) -> f32 {
        dot_f32(q, &self[start..][..len])
    }

    #[inline(always)]
    fn axpy(&self, p: f32, start: usize, len: usize, out: &mut [f32], _: &mut [f32]) {
        axpy(p, &self[start..][..len], out)
    }
}

/// f16 and bf16 rows: converted into `scratch` (exactly: every f16/bf16 is an
/// f32), then the f32 kernels.
macro_rules! converted_rows {
    ($t:ty, $convert:ident) => {
        impl KvRows for [$t] {
            #[inline(always)]
            fn dot(&self, q: &[f32], start: usize, len: usize, scratch: &mut [f32]) -> f32 {
                let row = &mut scratch[..len];
                $convert(&self[start..][..len], row);
                dot_f32(q, row)
            }

            #[inline(always)]
            fn axpy(&self, p: f32, start: usize, len: usize, out: &mut [f32], scratch: &mut [f32]) {
                let row = &mut scratch[..len];
                $convert(&self[start..][..len], row);
                axpy(p, row, out)
            }
        }
    };
}
converted_rows!(f16, f16_to_f32);
converted_rows!(bf16, bf16_to_f32);

/// F16C, detected once at run time; off under PEREGRINE_FORCE_SCALAR like the
/// other vector paths.
#[cfg(target_arch = "x86_64")]
fn has_f16c() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        std::env::var_os("PEREGRINE_FORCE_SCALAR").is_none() && is_x86_feature_detected!("f16c")
    })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn f16_to_f32_f16c(src: &[f16], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = src.len().min(dst.len());
    let (ps, pd) = (src.as_ptr() as *const __m128i, dst.as_mut_ptr());
    let mut i = 0;
    while i + 8 <= n {
        _mm256_storeu_ps(pd.add(i), _mm256_cvtph_ps(_mm_loadu_si128(ps.byte_add(2 * i))));
        i += 8;
    }
    for (d, s) in dst[i..n].iter_mut().zip(&src[i..n]) {
        *d = s.to_f32();
    }
}

/// f16 → f32: eight lanes at a time with F16C when the CPU has it (detected at run
/// time), the `half` crate's conversion otherwise.
#[inline]
fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_f16c() {
        // SAFETY: the CPU has F16C (and so AVX), checked above.
        return unsafe { f16_to_f32_f16c(src, dst) };
    }
    src.convert_to_f32_slice(dst);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn bf16_to_f32_avx2(src: &[bf16], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = src.len().min(dst.len());
    let (ps, pd) = (src.as_ptr() as *const __m128i, dst.as_mut_ptr() as *mut __m256i);
    let mut i = 0;
    while i + 8 <= n {
        let wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(ps.byte_add(2 * i)));
        _mm256_storeu_si256(pd.byte_add(4 * i), _mm256_slli_epi32::<16>(wide));
        i += 8;
    }
    bf16_to_f32_plain(&src[i..n], &mut dst[i..n]);
}

/// bf16 → f32 is the 16 bits shifted up: AVX2 eight lanes at a time when the CPU
/// has it (detected at run time), a plain loop otherwise.
#[inline]
fn bf16_to_f32(src: &[bf16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU has AVX2, checked above.
        return unsafe { bf16_to_f32_avx2(src, dst) };
    }
    bf16_to_f32_plain(src, dst);
}

fn bf16_to_f32_plain(src: &[bf16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f32::from_bits((s.to_bits() as u32) << 16);
    }
}

/// The kernel behind contiguous and paged attention: row `row_of(j)` of `k`/`v`
/// ([rows, n_kv_heads · head_dim]) holds position j. `scratch`: at least head_dim
/// for f16/bf16 rows, unused (may be empty) for f32.
#[allow(clippy::too_many_arguments)]
pub(super) fn attention_rows<R: KvRows + ?Sized>(
    shape: AttentionShape,
    h: usize,
    q: &[f32],
    k: &R,
    v: &R,
    n_ctx: usize,
    row_of: impl Fn(usize) -> usize,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
    scratch: &mut [f32],
) {
    let AttentionShape { n_heads, n_kv_heads, head_dim } = shape;
    let off = (h / (n_heads / n_kv_heads)) * head_dim;
    let d = n_kv_heads * head_dim;
    let scores = &mut scores[..n_ctx];
    for (j, s) in scores.iter_mut().enumerate() {
        *s = k.dot(q, row_of(j) * d + off, head_dim, scratch) * scale;
    }
    softmax_in_place(scores);
    out.fill(0.0);
    for (j, &p) in scores.iter().enumerate() {
        v.axpy(p, row_of(j) * d + off, head_dim, out, scratch);
    }
}
