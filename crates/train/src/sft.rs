//! Supervised fine-tuning as a [`Stage`] of the shared loop ([`crate::stage`]): packed
//! trajectories, gradient accumulation to a budget of loss tokens per step, validation loss on
//! held-out trajectories.

use std::path::{Path, PathBuf};

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use hat_model::train::TrainModel;

use crate::checkpoint::RunState;
use crate::config::{SftConfig, TooLong};
use crate::error::{io, Result, TrainError};
use crate::pack::{pack, Pack};
use crate::stage::{add_gradients, train, LoopSettings, Stage, StepWork};
use crate::tokens::{read_jsonl, Encoder, Sample};

pub use crate::stage::{Event, StepMetrics};

/// Tokenised, split and packed data.
#[derive(Debug)]
pub struct Prepared {
    /// The packs of one epoch: a repeated file's packs `repeat` times (their `members` index
    /// that file's training samples; every other pack's index the rest, in file order).
    pub train: Vec<Pack>,
    pub val: Vec<Pack>,
    pub trajectories: usize,
    pub dropped_too_long: usize,
    /// Tokens of the train packs, and of the same samples unpacked.
    pub packed_tokens: usize,
    pub unpacked_tokens: usize,
    pub loss_tokens: usize,
    /// Loss-carrying tokens of all samples (held-out ones included) whose loss counts other
    /// than once (`call_weight`, `decision_weight`), so a user sees the weights found tokens.
    pub weighted_tokens: usize,
    /// Per data file, in the config's order: what it holds (all its samples, held-out ones
    /// included), so the share each source has of the loss is visible when files are mixed.
    pub by_file: Vec<FileShare>,
}

/// One data file's part of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileShare {
    pub path: std::path::PathBuf,
    pub trajectories: usize,
    /// Tokens of its samples one by one.
    pub tokens: usize,
    pub loss_tokens: usize,
    /// Times its training packs appear in one epoch (`repeat`; 1 for most files).
    pub repeat: usize,
}

