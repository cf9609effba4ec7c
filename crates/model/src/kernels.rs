//! Hand-written AVX-512 VNNI kernel for Q4_0 / Q4_1 / Q8_0 matrix products (decode and prefill).
//!
//! Weights are repacked at load: per row, the 16 nibble bytes of each 32-weight block, and the
//! block scales as f32 (no f16 conversion in the loop). Activations are quantised to int8 per
//! 32-value block and laid out so that one 512-bit `vpdpbusd` multiplies two weight blocks
//! (unsigned nibbles 0..15) by two activation blocks (signed); the Q4_0 offset (`-8 d`) or the
//! Q4_1 minimum (`m`) is applied afterwards through per-block activation sums. Q8_0 weights
//! are signed, so there the activations enter as `q + 128` and the weights' block sums correct
//! for it. Rows are split over rayon, whose idle workers sleep (candle's spinning barrier pool
//! collapses when other processes share the cores; `HAT_BARRIER=1` selects it for
//! prefill-sized calls, for comparison). Used only when the CPU has AVX-512 F/BW/VNNI
//! (checked at run time); otherwise candle's kernels run.

use candle_core::quantized::{GgmlDType, QTensor};

/// With `HAT_BARRIER=1`, calls with this many activation rows go to candle's barrier pool.
const BARRIER_MIN_ROWS: usize = 32;

/// Activation rows processed per pass over a weight row range.
const X_BLOCK: usize = 64;

/// Q4_0 weights repacked for the kernel.
#[derive(Debug)]
pub struct Q4Packed {
    kind: GgmlDType,
    rows: usize,
    cols: usize,
    nb: usize,
    qs: Vec<u8>,
    d: Vec<f32>,
    /// per block: value added per unit of activation sum (`-8 d` for Q4_0, `m` for Q4_1)
    mb: Vec<f32>,
}

/// Whether the kernel can run on this CPU.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vnni")
            && std::env::var_os("HAT_NO_SIMD").is_none()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Activation quantised for the kernel.
struct QuantX {
    /// per pair of blocks: [b0 0..16, b1 0..16, b0 16..32, b1 16..32]
    q: Vec<i8>,
    /// per pair: 16 lane scales [d0 x4, d1 x4, d0 x4, d1 x4]
    dpat: Vec<f32>,
    /// per block: d * sum(q), the activation block's sum
    sum: Vec<f32>,
}

/// For Q4 kinds `sum` is `d * sum(q)`; for Q8_0 the activation bytes are `q + 128` (u8) in
/// natural order and `sum` holds `d` (the bias correction uses the weights' sums).
fn quantize_x(x: &[f32], nb: usize, kind: GgmlDType) -> QuantX {
    let q8 = kind == GgmlDType::Q8_0;
    let mut q = vec![0i8; nb * 32];
    let mut dpat = vec![0f32; nb / 2 * 16];
    let mut sum = vec![0f32; nb];
    let mut tmp = [0i8; 32];
    for b in 0..nb {
        let xs = &x[b * 32..(b + 1) * 32];
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        let mut s = 0i32;
        for (t, v) in tmp.iter_mut().zip(xs) {
            let r = (v * id).round() as i32;
            *t = r as i8;
            s += r;
        }
        let pair = b / 2;
        let half = b % 2;
        let base = pair * 64;
        if q8 {
            sum[b] = d;
            for (dst, t) in q[b * 32..b * 32 + 32].iter_mut().zip(&tmp) {
                *dst = (*t as i32 + 128) as u8 as i8;
            }
            for lane in 0..8 {
                dpat[pair * 16 + half * 8 + lane] = d;
            }
            continue;
        }
        sum[b] = d * s as f32;
        q[base + half * 16..base + half * 16 + 16].copy_from_slice(&tmp[..16]);
        q[base + 32 + half * 16..base + 32 + half * 16 + 16].copy_from_slice(&tmp[16..]);
        for lane in 0..4 {
            dpat[pair * 16 + half * 4 + lane] = d;
            dpat[pair * 16 + 8 + half * 4 + lane] = d;
        }
    }
    QuantX { q, dpat, sum }
}

