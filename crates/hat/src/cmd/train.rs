//! `hat train`: supervised fine-tuning and distillation runs, export and plots.

use std::path::PathBuf;

use crate::cmd::backend::{config_model, model_path};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use hat_train::config::SftConfig;
use hat_train::sft::{self, Event};

#[derive(Subcommand)]
pub enum TrainCmd {
    /// Supervised fine-tuning on `hat data gen` trajectories (HSA-SFT or FH-SFT by the data).
    Sft(SftArgs),
    /// Stage 2, on-policy distillation: the student samples, a frozen teacher scores every
    /// token (per-token reverse KL); restores the general ability SFT erodes.
    Distill(crate::cmd::distill::DistillArgs),
    /// Stage 3, HSA-RL: groups of agent-loop rollouts under train-pool harness variants,
    /// rewarded by the evaluation scorer, trained with GRPO's clipped token loss.
    Rl(crate::cmd::rl::RlArgs),
    /// The whole recipe: data, HSA-SFT, distillation, HSA-RL, evaluated after each stage;
    /// resumable; one report with every stage's scores, costs and curves.
    Pipeline(crate::cmd::pipeline::PipelineArgs),
    /// Export a run's latest checkpoint as GGUF or as a Hugging Face folder.
    Export(ExportArgs),
    /// Move a fine-tuned model's weights part of the way back to the model it started from
    /// (WiSE-FT): base + ratio x (fine-tuned - base); trades task skill for general ability
    /// without training.
    Merge(MergeArgs),
    /// Average the weights of several fine-tunes of one start (a uniform model soup): runs
    /// that differ in data, seed or weighting often score above each of them averaged.
    Soup(SoupArgs),
    /// Draw loss, learning rate and gradient norm of one or more runs into one PNG.
    Plot(PlotArgs),
}

#[derive(Args)]
pub struct PlotArgs {
    /// Run folders (or their metrics.jsonl files).
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// The PNG to write.
    #[arg(long)]
    out: PathBuf,
    /// Width of the PNG in pixels.
    #[arg(long, default_value_t = 1500)]
    width: u32,
    /// Height of the PNG in pixels.
    #[arg(long, default_value_t = 420)]
    height: u32,
}

/// The flags every training stage takes.
#[derive(Args)]
pub struct RunArgs {
    /// Run folder (config, metrics.jsonl, checkpoints, exported models).
    #[arg(long)]
    pub out: PathBuf,
    /// A TOML config (the stage's config type); flags override it.
    #[arg(long, value_parser = crate::input::small_file)]
    pub config: Option<PathBuf>,
    /// Start from a preset: cpu (about an hour on 2 cores), gpu, smoke.
    #[arg(long)]
    pub preset: Option<String>,
    /// Continue the run in --out from its latest checkpoint, with its saved config (flags
    /// repeating it are fine; --max-steps N extends the run to N steps).
    #[arg(long)]
    pub resume: bool,
    /// Optimiser steps of the run (overrides the config).
    #[arg(long)]
    pub max_steps: Option<usize>,
    /// Peak learning rate (overrides the config).
    #[arg(long, allow_negative_numbers = true)]
    pub lr: Option<f64>,
    /// Seed of the data order and sampling (overrides the config).
    #[arg(long, allow_negative_numbers = true)]
    pub seed: Option<u64>,
}

