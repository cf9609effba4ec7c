//! Scoring a step's sampled answers against a teacher. Answers that begin with the same tokens
//! (the live-stream prompts of one scene share a ~1,900-token system prompt) are packed with
//! the shared-prefix mask, so the student's forward and backward pass covers that prompt once
//! per pack instead of once per answer, and the teacher computes it once per pack too. The
//! loss of a pack is the reverse KL, KL(student || teacher) over the whole vocabulary, summed
//! over its sampled tokens: exactly what scoring the answers one by one would sum.

use candle_core::{Device, Tensor, D};

use hat_model::train::TrainModel;
use hat_model::Engine;

use crate::error::{Result, TrainError};
use crate::pack::prefix_packs;
use crate::snapshot::scored_group;
use crate::tokens::Sample;

/// One sampled answer: the prompt's ids followed by the sampled ids (`mask` on the sampled
/// ones), and the rollout engine's log-probability of each sampled token.
pub struct Answer {
    pub sample: Sample,
    pub prompt_len: usize,
    pub logprobs: Vec<f32>,
}

impl Answer {
    /// An answer from the prompt ids and what the rollout engine sampled.
    pub fn new(id: String, prompt: Vec<u32>, sampled: &[u32], logprobs: &[f32]) -> Result<Self> {
        if prompt.is_empty() || sampled.len() != logprobs.len() {
            return Err(TrainError::Invalid(format!(
                "{id}: {} prompt ids, {} sampled tokens and {} log-probabilities",
                prompt.len(),
                sampled.len(),
                logprobs.len()
            )));
        }
        let p = prompt.len();
        let mut tokens = prompt;
        tokens.extend_from_slice(sampled);
        let mask = (0..tokens.len()).map(|i| i >= p).collect();
        Ok(Self {
            sample: Sample {
                id,
                tokens,
                mask,
                weight: Vec::new(),
            },
            prompt_len: p,
            logprobs: logprobs.to_vec(),
        })
    }

    /// Sampled tokens.
    pub fn len(&self) -> usize {
        self.logprobs.len()
    }

    /// Whether nothing was sampled.
    pub fn is_empty(&self) -> bool {
        self.logprobs.is_empty()
    }
}

/// One pack of answers, scored.
pub struct Scored {
    /// Summed reverse KL over the pack's sampled tokens (a scalar with gradients).
    pub kl: Tensor,
    /// Tokens through the student (the shared prefix once).
    pub tokens: usize,
    pub answer_tokens: usize,
    /// Summed |rollout log-prob - trainer log-prob| of the sampled tokens.
    pub mismatch: f64,
    /// Summed teacher negative log-likelihood of the sampled tokens.
    pub teacher_nll: f64,
}

/// Scores `answers` (none empty) against `teacher`, whose distribution is taken at
/// `teacher_temperature` (1: as it is): consecutive answers are packed on the prefix they
/// share while a pack stays within `max_tokens` (0: every answer alone).
pub fn score(
    model: &TrainModel,
    teacher: &Engine,
    answers: &[Answer],
    max_tokens: usize,
    teacher_temperature: f32,
) -> Result<Vec<Scored>> {
    if let Some(a) = answers.iter().find(|a| a.is_empty()) {
        return Err(TrainError::Invalid(format!(
            "{}: an empty answer has nothing to score",
            a.sample.id
        )));
    }
    let samples: Vec<&Sample> = answers.iter().map(|a| &a.sample).collect();
    let mut out = Vec::new();
    for (packed, tags) in prefix_packs(&samples, max_tokens)? {
        // the pack's members, in order, and where each one's teacher rows start
        let mut members: Vec<usize> = tags.iter().map(|&(k, _)| k).collect();
        members.sort_unstable();
        members.dedup();
        let seqs: Vec<(&[u32], usize)> = members
            .iter()
            .map(|&k| (answers[k].sample.tokens.as_slice(), answers[k].prompt_len))
            .collect();
        let rows = scored_group(teacher, &seqs)?;
        let mut start = vec![0usize; answers.len()];
        let mut at = 0;
        for &k in &members {
            start[k] = at;
            at += answers[k].len();
        }
        // teacher rows in the pack's row order
        let index: Vec<u32> = tags
            .iter()
            .map(|&(k, i)| (start[k] + i - answers[k].prompt_len) as u32)
            .collect();
        let dev = Device::Cpu;
        let lt = Tensor::cat(&rows, 0)?.index_select(&Tensor::new(index.as_slice(), &dev)?, 0)?;
        // log-probabilities are logits too: scaling them and renormalising is the
        // teacher's softmax at that temperature
        let target = if teacher_temperature == 1.0 {
            lt.clone()
        } else {
            candle_nn::ops::log_softmax(&(&lt / teacher_temperature as f64)?, D::Minus1)?
        };
        let ls = candle_nn::ops::log_softmax(&model.logits(&packed)?, D::Minus1)?;
        let kl = (ls.exp()? * (&ls - &target)?)?.sum_all()?;
        let tgt = Tensor::from_slice(&packed.targets, (packed.targets.len(), 1), &dev)?;
        let trainer_lp = ls
            .detach()
            .gather(&tgt, 1)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let teacher_lp = lt.gather(&tgt, 1)?.flatten_all()?.to_vec1::<f32>()?;
        let mismatch = tags
            .iter()
            .zip(&trainer_lp)
            .map(|(&(k, i), t)| (t - answers[k].logprobs[i - answers[k].prompt_len]).abs() as f64)
            .sum();
        out.push(Scored {
            kl,
            tokens: packed.len(),
            answer_tokens: tags.len(),
            mismatch,
            teacher_nll: -teacher_lp.iter().map(|&x| x as f64).sum::<f64>(),
        });
    }
    Ok(out)
}
