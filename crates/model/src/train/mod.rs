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
#[cfg(target_arch = "x86_64")]
pub mod bf16;
pub mod head;
pub mod linear;
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

/// The precision of training's dense products (the linear layers' forward and backward
/// GEMMs and the output layer's): f32, or bf16 operands with f32 accumulation on CPUs with
/// AVX-512 BF16 ([`bf16`]). Everything else stays f32 either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MatmulPrecision {
    #[default]
    F32,
    Bf16,
}

impl MatmulPrecision {
    pub fn name(self) -> &'static str {
        match self {
            MatmulPrecision::F32 => "f32",
            MatmulPrecision::Bf16 => "bf16",
        }
    }
}

/// Sets the precision of training's dense products for this process; bf16 on a CPU without
/// AVX-512 BF16 is an error saying so (the setting stays as it was).
pub fn set_matmul_precision(p: MatmulPrecision) -> Result<()> {
    #[cfg(target_arch = "x86_64")]
    return bf16::set_enabled(p == MatmulPrecision::Bf16).map_err(Error::InvalidArgument);
    #[cfg(not(target_arch = "x86_64"))]
    match p {
        MatmulPrecision::F32 => Ok(()),
        MatmulPrecision::Bf16 => Err(Error::InvalidArgument(
            "bf16 matrix products in training need an x86-64 CPU with AVX-512 BF16; use matmul = \"f32\"".into(),
        )),
    }
}

