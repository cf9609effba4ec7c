//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong while configuring checks or reading and writing files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IfevalError {
    /// The instruction id is not one of the 25 registered IFEval instructions.
    #[error("unknown instruction id `{id}`")]
    UnknownInstruction { id: String },
    /// A required argument of an instruction is absent (or `null`).
    #[error("instruction `{id}`: missing argument `{arg}`")]
    MissingArgument { id: String, arg: &'static str },
    /// An argument has the wrong type or an unsupported value.
    #[error("instruction `{id}`: invalid argument `{arg}`: {reason}")]
    InvalidArgument {
        id: String,
        arg: String,
        reason: String,
    },
    /// An argument that the instruction does not take (upstream raises `TypeError`).
    #[error("instruction `{id}`: unexpected argument `{arg}`")]
    UnexpectedArgument { id: String, arg: String },
    /// `instruction_id_list` and `kwargs` differ in length.
    #[error("{ids} instruction ids but {kwargs} kwargs objects")]
    KwargsLength { ids: usize, kwargs: usize },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A line of a JSON-lines file is not a valid record.
    #[error("{}:{line}: {source}", path.display())]
    Json {
        path: PathBuf,
        line: usize,
        source: serde_json::Error,
    },
    /// A record parsed as JSON but describes invalid instructions.
    #[error("{}:{line}: {source}", path.display())]
    Record {
        path: PathBuf,
        line: usize,
        source: Box<IfevalError>,
    },
    /// Serialising results failed.
    #[error("serialising results: {0}")]
    Serialize(#[from] serde_json::Error),
}
