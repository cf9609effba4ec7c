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
    // every prompt is a stream prompt, and the stream teacher is the student itself: no KL
    unchanged_stream_step(&c, dir.path());
}

/// One step of `c` at a vanishing learning rate, whose stream teacher is the student's own
/// starting weights: the KL must be zero. Returns the step's metrics.
fn unchanged_stream_step(c: &DistillConfig, dir: &Path) -> StepMetrics {
    let mut c = c.clone();
    c.optim.lr = 1e-9;
    distill::run(&c, &dir.join("run"), false, &mut |_| {}).unwrap();
    let s = steps(&dir.join("run")).remove(0);
    assert!(
        s.loss.abs() < 1e-3,
        "stream KL to the starting student: {}",
        s.loss
    );
    s
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

/// Live-stream answers of one scene, packed on their shared system prompt, give the same
/// reverse KL, gradients, teacher likelihood and rollout mismatch as scored one by one, with
/// the prompt through the student once.
#[test]
fn answers_packed_on_their_shared_prompt_score_exactly_as_one_by_one() {
    use hat_train::distill::score::{score, Answer};
    let dir = tempfile::tempdir().unwrap();
    let student = common::tiny_model(&dir.path().join("s"), 1);
    let teacher = common::tiny_model(&dir.path().join("t"), 2);
    let model = hat_model::train::TrainModel::load(&student).unwrap().model;
    let teacher = hat_train::snapshot::load_engine(&teacher, hat_model::WeightFormat::F32).unwrap();
    let vocab = model.config().vocab_size as u32;
    let prompt: Vec<u32> = (0..40).map(|i| (i * 7 + 3) % vocab).collect();
    let answers: Vec<Answer> = (0..3u32)
        .map(|k| {
            // the scene's system prompt, the viewer's own event, then the sampled answer
            let mut p = prompt.clone();
            p.extend((0..3 + k).map(|i| (i * 13 + k * 29 + 5) % vocab));
            let sampled: Vec<u32> = (0..5 + 2 * k)
                .map(|i| (i * 17 + k * 3 + 1) % vocab)
                .collect();
            let lp: Vec<f32> = (0..sampled.len()).map(|i| -0.1 * i as f32).collect();
            Answer::new(format!("a{k}"), p, &sampled, &lp).unwrap()
        })
        .collect();
    let packed = score(&model, &teacher, &answers, 4096, 1.0).unwrap();
    let alone = score(&model, &teacher, &answers, 0, 1.0).unwrap();
    assert_eq!((packed.len(), alone.len()), (1, 3));
    let p = &packed[0];
    assert_eq!(p.answer_tokens, 5 + 7 + 9);
    let one_by_one: usize = alone.iter().map(|s| s.tokens).sum();
    assert_eq!(p.tokens, one_by_one - 2 * 40, "the shared prompt once");
    let sum = |f: &dyn Fn(&hat_train::distill::score::Scored) -> f64| -> f64 {
        alone.iter().map(f).sum()
    };
    let kl_alone = sum(&|s| s.kl.to_scalar::<f32>().unwrap() as f64);
    let kl = p.kl.to_scalar::<f32>().unwrap() as f64;
    assert!(kl > 1e-3, "student and teacher differ: {kl}");
    assert!(
        (kl - kl_alone).abs() < 1e-4 * kl_alone.abs().max(1.0),
        "{kl} vs {kl_alone}"
    );
    let nll = sum(&|s| s.teacher_nll);
    assert!(
        (p.teacher_nll - nll).abs() < 1e-4 * nll.abs(),
        "{} vs {nll}",
        p.teacher_nll
    );
    let mm = sum(&|s| s.mismatch);
    assert!(
        (p.mismatch - mm).abs() < 1e-4 * mm.abs(),
        "{} vs {mm}",
        p.mismatch
    );
    let g_packed = common::grads_of(&model, &p.kl);
    let total = alone
        .iter()
        .map(|s| s.kl.clone())
        .reduce(|a, b| (a + b).unwrap())
        .unwrap();
    let g_alone = common::grads_of(&model, &total);
    for (name, a) in &g_packed {
        let b = &g_alone[name];
        let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-12);
        let d = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(
            d / scale < 1e-4,
            "gradient differs by {} relative",
            d / scale
        );
    }
    // an empty answer is refused by name, not scored as nothing
    let e = Answer::new("e".into(), prompt.clone(), &[1], &[])
        .err()
        .unwrap();
    assert!(e.to_string().contains("e: 40 prompt ids"), "{e}");
}

