//! Prefill attention over an f16 cache with bf16 dot products, on x86-64 CPUs with AVX-512
//! BF16 (`vdpbf16ps`: two multiply-adds per f32 lane, twice the rate of f32 FMAs, f32
//! accumulation; AMD Zen 4 and later, Intel Cooper Lake / Sapphire Rapids and later).
//!
//! Prefill at an agent prompt's depth is bound by attention's arithmetic: a 258-token chunk
//! (a tool result) after 1,725 cached tokens spends about as long in `q k^T` and `p v` as in
//! every quantised matmul of the layer together. Here each call packs a row's cached keys and
//! values once into bf16 pairs (keys in panels of 16 positions, values as pairs of adjacent
//! positions), rounds the queries and the softmax weights to bf16, and both products
//! accumulate in f32; the softmax itself stays f32. bf16 keeps f32's exponent with 8 bits of
//! mantissa, as attention on accelerators does (SmolLM2 was trained in bf16). The f32 path
//! stays the reference, and `HAT_ATTENTION=f32` keeps it in use ([`enabled`]).
//!
//! Work items are those of the f32 path: (row, query head, block of up to 64 queries); the
//! blocks' key ranges are widened to multiples of 32 positions (the kernel's tile), and the
//! positions a query may not see get weight 0.

use std::arch::x86_64::*;

use candle_core::{Device, Tensor};

use crate::error::{Error, Result};
use crate::simd::x86::{as_bh, as_si, bf16_supported as supported, interleave_bf16};
use crate::simd::Isa;

/// Queries per work item (as the f32 path).
const Q_BLOCK: usize = 64;
/// Keys per packed panel (one 512-bit vector of f32 scores).
const PANEL: usize = 16;
/// Keys per score tile (two panels) and the alignment of every key range.
const KEYS: usize = 2 * PANEL;
/// Queries per score tile.
const QK_ROWS: usize = 8;
/// Queries per value tile.
const PV_ROWS: usize = 4;
/// Output dimensions per value tile (four vectors).
const PV_DIMS: usize = 64;

/// Whether prefill attention on path `isa` uses this one: the AVX-512 path, a CPU with BF16,
/// a head dimension divisible by 64, and `HAT_ATTENTION` not `f32` (read once per process).
pub(super) fn enabled(isa: Isa, hd: usize) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    isa == Isa::Avx512
        && hd.is_multiple_of(PV_DIMS)
        && *ON.get_or_init(|| supported() && !super::f32_forced())
}

