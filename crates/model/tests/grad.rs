//! The training path is differentiable: every trainable tensor gets a finite, non-zero
//! gradient (candle-nn's fused kernels would silently stop them).

mod common;

use candle_core::{Device, Tensor};
use common::*;
use hat_model::LoadOptions;

#[test]
fn every_trainable_tensor_gets_a_finite_nonzero_grad() {
    for arch in ["llama", "qwen2"] {
        let model = load_hf(
            arch,
            LoadOptions {
                trainable: true,
                ..Default::default()
            },
        );
        let e = expected(arch);
        let n = e.ids.len();
        let ids = Tensor::new(&e.ids[..n - 1], &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let targets = Tensor::new(&e.ids[1..], &Device::Cpu).unwrap();
        let mut cache = model.new_cache(1);
        let logits = model
            .forward(&ids, &mut cache, false)
            .unwrap()
            .squeeze(0)
            .unwrap();
        let loss = candle_nn::loss::cross_entropy(&logits, &targets).unwrap();
        let grads = loss.backward().unwrap();
        let vars = model.vars();
        assert!(vars.len() > 10, "{arch}: only {} vars", vars.len());
        let expected_count = if arch == "qwen2" {
            2 * 12 + 2
        } else {
            2 * 9 + 3
        };
        assert_eq!(vars.len(), expected_count, "{arch}");
        for (name, v) in vars {
            let g = grads
                .get(v.as_tensor())
                .unwrap_or_else(|| panic!("{arch}: no grad for {name}"));
            let v = g.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            assert!(
                v.iter().all(|x| x.is_finite()),
                "{arch}: non-finite grad for {name}"
            );
            assert!(v.iter().any(|x| *x != 0.0), "{arch}: zero grad for {name}");
        }
    }
}

/// Loss and every gradient of the training path against PyTorch (transformers, f32) on the
/// tiny fixtures, for a causal sequence and a packed group (`scripts/make_grad_fixtures.py`).
#[test]
fn loss_and_every_gradient_match_pytorch_on_causal_and_packed_inputs() {
    for arch in ["llama", "qwen2"] {
        let (model, f) = grad_case(arch);
        for case in ["causal", "packed"] {
            let key = |k: &str| format!("{case}.{k}");
            let p = grad_packed(&f, case);
            let (sum, n) = model.loss(&p).unwrap();
            let loss = (sum / n as f64).unwrap();
            let want = f[&key("loss")].to_vec1::<f32>().unwrap()[0];
            let got = loss.to_scalar::<f32>().unwrap();
            assert!(
                ((got - want) / want).abs() < 1e-4,
                "{arch} {case}: loss {got} vs PyTorch {want}"
            );
            let grads = loss.backward().unwrap();
            let mut checked = 0;
            for (name, t) in &f {
                let Some(hf) = name.strip_prefix(&key("grad.")) else {
                    continue;
                };
                let ours = hat_model::hf::gguf_name(hf).unwrap();
                let (_, var) = model
                    .vars()
                    .iter()
                    .find(|(n, _)| *n == ours)
                    .unwrap_or_else(|| panic!("{arch}: no variable {ours} for {hf}"));
                let g = grads.get(var.as_tensor()).unwrap();
                // relative to the largest magnitude of the tensor's PyTorch gradient
                let scale = t
                    .abs()
                    .unwrap()
                    .max_all()
                    .unwrap()
                    .to_scalar::<f32>()
                    .unwrap();
                let diff = max_abs_diff(g, t);
                assert!(
                    scale > 0.0 && diff / scale < 1e-4,
                    "{arch} {case} {hf}: max |ours - PyTorch| {diff:e} of max |grad| {scale:e}"
                );
                checked += 1;
            }
            assert_eq!(checked, model.vars().len(), "{arch} {case}");
        }
    }
}
