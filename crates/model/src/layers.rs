//! Shared transformer layers: linear, embedding, RMSNorm, rotary embedding, grouped-query
//! attention, SwiGLU MLP and the KV cache.
//!
//! Every layer has two paths. The inference path may use candle-nn's fused kernels
//! (`rms_norm`, `rope`/`rope_i`, `softmax_last_dim`), which have **no backward pass**. The
//! differentiable path (selected by [`OpMode::differentiable`]) uses only elementary tensor
//! ops so gradients reach every weight; `tests/grad.rs` proves it.

use candle_core::quantized::QMatMul;
use candle_core::{DType, Module, Tensor, D};

use crate::config::RopeLayout;
use crate::error::{Error, Result};
use crate::weights::LinearWeight;

/// Selects fast (no-backward) kernels or differentiable ops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpMode {
    /// Use only ops with a backward pass.
    pub differentiable: bool,
}

/// Rows from which quantised linears switch to dequantise-then-f32-GEMM.
pub const DENSE_PREFILL_MIN_ROWS: usize = 32;

/// `y = x W^T + b`.
#[derive(Debug, Clone)]
pub struct Linear {
    weight: LinearWeight,
    qmm: Option<QMatMul>,
    bias: Option<Tensor>,
}

impl Linear {
    /// Wraps a weight and optional bias (bias is kept in f32).
    pub fn new(weight: LinearWeight, bias: Option<Tensor>) -> Self {
        let qmm = weight.qmatmul();
        Self { weight, qmm, bias }
    }
    /// Stacks several linears with the same input into one (outputs concatenated), so one
    /// matmul replaces several. `None` when the weights cannot be stacked.
    pub fn fuse(parts: &[&Linear]) -> Result<Option<Linear>> {
        use candle_core::quantized::{QStorage, QTensor};
        let first = match parts.first() {
            Some(f) => f,
            None => return Ok(None),
        };
        let weight = match &first.weight {
            LinearWeight::Quant(q0) => {
                let mut bytes = Vec::new();
                let mut rows = 0;
                let cols = q0.shape().dims()[1];
                for p in parts {
                    match &p.weight {
                        LinearWeight::Quant(q)
                            if q.dtype() == q0.dtype() && q.shape().dims()[1] == cols =>
                        {
                            bytes.extend_from_slice(&q.data()?);
                            rows += q.shape().dims()[0];
                        }
                        _ => return Ok(None),
                    }
                }
                let storage =
                    QStorage::from_data(std::borrow::Cow::Owned(bytes), &q0.device(), q0.dtype())?;
                LinearWeight::Quant(std::sync::Arc::new(QTensor::new(storage, (rows, cols))?))
            }
            LinearWeight::Packed(_) => return Ok(None),
            LinearWeight::Dense(w0) => {
                let mut ws = Vec::new();
                for p in parts {
                    match &p.weight {
                        LinearWeight::Dense(w) if w.dtype() == w0.dtype() => ws.push(w.clone()),
                        _ => return Ok(None),
                    }
                }
                LinearWeight::Dense(Tensor::cat(&ws, 0)?)
            }
        };
        let bias = if parts.iter().any(|p| p.bias.is_some()) {
            let mut bs = Vec::new();
            for p in parts {
                let out = p.weight.out_features()?;
                bs.push(match &p.bias {
                    Some(b) => b.clone(),
                    None => Tensor::zeros(out, DType::F32, &candle_core::Device::Cpu)?,
                });
            }
            Some(Tensor::cat(&bs, 0)?)
        } else {
            None
        };
        Ok(Some(Linear::new(weight, bias)))
    }

    /// Switches Q4_0 / Q4_1 / Q8_0 weights on the CPU to the kernels' layout.
    pub fn pack_for_cpu(&mut self) {
        let w = std::mem::replace(
            &mut self.weight,
            LinearWeight::Dense(
                Tensor::zeros(0, DType::F32, &candle_core::Device::Cpu).expect("empty tensor"),
            ),
        );
        self.weight = w.packed_for_cpu();
        self.qmm = self.weight.qmatmul();
    }

