//! `hat ab run`: an A/B experiment on the simulated audience.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

use hat_ab::{AbError, Arm, Audience, Experiment};
use hat_agent::driver::{Actor, OwnedModelActor};
use hat_agent::episode::EpisodeConfig;
use hat_teacher::oracle::OracleActor;

use crate::cmd::backend::{chat_model, ModelArgs};

#[derive(Subcommand)]
pub enum AbCmd {
    /// Run an experiment file's arms on the simulated audience and report every metric per
    /// arm with its difference, intervals and sample size.
    Run(RunArgs),
}

#[derive(Args)]
pub struct RunArgs {
    /// The experiment (TOML: name, seed, unit, alpha, mixture_sd, arms (name, model,
    /// harness, weight), audience, behaviour; docs/ab.md).
    #[arg(long, value_parser = crate::input::small_file)]
    config: PathBuf,
    /// Folder for viewers.jsonl, report.json, report.md and the resolved experiment.
    #[arg(long)]
    out: PathBuf,
    /// Replace the files of an earlier run in --out.
    #[arg(long)]
    force: bool,
    /// Weight format for the embedded engine: original, q8_0, q4_0, f32, f16, bf16.
    #[arg(long, default_value = "original")]
    format: String,
    /// Compute threads for the embedded engine (0 = all cores).
    #[arg(long, default_value_t = 0, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=256))]
    threads: usize,
    /// Token limit of one model turn.
    #[arg(long, default_value_t = 128)]
    max_tokens: u32,
}

pub fn run(c: AbCmd) -> Result<()> {
    match c {
        AbCmd::Run(a) => run_experiment(a),
    }
}

fn run_experiment(a: RunArgs) -> Result<()> {
    let exp = Experiment::load(&a.config)?;
    let outputs = [
        "viewers.jsonl",
        "report.json",
        "report.md",
        "experiment.toml",
    ];
    if !a.force && outputs.iter().any(|f| a.out.join(f).exists()) {
        bail!(
            "{} already holds an experiment's results; pass --force to replace them or choose another --out",
            a.out.display()
        );
    }
    for arm in &exp.arms {
        // a missing model fails here, before anything is written or any arm has run
        let model = crate::cmd::backend::model_path(&arm.model);
        if arm.model != "oracle" && !model.exists() {
            bail!(
                "{}: arm `{}`: model {} does not exist{}",
                a.config.display(),
                arm.name,
                model.display(),
                if arm.model == "default" {
                    "; run `hat model fetch` first"
                } else {
                    " (use default, a GGUF file, a Hugging Face folder, or oracle)"
                }
            );
        }
        if !arm.harness.is_dir() {
            bail!(
                "{}: arm `{}`: harness folder {} does not exist",
                a.config.display(),
                arm.name,
                arm.harness.display()
            );
        }
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    std::fs::write(
        a.out.join("experiment.toml"),
        toml_of(&exp).context("writing the resolved experiment")?,
    )?;
    let audience = Audience::generate(&exp)?;
    let viewers_path = a.out.join("viewers.jsonl");
    let mut viewers = std::io::BufWriter::new(
        std::fs::File::create(&viewers_path)
            .with_context(|| format!("creating {}", viewers_path.display()))?,
    );
    let bar = crate::progress::bar(exp.audience.viewers as u64, "viewers");
    let mut write_err: Option<std::io::Error> = None;
    let mut actor_for = |arm: &Arm| -> Result<Box<dyn Actor>, AbError> {
        bar.set_message(arm.name.clone());
        if arm.model == "oracle" {
            return Ok(Box::new(OracleActor::default()));
        }
        let args = ModelArgs {
            model: Some(arm.model.clone()),
            format: a.format.clone(),
            threads: a.threads,
            base_url: None,
            api_key_env: None,
            request_timeout_s: 60,
            temperature: 0.0,
            max_tokens: a.max_tokens,
        };
        let (_, model) = chat_model(&args).map_err(|e| AbError::Arm {
            arm: arm.name.clone(),
            message: format!("{e:#}"),
        })?;
        Ok(Box::new(OwnedModelActor {
            model,
            cfg: EpisodeConfig::default(),
        }))
    };
    let records = hat_ab::run(&exp, &audience, &mut actor_for, &mut |r| {
        bar.inc(1);
        if write_err.is_none() {
            let line = serde_json::to_string(r).expect("records serialise");
            if let Err(e) = writeln!(viewers, "{line}") {
                write_err = Some(e);
            }
        }
    })?;
    bar.finish_and_clear();
    if let Some(e) = write_err {
        return Err(e).with_context(|| format!("writing {}", viewers_path.display()));
    }
    viewers.flush()?;
    let report = hat_ab::report(&exp, &records);
    write(
        &a.out.join("report.json"),
        &serde_json::to_string_pretty(&report)?,
    )?;
    let md = report.markdown();
    write(&a.out.join("report.md"), &md)?;
    print!("{md}");
    println!(
        "\nwrote {}/{{viewers.jsonl,report.json,report.md,experiment.toml}}",
        a.out.display()
    );
    Ok(())
}

fn toml_of(exp: &Experiment) -> Result<String> {
    Ok(toml::to_string_pretty(exp)?)
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
