//! Chat messages in the shape common trainers read (`role`, `content`, and
//! `name` on tool results).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
    /// The tool's name, on `tool` messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// On assistant messages, whether a trainer learns from it: `0` keeps the message out of
    /// the loss (it is context, like a tool result), absent or `1` trains on it. The field and
    /// its meaning are OpenAI's fine-tuning format's; a detour the teacher takes on purpose
    /// (`hat data gen --recovery`) is written with weight 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Message {
    pub fn system(c: impl Into<String>) -> Self {
        Message {
            role: Role::System,
            content: c.into(),
            name: None,
            weight: None,
        }
    }
    pub fn user(c: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: c.into(),
            name: None,
            weight: None,
        }
    }
    pub fn assistant(c: impl Into<String>) -> Self {
        Message {
            role: Role::Assistant,
            content: c.into(),
            name: None,
            weight: None,
        }
    }
    /// The same message, kept out of the training loss (`weight: 0`).
    pub fn untrained(self) -> Self {
        Message {
            weight: Some(0),
            ..self
        }
    }
    /// Whether a trainer learns from this message: assistant messages not marked `weight: 0`.
    pub fn trained(&self) -> bool {
        self.role == Role::Assistant && self.weight != Some(0)
    }
    pub fn tool(name: impl Into<String>, c: impl Into<String>) -> Self {
        Message {
            role: Role::Tool,
            content: c.into(),
            name: Some(name.into()),
            weight: None,
        }
    }
}

/// Whether message `k` opens a detour: an untrained assistant turn answered by tools (a
/// `hat data gen --recovery` wrong call). An untrained turn answered by a viewer is a scene's
/// scripted history instead.
pub fn opens_detour(messages: &[Message], k: usize) -> bool {
    messages[k].role == Role::Assistant
        && !messages[k].trained()
        && messages.get(k + 1).is_some_and(|n| n.role == Role::Tool)
}
