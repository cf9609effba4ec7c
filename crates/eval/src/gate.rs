//! The harness regression gate: a new harness runs the same live-stream tasks as the one it
//! would replace, with the same model, and fails when it scores worse by more than a
//! threshold. `hat harness gate` runs it from the command line; `hat serve --gate` before
//! every live swap.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::run::{decoding_used, run_agent, sha256_hex, Backend, EvalConfig, ModelIdentity};
use crate::suite::Suite;
use crate::EvalError;
use hat_agent::episode::EpisodeConfig;

#[derive(Debug, Clone)]
pub struct GateConfig {
    /// Tasks (JSON lines from `hat tasks sample`); default: the Live-Stream QA test items.
    pub tasks: Option<PathBuf>,
    /// Only the first N items (the built-in items rotate through every task type).
    pub limit: Option<usize>,
    /// Points (of 100) the new harness may lose before the gate fails.
    pub threshold: f64,
    /// Results per (model, harness), reused by later gates against the same harness.
    pub out_dir: PathBuf,
    pub batch: usize,
    pub max_tokens: u32,
}

/// A task type that passed less often under the new harness.
#[derive(Debug, Clone, Serialize)]
pub struct Worse {
    pub task_type: String,
    pub old: f64,
    pub new: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct GateReport {
    pub old_hash: String,
    pub new_hash: String,
    pub old_score: f64,
    pub new_score: f64,
    /// Items scored under the new harness, and under the old one (the gate fails unless they
    /// are the same, non-zero number).
    pub items: usize,
    pub old_items: usize,
    pub threshold: f64,
    pub pass: bool,
    pub worse: Vec<Worse>,
}

impl std::fmt::Display for GateReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "gate {}: new {} scores {:.1} against {:.1} for {} on {} items (threshold {:.1} points)",
            if self.pass { "passed" } else { "FAILED" },
            short(&self.new_hash),
            self.new_score,
            self.old_score,
            short(&self.old_hash),
            self.items,
            self.threshold
        )?;
        if self.items == 0 || self.items != self.old_items {
            writeln!(
                f,
                "  the harnesses scored {} and {} items: the gate needs the same items, at \
                 least one, under both",
                self.old_items, self.items
            )?;
        }
        for w in &self.worse {
            writeln!(f, "  {:<22} {:5.1} -> {:5.1}", w.task_type, w.old, w.new)?;
        }
        Ok(())
    }
}

/// The first 12 characters of a hash without its `sha256:` prefix (characters, not bytes: a
/// folder model's hash is its path, which may not be ASCII).
fn short(h: &str) -> String {
    let h = h.strip_prefix("sha256:").unwrap_or(h);
    h.chars().take(12).collect()
}

/// The folder name of one gate run's results: the harness, then a digest of everything else
/// its score depends on, so a later gate reuses the results only when it would score the same
/// items the same way. The model's whole identity goes in (an endpoint's hash is its URL, so
/// two models behind one endpoint differ only by name; weight format and temperature are in
/// its decoding), and so do the scorer version (the crate version stays while the scorer
/// changes) and the crate version (the suites' items).
fn cache_key(
    harness_hash: &str,
    model: &ModelIdentity,
    episode: &EpisodeConfig,
    cfg: &GateConfig,
) -> Result<String, EvalError> {
    let tasks = match &cfg.tasks {
        Some(p) => sha256_hex(&std::fs::read(p).map_err(|e| EvalError::io(p, e))?),
        None => "lsqa".to_string(),
    };
    let what = serde_json::json!({
        "model": {"name": model.name, "hash": model.hash},
        "decoding": decoding_used(model, cfg.max_tokens),
        "tasks": tasks,
        "limit": cfg.limit,
        "episode": format!("{episode:?}"),
        "version": env!("CARGO_PKG_VERSION"),
        "scorer_version": hat_tasks::SCORER_VERSION,
    });
    let digest = sha256_hex(what.to_string().as_bytes());
    let digest = digest.strip_prefix("sha256:").unwrap_or(&digest);
    Ok(format!("{}-{}", short(harness_hash), &digest[..16]))
}

fn by_type(detail: &serde_json::Value) -> Vec<(String, f64)> {
    detail["by_task_type"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v["percent"].as_f64().unwrap_or(0.0)))
        .collect()
}

fn run_one(
    dir: &Path,
    backend: &mut Backend,
    cfg: &GateConfig,
) -> Result<(String, crate::run::SuiteSummary), EvalError> {
    let h = hat_harness::Harness::load(dir)?;
    let episode = EpisodeConfig::default();
    let key = cache_key(&h.hash, &backend.identity(), &episode, cfg)?;
    let out = cfg.out_dir.join(key);
    let ecfg = EvalConfig {
        kinds: Vec::new(),
        harness_dir: dir.to_path_buf(),
        out_dir: out,
        limit: cfg.limit,
        // finished items of an earlier gate on the same model and harness are reused
        resume: true,
        ifeval_input: None,
        episode,
        batch: cfg.batch,
        max_tokens: cfg.max_tokens,
        ifeval_max_tokens: cfg.max_tokens,
        tasks: cfg.tasks.clone(),
    };
    let s = run_agent(Suite::Lsqa, &ecfg, backend, &mut |_, _| {})?;
    Ok((h.hash, s))
}

/// Whether the new harness passes: it scored the same items as the old one, at least one, and
/// lost at most `threshold` points. Scores over no items (0 against 0), or over different item
/// sets, say nothing about the new harness.
fn passes(old: f64, old_items: usize, new: f64, new_items: usize, threshold: f64) -> bool {
    old_items > 0 && old_items == new_items && new + threshold >= old
}

/// Runs the gate: `new` against `old`.
pub fn gate(
    new: &Path,
    old: &Path,
    backend: &mut Backend,
    cfg: &GateConfig,
) -> Result<GateReport, EvalError> {
    // no items would score 0 against 0 and pass any harness
    if cfg.limit == Some(0) {
        return Err(EvalError::Usage(
            "the gate's limit (--gate-limit) is 0: it would score no items and pass any \
             harness; give at least 1 (76 covers every launch task type 4 times)"
                .into(),
        ));
    }
    let (old_hash, o) = run_one(old, backend, cfg)?;
    let (new_hash, n) = run_one(new, backend, cfg)?;
    let old_types = by_type(&o.detail);
    let new_types: std::collections::HashMap<String, f64> =
        by_type(&n.detail).into_iter().collect();
    let worse = old_types
        .into_iter()
        .filter_map(|(t, old)| {
            let new = *new_types.get(&t)?;
            (new < old).then_some(Worse {
                task_type: t,
                old,
                new,
            })
        })
        .collect();
    let total = |s: &crate::run::SuiteSummary| s.detail["total"].as_u64().unwrap_or(0) as usize;
    let (old_items, new_items) = (total(&o), total(&n));
    // scores over no items, or over different item sets, say nothing about the new harness
    Ok(GateReport {
        old_hash,
        new_hash,
        old_score: o.headline,
        new_score: n.headline,
        items: new_items,
        old_items,
        threshold: cfg.threshold,
        pass: passes(o.headline, old_items, n.headline, new_items, cfg.threshold),
        worse,
    })
}

#[cfg(test)]
mod tests {
    use super::passes;

    #[test]
    fn a_gate_fails_over_no_items_or_different_items() {
        assert!(passes(50.0, 19, 49.0, 19, 2.0));
        assert!(!passes(50.0, 19, 47.0, 19, 2.0));
        assert!(!passes(0.0, 0, 0.0, 0, 2.0), "no items");
        assert!(!passes(50.0, 19, 50.0, 18, 2.0), "other items");
    }
}
