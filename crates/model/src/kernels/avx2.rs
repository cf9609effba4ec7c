//! The AVX2 + FMA + F16C path. A 256-bit register holds 4 weights of 8 rows, so a group of 16
//! rows is two halves done one after the other. There is no `vpdpbusd`: `vpmaddubsw` multiplies unsigned weights by
//! signed activations into pairs of int16 and `vpmaddwd` by ones widens them to int32.
//!
//! * Q4: a nibble times an int8 is at most 15 * 127, so the 8 steps of a block (16 products
//!   per int16 lane) stay below 32,767 and widen once per block.
//! * Q8_0: weights flipped back to signed; `vpsignb` moves each weight's sign onto the
//!   activation so that `|w| * ±x` fits the unsigned-times-signed instruction (at most
//!   2 * 128 * 127 per pair), widened every step. Exact, without a bias term.

use std::arch::x86_64::*;

use super::{PackedQuant, QuantX, RowOut, GROUP};
use candle_core::quantized::GgmlDType;

/// Quantises one activation row (see [`super::quantize_row`]).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn quantize_row(x: &[f32], mut r: RowOut) {
    let (xp, qp) = (x.as_ptr(), r.q.as_mut_ptr());
    let sign = _mm256_set1_ps(-0.0);
    // vpackssdw / vpacksswb work per 128-bit half; this puts the dwords back in order
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for b in 0..x.len() / 32 {
        let v: [__m256; 4] = std::array::from_fn(|k| _mm256_loadu_ps(xp.add(b * 32 + 8 * k)));
        let mut amax = _mm256_andnot_ps(sign, v[0]);
        for vk in &v[1..] {
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, *vk));
        }
        let scale = crate::simd::x86::hmax8(amax) / 127.0;
        let inv = _mm256_set1_ps(super::inv_scale(scale));
        let q: [__m256i; 4] = std::array::from_fn(|k| _mm256_cvtps_epi32(_mm256_mul_ps(v[k], inv)));
        let sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        let s = _mm_add_epi32(
            _mm256_castsi256_si128(sum),
            _mm256_extracti128_si256::<1>(sum),
        );
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        let packed = _mm256_packs_epi16(
            _mm256_packs_epi32(q[0], q[1]),
            _mm256_packs_epi32(q[2], q[3]),
        );
        _mm256_storeu_si256(
            qp.add(b * 32) as *mut __m256i,
            _mm256_permutevar8x32_epi32(packed, order),
        );
        r.set_block(b, scale, _mm_cvtsi128_si32(s));
    }
}

/// Broadcasts the 4 int8 activations at `p` to every 32-bit lane.
#[inline(always)]
unsafe fn bcast(p: *const i8) -> __m256i {
    _mm256_set1_epi32(std::ptr::read_unaligned(p as *const i32))
}

/// Adds block `b`'s integer sums for 8 output features (half `half` of group block `gb`) to
/// the accumulators: `acc += dw * (isum * xd + bias * u)`, or for Q4_1
/// `acc += dw * isum * xd + m * s` (see the module above for `u` and `s`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn scale_block<const J: usize>(
    p: &PackedQuant,
    x: &QuantX,
    gb: usize,
    i0: usize,
    b: usize,
    half: usize,
    bias: f32,
    isum: &[__m256i; J],
    acc: &mut [__m256; J],
) {
    let nb = p.nb;
    let dw = _mm256_cvtph_ps(_mm_loadu_si128(
        p.d.as_ptr().add(gb * GROUP + half * 8) as *const __m128i
    ));
    let xd = x.d.as_ptr().add(i0 * nb + b);
    if p.kind == GgmlDType::Q4_1 {
        let mw = _mm256_cvtph_ps(_mm_loadu_si128(
            p.m.as_ptr().add(gb * GROUP + half * 8) as *const __m128i
        ));
        let xs = x.s.as_ptr().add(i0 * nb + b);
        for (j, a) in acc.iter_mut().enumerate() {
            let t = _mm256_mul_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_set1_ps(*xd.add(j * nb)));
            *a = _mm256_fmadd_ps(dw, t, *a);
            *a = _mm256_fmadd_ps(mw, _mm256_set1_ps(*xs.add(j * nb)), *a);
        }
    } else {
        let xu = x.u.as_ptr().add(i0 * nb + b);
        for (j, a) in acc.iter_mut().enumerate() {
            let t = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(isum[j]),
                _mm256_set1_ps(*xd.add(j * nb)),
                _mm256_set1_ps(bias * *xu.add(j * nb)),
            );
            *a = _mm256_fmadd_ps(dw, t, *a);
        }
    }
}

