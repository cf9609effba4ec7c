//! Attention for training: one candle custom op with its own backward, over a packed
//! sequence whose queries each see a prefix of shared keys and their own segment.
//!
//! Query `i` sees keys `[0, a_i)` and `[b_i, i]` ([`Visible`]); a plain causal sequence has
//! `a_i = b_i = 0`, and a shared-prefix pack `[prefix | conv 1 | conv 2 | ...]` gives each
//! conversation token `a_i = prefix length`, `b_i = start of its conversation`. The forward
//! keeps only the output and one log-sum-exp per (head, query); the backward recomputes the
//! attention probabilities from them (as FlashAttention does) instead of holding
//! `heads x t x t` scores per layer, which for a 4,000-token pack would be 0.6 GB a layer.
//! Grouped-query attention is handled inside: a kv head serves `heads / kv_heads` query heads.

use std::sync::{Arc, Mutex};

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::error::{Error, Result};

/// Which keys each query sees: `[0, a[i])` and `[b[i], i]`, with `a[i] <= b[i] <= i`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Visible {
    a: Vec<u32>,
    b: Vec<u32>,
}

impl Visible {
    /// Plain causal attention over `t` tokens.
    pub fn causal(t: usize) -> Self {
        Self {
            a: vec![0; t],
            b: vec![0; t],
        }
    }
    /// From per-query `(a, b)` pairs; errors when a pair is out of order.
    pub fn new(a: Vec<u32>, b: Vec<u32>) -> Result<Self> {
        if a.len() != b.len() {
            return Err(Error::InvalidArgument(format!(
                "visibility: {} prefix ends for {} segment starts",
                a.len(),
                b.len()
            )));
        }
        for (i, (&ai, &bi)) in a.iter().zip(&b).enumerate() {
            if ai > bi || bi as usize > i {
                return Err(Error::InvalidArgument(format!(
                    "visibility of query {i}: needs prefix end {ai} <= segment start {bi} <= {i}"
                )));
            }
        }
        Ok(Self { a, b })
    }
    /// Queries covered.
    pub fn len(&self) -> usize {
        self.a.len()
    }
    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.a.is_empty()
    }
    /// Per query `i`: the end of the prefix it sees (`a_i`) and the start of its own segment
    /// (`b_i`); it sees keys `[0, a_i)` and `[b_i, i]`. For handing the mask to other engines.
    pub fn bounds(&self) -> (&[u32], &[u32]) {
        (&self.a, &self.b)
    }
    /// Whether query `i` sees key `j`.
    pub fn sees(&self, i: usize, j: usize) -> bool {
        j <= i && (j < self.a[i] as usize || j >= self.b[i] as usize)
    }
}

/// `c (m x n, row stride ldc) = [c +] beta * a (m x k) * b (k x n)`, strides in elements, on
/// this thread (the op parallelises over its own tasks).
///
/// # Safety
/// The pointers must cover the matrices their strides describe.
#[allow(clippy::too_many_arguments)]
unsafe fn mm(
    dims: (usize, usize, usize),
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
    a: (*const f32, usize, usize),
    b: (*const f32, usize, usize),
    beta: f32,
) {
    gemm_on(
        dims,
        c,
        ldc,
        accumulate,
        a,
        b,
        beta,
        gemm::Parallelism::None,
    )
}

/// `c (m x n, row-major) = [c +] a b`, with `a` and `b` given by (pointer, row stride,
/// column stride), on every thread of the pool (one thread: no pool at all); in bf16 products
/// when [`super::set_matmul_precision`] asked for them.
///
/// # Safety
/// The pointers must cover the matrices their strides describe.
pub(super) unsafe fn gemm_par(
    (m, n, k): (usize, usize, usize),
    c: *mut f32,
    accumulate: bool,
    a: (*const f32, usize, usize),
    b: (*const f32, usize, usize),
) {
    let threads = rayon::current_num_threads();
    #[cfg(target_arch = "x86_64")]
    if super::bf16::enabled() && m > 0 && n > 0 && k > 0 {
        // SAFETY: enabled only on a CPU that has the instructions; the caller's pointers.
        return super::bf16::gemm((m, n, k), c, n, accumulate, a, b, 1.0, threads > 1);
    }
    let par = match threads {
        0 | 1 => gemm::Parallelism::None,
        n => gemm::Parallelism::Rayon(n),
    };
    gemm_on((m, n, k), c, n, accumulate, a, b, 1.0, par)
}

