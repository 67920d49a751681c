//! Choosing the next token from logits: greedy, or temperature with top-k and
//! top-p (nucleus) filtering, from a per-request seeded generator.
//!
//! The order is Hugging Face's default warper order: temperature, then top-k,
//! then top-p over the renormalized distribution.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f32,
    /// 0 means no top-k.
    pub top_k: usize,
    /// 1 means no nucleus filtering.
    pub top_p: f32,
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self { temperature: 0.0, top_k: 0, top_p: 1.0, seed: None }
    }
}

impl SamplingParams {
    /// Describes the first invalid field, if any.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(format!("temperature must be >= 0, got {}", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        Ok(())
    }
}

pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        let rng = match params.seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_os_rng(),
        };
        Self { params, rng }
    }

    /// The next token from one row of logits.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.params.temperature == 0.0 {
            return argmax(logits);
        }
        let probs = self.distribution(logits);
        let mut r: f32 = self.rng.random::<f32>();
        for &(id, p) in &probs {
            r -= p;
            if r <= 0.0 {
                return id;
            }
        }
        probs.last().map_or(0, |&(id, _)| id)
    }

    /// The filtered distribution as (token, probability), most likely first, summing to 1.
    pub fn distribution(&self, logits: &[f32]) -> Vec<(u32, f32)> {
        let t = self.params.temperature.max(f32::MIN_POSITIVE);
        let mut cand: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l / t)).collect();
        cand.sort_unstable_by(|a, b| b.1.total_cmp(&a.1));
        if self.params.top_k > 0 {
            cand.truncate(self.params.top_k);
        }
        let max = cand.first().map_or(0.0, |c| c.1);
        let mut sum = 0f32;
        for c in cand.iter_mut() {
            c.1 = (c.1 - max).exp();
            sum += c.1;
        }
        for c in cand.iter_mut() {
            c.1 /= sum;
        }
        if self.params.top_p < 1.0 {
            // Keep the smallest prefix whose mass reaches top_p (at least one token).
            let mut acc = 0f32;
            let mut keep = cand.len();
            for (i, c) in cand.iter().enumerate() {
                acc += c.1;
                if acc >= self.params.top_p {
                    keep = i + 1;
                    break;
                }
            }
            cand.truncate(keep);
            let s: f32 = cand.iter().map(|c| c.1).sum();
            for c in cand.iter_mut() {
                c.1 /= s;
            }
        }
        cand
    }
}

/// Index of the largest logit (the first one on ties, as torch.argmax).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32, top_k: usize, top_p: f32) -> SamplingParams {
        SamplingParams { temperature, top_k, top_p, seed: Some(7) }
    }

    #[test]
    fn greedy_takes_the_first_maximum() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
        assert_eq!(Sampler::new(SamplingParams::default()).sample(&[0.0, 2.0, 1.0]), 1);
    }

    #[test]
    fn top_p_keeps_exactly_the_nucleus() {
        // Probabilities 0.5, 0.3, 0.15, 0.05 (logits are their logs).
        let logits: Vec<f32> = [0.5f32, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect();
        let d = Sampler::new(params(1.0, 0, 0.8)).distribution(&logits);
        assert_eq!(d.iter().map(|c| c.0).collect::<Vec<_>>(), vec![0, 1]);
        assert!((d[0].1 - 0.625).abs() < 1e-6 && (d[1].1 - 0.375).abs() < 1e-6);
        let d = Sampler::new(params(1.0, 0, 0.81)).distribution(&logits);
        assert_eq!(d.len(), 3);
    }

    #[test]
    fn top_k_and_temperature_match_their_formulas() {
        let logits = [1.0f32, 2.0, 3.0];
        let d = Sampler::new(params(0.5, 2, 1.0)).distribution(&logits);
        // softmax([3, 2] / 0.5) = softmax([6, 4])
        let e = (-2.0f32).exp();
        assert_eq!(d.len(), 2);
        assert!((d[0].1 - 1.0 / (1.0 + e)).abs() < 1e-6);
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_follows_the_distribution() {
        let logits = [0.0f32, 1.0, 2.0];
        let draw = |seed| {
            let mut s = Sampler::new(SamplingParams { seed: Some(seed), ..params(1.0, 0, 1.0) });
            (0..2000).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draw(1), draw(1));
        assert_ne!(draw(1), draw(2));
        let freq2 = draw(3).iter().filter(|&&t| t == 2).count() as f32 / 2000.0;
        let want = 2f32.exp() / (1.0 + 1f32.exp() + 2f32.exp());
        assert!((freq2 - want).abs() < 0.04, "{freq2} vs {want}");
    }
}