impl Q4Packed {
    /// Repacks a 2-D Q4_0 or Q4_1 tensor whose row length is a multiple of 64.
    pub fn from_qtensor(t: &QTensor) -> Option<Self> {
        let kind = t.dtype();
        let bsize = match kind {
            GgmlDType::Q4_0 => 18,
            GgmlDType::Q4_1 => 20,
            GgmlDType::Q8_0 => 34,
            _ => return None,
        };
        if t.rank() != 2 {
            return None;
        }
        let (rows, cols) = (t.shape().dims()[0], t.shape().dims()[1]);
        if cols % 64 != 0 {
            return None;
        }
        let data = t.data().ok()?;
        let nb = cols / 32;
        if data.len() != rows * nb * bsize {
            return None;
        }
        let mut qs = Vec::with_capacity(rows * nb * (bsize - 2));
        let mut d = Vec::with_capacity(rows * nb);
        let mut mb = Vec::with_capacity(rows * nb);
        for blk in data.chunks_exact(bsize) {
            let scale = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
            d.push(scale);
            if kind == GgmlDType::Q8_0 {
                // activations enter as q + 128: subtract 128 * d_w * sum(w) per block
                let sw: i32 = blk[2..34].iter().map(|&b| b as i8 as i32).sum();
                mb.push(-128.0 * scale * sw as f32);
                qs.extend_from_slice(&blk[2..34]);
                continue;
            }
            if kind == GgmlDType::Q4_1 {
                mb.push(half::f16::from_le_bytes([blk[2], blk[3]]).to_f32());
            } else {
                mb.push(-8.0 * scale);
            }
            qs.extend_from_slice(&blk[bsize - 16..]);
        }
        Some(Self {
            kind,
            rows,
            cols,
            nb,
            qs,
            d,
            mb,
        })
    }

    /// `q4_0` or `q4_1`.
    pub fn format_name(&self) -> String {
        format!("{:?}", self.kind).to_lowercase()
    }
    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Input features.
    pub fn cols(&self) -> usize {
        self.cols
    }
    /// Bytes held.
    pub fn storage_bytes(&self) -> usize {
        self.qs.len() + (self.d.len() + self.mb.len()) * 4
    }