/// [`mm`] with the given parallelism.
///
/// # Safety
/// The pointers must cover the matrices their strides describe.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm_on(
    (m, n, k): (usize, usize, usize),
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
    (a, a_rs, a_cs): (*const f32, usize, usize),
    (b, b_rs, b_cs): (*const f32, usize, usize),
    beta: f32,
    par: gemm::Parallelism,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                std::slice::from_raw_parts_mut(c.add(r * ldc), n).fill(0.0);
            }
        }
        return;
    }
    gemm::gemm(
        m,
        n,
        k,
        c,
        1,
        ldc as isize,
        accumulate,
        a,
        a_cs as isize,
        a_rs as isize,
        b,
        b_cs as isize,
        b_rs as isize,
        1.0,
        beta,
        false,
        false,
        false,
        par,
    );
}

/// Queries per block: one GEMM tile of scores.
const QB: usize = 64;

/// The keys a block of queries `[i0, i1)` may see, as at most two ranges (the shared prefix
/// and the block's own segments), and for each query which of those columns it sees.
struct BlockKeys {
    ranges: [(usize, usize); 2],
    n: usize,
}

/// The column ranges one query sees: a prefix part and a segment part in each of the block's
/// two key ranges, at most four.
struct VisibleCols {
    ranges: [(usize, usize); 4],
    len: usize,
}

impl std::ops::Deref for VisibleCols {
    type Target = [(usize, usize)];
    fn deref(&self) -> &[(usize, usize)] {
        &self.ranges[..self.len]
    }
}

impl BlockKeys {
    fn new(vis: &Visible, i0: usize, i1: usize) -> Self {
        let a = (i0..i1).map(|i| vis.a[i] as usize).max().unwrap_or(0);
        let b = (i0..i1).map(|i| vis.b[i] as usize).min().unwrap_or(0);
        let ranges = if b <= a {
            [(0, i1), (i1, i1)]
        } else {
            [(0, a), (b, i1)]
        };
        let n = ranges.iter().map(|r| r.1 - r.0).sum();
        Self { ranges, n }
    }
    /// Key index of column `c`.
    #[cfg(test)]
    fn key(&self, c: usize) -> usize {
        let first = self.ranges[0].1 - self.ranges[0].0;
        if c < first {
            self.ranges[0].0 + c
        } else {
            self.ranges[1].0 + c - first
        }
    }
    /// The columns query `i` sees (keys `[0, a_i)` and `[b_i, i]`), as column ranges in
    /// increasing order, empty ones left out. `i` must be one of the block's queries.
    fn visible(&self, vis: &Visible, i: usize) -> VisibleCols {
        let (a, b) = (vis.a[i] as usize, vis.b[i] as usize);
        let mut cols = VisibleCols {
            ranges: [(0, 0); 4],
            len: 0,
        };
        let mut off = 0;
        for &(lo, hi) in &self.ranges {
            for (k0, k1) in [(lo, hi.min(a)), (lo.max(b), hi.min(i + 1))] {
                if k0 < k1 {
                    cols.ranges[cols.len] = (off + k0 - lo, off + k1 - lo);
                    cols.len += 1;
                }
            }
            off += hi - lo;
        }
        cols
    }
    /// `s (rows x n) = beta * x_blk (rows x d) * keys^T` over both ranges.
    ///
    /// # Safety
    /// `x` must hold `rows x d` values, `keys` every key row of the ranges, `s` `rows x n`.
    unsafe fn scores(
        &self,
        rows: usize,
        d: usize,
        x: *const f32,
        keys: &[f32],
        s: &mut [f32],
        beta: f32,
    ) {
        let mut col = 0;
        for &(lo, hi) in &self.ranges {
            let nk = hi - lo;
            mm(
                (rows, nk, d),
                s.as_mut_ptr().add(col),
                self.n,
                false,
                (x, d, 1),
                (keys.as_ptr().add(lo * d), 1, d),
                beta,
            );
            col += nk;
        }
    }
    /// `out (rows x d) [+]= p (rows x n) * vals` over both ranges.
    ///
    /// # Safety
    /// As [`Self::scores`], with `out` `rows x d`.
    unsafe fn weighted(
        &self,
        rows: usize,
        d: usize,
        p: &[f32],
        vals: &[f32],
        out: *mut f32,
        accumulate: bool,
    ) {
        let mut col = 0;
        for (idx, &(lo, hi)) in self.ranges.iter().enumerate() {
            let nk = hi - lo;
            mm(
                (rows, d, nk),
                out,
                d,
                accumulate || idx > 0,
                (p.as_ptr().add(col), self.n, 1),
                (vals.as_ptr().add(lo * d), d, 1),
                1.0,
            );
            col += nk;
        }
    }
    /// `acc[keys] += m^T (n x rows) * x (rows x d)` over both ranges (acc holds key rows).
    ///
    /// # Safety
    /// As [`Self::scores`], with `acc` holding every key row of the ranges.
    unsafe fn scatter_t(&self, rows: usize, d: usize, m: &[f32], x: *const f32, acc: &mut [f32]) {
        let mut col = 0;
        for &(lo, hi) in &self.ranges {
            let nk = hi - lo;
            mm(
                (nk, d, rows),
                acc.as_mut_ptr().add(lo * d),
                d,
                true,
                (m.as_ptr().add(col), 1, self.n),
                (x, d, 1),
                1.0,
            );
            col += nk;
        }
    }
}

