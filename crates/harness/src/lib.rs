//! The harness runtime (format v1, `shared/specs/harness-format.md`).
pub mod op;
pub use op::{ArgKind, ArgSpec, Op};