#[derive(Args)]
pub struct SftArgs {
    /// Training data (JSONL from `hat data gen`); repeat or comma-separate.
    #[arg(long, value_delimiter = ',', value_parser = crate::input::large_file)]
    data: Vec<PathBuf>,
    /// Starting model: `default` (SmolLM2-135M-Instruct, `hat model fetch`) or a GGUF file or
    /// Hugging Face folder.
    #[arg(long, default_value = "default")]
    model: String,
    #[command(flatten)]
    run: RunArgs,
    /// Tokens per optimiser step (gradients accumulated up to it).
    #[arg(long)]
    tokens_per_step: Option<usize>,
    /// Conversations per packed sequence (1: no packing).
    #[arg(long)]
    pack: Option<usize>,
    #[command(flatten)]
    lora: LoraArgs,
    /// Precision of the dense products: f32 (the default), or bf16 (operands rounded to bf16,
    /// f32 accumulation: ~twice the multiply rate on CPUs with AVX-512 BF16). May change when
    /// resuming (e.g. `--matmul f32` to continue a bf16 run on a CPU without BF16).
    #[arg(long)]
    matmul: Option<hat_train::config::Matmul>,
    /// Count the loss of each assistant turn that calls a tool this many times (default 1:
    /// like any other turn). The decisions a host is scored on (which tool, which product)
    /// are a few tokens of those turns; a reply's phrasing carries most of a plain step's
    /// gradient. Validation loss stays unweighted.
    #[arg(long)]
    call_weight: Option<f32>,
    /// Count the loss of the decision tokens of agent trajectories this many times (default
    /// 1): the first token of each assistant turn (call or reply) and the tokens of a call's
    /// tool name and argument values (which tool, product, colour, region). Validation loss stays unweighted.
    #[arg(long)]
    decision_weight: Option<f32>,
    /// Draw a data file more often: each epoch holds its training packs K times (FILE=K, the
    /// file as --data names it; repeatable). For a small file that should carry a larger share
    /// of the steps, e.g. `hat data replay` answers mixed into agent data.
    #[arg(long, value_parser = parse_repeat)]
    repeat: Vec<(PathBuf, usize)>,
}

/// `FILE=K` of `--repeat`.
fn parse_repeat(s: &str) -> std::result::Result<(PathBuf, usize), String> {
    let (file, k) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("`{s}` is not FILE=K (e.g. runs/replay.jsonl=4)"))?;
    let k: usize = k
        .parse()
        .map_err(|_| format!("`{k}` in `{s}` is not a whole number of times (e.g. 4)"))?;
    if file.is_empty() {
        return Err(format!("`{s}` names no file (FILE=K)"));
    }
    Ok((PathBuf::from(file), k))
}

/// LoRA flags, for every stage that trains weights.
#[derive(Args)]
pub struct LoraArgs {
    /// Train low-rank adapters of this rank instead of every weight (merged on export).
    #[arg(long)]
    pub lora_rank: Option<usize>,
    /// LoRA scale numerator (the adapters' output is scaled by alpha / rank) [default: 2 x rank].
    #[arg(long, requires = "lora_rank", allow_negative_numbers = true)]
    pub lora_alpha: Option<f64>,
    /// Linears of every block that get adapters [default: q,k,v,o,gate,up,down].
    #[arg(long, value_delimiter = ',', requires = "lora_rank")]
    pub lora_targets: Vec<String>,
}

impl LoraArgs {
    /// The adapters asked for, if any (`seed` draws their initial values).
    pub fn config(&self, seed: Option<u64>) -> Option<hat_train::config::LoraConfig> {
        self.lora_rank.map(|rank| {
            let d = hat_train::config::LoraConfig::default();
            hat_train::config::LoraConfig {
                rank,
                alpha: self.lora_alpha.unwrap_or(2.0 * rank as f64),
                targets: if self.lora_targets.is_empty() {
                    d.targets
                } else {
                    self.lora_targets.clone()
                },
                seed: seed.unwrap_or(d.seed),
            }
        })
    }
}