/// Tokenises and packs the run's data.
pub fn prepare(cfg: &SftConfig, enc: &Encoder, max_positions: usize) -> Result<Prepared> {
    let (mut trajs, mut file_of, mut by_file) = (Vec::new(), Vec::new(), Vec::new());
    for f in &cfg.data {
        let t = read_jsonl(f)?;
        file_of.extend(std::iter::repeat_n(by_file.len(), t.len()));
        by_file.push(FileShare {
            path: f.clone(),
            ..FileShare::default()
        });
        trajs.extend(t);
    }
    if trajs.is_empty() {
        return Err(TrainError::Invalid(
            "the training data holds no trajectories".into(),
        ));
    }
    let limit = cfg.pack.max_tokens.min(max_positions);
    let encoded: Vec<Result<Sample>> = {
        use rayon::prelude::*;
        trajs
            .par_iter()
            .map(|t| enc.encode_record(t, limit))
            .collect()
    };
    let mut samples = Vec::with_capacity(trajs.len());
    let mut sample_file = Vec::with_capacity(trajs.len());
    let mut dropped = 0;
    let mut weighted_tokens = 0;
    for (s, fi) in encoded.into_iter().zip(file_of) {
        let s = s?;
        if s.tokens.len() > limit {
            match cfg.on_too_long {
                TooLong::Error => {
                    return Err(TrainError::TooLong {
                        sample: s.id,
                        tokens: s.tokens.len(),
                        limit,
                    })
                }
                TooLong::Drop => {
                    dropped += 1;
                    continue;
                }
            }
        }
        let share = &mut by_file[fi];
        share.trajectories += 1;
        share.tokens += s.tokens.len();
        share.loss_tokens += s.mask.iter().filter(|m| **m).count();
        weighted_tokens += s
            .weight
            .iter()
            .zip(&s.mask)
            .filter(|(w, m)| **m && **w != 1.0)
            .count();
        samples.push(s);
        sample_file.push(fi);
    }
    // hold out whole trajectories, chosen by the seed
    let mut order: Vec<usize> = (0..samples.len()).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5EED_0001));
    let n_val = ((samples.len() as f64 * cfg.val_fraction).round() as usize)
        .min(cfg.val_max)
        .min(samples.len().saturating_sub(1));
    let mut is_val = vec![false; samples.len()];
    for &i in &order[..n_val] {
        is_val[i] = true;
    }
    let repeats: Vec<usize> = cfg.data.iter().map(|f| cfg.repeat_of(f)).collect();
    for (share, &k) in by_file.iter_mut().zip(&repeats) {
        share.repeat = k;
    }
    // files drawn once are packed together as they always were; a repeated file is packed on
    // its own, so its packs can be repeated whole
    let mut tr = Vec::new();
    let mut repeated: Vec<Vec<Sample>> = by_file.iter().map(|_| Vec::new()).collect();
    let mut va = Vec::new();
    for ((s, v), fi) in samples.into_iter().zip(is_val).zip(sample_file) {
        if v {
            va.push(s)
        } else if repeats[fi] > 1 {
            repeated[fi].push(s)
        } else {
            tr.push(s)
        }
    }
    let mut pc = cfg.pack;
    pc.max_tokens = limit;
    let mut train = pack(&tr, &pc)?;
    for (file, k) in repeated.iter().zip(&repeats) {
        if !file.is_empty() {
            let packs = pack(file, &pc)?;
            for _ in 0..*k {
                train.extend(packs.iter().cloned());
            }
        }
    }
    let mut val = pack(&va, &pc)?;
    // validation loss stays the plain mean, comparable across call weights
    for p in &mut val {
        p.seq.weights.clear();
    }
    Ok(Prepared {
        packed_tokens: train.iter().map(|p| p.seq.len()).sum(),
        unpacked_tokens: train.iter().map(|p| p.unpacked_tokens).sum(),
        loss_tokens: train.iter().map(|p| p.seq.targets.len()).sum(),
        weighted_tokens,
        trajectories: tr.len() + va.len(),
        dropped_too_long: dropped,
        by_file,
        train,
        val,
    })
}

/// Summed loss over packs, and scored tokens (no gradients kept).
pub fn evaluate(model: &TrainModel, packs: &[Pack]) -> Result<(f64, usize)> {
    let mut sum = 0f64;
    let mut n = 0;
    for p in packs {
        let (l, k) = model.loss_value(&p.seq)?;
        sum += l;
        n += k;
    }
    Ok((sum, n))
}

/// Adds the gradient of `seq`'s summed (weighted) loss divided by `step_weight` (the step's
/// loss tokens, each counted with its weight) into `grads` (one vector per variable) and
/// returns the summed loss; a non-finite loss is returned without a backward pass.
pub fn accumulate(
    model: &TrainModel,
    seq: &hat_model::train::Packed,
    step_weight: f64,
    grads: &mut [Vec<f32>],
) -> Result<f32> {
    let (nll, _) = model.loss(seq)?;
    let value = nll.to_scalar::<f32>()?;
    if !value.is_finite() {
        return Ok(value);
    }
    // a step of plain tokens divides by their count, as it always did
    let norm = if step_weight > 0.0 { step_weight } else { 1.0 };
    add_gradients(model, &(nll / norm)?, grads)?;
    Ok(value)
}

/// The loss tokens of `seq`, each counted with its weight.
fn weight_of(seq: &hat_model::train::Packed) -> f64 {
    if seq.weights.is_empty() {
        seq.targets.len() as f64
    } else {
        seq.weights.iter().map(|&w| w as f64).sum()
    }
}

