//! GRPO's group-relative advantages and its token loss: the PPO-clipped ratio with separate
//! low and high clip ranges, truncated importance sampling for the gap between the rollout
//! engine's and the trainer's numerics, a dual clip for negative advantages, an optional KL
//! penalty to a reference (see [`kl_penalty`]), and token-level normalisation (every sampled
//! token of a step weighs the same).

use candle_core::{Device, Tensor, D};

use hat_model::train::{Packed, TrainModel};

use crate::error::{Result, TrainError};
use crate::pack::prefix_packs;
use crate::tokens::Sample;

/// Group-relative advantages of `rewards`: centred on the group mean and, with
/// `scale_by_std`, divided by the group's standard deviation. `None` when every reward is the
/// same: such a group carries no signal.
pub fn advantages(rewards: &[f64], scale_by_std: bool) -> Option<Vec<f64>> {
    if rewards.len() < 2 {
        return None;
    }
    let n = rewards.len() as f64;
    let mean = rewards.iter().sum::<f64>() / n;
    let var = rewards.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n;
    let std = var.sqrt();
    if std < 1e-9 {
        return None;
    }
    let scale = if scale_by_std { std + 1e-4 } else { 1.0 };
    Some(rewards.iter().map(|r| (r - mean) / scale).collect())
}

/// One rollout's token sequence to train on: the exact ids the rollout engine computed on,
/// the sampled ones masked for loss, its advantage, and per token (indexed like the ids; 0 at
/// context tokens) the rollout engine's log-probability, the trainer's at rollout time
/// (`old`, when batches are reused) and the reference model's (for the KL penalty).
///
/// A later turn whose prompt extends the sequence (the usual case: the chat template renders
/// the earlier turns back to the same ids) continues it; one that does not starts a new
/// sequence, trained on exactly what the engine saw then.
#[derive(Debug, Clone)]
pub struct Weighted {
    pub sample: Sample,
    pub advantage: f64,
    pub behaviour: Vec<f32>,
    pub old: Option<Vec<f32>>,
    pub reference: Option<Vec<f32>>,
}

impl Weighted {
    /// A sequence from one turn's prompt ids, sampled ids and their rollout log-probabilities.
    pub fn new(
        id: String,
        prompt: &[u32],
        sampled: &[u32],
        logprobs: &[f32],
        advantage: f64,
    ) -> Result<Self> {
        let mut w = Self {
            sample: Sample {
                id,
                tokens: Vec::new(),
                mask: Vec::new(),
                weight: Vec::new(),
            },
            advantage,
            behaviour: Vec::new(),
            old: None,
            reference: None,
        };
        if prompt.is_empty() {
            return Err(TrainError::Invalid(format!(
                "{}: the rollout model did not report the prompt's token ids; RL trains on \
                 exactly the ids the engine computed on, so roll out with the embedded engine",
                w.sample.id
            )));
        }
        w.push(prompt, sampled, logprobs)?;
        Ok(w)
    }

    /// Continues the sequence with a later turn when `prompt` starts with every id so far;
    /// `Ok(false)` (nothing changed) when it does not.
    pub fn extend(&mut self, prompt: &[u32], sampled: &[u32], logprobs: &[f32]) -> Result<bool> {
        if !prompt.starts_with(&self.sample.tokens) {
            return Ok(false);
        }
        self.push(prompt, sampled, logprobs)?;
        Ok(true)
    }

    fn push(&mut self, prompt: &[u32], sampled: &[u32], logprobs: &[f32]) -> Result<()> {
        if sampled.len() != logprobs.len() {
            return Err(TrainError::Invalid(format!(
                "{}: {} sampled tokens but {} log-probabilities",
                self.sample.id,
                sampled.len(),
                logprobs.len()
            )));
        }
        let context = &prompt[self.sample.tokens.len()..];
        let s = &mut self.sample;
        s.tokens.extend_from_slice(context);
        s.mask.extend(std::iter::repeat_n(false, context.len()));
        s.tokens.extend_from_slice(sampled);
        s.mask.extend(std::iter::repeat_n(true, sampled.len()));
        self.behaviour
            .extend(std::iter::repeat_n(0.0, context.len()));
        self.behaviour.extend_from_slice(logprobs);
        Ok(())
    }

    /// Sampled tokens (those carrying loss).
    pub fn sampled(&self) -> usize {
        self.sample.loss_tokens()
    }
}

