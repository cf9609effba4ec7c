//! The one decoder-only transformer; llama and qwen2 are wirings of it (see `llama.rs`,
//! `qwen2.rs`).

use candle_core::{DType, Device, Tensor, Var};

use crate::config::{Architecture, ModelConfig};
use crate::error::{Error, Result};
use crate::layers::{
    Attention, AttnInputs, Block, Embedding, GateUp, KvCache, Linear, Mlp, OpMode, Qkv, RmsNorm,
    Rotary,
};
use crate::weights::{LinearWeight, RawTensor, WeightFormat, WeightMap};

/// How to materialise weights.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions {
    /// Format of linear weights.
    pub format: WeightFormat,
    /// Make every weight a dense f32 [`Var`] and use differentiable ops.
    pub trainable: bool,
}

/// Architecture-specific wiring of the shared layers.
#[derive(Debug, Clone, Copy)]
pub struct Wiring {
    /// q/k/v projections carry a bias.
    pub qkv_bias: bool,
}

/// Per-request KV state of all layers for a batch of rows.
#[derive(Debug, Clone)]
pub struct Cache {
    layers: Vec<KvCache>,
    pads: Vec<usize>,
}

impl Cache {
    /// Empty cache for `batch` rows without padding.
    pub fn new(num_layers: usize, batch: usize) -> Self {
        Self {
            layers: vec![KvCache::default(); num_layers],
            pads: vec![0; batch],
        }
    }
    /// Empty cache whose rows start with `pads[r]` left-padding tokens.
    pub fn with_left_padding(num_layers: usize, pads: Vec<usize>) -> Self {
        Self {
            layers: vec![KvCache::default(); num_layers],
            pads,
        }
    }
    /// Single-row cache from layer states.
    pub fn from_layers(layers: Vec<KvCache>) -> Self {
        Self {
            layers,
            pads: vec![0],
        }
    }
    /// Positions held per row (including padding, not counting a shared prefix).
    pub fn len(&self) -> usize {
        self.layers.first().map_or(0, KvCache::len)
    }
    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Forgets every row's positions from `len` on (see [`KvCache::truncate`]).
    pub fn truncate(&mut self, len: usize) {
        for l in &mut self.layers {
            l.truncate(len);
        }
    }
    /// Batch rows.
    pub fn batch(&self) -> usize {
        self.pads.len()
    }
    /// Bytes held by keys and values.
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(KvCache::bytes).sum()
    }
    /// Positions of the prefix every row shares (see [`Cache::stack_shared`]); 0 without one.
    pub fn shared_len(&self) -> usize {
        self.layers.first().map_or(0, KvCache::shared_len)
    }
    /// Layer caches.
    pub fn layers(&self) -> &[KvCache] {
        &self.layers
    }
    /// Left padding per row.
    pub fn pads(&self) -> &[usize] {
        &self.pads
    }
    /// Makes row `r` attend to nothing but the positions written from now on (not to a
    /// shared prefix either): its left padding grows to the whole cache (again at each call,
    /// so a row muted every step reads one key). A finished row of a batched decode stays in the
    /// batch (no copy of the other rows' keys and values) but stops reading its context;
    /// its outputs from then on are meaningless and must be ignored.
    pub fn mute_row(&mut self, r: usize) {
        let len = self.len();
        if let Some(p) = self.pads.get_mut(r) {
            *p = len;
        }
    }

    /// Stacks single-row caches into one batch like [`Cache::stack`], but keeps the longest
    /// prefix whose keys and values are bit-for-bit the same in every row and layer once, as
    /// a shared prefix that decoding reads once for the whole batch instead of once a row
    /// (rows of one harness share its system prompt: most of an agent prompt). Bit equality,
    /// not equal tokens, decides, so no row attends to anything but its own keys and values.
    /// Each row keeps at least one position of its own. The shared prefix is a multiple of
    /// [`crate::attention::KEY_BLOCK`] positions long (the rest of the common start stays in
    /// each row), so decoding cuts every row's keys where it would without sharing, and an
    /// answer does not depend on the rows beside it. Without `min_shared` such positions in
    /// common, an f16 cache (the fused decode path's) and two rows, this is [`Cache::stack`].
    pub fn stack_shared(rows: &[Cache], min_shared: usize) -> Result<Cache> {
        if rows.len() < 2 {
            return Self::stack(rows);
        }
        let min_shared = min_shared.max(1);
        let shared = crate::attention::whole_blocks(Self::common_prefix(rows, min_shared)?);
        if shared < min_shared {
            return Self::stack(rows);
        }
        let mut own = Vec::with_capacity(rows.len());
        for r in rows {
            let layers = r
                .layers
                .iter()
                .map(|l| {
                    let (k, v) = l
                        .tensors()
                        .ok_or_else(|| Error::InvalidArgument("empty cache row".into()))?;
                    let n = l.len() - shared;
                    Ok(KvCache::from_tensors(
                        k.narrow(2, shared, n)?,
                        v.narrow(2, shared, n)?,
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            own.push(Cache::from_layers(layers));
        }
        let mut out = Self::stack(&own)?;
        for (l, row0) in out.layers.iter_mut().zip(&rows[0].layers) {
            let (k, v) = row0
                .tensors()
                .ok_or_else(|| Error::InvalidArgument("empty cache row".into()))?;
            // an own copy: a view could alias row 0's buffer (a prefix-cache entry's)
            let own_copy = |x: Tensor| -> Result<Tensor> {
                let x = x.narrow(2, 0, shared)?;
                Ok(if x.is_contiguous() {
                    x.copy()?
                } else {
                    x.contiguous()?
                })
            };
            l.set_shared(own_copy(k)?, own_copy(v)?);
        }
        Ok(out)
    }

    /// Positions at the start of every row whose keys and values are bit-for-bit equal in
    /// every layer (at most each row's length minus one); 0 when that is below `min` (the
    /// comparison stops there) or unless all rows are unpadded single-row f16 caches on the
    /// CPU.
    fn common_prefix(rows: &[Cache], min: usize) -> Result<usize> {
        let Some(first) = rows.first() else {
            return Ok(0);
        };
        let eligible = rows.iter().all(|r| {
            r.batch() == 1
                && r.pads[0] == 0
                && r.shared_len() == 0
                && r.layers.len() == first.layers.len()
                && r.layers.iter().all(|l| {
                    l.tensors().is_some_and(|(k, _)| {
                        k.dtype() == candle_core::DType::F16 && k.device().is_cpu()
                    })
                })
        });
        if !eligible {
            return Ok(0);
        }
        let mut n = rows
            .iter()
            .map(Cache::len)
            .min()
            .unwrap_or(0)
            .saturating_sub(1);
        if n < min {
            return Ok(0);
        }
        for (li, l0) in first.layers.iter().enumerate() {
            let Some((k0, v0)) = l0.tensors() else {
                return Ok(0);
            };
            for r in &rows[1..] {
                let Some((k, v)) = r.layers[li].tensors() else {
                    return Ok(0);
                };
                n = n.min(equal_positions(&k0, &k, n)?);
                n = n.min(equal_positions(&v0, &v, n)?);
                if n < min {
                    return Ok(0);
                }
            }
        }
        Ok(n)
    }

    /// A new batch of rows `keep` of this one (in that order) and then `add`, a single-row
    /// unpadded cache without a shared prefix (a request's prefill): continuous batching,
    /// where requests join and leave a running batch between decode steps. Rows left out
    /// (finished, muted) and the padding only they needed are dropped, so the new batch is as
    /// long as its longest row. This batch's shared prefix stays shared (not copied) when
    /// `add` begins with the same bits; a shorter common start stays shared when it is at least
    /// `min_shared` positions, and without a shared prefix the rows' common start is found as
    /// [`Cache::stack_shared`] does (`None`: never share). Each kept row must hold at least
    /// one position of its own.
    pub fn regroup(
        &self,
        keep: &[usize],
        add: Option<&Cache>,
        min_shared: Option<usize>,
    ) -> Result<Cache> {
        let len = self.len();
        let shared = self.shared_len();
        if let Some(a) = add {
            if a.batch() != 1 || a.pads[0] != 0 || a.shared_len() != 0 || a.is_empty() {
                return Err(Error::InvalidArgument(
                    "Cache::regroup adds a non-empty single-row cache without padding or a shared prefix"
                        .into(),
                ));
            }
            if !self.layers.is_empty() && a.layers.len() != self.layers.len() {
                return Err(Error::InvalidArgument(format!(
                    "Cache::regroup: {} layers added to a cache of {}",
                    a.layers.len(),
                    self.layers.len()
                )));
            }
        }
        if keep.is_empty() {
            return match add {
                Some(a) => Ok(a.clone()),
                None => Ok(Cache::new(self.layers.len(), 0)),
            };
        }
        for &r in keep {
            if r >= self.batch() || self.pads[r] >= len {
                return Err(Error::InvalidArgument(format!(
                    "Cache::regroup keeps row {r}, which holds no position of its own"
                )));
            }
        }
        let n_layers = self.layers.len();
        // per layer, the first `upto` positions of this batch's shared prefix
        let shared_part =
            |l: usize, from: usize, upto: usize| -> Result<Option<(Tensor, Tensor)>> {
                match self.layers[l].shared() {
                    Some((k, v)) if upto > from => Ok(Some((
                        k.narrow(2, from, upto - from)?,
                        v.narrow(2, from, upto - from)?,
                    ))),
                    _ => Ok(None),
                }
            };
        // kept row r's own positions in layer l, after the first `from` of the shared prefix
        let kept_row = |l: usize, r: usize, from: usize| -> Result<(Tensor, Tensor)> {
            let (k, v) = self.layers[l]
                .tensors()
                .ok_or_else(|| Error::InvalidArgument("empty cache row".into()))?;
            let p = self.pads[r];
            let (k, v) = (
                k.narrow(0, r, 1)?.narrow(2, p, len - p)?,
                v.narrow(0, r, 1)?.narrow(2, p, len - p)?,
            );
            Ok(match shared_part(l, from, shared)? {
                Some((sk, sv)) => (Tensor::cat(&[&sk, &k], 2)?, Tensor::cat(&[&sv, &v], 2)?),
                None => (k, v),
            })
        };
        let added = |l: usize, from: usize| -> Result<Option<(Tensor, Tensor)>> {
            let Some(a) = add else { return Ok(None) };
            let (k, v) = a.layers[l]
                .tensors()
                .ok_or_else(|| Error::InvalidArgument("empty cache row".into()))?;
            let n = a.len() - from;
            Ok(Some((k.narrow(2, from, n)?, v.narrow(2, from, n)?)))
        };
        // how much of this batch's shared prefix the added row begins with
        let matched = match add {
            Some(a) if shared > 0 => {
                let mut m = shared.min(a.len() - 1);
                for (l0, la) in self.layers.iter().zip(&a.layers) {
                    let (Some((sk, sv)), Some((k, v))) = (l0.shared(), la.tensors()) else {
                        m = 0;
                        break;
                    };
                    m = m.min(equal_positions(sk, &k, m)?);
                    m = m.min(equal_positions(sv, &v, m)?);
                }
                m
            }
            _ => shared,
        };
        let keep_shared = if matched == shared {
            shared
        } else {
            let m = crate::attention::whole_blocks(matched);
            if min_shared.is_some_and(|min| m >= min.max(1)) {
                m
            } else {
                0
            }
        };
        let mut own: Vec<Vec<(Tensor, Tensor)>> = vec![Vec::with_capacity(n_layers); keep.len()];
        let mut own_add: Vec<(Tensor, Tensor)> = Vec::new();
        let mut new_shared: Vec<(Tensor, Tensor)> = Vec::new();
        for l in 0..n_layers {
            for (i, &r) in keep.iter().enumerate() {
                own[i].push(kept_row(l, r, keep_shared)?);
            }
            if let Some(kv) = added(l, keep_shared)? {
                own_add.push(kv);
            }
            if keep_shared == shared {
                if let Some((k, v)) = self.layers[l].shared() {
                    new_shared.push((k.clone(), v.clone()));
                }
            } else if let Some((k, v)) = shared_part(l, 0, keep_shared)? {
                new_shared.push((k.contiguous()?, v.contiguous()?));
            }
        }
        if add.is_some() {
            own.push(own_add);
        }
        if keep_shared == 0 {
            // no prefix kept shared: look for the rows' common start afresh
            let rows: Vec<Cache> = own
                .into_iter()
                .map(|layers| {
                    Cache::from_layers(
                        layers
                            .into_iter()
                            .map(|(k, v)| KvCache::from_tensors(k, v))
                            .collect(),
                    )
                })
                .collect();
            return match min_shared {
                Some(min) => Self::stack_shared(&rows, min),
                None => Self::stack(&rows),
            };
        }
        Self::stack_rows(own, Some(new_shared))
    }

    /// One batch of rows given as per-layer keys and values `(1, kv_heads, n_r, head_dim)`,
    /// left-padded to the longest, with room to decode into before the buffers grow, after
    /// `shared` (per layer) when given.
    fn stack_rows(
        rows: Vec<Vec<(Tensor, Tensor)>>,
        shared: Option<Vec<(Tensor, Tensor)>>,
    ) -> Result<Cache> {
        const ROOM: usize = 128;
        let n_layers = rows.first().map_or(0, Vec::len);
        let lens: Vec<usize> = rows
            .iter()
            .map(|r| r.first().map_or(Ok(0), |(k, _)| k.dim(2)))
            .collect::<candle_core::Result<_>>()?;
        let max_len = lens.iter().copied().max().unwrap_or(0);
        let pads: Vec<usize> = lens.iter().map(|&n| max_len - n).collect();
        let mut layers = Vec::with_capacity(n_layers);
        for l in 0..n_layers {
            let mut ks = Vec::with_capacity(rows.len());
            let mut vs = Vec::with_capacity(rows.len());
            for (r, row) in rows.iter().enumerate() {
                let (k, v) = &row[l];
                let (_, h, _, d) = k.dims4()?;
                let padded = |x: &Tensor| -> Result<Tensor> {
                    let mut parts = Vec::with_capacity(3);
                    let before = Tensor::zeros((1, h, pads[r], d), x.dtype(), x.device())?;
                    let after = Tensor::zeros((1, h, ROOM, d), x.dtype(), x.device())?;
                    if pads[r] > 0 {
                        parts.push(&before);
                    }
                    parts.push(x);
                    parts.push(&after);
                    Ok(Tensor::cat(&parts, 2)?)
                };
                ks.push(padded(k)?);
                vs.push(padded(v)?);
            }
            let mut kv = KvCache::from_buffers(Tensor::cat(&ks, 0)?, Tensor::cat(&vs, 0)?, max_len);
            if let Some((sk, sv)) = shared.as_ref().and_then(|s| s.get(l)) {
                kv.set_shared(sk.clone(), sv.clone());
            }
            layers.push(kv);
        }
        Ok(Cache { layers, pads })
    }

    /// Stacks single-row caches into one batch, left-padding shorter rows with zeros.
    pub fn stack(rows: &[Cache]) -> Result<Cache> {
        let n_layers = rows.first().map_or(0, |c| c.layers.len());
        let max_len = rows.iter().map(Cache::len).max().unwrap_or(0);
        let mut pads = Vec::with_capacity(rows.len());
        for r in rows {
            if r.batch() != 1 {
                return Err(Error::InvalidArgument(
                    "Cache::stack takes single-row caches".into(),
                ));
            }
            pads.push(max_len - r.len() + r.pads[0]);
        }
        let mut layers = Vec::with_capacity(n_layers);
        for l in 0..n_layers {
            let mut ks = Vec::new();
            let mut vs = Vec::new();
            for r in rows {
                let (k, v) = r.layers[l]
                    .tensors()
                    .ok_or_else(|| Error::InvalidArgument("empty cache row".into()))?;
                let missing = max_len - r.len();
                if missing > 0 {
                    let (b, h, _, d) = k.dims4()?;
                    let z = Tensor::zeros((b, h, missing, d), k.dtype(), k.device())?;
                    ks.push(Tensor::cat(&[&z, &k], 2)?);
                    vs.push(Tensor::cat(&[&z, &v], 2)?);
                } else {
                    ks.push(k.clone());
                    vs.push(v.clone());
                }
            }
            layers.push(KvCache::from_tensors(
                Tensor::cat(&ks, 0)?,
                Tensor::cat(&vs, 0)?,
            ));
        }
        Ok(Cache { layers, pads })
    }
}

/// How many of the first `limit` positions of two single-row f16 tensors
/// `(1, heads, T, head_dim)` hold the same bits in every head.
fn equal_positions(a: &Tensor, b: &Tensor, limit: usize) -> Result<usize> {
    let (_, heads, _, hd) = a.dims4()?;
    if b.dims4()?.1 != heads || b.dims4()?.3 != hd {
        return Ok(0);
    }
    let (sa, la) = a.storage_and_layout();
    let (sb, lb) = b.storage_and_layout();
    let (da, db) = (
        crate::cpu::slice::<half::f16>(&sa, la)?,
        crate::cpu::slice::<half::f16>(&sb, lb)?,
    );
    let (ta, tb) = (la.stride(), lb.stride());
    if ta[3] != 1 || tb[3] != 1 {
        return Ok(0);
    }
    // bits, not float equality: -0.0 == 0.0 and NaN != NaN
    fn row<'a>(d: &'a [half::f16], st: &[usize], h: usize, p: usize, hd: usize) -> &'a [u16] {
        let at = h * st[1] + p * st[2];
        half::slice::HalfFloatSliceExt::reinterpret_cast(&d[at..at + hd])
    }
    let mut n = limit;
    for h in 0..heads {
        n = (0..n)
            .find(|&p| row(da, ta, h, p, hd) != row(db, tb, h, p, hd))
            .unwrap_or(n);
    }
    Ok(n)
}

/// A loaded model.
#[derive(Debug)]
pub struct Transformer {
    cfg: ModelConfig,
    pub(crate) embed: Embedding,
    pub(crate) blocks: Vec<Block>,
    pub(crate) norm: RmsNorm,
    pub(crate) lm_head: Linear,
    pub(crate) rotary: Rotary,
    mode: OpMode,
    vars: Vec<(String, Var)>,
    device: Device,
    /// KV cache element type on the fused CPU path: f16 when the linear weights are already
    /// below f32 precision (quantised, f16, bf16), f32 for f32 weights (the parity format).
    kv_dtype: DType,
}

struct Builder<'a> {
    w: &'a mut WeightMap,
    opts: LoadOptions,
    dev: &'a Device,
    vars: Vec<(String, Var)>,
}