/// Stores the accumulators of half `half` of group `g` (only the group's valid rows).
#[inline(always)]
unsafe fn store_half<const J: usize>(
    p: &PackedQuant,
    g: usize,
    i0: usize,
    half: usize,
    valid: usize,
    acc: &[__m256; J],
    out: *mut f32,
) {
    let lanes = (valid - half * 8).min(8);
    for (j, a) in acc.iter().enumerate() {
        let o = out.add((i0 + j) * p.rows + g * GROUP + half * 8);
        if lanes == 8 {
            _mm256_storeu_ps(o, *a);
        } else {
            _mm256_maskstore_ps(o, crate::simd::x86::mask8(lanes), *a);
        }
    }
}

/// Output features `16g..16g + 16` for activation rows `i0..i0 + J` (J <= 4 keeps every sum
/// in registers).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn tile<const J: usize>(
    p: &PackedQuant,
    g: usize,
    x: &QuantX,
    i0: usize,
    out: *mut f32,
) {
    let (nb, cols) = (p.nb, p.cols);
    let q8 = p.kind == GgmlDType::Q8_0;
    let gbytes = p.group_block_bytes();
    let nibble = _mm256_set1_epi8(0x0f);
    let flip = _mm256_set1_epi8(-128);
    let ones = _mm256_set1_epi16(1);
    let zero = _mm256_setzero_si256();
    let xq = x.q.as_ptr().add(i0 * cols);
    let valid = (p.rows - g * GROUP).min(GROUP);
    for half in 0..valid.div_ceil(8) {
        let mut acc = [_mm256_setzero_ps(); J];
        for b in 0..nb {
            let gb = g * nb + b;
            let w = p.qs.as_ptr().add(gb * gbytes + half * 32);
            let xb = xq.add(b * 32);
            let mut isum = [zero; J];
            if q8 {
                for v in 0..8 {
                    let wv =
                        _mm256_xor_si256(_mm256_loadu_si256(w.add(v * 64) as *const __m256i), flip);
                    let wa = _mm256_abs_epi8(wv);
                    for (j, s) in isum.iter_mut().enumerate() {
                        let xs = _mm256_sign_epi8(bcast(xb.add(j * cols + 4 * v)), wv);
                        let pair = _mm256_maddubs_epi16(wa, xs);
                        *s = _mm256_add_epi32(*s, _mm256_madd_epi16(pair, ones));
                    }
                }
            } else {
                let mut s16 = [zero; J];
                for v in 0..4 {
                    let raw = _mm256_loadu_si256(w.add(v * 64) as *const __m256i);
                    let lo = _mm256_and_si256(raw, nibble);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(raw), nibble);
                    for (j, s) in s16.iter_mut().enumerate() {
                        let xr = xb.add(j * cols);
                        *s = _mm256_add_epi16(*s, _mm256_maddubs_epi16(lo, bcast(xr.add(4 * v))));
                        *s = _mm256_add_epi16(
                            *s,
                            _mm256_maddubs_epi16(hi, bcast(xr.add(16 + 4 * v))),
                        );
                    }
                }
                for (s, s16) in isum.iter_mut().zip(&s16) {
                    *s = _mm256_madd_epi16(*s16, ones);
                }
            }
            // Q8_0 here is exact (signed weights): no bias term
            let bias = if q8 { 0.0 } else { -8.0 };
            scale_block(p, x, gb, i0, b, half, bias, &isum, &mut acc);
        }
        store_half(p, g, i0, half, valid, &acc, out);
    }
}

