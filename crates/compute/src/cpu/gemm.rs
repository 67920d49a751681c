//! The f32 micro-kernel of the multi-token matmul: a tile of weight rows already
//! dequantized to f32 against a few tokens at once.
//!
//! Dot-product form: both operands run along `cols`. For each 8-wide step the
//! kernel loads NT token vectors once and one weight vector per row, then does
//! NT × NR FMAs into NT × NR accumulators (3 × 4 = 12 ymm + 3 + 1 = 16 registers),
//! about 0.6 loads per FMA instead of 2 for a plain dot product.

/// out[t * out_stride + r] = w[r] · x[t] for r < nr, t < nt.
/// w: [nr, cols] (row stride `cols`), x: [nt, cols].
pub fn tile_dots(
    w: &[f32],
    nr: usize,
    x: &[f32],
    nt: usize,
    cols: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx2_fma() && cols.is_multiple_of(8) {
        let mut t = 0;
        while t < nt {
            let kt = (nt - t).min(3);
            let mut r = 0;
            while r < nr {
                let kr = (nr - r).min(4);
                // SAFETY: AVX2+FMA present; slices cover kr rows / kt tokens of `cols`.
                unsafe {
                    let wp = w[r * cols..].as_ptr();
                    let xp = x[t * cols..].as_ptr();
                    let mut res = [[0f32; 4]; 3];
                    match (kt, kr) {
                        (3, 4) => tile_avx2::<3, 4>(wp, xp, cols, &mut res),
                        (2, 4) => tile_avx2::<2, 4>(wp, xp, cols, &mut res),
                        (1, 4) => tile_avx2::<1, 4>(wp, xp, cols, &mut res),
                        (3, _) => tile_avx2::<3, 1>(wp, xp, cols, &mut res),
                        (2, _) => tile_avx2::<2, 1>(wp, xp, cols, &mut res),
                        _ => tile_avx2::<1, 1>(wp, xp, cols, &mut res),
                    }
                    let kr_done = if kr == 4 { 4 } else { 1 };
                    for (ti, row) in res.iter().enumerate().take(kt) {
                        for (ri, &v) in row.iter().enumerate().take(kr_done) {
                            out[(t + ti) * out_stride + r + ri] = v;
                        }
                    }
                    r += kr_done;
                }
            }
            t += kt;
        }
        return;
    }
    for t in 0..nt {
        for r in 0..nr {
            out[t * out_stride + r] =
                super::dot_f32(&w[r * cols..(r + 1) * cols], &x[t * cols..(t + 1) * cols]);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2<const NT: usize, const NR: usize>(
    w: *const f32,
    x: *const f32,
    cols: usize,
    res: &mut [[f32; 4]; 3],
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); NR]; NT];
    let mut k = 0;
    while k < cols {
        let mut xv = [_mm256_setzero_ps(); NT];
        for (t, xv) in xv.iter_mut().enumerate() {
            *xv = _mm256_loadu_ps(x.add(t * cols + k));
        }
        for r in 0..NR {
            let wv = _mm256_loadu_ps(w.add(r * cols + k));
            for (acc_t, &xt) in acc.iter_mut().zip(&xv) {
                acc_t[r] = _mm256_fmadd_ps(wv, xt, acc_t[r]);
            }
        }
        k += 8;
    }
    for t in 0..NT {
        for r in 0..NR {
            let s = acc[t][r];
            let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
            let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
            res[t][r] = _mm_cvtss_f32(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_of_every_shape_match_plain_dots() {
        for (nr, nt, cols) in [(16, 7, 64), (5, 3, 24), (3, 1, 8), (4, 2, 12), (9, 5, 40)] {
            let w: Vec<f32> = (0..nr * cols).map(|i| ((i * 13 % 19) as f32 - 9.0) * 0.05).collect();
            let x: Vec<f32> = (0..nt * cols).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.1).collect();
            let mut out = vec![f32::NAN; nt * nr];
            tile_dots(&w, nr, &x, nt, cols, &mut out, nr);
            for t in 0..nt {
                for r in 0..nr {
                    let want: f32 = (0..cols).map(|c| w[r * cols + c] * x[t * cols + c]).sum();
                    assert!((out[t * nr + r] - want).abs() < 1e-4, "nr={nr} nt={nt} t={t} r={r}");
                }
            }
        }
    }
}