    /// The weight.
    pub fn weight(&self) -> &LinearWeight {
        &self.weight
    }
    /// The bias, if any (added after the product, in f32).
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }
    /// The weight of a dense linear without bias (`y = x W^T` exactly), for ops that fuse
    /// the product with what follows it.
    pub fn dense_weight(&self) -> Option<&Tensor> {
        match (&self.weight, &self.bias) {
            (LinearWeight::Dense(w), None) => Some(w),
            _ => None,
        }
    }
    /// Stops tracking gradients of a dense weight and bias (values shared, not copied).
    pub(crate) fn freeze(&mut self) {
        if let LinearWeight::Dense(w) = &self.weight {
            self.weight = LinearWeight::Dense(w.detach());
        }
        self.bias = self.bias.as_ref().map(Tensor::detach);
    }
    /// Applies the layer to `(..., in)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let inner = x.dims().last().copied().unwrap_or(1).max(1);
        let rows = x.elem_count() / inner;
        let y = match (&self.qmm, &self.weight) {
            // Prefill: dequantise the block to f32 once and use the f32 GEMM, which is several
            // times faster than candle's row-by-row quantised dot products for many rows.
            (Some(_), LinearWeight::Quant(q))
                if rows >= DENSE_PREFILL_MIN_ROWS && x.dtype() == DType::F32 =>
            {
                let w = q.dequantize(x.device())?;
                let mut out = x.dims().to_vec();
                *out.last_mut().unwrap_or(&mut 0) = w.dim(0)?;
                x.reshape((rows, inner))?.matmul(&w.t()?)?.reshape(out)?
            }
            (Some(q), _) => q.forward(x)?,
            (None, LinearWeight::Packed(p)) => {
                let mut out = x.dims().to_vec();
                *out.last_mut().unwrap_or(&mut 0) = p.rows();
                let mut y = vec![0f32; rows * p.rows()];
                crate::cpu::with_elems::<f32, _>(x, |xv| p.matmul(xv, &mut y))?;
                Tensor::from_vec(y, out, x.device())?
            }
            (None, LinearWeight::Dense(w)) => {
                let dims = x.dims().to_vec();
                let x2 = x.reshape((rows, inner))?;
                let y = if w.dtype() == x.dtype() {
                    x2.matmul(&w.t()?)?
                } else {
                    x2.to_dtype(w.dtype())?
                        .matmul(&w.t()?)?
                        .to_dtype(x.dtype())?
                };
                let mut out = dims;
                *out.last_mut().unwrap_or(&mut 0) = w.dim(0)?;
                y.reshape(out)?
            }
            (None, LinearWeight::Quant(q)) => QMatMul::QTensor(q.clone()).forward(x)?,
        };
        Ok(match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }
}

/// Token embedding table (dense f32).
#[derive(Debug, Clone)]
pub struct Embedding {
    table: Tensor,
}

impl Embedding {
    /// Wraps a `(vocab, hidden)` table.
    pub fn new(table: Tensor) -> Self {
        Self { table }
    }
    /// Stops tracking gradients of the table.
    pub(crate) fn freeze(&mut self) {
        self.table = self.table.detach();
    }
    /// The table.
    pub fn table(&self) -> &Tensor {
        &self.table
    }
    /// Looks up `(b, t)` ids, giving `(b, t, hidden)`.
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let flat = ids.flatten_all()?;
        Ok(self.table.index_select(&flat, 0)?.reshape((b, t, ()))?)
    }
}

/// Root-mean-square normalisation.
#[derive(Debug, Clone)]
pub struct RmsNorm {
    pub(crate) weight: Tensor,
    pub(crate) eps: f64,
}

