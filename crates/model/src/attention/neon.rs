//! aarch64 NEON attention of a few queries over an f16 cache ([`super::F16Group`]), the same
//! scheme as the x86 path with 4-lane registers (f16 widened with `fcvtl`).

use std::arch::aarch64::*;

use super::F16Group;
use super::Partial;
use crate::kernels::neon::widen_f16;
use crate::simd::neon::exp_shift;

/// Query heads accumulated together in the value pass.
const HEADS_AT_ONCE: usize = 4;

/// Widest head this path takes (the key row's stack buffer).
const MAX_HD: usize = 512;

#[target_feature(enable = "neon")]
pub(crate) unsafe fn decode_group(
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
    stats.iter_mut().for_each(|s| *s = Partial::EMPTY);
    let chunks = hd / 4;
    let widen = |p: *const half::f16| widen_f16(p as *const u16);
    let mut kf = [0f32; MAX_HD];
    for j in 0..nk {
        let kr = r.k.as_ptr().add(j * r.k_stride);
        for c in 0..chunks {
            vst1q_f32(kf.as_mut_ptr().add(c * 4), widen(kr.add(c * 4)));
        }
        for (hh, st) in stats.iter_mut().enumerate() {
            let q = r.q.as_ptr().add(hh * r.q_stride);
            let (mut a0, mut a1) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
            let mut c = 0;
            while c + 2 <= chunks {
                a0 = vfmaq_f32(
                    a0,
                    vld1q_f32(q.add(c * 4)),
                    vld1q_f32(kf.as_ptr().add(c * 4)),
                );
                a1 = vfmaq_f32(
                    a1,
                    vld1q_f32(q.add(c * 4 + 4)),
                    vld1q_f32(kf.as_ptr().add(c * 4 + 4)),
                );
                c += 2;
            }
            if c < chunks {
                a0 = vfmaq_f32(
                    a0,
                    vld1q_f32(q.add(c * 4)),
                    vld1q_f32(kf.as_ptr().add(c * 4)),
                );
            }
            let sc = vaddvq_f32(vaddq_f32(a0, a1)) * r.scale;
            *scores.get_unchecked_mut(hh * nk + j) = sc;
            st.max = st.max.max(sc);
        }
    }
    for h0 in (0..r.heads).step_by(HEADS_AT_ONCE) {
        let nh = (r.heads - h0).min(HEADS_AT_ONCE);
        for k in h0..h0 + nh {
            stats[k].sum = exp_shift(&mut scores[k * nk..(k + 1) * nk], stats[k].max);
        }
        for c in 0..chunks {
            let mut acc = [vdupq_n_f32(0.0); HEADS_AT_ONCE];
            for j in 0..nk {
                let vf = widen(r.v.as_ptr().add(j * r.v_stride + c * 4));
                for (k, a) in acc.iter_mut().enumerate().take(nh) {
                    *a = vfmaq_n_f32(*a, vf, *scores.get_unchecked((h0 + k) * nk + j));
                }
            }
            for (k, a) in acc.iter().enumerate().take(nh) {
                vst1q_f32(out.as_mut_ptr().add((h0 + k) * hd + c * 4), *a);
            }
        }
    }
}
