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

/// Line `i` (0-based) of the JSON-lines file `path`, as `BufRead::lines` gave it: a line that
/// is not UTF-8 is that line's error (named by number), any other failure the file's.
pub(crate) fn jsonl_line(
    path: &std::path::Path,
    i: usize,
    line: std::io::Result<String>,
) -> Result<String, DataError> {
    line.map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData => DataError::Parse {
            file: path.display().to_string(),
            line: i + 1,
            message: "not UTF-8 text: save the file as UTF-8".into(),
        },
        _ => DataError::Io(path.display().to_string(), e),
    })
}
