//! The output layer and its loss as one op: `sum_i -c_i log softmax(x_i W^T)[target_i]` over
//! the loss rows (`c_i` a per-row weight, 1 unless given), without ever holding the
//! `(rows, vocab)` logits.
//!
//! Built from tensor ops, the 49,152-wide output layer of a 512-token step keeps the logits,
//! the log-softmax and their gradients alive (four `(rows, vocab)` tensors, ~400 MB) and walks
//! them several times. This op takes the rows in chunks of [`CHUNK`]: one GEMM for a chunk's
//! logits, one pass for the log-sum-exp and the softmax, and, when a backward will follow,
//! the two GEMMs of the gradient at once (`dX = (P - Y) W`, `dW += (P - Y)^T X`), so the
//! backward only scales them by the incoming gradient. The three GEMMs are the ones the
//! unfused graph runs too; what goes is the memory and the element-wise passes.

use std::sync::{Arc, Mutex};

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::error::{Error, Result};

use super::attention::gemm_par;
use super::contiguous;

/// Loss rows per chunk: the logits of one chunk are `CHUNK x vocab` floats (25 MB for
/// SmolLM2), and `dW`'s GEMM has `CHUNK` as its inner dimension, long enough to run near
/// the GEMM's peak.
const CHUNK: usize = 128;

/// `(dX, dW)` as the forward computes them.
type Grads = (Vec<f32>, Vec<f32>);

/// Which gradients the forward prepares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grad {
    /// None: no backward follows.
    None,
    /// `dX` only: the output layer is frozen, so its GEMM is skipped.
    Rows,
    /// `dX` and `dW`.
    RowsAndWeight,
}

/// What the forward computes: the summed loss, and with `grad` the loss's gradients for
/// `x (rows, d)` and `w (vocab, d)` (`dW` empty when not asked for).
fn run(
    x: &[f32],
    w: &[f32],
    targets: &[u32],
    weights: &[f32],
    (rows, d, vocab): (usize, usize, usize),
    grad: Grad,
) -> (f64, Option<Grads>) {
    let mut logits = vec![0f32; CHUNK.min(rows) * vocab];
    let grad_w = grad == Grad::RowsAndWeight;
    let grad = grad != Grad::None;
    let dx_len = if grad { rows * d } else { 0 };
    let dw_len = if grad_w { vocab * d } else { 0 };
    let (mut dx, mut dw) = (vec![0f32; dx_len], vec![0f32; dw_len]);
    let mut loss = 0f64;
    for r0 in (0..rows).step_by(CHUNK) {
        let n = CHUNK.min(rows - r0);
        let xc = &x[r0 * d..(r0 + n) * d];
        let lc = &mut logits[..n * vocab];
        // SAFETY: `xc` is n x d, `w` is vocab x d (read transposed: d x vocab), `lc` n x vocab.
        unsafe {
            gemm_par(
                (n, vocab, d),
                lc.as_mut_ptr(),
                false,
                (xc.as_ptr(), d, 1),
                (w.as_ptr(), 1, d),
            )
        };
        let tc = &targets[r0..r0 + n];
        loss += lc
            .par_chunks_mut(vocab)
            .zip(tc.par_iter())
            .enumerate()
            .map(|(i, (l, &t))| {
                let c = weights.get(r0 + i).copied().unwrap_or(1.0);
                let lt = l[t as usize];
                if !grad {
                    return c as f64 * (crate::simd::log_sum_exp(l) - lt) as f64;
                }
                let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum = crate::simd::softmax_unnormalised(l);
                let inv = 1.0 / sum;
                l.iter_mut().for_each(|v| *v *= inv);
                l[t as usize] -= 1.0;
                // the row's gradient (P - Y) carries its weight into both GEMMs below
                if c != 1.0 {
                    l.iter_mut().for_each(|v| *v *= c);
                }
                c as f64 * (sum.ln() + max - lt) as f64
            })
            .sum::<f64>();
        if grad {
            // SAFETY: `lc` (P - Y) is n x vocab, `w` vocab x d, `dx`'s rows n x d.
            unsafe {
                gemm_par(
                    (n, d, vocab),
                    dx[r0 * d..].as_mut_ptr(),
                    false,
                    (lc.as_ptr(), vocab, 1),
                    (w.as_ptr(), d, 1),
                );
            }
        }
        if grad_w {
            // SAFETY: as above; `dw` is vocab x d.
            unsafe {
                // (P - Y)^T (vocab x n) times the chunk's rows (n x d), added to dW
                gemm_par(
                    (vocab, d, n),
                    dw.as_mut_ptr(),
                    true,
                    (lc.as_ptr(), 1, vocab),
                    (xc.as_ptr(), d, 1),
                );
            }
        }
    }
    (loss, grad.then_some((dx, dw)))
}

