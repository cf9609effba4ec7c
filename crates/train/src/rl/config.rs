//! The configuration of an RL run and its presets.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};
use crate::optim::AdamWConfig;

/// An HSA-RL run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RlConfig {
    /// The starting weights (the stage-1 or stage-2 model): a GGUF file or Hugging Face folder.
    pub model: PathBuf,
    /// The base harness; rollouts run under it and its train-pool augmented states.
    pub harness_dir: PathBuf,
    /// Train-pool augmented harness states besides the base one.
    pub variants: usize,
    /// Seed of the augmented states (a seed `hat data gen` did not use gives states SFT never
    /// saw).
    pub variant_seed: u64,
    /// Train-split tasks to draw from, and their seed.
    pub tasks: usize,
    pub task_seed: u64,
    pub seed: u64,
    pub max_steps: usize,
    /// Tasks per optimiser step (each a group of `group_size` rollouts).
    pub tasks_per_step: usize,
    /// Rollouts per task (G).
    pub group_size: usize,
    /// Rounds of drawing per step: groups whose rewards are all equal carry no signal, so
    /// more tasks are drawn in their place, at most this many rounds.
    pub max_draw_rounds: usize,
    /// Model turns per episode (tool rounds and hook retries included).
    pub max_turns: usize,
    /// Longest model turn, in tokens.
    pub max_new_tokens: usize,
    /// Sampling temperature of the rollouts: 1, the policy itself (other values are refused).
    pub temperature: f32,
    /// PPO clip range of the token ratio: `[1 - clip_low, 1 + clip_high]`.
    pub clip_low: f64,
    pub clip_high: f64,
    /// Truncated importance sampling: the weight `pi_train / pi_rollout` of a token (the gap
    /// between the trainer's and the rollout engine's numerics) is capped at this.
    pub tis_cap: f64,
    /// Optimiser steps per batch of rollouts (1: strictly on-policy, the ratio is 1 and
    /// clipping never binds; more reuses each batch and the clip matters).
    pub minibatches: usize,
    /// Divide advantages by the group's reward standard deviation (GRPO); off: only centre.
    pub scale_by_std: bool,
    /// Share of the reward that is the scorer's verdict (1 when every component passes, the
    /// evaluation's pass), the rest being the fraction of components passed. 0: the fraction
    /// alone, where format and constraints, which nearly always pass, put a floor of ~0.4
    /// under a wrong answer; higher weighs what evaluation counts.
    pub pass_weight: f64,
    /// Weight of the KL penalty to `reference` (0: none, and no reference is loaded).
    pub kl_coef: f64,
    /// The reference model of the KL penalty (unset: the starting weights).
    pub reference: Option<PathBuf>,
    /// Weight format of the rollout snapshot: `q8_0` (fast) or `f32` (the trainer's numbers).
    pub rollout_format: String,
    /// Most tokens in one packed training sequence (a group larger than this is split).
    pub max_pack_tokens: usize,
    /// Write every rollout (token ids, masks, log-probabilities, rewards) to
    /// `rollouts.jsonl`, for other trainers and for inspection.
    pub save_rollouts: bool,
    /// Steps between checkpoints. With `minibatches > 1` a due checkpoint waits for the end
    /// of its rollout batch (its remaining minibatches are not saved), so a resume continues
    /// exactly as the run would have.
    pub save_every: usize,
    pub keep: usize,
    /// GGUF formats (or `hf`) written at the end.
    pub export: Vec<String>,
    pub optim: AdamWConfig,
    /// Precision of the dense products (`f32` or `bf16`; see [`crate::config::Matmul`]).
    pub matmul: crate::config::Matmul,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora: Option<hat_model::train::LoraConfig>,
}

impl Default for RlConfig {
    fn default() -> Self {
        Self {
            model: PathBuf::new(),
            harness_dir: PathBuf::from("harnesses/livestream"),
            variants: 64,
            variant_seed: 3,
            tasks: 2000,
            task_seed: 3,
            seed: 1,
            max_steps: 24,
            tasks_per_step: 3,
            group_size: 4,
            max_draw_rounds: 3,
            max_turns: 3,
            max_new_tokens: 128,
            temperature: 1.0,
            clip_low: 0.2,
            clip_high: 0.28,
            tis_cap: 2.0,
            minibatches: 1,
            scale_by_std: true,
            pass_weight: 0.0,
            kl_coef: 0.0,
            reference: None,
            rollout_format: "q8_0".into(),
            max_pack_tokens: 8192,
            save_rollouts: true,
            save_every: 5,
            keep: 2,
            export: vec!["q8_0".into()],
            optim: AdamWConfig {
                lr: 2e-5,
                warmup_steps: 2,
                weight_decay: 0.0,
                ..AdamWConfig::default()
            },
            matmul: crate::config::Matmul::F32,
            lora: None,
        }
    }
}

