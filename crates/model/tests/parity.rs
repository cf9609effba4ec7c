//! Logits and greedy output equal Hugging Face transformers' for tiny random llama and
//! qwen2 models (fixtures from `scripts/make_fixtures.py`), from safetensors and from GGUF.

mod common;

use candle_core::{Device, Tensor};
use common::*;
use hat_model::{LoadOptions, WeightFormat};

fn check_logits(model: &hat_model::Transformer, arch: &str, what: &str) {
    let e = expected(arch);
    let ids = Tensor::new(e.ids.as_slice(), &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let mut cache = model.new_cache(1);
    let logits = model
        .forward(&ids, &mut cache, false)
        .unwrap()
        .squeeze(0)
        .unwrap();
    let d = max_abs_diff(&logits, &e.logits);
    assert!(d <= 1e-4, "{arch} {what}: max abs diff {d}");
}

#[test]
fn llama_safetensors_logits_match_transformers() {
    check_logits(
        &load_hf("llama", LoadOptions::default()),
        "llama",
        "safetensors",
    );
}

#[test]
fn llama_gguf_permuted_logits_match_transformers() {
    check_logits(&load_gguf("llama", LoadOptions::default()), "llama", "gguf");
}

#[test]
fn qwen2_safetensors_logits_match_transformers() {
    check_logits(
        &load_hf("qwen2", LoadOptions::default()),
        "qwen2",
        "safetensors",
    );
}

#[test]
fn qwen2_gguf_logits_match_transformers() {
    check_logits(&load_gguf("qwen2", LoadOptions::default()), "qwen2", "gguf");
}

#[test]
fn differentiable_path_matches_transformers() {
    for arch in ["llama", "qwen2"] {
        let m = load_hf(
            arch,
            LoadOptions {
                trainable: true,
                ..Default::default()
            },
        );
        check_logits(&m, arch, "trainable");
    }
}

#[test]
fn kv_cache_incremental_decode_matches_full_forward() {
    for arch in ["llama", "qwen2"] {
        let e = expected(arch);
        let model = load_gguf(arch, LoadOptions::default());
        let mut cache = model.new_cache(1);
        // first 4 tokens at once, then one at a time
        let mut rows = Vec::new();
        let first = Tensor::new(&e.ids[..4], &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        rows.push(
            model
                .forward(&first, &mut cache, false)
                .unwrap()
                .squeeze(0)
                .unwrap(),
        );
        for &t in &e.ids[4..] {
            let x = Tensor::new(&[t], &Device::Cpu)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            rows.push(
                model
                    .forward(&x, &mut cache, false)
                    .unwrap()
                    .squeeze(0)
                    .unwrap(),
            );
        }
        let all = Tensor::cat(&rows, 0).unwrap();
        let d = max_abs_diff(&all, &e.logits);
        assert!(d <= 1e-4, "{arch}: {d}");
    }
}

#[test]
fn greedy_generation_matches_transformers() {
    for arch in ["llama", "qwen2"] {
        let e = expected(arch);
        for fmt in [WeightFormat::Original, WeightFormat::F32] {
            let eng = engine(load_gguf(
                arch,
                LoadOptions {
                    format: fmt,
                    trainable: false,
                },
            ));
            let out = eng
                .generate(
                    &hat_model::GenerateRequest::new(e.ids.clone(), e.greedy.len()),
                    None,
                )
                .unwrap();
            assert_eq!(out.tokens, e.greedy, "{arch} {fmt}");
        }
    }
}

#[test]
fn requantised_formats_stay_close() {
    let e = expected("llama");
    let ids = Tensor::new(e.ids.as_slice(), &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    for (fmt, tol) in [
        (WeightFormat::F16, 0.05),
        (WeightFormat::BF16, 0.3),
        (WeightFormat::Q8_0, 0.3),
        (WeightFormat::Q4_0, 2.0),
    ] {
        let m = load_hf(
            "llama",
            LoadOptions {
                format: fmt,
                trainable: false,
            },
        );
        let mut c = m.new_cache(1);
        let l = m.forward(&ids, &mut c, false).unwrap().squeeze(0).unwrap();
        let d = max_abs_diff(&l, &e.logits);
        assert!(d < tol, "{fmt}: {d}");
    }
}
