//! The RL environment: train-split tasks under the base harness and its train-pool augmented
//! states, each task run as a group of full agent-loop episodes (tool calls, tool results,
//! hooks) on the inference engine, and scored by the evaluation scorer. The reward is the
//! fraction of the scorer's components that pass; the gold answer never enters the prompt.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use hat_agent::driver::{drive, Done, Job, ModelActor};
use hat_agent::episode::{CallCheck, ChatModel, EpisodeConfig};
use hat_data::gen::State;
use hat_tasks::{expect, Split, Task, TaskError, TaskSet, WorldCache};

use crate::error::{Result, TrainError};

/// One model turn of a rollout, as the engine computed it.
#[derive(Debug, Clone, Serialize)]
pub struct Segment {
    /// The prompt's ids (the whole conversation so far, rendered by the chat template).
    pub prompt_ids: Vec<u32>,
    /// The sampled ids (ending with the stop token when the turn stopped).
    pub tokens: Vec<u32>,
    /// The rollout engine's log-probability of each sampled id.
    pub logprobs: Vec<f32>,
}

/// One episode of a group.
#[derive(Debug, Clone, Serialize)]
pub struct Rollout {
    pub segments: Vec<Segment>,
    pub reward: f64,
    pub pass: bool,
    /// Failed scorer components and why.
    pub reason: String,
    pub reply: String,
}

/// The rollouts of one task under one harness state.
#[derive(Debug, Clone, Serialize)]
pub struct Group {
    pub task_id: String,
    pub task_type: String,
    pub state: String,
    pub harness_hash: String,
    pub call_syntax: String,
    pub rollouts: Vec<Rollout>,
}

impl Group {
    pub fn rewards(&self) -> Vec<f64> {
        self.rollouts.iter().map(|r| r.reward).collect()
    }
}

/// Tasks, harness states and worlds for rollouts.
pub struct Env {
    pub states: Vec<State>,
    pub tasks: Vec<Task>,
    /// One world cache per rollout slot of a batch: episodes decoded together each need a
    /// world of their own (tool calls run in world episodes).
    slots: Vec<WorldCache>,
}

/// A task and a state drawn for one group (one whose gold exists).
struct Draw {
    task: usize,
    state: usize,
}

impl Env {
    pub fn new(states: Vec<State>, tasks: usize, task_seed: u64) -> Result<Self> {
        let mut first = WorldCache::default();
        let tasks = TaskSet::generate(Split::Train, tasks, task_seed, &mut first).map_err(env)?;
        Ok(Self {
            states,
            tasks,
            slots: vec![first],
        })
    }

    /// Builds world `seed` in slot `i`. Slot 0 keeps every world (the task set was generated
    /// into it, and draws read it); the others keep only the world they serve now, or over a
    /// run each would grow to every world of the task set.
    fn slot(&mut self, i: usize, seed: u64) -> Result<()> {
        while self.slots.len() <= i {
            self.slots.push(WorldCache::default());
        }
        if i > 0 {
            self.slots[i].keep_only(seed);
        }
        self.slots[i].get(seed).map_err(env)?;
        Ok(())
    }

    /// Draws a task and a state whose gold exists (a task kind can be impossible under a
    /// state, e.g. a coupon task when the state has no coupon tool).
    fn draw(&mut self, rng: &mut ChaCha8Rng) -> Result<Draw> {
        for _ in 0..100 {
            let task = rng.gen_range(0..self.tasks.len());
            let state = rng.gen_range(0..self.states.len());
            let seed = self.tasks[task].world_seed;
            self.slot(0, seed)?;
            let world = self.slots[0].peek(seed).expect("built above");
            match expect(&self.tasks[task], &self.states[state].harness, world) {
                Ok(_) => return Ok(Draw { task, state }),
                Err(TaskError::NotApplicable(_)) => continue,
                Err(e) => return Err(env(e)),
            }
        }
        Err(TrainError::Invalid(
            "100 draws in a row found no task applicable under its harness state; check the \
             harness with `hat harness check`"
                .into(),
        ))
    }