impl RmsNorm {
    /// Wraps a `(hidden,)` weight.
    pub fn new(weight: Tensor, eps: f64) -> Self {
        Self { weight, eps }
    }
    /// Normalises the last dimension.
    pub fn forward(&self, x: &Tensor, mode: OpMode) -> Result<Tensor> {
        if mode.differentiable {
            let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
            let inv = (ms + self.eps)?.sqrt()?.recip()?;
            Ok(x.broadcast_mul(&inv)?.broadcast_mul(&self.weight)?)
        } else {
            Ok(candle_nn::ops::rms_norm(
                &x.contiguous()?,
                &self.weight,
                self.eps as f32,
            )?)
        }
    }
}

/// Precomputed rotary tables.
#[derive(Debug, Clone)]
pub struct Rotary {
    cos: Tensor,
    sin: Tensor,
    pub(crate) layout: RopeLayout,
}

impl Rotary {
    /// Tables for positions `0..max_pos` from inverse frequencies.
    pub fn new(
        inv_freqs: &[f32],
        max_pos: usize,
        layout: RopeLayout,
        dev: &candle_core::Device,
    ) -> Result<Self> {
        let half = inv_freqs.len();
        let inv = Tensor::from_slice(inv_freqs, (1, half), dev)?;
        let pos = Tensor::arange(0u32, max_pos as u32, dev)?
            .to_dtype(DType::F32)?
            .reshape((max_pos, 1))?;
        let freqs = pos.broadcast_mul(&inv)?;
        Ok(Self {
            cos: freqs.cos()?,
            sin: freqs.sin()?,
            layout,
        })
    }

    /// Maximum position covered.
    pub fn max_positions(&self) -> usize {
        self.cos.dim(0).unwrap_or(0)
    }

    /// `(b, t, d/2)` cos and sin for a `(b, t)` u32 position tensor.
    pub fn tables(&self, positions: &Tensor) -> Result<(Tensor, Tensor)> {
        let (b, t) = positions.dims2()?;
        let flat = positions.flatten_all()?;
        let cos = self.cos.index_select(&flat, 0)?.reshape((b, t, ()))?;
        let sin = self.sin.index_select(&flat, 0)?.reshape((b, t, ()))?;
        Ok((cos, sin))
    }

    /// Rotates `(b, h, t, d)`.
    pub fn apply(&self, x: &Tensor, cos: &Tensor, sin: &Tensor, mode: OpMode) -> Result<Tensor> {
        if !mode.differentiable {
            let x = x.contiguous()?;
            return Ok(match self.layout {
                RopeLayout::Interleaved => candle_nn::rotary_emb::rope_i(&x, cos, sin)?,
                RopeLayout::HalfSplit => candle_nn::rotary_emb::rope(&x, cos, sin)?,
            });
        }
        let (b, h, t, d) = x.dims4()?;
        let cos = cos.unsqueeze(1)?; // (b,1,t,d/2)
        let sin = sin.unsqueeze(1)?;
        match self.layout {
            RopeLayout::HalfSplit => {
                let x1 = x.narrow(D::Minus1, 0, d / 2)?;
                let x2 = x.narrow(D::Minus1, d / 2, d / 2)?;
                let r1 = (x1.broadcast_mul(&cos)? - x2.broadcast_mul(&sin)?)?;
                let r2 = (x2.broadcast_mul(&cos)? + x1.broadcast_mul(&sin)?)?;
                Ok(Tensor::cat(&[r1, r2], D::Minus1)?)
            }
            RopeLayout::Interleaved => {
                let xr = x.reshape((b, h, t, d / 2, 2))?;
                let x1 = xr.narrow(D::Minus1, 0, 1)?.squeeze(D::Minus1)?;
                let x2 = xr.narrow(D::Minus1, 1, 1)?.squeeze(D::Minus1)?;
                let r1 = (x1.broadcast_mul(&cos)? - x2.broadcast_mul(&sin)?)?;
                let r2 = (x2.broadcast_mul(&cos)? + x1.broadcast_mul(&sin)?)?;
                Ok(Tensor::stack(&[r1, r2], D::Minus1)?.reshape((b, h, t, d))?)
            }
        }
    }
}

