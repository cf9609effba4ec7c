//! Running suites: items are evaluated one by one and appended to
//! `items.jsonl` as they finish, so an interrupted run resumes where it
//! stopped; `results.json` is always computed from `items.jsonl`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use serde_json::{json, Map, Value};

use hat_agent::driver::{drive, Actor, Done, Job, ModelActor};
use hat_agent::episode::{CallCheck, ChatModel, EpisodeConfig};
use hat_agent::jsonl;
use hat_harness::Message;
use hat_tasks::{TaskKind, WorldCache};
use hat_teacher::oracle::OracleActor;

use crate::suite::{self, AgentSuite, Suite};
use crate::EvalError;

/// Who is being evaluated, as recorded in every results file.
#[derive(Debug, Clone, Serialize)]
pub struct ModelIdentity {
    pub name: String,
    /// A hash of the weights, or of the endpoint and model name.
    pub hash: String,
    pub decoding: Value,
}

pub enum Backend {
    /// The gold teacher: must score 100 on the agent suites.
    Oracle,
    Chat {
        identity: ModelIdentity,
        model: Box<dyn ChatModel + Send>,
    },
}

impl Backend {
    pub fn identity(&self) -> ModelIdentity {
        match self {
            Backend::Oracle => ModelIdentity {
                name: "oracle".into(),
                hash: "-".into(),
                decoding: json!(null),
            },
            Backend::Chat { identity, .. } => identity.clone(),
        }
    }
}

pub struct EvalConfig {
    pub harness_dir: PathBuf,
    pub out_dir: PathBuf,
    /// Evaluate only the first N items of each suite.
    pub limit: Option<usize>,
    pub resume: bool,
    /// IFEval prompts in `input_data.jsonl` form; `None`: the set embedded in `hat-ifeval`.
    pub ifeval_input: Option<PathBuf>,
    pub episode: EpisodeConfig,
    /// Episodes decoded together (each on its own world).
    pub batch: usize,
    /// Token limit of one agent turn (set before every agent suite: IFEval raises it).
    pub max_tokens: u32,
    /// Token limit of one IFEval answer.
    pub ifeval_max_tokens: u32,
    /// Live-Stream QA on these tasks (JSON lines from `hat tasks sample`) instead of its
    /// built-in test items.
    pub tasks: Option<PathBuf>,
    /// Only items of these task types (empty: all).
    pub kinds: Vec<TaskKind>,
}

/// Appends one JSON line with a single write, so an interrupted run never leaves a line
/// glued to the next (resume reads the file back line by line).
fn append_line(file: &mut std::fs::File, path: &Path, line: &Value) -> Result<(), EvalError> {
    let mut bytes = serde_json::to_vec(line).map_err(|e| EvalError::io(path, e.into()))?;
    bytes.push(b'\n');
    file.write_all(&bytes).map_err(|e| EvalError::io(path, e))
}

/// `sha256:` and the hex digest of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(bytes);
    let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The decoding settings as a suite runs them: the identity's, with `max_tokens` the limit
/// this suite sets (IFEval answers run under `ifeval_max_tokens`, not the agent turn limit the
/// identity was made with).
pub(crate) fn decoding_used(identity: &ModelIdentity, max_tokens: u32) -> Value {
    let mut d = identity.decoding.clone();
    if let Some(o) = d.as_object_mut() {
        o.insert("max_tokens".into(), json!(max_tokens));
    }
    d
}

/// What a suite folder's items are scored with, saved as `run.json` when the folder is first
/// written: a resume under another model, weight format, decoding, input or scorer would
/// otherwise mix two runs' items in one score under the later run's name (a stored item keeps
/// the pass its scorer gave it). `scorer` is the agent suites' [`hat_tasks::SCORER_VERSION`];
/// IFEval has none.
fn run_record(
    identity: &ModelIdentity,
    max_tokens: u32,
    input: &str,
    scorer: Option<u32>,
) -> Value {
    let mut r = json!({
        "model": {"name": identity.name, "hash": identity.hash},
        "decoding": decoding_used(identity, max_tokens),
        "input": input,
    });
    if let Some(v) = scorer {
        r["scorer_version"] = v.into();
    }
    r
}

