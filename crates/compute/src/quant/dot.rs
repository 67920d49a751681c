//! Dot product of one stored row with f32 activations: runtime dispatch and
//! the portable fallback.
//!
//! The weights are dequantized exactly as `dequantize_row` does and multiplied
//! with `x` in f32; only the summation order differs between paths (the
//! activations are never quantized, unlike ggml's `vec_dot_*` which rounds `x`
//! to 8 bits). The SIMD level is detected once, on first use.

use std::sync::OnceLock;

use super::dequant;
use super::dequant_k;
use super::WeightFormat;

/// Environment variable that forces the portable paths when set to anything
/// but "", "0" or "false" (read once, at the first dot product).
pub const FORCE_SCALAR_ENV: &str = "PEREGRINE_FORCE_SCALAR";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Scalar,
    ForcedScalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

fn level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(detect)
}

fn detect() -> Level {
    let forced =
        std::env::var(FORCE_SCALAR_ENV).map(|v| !matches!(v.trim(), "" | "0" | "false")).unwrap_or(false);
    if forced {
        return Level::ForcedScalar;
    }
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
    {
        return Level::Avx2;
    }
    Level::Scalar
}

/// The instruction set `dot_row` uses on this machine, for logs:
/// `"avx2+fma+f16c"`, `"scalar"`, or `"scalar (forced)"` under
/// `PEREGRINE_FORCE_SCALAR`.
pub fn simd_level() -> &'static str {
    match level() {
        Level::Scalar => "scalar",
        Level::ForcedScalar => "scalar (forced)",
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => "avx2+fma+f16c",
    }
}

/// Σ dequant(row)[i] · x[i], with the fastest kernel this CPU has.
///
/// `row` must hold exactly `x.len()` values in `format` (checked by
/// `debug_assert` only: this is the matmul inner loop). With mismatched
/// lengths the result covers only the whole blocks both slices hold; nothing
/// is ever read out of bounds.
#[inline]
pub fn dot_row(format: WeightFormat, row: &[u8], x: &[f32]) -> f32 {
    debug_assert_lengths(format, row, x);
    match level() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Level::Avx2 is only chosen when the CPU has avx2, fma and f16c.
        Level::Avx2 => unsafe { super::dot_avx2::dot_row(format, row, x) },
        Level::Scalar | Level::ForcedScalar => dot_row_scalar(format, row, x),
    }
}

/// `out[t] = dot_row(format, row, xs[t·cols..(t+1)·cols])` for every token t of
/// `xs` ([n, cols]), bit-identical to `dot_row` per token. For the formats small
/// batches meet most (Q4_0, Q4_1, Q8_0) each block is decoded once and multiplied
/// into every token's accumulators, so a decode step of a few sequences reads and
/// decodes each weight once instead of once per sequence.
pub fn dot_row_multi(format: WeightFormat, row: &[u8], xs: &[f32], out: &mut [f32]) {
    let cols = xs.len() / out.len().max(1);
    match level() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Level::Avx2 is only chosen when the CPU has avx2, fma and f16c.
        Level::Avx2 => unsafe { super::dot_avx2::dot_row_multi(format, row, xs, cols, out) },
        Level::Scalar | Level::ForcedScalar => {
            for (o, x) in out.iter_mut().zip(xs.chunks_exact(cols)) {
                *o = dot_row_scalar(format, row, x);
            }
        }
    }
}

/// The portable fallback of [`dot_row`], always compiled (and public so tests
/// can hold the SIMD kernels against it). Same length rules.
pub fn dot_row_scalar(format: WeightFormat, row: &[u8], x: &[f32]) -> f32 {
    debug_assert_lengths(format, row, x);
    use WeightFormat as W;
    let mut acc = Lanes::default();
    match format {
        W::F32 => {
            let mut buf = [0f32; 64];
            for (r, x) in row.chunks(256).zip(x.chunks(64)) {
                let n = (r.len() / 4).min(x.len());
                dequant::dequantize_unchecked_len(W::F32, r, &mut buf[..n]);
                acc.add(&buf[..n], &x[..n]);
            }
        }
        W::F16 | W::BF16 => {
            let mut buf = [0f32; 64];
            for (r, x) in row.chunks(128).zip(x.chunks(64)) {
                let n = (r.len() / 2).min(x.len());
                dequant::dequantize_unchecked_len(format, r, &mut buf[..n]);
                acc.add(&buf[..n], &x[..n]);
            }
        }
        W::Q4_0 => blocks(&mut acc, row, x, dequant::block_q4_0),
        W::Q4_1 => blocks(&mut acc, row, x, dequant::block_q4_1),
        W::Q5_0 => blocks(&mut acc, row, x, dequant::block_q5_0),
        W::Q5_1 => blocks(&mut acc, row, x, dequant::block_q5_1),
        W::Q8_0 => blocks(&mut acc, row, x, dequant::block_q8_0),
        W::Q8_1 => blocks(&mut acc, row, x, dequant::block_q8_1),
        W::Q2K => blocks(&mut acc, row, x, dequant_k::block_q2_k),
        W::Q3K => blocks(&mut acc, row, x, dequant_k::block_q3_k),
        W::Q4K => blocks(&mut acc, row, x, dequant_k::block_q4_k),
        W::Q5K => blocks(&mut acc, row, x, dequant_k::block_q5_k),
        W::Q6K => blocks(&mut acc, row, x, dequant_k::block_q6_k),
        W::Q8K => blocks(&mut acc, row, x, dequant_k::block_q8_k),
    }
    acc.sum()
}

/// Dequantizes each block into a stack buffer and accumulates its products.
#[inline(always)]
fn blocks<const TS: usize, const BS: usize>(
    acc: &mut Lanes,
    row: &[u8],
    x: &[f32],
    f: impl Fn(&[u8; TS], &mut [f32; BS]),
) {
    let mut buf = [0f32; BS];
    for (b, x) in row.chunks_exact(TS).zip(x.chunks_exact(BS)) {
        // Always Ok: chunks_exact gives exactly TS bytes.
        if let Ok(b) = b.try_into() {
            f(b, &mut buf);
            acc.add(&buf, x);
        }
    }
}

/// Eight independent partial sums: lane k adds the products at positions ≡ k
/// (mod 8). Independent lanes let the compiler vectorize without reassociating
/// float adds (which it may not do on its own), on any target; they also keep
/// each lane's sum short, which helps accuracy.
#[derive(Default)]
struct Lanes([f32; 8]);

impl Lanes {
    #[inline(always)]
    fn add(&mut self, w: &[f32], x: &[f32]) {
        let mut wc = w.chunks_exact(8);
        let mut xc = x.chunks_exact(8);
        for (w, x) in (&mut wc).zip(&mut xc) {
            for k in 0..8 {
                self.0[k] += w[k] * x[k];
            }
        }
        for (k, (w, x)) in wc.remainder().iter().zip(xc.remainder()).enumerate() {
            self.0[k] += w * x;
        }
    }

    #[inline(always)]
    fn sum(&self) -> f32 {
        let l = &self.0;
        ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]))
    }
}

#[inline(always)]
fn debug_assert_lengths(format: WeightFormat, row: &[u8], x: &[f32]) {
    debug_assert!(
        dequant::check_lengths(format, row.len(), x.len()).is_ok(),
        "dot_row({format}): {} bytes for {} values",
        row.len(),
        x.len()
    );
}
