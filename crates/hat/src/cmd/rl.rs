//! `hat train rl`: stage 3, HSA-RL (GRPO over the agent loop in augmented harnesses).

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;

use hat_train::rl::{self, RlConfig};

use crate::cmd::backend::{config_model, model_path};
use crate::cmd::train::{run_stage, stage_config, LoraArgs, Resolved, RunArgs, StageConfig};

#[derive(Args)]
pub struct RlArgs {
    /// The starting weights (the stage-1 or stage-2 model): a GGUF file or Hugging Face folder.
    #[arg(long)]
    model: Option<String>,
    /// The base harness directory; rollouts run under it and its train-pool variants.
    #[arg(long)]
    harness: Option<PathBuf>,
    /// Train-pool augmented harness states besides the base one.
    #[arg(long)]
    variants: Option<usize>,
    /// Train-split tasks to draw from.
    #[arg(long)]
    tasks: Option<usize>,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    lora: LoraArgs,
    /// Tasks per optimiser step.
    #[arg(long)]
    tasks_per_step: Option<usize>,
    /// Rollouts per task (G).
    #[arg(long)]
    group_size: Option<usize>,
    /// Model turns per episode.
    #[arg(long)]
    max_turns: Option<usize>,
    /// Longest model turn in tokens.
    #[arg(long)]
    max_new_tokens: Option<usize>,
    /// Share of the reward that is the scorer's pass (0-1; the rest is the fraction of
    /// components passed) [default: 0]
    #[arg(long)]
    pass_weight: Option<f64>,
    /// Weight of the KL penalty to the starting weights (0: off).
    #[arg(long)]
    kl_coef: Option<f64>,
    /// Weight format of the rollout snapshot: q8_0 (fast) or f32 (the trainer's numbers).
    #[arg(long)]
    rollout_format: Option<String>,
}

/// The config with the flags applied: to a saved run (only --max-steps may change) or a new one.
fn resolve(a: &RlArgs) -> Result<(RlConfig, bool)> {
    let mut c = match stage_config::<RlConfig>(&a.run, |c| apply(c, a))? {
        Resolved::Resumed(c, changed) => return Ok((c, changed)),
        Resolved::New(c) => c,
    };
    apply(&mut c, a);
    config_model(&mut c.model);
    if let Some(r) = &mut c.reference {
        config_model(r);
    }
    if c.model.as_os_str().is_empty() {
        bail!("--model: give the weights to train (the stage-1 or stage-2 model, e.g. runs/hsa-sft/model-hf or a GGUF export)");
    }
    if !c.harness_dir.is_dir() {
        bail!(
            "--harness {}: not a directory; give the base harness (the repository's harnesses/livestream)",
            c.harness_dir.display()
        );
    }
    c.validate()?;
    Ok((c, true))
}

fn apply(c: &mut RlConfig, a: &RlArgs) {
    if let Some(m) = &a.model {
        c.model = model_path(m);
    }
    if let Some(h) = &a.harness {
        c.harness_dir = h.clone();
    }
    if let Some(x) = a.variants {
        c.variants = x;
    }
    if let Some(x) = a.tasks {
        c.tasks = x;
    }
    if let Some(x) = a.run.max_steps {
        c.max_steps = x;
    }
    if let Some(x) = a.run.lr {
        c.optim.lr = x;
    }
    if let Some(x) = a.run.seed {
        c.seed = x;
    }
    if let Some(x) = a.tasks_per_step {
        c.tasks_per_step = x;
    }
    if let Some(x) = a.group_size {
        c.group_size = x;
    }
    if let Some(x) = a.max_turns {
        c.max_turns = x;
    }
    if let Some(x) = a.max_new_tokens {
        c.max_new_tokens = x;
    }
    if let Some(x) = a.pass_weight {
        c.pass_weight = x;
    }
    if let Some(x) = a.kl_coef {
        c.kl_coef = x;
    }
    if let Some(x) = &a.rollout_format {
        c.rollout_format = x.clone();
    }
    if let Some(l) = a.lora.config(a.run.seed) {
        c.lora = Some(l);
    }
}

pub fn run(a: RlArgs) -> Result<()> {
    let (cfg, write) = resolve(&a)?;
    run_stage(
        &a.run.out,
        a.run.resume,
        write.then(|| cfg.to_toml()),
        |on| rl::run(&cfg, &a.run.out, a.run.resume, on),
    )
}

impl StageConfig for RlConfig {
    fn from_toml(path: &std::path::Path) -> hat_train::Result<Self> {
        RlConfig::from_toml(path)
    }
    fn preset(name: &str) -> hat_train::Result<Self> {
        RlConfig::preset(name)
    }
    fn validate(&self) -> hat_train::Result<()> {
        RlConfig::validate(self)
    }
    fn max_steps(&mut self) -> &mut usize {
        &mut self.max_steps
    }
}