/// Softmax over the last dimension.
pub fn softmax_last(x: &Tensor, mode: OpMode) -> Result<Tensor> {
    if mode.differentiable {
        let max = x.max_keepdim(D::Minus1)?.detach();
        let e = x.broadcast_sub(&max)?.exp()?;
        let s = e.sum_keepdim(D::Minus1)?;
        Ok(e.broadcast_div(&s)?)
    } else {
        Ok(candle_nn::ops::softmax_last_dim(&x.contiguous()?)?)
    }
}

/// Keys and values of one layer, `(b, kv_heads, T, head_dim)`, in buffers preallocated
/// with spare capacity so decoding appends in place instead of copying the whole cache
/// every token. Clones share the buffers copy-on-write: a cache whose buffers are also held
/// by a clone (e.g. a prefix-cache entry) copies them before its first append, so a clone
/// never sees later writes and never goes stale. Tensors that track gradients are
/// concatenated instead (in-place writes have no backward pass).
///
/// A batch whose rows begin with the same keys and values may hold that prefix once
/// ([`KvCache::shared`], `(1, kv_heads, S, head_dim)`): every row attends to it before its
/// own positions, so a decode step reads it once for the whole batch instead of once a row.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    buf: Option<(Tensor, Tensor)>,
    len: usize,
    owner: std::sync::Arc<()>,
    shared: Option<(Tensor, Tensor)>,
}

/// Minimum capacity (positions) of a fresh KV buffer.
const KV_MIN_CAPACITY: usize = 256;

impl KvCache {
    /// Appends new keys/values `(b, kv_heads, t, head_dim)` and returns the full ones.
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let t = k.dim(2)?;
        // keep one element type per cache (the first append decides)
        let (k, v) = match &self.buf {
            Some((bk, _)) if bk.dtype() != k.dtype() && !k.track_op() => {
                (&k.to_dtype(bk.dtype())?, &v.to_dtype(bk.dtype())?)
            }
            _ => (k, v),
        };
        if k.track_op() || v.track_op() {
            let (nk, nv) = match self.tensors() {
                Some((pk, pv)) => (Tensor::cat(&[&pk, k], 2)?, Tensor::cat(&[&pv, v], 2)?),
                None => (k.clone(), v.clone()),
            };
            self.len += t;
            self.buf = Some((nk.clone(), nv.clone()));
            self.owner = std::sync::Arc::new(());
            return Ok((nk, nv));
        }
        let cap = self
            .buf
            .as_ref()
            .map_or(0, |(bk, _)| bk.dim(2).unwrap_or(0));
        let aliased = std::sync::Arc::strong_count(&self.owner) > 1;
        if self.buf.is_none() || self.len + t > cap || aliased {
            let new_cap = if self.len + t > cap {
                (self.len + t).max(2 * cap).max(KV_MIN_CAPACITY)
            } else {
                cap
            };
            let (b, h, _, d) = k.dims4()?;
            let nk = Tensor::zeros((b, h, new_cap, d), k.dtype(), k.device())?;
            let nv = Tensor::zeros((b, h, new_cap, d), v.dtype(), v.device())?;
            if let Some((pk, pv)) = self.tensors() {
                nk.slice_set(&pk.contiguous()?, 2, 0)?;
                nv.slice_set(&pv.contiguous()?, 2, 0)?;
            }
            self.buf = Some((nk, nv));
            self.owner = std::sync::Arc::new(());
        }
        let (bk, bv) = self
            .buf
            .as_ref()
            .ok_or_else(|| candle_core::Error::Msg("kv buffer".into()))?;
        bk.slice_set(&k.contiguous()?, 2, self.len)?;
        bv.slice_set(&v.contiguous()?, 2, self.len)?;
        self.len += t;
        Ok((bk.narrow(2, 0, self.len)?, bv.narrow(2, 0, self.len)?))
    }
    /// Cached length.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Forgets the positions from `len` on (a speculative draft the sampler did not take);
    /// the next append writes over them.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bytes held (including spare capacity and a shared prefix).
    pub fn bytes(&self) -> usize {
        [self.buf.as_ref(), self.shared.as_ref()]
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.elem_count() + v.elem_count()) * k.dtype().size_in_bytes())
            .sum()
    }
    /// Keys and values (views of the first `len` positions).
    pub fn tensors(&self) -> Option<(Tensor, Tensor)> {
        let (k, v) = self.buf.as_ref()?;
        Some((
            k.narrow(2, 0, self.len).ok()?,
            v.narrow(2, 0, self.len).ok()?,
        ))
    }
    /// Builds from tensors.
    pub fn from_tensors(k: Tensor, v: Tensor) -> Self {
        let len = k.dim(2).unwrap_or(0);
        Self {
            buf: Some((k, v)),
            len,
            owner: std::sync::Arc::new(()),
            shared: None,
        }
    }
    /// Builds from buffers whose first `len` positions hold keys and values (the rest is room
    /// to append into).
    pub(crate) fn from_buffers(k: Tensor, v: Tensor, len: usize) -> Self {
        Self {
            buf: Some((k, v)),
            len,
            owner: std::sync::Arc::new(()),
            shared: None,
        }
    }
    /// Puts a prefix `(1, kv_heads, S, head_dim)` that every row attends to before its own
    /// positions (see the type's docs; [`crate::Cache::stack_shared`] builds it).
    pub(crate) fn set_shared(&mut self, k: Tensor, v: Tensor) {
        self.shared = Some((k, v));
    }
    /// The shared prefix's keys and values, if any.
    pub fn shared(&self) -> Option<(&Tensor, &Tensor)> {
        self.shared.as_ref().map(|(k, v)| (k, v))
    }
    /// Positions in the shared prefix (0 without one).
    pub fn shared_len(&self) -> usize {
        self.shared
            .as_ref()
            .map_or(0, |(k, _)| k.dim(2).unwrap_or(0))
    }
}

