//! Running the stages in order, resumably.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::json;

use hat_agent::episode::EpisodeConfig;
use hat_eval::{Backend, EvalConfig, ModelIdentity, Suite};
use hat_model::{SamplingParams, WeightFormat};
use hat_train::durable;
use hat_train::stage::Event;

use crate::config::PipelineConfig;
use crate::PipelineError;

/// What the pipeline is doing, for progress display.
pub enum Progress<'a> {
    /// A stage starts (`data`, `sft`, `distill`, `rl`, `eval <stage>`).
    Stage(&'a str),
    /// A stage was skipped or found finished.
    Skipped(&'a str, &'a str),
    Data {
        done: usize,
        total: usize,
    },
    /// Replay data: prompts settled (kept or dropped) of all.
    Replay {
        done: usize,
        total: usize,
    },
    Train(Event<'a>),
    Eval {
        suite: &'a str,
        done: usize,
        total: usize,
    },
}

/// One row of the report: a model and what it cost and scored.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StageRow {
    pub stage: String,
    /// The exported model evaluated (q8_0 GGUF) and the Hugging Face folder the next stage
    /// starts from.
    pub model: PathBuf,
    pub hf: Option<PathBuf>,
    pub steps: usize,
    /// Training wall time (steps, validation and checkpoints) and tokens, from the run's
    /// metrics.
    pub seconds: f64,
    pub tokens: u64,
    pub loss_tokens: u64,
    /// Headline score per suite.
    pub scores: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    pub rows: Vec<StageRow>,
    /// Seconds spent generating data.
    pub data_seconds: f64,
    pub data_files: Vec<PathBuf>,
    /// The replay file mixed into SFT, what it kept and the seconds it took.
    #[serde(default)]
    pub replay: Option<ReplayRow>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReplayRow {
    pub file: PathBuf,
    pub seconds: f64,
    pub stats: hat_train::replay::ReplayStats,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PipelineError + '_ {
    move |e| PipelineError::Io {
        path: path.display().to_string(),
        source: e,
    }
}

fn train_err(stage: &'static str) -> impl FnOnce(hat_train::TrainError) -> PipelineError {
    move |source| PipelineError::Train { stage, source }
}

/// The SFT data: the given files, or generated once into `out/data.jsonl`.
fn data(
    cfg: &PipelineConfig,
    out: &Path,
    on: &mut dyn FnMut(Progress),
) -> Result<(Vec<PathBuf>, f64), PipelineError> {
    if !cfg.data.files.is_empty() {
        return Ok((cfg.data.files.clone(), 0.0));
    }
    let path = out.join("data.jsonl");
    let done = out.join("data.done");
    if let Ok(t) = std::fs::read_to_string(&done) {
        on(Progress::Skipped("data", "generated before"));
        return Ok((vec![path], t.trim().parse().unwrap_or(0.0)));
    }
    on(Progress::Stage("data"));
    let d = &cfg.data;
    let gen = hat_data::gen::GenConfig {
        harness_dir: cfg.harness_dir.clone(),
        variants: d.variants,
        pool: hat_augment::Pool::Train,
        tasks: d.tasks,
        seed: d.seed,
        group: d.group,
        shared_scene: d.shared_scene,
        mix: d.mix()?,
        recovery: d.recovery,
        first_turns: 0,
    };
    let states = hat_data::gen::states(
        &cfg.harness_dir,
        d.variants,
        hat_augment::Pool::Train,
        d.seed,
    )?;
    // a generation cut off mid-line (a kill, a full disk) resumes as `hat data gen --resume`
    hat_agent::jsonl::repair_tail(&path).map_err(io(&path))?;
    let skip = hat_data::gen::existing_keys(&path)?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(io(&path))?;
    let mut teacher = hat_data::gen::Teacher::Oracle;
    let report = hat_data::gen::generate(
        &gen,
        &states,
        &mut teacher,
        &skip,
        &mut f,
        &mut |done, total| on(Progress::Data { done, total }),
    )?;
    if report.written + report.skipped_existing == 0 {
        return Err(PipelineError::Config {
            path: "[data]".into(),
            message: "no trajectory passed the scorer; check the harness with `hat harness check`"
                .into(),
        });
    }
    durable::write(&done, report.seconds.to_string()).map_err(io(&done))?;
    Ok((vec![path], report.seconds))
}

/// The replay data of `[replay]`, generated once into `out/replay.jsonl` by the base model;
/// `None` when `prompts` is 0. An interrupted generation continues from its last saved chunk.
fn replay(
    cfg: &PipelineConfig,
    out: &Path,
    on: &mut dyn FnMut(Progress),
) -> Result<Option<ReplayRow>, PipelineError> {
    use hat_train::replay::{Checked, ReplayOutput, Start};
    let r = &cfg.replay;
    if r.prompts == 0 {
        return Ok(None);
    }
    let path = out.join("replay.jsonl");
    let done = out.join("replay.done.json");
    if let Some(row) = std::fs::read_to_string(&done)
        .ok()
        .and_then(|t| serde_json::from_str::<ReplayRow>(&t).ok())
    {
        if path.exists() {
            on(Progress::Skipped("replay", "generated before"));
            return Ok(Some(row));
        }
    }
    on(Progress::Stage("replay"));
    // a finished file without its summary (killed between the two writes) is made again:
    // the summary is what the report needs
    let start = if path.exists() {
        Start::Force
    } else {
        Start::Resume
    };
    let Checked::Ready(output) = ReplayOutput::check(&path, start).map_err(train_err("replay"))?
    else {
        return Err(PipelineError::Config {
            path: "[replay]".into(),
            message: format!("{} is finished but was not expected to be", path.display()),
        });
    };
    let rcfg = r.config(&cfg.model);
    let engine = hat_train::snapshot::load_engine(&cfg.model, WeightFormat::Original)
        .map_err(train_err("replay"))?;
    let (mut writer, resumed) = output
        .open(rcfg.settings("original"))
        .map_err(train_err("replay"))?;
    let started = std::time::Instant::now();
    let stats = hat_train::replay::generate(
        &engine,
        &rcfg,
        resumed.unwrap_or_default(),
        &mut |records, stats| {
            writer.append(&records, stats)?;
            on(Progress::Replay {
                done: stats.settled,
                total: stats.prompts,
            });
            Ok(())
        },
    )
    .map_err(train_err("replay"))?;
    writer.finish().map_err(train_err("replay"))?;
    if stats.kept == 0 {
        return Err(PipelineError::Config {
            path: "[replay]".into(),
            message: format!(
                "no answer of the base model passed its prompt's check ({} prompts, {} tries \
                 each); raise samples or max_tokens, or set prompts = 0",
                stats.prompts, r.samples
            ),
        });
    }
    let row = ReplayRow {
        file: path,
        seconds: started.elapsed().as_secs_f64(),
        stats,
    };
    durable::write(&done, serde_json::to_string_pretty(&row)?).map_err(io(&done))?;
    Ok(Some(row))
}

/// Totals of a run folder's `metrics.jsonl`.
fn totals(run: &Path) -> (usize, f64, u64, u64) {
    let Ok(r) = hat_train::plot::read_run(run) else {
        return (0, 0.0, 0, 0);
    };
    let steps = r.steps.last().map_or(0, |m| m.step);
    // wall time with validation and checkpoints; metrics written before it was recorded
    // have only the steps' time
    let secs = r.steps.last().map_or(0.0, |m| {
        if m.wall_seconds > 0.0 {
            m.wall_seconds
        } else {
            m.seconds
        }
    });
    let tokens = r.steps.iter().map(|m| m.tokens as u64).sum();
    let loss = r.steps.iter().map(|m| m.loss_tokens as u64).sum();
    (steps, secs, tokens, loss)
}

fn ensure_exports(export: &mut Vec<String>) {
    for f in ["q8_0", "hf"] {
        if !export.iter().any(|e| e == f) {
            export.push(f.to_string());
        }
    }
}

/// Runs a stage's training with an event sink; returns the last export.
type TrainFn<'a> = dyn FnMut(&mut dyn FnMut(Event)) -> Result<PathBuf, hat_train::TrainError> + 'a;

/// Runs one training stage unless its `stage.json` says it is done; returns its row. The
/// stage's resolved config goes to `dir/config.toml` first, as `hat train STAGE` saves it, so
/// that `hat train export DIR` and `hat train STAGE --resume --out DIR` work on a stage folder.
fn stage(
    name: &'static str,
    dir: &Path,
    config_toml: String,
    keep_checkpoints: bool,
    on: &mut dyn FnMut(Progress),
    train: &mut TrainFn,
) -> Result<StageRow, PipelineError> {
    let marker = dir.join("stage.json");
    if let Ok(t) = std::fs::read_to_string(&marker) {
        if let Ok(row) = serde_json::from_str::<StageRow>(&t) {
            on(Progress::Skipped(name, "finished before"));
            return Ok(row);
        }
    }
    on(Progress::Stage(name));
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let saved = dir.join("config.toml");
    durable::write(&saved, config_toml).map_err(io(&saved))?;
    train(&mut |e| on(Progress::Train(e))).map_err(train_err(name))?;
    let (steps, seconds, tokens, loss_tokens) = totals(dir);
    let row = StageRow {
        stage: name.to_string(),
        model: hat_train::export::run_output(dir, "q8_0"),
        hf: Some(hat_train::export::run_output(dir, "hf")),
        steps,
        seconds,
        tokens,
        loss_tokens,
        scores: BTreeMap::new(),
    };
    durable::write(&marker, serde_json::to_string_pretty(&row)?).map_err(io(&marker))?;
    if !keep_checkpoints {
        // the exports are what the next stage and the evaluation read
        let ck = dir.join("checkpoints");
        if ck.exists() {
            std::fs::remove_dir_all(&ck).map_err(io(&ck))?;
        }
    }
    Ok(row)
}

/// Evaluates `model` into `dir` (resuming), returning the headline of each suite.
fn evaluate(
    cfg: &PipelineConfig,
    stage: &str,
    model: &Path,
    dir: &Path,
    on: &mut dyn FnMut(Progress),
) -> Result<BTreeMap<String, f64>, PipelineError> {
    let err = |e: &dyn std::fmt::Display| PipelineError::Eval {
        stage: stage.to_string(),
        message: e.to_string(),
    };
    on(Progress::Stage(&format!("eval {stage}")));
    let e = &cfg.eval;
    let local = hat_local_model::LocalModel::load(
        model,
        WeightFormat::Original,
        SamplingParams::default(),
        e.max_tokens as usize,
    )
    .map_err(|x| err(&x))?;
    let identity = ModelIdentity {
        name: format!("{stage}: {}", local.name),
        hash: local.hash.clone(),
        decoding: json!({"temperature": 0.0, "max_tokens": e.max_tokens, "format": "original", "engine": "hat-model (candle)", "prefill_attention": hat_model::attention::prefill_precision()}),
    };
    let mut backend = Backend::Chat {
        identity,
        model: Box::new(local),
    };
    let ecfg = EvalConfig {
        kinds: Vec::new(),
        harness_dir: cfg.harness_dir.clone(),
        out_dir: dir.to_path_buf(),
        limit: e.limit,
        resume: true,
        ifeval_input: None,
        episode: EpisodeConfig::default(),
        batch: e.batch,
        max_tokens: e.max_tokens,
        ifeval_max_tokens: e.ifeval_max_tokens,
        tasks: None,
    };
    let mut scores = BTreeMap::new();
    for s in Suite::parse_list(&e.suites).map_err(|x| err(&x))? {
        let mut progress = |done: usize, total: usize| {
            on(Progress::Eval {
                suite: s.as_str(),
                done,
                total,
            })
        };
        let summary = match s {
            Suite::Ifeval => hat_eval::run_ifeval(&ecfg, &mut backend, &mut progress),
            agent => hat_eval::run_agent(agent, &ecfg, &mut backend, &mut progress),
        }
        .map_err(|x| err(&x))?;
        scores.insert(s.as_str().to_string(), summary.headline);
    }
    Ok(scores)
}

/// Runs (or continues) the pipeline in `out`.
pub fn run(
    cfg: &PipelineConfig,
    out: &Path,
    on: &mut dyn FnMut(Progress),
) -> Result<Report, PipelineError> {
    cfg.validate()?;
    std::fs::create_dir_all(out).map_err(io(out))?;
    let (files, data_seconds) = data(cfg, out, on)?;
    let replay = replay(cfg, out, on)?;
    let mut report = Report {
        rows: Vec::new(),
        data_seconds,
        data_files: files.clone(),
        replay: replay.clone(),
    };
    // Each model is scored, and the report rewritten, as soon as the model exists: a later
    // stage that fails (an RL run that cannot finish) leaves the earlier stages scored and
    // reported instead of unscored until it succeeds.
    if cfg.eval.base {
        let base = StageRow {
            stage: "base".into(),
            model: cfg.model.clone(),
            ..StageRow::default()
        };
        add_row(cfg, out, &mut report, base, true, on)?;
    }
    // the weights the next stage starts from
    let mut current = cfg.model.clone();

    let s = cfg.sft()?;
    if !s.skip {
        let mut c = s.config;
        c.model = current.clone();
        c.data = files.clone();
        c.data.extend(replay.iter().map(|r| r.file.clone()));
        if let Some(r) = replay.as_ref().filter(|_| cfg.replay.repeat > 1) {
            c.repeat.insert(r.file.clone(), cfg.replay.repeat);
        }
        ensure_exports(&mut c.export);
        let dir = out.join("sft");
        let row = stage(
            "sft",
            &dir,
            c.to_toml(),
            cfg.keep_checkpoints,
            on,
            &mut |e| hat_train::sft::run(&c, &dir, true, e),
        )?;
        current = row.hf.clone().unwrap_or_default();
        add_row(cfg, out, &mut report, row, s.evaluate, on)?;
    }
    let s = cfg.distill()?;
    if !s.skip {
        let mut c = s.config;
        c.model = current.clone();
        c.teacher = cfg.model.clone();
        if c.stream_share > 0.0 && c.stream_data.is_empty() {
            c.stream_data = files.clone();
        }
        ensure_exports(&mut c.export);
        let dir = out.join("distill");
        let row = stage(
            "distill",
            &dir,
            c.to_toml(),
            cfg.keep_checkpoints,
            on,
            &mut |e| hat_train::distill::run(&c, &dir, true, e),
        )?;
        current = row.hf.clone().unwrap_or_default();
        add_row(cfg, out, &mut report, row, s.evaluate, on)?;
    }
    let s = cfg.rl()?;
    if !s.skip {
        let mut c = s.config;
        c.model = current.clone();
        c.harness_dir = cfg.harness_dir.clone();
        ensure_exports(&mut c.export);
        let dir = out.join("rl");
        let row = stage(
            "rl",
            &dir,
            c.to_toml(),
            cfg.keep_checkpoints,
            on,
            &mut |e| hat_train::rl::run(&c, &dir, true, e),
        )?;
        add_row(cfg, out, &mut report, row, s.evaluate, on)?;
    }
    // a pipeline with every stage skipped and no base row still gets its (empty) report
    write_report(cfg, out, &report)?;
    Ok(report)
}

/// Scores a stage's model into `out/eval/<stage>` when its section asks for it (resuming an
/// earlier evaluation there), adds its row and rewrites the report with every row so far.
fn add_row(
    cfg: &PipelineConfig,
    out: &Path,
    report: &mut Report,
    mut row: StageRow,
    eval: bool,
    on: &mut dyn FnMut(Progress),
) -> Result<(), PipelineError> {
    if eval {
        let dir = out.join("eval").join(&row.stage);
        row.scores = evaluate(cfg, &row.stage, &row.model, &dir, on)?;
    }
    report.rows.push(row);
    write_report(cfg, out, report)
}

/// A duration for the report: milliseconds under a second, tenths under ten seconds (the
/// oracle writes a quick preset's 200 trajectories in 40 ms, which whole seconds showed as
/// "0 s").
fn seconds(s: f64) -> String {
    if s < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else if s < 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.0} s")
    }
}