/// Turns each row of a block's scores into probabilities `exp(s - lse)`, with exact zeros at
/// the keys the query may not see: with `lse` given (backward), or computed and returned
/// (forward). Only the visible column ranges are read, so no score is masked one by one.
fn probabilities(
    vis: &Visible,
    bk: &BlockKeys,
    i0: usize,
    s: &mut [f32],
    lse: &mut [f32],
    given: bool,
) {
    let isa = crate::simd::isa();
    for (r, row) in s.chunks_exact_mut(bk.n).enumerate() {
        let cols = bk.visible(vis, i0 + r);
        let mut at = 0;
        for &(c0, c1) in cols.iter() {
            row[at..c0].fill(0.0);
            at = c1;
        }
        row[at..].fill(0.0);
        if given {
            for &(c0, c1) in cols.iter() {
                crate::simd::exp_shift_on(isa, &mut row[c0..c1], lse[r]);
            }
        } else {
            let m = cols
                .iter()
                .map(|&(c0, c1)| crate::simd::max_on(isa, &row[c0..c1]))
                .fold(f32::NEG_INFINITY, f32::max);
            let sum: f32 = cols
                .iter()
                .map(|&(c0, c1)| crate::simd::exp_shift_on(isa, &mut row[c0..c1], m))
                .sum();
            lse[r] = m + sum.ln();
            let inv = 1.0 / sum;
            for &(c0, c1) in cols.iter() {
                row[c0..c1].iter_mut().for_each(|x| *x *= inv);
            }
        }
    }
}

/// Forward of one head over queries `[q0, q0 + out.len() / d)`.
#[allow(clippy::too_many_arguments)]
fn forward_block(
    vis: &Visible,
    scale: f32,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d: usize,
    q0: usize,
    out: &mut [f32],
    lse: &mut [f32],
) {
    let rows = out.len() / d;
    let bk = BlockKeys::new(vis, q0, q0 + rows);
    let mut s = vec![0f32; rows * bk.n];
    // SAFETY: q holds the block's rows, k and v every key row below q0 + rows, s rows x n.
    unsafe {
        bk.scores(rows, d, q.as_ptr().add(q0 * d), k, &mut s, scale);
        probabilities(vis, &bk, q0, &mut s, lse, false);
        bk.weighted(rows, d, &s, v, out.as_mut_ptr(), false);
    }
}

