//! The one error type of the trainer.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    #[error("{file}:{line}: {message}")]
    Data {
        file: String,
        line: usize,
        message: String,
    },
    #[error(
        "the chat template is not prefix-preserving at message {message} of {sample}: rendering \
         the conversation up to that message does not give a token prefix of the full rendering, \
         so assistant tokens cannot be located exactly (use a template whose earlier turns do not \
         change when later ones are added)"
    )]
    NotPrefixPreserving { sample: String, message: usize },
    #[error(
        "{sample} has {tokens} tokens, more than the {limit} a sequence may hold (in SFT: raise \
         `pack.max_tokens` as far as the model's context allows, or set `on_too_long = \"drop\"` \
         to skip such samples and count them)"
    )]
    TooLong {
        sample: String,
        tokens: usize,
        limit: usize,
    },
    #[error("{path}: {message}")]
    Config { path: String, message: String },
    #[error("checkpoint {path}: {message}")]
    Checkpoint { path: PathBuf, message: String },
    #[error(
        "the loss became {value} at step {step}; the run stopped and its last good checkpoint is \
         kept (lower the learning rate or raise warmup, then `--resume`)"
    )]
    Diverged { step: usize, value: f32 },
    #[error(
        "the run is at step {step}, past --max-steps {max_steps}: a resumed run can be extended, \
         not shortened (give --max-steps {step} or more, or start a new run folder)"
    )]
    Shortened { step: usize, max_steps: usize },
    #[error(
        "{} already holds a run (checkpoint {checkpoint}): add --resume to continue it, or give \
         another --out (a new run here would overwrite its config and metrics, and its \
         checkpoints would prune the new run's)",
        out.display()
    )]
    RunExists { out: PathBuf, checkpoint: String },
    #[error(
        "{} holds a finished run's model ({}) but no checkpoints to resume from (`hat train \
         pipeline` removes them unless keep_checkpoints = true): a run here would start again \
         from step 0 and replace that model; to train it further, give --model {} and a new \
         --out (to redo a pipeline stage, delete its folder and resume the pipeline)",
        out.display(),
        model.display(),
        model.display()
    )]
    CheckpointsGone { out: PathBuf, model: PathBuf },
    #[error("{0}")]
    Invalid(String),
    /// A soup member too far from the others to share their start ([`crate::merge::soup`]).
    #[error(
        "`{name}` lies {distance:.2} (relative L2) from {from}, more than {max}: it does not look \
         like a fine-tune of the same start (fine-tunes of one start lie a few hundredths apart) \
         and would average into noise; soup runs that started from one model"
    )]
    OtherStart {
        name: String,
        distance: f64,
        from: String,
        max: f64,
    },
    #[error("rollout: {0}")]
    Rollout(String),
    #[error("model: {0}")]
    Model(#[from] hat_model::Error),
    #[error("tensor: {0}")]
    Candle(#[from] candle_core::Error),
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}

pub type Result<T> = std::result::Result<T, TrainError>;

/// Wraps an I/O error with the path it happened on.
pub(crate) fn io(path: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> TrainError {
    let path = path.to_string();
    move |source| TrainError::Io { path, source }
}

impl From<hat_agent::AgentError> for TrainError {
    fn from(e: hat_agent::AgentError) -> Self {
        TrainError::Rollout(e.to_string())
    }
}