fn write_report(cfg: &PipelineConfig, out: &Path, report: &Report) -> Result<(), PipelineError> {
    let suites: Vec<String> = cfg
        .eval
        .suites
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let mut md = String::from("# HAT pipeline report\n\n");
    md.push_str(&format!(
        "Base model `{}`, harness `{}`; data: {} ({}).{}\n\n",
        cfg.model.display(),
        cfg.harness_dir.display(),
        report
            .data_files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        // files named in `[data]` were made elsewhere: no generation time to report
        if cfg.data.files.is_empty() {
            format!("{} to generate", seconds(report.data_seconds))
        } else {
            "given in [data]".to_string()
        },
        match cfg.eval.limit {
            Some(n) => format!(" Scores on the first {n} items of each suite only."),
            None => String::new(),
        }
    ));
    if let Some(r) = &report.replay {
        md.push_str(&format!(
            "Replay data mixed into SFT: {}, {} answers of the base model ({} to constrained \
             prompts, {} repaired) from {} prompts, {} dropped for failing their check, {} for repeating \
             themselves, {} for not ending ({} to generate).\n\n",
            r.file.display(),
            r.stats.kept,
            r.stats.kept_constrained,
            r.stats.kept_repaired,
            r.stats.prompts,
            r.stats.dropped_failed_check,
            r.stats.dropped_repetitive,
            r.stats.dropped_unfinished,
            seconds(r.seconds)
        ));
    }
    md.push_str("| stage |");
    for s in &suites {
        md.push_str(&format!(" {s} |"));
    }
    md.push_str(" steps | train wall | tokens (loss tokens) | model |\n|---|");
    for _ in &suites {
        md.push_str("---|");
    }
    md.push_str("---|---|---|---|\n");
    for r in &report.rows {
        md.push_str(&format!("| {} |", r.stage));
        for s in &suites {
            match r.scores.get(s) {
                Some(v) => md.push_str(&format!(" {v:.1} |")),
                None => md.push_str(" - |"),
            }
        }
        md.push_str(&format!(
            " {} | {:.1} min | {} ({}) | `{}` |\n",
            r.steps,
            r.seconds / 60.0,
            r.tokens,
            r.loss_tokens,
            r.model.display()
        ));
    }
    let runs: Vec<_> = report
        .rows
        .iter()
        .filter(|r| r.stage != "base")
        .filter_map(|r| hat_train::plot::read_run(&out.join(&r.stage)).ok())
        .collect();
    if !runs.is_empty() {
        let png = out.join("curves.png");
        hat_train::plot::plot(&runs, &png, 2000, 440).map_err(train_err("report"))?;
        md.push_str("\n![every stage's curves](curves.png)\n");
    }
    let p = out.join("report.md");
    durable::write(&p, md).map_err(io(&p))?;
    let p = out.join("report.json");
    durable::write(&p, serde_json::to_string_pretty(report)?).map_err(io(&p))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_durations_keep_their_digits_under_ten_seconds() {
        assert_eq!(seconds(0.0398), "40 ms");
        assert_eq!(seconds(1.43), "1.4 s");
        assert_eq!(seconds(9.96), "10.0 s");
        assert_eq!(seconds(73.6), "74 s");
    }

    /// A resumed pipeline rebuilds its report from `stage.json` and `replay.done.json`; it must
    /// read back the very seconds it wrote (serde_json's `float_roundtrip`), or a finished run
    /// resumed gives a different report (seen in CI: 1.2978317910000001 read as 1.297831791).
    #[test]
    fn saved_rows_read_back_bit_for_bit() {
        let secs: f64 = "1.2978317910000001".parse().unwrap();
        let row = ReplayRow {
            file: "r.jsonl".into(),
            seconds: secs,
            stats: Default::default(),
        };
        let back: ReplayRow =
            serde_json::from_str(&serde_json::to_string_pretty(&row).unwrap()).unwrap();
        assert_eq!(back.seconds.to_bits(), secs.to_bits());
        let back: f64 = serde_json::from_str("1.2978317910000001").unwrap();
        assert_eq!(back.to_bits(), secs.to_bits());
    }

    /// Red-team finding: every stage was evaluated only after RL trained, so an RL stage that
    /// failed every time left the models before it unscored and the report unwritten. Here the
    /// RL stage fails at once (its folder is a file) after the base model: the base model is
    /// scored and reported all the same.
    #[test]
    fn a_failing_stage_leaves_the_stages_before_it_scored_and_reported() {
        let d = tempfile::tempdir().unwrap();
        let model = hat_train::fixture::tiny_model(&d.path().join("m"), 1, "qwen2").unwrap();
        let data = d.path().join("data.jsonl");
        std::fs::write(&data, "").unwrap();
        let harness = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
        let text = format!(
            "preset = \"quick\"\nmodel = {:?}\nharness_dir = {:?}\n\
             [data]\nfiles = [{:?}]\n[replay]\nprompts = 0\n\
             [sft]\nskip = true\n[distill]\nskip = true\n\
             [eval]\nsuites = \"lsqa\"\nlimit = 1\nmax_tokens = 4\nbase = true\n",
            model.display().to_string(),
            harness.display().to_string(),
            data.display().to_string()
        );
        let cfg = PipelineConfig::from_str(&text, "test").unwrap();
        let out = d.path().join("p");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("rl"), "not a folder").unwrap();
        let e = run(&cfg, &out, &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("rl"), "{e}");
        assert!(out.join("eval/base/lsqa/results.json").exists());
        let report: Report =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap())
                .unwrap();
        assert_eq!(report.rows.len(), 1);
        assert_eq!(report.rows[0].stage, "base");
        assert!(report.rows[0].scores.contains_key("lsqa"), "{report:?}");
        assert!(std::fs::read_to_string(out.join("report.md"))
            .unwrap()
            .contains("| base |"));
    }
}
