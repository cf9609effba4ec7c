//! The suites and the fixed items they hold.
//!
//! Items are a pure function of the suite definition (seeds are constants),
//! so every model is judged on the same items and a resumed run continues
//! exactly where it stopped.

use std::path::Path;

use hat_augment::Pool;
use hat_harness::Harness;
use hat_tasks::task::splitmix64;
use hat_tasks::{Split, Task, TaskKind, TaskSet, WorldCache};

use crate::EvalError;

/// The seed every suite's items derive from.
pub const EVAL_SEED: u64 = 20_261_129;
/// Live-Stream QA: tasks per type.
pub const LSQA_PER_KIND: usize = 16;
/// Harness-Variant QA: tasks of each later kind (one under each held-out state).
pub const HVQA_PER_LATER_KIND: usize = HVQA_VARIANTS;
/// Harness-Variant QA: held-out harness states, and tasks under each.
pub const HVQA_VARIANTS: usize = 20;
pub const HVQA_PER_VARIANT: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Suite {
    Lsqa,
    Hvqa,
    Ifeval,
}

impl Suite {
    pub const ALL: [Suite; 3] = [Suite::Lsqa, Suite::Hvqa, Suite::Ifeval];
    pub fn as_str(self) -> &'static str {
        match self {
            Suite::Lsqa => "lsqa",
            Suite::Hvqa => "hvqa",
            Suite::Ifeval => "ifeval",
        }
    }
    /// A comma-separated list; a suite named twice runs once (red-team finding: the second
    /// run refused its own output folder).
    pub fn parse_list(s: &str) -> Result<Vec<Suite>, EvalError> {
        let mut out: Vec<Suite> = Vec::new();
        for x in s.split(',') {
            let suite = match x.trim() {
                "lsqa" => Suite::Lsqa,
                "hvqa" => Suite::Hvqa,
                "ifeval" => Suite::Ifeval,
                o => {
                    return Err(EvalError::Usage(format!(
                        "unknown suite `{o}` (suites: lsqa, hvqa, ifeval)"
                    )))
                }
            };
            if !out.contains(&suite) {
                out.push(suite);
            }
        }
        Ok(out)
    }
}

/// One agent item: a test task under one harness state.
pub struct AgentItem {
    pub task: Task,
    /// Index into the suite's harness states.
    pub state: usize,
}

/// The harness states and items of an agent suite.
pub struct AgentSuite {
    pub states: Vec<Harness>,
    pub items: Vec<AgentItem>,
}

pub fn lsqa(harness_dir: &Path, worlds: &mut WorldCache) -> Result<AgentSuite, EvalError> {
    let h = Harness::load(harness_dir)?;
    let tasks = with_later_kinds(
        LSQA_PER_KIND * TaskKind::LAUNCH.len(),
        LSQA_PER_KIND,
        EVAL_SEED,
        worlds,
    )?;
    Ok(AgentSuite {
        states: vec![h],
        items: tasks
            .into_iter()
            .map(|task| AgentItem { task, state: 0 })
            .collect(),
    })
}

/// Most tasks a `--tasks` file may hold.
pub const MAX_TASKS_FILE: usize = 100_000;

/// A team's own tasks, in the JSON-lines form `hat tasks sample` prints, under one harness
/// (Live-Stream QA on other items).
pub fn tasks_file(
    harness_dir: &Path,
    path: &Path,
    worlds: &mut WorldCache,
) -> Result<AgentSuite, EvalError> {
    let h = Harness::load(harness_dir)?;
    let text = std::fs::read_to_string(path).map_err(|e| EvalError::io(path, e))?;
    let mut items = Vec::new();
    // results are kept by task id: a second task with an id would be run and then lost
    let mut first_line: std::collections::HashMap<String, usize> = Default::default();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_start_matches('\u{feff}').trim();
        if line.is_empty() {
            continue;
        }
        let task: Task = serde_json::from_str(line).map_err(|e| EvalError::Parse {
            file: path.display().to_string(),
            line: i + 1,
            message: format!("{e} (each line is a task as `hat tasks sample` prints it)"),
        })?;
        // A task that names a product its world lacks, or an attribute no product has, is the
        // file's error: said here with its line, not later as "cannot compute gold".
        let world = worlds.get(task.world_seed)?;
        let bad = |message: String| EvalError::Parse {
            file: path.display().to_string(),
            line: i + 1,
            message,
        };
        if world.catalog().product(&task.on_stage).is_none() {
            return Err(bad(format!(
                "on_stage `{}` is not a product of world {:#x}",
                task.on_stage, task.world_seed
            )));
        }
        hat_tasks::expect(&task, &h, world).map_err(|e| bad(format!("task {}: {e}", task.id)))?;
        if let Some(first) = first_line.insert(task.id.clone(), i + 1) {
            return Err(bad(format!(
                "task id `{}` is already the id of line {first}: give every task its own id",
                task.id
            )));
        }
        items.push(AgentItem { task, state: 0 });
        if items.len() > MAX_TASKS_FILE {
            return Err(EvalError::Usage(format!(
                "{}: more than {MAX_TASKS_FILE} tasks",
                path.display()
            )));
        }
    }
    if items.is_empty() {
        return Err(EvalError::Usage(format!("{}: no tasks", path.display())));
    }
    Ok(AgentSuite {
        states: vec![h],
        items,
    })
}

/// The augmentation seeds of hvqa's held-out harness states, in order.
pub fn hvqa_seeds() -> Vec<u64> {
    hat_augment::variant_seeds(splitmix64(EVAL_SEED), HVQA_VARIANTS)
}

pub fn hvqa(harness_dir: &Path, worlds: &mut WorldCache) -> Result<AgentSuite, EvalError> {
    let base = hat_augment::load_spec(harness_dir)?;
    let mut states = Vec::with_capacity(HVQA_VARIANTS);
    for s in hvqa_seeds() {
        let v = hat_augment::augment(&base, s, Pool::Heldout)?;
        states.push(Harness::compile(v.spec, Some(harness_dir.to_path_buf()))?);
    }
    let tasks = with_later_kinds(
        HVQA_VARIANTS * HVQA_PER_VARIANT,
        HVQA_PER_LATER_KIND,
        splitmix64(EVAL_SEED ^ 0x4856),
        worlds,
    )?;
    let items = tasks
        .into_iter()
        .enumerate()
        .map(|(i, task)| AgentItem {
            task,
            state: i % HVQA_VARIANTS,
        })
        .collect();
    Ok(AgentSuite { states, items })
}

/// A suite's test tasks: `launch` tasks rotating through the kinds the suites launched with
/// (exactly the items published before any kind was added), then `per_later` tasks of each
/// kind added since, each block from a seed of its own. Adding a kind adds items; it never
/// changes one.
fn with_later_kinds(
    launch: usize,
    per_later: usize,
    seed: u64,
    worlds: &mut WorldCache,
) -> Result<Vec<Task>, EvalError> {
    let mut tasks = TaskSet::generate_kinds(Split::Test, launch, seed, &TaskKind::LAUNCH, worlds)?;
    for kind in TaskKind::ALL
        .into_iter()
        .filter(|k| !TaskKind::LAUNCH.contains(k))
    {
        let block_seed = kind
            .as_str()
            .bytes()
            .fold(splitmix64(seed), |h, b| splitmix64(h ^ u64::from(b)));
        tasks.extend(TaskSet::generate_kinds(
            Split::Test,
            per_later,
            block_seed,
            &[kind],
            worlds,
        )?);
    }
    Ok(tasks)
}
