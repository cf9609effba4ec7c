//! Teachers: what writes the trajectories HAT trains on.
//!
//! - [`oracle`]: the gold trajectory of any task under any harness state.
//! - [`openai`]: any OpenAI-compatible chat endpoint (a large model, vLLM,
//!   SGLang, llama.cpp's server) running the same episode loop, with
//!   rejection sampling through the scorer.
//! - [`episode`]: that loop, shared with evaluation and serving.
//! - [`jsonl`]: the logs its drivers append to, and recovering a cut-off write.

pub mod episode;
pub mod jsonl;
pub mod openai;
pub mod oracle;

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
pub enum TeacherError {
    #[error(transparent)]
    Harness(#[from] hat_harness::HarnessError),
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
