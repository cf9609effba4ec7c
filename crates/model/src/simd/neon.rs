//! aarch64 Advanced SIMD element-wise kernels (4 lanes), the same `exp` as the x86 paths:
//! `2^n * p(r)` with `x = n ln2 + r` and a degree-6 polynomial, the power of two built in the
//! exponent bits (input clamped to [-87.3, 88], 0 below -87.3).

use std::arch::aarch64::*;

/// Below this `exp` is under ~1.2e-38, about the smallest normal float: [`exp4`], which
/// builds the power of two in the exponent bits, returns 0 there (as x86's `exp8`).
const EXP_ZERO_BELOW: f32 = -87.3;

/// `exp` on 4 lanes; lanes below [`EXP_ZERO_BELOW`] (`-inf` too) give 0.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn exp4(x: float32x4_t) -> float32x4_t {
    let lo = vdupq_n_f32(EXP_ZERO_BELOW);
    let under = vcltq_f32(x, lo);
    let x = vminq_f32(vmaxq_f32(x, lo), vdupq_n_f32(88.0));
    let n = vrndnq_f32(vmulq_n_f32(x, std::f32::consts::LOG2_E));
    let r = vfmsq_f32(x, n, vdupq_n_f32(0.693_145_75));
    let r = vfmsq_f32(r, n, vdupq_n_f32(1.428_606_8e-6));
    let mut p = vdupq_n_f32(1.0 / 720.0);
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = vfmaq_f32(vdupq_n_f32(c), p, r);
    }
    let pow2 = vshlq_n_s32::<23>(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)));
    let e = vmulq_f32(p, vreinterpretq_f32_s32(pow2));
    // clear the lanes below the bound
    vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(e), under))
}

/// Replaces `x` by `exp(x - max)` and returns the sum (zeros and 0 for a row of `-inf`).
#[target_feature(enable = "neon")]
pub(crate) unsafe fn softmax(x: &mut [f32]) -> f32 {
    let max = max(x);
    if max == f32::NEG_INFINITY {
        x.fill(0.0);
        return 0.0;
    }
    exp_shift(x, max)
}

/// The largest element (`-inf` for an empty slice).
#[target_feature(enable = "neon")]
pub(crate) unsafe fn max(x: &[f32]) -> f32 {
    let full = x.len() / 4 * 4;
    let mut mx = vdupq_n_f32(f32::NEG_INFINITY);
    for i in (0..full).step_by(4) {
        mx = vmaxq_f32(mx, vld1q_f32(x.as_ptr().add(i)));
    }
    x[full..].iter().fold(vmaxvq_f32(mx), |m, &v| m.max(v))
}

/// Replaces `x` by `exp(x - max)` and returns the sum.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn exp_shift(x: &mut [f32], max: f32) -> f32 {
    let n = x.len();
    let full = n / 4 * 4;
    let p = x.as_mut_ptr();
    let m = vdupq_n_f32(max);
    let mut sum = vdupq_n_f32(0.0);
    for i in (0..full).step_by(4) {
        let e = exp4(vsubq_f32(vld1q_f32(p.add(i)), m));
        vst1q_f32(p.add(i), e);
        sum = vaddq_f32(sum, e);
    }
    let mut s = vaddvq_f32(sum);
    for v in &mut x[full..] {
        *v = (*v - max).exp();
        s += *v;
    }
    s
}

/// `ln(sum(exp(x)))` (`-inf` for a row of `-inf` or an empty one).
#[target_feature(enable = "neon")]
pub(crate) unsafe fn log_sum_exp(x: &[f32]) -> f32 {
    let n = x.len();
    let full = n / 4 * 4;
    let p = x.as_ptr();
    let max = max(x);
    if max == f32::NEG_INFINITY {
        return max;
    }
    let m = vdupq_n_f32(max);
    let mut sum = vdupq_n_f32(0.0);
    for i in (0..full).step_by(4) {
        sum = vaddq_f32(sum, exp4(vsubq_f32(vld1q_f32(p.add(i)), m)));
    }
    let mut s = vaddvq_f32(sum);
    for &v in &x[full..] {
        s += (v - max).exp();
    }
    s.ln() + max
}

#[target_feature(enable = "neon")]
pub(crate) unsafe fn silu_mul(g: &[f32], u: &[f32], o: &mut [f32]) {
    let n = g.len();
    let full = n / 4 * 4;
    let one = vdupq_n_f32(1.0);
    for k in (0..full).step_by(4) {
        let gv = vld1q_f32(g.as_ptr().add(k));
        let uv = vld1q_f32(u.as_ptr().add(k));
        let e = exp4(vnegq_f32(gv));
        vst1q_f32(
            o.as_mut_ptr().add(k),
            vmulq_f32(vdivq_f32(gv, vaddq_f32(one, e)), uv),
        );
    }
    for k in full..n {
        o[k] = g[k] / (1.0 + (-g[k]).exp()) * u[k];
    }
}
