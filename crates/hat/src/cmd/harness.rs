//! `hat harness check|render`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Subcommand;

use hat_harness::render::render_turn;
use hat_harness::{Harness, HarnessError};
use hat_tasks::episode::{stream_value_with, Scene};
use hat_tasks::task::{event_kind, event_line_with, event_vars};
use hat_world::{Event, World};

#[derive(Subcommand)]
pub enum HarnessCmd {
    /// Validate a harness: print every problem and exit non-zero, or a one-line summary.
    Check { dir: PathBuf },
    /// Print the exact prompt the model would see.
    Render {
        dir: PathBuf,
        /// An event as inline JSON, e.g. '{"type": "comment", "viewer": "lily", "text": "is it
        /// in M?"}', or the path of a file holding it.
        #[arg(long)]
        event: Option<String>,
        /// The stream's store (from `hat world gen`); default: a generated world.
        #[arg(long)]
        stream: Option<PathBuf>,
        /// Seed of the generated world when --stream is not given.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print only the sizes (characters) of the system prompt and the turn.
        #[arg(long)]
        size: bool,
    },
    /// Regression gate: run live-stream tasks under NEW and under the harness it would
    /// replace, with one model; exit 1 with a report when NEW scores worse by more than the
    /// threshold.
    Gate(GateArgs),
}

#[derive(clap::Args)]
pub struct GateArgs {
    /// The new harness folder.
    new: PathBuf,
    /// The harness it would replace.
    #[arg(long)]
    against: PathBuf,
    #[command(flatten)]
    model: crate::cmd::backend::ModelArgs,
    #[command(flatten)]
    gate: GateOpts,
}

/// Gate options, shared with `hat serve --gate`.
#[derive(clap::Args, Clone)]
pub struct GateOpts {
    /// Tasks (JSON lines, as `hat tasks sample` prints them: a team's own comments with their
    /// expected intents); default: the Live-Stream QA test items.
    #[arg(long, value_parser = crate::input::large_file)]
    pub gate_tasks: Option<PathBuf>,
    /// Only the first N items (the built-in items rotate through the 19 launch task types, then later kinds).
    /// At least 1: a gate over no items would pass any harness.
    #[arg(long, default_value_t = 76, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub gate_limit: usize,
    /// Points (of 100) the new harness may lose (negative: it must gain that many).
    #[arg(long, default_value_t = 2.0, allow_negative_numbers = true)]
    pub gate_threshold: f64,
    /// Where per-harness results are kept (a later gate against the same harness and model
    /// reuses them).
    #[arg(long, default_value = "runs/gate")]
    pub gate_out: PathBuf,
}

impl GateOpts {
    pub fn config(&self, max_tokens: u32) -> hat_eval::gate::GateConfig {
        hat_eval::gate::GateConfig {
            tasks: self.gate_tasks.clone(),
            limit: Some(self.gate_limit),
            threshold: self.gate_threshold,
            out_dir: self.gate_out.clone(),
            batch: 8,
            max_tokens,
        }
    }
}

pub fn load(dir: &Path) -> Result<Harness> {
    let loaded = Harness::load(dir).and_then(|h| {
        let unrunnable = h.unrunnable_hooks();
        if unrunnable.is_empty() {
            Ok(h)
        } else {
            Err(HarnessError::Invalid(unrunnable))
        }
    });
    match loaded {
        Ok(h) => Ok(h),
        Err(HarnessError::Invalid(problems)) => {
            for p in &problems {
                eprintln!("{}/{p}", dir.display());
            }
            bail!(
                "{} has {} problem(s); fix them and run `hat harness check {}` again",
                dir.display(),
                problems.len(),
                dir.display()
            )
        }
        Err(e) => Err(e).with_context(|| format!("loading harness {}", dir.display())),
    }
}

pub fn run(cmd: HarnessCmd) -> Result<()> {
    match cmd {
        HarnessCmd::Gate(a) => {
            load(&a.new)?;
            load(&a.against)?;
            let mut backend = if a.model.model.as_deref() == Some("oracle") {
                hat_eval::Backend::Oracle
            } else {
                let (identity, model) = crate::cmd::backend::chat_model(&a.model)?;
                hat_eval::Backend::Chat { identity, model }
            };
            let cfg = a.gate.config(a.model.max_tokens);
            let report = hat_eval::gate::gate(&a.new, &a.against, &mut backend, &cfg)?;
            print!("{report}");
            if !report.pass {
                bail!(
                    "{} scores {:.1} points below {}; fix it or raise --gate-threshold",
                    a.new.display(),
                    report.old_score - report.new_score,
                    a.against.display()
                );
            }
            Ok(())
        }
        HarnessCmd::Check { dir } => {
            let h = load(&dir)?;
            println!("ok: {}", h.summary());
            Ok(())
        }
        HarnessCmd::Render {
            dir,
            event,
            stream,
            seed,
            size,
        } => {
            let h = load(&dir)?;
            let world = match &stream {
                Some(p) => World::open(p)
                    .with_context(|| format!("opening stream store {}", p.display()))?,
                None => World::generate(seed)?,
            };
            let event: Event = match &event {
                Some(arg) => {
                    let (text, origin) = if arg.trim_start().starts_with('{') {
                        (arg.clone(), "--event".to_string())
                    } else {
                        crate::input::small_file(arg)
                            .map_err(|e| anyhow::anyhow!("--event: {e}"))?;
                        let text = std::fs::read_to_string(arg).with_context(|| {
                            format!("reading event file {arg} (or give the event as inline JSON)")
                        })?;
                        (text, arg.clone())
                    };
                    serde_json::from_str(text.trim_start_matches('\u{feff}')).with_context(|| format!("{origin}: not an event; expected e.g. {{\"type\": \"comment\", \"viewer\": \"lily\", \"text\": \"hi\"}}"))?
                }
                None => Event::Comment {
                    viewer: "lily_0921".into(),
                    text: "is this in stock in M?".into(),
                },
            };
            let on_stage = world
                .on_stage()
                .map(|p| p.id.clone())
                .unwrap_or_else(|_| "P1".into());
            let scene = Scene {
                id: "render",
                event: &event,
                on_stage: &on_stage,
                history: &[],
                recent: &[],
            };
            let limits = h.viewer_limits();
            let system = h.render_system(&stream_value_with(&scene, &world, limits))?;
            let notes = h.inject_notes(event_kind(&event), &event_vars(&event, limits));
            let turn = render_turn(&event_line_with(&event, limits), &notes);
            if size {
                println!(
                    "system {} chars, turn {} chars, products {}",
                    system.chars().count(),
                    turn.chars().count(),
                    world.catalog().products.len()
                );
            } else {
                // a store's product titles may carry terminal escapes: show them, never run them
                println!(
                    "=== system ({} chars, harness {}) ===\n{}\n\n=== user ===\n{}",
                    system.chars().count(),
                    h.short_hash(),
                    hat_harness::text::terminal_safe(&system),
                    hat_harness::text::terminal_safe(&turn)
                );
            }
            Ok(())
        }
    }
}
