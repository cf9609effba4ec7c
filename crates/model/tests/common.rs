//! Helpers shared by the integration tests: the tiny fixture models.
#![allow(dead_code)]

use std::path::PathBuf;

use candle_core::{Device, Tensor};
use hat_model::gguf::GgufFile;
use hat_model::hf::HfFolder;
use hat_model::loader::{Loaded, ModelInfo};
use hat_model::tokenizer::{TokenKind, TokenizerSpec};
use hat_model::{Engine, LoadOptions, SamplingParams, Tokenizer, Transformer};

pub fn fixture(arch: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("fixtures")
        .join(arch)
}

pub struct Expected {
    pub ids: Vec<u32>,
    pub logits: Tensor,
    pub greedy: Vec<u32>,
}

pub fn expected(arch: &str) -> Expected {
    let m =
        candle_core::safetensors::load(fixture(arch).join("expected.safetensors"), &Device::Cpu)
            .unwrap();
    let to_u32 = |t: &Tensor| {
        t.to_vec1::<i64>()
            .unwrap()
            .into_iter()
            .map(|x| x as u32)
            .collect::<Vec<_>>()
    };
    Expected {
        ids: to_u32(&m["input_ids"]),
        logits: m["logits"].clone(),
        greedy: to_u32(&m["greedy"]),
    }
}

pub fn load_hf(arch: &str, opts: LoadOptions) -> Transformer {
    let f = HfFolder::open(&fixture(arch)).unwrap();
    let mut w = f.load_tensors(&Device::Cpu).unwrap();
    Transformer::load(f.config().unwrap(), &mut w, opts, &Device::Cpu).unwrap()
}

pub fn load_gguf(arch: &str, opts: LoadOptions) -> Transformer {
    let g = GgufFile::open(&fixture(arch).join("model.gguf")).unwrap();
    let w = &mut g.load_tensors(&Device::Cpu).unwrap();
    Transformer::load(g.config().unwrap(), w, opts, &Device::Cpu).unwrap()
}

/// A tokenizer whose tokens are `t0`, `t1`, ... (no merges, no stop tokens).
pub fn dummy_tokenizer(n: usize) -> Tokenizer {
    Tokenizer::new(TokenizerSpec {
        tokens: (0..n).map(|i| format!("t{i} ")).collect(),
        kinds: vec![TokenKind::Normal; n],
        ..Default::default()
    })
    .unwrap()
}

pub fn engine(model: Transformer) -> Engine {
    let config = model.config().clone();
    let info = ModelInfo {
        source: "fixture".into(),
        parameters: config.parameter_count(),
        config,
        tensor_formats: Default::default(),
        pre_tokenizer: String::new(),
        chat_template: None,
    };
    let tokenizer = dummy_tokenizer(info.config.vocab_size);
    Engine::new(Loaded {
        model,
        tokenizer,
        chat_template: None,
        info,
    })
    .unwrap()
}

pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// The llama fixture's engine with its linear weights in `format` ("original", "q8_0", ...).
pub fn llama_engine(format: &str) -> Engine {
    engine(load_gguf(
        "llama",
        LoadOptions {
            format: format.parse().unwrap(),
            ..LoadOptions::default()
        },
    ))
}

/// A prompt that repeats itself (`ids[..9]` twice, then `ids[..3]`), so prompt-lookup
/// drafting finds drafts.
pub fn repeating_prompt(ids: &[u32]) -> Vec<u32> {
    let mut prompt = ids[..9].to_vec();
    prompt.extend_from_slice(&ids[..9]);
    prompt.extend_from_slice(&ids[..3]);
    prompt
}

/// Sampling with every knob that changes the draw: temperature, top-p and a repetition
/// penalty.
pub fn sampled_with_penalty() -> SamplingParams {
    SamplingParams {
        temperature: 0.9,
        top_p: 0.95,
        seed: 7,
        repetition_penalty: 1.1,
        ..Default::default()
    }
}

/// The PyTorch gradient fixture of `arch` (`scripts/make_grad_fixtures.py`): the trainable
/// model and the fixture's tensors.
pub fn grad_case(
    arch: &str,
) -> (
    hat_model::train::TrainModel,
    std::collections::HashMap<String, Tensor>,
) {
    let model = hat_model::train::TrainModel::from_transformer(load_hf(
        arch,
        LoadOptions {
            trainable: true,
            ..Default::default()
        },
    ))
    .unwrap();
    let f = candle_core::safetensors::load(fixture(arch).join("grads.safetensors"), &Device::Cpu)
        .unwrap();
    (model, f)
}

/// The fixture's `case` ("causal" or "packed") as a training sequence.
pub fn grad_packed(
    f: &std::collections::HashMap<String, Tensor>,
    case: &str,
) -> hat_model::train::Packed {
    let u32s = |k: &str| -> Vec<u32> {
        f[&format!("{case}.{k}")]
            .to_vec1::<i64>()
            .unwrap()
            .into_iter()
            .map(|x| x as u32)
            .collect()
    };
    hat_model::train::Packed {
        ids: u32s("ids"),
        positions: u32s("positions"),
        visible: std::sync::Arc::new(
            hat_model::train::Visible::new(u32s("prefix_end"), u32s("segment_start")).unwrap(),
        ),
        loss_rows: u32s("loss_rows"),
        targets: u32s("targets"),
        weights: Vec::new(),
    }
}

/// `n` tokens of the fixture's vocabulary built from `ids` (a prompt start longer than the
/// fixture's 11 tokens: decoding shares a prefix in whole blocks of 64 keys).
pub fn long_start(ids: &[u32], n: usize) -> Vec<u32> {
    (0..n)
        .map(|i| ids[i % ids.len()] ^ (i as u32 / 11))
        .collect()
}
