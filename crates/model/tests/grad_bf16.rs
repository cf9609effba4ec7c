//! The training path with bf16 products (`set_matmul_precision(Bf16)`: dense layers, output
//! layer and attention) still computes the loss and gradients PyTorch computes in f32, within
//! bf16's rounding. A test binary of its own:
//! the precision is a process-wide setting, and the f32 tests beside it must not see it.

mod common;

use common::*;
use hat_model::train::MatmulPrecision;

#[test]
fn bf16_products_give_pytorchs_loss_and_gradients_within_rounding() {
    if let Err(why) = hat_model::train::set_matmul_precision(MatmulPrecision::Bf16) {
        // what this CPU does instead: refuse with a message naming the missing instructions,
        // and keep f32 (whose gradients `grad.rs` checks)
        assert!(why.to_string().contains("avx512bf16"), "{why}");
        assert_eq!(hat_model::train::matmul_precision(), MatmulPrecision::F32);
        eprintln!("bf16 training products not run here ({why}); the refusal was checked");
        return;
    }
    assert_eq!(hat_model::train::matmul_precision(), MatmulPrecision::Bf16);
    for arch in ["llama", "qwen2"] {
        let (model, f) = grad_case(arch);
        for case in ["causal", "packed"] {
            let key = |k: &str| format!("{case}.{k}");
            let p = grad_packed(&f, case);
            let (sum, n) = model.loss(&p).unwrap();
            let loss = (sum / n as f64).unwrap();
            let want = f[&key("loss")].to_vec1::<f32>().unwrap()[0];
            let got = loss.to_scalar::<f32>().unwrap();
            let rel = ((got - want) / want).abs();
            assert!(rel < 1e-2, "{arch} {case}: loss {got} vs PyTorch {want}");
            let grads = loss.backward().unwrap();
            let (mut checked, mut worst) = (0, 0f32);
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
                let scale = t
                    .abs()
                    .unwrap()
                    .max_all()
                    .unwrap()
                    .to_scalar::<f32>()
                    .unwrap();
                let diff = max_abs_diff(g, t) / scale;
                // and in the whole tensor's norm, which one unlucky element cannot dominate
                let norm = |x: &candle_core::Tensor| {
                    x.sqr()
                        .unwrap()
                        .sum_all()
                        .unwrap()
                        .to_scalar::<f32>()
                        .unwrap()
                        .sqrt()
                };
                let rel = norm(&(g - t).unwrap()) / norm(t);
                assert!(
                    diff < 1e-1 && rel < 4e-2,
                    "{arch} {case} {hf}: max |ours - PyTorch| is {diff:e} of max |grad|, {rel:e} in norm"
                );
                worst = worst.max(rel);
                checked += 1;
            }
            assert_eq!(checked, model.vars().len(), "{arch} {case}");
            // the products did change: exactly f32's numbers would mean the setting did nothing
            assert!(
                rel > 0.0 || worst > 1e-5,
                "{arch} {case}: bf16 products gave f32's results"
            );
            eprintln!("{arch} {case}: loss {rel:e} relative, worst gradient {worst:e} in norm");
        }
    }
}
