//! Teachers: what writes the trajectories HAT trains on.
//!
//! - [`oracle`]: the gold trajectory of any task under any harness state, and
//!   [`oracle::OracleActor`], the oracle as an actor of the shared driver
//!   (`hat_agent::driver`).
//! - [`openai`]: any OpenAI-compatible chat endpoint (a large model, vLLM,
//!   SGLang, llama.cpp's server) as a [`ChatModel`](hat_agent::episode::ChatModel)
//!   of the agent loop, with rejection sampling through the scorer.

pub mod openai;
pub mod oracle;
