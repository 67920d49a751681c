//! Choosing the next token from logits, per request, from its own seeded generator.
//!
//! Order of operations (vLLM's for the penalties, Hugging Face / TGI's for the warpers):
//! 1. `logit_bias` is added;
//! 2. penalties: repetition (prompt + output tokens: positive logits ÷ p, negative × p),
//!    then frequency and presence (output tokens only: − f·count − p·[count > 0]);
//! 3. greedy takes the argmax here; otherwise temperature, then top-k, top-p,
//!    typical-p and min-p, each over the renormalized survivors of the last.

use std::collections::HashMap;

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
    /// 0 means off: keep tokens with p ≥ min_p · p_max.
    pub min_p: f32,
    /// 1 means off: locally typical sampling (Meister et al.).
    pub typical_p: f32,
    /// 1 means off.
    pub repetition_penalty: f32,
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
    /// Added to the logits of these tokens first.
    pub logit_bias: Vec<(u32, f32)>,
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            typical_p: 1.0,
            repetition_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: None,
        }
    }
}

impl SamplingParams {
    /// Describes the first invalid field, naming it as the OpenAI / vLLM APIs do.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(format!("temperature must be >= 0, got {}", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(format!("min_p must be in [0, 1], got {}", self.min_p));
        }
        if !(self.typical_p > 0.0 && self.typical_p <= 1.0) {
            return Err(format!("typical_p must be in (0, 1], got {}", self.typical_p));
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return Err(format!("repetition_penalty must be > 0, got {}", self.repetition_penalty));
        }
        for (name, v) in
            [("frequency_penalty", self.frequency_penalty), ("presence_penalty", self.presence_penalty)]
        {
            if !(-2.0..=2.0).contains(&v) {
                return Err(format!("{name} must be in [-2, 2], got {v}"));
            }
        }
        if let Some((t, b)) = self.logit_bias.iter().find(|(_, b)| !(-100.0..=100.0).contains(b)) {
            return Err(format!("logit_bias for token {t} must be in [-100, 100], got {b}"));
        }
        Ok(())
    }

    fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }
}

pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    /// Tokens of the prompt (for the repetition penalty).
    prompt: Vec<u32>,
    /// How often each token was generated so far.
    output_counts: HashMap<u32, u32>,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        Self::with_prompt(params, &[])
    }

    /// A sampler that knows the prompt, which the repetition penalty covers.
    pub fn with_prompt(params: SamplingParams, prompt: &[u32]) -> Self {
        let rng = match params.seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_os_rng(),
        };
        let mut prompt = prompt.to_vec();
        prompt.sort_unstable();
        prompt.dedup();
        Self { params, rng, prompt, output_counts: HashMap::new() }
    }

    /// The next token from one row of logits; it is recorded as generated.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        self.sample_owned(logits.to_vec())
    }

    /// `sample` on a row the caller already copied (and perhaps masked): adjusted in
    /// place, without a second copy of the vocabulary.
    pub fn sample_owned(&mut self, mut adjusted: Vec<f32>) -> u32 {
        self.adjust(&mut adjusted);
        let token = if self.params.is_greedy() {
            argmax(&adjusted)
        } else {
            let probs = self.warp(&adjusted);
            let mut r: f32 = self.rng.random::<f32>();
            let mut chosen = probs.last().map_or(0, |&(id, _)| id);
            for &(id, p) in &probs {
                r -= p;
                if r <= 0.0 {
                    chosen = id;
                    break;
                }
            }
            chosen
        };
        *self.output_counts.entry(token).or_default() += 1;
        token
    }

    /// Logits after logit_bias and the penalties (steps 1–2).
    pub fn adjusted_logits(&self, logits: &[f32]) -> Vec<f32> {
        let mut l = logits.to_vec();
        self.adjust(&mut l);
        l
    }

    fn adjust(&self, l: &mut [f32]) {
        let p = &self.params;
        for &(t, b) in &p.logit_bias {
            if let Some(v) = l.get_mut(t as usize) {
                *v += b;
            }
        }
        if p.repetition_penalty != 1.0 {
            let seen =
                self.prompt.iter().copied().chain(
                    self.output_counts.keys().copied().filter(|t| self.prompt.binary_search(t).is_err()),
                );
            for t in seen {
                if let Some(v) = l.get_mut(t as usize) {
                    *v = if *v > 0.0 { *v / p.repetition_penalty } else { *v * p.repetition_penalty };
                }
            }
        }
        if p.frequency_penalty != 0.0 || p.presence_penalty != 0.0 {
            for (&t, &n) in &self.output_counts {
                if let Some(v) = l.get_mut(t as usize) {
                    *v -= p.frequency_penalty * n as f32 + p.presence_penalty;
                }
            }
        }
    }

    /// The distribution sampled from, as (token, probability), most likely first,
    /// summing to 1 (step 3 on already adjusted logits).
    pub fn distribution(&self, logits: &[f32]) -> Vec<(u32, f32)> {
        self.warp(logits)
    }

    fn warp(&self, logits: &[f32]) -> Vec<(u32, f32)> {
        let p = &self.params;
        let t = p.temperature.max(f32::MIN_POSITIVE);
        let mut cand: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l / t)).collect();
        cand.sort_unstable_by(|a, b| b.1.total_cmp(&a.1));
        if p.top_k > 0 {
            cand.truncate(p.top_k);
        }
        softmax_pairs(&mut cand);
        if p.top_p < 1.0 {
            keep_mass(&mut cand, p.top_p);
        }
        if p.typical_p < 1.0 {
            // Keep tokens whose surprisal is closest to the entropy, up to typical_p of mass.
            let entropy: f32 = cand.iter().filter(|c| c.1 > 0.0).map(|c| -c.1 * c.1.ln()).sum();
            cand.sort_by(|a, b| (-a.1.ln() - entropy).abs().total_cmp(&(-b.1.ln() - entropy).abs()));
            keep_mass(&mut cand, p.typical_p);
            cand.sort_by(|a, b| b.1.total_cmp(&a.1));
        }
        if p.min_p > 0.0 {
            let threshold = cand.first().map_or(0.0, |c| c.1) * p.min_p;
            cand.retain(|c| c.1 >= threshold);
            renormalize(&mut cand);
        }
        cand
    }
}

