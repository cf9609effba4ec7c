//! Dataset generation: tasks of the train split, spread over the base
//! harness and N augmented harness states, written by a teacher, kept only
//! when the scorer passes them (rejection sampling).

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value};

use hat_agent::driver::{drive, Actor, Done, Job, ModelActor};
use hat_agent::episode::{ChatModel, EpisodeConfig};
use hat_augment::Pool;
use hat_harness::{Harness, Message, Role, ToolCall};
use hat_tasks::task::splitmix64;
use hat_tasks::{KindMix, Split, TaskSet, WorldCache};
use hat_teacher::oracle::OracleActor;

use crate::record::Record;
use crate::stats::Stats;
use crate::DataError;

pub enum Teacher {
    Oracle,
    Chat {
        name: String,
        model: Box<dyn ChatModel>,
    },
}

pub struct GenConfig {
    pub harness_dir: PathBuf,
    /// Augmented states besides the base harness.
    pub variants: usize,
    pub pool: Pool,
    pub tasks: usize,
    pub seed: u64,
    /// Tasks drawn per (harness state, stream): 1 spreads consecutive tasks over the states;
    /// K > 1 gives runs of K tasks of one stream one state, so trajectories share their system
    /// prompt's harness and stream parts and pack together in training.
    pub group: usize,
    /// With `group` > 1: each run of `group` tasks is one scene as well (the same product on
    /// stage and the same recent activity), so their system prompts are identical and their
    /// trajectories pack whole instead of sharing only the part before the scene.
    pub shared_scene: bool,
    /// How often each task kind is drawn (the default: every kind equally often).
    pub mix: KindMix,
    /// Share of oracle trajectories (0 to 1) that take a detour first: a look-up of a wrong
    /// product, its telling answer, then the right call (`hat_teacher::oracle::trajectory_with`;
    /// the wrong turn is written with `weight: 0`). Ignored for a chat teacher.
    pub recovery: f64,
    /// With `shared_scene`: this many more tasks per scene, written only up to the teacher's
    /// first turn (its look-up or its reply): a trainer sees more first decisions of the scene
    /// for a few dozen tokens each, since a pack holds the scene's prompt once.
    pub first_turns: usize,
}

/// Checks a `recovery` share: a number from 0 (no detours) to 1.
pub fn check_recovery(share: f64) -> Result<(), String> {
    if (0.0..=1.0).contains(&share) {
        Ok(())
    } else {
        Err(format!(
            "`{share}` is not a share: use a number from 0 (no detours) to 1 (every trajectory \
             that can take one), e.g. 0.3"
        ))
    }
}

/// A harness state taking part in a run.
pub struct State {
    pub label: String,
    pub harness: Harness,
}

/// The base harness plus `variants` augmented states.
pub fn states(dir: &Path, variants: usize, pool: Pool, seed: u64) -> Result<Vec<State>, DataError> {
    states_with(dir, variants, pool, seed, FamilyShares::default())
}

/// Shares of augmented training states whose calls are written in a syntax family's member
/// (docs/harness-format.md): element (`<exec fn="name">{...}</exec>`) and keyword
/// (`RUN name(key=value)`). Both 0 (the default): the states every published dataset was
/// drawn from.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FamilyShares {
    pub element: f64,
    pub keyword: f64,
}

impl FamilyShares {
    fn any(self) -> bool {
        self.element > 0.0 || self.keyword > 0.0
    }

    pub fn check(self) -> Result<(), String> {
        for s in [self.element, self.keyword] {
            check_family_share(s)?;
        }
        if self.element + self.keyword > 1.0 {
            return Err(format!(
                "--element-syntaxes {} and --keyword-syntaxes {} add up to more than 1: a \
                 state takes at most one family",
                self.element, self.keyword
            ));
        }
        Ok(())
    }
}

/// Checks a share of augmented states that take a syntax family's call syntax.
pub fn check_family_share(share: f64) -> Result<(), String> {
    if (0.0..=1.0).contains(&share) {
        Ok(())
    } else {
        Err(format!(
            "`{share}` is not a share: use a number from 0 (the training pool's call syntaxes \
             only) to 1 (every augmented state), e.g. 0.3"
        ))
    }
}

