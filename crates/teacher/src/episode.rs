//! The episode loop: prompt -> generate -> parse calls -> validate -> dispatch
//! -> hooks -> feed results back -> reply -> reply hooks (retry with feedback).
//!
//! Every failure a model can produce (unparseable calls, unknown tools, bad
//! arguments, endless tool rounds) is bounded and recorded, never a crash.

use hat_harness::{Harness, HookDecision, Message, ReplyReview};
use hat_tasks::episode::{prompt, Scene, StoreBackend};
use hat_tasks::task::{event_kind, event_vars};
use hat_tasks::Attempt;
use hat_world::World;

use crate::{TeacherError, Trajectory};

/// Anything that continues a chat: a remote endpoint, the embedded model, a script.
pub trait ChatModel {
    fn complete(&mut self, messages: &[Message]) -> Result<String, TeacherError>;
}

#[derive(Debug, Clone, Copy)]
pub struct EpisodeConfig {
    /// Model turns at most, tool rounds and retries included.
    pub max_turns: usize,
}

impl Default for EpisodeConfig {
    fn default() -> Self {
        EpisodeConfig { max_turns: 5 }
    }
}

/// Runs one scene (a task's, or a live event's) to the end with `model`.
pub fn run(
    task: &Scene,
    harness: &Harness,
    world: &World,
    model: &mut dyn ChatModel,
    cfg: EpisodeConfig,
) -> Result<Trajectory, TeacherError> {
    let mut messages = prompt(task, harness, world)?;
    let vars = event_vars(task.event);
    let mut log: Vec<HookDecision> = Vec::new();
    let mut attempt = Attempt::default();
    let outcome = harness.on_event(
        event_kind(task.event),
        &serde_json::to_value(task.event).unwrap_or_default(),
        &vars,
        &mut log,
    );
    if let Some(reason) = outcome.blocked {
        attempt
            .format_errors
            .push(format!("event blocked by a hook: {reason}"));
        return Ok(Trajectory {
            task_id: task.id.to_string(),
            messages,
            attempt,
            hook_log: log,
        });
    }
    world
        .begin_episode()
        .map_err(|e| TeacherError::World(e.to_string()))?;
    let backend = StoreBackend(world);
    let mut retries = 0;
    let result = (|| -> Result<(), TeacherError> {
        for turn in 0..cfg.max_turns {
            let out = model.complete(&messages)?;
            messages.push(Message::assistant(out.clone()));
            let parsed = match harness.syntax.parse(&out) {
                Ok(p) => p,
                Err(e) => {
                    attempt.format_errors.push(format!("turn {turn}: {e}"));
                    messages.push(Message::user(format!("[runtime] Your tool call could not be parsed: {e}. Write it again in the required format, or reply to the viewer.")));
                    continue;
                }
            };
            if !parsed.calls.is_empty() {
                let max = harness.max_calls();
                if parsed.calls.len() > max {
                    attempt.format_errors.push(format!(
                        "turn {turn}: {} calls, at most {max} allowed",
                        parsed.calls.len()
                    ));
                }
                for c in parsed.calls.into_iter().take(max) {
                    let d = harness.dispatch(&c, &backend, &mut log);
                    messages.push(Message::tool(c.name.clone(), d.result.to_string()));
                    attempt.calls.push(c);
                }
                continue;
            }
            match harness.review_reply(&parsed.text, &vars, retries, &mut log) {
                ReplyReview::Retry(feedback) => {
                    retries += 1;
                    messages.push(Message::user(format!("[runtime] {feedback}")));
                }
                ReplyReview::Accept(reply) => {
                    if let Some(last) = messages.last_mut() {
                        last.content = reply.clone();
                    }
                    attempt.reply = reply;
                    return Ok(());
                }
            }
        }
        attempt
            .format_errors
            .push(format!("no reply after {} model turns", cfg.max_turns));
        Ok(())
    })();
    world
        .end_episode()
        .map_err(|e| TeacherError::World(e.to_string()))?;
    result?;
    Ok(Trajectory {
        task_id: task.id.to_string(),
        messages,
        attempt,
        hook_log: log,
    })
}
