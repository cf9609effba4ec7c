//! The model in training mode: the same [`Transformer`] and layers as inference, loaded with
//! every weight a dense f32 [`Var`], and a forward pass over packed sequences that only
//! uses differentiable ops and custom ops with their own backward.
//!
//! [`TrainModel`] is a separate type so a trainable weight can never reach an inference
//! kernel (quantised matmuls, the fused decode attention, candle-nn's fused norms) that
//! would silently drop its gradient: it can only be built trainable, and it only exposes
//! the training forward. The output layer and its softmax run only at the rows that carry
//! loss ([`Packed::loss_rows`]), about one token in six in agent trajectories.

pub mod attention;
pub mod ops;

use std::path::Path;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor, Var, D};

use crate::error::{Error, Result};
use crate::layers::{Block, GateUp, Qkv};
use crate::loader::{self, ModelInfo};
use crate::model::{LoadOptions, Transformer};
use crate::tokenizer::Tokenizer;
pub use attention::Visible;

/// One training sequence: token ids, their rotary positions, which keys each query sees,
/// and the rows whose next-token prediction is scored.
#[derive(Debug, Clone)]
pub struct Packed {
    pub ids: Vec<u32>,
    pub positions: Vec<u32>,
    pub visible: Arc<Visible>,
    /// Rows (indices into `ids`) whose logits are scored, ascending.
    pub loss_rows: Vec<u32>,
    /// The token each loss row should predict.
    pub targets: Vec<u32>,
}

impl Packed {
    /// A plain causal sequence scored at the rows where `mask[i + 1]` holds (the tokens a
    /// model should learn to produce).
    pub fn causal(ids: Vec<u32>, mask: &[bool]) -> Result<Self> {
        if mask.len() != ids.len() {
            return Err(Error::InvalidArgument(format!(
                "loss mask of {} for {} tokens",
                mask.len(),
                ids.len()
            )));
        }
        let n = ids.len();
        let mut loss_rows = Vec::new();
        let mut targets = Vec::new();
        for i in 1..n {
            if mask[i] {
                loss_rows.push((i - 1) as u32);
                targets.push(ids[i]);
            }
        }
        Ok(Self {
            positions: (0..n as u32).collect(),
            visible: Arc::new(Visible::causal(n)),
            ids,
            loss_rows,
            targets,
        })
    }

    /// Tokens in the sequence.
    pub fn len(&self) -> usize {
        self.ids.len()
    }
    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
    fn check(&self, vocab: usize, max_pos: usize) -> Result<()> {
        let n = self.ids.len();
        if n == 0 {
            return Err(Error::InvalidArgument("empty training sequence".into()));
        }
        if self.positions.len() != n || self.visible.len() != n {
            return Err(Error::InvalidArgument(format!(
                "training sequence of {n} tokens has {} positions and visibility for {}",
                self.positions.len(),
                self.visible.len()
            )));
        }
        if self.loss_rows.len() != self.targets.len() {
            return Err(Error::InvalidArgument(format!(
                "{} loss rows for {} targets",
                self.loss_rows.len(),
                self.targets.len()
            )));
        }
        if let Some(&p) = self.positions.iter().max() {
            if p as usize >= max_pos {
                return Err(Error::ContextOverflow {
                    prompt: p as usize + 1,
                    max_new_tokens: 0,
                    context: max_pos,
                });
            }
        }
        if let Some(&id) = self
            .ids
            .iter()
            .chain(&self.targets)
            .find(|&&i| i as usize >= vocab)
        {
            return Err(Error::InvalidArgument(format!(
                "token id {id} is outside the vocabulary of {vocab}"
            )));
        }
        if self.loss_rows.iter().any(|&r| r as usize >= n) {
            return Err(Error::InvalidArgument(
                "a loss row is past the sequence".into(),
            ));
        }
        Ok(())
    }
}

/// A model whose weights are trainable.
#[derive(Debug)]
pub struct TrainModel {
    inner: Transformer,
}

/// What [`TrainModel::load`] returns beside the model.
#[derive(Debug)]
pub struct TrainLoaded {
    pub model: TrainModel,
    pub tokenizer: Tokenizer,
    pub chat_template: Option<String>,
    pub info: ModelInfo,
}

impl TrainModel {
    /// Loads any model the engine loads (GGUF, quantised ones dequantised to f32, or a
    /// Hugging Face folder) with every weight a trainable f32 variable.
    pub fn load(path: &Path) -> Result<TrainLoaded> {
        let l = loader::load(
            path,
            LoadOptions {
                trainable: true,
                ..Default::default()
            },
        )?;
        Ok(TrainLoaded {
            model: TrainModel { inner: l.model },
            tokenizer: l.tokenizer,
            chat_template: l.chat_template,
            info: l.info,
        })
    }

    /// Wraps a model already loaded with [`LoadOptions::trainable`] (every weight an f32
    /// variable); any other model is refused.
    pub fn from_transformer(model: Transformer) -> Result<Self> {
        if model.vars().is_empty() {
            return Err(Error::InvalidArgument(
                "the model was loaded for inference: load it with `trainable: true` to train it"
                    .into(),
            ));
        }
        Ok(TrainModel { inner: model })
    }