/// The q, k, v projections: separate (training) or stacked into one matmul (inference).
#[derive(Debug, Clone)]
pub enum Qkv {
    Separate { q: Linear, k: Linear, v: Linear },
    Fused(Linear),
}

impl Qkv {
    /// Stacks the projections when possible.
    pub fn fuse(self) -> Result<Self> {
        Ok(match &self {
            Self::Separate { q, k, v } => match Linear::fuse(&[q, k, v])? {
                Some(f) => Self::Fused(f),
                None => self,
            },
            Self::Fused(_) => self,
        })
    }
    /// The linears held.
    pub fn linears(&self) -> Vec<&Linear> {
        match self {
            Self::Separate { q, k, v } => vec![q, k, v],
            Self::Fused(f) => vec![f],
        }
    }
}

/// The gate and up projections: separate or stacked.
#[derive(Debug, Clone)]
pub enum GateUp {
    Separate { gate: Linear, up: Linear },
    Fused(Linear),
}

impl GateUp {
    /// Stacks the projections when possible.
    pub fn fuse(self) -> Result<Self> {
        Ok(match &self {
            Self::Separate { gate, up } => match Linear::fuse(&[gate, up])? {
                Some(f) => Self::Fused(f),
                None => self,
            },
            Self::Fused(_) => self,
        })
    }
    /// The linears held.
    pub fn linears(&self) -> Vec<&Linear> {
        match self {
            Self::Separate { gate, up } => vec![gate, up],
            Self::Fused(f) => vec![f],
        }
    }
}

/// Grouped-query self-attention.
#[derive(Debug, Clone)]
pub struct Attention {
    pub qkv: Qkv,
    pub o: Linear,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
}

