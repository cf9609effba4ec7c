//! x86-64 attention of a few queries over an f16 cache ([`super::F16Group`]).
//!
//! Scores: keys are taken 8 at a time, widened to f32 once (F16C) into a small buffer, and
//! dotted with every query head of the group into 8 vector accumulators that one transpose-add
//! reduces to the 8 scores (instead of a horizontal sum per key and head). Values: each value
//! row is widened once per pair of output chunks and accumulated into up to four heads.
//! Outputs are unnormalised, with each head's maximum score and sum of weights
//! ([`super::Partial`]), so that a long key range can be split over threads.

use std::arch::x86_64::*;

use super::F16Group;
use super::Partial;
use crate::simd::x86::{exp_shift_avx2, exp_shift_avx512, hsum8, max_avx2};

/// Query heads accumulated together in the value pass.
const HEADS_AT_ONCE: usize = 4;

/// Widest head this path takes (the key buffer lives on the stack).
const MAX_HD: usize = 256;

/// Keys per score block.
const KEYS: usize = 8;

/// `[sum(a[0]), ..., sum(a[7])]`.
#[inline]
#[target_feature(enable = "avx2")]
fn hsum8x8(a: &[__m256; 8]) -> __m256 {
    let t0 = _mm256_hadd_ps(a[0], a[1]);
    let t1 = _mm256_hadd_ps(a[2], a[3]);
    let t2 = _mm256_hadd_ps(a[4], a[5]);
    let t3 = _mm256_hadd_ps(a[6], a[7]);
    let u0 = _mm256_hadd_ps(t0, t1);
    let u1 = _mm256_hadd_ps(t2, t3);
    _mm256_add_ps(
        _mm256_permute2f128_ps::<0x20>(u0, u1),
        _mm256_permute2f128_ps::<0x31>(u0, u1),
    )
}

/// The maximum of each head's scores (row `hh` of `scores`, `nk` long).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn row_maxima(scores: &[f32], nk: usize, stats: &mut [Partial]) {
    for (hh, st) in stats.iter_mut().enumerate() {
        st.max = max_avx2(&scores[hh * nk..(hh + 1) * nk]);
        st.sum = 0.0;
    }
}

/// Scores of every head against keys `j..j + 8`, scaled, into `scores[hh * nk + j..]`.
/// `kf` receives the widened keys (`8 * hd`).
#[inline(always)]
unsafe fn score_block_avx2(r: &F16Group, j: usize, nk: usize, kf: &mut [f32], scores: &mut [f32]) {
    let hd = kf.len() / KEYS;
    let chunks = hd / 8;
    for kk in 0..KEYS {
        let kr = r.k.as_ptr().add((j + kk) * r.k_stride);
        for c in 0..chunks {
            _mm256_storeu_ps(
                kf.as_mut_ptr().add(kk * hd + c * 8),
                _mm256_cvtph_ps(_mm_loadu_si128(kr.add(c * 8) as *const __m128i)),
            );
        }
    }
    let scale = _mm256_set1_ps(r.scale);
    for hh in 0..r.heads {
        let q = r.q.as_ptr().add(hh * r.q_stride);
        let mut acc = [_mm256_setzero_ps(); KEYS];
        for c in 0..chunks {
            let qv = _mm256_loadu_ps(q.add(c * 8));
            for (kk, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kf.as_ptr().add(kk * hd + c * 8)), *a);
            }
        }
        _mm256_storeu_ps(
            scores.as_mut_ptr().add(hh * nk + j),
            _mm256_mul_ps(hsum8x8(&acc), scale),
        );
    }
}

/// Score of every head against key `j` alone (the tail of the key range).
#[inline(always)]
unsafe fn score_one_avx2(r: &F16Group, j: usize, nk: usize, hd: usize, scores: &mut [f32]) {
    let kr = r.k.as_ptr().add(j * r.k_stride);
    for hh in 0..r.heads {
        let q = r.q.as_ptr().add(hh * r.q_stride);
        let mut acc = _mm256_setzero_ps();
        for c in (0..hd).step_by(8) {
            let kv = _mm256_cvtph_ps(_mm_loadu_si128(kr.add(c) as *const __m128i));
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(c)), kv, acc);
        }
        *scores.get_unchecked_mut(hh * nk + j) = hsum8(acc) * r.scale;
    }
}

/// `out[h] = sum_j p[h, j] * v[j]` for every head, on 8-lane chunks (two at a time, so that
/// each weight broadcast serves 16 outputs).
#[inline(always)]
unsafe fn values_avx2(r: &F16Group, scores: &[f32], nk: usize, out: &mut [f32]) {
    let hd = out.len() / r.heads;
    let chunks = hd / 8;
    let widen = |p: *const half::f16| _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
    for h0 in (0..r.heads).step_by(HEADS_AT_ONCE) {
        let nh = (r.heads - h0).min(HEADS_AT_ONCE);
        let mut c = 0;
        while c < chunks {
            let two = c + 1 < chunks;
            let mut acc = [[_mm256_setzero_ps(); 2]; HEADS_AT_ONCE];
            for j in 0..nk {
                let vr = r.v.as_ptr().add(j * r.v_stride + c * 8);
                let v0 = widen(vr);
                let v1 = if two { widen(vr.add(8)) } else { v0 };
                for (k, a) in acc.iter_mut().enumerate().take(nh) {
                    let p = _mm256_set1_ps(*scores.get_unchecked((h0 + k) * nk + j));
                    a[0] = _mm256_fmadd_ps(p, v0, a[0]);
                    a[1] = _mm256_fmadd_ps(p, v1, a[1]);
                }
            }
            for (k, a) in acc.iter().enumerate().take(nh) {
                let o = out.as_mut_ptr().add((h0 + k) * hd + c * 8);
                _mm256_storeu_ps(o, a[0]);
                if two {
                    _mm256_storeu_ps(o.add(8), a[1]);
                }
            }
            c += 2;
        }
    }
}