/// Live-stream prompts of one scene (a system prompt long enough to prefill once and reuse)
/// are sampled from the engine's prefix cache and scored packed, and stay token-exact: an
/// unchanged student has no KL to itself and its rollouts' log-probabilities are the trainer's.
#[test]
fn scene_prompts_sampled_from_a_cached_prefix_and_packed_stay_exact() {
    let dir = tempfile::tempdir().unwrap();
    let student = common::tiny_model(&dir.path().join("s"), 1);
    let teacher = common::tiny_model(&dir.path().join("t"), 2);
    let system = format!(
        "You are the host. Products: {}.",
        (0..40)
            .map(|i| format!("item {i} costs {}", 10 + i))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let records: Vec<serde_json::Value> = (0..6)
        .map(|k| {
            common::record(
                &format!("t{k}"),
                &system,
                &[
                    ("user", &format!("viewer {k}: price of item {k}?")),
                    ("assistant", &format!("Item {k} is {}.", 10 + k)),
                ],
            )
        })
        .collect();
    let data = dir.path().join("scene.jsonl");
    common::write_jsonl(&data, &records);
    let mut c = cfg(&student, &teacher, 1);
    c.stream_data = vec![data];
    c.stream_share = 1.0;
    c.prompts_per_step = 4;
    let s = unchanged_stream_step(&c, dir.path());
    assert!(
        s.extra["rollout_mismatch"] < 1e-3,
        "rollout vs trainer: {}",
        s.extra["rollout_mismatch"]
    );
    // four answers behind one system prompt of more than 64 tokens: the prompt counted once
    let one = s.tokens as f64 / 4.0;
    assert!(
        s.loss_tokens > 0 && one < 200.0,
        "{} tokens for 4 answers",
        s.tokens
    );
}

/// A teacher temperature below 1 sharpens the target: a student equal to its teacher has no
/// KL to it at 1 and some at 0.5, where the teacher's likelihood of the samples is reported
/// unchanged (it is the teacher's, not the target's).
#[test]
fn a_teacher_temperature_sharpens_the_target() {
    use hat_train::distill::score::{score, Answer};
    let dir = tempfile::tempdir().unwrap();
    let m = common::tiny_model(&dir.path().join("m"), 3);
    let model = hat_model::train::TrainModel::load(&m).unwrap().model;
    let teacher = hat_train::snapshot::load_engine(&m, hat_model::WeightFormat::F32).unwrap();
    let vocab = model.config().vocab_size as u32;
    let prompt: Vec<u32> = (0..20).map(|i| (i * 7 + 3) % vocab).collect();
    let sampled: Vec<u32> = (0..8).map(|i| (i * 17 + 1) % vocab).collect();
    let answers = [Answer::new("a".into(), prompt, &sampled, &[0.0; 8]).unwrap()];
    let at = |t: f32| {
        let s = score(&model, &teacher, &answers, 0, t).unwrap();
        (s[0].kl.to_scalar::<f32>().unwrap(), s[0].teacher_nll)
    };
    let (kl1, nll1) = at(1.0);
    let (kl_half, nll_half) = at(0.5);
    let (kl_quarter, _) = at(0.25);
    assert!(kl1.abs() < 1e-4, "KL to itself: {kl1}");
    assert!(kl_half > 1e-3, "KL to its sharpened self: {kl_half}");
    assert!(kl_quarter > kl_half, "{kl_quarter} vs {kl_half}");
    assert_eq!(nll1, nll_half);
}