impl Builder<'_> {
    fn dense(&mut self, name: &str, raw: RawTensor) -> Result<Tensor> {
        if self.opts.trainable {
            let v = Var::from_tensor(&raw.to_f32(self.dev)?)?;
            let t = v.as_tensor().clone();
            self.vars.push((name.to_string(), v));
            Ok(t)
        } else {
            raw.to_f32(self.dev)
        }
    }
    fn f32(&mut self, name: &str) -> Result<Tensor> {
        let raw = self.w.require(name)?;
        self.dense(name, raw)
    }
    fn opt_f32(&mut self, name: &str) -> Result<Option<Tensor>> {
        match self.w.take(name) {
            Some(raw) => Ok(Some(self.dense(name, raw)?)),
            None => Ok(None),
        }
    }
    fn linear_raw(&mut self, name: &str, raw: RawTensor, bias: Option<Tensor>) -> Result<Linear> {
        let w = if self.opts.trainable {
            LinearWeight::Dense(self.dense(name, raw)?)
        } else {
            LinearWeight::convert(raw, self.opts.format, self.dev)?
        };
        Ok(Linear::new(w, bias))
    }
    fn linear(&mut self, prefix: &str, bias: bool) -> Result<Linear> {
        let raw = self.w.require(&format!("{prefix}.weight"))?;
        let b = if bias {
            Some(self.f32(&format!("{prefix}.bias"))?)
        } else {
            self.opt_f32(&format!("{prefix}.bias"))?
        };
        self.linear_raw(&format!("{prefix}.weight"), raw, b)
    }
}

