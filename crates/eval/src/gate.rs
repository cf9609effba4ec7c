//! The harness regression gate: a new harness runs the same live-stream tasks as the one it
//! would replace, with the same model, and fails when it scores worse by more than a
//! threshold. `hat harness gate` runs it from the command line; `hat serve --gate` before
//! every live swap.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::run::{run_agent, Backend, EvalConfig};
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
    pub items: usize,
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
        for w in &self.worse {
            writeln!(f, "  {:<22} {:5.1} -> {:5.1}", w.task_type, w.old, w.new)?;
        }
        Ok(())
    }
}

fn short(h: &str) -> &str {
    let h = h.strip_prefix("sha256:").unwrap_or(h);
    &h[..h.len().min(12)]
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
    let model = backend.identity();
    // the cache key names everything the score depends on
    let items = match &cfg.tasks {
        Some(p) => {
            use std::hash::{Hash, Hasher};
            let mut hs = std::collections::hash_map::DefaultHasher::new();
            std::fs::read(p)
                .map_err(|e| EvalError::io(p, e))?
                .hash(&mut hs);
            format!("tasks{:016x}", hs.finish())
        }
        None => "lsqa".to_string(),
    };
    let limit = cfg.limit.map_or("all".to_string(), |n| n.to_string());
    let key = format!(
        "{}-{}-{items}-{limit}-t{}",
        short(&model.hash.replace([':', '/'], "_")),
        short(&h.hash),
        cfg.max_tokens
    );
    let out = cfg.out_dir.join(key);
    let ecfg = EvalConfig {
        kinds: Vec::new(),
        harness_dir: dir.to_path_buf(),
        out_dir: out,
        limit: cfg.limit,
        // finished items of an earlier gate on the same model and harness are reused
        resume: true,
        ifeval_input: None,
        episode: EpisodeConfig::default(),
        batch: cfg.batch,
        max_tokens: cfg.max_tokens,
        ifeval_max_tokens: cfg.max_tokens,
        tasks: cfg.tasks.clone(),
    };
    let s = run_agent(Suite::Lsqa, &ecfg, backend, &mut |_, _| {})?;
    Ok((h.hash, s))
}

/// Runs the gate: `new` against `old`.
pub fn gate(
    new: &Path,
    old: &Path,
    backend: &mut Backend,
    cfg: &GateConfig,
) -> Result<GateReport, EvalError> {
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
    Ok(GateReport {
        old_hash,
        new_hash,
        old_score: o.headline,
        new_score: n.headline,
        items: n.detail["total"].as_u64().unwrap_or(0) as usize,
        threshold: cfg.threshold,
        pass: n.headline + cfg.threshold >= o.headline,
        worse,
    })
}
