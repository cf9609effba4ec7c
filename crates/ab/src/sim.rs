//! Running an experiment on the simulated audience.
//!
//! Viewers are lsqa-style questions on test-split streams (the task kinds a viewer asks:
//! [`VIEWER_KINDS`]), one question each. Each viewer (or each stream, by the experiment's
//! unit) is assigned an arm; each arm's model answers its viewers through the agent loop
//! under the arm's harness, the scorer judges every answer, and the behaviour model turns
//! verdict and latency into item-page views, carts and purchases.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use hat_agent::driver::{drive, Actor, Done, Job};
use hat_agent::Trajectory;
use hat_harness::Harness;
use hat_tasks::task::splitmix64;
use hat_tasks::{Split, Task, TaskKind, TaskSet, WorldCache};

use crate::assign::assign;
use crate::behaviour::{self, Answer};
use crate::config::{Arm, Experiment, Unit};
use crate::AbError;

/// What viewers ask: the question kinds of lsqa (no operator cues, no greetings or thanks,
/// no hostile comments).
pub const VIEWER_KINDS: [TaskKind; 13] = [
    TaskKind::ProductFact,
    TaskKind::VariantStock,
    TaskKind::FinalPrice,
    TaskKind::ShippingTime,
    TaskKind::Compare,
    TaskKind::RecommendBudget,
    TaskKind::AfterSales,
    TaskKind::ComplianceTrap,
    TaskKind::NonexistentProduct,
    TaskKind::AiDisclosure,
    TaskKind::Followup,
    TaskKind::AmbiguousOnStage,
    TaskKind::Chinese,
];

/// One viewer's record: who, which arm, what the host did, what the viewer did.
#[derive(Debug, Clone, Serialize)]
pub struct ViewerRecord {
    pub viewer: String,
    pub stream: String,
    pub arm: String,
    pub task_id: String,
    pub task_type: TaskKind,
    pub answer: Answer,
    pub incident: bool,
    /// Model time of the answer: each turn's batch time, summed over the episode's turns.
    pub latency_s: f64,
    pub page_view: bool,
    pub add_to_cart: bool,
    pub purchase: bool,
    pub amount: f64,
    /// The scorer's reasons when the answer was not correct.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    pub reply: String,
}

/// The simulated viewers of an experiment: their questions, the worlds they live in, and
/// each one's unit key.
pub struct Audience {
    pub tasks: Vec<Task>,
    pub worlds: WorldCache,
}

impl Audience {
    pub fn generate(exp: &Experiment) -> Result<Audience, AbError> {
        let mut worlds = WorldCache::default();
        let tasks = TaskSet::generate_kinds(
            Split::Test,
            exp.audience.viewers,
            exp.seed,
            &VIEWER_KINDS,
            &mut worlds,
        )?;
        Ok(Audience { tasks, worlds })
    }

    pub fn viewer_id(i: usize) -> String {
        format!("v{i}")
    }

    pub fn stream_id(task: &Task) -> String {
        format!("s{}", task.world_seed)
    }

    /// The arm of viewer `i`.
    pub fn arm_of(&self, exp: &Experiment, i: usize) -> usize {
        let key = match exp.unit {
            Unit::Viewer => Audience::viewer_id(i),
            Unit::Stream => Audience::stream_id(&self.tasks[i]),
        };
        assign(&key, exp.seed, &exp.weights())
    }
}

/// The seconds a viewer waited: each model turn's batch time (prefill + decode where the
/// engine reports them, else the wall time), over the episode's turns.
pub fn latency(t: &Trajectory) -> f64 {
    t.turns
        .iter()
        .map(|c| {
            let batch = c.prefill_seconds + c.decode_seconds;
            if batch > 0.0 {
                batch
            } else {
                c.seconds
            }
        })
        .sum()
}

/// Makes an arm's actor.
pub type ActorFor<'a> = dyn FnMut(&Arm) -> Result<Box<dyn Actor>, AbError> + 'a;

/// Runs every arm on its viewers. `actor_for` makes an arm's actor (a model through the agent
/// loop, or the oracle); arms run one after another, so one model is loaded at a time.
/// `on_record` sees each viewer's record as it is decided, in arm order.
pub fn run(
    exp: &Experiment,
    audience: &Audience,
    actor_for: &mut ActorFor<'_>,
    on_record: &mut dyn FnMut(&ViewerRecord),
) -> Result<Vec<ViewerRecord>, AbError> {
    let mut records = Vec::with_capacity(audience.tasks.len());
    for (a, arm) in exp.arms.iter().enumerate() {
        let harness = Harness::load(&arm.harness).map_err(|e| AbError::Arm {
            arm: arm.name.clone(),
            message: format!("harness {}: {e}", arm.harness.display()),
        })?;
        let mine: Vec<usize> = (0..audience.tasks.len())
            .filter(|&i| audience.arm_of(exp, i) == a)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let jobs: Vec<Job<'_>> = mine
            .iter()
            .map(|&i| {
                let task = &audience.tasks[i];
                let world = audience
                    .worlds
                    .peek(task.world_seed)
                    .expect("the audience built every task's world");
                Job {
                    task,
                    harness: &harness,
                    world,
                    seed: splitmix64(exp.seed ^ i as u64),
                }
            })
            .collect();
        let mut actor = actor_for(arm)?;
        let mut sink = |j: usize, done: Done| -> Result<(), AbError> {
            let i = mine[j];
            let task = &audience.tasks[i];
            let world = jobs[j].world;
            let (answer, incident, latency_s, reason, reply) = match done {
                Done::Scored(o) => (
                    behaviour::classify(&o.score, &o.trajectory.attempt.reply),
                    behaviour::incident(&o.score, task.kind),
                    latency(&o.trajectory),
                    o.score.reason(),
                    o.trajectory.attempt.reply.clone(),
                ),
                // The arm's harness cannot do the task at all: the viewer gets no answer.
                Done::NotApplicable(why) => (Answer::Missed, false, 0.0, why, String::new()),
            };
            // The viewer's own draws: the same whichever arm serves them.
            let mut rng =
                ChaCha8Rng::seed_from_u64(splitmix64(exp.seed ^ splitmix64(i as u64 ^ 0xAB_AB_AB)));
            let price = behaviour::price_of(task, world);
            let r = behaviour::react(&exp.behaviour, answer, incident, latency_s, price, &mut rng);
            let rec = ViewerRecord {
                viewer: Audience::viewer_id(i),
                stream: Audience::stream_id(task),
                arm: arm.name.clone(),
                task_id: task.id.clone(),
                task_type: task.kind,
                answer,
                incident,
                latency_s,
                page_view: r.page_view,
                add_to_cart: r.add_to_cart,
                purchase: r.purchase,
                amount: r.amount,
                reason,
                reply,
            };
            on_record(&rec);
            records.push(rec);
            Ok(())
        };
        drive(&jobs, actor.as_mut(), exp.audience.batch, &mut sink)?;
    }
    Ok(records)
}