/// Every weight's shape against the config, before anything is converted: a file whose
/// metadata and tensors disagree failed only at generation, with candle's "index-select invalid
/// index" or "narrow invalid args" naming neither.
fn check_shapes(cfg: &ModelConfig, w: &WeightMap) -> Result<()> {
    let (h, f, v) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let (q, kv) = (
        cfg.num_heads * cfg.head_dim,
        cfg.num_kv_heads * cfg.head_dim,
    );
    let mut want: Vec<(String, Vec<usize>)> = vec![
        ("token_embd.weight".into(), vec![v, h]),
        ("output.weight".into(), vec![v, h]),
        ("output_norm.weight".into(), vec![h]),
    ];
    for i in 0..cfg.num_layers {
        for (t, shape) in [
            ("attn_q.weight", vec![q, h]),
            ("attn_k.weight", vec![kv, h]),
            ("attn_v.weight", vec![kv, h]),
            ("attn_output.weight", vec![h, q]),
            ("ffn_gate.weight", vec![f, h]),
            ("ffn_up.weight", vec![f, h]),
            ("ffn_down.weight", vec![h, f]),
            ("attn_norm.weight", vec![h]),
            ("ffn_norm.weight", vec![h]),
        ] {
            want.push((format!("blk.{i}.{t}"), shape));
        }
    }
    for (name, shape) in want {
        if let Some(d) = w.dims(&name) {
            if d != shape.as_slice() {
                return Err(Error::InvalidArgument(format!(
                    "tensor `{name}` has shape {d:?} but the model's metadata (hidden size {h}, \
                     {} heads and {} kv heads of {}, feed-forward {f}, vocabulary {v}) needs \
                     {shape:?}; the file's metadata and tensors do not match",
                    cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
                )));
            }
        }
    }
    Ok(())
}

