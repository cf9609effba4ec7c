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
