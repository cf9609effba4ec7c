//! `hat train distill`: stage 2, general on-policy distillation.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;

use hat_train::distill::{self, DistillConfig};

use crate::cmd::backend::{config_model, model_path};
use crate::cmd::train::{run_stage, stage_config, LoraArgs, Resolved, RunArgs, StageConfig};

#[derive(Args)]
pub struct DistillArgs {
    /// The student's starting weights (the stage-1 model): a GGUF file or Hugging Face folder.
    #[arg(long)]
    model: Option<String>,
    /// The teacher of general prompts: `default` (the base SmolLM2-135M-Instruct), a GGUF file
    /// or Hugging Face folder with the student's tokenizer.
    #[arg(long)]
    teacher: Option<String>,
    /// The teacher of live-stream prompts (default: the student's starting weights).
    #[arg(long)]
    stream_teacher: Option<String>,
    /// `hat data gen` files whose openings become live-stream prompts; repeat or comma-separate.
    #[arg(long, value_delimiter = ',', value_parser = crate::input::large_file)]
    stream_data: Vec<PathBuf>,
    /// Share of each step's prompts that are live-stream prompts (0 to 1), drawn a scene at a
    /// time (prompts with one system prompt, as `hat data gen --shared-scene` writes them).
    #[arg(long)]
    stream_share: Option<f64>,
    /// Most tokens in one packed sequence of live-stream answers of a scene (0: each alone).
    #[arg(long)]
    pack_tokens: Option<usize>,
    /// More general prompts: JSONL with `{"prompt": ...}` or `{"messages": [...]}` per line.
    #[arg(long, value_delimiter = ',', value_parser = crate::input::large_file)]
    prompts: Vec<PathBuf>,
    /// Generated general prompts.
    #[arg(long)]
    general_prompts: Option<usize>,
    /// Which generator writes them: basic (half with one of 18 constraints) or broad (zero
    /// to three constraints of 31 kinds, several wordings each).
    #[arg(long)]
    general_set: Option<hat_train::distill::prompts::GeneralSet>,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    lora: LoraArgs,
    /// Prompts sampled per optimiser step.
    #[arg(long)]
    prompts_per_step: Option<usize>,
    /// Longest sampled answer in tokens.
    #[arg(long)]
    max_new_tokens: Option<usize>,
    /// Weight format of the rollout snapshot: q8_0 (fast) or f32 (the trainer's numbers).
    #[arg(long)]
    rollout_format: Option<String>,
    /// Sampling temperature of the student's answers (default 1: its own distribution).
    #[arg(long)]
    temperature: Option<f32>,
    /// Temperature of the teachers' distributions (default 1); below 1 pulls the student
    /// toward each teacher's most likely tokens, what greedy decoding keeps.
    #[arg(long)]
    teacher_temperature: Option<f32>,
    /// Leave the student's answers that repeat themselves out of the loss (a sentence said a
    /// third time ends the answer): the base model teacher predicts its own loops, so their KL
    /// teaches looping. metrics.jsonl gains `looping_share`.
    #[arg(long)]
    drop_looping: bool,
}

/// The config with the flags applied: to a saved run (only --max-steps may change) or a new one.
fn resolve(a: &DistillArgs) -> Result<(DistillConfig, bool)> {
    let mut c = match stage_config::<DistillConfig>(&a.run, |c| apply(c, a))? {
        Resolved::Resumed(c, changed) => return Ok((c, changed)),
        Resolved::New(c) => c,
    };
    if c.teacher.as_os_str().is_empty() {
        c.teacher = model_path("default");
    }
    apply(&mut c, a);
    config_model(&mut c.model);
    config_model(&mut c.teacher);
    if let Some(t) = &mut c.stream_teacher {
        config_model(t);
    }
    if c.model.as_os_str().is_empty() {
        bail!("--model: give the student to distil (the stage-1 model, e.g. runs/hsa-sft/model-hf or a GGUF export)");
    }
    if c.stream_data.is_empty() && a.stream_share.is_none() {
        // no live-stream data given: general prompts only
        c.stream_share = 0.0;
    }
    c.validate()?;
    Ok((c, true))
}

fn apply(c: &mut DistillConfig, a: &DistillArgs) {
    if let Some(m) = &a.model {
        c.model = model_path(m);
    }
    if let Some(t) = &a.teacher {
        c.teacher = model_path(t);
    }
    if let Some(t) = &a.stream_teacher {
        c.stream_teacher = Some(model_path(t));
    }
    if !a.stream_data.is_empty() {
        c.stream_data = a.stream_data.clone();
    }
    if let Some(x) = a.stream_share {
        c.stream_share = x;
    }
    if let Some(x) = a.pack_tokens {
        c.pack_tokens = x;
    }
    if !a.prompts.is_empty() {
        c.prompt_files = a.prompts.clone();
    }
    if let Some(x) = a.general_prompts {
        c.general_prompts = x;
    }
    if let Some(x) = a.general_set {
        c.general_set = x;
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
    if let Some(x) = a.prompts_per_step {
        c.prompts_per_step = x;
    }
    if let Some(x) = a.max_new_tokens {
        c.max_new_tokens = x;
    }
    if let Some(x) = &a.rollout_format {
        c.rollout_format = x.clone();
    }
    if let Some(x) = a.temperature {
        c.temperature = x;
    }
    if a.drop_looping {
        c.drop_looping = true;
    }
    if let Some(x) = a.teacher_temperature {
        c.teacher_temperature = x;
    }
    if let Some(l) = a.lora.config(a.run.seed) {
        c.lora = Some(l);
    }
}

pub fn run(a: DistillArgs) -> Result<()> {
    let (cfg, write) = resolve(&a)?;
    run_stage(
        &a.run.out,
        a.run.resume,
        write.then(|| cfg.to_toml()),
        |on| distill::run(&cfg, &a.run.out, a.run.resume, on),
    )
}

impl StageConfig for DistillConfig {
    fn from_toml(path: &std::path::Path) -> hat_train::Result<Self> {
        DistillConfig::from_toml(path)
    }
    fn preset(name: &str) -> hat_train::Result<Self> {
        DistillConfig::preset(name)
    }
    fn validate(&self) -> hat_train::Result<()> {
        DistillConfig::validate(self)
    }
    fn max_steps(&mut self) -> &mut usize {
        &mut self.max_steps
    }
}
