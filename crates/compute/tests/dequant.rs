//! The quant routines against ggml's reference values.
//!
//! Fixtures (tests/fixtures/quant/cases.json) come from scripts/quant_fixtures.py:
//! stored rows of every format (quantized by gguf-py, random bytes with sane
//! scales, edge scales, float specials, and rows of the real SmolLM2 Q4_1 model)
//! with gguf-py's dequantized values, whose float operations match
//! ggml-quants.c's `dequantize_row_*` one for one.
//!
//! * `dequantize_row` must match bit for bit. The one exception is NaN
//!   payloads of F16/BF16 inputs (only "is NaN" is compared): numpy keeps a
//!   signalling NaN's payload, the `half` crate and F16C set the quiet bit, and
//!   ggml's own f16 conversion depends on the build (table, F16C or bit trick).
//! * `dot_row` / `dot_row_scalar` compute in f32 with a different summation
//!   order, so they are held to the f64 dot of the reference values within the
//!   classic summation bound |err| <= γ · Σ|wᵢxᵢ| with γ = (n/8 + 16) · ε_f32
//!   (both paths sum at least 8 independent lanes of at most n/8 terms each,
//!   plus one rounding per product and the final lane reduction).
//! * A dot with a one-hot x must return the dequantized weight exactly: both
//!   paths rebuild the weights with the same f32 operations as
//!   `dequantize_row`, and adding zeros is exact. This pins every element of the
//!   SIMD kernels' unpacking, not just their sum.
//!
//! Run once with PEREGRINE_FORCE_SCALAR=1 too: `force_scalar_env_is_honoured`
//! then checks that `dot_row` is the scalar path.

use peregrine_compute::quant::{
    dequantize_row, dot_row, dot_row_multi, dot_row_scalar, simd_level, QuantError, WeightFormat,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

struct Case {
    name: String,
    format: WeightFormat,
    n: usize,
    finite: bool,
    src: Vec<u8>,
    expected: Vec<f32>,
}

fn hex(s: &str) -> Vec<u8> {
    assert_eq!(s.len() % 2, 0, "odd hex length");
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

fn format_named(name: &str) -> WeightFormat {
    WeightFormat::ALL
        .into_iter()
        .find(|f| f.name() == name)
        .unwrap_or_else(|| panic!("unknown format {name}"))
}

fn cases() -> Vec<Case> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/quant/cases.json");
    let text = std::fs::read_to_string(path).expect("run scripts/quant_fixtures.py");
    let json: serde_json::Value = serde_json::from_str(&text).expect("fixture json");
    json["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            let format = format_named(c["format"].as_str().unwrap());
            assert_eq!(c["ggml_id"].as_u64().unwrap() as u32, format.ggml_id());
            let expected: Vec<f32> = hex(c["expected"].as_str().unwrap())
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let n = c["n"].as_u64().unwrap() as usize;
            assert_eq!(expected.len(), n);
            Case {
                name: c["name"].as_str().unwrap().to_string(),
                format,
                n,
                finite: c["finite"].as_bool().unwrap(),
                src: hex(c["src"].as_str().unwrap()),
                expected,
            }
        })
        .collect()
}