/// Backward of one kv group over queries `[q0, q1)`: `dq` for those queries of every head in
/// the group, and this block's contribution to the group's `dk`, `dv` (keys `< q1`).
fn backward_block(
    vis: &Visible,
    scale: f32,
    dims: Dims,
    g: usize,
    q0: usize,
    q1: usize,
    t: &BwdInputs,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let Dims { h, kvh, t: n, d } = dims;
    let rep = h / kvh;
    let kb = &t.k[g * n * d..(g + 1) * n * d];
    let vb = &t.v[g * n * d..(g + 1) * n * d];
    let mut dq = vec![0f32; rep * (q1 - q0) * d];
    let mut dk = vec![0f32; q1 * d];
    let mut dv = vec![0f32; q1 * d];
    let (mut p, mut dp) = (Vec::new(), Vec::new());
    let mut lse = [0f32; QB];
    for r in 0..rep {
        let hh = g * rep + r;
        let base = hh * n * d;
        let mut b0 = q0;
        while b0 < q1 {
            let b1 = (b0 + QB).min(q1);
            let rows = b1 - b0;
            let bk = BlockKeys::new(vis, b0, b1);
            p.clear();
            p.resize(rows * bk.n, 0.0);
            dp.clear();
            dp.resize(rows * bk.n, 0.0);
            lse[..rows].copy_from_slice(&t.lse[hh * n + b0..hh * n + b1]);
            let qp = t.q[base + b0 * d..].as_ptr();
            let dop = t.dout[base + b0 * d..].as_ptr();
            // SAFETY: every pointer covers the rows and keys of this block (keys < b1 <= n).
            unsafe {
                bk.scores(rows, d, qp, kb, &mut p, scale);
                probabilities(vis, &bk, b0, &mut p, &mut lse[..rows], true);
                bk.scores(rows, d, dop, vb, &mut dp, 1.0);
            }
            // dS = P * (dP - D) * scale, with D_i = dO_i . O_i
            for (rr, (prow, dprow)) in p
                .chunks_exact(bk.n)
                .zip(dp.chunks_exact_mut(bk.n))
                .enumerate()
            {
                let i = b0 + rr;
                let o = &t.out[base + i * d..base + (i + 1) * d];
                let go = &t.dout[base + i * d..base + (i + 1) * d];
                let di: f32 = o.iter().zip(go).map(|(a, b)| a * b).sum();
                for (x, &pv) in dprow.iter_mut().zip(prow) {
                    *x = pv * (*x - di) * scale;
                }
            }
            let dqb = &mut dq[(r * (q1 - q0) + b0 - q0) * d..];
            // SAFETY: as above; dk/dv hold key rows < q1.
            unsafe {
                bk.weighted(rows, d, &dp, kb, dqb.as_mut_ptr(), false);
                bk.scatter_t(rows, d, &dp, qp, &mut dk);
                bk.scatter_t(rows, d, &p, dop, &mut dv);
            }
            b0 = b1;
        }
    }
    (dq, dk, dv)
}

struct BwdInputs<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    out: &'a [f32],
    dout: &'a [f32],
    lse: &'a [f32],
}

/// Shapes of one call: `q (1, h, t, d)`, `k`/`v` `(1, kvh, t, d)`.
#[derive(Debug, Clone, Copy)]
struct Dims {
    h: usize,
    kvh: usize,
    t: usize,
    d: usize,
}

/// Queries per parallel task of the forward.
const BLOCK: usize = QB;

/// The custom op. One instance per call: the forward leaves its log-sum-exps for the backward.
struct PackedAttention {
    vis: Arc<Visible>,
    scale: f32,
    lse: Mutex<Option<Vec<f32>>>,
}

fn dims_of(q: &Layout, k: &Layout, v: &Layout) -> candle_core::Result<Dims> {
    let (b, h, t, d) = q.shape().dims4()?;
    let (bk, kvh, tk, dk) = k.shape().dims4()?;
    if b != 1 || bk != 1 || tk != t || dk != d || k.shape() != v.shape() || kvh == 0 || h % kvh != 0
    {
        candle_core::bail!(
            "packed attention: q {:?}, k {:?}, v {:?} (batch 1, same t and d, heads a multiple of kv heads)",
            q.shape(),
            k.shape(),
            v.shape()
        );
    }
    Ok(Dims { h, kvh, t, d })
}

