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
        // copy the logits only when the penalty changes them
        let mut l = std::borrow::Cow::Borrowed(logits);
        if p.repetition_penalty != 1.0 {
            let l = l.to_mut();
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
        let (idx, mut probs) = candidates(&l, p);
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

/// The tokens sampling may pick and their probabilities (normalised over the vocabulary, or
/// over the top-k set when `top_k` is set), most likely first when top-k or top-p needs an
/// order. Only as many of the largest logits as the nucleus needs are sorted (a full sort of
/// a 49k vocabulary took ~1.5 ms a token): candidates grow 256, 1024, ... until they hold
/// `top_p` of the mass, which gives the same nucleus as sorting everything.
fn candidates(l: &[f32], p: &SamplingParams) -> (Vec<usize>, Vec<f64>) {
    let n = l.len();
    let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let weight = |x: f32| (((x - max) / p.temperature) as f64).exp();
    // a total order: NaN logits (corrupt weights) must not make the sort panic
    let desc = |a: &usize, b: &usize| l[*b].total_cmp(&l[*a]);
    if p.top_k == 0 && p.top_p >= 1.0 {
        // plain temperature sampling: any order samples the same distribution
        let w: Vec<f64> = l.iter().map(|&x| weight(x)).collect();
        let total: f64 = w.iter().sum();
        return ((0..n).collect(), w.into_iter().map(|x| x / total).collect());
    }
    let total: f64 = l.iter().map(|&x| weight(x)).sum();
    let mut cap = if p.top_k > 0 {
        p.top_k.min(n)
    } else {
        256.min(n)
    };
    loop {
        let mut idx: Vec<usize> = (0..n).collect();
        if cap < n {
            idx.select_nth_unstable_by(cap - 1, desc);
            idx.truncate(cap);
        }
        idx.sort_unstable_by(desc);
        let w: Vec<f64> = idx.iter().map(|&i| weight(l[i])).collect();
        let mass: f64 = w.iter().sum();
        if p.top_k > 0 {
            return (idx, w.into_iter().map(|x| x / mass).collect());
        }
        if cap == n || mass >= p.top_p as f64 * total {
            return (idx, w.into_iter().map(|x| x / total).collect());
        }
        cap = (cap * 4).min(n);
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

    /// The nucleus from partial sorting equals the one from sorting the whole vocabulary,
    /// including a flat distribution where 256 candidates hold too little mass.
    #[test]
    fn top_p_samples_stay_in_the_full_sort_nucleus() {
        for (n, spread) in [(50_000usize, 8.0f32), (50_000, 0.5), (300, 3.0)] {
            let logits: Vec<f32> = (0..n)
                .map(|i| ((i * 7919 % 10_007) as f32 / 10_007.0) * spread)
                .collect();
            let top_p = 0.9;
            // reference nucleus: sort everything
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| logits[b].partial_cmp(&logits[a]).unwrap());
            let max = logits[order[0]];
            let w: Vec<f64> = order
                .iter()
                .map(|&i| ((logits[i] - max) as f64).exp())
                .collect();
            let total: f64 = w.iter().sum();
            let mut cum = 0.0;
            let mut nucleus = std::collections::HashSet::new();
            for (k, &i) in order.iter().enumerate() {
                cum += w[k] / total;
                nucleus.insert(i as u32);
                if cum >= top_p {
                    break;
                }
            }
            let (idx, probs) = candidates(
                &logits,
                &SamplingParams {
                    temperature: 1.0,
                    top_p: top_p as f32,
                    ..Default::default()
                },
            );
            assert!(
                probs.iter().sum::<f64>() >= top_p - 1e-9,
                "n={n} spread={spread}"
            );
            assert!(idx.windows(2).all(|p| logits[p[0]] >= logits[p[1]]));
            let mut s = Sampler::new(SamplingParams {
                temperature: 1.0,
                top_p: top_p as f32,
                seed: 11,
                ..Default::default()
            })
            .unwrap();
            for _ in 0..200 {
                let t = s.sample(&logits, &[]);
                assert!(
                    nucleus.contains(&t),
                    "n={n} spread={spread}: {t} outside the nucleus"
                );
            }
        }
    }
}
