//! Fused causal attention for the CPU inference path.
//!
//! The generic path materialises `(b, heads, t, T)` scores, a same-sized additive mask and
//! repeated keys/values: at a 1,700-token prompt that is ~100 MB per layer of memory traffic
//! and page faults. Here each work item is one (row, query head, block of up to 64 queries):
//! scores for the block's key range go to a small per-thread buffer (`gemm`, reading keys and
//! values in place from the KV cache through strides, grouped-query heads by index), then a
//! vectorised softmax over each query's own causal range, then `P V` written straight into
//! the `(b, t, heads * head_dim)` layout the output projection reads. No mask tensor: a row's
//! left padding and causality are key ranges. Inference only (no backward pass).
//!
//! Keys and values may be cached in f16 (half the memory traffic of decoding at long
//! context, which reads the whole cache every token). Single-query decode then reads the f16
//! cache directly (widened in registers); a prefill chunk first widens each row's keys and
//! values to f32 once, then runs the blocked path. On CPUs with AVX-512 BF16 a prefill chunk
//! over an f16 cache takes bf16 products instead (`bf16.rs`: twice the multiply rate, f32
//! accumulation and softmax); `HAT_ATTENTION=f32` keeps the f32 path there.
//!
//! A query gets the same bits however it is batched: prompt tokens take the prefill path in
//! chunks of any size ([`causal_attention`]'s `prompt`), and the few-query path cuts a query's keys into
//! fixed [`KEY_BLOCK`]s merged in order. After int8 activation rounding, a different
//! summation order otherwise changes logits visibly (`crates/model/README.md`, "One prompt,
//! one answer").

use candle_core::{DType, Device, Tensor};

use crate::error::{Error, Result};
use crate::simd::Isa;

#[cfg(target_arch = "x86_64")]
mod bf16;
#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "x86_64")]
mod x86;

/// Whether `HAT_ATTENTION=f32` asks for f32 products in prefill attention where the CPU has
/// faster lower-precision ones.
#[cfg(target_arch = "x86_64")]
fn f32_forced() -> bool {
    std::env::var("HAT_ATTENTION").is_ok_and(|v| v.trim().eq_ignore_ascii_case("f32"))
}

/// The products prefill attention over an f16 cache uses on this CPU with the path in use
/// (for benchmark headers): `bf16` (heads divisible by 64) or `f32`.
pub fn prefill_precision() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if bf16::enabled(crate::simd::isa(), 64) {
        return "bf16";
    }
    "f32"
}

/// One query position's attention for the query heads that share one kv head, over `nk`
/// cached f16 keys and values (rows `k_stride` / `v_stride` elements apart): each key and
/// value row is read once for all of them.
pub(crate) struct F16Group<'a> {
    /// `heads` query rows of `hd`, `q_stride` elements apart.
    pub q: &'a [f32],
    pub q_stride: usize,
    pub heads: usize,
    pub k: &'a [half::f16],
    pub k_stride: usize,
    pub v: &'a [half::f16],
    pub v_stride: usize,
    pub scale: f32,
}

/// A head's share of attention over part of the key range: its largest score and the sum of
/// `exp(score - max)` (the output beside it is unnormalised).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Partial {
    pub max: f32,
    pub sum: f32,
}

impl Partial {
    pub const EMPTY: Partial = Partial {
        max: f32::NEG_INFINITY,
        sum: 0.0,
    };
}

/// Keys per block of a few-query attention's key range ([`direct_f16`]): each block is
/// reduced on its own and the blocks merged in order, so that a query's result does not
/// depend on how many other queries or rows share the call. A shared prefix is kept a
/// multiple of this long ([`crate::model::Cache::stack_shared`]).
pub const KEY_BLOCK: usize = 64;

/// The longest run of the first `n` positions that ends on a [`KEY_BLOCK`] boundary: how
/// much of a common start can be shared in decoding without moving a row's block cuts.
pub fn whole_blocks(n: usize) -> usize {
    n / KEY_BLOCK * KEY_BLOCK
}

/// Queries per work item.
const Q_BLOCK: usize = 64;
/// Up to this many queries (decode, or a short tail after a cached prefix) read an f16
/// cache directly; longer chunks widen it to f32 once and use the blocked GEMM path.
const DIRECT_F16_MAX_QUERIES: usize = 16;

/// `softmax(q k^T * scale) v` with causal masking and per-row left padding.
///
/// `q`: `(b, heads, t, head_dim)`; `k`, `v`: `(b, kv_heads, T, head_dim)` (any strides, e.g.
/// views of a preallocated cache); the `t` queries are the last `t` of the `T` positions.
/// Row `r` starts with `pads[r]` padding positions that real queries never attend to.
/// Returns `(b, t, heads * head_dim)`.
///
/// With `shared`, every row's keys begin with the same prefix `(1, kv_heads, S, head_dim)`
/// (f16, as the cache holds it), read once for all rows, and `k`/`v` hold only the positions
/// after it; taken by few queries at a time (decoding).
///
/// `prompt`: the queries are prompt tokens, which take the prefill kernels however few they
/// are (the f16 cache widened, blocked GEMMs), whose result for a query does not depend on
/// how many other queries the call holds, so a prompt gives the same bits however it is
/// split. Otherwise up to 16 queries (decoding, a draft's check) read an f16 cache directly.
/// With a shared prefix (batched decoding only) the flag changes nothing.
pub fn causal_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    pads: &[usize],
    scale: f32,
    shared: Option<(&Tensor, &Tensor)>,
    prompt: bool,
) -> Result<Tensor> {
    causal_attention_on(crate::simd::isa(), q, k, v, pads, scale, shared, prompt)
}