#[derive(Args)]
pub struct ExportArgs {
    /// Run folder.
    run: PathBuf,
    /// GGUF f32, q8_0 or q4_0, or `hf` for a Hugging Face folder.
    #[arg(long, default_value = "q8_0")]
    format: String,
    /// The model to write: a GGUF file, or a folder with `--format hf`.
    #[arg(long)]
    out: PathBuf,
    /// Replace --out when it is an existing GGUF file.
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
pub struct MergeArgs {
    /// The fine-tuned model: a GGUF file or a Hugging Face folder (a run's `model-hf` export).
    model: String,
    /// The model its training started from (`default`, a GGUF file or a Hugging Face folder).
    #[arg(long, default_value = "default")]
    base: String,
    /// How far from the base toward the fine-tuned model: 0 is the base, 1 the fine-tuned
    /// model, up to 2 to extrapolate.
    #[arg(long)]
    ratio: f64,
    /// GGUF f32, q8_0 or q4_0, or `hf` for a Hugging Face folder.
    #[arg(long, default_value = "q8_0")]
    format: String,
    /// The merged model to write: a GGUF file, or a folder with `--format hf`.
    #[arg(long)]
    out: PathBuf,
    /// Replace --out when it is an existing GGUF file.
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
pub struct SoupArgs {
    /// Two or more fine-tuned models that started from the same model: GGUF files or Hugging
    /// Face folders (runs' `model-hf` exports). The first one's tokenizer and config go with
    /// the result.
    #[arg(required = true, num_args = 2..)]
    models: Vec<String>,
    /// GGUF f32, q8_0 or q4_0, or `hf` for a Hugging Face folder.
    #[arg(long, default_value = "q8_0")]
    format: String,
    /// The soup to write: a GGUF file, or a folder with `--format hf`.
    #[arg(long)]
    out: PathBuf,
    /// Replace --out when it is an existing GGUF file.
    #[arg(long)]
    force: bool,
    /// Take models of any start: without it, a model that lies farther than 0.5 (relative L2)
    /// from the mean of the models before it is refused as not a fine-tune of their start.
    #[arg(long)]
    any_start: bool,
}

/// The run's config, and whether it must be (re)written to the run folder.
fn resolve(a: &SftArgs) -> Result<(SftConfig, bool)> {
    let o = hat_train::config::Overrides {
        data: a.data.clone(),
        model: (a.model != "default").then(|| model_path(&a.model)),
        max_steps: a.run.max_steps,
        lr: a.run.lr,
        tokens_per_step: a.tokens_per_step,
        seed: a.run.seed,
        pack: a.pack,
        lora: a.lora.config(a.run.seed),
        matmul: a.matmul,
        call_weight: a.call_weight,
        decision_weight: a.decision_weight,
        repeat: a.repeat.iter().cloned().collect(),
    };
    let saved = a.run.out.join("config.toml");
    if a.run.resume && saved.exists() {
        let mut c = SftConfig::from_toml(&saved)?;
        let steps = c.max_steps;
        let changed = c.resume_with(&o)?;
        if c.max_steps != steps {
            new_total(&a.run.out, c.max_steps)?;
        }
        return Ok((c, changed));
    }
    let mut c = match (&a.run.config, &a.run.preset) {
        (Some(p), _) => SftConfig::from_toml(p)?,
        (None, Some(p)) => SftConfig::preset(p)?,
        (None, None) => SftConfig::default(),
    };
    if c.model.as_os_str().is_empty() {
        c.model = model_path("default");
    }
    c.apply(&o);
    config_model(&mut c.model);
    c.validate()?;
    Ok((c, true))
}

pub fn run(cmd: TrainCmd) -> Result<()> {
    hat_train::keep_freed_memory();
    match cmd {
        TrainCmd::Sft(a) => sft_cmd(a),
        TrainCmd::Distill(a) => crate::cmd::distill::run(a),
        TrainCmd::Rl(a) => crate::cmd::rl::run(a),
        TrainCmd::Pipeline(a) => crate::cmd::pipeline::run(a),
        TrainCmd::Plot(a) => {
            let runs = a
                .runs
                .iter()
                .map(|r| hat_train::plot::read_run(r))
                .collect::<hat_train::Result<Vec<_>>>()?;
            hat_train::plot::plot(&runs, &a.out, a.width, a.height)?;
            println!("wrote {} ({} runs)", a.out.display(), runs.len());
            Ok(())
        }
        TrainCmd::Export(a) => {
            check_out(&a.format, &a.out, a.force)?;
            let (model, source, step) = hat_train::checkpoint::load_run(&a.run)?;
            hat_train::export::export(&model, &source, &a.format, &a.out)?;
            println!("wrote {} (step {step})", a.out.display());
            Ok(())
        }
        TrainCmd::Merge(a) => merge(a),
        TrainCmd::Soup(a) => soup(a),
    }
}

/// Checks an export format and its destination before minutes of loading: a folder must be
/// new or an earlier export; an existing file (the default model, another run's weights) is
/// replaced only with `--force`.
fn check_out(format: &str, out: &std::path::Path, force: bool) -> Result<()> {
    if !hat_train::export::FORMATS.contains(&format) {
        anyhow::bail!(
            "--format {format}: give one of {}",
            hat_train::export::FORMATS.join(", ")
        );
    }
    if format == "hf" {
        hat_train::export::check_hf_out(out)?;
    } else if out.is_dir() {
        anyhow::bail!(
            "--out {} is a folder: give a file name for a GGUF export (or --format hf)",
            out.display()
        );
    } else if out.exists() && !force {
        anyhow::bail!(
            "--out {} exists; pass --force to replace it, or choose another file",
            out.display()
        );
    }
    Ok(())
}

fn soup(a: SoupArgs) -> Result<()> {
    check_out(&a.format, &a.out, a.force)?;
    let paths: Vec<PathBuf> = a.models.iter().map(|m| model_path(m)).collect();
    for p in &paths {
        anyhow::ensure!(
            p.exists(),
            "{}: no such model (give GGUF files or Hugging Face folders)",
            p.display()
        );
    }
    let soup = hat_train::merge::soup(
        paths.iter().zip(&a.models).map(|(p, name)| {
            let m = hat_model::train::TrainModel::load(p)
                .map(|l| l.model)
                .map_err(|e| {
                    hat_train::TrainError::Invalid(format!("loading {}: {e}", p.display()))
                });
            (name.clone(), m)
        }),
        (!a.any_start).then_some(hat_train::merge::SOUP_MAX_DISTANCE),
    )
    .map_err(|e| match e {
        e @ hat_train::TrainError::OtherStart { .. } => {
            anyhow::anyhow!("{e}, or pass --any-start if you mean to average them")
        }
        e => e.into(),
    })?;
    hat_train::export::export(&soup.model, &paths[0], &a.format, &a.out)?;
    let far: Vec<String> = a
        .models
        .iter()
        .zip(&soup.distances)
        .skip(1)
        .map(|(m, d)| format!("{m} {d:.4}"))
        .collect();
    println!(
        "wrote {} (the mean of {} models: {}; each one's relative L2 distance from the mean \
         before it: {})",
        a.out.display(),
        paths.len(),
        a.models.join(", "),
        far.join(", ")
    );
    Ok(())
}

fn merge(a: MergeArgs) -> Result<()> {
    check_out(&a.format, &a.out, a.force)?;
    if !hat_train::merge::RATIO_RANGE.contains(&a.ratio) {
        anyhow::bail!(
            "--ratio {}: give a number from 0 (the base model) to 2; 1 is the fine-tuned model",
            a.ratio
        );
    }
    let source = model_path(&a.model);
    let base = model_path(&a.base);
    let tuned = hat_model::train::TrainModel::load(&source)
        .with_context(|| format!("loading the fine-tuned model {}", source.display()))?
        .model;
    let start = hat_model::train::TrainModel::load(&base)
        .with_context(|| format!("loading the base model {}", base.display()))?
        .model;
    hat_train::merge::interpolate(&tuned, &start, a.ratio)?;
    drop(start);
    hat_train::export::export(&tuned, &source, &a.format, &a.out)?;
    println!(
        "wrote {} ({} + {} x ({} - base))",
        a.out.display(),
        base.display(),
        a.ratio,
        source.display()
    );
    Ok(())
}

fn sft_cmd(a: SftArgs) -> Result<()> {
    let (cfg, write) = resolve(&a)?;
    run_stage(
        &a.run.out,
        a.run.resume,
        write.then(|| cfg.to_toml()),
        |on| sft::run(&cfg, &a.run.out, a.run.resume, on),
    )
}

/// Runs a stage in `out`: writes its resolved config (when new or extended), shows progress,
/// prints the last export. A new run (`resume` false) over an earlier run's checkpoints is
/// refused before anything is written.
pub(crate) fn run_stage(
    out: &std::path::Path,
    resume: bool,
    config_toml: Option<String>,
    train: impl FnOnce(&mut dyn FnMut(Event)) -> hat_train::Result<PathBuf>,
) -> Result<()> {
    hat_train::stage::refuse_existing(out, resume)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    if let Some(text) = config_toml {
        let saved = out.join("config.toml");
        hat_train::durable::write(&saved, text)
            .with_context(|| format!("writing {}", saved.display()))?;
    }
    let mut bar: Option<indicatif::ProgressBar> = None;
    let last = train(&mut |e| report(&mut bar, e))?;
    if let Some(pb) = bar {
        pb.finish();
    }
    println!("{}", last.display());
    Ok(())
}

/// What `stage_config` needs of a stage's config type.
pub(crate) trait StageConfig: Clone + PartialEq + Default {
    fn from_toml(path: &std::path::Path) -> hat_train::Result<Self>;
    fn preset(name: &str) -> hat_train::Result<Self>;
    fn validate(&self) -> hat_train::Result<()>;
    fn max_steps(&mut self) -> &mut usize;
}

/// A stage's config before its own checks: a resumed run's (with whether it must be saved
/// again), or the starting point of a new run.
pub(crate) enum Resolved<C> {
    Resumed(C, bool),
    New(C),
}

/// `--resume` with a saved run: its config with the flags applied (validated when
/// `--max-steps` changed it); otherwise `--config`, else `--preset`, else the defaults, with
/// the flags still to apply.
pub(crate) fn stage_config<C: StageConfig>(
    run: &RunArgs,
    apply: impl Fn(&mut C),
) -> Result<Resolved<C>> {
    if run.resume {
        if let Some((c, changed)) = resume_config(&run.out, C::from_toml, apply, C::max_steps)? {
            if changed {
                c.validate()?;
            }
            return Ok(Resolved::Resumed(c, changed));
        }
    }
    Ok(Resolved::New(match (&run.config, &run.preset) {
        (Some(p), _) => C::from_toml(p)?,
        (None, Some(p)) => C::preset(p)?,
        (None, None) => C::default(),
    }))
}

/// A resumed run keeps its saved config: `apply` puts the flags on it, and anything but
/// `max_steps` changing is refused. Returns the config and whether `max_steps` grew (it must
/// be saved again). `None` when there is no saved run to resume.
fn resume_config<C: Clone + PartialEq>(
    out: &std::path::Path,
    read: impl Fn(&std::path::Path) -> hat_train::Result<C>,
    apply: impl Fn(&mut C),
    max_steps: impl Fn(&mut C) -> &mut usize,
) -> Result<Option<(C, bool)>> {
    let saved = out.join("config.toml");
    if !saved.exists() {
        return Ok(None);
    }
    let mut c = read(&saved)?;
    let mut before = c.clone();
    let old_steps = *max_steps(&mut before);
    apply(&mut c);
    let new_steps = *max_steps(&mut c);
    let mut check = c.clone();
    *max_steps(&mut check) = old_steps;
    if check != before {
        anyhow::bail!(
            "the run being resumed in {} has a different config than these flags; a resumed \
             run keeps its config.toml (only --max-steps may change: it extends the run); \
             start a new run folder to change it",
            out.display()
        );
    }
    let changed = new_steps != old_steps;
    if changed {
        new_total(out, new_steps)?;
    }
    Ok(Some((c, changed)))
}

/// A resumed run given a new `--max-steps`: refused below the step its newest checkpoint
/// reached (before the new total is saved), announced otherwise.
fn new_total(out: &std::path::Path, steps: usize) -> Result<()> {
    if let Some(done) = hat_train::checkpoint::latest_step(out)? {
        if done > steps {
            let e = hat_train::TrainError::Shortened {
                step: done,
                max_steps: steps,
            };
            anyhow::bail!("{}: {e}", out.display());
        }
    }
    eprintln!(
        "the run now ends at step {steps} (the learning-rate schedule is recomputed over the new total)"
    );
    Ok(())
}

/// Prints a training run's events: counts, a progress bar (and plain step lines when stderr is
/// not a terminal), checkpoints and exports. Shared by every `hat train` stage.
pub(crate) fn report(bar: &mut Option<indicatif::ProgressBar>, e: Event) {
    match e {
        Event::Prepared(p) => {
            eprintln!(
                "data: {} trajectories ({} dropped as too long), {} train packs ({} val); \
                 {} tokens packed vs {} unpacked ({:.2}x less), {} loss tokens",
                p.trajectories,
                p.dropped_too_long,
                p.train.len(),
                p.val.len(),
                p.packed_tokens,
                p.unpacked_tokens,
                p.unpacked_tokens as f64 / p.packed_tokens.max(1) as f64,
                p.loss_tokens
            );
            if p.weighted_tokens > 0 {
                eprintln!(
                    "  {} loss tokens weighted (--call-weight / --decision-weight)",
                    p.weighted_tokens
                );
            }
            if p.by_file.len() > 1 {
                // a repeated file's share counts each of its repeats
                let all: usize = p.by_file.iter().map(|f| f.loss_tokens * f.repeat).sum();
                for f in &p.by_file {
                    let times = if f.repeat > 1 {
                        format!(", drawn {} times an epoch", f.repeat)
                    } else {
                        String::new()
                    };
                    eprintln!(
                        "  {}: {} trajectories (held-out ones included), {} tokens one by one, \
                         {} loss tokens{times} ({:.0}% of the loss)",
                        f.path.display(),
                        f.trajectories,
                        f.tokens,
                        f.loss_tokens,
                        100.0 * (f.loss_tokens * f.repeat) as f64 / all.max(1) as f64
                    );
                }
            }
        }
        Event::Note(n) => eprintln!("{n}"),
        Event::Resumed(s) => eprintln!("resumed at step {} (epoch {})", s.step, s.epoch),
        Event::Step(m, total) => {
            let pb = bar.get_or_insert_with(|| {
                let pb = crate::progress::terminal_bar(total as u64, "train");
                pb.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{prefix} [{bar:30}] {pos}/{len} eta {eta} {msg}",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
                pb.set_prefix("train");
                pb
            });
            pb.set_position(m.step as u64);
            let val = m
                .val_loss
                .map(|v| format!(" val {v:.4}"))
                .unwrap_or_default();
            pb.set_message(format!(
                "loss {:.4}{val} lr {:.2e} |g| {:.2} {:.0} tok/s",
                m.loss, m.lr, m.grad_norm, m.tokens_per_s
            ));
            if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
                let extra: String = m
                    .extra
                    .iter()
                    .map(|(k, v)| format!(" {k} {v:.4}"))
                    .collect();
                eprintln!(
                    "step {}/{total} loss {:.4}{val} lr {:.2e} grad_norm {:.3} {:.0} tok/s \
                     wall {:.1} min{extra}",
                    m.step,
                    m.loss,
                    m.lr,
                    m.grad_norm,
                    m.tokens_per_s,
                    m.wall_seconds / 60.0
                );
            }
        }
        Event::Saved(d) => tracing::info!("checkpoint {}", d.display()),
        Event::Exported(p) => eprintln!("exported {}", p.display()),
    }
}
