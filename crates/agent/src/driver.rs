//! The one driver of task -> gold -> episode -> score. Data generation, evaluation and RL
//! rollouts build [`Job`]s (a task under a harness state, on a world) and hand them to
//! [`drive`] with an [`Actor`]: a chat model through the agent loop ([`ModelActor`]), or the
//! oracle (`hat_teacher::oracle::OracleActor`). What differs between them is only which jobs
//! they build and what they do with each [`Done`].

use std::time::Instant;

use hat_harness::Harness;
use hat_tasks::{expect, score, Expectations, Score, Task, TaskError};
use hat_world::World;

use crate::episode::{run_batch, ChatModel, Episode, EpisodeConfig};
use crate::{AgentError, Trajectory};

/// A task under a harness state, on a world.
#[derive(Clone, Copy)]
pub struct Job<'a> {
    pub task: &'a Task,
    pub harness: &'a Harness,
    pub world: &'a World,
    /// Seeds whatever an actor draws for this job (the oracle's wording); models ignore it.
    pub seed: u64,
}

/// Who acts in a job's episode.
pub trait Actor {
    /// The trajectories of `jobs`, in order. No two jobs share a world.
    fn act(&mut self, jobs: &[(Job<'_>, &Expectations)]) -> Result<Vec<Trajectory>, AgentError>;
}

/// A chat model acting through the agent loop; the jobs of a batch are decoded together.
pub struct ModelActor<'m> {
    pub model: &'m mut dyn ChatModel,
    pub cfg: EpisodeConfig,
}

impl Actor for ModelActor<'_> {
    fn act(&mut self, jobs: &[(Job<'_>, &Expectations)]) -> Result<Vec<Trajectory>, AgentError> {
        let eps = jobs
            .iter()
            .map(|(j, _)| Episode::start(j.task.scene(), j.harness, j.world, self.cfg))
            .collect::<Result<Vec<_>, _>>()?;
        run_batch(eps, self.model)
    }
}

/// [`ModelActor`] owning its model (for callers that hand an actor over, e.g. one per A/B arm).
pub struct OwnedModelActor {
    pub model: Box<dyn ChatModel + Send>,
    pub cfg: EpisodeConfig,
}

impl Actor for OwnedModelActor {
    fn act(&mut self, jobs: &[(Job<'_>, &Expectations)]) -> Result<Vec<Trajectory>, AgentError> {
        ModelActor {
            model: self.model.as_mut(),
            cfg: self.cfg,
        }
        .act(jobs)
    }
}

/// A scored job.
pub struct Outcome {
    pub gold: Expectations,
    pub trajectory: Trajectory,
    pub score: Score,
    /// The actor's time for the job's batch, shared equally by its jobs.
    pub seconds: f64,
}

/// What became of a job.
pub enum Done {
    Scored(Box<Outcome>),
    /// The task cannot be done under the job's harness state (no tool reaches an op it needs).
    NotApplicable(String),
}

/// Runs `jobs` with `actor`, up to `batch` at a time; jobs on one world never share a batch
/// (their tool calls run in world episodes that roll back). `sink` gets each job's index and
/// result, in job order; an error from the actor, the gold or the sink stops the run.
pub fn drive<E: From<AgentError>>(
    jobs: &[Job<'_>],
    actor: &mut dyn Actor,
    batch: usize,
    sink: &mut dyn FnMut(usize, Done) -> Result<(), E>,
) -> Result<(), E> {
    for range in batches(jobs, batch.max(1)) {
        let mut ready: Vec<(usize, Job<'_>, Expectations)> = Vec::with_capacity(range.len());
        for i in range {
            let j = jobs[i];
            match expect(j.task, j.harness, j.world) {
                Ok(gold) => ready.push((i, j, gold)),
                Err(TaskError::NotApplicable(why)) => sink(i, Done::NotApplicable(why))?,
                Err(e) => return Err(AgentError::Task(e).into()),
            }
        }
        if ready.is_empty() {
            continue;
        }
        let t0 = Instant::now();
        let trajs = {
            let args: Vec<(Job<'_>, &Expectations)> =
                ready.iter().map(|(_, j, g)| (*j, g)).collect();
            actor.act(&args)?
        };
        if trajs.len() != ready.len() {
            return Err(AgentError::Model(format!(
                "the actor returned {} trajectories for {} jobs",
                trajs.len(),
                ready.len()
            ))
            .into());
        }
        let seconds = t0.elapsed().as_secs_f64() / ready.len() as f64;
        for ((i, j, gold), trajectory) in ready.into_iter().zip(trajs) {
            let score = score(&gold, j.harness, &trajectory.attempt);
            sink(
                i,
                Done::Scored(Box::new(Outcome {
                    gold,
                    trajectory,
                    score,
                    seconds,
                })),
            )?;
        }
    }
    Ok(())
}

/// Consecutive runs of jobs, each at most `batch` long and on distinct worlds.
fn batches(jobs: &[Job<'_>], batch: usize) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        let fits = out.last().is_some_and(|r| {
            r.len() < batch
                && !jobs[r.clone()]
                    .iter()
                    .any(|k| std::ptr::eq(k.world, j.world))
        });
        match out.last_mut() {
            Some(r) if fits => r.end = i + 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}