impl Transformer {
    /// Builds the model from GGUF-named tensors.
    pub fn load(
        mut cfg: ModelConfig,
        weights: &mut WeightMap,
        opts: LoadOptions,
        device: &Device,
    ) -> Result<Self> {
        let wiring = match cfg.arch {
            Architecture::Llama => crate::llama::wiring(&cfg),
            Architecture::Qwen2 => crate::qwen2::wiring(&cfg),
        };
        check_shapes(&cfg, weights)?;
        if let Some(raw) = weights.take("rope_freqs.weight") {
            cfg.rope_freq_factors = Some(raw.to_f32(device)?.flatten_all()?.to_vec1::<f32>()?);
        }
        let mut b = Builder {
            w: weights,
            opts,
            dev: device,
            vars: Vec::new(),
        };
        let emb_raw = b.w.require("token_embd.weight")?;
        let emb_table = b.dense(
            "token_embd.weight",
            RawTensor::Dense(emb_raw.to_f32(device)?),
        )?;
        let lm_head = match b.w.take("output.weight") {
            Some(raw) => b.linear_raw("output.weight", raw, None)?,
            None if opts.trainable => Linear::new(LinearWeight::Dense(emb_table.clone()), None),
            None => Linear::new(LinearWeight::convert(emb_raw, opts.format, device)?, None),
        };
        let mut blocks = Vec::with_capacity(cfg.num_layers);
        for i in 0..cfg.num_layers {
            let p = format!("blk.{i}");
            let mut attn = Attention {
                qkv: Qkv::Separate {
                    q: b.linear(&format!("{p}.attn_q"), wiring.qkv_bias)?,
                    k: b.linear(&format!("{p}.attn_k"), wiring.qkv_bias)?,
                    v: b.linear(&format!("{p}.attn_v"), wiring.qkv_bias)?,
                },
                o: b.linear(&format!("{p}.attn_output"), false)?,
                num_heads: cfg.num_heads,
                num_kv_heads: cfg.num_kv_heads,
                head_dim: cfg.head_dim,
            };
            let mut mlp = Mlp {
                gate_up: GateUp::Separate {
                    gate: b.linear(&format!("{p}.ffn_gate"), false)?,
                    up: b.linear(&format!("{p}.ffn_up"), false)?,
                },
                down: b.linear(&format!("{p}.ffn_down"), false)?,
            };
            if !opts.trainable {
                // one matmul instead of three (q,k,v) and two (gate,up) per layer
                attn.qkv = attn.qkv.fuse()?;
                mlp.gate_up = mlp.gate_up.fuse()?;
            }
            let mut block = Block {
                attn_norm: RmsNorm::new(b.f32(&format!("{p}.attn_norm.weight"))?, cfg.rms_eps),
                attn,
                ffn_norm: RmsNorm::new(b.f32(&format!("{p}.ffn_norm.weight"))?, cfg.rms_eps),
                mlp,
            };
            if !opts.trainable {
                block.pack_for_cpu();
            }
            blocks.push(block);
        }
        let norm = RmsNorm::new(b.f32("output_norm.weight")?, cfg.rms_eps);
        let mut lm_head = lm_head;
        if !opts.trainable {
            lm_head.pack_for_cpu();
        }
        let vars = b.vars;
        let rotary = Rotary::new(&cfg.inv_freqs(), cfg.max_position, cfg.rope_layout, device)?;
        let full_precision = opts.trainable
            || blocks.first().is_none_or(|blk| {
                matches!(blk.attn.o.weight(), LinearWeight::Dense(w) if w.dtype() == DType::F32)
            });
        let kv_dtype = if full_precision {
            DType::F32
        } else {
            DType::F16
        };
        Ok(Self {
            cfg,
            embed: Embedding::new(emb_table),
            blocks,
            norm,
            lm_head,
            rotary,
            mode: OpMode {
                differentiable: opts.trainable,
            },
            vars,
            device: device.clone(),
            kv_dtype,
        })
    }

