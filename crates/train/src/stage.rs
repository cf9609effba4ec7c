//! The one training loop every stage runs (SFT, on-policy distillation, RL): a [`Stage`]
//! says how one optimiser step's gradient is made; the loop owns the optimiser and its
//! schedule, divergence checks, validation timing, `metrics.jsonl`, atomic checkpoints with
//! exact resume, and the export at the end.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use hat_model::train::TrainModel;

use crate::checkpoint::{self, RunState};
use crate::error::{io, Result, TrainError};
use crate::optim::{AdamW, AdamWConfig};

/// One line of `metrics.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepMetrics {
    pub step: usize,
    pub loss: f64,
    pub lr: f64,
    pub grad_norm: f64,
    /// Tokens processed this step (sequence lengths) and their rate.
    pub tokens: usize,
    pub loss_tokens: usize,
    pub tokens_per_s: f64,
    /// Seconds in optimiser steps so far (the run's compute).
    pub seconds: f64,
    /// Wall seconds of the run when this line was written: steps, validation and the
    /// checkpoints before this step (a step's own checkpoint counts into the next line).
    /// Zero in metrics written before it was recorded.
    #[serde(default)]
    pub wall_seconds: f64,
    pub epoch: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_loss: Option<f64>,
    /// Numbers only one stage has (distillation: sampling time, rollout/trainer mismatch).
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, f64>,
}

