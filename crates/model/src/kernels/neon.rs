//! The aarch64 NEON path. A 128-bit register holds 4 weights of 4 rows, so a group of 16 rows
//! is four quarters done one after the other. With the dot-product extension one `sdot` per
//! step accumulates 4 int8 products per lane; without it, `smull` / `smull2` widen the
//! products to int16, `addp` pairs them per row and `sadalp` accumulates into int32. Both
//! multiply signed values: Q4 nibbles (0..15) are non-negative int8 as they are, Q8_0 weights
//! are flipped back from the stored `q + 128`.
//!
//! `sdot` is written as inline assembly: its intrinsic is not stable Rust yet.

use std::arch::aarch64::*;

use super::{PackedQuant, QuantX, RowOut, GROUP};
use candle_core::quantized::GgmlDType;

/// Quantises one activation row (see [`super::quantize_row`]).
#[target_feature(enable = "neon")]
pub(crate) unsafe fn quantize_row(x: &[f32], mut r: RowOut) {
    let (xp, qp) = (x.as_ptr(), r.q.as_mut_ptr());
    for b in 0..x.len() / 32 {
        let v: [float32x4_t; 8] = std::array::from_fn(|k| vld1q_f32(xp.add(b * 32 + 4 * k)));
        let mut amax = vabsq_f32(v[0]);
        for vk in &v[1..] {
            amax = vmaxq_f32(amax, vabsq_f32(*vk));
        }
        let scale = vmaxvq_f32(amax) / 127.0;
        let inv = super::inv_scale(scale);
        let q: [int32x4_t; 8] = std::array::from_fn(|k| vcvtnq_s32_f32(vmulq_n_f32(v[k], inv)));
        let mut sum = q[0];
        for qk in &q[1..] {
            sum = vaddq_s32(sum, *qk);
        }
        for h in 0..2 {
            let a = vcombine_s16(vqmovn_s32(q[4 * h]), vqmovn_s32(q[4 * h + 1]));
            let c = vcombine_s16(vqmovn_s32(q[4 * h + 2]), vqmovn_s32(q[4 * h + 3]));
            vst1q_s8(
                qp.add(b * 32 + 16 * h),
                vcombine_s8(vqmovn_s16(a), vqmovn_s16(c)),
            );
        }
        r.set_block(b, scale, vaddvq_s32(sum));
    }
}

/// `acc + a . b` per 32-bit lane (4 int8 products each), with `sdot`.
#[inline(always)]
unsafe fn sdot(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    std::arch::asm!(
        "sdot {0:v}.4s, {1:v}.16b, {2:v}.16b",
        inout(vreg) acc,
        in(vreg) a,
        in(vreg) b,
        options(pure, nomem, nostack, preserves_flags)
    );
    acc
}

/// `acc + a . b` per 32-bit lane without the dot-product extension.
#[inline(always)]
unsafe fn dot_widening(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    let hi = vmull_high_s8(a, b);
    // pairs of products: lanes 2r, 2r + 1 of the sum belong to row r
    vpadalq_s16(acc, vpaddq_s16(lo, hi))
}

/// `acc + a . b` per 32-bit lane, with or without `sdot`.
#[inline(always)]
unsafe fn dot<const DOT: bool>(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    if DOT {
        sdot(acc, a, b)
    } else {
        dot_widening(acc, a, b)
    }
}

/// f16 bits to f32 (`fcvtl`; base ARMv8, but its intrinsic needs an unstable type).
#[inline(always)]
pub(crate) unsafe fn widen_f16(p: *const u16) -> float32x4_t {
    let h = vld1_u16(p);
    let r: float32x4_t;
    std::arch::asm!(
        "fcvtl {0:v}.4s, {1:v}.4h",
        out(vreg) r,
        in(vreg) h,
        options(pure, nomem, nostack, preserves_flags)
    );
    r
}

/// Broadcasts the 4 int8 activations at `p` to every 32-bit lane.
#[inline(always)]
unsafe fn bcast(p: *const i8) -> int8x16_t {
    vreinterpretq_s8_s32(vdupq_n_s32(std::ptr::read_unaligned(p as *const i32)))
}