/// `softmax(q k^T * scale) v` for prefill chunks over an f16 cache, as
/// [`super::causal_attention`] (same shapes and masking), with bf16 products.
/// `k` and `v` are f16 `(b, kv_heads, T, hd)` views with contiguous rows; `isa` (the softmax's
/// path) is one the CPU runs.
pub(super) fn prefill(
    isa: Isa,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    pads: &[usize],
    scale: f32,
) -> Result<Tensor> {
    let (b, h, t, hd) = q.dims4()?;
    let (_, kvh, total, _) = k.dims4()?;
    if !supported() || !hd.is_multiple_of(PV_DIMS) {
        return Err(Error::InvalidArgument(format!(
            "bf16 attention needs AVX-512 BF16 and a head dimension divisible by {PV_DIMS}, got {hd}"
        )));
    }
    let n_rep = h / kvh;
    let past = total - t;
    let hp = hd / 2; // bf16 pairs a head row
    let q = q.contiguous()?; // (b, h, t, hd)
    let (q_store, q_layout) = q.storage_and_layout();
    let (k_store, kl) = k.storage_and_layout();
    let (v_store, vl) = v.storage_and_layout();
    let qs = crate::cpu::slice::<f32>(&q_store, q_layout)?;
    let kd = crate::cpu::slice::<half::f16>(&k_store, kl)?;
    let vd = crate::cpu::slice::<half::f16>(&v_store, vl)?;
    let (kst, vst) = (kl.stride(), vl.stride());
    if kst[3] != 1 || vst[3] != 1 {
        return Err(Error::InvalidArgument(
            "f16 cache rows must be contiguous".into(),
        ));
    }
    // packed keys and values of each (row, kv head), zero past `total`
    let padded = total.next_multiple_of(KEYS);
    let (k_len, v_len) = (padded * hp, padded / 2 * hd);
    let mut kp = vec![0u32; b * kvh * k_len];
    let mut vp = vec![0u32; b * kvh * v_len];
    {
        use rayon::prelude::*;
        kp.par_chunks_exact_mut(k_len)
            .zip(vp.par_chunks_exact_mut(v_len))
            .enumerate()
            .for_each(|(i, (kc, vc))| {
                let (bi, g) = (i / kvh, i % kvh);
                let ko = bi * kst[0] + g * kst[1];
                let vo = bi * vst[0] + g * vst[1];
                // SAFETY: the CPU has AVX-512 BF16 (checked above); `total` rows of `hd`
                // lie within each view at its strides, and the buffers are sized for them.
                unsafe {
                    pack_keys(&kd[ko..], kst[2], total, hd, kc);
                    pack_values(&vd[vo..], vst[2], total, hd, vc);
                }
            });
    }
    let mut out = vec![0f32; b * t * h * hd];
    let out_ptr = out.as_mut_ptr() as usize;
    let blocks = t.div_ceil(Q_BLOCK);
    let item = |buf: &mut Scratch, idx: usize| {
        let (bi, rest) = (idx / (h * blocks), idx % (h * blocks));
        let (hh, blk) = (rest / blocks, rest % blocks);
        let g = hh / n_rep;
        let (i0, i1) = (blk * Q_BLOCK, ((blk + 1) * Q_BLOCK).min(t));
        let pad = pads[bi];
        // a query at absolute index qa sees [lo(qa), qa]; padding queries see [0, qa]
        let lo = |qa: usize| if qa >= pad { pad } else { 0 };
        let k0 = lo(past + i0) / KEYS * KEYS;
        let k1 = (past + i1).next_multiple_of(KEYS);
        let (rows, nk) = (i1 - i0, k1 - k0);
        buf.scores.clear();
        buf.scores.resize(rows * nk, 0.0);
        buf.q.clear();
        buf.q.resize(rows * hp, 0);
        buf.p.clear();
        buf.p.resize(rows * nk / 2, 0);
        let qo = ((bi * h + hh) * t + i0) * hd;
        let kc = &kp[(bi * kvh + g) * k_len..][..padded * hp];
        let vc = &vp[(bi * kvh + g) * v_len..][..padded / 2 * hd];
        // SAFETY: the CPU has AVX-512 BF16; the query rows, the packed panels of keys
        // k0..k1 and value pairs k0/2..k1/2 lie within their buffers (k1 <= padded), and each
        // item writes its own rows of `out` (rows i0..i1 of head hh).
        unsafe {
            to_bf16(&qs[qo..qo + rows * hd], &mut buf.q);
            for r0 in (0..rows).step_by(QK_ROWS) {
                let n = (rows - r0).min(QK_ROWS);
                let qp = buf.q.as_ptr().add(r0 * hp);
                for j in (k0..k1).step_by(KEYS) {
                    let kpan = kc.as_ptr().add(j * hp);
                    let sp = buf.scores.as_mut_ptr().add(r0 * nk + (j - k0));
                    qk_tile_any(n, qp, hp, kpan, sp, nk, scale);
                }
            }
            let mut inv = [0f32; Q_BLOCK];
            for (r, row) in buf.scores.chunks_exact_mut(nk).enumerate() {
                let qa = past + i0 + r;
                let (a, e) = (lo(qa) - k0, qa + 1 - k0);
                row[..a].fill(0.0);
                row[e..].fill(0.0);
                inv[r] = 1.0 / crate::simd::softmax_unnormalised_on(isa, &mut row[a..e]);
            }
            to_bf16(&buf.scores, &mut buf.p);
            let op = (out_ptr as *mut f32).add(((bi * t + i0) * h + hh) * hd);
            let ostride = h * hd;
            let vpairs = vc.as_ptr().add(k0 / 2 * hd);
            for r0 in (0..rows).step_by(PV_ROWS) {
                let n = (rows - r0).min(PV_ROWS);
                for d in (0..hd).step_by(PV_DIMS) {
                    pv_tile_any(
                        n,
                        buf.p.as_ptr().add(r0 * nk / 2),
                        nk / 2,
                        vpairs.add(d),
                        hd,
                        op.add(r0 * ostride + d),
                        ostride,
                        &inv[r0..r0 + n],
                    );
                }
            }
        }
    };
    let n = b * h * blocks;
    if n == 1 || rayon::current_num_threads() == 1 {
        let mut buf = Scratch::default();
        (0..n).for_each(|i| item(&mut buf, i));
    } else {
        use rayon::prelude::*;
        (0..n).into_par_iter().for_each_init(Scratch::default, item);
    }
    Ok(Tensor::from_vec(out, (b, t, h * hd), &Device::Cpu)?)
}

