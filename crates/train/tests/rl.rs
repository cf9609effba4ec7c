//! HSA-RL on tiny models: rollouts through the agent loop are token-exact (the trainer's
//! log-probabilities of the sampled ids equal the engine's), the loss raises the likelihood of
//! better-than-group turns, and a run resumes and exports.

mod common;

use std::path::{Path, PathBuf};

use hat_model::train::TrainModel;
use hat_train::rl::loss::{self, Weighted};
use hat_train::rl::{self, RlConfig, RlStage};
use hat_train::stage::StepMetrics;

fn harness() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream")
}

fn cfg(model: &Path, steps: usize) -> RlConfig {
    let mut c = RlConfig::preset("smoke").unwrap();
    c.model = model.to_path_buf();
    c.harness_dir = harness();
    c.max_steps = steps;
    c.group_size = 3;
    c.max_new_tokens = 8;
    c.rollout_format = "f32".into();
    c.export = vec![];
    c
}

/// SmolLM2's chat template (it adds a default system turn when there is none).
const SMOLLM2_TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

#[test]
fn rollouts_are_token_exact_and_only_sampled_tokens_carry_loss() {
    let dir = tempfile::tempdir().unwrap();
    token_exact(&common::tiny_model(&dir.path().join("m"), 3));
}

#[test]
fn rollouts_are_token_exact_under_smollm2s_template() {
    let dir = tempfile::tempdir().unwrap();
    let m = common::tiny_model(&dir.path().join("m"), 3);
    let path = m.join("tokenizer_config.json");
    let mut tc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    tc["chat_template"] = serde_json::Value::String(SMOLLM2_TEMPLATE.into());
    std::fs::write(&path, tc.to_string()).unwrap();
    token_exact(&m);
}

/// Rolls out one group through the agent loop and checks the trainer computes, on the ids the
/// engine reported, the engine's own log-probability for every sampled token.
fn token_exact(m: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(m, 1);
    let model = TrainModel::load(m).unwrap().model;
    let mut stage = RlStage::new(&c, dir.path()).unwrap();
    let (used, flat, stats) = stage.collect(&model, 0).unwrap();
    assert_eq!(stats.rollouts, 3);
    let mut groups: Vec<_> = used.into_iter().chain(flat).collect();
    // whatever the scorer said, give the rollouts distinct rewards so every turn is weighed
    for g in &mut groups {
        for (i, r) in g.rollouts.iter_mut().enumerate() {
            r.reward = i as f64;
        }
    }
    let items = stage.weigh(&groups).unwrap();
    assert!(!items.is_empty());
    let sampled: usize = groups
        .iter()
        .flat_map(|g| &g.rollouts)
        .flat_map(|r| &r.segments)
        .map(|s| s.tokens.len())
        .sum();
    assert_eq!(
        items.iter().map(Weighted::sampled).sum::<usize>(),
        sampled,
        "every sampled id, and only those, carries loss"
    );
    for (packed, tags) in loss::packs(&items, 8192).unwrap() {
        let lp = loss::token_logprobs(&model, &packed)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        for (row, &(k, i)) in tags.iter().enumerate() {
            let engine = items[k].behaviour[i];
            assert!(
                (lp[row] - engine).abs() < 1e-3,
                "{}: token {i}: trainer {} vs engine {engine}",
                items[k].sample.id,
                lp[row]
            );
        }
    }
}

#[test]
fn the_loss_raises_the_better_turn_and_lowers_the_worse() {
    let dir = tempfile::tempdir().unwrap();
    let m = common::tiny_model(&dir.path().join("m"), 4);
    let c = cfg(&m, 1);
    let model = TrainModel::load(&m).unwrap().model;
    let stage = RlStage::new(&c, dir.path()).unwrap();
    let prompt: Vec<u32> = (100..140).collect();
    let (good, bad) = ([11u32, 12, 13], [21u32, 22, 23]);
    let score = |ids: &[u32]| -> f32 {
        let w = Weighted::new("x".into(), &prompt, ids, &[0.0; 3], 0.0).unwrap();
        let (packed, _) = loss::packs(&[w], 8192).unwrap().remove(0);
        loss::token_logprobs(&model, &packed)
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    };
    let (g0, b0) = (score(&good), score(&bad));
    let adv = loss::advantages(&[1.0, 0.0], true).unwrap();
    let items: Vec<Weighted> = [(&good, adv[0]), (&bad, adv[1])]
        .iter()
        .map(|(ids, a)| {
            let mut w = Weighted::new("x".into(), &prompt, *ids, &[0.0; 3], *a).unwrap();
            // behaviour = the trainer's own numbers: no importance correction
            let (packed, _) = loss::packs(&[w.clone()], 8192).unwrap().remove(0);
            let lp = loss::token_logprobs(&model, &packed)
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            w.behaviour[prompt.len()..].copy_from_slice(&lp);
            w
        })
        .collect();
    let mut grads: Vec<Vec<f32>> = model
        .vars()
        .iter()
        .map(|(_, v)| vec![0.0; v.elem_count()])
        .collect();
    let st = stage.train_on(&model, &items, &mut grads).unwrap();
    assert_eq!(st.tokens, 6);
    assert!(st.mismatch < 1e-4);
    // a small step along the negative gradient (first order: the direction is what is tested)
    let norm = grads.iter().flatten().map(|g| g * g).sum::<f32>().sqrt();
    assert!(norm > 0.0);
    let lr = 0.05 / norm as f64;
    for ((_, v), g) in model.vars().iter().zip(&grads) {
        let t = candle_core::Tensor::from_slice(g, v.shape(), &candle_core::Device::Cpu).unwrap();
        v.set(&(v.as_tensor() - (t * lr).unwrap()).unwrap())
            .unwrap();
    }
    let (g1, b1) = (score(&good), score(&bad));
    assert!(g1 > g0, "rewarded turn: {g0} -> {g1}");
    assert!(b1 < b0, "penalised turn: {b0} -> {b1}");
}