/// Where `before` and `now` differ, as `key.path (before, now now)`.
fn differences(path: &str, before: &Value, now: &Value, out: &mut Vec<String>) {
    match (before, now) {
        (Value::Object(b), Value::Object(n)) => {
            let keys: std::collections::BTreeSet<&String> = b.keys().chain(n.keys()).collect();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                differences(
                    &p,
                    b.get(k).unwrap_or(&Value::Null),
                    n.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        _ if before != now => out.push(format!("{path} ({before}, now {now})")),
        _ => {}
    }
}

/// The decoding key that differs between machines rather than between settings.
const MACHINE_DEPENDENT: &str = "decoding.prefill_attention";

/// Checks `record` against the `run.json` of `dir` when `items` (the folder's stored items or
/// responses) holds anything, then saves it. A folder written before `run.json` existed is
/// accepted as it is: `runs/` holds such folders, and they must keep resuming.
fn check_run_record(dir: &Path, items: &Path, record: &Value) -> Result<(), EvalError> {
    let path = dir.join("run.json");
    let stored = std::fs::metadata(items).is_ok_and(|m| m.len() > 0);
    if stored {
        match std::fs::read(&path) {
            Ok(bytes) => {
                let before: Value = serde_json::from_slice(&bytes).map_err(|e| EvalError::Parse {
                    file: path.display().to_string(),
                    line: e.line(),
                    message: format!("{e}; it records what {} was scored with: restore it or use a new --out", items.display()),
                })?;
                let mut diff = Vec::new();
                differences("", &before, record, &mut diff);
                // The prefill attention's precision follows the machine (bf16 where the CPU
                // has it, else f32; HAT_ATTENTION), not a setting: a run moved to another
                // machine may go on, its items then scored under both (said in the log).
                let (machine, diff): (Vec<String>, Vec<String>) = diff
                    .into_iter()
                    .partition(|d| d.starts_with(MACHINE_DEPENDENT));
                for d in &machine {
                    tracing::warn!(
                        "{}: resumed on a machine that computes differently: {d}",
                        dir.display()
                    );
                }
                if !diff.is_empty() {
                    return Err(EvalError::Usage(format!(
                        "{} was scored with model {} ({}, decoding {}, input {}{}); this run differs in {}; \
                         resume with the same model, --format, --temperature, --max-tokens, \
                         --ifeval-max-tokens and input files (and a `hat` of the same scorer \
                         version: scores of two versions are not comparable), or use a new --out",
                        dir.display(),
                        before["model"]["name"],
                        before["model"]["hash"],
                        before["decoding"],
                        before["input"],
                        match &before["scorer_version"] {
                            Value::Null if record.get("scorer_version").is_some() =>
                                ", scorer version not recorded (1 or 2)".to_string(),
                            Value::Null => String::new(),
                            v => format!(", scorer version {v}"),
                        },
                        diff.join(", ")
                    )));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::warn!(
                    "{} was written by a `hat` from before run.json: its {} items were not checked \
                     against this run's model and decoding; saving this run's as {}",
                    dir.display(),
                    items.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned()),
                    path.display()
                );
            }
            Err(e) => return Err(EvalError::io(&path, e)),
        }
    }
    write_json(&path, record)
}

/// Headline figures of one suite.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteSummary {
    pub suite: Suite,
    pub headline: f64,
    pub detail: Value,
}

/// The items of an `items.jsonl` in order, each once: an item written twice (a run killed
/// between its write and the next) counts once. A byte-order mark from an editor is not part of
/// the JSON. Blank lines are skipped; a line that is not JSON is an error naming it.
pub(crate) fn read_items(path: &Path) -> Result<Vec<Value>, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|e| EvalError::io(path, e))?;
    let mut seen: HashSet<String> = HashSet::new();
    let mut items = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: Value = serde_json::from_str(line.trim_start_matches('\u{feff}')).map_err(|e| {
            EvalError::Parse {
                file: path.display().to_string(),
                line: i + 1,
                message: e.to_string(),
            }
        })?;
        if let Some(id) = v["id"].as_str() {
            if !seen.insert(id.to_string()) {
                continue;
            }
        }
        items.push(v);
    }
    Ok(items)
}

fn read_ids(path: &Path) -> Result<HashSet<String>, EvalError> {
    if !path.exists() {
        return Ok(HashSet::new());
    }
    Ok(read_items(path)?
        .iter()
        .filter_map(|v| v["id"].as_str().map(str::to_string))
        .collect())
}

/// Cuts an unfinished last line (see [`jsonl::repair_tail`]) before a resume reads the file.
pub fn repair_tail(path: &Path) -> Result<usize, EvalError> {
    jsonl::repair_tail(path).map_err(|e| EvalError::io(path, e))
}

