//! The statistics vLLM's benchmarks take with numpy, computed the way numpy computes
//! them (same operation order, so the same bits), and Python's way of printing a float.

/// `numpy.mean` of a float64 array: numpy's pairwise sum divided by the length.
/// NaN for an empty slice (numpy warns and returns nan).
pub fn mean(xs: &[f64]) -> f64 {
    pairwise_sum(xs) / xs.len() as f64
}

/// numpy's `pairwise_sum` (numpy/_core/src/umath/loops_utils.h.src): a plain loop
/// under 8 elements, eight interleaved accumulators up to 128, halves above (split at
/// a multiple of 8).
pub fn pairwise_sum(xs: &[f64]) -> f64 {
    const BLOCK: usize = 128;
    let n = xs.len();
    if n < 8 {
        // -0.0 is the identity of addition (a sum of -0.0s stays -0.0).
        xs.iter().fold(-0.0, |acc, &x| acc + x)
    } else if n <= BLOCK {
        let mut r = [0.0f64; 8];
        r.copy_from_slice(&xs[..8]);
        let mut i = 8;
        while i < n - (n % 8) {
            for (k, acc) in r.iter_mut().enumerate() {
                *acc += xs[i + k];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for &x in &xs[i..] {
            res += x;
        }
        res
    } else {
        let mut half = n / 2;
        half -= half % 8;
        pairwise_sum(&xs[..half]) + pairwise_sum(&xs[half..])
    }
}

/// `numpy.percentile(xs, q)` with the default method ("linear", Hyndman & Fan type 7):
/// the sorted values interpolated at virtual index (n − 1)·q/100, with numpy's `_lerp`.
/// `None` for an empty slice or a q outside 0..=100.
pub fn percentile(xs: &[f64], q: f64) -> Option<f64> {
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    percentile_sorted(&sorted, q)
}

/// `percentile` of each q, sorting once.
pub fn percentiles(xs: &[f64], qs: &[f64]) -> Option<Vec<f64>> {
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    qs.iter().map(|&q| percentile_sorted(&sorted, q)).collect()
}

fn percentile_sorted(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=100.0).contains(&q) {
        return None;
    }
    let n = sorted.len();
    // numpy: quantiles = q / 100; virtual index = (n - 1) * quantiles.
    let virtual_index = (n - 1) as f64 * (q / 100.0);
    let previous = virtual_index.floor();
    let gamma = virtual_index - previous;
    let lo = (previous as usize).min(n - 1);
    let hi = (lo + 1).min(n - 1);
    Some(lerp(sorted[lo], sorted[hi], gamma))
}

/// numpy's `_lerp`: a + (b − a)·t, computed from b's side when t ≥ 0.5 (more exact
/// near b), and exactly a when a == b.
fn lerp(a: f64, b: f64, t: f64) -> f64 {
    let diff = b - a;
    let mut out = a + diff * t;
    if t >= 0.5 {
        out = b - diff * (1.0 - t);
    }
    if a == b {
        out = a;
    }
    out
}

/// How Python prints a float (`repr` / `str` / an f-string without a format spec):
/// the shortest text that reads back to the same value, "2.0" for whole numbers,
/// scientific with a two-digit exponent below 1e-4 or from 1e16 on.
pub fn py_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    let abs = x.abs();
    if (1e-4..1e16).contains(&abs) {
        let s = format!("{x}");
        if s.contains('.') {
            s
        } else {
            format!("{s}.0")
        }
    } else {
        // Rust gives "1.5e-7" / "1e16"; Python "1.5e-07" / "1e+16".
        let s = format!("{x:e}");
        let (mantissa, exp) = s.split_once('e').expect("{:e} has an exponent");
        let exp: i32 = exp.parse().expect("integer exponent");
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM_PERCENTAGES: [f64; 6] = [10.0, 25.0, 50.0, 75.0, 90.0, 99.0];

    #[test]
    fn percentiles_match_numpy_linear() {
        // numpy.percentile([1, 2, 3, 4], [10, 25, 50, 75, 90, 99])
        // → [1.3, 1.75, 2.5, 3.25, 3.7, 3.97] (numpy prints these reprs).
        let p = percentiles(&[4.0, 2.0, 1.0, 3.0], &VLLM_PERCENTAGES).unwrap();
        let numpy = [1.3, 1.75, 2.5, 3.25, 3.7, 3.9699999999999998];
        assert_eq!(p, numpy);
        // numpy.percentile([0.5, 0.25, 2.0], [10, 25, 50, 75, 90, 99]), as numpy 2.4 gives it.
        let p = percentiles(&[0.5, 0.25, 2.0], &VLLM_PERCENTAGES).unwrap();
        assert_eq!(p, [0.3, 0.375, 0.5, 1.25, 1.7000000000000002, 1.97]);
    }

    #[test]
    fn percentile_edges() {
        assert_eq!(percentile(&[7.0], 10.0), Some(7.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[1.0, 5.0], 0.0), Some(1.0));
        assert_eq!(percentile(&[1.0, 5.0], 100.0), Some(5.0));
        assert_eq!(percentile(&[1.0, 5.0], 50.0), Some(3.0));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[1.0], 101.0), None);
        // Equal neighbours give exactly that value.
        assert_eq!(percentile(&[0.1, 0.1, 0.1], 37.0), Some(0.1));
    }

    #[test]
    fn mean_is_numpy_pairwise() {
        assert_eq!(mean(&[1.0, 2.0, 3.0, 4.0]), 2.5);
        // Past 8 elements numpy's accumulators reassociate the sum: 0.1 × 10
        // is 1.0 there (numpy.mean([0.1] * 10) == 0.1), where a left fold gives
        // 0.9999999999999999.
        let tenths = [0.1; 10];
        assert_eq!(tenths.iter().sum::<f64>(), 0.9999999999999999);
        assert_eq!(pairwise_sum(&tenths), 1.0);
        assert_eq!(mean(&tenths), 0.1);
        // The recursive split above 128 elements still adds everything.
        let xs: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(pairwise_sum(&xs), 500_500.0);
        assert!(mean(&[]).is_nan());
    }

    #[test]
    fn floats_print_as_python() {
        assert_eq!(py_float(2.0), "2.0");
        assert_eq!(py_float(1.3), "1.3");
        assert_eq!(py_float(0.30000000000000004), "0.30000000000000004");
        assert_eq!(py_float(0.0001), "0.0001");
        assert_eq!(py_float(0.00001), "1e-05");
        assert_eq!(py_float(1.5e-7), "1.5e-07");
        assert_eq!(py_float(1e16), "1e+16");
        assert_eq!(py_float(123456.789), "123456.789");
        assert_eq!(py_float(-0.5), "-0.5");
        assert_eq!(py_float(0.0), "0.0");
    }
}
