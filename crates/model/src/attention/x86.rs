//! x86-64 attention of a few queries over an f16 cache ([`super::F16Group`]): each key row is
//! widened to f32 once (F16C) into a small buffer and dotted with every query head of the
//! group; each value row is widened once per chunk of the output and accumulated into up to
//! four heads at a time.

use std::arch::x86_64::*;

use super::F16Group;
use crate::simd::x86::{hsum8, softmax_avx2, softmax_avx512};

/// Query heads accumulated together in the value pass.
const HEADS_AT_ONCE: usize = 4;

/// Widest head this path takes (the key row's stack buffer).
const MAX_HD: usize = 512;

#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
pub(crate) unsafe fn decode_group_avx512(r: &F16Group, scores: &mut [f32], out: &mut [f32]) {
    let hd = out.len() / r.heads;
    if hd > MAX_HD {
        return super::decode_group_scalar(crate::simd::Isa::Avx512, r, scores, out);
    }
    let nk = scores.len() / r.heads;
    let chunks = hd / 16;
    let widen = |p: *const half::f16| _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i));
    let mut kf = [0f32; MAX_HD];
    for j in 0..nk {
        let kr = r.k.as_ptr().add(j * r.k_stride);
        for c in 0..chunks {
            _mm512_storeu_ps(kf.as_mut_ptr().add(c * 16), widen(kr.add(c * 16)));
        }
        for hh in 0..r.heads {
            let q = r.q.as_ptr().add(hh * r.q_stride);
            let mut acc = _mm512_setzero_ps();
            for c in 0..chunks {
                acc = _mm512_fmadd_ps(
                    _mm512_loadu_ps(q.add(c * 16)),
                    _mm512_loadu_ps(kf.as_ptr().add(c * 16)),
                    acc,
                );
            }
            *scores.get_unchecked_mut(hh * nk + j) = _mm512_reduce_add_ps(acc) * r.scale;
        }
    }
    let mut inv = [0f32; HEADS_AT_ONCE];
    for h0 in (0..r.heads).step_by(HEADS_AT_ONCE) {
        let nh = (r.heads - h0).min(HEADS_AT_ONCE);
        for (k, iv) in inv.iter_mut().enumerate().take(nh) {
            *iv = 1.0 / softmax_avx512(&mut scores[(h0 + k) * nk..(h0 + k + 1) * nk]);
        }
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
                _mm512_storeu_ps(
                    out.as_mut_ptr().add((h0 + k) * hd + c * 16),
                    _mm512_mul_ps(*a, _mm512_set1_ps(inv[k])),
                );
            }
        }
    }
}

#[target_feature(enable = "avx2,f16c,fma")]
pub(crate) unsafe fn decode_group_avx2(r: &F16Group, scores: &mut [f32], out: &mut [f32]) {
    let hd = out.len() / r.heads;
    if hd > MAX_HD {
        return super::decode_group_scalar(crate::simd::Isa::Avx2, r, scores, out);
    }
    let nk = scores.len() / r.heads;
    let chunks = hd / 8;
    let widen = |p: *const half::f16| _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
    let mut kf = [0f32; MAX_HD];
    for j in 0..nk {
        let kr = r.k.as_ptr().add(j * r.k_stride);
        for c in 0..chunks {
            _mm256_storeu_ps(kf.as_mut_ptr().add(c * 8), widen(kr.add(c * 8)));
        }
        for hh in 0..r.heads {
            let q = r.q.as_ptr().add(hh * r.q_stride);
            // two accumulators: the fmas would otherwise wait on each other
            let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let mut c = 0;
            while c + 2 <= chunks {
                a0 = _mm256_fmadd_ps(
                    _mm256_loadu_ps(q.add(c * 8)),
                    _mm256_loadu_ps(kf.as_ptr().add(c * 8)),
                    a0,
                );
                a1 = _mm256_fmadd_ps(
                    _mm256_loadu_ps(q.add(c * 8 + 8)),
                    _mm256_loadu_ps(kf.as_ptr().add(c * 8 + 8)),
                    a1,
                );
                c += 2;
            }
            if c < chunks {
                a0 = _mm256_fmadd_ps(
                    _mm256_loadu_ps(q.add(c * 8)),
                    _mm256_loadu_ps(kf.as_ptr().add(c * 8)),
                    a0,
                );
            }
            *scores.get_unchecked_mut(hh * nk + j) = hsum8(_mm256_add_ps(a0, a1)) * r.scale;
        }
    }
    let mut inv = [0f32; HEADS_AT_ONCE];
    for h0 in (0..r.heads).step_by(HEADS_AT_ONCE) {
        let nh = (r.heads - h0).min(HEADS_AT_ONCE);
        for (k, iv) in inv.iter_mut().enumerate().take(nh) {
            *iv = 1.0 / softmax_avx2(&mut scores[(h0 + k) * nk..(h0 + k + 1) * nk]);
        }
        for c in 0..chunks {
            let mut acc = [_mm256_setzero_ps(); HEADS_AT_ONCE];
            for j in 0..nk {
                let vf = widen(r.v.as_ptr().add(j * r.v_stride + c * 8));
                for (k, a) in acc.iter_mut().enumerate().take(nh) {
                    let p = *scores.get_unchecked((h0 + k) * nk + j);
                    *a = _mm256_fmadd_ps(_mm256_set1_ps(p), vf, *a);
                }
            }
            for (k, a) in acc.iter().enumerate().take(nh) {
                _mm256_storeu_ps(
                    out.as_mut_ptr().add((h0 + k) * hd + c * 8),
                    _mm256_mul_ps(*a, _mm256_set1_ps(inv[k])),
                );
            }
        }
    }
}