fn open_items(
    dir: &Path,
    resume: bool,
    record: &Value,
) -> Result<(std::fs::File, HashSet<String>), EvalError> {
    std::fs::create_dir_all(dir).map_err(|e| EvalError::io(dir, e))?;
    let path = dir.join("items.jsonl");
    if path.exists() && !resume {
        return Err(EvalError::Usage(format!(
            "{} exists; pass --resume to continue that run or choose another --out",
            path.display()
        )));
    }
    // before the file is touched (even its unfinished last line cut), so a refused resume
    // changes nothing
    check_run_record(dir, &path, record)?;
    let done = if resume {
        repair_tail(&path)?;
        read_ids(&path)?
    } else {
        HashSet::new()
    };
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| EvalError::io(&path, e))?;
    Ok((f, done))
}

/// Runs an agent suite (lsqa or hvqa).
pub fn run_agent(
    which: Suite,
    cfg: &EvalConfig,
    backend: &mut Backend,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<SuiteSummary, EvalError> {
    let started = Instant::now();
    let mut worlds = WorldCache::default();
    let AgentSuite { states, mut items } = match which {
        Suite::Lsqa => match &cfg.tasks {
            Some(path) => suite::tasks_file(&cfg.harness_dir, path, &mut worlds)?,
            None => suite::lsqa(&cfg.harness_dir, &mut worlds)?,
        },
        Suite::Hvqa => suite::hvqa(&cfg.harness_dir, &mut worlds)?,
        Suite::Ifeval => return Err(EvalError::Usage("ifeval is not an agent suite".into())),
    };
    if !cfg.kinds.is_empty() {
        items.retain(|it| cfg.kinds.contains(&it.task.kind));
        if items.is_empty() {
            return Err(EvalError::Usage(format!(
                "{} has no items of the task types asked for ({})",
                which.as_str(),
                cfg.kinds
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    if let Some(n) = cfg.limit {
        items.truncate(n);
    }
    let dir = cfg.out_dir.join(which.as_str());
    let input = match (which, &cfg.tasks) {
        (Suite::Lsqa, Some(path)) => {
            sha256_hex(&std::fs::read(path).map_err(|e| EvalError::io(path, e))?)
        }
        _ => "builtin".to_string(),
    };
    let record = run_record(
        &backend.identity(),
        cfg.max_tokens,
        &input,
        Some(hat_tasks::SCORER_VERSION),
    );
    let (mut file, done) = open_items(&dir, cfg.resume, &record)?;
    let total = items.len();
    for item in &items {
        worlds.get(item.task.world_seed)?;
    }
    let id_of =
        |item: &suite::AgentItem| format!("{}@{}", item.task.id, &states[item.state].hash[7..19]);
    // A resume under another harness would mix two harnesses' items in one score.
    let ours: HashSet<&str> = states.iter().map(|h| &h.hash[7..19]).collect();
    if let Some(other) = done
        .iter()
        .filter_map(|id| id.rsplit_once('@').map(|(_, h)| h))
        .find(|h| !ours.contains(h))
    {
        return Err(EvalError::Usage(format!(
            "{} holds items scored under another harness state (hash {other}); resume with the \
             --harness it was started with, or choose another --out",
            dir.display()
        )));
    }
    // Nor may it mix episodes run two ways (turn budget, final-reply rule, tool names
    // constrained; the last only named when on, so runs from before it resume).
    let mut episode = json!({
        "max_turns": cfg.episode.max_turns,
        "final_reply": cfg.episode.final_reply,
    });
    if cfg.episode.calls == CallCheck::ToolNames {
        episode["tool_names"] = json!(true);
    }
    if cfg.episode.calls == CallCheck::Grammar {
        episode["call_grammar"] = json!(true);
        // since e597e70 the grammar also ends a reply at the harness's reply limit: items
        // scored before that must not be mixed with items scored after it
        episode["replies_end_at_limit"] = json!(true);
        if cfg.episode.final_reply {
            // since f08f941 the last, reply-only turn keeps to the grammar (and its limit) too
            episode["final_turn_checked"] = json!(true);
        }
    }
    let episode_path = dir.join("episode.json");
    if !done.is_empty() {
        // runs from before this file was written ran the defaults
        let mut before = match std::fs::read(&episode_path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| EvalError::Parse {
                file: episode_path.display().to_string(),
                line: e.line(),
                message: format!(
                    "{e}: the settings the finished items ran with cannot be read; these flags \
                     run with {episode}: if the finished items ran with the same, write that \
                     into the file and resume, or choose another --out"
                ),
            })?,
            Err(_) => json!({
                "max_turns": EpisodeConfig::default().max_turns,
                "final_reply": false,
            }),
        };
        // `--tool-names --call-grammar` ran the grammar alone and wrote both keys
        if before["call_grammar"] == json!(true) {
            if let Some(o) = before.as_object_mut() {
                o.remove("tool_names");
            }
        }
        if before != episode {
            return Err(EvalError::Usage(format!(
                "{} holds items whose episodes ran with {before}, not {episode}; resume with \
                 the --max-turns, --final-reply, --tool-names and --call-grammar it was started \
                 with (and the `hat` it was started with), or choose another --out",
                dir.display()
            )));
        }
    }
    write_json(&episode_path, &episode)?;
    let mut todo: Vec<(usize, &suite::AgentItem)> = items
        .iter()
        .enumerate()
        .filter(|(_, it)| !done.contains(&id_of(it)))
        .collect();
    // Items of one harness state run one after another: their system prompts share the
    // harness's part, which then stays in the model's prefix cache while they run. hvqa lists
    // its items round-robin over 20 states, more than that cache holds at once, so in list
    // order a state's part was often evicted before its next item came. An item's seed stays
    // its place in the list.
    todo.sort_by_key(|(_, it)| it.state);
    let mut finished = total - todo.len();
    progress(finished, total);
    if let Backend::Chat { model, .. } = backend {
        model.set_max_tokens(cfg.max_tokens);
    }
    let jobs: Vec<Job<'_>> = todo
        .iter()
        .map(|(i, it)| Job {
            task: &it.task,
            harness: &states[it.state],
            world: worlds.peek(it.task.world_seed).expect("built above"),
            seed: *i as u64,
        })
        .collect();
    let mut oracle_actor = OracleActor::default();
    let mut model_actor;
    let actor: &mut dyn Actor = match backend {
        Backend::Oracle => &mut oracle_actor,
        Backend::Chat { model, .. } => {
            model_actor = ModelActor {
                model: model.as_mut(),
                cfg: cfg.episode,
            };
            &mut model_actor
        }
    };
    drive(&jobs, actor, cfg.batch, &mut |k,
                                         done|
     -> Result<(), EvalError> {
        let item = todo[k].1;
        let o = match done {
            Done::Scored(o) => o,
            Done::NotApplicable(why) => {
                return Err(EvalError::Usage(format!(
                    "item {} does not apply to its harness state: {why}",
                    id_of(item)
                )))
            }
        };
        let (h, traj, s) = (&states[item.state], &o.trajectory, &o.score);
        let n_prompt = 2 + item.task.history.len() * 2;
        let components: Map<String, Value> = s
            .components
            .iter()
            .map(|c| (c.name.to_string(), Value::Bool(c.pass)))
            .collect();
        let line = json!({
            "id": id_of(item),
            "task_id": item.task.id,
            "task_type": item.task.kind,
            "lang": item.task.lang,
            "harness_hash": h.hash,
            "input": traj.messages.get(n_prompt - 1).map(|m| m.content.clone()),
            "output": traj.messages.iter().skip(n_prompt).collect::<Vec<&Message>>(),
            "calls": traj.attempt.calls,
            "reply": traj.attempt.reply,
            "pass": s.pass,
            "components": components,
            "reason": s.reason(),
            "hooks": traj.hook_log,
            "turns": traj.turns,
            "seconds": o.seconds,
        });
        append_line(&mut file, &dir, &line)?;
        finished += 1;
        progress(finished, total);
        Ok(())
    })?;
    progress(total, total);
    let hashes: Vec<&str> = states.iter().map(|h| h.hash.as_str()).collect();
    let wanted: HashSet<String> = items.iter().map(id_of).collect();
    let mut used = backend.identity();
    // the turn limit this suite set (the identity's is whatever it was made with)
    used.decoding = decoding_used(&used, cfg.max_tokens);
    let mut s = summarise_agent(
        which,
        &dir,
        used,
        &hashes,
        &wanted,
        wall_before(&dir, cfg.resume) + started.elapsed().as_secs_f64(),
    )?;
    // how the episodes ran, so a row measured another way says so
    s.detail["episode"] = episode;
    if let (Suite::Lsqa, Some(path)) = (which, &cfg.tasks) {
        s.detail["tasks_file"] = json!(path.display().to_string());
    }
    write_json(&dir.join("results.json"), &s.detail)?;
    Ok(s)
}

#[derive(Default, Serialize)]
struct Tally {
    passed: usize,
    total: usize,
    percent: f64,
}

impl Tally {
    fn add(&mut self, ok: bool) {
        self.total += 1;
        self.passed += usize::from(ok);
        self.percent = 100.0 * self.passed as f64 / self.total as f64;
    }
}

/// The wall time a resumed suite already spent: the `wall_seconds` of the `results.json` it
/// finds (a finished run resumed, or one resumed before), so that a resume that had little or
/// nothing left to do does not report its own few seconds as the suite's time. A run killed
/// before it wrote `results.json` leaves no such figure, and its part is not counted.
fn wall_before(dir: &Path, resume: bool) -> f64 {
    if !resume {
        return 0.0;
    }
    std::fs::read(dir.join("results.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v["wall_seconds"].as_f64())
        .filter(|w| w.is_finite() && *w >= 0.0)
        .unwrap_or(0.0)
}

/// Computes `results.json` from the items of `items.jsonl` this run asked for (`wanted`): a
/// folder resumed with a smaller `--limit` or other `--kinds` holds items the run did not ask
/// for, and counting them would report a score over another item set.
fn summarise_agent(
    which: Suite,
    dir: &Path,
    model: ModelIdentity,
    hashes: &[&str],
    wanted: &HashSet<String>,
    wall: f64,
) -> Result<SuiteSummary, EvalError> {
    let mut overall = Tally::default();
    let mut comps: BTreeMap<String, Tally> = BTreeMap::new();
    let mut by_type: BTreeMap<String, Tally> = BTreeMap::new();
    // The items of the kinds the suites launched with: comparable with scores published
    // before later kinds were added.
    let mut launch = Tally::default();
    let mut item_seconds = 0.0;
    let mut outside = 0usize;
    for v in read_items(&dir.join("items.jsonl"))? {
        if !v["id"].as_str().is_some_and(|id| wanted.contains(id)) {
            outside += 1;
            continue;
        }
        let ok = v["pass"].as_bool().unwrap_or(false);
        overall.add(ok);
        if v["task_type"]
            .as_str()
            .and_then(TaskKind::parse)
            .is_some_and(|k| TaskKind::LAUNCH.contains(&k))
        {
            launch.add(ok);
        }
        by_type
            .entry(v["task_type"].as_str().unwrap_or("?").to_string())
            .or_default()
            .add(ok);
        for (k, c) in v["components"].as_object().into_iter().flatten() {
            comps
                .entry(k.clone())
                .or_default()
                .add(c.as_bool().unwrap_or(false));
        }
        item_seconds += v["seconds"].as_f64().unwrap_or(0.0);
    }
    if outside > 0 {
        tracing::warn!(
            "{}: {outside} stored items are outside this run's items (another --limit or \
             --kinds) and are not in its results.json; they stay in items.jsonl",
            dir.display()
        );
    }
    let detail = json!({
        "suite": which,
        "score": overall.percent,
        "passed": overall.passed,
        "total": overall.total,
        "components": comps,
        "by_task_type": by_type,
        "launch_kinds": launch,
        "model": model,
        "harness_hashes": hashes,
        "wall_seconds": wall,
        "model_seconds": item_seconds,
        // which scorer gave `score`: numbers of different versions are not comparable
        "scorer_version": hat_tasks::SCORER_VERSION,
    });
    write_json(&dir.join("results.json"), &detail)?;
    Ok(SuiteSummary {
        suite: which,
        headline: overall.percent,
        detail,
    })
}

/// Answers each prompt (one user message) and hands the answers over in the prompts' order.
/// A model that batches continuously keeps `batch` prompts decoding and starts the next one
/// as soon as one ends, so a long answer holds up no other; others decode `batch` prompts at
/// a time. Greedy answers do not depend on their batch's other rows, so both give the same
/// text; the answers that ended ahead of an earlier, longer one wait for it.
fn answer_in_order(
    model: &mut dyn ChatModel,
    prompts: &[&str],
    batch: usize,
    on_answer: &mut dyn FnMut(usize, String) -> Result<(), EvalError>,
) -> Result<(), EvalError> {
    let chat = |p: &str| vec![Message::user(p.to_string())];
    if !(model.continuous() && batch > 1 && prompts.len() > 1) {
        for (c, chunk) in prompts.chunks(batch).enumerate() {
            let chats: Vec<Vec<Message>> = chunk.iter().map(|p| chat(p)).collect();
            let refs: Vec<&[Message]> = chats.iter().map(Vec::as_slice).collect();
            let outs = model.complete_batch(&refs)?;
            if outs.len() != chunk.len() {
                return Err(hat_agent::AgentError::Model(format!(
                    "the model returned {} answers for {} prompts",
                    outs.len(),
                    chunk.len()
                ))
                .into());
            }
            for (k, text) in outs.into_iter().enumerate() {
                on_answer(c * batch + k, text)?;
            }
        }
        return Ok(());
    }
    let mut running: HashMap<hat_agent::episode::TurnId, usize> = HashMap::new();
    let mut ended: BTreeMap<usize, String> = BTreeMap::new();
    let (mut next, mut handed) = (0, 0);
    let result = (|| -> Result<(), EvalError> {
        while handed < prompts.len() {
            while running.len() < batch && next < prompts.len() {
                let id = model.begin_turn(&chat(prompts[next]), Default::default())?;
                running.insert(id, next);
                next += 1;
            }
            for (id, out) in model.step_turns()? {
                if let Some(i) = running.remove(&id) {
                    ended.insert(i, out.text);
                }
            }
            while let Some(text) = ended.remove(&handed) {
                on_answer(handed, text)?;
                handed += 1;
            }
            if running.is_empty() && next >= prompts.len() && handed < prompts.len() {
                return Err(hat_agent::AgentError::Model(format!(
                    "the model ended {} of {} turns without an answer",
                    prompts.len() - handed,
                    prompts.len()
                ))
                .into());
            }
        }
        Ok(())
    })();
    if result.is_err() {
        model.abort_turns();
    }
    result
}

fn write_json(path: &Path, v: &Value) -> Result<(), EvalError> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(v).unwrap_or_default())
        .map_err(|e| EvalError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| EvalError::io(path, e))
}

/// Runs IFEval: generate a response per prompt (appended to `responses.jsonl`
/// in the standard form), then score strict and loose.
pub fn run_ifeval(
    cfg: &EvalConfig,
    backend: &mut Backend,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<SuiteSummary, EvalError> {
    let started = Instant::now();
    let Backend::Chat { model, identity } = backend else {
        return Err(EvalError::Usage("the oracle writes no IFEval responses; evaluate a model or score a response file with `hat eval ifeval`".into()));
    };
    let mut inputs = match &cfg.ifeval_input {
        Some(path) => hat_ifeval::read_inputs(path)?,
        None => hat_ifeval::builtin_inputs(),
    };
    if let Some(n) = cfg.limit {
        inputs.truncate(n);
    }
    let dir = cfg.out_dir.join("ifeval");
    std::fs::create_dir_all(&dir).map_err(|e| EvalError::io(&dir, e))?;
    let resp_path = dir.join("responses.jsonl");
    if resp_path.exists() && !cfg.resume {
        return Err(EvalError::Usage(format!(
            "{} exists; pass --resume to continue that run or choose another --out",
            resp_path.display()
        )));
    }
    let input = match &cfg.ifeval_input {
        Some(path) => sha256_hex(&std::fs::read(path).map_err(|e| EvalError::io(path, e))?),
        None => sha256_hex(hat_ifeval::BUILTIN_INPUT_DATA.as_bytes()),
    };
    check_run_record(
        &dir,
        &resp_path,
        &run_record(identity, cfg.ifeval_max_tokens, &input, None),
    )?;
    let mut have: HashMap<String, String> = if resp_path.exists() {
        repair_tail(&resp_path)?;
        hat_ifeval::read_responses(&resp_path)?
    } else {
        HashMap::new()
    };
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&resp_path)
        .map_err(|e| EvalError::io(&resp_path, e))?;
    model.set_max_tokens(cfg.ifeval_max_tokens);
    let todo: Vec<&hat_ifeval::InputRecord> = inputs
        .iter()
        .filter(|r| !have.contains_key(&r.prompt))
        .collect();
    let done_before = inputs.len() - todo.len();
    let prompts: Vec<&str> = todo.iter().map(|r| r.prompt.as_str()).collect();
    progress(done_before, inputs.len());
    answer_in_order(
        model.as_mut(),
        &prompts,
        cfg.batch.max(1),
        &mut |i, response| {
            let rec = todo[i];
            append_line(
                &mut file,
                &resp_path,
                &json!({"prompt": rec.prompt, "response": response}),
            )?;
            have.insert(rec.prompt.clone(), response);
            progress(done_before + i + 1, inputs.len());
            Ok(())
        },
    )?;
    progress(inputs.len(), inputs.len());
    let report = hat_ifeval::score_responses(&inputs, &have)?;
    let acc = |t: hat_ifeval::Tally| 100.0 * t.accuracy();
    let strict_avg = (acc(report.strict.prompt_level) + acc(report.strict.instruction_level)) / 2.0;
    let loose_avg = (acc(report.loose.prompt_level) + acc(report.loose.instruction_level)) / 2.0;
    // the answer limit IFEval ran under, not the agent turn limit the identity was made with
    let used = ModelIdentity {
        decoding: decoding_used(identity, cfg.ifeval_max_tokens),
        ..identity.clone()
    };
    // the whole file built first and written once (atomically, by hat-ifeval), so a run killed
    // in between never leaves a results.json without the suite's fields
    let mut results = report.results_json();
    if let Some(o) = results.as_object_mut() {
        o.insert("suite".into(), json!("ifeval"));
        o.insert("score".into(), json!(strict_avg));
        o.insert("average_strict".into(), json!(strict_avg));
        o.insert("average_loose".into(), json!(loose_avg));
        o.insert(
            "model".into(),
            serde_json::to_value(&used).unwrap_or_default(),
        );
        o.insert(
            "wall_seconds".into(),
            json!(wall_before(&dir, cfg.resume) + started.elapsed().as_secs_f64()),
        );
    }
    hat_ifeval::write_outputs_with(&report, &results, &dir)?;
    Ok(SuiteSummary {
        suite: Suite::Ifeval,
        headline: strict_avg,
        detail: results,
    })
}

/// Reads `<dir>/<suite>/results.json` for every suite present.
pub fn load_results(dir: &Path) -> Result<BTreeMap<String, Value>, EvalError> {
    let mut out = BTreeMap::new();
    for s in Suite::ALL {
        let p = dir.join(s.as_str()).join("results.json");
        if p.exists() {
            let text = std::fs::read_to_string(&p).map_err(|e| EvalError::io(&p, e))?;
            let v = serde_json::from_str(&text).map_err(|e| EvalError::Parse {
                file: p.display().to_string(),
                line: 1,
                message: e.to_string(),
            })?;
            out.insert(s.as_str().to_string(), v);
        }
    }
    if out.is_empty() {
        return Err(EvalError::Usage(format!(
            "{} holds no <suite>/results.json; pass the --out folder of a `hat eval` run",
            dir.display()
        )));
    }
    Ok(out)
}

/// Rows of a side-by-side comparison: metric, then one value per run.
pub fn compare(runs: &[(String, BTreeMap<String, Value>)]) -> Vec<(String, Vec<Option<f64>>)> {
    let mut metrics: Vec<String> = Vec::new();
    let mut push = |m: String| {
        if !metrics.contains(&m) {
            metrics.push(m)
        }
    };
    for (_, r) in runs {
        for (suite, v) in r {
            push(format!("{suite}.score"));
            if suite == "ifeval" {
                push("ifeval.average_loose".into());
            }
            for k in v["components"]
                .as_object()
                .into_iter()
                .flat_map(|o| o.keys())
            {
                push(format!("{suite}.{k}"));
            }
            for k in v["by_task_type"]
                .as_object()
                .into_iter()
                .flat_map(|o| o.keys())
            {
                push(format!("{suite}.type.{k}"));
            }
        }
    }
    metrics
        .into_iter()
        .map(|m| {
            let vals = runs
                .iter()
                .map(|(_, r)| {
                    let (suite, rest) = m.split_once('.')?;
                    let v = r.get(suite)?;
                    if let Some(t) = rest.strip_prefix("type.") {
                        v["by_task_type"][t]["percent"].as_f64()
                    } else if rest == "score" || rest == "average_loose" {
                        v[rest].as_f64()
                    } else {
                        v["components"][rest]["percent"].as_f64()
                    }
                })
                .collect();
            (m, vals)
        })
        .collect()
}