/// What the loop reports as it goes.
pub enum Event<'a> {
    /// SFT data is ready: counts to print.
    Prepared(&'a crate::sft::Prepared),
    /// A stage's own one-line report (what it loaded, how many prompts, ...).
    Note(&'a str),
    Resumed(&'a RunState),
    Step(&'a StepMetrics, usize),
    Saved(&'a Path),
    Exported(&'a Path),
}

/// What one step of a stage did.
#[derive(Debug, Clone, Default)]
pub struct StepWork {
    /// The step's loss per loss token (non-finite stops the run).
    pub loss: f64,
    /// Tokens run through the model, and those that carried loss.
    pub tokens: usize,
    pub loss_tokens: usize,
    /// Stage-specific numbers for `metrics.jsonl`.
    pub extra: BTreeMap<String, f64>,
}

/// A training stage: how one optimiser step's gradient is made.
pub trait Stage {
    /// Called once before the first step of this process (after a resume, `state` is the
    /// checkpoint's): a stage that samples builds its snapshot of the weights here.
    fn start(&mut self, _model: &TrainModel, _state: &RunState) -> Result<()> {
        Ok(())
    }
    /// Adds the gradient of this step's loss (normalised per loss token) into `grads`, one
    /// vector per variable of `model`, and advances its data cursor in `state`.
    fn step(
        &mut self,
        model: &TrainModel,
        state: &mut RunState,
        grads: &mut [Vec<f32>],
    ) -> Result<StepWork>;
    /// The held-out loss, when the stage has one.
    fn validate(&mut self, model: &TrainModel) -> Result<Option<f64>>;
    /// The optimiser has just updated the weights.
    fn updated(&mut self, _model: &TrainModel, _state: &RunState) -> Result<()> {
        Ok(())
    }
    /// Whether a checkpoint now would resume exactly: a stage that holds work drawn for later
    /// steps in memory (RL's remaining minibatches of a rollout batch, whose old
    /// log-probabilities were taken at earlier weights) says no until it has used it up, and
    /// a due checkpoint waits for that step.
    fn can_checkpoint(&self) -> bool {
        true
    }
}

/// The settings the loop needs, whichever stage runs.
#[derive(Debug, Clone)]
pub struct LoopSettings<'a> {
    /// The starting model (its metadata goes into exports).
    pub source: &'a Path,
    pub max_steps: usize,
    pub eval_every: usize,
    pub save_every: usize,
    pub keep: usize,
    pub export: &'a [String],
    pub optim: AdamWConfig,
    /// Precision of the dense products for the run.
    pub matmul: crate::config::Matmul,
}

/// Adds the gradient of `loss` into `grads` (one vector per variable of `model`; an empty
/// vector is a zero gradient not yet allocated).
///
/// Each variable's gradient leaves candle's store as it is added, and the first one of a
/// step becomes the accumulator instead of being added to a zeroed copy: at the end of a
/// backward pass the store already holds every gradient, and a second full set beside it
/// would be the size of the model again.
pub fn add_gradients(
    model: &TrainModel,
    loss: &candle_core::Tensor,
    grads: &mut [Vec<f32>],
) -> Result<()> {
    let mut g = loss.backward()?;
    for (acc, (_, var)) in grads.iter_mut().zip(model.vars()) {
        if let Some(gt) = g.remove(var.as_tensor()) {
            let gv = gt.flatten_all()?.to_vec1::<f32>()?;
            drop(gt);
            if acc.is_empty() {
                *acc = gv;
            } else {
                for (a, b) in acc.iter_mut().zip(gv) {
                    *a += b;
                }
            }
        }
    }
    Ok(())
}

/// One empty (zero, unallocated) gradient per variable, for [`add_gradients`].
pub fn zero_gradients(n: usize) -> Vec<Vec<f32>> {
    vec![Vec::new(); n]
}

/// Refuses a new run (`resume` false) in a folder that holds a run's checkpoints, and any
/// run in a folder whose run finished and lost its checkpoints (`hat train pipeline` removes
/// them): it would start from step 0 and replace the exported model.
pub fn refuse_existing(out: &Path, resume: bool) -> Result<()> {
    match checkpoint::existing(out) {
        Some(checkpoint) if !resume => Err(TrainError::RunExists {
            out: out.to_path_buf(),
            checkpoint,
        }),
        Some(_) => Ok(()),
        // the Hugging Face export first: what a next stage or a further run starts from
        None => match ["hf", "f32", "q8_0", "q4_0"]
            .iter()
            .map(|f| crate::export::run_output(out, f))
            .find(|p| p.exists())
        {
            Some(model) => Err(TrainError::CheckpointsGone {
                out: out.to_path_buf(),
                model,
            }),
            None => Ok(()),
        },
    }
}

/// Runs (or resumes) `stage` on `model` in the run folder `out`; returns the last export.
pub fn train(
    s: &LoopSettings,
    model: &TrainModel,
    stage: &mut dyn Stage,
    out: &Path,
    resume: bool,
    on: &mut dyn FnMut(Event),
) -> Result<PathBuf> {
    hat_model::train::set_matmul_precision(s.matmul.into())?;
    refuse_existing(out, resume)?;
    std::fs::create_dir_all(out).map_err(io(out.display()))?;
    let sizes: Vec<usize> = model.vars().iter().map(|(_, v)| v.elem_count()).collect();
    let mut opt = AdamW::new(s.optim, &sizes);
    let mut state = RunState::default();
    if resume {
        if let Some(dir) = checkpoint::latest(out)? {
            state = checkpoint::load(&dir, model, &mut opt)?;
            if state.step > s.max_steps {
                return Err(TrainError::Shortened {
                    step: state.step,
                    max_steps: s.max_steps,
                });
            }
            on(Event::Resumed(&state));
        }
    }
    let metrics_path = out.join("metrics.jsonl");
    // a resumed run rewrites the metrics up to its checkpoint, dropping lines of lost steps;
    // a line torn by a full disk may hold half a character: read the bytes, drop what does
    // not parse; a file that cannot be read is an error, not an empty history
    let old = if !resume {
        String::new()
    } else {
        match std::fs::read(&metrics_path) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(io(metrics_path.display())(e)),
        }
    };
    let kept: Vec<&str> = old
        .lines()
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|v| v["step"].as_u64())
                .is_some_and(|s| (s as usize) <= state.step)
        })
        .collect();
    // the kept lines go to a new file that replaces the old one whole: a run killed here
    // keeps its log
    let mut text = String::new();
    for l in kept {
        text.push_str(l);
        text.push('\n');
    }
    crate::durable::write(&metrics_path, text).map_err(io(metrics_path.display()))?;
    let mut metrics = std::fs::OpenOptions::new()
        .append(true)
        .open(&metrics_path)
        .map_err(io(metrics_path.display()))?;
    let vars = model.vars().to_vec();
    stage.start(model, &state)?;
    let mut save_due = false;
    while state.step < s.max_steps {
        let started = Instant::now();
        let wall_before = state.wall_seconds;
        let mut grads = zero_gradients(sizes.len());
        let work = stage.step(model, &mut state, &mut grads)?;
        if !work.loss.is_finite() {
            return Err(TrainError::Diverged {
                step: state.step,
                value: work.loss as f32,
            });
        }
        let lr = s.optim.lr_at(state.step, s.max_steps);
        // A step with nothing to learn from (RL when every group's rewards were equal) leaves
        // the weights alone: AdamW on a zero gradient would still move them along its moments
        // (about 0.9 of the last step's update) and age them.
        let update = work.loss_tokens > 0;
        let grad_norm = if !update {
            0.0
        } else {
            match opt.step(&vars, &mut grads, lr) {
                Err(TrainError::Diverged { value, .. }) => {
                    return Err(TrainError::Diverged {
                        step: state.step,
                        value,
                    })
                }
                r => r?,
            }
        };
        state.step += 1;
        state.tokens += work.tokens as u64;
        state.loss_tokens += work.loss_tokens as u64;
        if update {
            stage.updated(model, &state)?;
        }
        let secs = started.elapsed().as_secs_f64();
        state.seconds += secs;
        let val_loss = if state.step % s.eval_every.max(1) == 0 || state.step == s.max_steps {
            stage.validate(model)?
        } else {
            None
        };
        state.wall_seconds = wall_before + started.elapsed().as_secs_f64();
        let m = StepMetrics {
            step: state.step,
            loss: work.loss,
            lr,
            grad_norm,
            tokens: work.tokens,
            loss_tokens: work.loss_tokens,
            tokens_per_s: work.tokens as f64 / secs,
            seconds: state.seconds,
            wall_seconds: state.wall_seconds,
            epoch: state.epoch,
            val_loss,
            extra: work.extra,
        };
        writeln!(metrics, "{}", serde_json::to_string(&m)?).map_err(io(metrics_path.display()))?;
        metrics.flush().map_err(io(metrics_path.display()))?;
        on(Event::Step(&m, s.max_steps));
        save_due |= state.step % s.save_every.max(1) == 0;
        if (save_due && stage.can_checkpoint()) || state.step == s.max_steps {
            let dir = checkpoint::save(out, model, &opt, &state, s.keep)?;
            on(Event::Saved(&dir));
            save_due = false;
        }
        state.wall_seconds = wall_before + started.elapsed().as_secs_f64();
    }
    let mut last = out.to_path_buf();
    for f in s.export {
        let path = crate::export::run_output(out, f);
        crate::export::export(model, s.source, f, &path)?;
        on(Event::Exported(&path));
        last = path;
    }
    Ok(last)
}
