//! `hat train pipeline`: data, HSA-SFT, distillation and HSA-RL in order, evaluated after
//! each stage, resumable, with one report.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use hat_pipeline::{PipelineConfig, Progress};

use crate::cmd::backend::model_path;

#[derive(Args)]
pub struct PipelineArgs {
    /// A pipeline TOML (a `preset` key plus overrides; see docs/training.md).
    #[arg(long, value_parser = crate::input::small_file)]
    config: Option<PathBuf>,
    /// Start from a preset: quick (minutes), cpu (about 3 hours on 2 cores), gpu.
    #[arg(long)]
    preset: Option<String>,
    /// The base model: `default` (SmolLM2-135M-Instruct, `hat model fetch`), a GGUF file or a
    /// Hugging Face folder. Overrides the config's.
    #[arg(long)]
    model: Option<String>,
    /// The base harness directory. Overrides the config's.
    #[arg(long)]
    harness: Option<PathBuf>,
    /// Run folder: data, one folder per stage, evaluations, report.md, curves.png.
    #[arg(long)]
    out: PathBuf,
    /// Continue the pipeline in --out where it stopped, with its saved pipeline.toml.
    #[arg(long)]
    resume: bool,
}

fn resolve(a: &PipelineArgs) -> Result<PipelineConfig> {
    let saved = a.out.join("pipeline.toml");
    if saved.exists() {
        if !a.resume {
            bail!(
                "{} exists: pass --resume to continue that pipeline, or choose another --out",
                saved.display()
            );
        }
        if a.config.is_some() || a.preset.is_some() || a.model.is_some() || a.harness.is_some() {
            bail!(
                "--resume continues with the saved {}; drop --config, --preset, --model and \
                 --harness (or start a new --out)",
                saved.display()
            );
        }
        return Ok(PipelineConfig::from_toml(&saved)?);
    }
    if a.resume {
        bail!(
            "--resume: {} has no pipeline to continue (no pipeline.toml); start one without \
             --resume",
            a.out.display()
        );
    }
    let mut c = match (&a.config, &a.preset) {
        (Some(p), _) => PipelineConfig::from_toml(p)?,
        (None, Some(p)) => PipelineConfig::preset(p)?,
        (None, None) => PipelineConfig::preset("cpu")?,
    };
    if let Some(m) = &a.model {
        c.model = model_path(m);
    } else if c.model.as_os_str().is_empty() || c.model.as_os_str() == "default" {
        c.model = model_path("default");
    }
    if let Some(h) = &a.harness {
        c.harness_dir = h.clone();
    }
    if !c.model.exists() {
        bail!(
            "the base model {} does not exist; run `hat model fetch` for the default one, or pass --model",
            c.model.display()
        );
    }
    c.validate()?;
    Ok(c)
}

pub fn run(a: PipelineArgs) -> Result<()> {
    let cfg = resolve(&a)?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let saved = a.out.join("pipeline.toml");
    if !saved.exists() {
        hat_train::durable::write(&saved, cfg.to_toml())
            .with_context(|| format!("writing {}", saved.display()))?;
    }
    let mut bar: Option<indicatif::ProgressBar> = None;
    let report = hat_pipeline::run(&cfg, &a.out, &mut |p| match p {
        Progress::Stage(s) => {
            if let Some(b) = bar.take() {
                b.finish_and_clear();
            }
            eprintln!("== {s}");
        }
        Progress::Skipped(s, why) => eprintln!("== {s}: {why}, skipped"),
        Progress::Data { done, total }
        | Progress::Replay { done, total }
        | Progress::Eval { done, total, .. } => {
            let label = match &p {
                Progress::Eval { suite, .. } => suite.to_string(),
                Progress::Replay { .. } => "replay prompts".to_string(),
                _ => "data".to_string(),
            };
            let b = bar.get_or_insert_with(|| crate::progress::bar(total as u64, &label));
            b.set_message(label);
            b.set_length(total as u64);
            b.set_position(done as u64);
            if done == total {
                if let Some(b) = bar.take() {
                    b.finish_and_clear();
                }
            }
        }
        Progress::Train(e) => crate::cmd::train::report(&mut bar, e),
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    println!(
        "{:<8} {:>7} {:>7} {:>7}  model",
        "stage", "lsqa", "hvqa", "ifeval"
    );
    for r in &report.rows {
        let cell = |s: &str| {
            r.scores
                .get(s)
                .map(|v| format!("{v:.1}"))
                .unwrap_or_else(|| "-".into())
        };
        println!(
            "{:<8} {:>7} {:>7} {:>7}  {}",
            r.stage,
            cell("lsqa"),
            cell("hvqa"),
            cell("ifeval"),
            r.model.display()
        );
    }
    println!("report: {}", a.out.join("report.md").display());
    Ok(())
}