    /// Draws `n` tasks and runs `g` rollouts of each with `model`, all decoded as one batch.
    pub fn rollouts(
        &mut self,
        rng: &mut ChaCha8Rng,
        n: usize,
        g: usize,
        model: &mut dyn ChatModel,
        max_turns: usize,
        pass_weight: f64,
    ) -> Result<Vec<Group>> {
        let draws = (0..n).map(|_| self.draw(rng)).collect::<Result<Vec<_>>>()?;
        // slots this step does not use hold nothing
        for s in self.slots.iter_mut().skip((n * g).max(1)) {
            *s = WorldCache::default();
        }
        for (d, draw) in draws.iter().enumerate() {
            let seed = self.tasks[draw.task].world_seed;
            for j in 0..g {
                self.slot(d * g + j, seed)?;
            }
        }
        let cfg = EpisodeConfig {
            max_turns,
            keep_changes: false,
            // the trained log-probabilities are the unconstrained model's
            final_reply: false,
            calls: CallCheck::Free,
        };
        let mut jobs = Vec::with_capacity(n * g);
        for (d, draw) in draws.iter().enumerate() {
            let task = &self.tasks[draw.task];
            for j in 0..g {
                jobs.push(Job {
                    task,
                    harness: &self.states[draw.state].harness,
                    world: self.slots[d * g + j]
                        .peek(task.world_seed)
                        .expect("built above"),
                    seed: 0,
                });
            }
        }
        // Every rollout of the step on a world of its own: one batch.
        let mut actor = ModelActor { model, cfg };
        let mut rollouts: Vec<Rollout> = Vec::with_capacity(n * g);
        drive(&jobs, &mut actor, jobs.len(), &mut |_,
                                                   done|
         -> Result<()> {
            let o = match done {
                Done::Scored(o) => o,
                // Drawn only where gold exists.
                Done::NotApplicable(why) => return Err(env(why)),
            };
            rollouts.push(Rollout {
                segments: o
                    .trajectory
                    .turns
                    .into_iter()
                    .map(|c| Segment {
                        prompt_ids: c.prompt_ids,
                        tokens: c.tokens,
                        logprobs: c.logprobs,
                    })
                    .collect(),
                reward: reward(&o.score, pass_weight),
                pass: o.score.pass,
                reason: o.score.reason(),
                reply: o.trajectory.attempt.reply,
            });
            Ok(())
        })?;
        let mut rollouts = rollouts.into_iter();
        let mut out = Vec::with_capacity(n);
        for draw in &draws {
            let task = &self.tasks[draw.task];
            let state = &self.states[draw.state];
            let h = &state.harness;
            out.push(Group {
                task_id: task.id.clone(),
                task_type: task.kind.as_str().to_string(),
                state: state.label.clone(),
                harness_hash: h.hash.clone(),
                call_syntax: h.syntax.as_str().to_string(),
                rollouts: rollouts.by_ref().take(g).collect(),
            });
        }
        Ok(out)
    }
}

/// A rollout's reward: `pass_weight` of the scorer's verdict, the rest the fraction of its
/// components passed (see `RlConfig::pass_weight`).
pub fn reward(score: &hat_tasks::Score, pass_weight: f64) -> f64 {
    let pass = if score.pass { 1.0 } else { 0.0 };
    pass_weight * pass + (1.0 - pass_weight) * score.fraction()
}

fn env(e: impl std::fmt::Display) -> TrainError {
    TrainError::Rollout(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::reward;
    use hat_tasks::score::Component;
    use hat_tasks::Score;

    fn score(passed: usize, of: usize) -> Score {
        let names = ["format", "calls", "arguments", "facts", "constraints"];
        Score {
            pass: passed == of,
            components: (0..of)
                .map(|i| Component {
                    name: names[i % names.len()],
                    pass: i < passed,
                    reason: String::new(),
                })
                .collect(),
        }
    }

    /// Slot 0 keeps every world (draws read them); the other slots keep only the world they
    /// serve now (they grew to every world of the task set, once per slot).
    #[test]
    fn rollout_slots_past_the_first_keep_only_their_world() {
        let mut env = super::Env::new(Vec::new(), 4, 7).unwrap();
        let mut seeds: Vec<u64> = env.tasks.iter().map(|t| t.world_seed).collect();
        seeds.dedup();
        let (a, b) = (seeds[0], 1_000_003);
        for i in [0, 2] {
            env.slot(i, a).unwrap();
            env.slot(i, b).unwrap();
        }
        assert!(env.slots[0].peek(a).is_some() && env.slots[0].peek(b).is_some());
        assert!(
            env.slots[2].peek(a).is_none(),
            "slot 2 kept an earlier world"
        );
        assert!(env.slots[2].peek(b).is_some());
        assert!(env.slots[1].peek(a).is_none() && env.slots[1].peek(b).is_none());
    }

    #[test]
    fn the_pass_weight_moves_reward_from_partial_credit_to_the_verdict() {
        let wrong = score(3, 5);
        assert!((reward(&wrong, 0.0) - 0.6).abs() < 1e-12);
        assert!((reward(&wrong, 0.5) - 0.3).abs() < 1e-12);
        assert_eq!(reward(&wrong, 1.0), 0.0);
        let right = score(5, 5);
        for w in [0.0, 0.3, 1.0] {
            assert!((reward(&right, w) - 1.0).abs() < 1e-12);
        }
    }
}