/// [`states`], where shares of the augmented states (not the base one) write their calls in
/// a member of the element or the keyword family
/// ([`hat_augment::families::prompt::element_syntax`], [`hat_augment::families::prompt::keyword_syntax`]),
/// each drawn from the state's own seed; with both shares 0 the states are [`states`]'s,
/// draw for draw (and with only the element share set, as they were before the keyword
/// family existed). Training pool only: the families are a training device, and a held-out
/// state keeps its held-out syntax.
pub fn states_with(
    dir: &Path,
    variants: usize,
    pool: Pool,
    seed: u64,
    shares: FamilyShares,
) -> Result<Vec<State>, DataError> {
    shares.check().map_err(DataError::Usage)?;
    if shares.any() && pool != Pool::Train {
        return Err(DataError::Usage(
            "call syntax families are for the train pool only; drop --element-syntaxes and \
             --keyword-syntaxes or use --pool train"
                .into(),
        ));
    }
    let base_spec = hat_augment::load_spec(dir)?;
    let base = Harness::compile(base_spec.clone(), Some(dir.to_path_buf()))?;
    let mut out = vec![State {
        label: "base".into(),
        harness: base,
    }];
    for (i, s) in hat_augment::variant_seeds(seed, variants)
        .into_iter()
        .enumerate()
    {
        let mut v = hat_augment::augment(&base_spec, s, pool)?;
        if shares.any() {
            use hat_augment::families::prompt::{element_syntax, keyword_syntax};
            let mut rng = ChaCha8Rng::seed_from_u64(s ^ 0xE1E3_E475_0000_0001);
            // the element draw first, as before the keyword family: a run that sets only
            // --element-syntaxes draws the same states
            if rng.gen_bool(shares.element) {
                element_syntax(&mut v.spec, &mut rng);
            } else if shares.keyword > 0.0
                && rng.gen_bool((shares.keyword / (1.0 - shares.element)).min(1.0))
            {
                keyword_syntax(&mut v.spec, &mut rng);
            }
        }
        out.push(State {
            label: format!("v{i:03}"),
            harness: Harness::compile(v.spec, Some(dir.to_path_buf()))?,
        });
    }
    Ok(out)
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct GenReport {
    pub attempted: usize,
    pub written: usize,
    pub rejected: usize,
    pub skipped_existing: usize,
    pub not_applicable: usize,
    pub seconds: f64,
    pub per_minute: f64,
    pub stats: Stats,
    /// Reasons of the first rejections, for the log.
    pub rejections: Vec<String>,
}

impl GenReport {
    pub fn pass_rate(&self) -> f64 {
        let judged = self.written + self.rejected;
        if judged == 0 {
            0.0
        } else {
            self.written as f64 / judged as f64
        }
    }
}

/// `(task_id, harness_hash)` pairs already in a dataset file, for `--resume`.
pub fn existing_keys(path: &Path) -> Result<HashSet<(String, String)>, DataError> {
    let mut keys = HashSet::new();
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(keys),
        Err(e) => return Err(DataError::Io(path.display().to_string(), e)),
    };
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = crate::jsonl_line(path, i, line)?;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line.trim_start_matches('\u{feff}')).map_err(|e| {
            DataError::Parse {
                file: path.display().to_string(),
                line: i + 1,
                message: e.to_string(),
            }
        })?;
        keys.insert((
            v["task_id"].as_str().unwrap_or("").to_string(),
            v["harness_hash"].as_str().unwrap_or("").to_string(),
        ));
    }
    Ok(keys)
}