fn repeat_kv(x: Tensor, n_rep: usize) -> Result<Tensor> {
    if n_rep == 1 {
        return Ok(x);
    }
    let (b, kvh, t, d) = x.dims4()?;
    Ok(x.unsqueeze(2)?
        .broadcast_as((b, kvh, n_rep, t, d))?
        .reshape((b, kvh * n_rep, t, d))?)
}

/// Per-pass inputs every attention layer shares: rotary tables for the pass's positions,
/// and the masking (an additive mask tensor for the generic path, left padding per row for
/// the fused one).
#[derive(Debug, Clone, Copy)]
pub struct AttnInputs<'a> {
    pub rotary: &'a Rotary,
    pub cos_sin: &'a (Tensor, Tensor),
    /// Additive `(b, 1, t, T)`, or `None` for a single query or when [`fused_attention`] holds.
    pub mask: Option<&'a Tensor>,
    pub pads: &'a [usize],
    /// Element type of the KV cache on the fused path (f16 halves decode's memory traffic).
    pub kv_dtype: DType,
    /// Prompt tokens ([`crate::model::Transformer::forward_prompt`]): the fused path's
    /// prefill kernels however few they are.
    pub prompt: bool,
}

/// Whether [`crate::attention::causal_attention`] replaces the generic path (CPU, f32,
/// inference only); the caller then needs no mask tensor.
pub fn fused_attention(x: &Tensor, mode: OpMode) -> bool {
    !mode.differentiable && x.device().is_cpu() && x.dtype() == DType::F32
}

impl Attention {
    /// `x: (b, t, hidden)`.
    pub fn forward(
        &self,
        x: &Tensor,
        inp: &AttnInputs,
        cache: &mut KvCache,
        mode: OpMode,
    ) -> Result<Tensor> {
        let AttnInputs {
            rotary,
            cos_sin,
            mask,
            pads,
            kv_dtype,
            prompt,
        } = *inp;
        let (b, t, _) = x.dims3()?;
        let (h, kvh, hd) = (self.num_heads, self.num_kv_heads, self.head_dim);
        let (q, k, v) = match &self.qkv {
            Qkv::Fused(qkv) => {
                let y = qkv.forward(x)?;
                (
                    y.narrow(2, 0, h * hd)?,
                    y.narrow(2, h * hd, kvh * hd)?,
                    y.narrow(2, (h + kvh) * hd, kvh * hd)?,
                )
            }
            Qkv::Separate { q, k, v } => (q.forward(x)?, k.forward(x)?, v.forward(x)?),
        };
        let q = q.reshape((b, t, h, hd))?.transpose(1, 2)?;
        let k = k.reshape((b, t, kvh, hd))?.transpose(1, 2)?;
        let v = v.reshape((b, t, kvh, hd))?.transpose(1, 2)?.contiguous()?;
        let q = rotary.apply(&q, &cos_sin.0, &cos_sin.1, mode)?;
        let k = rotary.apply(&k, &cos_sin.0, &cos_sin.1, mode)?;
        let n_rep = h / kvh;
        let scale = 1.0 / (hd as f64).sqrt();
        if fused_attention(x, mode) {
            let (k, v) = cache.append(&k.to_dtype(kv_dtype)?, &v.to_dtype(kv_dtype)?)?;
            let y = crate::attention::causal_attention(
                &q,
                &k,
                &v,
                pads,
                scale as f32,
                cache.shared(),
                prompt,
            )?;
            return self.o.forward(&y);
        }
        if cache.shared.is_some() {
            return Err(Error::InvalidArgument(
                "a KV cache with a shared prefix runs only on the fused CPU inference path".into(),
            ));
        }
        let (k, v) = cache.append(&k, &v)?;
        // a cache filled by the fused path may hold f16
        let (k, v) = (k.to_dtype(q.dtype())?, v.to_dtype(q.dtype())?);
        let y = if n_rep > 1 && t == 1 && !mode.differentiable {
            // Decode, any batch: fold each kv group's query heads into rows and
            // read the cache in place. Repeating k/v per query head would copy
            // the whole cache every step (for batch 8 at 1.8k context, ~2 GB).
            let q = q.contiguous()?.reshape((b, kvh, n_rep, hd))?;
            let att = (q.matmul(&k.t()?)? * scale)?; // (b, kvh, n_rep, T)
            let att = match mask {
                // (b, 1, 1, T) broadcasts over groups and heads.
                Some(m) => att.broadcast_add(m)?,
                None => att,
            };
            let att = softmax_last(&att, mode)?;
            att.matmul(&v)?.reshape((b, h, 1, hd))?
        } else {
            let k = repeat_kv(k, n_rep)?.contiguous()?;
            let v = repeat_kv(v, n_rep)?.contiguous()?;
            let att = (q.contiguous()?.matmul(&k.t()?)? * scale)?;
            let att = match mask {
                Some(m) => att.broadcast_add(m)?,
                None => att,
            };
            let att = softmax_last(&att, mode)?;
            att.matmul(&v)?
        };
        let y = y.transpose(1, 2)?.reshape((b, t, h * hd))?;
        self.o.forward(&y)
    }
}

