//! The green-list watermark of Kirchenbauer et al. (2023), "A Watermark for Large
//! Language Models", as Text Generation Inference offers it (`watermark: true` per
//! request; `--watermark-gamma`, default 0.5, and `--watermark-delta`, default 2.0),
//! and its detector.
//!
//! At each step the vocabulary is split, by a keyed function of the previous token,
//! into a "green" fraction γ and a "red" rest, and δ is added to every green logit
//! ("soft" watermark). Text generated so holds markedly more than γ green tokens,
//! which [`WatermarkConfig::detect`] measures with a one-proportion z-test:
//! z = (|s|_G − γT) / √(T γ (1 − γ)) over T scored tokens.
//!
//! # The green list: a per-token hash instead of a permutation
//!
//! The paper (and TGI) seed a generator with a hash of the previous token and take
//! the first γ|V| entries of a random permutation of the vocabulary. Here instead
//! each (previous token, candidate) pair gets its own uniform draw:
//!
//! ```text
//! seed(prev)     = mix(key ⊕ mix(prev + φ))           // φ = 0x9E37_79B9_7F4A_7C15
//! u(prev, tok)   = mix(seed(prev) + (tok + 1)·φ) / 2⁶⁴ // the (tok+1)-th SplitMix64 output
//! green          ⇔ u(prev, tok) < γ
//! ```
//!
//! where `mix` is the SplitMix64 finalizer (a bijection of u64 with full avalanche).
//! That is, `tok`'s draw is the `tok + 1`-th output of a SplitMix64 generator seeded
//! by a keyed hash of `prev`: each token is green independently with probability γ,
//! so the green list has γ|V| tokens in expectation (binomially, not exactly), and
//! deciding one token costs O(1) — O(|V|) a step with no permutation, no allocation,
//! and the detector need not know the vocabulary size. The detector's statistics are
//! unchanged: under the null hypothesis (text written without the key) every scored
//! token is green with probability γ, independently of the text.
//!
//! Lists from this crate are therefore *not* TGI's (whose seed is `hash_key · prev`
//! fed to torch's generator); the default key is TGI's `hash_key`, 15485863.
//!
//! # Scoring
//!
//! Every token after the first is scored, with the token before it as context. The
//! paper's option of scoring each repeated (prev, tok) bigram only once is not taken:
//! it matters for highly repetitive text (where repeats inflate z either way), and
//! the plain count keeps the z-test exact for ordinary text.

/// SplitMix64's increment, ⌊2⁶⁴/φ⌋ (odd).
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The SplitMix64 finalizer (Stafford's Mix13): a bijection with full avalanche.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WatermarkConfig {
    /// Fraction of the vocabulary that is green at each step, in (0, 1).
    pub gamma: f32,
    /// Added to the logits of green tokens, ≥ 0.
    pub delta: f32,
    /// Secret key of the green lists; detection needs the same one.
    pub key: u64,
}

impl Default for WatermarkConfig {
    /// TGI's defaults: γ = 0.5, δ = 2.0, hash key 15485863.
    fn default() -> Self {
        Self { gamma: 0.5, delta: 2.0, key: 15_485_863 }
    }
}

/// The result of [`WatermarkConfig::detect`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Detection {
    /// T: the tokens scored (all but the first).
    pub tokens_scored: usize,
    /// Green tokens among them.
    pub green: usize,
    /// green / T (0 when T = 0).
    pub green_fraction: f64,
    /// (green − γT) / √(T γ (1 − γ)); 0 when T = 0.
    pub z_score: f64,
    /// One-sided P(Z ≥ z) for standard normal Z; 1 when T = 0.
    pub p_value: f64,
}

