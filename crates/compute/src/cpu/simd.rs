//! f32 vector kernels with runtime dispatch: the same plain loop compiled twice,
//! once for the baseline x86-64 and once with AVX2+FMA enabled, picked at run time.

use std::sync::OnceLock;

pub(super) fn has_avx2_fma() -> bool {
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

/// Four independent 8-lane accumulators so consecutive FMAs do not wait on each
/// other (FMA latency 4, two ports). Written with intrinsics: left to itself LLVM
/// vectorizes a 16-accumulator loop into 128-bit shuffles.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let x = _mm256_loadu_ps(pa.add(i + 8 * k));
            let y = _mm256_loadu_ps(pb.add(i + 8 * k));
            *acc = _mm256_fmadd_ps(x, y, *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc[0]);
        i += 8;
    }
    let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    let mut sum = _mm_cvtss_f32(h);
    while i < n {
        sum = a[i].mul_add(b[i], sum);
        i += 1;
    }
    sum
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

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy_avx2(alpha: f32, x: &[f32], y: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = x.len().min(y.len());
    let a = _mm256_set1_ps(alpha);
    let mut i = 0;
    while i + 8 <= n {
        let yp = y.as_mut_ptr().add(i);
        _mm256_storeu_ps(yp, _mm256_fmadd_ps(_mm256_loadu_ps(x.as_ptr().add(i)), a, _mm256_loadu_ps(yp)));
        i += 8;
    }
    while i < n {
        y[i] = x[i].mul_add(alpha, y[i]);
        i += 1;
    }
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