    /// Hyper-parameters.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }
    /// Device.
    pub fn device(&self) -> &Device {
        &self.device
    }
    /// Makes every weight a constant for autograd (values unchanged; [`Self::vars`] still
    /// names them): what low-rank adapters train around.
    pub(crate) fn freeze(&mut self) {
        self.embed.freeze();
        for b in &mut self.blocks {
            b.freeze();
        }
        self.norm.weight = self.norm.weight.detach();
        self.lm_head.freeze();
    }
    /// Trainable variables (empty unless loaded with `trainable`).
    pub fn vars(&self) -> &[(String, Var)] {
        &self.vars
    }
    /// Forces the differentiable ops on or off.
    pub fn set_differentiable(&mut self, on: bool) {
        self.mode.differentiable = on;
    }
    /// Element type of the KV cache on the fused CPU path.
    pub fn kv_dtype(&self) -> DType {
        self.kv_dtype
    }
    /// Context length.
    pub fn max_positions(&self) -> usize {
        self.rotary.max_positions()
    }
    /// Fresh cache for `batch` rows.
    pub fn new_cache(&self, batch: usize) -> Cache {
        Cache::new(self.blocks.len(), batch)
    }
    /// Formats of the linear weights, with counts.
    pub fn linear_formats(&self) -> std::collections::BTreeMap<String, usize> {
        let mut m = std::collections::BTreeMap::new();
        let mut add = |l: &Linear| *m.entry(l.weight().format_name()).or_insert(0) += 1;
        for b in &self.blocks {
            for l in b.linears() {
                add(l);
            }
        }
        add(&self.lm_head);
        m
    }
    /// Bytes of all weights as held.
    pub fn weight_bytes(&self) -> usize {
        let mut n = self.embed.table().elem_count() * 4;
        for b in &self.blocks {
            for l in b.linears() {
                n += l.weight().storage_bytes();
            }
        }
        n + self.lm_head.weight().storage_bytes()
    }

