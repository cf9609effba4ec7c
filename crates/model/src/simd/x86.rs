//! x86-64 element-wise kernels: AVX-512 (16 lanes) and AVX2 + FMA (8 lanes).
//!
//! Both compute `exp` as `2^n * p(r)` with `x = n ln2 + r`, `|r| <= ln2 / 2` and a degree-6
//! polynomial (relative error ~2e-7). Callers must have checked that the CPU runs the path.

use std::arch::x86_64::*;

const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
const POLY: [f32; 6] = [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0];

/// `exp` on 16 lanes; `vscalefps` applies the power of two (underflows to 0).
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn exp16(x: __m512) -> __m512 {
    let x = _mm512_max_ps(x, _mm512_set1_ps(-104.0));
    let n = _mm512_roundscale_ps(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(1.0 / 720.0);
    for c in POLY {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    _mm512_scalef_ps(p, n)
}

/// Below this `exp` is under ~1.2e-38, about the smallest normal float: [`exp8`] (and NEON's
/// `exp4`), which build the power of two in the exponent bits, return 0 there.
const EXP_ZERO_BELOW: f32 = -87.3;

/// `exp` on 8 lanes. The input is clamped to `EXP_ZERO_BELOW..=88` so that the power of two
/// can be built in the exponent bits, and lanes below [`EXP_ZERO_BELOW`] (`-inf` too) give 0
/// (nothing here needs the overflow).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn exp8(x: __m256) -> __m256 {
    let lo = _mm256_set1_ps(EXP_ZERO_BELOW);
    let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x, lo);
    let x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.0));
    let n = _mm256_round_ps(
        _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
    );
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(1.0 / 720.0);
    for c in POLY {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let pow2 = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(pow2)))
}

/// Horizontal sum of 8 lanes.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hsum8(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
    _mm_cvtss_f32(s)
}

/// Horizontal maximum of 8 lanes.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hmax8(v: __m256) -> f32 {
    let s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_max_ss(s, _mm_shuffle_ps::<1>(s, s));
    _mm_cvtss_f32(s)
}

/// Lane mask selecting the first `n` (< 8) lanes, for `maskload` / `maskstore`.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn mask8(n: usize) -> __m256i {
    _mm256_cmpgt_epi32(
        _mm256_set1_epi32(n as i32),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    )
}

/// Replaces `x` by `exp(x - max)` and returns the sum (zeros and 0 for a row of `-inf`).
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn softmax_avx512(x: &mut [f32]) -> f32 {
    let max = max_avx512(x);
    if max == f32::NEG_INFINITY {
        x.fill(0.0);
        return 0.0;
    }
    exp_shift_avx512(x, max)
}

/// The largest element (`-inf` for an empty slice).
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn max_avx512(x: &[f32]) -> f32 {
    let n = x.len();
    let p = x.as_ptr();
    let full = n / 16 * 16;
    let tail: __mmask16 = ((1u32 << (n - full)) - 1) as u16;
    let mut mx = _mm512_set1_ps(f32::NEG_INFINITY);
    for i in (0..full).step_by(16) {
        mx = _mm512_max_ps(mx, _mm512_loadu_ps(p.add(i)));
    }
    mx = _mm512_mask_max_ps(mx, tail, mx, _mm512_maskz_loadu_ps(tail, p.add(full)));
    _mm512_reduce_max_ps(mx)
}

/// Replaces `x` by `exp(x - max)` and returns the sum.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn exp_shift_avx512(x: &mut [f32], max: f32) -> f32 {
    let n = x.len();
    let p = x.as_mut_ptr();
    let full = n / 16 * 16;
    let tail: __mmask16 = ((1u32 << (n - full)) - 1) as u16;
    let m = _mm512_set1_ps(max);
    let mut sum = _mm512_setzero_ps();
    for i in (0..full).step_by(16) {
        let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(p.add(i)), m));
        _mm512_storeu_ps(p.add(i), e);
        sum = _mm512_add_ps(sum, e);
    }
    if tail != 0 {
        let e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, p.add(full)), m));
        _mm512_mask_storeu_ps(p.add(full), tail, e);
        sum = _mm512_mask_add_ps(sum, tail, sum, e);
    }
    _mm512_reduce_add_ps(sum)
}

/// Replaces `x` by `exp(x - max)` and returns the sum (zeros and 0 for a row of `-inf`).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn softmax_avx2(x: &mut [f32]) -> f32 {
    let max = max_avx2(x);
    if max == f32::NEG_INFINITY {
        x.fill(0.0);
        return 0.0;
    }
    exp_shift_avx2(x, max)
}

/// The largest element (`-inf` for an empty slice).
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn max_avx2(x: &[f32]) -> f32 {
    let full = x.len() / 8 * 8;
    let mut mx = _mm256_set1_ps(f32::NEG_INFINITY);
    for i in (0..full).step_by(8) {
        mx = _mm256_max_ps(mx, _mm256_loadu_ps(x.as_ptr().add(i)));
    }
    x[full..].iter().fold(hmax8(mx), |m, &v| m.max(v))
}