fn steps(run: &Path) -> Vec<StepMetrics> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_run_logs_rollouts_resumes_and_extends() {
    let dir = tempfile::tempdir().unwrap();
    let m = common::tiny_model(&dir.path().join("m"), 5);
    let run = dir.path().join("run");
    rl::run(&cfg(&m, 2), &run, false, &mut |_| {}).unwrap();
    let s = steps(&run);
    assert_eq!(s.len(), 2);
    for x in &s {
        assert!(x.extra.contains_key("reward_mean"), "{:?}", x.extra);
        assert!(x.extra.contains_key("rollout_seconds"));
    }
    rl::run(&cfg(&m, 3), &run, true, &mut |_| {}).unwrap();
    assert_eq!(steps(&run).len(), 3);
    let log = std::fs::read_to_string(run.join("rollouts.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "one group a step");
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["step"], i + 1);
        let r = &l["rollouts"][0];
        let t = &r["turns"][0];
        let (ids, from) = (
            t["ids"].as_array().unwrap(),
            t["mask_from"].as_u64().unwrap(),
        );
        assert_eq!(
            ids.len() - from as usize,
            t["logprobs"].as_array().unwrap().len()
        );
        assert!(r["reward"].as_f64().unwrap() >= 0.0);
    }
    assert!(
        !run.join("rollout-f32.gguf").exists(),
        "the snapshot is removed"
    );
}

#[test]
fn bad_configs_say_what_to_change() {
    let mut c = cfg(Path::new("m"), 1);
    c.group_size = 1;
    assert!(c.validate().unwrap_err().to_string().contains("group_size"));
    let mut c = cfg(Path::new("m"), 1);
    c.minibatches = 5;
    assert!(c
        .validate()
        .unwrap_err()
        .to_string()
        .contains("minibatches"));
    let mut c = cfg(Path::new("m"), 1);
    c.rollout_format = "q4".into();
    assert!(c
        .validate()
        .unwrap_err()
        .to_string()
        .contains("rollout_format"));
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(&common::tiny_model(&dir.path().join("m"), 1), 1);
    c.harness_dir = dir.path().join("nope");
    let e = rl::run(&c, &dir.path().join("r"), false, &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("nope"), "{e}");
}

/// A run resumed from a checkpoint continues as the straight run did: each batch's rollouts
/// come from an engine built afresh (seed 0 on the tiny model: step 1 draws no group with
/// signal and updates nothing, step 2 trains on one), and a checkpoint is written only
/// between batches of several minibatches.
#[test]
fn a_run_of_several_minibatches_a_batch_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let m = common::tiny_model(&dir.path().join("m"), 5);
    let mut c = cfg(&m, 2);
    c.tasks_per_step = 2;
    c.minibatches = 2;
    c.max_draw_rounds = 3;
    c.seed = 0;
    c.save_every = 1;
    c.keep = 10;
    let straight = dir.path().join("a");
    rl::run(&c, &straight, false, &mut |_| {}).unwrap();
    // "killed" after the first checkpoint: the later ones gone, as if never written
    let split = dir.path().join("b");
    rl::run(&c, &split, false, &mut |_| {}).unwrap();
    let root = split.join("checkpoints");
    let mut saved: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("step-"))
        .collect();
    saved.sort();
    let first = saved[0].clone();
    for later in &saved[1..] {
        std::fs::remove_dir_all(root.join(later)).unwrap();
    }
    std::fs::write(root.join("latest"), &first).unwrap();
    rl::run(&c, &split, true, &mut |_| {}).unwrap();
    let (a, b) = (steps(&straight), steps(&split));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.loss, y.loss, "step {}", x.step);
        assert_eq!(x.extra.get("groups_used"), y.extra.get("groups_used"));
    }
    assert_eq!(
        common::checkpoint_weights(&straight),
        common::checkpoint_weights(&split),
        "resumed from {first}: the weights differ"
    );
}