/// [`causal_attention`] on a given path, which the CPU must run ([`Isa::check`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn causal_attention_on(
    isa: Isa,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    pads: &[usize],
    scale: f32,
    shared: Option<(&Tensor, &Tensor)>,
    prompt: bool,
) -> Result<Tensor> {
    isa.debug_assert_runs();
    let (b, h, t, hd) = q.dims4()?;
    let (_, kvh, total, _) = k.dims4()?;
    if let Some((sk, sv)) = shared {
        let ok = k.dtype() == DType::F16
            && sk.dtype() == DType::F16
            && sv.dtype() == DType::F16
            && t <= DIRECT_F16_MAX_QUERIES
            && sk.dims4()? == sv.dims4()?
            && sk.dim(0)? == 1
            && sk.dim(1)? == kvh
            && sk.dim(3)? == hd;
        if !ok {
            return Err(Error::InvalidArgument(format!(
                "attention after a shared prefix takes an f16 cache and at most {DIRECT_F16_MAX_QUERIES} queries of {kvh} kv heads x {hd}, got {t} queries, keys {:?} {:?}, prefix {:?} {:?}",
                k.dtype(),
                k.dims(),
                sk.dtype(),
                sk.dims()
            )));
        }
    }
    if q.dtype() != DType::F32
        || k.dtype() != v.dtype()
        || !matches!(k.dtype(), DType::F32 | DType::F16)
    {
        return Err(Error::InvalidArgument(format!(
            "fused attention takes f32 queries and f32 or f16 keys/values, got {:?}/{:?}/{:?}",
            q.dtype(),
            k.dtype(),
            v.dtype()
        )));
    }
    if pads.len() != b || h % kvh != 0 || total < t {
        return Err(Error::InvalidArgument(format!(
            "fused attention: {} pads for batch {b}, {h} heads over {kvh} kv heads, {t} queries over {total} keys",
            pads.len()
        )));
    }
    if k.dtype() == DType::F16 {
        if t <= DIRECT_F16_MAX_QUERIES && (!prompt || shared.is_some()) {
            return direct_f16(isa, q, k, v, pads, scale, shared);
        }
        #[cfg(target_arch = "x86_64")]
        if bf16::enabled(isa, hd) {
            return bf16::prefill(isa, q, k, v, pads, scale);
        }
        // widen once per call (not per query block), then the blocked path
        let k = k.to_dtype(DType::F32)?;
        let v = v.to_dtype(DType::F32)?;
        return causal_attention_on(isa, q, &k, &v, pads, scale, None, prompt);
    }
    let n_rep = h / kvh;
    let past = total - t;
    let mut out = vec![0f32; b * t * h * hd];
    let out_ptr = out.as_mut_ptr() as usize;
    let blocks = t.div_ceil(Q_BLOCK);
    let (q_store, q_layout) = q.storage_and_layout();
    let (k_store, k_layout) = k.storage_and_layout();
    let (v_store, v_layout) = v.storage_and_layout();
    let (qd, kd, vd) = (
        crate::cpu::slice::<f32>(&q_store, q_layout)?,
        crate::cpu::slice::<f32>(&k_store, k_layout)?,
        crate::cpu::slice::<f32>(&v_store, v_layout)?,
    );
    let (qst, kst, vst) = (q_layout.stride(), k_layout.stride(), v_layout.stride());
    let item = |scores: &mut Vec<f32>, idx: usize| {
        let (bi, rest) = (idx / (h * blocks), idx % (h * blocks));
        let (hh, blk) = (rest / blocks, rest % blocks);
        let g = hh / n_rep;
        let (i0, i1) = (blk * Q_BLOCK, ((blk + 1) * Q_BLOCK).min(t));
        let pad = pads[bi];
        // key range of the block: a query at absolute index qa sees [lo(qa), qa],
        // lo = pad for real queries, 0 for the padding queries themselves
        let lo = |qa: usize| if qa >= pad { pad } else { 0 };
        let klo = lo(past + i0);
        let khi = past + i1; // exclusive
        let nk = khi - klo;
        let real = i1 - i0;
        // `gemm` sums a single row in another order than a row among several: a lone query
        // is computed twice over (the same query in both rows, the second result dropped), so
        // a query gets the same bits however the prompt around it was split into chunks
        let lone = real == 1;
        let (rows, q_rows) = if lone { (2, 0) } else { (real, qst[2]) };
        scores.clear();
        scores.resize(rows * nk, 0.0);
        // SAFETY: pointers come from live tensors of the checked shapes; strides
        // are the tensors' own; each item writes a disjoint block of `out`.
        unsafe {
            let qp = qd.as_ptr().add(bi * qst[0] + hh * qst[1] + i0 * qst[2]);
            let kp = kd.as_ptr().add(bi * kst[0] + g * kst[1] + klo * kst[2]);
            let vp = vd.as_ptr().add(bi * vst[0] + g * vst[1] + klo * vst[2]);
            gemm::gemm(
                rows,
                nk,
                hd,
                scores.as_mut_ptr(),
                1,
                nk as isize,
                false,
                qp,
                qst[3] as isize,
                q_rows as isize,
                kp,
                kst[2] as isize,
                kst[3] as isize,
                0.0,
                scale,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
            let mut inv = [0f32; Q_BLOCK];
            for (r, row) in scores.chunks_exact_mut(nk).enumerate() {
                let qa = past + i0 + r.min(real - 1);
                let (a, e) = (lo(qa) - klo, qa + 1 - klo);
                row[..a].fill(0.0);
                row[e..].fill(0.0);
                inv[r] = 1.0 / crate::simd::softmax_unnormalised_on(isa, &mut row[a..e]);
            }
            let op = (out_ptr as *mut f32).add(((bi * t + i0) * h + hh) * hd);
            // a lone query's two rows go to a scratch pair (the next row of `out` is another
            // query's)
            let mut pair = if lone { vec![0f32; 2 * hd] } else { Vec::new() };
            let (dst, dst_rows) = if lone {
                (pair.as_mut_ptr(), hd)
            } else {
                (op, h * hd)
            };
            gemm::gemm(
                rows,
                hd,
                nk,
                dst,
                1,
                dst_rows as isize,
                false,
                scores.as_ptr(),
                1,
                nk as isize,
                vp,
                vst[3] as isize,
                vst[2] as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
            if dst != op {
                std::ptr::copy_nonoverlapping(dst, op, hd);
            }
            for (r, s) in inv.iter().enumerate().take(real) {
                let o = std::slice::from_raw_parts_mut(op.add(r * h * hd), hd);
                o.iter_mut().for_each(|x| *x *= s);
            }
        }
    };
    let n = b * h * blocks;
    if n == 1 || rayon::current_num_threads() == 1 {
        let mut buf = Vec::new();
        (0..n).for_each(|i| item(&mut buf, i));
    } else {
        use rayon::prelude::*;
        (0..n).into_par_iter().for_each_init(Vec::new, item);
    }
    Ok(Tensor::from_vec(out, (b, t, h * hd), &Device::Cpu)?)
}

/// Attention of a few queries over an f16 cache: one work item per (row, query, kv group,
/// run of key blocks); keys and values are widened in registers, so decoding reads the
/// cache once per kv group at half the bytes. A `shared` prefix is read once per kv group
/// for the queries of every row together ([`shared_partials`]).
///
/// A query's keys are cut into blocks of [`KEY_BLOCK`] at fixed positions (from its first
/// key), each block reduced on its own ([`Partial`]) and the blocks merged in position
/// order, the shared prefix's first: a query gets the same bits alone or in a batch of any
/// size, beside any number of other queries (a draft's check), with its prefix shared or
/// copied, on any number of threads. A shared prefix a multiple of [`KEY_BLOCK`] long (as
/// [`crate::model::Cache`] keeps it) is cut where the row's own copy would be.
fn direct_f16(
    isa: Isa,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    pads: &[usize],
    scale: f32,
    shared: Option<(&Tensor, &Tensor)>,
) -> Result<Tensor> {
    let (b, h, t, hd) = q.dims4()?;
    let (_, kvh, total, _) = k.dims4()?;
    let n_rep = h / kvh;
    let past = total - t;
    let q = q.contiguous()?; // (b, h, t, hd); no copy when it already is
    let mut out = vec![0f32; b * t * h * hd]; // (b, t, h, hd)
    let (q_store, q_layout) = q.storage_and_layout();
    let (k_store, ls) = k.storage_and_layout();
    let (v_store, vl) = v.storage_and_layout();
    let qs = crate::cpu::slice::<f32>(&q_store, q_layout)?;
    let kd = crate::cpu::slice::<half::f16>(&k_store, ls)?;
    let vd = crate::cpu::slice::<half::f16>(&v_store, vl)?;
    let (kst, vst) = (ls.stride(), vl.stride());
    if kst[3] != 1 || vst[3] != 1 {
        return Err(Error::InvalidArgument(
            "f16 cache rows must be contiguous".into(),
        ));
    }
    let sh = match shared {
        Some((sk, sv)) => shared_partials(isa, qs, (b, h, t, hd), pads, past, sk, sv, scale)?,
        None => None,
    };
    // Blocks per (row, query, kv group): enough for the longest key range. Work items take
    // runs of consecutive blocks: few groups (batch-1 decode: 3 for SmolLM2) would leave
    // cores idle, so a long key range is spread over several items (as flash-decoding
    // does); how it is spread changes nothing in the result.
    let groups = b * t * kvh;
    let blocks = total.div_ceil(KEY_BLOCK).max(1);
    let threads = rayon::current_num_threads().max(1);
    let runs = (4 * threads).div_ceil(groups).clamp(1, blocks);
    let per_run = blocks.div_ceil(runs);
    let runs = blocks.div_ceil(per_run);
    // every run holds `per_run` blocks (the last ones past every key range stay empty), so a
    // work item's share of the buffers is one chunk
    let blocks = runs * per_run;
    let gsize = n_rep * hd;
    let mut partial = vec![0f32; groups * blocks * gsize];
    let mut stats = vec![Partial::EMPTY; groups * blocks * n_rep];
    let item = |scores: &mut Vec<f32>, (idx, (o, st)): (usize, (&mut [f32], &mut [Partial]))| {
        let (gi, run) = (idx / runs, idx % runs);
        let (bi, i, g) = (gi / (t * kvh), gi / kvh % t, gi % kvh);
        // keys lo..=qa; real queries skip the row's left padding
        let qa = past + i;
        let lo = if qa >= pads[bi] { pads[bi] } else { 0 };
        let qo = ((bi * h + g * n_rep) * t + i) * hd;
        let first = run * per_run;
        for ((blk, o), st) in (first..first + per_run)
            .zip(o.chunks_exact_mut(gsize))
            .zip(st.chunks_exact_mut(n_rep))
        {
            let k0 = lo + blk * KEY_BLOCK;
            let k1 = (k0 + KEY_BLOCK).min(qa + 1);
            if k0 >= k1 {
                st.fill(Partial::EMPTY);
                continue;
            }
            let nk = k1 - k0;
            scores.clear();
            scores.resize(n_rep * nk, 0.0);
            let grp = F16Group {
                q: &qs[qo..],
                q_stride: t * hd,
                heads: n_rep,
                k: &kd[bi * kst[0] + g * kst[1] + k0 * kst[2]..],
                k_stride: kst[2],
                v: &vd[bi * vst[0] + g * vst[1] + k0 * vst[2]..],
                v_stride: vst[2],
                scale,
            };
            decode_group_on(isa, hd, &grp, scores, o, st);
        }
    };
    let per_item = per_run * gsize;
    if groups * runs == 1 || threads == 1 {
        let mut buf = Vec::new();
        partial
            .chunks_exact_mut(per_item)
            .zip(stats.chunks_exact_mut(per_run * n_rep))
            .enumerate()
            .for_each(|x| item(&mut buf, x));
    } else {
        use rayon::prelude::*;
        partial
            .par_chunks_exact_mut(per_item)
            .zip(stats.par_chunks_exact_mut(per_run * n_rep))
            .enumerate()
            .for_each_init(Vec::new, item);
    }
    // merge each query head's blocks in position order: the shared prefix's, then its own
    for (gi, o) in out.chunks_exact_mut(gsize).enumerate() {
        let (bi, i, g) = (gi / (t * kvh), gi / kvh % t, gi % kvh);
        // the shared prefix and this row's place among the rows that see it
        let seen = sh.as_ref().and_then(|s| s.slot[bi].map(|k| (s, k)));
        for (hh, o) in o.chunks_exact_mut(hd).enumerate() {
            let shared_parts = || {
                seen.into_iter().flat_map(move |(s, k)| {
                    let qi = (k * t + i) * n_rep + hh;
                    (0..s.parts).map(move |p| {
                        let at = (g * s.parts + p) * s.queries + qi;
                        (s.stats[at], &s.out[at * hd..(at + 1) * hd])
                    })
                })
            };
            let own = || {
                (0..blocks).map(|blk| {
                    let at = gi * blocks + blk;
                    (
                        stats[at * n_rep + hh],
                        &partial[at * gsize + hh * hd..at * gsize + (hh + 1) * hd],
                    )
                })
            };
            let max = shared_parts()
                .chain(own())
                .map(|(s, _)| s.max)
                .fold(f32::NEG_INFINITY, f32::max);
            o.fill(0.0);
            let mut sum = 0.0;
            for (s, src) in shared_parts().chain(own()) {
                if s.sum == 0.0 {
                    continue; // an empty block
                }
                let w = (s.max - max).exp();
                for (o, x) in o.iter_mut().zip(src) {
                    *o += w * x;
                }
                sum += w * s.sum;
            }
            let inv = 1.0 / sum;
            o.iter_mut().for_each(|x| *x *= inv);
        }
    }
    Ok(Tensor::from_vec(out, (b, t, h * hd), &Device::Cpu)?)
}

/// Unnormalised attention of the queries of the rows that see a shared prefix, per kv group
/// and block of the prefix: `out[((g * parts + p) * queries + qi) * hd..]` and `stats[..]`
/// alike, with query `qi = (slot[row] * t + i) * n_rep + head` for a row that sees it.
struct SharedPartials {
    parts: usize,
    queries: usize,
    /// Each row's place among the rows that see the prefix (`None`: a muted row).
    slot: Vec<Option<usize>>,
    out: Vec<f32>,
    stats: Vec<Partial>,
}

/// Attends the queries of the rows that see the shared prefix `(1, kv_heads, S, hd)` (`q`:
/// `(b, h, t, hd)`, contiguous) to it: one work item per (kv group, [`KEY_BLOCK`] of the
/// prefix) takes those rows' query heads of the group at once, so each prefix key and value
/// comes from memory once per step for the whole batch. A muted row (`Cache::mute_row`: its
/// padding covers everything before this step, `pads[row] >= past`) sees only the new
/// positions, so not the prefix either. `None` when no row sees a non-empty prefix.
#[allow(clippy::too_many_arguments)]
fn shared_partials(
    isa: Isa,
    q: &[f32],
    (b, h, t, hd): (usize, usize, usize, usize),
    pads: &[usize],
    past: usize,
    sk: &Tensor,
    sv: &Tensor,
    scale: f32,
) -> Result<Option<SharedPartials>> {
    let (_, kvh, slen, _) = sk.dims4()?;
    let n_rep = h / kvh;
    let (k_store, kl) = sk.storage_and_layout();
    let (v_store, vl) = sv.storage_and_layout();
    let kd = crate::cpu::slice::<half::f16>(&k_store, kl)?;
    let vd = crate::cpu::slice::<half::f16>(&v_store, vl)?;
    let (kst, vst) = (kl.stride(), vl.stride());
    if kst[3] != 1 || vst[3] != 1 {
        return Err(Error::InvalidArgument(
            "f16 shared prefix rows must be contiguous".into(),
        ));
    }
    let threads = rayon::current_num_threads().max(1);
    let parts = slen.div_ceil(KEY_BLOCK).max(1);
    let rows: Vec<usize> = (0..b).filter(|&r| pads[r] < past).collect();
    if rows.is_empty() || slen == 0 {
        return Ok(None);
    }
    let mut slot = vec![None; b];
    for (k, &r) in rows.iter().enumerate() {
        slot[r] = Some(k);
    }
    let queries = rows.len() * t * n_rep;
    let mut out = vec![0f32; kvh * parts * queries * hd];
    let mut stats = vec![Partial::EMPTY; kvh * parts * queries];
    let item = |(scores, qbuf): &mut (Vec<f32>, Vec<f32>),
                (idx, (o, st)): (usize, (&mut [f32], &mut [Partial]))| {
        let (g, part) = (idx / parts, idx % parts);
        let (k0, k1) = (part * KEY_BLOCK, ((part + 1) * KEY_BLOCK).min(slen));
        qbuf.clear();
        for &bi in &rows {
            for i in 0..t {
                for hh in 0..n_rep {
                    let at = ((bi * h + g * n_rep + hh) * t + i) * hd;
                    qbuf.extend_from_slice(&q[at..at + hd]);
                }
            }
        }
        scores.clear();
        scores.resize(queries * (k1 - k0), 0.0);
        let grp = F16Group {
            q: qbuf,
            q_stride: hd,
            heads: queries,
            k: &kd[g * kst[1] + k0 * kst[2]..],
            k_stride: kst[2],
            v: &vd[g * vst[1] + k0 * vst[2]..],
            v_stride: vst[2],
            scale,
        };
        decode_group_on(isa, hd, &grp, scores, o, st);
    };
    if kvh * parts == 1 || threads == 1 {
        let mut bufs = (Vec::new(), Vec::new());
        out.chunks_exact_mut(queries * hd)
            .zip(stats.chunks_exact_mut(queries))
            .enumerate()
            .for_each(|x| item(&mut bufs, x));
    } else {
        use rayon::prelude::*;
        out.par_chunks_exact_mut(queries * hd)
            .zip(stats.par_chunks_exact_mut(queries))
            .enumerate()
            .for_each_init(|| (Vec::new(), Vec::new()), item);
    }
    Ok(Some(SharedPartials {
        parts,
        queries,
        slot,
        out,
        stats,
    }))
}

/// One [`F16Group`] on `isa`'s kernel (`hd`: the head size, which picks the vector width).
fn decode_group_on(
    isa: Isa,
    hd: usize,
    grp: &F16Group,
    scores: &mut [f32],
    out: &mut [f32],
    stats: &mut [Partial],
) {
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = hd;
    match isa {
        // SAFETY (each arm): the CPU runs `isa`; every row read lies within the views
        // (`heads` query rows, `nk` cache rows of `hd` each).
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if hd.is_multiple_of(16) => unsafe {
            x86::decode_group_avx512(grp, scores, out, stats)
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx2Vnni | Isa::Avx512 if hd.is_multiple_of(8) => unsafe {
            x86::decode_group_avx2(grp, scores, out, stats)
        },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon | Isa::NeonDot if hd.is_multiple_of(4) => unsafe {
            neon::decode_group(grp, scores, out, stats)
        },
        _ => decode_group_scalar(grp, scores, out, stats),
    }
}

/// The reference for [`F16Group`]: `scores` holds `heads * nk`, `out` gets `heads * hd`
/// unnormalised outputs and `stats` each head's [`Partial`].
fn decode_group_scalar(r: &F16Group, scores: &mut [f32], out: &mut [f32], stats: &mut [Partial]) {
    let hd = out.len() / r.heads;
    let nk = scores.len() / r.heads;
    if nk == 0 {
        out.fill(0.0);
        stats.iter_mut().for_each(|s| *s = Partial::EMPTY);
        return;
    }
    for (((hh, sc), o), st) in scores
        .chunks_exact_mut(nk)
        .enumerate()
        .zip(out.chunks_exact_mut(hd))
        .zip(stats.iter_mut())
    {
        let q = &r.q[hh * r.q_stride..hh * r.q_stride + hd];
        *st = Partial::EMPTY;
        for (j, s) in sc.iter_mut().enumerate() {
            let kr = &r.k[j * r.k_stride..j * r.k_stride + hd];
            *s = q.iter().zip(kr).map(|(a, b)| a * b.to_f32()).sum::<f32>() * r.scale;
            st.max = st.max.max(*s);
        }
        o.fill(0.0);
        for (j, p) in sc.iter_mut().enumerate() {
            *p = (*p - st.max).exp();
            st.sum += *p;
            let vr = &r.v[j * r.v_stride..j * r.v_stride + hd];
            for (o, v) in o.iter_mut().zip(vr) {
                *o += *p * v.to_f32();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::tests::max_diff;
    use crate::layers::{softmax_last, OpMode};

    /// The generic path: repeated kv heads, additive mask, softmax, matmul.
    fn reference(q: &Tensor, k: &Tensor, v: &Tensor, pads: &[usize], scale: f64) -> Tensor {
        let (b, h, t, hd) = q.dims4().unwrap();
        let (_, kvh, total, _) = k.dims4().unwrap();
        let rep = |x: &Tensor| {
            x.unsqueeze(2)
                .unwrap()
                .broadcast_as((b, kvh, h / kvh, total, hd))
                .unwrap()
                .reshape((b, h, total, hd))
                .unwrap()
        };
        let past = total - t;
        let mut m = vec![0f32; b * t * total];
        for (r, &p) in pads.iter().enumerate() {
            for i in 0..t {
                let qa = past + i;
                for j in 0..total {
                    if j > qa || (j < p && qa >= p) {
                        m[(r * t + i) * total + j] = f32::NEG_INFINITY;
                    }
                }
            }
        }
        let mask = Tensor::from_vec(m, (b, 1, t, total), &Device::Cpu).unwrap();
        let att = (q.matmul(&rep(k).t().unwrap()).unwrap() * scale)
            .unwrap()
            .broadcast_add(&mask)
            .unwrap();
        let att = softmax_last(&att, OpMode::default()).unwrap();
        att.matmul(&rep(v))
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .reshape((b, t, h * hd))
            .unwrap()
    }

    /// Asserts that `got` is within 1e-5 of `want` everywhere; `what` names the case.
    fn assert_close(got: &Tensor, want: &Tensor, what: impl Fn() -> String) {
        let diff = max_diff(got, want);
        assert!(diff < 1e-5, "{}: max diff {diff}", what());
    }

    #[test]
    fn matches_the_generic_path() {
        for isa in crate::simd::tests::paths("attention matches_the_generic_path") {
            // 24: the AVX-512 path falls back to its 8-lane loop
            for hd in [16, 24] {
                check(isa, hd);
            }
        }
    }

    fn check(isa: Isa, hd: usize) {
        let dev = Device::Cpu;
        // prefill over a cache with spare capacity (strided keys), several query blocks,
        // left padding; then single-query decode
        for (b, h, kvh, t, total, cap, pads) in [
            (
                2usize,
                6usize,
                2usize,
                70usize,
                75usize,
                90usize,
                vec![0usize, 7],
            ),
            (3, 4, 4, 1, 40, 64, vec![0, 3, 39]),
            (1, 9, 3, 130, 130, 130, vec![0]),
            (2, 6, 3, 5, 45, 64, vec![2, 0]), // a short tail after a cached prefix
            // batch-1 decode at depth: the key range is split over threads and merged
            (1, 6, 2, 1, 700, 720, vec![0]),
            (2, 6, 2, 1, 600, 600, vec![0, 333]),
        ] {
            let q = Tensor::randn(0f32, 1.0, (b, h, t, hd), &dev).unwrap();
            let kbuf = Tensor::randn(0f32, 1.0, (b, kvh, cap, hd), &dev).unwrap();
            let vbuf = Tensor::randn(0f32, 1.0, (b, kvh, cap, hd), &dev).unwrap();
            let k = kbuf.narrow(2, 0, total).unwrap();
            let v = vbuf.narrow(2, 0, total).unwrap();
            let scale = 0.25;
            // an f16 cache: compare against the reference on the same (rounded) values
            let k16 = kbuf
                .to_dtype(DType::F16)
                .unwrap()
                .narrow(2, 0, total)
                .unwrap();
            let v16 = vbuf
                .to_dtype(DType::F16)
                .unwrap()
                .narrow(2, 0, total)
                .unwrap();
            let got16 =
                causal_attention_on(isa, &q, &k16, &v16, &pads, scale as f32, None, false).unwrap();
            let want16 = reference(
                &q,
                &k16.to_dtype(DType::F32).unwrap(),
                &v16.to_dtype(DType::F32).unwrap(),
                &pads,
                scale,
            );
            assert_close(&got16, &want16, || {
                format!("{isa} hd={hd} f16 b={b} h={h} t={t}")
            });
            let got =
                causal_attention_on(isa, &q, &k, &v, &pads, scale as f32, None, false).unwrap();
            let want = reference(
                &q,
                &k.contiguous().unwrap(),
                &v.contiguous().unwrap(),
                &pads,
                scale,
            );
            assert_close(&got, &want, || format!("{isa} hd={hd} b={b} h={h} t={t}"));
        }
    }

    /// Rows after a shared prefix: each row's output equals attention over the prefix
    /// followed by the row's own unpadded keys, computed alone.
    /// The bits of every value of an f32 tensor, for exact comparisons.
    fn bits(t: &Tensor) -> Vec<u32> {
        t.flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect()
    }

    /// Prompt attention gives a query the same bits however many queries its call holds
    /// (a prompt cut into chunks anywhere, a prefix-cache hit of any length), on every path
    /// and for f32 and f16 caches: what makes a split prompt's logits equal the whole one's.
    #[test]
    fn a_prompt_query_gives_the_same_bits_in_any_chunk() {
        let dev = Device::Cpu;
        let (h, kvh, total) = (6, 2, 300);
        for isa in crate::simd::tests::paths("a_prompt_query_gives_the_same_bits_in_any_chunk") {
            for hd in [64, 24] {
                let q = Tensor::randn(0f32, 1.0, (1, h, total, hd), &dev).unwrap();
                let k = Tensor::randn(0f32, 1.0, (1, kvh, total, hd), &dev).unwrap();
                let v = Tensor::randn(0f32, 1.0, (1, kvh, total, hd), &dev).unwrap();
                for dt in [DType::F32, DType::F16] {
                    let (k, v) = (k.to_dtype(dt).unwrap(), v.to_dtype(dt).unwrap());
                    let run = |from: usize, to: usize| {
                        let q = q.narrow(2, from, to - from).unwrap();
                        let (k, v) = (k.narrow(2, 0, to).unwrap(), v.narrow(2, 0, to).unwrap());
                        bits(
                            &causal_attention_on(isa, &q, &k, &v, &[0], 0.125, None, true).unwrap(),
                        )
                    };
                    let whole = run(0, total);
                    let row = h * hd;
                    // one query (the `gemm` crate's single-row path sums in another
                    // order), a few, a block and one more (a one-query block), a block of
                    // 63, most of the prompt
                    for (from, to) in [
                        (299, 300),
                        (298, 300),
                        (290, 300),
                        (284, 300),
                        (235, 300),
                        (200, 263),
                        (0, 1),
                        (0, 17),
                        (1, 300),
                    ] {
                        assert!(
                            run(from, to) == whole[from * row..to * row],
                            "{isa} hd={hd} {dt:?}: queries {from}..{to} alone"
                        );
                    }
                }
            }
        }
    }

    /// A decoded query gets the same bits alone, in a batch of padded rows, beside a draft's
    /// other queries, and over a shared prefix a multiple of [`KEY_BLOCK`] long, on every
    /// path: an answer does not depend on what else the engine decodes with it.
    #[test]
    fn a_decoded_query_gives_the_same_bits_in_any_company() {
        let dev = Device::Cpu;
        let (h, kvh, hd, n) = (6, 2, 64, 700);
        let f16 = |x: Tensor| x.to_dtype(DType::F16).unwrap();
        let keys = |len: usize| f16(Tensor::randn(0f32, 1.0, (1, kvh, len, hd), &dev).unwrap());
        let (k, v) = (keys(n), keys(n));
        let q = Tensor::randn(0f32, 1.0, (1, h, 5, hd), &dev).unwrap();
        let last_q = q.narrow(2, 4, 1).unwrap();
        for isa in crate::simd::tests::paths("a_decoded_query_gives_the_same_bits_in_any_company") {
            let attend = |q: &Tensor, k: &Tensor, v: &Tensor, pads: &[usize], sh| {
                causal_attention_on(isa, q, k, v, pads, 0.125, sh, false).unwrap()
            };
            let alone = bits(&attend(&last_q, &k, &v, &[0], None));
            // a draft's check: the query is the last of five
            let five = attend(&q, &k, &v, &[0], None);
            assert_eq!(
                bits(&five.narrow(1, 4, 1).unwrap()),
                alone,
                "{isa}: beside a draft"
            );
            // a batch of three left-padded rows, this one first
            let (ko, vo) = (keys(n), keys(n));
            let pad = |x: &Tensor, p: usize| {
                Tensor::cat(
                    &[
                        &Tensor::zeros((1, kvh, p, hd), DType::F16, &dev).unwrap(),
                        &x.narrow(2, 0, n - p).unwrap(),
                    ],
                    2,
                )
                .unwrap()
            };
            let kb = Tensor::cat(&[&k, &pad(&ko, 400), &pad(&ko, 200)], 0).unwrap();
            let vb = Tensor::cat(&[&v, &pad(&vo, 400), &pad(&vo, 200)], 0).unwrap();
            let qb = Tensor::cat(&[&last_q, &last_q, &last_q], 0).unwrap();
            let batch = attend(&qb, &kb, &vb, &[0, 400, 200], None);
            assert_eq!(
                bits(&batch.narrow(0, 0, 1).unwrap()),
                alone,
                "{isa}: in a batch"
            );
            // the first 640 keys shared by two rows, each keeping its last 60
            let s = 10 * KEY_BLOCK;
            let (sk, sv) = (k.narrow(2, 0, s).unwrap(), v.narrow(2, 0, s).unwrap());
            let own = |x: &Tensor| x.narrow(2, s, n - s).unwrap();
            let (k2, v2) = (
                Tensor::cat(&[&own(&k), &own(&ko)], 0).unwrap(),
                Tensor::cat(&[&own(&v), &own(&vo)], 0).unwrap(),
            );
            let q2 = Tensor::cat(&[&last_q, &last_q], 0).unwrap();
            let shared = attend(&q2, &k2, &v2, &[0, 0], Some((&sk, &sv)));
            assert_eq!(
                bits(&shared.narrow(0, 0, 1).unwrap()),
                alone,
                "{isa}: over a shared prefix"
            );
        }
    }

    #[test]
    fn a_shared_prefix_equals_its_copy_in_every_row() {
        let dev = Device::Cpu;
        for isa in crate::simd::tests::paths("attention a_shared_prefix_equals_its_copy") {
            for hd in [16, 24] {
                // (batch, heads, kv heads, queries, own positions, pads, prefix length):
                // decode with padded and muted rows (pad = total - 1: they see neither the
                // prefix nor their past), a short tail, a prefix long enough to be split over
                // threads, one shorter than a part, a row whose own keys are split too, and
                // a batch of muted rows only
                type Case = (usize, usize, usize, usize, usize, Vec<usize>, usize);
                let cases: [Case; 5] = [
                    (3, 6, 2, 1, 9, vec![0, 4, 8], 700),
                    (2, 4, 4, 3, 12, vec![2, 0], 40),
                    (4, 9, 3, 1, 5, vec![0, 1, 2, 4], 1),
                    (1, 6, 2, 1, 700, vec![0], 300),
                    (2, 4, 2, 1, 6, vec![5, 5], 50),
                ];
                for (b, h, kvh, t, total, pads, slen) in cases {
                    let f16 = |x: Tensor| x.to_dtype(DType::F16).unwrap();
                    let q = Tensor::randn(0f32, 1.0, (b, h, t, hd), &dev).unwrap();
                    let k = f16(Tensor::randn(0f32, 1.0, (b, kvh, total, hd), &dev).unwrap());
                    let v = f16(Tensor::randn(0f32, 1.0, (b, kvh, total, hd), &dev).unwrap());
                    let sk = f16(Tensor::randn(0f32, 1.0, (1, kvh, slen, hd), &dev).unwrap());
                    let sv = f16(Tensor::randn(0f32, 1.0, (1, kvh, slen, hd), &dev).unwrap());
                    let got =
                        causal_attention_on(isa, &q, &k, &v, &pads, 0.3, Some((&sk, &sv)), false)
                            .unwrap();
                    for (r, &pad) in pads.iter().enumerate() {
                        let own = |x: &Tensor| {
                            x.narrow(0, r, 1)
                                .unwrap()
                                .narrow(2, pad, total - pad)
                                .unwrap()
                        };
                        let muted = pad >= total - t;
                        let keys = |p: &Tensor, x: &Tensor| {
                            let x = own(x);
                            let all = if muted {
                                x
                            } else {
                                Tensor::cat(&[p, &x], 2).unwrap()
                            };
                            all.to_dtype(DType::F32).unwrap()
                        };
                        let (kr, vr) = (keys(&sk, &k), keys(&sv, &v));
                        let want = reference(&q.narrow(0, r, 1).unwrap(), &kr, &vr, &[0], 0.3);
                        assert_close(&got.narrow(0, r, 1).unwrap(), &want, || {
                            format!("{isa} hd={hd} b={b} t={t} row {r}")
                        });
                    }
                }
            }
        }
    }

    #[test]
    fn a_shared_prefix_needs_an_f16_cache_and_few_queries() {
        let dev = Device::Cpu;
        let q = Tensor::zeros((1, 2, 1, 8), DType::F32, &dev).unwrap();
        let k = Tensor::zeros((1, 1, 3, 8), DType::F32, &dev).unwrap();
        let s = Tensor::zeros((1, 1, 4, 8), DType::F16, &dev).unwrap();
        let err = causal_attention_on(Isa::Scalar, &q, &k, &k, &[0], 1.0, Some((&s, &s)), false);
        assert!(err.unwrap_err().to_string().contains("shared prefix"));
    }

    /// The bf16 prefill path against the f32 reference: on the same bf16-rounded queries,
    /// keys and values it differs only by the rounding of the softmax weights; on the
    /// unrounded values by the rounding of all of them.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn bf16_prefill_is_close_to_the_f32_reference() {
        if !crate::simd::x86::bf16_supported() {
            eprintln!(
                "bf16_prefill_is_close_to_the_f32_reference: bf16 path not tested: the CPU lacks avx512bf16 (or avx512f/bw)"
            );
            return;
        }
        let dev = Device::Cpu;
        let rounded = |x: &Tensor| {
            x.to_dtype(DType::BF16)
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap()
        };
        for (b, h, kvh, t, total, cap, pads, hd) in [
            (
                2usize,
                6usize,
                2usize,
                70usize,
                75usize,
                90usize,
                vec![0usize, 7],
                64usize,
            ),
            (1, 9, 3, 130, 130, 130, vec![0], 64),
            // a chunk after a long cached part; a padded row whose keys start mid-tile
            (2, 9, 3, 17, 1000, 1040, vec![0, 333], 64),
            (1, 4, 2, 40, 301, 320, vec![0], 128),
            // padding queries see [0, qa]
            (3, 2, 1, 33, 33, 40, vec![5, 0, 31], 64),
        ] {
            let q = Tensor::randn(0f32, 1.0, (b, h, t, hd), &dev).unwrap();
            let cache = |seed: f32| {
                (Tensor::randn(0f32, 1.0, (b, kvh, cap, hd), &dev).unwrap() * seed as f64)
                    .unwrap()
                    .to_dtype(DType::F16)
                    .unwrap()
                    .narrow(2, 0, total)
                    .unwrap()
            };
            let (k16, v16) = (cache(1.0), cache(1.0));
            let (k, v) = (
                k16.to_dtype(DType::F32).unwrap(),
                v16.to_dtype(DType::F32).unwrap(),
            );
            let scale = 0.125;
            let got = bf16::prefill(Isa::best(), &q, &k16, &v16, &pads, scale as f32).unwrap();
            let what = format!("b={b} h={h} kvh={kvh} t={t} total={total} hd={hd}");
            let same_inputs = reference(&rounded(&q), &rounded(&k), &rounded(&v), &pads, scale);
            let d = max_diff(&got, &same_inputs);
            assert!(d < 6e-3, "{what}: {d} from the reference on rounded inputs");
            let exact = reference(&q, &k, &v, &pads, scale);
            let d = max_diff(&got, &exact);
            assert!(d < 2e-2, "{what}: {d} from the f32 reference");
            // the dispatcher takes this path for such a chunk unless HAT_ATTENTION=f32
            if bf16::enabled(Isa::Avx512, hd) {
                let via = causal_attention_on(
                    Isa::Avx512,
                    &q,
                    &k16,
                    &v16,
                    &pads,
                    scale as f32,
                    None,
                    false,
                )
                .unwrap();
                assert_eq!(max_diff(&via, &got), 0.0, "{what}");
            }
        }
    }
}
