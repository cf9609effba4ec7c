//! A tiny random model whose vocabulary matches the committed qwen2 fixture's tokenizer
//! (the fixture model's own vocabulary is smaller than its tokenizer's), so whole training
//! runs fit in a test.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use candle_core::Tensor;

pub fn fixture_dir() -> PathBuf {
    hat_train::fixture::tokenizer_dir()
}

/// Writes a qwen2-shaped model with random weights into `dir` (tokenizer and ChatML
/// template from the fixture).
pub fn tiny_model(dir: &Path, seed: u64) -> PathBuf {
    hat_train::fixture::tiny_model(dir, seed, "qwen2").unwrap()
}

/// The same for `qwen2` or `llama`.
pub fn tiny_model_arch(dir: &Path, seed: u64, arch: &str) -> PathBuf {
    hat_train::fixture::tiny_model(dir, seed, arch).unwrap()
}

/// The weights of a run's latest checkpoint, by name.
pub fn checkpoint_weights(run: &Path) -> std::collections::HashMap<String, Vec<f32>> {
    let dir = hat_train::checkpoint::latest(run).unwrap().unwrap();
    candle_core::safetensors::load(dir.join("model.safetensors"), &candle_core::Device::Cpu)
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, v.flatten_all().unwrap().to_vec1::<f32>().unwrap()))
        .collect()
}

/// The losses of a run's `metrics.jsonl`, one per step.
pub fn losses(run: &Path) -> Vec<f64> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["loss"]
                .as_f64()
                .unwrap()
        })
        .collect()
}

/// Largest absolute difference of two tensors of one shape.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// A `hat data gen`-shaped record.
pub fn record(task: &str, system: &str, turns: &[(&str, &str)]) -> serde_json::Value {
    let mut messages = vec![serde_json::json!({"role": "system", "content": system})];
    for (role, content) in turns {
        messages.push(serde_json::json!({"role": role, "content": content}));
    }
    serde_json::json!({
        "messages": messages, "tools": [], "harness_name": "h", "harness_hash": "x",
        "variant": "base", "call_syntax": "json", "task_id": task, "task_type": "t",
        "split": "train", "lang": "en", "calls": [], "teacher": "oracle", "score": {}
    })
}

/// Writes records as JSONL.
pub fn write_jsonl(path: &Path, records: &[serde_json::Value]) {
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(path, text).unwrap();
}

/// A small dataset: several streams, each with a few conversations sharing the prompt.
pub fn dataset() -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for s in 0..3 {
        let system = format!(
            "You are host {s}. Products: red coat 99, blue hat {}.",
            10 + s
        );
        for k in 0..4 {
            out.push(record(
                &format!("t{s}-{k}"),
                &system,
                &[
                    ("user", &format!("viewer {k}: price of the coat?")),
                    ("assistant", &format!("The red coat is 99, viewer {k}.")),
                    ("tool", "ok"),
                    ("assistant", "Anything else?"),
                ],
            ));
        }
    }
    out
}

/// The gradient of `loss` for every trainable variable of `model`, by name.
pub fn grads_of(
    model: &hat_model::train::TrainModel,
    loss: &Tensor,
) -> std::collections::HashMap<String, Vec<f32>> {
    let g = loss.backward().unwrap();
    model
        .vars()
        .iter()
        .map(|(n, v)| {
            let t = g.get(v.as_tensor()).unwrap();
            (
                n.clone(),
                t.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            )
        })
        .collect()
}