struct HeadNll {
    targets: Arc<[u32]>,
    /// Per-row loss weights (empty: 1 each).
    weights: Arc<[f32]>,
    /// The gradients the forward also computes (a backward will follow).
    grad: Grad,
    /// The gradients the forward computed, taken by the backward.
    grads: Mutex<Option<Grads>>,
}

fn dims(x: &Layout, w: &Layout, targets: usize) -> candle_core::Result<(usize, usize, usize)> {
    let (rows, d) = x.shape().dims2()?;
    let (vocab, dw) = w.shape().dims2()?;
    if d != dw || rows != targets {
        candle_core::bail!(
            "output-layer loss: rows {:?}, weight {:?}, {targets} targets",
            x.shape(),
            w.shape()
        );
    }
    Ok((rows, d, vocab))
}

impl CustomOp2 for HeadNll {
    fn name(&self) -> &'static str {
        "output-layer-nll"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let dims = dims(l1, l2, self.targets.len())?;
        let what = "output-layer loss";
        let (x, w) = (contiguous(s1, l1, what)?, contiguous(s2, l2, what)?);
        let (loss, grads) = run(x, w, &self.targets, &self.weights, dims, self.grad);
        *self.grads.lock().unwrap_or_else(|e| e.into_inner()) = grads;
        Ok((CpuStorage::F32(vec![loss as f32]), Shape::from(())))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let g = grad_res.to_scalar::<f32>()?;
        let (dx, dw) = match self.grads.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(grads) => grads,
            // a second backward through the same graph, or a forward that was told no
            // backward would follow: compute them now
            None => {
                let dims = dims(x.layout(), w.layout(), self.targets.len())?;
                let flat = |t: &Tensor| t.flatten_all()?.to_vec1::<f32>();
                let (xv, wv) = (flat(x)?, flat(w)?);
                match run(
                    &xv,
                    &wv,
                    &self.targets,
                    &self.weights,
                    dims,
                    Grad::RowsAndWeight,
                )
                .1
                {
                    Some(grads) => grads,
                    None => candle_core::bail!("output-layer loss: no gradient computed"),
                }
            }
        };
        let scale = |mut v: Vec<f32>, shape: &Shape| {
            if g != 1.0 {
                v.par_iter_mut().for_each(|a| *a *= g);
            }
            Tensor::from_vec(v, shape, x.device())
        };
        let dw = if dw.is_empty() {
            None
        } else {
            Some(scale(dw, w.shape())?)
        };
        Ok((Some(scale(dx, x.shape())?), dw))
    }
}

