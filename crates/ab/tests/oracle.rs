//! The oracle against a host that never answers, on the simulated audience: the report must
//! find the oracle's lead, and a rerun must reproduce every record.

use hat_ab::{report, run, AbError, Arm, Audience, Experiment};
use hat_agent::driver::{Actor, Job};
use hat_agent::{AgentError, Trajectory};
use hat_tasks::{Attempt, Expectations};
use hat_teacher::oracle::OracleActor;

/// A host that says nothing useful.
struct Silent;

impl Actor for Silent {
    fn act(&mut self, jobs: &[(Job<'_>, &Expectations)]) -> Result<Vec<Trajectory>, AgentError> {
        Ok(jobs
            .iter()
            .map(|(j, _)| Trajectory {
                task_id: j.task.id.clone(),
                messages: vec![],
                attempt: Attempt::default(),
                hook_log: vec![],
                turns: vec![],
            })
            .collect())
    }
}

fn experiment(unit: &str) -> Experiment {
    let harness = concat!(env!("CARGO_MANIFEST_DIR"), "/../../harnesses/livestream");
    let text = format!(
        r#"
name = "oracle-vs-silent"
seed = 11
unit = "{unit}"
[[arms]]
name = "silent"
model = "silent"
harness = "{harness}"
[[arms]]
name = "oracle"
model = "oracle"
harness = "{harness}"
[audience]
viewers = 400
batch = 8
"#
    );
    Experiment::parse(&text, "test").unwrap()
}

fn actor(arm: &Arm) -> Result<Box<dyn Actor>, AbError> {
    Ok(match arm.model.as_str() {
        "oracle" => Box::new(OracleActor::default()),
        _ => Box::new(Silent),
    })
}

#[test]
fn the_oracle_beats_a_silent_host_and_reruns_reproduce() {
    let exp = experiment("viewer");
    let audience = Audience::generate(&exp).unwrap();
    let mut seen = 0;
    let recs = run(&exp, &audience, &mut actor, &mut |_| seen += 1).unwrap();
    assert_eq!(recs.len(), 400);
    assert_eq!(seen, 400);
    let n_oracle = recs.iter().filter(|r| r.arm == "oracle").count();
    assert!((150..250).contains(&n_oracle), "{n_oracle}");
    assert!(recs
        .iter()
        .filter(|r| r.arm == "oracle")
        .all(|r| r.answer == hat_ab::behaviour::Answer::Correct));
    let rep = report(&exp, &recs);
    let views = rep
        .metrics
        .iter()
        .find(|m| m.metric == "item_page_views")
        .unwrap();
    let (arm, c) = &views.comparisons[0];
    assert_eq!(arm, "oracle");
    assert!(c.significant && c.diff > 0.2, "{c:?}");
    let correct = rep.metrics.iter().find(|m| m.metric == "correct").unwrap();
    assert_eq!(correct.comparisons[0].1.mean_b, 1.0);
    let md = rep.markdown();
    assert!(
        md.contains("| item-page views per viewer | oracle |"),
        "{md}"
    );

    let again = run(&exp, &audience, &mut actor, &mut |_| {}).unwrap();
    let a = serde_json::to_string(&recs).unwrap();
    assert_eq!(a, serde_json::to_string(&again).unwrap());
}

#[test]
fn stream_units_keep_each_stream_in_one_arm() {
    let exp = experiment("stream");
    let audience = Audience::generate(&exp).unwrap();
    let recs = run(&exp, &audience, &mut actor, &mut |_| {}).unwrap();
    let mut arm_of = std::collections::HashMap::new();
    for r in &recs {
        assert_eq!(
            arm_of.entry(r.stream.clone()).or_insert(r.arm.clone()),
            &r.arm
        );
    }
    let rep = report(&exp, &recs);
    let units: usize = rep.arms.iter().map(|a| a.units).sum();
    assert_eq!(units, arm_of.len());
}