impl PackedAttention {
    fn run_forward(&self, q: &[f32], k: &[f32], v: &[f32], dims: Dims) -> (Vec<f32>, Vec<f32>) {
        let Dims { h, kvh, t, d } = dims;
        let rep = h / kvh;
        let mut out = vec![0f32; h * t * d];
        let mut lse = vec![0f32; h * t];
        let vis = &*self.vis;
        out.par_chunks_mut(t * d)
            .zip(lse.par_chunks_mut(t))
            .enumerate()
            .for_each(|(hh, (oh, lh))| {
                let g = hh / rep;
                let qh = &q[hh * t * d..(hh + 1) * t * d];
                let kg = &k[g * t * d..(g + 1) * t * d];
                let vg = &v[g * t * d..(g + 1) * t * d];
                oh.par_chunks_mut(BLOCK * d)
                    .zip(lh.par_chunks_mut(BLOCK))
                    .enumerate()
                    .for_each(|(c, (o, l))| {
                        forward_block(vis, self.scale, qh, kg, vg, d, c * BLOCK, o, l)
                    });
            });
        (out, lse)
    }
}

impl CustomOp3 for PackedAttention {
    fn name(&self) -> &'static str {
        "packed-attention"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let dims = dims_of(l1, l2, l3)?;
        if self.vis.len() != dims.t {
            candle_core::bail!(
                "packed attention: visibility for {} queries, sequence of {}",
                self.vis.len(),
                dims.t
            );
        }
        let what = "packed attention";
        let (q, k, v) = (
            super::contiguous(s1, l1, what)?,
            super::contiguous(s2, l2, what)?,
            super::contiguous(s3, l3, what)?,
        );
        let (out, lse) = self.run_forward(q, k, v, dims);
        *self.lse.lock().unwrap_or_else(|e| e.into_inner()) = Some(lse);
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let dims = dims_of(q.layout(), k.layout(), v.layout())?;
        let Dims { h, kvh, t, d } = dims;
        let rep = h / kvh;
        let flat = |x: &Tensor| x.flatten_all()?.to_vec1::<f32>();
        let (qv, kv, vv, ov, dov) = (flat(q)?, flat(k)?, flat(v)?, flat(res)?, flat(grad_res)?);
        let lse = match self.lse.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(l) => l,
            // a second backward through the same graph: recompute
            None => self.run_forward(&qv, &kv, &vv, dims).1,
        };
        let inputs = BwdInputs {
            q: &qv,
            k: &kv,
            v: &vv,
            out: &ov,
            dout: &dov,
            lse: &lse,
        };
        // Tasks are (kv group, query block); blocks grow toward the end so causal work per task
        // stays about even, and there are enough of them to keep every thread busy.
        let blocks = (4 * rayon::current_num_threads()).div_ceil(kvh).max(1);
        let bounds: Vec<usize> = (0..=blocks)
            .map(|c| ((c as f64 / blocks as f64).sqrt() * t as f64).round() as usize)
            .collect();
        let tasks: Vec<(usize, usize, usize)> = (0..kvh)
            .flat_map(|g| {
                bounds
                    .windows(2)
                    .filter(|w| w[1] > w[0])
                    .map(move |w| (g, w[0], w[1]))
                    .collect::<Vec<_>>()
            })
            .collect();
        let parts: Vec<_> = tasks
            .par_iter()
            .map(|&(g, q0, q1)| backward_block(&self.vis, self.scale, dims, g, q0, q1, &inputs))
            .collect();
        let mut dq = vec![0f32; h * t * d];
        let mut dk = vec![0f32; kvh * t * d];
        let mut dv = vec![0f32; kvh * t * d];
        for (&(g, q0, q1), (pq, pk, pv)) in tasks.iter().zip(parts) {
            for r in 0..rep {
                let hh = g * rep + r;
                let n = q1 - q0;
                dq[(hh * t + q0) * d..(hh * t + q1) * d]
                    .copy_from_slice(&pq[r * n * d..(r + 1) * n * d]);
            }
            for (a, b) in dk[g * t * d..].iter_mut().zip(&pk) {
                *a += b;
            }
            for (a, b) in dv[g * t * d..].iter_mut().zip(&pv) {
                *a += b;
            }
        }
        let dev = q.device();
        Ok((
            Some(Tensor::from_vec(dq, q.shape(), dev)?),
            Some(Tensor::from_vec(dk, k.shape(), dev)?),
            Some(Tensor::from_vec(dv, v.shape(), dev)?),
        ))
    }
}