/// The summed negative log-likelihood of `targets` under the logits `x w^T`, for `x (rows, d)`
/// and the output layer's weight `w (vocab, d)` (f32 on the CPU), each row's term times its
/// entry of `weights` (empty: 1 each): a scalar, differentiable in both. With `backward`, the
/// forward also computes the gradients (the backward only scales them; `w`'s only when it is a
/// trained variable); without, it computes the loss alone and a backward, if one comes,
/// recomputes.
pub fn output_nll(
    x: &Tensor,
    w: &Tensor,
    targets: &[u32],
    weights: &[f32],
    backward: bool,
) -> Result<Tensor> {
    let vocab = w.dim(0)?;
    if let Some(&t) = targets.iter().find(|&&t| t as usize >= vocab) {
        return Err(Error::InvalidArgument(format!(
            "target token {t} is outside the vocabulary of {vocab}"
        )));
    }
    if !weights.is_empty() && weights.len() != targets.len() {
        return Err(Error::InvalidArgument(format!(
            "{} loss weights for {} targets",
            weights.len(),
            targets.len()
        )));
    }
    let op = HeadNll {
        targets: targets.into(),
        weights: weights.into(),
        grad: match (backward, w.is_variable()) {
            (false, _) => Grad::None,
            (true, false) => Grad::Rows,
            (true, true) => Grad::RowsAndWeight,
        },
        grads: Mutex::new(None),
    };
    Ok(x.contiguous()?.apply_op2(&w.contiguous()?, op)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::tests::max_rel;
    use candle_core::{Device, Var, D};

    fn reference(x: &Tensor, w: &Tensor, targets: &[u32]) -> Tensor {
        let logits = x.matmul(&w.t().unwrap()).unwrap();
        let lsm = candle_nn::ops::log_softmax(&logits, D::Minus1).unwrap();
        let t = Tensor::from_slice(targets, (targets.len(), 1), &Device::Cpu).unwrap();
        lsm.gather(&t, 1).unwrap().sum_all().unwrap().neg().unwrap()
    }

    fn inputs(rows: usize, d: usize, vocab: usize) -> (Var, Var, Vec<u32>) {
        let dev = Device::Cpu;
        let x = Var::from_tensor(&(Tensor::randn(0f32, 1.0, (rows, d), &dev).unwrap())).unwrap();
        let w = Var::from_tensor(&(Tensor::randn(0f32, 0.5, (vocab, d), &dev).unwrap())).unwrap();
        let targets = (0..rows).map(|i| ((i * 7919) % vocab) as u32).collect();
        (x, w, targets)
    }

    #[test]
    fn loss_and_gradients_match_the_unfused_graph() {
        // more rows than one chunk, so chunk boundaries and dW's accumulation are covered
        let (x, w, targets) = inputs(CHUNK + 37, 24, 301);
        let want = reference(x.as_tensor(), w.as_tensor(), &targets);
        let gw = want.backward().unwrap();
        for backward in [true, false] {
            let got = output_nll(x.as_tensor(), w.as_tensor(), &targets, &[], backward).unwrap();
            let (a, b) = (
                got.to_scalar::<f32>().unwrap(),
                want.to_scalar::<f32>().unwrap(),
            );
            assert!((a - b).abs() / b.abs() < 1e-5, "loss {a} vs {b}");
            // scaled, as the trainer does (loss / tokens)
            let g = (got * 0.25).unwrap().backward().unwrap();
            for v in [&x, &w] {
                let want = (gw.get(v.as_tensor()).unwrap() * 0.25).unwrap();
                let err = max_rel(g.get(v.as_tensor()).unwrap(), &want);
                assert!(err < 1e-5, "gradient off by {err} (backward {backward})");
            }
        }
    }

    /// Per-row weights: the loss and both gradients are the weighted sum of the rows' terms.
    #[test]
    fn weighted_rows_match_the_weighted_unfused_graph() {
        let (x, w, targets) = inputs(CHUNK + 9, 12, 97);
        let weights: Vec<f32> = (0..targets.len()).map(|i| [1.0, 3.0, 0.5][i % 3]).collect();
        let logits = x.as_tensor().matmul(&w.as_tensor().t().unwrap()).unwrap();
        let lsm = candle_nn::ops::log_softmax(&logits, D::Minus1).unwrap();
        let t = Tensor::from_slice(&targets, (targets.len(), 1), &Device::Cpu).unwrap();
        let c = Tensor::from_slice(&weights, (weights.len(), 1), &Device::Cpu).unwrap();
        let want = (lsm.gather(&t, 1).unwrap() * c)
            .unwrap()
            .sum_all()
            .unwrap()
            .neg()
            .unwrap();
        let gw = want.backward().unwrap();
        for backward in [true, false] {
            let got =
                output_nll(x.as_tensor(), w.as_tensor(), &targets, &weights, backward).unwrap();
            let (a, b) = (
                got.to_scalar::<f32>().unwrap(),
                want.to_scalar::<f32>().unwrap(),
            );
            assert!((a - b).abs() / b.abs() < 1e-5, "loss {a} vs {b}");
            let g = got.backward().unwrap();
            for v in [&x, &w] {
                let err = max_rel(
                    g.get(v.as_tensor()).unwrap(),
                    gw.get(v.as_tensor()).unwrap(),
                );
                assert!(err < 1e-5, "gradient off by {err} (backward {backward})");
            }
        }
        let e = output_nll(x.as_tensor(), w.as_tensor(), &targets, &[1.0], true).unwrap_err();
        assert!(e.to_string().contains("loss weights"), "{e}");
    }

    #[test]
    fn a_target_outside_the_vocabulary_is_an_error() {
        let (x, w, _) = inputs(2, 4, 10);
        let e = output_nll(x.as_tensor(), w.as_tensor(), &[1, 10], &[], true).unwrap_err();
        assert!(e.to_string().contains("outside the vocabulary"), "{e}");
    }

    #[test]
    fn gradient_matches_finite_differences() {
        let (x, w, targets) = inputs(5, 6, 17);
        let f = |xv: &Tensor| {
            output_nll(xv, w.as_tensor(), &targets, &[], false)
                .unwrap()
                .to_scalar::<f32>()
                .unwrap() as f64
        };
        let loss = output_nll(x.as_tensor(), w.as_tensor(), &targets, &[], true).unwrap();
        let g = loss.backward().unwrap();
        let dx = g.get(x.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
        let base = x.as_tensor().to_vec2::<f32>().unwrap();
        let eps = 1e-2f32;
        for (r, c) in [(0, 0), (2, 3), (4, 5)] {
            let mut plus = base.clone();
            plus[r][c] += eps;
            let mut minus = base.clone();
            minus[r][c] -= eps;
            let t = |m: Vec<Vec<f32>>| Tensor::new(m, &Device::Cpu).unwrap();
            let fd = (f(&t(plus)) - f(&t(minus))) / (2.0 * eps as f64);
            assert!(
                (fd - dx[r][c] as f64).abs() < 2e-3,
                "d/dx[{r}][{c}]: finite difference {fd} vs {}",
                dx[r][c]
            );
        }
    }
}
