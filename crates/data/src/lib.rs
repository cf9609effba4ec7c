//! Trajectory datasets for HAT's training stages.
//!
//! [`gen`] runs the train split's tasks over the base harness and augmented
//! harness states with a teacher, keeps what the scorer passes and writes
//! chat-format JSONL ([`record::Record`]); [`stats`] summarises a file.

pub mod gen;
pub mod record;
pub mod stats;

pub use gen::{generate, states, GenConfig, GenReport, Teacher};
pub use record::Record;
pub use stats::Stats;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{file}:{line}: not a dataset record: {message}")]
    Parse {
        file: String,
        line: usize,
        message: String,
    },
    #[error(transparent)]
    Augment(#[from] hat_augment::AugmentError),
    #[error(transparent)]
    Harness(#[from] hat_harness::HarnessError),
    #[error(transparent)]
    Task(#[from] hat_tasks::TaskError),
    #[error(transparent)]
    Teacher(#[from] hat_agent::AgentError),
    #[error("{0}")]
    Usage(String),
    #[error("cannot serialise a record: {0}")]
    Json(#[from] serde_json::Error),
}
