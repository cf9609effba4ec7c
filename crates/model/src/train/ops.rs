//! Fused training ops with their own backward: RMSNorm, rotary embedding and SwiGLU.
//!
//! Built from elementary tensor ops, each of these keeps every intermediate alive for the
//! backward (RMSNorm seven tensors, the rotary embedding a dozen, SwiGLU three), which for a
//! 4,000-token pack is most of the activation memory. As single ops they keep only their
//! inputs (already alive: they are outputs of the previous op) and recompute the cheap rest.

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::config::RopeLayout;
use crate::error::Result;

use super::{contiguous, with_f32};

fn to_vec(t: &Tensor) -> candle_core::Result<Vec<f32>> {
    t.flatten_all()?.to_vec1::<f32>()
}

/// Rows processed per parallel task.
const ROWS: usize = 16;

struct RmsNormOp {
    eps: f32,
}

impl CustomOp2 for RmsNormOp {
    fn name(&self) -> &'static str {
        "rms-norm-train"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = contiguous(s1, l1, "rms norm")?;
        let w = contiguous(s2, l2, "rms norm")?;
        let h = w.len();
        if h == 0 || x.len() % h != 0 {
            candle_core::bail!(
                "rms norm: input {:?} vs weight {:?}",
                l1.shape(),
                l2.shape()
            );
        }
        let mut y = vec![0f32; x.len()];
        y.par_chunks_mut(h * ROWS)
            .zip(x.par_chunks(h * ROWS))
            .for_each(|(yb, xb)| {
                for (yr, xr) in yb.chunks_exact_mut(h).zip(xb.chunks_exact(h)) {
                    let ms = xr.iter().map(|v| v * v).sum::<f32>() / h as f32;
                    let r = 1.0 / (ms + self.eps).sqrt();
                    for ((o, a), b) in yr.iter_mut().zip(xr).zip(w) {
                        *o = a * r * b;
                    }
                }
            });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }
    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        dy: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (dx, dw) = with_f32(x, |xv| {
            with_f32(w, |wv| {
                with_f32(dy, |dyv| Ok(rms_norm_backward(xv, wv, dyv, self.eps)))
            })
        })?;
        Ok((
            Some(Tensor::from_vec(dx, x.shape(), x.device())?),
            Some(Tensor::from_vec(dw, w.shape(), w.device())?),
        ))
    }
}

/// `(dx, dw)` of RMSNorm for rows of `x`, weight `w` and output gradient `dy`.
fn rms_norm_backward(xv: &[f32], wv: &[f32], dyv: &[f32], eps: f32) -> (Vec<f32>, Vec<f32>) {
    let h = wv.len();
    let mut dx = vec![0f32; xv.len()];
    let dws: Vec<Vec<f32>> = dx
        .par_chunks_mut(h * ROWS)
        .zip(xv.par_chunks(h * ROWS).zip(dyv.par_chunks(h * ROWS)))
        .map(|(dxb, (xb, gb))| {
            let mut dw = vec![0f32; h];
            for ((dxr, xr), gr) in dxb
                .chunks_exact_mut(h)
                .zip(xb.chunks_exact(h))
                .zip(gb.chunks_exact(h))
            {
                let ms = xr.iter().map(|v| v * v).sum::<f32>() / h as f32;
                let r = 1.0 / (ms + eps).sqrt();
                let mut dot = 0f32;
                for j in 0..h {
                    dot += gr[j] * wv[j] * xr[j];
                    dw[j] += gr[j] * xr[j] * r;
                }
                let c = r * r * r * dot / h as f32;
                for j in 0..h {
                    dxr[j] = r * gr[j] * wv[j] - c * xr[j];
                }
            }
            dw
        })
        .collect();
    let mut dw = vec![0f32; h];
    for part in dws {
        dw.iter_mut().zip(part).for_each(|(a, b)| *a += b);
    }
    (dx, dw)
}

/// RMSNorm over the last dimension of `x` with weight `w`, differentiable in both.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    Ok(x.contiguous()?
        .apply_op2(&w.contiguous()?, RmsNormOp { eps: eps as f32 })?)
}

/// Rotary tables for a sequence's positions: `cos`/`sin` `(t, d/2)` row-major.
#[derive(Debug)]
pub struct RopeTables {
    cos: Vec<f32>,
    sin: Vec<f32>,
    half: usize,
    layout: RopeLayout,
}

