//! The conversation a task presents under a harness state: system prompt
//! (with the stream state), earlier turns, and the event's user turn.

use serde_json::{json, Map, Value};

use hat_harness::render::render_turn;
use hat_harness::text::{viewer_text, ViewerLimits};
use hat_harness::{Backend, Harness, HarnessError, Message, Op};
use hat_world::World;

use crate::task::{event_kind, event_line_with, event_vars, Task, Turn};
use hat_world::Event;

/// What the host faces at one turn: an event in a stream, with what came before.
/// A task is a scene plus gold; `hat run` and serving build scenes directly.
#[derive(Debug, Clone, Copy)]
pub struct Scene<'a> {
    pub id: &'a str,
    pub event: &'a Event,
    /// Product id on stage.
    pub on_stage: &'a str,
    pub history: &'a [Turn],
    pub recent: &'a [String],
}

impl Task {
    pub fn scene(&self) -> Scene<'_> {
        Scene {
            id: &self.id,
            event: &self.event,
            on_stage: &self.on_stage,
            history: &self.history,
            recent: &self.recent,
        }
    }
}

/// The stream state the prompt shows for a scene: the world's state with the
/// scene's product on stage and its recent activity.
pub fn stream_value(task: &Scene, world: &World) -> Value {
    stream_value_with(task, world, ViewerLimits::default())
}

/// [`stream_value`] with a harness's limits on viewer text.
pub fn stream_value_with(task: &Scene, world: &World, limits: ViewerLimits) -> Value {
    let mut v = serde_json::to_value(world.stream_state()).unwrap_or_else(|_| json!({}));
    let cat = world.catalog();
    if let (Some(p), Some(obj)) = (cat.product(task.on_stage), v.as_object_mut()) {
        obj.insert(
            "on_stage".into(),
            json!({"id": p.id, "title": p.title, "link": p.link, "price": p.price.as_f64()}),
        );
        obj.insert("currency_symbol".into(), json!(cat.stream.currency_symbol));
        // Recent lines carry viewer names: shown like every other viewer text.
        let recent: Vec<String> = task
            .recent
            .iter()
            .map(|l| viewer_text(l, limits.comment))
            .collect();
        obj.insert("recent".into(), json!(recent));
    }
    v
}

/// Where [`prompt`] puts a scene's scripted earlier replies: after the system prompt, each
/// history turn is a viewer message and a reply.
pub fn scripted_replies(history: usize) -> impl Iterator<Item = usize> {
    (0..history).map(|i| 2 + 2 * i)
}

/// The system prompt a scene opens with under `harness` (the stream's state: what is on
/// stage, its recent activity; not the event, which comes in the turn after it).
pub fn system_prompt(
    task: &Scene,
    harness: &Harness,
    world: &World,
) -> Result<String, HarnessError> {
    harness.render_system(&stream_value_with(task, world, harness.viewer_limits()))
}

/// What a scene's prompt opens with before its event: the system prompt and the history
/// turns (a viewer message and a reply each). A server computes it ahead of the next event.
pub fn opening(
    task: &Scene,
    harness: &Harness,
    world: &World,
) -> Result<Vec<Message>, HarnessError> {
    let system = system_prompt(task, harness, world)?;
    let mut msgs = Vec::with_capacity(2 + task.history.len() * 2);
    msgs.push(Message::system(system));
    for t in task.history {
        msgs.push(Message::user(t.user.clone()));
        msgs.push(Message::assistant(t.assistant.clone()));
    }
    Ok(msgs)
}

/// System, history and user messages for a scene under `harness`: [`opening`], then the
/// event.
pub fn prompt(
    task: &Scene,
    harness: &Harness,
    world: &World,
) -> Result<Vec<Message>, HarnessError> {
    let limits = harness.viewer_limits();
    let mut msgs = opening(task, harness, world)?;
    let notes = harness.inject_notes(event_kind(task.event), &event_vars(task.event, limits));
    msgs.push(Message::user(render_turn(
        &event_line_with(task.event, limits),
        &notes,
    )));
    Ok(msgs)
}

/// The world as the harness's dispatch backend.
pub struct StoreBackend<'a>(pub &'a World);

impl Backend for StoreBackend<'_> {
    fn call(&self, op: Op, args: &Map<String, Value>) -> Result<Value, String> {
        self.0.call(op, args).map_err(|e| e.to_string())
    }
}