/// Order of the packs in an epoch.
fn epoch_order(n: usize, seed: u64, epoch: usize) -> Vec<usize> {
    let mut o: Vec<usize> = (0..n).collect();
    o.shuffle(&mut ChaCha8Rng::seed_from_u64(
        seed ^ (epoch as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
    ));
    o
}

/// SFT as a [`Stage`]: each step takes packs in the epoch's order until the step's budget of
/// loss tokens is reached.
struct SftStage<'a> {
    data: &'a Prepared,
    tokens_per_step: usize,
    seed: u64,
    order: Vec<usize>,
}

impl Stage for SftStage<'_> {
    fn start(&mut self, _model: &TrainModel, state: &RunState) -> Result<()> {
        self.order = epoch_order(self.data.train.len(), self.seed, state.epoch);
        Ok(())
    }

    fn step(
        &mut self,
        model: &TrainModel,
        state: &mut RunState,
        grads: &mut [Vec<f32>],
    ) -> Result<StepWork> {
        let train = &self.data.train;
        let mut chosen = Vec::new();
        let mut step_loss_tokens = 0usize;
        while step_loss_tokens < self.tokens_per_step {
            if state.cursor >= self.order.len() {
                state.epoch += 1;
                state.cursor = 0;
                self.order = epoch_order(train.len(), self.seed, state.epoch);
            }
            let p = &train[self.order[state.cursor]];
            state.cursor += 1;
            step_loss_tokens += p.seq.targets.len();
            chosen.push(p);
            if chosen.len() >= train.len() && step_loss_tokens == 0 {
                return Err(TrainError::Invalid(
                    "the training data has no assistant tokens to learn".into(),
                ));
            }
        }
        let mut loss_sum = 0f64;
        let mut tokens = 0usize;
        let step_weight: f64 = chosen.iter().map(|p| weight_of(&p.seq)).sum();
        for p in &chosen {
            let value = accumulate(model, &p.seq, step_weight, grads)?;
            if !value.is_finite() {
                return Err(TrainError::Diverged {
                    step: state.step,
                    value,
                });
            }
            loss_sum += value as f64;
            tokens += p.seq.len();
        }
        Ok(StepWork {
            loss: loss_sum / if step_weight > 0.0 { step_weight } else { 1.0 },
            tokens,
            loss_tokens: step_loss_tokens,
            extra: Default::default(),
        })
    }

    fn validate(&mut self, model: &TrainModel) -> Result<Option<f64>> {
        if self.data.val.is_empty() {
            return Ok(None);
        }
        let (s, n) = evaluate(model, &self.data.val)?;
        Ok(Some(s / n.max(1) as f64))
    }
}

/// Runs (or resumes) a fine-tuning run in `out`.
pub fn run(
    cfg: &SftConfig,
    out: &Path,
    resume: bool,
    on: &mut dyn FnMut(Event),
) -> Result<PathBuf> {
    cfg.validate()?;
    std::fs::create_dir_all(out).map_err(io(out.display()))?;
    let loaded = TrainModel::load_maybe_lora(&cfg.model, cfg.lora.as_ref())?;
    let model = loaded.model;
    let enc = Encoder::new(loaded.tokenizer, loaded.chat_template.as_deref())?
        .with_call_weight(cfg.call_weight)
        .with_decision_weight(cfg.decision_weight);
    let data = prepare(cfg, &enc, model.max_positions())?;
    on(Event::Prepared(&data));
    if data.train.is_empty() {
        return Err(TrainError::Invalid(
            "no training trajectories left after the split".into(),
        ));
    }
    let settings = LoopSettings {
        source: &cfg.model,
        max_steps: cfg.max_steps,
        eval_every: cfg.eval_every,
        save_every: cfg.save_every,
        keep: cfg.keep,
        export: &cfg.export,
        optim: cfg.optim,
        matmul: cfg.matmul,
    };
    let mut stage = SftStage {
        data: &data,
        tokens_per_step: cfg.tokens_per_step,
        seed: cfg.seed,
        order: Vec::new(),
    };
    train(&settings, &model, &mut stage, out, resume, on)
}
