//! Sampled decoding is reproducible per prompt: an answer depends on the run's seed and
//! its own prompt, not on the batch it ran in or how many requests came before it (a
//! resumed evaluation, another `--batch`), while equal prompts still draw different
//! answers (a group of RL rollouts).

use std::path::Path;

use hat_agent::episode::ChatModel;
use hat_harness::Message;
use hat_local_model::LocalModel;
use hat_model::{SamplingParams, WeightFormat};

fn model(dir: &Path) -> LocalModel {
    let path = hat_train::fixture::tiny_model(&dir.join("m"), 1, "qwen2").unwrap();
    let sampling = SamplingParams {
        temperature: 1.0,
        seed: 7,
        ..SamplingParams::default()
    };
    LocalModel::load(&path, WeightFormat::F32, sampling, 24).unwrap()
}

fn chat(text: &str) -> Vec<Message> {
    vec![
        Message::system("You are Mia. P1 Hoodie."),
        Message::user(text),
    ]
}

#[test]
fn a_sampled_answer_does_not_depend_on_its_batch_or_what_ran_before() {
    let dir = tempfile::tempdir().unwrap();
    let a = chat("in M?");
    let b = chat("price of P1?");

    let alone = model(dir.path()).generate_batch(&[&a]).unwrap();
    let mut m = model(dir.path());
    m.generate(&b).unwrap();
    let after = m.generate_batch(&[&b, &a]).unwrap();
    assert_eq!(
        after[1].tokens, alone[0].tokens,
        "the same prompt drew another sample in another batch"
    );
}

#[test]
fn equal_prompts_draw_different_samples() {
    let dir = tempfile::tempdir().unwrap();
    let a = chat("in M?");
    let mut m = model(dir.path());
    let group = m.generate_batch(&[&a, &a, &a, &a]).unwrap();
    let distinct: std::collections::HashSet<&Vec<u32>> = group.iter().map(|c| &c.tokens).collect();
    assert!(
        distinct.len() > 1,
        "four samples of one prompt were all the same: {:?}",
        group[0].tokens
    );
    // and again in a later call: the count goes on, the samples are new
    let again = m.generate_batch(&[&a]).unwrap();
    assert!(group.iter().all(|c| c.tokens != again[0].tokens));
}
