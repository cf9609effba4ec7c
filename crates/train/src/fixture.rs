//! Tiny random models for tests and smoke runs of the training stages: a qwen2- or
//! llama-shaped Hugging Face folder (hidden size 32, 2 layers) whose vocabulary matches the
//! committed qwen2 fixture's tokenizer and ChatML template (the fixture model's own
//! vocabulary is smaller than its tokenizer's, so it cannot sample from real prompts). Needs
//! the repository's `crates/model/tests/fixtures/qwen2`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};

use crate::error::{io, Result};

/// The committed fixture whose tokenizer and template the tiny models use.
pub fn tokenizer_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures/qwen2")
}

/// Writes a tiny `qwen2` (q/k/v biases), `llama`, or `llama+bias` (llama with
/// `attention_bias`) model with random weights drawn from `seed` into `dir`, and returns `dir`.
pub fn tiny_model(dir: &Path, seed: u64, arch: &str) -> Result<PathBuf> {
    let qwen2 = arch == "qwen2";
    let bias = qwen2 || arch == "llama+bias";
    std::fs::create_dir_all(dir).map_err(io(dir.display()))?;
    let fx = tokenizer_dir();
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fx.join(f), dir.join(f)).map_err(io(fx.join(f).display()))?;
    }
    let vocab = hat_model::loader::load_tokenizer(&fx)?.vocab_size();
    let (hidden, inter, layers, heads, kv) = (32usize, 48usize, 2usize, 4usize, 2usize);
    let hd = hidden / heads;
    let config = serde_json::json!({
        "architectures": [if qwen2 { "Qwen2ForCausalLM" } else { "LlamaForCausalLM" }],
        "model_type": if qwen2 { "qwen2" } else { "llama" },
        "attention_bias": bias,
        "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": true, "vocab_size": vocab, "hidden_act": "silu"
    });
    std::fs::write(dir.join("config.json"), config.to_string()).map_err(io(dir.display()))?;
    let dev = Device::Cpu;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut rand = |shape: &[usize], scale: f32| -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| (rng.gen::<f32>() * 2.0 - 1.0) * scale * 1.7)
            .collect();
        Ok(Tensor::from_vec(v, shape, &dev)?)
    };
    let mut w: HashMap<String, Tensor> = HashMap::new();
    w.insert(
        "model.embed_tokens.weight".into(),
        rand(&[vocab, hidden], 0.5)?,
    );
    w.insert("model.norm.weight".into(), (rand(&[hidden], 0.1)? + 1.0)?);
    for i in 0..layers {
        let p = format!("model.layers.{i}");
        for (name, o, n) in [
            ("self_attn.q_proj", heads * hd, hidden),
            ("self_attn.k_proj", kv * hd, hidden),
            ("self_attn.v_proj", kv * hd, hidden),
            ("self_attn.o_proj", hidden, heads * hd),
            ("mlp.gate_proj", inter, hidden),
            ("mlp.up_proj", inter, hidden),
            ("mlp.down_proj", hidden, inter),
        ] {
            w.insert(format!("{p}.{name}.weight"), rand(&[o, n], 0.3)?);
        }
        if bias {
            for (name, n) in [
                ("q_proj", heads * hd),
                ("k_proj", kv * hd),
                ("v_proj", kv * hd),
            ] {
                w.insert(format!("{p}.self_attn.{name}.bias"), rand(&[n], 0.1)?);
            }
        }
        for name in ["input_layernorm", "post_attention_layernorm"] {
            w.insert(format!("{p}.{name}.weight"), (rand(&[hidden], 0.1)? + 1.0)?);
        }
    }
    candle_core::safetensors::save(&w, dir.join("model.safetensors"))?;
    Ok(dir.to_path_buf())
}