/// Replaces `x` by `exp(x - max)` and returns the sum.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn exp_shift_avx2(x: &mut [f32], max: f32) -> f32 {
    let n = x.len();
    let p = x.as_mut_ptr();
    let full = n / 8 * 8;
    let m = _mm256_set1_ps(max);
    let mut sum = _mm256_setzero_ps();
    for i in (0..full).step_by(8) {
        let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), m));
        _mm256_storeu_ps(p.add(i), e);
        sum = _mm256_add_ps(sum, e);
    }
    if full < n {
        let tail = mask8(n - full);
        let e = exp8(_mm256_sub_ps(_mm256_maskload_ps(p.add(full), tail), m));
        let e = _mm256_and_ps(e, _mm256_castsi256_ps(tail));
        _mm256_maskstore_ps(p.add(full), tail, e);
        sum = _mm256_add_ps(sum, e);
    }
    hsum8(sum)
}

/// `ln(sum(exp(x)))` (`-inf` for a row of `-inf` or an empty one).
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn log_sum_exp_avx512(x: &[f32]) -> f32 {
    let n = x.len();
    let p = x.as_ptr();
    let mask_at = |k: usize| -> __mmask16 {
        if n - k >= 16 {
            0xffff
        } else {
            ((1u32 << (n - k)) - 1) as u16
        }
    };
    let mut mx = _mm512_set1_ps(f32::NEG_INFINITY);
    for k in (0..n).step_by(16) {
        let m = mask_at(k);
        mx = _mm512_mask_max_ps(mx, m, mx, _mm512_maskz_loadu_ps(m, p.add(k)));
    }
    let max = _mm512_reduce_max_ps(mx);
    if max == f32::NEG_INFINITY {
        return max;
    }
    let mv = _mm512_set1_ps(max);
    let mut sum = _mm512_setzero_ps();
    for k in (0..n).step_by(16) {
        let m = mask_at(k);
        let e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, p.add(k)), mv));
        sum = _mm512_mask_add_ps(sum, m, sum, e);
    }
    _mm512_reduce_add_ps(sum).ln() + max
}

/// `ln(sum(exp(x)))` (`-inf` for a row of `-inf` or an empty one).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn log_sum_exp_avx2(x: &[f32]) -> f32 {
    let n = x.len();
    let p = x.as_ptr();
    let full = n / 8 * 8;
    let max = max_avx2(x);
    if max == f32::NEG_INFINITY {
        return max;
    }
    let mv = _mm256_set1_ps(max);
    // two accumulators: the adds would otherwise wait on each other
    let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut k = 0;
    while k + 16 <= full {
        s0 = _mm256_add_ps(s0, exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(k)), mv)));
        s1 = _mm256_add_ps(s1, exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(k + 8)), mv)));
        k += 16;
    }
    if k < full {
        s0 = _mm256_add_ps(s0, exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(k)), mv)));
    }
    let mut sum = hsum8(_mm256_add_ps(s0, s1));
    for &v in &x[full..] {
        sum += (v - max).exp();
    }
    sum.ln() + max
}

#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn silu_mul_avx512(g: &[f32], u: &[f32], o: &mut [f32]) {
    let n = g.len();
    let one = _mm512_set1_ps(1.0);
    let mut k = 0;
    while k < n {
        let mask: __mmask16 = if n - k >= 16 {
            0xffff
        } else {
            ((1u32 << (n - k)) - 1) as u16
        };
        let gv = _mm512_maskz_loadu_ps(mask, g.as_ptr().add(k));
        let uv = _mm512_maskz_loadu_ps(mask, u.as_ptr().add(k));
        let e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv));
        let v = _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)), uv);
        _mm512_mask_storeu_ps(o.as_mut_ptr().add(k), mask, v);
        k += 16;
    }
}

#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn silu_mul_avx2(g: &[f32], u: &[f32], o: &mut [f32]) {
    let n = g.len();
    let one = _mm256_set1_ps(1.0);
    let full = n / 8 * 8;
    let f = |gv: __m256, uv: __m256| {
        let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv));
        _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), uv)
    };
    for k in (0..full).step_by(8) {
        let v = f(
            _mm256_loadu_ps(g.as_ptr().add(k)),
            _mm256_loadu_ps(u.as_ptr().add(k)),
        );
        _mm256_storeu_ps(o.as_mut_ptr().add(k), v);
    }
    if full < n {
        let m = mask8(n - full);
        let v = f(
            _mm256_maskload_ps(g.as_ptr().add(full), m),
            _mm256_maskload_ps(u.as_ptr().add(full), m),
        );
        _mm256_maskstore_ps(o.as_mut_ptr().add(full), m, v);
    }
}

/// Whether the CPU has AVX-512 BF16 with F and BW (`vdpbf16ps`, `vcvtne2ps2bf16`, `vpermw`):
/// the bf16 paths of prefill attention and of training's products.
pub(crate) fn bf16_supported() -> bool {
    std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512bf16")
}

/// The same 512 bits as 32 bf16 values (every bit pattern is one).
#[inline(always)]
pub(crate) fn as_bh(x: __m512i) -> __m512bh {
    // SAFETY: both are 64-byte vectors; any bits are valid in either.
    unsafe { std::mem::transmute::<__m512i, __m512bh>(x) }
}

/// The same 512 bits as integers.
#[inline(always)]
pub(crate) fn as_si(x: __m512bh) -> __m512i {
    // SAFETY: as in `as_bh`.
    unsafe { std::mem::transmute::<__m512bh, __m512i>(x) }
}

/// The `vpermw` indices that interleave two vectors' 16 bf16 values (`a0 b0 a1 b1 ...`) from
/// `[a0..a15, b0..b15]` (what `vcvtne2ps2bf16` of two 16-float vectors gives).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) fn interleave_bf16() -> __m512i {
    _mm512_set_epi16(
        31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4,
        19, 3, 18, 2, 17, 1, 16, 0,
    )
}
