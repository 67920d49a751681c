//! f32 vector kernels with runtime dispatch: the same plain loop compiled twice,
//! once for the baseline x86-64 and once with AVX2+FMA enabled, picked at run time.

use std::sync::OnceLock;

fn has_avx2_fma() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::env::var_os("PEREGRINE_FORCE_SCALAR").is_none()
                && is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Eight independent accumulators so the compiler can keep them in one vector
/// register and the adds do not serialize.
#[inline(always)]
fn dot_body(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; 16];
    let chunks = n / 16;
    for c in 0..chunks {
        let (x, y) = (&a[c * 16..c * 16 + 16], &b[c * 16..c * 16 + 16]);
        for i in 0..16 {
            acc[i] = x[i].mul_add(y[i], acc[i]);
        }
    }
    let mut s = 0f32;
    for i in chunks * 16..n {
        s = a[i].mul_add(b[i], s);
    }
    let mut t = [0f32; 8];
    for i in 0..8 {
        t[i] = acc[i] + acc[i + 8];
    }
    s + ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_body(a, b)
}

/// Plain f32 dot product; `mul_add` without FMA hardware is slow, so the
/// baseline path uses separate multiply and add.
fn dot_baseline(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [0f32; 8];
    let chunks = n / 8;
    for c in 0..chunks {
        for i in 0..8 {
            acc[i] += a[c * 8 + i] * b[c * 8 + i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for i in chunks * 8..n {
        s += a[i] * b[i];
    }
    s
}

/// Σ a[i]·b[i] over the shorter length.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        return unsafe { dot_avx2(a, b) };
    }
    dot_baseline(a, b)
}

#[inline(always)]
fn axpy_body(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi = xi.mul_add(alpha, *yi);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy_avx2(alpha: f32, x: &[f32], y: &mut [f32]) {
    axpy_body(alpha, x, y)
}

/// y += alpha · x
pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { axpy_avx2(alpha, x, y) };
    }
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += xi * alpha;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_f64_for_every_tail_length() {
        for n in 0..70 {
            let a: Vec<f32> = (0..n).map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.37).collect();
            let b: Vec<f32> = (0..n).map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.21).collect();
            let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            assert!((dot_f32(&a, &b) as f64 - want).abs() < 1e-4, "n={n}");
            assert!((dot_baseline(&a, &b) as f64 - want).abs() < 1e-4, "n={n}");
            let mut y = b.clone();
            axpy(2.0, &a, &mut y);
            for i in 0..n {
                assert!((y[i] - (b[i] + 2.0 * a[i])).abs() < 1e-5);
            }
        }
    }
}
