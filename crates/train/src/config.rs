//! The run configuration (TOML), with presets; the resolved form is saved in the run folder
//! and is what `--resume` uses.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};
use crate::optim::AdamWConfig;
use crate::pack::PackConfig;

/// What to do with a sample longer than a packed sequence may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TooLong {
    /// Stop with an error naming the sample.
    #[default]
    Error,
    /// Skip it and count it.
    Drop,
}

/// Supervised fine-tuning run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SftConfig {
    /// Starting weights: a GGUF file or a Hugging Face folder.
    pub model: PathBuf,
    /// Training data (`hat data gen` JSONL).
    pub data: Vec<PathBuf>,
    pub seed: u64,
    /// Optimiser steps of the run.
    pub max_steps: usize,
    /// Loss-carrying tokens per optimiser step (gradients accumulate over packs until
    /// reached).
    pub tokens_per_step: usize,
    /// Share of trajectories held out for validation loss.
    pub val_fraction: f64,
    /// Most validation trajectories (they are evaluated at every `eval_every`).
    pub val_max: usize,
    pub eval_every: usize,
    pub save_every: usize,
    /// Checkpoints kept.
    pub keep: usize,
    pub on_too_long: TooLong,
    /// GGUF formats written at the end (`f32`, `q8_0`, `q4_0`).
    pub export: Vec<String>,
    pub optim: AdamWConfig,
    pub pack: PackConfig,
}

impl Default for SftConfig {
    fn default() -> Self {
        Self {
            model: PathBuf::new(),
            data: Vec::new(),
            seed: 1,
            max_steps: 100,
            tokens_per_step: 2048,
            val_fraction: 0.02,
            val_max: 64,
            eval_every: 25,
            save_every: 5,
            keep: 2,
            on_too_long: TooLong::Error,
            export: vec!["q8_0".into()],
            optim: AdamWConfig::default(),
            pack: PackConfig::default(),
        }
    }
}

/// Named starting points for a config.
pub const PRESETS: &[(&str, &str)] = &[
    (
        "cpu",
        "about 70 minutes on a 2-core AVX-512 CPU (measured ~155 packed tokens/s): 28 steps \
         of 1,024 loss tokens, ~3 packs of up to 16 conversations a step (~1,100 \
         trajectories, ~550k processed tokens)",
    ),
    (
        "gpu",
        "the same recipe with a bigger budget: 1,000 steps of 8,192 loss tokens",
    ),
    ("smoke", "a few steps, for checking a setup end to end"),
];

impl SftConfig {
    /// A preset by name.
    pub fn preset(name: &str) -> Result<Self> {
        let mut c = Self::default();
        match name {
            "cpu" => {
                c.max_steps = 28;
                c.tokens_per_step = 1024;
                c.optim.lr = 3e-4;
                c.optim.warmup_steps = 4;
                c.eval_every = 10;
            }
            "gpu" => {
                c.max_steps = 1000;
                c.tokens_per_step = 8192;
                c.optim.lr = 2e-4;
                c.optim.warmup_steps = 50;
                c.save_every = 50;
                c.eval_every = 100;
            }
            "smoke" => {
                c.max_steps = 3;
                c.tokens_per_step = 256;
                c.eval_every = 2;
                c.save_every = 1;
                c.val_max = 4;
            }
            other => {
                return Err(TrainError::Config {
                    path: "--preset".into(),
                    message: format!(
                        "unknown preset `{other}` (known: {})",
                        PRESETS.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
                    ),
                })
            }
        }
        Ok(c)
    }

    /// Reads a TOML file; unknown keys are errors naming the key.
    pub fn from_toml(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(crate::error::io(path.display()))?;
        toml::from_str(&text).map_err(|e| TrainError::Config {
            path: path.display().to_string(),
            message: e.to_string(),
        })
    }

    /// The TOML form.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// Checks values that would make a run meaningless.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| {
            Err(TrainError::Config {
                path: "config".into(),
                message: m.to_string(),
            })
        };
        if self.data.is_empty() {
            return bad("no training data (`data = [\"train.jsonl\"]` or --data FILE)");
        }
        if self.max_steps == 0 || self.tokens_per_step == 0 {
            return bad("max_steps and tokens_per_step must be positive");
        }
        if !(0.0..1.0).contains(&self.val_fraction) {
            return bad("val_fraction must be in [0, 1)");
        }
        if !(self.optim.lr > 0.0 && self.optim.lr.is_finite()) {
            return bad("optim.lr must be a positive number");
        }
        if self.pack.max_conversations == 0 || self.pack.max_tokens == 0 {
            return bad("pack.max_conversations and pack.max_tokens must be positive");
        }
        for f in &self.export {
            if !crate::export::FORMATS.contains(&f.as_str()) {
                return bad(&format!(
                    "export format `{f}` (known: {})",
                    crate::export::FORMATS.join(", ")
                ));
            }
        }
        Ok(())
    }
}
