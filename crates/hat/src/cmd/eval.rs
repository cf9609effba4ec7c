//! `hat eval`: run suites against a model, score IFEval responses, compare runs.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

use hat_agent::episode::{CallCheck, EpisodeConfig};
use hat_eval::{Backend, EvalConfig, Suite};

use crate::cmd::backend::{chat_model, ModelArgs};

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct EvalArgs {
    #[command(subcommand)]
    cmd: Option<EvalCmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
pub enum EvalCmd {
    /// Score IFEval responses (one JSON object per line with `prompt` and `response`) without a model.
    Ifeval {
        /// The responses file (`responses.jsonl` as `hat eval` writes it).
        #[arg(long, value_parser = crate::input::large_file)]
        responses: PathBuf,
        /// Folder for the scores (results.json, items.jsonl).
        #[arg(long)]
        out: PathBuf,
        /// The IFEval prompts (`input_data.jsonl` form); default: the 541 prompts embedded in the binary.
        #[arg(long, value_parser = crate::input::large_file)]
        input: Option<PathBuf>,
        /// Replace the scores already in --out (a model run's results.json names its model and
        /// decoding, which a rescoring drops).
        #[arg(long)]
        force: bool,
    },
    /// Print the results of several `hat eval` runs side by side, with deltas against the first.
    Compare {
        /// Run folders of `hat eval` (--out), the first one the reference.
        #[arg(required = true, num_args = 2..)]
        runs: Vec<PathBuf>,
    },
    /// Why the agent suites' items failed, side by side for one or more `hat eval` runs: failed
    /// items per cause (wrong product looked up, a tool the harness lacks, a fact missing from
    /// the reply ...), the pass rate of items that name a product by link number against the
    /// rest, task types below half, and hvqa's pass rate under each held-out transformation of
    /// its harness states; for IFEval, the answers' length and looping and the pass rate per
    /// instruction category.
    Failures {
        /// Run folders of `hat eval` (--out).
        #[arg(required = true, num_args = 1..)]
        runs: Vec<PathBuf>,
        /// The harness the runs were evaluated with (hvqa's states are derived from it).
        #[arg(long, default_value = "harnesses/livestream")]
        harness: PathBuf,
    },
}

#[derive(Args)]
pub struct RunArgs {
    /// Also accepts `oracle` (the gold teacher) for the agent suites.
    #[command(flatten)]
    model: ModelArgs,
    /// Comma-separated suites: lsqa, hvqa, ifeval.
    #[arg(long, default_value = "lsqa,hvqa,ifeval")]
    suite: String,
    /// Folder for the results, one subfolder a suite (required).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Only the first N items of each suite.
    #[arg(long)]
    limit: Option<usize>,
    /// Continue an interrupted run in --out.
    #[arg(long)]
    resume: bool,
    /// The production harness (lsqa runs on it; hvqa on states derived from it).
    #[arg(long, default_value = "harnesses/livestream")]
    harness: PathBuf,
    /// The IFEval prompts (`input_data.jsonl` form); default: the 541 prompts embedded in the binary.
    #[arg(long, value_parser = crate::input::large_file)]
    ifeval_input: Option<PathBuf>,
    /// Token limit of one IFEval answer (agent turns use --max-tokens).
    #[arg(long, default_value_t = 1024)]
    ifeval_max_tokens: u32,
    /// Episodes decoded together as one batch.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Score lsqa on these tasks (JSON lines, as `hat tasks sample` prints them) instead of
    /// its built-in test items.
    #[arg(long, value_parser = crate::input::large_file)]
    tasks: Option<PathBuf>,
    /// Only the agent suites' items of these task types (comma-separated; `hat tasks kinds`
    /// lists them), e.g. `--kinds prompt_injection`.
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// An episode's last allowed turn must reply to the viewer, not call a tool, as `hat serve`
    /// runs it (the published rows were measured without it).
    #[arg(long)]
    final_reply: bool,
    /// A call may name only the harness's tools, constrained at decode time, as `hat serve
    /// --no-call-grammar` runs it (the published rows were measured without it; report it as
    /// a row of its own).
    #[arg(long)]
    tool_names: bool,
    /// Every call must be one the harness reads (its syntax, one of its tools, arguments that
    /// fit the tool's schema), constrained at decode time (`hat_harness::CallGrammar`), and a
    /// reply ends at the harness's reply limit, as `hat serve` runs it; takes the place of
    /// `--tool-names`. A serving setting: report it as a row of its own.
    #[arg(long)]
    call_grammar: bool,
    /// End a looping answer after its first copy, as `hat serve` and `hat run` do
    /// (`hat_model::repetition`; the published rows were measured without it; report it as a
    /// row of its own). Recorded in each suite's decoding settings.
    #[arg(long)]
    stop_loops: bool,
    /// Model turns an agent episode may take at most (tool rounds and retries included).
    #[arg(long, default_value_t = hat_harness::hooks::DEFAULT_MODEL_TURNS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=32))]
    max_turns: usize,
}

pub fn run(a: EvalArgs) -> Result<()> {
    match a.cmd {
        Some(EvalCmd::Ifeval {
            responses,
            out,
            input,
            force,
        }) => {
            let results = out.join("results.json");
            if results.exists() && !force {
                bail!(
                    "{} exists; pass --force to replace those scores, or choose another --out",
                    results.display()
                );
            }
            let inputs = match &input {
                Some(path) => hat_ifeval::read_inputs(path)
                    .with_context(|| format!("reading IFEval prompts {}", path.display()))?,
                None => hat_ifeval::builtin_inputs(),
            };
            let resp = hat_ifeval::read_responses(&responses)?;
            let report = hat_ifeval::score_responses(&inputs, &resp)?;
            hat_ifeval::write_outputs(&report, &out)?;
            print!("{}", hat_harness::text::terminal_safe(&report.to_string()));
            println!(
                "wrote {}/items.jsonl and {}/results.json",
                out.display(),
                out.display()
            );
            Ok(())
        }
        Some(EvalCmd::Compare { runs }) => compare(&runs),
        Some(EvalCmd::Failures { runs, harness }) => failures(&runs, &harness),
        None => run_suites(a.run),
    }
}

fn backend(r: &RunArgs) -> Result<Backend> {
    if r.model.model.as_deref() == Some("oracle") {
        return Ok(Backend::Oracle);
    }
    if r.stop_loops
        && r.model
            .model
            .as_deref()
            .is_some_and(|m| m.starts_with("openai:"))
    {
        bail!("--stop-loops needs the embedded engine: an openai: model's server decodes its own answers (leave --stop-loops out)");
    }
    let (mut identity, mut model) = chat_model(&r.model)?;
    if r.stop_loops {
        model.stop_loops(true);
        // named only when on, so runs from before it resume
        if let Some(d) = identity.decoding.as_object_mut() {
            d.insert("stop_loops".into(), serde_json::json!(true));
        }
    }
    Ok(Backend::Chat { identity, model })
}

fn run_suites(r: RunArgs) -> Result<()> {
    let suites = Suite::parse_list(&r.suite)?;
    let Some(out) = r.out.clone() else {
        bail!("--out DIR is required")
    };
    let mut backend = backend(&r)?;
    let cfg = EvalConfig {
        harness_dir: r.harness.clone(),
        out_dir: out.clone(),
        limit: r.limit,
        resume: r.resume,
        ifeval_input: r.ifeval_input.clone(),
        episode: EpisodeConfig {
            final_reply: r.final_reply,
            calls: if r.call_grammar {
                CallCheck::Grammar
            } else if r.tool_names {
                CallCheck::ToolNames
            } else {
                CallCheck::Free
            },
            max_turns: r.max_turns,
            ..EpisodeConfig::default()
        },
        batch: r.batch,
        max_tokens: r.model.max_tokens,
        ifeval_max_tokens: r.ifeval_max_tokens,
        tasks: r.tasks.clone(),
        kinds: r
            .kinds
            .iter()
            .map(|k| {
                hat_tasks::TaskKind::parse(k.trim()).with_context(|| {
                    format!("--kinds: unknown task type `{k}` (`hat tasks kinds` lists them)")
                })
            })
            .collect::<Result<_>>()?,
    };
    let mut rows = Vec::new();
    for s in suites {
        let pb = crate::progress::bar(0, s.as_str());
        let mut progress = |done: usize, total: usize| {
            pb.set_length(total as u64);
            pb.set_position(done as u64);
        };
        let summary = match s {
            Suite::Ifeval => hat_eval::run_ifeval(&cfg, &mut backend, &mut progress),
            agent => hat_eval::run_agent(agent, &cfg, &mut backend, &mut progress),
        }
        .with_context(|| format!("suite {}", s.as_str()))?;
        pb.finish_and_clear();
        rows.push(summary);
    }
    println!("{:<8} {:>8}  {:>9}  wall", "suite", "score", "items");
    for s in &rows {
        let items = s.detail["total"]
            .as_u64()
            .or_else(|| s.detail["prompts"].as_u64())
            .unwrap_or(0);
        println!(
            "{:<8} {:>7.1}%  {:>9}  {:.0}s",
            s.suite.as_str(),
            s.headline,
            items,
            s.detail["wall_seconds"].as_f64().unwrap_or(0.0)
        );
    }
    println!(
        "results in {}/<suite>/results.json and items.jsonl",
        out.display()
    );
    Ok(())
}

fn failures(runs: &[PathBuf], harness: &std::path::Path) -> Result<()> {
    use hat_eval::failures::{by_transformation, hvqa_transformations, read, Cause};
    for r in runs {
        if !r.is_dir() {
            bail!("{} is not a `hat eval --out` folder", r.display());
        }
    }
    let names: Vec<String> = runs.iter().map(|r| r.display().to_string()).collect();
    let header = |title: &str| {
        print!("{title:<44}");
        for n in &names {
            print!(" {n:>24}");
        }
        println!();
    };
    let mut transformations = None;
    let mut any = false;
    for suite in ["lsqa", "hvqa"] {
        let runs_b = runs
            .iter()
            .map(|r| read(r, suite))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        if runs_b.iter().all(Option::is_none) {
            continue;
        }
        any = true;
        header(&format!("{suite}: failed items by cause"));
        let cell = |b: &Option<hat_eval::failures::Breakdown>,
                    f: &dyn Fn(&hat_eval::failures::Breakdown) -> String| {
            b.as_ref().map_or("-".to_string(), f)
        };
        print!("{:<44}", "  failed / items");
        for b in &runs_b {
            print!(
                " {:>24}",
                cell(b, &|b| format!("{} / {}", b.failed, b.items))
            );
        }
        println!();
        for c in Cause::ALL {
            if runs_b.iter().flatten().all(|b| !b.causes.contains_key(&c)) {
                continue;
            }
            print!("  {:<42}", c.describe());
            for b in &runs_b {
                print!(
                    " {:>24}",
                    cell(b, &|b| {
                        let n = b.causes.get(&c).copied().unwrap_or(0);
                        format!("{n} ({:.0}%)", 100.0 * n as f64 / b.failed.max(1) as f64)
                    })
                );
            }
            println!();
        }
        if runs_b.iter().flatten().any(|b| b.unchecked > 0) {
            print!("{:<44}", "  items past the call grammar (unchecked)");
            for b in &runs_b {
                print!(" {:>24}", cell(b, &|b| b.unchecked.to_string()));
            }
            println!();
        }
        for (i, label) in ["  names a product by link number", "  the other items"]
            .into_iter()
            .enumerate()
        {
            print!("{label:<44}");
            for b in &runs_b {
                print!(
                    " {:>24}",
                    cell(b, &|b| {
                        let (p, n) = b.by_link[i];
                        format!("{p}/{n} ({:.0}%)", 100.0 * p as f64 / n.max(1) as f64)
                    })
                );
            }
            println!();
        }
        let types: std::collections::BTreeSet<&String> = runs_b
            .iter()
            .flatten()
            .flat_map(|b| b.by_type.keys())
            .collect();
        let below: Vec<&String> = types
            .into_iter()
            .filter(|t| {
                runs_b
                    .iter()
                    .flatten()
                    .any(|b| b.by_type.get(*t).is_some_and(|&(p, n)| 2 * p < n))
            })
            .collect();
        if !below.is_empty() {
            println!("  task types below half in some run (passed/items):");
            for t in below {
                print!("    {t:<40}");
                for b in &runs_b {
                    print!(
                        " {:>24}",
                        cell(b, &|b| b
                            .by_type
                            .get(t)
                            .map_or("-".into(), |(p, n)| format!("{p}/{n}")))
                    );
                }
                println!();
            }
        }
        if suite == "hvqa" {
            let t =
                match &transformations {
                    Some(t) => t,
                    None => transformations.insert(hvqa_transformations(harness).with_context(
                        || format!("deriving hvqa's states from {}", harness.display()),
                    )?),
                };
            let per_run: Vec<_> = runs_b
                .iter()
                .map(|b| b.as_ref().map(|b| by_transformation(&b.by_harness, t)))
                .collect();
            let labels: std::collections::BTreeSet<&String> = per_run
                .iter()
                .flatten()
                .flat_map(|(rows, _)| rows.keys())
                .collect();
            println!("  pass rate under each held-out transformation (harness states):");
            for l in labels {
                let states = per_run
                    .iter()
                    .flatten()
                    .find_map(|(rows, _)| rows.get(l).map(|r| r.2))
                    .unwrap_or(0);
                print!("    {:<40}", format!("{l} ({states})"));
                for r in &per_run {
                    let c = r
                        .as_ref()
                        .and_then(|(rows, _)| rows.get(l))
                        .map_or("-".to_string(), |&(p, n, _)| {
                            format!("{:.0}%", 100.0 * p as f64 / n.max(1) as f64)
                        });
                    print!(" {c:>24}");
                }
                println!();
            }
            for (name, r) in names.iter().zip(&per_run) {
                if let Some((_, unknown)) = r {
                    if *unknown > 0 {
                        println!(
                            "  {name}: {unknown} items under harness states that {} does not give (evaluated with another harness?)",
                            harness.display()
                        );
                    }
                }
            }
        }
    }
    let ifeval = runs
        .iter()
        .map(|r| hat_eval::failures::read_ifeval(r))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    if ifeval.iter().any(Option::is_some) {
        any = true;
        header("ifeval: answers");
        let row = |label: &str, f: &dyn Fn(&hat_eval::failures::IfevalAnswers) -> String| {
            print!("  {label:<50}");
            for a in &ifeval {
                print!(" {:>24}", a.as_ref().map_or("-".to_string(), f));
            }
            println!();
        };
        let share =
            |n: usize, of: usize| format!("{n} ({:.0}%)", 100.0 * n as f64 / of.max(1) as f64);
        row("prompts passed (strict) / prompts", &|a| {
            format!("{} / {}", a.passed, a.prompts)
        });
        row("median answer, words", &|a| a.median_words.to_string());
        row(
            &format!(
                "answers under {} words",
                hat_eval::failures::SHORT_ANSWER_WORDS
            ),
            &|a| share(a.short, a.prompts),
        );
        row("answers that repeat themselves", &|a| {
            share(a.looping, a.prompts)
        });
        type Counts = std::collections::BTreeMap<String, (usize, usize)>;
        // one row per key of any run's counts, "passed/total" in each run's column
        let table =
            |title: &str, counts: &dyn Fn(&hat_eval::failures::IfevalAnswers) -> &Counts| {
                println!("  instructions passed per {title} (strict):");
                let keys: std::collections::BTreeSet<&String> = ifeval
                    .iter()
                    .flatten()
                    .flat_map(|a| counts(a).keys())
                    .collect();
                for k in keys {
                    row(&format!("  {k}"), &|a| {
                        counts(a)
                            .get(k)
                            .map_or("-".into(), |&(p, n)| format!("{p}/{n}"))
                    });
                }
            };
        table("category", &|a| &a.by_category);
        table("instruction", &|a| &a.by_instruction);
    }
    if !any {
        bail!(
            "no lsqa, hvqa or ifeval items in {}: point at the folder `hat eval --out` wrote",
            names.join(", ")
        );
    }
    Ok(())
}

fn compare(runs: &[PathBuf]) -> Result<()> {
    let loaded: Vec<(String, _)> = runs
        .iter()
        .map(|p| Ok((p.display().to_string(), hat_eval::load_results(p)?)))
        .collect::<Result<_>>()?;
    let rows = hat_eval::compare(&loaded);
    print!("{:<34}", "metric");
    for (i, (name, _)) in loaded.iter().enumerate() {
        let label = if i == 0 {
            name.clone()
        } else {
            format!("{name} (Δ)")
        };
        print!(" {label:>22}");
    }
    println!();
    for (metric, vals) in rows {
        print!("{metric:<34}");
        let base = vals.first().copied().flatten();
        for (i, v) in vals.iter().enumerate() {
            let cell = match (v, base) {
                (None, _) => "-".to_string(),
                (Some(x), Some(b)) if i > 0 => format!("{x:.1} ({:+.1})", x - b),
                (Some(x), _) => format!("{x:.1}"),
            };
            print!(" {cell:>22}");
        }
        println!();
    }
    Ok(())
}
