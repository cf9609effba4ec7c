//! The AVX-512 VNNI path: one 512-bit register holds 4 weights of each of a group's 16 rows,
//! `vpdpbusd` multiplies them by an activation's 4 int8 values broadcast to every lane, and
//! tiles of up to 8 activation rows share each weight register. Q8_0 weights are the unsigned
//! operand biased by 128 (see the module above).

use std::arch::x86_64::*;

use super::{PackedQuant, QuantX, RowOut, GROUP};
use candle_core::quantized::GgmlDType;

/// Quantises one activation row (see [`super::quantize_row`]).
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn quantize_row(x: &[f32], mut r: RowOut) {
    let (xp, qp) = (x.as_ptr(), r.q.as_mut_ptr());
    for b in 0..x.len() / 32 {
        let a = _mm512_loadu_ps(xp.add(b * 32));
        let c = _mm512_loadu_ps(xp.add(b * 32 + 16));
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(c)));
        let scale = amax / 127.0;
        let inv = _mm512_set1_ps(super::inv_scale(scale));
        let qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, inv));
        let qc = _mm512_cvtps_epi32(_mm512_mul_ps(c, inv));
        _mm_storeu_si128(qp.add(b * 32) as *mut __m128i, _mm512_cvtepi32_epi8(qa));
        _mm_storeu_si128(
            qp.add(b * 32 + 16) as *mut __m128i,
            _mm512_cvtepi32_epi8(qc),
        );
        r.set_block(b, scale, _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qc)));
    }
}

/// Output features `16g..16g + 16` for activation rows `i0..i0 + J`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) unsafe fn tile<const J: usize>(
    p: &PackedQuant,
    g: usize,
    x: &QuantX,
    i0: usize,
    out: *mut f32,
) {
    let (nb, cols) = (p.nb, p.cols);
    let q8 = p.kind == GgmlDType::Q8_0;
    let q41 = p.kind == GgmlDType::Q4_1;
    let gbytes = if q8 { 512 } else { 256 };
    let offset = if q8 { -128.0f32 } else { -8.0 };
    // Few rows (decode) leave the integer chains short of independent work: split each
    // row's 8 steps per block over two accumulators to hide vpdpbusd latency.
    let split = J <= 4;
    let nibble = _mm512_set1_epi8(0x0f);
    let zero = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); J];
    let xq = x.q.as_ptr().add(i0 * cols);
    let bcast = |j: usize, b: usize, k: usize| {
        _mm512_set1_epi32(std::ptr::read_unaligned(
            xq.add(j * cols + b * 32 + k) as *const i32
        ))
    };
    for b in 0..nb {
        let gb = g * nb + b;
        let w = p.qs.as_ptr().add(gb * gbytes);
        let mut s0 = [zero; J];
        let mut s1 = [zero; J];
        if q8 {
            for v in 0..8 {
                let wv = _mm512_loadu_si512(w.add(v * 64) as *const __m512i);
                for j in 0..J {
                    if split && v % 2 == 1 {
                        s1[j] = _mm512_dpbusd_epi32(s1[j], wv, bcast(j, b, 4 * v));
                    } else {
                        s0[j] = _mm512_dpbusd_epi32(s0[j], wv, bcast(j, b, 4 * v));
                    }
                }
            }
        } else {
            for v in 0..4 {
                let raw = _mm512_loadu_si512(w.add(v * 64) as *const __m512i);
                let lo = _mm512_and_si512(raw, nibble);
                let hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble);
                for j in 0..J {
                    s0[j] = _mm512_dpbusd_epi32(s0[j], lo, bcast(j, b, 4 * v));
                    if split {
                        s1[j] = _mm512_dpbusd_epi32(s1[j], hi, bcast(j, b, 16 + 4 * v));
                    } else {
                        s0[j] = _mm512_dpbusd_epi32(s0[j], hi, bcast(j, b, 16 + 4 * v));
                    }
                }
            }
        }
        let dw = _mm512_cvtph_ps(_mm256_loadu_si256(
            p.d.as_ptr().add(gb * GROUP) as *const __m256i
        ));
        let xd = x.d.as_ptr().add(i0 * nb + b);
        let xs = x.s.as_ptr().add(i0 * nb + b);
        let xu = x.u.as_ptr().add(i0 * nb + b);
        if q41 {
            let mw = _mm512_cvtph_ps(_mm256_loadu_si256(
                p.m.as_ptr().add(gb * GROUP) as *const __m256i
            ));
            for j in 0..J {
                let isum = if split {
                    _mm512_add_epi32(s0[j], s1[j])
                } else {
                    s0[j]
                };
                let t = _mm512_mul_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(*xd.add(j * nb)));
                acc[j] = _mm512_fmadd_ps(dw, t, acc[j]);
                acc[j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(*xs.add(j * nb)), acc[j]);
            }
        } else {
            for j in 0..J {
                let isum = if split {
                    _mm512_add_epi32(s0[j], s1[j])
                } else {
                    s0[j]
                };
                let t = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(isum),
                    _mm512_set1_ps(*xd.add(j * nb)),
                    _mm512_set1_ps(offset * *xu.add(j * nb)),
                );
                acc[j] = _mm512_fmadd_ps(dw, t, acc[j]);
            }
        }
    }
    let valid = (p.rows - g * GROUP).min(GROUP);
    let mask: __mmask16 = if valid == GROUP {
        0xffff
    } else {
        (1u16 << valid) - 1
    };
    for (j, a) in acc.iter().enumerate() {
        _mm512_mask_storeu_ps(out.add((i0 + j) * p.rows + g * GROUP), mask, *a);
    }
}