    /// Runs `ids (b, t)` through the model, appending to `cache`. Returns f32 logits
    /// `(b, t, vocab)`, or `(b, 1, vocab)` for the last position when `last_only`.
    ///
    /// A pass of a few tokens (decoding, a draft's check) attends to an f16 cache directly;
    /// [`Transformer::forward_prompt`] computes prompt tokens alike however they are split.
    pub fn forward(&self, ids: &Tensor, cache: &mut Cache, last_only: bool) -> Result<Tensor> {
        self.forward_pass(ids, cache, last_only, false)
    }

    /// [`Transformer::forward`] for prompt tokens: every chunk takes the prefill path of
    /// attention, even a chunk of one token, so a prompt's keys, values and logits are the
    /// same bits however it is cut into chunks (a prefix-cache hit of any length, a prompt
    /// fed in pieces). The few-query path that decoding takes sums in another order, and an
    /// activation quantised after it can round the other way: a split prompt otherwise
    /// moved logits by up to ~0.8 on SmolLM2 (q8_0), enough to flip a greedy answer.
    pub fn forward_prompt(
        &self,
        ids: &Tensor,
        cache: &mut Cache,
        last_only: bool,
    ) -> Result<Tensor> {
        self.forward_pass(ids, cache, last_only, true)
    }

