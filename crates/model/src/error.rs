//! The one error type of the model engine.

use std::path::PathBuf;

/// Everything that can go wrong while loading, tokenising or generating.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The model file or folder does not exist.
    #[error("model not found: {0} (run `hat model fetch` for the default model)")]
    ModelNotFound(PathBuf),
    /// The model file exists but cannot be parsed.
    #[error("corrupt or unreadable model file {path}: {reason}")]
    CorruptModel { path: PathBuf, reason: String },
    /// The architecture named in the file is not llama or qwen2.
    #[error("unsupported architecture `{0}` (supported: llama, qwen2)")]
    UnsupportedArchitecture(String),
    /// A required metadata key or tensor is absent.
    #[error("missing {0}")]
    Missing(String),
    /// The prompt does not fit in the context window.
    #[error("prompt of {prompt} tokens plus {max_new_tokens} new tokens exceeds the context length {context}")]
    ContextOverflow {
        prompt: usize,
        max_new_tokens: usize,
        context: usize,
    },
    /// A sampling parameter is out of range.
    #[error("invalid sampling parameter: {0}")]
    InvalidSampling(String),
    /// Any other invalid argument.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Tokenizer construction or use failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// Chat template parsing or rendering failed.
    #[error("chat template: {0}")]
    ChatTemplate(String),
    /// Downloading or extracting the default model failed.
    #[error("fetch: {0}")]
    Fetch(String),
    /// A downloaded file does not have the expected hash.
    #[error("checksum mismatch for {path}: expected sha256 {expected}, got {actual}")]
    Checksum {
        path: PathBuf,
        expected: String,
        actual: String,
    },
    /// Tensor library error.
    #[error("tensor: {0}")]
    Candle(#[from] candle_core::Error),
    /// I/O error.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// JSON error.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;