    /// Dequantised `(rows, cols)` f32 values, row-major.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        for (blk, o) in out.chunks_exact_mut(32).enumerate() {
            let (d, m) = (self.d[blk], self.mb[blk]);
            if self.kind == GgmlDType::Q8_0 {
                for (o, &q) in o.iter_mut().zip(&self.qs[blk * 32..blk * 32 + 32]) {
                    *o = q as i8 as f32 * d;
                }
                continue;
            }
            let q = &self.qs[blk * 16..blk * 16 + 16];
            for j in 0..16 {
                o[j] = (q[j] & 0x0f) as f32 * d + m;
                o[j + 16] = (q[j] >> 4) as f32 * d + m;
            }
        }
        out
    }

    /// `out[i, r] = sum_c x[i, c] * W[r, c]` for `m = x.len() / cols` rows of `x`.
    pub fn matmul(&self, x: &[f32], out: &mut [f32]) {
        let m = x.len() / self.cols;
        assert_eq!(out.len(), m * self.rows);
        let quant =
            |i: usize| quantize_x(&x[i * self.cols..(i + 1) * self.cols], self.nb, self.kind);
        let qx: Vec<QuantX> = if m >= 8 && std::env::var_os("HAT_BARRIER").is_none() {
            use rayon::prelude::*;
            (0..m).into_par_iter().map(quant).collect()
        } else {
            (0..m).map(quant).collect()
        };
        let out_ptr = out.as_mut_ptr() as usize;
        let rows = self.rows;
        // SAFETY (all unsafe below): `available()` was checked by the caller, and every
        // (i, r) element of `out` is written by exactly one work item.
        let groups = rows / 4;
        let write =
            |i: usize, r: usize, v: f32| unsafe { *(out_ptr as *mut f32).add(i * rows + r) = v };
        let work = |range: std::ops::Range<usize>| {
            // items are groups of 4 weight rows (plus one item for the leftover rows);
            // activation rows in L2-sized blocks; 4x4 register tiles
            for xb in (0..m).step_by(X_BLOCK) {
                let xe = (xb + X_BLOCK).min(m);
                for g in range.clone() {
                    if g == groups {
                        for r in groups * 4..rows {
                            for (i, q) in qx.iter().enumerate().take(xe).skip(xb) {
                                write(i, r, unsafe { self.row_dot(r, q) });
                            }
                        }
                        continue;
                    }
                    let r = g * 4;
                    let mut i = xb;
                    while i + 4 <= xe {
                        let v = unsafe {
                            self.tile4x4(r, [&qx[i], &qx[i + 1], &qx[i + 2], &qx[i + 3]])
                        };
                        for (wr, col) in v.iter().enumerate() {
                            for (j, v) in col.iter().enumerate() {
                                write(i + j, r + wr, *v);
                            }
                        }
                        i += 4;
                    }
                    while i < xe {
                        for wr in 0..4 {
                            write(i, r + wr, unsafe { self.row_dot(r + wr, &qx[i]) });
                        }
                        i += 1;
                    }
                }
            }
        };
        let items = groups + usize::from(!rows.is_multiple_of(4));
        if m < BARRIER_MIN_ROWS || std::env::var_os("HAT_BARRIER").is_none() {
            // Few rows (decode): rayon workers sleep instead of spinning, which keeps decode
            // fast when other processes share the cores (candle's spinning barrier pool
            // dropped to <10 tok/s at load average 5 on 2 cores, rayon kept 140 tok/s).
            use rayon::prelude::*;
            let n = rayon::current_num_threads().max(1);
            let chunk = items.div_ceil(n * 4).max(1);
            (0..items.div_ceil(chunk))
                .into_par_iter()
                .for_each(|c| work(c * chunk..((c + 1) * chunk).min(items)));
        } else {
            candle_core::utils::barrier_pool().execute_chunked(items, work);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn row_dot(&self, r: usize, x: &QuantX) -> f32 {
        use std::arch::x86_64::*;
        let nb = self.nb;
        let q8 = self.kind == GgmlDType::Q8_0;
        let bpb = if q8 { 32 } else { 16 };
        let qs = self.qs.as_ptr().add(r * nb * bpb);
        let d = self.d.as_ptr().add(r * nb);
        let mask = _mm256_set1_epi8(0x0f);
        let idx = if q8 {
            _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0)
        } else {
            _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0)
        };
        let mut acc = _mm512_setzero_ps();
        for p in 0..nb / 2 {
            let xv = _mm512_loadu_si512(x.q.as_ptr().add(p * 64) as *const __m512i);
            let dot = if q8 {
                // activations biased to u8, weights signed
                let wv = _mm512_loadu_si512(qs.add(p * 64) as *const __m512i);
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), xv, wv)
            } else {
                let w = _mm256_loadu_si256(qs.add(p * 32) as *const __m256i);
                let lo = _mm256_and_si256(w, mask);
                let hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), mask);
                let wv = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xv)
            };
            let dw = _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd(d.add(2 * p) as *const f64)));
            let dwpat = _mm512_permutexvar_ps(idx, dw);
            let scale = _mm512_mul_ps(dwpat, _mm512_loadu_ps(x.dpat.as_ptr().add(p * 16)));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc);
        }
        let mb = self.mb.as_ptr().add(r * nb);
        let mut corr = 0f32;
        for b in 0..nb {
            corr += *mb.add(b) * x.sum[b];
        }
        _mm512_reduce_add_ps(acc) + corr
    }

    /// Dot products of weight rows `r..r+4` with 4 activation rows: `out[weight][act]`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile4x4(&self, r: usize, x: [&QuantX; 4]) -> [[f32; 4]; 4] {
        use std::arch::x86_64::*;
        let nb = self.nb;
        let q8 = self.kind == GgmlDType::Q8_0;
        let bpb = if q8 { 32 } else { 16 };
        let mask = _mm256_set1_epi8(0x0f);
        let idx = if q8 {
            _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0)
        } else {
            _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0)
        };
        let mut acc = [[_mm512_setzero_ps(); 4]; 4];
        for p in 0..nb / 2 {
            let mut wv = [_mm512_setzero_si512(); 4];
            let mut dwp = [_mm512_setzero_ps(); 4];
            for k in 0..4 {
                let qs = self.qs.as_ptr().add((r + k) * nb * bpb + p * 2 * bpb);
                if q8 {
                    wv[k] = _mm512_loadu_si512(qs as *const __m512i);
                } else {
                    let w = _mm256_loadu_si256(qs as *const __m256i);
                    let lo = _mm256_and_si256(w, mask);
                    let hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), mask);
                    wv[k] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
                }
                let d = self.d.as_ptr().add((r + k) * nb + 2 * p);
                dwp[k] = _mm512_permutexvar_ps(
                    idx,
                    _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd(d as *const f64))),
                );
            }
            for j in 0..4 {
                let xv = _mm512_loadu_si512(x[j].q.as_ptr().add(p * 64) as *const __m512i);
                let dx = _mm512_loadu_ps(x[j].dpat.as_ptr().add(p * 16));
                for k in 0..4 {
                    let dot = if q8 {
                        _mm512_dpbusd_epi32(_mm512_setzero_si512(), xv, wv[k])
                    } else {
                        _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[k], xv)
                    };
                    acc[k][j] = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(dot),
                        _mm512_mul_ps(dwp[k], dx),
                        acc[k][j],
                    );
                }
            }
        }
        let mut out = [[0f32; 4]; 4];
        for k in 0..4 {
            let mb = self.mb.as_ptr().add((r + k) * nb);
            for j in 0..4 {
                let mut corr = 0f32;
                for b in 0..nb {
                    corr += *mb.add(b) * x[j].sum[b];
                }
                out[k][j] = _mm512_reduce_add_ps(acc[k][j]) + corr;
            }
        }
        out
    }

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn tile4x4(&self, _r: usize, _x: [&QuantX; 4]) -> [[f32; 4]; 4] {
        unreachable!("kernels::available() is false off x86_64")
    }

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn row_dot(&self, _r: usize, _x: &QuantX) -> f32 {
        unreachable!("kernels::available() is false off x86_64")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    #[test]
    fn q4_kernels_match_dequantised_matmul() {
        if !available() {
            eprintln!("skipping: CPU lacks AVX-512 VNNI");
            return;
        }
        for dt in [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q8_0] {
            check(dt);
        }
    }

    fn check(dt: GgmlDType) {
        let dev = Device::Cpu;
        let w = (Tensor::randn(0f32, 1.0, (70, 192), &dev).unwrap() + 0.3).unwrap(); // 17 tiles + 2 rows
        let q = QTensor::quantize(&w, dt).unwrap();
        let p = Q4Packed::from_qtensor(&q).unwrap();
        let wd = q.dequantize(&dev).unwrap();
        assert_eq!(
            p.dequantize(),
            wd.flatten_all().unwrap().to_vec1::<f32>().unwrap()
        );
        let x = Tensor::randn(0f32, 1.0, (71, 192), &dev).unwrap();
        let want = x
            .matmul(&wd.t().unwrap())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let mut got = vec![0f32; 71 * 70];
        p.matmul(
            &x.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            &mut got,
        );
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() < 0.02 * scale, "{a} vs {b}");
        }
    }
}