    fn forward_pass(
        &self,
        ids: &Tensor,
        cache: &mut Cache,
        last_only: bool,
        prompt: bool,
    ) -> Result<Tensor> {
        // Run the whole pass on a rayon worker: the kernels' parallel loops then fork from
        // inside the pool (a cheap join) instead of each call parking the caller's thread on
        // a latch and waking a worker, ~120 handoffs per decoded token.
        if rayon::current_thread_index().is_none() {
            return rayon::scope(|_| self.forward_pass(ids, cache, last_only, prompt));
        }
        let (b, t) = ids.dims2()?;
        if b != cache.batch() {
            return Err(Error::InvalidArgument(format!(
                "batch {b} does not match cache batch {}",
                cache.batch()
            )));
        }
        let past = cache.len();
        let total = past + t;
        // a shared prefix precedes every row's own positions
        let shared = cache.shared_len();
        if shared + total > self.max_positions() {
            return Err(Error::ContextOverflow {
                prompt: shared + total,
                max_new_tokens: 0,
                context: self.max_positions(),
            });
        }
        let pads = cache.pads().to_vec();
        let mut pos = Vec::with_capacity(b * t);
        for &p in &pads {
            for j in 0..t {
                pos.push((shared + (past + j).saturating_sub(p)) as u32);
            }
        }
        let positions = Tensor::from_vec(pos, (b, t), &self.device)?;
        let cos_sin = self.rotary.tables(&positions)?;
        let any_pad = pads.iter().any(|&p| p > 0);
        let mut x = self.embed.forward(ids)?;
        let fused = crate::layers::fused_attention(&x, self.mode);
        let mask = if fused || (t == 1 && !any_pad) {
            None
        } else {
            let mut m = vec![0f32; b * t * total];
            for (r, &p) in pads.iter().enumerate() {
                for i in 0..t {
                    let qa = past + i;
                    for j in 0..total {
                        let masked = j > qa || (j < p && qa >= p);
                        if masked {
                            m[(r * t + i) * total + j] = f32::NEG_INFINITY;
                        }
                    }
                }
            }
            Some(Tensor::from_vec(m, (b, 1, t, total), &self.device)?)
        };
        let inp = AttnInputs {
            rotary: &self.rotary,
            cos_sin: &cos_sin,
            mask: mask.as_ref(),
            pads: &pads,
            kv_dtype: self.kv_dtype,
            prompt,
        };
        for (blk, kv) in self.blocks.iter().zip(cache.layers.iter_mut()) {
            x = blk.forward(&x, &inp, kv, self.mode)?;
        }
        let x = if last_only { x.narrow(1, t - 1, 1)? } else { x };
        let x = self.norm.forward(&x, self.mode)?;
        let logits = self.lm_head.forward(&x)?;
        Ok(if logits.dtype() == DType::F32 {
            logits
        } else {
            logits.to_dtype(DType::F32)?
        })
    }
}