/// Per-thread buffers of a work item: f32 scores, bf16 query pairs, bf16 weight pairs.
#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    q: Vec<u32>,
    p: Vec<u32>,
}

/// `src` (a multiple of 32 long) rounded to bf16, in order, two to a `u32` (the first in the
/// low half, as `vdpbf16ps` pairs them).
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn to_bf16(src: &[f32], dst: &mut [u32]) {
    debug_assert!(src.len().is_multiple_of(32) && dst.len() * 2 == src.len());
    for (s, d) in src.chunks_exact(32).zip(dst.chunks_exact_mut(16)) {
        let lo = _mm512_loadu_ps(s.as_ptr());
        let hi = _mm512_loadu_ps(s.as_ptr().add(16));
        let pk: __m512i = as_si(_mm512_cvtne2ps_pbh(hi, lo));
        _mm512_storeu_si512(d.as_mut_ptr().cast(), pk);
    }
}

/// 32 f16 values from `src` as bf16, in order (16 `u32` pairs).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn f16x32_to_bf16(src: *const half::f16) -> __m512i {
    let lo = _mm512_cvtph_ps(_mm256_loadu_si256(src.cast()));
    let hi = _mm512_cvtph_ps(_mm256_loadu_si256(src.add(16).cast()));
    as_si(_mm512_cvtne2ps_pbh(hi, lo))
}

/// Keys `0..n` (rows `stride` apart, `hd` each) into panels of 16 positions: pair `p` of key
/// `j` at `(j / 16) * (hd / 2) * 16 + p * 16 + j % 16`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pack_keys(k: &[half::f16], stride: usize, n: usize, hd: usize, dst: &mut [u32]) {
    let hp = hd / 2;
    let mut pairs = [0u32; 16];
    for j in 0..n {
        let row = k[j * stride..j * stride + hd].as_ptr();
        let panel = &mut dst[j / PANEL * hp * PANEL..][..hp * PANEL];
        for c in 0..hd / 32 {
            _mm512_storeu_si512(pairs.as_mut_ptr().cast(), f16x32_to_bf16(row.add(c * 32)));
            for (pp, &x) in pairs.iter().enumerate() {
                panel[(c * 16 + pp) * PANEL + j % PANEL] = x;
            }
        }
    }
}

/// Values `0..n` as pairs of adjacent positions: `dst[i * hd + d]` holds `v[2i][d]` (low hp)
/// and `v[2i + 1][d]` (zero past `n`).
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pack_values(v: &[half::f16], stride: usize, n: usize, hd: usize, dst: &mut [u32]) {
    // interleave the two rows' bf16 halves: a0 b0 a1 b1 ...
    let idx = interleave_bf16();
    let zero = [half::f16::ZERO; 16];
    for i in 0..n.div_ceil(2) {
        let a = v[2 * i * stride..].as_ptr();
        let b = if 2 * i + 1 < n {
            v[(2 * i + 1) * stride..].as_ptr()
        } else {
            std::ptr::null()
        };
        for d in (0..hd).step_by(16) {
            let va = _mm512_cvtph_ps(_mm256_loadu_si256(a.add(d).cast()));
            let vb = if b.is_null() {
                _mm512_cvtph_ps(_mm256_loadu_si256(zero.as_ptr().cast()))
            } else {
                _mm512_cvtph_ps(_mm256_loadu_si256(b.add(d).cast()))
            };
            let ab: __m512i = as_si(_mm512_cvtne2ps_pbh(vb, va));
            let inter = _mm512_permutexvar_epi16(idx, ab);
            _mm512_storeu_si512(dst.as_mut_ptr().add(i * hd + d).cast(), inter);
        }
    }
}

