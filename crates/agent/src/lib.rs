//! The agent loop, and the driver that runs tasks through it.
//!
//! - [`episode`]: the loop — prompt, generate, parse calls, validate, dispatch, hooks, feed
//!   results back, reply, reply hooks (retry with feedback) — as a state machine any
//!   [`ChatModel`](episode::ChatModel) drives; one episode or many in lockstep.
//! - [`driver`]: task -> gold -> episode -> score, batched across worlds; the one path data
//!   generation, evaluation and RL rollouts share. Serving and `hat run` drive live scenes
//!   through [`episode`] directly.
//! - [`jsonl`]: the logs the drivers append to, and recovering a cut-off write.
//!
//! Models live elsewhere: the embedded engine in `hat-local-model`, OpenAI-compatible
//! endpoints and the oracle in `hat-teacher`.

pub mod driver;
pub mod episode;
pub mod jsonl;

use serde::Serialize;

use hat_harness::{HookDecision, Message, Op};
use hat_tasks::Attempt;

/// A finished episode: the conversation and what the agent did.
#[derive(Debug, Clone, Serialize)]
pub struct Trajectory {
    pub task_id: String,
    pub messages: Vec<Message>,
    pub attempt: Attempt,
    pub hook_log: Vec<HookDecision>,
    /// Each model turn as generated (token ids, log-probabilities, timing); empty for the
    /// oracle, which writes its messages directly.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<episode::Completion>,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    #[error(transparent)]
    Harness(#[from] hat_harness::HarnessError),
    #[error(transparent)]
    Task(#[from] hat_tasks::TaskError),
    #[error("the harness has no tool bound to op `{0}`")]
    NoTool(Op),
    #[error("{0}")]
    Gold(String),
    #[error("world: {0}")]
    World(String),
    #[error("chat endpoint {url}: {message}")]
    Endpoint { url: String, message: String },
    #[error("model: {0}")]
    Model(String),
    #[error(
        "environment variable {0} is not set; export the API key there or pass --api-key-env NAME"
    )]
    MissingKey(String),
}
