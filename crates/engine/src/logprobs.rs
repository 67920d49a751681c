//! Log-probabilities of tokens under a row of logits: log_softmax(l)[t] = l[t] − logsumexp(l).

use crate::request::TokenLogprob;

/// log Σ exp(l), computed stably.
pub fn logsumexp(logits: &[f32]) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return max;
    }
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    max + sum.ln() as f32
}

/// `token`'s logprob, its rank (1 = most likely) and the `top` most likely tokens.
pub fn token_logprob(logits: &[f32], token: u32, top: usize) -> TokenLogprob {
    let lse = logsumexp(logits);
    let l = logits[token as usize];
    let rank = 1 + logits.iter().filter(|&&x| x > l).count();
    TokenLogprob { token, logprob: l - lse, rank, top: top_logprobs(logits, top, lse) }
}

/// The `k` most likely tokens as (token, logprob), most likely first (ties: lower id first).
fn top_logprobs(logits: &[f32], k: usize, lse: f32) -> Vec<(u32, f32)> {
    if k == 0 {
        return Vec::new();
    }
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    let order = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]).then(a.cmp(b));
    let k = k.min(idx.len());
    if k < idx.len() {
        idx.select_nth_unstable_by(k - 1, order);
        idx.truncate(k);
    }
    idx.sort_by(order);
    idx.into_iter().map(|t| (t, logits[t as usize] - lse)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_match_log_softmax() {
        let logits = [1.0f32, 3.0, 2.0, 3.0];
        let z: f32 = logits.iter().map(|l| l.exp()).sum();
        let lp = token_logprob(&logits, 2, 3);
        assert!((lp.logprob - (2f32.exp() / z).ln()).abs() < 1e-6);
        assert_eq!(lp.rank, 3);
        let ids: Vec<u32> = lp.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, vec![1, 3, 2]);
        assert!((lp.top[0].1 - (3f32.exp() / z).ln()).abs() < 1e-6);
        assert!(token_logprob(&logits, 0, 0).top.is_empty());
        assert_eq!(token_logprob(&logits, 0, 10).top.len(), 4);
    }
}