/// [`qk_tile`] for `n` (1..=8) query rows.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn qk_tile_any(
    n: usize,
    q: *const u32,
    hp: usize,
    k: *const u32,
    s: *mut f32,
    nk: usize,
    scale: f32,
) {
    match n {
        8 => qk_tile::<8>(q, hp, k, s, nk, scale),
        7 => qk_tile::<7>(q, hp, k, s, nk, scale),
        6 => qk_tile::<6>(q, hp, k, s, nk, scale),
        5 => qk_tile::<5>(q, hp, k, s, nk, scale),
        4 => qk_tile::<4>(q, hp, k, s, nk, scale),
        3 => qk_tile::<3>(q, hp, k, s, nk, scale),
        2 => qk_tile::<2>(q, hp, k, s, nk, scale),
        _ => qk_tile::<1>(q, hp, k, s, nk, scale),
    }
}

/// Scores of `R` queries (bf16 pairs, rows `hp` apart) against the 32 keys of two adjacent
/// panels at `k`, times `scale`, into `R` rows of `s` (`nk` apart).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn qk_tile<const R: usize>(
    q: *const u32,
    hp: usize,
    k: *const u32,
    s: *mut f32,
    nk: usize,
    scale: f32,
) {
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    for p in 0..hp {
        let k0: __m512bh = as_bh(_mm512_loadu_si512(k.add(p * PANEL).cast()));
        let k1: __m512bh = as_bh(_mm512_loadu_si512(k.add((hp + p) * PANEL).cast()));
        for (r, a) in acc.iter_mut().enumerate() {
            let qv: __m512bh = as_bh(_mm512_set1_epi32(*q.add(r * hp + p) as i32));
            a[0] = _mm512_dpbf16_ps(a[0], qv, k0);
            a[1] = _mm512_dpbf16_ps(a[1], qv, k1);
        }
    }
    let sc = _mm512_set1_ps(scale);
    for (r, a) in acc.iter().enumerate() {
        _mm512_storeu_ps(s.add(r * nk), _mm512_mul_ps(a[0], sc));
        _mm512_storeu_ps(s.add(r * nk + PANEL), _mm512_mul_ps(a[1], sc));
    }
}

/// [`pv_tile`] for `n` (1..=4) rows.
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pv_tile_any(
    n: usize,
    p: *const u32,
    pairs: usize,
    v: *const u32,
    hd: usize,
    out: *mut f32,
    ostride: usize,
    inv: &[f32],
) {
    match n {
        4 => pv_tile::<4>(p, pairs, v, hd, out, ostride, inv),
        3 => pv_tile::<3>(p, pairs, v, hd, out, ostride, inv),
        2 => pv_tile::<2>(p, pairs, v, hd, out, ostride, inv),
        _ => pv_tile::<1>(p, pairs, v, hd, out, ostride, inv),
    }
}

/// 64 output dimensions of `R` rows: `sum_i p[r][i] . v[i]` over `pairs` pairs of positions
/// (weights as bf16 pairs, rows `pairs` apart; value pairs `hd` apart from `v`), times
/// `inv[r]`, into `out` (rows `ostride` apart).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pv_tile<const R: usize>(
    p: *const u32,
    pairs: usize,
    v: *const u32,
    hd: usize,
    out: *mut f32,
    ostride: usize,
    inv: &[f32],
) {
    let mut acc = [[_mm512_setzero_ps(); 4]; R];
    for i in 0..pairs {
        let vr = v.add(i * hd);
        let vv: [__m512bh; 4] = [
            as_bh(_mm512_loadu_si512(vr.cast())),
            as_bh(_mm512_loadu_si512(vr.add(16).cast())),
            as_bh(_mm512_loadu_si512(vr.add(32).cast())),
            as_bh(_mm512_loadu_si512(vr.add(48).cast())),
        ];
        for (r, a) in acc.iter_mut().enumerate() {
            let w: __m512bh = as_bh(_mm512_set1_epi32(*p.add(r * pairs + i) as i32));
            for (a, v) in a.iter_mut().zip(vv) {
                *a = _mm512_dpbf16_ps(*a, w, v);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        let s = _mm512_set1_ps(inv[r]);
        for (c, a) in a.iter().enumerate() {
            _mm512_storeu_ps(out.add(r * ostride + c * 16), _mm512_mul_ps(*a, s));
        }
    }
}
