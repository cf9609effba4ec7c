//! One dataset line: a chat-format trajectory that common trainers read as
//! is (TRL's `messages` + `tools`, verl's chat datasets), plus the identity of
//! the harness state and task it came from. Assistant turns that are context, not
//! the teacher's work (a scene's scripted earlier turns, a `--recovery` detour),
//! carry `"weight": 0` as OpenAI's fine-tuning format has it; trainers that do not
//! read the key (TRL) would learn them, so drop or mask those turns there.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use hat_harness::{Message, ToolCall};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub messages: Vec<Message>,
    /// The harness's tools in OpenAI function-calling form.
    pub tools: Value,
    pub harness_name: String,
    pub harness_hash: String,
    /// Index of the harness state among the generated variants (`base` for the unaugmented one).
    pub variant: String,
    pub call_syntax: String,
    pub task_id: String,
    pub task_type: String,
    pub split: String,
    pub lang: String,
    /// The calls the trajectory makes, parsed (the text form is in `messages`).
    pub calls: Vec<ToolCall>,
    pub teacher: String,
    /// Scorer verdict: component name -> passed.
    pub score: Value,
}