    /// Hyper-parameters.
    pub fn config(&self) -> &crate::ModelConfig {
        self.inner.config()
    }
    /// Context length.
    pub fn max_positions(&self) -> usize {
        self.inner.max_positions()
    }
    /// The trainable variables with their GGUF tensor names, in a fixed order.
    pub fn vars(&self) -> &[(String, Var)] {
        self.inner.vars()
    }
    /// Replaces variable values (e.g. from a checkpoint); every variable must be present
    /// with its shape.
    pub fn set_weights(&self, weights: &std::collections::HashMap<String, Tensor>) -> Result<()> {
        for (name, var) in self.vars() {
            let t = weights
                .get(name)
                .ok_or_else(|| Error::Missing(format!("tensor `{name}` in the checkpoint")))?;
            if t.shape() != var.shape() {
                return Err(Error::InvalidArgument(format!(
                    "checkpoint tensor `{name}` has shape {:?}, the model {:?}",
                    t.shape(),
                    var.shape()
                )));
            }
            var.set(&t.to_dtype(DType::F32)?)?;
        }
        Ok(())
    }

    /// Summed negative log-likelihood of the targets of `p` (a scalar tensor to call
    /// `backward` on), and the number of scored tokens.
    pub fn loss(&self, p: &Packed) -> Result<(Tensor, usize)> {
        let logits = self.logits(p)?;
        if p.targets.is_empty() {
            return Ok((Tensor::zeros((), DType::F32, self.inner.device())?, 0));
        }
        let dev = self.inner.device();
        let lsm = candle_nn::ops::log_softmax(&logits, D::Minus1)?;
        let tgt = Tensor::from_slice(&p.targets, (p.targets.len(), 1), dev)?;
        let nll = lsm.gather(&tgt, 1)?.sum_all()?.neg()?;
        Ok((nll, p.targets.len()))
    }

    /// Logits `(loss rows, vocab)` at the loss rows of `p`.
    pub fn logits(&self, p: &Packed) -> Result<Tensor> {
        let m = &self.inner;
        let cfg = m.config();
        p.check(cfg.vocab_size, m.max_positions())?;
        let dev: &Device = m.device();
        let n = p.ids.len();
        let ids = Tensor::from_slice(&p.ids, (1, n), dev)?;
        let positions = Tensor::from_slice(&p.positions, (1, n), dev)?;
        let (cos, sin) = m.rotary.tables(&positions)?;
        let rope = ops::RopeTables::new(&cos.squeeze(0)?, &sin.squeeze(0)?, m.rotary.layout)?;
        let mut x = m.embed.forward(&ids)?;
        for blk in &m.blocks {
            x = block_forward(blk, &x, &rope, &p.visible)?;
        }
        if p.loss_rows.is_empty() {
            return Ok(Tensor::zeros((0, cfg.vocab_size), DType::F32, dev)?);
        }
        let rows = Tensor::from_slice(&p.loss_rows, p.loss_rows.len(), dev)?;
        let x = x.squeeze(0)?.index_select(&rows, 0)?;
        let x = ops::rms_norm(&x, &m.norm.weight, m.norm.eps)?;
        m.lm_head.forward(&x)
    }
}

fn block_forward(
    blk: &Block,
    x: &Tensor,
    rope: &Arc<ops::RopeTables>,
    vis: &Arc<Visible>,
) -> Result<Tensor> {
    let a = &blk.attn;
    let h_in = ops::rms_norm(x, &blk.attn_norm.weight, blk.attn_norm.eps)?;
    let (_, t, _) = h_in.dims3()?;
    let (h, kvh, hd) = (a.num_heads, a.num_kv_heads, a.head_dim);
    let (q, k, v) = match &a.qkv {
        Qkv::Separate { q, k, v } => (q.forward(&h_in)?, k.forward(&h_in)?, v.forward(&h_in)?),
        Qkv::Fused(_) => {
            return Err(Error::InvalidArgument(
                "a training model keeps q, k and v separate".into(),
            ))
        }
    };
    let q = ops::rope(&q.reshape((1, t, h, hd))?, rope)?.transpose(1, 2)?;
    let k = ops::rope(&k.reshape((1, t, kvh, hd))?, rope)?.transpose(1, 2)?;
    let v = v.reshape((1, t, kvh, hd))?.transpose(1, 2)?;
    let y = attention::packed_attention(&q, &k, &v, vis, 1.0 / (hd as f32).sqrt())?;
    let y = y.transpose(1, 2)?.reshape((1, t, h * hd))?;
    let x = (x + a.o.forward(&y)?)?;
    let h2 = ops::rms_norm(&x, &blk.ffn_norm.weight, blk.ffn_norm.eps)?;
    let (g, u) = match &blk.mlp.gate_up {
        GateUp::Separate { gate, up } => (gate.forward(&h2)?, up.forward(&h2)?),
        GateUp::Fused(_) => {
            return Err(Error::InvalidArgument(
                "a training model keeps gate and up separate".into(),
            ))
        }
    };
    let act = ops::swiglu(&g, &u)?;
    Ok((x + blk.mlp.down.forward(&act)?)?)
}

/// The elements of a contiguous f32 CPU storage (what the custom ops read).
pub(crate) fn contiguous<'a>(
    s: &'a candle_core::CpuStorage,
    l: &candle_core::Layout,
    what: &str,
) -> candle_core::Result<&'a [f32]> {
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&s.as_slice::<f32>()?[a..b]),
        None => candle_core::bail!("{what} needs a contiguous f32 input"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use candle_core::Tensor;

    /// Largest element difference relative to the largest magnitude of `b`.
    pub(crate) fn max_rel(a: &Tensor, b: &Tensor) -> f32 {
        let a = a.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let b = b.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6);
        a.iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs() / scale)
            .fold(0.0, f32::max)
    }
}
