//! A/B experiments: which model and harness version sells better, measured honestly.
//!
//! - [`config`]: an experiment file: arms (a model and a harness each), the assignment unit,
//!   the traffic split, the error level, the simulated audience and its behaviour model.
//! - [`assign`]: a unit (viewer or stream) to an arm by a stable hash with the seed.
//! - [`behaviour`]: the documented, seeded model of what a simulated viewer does after the
//!   host answers (item-page view, add to cart, purchase), from the scorer's verdict, a
//!   compliance incident and the latency. Simulated GMV is a stand-in for real traffic, not
//!   evidence about it.
//! - [`sim`]: runs each arm on its viewers through the one agent loop and driver.
//! - [`stats`]: the difference of means with a Welch, a bootstrap and an always-valid
//!   (peeking-safe) interval; only the last decides significance.
//! - [`report`]: per metric and arm, as JSON and Markdown.

pub mod assign;
pub mod behaviour;
pub mod config;
pub mod report;
pub mod sim;
pub mod stats;

use std::path::PathBuf;

pub use config::{Arm, Experiment, Unit};
pub use report::{report, Report};
pub use sim::{run, Audience, ViewerRecord};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AbError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{origin}{}: {message}", .line.map(|l| format!(", line {l}")).unwrap_or_default())]
    Config {
        origin: String,
        line: Option<usize>,
        message: String,
    },
    #[error("arm `{arm}`: {message}")]
    Arm { arm: String, message: String },
    #[error(transparent)]
    Task(#[from] hat_tasks::TaskError),
    #[error(transparent)]
    Agent(#[from] hat_agent::AgentError),
}
