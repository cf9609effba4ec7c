//! Token selection: greedy, or sampling with temperature, top-k, top-p, repetition penalty
//! and a seed; plus log-probabilities.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{Error, Result};

/// Sampling parameters. `temperature == 0` means greedy.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    /// Keep the `k` most likely tokens (0 = off).
    pub top_k: usize,
    /// Keep the smallest set with cumulative probability >= `top_p` (1.0 = off).
    pub top_p: f32,
    /// Divide positive / multiply negative logits of already-seen tokens (1.0 = off).
    pub repetition_penalty: f32,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            repetition_penalty: 1.0,
            seed: 0,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding.
    pub fn greedy() -> Self {
        Self::default()
    }
    /// Checks ranges.
    pub fn validate(&self) -> Result<()> {
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return Err(Error::InvalidSampling(format!(
                "temperature must be >= 0, got {}",
                self.temperature
            )));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(Error::InvalidSampling(format!(
                "top_p must be in (0, 1], got {}",
                self.top_p
            )));
        }
        if !self.repetition_penalty.is_finite() || self.repetition_penalty <= 0.0 {
            return Err(Error::InvalidSampling(format!(
                "repetition_penalty must be > 0, got {}",
                self.repetition_penalty
            )));
        }
        Ok(())
    }
}

/// Stateful sampler (owns the RNG).
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
}

/// Log-softmax of one logit row at `token`.
pub fn logprob(logits: &[f32], token: u32) -> f32 {
    logits[token as usize] - crate::simd::log_sum_exp(logits)
}

impl Sampler {
    /// Validates and builds.
    pub fn new(params: SamplingParams) -> Result<Self> {
        params.validate()?;
        let rng = ChaCha8Rng::seed_from_u64(params.seed);
        Ok(Self { params, rng })
    }

    /// Picks the next token from raw logits given the tokens seen so far.
    pub fn sample(&mut self, logits: &[f32], seen: &[u32]) -> u32 {
        let p = &self.params;
        let mut l: Vec<f32> = logits.to_vec();
        if p.repetition_penalty != 1.0 {
            let mut done = std::collections::HashSet::new();
            for &t in seen {
                if done.insert(t) {
                    if let Some(x) = l.get_mut(t as usize) {
                        *x = if *x > 0.0 {
                            *x / p.repetition_penalty
                        } else {
                            *x * p.repetition_penalty
                        };
                    }
                }
            }
        }
        if p.temperature == 0.0 {
            return argmax(&l);
        }
        let mut idx: Vec<usize> = (0..l.len()).collect();
        idx.sort_unstable_by(|&a, &b| l[b].partial_cmp(&l[a]).unwrap_or(std::cmp::Ordering::Equal));
        if p.top_k > 0 && p.top_k < idx.len() {
            idx.truncate(p.top_k);
        }
        let max = l[idx[0]];
        let mut probs: Vec<f64> = idx
            .iter()
            .map(|&i| (((l[i] - max) / p.temperature) as f64).exp())
            .collect();
        let sum: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|x| *x /= sum);
        if p.top_p < 1.0 {
            let mut cum = 0.0;
            let mut keep = probs.len();
            for (i, &q) in probs.iter().enumerate() {
                cum += q;
                if cum >= p.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            probs.truncate(keep);
            idx.truncate(keep);
            let s: f64 = probs.iter().sum();
            probs.iter_mut().for_each(|x| *x /= s);
        }
        let r: f64 = self.rng.gen();
        let mut cum = 0.0;
        for (i, &q) in probs.iter().enumerate() {
            cum += q;
            if r < cum {
                return idx[i] as u32;
            }
        }
        idx[probs.len() - 1] as u32
    }
}

/// Index of the largest value (first on ties).
pub fn argmax(l: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in l.iter().enumerate() {
        if x > l[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_and_validation() {
        let mut s = Sampler::new(SamplingParams::greedy()).unwrap();
        assert_eq!(s.sample(&[0.1, 3.0, 2.0], &[]), 1);
        let mut s = Sampler::new(SamplingParams {
            repetition_penalty: 10.0,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(s.sample(&[0.1, 3.0, 2.0], &[1]), 2);
        for bad in [
            SamplingParams {
                temperature: -1.0,
                ..Default::default()
            },
            SamplingParams {
                top_p: 0.0,
                ..Default::default()
            },
            SamplingParams {
                top_p: 1.5,
                ..Default::default()
            },
            SamplingParams {
                repetition_penalty: 0.0,
                ..Default::default()
            },
        ] {
            assert!(matches!(Sampler::new(bad), Err(Error::InvalidSampling(_))));
        }
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_respects_top_k() {
        let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32).collect();
        let p = SamplingParams {
            temperature: 1.0,
            top_k: 3,
            seed: 7,
            ..Default::default()
        };
        let a: Vec<u32> = {
            let mut s = Sampler::new(p.clone()).unwrap();
            (0..20).map(|_| s.sample(&logits, &[])).collect()
        };
        let b: Vec<u32> = {
            let mut s = Sampler::new(p).unwrap();
            (0..20).map(|_| s.sample(&logits, &[])).collect()
        };
        assert_eq!(a, b);
        assert!(a.iter().all(|&t| logits[t as usize] == 6.0));
        let lp = logprob(&[0.0, 0.0], 0);
        assert!((lp - (0.5f32).ln()).abs() < 1e-6);
    }
}
