//! Vectorised element-wise math for the CPU inference path: `exp`, the unnormalised softmax
//! of attention rows and SwiGLU's `silu(gate) * up`. AVX-512 when the CPU has it (see
//! [`crate::kernels::available`]), plain loops otherwise. libm's scalar `expf` was ~3-7% of
//! prefill time.

/// Replaces `x` by `exp(x - max)` and returns the sum.
pub fn softmax_unnormalised(x: &mut [f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::available() {
        // SAFETY: AVX-512 F was detected.
        return unsafe { softmax_avx512(x) };
    }
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    sum
}

/// `exp` on 16 lanes: `2^n * p(r)` with `x = n ln2 + r`, `|r| <= ln2 / 2`, a degree-6
/// polynomial (relative error ~2e-7) and `vscalefps` for the power of two (underflows to 0).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn exp16(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let x = _mm512_max_ps(x, _mm512_set1_ps(-104.0));
    let n = _mm512_roundscale_ps(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_145_75), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428_606_8e-6), r);
    let mut p = _mm512_set1_ps(1.0 / 720.0);
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    _mm512_scalef_ps(p, n)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn softmax_avx512(x: &mut [f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = x.len();
    let p = x.as_mut_ptr();
    let full = n / 16 * 16;
    let tail: __mmask16 = ((1u32 << (n - full)) - 1) as u16;
    let mut mx = _mm512_set1_ps(f32::NEG_INFINITY);
    for i in (0..full).step_by(16) {
        mx = _mm512_max_ps(mx, _mm512_loadu_ps(p.add(i)));
    }
    mx = _mm512_mask_max_ps(mx, tail, mx, _mm512_maskz_loadu_ps(tail, p.add(full)));
    let m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
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

/// `ln(sum(exp(x)))`, computed stably (used for the log-probability of every generated
/// token over the whole vocabulary, so it runs once per token on ~50k logits).
pub fn log_sum_exp(x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::available() {
        // SAFETY: AVX-512 F was detected.
        return unsafe { log_sum_exp_avx512(x) };
    }
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = x.iter().map(|&v| ((v - max) as f64).exp()).sum();
    sum.ln() as f32 + max
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn log_sum_exp_avx512(x: &[f32]) -> f32 {
    use std::arch::x86_64::*;
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
    let mv = _mm512_set1_ps(max);
    let mut sum = _mm512_setzero_ps();
    for k in (0..n).step_by(16) {
        let m = mask_at(k);
        let e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, p.add(k)), mv));
        sum = _mm512_mask_add_ps(sum, m, sum, e);
    }
    _mm512_reduce_add_ps(sum).ln() + max
}

/// `out[r, j] = silu(y[r, j]) * y[r, i + j]` for `y` of shape `(rows, 2i)` (gate and up
/// stacked by the fused projection).
pub fn silu_mul(y: &[f32], i: usize, out: &mut [f32]) {
    for (yr, o) in y.chunks_exact(2 * i).zip(out.chunks_exact_mut(i)) {
        let (g, u) = yr.split_at(i);
        #[cfg(target_arch = "x86_64")]
        if crate::kernels::available() {
            // SAFETY: AVX-512 F was detected.
            unsafe { silu_mul_avx512(g, u, o) };
            continue;
        }
        for ((o, g), u) in o.iter_mut().zip(g).zip(u) {
            *o = g / (1.0 + (-g).exp()) * u;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn silu_mul_avx512(g: &[f32], u: &[f32], o: &mut [f32]) {
    use std::arch::x86_64::*;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_exp_is_accurate() {
        let mut xs: Vec<f32> = (0..1000).map(|i| -(i as f32) * 0.09).collect();
        let want: Vec<f32> = xs.iter().map(|x| x.exp()).collect();
        let sum = softmax_unnormalised(&mut xs);
        for (a, b) in xs.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-6 * b.max(1e-30) + 1e-38, "{a} vs {b}");
        }
        assert!((sum - want.iter().sum::<f32>()).abs() < 1e-5);
    }

    #[test]
    fn log_sum_exp_matches_f64() {
        let x: Vec<f32> = (0..49_157)
            .map(|k| ((k * 7919 % 3001) as f32) * 0.01 - 12.0)
            .collect();
        let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let want = x.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln() + max;
        let got = log_sum_exp(&x) as f64;
        assert!((got - want).abs() < 1e-4, "{got} vs {want}");
    }

    #[test]
    fn silu_mul_matches_scalar() {
        let i = 37;
        let y: Vec<f32> = (0..3 * 2 * i)
            .map(|k| ((k * 7919 % 200) as f32 - 100.0) * 0.11)
            .collect();
        let mut out = vec![0f32; 3 * i];
        silu_mul(&y, i, &mut out);
        for r in 0..3 {
            for j in 0..i {
                let g = y[r * 2 * i + j];
                let want = g / (1.0 + (-g).exp()) * y[r * 2 * i + i + j];
                let got = out[r * i + j];
                assert!(
                    (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                    "{got} vs {want}"
                );
            }
        }
    }
}
