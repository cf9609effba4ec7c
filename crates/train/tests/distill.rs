//! On-policy distillation on tiny models: the loss is the reverse KL to the teacher, the
//! rollouts are token-exact, a run moves the student towards the teacher and resumes exactly.

mod common;

use std::collections::HashMap;
use std::path::Path;

use hat_train::distill::{self, DistillConfig};
use hat_train::stage::{Event, StepMetrics};

fn cfg(student: &Path, teacher: &Path, steps: usize) -> DistillConfig {
    let mut c = DistillConfig::preset("smoke").unwrap();
    c.model = student.to_path_buf();
    c.teacher = teacher.to_path_buf();
    c.max_steps = steps;
    c.prompts_per_step = 3;
    c.max_new_tokens = 12;
    c.general_prompts = 40;
    c.val_prompts = 3;
    c.eval_every = 1;
    c.stream_share = 0.0;
    c.rollout_format = "f32".into();
    c.export = vec![];
    c.optim.lr = 5e-2;
    c.optim.warmup_steps = 1;
    c
}

fn steps(run: &Path) -> Vec<StepMetrics> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn weights(run: &Path) -> HashMap<String, Vec<f32>> {
    common::checkpoint_weights(run)
}

#[test]
fn a_student_equal_to_its_teacher_has_zero_kl_and_token_exact_rollouts() {
    let dir = tempfile::tempdir().unwrap();
    let m = common::tiny_model(&dir.path().join("m"), 5);
    let mut c = cfg(&m, &m, 1);
    c.optim.lr = 1e-9;
    distill::run(&c, &dir.path().join("run"), false, &mut |_| {}).unwrap();
    let s = &steps(&dir.path().join("run"))[0];
    assert!(s.loss.abs() < 1e-4, "KL to itself: {}", s.loss);
    assert!(s.loss_tokens > 0);
    // the engine's log-probabilities of the sampled tokens (f32 snapshot) are the trainer's
    assert!(
        s.extra["rollout_mismatch"] < 1e-3,
        "rollout vs trainer: {}",
        s.extra["rollout_mismatch"]
    );
}

#[test]
fn distillation_moves_the_student_towards_the_teacher_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let student = common::tiny_model(&dir.path().join("s"), 1);
    let teacher = common::tiny_model(&dir.path().join("t"), 2);
    let straight = dir.path().join("a");
    let mut notes = Vec::new();
    distill::run(&cfg(&student, &teacher, 6), &straight, false, &mut |e| {
        if let Event::Note(n) = e {
            notes.push(n.to_string())
        }
    })
    .unwrap();
    assert!(notes.iter().any(|n| n.contains("general")), "{notes:?}");
    let m = steps(&straight);
    assert_eq!(m.len(), 6);
    let (first, last) = (m[0].val_loss.unwrap(), m[5].val_loss.unwrap());
    assert!(first > 0.01, "the two random models differ: {first}");
    assert!(last < first, "validation KL {first} -> {last}");
    let train = |a: usize| (m[a].loss + m[a + 1].loss) / 2.0;
    assert!(
        train(4) < train(0) * 0.85,
        "training KL {} -> {}",
        train(0),
        train(4)
    );
    assert!(m.iter().all(|s| s.extra.contains_key("teacher_nll")));
    // killed after 3 steps (its later checkpoints lost), resumed to 6: the same weights
    let split = dir.path().join("b");
    let mut c = cfg(&student, &teacher, 6);
    c.keep = 10;
    distill::run(&c, &split, false, &mut |_| {}).unwrap();
    let ckpts = split.join("checkpoints");
    for s in 4..=6 {
        std::fs::remove_dir_all(ckpts.join(format!("step-{s:06}"))).unwrap();
    }
    std::fs::write(ckpts.join("latest"), "step-000003").unwrap();
    distill::run(&c, &split, true, &mut |_| {}).unwrap();
    assert_eq!(steps(&split).len(), 6);
    assert_eq!(
        weights(&straight),
        weights(&split),
        "resumed weights differ"
    );
}

#[test]
fn a_teacher_with_another_tokenizer_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let student = common::tiny_model(&dir.path().join("s"), 1);
    // the same model with every ordinary token moved to the next id
    let other = common::tiny_model(&dir.path().join("other"), 1);
    let tok_path = other.join("tokenizer.json");
    let mut tok: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&tok_path).unwrap()).unwrap();
    let vocab = tok["model"]["vocab"].as_object_mut().unwrap();
    let n = vocab.len() as u64;
    for v in vocab.values_mut() {
        *v = serde_json::json!((v.as_u64().unwrap() + 1) % n);
    }
    std::fs::write(&tok_path, tok.to_string()).unwrap();
    let e = distill::run(
        &cfg(&student, &other, 1),
        &dir.path().join("run"),
        false,
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("tokenizer") && e.contains("other"), "{e}");
}

#[test]
fn stream_prompts_need_stream_data_and_use_the_stream_teacher() {
    let dir = tempfile::tempdir().unwrap();
    let student = common::tiny_model(&dir.path().join("s"), 1);
    let teacher = common::tiny_model(&dir.path().join("t"), 2);
    let mut c = cfg(&student, &teacher, 1);
    c.stream_share = 0.5;
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("stream_data"), "{e}");
    let data = dir.path().join("d.jsonl");
    common::write_jsonl(&data, &common::dataset());
    c.stream_data = vec![data];
    c.general_prompts = 0;
    c.val_prompts = 0;
    c.optim.lr = 1e-9;
    // every prompt is a stream prompt, and the stream teacher is the student itself: no KL
    distill::run(&c, &dir.path().join("run"), false, &mut |_| {}).unwrap();
    let s = &steps(&dir.path().join("run"))[0];
    assert!(
        s.loss.abs() < 1e-3,
        "stream KL to the starting student: {}",
        s.loss
    );
}

#[test]
fn distillation_can_train_lora_adapters_only() {
    let dir = tempfile::tempdir().unwrap();
    let student = common::tiny_model(&dir.path().join("s"), 1);
    let teacher = common::tiny_model(&dir.path().join("t"), 2);
    let mut c = cfg(&student, &teacher, 3);
    c.lora = Some(hat_model::train::LoraConfig {
        rank: 2,
        targets: vec!["q".into(), "v".into()],
        ..Default::default()
    });
    let run = dir.path().join("run");
    distill::run(&c, &run, false, &mut |_| {}).unwrap();
    let w = weights(&run);
    // 2 targets x 2 blocks x (A, B), and the rollouts sampled from the merged weights moved
    assert_eq!(w.len(), 8, "{:?}", w.keys().collect::<Vec<_>>());
    let m = steps(&run);
    assert!(m[2].loss < m[0].loss, "{} -> {}", m[0].loss, m[2].loss);
}