/// The precision training's dense products use now.
pub fn matmul_precision() -> MatmulPrecision {
    #[cfg(target_arch = "x86_64")]
    if bf16::enabled() {
        return MatmulPrecision::Bf16;
    }
    MatmulPrecision::F32
}

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
    /// Each loss row's weight in the summed loss (empty: 1 each; e.g. a tool-call turn's
    /// tokens counted several times).
    pub weights: Vec<f32>,
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
            weights: Vec::new(),
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
        if !self.weights.is_empty() && self.weights.len() != self.targets.len() {
            return Err(Error::InvalidArgument(format!(
                "{} loss weights for {} targets",
                self.weights.len(),
                self.targets.len()
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

/// Low-rank adapters (LoRA): the model's weights stay frozen and each targeted linear `W`
/// learns `W + (alpha / rank) B A`, with `A (rank, in)` drawn small and `B (out, rank)` zero, so
/// training starts from the unchanged model. Exports merge the product into `W`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoraConfig {
    pub rank: usize,
    pub alpha: f64,
    /// Which linears of every block: `q`, `k`, `v`, `o`, `gate`, `up`, `down`.
    pub targets: Vec<String>,
    /// Seed of `A`'s initial values.
    pub seed: u64,
}

impl Default for LoraConfig {
    fn default() -> Self {
        Self {
            rank: 16,
            alpha: 32.0,
            targets: ["q", "k", "v", "o", "gate", "up", "down"]
                .map(String::from)
                .to_vec(),
            seed: 1,
        }
    }
}

/// The GGUF tensor name suffix of each LoRA target.
const LORA_TARGETS: [(&str, &str); 7] = [
    ("q", "attn_q"),
    ("k", "attn_k"),
    ("v", "attn_v"),
    ("o", "attn_output"),
    ("gate", "ffn_gate"),
    ("up", "ffn_up"),
    ("down", "ffn_down"),
];

#[derive(Debug)]
struct Lora {
    scale: f64,
    /// Adapter `(A, B)` by the weight name it adapts (`blk.0.attn_q.weight`).
    adapters: std::collections::HashMap<String, (Var, Var)>,
    /// The adapters as trainable variables (`<weight>.lora_a`, `<weight>.lora_b`).
    vars: Vec<(String, Var)>,
}

/// A model whose weights are trainable.
#[derive(Debug)]
pub struct TrainModel {
    inner: Transformer,
    lora: Option<Lora>,
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
            model: TrainModel {
                inner: l.model,
                lora: None,
            },
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
        Ok(TrainModel {
            inner: model,
            lora: None,
        })
    }

    /// [`Self::load`], or [`Self::load_lora`] when adapters are asked for.
    pub fn load_maybe_lora(path: &Path, lora: Option<&LoraConfig>) -> Result<TrainLoaded> {
        match lora {
            Some(l) => Self::load_lora(path, l),
            None => Self::load(path),
        }
    }

    /// Loads like [`Self::load`], then freezes every weight and trains low-rank adapters on
    /// the targeted linears instead ([`LoraConfig`]).
    pub fn load_lora(path: &Path, cfg: &LoraConfig) -> Result<TrainLoaded> {
        let mut l = Self::load(path)?;
        l.model.add_lora(cfg)?;
        Ok(l)
    }

    fn add_lora(&mut self, cfg: &LoraConfig) -> Result<()> {
        if cfg.rank == 0 || !(cfg.alpha.is_finite() && cfg.alpha > 0.0) {
            return Err(Error::InvalidArgument(format!(
                "LoRA needs rank >= 1 and a positive alpha (got rank {}, alpha {})",
                cfg.rank, cfg.alpha
            )));
        }
        // A rank past the model's width adds nothing a full fine-tune would not, and a huge one
        // asked for hundreds of gigabytes before failing.
        let width = self.inner.config().hidden_size;
        if cfg.rank > width {
            return Err(Error::InvalidArgument(format!(
                "LoRA rank {} is larger than the model's hidden size {width}; use a rank of at \
                 most {width} (8-64 is usual), or train every weight without --lora-rank",
                cfg.rank
            )));
        }
        let mut suffixes = Vec::new();
        for t in &cfg.targets {
            let s = LORA_TARGETS
                .iter()
                .find(|(short, _)| short == t)
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "LoRA target `{t}` (known: q, k, v, o, gate, up, down)"
                    ))
                })?;
            suffixes.push(format!(".{}.weight", s.1));
        }
        if suffixes.is_empty() {
            return Err(Error::InvalidArgument(
                "LoRA needs at least one target".into(),
            ));
        }
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(cfg.seed);
        let dev = self.inner.device().clone();
        let mut adapters = std::collections::HashMap::new();
        let mut vars = Vec::new();
        for (name, w) in self.inner.vars() {
            if !(name.starts_with("blk.") && suffixes.iter().any(|s| name.ends_with(s.as_str()))) {
                continue;
            }
            let (out, inp) = w.dims2()?;
            // PEFT's default: A uniform in +-1/sqrt(in), B zero
            let bound = 1.0 / (inp as f32).sqrt();
            let a: Vec<f32> = (0..cfg.rank * inp)
                .map(|_| (rng.gen::<f32>() * 2.0 - 1.0) * bound)
                .collect();
            let a = Var::from_tensor(&Tensor::from_vec(a, (cfg.rank, inp), &dev)?)?;
            let b = Var::from_tensor(&Tensor::zeros((out, cfg.rank), DType::F32, &dev)?)?;
            vars.push((format!("{name}.lora_a"), a.clone()));
            vars.push((format!("{name}.lora_b"), b.clone()));
            adapters.insert(name.clone(), (a, b));
        }
        self.inner.freeze();
        self.lora = Some(Lora {
            scale: cfg.alpha / cfg.rank as f64,
            adapters,
            vars,
        });
        Ok(())
    }

    /// The full weights with their GGUF names: the trained variables, or with LoRA the frozen
    /// weights with the adapters merged in (what exports write).
    pub fn weights(&self) -> Result<Vec<(String, Tensor)>> {
        let mut out = Vec::with_capacity(self.inner.vars().len());
        for (name, var) in self.inner.vars() {
            let w = var.as_tensor().detach();
            let w = match self
                .lora
                .as_ref()
                .and_then(|l| Some((l, l.adapters.get(name)?)))
            {
                Some((l, (a, b))) => (w + (b.as_tensor().matmul(a.as_tensor())? * l.scale)?)?,
                None => w,
            };
            out.push((name.clone(), w));
        }
        Ok(out)
    }

    /// `x (1, t, in)` through the adapter of `weight`, if it has one: `scale * x A^T B^T`.
    fn lora_delta(&self, weight: &str, x: &Tensor) -> Result<Option<Tensor>> {
        let Some((l, (a, b))) = self
            .lora
            .as_ref()
            .and_then(|l| Some((l, l.adapters.get(weight)?)))
        else {
            return Ok(None);
        };
        let (_, t, inp) = x.dims3()?;
        let y = x
            .reshape((t, inp))?
            .matmul(&a.as_tensor().t()?)?
            .matmul(&b.as_tensor().t()?)?;
        Ok(Some((y.unsqueeze(0)? * l.scale)?))
    }

    /// Hyper-parameters.
    pub fn config(&self) -> &crate::ModelConfig {
        self.inner.config()
    }
    /// Context length.
    pub fn max_positions(&self) -> usize {
        self.inner.max_positions()
    }
    /// The trainable variables with their names, in a fixed order: every weight by its GGUF
    /// name, or with LoRA only the adapters.
    pub fn vars(&self) -> &[(String, Var)] {
        match &self.lora {
            Some(l) => &l.vars,
            None => self.inner.vars(),
        }
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

    /// Summed negative log-likelihood of the targets of `p`, each times its weight (a scalar tensor to call
    /// `backward` on), and the number of scored tokens. The output layer and the loss run as
    /// one op ([`head::output_nll`]) that computes their gradients on the way, so call this
    /// when a backward follows, and [`Self::loss_value`] when it does not.
    pub fn loss(&self, p: &Packed) -> Result<(Tensor, usize)> {
        self.nll(p, true)
    }

    /// The summed negative log-likelihood of `p`'s targets as a number (validation: no
    /// gradient is prepared), and the number of scored tokens.
    pub fn loss_value(&self, p: &Packed) -> Result<(f64, usize)> {
        let (nll, n) = self.nll(p, false)?;
        Ok((nll.to_scalar::<f32>()? as f64, n))
    }

    fn nll(&self, p: &Packed, backward: bool) -> Result<(Tensor, usize)> {
        let m = &self.inner;
        let Some(x) = self.final_rows(p)? else {
            return Ok((Tensor::zeros((), DType::F32, m.device())?, 0));
        };
        let nll = match m.lm_head.dense_weight() {
            Some(w) => head::output_nll(&x, w, &p.targets, &p.weights, backward)?,
            _ => {
                let lsm = candle_nn::ops::log_softmax(&m.lm_head.forward(&x)?, D::Minus1)?;
                let tgt = Tensor::from_slice(&p.targets, (p.targets.len(), 1), m.device())?;
                let lp = lsm.gather(&tgt, 1)?;
                let lp = if p.weights.is_empty() {
                    lp
                } else {
                    let c = Tensor::from_slice(&p.weights, (p.weights.len(), 1), m.device())?;
                    lp.mul(&c)?
                };
                lp.sum_all()?.neg()?
            }
        };
        Ok((nll, p.targets.len()))
    }

    /// Logits `(loss rows, vocab)` at the loss rows of `p`.
    pub fn logits(&self, p: &Packed) -> Result<Tensor> {
        match self.final_rows(p)? {
            Some(x) => self.inner.lm_head.forward(&x),
            None => Ok(Tensor::zeros(
                (0, self.inner.config().vocab_size),
                DType::F32,
                self.inner.device(),
            )?),
        }
    }

    /// The final normed hidden states `(loss rows, hidden)` at the loss rows of `p` (`None`
    /// when it has none).
    fn final_rows(&self, p: &Packed) -> Result<Option<Tensor>> {
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
        for (i, blk) in m.blocks.iter().enumerate() {
            x = self.block_forward(i, blk, &x, &rope, &p.visible)?;
        }
        if p.loss_rows.is_empty() {
            return Ok(None);
        }
        let rows = Tensor::from_slice(&p.loss_rows, p.loss_rows.len(), dev)?;
        let x = x.squeeze(0)?.index_select(&rows, 0)?;
        Ok(Some(ops::rms_norm(&x, &m.norm.weight, m.norm.eps)?))
    }
}