/// SwiGLU feed-forward.
#[derive(Debug, Clone)]
pub struct Mlp {
    pub gate_up: GateUp,
    pub down: Linear,
}

impl Mlp {
    /// `down(silu(gate(x)) * up(x))`.
    pub fn forward(&self, x: &Tensor, mode: OpMode) -> Result<Tensor> {
        let (g, u) = match &self.gate_up {
            GateUp::Fused(gu) => {
                let y = gu.forward(x)?;
                let i = y.dim(2)? / 2;
                if !mode.differentiable && y.device().is_cpu() && y.dtype() == DType::F32 {
                    let (b, t, _) = y.dims3()?;
                    let mut a = vec![0f32; b * t * i];
                    crate::cpu::with_elems::<f32, _>(&y, |ys| {
                        crate::simd::silu_mul(ys, i, &mut a)
                    })?;
                    return self
                        .down
                        .forward(&Tensor::from_vec(a, (b, t, i), y.device())?);
                }
                (y.narrow(2, 0, i)?, y.narrow(2, i, i)?)
            }
            GateUp::Separate { gate, up } => (gate.forward(x)?, up.forward(x)?),
        };
        let a = (candle_nn::ops::silu(&g)? * u)?;
        self.down.forward(&a)
    }
}

/// One pre-norm transformer block.
#[derive(Debug, Clone)]
pub struct Block {
    pub attn_norm: RmsNorm,
    pub attn: Attention,
    pub ffn_norm: RmsNorm,
    pub mlp: Mlp,
}

impl Block {
    /// Switches every linear to the SIMD kernel's layout where possible.
    pub fn pack_for_cpu(&mut self) {
        match &mut self.attn.qkv {
            Qkv::Separate { q, k, v } => [q, k, v].into_iter().for_each(Linear::pack_for_cpu),
            Qkv::Fused(f) => f.pack_for_cpu(),
        }
        self.attn.o.pack_for_cpu();
        match &mut self.mlp.gate_up {
            GateUp::Separate { gate, up } => [gate, up].into_iter().for_each(Linear::pack_for_cpu),
            GateUp::Fused(f) => f.pack_for_cpu(),
        }
        self.mlp.down.pack_for_cpu();
    }
    /// Stops tracking gradients of every weight of the block.
    pub(crate) fn freeze(&mut self) {
        for n in [&mut self.attn_norm, &mut self.ffn_norm] {
            n.weight = n.weight.detach();
        }
        match &mut self.attn.qkv {
            Qkv::Separate { q, k, v } => [q, k, v].into_iter().for_each(Linear::freeze),
            Qkv::Fused(f) => f.freeze(),
        }
        self.attn.o.freeze();
        match &mut self.mlp.gate_up {
            GateUp::Separate { gate, up } => [gate, up].into_iter().for_each(Linear::freeze),
            GateUp::Fused(f) => f.freeze(),
        }
        self.mlp.down.freeze();
    }
    /// All linear layers of the block.
    pub fn linears(&self) -> Vec<&Linear> {
        let mut v = self.attn.qkv.linears();
        v.push(&self.attn.o);
        v.extend(self.mlp.gate_up.linears());
        v.push(&self.mlp.down);
        v
    }
    /// Residual attention then residual MLP.
    pub fn forward(
        &self,
        x: &Tensor,
        inp: &AttnInputs,
        cache: &mut KvCache,
        mode: OpMode,
    ) -> Result<Tensor> {
        let h = self
            .attn
            .forward(&self.attn_norm.forward(x, mode)?, inp, cache, mode)?;
        let x = (x + h)?;
        let h = self.mlp.forward(&self.ffn_norm.forward(&x, mode)?, mode)?;
        Ok((x + h)?)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use candle_core::Device;

    /// Largest absolute element difference (shared by the crate's unit tests).
    pub(crate) fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar()
            .unwrap()
    }