impl RopeTables {
    /// From `(t, d/2)` tensors.
    pub fn new(cos: &Tensor, sin: &Tensor, layout: RopeLayout) -> Result<Arc<Self>> {
        let half = cos.dim(candle_core::D::Minus1)?;
        Ok(Arc::new(Self {
            cos: to_vec(cos)?,
            sin: to_vec(sin)?,
            half,
            layout,
        }))
    }
    /// Rotates one head vector at position `p` (`inverse`: by the negative angle).
    #[inline]
    fn rotate(&self, x: &[f32], out: &mut [f32], p: usize, inverse: bool) {
        let half = self.half;
        let (c, s) = (
            &self.cos[p * half..(p + 1) * half],
            &self.sin[p * half..(p + 1) * half],
        );
        let sg = if inverse { -1.0 } else { 1.0 };
        match self.layout {
            RopeLayout::HalfSplit => {
                for i in 0..half {
                    let (a, b) = (x[i], x[i + half]);
                    out[i] = a * c[i] - sg * b * s[i];
                    out[i + half] = b * c[i] + sg * a * s[i];
                }
            }
            RopeLayout::Interleaved => {
                for i in 0..half {
                    let (a, b) = (x[2 * i], x[2 * i + 1]);
                    out[2 * i] = a * c[i] - sg * b * s[i];
                    out[2 * i + 1] = b * c[i] + sg * a * s[i];
                }
            }
        }
    }
    fn apply(&self, x: &[f32], shape: &Shape, inverse: bool) -> candle_core::Result<Vec<f32>> {
        // (1, t, heads, d)
        let (_, t, h, d) = shape.dims4()?;
        if d != 2 * self.half || self.cos.len() != t * self.half {
            candle_core::bail!(
                "rotary: input {shape:?} vs tables for {} positions of {}",
                self.cos.len() / self.half.max(1),
                2 * self.half
            );
        }
        let mut y = vec![0f32; x.len()];
        y.par_chunks_mut(h * d)
            .zip(x.par_chunks(h * d))
            .enumerate()
            .for_each(|(p, (yr, xr))| {
                for (yo, xi) in yr.chunks_exact_mut(d).zip(xr.chunks_exact(d)) {
                    self.rotate(xi, yo, p, inverse);
                }
            });
        Ok(y)
    }
}

struct RopeOp(Arc<RopeTables>);

impl CustomOp1 for RopeOp {
    fn name(&self) -> &'static str {
        "rope-train"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = contiguous(s, l, "rotary")?;
        Ok((
            CpuStorage::F32(self.0.apply(x, l.shape(), false)?),
            l.shape().clone(),
        ))
    }
    fn bwd(&self, x: &Tensor, _res: &Tensor, dy: &Tensor) -> candle_core::Result<Option<Tensor>> {
        // a rotation: its gradient is the inverse rotation of the output gradient
        let g = with_f32(dy, |d| self.0.apply(d, x.shape(), true))?;
        Ok(Some(Tensor::from_vec(g, x.shape(), x.device())?))
    }
}

/// Rotary embedding of `x (1, t, heads, d)` at the tables' positions.
pub fn rope(x: &Tensor, tables: &Arc<RopeTables>) -> Result<Tensor> {
    Ok(x.contiguous()?.apply_op1(RopeOp(tables.clone()))?)
}

struct SwiGluOp;

#[inline]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

impl CustomOp2 for SwiGluOp {
    fn name(&self) -> &'static str {
        "swiglu-train"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let g = contiguous(s1, l1, "swiglu")?;
        let u = contiguous(s2, l2, "swiglu")?;
        if l1.shape() != l2.shape() {
            candle_core::bail!("swiglu: gate {:?} vs up {:?}", l1.shape(), l2.shape());
        }
        let mut y = vec![0f32; g.len()];
        y.par_chunks_mut(4096)
            .zip(g.par_chunks(4096).zip(u.par_chunks(4096)))
            .for_each(|(yb, (gb, ub))| {
                for ((o, &a), &b) in yb.iter_mut().zip(gb).zip(ub) {
                    *o = a * sigmoid(a) * b;
                }
            });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }
    fn bwd(
        &self,
        g: &Tensor,
        u: &Tensor,
        _res: &Tensor,
        dy: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (dg, du) = with_f32(g, |gv| {
            with_f32(u, |uv| with_f32(dy, |dyv| Ok(swiglu_backward(gv, uv, dyv))))
        })?;
        Ok((
            Some(Tensor::from_vec(dg, g.shape(), g.device())?),
            Some(Tensor::from_vec(du, u.shape(), u.device())?),
        ))
    }
}