/// Presets for `hat train rl --preset`.
pub const PRESETS: &[(&str, &str)] = &[
    (
        "cpu",
        "24 steps of 3 tasks x 4 rollouts (3 turns of at most 128 tokens), about 30 minutes on \
         2 cores",
    ),
    ("gpu", "300 steps of 16 tasks x 8 rollouts, 2 minibatches"),
    ("smoke", "a few steps, for checking a setup end to end"),
];

impl RlConfig {
    /// A preset by name.
    pub fn preset(name: &str) -> Result<Self> {
        let mut c = Self::default();
        match name {
            "cpu" => {}
            "gpu" => {
                c.max_steps = 300;
                c.tasks_per_step = 16;
                c.group_size = 8;
                c.minibatches = 2;
                c.max_turns = 4;
                c.max_new_tokens = 256;
                c.variants = 1000;
                c.tasks = 20000;
                c.save_every = 20;
            }
            "smoke" => {
                c.max_steps = 2;
                c.tasks_per_step = 1;
                c.group_size = 2;
                c.max_draw_rounds = 1;
                c.max_turns = 2;
                c.max_new_tokens = 16;
                c.variants = 2;
                c.tasks = 40;
                c.save_every = 1;
            }
            other => return Err(crate::config::unknown_preset(other, PRESETS)),
        }
        Ok(c)
    }

    /// Reads a TOML file; unknown keys are errors naming the key.
    pub fn from_toml(path: &Path) -> Result<Self> {
        crate::config::read_toml(path)
    }

    /// The TOML form.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// Checks values that would make a run meaningless.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| {
            Err(TrainError::Config {
                path: "the training config".into(),
                message: m.to_string(),
            })
        };
        if self.model.as_os_str().is_empty() {
            return bad("set `model` (the weights to train)");
        }
        if self.max_steps == 0 || self.tasks_per_step == 0 || self.tasks == 0 {
            return bad("max_steps, tasks_per_step and tasks must be positive");
        }
        if self.variants > 10_000 || self.tasks > 1_000_000 {
            return bad("at most 10,000 variants and 1,000,000 tasks (all are kept in memory)");
        }
        if self.group_size < 2 {
            return bad("group_size must be at least 2 (advantages are relative to the group)");
        }
        if self.max_turns == 0 || self.max_new_tokens == 0 || self.max_draw_rounds == 0 {
            return bad("max_turns, max_new_tokens and max_draw_rounds must be positive");
        }
        if self.minibatches == 0 || self.minibatches > self.tasks_per_step {
            return bad("minibatches must be between 1 and tasks_per_step");
        }
        if self.temperature != 1.0 {
            // the engine records and the trainer computes log-probabilities at temperature 1:
            // rollouts sampled at another one would be off-policy with no correction
            return bad("temperature must be 1 (rollouts are trained on as the policy's own samples; at another temperature the importance weights would not correct for it)");
        }
        if !(self.clip_low > 0.0 && self.clip_low < 1.0 && self.clip_high > 0.0) {
            return bad("clip_low must be in (0, 1) and clip_high positive");
        }
        if !(self.tis_cap >= 1.0 && self.tis_cap.is_finite()) {
            return bad("tis_cap must be a number >= 1");
        }
        if !(0.0..=1.0).contains(&self.pass_weight) {
            return bad("pass_weight must be in [0, 1]");
        }
        if !(self.kl_coef >= 0.0 && self.kl_coef.is_finite()) {
            return bad("kl_coef must be >= 0");
        }
        if self.max_pack_tokens < 256 {
            return bad("max_pack_tokens must be at least 256");
        }
        crate::snapshot::check_format(&self.rollout_format, "rollout_format")?;
        if !(self.optim.lr > 0.0 && self.optim.lr.is_finite()) {
            return bad("optim.lr must be a positive number");
        }
        crate::export::check_formats(&self.export)
    }
}
