//! A tiny random model whose vocabulary matches the committed qwen2 fixture's tokenizer
//! (the fixture model's own vocabulary is smaller than its tokenizer's), so whole training
//! runs fit in a test.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};

pub fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures/qwen2")
}

/// Writes a qwen2-shaped model with random weights into `dir` (tokenizer and ChatML
/// template from the fixture).
pub fn tiny_model(dir: &Path, seed: u64) -> PathBuf {
    tiny_model_arch(dir, seed, "qwen2")
}

/// The same for `qwen2` or `llama` (no q/k/v biases, its own rotary layout in GGUF).
pub fn tiny_model_arch(dir: &Path, seed: u64, arch: &str) -> PathBuf {
    let qwen2 = arch == "qwen2";
    std::fs::create_dir_all(dir).unwrap();
    let fx = fixture_dir();
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fx.join(f), dir.join(f)).unwrap();
    }
    let vocab = hat_model::loader::load_tokenizer(&fx).unwrap().vocab_size();
    let (hidden, inter, layers, heads, kv) = (32usize, 48usize, 2usize, 4usize, 2usize);
    let hd = hidden / heads;
    let config = serde_json::json!({
        "architectures": [if qwen2 { "Qwen2ForCausalLM" } else { "LlamaForCausalLM" }],
        "model_type": arch,
        "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
        "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": true, "vocab_size": vocab, "hidden_act": "silu"
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let dev = Device::Cpu;
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut rand = |shape: &[usize], scale: f32| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| (rng.gen::<f32>() * 2.0 - 1.0) * scale * 1.7)
            .collect();
        Tensor::from_vec(v, shape, &dev).unwrap()
    };
    let mut w: HashMap<String, Tensor> = HashMap::new();
    w.insert(
        "model.embed_tokens.weight".into(),
        rand(&[vocab, hidden], 0.5),
    );
    w.insert(
        "model.norm.weight".into(),
        (rand(&[hidden], 0.1) + 1.0).unwrap(),
    );
    for i in 0..layers {
        let p = format!("model.layers.{i}");
        let lin = |o: usize, n: usize| (o, n);
        for (name, (o, n)) in [
            ("self_attn.q_proj", lin(heads * hd, hidden)),
            ("self_attn.k_proj", lin(kv * hd, hidden)),
            ("self_attn.v_proj", lin(kv * hd, hidden)),
            ("self_attn.o_proj", lin(hidden, heads * hd)),
            ("mlp.gate_proj", lin(inter, hidden)),
            ("mlp.up_proj", lin(inter, hidden)),
            ("mlp.down_proj", lin(hidden, inter)),
        ] {
            w.insert(format!("{p}.{name}.weight"), rand(&[o, n], 0.3));
        }
        for (name, n) in [
            ("q_proj", heads * hd),
            ("k_proj", kv * hd),
            ("v_proj", kv * hd),
        ]
        .into_iter()
        .filter(|_| qwen2)
        {
            w.insert(format!("{p}.self_attn.{name}.bias"), rand(&[n], 0.1));
        }
        for name in ["input_layernorm", "post_attention_layernorm"] {
            w.insert(
                format!("{p}.{name}.weight"),
                (rand(&[hidden], 0.1) + 1.0).unwrap(),
            );
        }
    }
    candle_core::safetensors::save(&w, dir.join("model.safetensors")).unwrap();
    dir.to_path_buf()
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
