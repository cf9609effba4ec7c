//! One episode in progress, on a thread of its own: the thread owns the episode's world and
//! drives the agent loop's [`Episode`] one model turn at a time, as the HTTP handlers feed it.
//! (An episode borrows its harness and world, so it lives where they live.)

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use serde_json::Value;

use hat_agent::episode::{CallCheck, Episode, EpisodeConfig};
use hat_harness::Message;
use hat_tasks::{expect, score, Expectations, Task, TaskError};
use hat_world::World;

use crate::Catalogue;

/// What the trainer sees after a reset or a step.
#[derive(Debug, Clone, Serialize)]
pub struct Observation {
    /// Messages added since the last observation: the prompt after a reset; after a step, the
    /// tool results or runtime feedback the turn produced (empty when the episode ended).
    pub messages: Vec<Message>,
    pub done: bool,
    /// At the end: the scorer's verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Verdict>,
}

/// The scorer's verdict on a finished episode.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// Fraction of the scorer's components that passed (the RL reward of `hat train rl`).
    pub reward: f64,
    pub pass: bool,
    pub components: serde_json::Map<String, Value>,
    pub reason: String,
    /// The reply the viewers saw (after hooks), and every tool call as written.
    pub reply: String,
    pub calls: Value,
    pub turns: usize,
}

pub(crate) enum Cmd {
    Step(
        String,
        tokio::sync::oneshot::Sender<Result<Observation, String>>,
    ),
    /// Is the episode still open? (a send that fails says it is not)
    Ping,
}

/// Draws in a row that may find no task runnable under its state before a random reset gives
/// up (as `hat train rl` does).
pub const MAX_DRAWS: usize = 100;

/// The task and harness state a reset asked for; what it left out is drawn from `rng`.
pub(crate) struct Pick {
    pub task: Option<usize>,
    pub state: Option<usize>,
    pub rng: ChaCha8Rng,
}

/// The first observation of an episode, with the task and state it runs.
pub(crate) struct Started {
    pub obs: Observation,
    pub task: usize,
    pub state: usize,
}

/// Resolves `pick` to a task and a state the harness can run, with the task's world and gold.
/// A task kind can be impossible under a state (a shipping question when the state has no
/// shipping tool): what the client left out is drawn again, up to [`MAX_DRAWS`] times, so a
/// random reset never fails for it; a task and state the client named get the error.
fn choose(cat: &Catalogue, mut pick: Pick) -> Result<(usize, usize, World, Expectations), String> {
    let (n_tasks, n_states) = (cat.tasks.len(), cat.states.len());
    let drawn = pick.task.is_none() || pick.state.is_none();
    let mut last = String::new();
    for _ in 0..if drawn { MAX_DRAWS } else { 1 } {
        let task = pick.task.unwrap_or_else(|| pick.rng.gen_range(0..n_tasks));
        let state = pick
            .state
            .unwrap_or_else(|| pick.rng.gen_range(0..n_states));
        let t = &cat.tasks[task];
        let world = World::generate(t.world_seed)
            .map_err(|e| format!("building the world of task {}: {e}", t.id))?;
        match expect(t, &cat.states[state].harness, &world) {
            Ok(exp) => return Ok((task, state, world, exp)),
            Err(e @ TaskError::NotApplicable(_)) if drawn => {
                last = format!("task {} under state {state}: {e}", t.id)
            }
            Err(e) => return Err(format!("task {} under state {state}: {e}", t.id)),
        }
    }
    Err(format!(
        "{MAX_DRAWS} draws in a row found no task the harness state can run (the last: {last}); \
         name a task and a state (GET /v1/info), or check the harness with `hat harness check`"
    ))
}

/// Runs one episode: sends the first observation on `first`, then one per step.
pub(crate) fn run(
    cat: Arc<Catalogue>,
    pick: Pick,
    max_turns: usize,
    idle: Duration,
    rx: Receiver<Cmd>,
    first: tokio::sync::oneshot::Sender<Result<Started, String>>,
) {
    let (task, state, world, exp) = match choose(&cat, pick) {
        Ok(c) => c,
        Err(e) => {
            let _ = first.send(Err(e));
            return;
        }
    };
    let t: &Task = &cat.tasks[task];
    let h = &cat.states[state].harness;
    let cfg = EpisodeConfig {
        max_turns,
        keep_changes: false,
        // an external trainer learns from what the model chose unconstrained
        final_reply: false,
        calls: CallCheck::Free,
    };
    let mut ep = match Episode::start(t.scene(), h, &world, cfg) {
        Ok(e) => e,
        Err(e) => {
            let _ = first.send(Err(e.to_string()));
            return;
        }
    };
    let mut seen = ep.messages().len();
    let obs = Observation {
        messages: ep.messages().to_vec(),
        done: ep.is_done(),
        result: None,
    };
    let done = obs.done;
    if first.send(Ok(Started { obs, task, state })).is_err() || done {
        return;
    }
    // idle time counts from the last step (pings do not extend it); an idle time past what
    // Instant can hold (an embedder's Duration::MAX) means "never", not a panic
    let after_idle = || Instant::now().checked_add(idle);
    let mut deadline = after_idle();
    loop {
        let got = match deadline {
            Some(d) => rx.recv_timeout(d.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        let (text, reply) = match got {
            Ok(Cmd::Step(text, reply)) => {
                deadline = after_idle();
                (text, reply)
            }
            Ok(Cmd::Ping) => continue,
            // idle too long, or the server dropped the session: the episode rolls back
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return,
        };
        if let Err(e) = ep.feed(text) {
            let _ = reply.send(Err(e.to_string()));
            return;
        }
        if !ep.is_done() {
            // the turn's own message is the trainer's; what follows is the environment's
            let new = ep.messages()[seen + 1..].to_vec();
            seen = ep.messages().len();
            let _ = reply.send(Ok(Observation {
                messages: new,
                done: false,
                result: None,
            }));
            continue;
        }
        let traj = match ep.finish() {
            Ok(t) => t,
            Err(e) => {
                let _ = reply.send(Err(e.to_string()));
                return;
            }
        };
        let s = score(&exp, h, &traj.attempt);
        let verdict = Verdict {
            reward: s.fraction(),
            pass: s.pass,
            components: s
                .components
                .iter()
                .map(|c| (c.name.to_string(), Value::Bool(c.pass)))
                .collect(),
            reason: s.reason(),
            reply: traj.attempt.reply.clone(),
            calls: serde_json::to_value(&traj.attempt.calls).unwrap_or_default(),
            turns: traj.turns.len(),
        };
        let _ = reply.send(Ok(Observation {
            messages: Vec::new(),
            done: true,
            result: Some(verdict),
        }));
        return;
    }
}