/// Generates the dataset into `out`, calling `progress(done, total)` as it goes.
pub fn generate(
    cfg: &GenConfig,
    states: &[State],
    teacher: &mut Teacher,
    skip: &HashSet<(String, String)>,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<GenReport, DataError> {
    let started = Instant::now();
    let mut worlds = WorldCache::default();
    let group = cfg.group.max(1);
    let scenes = cfg.shared_scene && group > 1;
    if cfg.first_turns > 0 && !scenes {
        return Err(DataError::Usage(
            "first-turn extras join a shared scene: pass --shared-scene and --group K > 1 \
             with --first-turns"
                .into(),
        ));
    }
    // per task: whether it is a first-turn extra, and its scene (scenes only)
    let (tasks, extra, scene_no): (Vec<_>, Vec<bool>, Vec<usize>) = if scenes {
        let drawn = TaskSet::generate_scenes_with_extras(
            Split::Train,
            cfg.tasks,
            cfg.seed,
            &cfg.mix.rotation(),
            &mut worlds,
            group,
            cfg.first_turns,
        )?;
        let extra = drawn.iter().map(|s| s.extra).collect();
        let scene_no = drawn.iter().map(|s| s.scene).collect();
        (drawn.into_iter().map(|s| s.task).collect(), extra, scene_no)
    } else {
        let tasks = TaskSet::generate_kinds(
            Split::Train,
            cfg.tasks,
            cfg.seed,
            &cfg.mix.rotation(),
            &mut worlds,
        )?;
        let n = tasks.len();
        (tasks, vec![false; n], Vec::new())
    };
    // Each episode's seed: by its place among the scenes' own tasks (as before extras
    // existed), extras numbered apart, so adding extras changes no other trajectory.
    let mut next = [0u64, hat_tasks::suite::EXTRA_INDEX_BASE as u64];
    let episode_no: Vec<u64> = extra
        .iter()
        .map(|&x| {
            let n = &mut next[usize::from(x)];
            *n += 1;
            *n - 1
        })
        .collect();

    let mut report = GenReport {
        attempted: 0,
        written: 0,
        rejected: 0,
        skipped_existing: 0,
        not_applicable: 0,
        seconds: 0.0,
        per_minute: 0.0,
        stats: Stats::default(),
        rejections: vec![],
    };
    let teacher_name = match teacher {
        Teacher::Oracle => "oracle".to_string(),
        Teacher::Chat { name, .. } => name.clone(),
    };
    let tools: Vec<Value> = states.iter().map(|s| s.harness.openai_tools()).collect();
    let mut line = Vec::with_capacity(16 * 1024);
    let mut order: Vec<usize> = (0..tasks.len()).collect();
    // scenes come out as runs of `group` already
    if group > 1 && !scenes {
        // tasks of one stream together, so each run of `group` shares stream and state
        order.sort_by_key(|&i| tasks[i].world_seed);
    }
    // Which state each task runs under, and which are already in the file.
    let mut jobs_of: Vec<(usize, usize)> = Vec::with_capacity(order.len());
    for (n, &i) in order.iter().enumerate() {
        let run = if scenes { scene_no[i] } else { n / group };
        let si = run % states.len();
        if skip.contains(&(tasks[i].id.clone(), states[si].harness.hash.clone())) {
            report.skipped_existing += 1;
            continue;
        }
        worlds.get(tasks[i].world_seed)?;
        jobs_of.push((i, si));
    }
    let jobs: Vec<Job<'_>> = jobs_of
        .iter()
        .map(|&(i, si)| Job {
            task: &tasks[i],
            harness: &states[si].harness,
            world: worlds.peek(tasks[i].world_seed).expect("built above"),
            seed: splitmix64(cfg.seed ^ episode_no[i]),
        })
        .collect();
    report.attempted = jobs.len();
    let mut oracle_actor = OracleActor {
        recovery: cfg.recovery,
        // argument habits come from the base harness, the first state
        base: states.first().map(|s| &s.harness),
    };
    let mut model_actor;
    let actor: &mut dyn Actor = match teacher {
        Teacher::Oracle => &mut oracle_actor,
        Teacher::Chat { model, .. } => {
            model_actor = ModelActor {
                model: model.as_mut(),
                cfg: EpisodeConfig::default(),
            };
            &mut model_actor
        }
    };
    let total = tasks.len();
    let skipped = report.skipped_existing;
    // One episode at a time: an endpoint teacher answers one request at a time anyway.
    drive(&jobs, actor, 1, &mut |k, done| -> Result<(), DataError> {
        progress(skipped + k, total);
        let (i, si) = jobs_of[k];
        let (task, state) = (&tasks[i], &states[si]);
        let o = match done {
            Done::Scored(o) => o,
            Done::NotApplicable(_) => {
                report.not_applicable += 1;
                return Ok(());
            }
        };
        if !o.score.pass {
            report.rejected += 1;
            if report.rejections.len() < 20 {
                report
                    .rejections
                    .push(format!("{}: {}", task.id, o.score.reason()));
            }
            return Ok(());
        }
        let h = &state.harness;
        let verdict: Map<String, Value> = o
            .score
            .components
            .iter()
            .map(|c| (c.name.to_string(), Value::Bool(c.pass)))
            .collect();
        let traj = o.trajectory;
        let (mut messages, mut calls) = (traj.messages, traj.attempt.calls);
        // The scene's earlier replies are context the task supplies, scripted, not the
        // teacher's work: a trainer must not learn from them.
        for k in hat_tasks::episode::scripted_replies(task.history.len()) {
            if let Some(m) = messages.get_mut(k) {
                m.weight = Some(0);
            }
        }
        if extra[i] {
            (messages, calls) = first_turn(messages, calls);
        }
        let rec = Record {
            messages,
            tools: tools[si].clone(),
            harness_name: h.name().to_string(),
            harness_hash: h.hash.clone(),
            variant: state.label.clone(),
            call_syntax: h.syntax.as_str().to_string(),
            task_id: task.id.clone(),
            task_type: task.kind.as_str().to_string(),
            split: Split::Train.as_str().to_string(),
            lang: task.lang.clone(),
            calls,
            teacher: teacher_name.clone(),
            score: Value::Object(verdict),
        };
        line.clear();
        serde_json::to_writer(&mut line, &rec)?;
        line.push(b'\n');
        out.write_all(&line)
            .map_err(|e| DataError::Io("output".into(), e))?;
        report.stats.add(&rec);
        report.written += 1;
        Ok(())
    })?;
    progress(tasks.len(), tasks.len());
    report.seconds = started.elapsed().as_secs_f64();
    report.per_minute = report.attempted as f64 / report.seconds.max(1e-9) * 60.0;
    Ok(report)
}

/// A trajectory cut after the teacher's first trained turn (the first assistant message not
/// written with weight 0), with the calls made up to and in that turn: what a first-turn extra
/// keeps. A trajectory with no such turn is returned whole.
fn first_turn(messages: Vec<Message>, calls: Vec<ToolCall>) -> (Vec<Message>, Vec<ToolCall>) {
    let Some(cut) = messages
        .iter()
        .position(|m| m.role == Role::Assistant && m.weight != Some(0))
    else {
        return (messages, calls);
    };
    // every call gets one tool message: those before the cut and those answering it
    let answering = messages[cut + 1..]
        .iter()
        .take_while(|m| m.role == Role::Tool)
        .count();
    let made = messages[..cut]
        .iter()
        .filter(|m| m.role == Role::Tool)
        .count()
        + answering;
    let mut messages = messages;
    messages.truncate(cut + 1);
    let mut calls = calls;
    calls.truncate(made);
    (messages, calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: Role, content: &str, weight: Option<u8>) -> Message {
        Message {
            role,
            content: content.into(),
            name: None,
            weight,
        }
    }

    fn call(name: &str) -> ToolCall {
        ToolCall {
            name: name.into(),
            arguments: Value::Object(Map::new()),
        }
    }

    #[test]
    fn a_first_turn_extra_ends_with_the_first_trained_turn_and_its_calls() {
        use Role::*;
        // a scripted earlier reply (weight 0), a detour (weight 0) with its result, then the
        // turn that counts with two calls, their results and the reply
        let messages = vec![
            msg(System, "s", None),
            msg(User, "hi", None),
            msg(Assistant, "scripted", Some(0)),
            msg(User, "q", None),
            msg(Assistant, "<call a>", Some(0)),
            msg(Tool, "ra", None),
            msg(Assistant, "<call b><call c>", None),
            msg(Tool, "rb", None),
            msg(Tool, "rc", None),
            msg(Assistant, "reply", None),
        ];
        let calls = vec![call("a"), call("b"), call("c")];
        let (m, c) = first_turn(messages.clone(), calls.clone());
        assert_eq!(m, messages[..7].to_vec());
        assert_eq!(c, calls);
        // a reply with no call: the whole trajectory
        let plain = vec![
            msg(System, "s", None),
            msg(User, "hi", None),
            msg(Assistant, "hey", None),
        ];
        assert_eq!(first_turn(plain.clone(), vec![]), (plain.clone(), vec![]));
        // a call then a reply: the call stays, the reply and result go
        let two = vec![
            msg(System, "s", None),
            msg(User, "q", None),
            msg(Assistant, "<call a>", None),
            msg(Tool, "ra", None),
            msg(Assistant, "reply", None),
        ];
        let (m, c) = first_turn(two.clone(), vec![call("a")]);
        assert_eq!((m, c), (two[..3].to_vec(), vec![call("a")]));
    }
}