impl TrainModel {
    /// A linear of block `i` (`attn_q`, ...) applied to `x`, plus its adapter's output.
    fn linear(
        &self,
        i: usize,
        name: &str,
        lin: &crate::layers::Linear,
        x: &Tensor,
    ) -> Result<Tensor> {
        let y = match lin.weight() {
            crate::weights::LinearWeight::Dense(w)
                if w.dtype() == DType::F32 && x.dtype() == DType::F32 && x.device().is_cpu() =>
            {
                let y = linear::linear(x, w)?;
                match lin.bias() {
                    Some(b) => y.broadcast_add(b)?,
                    None => y,
                }
            }
            _ => lin.forward(x)?,
        };
        if self.lora.is_none() {
            return Ok(y);
        }
        match self.lora_delta(&format!("blk.{i}.{name}.weight"), x)? {
            Some(d) => Ok((y + d)?),
            None => Ok(y),
        }
    }

    fn block_forward(
        &self,
        i: usize,
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
            Qkv::Separate { q, k, v } => (
                self.linear(i, "attn_q", q, &h_in)?,
                self.linear(i, "attn_k", k, &h_in)?,
                self.linear(i, "attn_v", v, &h_in)?,
            ),
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
        let x = (x + self.linear(i, "attn_output", &a.o, &y)?)?;
        let h2 = ops::rms_norm(&x, &blk.ffn_norm.weight, blk.ffn_norm.eps)?;
        let (g, u) = match &blk.mlp.gate_up {
            GateUp::Separate { gate, up } => (
                self.linear(i, "ffn_gate", gate, &h2)?,
                self.linear(i, "ffn_up", up, &h2)?,
            ),
            GateUp::Fused(_) => {
                return Err(Error::InvalidArgument(
                    "a training model keeps gate and up separate".into(),
                ))
            }
        };
        let act = ops::swiglu(&g, &u)?;
        Ok((x + self.linear(i, "ffn_down", &blk.mlp.down, &act)?)?)
    }
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

/// [`crate::cpu::with_elems`] for the backward of a custom op, whose errors are candle's.
pub(crate) fn with_f32<R>(
    t: &Tensor,
    f: impl FnOnce(&[f32]) -> candle_core::Result<R>,
) -> candle_core::Result<R> {
    crate::cpu::with_elems::<f32, _>(t, f).map_err(|e| candle_core::Error::Msg(e.to_string()))?
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
