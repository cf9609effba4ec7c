//! `hat serve`: the live-stream server.
//!
//! The compact agent hosts live streams: viewers' events arrive over HTTP, are triaged per
//! stream ([`triage`]), and are answered by the agent loop on one engine worker
//! ([`worker`]) that batches streams together; the host's output (turns, tool results, hook
//! decisions, replies with their harness hash and latency breakdown) goes out over SSE.
//! Tool changes persist per stream in SQLite ([`stream`]). Operators swap the harness live,
//! roll it back, or let the server watch a folder ([`harnesses`]); an invalid harness never
//! replaces a valid one. `/v1/chat/completions` speaks the OpenAI protocol, and the model
//! behind it all is any [`hat_agent::episode::ChatModel`]: the embedded engine, or an
//! OpenAI-compatible endpoint (vLLM, SGLang, llama.cpp's server) for scale-out.
//!
//! Routes are declared in one place, [`api`].

pub mod api;
pub mod app;
pub mod bench;
pub mod edit;
pub mod error;
pub mod experiments;
pub mod harnesses;
pub mod metrics;
pub mod runs;
pub mod stream;
pub mod triage;
pub mod worker;

pub use app::{App, Background, ServeConfig, Server};
pub use error::{Result, ServeError};
pub use harnesses::{load_dir, Version};