/// The dual clip of negative advantages: a token's loss is at most `DUAL_CLIP * |A|`. With
/// several minibatches a batch, the ratio of a token the policy has since made much more
/// likely can grow without bound where the advantage is negative, and PPO's `min` keeps its
/// unclipped term: one such token could dominate (or overflow) the step.
pub const DUAL_CLIP: f64 = 3.0;

/// Log-ratios are clamped to this before `exp`, which keeps every term finite; the clip
/// ranges and the dual clip bind long before it.
const MAX_LOG_RATIO: f32 = 20.0;

/// How the token loss is shaped.
#[derive(Debug, Clone, Copy)]
pub struct LossShape {
    pub clip_low: f64,
    pub clip_high: f64,
    pub tis_cap: f64,
    pub kl_coef: f64,
}

/// Sums over the tokens of one or more packs.
#[derive(Debug, Clone, Default)]
pub struct LossStats {
    /// Sampled tokens scored and packed tokens run.
    pub tokens: usize,
    pub seq_tokens: usize,
    /// The loss (before normalisation) and its pieces.
    pub loss: f64,
    pub kl: f64,
    /// |trainer log-prob - rollout log-prob| at the rollout's weights.
    pub mismatch: f64,
    /// Tokens whose clipped term (or the dual clip's floor) won (no gradient through them).
    pub clipped: usize,
    /// Tokens whose importance weight hit `tis_cap`.
    pub truncated: usize,
}

impl LossStats {
    pub fn add(&mut self, o: &LossStats) {
        self.tokens += o.tokens;
        self.seq_tokens += o.seq_tokens;
        self.loss += o.loss;
        self.kl += o.kl;
        self.mismatch += o.mismatch;
        self.clipped += o.clipped;
        self.truncated += o.truncated;
    }
}

pub use crate::pack::TaggedPack;

/// Splits `items` (in order) into runs packed on their shared prefix, each at most
/// `max_tokens` long (one item longer than that is packed alone). Returns each pack with,
/// per scored row, `(item, token)`.
pub fn packs(items: &[Weighted], max_tokens: usize) -> Result<Vec<TaggedPack>> {
    let samples: Vec<&Sample> = items.iter().map(|w| &w.sample).collect();
    prefix_packs(&samples, max_tokens)
}

/// The trainer's log-probability of each scored token of `packed`, in row order (with
/// gradients).
pub fn token_logprobs(model: &TrainModel, packed: &Packed) -> Result<Tensor> {
    let logits = model.logits(packed)?;
    let ls = candle_nn::ops::log_softmax(&logits, D::Minus1)?;
    let tgt = Tensor::from_slice(&packed.targets, (packed.targets.len(), 1), &Device::Cpu)?;
    Ok(ls.gather(&tgt, 1)?.flatten_all()?)
}

/// The summed token loss of one pack (divide by the step's sampled tokens for token-level
/// normalisation) and its statistics. `lp` are [`token_logprobs`] of the pack, `tags` its
/// `(item, token)` per row.
pub fn pack_loss(
    lp: &Tensor,
    tags: &[(usize, usize)],
    items: &[Weighted],
    shape: &LossShape,
) -> Result<(Tensor, LossStats)> {
    let n = tags.len();
    let now = lp.detach().to_vec1::<f32>()?;
    if now.len() != n {
        return Err(TrainError::Invalid(format!(
            "{} log-probabilities for {n} scored tokens",
            now.len()
        )));
    }
    let mut old = Vec::with_capacity(n);
    let mut adv = Vec::with_capacity(n);
    let mut weight = Vec::with_capacity(n);
    let mut reference = Vec::with_capacity(if shape.kl_coef > 0.0 { n } else { 0 });
    let mut st = LossStats {
        tokens: n,
        ..LossStats::default()
    };
    for (row, &(k, i)) in tags.iter().enumerate() {
        let w = &items[k];
        if !w.sample.mask.get(i).copied().unwrap_or(false) {
            return Err(TrainError::Invalid(format!(
                "{}: token {i} is scored but was not sampled",
                w.sample.id
            )));
        }
        let o = w.old.as_ref().map_or(now[row], |o| o[i]);
        let b = w.behaviour[i];
        st.mismatch += (o - b).abs() as f64;
        let ratio_tis = ((o - b) as f64).exp();
        if ratio_tis > shape.tis_cap {
            st.truncated += 1;
        }
        old.push(o);
        adv.push(w.advantage as f32);
        weight.push(ratio_tis.min(shape.tis_cap) as f32);
        let ratio = ((now[row] - o) as f64).exp();
        if (w.advantage > 0.0 && ratio > 1.0 + shape.clip_high)
            || (w.advantage < 0.0 && (ratio < 1.0 - shape.clip_low || ratio > DUAL_CLIP))
        {
            st.clipped += 1;
        }
        if shape.kl_coef > 0.0 {
            let r = w.reference.as_ref().ok_or_else(|| {
                TrainError::Invalid("the KL penalty needs reference log-probabilities".into())
            })?;
            reference.push(r[i]);
        }
    }
    let dev = Device::Cpu;
    let old = Tensor::from_vec(old, n, &dev)?;
    // for A < 0 the dual clip's floor c·A; for A >= 0 none (f32::MIN never wins the max)
    let floor: Vec<f32> = adv
        .iter()
        .map(|&a| {
            if a < 0.0 {
                (DUAL_CLIP as f32) * a
            } else {
                f32::MIN
            }
        })
        .collect();
    let adv = Tensor::from_vec(adv, n, &dev)?;
    let weight = Tensor::from_vec(weight, n, &dev)?;
    let floor = Tensor::from_vec(floor, n, &dev)?;
    let ratio = (lp - &old)?.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)?.exp()?;
    let unclipped = (&ratio * &adv)?;
    let clipped = (ratio.clamp(
        (1.0 - shape.clip_low) as f32,
        (1.0 + shape.clip_high) as f32,
    )? * &adv)?;
    let objective = unclipped.minimum(&clipped)?.maximum(&floor)?;
    let mut per_token = (objective.neg()? * &weight)?;
    if shape.kl_coef > 0.0 {
        let (penalty, kl) = kl_penalty(lp, &Tensor::from_vec(reference, n, &dev)?)?;
        st.kl = kl;
        per_token = (per_token + (penalty * shape.kl_coef)?)?;
    }
    let loss = per_token.sum_all()?;
    st.loss = loss.to_scalar::<f32>()? as f64;
    Ok((loss, st))
}

