//! The dense linear layer of training as one op with its own backward: `y = x W^T`, then
//! `dx = dy W` and `dW = dy^T x`, each one GEMM straight on the operands' storage.
//!
//! Candle's matmul would do the same products, but zero-fills every output before the GEMM
//! overwrites it, reaches `W^T` and `dy^T` through strided views, and computes `dW` for a
//! frozen weight (LoRA's base, a teacher) only for the gradient to be thrown away. On a
//! 2-core machine the zero fills ran on one thread while the other waited; the outputs here
//! are written once, by the GEMM.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};

use super::attention::gemm_par;
use super::{contiguous, with_f32};
use crate::error::Result;

struct LinearOp {
    /// Whether the weight wants a gradient (a trainable variable).
    grad_w: bool,
    /// Whether the input wants one (false for the first layer of a frozen embedding).
    grad_x: bool,
}

/// `c (m x n) = a (m x k) * b (k x n)` into a new vector, strides `(row, column)` in elements.
fn product(
    (m, n, k): (usize, usize, usize),
    a: (&[f32], usize, usize),
    b: (&[f32], usize, usize),
) -> Vec<f32> {
    let mut c = Vec::with_capacity(m * n);
    // SAFETY: `a` and `b` cover the matrices their strides describe (checked by the callers'
    // shapes); the GEMM writes every one of the m * n elements of `c` (not accumulating, and
    // `gemm_par` fills an empty product with zeros) before the length is set.
    unsafe {
        gemm_par(
            (m, n, k),
            c.as_mut_ptr(),
            false,
            (a.0.as_ptr(), a.1, a.2),
            (b.0.as_ptr(), b.1, b.2),
        );
        c.set_len(m * n);
    }
    c
}

/// `(rows, inputs, outputs)` of `x (..., inputs)` times `W (outputs, inputs)^T`.
fn dims(x: &Shape, w: &Shape) -> candle_core::Result<(usize, usize, usize)> {
    let (out, inp) = w.dims2()?;
    let last = x.dims().last().copied().unwrap_or(0);
    if last != inp || inp == 0 {
        candle_core::bail!("linear: input {x:?} does not end in the weight's {inp} inputs");
    }
    Ok((x.elem_count() / inp, inp, out))
}

impl CustomOp2 for LinearOp {
    fn name(&self) -> &'static str {
        "linear-train"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (rows, inp, out) = dims(l1.shape(), l2.shape())?;
        let x = contiguous(s1, l1, "linear")?;
        let w = contiguous(s2, l2, "linear")?;
        // W^T (inp x out): element (c, o) sits at w[o * inp + c]
        let y = product((rows, out, inp), (x, inp, 1), (w, 1, inp));
        let mut shape = l1.shape().dims().to_vec();
        if let Some(l) = shape.last_mut() {
            *l = out;
        }
        Ok((CpuStorage::F32(y), Shape::from(shape)))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (rows, inp, out) = dims(x.shape(), w.shape())?;
        with_f32(dy, |dyv| {
            let dx = if self.grad_x {
                let v = with_f32(w, |wv| {
                    Ok(product((rows, inp, out), (dyv, out, 1), (wv, inp, 1)))
                })?;
                Some(Tensor::from_vec(v, x.shape(), x.device())?)
            } else {
                None
            };
            let dw = if self.grad_w {
                // dy^T (out x rows): element (o, r) sits at dy[r * out + o]
                let v = with_f32(x, |xv| {
                    Ok(product((out, inp, rows), (dyv, 1, out), (xv, inp, 1)))
                })?;
                Some(Tensor::from_vec(v, w.shape(), w.device())?)
            } else {
                None
            };
            Ok((dx, dw))
        })
    }
}

/// `x W^T` for `x (..., inputs)` and an f32 weight `(outputs, inputs)` on the CPU,
/// differentiable in both (a weight that tracks no gradient gets none computed).
pub fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let op = LinearOp {
        grad_w: w.track_op(),
        grad_x: x.track_op(),
    };
    Ok(x.contiguous()?.apply_op2(&w.contiguous()?, op)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    use super::super::tests::max_rel as rel;

    #[test]
    fn linear_matches_candle_matmul_with_gradients() {
        let dev = Device::Cpu;
        // odd sizes: GEMM edge tiles in every dimension
        for (t, inp, out) in [(37, 24, 19), (1, 8, 3), (130, 65, 97)] {
            let x =
                Var::from_tensor(&Tensor::randn(0f32, 1.0, (1, t, inp), &dev).unwrap()).unwrap();
            let w = Var::from_tensor(&Tensor::randn(0f32, 0.5, (out, inp), &dev).unwrap()).unwrap();
            let r = Tensor::randn(0f32, 1.0, (1, t, out), &dev).unwrap();
            let a = linear(&x, &w).unwrap();
            let b = x.broadcast_matmul(&w.t().unwrap()).unwrap();
            assert_eq!(a.dims(), &[1, t, out]);
            assert!(rel(&a, &b) < 1e-5);
            let ga = (a * &r).unwrap().sum_all().unwrap().backward().unwrap();
            let gb = (b * &r).unwrap().sum_all().unwrap().backward().unwrap();
            for v in [&x, &w] {
                assert!(rel(ga.get(v).unwrap(), gb.get(v).unwrap()) < 1e-4);
            }
        }
    }

    #[test]
    fn a_frozen_weight_gets_no_gradient_and_the_input_still_does() {
        let dev = Device::Cpu;
        let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (5, 8), &dev).unwrap()).unwrap();
        let w = Tensor::randn(0f32, 0.5, (4, 8), &dev).unwrap();
        let g = linear(&x, &w)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        assert!(g.get(&w).is_none());
        // d sum(x W^T) / dx = the column sums of W, on every row
        let want = w.sum_keepdim(0).unwrap().broadcast_as((5, 8)).unwrap();
        assert!(rel(g.get(&x).unwrap(), &want.contiguous().unwrap()) < 1e-5);
    }

    #[test]
    fn a_weight_that_does_not_fit_the_input_is_an_error() {
        let dev = Device::Cpu;
        let x = Tensor::zeros((3, 8), candle_core::DType::F32, &dev).unwrap();
        let w = Tensor::zeros((4, 7), candle_core::DType::F32, &dev).unwrap();
        let e = linear(&x, &w).unwrap_err().to_string();
        assert!(e.contains("weight's 7 inputs"), "{e}");
    }
}