fn random_x(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// f64 reference dot and the error scale Σ|wᵢxᵢ|.
fn reference_dot(w: &[f32], x: &[f32]) -> (f64, f64) {
    let mut dot = 0f64;
    let mut abs = 0f64;
    for (&w, &x) in w.iter().zip(x) {
        dot += w as f64 * x as f64;
        abs += (w as f64 * x as f64).abs();
    }
    (dot, abs)
}

fn tolerance(n: usize, abs: f64) -> f64 {
    (n as f64 / 8.0 + 16.0) * f32::EPSILON as f64 * abs + f32::MIN_POSITIVE as f64
}

#[test]
fn fixtures_cover_every_format_and_the_real_model() {
    let cases = cases();
    for f in WeightFormat::ALL {
        assert!(cases.iter().any(|c| c.format == f), "no fixture for {f}");
    }
    for f in [WeightFormat::Q4_1, WeightFormat::Q8_0] {
        assert!(
            cases.iter().any(|c| c.format == f && c.name.starts_with("real/")),
            "no real-model row for {f}"
        );
    }
}

#[test]
fn dequantize_matches_ggml_reference_bitwise() {
    let mut failures = Vec::new();
    for c in cases() {
        let mut got = vec![f32::NAN; c.n];
        dequantize_row(c.format, &c.src, &mut got).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        let bad = got.iter().zip(&c.expected).position(|(g, e)| {
            if e.is_nan() {
                !g.is_nan()
            } else {
                g.to_bits() != e.to_bits()
            }
        });
        if let Some(i) = bad {
            failures.push(format!(
                "{} ({}): value {i}: got {:e} ({:#010x}), want {:e} ({:#010x})",
                c.name,
                c.format,
                got[i],
                got[i].to_bits(),
                c.expected[i],
                c.expected[i].to_bits()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn dot_row_matches_f64_reference() {
    eprintln!("simd_level = {}", simd_level());
    let mut rng = StdRng::seed_from_u64(7);
    let mut worst = 0f64;
    for c in cases().into_iter().filter(|c| c.finite) {
        let x = random_x(&mut rng, c.n);
        let (want, abs) = reference_dot(&c.expected, &x);
        let tol = tolerance(c.n, abs);
        for (path, got) in [
            ("dot_row", dot_row(c.format, &c.src, &x)),
            ("dot_row_scalar", dot_row_scalar(c.format, &c.src, &x)),
        ] {
            let err = (got as f64 - want).abs();
            assert!(err <= tol, "{} {path}: got {got}, want {want} (err {err:e} > tol {tol:e})", c.name);
            worst = worst.max(err / abs.max(f64::MIN_POSITIVE));
        }
    }
    eprintln!("worst |err| / Σ|wx| = {worst:e}");
}

#[test]
fn one_hot_dot_returns_each_weight_exactly() {
    for c in cases().into_iter().filter(|c| c.finite) {
        // The first 600 values are plenty (and keep the test quick).
        let n = c.n.min(600).next_multiple_of(c.format.block_size()).min(c.n);
        let bytes = c.format.bytes_for(n as u64).unwrap() as usize;
        let row = &c.src[..bytes];
        let mut x = vec![0f32; n];
        for i in 0..n {
            x[i] = 1.0;
            let simd = dot_row(c.format, row, &x);
            let scalar = dot_row_scalar(c.format, row, &x);
            // -0.0 weights sum to +0.0 with the other lanes' zeros: compare as values.
            assert!(
                simd == c.expected[i] && scalar == c.expected[i],
                "{} value {i}: dot_row {simd:e}, dot_row_scalar {scalar:e}, want {:e}",
                c.name,
                c.expected[i]
            );
            x[i] = 0.0;
        }
    }
}

/// Where the f16 / f32 scale fields of each block sit (ggml-common.h), so that
/// random blocks have finite, moderate scales.
fn scale_fields(f: WeightFormat) -> &'static [(usize, bool)] {
    use WeightFormat as W;
    // (offset, is_f32)
    match f {
        W::Q4_0 | W::Q5_0 | W::Q8_0 => &[(0, false)],
        W::Q4_1 | W::Q5_1 | W::Q4K | W::Q5K => &[(0, false), (2, false)],
        W::Q8_1 => &[(0, true), (4, true)],
        W::Q2K => &[(80, false), (82, false)],
        W::Q3K => &[(108, false)],
        W::Q6K => &[(208, false)],
        W::Q8K => &[(0, true)],
        W::F32 | W::F16 | W::BF16 => &[],
    }
}

fn random_row(rng: &mut StdRng, f: WeightFormat, n: usize) -> Vec<u8> {
    use WeightFormat as W;
    match f {
        W::F32 => (0..n).flat_map(|_| rng.random_range(-4.0f32..4.0).to_le_bytes()).collect(),
        W::F16 => {
            (0..n).flat_map(|_| half::f16::from_f32(rng.random_range(-4.0f32..4.0)).to_le_bytes()).collect()
        }
        W::BF16 => {
            (0..n).flat_map(|_| half::bf16::from_f32(rng.random_range(-4.0f32..4.0)).to_le_bytes()).collect()
        }
        _ => {
            let mut row: Vec<u8> = (0..f.bytes_for(n as u64).unwrap()).map(|_| rng.random()).collect();
            for block in row.chunks_exact_mut(f.type_size()) {
                for &(off, is_f32) in scale_fields(f) {
                    let v = rng.random_range(-0.05f32..0.05);
                    if is_f32 {
                        block[off..off + 4].copy_from_slice(&v.to_le_bytes());
                    } else {
                        block[off..off + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
                    }
                }
            }
            row
        }
    }
}

/// One row against several tokens gives, per token, exactly `dot_row`'s result
/// (same decode, same summation order): a decode token's logits do not depend on
/// how many other sequences share its step.
#[test]
fn dot_row_multi_is_dot_row_per_token_bitwise() {
    let mut rng = StdRng::seed_from_u64(12);
    for f in WeightFormat::ALL {
        let n = 3 * f.block_size().max(32);
        let row = random_row(&mut rng, f, n);
        for tokens in 1..=9 {
            let xs = random_x(&mut rng, n * tokens);
            let mut got = vec![0f32; tokens];
            dot_row_multi(f, &row, &xs, &mut got);
            for (t, g) in got.iter().enumerate() {
                let want = dot_row(f, &row, &xs[t * n..(t + 1) * n]);
                assert_eq!(g.to_bits(), want.to_bits(), "{f}, {tokens} tokens, token {t}");
            }
        }
    }
}

/// Many lengths (1 block, odd block counts, SIMD tails for the float formats),
/// every format: both dot paths against the f64 dot of `dequantize_row`.
#[test]
fn dot_paths_agree_on_random_rows_of_many_lengths() {
    let mut rng = StdRng::seed_from_u64(11);
    for f in WeightFormat::ALL {
        let bs = f.block_size();
        let lengths: Vec<usize> = if bs == 1 {
            vec![1, 2, 7, 8, 9, 15, 31, 32, 33, 63, 65, 100, 576, 1000]
        } else {
            [1, 2, 3, 5, 8, 18].iter().map(|b| b * bs).collect()
        };
        for n in lengths {
            let row = random_row(&mut rng, f, n);
            let x = random_x(&mut rng, n);
            let mut w = vec![0f32; n];
            dequantize_row(f, &row, &mut w).unwrap();
            assert!(w.iter().all(|v| v.is_finite()), "{f} n={n}: non-finite weights");
            let (want, abs) = reference_dot(&w, &x);
            let tol = tolerance(n, abs);
            for (path, got) in
                [("dot_row", dot_row(f, &row, &x)), ("dot_row_scalar", dot_row_scalar(f, &row, &x))]
            {
                let err = (got as f64 - want).abs();
                assert!(err <= tol, "{f} n={n} {path}: got {got}, want {want} (err {err:e} > {tol:e})");
            }
        }
    }
}

#[test]
fn bad_lengths_are_errors_not_panics() {
    for f in WeightFormat::ALL {
        let bs = f.block_size();
        let ts = f.type_size();
        // Empty rows are fine.
        assert_eq!(dequantize_row(f, &[], &mut []), Ok(()));

        let good = vec![0u8; 2 * ts];
        let mut dst = vec![1.5f32; 2 * bs];
        // Source one byte short / long.
        for src in [&good[..2 * ts - 1], &[good.as_slice(), &[0u8]].concat()[..]] {
            let err = dequantize_row(f, src, &mut dst).unwrap_err();
            assert_eq!(
                err,
                QuantError::SourceLength { format: f, n: 2 * bs, expected: 2 * ts, got: src.len() }
            );
            assert!(dst.iter().all(|&v| v == 1.5), "{f}: dst written on error");
        }
        // Source of the wrong block count.
        assert!(matches!(dequantize_row(f, &good[..ts], &mut dst), Err(QuantError::SourceLength { .. })));
        if bs > 1 {
            // Output not a whole number of blocks.
            let mut short = vec![0f32; 2 * bs - 1];
            assert_eq!(
                dequantize_row(f, &good, &mut short),
                Err(QuantError::PartialBlock { format: f, n: 2 * bs - 1, block_size: bs })
            );
        }
        assert!(!dequantize_row(f, &good[..1], &mut dst).unwrap_err().to_string().is_empty());
    }
}

/// Release builds (no debug_assert) must stay in bounds on mismatched lengths:
/// the dot covers the whole blocks both slices hold.
#[cfg(not(debug_assertions))]
#[test]
fn mismatched_dot_lengths_stay_in_bounds() {
    let mut rng = StdRng::seed_from_u64(13);
    for f in WeightFormat::ALL {
        let bs = f.block_size();
        let n = 4 * bs.max(8);
        let row = random_row(&mut rng, f, n);
        let x = random_x(&mut rng, n);
        let half_n = n / 2;
        let half_bytes = f.bytes_for(half_n as u64).unwrap() as usize;
        let want_half = dot_row_scalar(f, &row[..half_bytes], &x[..half_n]);
        for dot in [dot_row, dot_row_scalar] {
            // Short x, short row, a ragged byte tail: only the common whole blocks count.
            assert_eq!(
                dot(f, &row, &x[..half_n]).to_bits(),
                dot(f, &row[..half_bytes], &x[..half_n]).to_bits()
            );
            assert_eq!(
                dot(f, &row[..half_bytes], &x).to_bits(),
                dot(f, &row[..half_bytes], &x[..half_n]).to_bits()
            );
            let ragged = dot(f, &row[..half_bytes + 1], &x[..half_n]);
            assert!(ragged.is_finite());
            assert_eq!(dot(f, &[], &x), 0.0);
            assert_eq!(dot(f, &row, &[]), 0.0);
        }
        let got = dot_row(f, &row[..half_bytes], &x[..half_n]);
        let err = (got as f64 - want_half as f64).abs();
        assert!(err <= 1e-4 * (1.0 + want_half.abs() as f64), "{f}");
    }
}

#[test]
fn force_scalar_env_is_honoured() {
    let forced = std::env::var("PEREGRINE_FORCE_SCALAR").is_ok_and(|v| v == "1");
    let level = simd_level();
    eprintln!("simd_level = {level}");
    if forced {
        assert_eq!(level, "scalar (forced)");
        let mut rng = StdRng::seed_from_u64(17);
        for c in cases().into_iter().filter(|c| c.finite) {
            let x = random_x(&mut rng, c.n);
            assert_eq!(
                dot_row(c.format, &c.src, &x).to_bits(),
                dot_row_scalar(c.format, &c.src, &x).to_bits(),
                "{}",
                c.name
            );
        }
    } else {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
        {
            assert_eq!(level, "avx2+fma+f16c", "SIMD kernels are not being tested");
        }
    }
}
