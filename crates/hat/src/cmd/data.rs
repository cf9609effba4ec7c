//! `hat data gen|stats`.

use std::fs::OpenOptions;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

use hat_data::{gen, GenConfig, Stats, Teacher};
use hat_teacher::openai::{OpenAiConfig, OpenAiTeacher};

use crate::cmd::augment::parse_pool;

#[derive(Subcommand)]
pub enum DataCmd {
    /// Write chat-format JSONL trajectories over the base harness and N augmented states.
    Gen(Box<GenArgs>),
    /// Replay data for SFT: a model's own answers to general prompts, kept where they pass the
    /// prompt's verifiable constraint (rejection sampling), as `hat data gen` records.
    Replay(ReplayArgs),
    /// Summarise a dataset file.
    Stats {
        /// A `hat data gen` JSONL file.
        #[arg(value_parser = crate::input::large_file)]
        file: PathBuf,
    },
}

#[derive(Args)]
pub struct GenArgs {
    /// The base harness directory.
    #[arg(long, default_value = "harnesses/livestream")]
    harness: PathBuf,
    /// Augmented harness states besides the base one (at most 100,000).
    #[arg(long, default_value_t = 8, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=100_000))]
    variants: usize,
    /// train or heldout: which half of every family's parameters the variants draw from.
    #[arg(long, default_value = "train")]
    pool: String,
    /// Number of tasks (train split only; at most 10,000,000).
    #[arg(long, default_value_t = 1000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000_000))]
    tasks: usize,
    /// Seed of the tasks and variants.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Tasks per (harness state, stream): K > 1 draws runs of K tasks sharing a stream and a
    /// state, whose trajectories share their prompt prefix and pack together in training.
    #[arg(long, default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    group: usize,
    /// With --group K > 1: each run of K tasks also shares one scene (the product on stage
    /// and the recent activity the prompt shows), so under one harness state their system
    /// prompts are identical and a training pack holds the whole group, not only the part of
    /// the prompt before the scene.
    #[arg(long)]
    shared_scene: bool,
    /// How often each task kind is drawn: KIND=WEIGHT pairs, e.g. `compare=3,greet_join=0`
    /// (whole numbers 0-100; kinds not named keep weight 1; unset: every kind equally often).
    #[arg(long)]
    kind_weights: Option<hat_tasks::KindMix>,
    /// Share of oracle trajectories (0 to 1) whose first look-up names a wrong product (a
    /// catalog neighbour, as small models mistake it) and whose next turn corrects it after
    /// the tool's answer shows the mistake. The wrong turn is written with `weight: 0`, so
    /// `hat train` learns the correction, not the mistake. Only look-ups whose answer shows
    /// the mistake (an error, another product's title) take the detour.
    #[arg(long, default_value_t = 0.0, value_parser = share, allow_negative_numbers = true)]
    recovery: f64,
    /// With --shared-scene: N more tasks per scene, written only up to the teacher's first
    /// turn (its look-up call or its reply, the end-of-turn token included). A training pack
    /// holds the scene's prompt once, so each costs a few dozen tokens and doubles, at N = K,
    /// the look-ups a step learns from (docs/training.md). Train with `--pack` at least K + N
    /// so a scene stays one pack.
    #[arg(long, default_value_t = 0, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=1024))]
    first_turns: usize,
    /// Share of augmented states (0 to 1; train pool) whose calls are written in a member of
    /// the element family of call syntaxes (`<exec fn="name">{...}</exec>`: 16 tag and
    /// attribute pairs, none held out), so the data shows many call syntaxes to copy from the
    /// prompt. 0 keeps the states every published dataset was drawn from.
    #[arg(long, default_value_t = 0.0, value_parser = family_share, allow_negative_numbers = true)]
    element_syntaxes: f64,
    /// Share of augmented states (0 to 1; train pool) whose calls are written in a member of
    /// the keyword family (`RUN name(key="value")`: the function syntax's form with 8 words
    /// other than its `CALL`). With --element-syntaxes, the two shares add up to at most 1.
    #[arg(long, default_value_t = 0.0, value_parser = family_share, allow_negative_numbers = true)]
    keyword_syntaxes: f64,
    /// The JSONL file to write (OpenAI `messages` + `tools` per line); with --resume, the one
    /// to continue.
    #[arg(long)]
    out: PathBuf,
    /// oracle, or openai (any OpenAI-compatible chat endpoint).
    #[arg(long, default_value = "oracle")]
    teacher: String,
    /// Endpoint base URL for --teacher openai, e.g. http://127.0.0.1:8000/v1.
    #[arg(long, env = "HAT_TEACHER_BASE_URL")]
    base_url: Option<String>,
    /// Model name for --teacher openai.
    #[arg(long, env = "HAT_TEACHER_MODEL")]
    model: Option<String>,
    /// Environment variable that holds the API key (unset: no key is sent).
    #[arg(long)]
    api_key_env: Option<String>,
    /// Sampling temperature of the teacher endpoint.
    #[arg(long, default_value_t = 0.7, allow_negative_numbers = true)]
    temperature: f64,
    /// Seconds the teacher endpoint may take for one request.
    #[arg(long, default_value_t = 120, value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..=3600))]
    request_timeout_s: u64,
    /// Append to an existing file, skipping trajectories already in it.
    #[arg(long, conflicts_with = "force")]
    resume: bool,
    /// Replace an existing file.
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
pub struct ReplayArgs {
    /// The answering model: `default` (SmolLM2-135M-Instruct, `hat model fetch`), a GGUF file or
    /// a Hugging Face folder; normally the model stage 1 starts from.
    #[arg(long, default_value = "default")]
    model: String,
    /// Weight format for the embedded engine: original, q8_0, q4_0, f32, f16, bf16.
    #[arg(long, default_value = "original")]
    format: String,
    /// Compute threads (0 = all cores; at most 256).
    #[arg(long, default_value_t = 0, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=256))]
    threads: usize,
    /// General prompts to answer (half of the basic set's carry a verifiable constraint,
    /// four in five of the broad set's one to three; IFEval look-alikes are dropped first).
    #[arg(long, default_value_t = 600, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=prompts_max()))]
    prompts: usize,
    /// Which generator writes the prompts: basic (half of them with one of 18 constraints;
    /// every published run before session 41) or broad (zero to three constraints of 31
    /// kinds, in several wordings).
    #[arg(long, default_value = "basic")]
    prompt_set: hat_train::distill::prompts::GeneralSet,
    /// Where no try passes, keep the first that ended without repeating itself once edited
    /// by program to meet the constraints it missed (its case, quotes, a first word, a title,
    /// an ending line, its commas, a JSON wrapper), if it then passes every check. Only the
    /// broad set's prompts carry such edits.
    #[arg(long)]
    repair: bool,
    /// Answers tried per prompt until one passes: the first greedy, the rest sampled.
    #[arg(long, default_value_t = 4, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    samples: usize,
    /// Temperature of the sampled tries.
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    /// Token limit of one answer (an answer cut there is not kept).
    #[arg(long, default_value_t = 512, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=32_768))]
    max_tokens: usize,
    /// Seed of the prompts and the sampled tries.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Prompts decoded together.
    #[arg(long, default_value_t = 8, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256))]
    batch: usize,
    /// The JSONL file to write (`hat data gen` records); with --resume, the one to continue.
    #[arg(long)]
    out: PathBuf,
    /// Continue an interrupted run (its `.partial` file) with the same settings.
    #[arg(long, conflicts_with = "force")]
    resume: bool,
    /// Replace an existing file.
    #[arg(long)]
    force: bool,
}

const fn prompts_max() -> u64 {
    hat_train::distill::MAX_GENERAL_PROMPTS as u64
}

fn replay_cmd(a: ReplayArgs) -> Result<()> {
    use hat_train::replay::{Checked, ReplayOutput, Start};
    let start = match (a.resume, a.force) {
        (true, _) => Start::Resume,
        (_, true) => Start::Force,
        _ => Start::New,
    };
    let output = match ReplayOutput::check(&a.out, start)? {
        Checked::Complete => {
            println!("{} is complete; nothing to resume", a.out.display());
            return Ok(());
        }
        Checked::Ready(o) => o,
    };
    let format: hat_model::WeightFormat = a.format.parse().map_err(anyhow::Error::msg)?;
    let cfg = hat_train::replay::ReplayConfig {
        prompts: a.prompts,
        prompt_set: a.prompt_set,
        samples: a.samples,
        temperature: a.temperature,
        max_new_tokens: a.max_tokens,
        seed: a.seed,
        batch: a.batch,
        model_name: a.model.clone(),
        repair: a.repair,
    };
    if let Err(b) = cfg.validate() {
        bail!("--{} {}", b.key.replace('_', "-"), b.problem);
    }
    let settings = cfg.settings(&a.format);
    // the model first: a path that does not load leaves no working files behind
    hat_model::threads::set_threads(a.threads);
    let path = crate::cmd::backend::model_path(&a.model);
    let engine = hat_train::snapshot::load_engine(&path, format)
        .with_context(|| format!("loading the model {}", path.display()))?;
    let (mut writer, resumed) = output.open(settings)?;
    if let Some(st) = &resumed {
        eprintln!(
            "resuming after {} of {} prompts ({} kept)",
            st.settled, st.prompts, st.kept
        );
    }
    let started = std::time::Instant::now();
    let pb = crate::progress::terminal_bar(0, "prompts");
    let from = resumed.unwrap_or_default();
    let stats = hat_train::replay::generate(&engine, &cfg, from, &mut |records, stats| {
        writer.append(&records, stats)?;
        pb.set_length(stats.prompts as u64);
        pb.set_position(stats.settled as u64);
        if pb.is_hidden() {
            eprintln!(
                "{}/{} prompts settled, {} kept ({:.0}s)",
                stats.settled,
                stats.prompts,
                stats.kept,
                started.elapsed().as_secs_f64()
            );
        }
        Ok(())
    })?;
    pb.finish_and_clear();
    writer.finish()?;
    println!(
        "wrote {} answers to {} ({} of them to constrained prompts{}) from {} prompts ({} IFEval \
         look-alikes dropped before): {} dropped for failing their check on every try, {} for \
         repeating themselves, {} for never ending within {} tokens; {} tokens generated \
         ({:.0}s in this run)",
        stats.kept,
        a.out.display(),
        stats.kept_constrained,
        if a.repair {
            format!(", {} of those repaired", stats.kept_repaired)
        } else {
            String::new()
        },
        stats.prompts,
        stats.excluded,
        stats.dropped_failed_check,
        stats.dropped_repetitive,
        stats.dropped_unfinished,
        a.max_tokens,
        stats.generated_tokens,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

pub fn run(cmd: DataCmd) -> Result<()> {
    match cmd {
        DataCmd::Stats { file } => {
            let s = Stats::of_file(&file)?;
            print!("{}", hat_harness::text::terminal_safe(&s.to_string()));
            Ok(())
        }
        DataCmd::Gen(a) => gen_cmd(*a),
        DataCmd::Replay(a) => replay_cmd(a),
    }
}

/// A share from 0 to 1, for `--element-syntaxes` and `--keyword-syntaxes`.
fn family_share(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number; use a share from 0 to 1, e.g. 0.3"))?;
    gen::check_family_share(v).map(|()| v)
}

/// A share from 0 to 1, for `--recovery`.
fn share(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a share: use a number from 0 to 1, e.g. 0.3"))?;
    gen::check_recovery(v).map(|()| v)
}

fn gen_cmd(a: GenArgs) -> Result<()> {
    let pool = parse_pool(&a.pool)?;
    if a.tasks == 0 {
        bail!("--tasks must be at least 1");
    }
    if a.shared_scene && a.group < 2 {
        bail!("--shared-scene makes each run of --group K tasks one scene: pass --group K with K > 1 (e.g. --group 16)");
    }
    if a.first_turns > 0 && !a.shared_scene {
        bail!("--first-turns N adds N first-turn tasks to each shared scene: pass --shared-scene (and --group K > 1) as well");
    }
    if a.first_turns > 0 && a.teacher != "oracle" {
        bail!("--first-turns cuts the oracle's trajectories after their first turn; use --teacher oracle");
    }
    if a.out.exists() && !a.resume && !a.force {
        bail!(
            "{} exists; pass --resume to continue it or --force to replace it",
            a.out.display()
        );
    }
    let mut teacher = match a.teacher.as_str() {
        "oracle" => Teacher::Oracle,
        "openai" if a.recovery > 0.0 => bail!(
            "--recovery writes detours into the oracle's trajectories; an endpoint teacher's \
             turns are its own: drop --recovery or use --teacher oracle"
        ),
        "openai" => {
            super::backend::check_temperature(a.temperature)?;
            let (Some(base_url), Some(model)) = (a.base_url.clone(), a.model.clone()) else {
                bail!("--teacher openai needs --base-url and --model (or HAT_TEACHER_BASE_URL / HAT_TEACHER_MODEL)");
            };
            let cfg = OpenAiConfig {
                base_url,
                model: model.clone(),
                api_key_env: a.api_key_env.clone(),
                temperature: a.temperature,
                max_tokens: 512,
                timeout: Duration::from_secs(a.request_timeout_s),
            };
            Teacher::Chat {
                name: format!("openai:{model}"),
                model: Box::new(OpenAiTeacher::new(cfg)?),
            }
        }
        other => bail!("--teacher must be oracle or openai, not `{other}`"),
    };
    let cfg = GenConfig {
        harness_dir: a.harness.clone(),
        variants: a.variants,
        pool,
        tasks: a.tasks,
        seed: a.seed,
        group: a.group,
        shared_scene: a.shared_scene,
        mix: a.kind_weights.clone().unwrap_or_default(),
        recovery: a.recovery,
        first_turns: a.first_turns,
    };
    let shares = gen::FamilyShares {
        element: a.element_syntaxes,
        keyword: a.keyword_syntaxes,
    };
    let states = gen::states_with(&a.harness, a.variants, pool, a.seed, shares)?;
    // A fresh file is written beside the target and renamed at the end, so an interrupted
    // run never leaves a torn dataset; --resume appends to the finished file, or to the one
    // an interrupted first run left beside it (hours of endpoint calls, say).
    let tmp = a.out.with_extension("jsonl.partial");
    if tmp.exists() && !a.out.exists() && !a.resume && !a.force {
        bail!(
            "{} holds an interrupted run's records; pass --resume to continue it or --force \
             to start over",
            tmp.display()
        );
    }
    let target = if a.resume && a.out.exists() {
        a.out.clone()
    } else {
        tmp.clone()
    };
    let skip = if a.resume && target.exists() {
        // A run killed mid-write leaves half a line: cut it, and that item is generated again.
        hat_agent::jsonl::repair_tail(&target)
            .with_context(|| format!("repairing the last line of {}", target.display()))?;
        gen::existing_keys(&target)?
    } else {
        Default::default()
    };
    if let Some(parent) = a.out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let file = OpenOptions::new()
        .create(true)
        .append(a.resume)
        .write(true)
        .truncate(!a.resume)
        .open(&target)
        .with_context(|| format!("opening {}", target.display()))?;
    let mut out = BufWriter::new(file);
    let pb = crate::progress::bar(a.tasks as u64, "tasks");
    let report = gen::generate(
        &cfg,
        &states,
        &mut teacher,
        &skip,
        &mut out,
        &mut |done, _| pb.set_position(done as u64),
    )?;
    pb.finish_and_clear();
    out.flush()?;
    drop(out);
    if target == tmp {
        std::fs::rename(&tmp, &a.out)
            .with_context(|| format!("moving {} to {}", tmp.display(), a.out.display()))?;
    }
    println!(
        "wrote {} trajectories to {} over {} harness states ({} rejected, pass rate {:.1}%, {} already present) in {:.2}s: {:.0} trajectories/min",
        report.written,
        a.out.display(),
        states.len(),
        report.rejected,
        report.pass_rate() * 100.0,
        report.skipped_existing,
        report.seconds,
        report.per_minute
    );
    if !cfg.mix.is_uniform() {
        println!("  task kinds weighted: {} (others 1)", cfg.mix);
    }
    if cfg.recovery > 0.0 {
        println!(
            "  recovery detours: {} of {} written trajectories (asked for {:.0}% of those that can take one)",
            report.stats.detours,
            report.written,
            cfg.recovery * 100.0
        );
    }
    if cfg.shared_scene {
        println!(
            "  shared scenes: each run of {} tasks shares the product on stage and the recent activity",
            cfg.group
        );
        if cfg.first_turns > 0 {
            println!(
                "  first-turn extras: {} more tasks per scene, written up to the teacher's first turn (train with --pack {} or more)",
                cfg.first_turns,
                cfg.group + cfg.first_turns
            );
        }
    }
    for r in report.rejections.iter().take(5) {
        println!("  rejected {}", hat_harness::text::terminal_safe(r));
    }
    if report.written == 0 && report.skipped_existing == 0 {
        bail!(
            "no trajectory was written: {} of {} tasks were rejected by the scorer and {} did not \
             apply to the harness states{}; check the harness's hooks (a rule that can never pass \
             rejects every reply) with `hat harness render` and `hat run`",
            report.rejected,
            report.attempted,
            report.not_applicable,
            report
                .rejections
                .first()
                .map(|r| format!(" (first rejection: {r})"))
                .unwrap_or_default()
        );
    }
    Ok(())
}
