//! Evaluation: Live-Stream QA (`lsqa`, the production harness on test tasks),
//! Harness-Variant QA (`hvqa`, the same kind of tasks under held-out harness
//! states) and IFEval (general instruction following).
//!
//! Agent suites run through the same episode loop as data generation and
//! serving ([`hat_agent::episode`]) and are scored by the same scorer that
//! is the RL reward. Runs are resumable; `results.json` records scores,
//! per-component and per-task-type breakdowns, the model's identity and
//! decoding settings, the harness hashes and the wall time.

pub mod failures;
pub mod gate;
pub mod run;
pub mod suite;

pub use run::{
    compare, load_results, run_agent, run_ifeval, Backend, EvalConfig, ModelIdentity, SuiteSummary,
};
pub use suite::Suite;

use std::path::Path;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    #[error("{0}")]
    Usage(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{file}:{line}: {message}")]
    Parse {
        file: String,
        line: usize,
        message: String,
    },
    #[error(transparent)]
    Harness(#[from] hat_harness::HarnessError),
    #[error(transparent)]
    Augment(#[from] hat_augment::AugmentError),
    #[error(transparent)]
    Task(#[from] hat_tasks::TaskError),
    #[error(transparent)]
    Teacher(#[from] hat_agent::AgentError),
    #[error(transparent)]
    Ifeval(#[from] hat_ifeval::IfevalError),
}

impl EvalError {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        EvalError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}
