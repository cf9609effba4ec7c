//! One episode in progress, on a thread of its own: the thread owns the episode's world and
//! drives the agent loop's [`Episode`] one model turn at a time, as the HTTP handlers feed it.
//! (An episode borrows its harness and world, so it lives where they live.)

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use hat_agent::episode::{CallCheck, Episode, EpisodeConfig};
use hat_harness::Message;
use hat_tasks::{expect, score, Task};
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

/// Runs one episode: sends the first observation on `first`, then one per step.
pub(crate) fn run(
    cat: Arc<Catalogue>,
    task: usize,
    state: usize,
    max_turns: usize,
    idle: Duration,
    rx: Receiver<Cmd>,
    first: tokio::sync::oneshot::Sender<Result<Observation, String>>,
) {
    let t: &Task = &cat.tasks[task];
    let h = &cat.states[state].harness;
    let world = match World::generate(t.world_seed) {
        Ok(w) => w,
        Err(e) => {
            let _ = first.send(Err(format!("building the task's world: {e}")));
            return;
        }
    };
    let exp = match expect(t, h, &world) {
        Ok(e) => e,
        Err(e) => {
            let _ = first.send(Err(format!("task {} under state {state}: {e}", t.id)));
            return;
        }
    };
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
    if first.send(Ok(obs)).is_err() || ep.is_done() {
        return;
    }
    // idle time counts from the last step (pings do not extend it)
    let mut deadline = Instant::now() + idle;
    loop {
        let wait = deadline.saturating_duration_since(Instant::now());
        let (text, reply) = match rx.recv_timeout(wait) {
            Ok(Cmd::Step(text, reply)) => {
                deadline = Instant::now() + idle;
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