impl WatermarkConfig {
    /// Describes the first invalid field, naming it.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.gamma > 0.0 && self.gamma < 1.0) {
            return Err(format!("watermark gamma must be in (0, 1), got {}", self.gamma));
        }
        if !(self.delta >= 0.0 && self.delta.is_finite()) {
            return Err(format!("watermark delta must be finite and >= 0, got {}", self.delta));
        }
        Ok(())
    }

    /// The seed of `prev`'s green list.
    #[inline]
    fn row_seed(&self, prev: u32) -> u64 {
        mix(self.key ^ mix(u64::from(prev).wrapping_add(GOLDEN)))
    }

    /// Whether `tok` is green in the list of the row seeded `seed`.
    #[inline]
    fn green_in_row(seed: u64, gamma: f64, tok: u32) -> bool {
        let h = mix(seed.wrapping_add(u64::from(tok).wrapping_add(1).wrapping_mul(GOLDEN)));
        // The top 53 bits as a uniform double in [0, 1).
        ((h >> 11) as f64) * (1.0 / (1u64 << 53) as f64) < gamma
    }

    /// Whether `tok` is green when it follows `prev`.
    pub fn is_green(&self, prev: u32, tok: u32) -> bool {
        Self::green_in_row(self.row_seed(prev), f64::from(self.gamma), tok)
    }

    /// Adds δ to the logit of every token green after `prev` (index = token id).
    pub fn apply(&self, prev: u32, logits: &mut [f32]) {
        if self.delta == 0.0 {
            return;
        }
        let seed = self.row_seed(prev);
        let gamma = f64::from(self.gamma);
        for (tok, l) in logits.iter_mut().enumerate() {
            if Self::green_in_row(seed, gamma, tok as u32) {
                *l += self.delta;
            }
        }
    }

    /// Scores `tokens[i]` against `tokens[i - 1]` for every i ≥ 1 (see the module doc).
    pub fn detect(&self, tokens: &[u32]) -> Detection {
        let t = tokens.len().saturating_sub(1);
        let green = tokens.windows(2).filter(|w| self.is_green(w[0], w[1])).count();
        if t == 0 {
            return Detection { tokens_scored: 0, green: 0, green_fraction: 0.0, z_score: 0.0, p_value: 1.0 };
        }
        let (tf, g) = (t as f64, f64::from(self.gamma));
        let z = (green as f64 - g * tf) / (tf * g * (1.0 - g)).sqrt();
        Detection {
            tokens_scored: t,
            green,
            green_fraction: green as f64 / tf,
            z_score: z,
            p_value: normal_upper_tail(z),
        }
    }
}

/// P(Z ≥ z) for a standard normal Z: erfc(z/√2) / 2.
pub fn normal_upper_tail(z: f64) -> f64 {
    0.5 * erfc(z * std::f64::consts::FRAC_1_SQRT_2)
}

