//! `hat run`: one live turn — a viewer's comment through the agent loop.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;

use hat_agent::episode::{self, EpisodeConfig};
use hat_tasks::episode::Scene;
use hat_world::{Event, World};

use crate::cmd::backend::{chat_model, ModelArgs};

#[derive(Args)]
pub struct RunArgs {
    /// The harness directory.
    #[arg(long, default_value = "harnesses/livestream")]
    harness: PathBuf,
    #[command(flatten)]
    model: ModelArgs,
    /// The viewer's comment.
    #[arg(long)]
    comment: String,
    /// The viewer's name.
    #[arg(long, default_value = "viewer")]
    viewer: String,
    /// The stream's store (from `hat world gen`); default: a generated world.
    #[arg(long)]
    stream: Option<PathBuf>,
    /// Seed of the generated world (without --stream).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the whole transcript as JSON (messages, calls, hook decisions, and each model
    /// turn's token ids, log-probabilities and timing).
    #[arg(long)]
    json: bool,
    /// Let the last allowed turn call a tool too (by default it must answer the viewer, as
    /// in `hat serve`).
    #[arg(long)]
    no_final_reply: bool,
    /// Decode an answer that falls into a loop up to the token limit (by default it ends
    /// after the loop's first copy, as in `hat serve`).
    #[arg(long)]
    keep_loops: bool,
    /// How calls are held to the harness (as in `hat serve`).
    #[command(flatten)]
    calls: crate::cmd::serve::CallArgs,
}

pub fn run(a: RunArgs) -> Result<()> {
    let h = crate::cmd::harness::load(&a.harness)?;
    let world = match &a.stream {
        Some(p) => World::open(p).with_context(|| format!("opening {}", p.display()))?,
        None => World::generate(a.seed)?,
    };
    let (identity, mut model) = chat_model(&a.model)?;
    model.stop_loops(!a.keep_loops);
    let event = Event::Comment {
        viewer: a.viewer.clone(),
        text: a.comment.clone(),
    };
    let on_stage = world.on_stage().map(|p| p.id.clone())?;
    let scene = Scene {
        id: "run",
        event: &event,
        on_stage: &on_stage,
        history: &[],
        recent: &[],
    };
    let t0 = Instant::now();
    let cfg = EpisodeConfig {
        final_reply: !a.no_final_reply,
        calls: a.calls.check(),
        ..EpisodeConfig::default()
    };
    let traj = episode::run(&scene, &h, &world, model.as_mut(), cfg)?;
    let latency = t0.elapsed();
    if a.json {
        let out = serde_json::json!({
            "model": identity,
            "harness_hash": h.hash,
            "latency_seconds": latency.as_secs_f64(),
            "reply": traj.attempt.reply,
            "calls": traj.attempt.calls,
            "errors": traj.attempt.format_errors,
            "messages": traj.messages,
            "hooks": traj.hook_log,
            "turns": traj.turns,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    // model, hook and viewer text may carry terminal escapes: show them, never run them
    let safe = hat_harness::text::terminal_safe;
    println!("model {} · harness {}", identity.name, h.short_hash());
    for m in traj.messages.iter().skip(1) {
        println!(
            "--- {:?}{}\n{}",
            m.role,
            m.name
                .as_deref()
                .map(|n| format!(" ({})", safe(n)))
                .unwrap_or_default(),
            safe(&m.content)
        );
    }
    for (i, t) in traj.turns.iter().enumerate() {
        let mean_lp = if t.logprobs.is_empty() {
            String::new()
        } else {
            let m = t.logprobs.iter().sum::<f32>() / t.logprobs.len() as f32;
            format!(", mean log-prob {m:.3}")
        };
        let drafts = if t.drafted_tokens > 0 {
            format!(" ({} of them from drafts)", t.accepted_tokens)
        } else {
            String::new()
        };
        println!(
            "[turn {i}] {:.2}s, prompt {} tokens ({} cached), {} generated{drafts}{mean_lp}",
            t.seconds,
            t.prompt_tokens,
            t.cached_tokens,
            t.tokens.len()
        );
    }
    for d in &traj.hook_log {
        println!("[hook {}] {}", d.hook, safe(&d.outcome));
    }
    for e in &traj.attempt.format_errors {
        println!("[error] {}", safe(&e.to_string()));
    }
    println!(
        "=== reply ({:.2}s) ===\n{}",
        latency.as_secs_f64(),
        safe(&traj.attempt.reply)
    );
    Ok(())
}
