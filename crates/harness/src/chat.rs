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
        }
    }
    pub fn user(c: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: c.into(),
            name: None,
        }
    }
    pub fn assistant(c: impl Into<String>) -> Self {
        Message {
            role: Role::Assistant,
            content: c.into(),
            name: None,
        }
    }
    pub fn tool(name: impl Into<String>, c: impl Into<String>) -> Self {
        Message {
            role: Role::Tool,
            content: c.into(),
            name: Some(name.into()),
        }
    }
}