#[target_feature(enable = "avx2,f16c,fma")]
pub(crate) unsafe fn decode_group_avx2(
    r: &F16Group,
    scores: &mut [f32],
    out: &mut [f32],
    stats: &mut [Partial],
) {
    let hd = out.len() / r.heads;
    if hd > MAX_HD {
        return super::decode_group_scalar(r, scores, out, stats);
    }
    let nk = scores.len() / r.heads;
    let mut kf = [0f32; KEYS * MAX_HD];
    let kf = &mut kf[..KEYS * hd];
    let mut j = 0;
    while j + KEYS <= nk {
        score_block_avx2(r, j, nk, kf, scores);
        j += KEYS;
    }
    for j in j..nk {
        score_one_avx2(r, j, nk, hd, scores);
    }
    row_maxima(scores, nk, stats);
    for (k, st) in stats.iter_mut().enumerate() {
        st.sum = exp_shift_avx2(&mut scores[k * nk..(k + 1) * nk], st.max);
    }
    values_avx2(r, scores, nk, out);
}

#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
pub(crate) unsafe fn decode_group_avx512(
    r: &F16Group,
    scores: &mut [f32],
    out: &mut [f32],
    stats: &mut [Partial],
) {
    let hd = out.len() / r.heads;
    if hd > MAX_HD {
        return super::decode_group_scalar(r, scores, out, stats);
    }
    let nk = scores.len() / r.heads;
    let chunks = hd / 16;
    let widen = |p: *const half::f16| _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i));
    let mut kf = [0f32; KEYS * MAX_HD];
    let scale = _mm256_set1_ps(r.scale);
    let mut j = 0;
    while j + KEYS <= nk {
        for kk in 0..KEYS {
            let kr = r.k.as_ptr().add((j + kk) * r.k_stride);
            for c in 0..chunks {
                _mm512_storeu_ps(kf.as_mut_ptr().add(kk * hd + c * 16), widen(kr.add(c * 16)));
            }
        }
        for hh in 0..r.heads {
            let q = r.q.as_ptr().add(hh * r.q_stride);
            let mut acc = [_mm512_setzero_ps(); KEYS];
            for c in 0..chunks {
                let qv = _mm512_loadu_ps(q.add(c * 16));
                for (kk, a) in acc.iter_mut().enumerate() {
                    *a =
                        _mm512_fmadd_ps(qv, _mm512_loadu_ps(kf.as_ptr().add(kk * hd + c * 16)), *a);
                }
            }
            // fold 16 lanes to 8, then the 8-key transpose-add
            let half: [__m256; KEYS] = std::array::from_fn(|kk| {
                _mm256_add_ps(
                    _mm512_castps512_ps256(acc[kk]),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc[kk]))),
                )
            });
            _mm256_storeu_ps(
                scores.as_mut_ptr().add(hh * nk + j),
                _mm256_mul_ps(hsum8x8(&half), scale),
            );
        }
        j += KEYS;
    }
    for j in j..nk {
        let kr = r.k.as_ptr().add(j * r.k_stride);
        for hh in 0..r.heads {
            let q = r.q.as_ptr().add(hh * r.q_stride);
            let mut acc = _mm512_setzero_ps();
            for c in 0..chunks {
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(q.add(c * 16)), widen(kr.add(c * 16)), acc);
            }
            *scores.get_unchecked_mut(hh * nk + j) = _mm512_reduce_add_ps(acc) * r.scale;
        }
    }
    row_maxima(scores, nk, stats);
    for (k, st) in stats.iter_mut().enumerate() {
        st.sum = exp_shift_avx512(&mut scores[k * nk..(k + 1) * nk], st.max);
    }
    for h0 in (0..r.heads).step_by(HEADS_AT_ONCE) {
        let nh = (r.heads - h0).min(HEADS_AT_ONCE);
        for c in 0..chunks {
            let mut acc = [_mm512_setzero_ps(); HEADS_AT_ONCE];
            for j in 0..nk {
                let vf = widen(r.v.as_ptr().add(j * r.v_stride + c * 16));
                for (k, a) in acc.iter_mut().enumerate().take(nh) {
                    let p = *scores.get_unchecked((h0 + k) * nk + j);
                    *a = _mm512_fmadd_ps(_mm512_set1_ps(p), vf, *a);
                }
            }
            for (k, a) in acc.iter().enumerate().take(nh) {
                _mm512_storeu_ps(out.as_mut_ptr().add((h0 + k) * hd + c * 16), *a);
            }
        }
    }
}