    #[test]
    fn fast_and_differentiable_paths_agree() {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 1.0, (2, 3, 5, 8), &dev).unwrap();
        let inv: Vec<f32> = (0..4)
            .map(|i| 1.0 / 10000f32.powf(i as f32 / 4.0))
            .collect();
        let pos = Tensor::new(&[[0u32, 1, 2, 3, 4], [3, 4, 5, 6, 7]], &dev).unwrap();
        for layout in [RopeLayout::Interleaved, RopeLayout::HalfSplit] {
            let r = Rotary::new(&inv, 16, layout, &dev).unwrap();
            let cs = r.tables(&pos).unwrap();
            let fast = r
                .apply(
                    &x,
                    &cs.0,
                    &cs.1,
                    OpMode {
                        differentiable: false,
                    },
                )
                .unwrap();
            let slow = r
                .apply(
                    &x,
                    &cs.0,
                    &cs.1,
                    OpMode {
                        differentiable: true,
                    },
                )
                .unwrap();
            assert!(max_diff(&fast, &slow) < 1e-5);
        }
        let w = Tensor::randn(0f32, 1.0, 8, &dev).unwrap();
        let n = RmsNorm::new(w, 1e-5);
        let a = n
            .forward(
                &x,
                OpMode {
                    differentiable: false,
                },
            )
            .unwrap();
        let b = n
            .forward(
                &x,
                OpMode {
                    differentiable: true,
                },
            )
            .unwrap();
        assert!(max_diff(&a, &b) < 1e-5);
        let a = softmax_last(
            &x,
            OpMode {
                differentiable: false,
            },
        )
        .unwrap();
        let b = softmax_last(
            &x,
            OpMode {
                differentiable: true,
            },
        )
        .unwrap();
        assert!(max_diff(&a, &b) < 1e-6);
    }

    #[test]
    fn kv_cache_clones_do_not_go_stale() {
        let dev = Device::Cpu;
        let k = Tensor::ones((1, 2, 3, 4), DType::F32, &dev).unwrap();
        let mut c = KvCache::default();
        c.append(&k, &k).unwrap();
        let snapshot = c.clone();
        let two = (k.clone() * 2.0).unwrap();
        c.append(&two, &two).unwrap();
        assert_eq!(snapshot.len(), 3);
        assert_eq!(c.len(), 6);
        // the snapshot still sees its own values, and appending to it does not disturb `c`
        let mut s2 = snapshot.clone();
        let three = (k.clone() * 3.0).unwrap();
        s2.append(&three, &three).unwrap();
        let sum = |c: &KvCache| {
            c.tensors()
                .unwrap()
                .0
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap()
        };
        assert_eq!(sum(&snapshot), 24.0);
        assert_eq!(sum(&c), 24.0 + 48.0);
        assert_eq!(sum(&s2), 24.0 + 72.0);
    }
}