/// `(dg, du)` of `silu(g) * u` for the output gradient `dy`.
fn swiglu_backward(gv: &[f32], uv: &[f32], dyv: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mut dg = vec![0f32; gv.len()];
    let mut du = vec![0f32; gv.len()];
    dg.par_chunks_mut(4096)
        .zip(du.par_chunks_mut(4096))
        .enumerate()
        .for_each(|(c, (dgb, dub))| {
            let o = c * 4096;
            for k in 0..dgb.len() {
                let (a, b, d) = (gv[o + k], uv[o + k], dyv[o + k]);
                let s = sigmoid(a);
                dub[k] = d * a * s;
                dgb[k] = d * b * s * (1.0 + a * (1.0 - s));
            }
        });
    (dg, du)
}

/// `silu(g) * u`, differentiable in both.
pub fn swiglu(g: &Tensor, u: &Tensor) -> Result<Tensor> {
    Ok(g.contiguous()?.apply_op2(&u.contiguous()?, SwiGluOp)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::{OpMode, RmsNorm, Rotary};
    use candle_core::{Device, Var};

    const DIFF: OpMode = OpMode {
        differentiable: true,
    };

    use super::super::tests::max_rel as rel;

    #[test]
    fn fused_ops_match_elementary_ops_with_gradients() {
        let dev = Device::Cpu;
        // rms norm
        let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (1, 37, 24), &dev).unwrap()).unwrap();
        let w = Var::from_tensor(&Tensor::randn(1f32, 0.2, 24, &dev).unwrap()).unwrap();
        let r = Tensor::randn(0f32, 1.0, (1, 37, 24), &dev).unwrap();
        let a = rms_norm(&x, &w, 1e-5).unwrap();
        let b = RmsNorm::new(w.as_tensor().clone(), 1e-5)
            .forward(&x, DIFF)
            .unwrap();
        assert!(rel(&a, &b) < 1e-5);
        let ga = (a * &r).unwrap().sum_all().unwrap().backward().unwrap();
        let gb = (b * &r).unwrap().sum_all().unwrap().backward().unwrap();
        for v in [&x, &w] {
            assert!(rel(ga.get(v).unwrap(), gb.get(v).unwrap()) < 1e-4);
        }
        // swiglu
        let g = Var::from_tensor(&Tensor::randn(0f32, 2.0, (5000, 3), &dev).unwrap()).unwrap();
        let u = Var::from_tensor(&Tensor::randn(0f32, 1.0, (5000, 3), &dev).unwrap()).unwrap();
        let r = Tensor::randn(0f32, 1.0, (5000, 3), &dev).unwrap();
        let a = swiglu(&g, &u).unwrap();
        let b = (candle_nn::ops::silu(&g).unwrap() * u.as_tensor()).unwrap();
        assert!(rel(&a, &b) < 1e-5);
        let ga = (a * &r).unwrap().sum_all().unwrap().backward().unwrap();
        let gb = (b * &r).unwrap().sum_all().unwrap().backward().unwrap();
        for v in [&g, &u] {
            assert!(rel(ga.get(v).unwrap(), gb.get(v).unwrap()) < 1e-4);
        }
        // rotary, both layouts, positions out of order as packing makes them
        let inv: Vec<f32> = (0..4).map(|i| 1.0 / 100f32.powf(i as f32 / 4.0)).collect();
        let pos = Tensor::new(&[[0u32, 1, 2, 5, 6, 2, 3, 4]], &dev).unwrap();
        for layout in [RopeLayout::HalfSplit, RopeLayout::Interleaved] {
            let rot = Rotary::new(&inv, 16, layout, &dev).unwrap();
            let (cos, sin) = rot.tables(&pos).unwrap();
            let x =
                Var::from_tensor(&Tensor::randn(0f32, 1.0, (1, 8, 3, 8), &dev).unwrap()).unwrap();
            let r = Tensor::randn(0f32, 1.0, (1, 8, 3, 8), &dev).unwrap();
            let tables =
                RopeTables::new(&cos.squeeze(0).unwrap(), &sin.squeeze(0).unwrap(), layout)
                    .unwrap();
            let a = rope(&x, &tables).unwrap();
            let b = rot
                .apply(&x.transpose(1, 2).unwrap(), &cos, &sin, DIFF)
                .unwrap()
                .transpose(1, 2)
                .unwrap();
            assert!(rel(&a, &b) < 1e-5, "{layout:?}");
            let ga = (a * &r).unwrap().sum_all().unwrap().backward().unwrap();
            let gb = (b * &r).unwrap().sum_all().unwrap().backward().unwrap();
            assert!(
                rel(ga.get(&x).unwrap(), gb.get(&x).unwrap()) < 1e-5,
                "{layout:?}"
            );
        }
    }
}