/// The complementary error function, to about 1e-12 relative (checked against libm on
/// [0, 30]; 0 past x ≈ 27.3, where e^(−x²) underflows; NaN for NaN).
///
/// For |x| < 2, 1 − erf(x) with erf(x) = (2/√π) e^(−x²) Σₙ 2ⁿ x^(2n+1) / (2n+1)!!
/// (positive terms, no cancellation within the sum; at most ~35 of them); for x ≥ 2,
/// the continued fraction erfc(x) = e^(−x²)/√π · 1/(x + ½/(x + 1/(x + (3/2)/(x + …)))),
/// evaluated backward from 50 levels (converged to rounding for x ≥ 2 by ~40).
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    let x2 = x * x;
    if x < 2.0 {
        let (mut term, mut sum) = (x, x);
        let mut n = 0.0;
        while term > 1e-17 * sum {
            n += 1.0;
            term *= 2.0 * x2 / (2.0 * n + 1.0);
            sum += term;
        }
        return 1.0 - std::f64::consts::FRAC_2_SQRT_PI * (-x2).exp() * sum;
    }
    let mut f = x;
    for k in (1..=50).rev() {
        f = x + 0.5 * f64::from(k) / f;
    }
    // 1/√π = (2/√π) / 2.
    0.5 * std::f64::consts::FRAC_2_SQRT_PI * (-x2).exp() / f
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn rel_err(a: f64, b: f64) -> f64 {
        ((a - b) / b).abs()
    }

    #[test]
    fn defaults_are_tgis_and_valid() {
        let c = WatermarkConfig::default();
        assert_eq!((c.gamma, c.delta, c.key), (0.5, 2.0, 15_485_863));
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn validate_names_the_field() {
        let base = WatermarkConfig::default();
        for gamma in [0.0, 1.0, -0.1, 1.5, f32::NAN] {
            let e = WatermarkConfig { gamma, ..base }.validate().unwrap_err();
            assert!(e.contains("gamma"), "{e}");
        }
        for delta in [-0.5, f32::INFINITY, f32::NAN] {
            let e = WatermarkConfig { delta, ..base }.validate().unwrap_err();
            assert!(e.contains("delta"), "{e}");
        }
        assert_eq!(WatermarkConfig { delta: 0.0, gamma: 0.01, ..base }.validate(), Ok(()));
    }

    #[test]
    fn green_fraction_of_random_pairs_is_gamma() {
        let mut rng = StdRng::seed_from_u64(7);
        for gamma in [0.25f32, 0.5] {
            let c = WatermarkConfig { gamma, ..Default::default() };
            let n = 200_000;
            let green = (0..n)
                .filter(|_| c.is_green(rng.random_range(0..50_000), rng.random_range(0..50_000)))
                .count();
            let frac = green as f64 / n as f64;
            assert!((frac - f64::from(gamma)).abs() < 0.01, "gamma {gamma}: {frac}");
        }
    }

    #[test]
    fn green_list_size_per_context_is_gamma_of_vocab() {
        // Each context's list over a 50k vocabulary: γ|V| ± a few binomial σ (σ ≈ 97 at γ = 0.25).
        for gamma in [0.25f32, 0.5] {
            let c = WatermarkConfig { gamma, ..Default::default() };
            for prev in [0u32, 1, 2, 17, 49_999, u32::MAX] {
                let size = (0..50_000u32).filter(|&t| c.is_green(prev, t)).count() as f64;
                assert!((size / 50_000.0 - f64::from(gamma)).abs() < 0.01, "γ {gamma} prev {prev}: {size}");
            }
        }
    }

    #[test]
    fn green_lists_depend_on_context_and_key() {
        let c = WatermarkConfig::default();
        let other_key = WatermarkConfig { key: 42, ..c };
        let list =
            |c: &WatermarkConfig, prev| (0..10_000u32).map(|t| c.is_green(prev, t)).collect::<Vec<_>>();
        let agree = |a: &[bool], b: &[bool]| a.iter().zip(b).filter(|(x, y)| x == y).count();
        let (a, b, k) = (list(&c, 5), list(&c, 6), list(&other_key, 5));
        // Independent lists agree on about half the tokens at γ = 0.5.
        assert!((4_700..5_300).contains(&agree(&a, &b)), "{}", agree(&a, &b));
        assert!((4_700..5_300).contains(&agree(&a, &k)), "{}", agree(&a, &k));
        assert_eq!(a, list(&c, 5));
    }

    #[test]
    fn apply_adds_delta_to_exactly_the_green_tokens() {
        let c = WatermarkConfig { gamma: 0.25, delta: 1.5, key: 99 };
        let mut rng = StdRng::seed_from_u64(3);
        let before: Vec<f32> = (0..5_000).map(|_| rng.random_range(-10.0f32..10.0)).collect();
        let mut after = before.clone();
        c.apply(123, &mut after);
        let mut n_green = 0;
        for (tok, (&b, &a)) in before.iter().zip(&after).enumerate() {
            if c.is_green(123, tok as u32) {
                n_green += 1;
                assert_eq!(a, b + 1.5, "token {tok}");
            } else {
                assert_eq!(a, b, "token {tok}");
            }
        }
        assert!((1_100..1_400).contains(&n_green), "{n_green}");
        let mut zero = before.clone();
        WatermarkConfig { delta: 0.0, ..c }.apply(123, &mut zero);
        assert_eq!(zero, before);
    }

    /// A standard normal by Box-Muller.
    fn normal(rng: &mut StdRng) -> f32 {
        let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]
        let u2: f64 = rng.random();
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }

    /// 200 tokens sampled at temperature 1 from i.i.d. N(0, 1) logits over 5000 tokens,
    /// watermarked by `wm` if given; returns the context token followed by them.
    fn generate(wm: Option<&WatermarkConfig>, seed: u64) -> Vec<u32> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut tokens = vec![rng.random_range(0..5_000u32)];
        let mut logits = vec![0f32; 5_000];
        for _ in 0..200 {
            logits.iter_mut().for_each(|l| *l = normal(&mut rng));
            if let Some(wm) = wm {
                wm.apply(*tokens.last().unwrap(), &mut logits);
            }
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let weights: Vec<f64> = logits.iter().map(|&l| f64::from(l - max).exp()).collect();
            let mut r = rng.random::<f64>() * weights.iter().sum::<f64>();
            let mut next = weights.len() - 1;
            for (i, w) in weights.iter().enumerate() {
                if r < *w {
                    next = i;
                    break;
                }
                r -= w;
            }
            tokens.push(next as u32);
        }
        tokens
    }

    #[test]
    fn detects_watermarked_generation() {
        let wm = WatermarkConfig::default();
        let text = generate(Some(&wm), 1);
        let d = wm.detect(&text);
        assert_eq!(d.tokens_scored, 200);
        assert!(d.z_score > 4.0 && d.p_value < 1e-4, "{d:?}");
        // E[green fraction] = γe^δ / (γe^δ + 1 − γ) ≈ 0.88 here.
        assert!(d.green_fraction > 0.75, "{d:?}");
        assert_eq!(d.green_fraction, d.green as f64 / 200.0);
    }

    #[test]
    fn unwatermarked_generation_is_not_detected() {
        let wm = WatermarkConfig::default();
        for seed in 1..6 {
            let d = wm.detect(&generate(None, seed));
            assert_eq!(d.tokens_scored, 200);
            assert!(d.z_score.abs() < 3.0, "seed {seed}: {d:?}");
        }
    }

    #[test]
    fn a_different_key_does_not_detect() {
        let wm = WatermarkConfig::default();
        let text = generate(Some(&wm), 1);
        for key in [0, 1, 15_485_864, u64::MAX] {
            let d = WatermarkConfig { key, ..wm }.detect(&text);
            assert!(d.z_score.abs() < 3.0, "key {key}: {d:?}");
        }
    }

    #[test]
    fn detect_counts_and_short_inputs() {
        let wm = WatermarkConfig::default();
        for tokens in [&[][..], &[7][..]] {
            let d = wm.detect(tokens);
            assert_eq!(
                d,
                Detection { tokens_scored: 0, green: 0, green_fraction: 0.0, z_score: 0.0, p_value: 1.0 }
            );
        }
        let tokens = [5u32, 9, 12, 9, 5, 1_000];
        let green = tokens.windows(2).filter(|w| wm.is_green(w[0], w[1])).count();
        let d = wm.detect(&tokens);
        assert_eq!((d.tokens_scored, d.green), (5, green));
        let z = (green as f64 - 2.5) / (5.0f64 * 0.25).sqrt();
        assert!((d.z_score - z).abs() < 1e-12);
        assert!((d.p_value - normal_upper_tail(z)).abs() < 1e-15);
    }

    #[test]
    fn p_values_of_known_z() {
        assert_eq!(normal_upper_tail(0.0), 0.5);
        assert!(rel_err(normal_upper_tail(2.0), 0.022_750_131_948_179_2) < 1e-9);
        assert!(rel_err(normal_upper_tail(4.0), 3.167_124_183_311_992e-5) < 1e-9);
        assert!(rel_err(normal_upper_tail(1.0), 0.158_655_253_931_457_05) < 1e-9);
        assert!(rel_err(normal_upper_tail(-2.0), 1.0 - 0.022_750_131_948_179_2) < 1e-12);
        assert!(rel_err(normal_upper_tail(8.0), 6.220_960_574_271_819e-16) < 1e-9);
        assert_eq!(normal_upper_tail(60.0), 0.0);
        assert_eq!(normal_upper_tail(-60.0), 1.0);
    }

    #[test]
    fn erfc_matches_reference_values() {
        // Reference values: CPython's math.erfc (libm).
        let cases = [
            (0.0, 1.0),
            (0.1, 0.887_537_083_981_715_2),
            (0.5, 0.479_500_122_186_953_5),
            (1.0, 0.157_299_207_050_285_13),
            (1.5, 0.033_894_853_524_689_27),
            (1.999, 0.004_698_443_348_629_488),
            (2.0, 0.004_677_734_981_047_266),
            (2.5, 0.000_406_952_017_444_958_9),
            (3.0, 2.209_049_699_858_544e-5),
            (5.0, 1.537_459_794_428_035e-12),
            (10.0, 2.088_487_583_762_545e-45),
            (26.0, 5.663_192_408_856_143e-296),
        ];
        for (x, want) in cases {
            let got = erfc(x);
            assert!(rel_err(got, want) < 1e-11, "erfc({x}) = {got:e}, want {want:e}");
            assert!((erfc(-x) - (2.0 - want)).abs() < 1e-15, "erfc(-{x})");
        }
        assert!(erfc(f64::NAN).is_nan());
        assert_eq!(erfc(f64::INFINITY), 0.0);
        assert_eq!(erfc(f64::NEG_INFINITY), 2.0);
    }
}