/// The tile body, for both dot-product flavours (inlined into each, so the instructions take
/// the caller's target features).
#[inline(always)]
unsafe fn tile_body<const J: usize, const DOT: bool>(
    p: &PackedQuant,
    g: usize,
    x: &QuantX,
    i0: usize,
    out: *mut f32,
) {
    let (nb, cols) = (p.nb, p.cols);
    let q8 = p.kind == GgmlDType::Q8_0;
    let q41 = p.kind == GgmlDType::Q4_1;
    let gbytes = p.group_block_bytes();
    let nibble = vdupq_n_u8(0x0f);
    let flip = vdupq_n_u8(0x80);
    let xq = x.q.as_ptr().add(i0 * cols);
    let valid = (p.rows - g * GROUP).min(GROUP);
    for quarter in 0..valid.div_ceil(4) {
        let mut acc = [vdupq_n_f32(0.0); J];
        for b in 0..nb {
            let gb = g * nb + b;
            let w = p.qs.as_ptr().add(gb * gbytes + quarter * 16);
            let xb = xq.add(b * 32);
            let mut isum = [vdupq_n_s32(0); J];
            if q8 {
                for v in 0..8 {
                    let wv = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(w.add(v * 64)), flip));
                    for (j, s) in isum.iter_mut().enumerate() {
                        *s = dot::<DOT>(*s, wv, bcast(xb.add(j * cols + 4 * v)));
                    }
                }
            } else {
                for v in 0..4 {
                    let raw = vld1q_u8(w.add(v * 64));
                    let lo = vreinterpretq_s8_u8(vandq_u8(raw, nibble));
                    let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(raw));
                    for (j, s) in isum.iter_mut().enumerate() {
                        let xr = xb.add(j * cols);
                        *s = dot::<DOT>(*s, lo, bcast(xr.add(4 * v)));
                        *s = dot::<DOT>(*s, hi, bcast(xr.add(16 + 4 * v)));
                    }
                }
            }
            let dw = widen_f16(p.d.as_ptr().add(gb * GROUP + quarter * 4));
            let xd = x.d.as_ptr().add(i0 * nb + b);
            if q8 {
                for (j, a) in acc.iter_mut().enumerate() {
                    let t = vmulq_n_f32(vcvtq_f32_s32(isum[j]), *xd.add(j * nb));
                    *a = vfmaq_f32(*a, dw, t);
                }
            } else if q41 {
                let mw = widen_f16(p.m.as_ptr().add(gb * GROUP + quarter * 4));
                let xs = x.s.as_ptr().add(i0 * nb + b);
                for (j, a) in acc.iter_mut().enumerate() {
                    let t = vmulq_n_f32(vcvtq_f32_s32(isum[j]), *xd.add(j * nb));
                    *a = vfmaq_f32(*a, dw, t);
                    *a = vfmaq_n_f32(*a, mw, *xs.add(j * nb));
                }
            } else {
                let xu = x.u.as_ptr().add(i0 * nb + b);
                for (j, a) in acc.iter_mut().enumerate() {
                    let t = vfmaq_n_f32(
                        vdupq_n_f32(-8.0 * *xu.add(j * nb)),
                        vcvtq_f32_s32(isum[j]),
                        *xd.add(j * nb),
                    );
                    *a = vfmaq_f32(*a, dw, t);
                }
            }
        }
        let lanes = (valid - quarter * 4).min(4);
        for (j, a) in acc.iter().enumerate() {
            let o = out.add((i0 + j) * p.rows + g * GROUP + quarter * 4);
            if lanes == 4 {
                vst1q_f32(o, *a);
            } else {
                let mut tmp = [0f32; 4];
                vst1q_f32(tmp.as_mut_ptr(), *a);
                std::ptr::copy_nonoverlapping(tmp.as_ptr(), o, lanes);
            }
        }
    }
}

/// Output features `16g..16g + 16` for activation rows `i0..i0 + J` (J <= 4), NEON only.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn tile<const J: usize>(
    p: &PackedQuant,
    g: usize,
    x: &QuantX,
    i0: usize,
    out: *mut f32,
) {
    tile_body::<J, false>(p, g, x, i0, out)
}

/// [`tile`] with `sdot`.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn tile_dot<const J: usize>(
    p: &PackedQuant,
    g: usize,
    x: &QuantX,
    i0: usize,
    out: *mut f32,
) {
    tile_body::<J, true>(p, g, x, i0, out)
}
