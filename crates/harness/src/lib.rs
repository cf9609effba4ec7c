//! The harness runtime (format v1, see `shared/specs/harness-format.md` and
//! `docs/harness-format.md`).
//!
//! A harness state is a folder of files (manifest, skills, tools, hooks,
//! optional template). This crate loads it ([`Harness::load`]) collecting every
//! problem, hashes it, renders the system prompt deterministically, writes and
//! parses tool calls in four syntaxes, validates arguments against each tool's
//! JSON Schema, binds calls to canonical operations ([`Op`]) and runs hooks.
//! It knows nothing about the store: dispatch goes through [`Backend`].

pub mod binding;
pub mod call_grammar;
pub mod chat;
pub mod command;
pub mod files;
pub mod harness;
pub mod hooks;
pub mod op;
pub mod problem;
pub mod render;
pub mod schema_lint;
pub mod schema_refs;
pub mod spec;
pub mod syntax;
pub mod text;

pub use binding::Target;
pub use call_grammar::CallGrammar;
pub use chat::{Message, Role};
pub use harness::{content_hash, Backend, Dispatched, Harness, ReplyConstraints};
pub use hooks::{EventKind, HookDecision, ReplyReview};
pub use op::{ArgKind, ArgSpec, Op};
pub use problem::{HarnessError, Problem};
pub use spec::HarnessSpec;
pub use syntax::{CallSyntax, ParseError, Parsed, ToolCall};
