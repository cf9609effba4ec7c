//! HAT training: trajectories become tokens with an assistant-only loss ([`tokens`]),
//! conversations sharing a prompt prefix are packed into one sequence ([`pack`]), and one
//! training loop ([`sft`]) runs the model crate's [`hat_model::train::TrainModel`] with
//! AdamW ([`optim`]), checkpoints that resume exactly ([`checkpoint`]) and export to GGUF
//! ([`export`]).

pub mod bench;
pub mod checkpoint;
pub mod config;
pub mod error;
pub mod export;
pub mod optim;
pub mod pack;
pub mod sft;
pub mod tokens;

pub use error::{Result, TrainError};