/// The KL penalty of sampled tokens with log-probabilities `lp` (with gradients) under the
/// policy and `reference` under the reference model: per token the loss term
/// `k2 = ½ (log π − log ref)²`, and the summed estimate of `KL(π ‖ ref)` to report, `k3 =
/// e^d − d − 1` with `d = log ref − log π`.
///
/// The two differ on purpose. k3 estimates the KL's value without bias, but as a loss its
/// gradient `(1 − ref/π) ∇log π` has the expectation `−Σ ref ∇log π = ∇KL(ref ‖ π)` under
/// the policy's samples: the forward, mass-covering divergence. k2's gradient `(log π − log
/// ref) ∇log π` has the expectation `∇KL(π ‖ ref)`, the reverse KL the penalty is meant to
/// hold down (test: `the_kl_penalty_follows_the_reverse_kl_in_expectation`).
pub fn kl_penalty(lp: &Tensor, reference: &Tensor) -> Result<(Tensor, f64)> {
    let diff = (lp - reference)?;
    let penalty = (diff.sqr()? * 0.5)?;
    let d = (diff.neg()?.detach().clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))?;
    let k3 = ((d.exp()? - &d)? - 1.0)?;
    Ok((penalty, k3.sum_all()?.to_scalar::<f32>()? as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_groups_carry_no_signal_and_advantages_are_centred() {
        assert!(advantages(&[0.5, 0.5, 0.5], true).is_none());
        assert!(advantages(&[1.0], true).is_none());
        let a = advantages(&[1.0, 0.0, 0.0, 1.0], true).unwrap();
        assert!((a.iter().sum::<f64>()).abs() < 1e-9);
        assert!(
            (a[0] - 1.0).abs() < 1e-3 && (a[1] + 1.0).abs() < 1e-3,
            "{a:?}"
        );
        let c = advantages(&[0.75, 0.25], false).unwrap();
        assert_eq!(c, vec![0.25, -0.25]);
    }

    fn item(prompt: &[u32], sampled: &[u32], adv: f64) -> Weighted {
        let lp = vec![-1.0; sampled.len()];
        Weighted::new("t".into(), prompt, sampled, &lp, adv).unwrap()
    }

    #[test]
    fn packs_share_the_prompt_and_tag_every_sampled_token() {
        let p: Vec<u32> = (0..300).collect();
        let items = vec![
            item(&p, &[7, 8, 9], 1.0),
            item(&p, &[7, 5], -1.0),
            item(&p, &[4], 0.5),
        ];
        let ps = packs(&items, 1024).unwrap();
        assert_eq!(ps.len(), 1);
        let (packed, tags) = &ps[0];
        // the prompt once, then each turn's own tail
        assert_eq!(packed.len(), 300 + 3 + 2 + 1);
        assert_eq!(tags.len(), 6);
        for (row, &(k, i)) in tags.iter().enumerate() {
            assert_eq!(packed.targets[row], items[k].sample.tokens[i]);
            assert!(items[k].sample.mask[i]);
        }
        // a small budget splits the run
        let ps = packs(&items, 304).unwrap();
        assert!(ps.len() >= 2);
        let n: usize = ps.iter().map(|(_, t)| t.len()).sum();
        assert_eq!(n, 6);
    }

    #[test]
    fn a_turn_without_prompt_ids_or_with_misaligned_logprobs_is_an_error() {
        assert!(Weighted::new("x".into(), &[], &[1], &[-1.0], 1.0).is_err());
        let e = Weighted::new("x".into(), &[1], &[1, 2], &[-1.0], 1.0).unwrap_err();
        assert!(e.to_string().contains("2 sampled tokens"), "{e}");
    }

    #[test]
    fn a_later_turn_continues_the_sequence_only_when_its_prompt_extends_it() {
        let mut w = Weighted::new("r".into(), &[1, 2], &[3, 9], &[-0.1, -0.2], 1.0).unwrap();
        // the next prompt renders the first turn back to the same ids, then a tool result
        assert!(w.extend(&[1, 2, 3, 9, 5, 6], &[7], &[-0.3]).unwrap());
        assert_eq!(w.sample.tokens, vec![1, 2, 3, 9, 5, 6, 7]);
        assert_eq!(
            w.sample.mask,
            vec![false, false, true, true, false, false, true]
        );
        assert_eq!(w.behaviour, vec![0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3]);
        assert_eq!(w.sampled(), 3);
        // re-tokenised differently: not a continuation, and nothing changed
        assert!(!w.extend(&[1, 2, 3, 8, 5], &[7], &[-0.3]).unwrap());
        assert_eq!(w.sample.tokens.len(), 7);
    }

    fn shape() -> LossShape {
        LossShape {
            clip_low: 0.2,
            clip_high: 0.28,
            tis_cap: 2.0,
            kl_coef: 0.0,
        }
    }

    #[test]
    fn on_policy_the_loss_is_minus_the_advantage_weighted_logprob_gradient() {
        // at ratio 1 the loss value is -sum(A) and d loss / d lp = -A
        let lp = candle_core::Var::from_vec(vec![-1.0f32, -2.0, -0.5], 3, &Device::Cpu).unwrap();
        let mut items = vec![item(&[1], &[2, 3], 2.0), item(&[1], &[4], -1.0)];
        items[0].behaviour = vec![0.0, -1.0, -2.0];
        items[1].behaviour = vec![0.0, -0.5];
        let tags = vec![(0, 1), (0, 2), (1, 1)];
        let (loss, st) = pack_loss(lp.as_tensor(), &tags, &items, &shape()).unwrap();
        assert!((st.loss - (-(2.0 + 2.0 - 1.0))).abs() < 1e-5, "{}", st.loss);
        assert_eq!(st.mismatch, 0.0);
        let g = loss.backward().unwrap();
        let g = g.get(lp.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(g, vec![-2.0, -2.0, 1.0]);
    }

    #[test]
    fn ratios_outside_the_clip_range_get_no_gradient_and_weights_are_truncated() {
        let lp = candle_core::Var::from_vec(vec![0.0f32, 0.0], 2, &Device::Cpu).unwrap();
        // old log-probs far below now: ratio e^1 > 1.28 for a positive advantage -> clipped;
        // a negative advantage at the same ratio keeps its gradient
        let mut items = vec![item(&[1], &[2], 1.0), item(&[1], &[3], -1.0)];
        items[0].old = Some(vec![0.0, -1.0]);
        items[1].old = Some(vec![0.0, -1.0]);
        // the rollout engine gave these tokens far less probability: weight capped at 2
        items[0].behaviour = vec![0.0, -5.0];
        items[1].behaviour = vec![0.0, -5.0];
        let tags = vec![(0, 1), (1, 1)];
        let (loss, st) = pack_loss(lp.as_tensor(), &tags, &items, &shape()).unwrap();
        assert_eq!(st.clipped, 1);
        assert_eq!(st.truncated, 2);
        let g = loss.backward().unwrap();
        let g = g.get(lp.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(g[0], 0.0);
        // -d/dlp [min(r*A, clip(r)*A)] * w with A = -1, r = e: the unclipped term, r * w
        assert!((g[1] - std::f32::consts::E * 2.0).abs() < 1e-4, "{g:?}");
    }

    #[test]
    fn the_kl_penalty_is_zero_at_the_reference_and_positive_away_from_it() {
        let lp = candle_core::Var::from_vec(vec![-1.0f32], 1, &Device::Cpu).unwrap();
        let mut it = vec![item(&[1], &[2], 0.0)];
        it[0].behaviour = vec![0.0, -1.0];
        let mut s = shape();
        s.kl_coef = 0.5;
        it[0].reference = Some(vec![0.0, -1.0]);
        let (_, st) = pack_loss(lp.as_tensor(), &[(0, 1)], &it, &s).unwrap();
        assert!(st.kl.abs() < 1e-6);
        it[0].reference = Some(vec![0.0, -3.0]);
        let (_, st) = pack_loss(lp.as_tensor(), &[(0, 1)], &it, &s).unwrap();
        assert!(st.kl > 0.5, "{}", st.kl);
    }

    #[test]
    fn a_negative_advantage_loses_at_most_the_dual_clip_even_where_the_ratio_overflows() {
        // now - old = 100: e^100 overflows f32; A = -1 would make the unclipped term -inf
        let lp = candle_core::Var::from_vec(vec![0.0f32, 0.0], 2, &Device::Cpu).unwrap();
        let mut items = vec![item(&[1], &[2], -1.0), item(&[1], &[3], -1.0)];
        items[0].old = Some(vec![0.0, -100.0]);
        // a ratio of e^0.5 (below the dual clip) keeps the unclipped term and its gradient
        items[1].old = Some(vec![0.0, -0.5]);
        for w in &mut items {
            w.behaviour = w.old.clone().unwrap();
        }
        let (loss, st) = pack_loss(lp.as_tensor(), &[(0, 1), (1, 1)], &items, &shape()).unwrap();
        let r = 0.5f64.exp();
        assert!((st.loss - (DUAL_CLIP + r)).abs() < 1e-4, "{}", st.loss);
        assert_eq!(st.clipped, 1);
        let g = loss.backward().unwrap();
        let g = g.get(lp.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(g[0], 0.0);
        assert!((g[1] as f64 - r).abs() < 1e-4, "{g:?}");
    }

    #[test]
    fn the_kl_penalty_follows_the_reverse_kl_in_expectation() {
        // a policy over 3 tokens, logits theta; the expected gradient of the penalty over the
        // policy's own samples, sum_x pi(x) grad penalty(x), must be grad KL(pi || ref)
        let dev = Device::Cpu;
        let theta = candle_core::Var::from_vec(vec![0.3f32, -1.2, 0.8], 3, &dev).unwrap();
        let log_ref = Tensor::from_vec(vec![-0.4f32, -2.5, -1.4], 3, &dev).unwrap();
        let log_ref = candle_nn::ops::log_softmax(&log_ref, 0).unwrap();
        let grad = |f: &dyn Fn(&Tensor) -> Tensor| {
            let l = f(theta.as_tensor());
            let g = l.backward().unwrap();
            g.get(theta.as_tensor()).unwrap().to_vec1::<f32>().unwrap()
        };
        let expected = grad(&|t| {
            let lp = candle_nn::ops::log_softmax(t, 0).unwrap();
            let (penalty, _) = kl_penalty(&lp, &log_ref).unwrap();
            // each token's penalty weighted by its (constant) sampling probability
            (penalty * lp.detach().exp().unwrap())
                .unwrap()
                .sum_all()
                .unwrap()
        });
        let reverse = grad(&|t| {
            let lp = candle_nn::ops::log_softmax(t, 0).unwrap();
            ((&lp - &log_ref).unwrap() * lp.exp().unwrap())
                .unwrap()
                .sum_all()
                .unwrap()
        });
        for (a, b) in expected.iter().zip(&reverse) {
            assert!((a - b).abs() < 1e-5, "{expected:?} vs {reverse:?}");
        }
        // and the reported value is KL(pi || ref) in expectation too
        let lp = candle_nn::ops::log_softmax(theta.as_tensor(), 0).unwrap();
        let pi = lp.exp().unwrap().to_vec1::<f32>().unwrap();
        let exact: f32 = ((&lp - &log_ref).unwrap() * lp.exp().unwrap())
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar()
            .unwrap();
        let mut mean = 0.0f64;
        for (x, p) in pi.iter().enumerate() {
            let one = |t: &Tensor| t.narrow(0, x, 1).unwrap();
            let (_, k3) = kl_penalty(&one(&lp), &one(&log_ref)).unwrap();
            mean += *p as f64 * k3;
        }
        assert!((mean - exact as f64).abs() < 1e-5, "{mean} vs {exact}");
    }
}