/// Attention of `q (1, h, t, d)` over `k`, `v` `(1, kv_heads, t, d)` (f32, any strides) with
/// the visibility `vis`; differentiable in all three inputs.
pub fn packed_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    vis: &Arc<Visible>,
    scale: f32,
) -> Result<Tensor> {
    let op = PackedAttention {
        vis: vis.clone(),
        scale,
        lse: Mutex::new(None),
    };
    Ok(q.contiguous()?
        .apply_op3(&k.contiguous()?, &v.contiguous()?, op)?)
}

/// The same attention from elementary differentiable ops with a full `(t, t)` mask: the
/// reference the op is tested against (memory grows with `t^2`).
pub fn reference_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    vis: &Visible,
    scale: f32,
) -> Result<Tensor> {
    let (_, h, t, d) = q.dims4()?;
    let kvh = k.dim(1)?;
    let rep = h / kvh;
    let expand = |x: &Tensor| -> Result<Tensor> {
        Ok(x.unsqueeze(2)?
            .broadcast_as((1, kvh, rep, t, d))?
            .reshape((1, h, t, d))?)
    };
    let (k, v) = (expand(k)?, expand(v)?);
    let mut m = vec![f32::NEG_INFINITY; t * t];
    for i in 0..t {
        for j in 0..t {
            if vis.sees(i, j) {
                m[i * t + j] = 0.0;
            }
        }
    }
    let mask = Tensor::from_vec(m, (1, 1, t, t), q.device())?;
    let att = (q.contiguous()?.matmul(&k.t()?.contiguous()?)? * scale as f64)?;
    let att = att.broadcast_add(&mask)?;
    let att = crate::layers::softmax_last(
        &att,
        crate::layers::OpMode {
            differentiable: true,
        },
    )?;
    Ok(att.matmul(&v.contiguous()?)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn packed_vis() -> Visible {
        // prefix of 5, then conversations of 4, 3 and 4 tokens
        packed(5, &[4, 3, 4])
    }

    fn packed(prefix: u32, lens: &[u32]) -> Visible {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for _ in 0..prefix {
            a.push(0);
            b.push(0);
        }
        let mut start = prefix;
        for &len in lens {
            for _ in 0..len {
                a.push(prefix);
                b.push(start);
            }
            start += len;
        }
        Visible::new(a, b).unwrap()
    }

    #[test]
    fn visible_columns_are_exactly_the_keys_a_query_sees() {
        for vis in [
            packed_vis(),
            packed(70, &[50, 90, 30, 7]),
            packed(0, &[10, 40, 3]),
            Visible::causal(130),
        ] {
            // every block of every size, so that blocks start and end mid-segment
            for qb in [1usize, 5, 64] {
                for i0 in (0..vis.len()).step_by(qb) {
                    let i1 = (i0 + qb).min(vis.len());
                    let bk = BlockKeys::new(&vis, i0, i1);
                    for i in i0..i1 {
                        let cols = bk.visible(&vis, i);
                        assert!(cols.windows(2).all(|w| w[0].1 <= w[1].0), "{:?}", &*cols);
                        for c in 0..bk.n {
                            let inside = cols.iter().any(|&(c0, c1)| (c0..c1).contains(&c));
                            assert_eq!(inside, vis.sees(i, bk.key(c)), "query {i}, column {c}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn op_matches_reference_output_and_gradients() {
        let dev = Device::Cpu;
        for (vis, h, kvh) in [
            (packed_vis(), 4, 2),
            // several query blocks, blocks straddling segments and the prefix's end
            (packed(70, &[50, 90, 30, 7]), 3, 1),
            (Visible::causal(16), 3, 1),
            (Visible::causal(16), 2, 2),
        ] {
            let t = vis.len();
            let d = 20; // not a multiple of the accumulator width
            let vis = Arc::new(vis);
            let q =
                Var::from_tensor(&Tensor::randn(0f32, 1.0, (1, h, t, d), &dev).unwrap()).unwrap();
            let k =
                Var::from_tensor(&Tensor::randn(0f32, 1.0, (1, kvh, t, d), &dev).unwrap()).unwrap();
            let v =
                Var::from_tensor(&Tensor::randn(0f32, 1.0, (1, kvh, t, d), &dev).unwrap()).unwrap();
            let w = Tensor::randn(0f32, 1.0, (1, h, t, d), &dev).unwrap();
            let scale = 0.3;
            let a = packed_attention(&q, &k, &v, &vis, scale).unwrap();
            let b = reference_attention(&q, &k, &v, &vis, scale).unwrap();
            assert!(
                super::super::tests::max_rel(&a, &b) < 1e-5,
                "output {}",
                super::super::tests::max_rel(&a, &b)
            );
            let ga = (a * &w).unwrap().sum_all().unwrap().backward().unwrap();
            let gb = (b * &w).unwrap().sum_all().unwrap().backward().unwrap();
            for (name, x) in [("q", &q), ("k", &k), ("v", &v)] {
                let (ga, gb) = (ga.get(x).unwrap(), gb.get(x).unwrap());
                assert!(
                    super::super::tests::max_rel(ga, gb) < 1e-5,
                    "d{name}: {}",
                    super::super::tests::max_rel(ga, gb)
                );
            }
        }
    }

    #[test]
    fn gradient_matches_finite_differences() {
        let dev = Device::Cpu;
        let vis = Arc::new(packed_vis());
        let (h, kvh, t, d) = (2, 1, vis.len(), 8);
        let q0 = Tensor::randn(0f64, 1.0, (1, h, t, d), &dev).unwrap();
        let k = Tensor::randn(0f32, 1.0, (1, kvh, t, d), &dev).unwrap();
        let v = Tensor::randn(0f32, 1.0, (1, kvh, t, d), &dev).unwrap();
        let w = Tensor::randn(0f32, 1.0, (1, h, t, d), &dev).unwrap();
        let f = |q: &Tensor| -> f64 {
            let o = packed_attention(
                &q.to_dtype(candle_core::DType::F32).unwrap(),
                &k,
                &v,
                &vis,
                0.5,
            )
            .unwrap();
            (o * &w)
                .unwrap()
                .sum_all()
                .unwrap()
                .to_dtype(candle_core::DType::F64)
                .unwrap()
                .to_scalar::<f64>()
                .unwrap()
        };
        let qv = Var::from_tensor(&q0.to_dtype(candle_core::DType::F32).unwrap()).unwrap();
        let o = packed_attention(&qv, &k, &v, &vis, 0.5).unwrap();
        let g = (o * &w).unwrap().sum_all().unwrap().backward().unwrap();
        let g = g
            .get(&qv)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let base = q0.flatten_all().unwrap().to_vec1::<f64>().unwrap();
        let eps = 1e-2;
        for idx in [0, 7, 40, 95, 150, 200, h * t * d - 1] {
            let mut p = base.clone();
            p[idx] += eps;
            let mut m = base.clone();
            m[idx] -= eps;
            let fp = f(&Tensor::from_vec(p, (1, h, t, d), &dev).unwrap());
            let fm = f(&Tensor::from_vec(m, (1, h, t, d), &dev).unwrap());
            let num = (fp - fm) / (2.0 * eps);
            assert!(
                (num - g[idx] as f64).abs() < 2e-3 * (1.0 + num.abs()),
                "q[{idx}]: numeric {num}, analytic {}",
                g[idx]
            );
        }
    }

    #[test]
    fn visibility_rejects_out_of_order_pairs() {
        assert!(Visible::new(vec![0, 2], vec![0, 1]).is_err());
        assert!(Visible::new(vec![0, 0], vec![0, 2]).is_err());
        assert!(Visible::new(vec![0], vec![0, 0]).is_err());
        let v = packed_vis();
        assert!(v.sees(6, 4) && !v.sees(9, 6) && v.sees(9, 9) && !v.sees(3, 4));
    }
}
