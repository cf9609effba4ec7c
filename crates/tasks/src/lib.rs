//! Live-stream tasks, their gold expectations and the scorer.
//!
//! - [`gen`]: seeded tasks of every [`TaskKind`], worded from the split's
//!   paraphrase bank ([`bank`]) with live-chat [`noise`].
//! - [`gold`]: `expect(task, harness, world)`: gold depends on the task AND
//!   the harness state.
//! - [`score`]: pass/fail with components; also the RL reward.
//! - [`suite`]: building task sets for a split.

pub mod bank;
pub mod episode;
pub mod gen;
pub mod gold;
pub mod kind;
pub mod noise;
pub mod numbers;
pub mod score;
pub mod suite;
pub mod task;

pub use gold::{expect, Expectations};
pub use kind::{KindMix, TaskKind};
pub use score::{score, Attempt, Score};
pub use suite::{SceneTask, TaskSet, WorldCache};
pub use task::{Attack, Intent, Split, Task};

/// The version of the scorer (gold and [`score`]), recorded beside every score (`hat eval`'s
/// `results.json`): a change that moves pass/fail moves it, since scores of two versions are
/// not comparable. 1: the scorer before versions were recorded; 2 and 3: see
/// docs/tasks-and-scoring.md (Scorer versions).
pub const SCORER_VERSION: u32 = 3;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TaskError {
    #[error("cannot compute gold: {0}")]
    Gold(String),
    #[error("task does not apply to this harness: {0}")]
    NotApplicable(String),
    #[error("world: {0}")]
    World(#[from] hat_world::WorldError),
}