fn softmax_pairs(cand: &mut [(u32, f32)]) {
    let max = cand.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for c in cand.iter_mut() {
        c.1 = (c.1 - max).exp();
        sum += c.1;
    }
    for c in cand.iter_mut() {
        c.1 /= sum;
    }
}

fn renormalize(cand: &mut [(u32, f32)]) {
    let s: f32 = cand.iter().map(|c| c.1).sum();
    for c in cand.iter_mut() {
        c.1 /= s;
    }
}

/// Keeps the shortest prefix whose mass reaches `mass` (at least one token), renormalized.
fn keep_mass(cand: &mut Vec<(u32, f32)>, mass: f32) {
    let mut acc = 0f32;
    let mut keep = cand.len();
    for (i, c) in cand.iter().enumerate() {
        acc += c.1;
        if acc >= mass {
            keep = i + 1;
            break;
        }
    }
    cand.truncate(keep);
    renormalize(cand);
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
        SamplingParams { temperature, top_k, top_p, seed: Some(7), ..Default::default() }
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

    #[test]
    fn min_p_keeps_tokens_above_a_fraction_of_the_best() {
        let logits: Vec<f32> = [0.5f32, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect();
        // 0.5 · 0.29 = 0.145: keeps 0.5, 0.3, 0.15, drops 0.05.
        let s = Sampler::new(SamplingParams { min_p: 0.29, ..params(1.0, 0, 1.0) });
        let d = s.distribution(&logits);
        assert_eq!(d.iter().map(|c| c.0).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert!((d[2].1 - 0.15 / 0.95).abs() < 1e-6);
    }

    #[test]
    fn typical_p_keeps_the_tokens_nearest_the_entropy() {
        // p = 0.4, 0.3, 0.2, 0.1: H = 1.2799; surprisals 0.916, 1.204, 1.609, 2.303.
        // Distance to H: 0.364, 0.076, 0.330, 1.023 → order 1, 2, 0, 3; 0.3 + 0.2 reaches 0.45.
        let logits: Vec<f32> = [0.4f32, 0.3, 0.2, 0.1].iter().map(|p| p.ln()).collect();
        let s = Sampler::new(SamplingParams { typical_p: 0.45, ..params(1.0, 0, 1.0) });
        let mut ids: Vec<u32> = s.distribution(&logits).iter().map(|c| c.0).collect();
        ids.sort();
        assert_eq!(ids, vec![1, 2]);
    }

    #[test]
    fn penalties_match_their_formulas() {
        let logits = [2.0f32, -2.0, 1.0, 0.5];
        let mut s = Sampler::with_prompt(
            SamplingParams {
                repetition_penalty: 2.0,
                frequency_penalty: 0.5,
                presence_penalty: 0.25,
                logit_bias: vec![(3, 10.0)],
                ..SamplingParams::default()
            },
            &[0, 1],
        );
        // Greedy with logit_bias: token 3 (0.5 + 10) wins and is now an output token.
        assert_eq!(s.sample(&logits), 3);
        let adj = s.adjusted_logits(&logits);
        assert_eq!(adj[0], 1.0); // prompt token, positive: ÷ 2
        assert_eq!(adj[1], -4.0); // prompt token, negative: × 2
        assert_eq!(adj[2], 1.0); // untouched
                                 // output token once: (0.5 + 10) ÷ 2 − 0.5·1 − 0.25
        assert_eq!(adj[3], 10.5 / 2.0 - 0.75);
    }

    #[test]
    fn invalid_fields_are_named() {
        let bad = |p: SamplingParams| p.validate().unwrap_err();
        assert!(bad(SamplingParams { min_p: 1.5, ..Default::default() }).starts_with("min_p"));
        assert!(bad(SamplingParams { typical_p: 0.0, ..Default::default() }).starts_with("typical_p"));
        assert!(bad(SamplingParams { repetition_penalty: 0.0, ..Default::default() })
            .starts_with("repetition_penalty"));
        assert!(bad(SamplingParams { presence_penalty: 3.0, ..Default::default() })
            .starts_with("presence_penalty"));
        assert!(
            bad(SamplingParams { logit_bias: vec![(5, 101.0)], ..Default::default() }).contains("logit_bias")
        );
    }
}
