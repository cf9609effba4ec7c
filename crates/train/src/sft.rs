//! Supervised fine-tuning: the training loop over packed trajectories, with gradient
//! accumulation to a token budget, validation, metrics, checkpoints and exact resume.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use hat_model::train::TrainModel;

use crate::checkpoint::{self, RunState};
use crate::config::{SftConfig, TooLong};
use crate::error::{io, Result, TrainError};
use crate::optim::AdamW;
use crate::pack::{pack, Pack};
use crate::tokens::{read_jsonl, Encoder, Sample};

/// One line of `metrics.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepMetrics {
    pub step: usize,
    pub loss: f64,
    pub lr: f64,
    pub grad_norm: f64,
    /// Tokens processed this step (packed lengths) and their rate.
    pub tokens: usize,
    pub loss_tokens: usize,
    pub tokens_per_s: f64,
    pub seconds: f64,
    pub epoch: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_loss: Option<f64>,
}

/// What the loop reports as it goes.
pub enum Event<'a> {
    /// Data is ready: counts to print.
    Prepared(&'a Prepared),
    Resumed(&'a RunState),
    Step(&'a StepMetrics, usize),
    Saved(&'a Path),
    Exported(&'a Path),
}

/// Tokenised, split and packed data.
#[derive(Debug)]
pub struct Prepared {
    pub train: Vec<Pack>,
    pub val: Vec<Pack>,
    pub trajectories: usize,
    pub dropped_too_long: usize,
    /// Tokens of the train packs, and of the same samples unpacked.
    pub packed_tokens: usize,
    pub unpacked_tokens: usize,
    pub loss_tokens: usize,
}

/// Tokenises and packs the run's data.
pub fn prepare(cfg: &SftConfig, enc: &Encoder, max_positions: usize) -> Result<Prepared> {
    let mut trajs = Vec::new();
    for f in &cfg.data {
        trajs.extend(read_jsonl(f)?);
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
            .map(|t| enc.encode(&t.id, &t.record.messages))
            .collect()
    };
    let mut samples = Vec::with_capacity(trajs.len());
    let mut dropped = 0;
    for s in encoded {
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
        samples.push(s);
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
    let (mut tr, mut va) = (Vec::new(), Vec::new());
    for (s, v) in samples.into_iter().zip(is_val) {
        if v {
            va.push(s)
        } else {
            tr.push(s)
        }
    }
    let mut pc = cfg.pack;
    pc.max_tokens = limit;
    let train = pack(&tr, &pc)?;
    let val = pack(&va, &pc)?;
    Ok(Prepared {
        packed_tokens: train.iter().map(|p| p.seq.len()).sum(),
        unpacked_tokens: train.iter().map(|p| p.unpacked_tokens).sum(),
        loss_tokens: train.iter().map(|p| p.seq.targets.len()).sum(),
        trajectories: tr.len() + va.len(),
        dropped_too_long: dropped,
        train,
        val,
    })
}

/// Summed loss over packs, and scored tokens (no gradients kept).
pub fn evaluate(model: &TrainModel, packs: &[Pack]) -> Result<(f64, usize)> {
    let mut sum = 0f64;
    let mut n = 0;
    for p in packs {
        let (l, k) = model.loss(&p.seq)?;
        sum += l.to_scalar::<f32>()? as f64;
        n += k;
    }
    Ok((sum, n))
}

/// Adds the gradient of `seq`'s summed loss divided by `step_loss_tokens` into `grads` (one
/// vector per variable) and returns the summed loss; a non-finite loss is returned without a
/// backward pass.
pub fn accumulate(
    model: &TrainModel,
    seq: &hat_model::train::Packed,
    step_loss_tokens: usize,
    grads: &mut [Vec<f32>],
) -> Result<f32> {
    let (nll, _) = model.loss(seq)?;
    let value = nll.to_scalar::<f32>()?;
    if !value.is_finite() {
        return Ok(value);
    }
    let g = (nll / step_loss_tokens.max(1) as f64)?.backward()?;
    for (acc, (_, var)) in grads.iter_mut().zip(model.vars()) {
        if let Some(gt) = g.get(var.as_tensor()) {
            for (a, b) in acc.iter_mut().zip(gt.flatten_all()?.to_vec1::<f32>()?) {
                *a += b;
            }
        }
    }
    Ok(value)
}

/// Order of the packs in an epoch.
fn epoch_order(n: usize, seed: u64, epoch: usize) -> Vec<usize> {
    let mut o: Vec<usize> = (0..n).collect();
    o.shuffle(&mut ChaCha8Rng::seed_from_u64(
        seed ^ (epoch as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
    ));
    o
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
    let loaded = TrainModel::load(&cfg.model)?;
    let model = loaded.model;
    let enc = Encoder::new(loaded.tokenizer, loaded.chat_template.as_deref())?;
    let data = prepare(cfg, &enc, model.max_positions())?;
    on(Event::Prepared(&data));
    if data.train.is_empty() {
        return Err(TrainError::Invalid(
            "no training trajectories left after the split".into(),
        ));
    }
    let sizes: Vec<usize> = model.vars().iter().map(|(_, v)| v.elem_count()).collect();
    let mut opt = AdamW::new(cfg.optim, &sizes);
    let mut state = RunState::default();
    if resume {
        if let Some(dir) = checkpoint::latest(out)? {
            state = checkpoint::load(&dir, &model, &mut opt)?;
            on(Event::Resumed(&state));
        }
    }
    let metrics_path = out.join("metrics.jsonl");
    // a resumed run rewrites the metrics up to its checkpoint, dropping lines of lost steps
    let kept: Vec<String> = match std::fs::read_to_string(&metrics_path) {
        Ok(t) if resume => t
            .lines()
            .filter(|l| {
                serde_json::from_str::<serde_json::Value>(l)
                    .ok()
                    .and_then(|v| v["step"].as_u64())
                    .is_some_and(|s| (s as usize) <= state.step)
            })
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    };
    let mut metrics = std::fs::File::create(&metrics_path).map_err(io(metrics_path.display()))?;
    for l in kept {
        writeln!(metrics, "{l}").map_err(io(metrics_path.display()))?;
    }
    let vars = model.vars().to_vec();
    let mut order = epoch_order(data.train.len(), cfg.seed, state.epoch);
    while state.step < cfg.max_steps {
        let started = Instant::now();
        // choose this step's packs
        let mut chosen = Vec::new();
        let mut step_loss_tokens = 0usize;
        while step_loss_tokens < cfg.tokens_per_step {
            if state.cursor >= order.len() {
                state.epoch += 1;
                state.cursor = 0;
                order = epoch_order(data.train.len(), cfg.seed, state.epoch);
            }
            let p = &data.train[order[state.cursor]];
            state.cursor += 1;
            step_loss_tokens += p.seq.targets.len();
            chosen.push(p);
            if chosen.len() >= data.train.len() && step_loss_tokens == 0 {
                return Err(TrainError::Invalid(
                    "the training data has no assistant tokens to learn".into(),
                ));
            }
        }
        let mut grads: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![0f32; n]).collect();
        let mut loss_sum = 0f64;
        let mut tokens = 0usize;
        for p in &chosen {
            let value = accumulate(&model, &p.seq, step_loss_tokens, &mut grads)?;
            if !value.is_finite() {
                return Err(TrainError::Diverged {
                    step: state.step,
                    value,
                });
            }
            loss_sum += value as f64;
            tokens += p.seq.len();
        }
        let lr = cfg.optim.lr_at(state.step, cfg.max_steps);
        let grad_norm = match opt.step(&vars, &mut grads, lr) {
            Err(TrainError::Diverged { value, .. }) => {
                return Err(TrainError::Diverged {
                    step: state.step,
                    value,
                })
            }
            r => r?,
        };
        state.step += 1;
        state.tokens += tokens as u64;
        state.loss_tokens += step_loss_tokens as u64;
        let secs = started.elapsed().as_secs_f64();
        state.seconds += secs;
        let val_loss = if !data.val.is_empty()
            && (state.step % cfg.eval_every.max(1) == 0 || state.step == cfg.max_steps)
        {
            let (s, n) = evaluate(&model, &data.val)?;
            Some(s / n.max(1) as f64)
        } else {
            None
        };
        let m = StepMetrics {
            step: state.step,
            loss: loss_sum / step_loss_tokens as f64,
            lr,
            grad_norm,
            tokens,
            loss_tokens: step_loss_tokens,
            tokens_per_s: tokens as f64 / secs,
            seconds: state.seconds,
            epoch: state.epoch,
            val_loss,
        };
        writeln!(metrics, "{}", serde_json::to_string(&m)?).map_err(io(metrics_path.display()))?;
        metrics.flush().map_err(io(metrics_path.display()))?;
        on(Event::Step(&m, cfg.max_steps));
        if state.step % cfg.save_every.max(1) == 0 || state.step == cfg.max_steps {
            let dir = checkpoint::save(out, &model, &opt, &state, cfg.keep)?;
            on(Event::Saved(&dir));
        }
    }
    let mut last = out.to_path_buf();
    for f in &cfg.export {
        let path = crate::export::run_output(out, f);
        crate::export::export(&model, &cfg.model, f, &path)?;
        on(Event::Exported(&path));
        last = path;
    }
    Ok(last)
}