/// `acc + dot4(w, x)` per 32-bit lane (unsigned weights, signed activations): AVX-VNNI's
/// VEX form, or the EVEX form of AVX-512 VNNI + VL.
#[inline(always)]
unsafe fn dpbusd<const VEX: bool>(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
    if VEX {
        _mm256_dpbusd_avx_epi32(acc, w, x)
    } else {
        _mm256_dpbusd_epi32(acc, w, x)
    }
}

/// The tile with `vpdpbusd` (see [`tile`] for the layout): the integer sums need no widening
/// steps, and Q8_0 weights stay biased by 128 as stored (the bias comes out as `-128 * u`,
/// as on the AVX-512 path).
#[inline(always)]
unsafe fn tile_vnni<const J: usize, const VEX: bool>(
    p: &PackedQuant,
    g: usize,
    x: &QuantX,
    i0: usize,
    out: *mut f32,
) {
    let (nb, cols) = (p.nb, p.cols);
    let q8 = p.kind == GgmlDType::Q8_0;
    let gbytes = p.group_block_bytes();
    let offset = if q8 { -128.0f32 } else { -8.0 };
    let nibble = _mm256_set1_epi8(0x0f);
    let zero = _mm256_setzero_si256();
    let xq = x.q.as_ptr().add(i0 * cols);
    let valid = (p.rows - g * GROUP).min(GROUP);
    for half in 0..valid.div_ceil(8) {
        let mut acc = [_mm256_setzero_ps(); J];
        for b in 0..nb {
            let gb = g * nb + b;
            let w = p.qs.as_ptr().add(gb * gbytes + half * 32);
            let xb = xq.add(b * 32);
            let mut isum = [zero; J];
            if q8 {
                for v in 0..8 {
                    let wv = _mm256_loadu_si256(w.add(v * 64) as *const __m256i);
                    for (j, s) in isum.iter_mut().enumerate() {
                        *s = dpbusd::<VEX>(*s, wv, bcast(xb.add(j * cols + 4 * v)));
                    }
                }
            } else {
                for v in 0..4 {
                    let raw = _mm256_loadu_si256(w.add(v * 64) as *const __m256i);
                    let lo = _mm256_and_si256(raw, nibble);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(raw), nibble);
                    for (j, s) in isum.iter_mut().enumerate() {
                        let xr = xb.add(j * cols);
                        *s = dpbusd::<VEX>(*s, lo, bcast(xr.add(4 * v)));
                        *s = dpbusd::<VEX>(*s, hi, bcast(xr.add(16 + 4 * v)));
                    }
                }
            }
            // Q8_0 weights are biased by 128 here
            scale_block(p, x, gb, i0, b, half, offset, &isum, &mut acc);
        }
        store_half(p, g, i0, half, valid, &acc, out);
    }
}

/// [`tile_vnni`] on AVX-VNNI (VEX `vpdpbusd`).
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(crate) unsafe fn tile_avxvnni<const J: usize>(
    p: &PackedQuant,
    g: usize,
    x: &QuantX,
    i0: usize,
    out: *mut f32,
) {
    tile_vnni::<J, true>(p, g, x, i0, out)
}

/// [`tile_vnni`] on AVX-512 VNNI + VL (EVEX `vpdpbusd` on 256-bit registers).
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub(crate) unsafe fn tile_evex_vnni<const J: usize>(
    p: &PackedQuant,
    g: usize,
    x: &QuantX,
    i0: usize,
    out: *mut f32,
) {
    tile_vnni::<J, false>(p, g, x, i0, out)
}
