//! `hat train pipeline`: the whole HAT recipe as one resumable run. Trajectories (`hat data
//! gen`) and optional replay data (`hat data replay`), stage 1 HSA-SFT, stage 2 on-policy
//! distillation, stage 3 HSA-RL, each stage starting from the one before; an evaluation (lsqa,
//! hvqa, ifeval) after each stage; one report (`report.md`, `report.json`) with every stage's
//! scores and cost, and every stage's curves in one PNG (`curves.png`).
//!
//! Interrupted anywhere, the same command continues: finished stages are skipped (a
//! `stage.json` marks them), a stage in progress resumes from its last checkpoint, data
//! generation and evaluations from their last written line.

pub mod config;
mod run;

pub use config::{DataSection, EvalSection, PipelineConfig, ReplaySection, PRESETS};
pub use run::{run, Progress, ReplayRow, Report, StageRow};

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("pipeline config {path}: {message}")]
    Config { path: String, message: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("stage {stage}: {source}")]
    Train {
        stage: &'static str,
        source: hat_train::TrainError,
    },
    #[error("data: {0}")]
    Data(#[from] hat_data::DataError),
    #[error("evaluation after {stage}: {message}")]
    Eval { stage: String, message: String },
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}
