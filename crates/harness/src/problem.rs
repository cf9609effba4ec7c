//! Validation problems and the crate's error type.
//!
//! Loading a harness collects *every* problem it can find (file, line where
//! known, plain explanation) instead of stopping at the first, so an operator
//! fixes a broken harness in one pass.

use std::fmt;

/// One thing wrong with a harness state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Path relative to the harness root, e.g. `tools/check_stock.json`.
    pub file: String,
    /// 1-based line, where it could be located.
    pub line: Option<usize>,
    pub message: String,
}

impl Problem {
    pub fn new(file: impl Into<String>, line: Option<usize>, message: impl Into<String>) -> Self {
        Problem {
            file: file.into(),
            line,
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.file, l, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

/// Errors of the harness runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    #[error("cannot read harness directory {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("the harness has {} problem(s):\n{}", .0.len(), Problems(.0))]
    Invalid(Vec<Problem>),
    #[error("prompt template failed to render: {0}")]
    Render(String),
    #[error("cannot write harness to {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

struct Problems<'a>(&'a [Problem]);
impl fmt::Display for Problems<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "  {p}")?;
        }
        Ok(())
    }
}

/// 1-based line of the first occurrence of `needle` in `text`, if any.
///
/// Semantic problems (an unknown op, a dangling pointer) have no parser span;
/// pointing at the first place the offending token appears is what an operator
/// needs to find it.
pub fn line_of(text: &str, needle: &str) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    text.find(needle)
        .map(|at| text[..at].matches('\n').count() + 1)
}

/// 1-based line of a byte offset.
pub fn line_at(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}
