//! Hand-written AVX-512 VNNI kernel for Q4_0 / Q4_1 / Q8_0 matrix products (decode and prefill).
//!
//! Weights are repacked at load into groups of 16 rows. Within a group and a 32-weight block,
//! one 512-bit register holds the same 4 consecutive weights of all 16 rows (lane = row), so a
//! single `vpdpbusd` with one activation's 4 int8 values broadcast to every lane advances 16
//! output features at once, and the 8 such steps of a block accumulate in integers. Floats are
//! touched once per block (scale and offset), not once per instruction: that is what makes the
//! prefill GEMM compute-bound instead of conversion-bound. The same layout serves decode (one
//! activation row) and prefill (tiles of up to 8 activation rows that share each weight
//! register).
//!
//! Activations are quantised to int8 per 32-value block (scale `dx`, sum `sx = dx * sum(q)`).
//! Weights are always the unsigned operand: Q4 nibbles as stored (0..15), Q8_0 biased to
//! `q + 128`. The bias comes out per block as `-8 * sx` (Q4_0), `-128 * sx` (Q8_0) or `m * sx`
//! (Q4_1's minimum). Block scales are kept as f16 (half the bytes of f32: decode is bound by
//! memory traffic) and widened with `vcvtph2ps`.
//!
//! Rows are split over rayon, whose idle workers sleep (candle's spinning barrier pool
//! collapses when other processes share the cores). Used only when the CPU has AVX-512
//! F/BW/VNNI (checked at run time; `HAT_NO_SIMD=1` turns it off); otherwise candle's kernels run.

use candle_core::quantized::{GgmlDType, QTensor};

/// Weight rows interleaved per group (the lanes of one 512-bit register of int32).
const GROUP: usize = 16;
/// Activation rows processed per pass over a range of weight groups; their int8 copy
/// (`cols` bytes each) stays in L2 while the weights stream by.
const X_BLOCK: usize = 64;
/// Activation rows per register tile.
const TILE: usize = 8;

/// A quantised matrix repacked for the kernel.
#[derive(Debug)]
pub struct PackedQuant {
    kind: GgmlDType,
    rows: usize,
    cols: usize,
    /// 32-weight blocks per row.
    nb: usize,
    /// Per group and block: Q4 kinds, 4 registers of 64 bytes; byte `4 * lane + e` of
    /// register `v` holds weight `4v + e` (low nibble) and `16 + 4v + e` (high nibble) of row
    /// `lane`. Q8_0, 8 registers; register `v` holds weights `4v..4v + 4` as `q + 128`.
    qs: Vec<u8>,
    /// Per group and block: the 16 rows' scales (f16 bits).
    d: Vec<u16>,
    /// Q4_1 only, per group and block: the 16 rows' minimums (f16 bits).
    m: Vec<u16>,
}

/// Whether the kernel can run on this CPU (checked once; hot loops ask per row).
pub fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
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
    })
}

/// Activation rows quantised for the kernel.
struct QuantX {
    /// `m * cols` int8 values, row-major, natural order.
    q: Vec<i8>,
    /// per row and block: the scale
    d: Vec<f32>,
    /// per row and block: `d * sum(q)`
    s: Vec<f32>,
}

/// Quantises one row: `q` gets the int8 values, `d`/`s` one entry per block.
fn quantize_row(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if available() {
        // SAFETY: AVX-512 F/BW was detected.
        return unsafe { quantize_row_avx512(x, q, d, s) };
    }
    for (b, xs) in x.chunks_exact(32).enumerate() {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = amax / 127.0;
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        let mut sum = 0i32;
        for (t, v) in q[b * 32..b * 32 + 32].iter_mut().zip(xs) {
            let r = (v * inv).round() as i32;
            *t = r as i8;
            sum += r;
        }
        // rounded through f16 like ggml's Q8_1 blocks, so greedy decoding tracks llama.cpp
        d[b] = half::f16::from_f32(scale).to_f32();
        s[b] = half::f16::from_f32(scale * sum as f32).to_f32();
    }
}

/// [`quantize_row`] on 512-bit registers (round to nearest even instead of away from zero:
/// ties are measure-zero).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn quantize_row_avx512(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [f32]) {
    use std::arch::x86_64::*;
    let (xp, qp) = (x.as_ptr(), q.as_mut_ptr());
    for b in 0..x.len() / 32 {
        let a = _mm512_loadu_ps(xp.add(b * 32));
        let c = _mm512_loadu_ps(xp.add(b * 32 + 16));
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(c)));
        let scale = amax / 127.0;
        let inv = _mm512_set1_ps(if scale > 0.0 { 1.0 / scale } else { 0.0 });
        let qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, inv));
        let qc = _mm512_cvtps_epi32(_mm512_mul_ps(c, inv));
        _mm_storeu_si128(qp.add(b * 32) as *mut __m128i, _mm512_cvtepi32_epi8(qa));
        _mm_storeu_si128(
            qp.add(b * 32 + 16) as *mut __m128i,
            _mm512_cvtepi32_epi8(qc),
        );
        let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qc));
        d[b] = half::f16::from_f32(scale).to_f32();
        s[b] = half::f16::from_f32(scale * sum as f32).to_f32();
    }
}

fn quantize_x(x: &[f32], m: usize, cols: usize) -> QuantX {
    let nb = cols / 32;
    let mut qx = QuantX {
        q: vec![0i8; m * cols],
        d: vec![0f32; m * nb],
        s: vec![0f32; m * nb],
    };
    let rows = x
        .chunks_exact(cols)
        .zip(qx.q.chunks_exact_mut(cols))
        .zip(qx.d.chunks_exact_mut(nb).zip(qx.s.chunks_exact_mut(nb)));
    if m >= 16 {
        use rayon::prelude::*;
        rows.par_bridge()
            .for_each(|((x, q), (d, s))| quantize_row(x, q, d, s));
    } else {
        rows.for_each(|((x, q), (d, s))| quantize_row(x, q, d, s));
    }
    qx
}

/// A raw output pointer shared by workers that write disjoint elements.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: every (row, group) tile of the output is written by exactly one work item.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The pointer (a method, so closures capture the whole `Sync` wrapper).
    fn get(self) -> *mut f32 {
        self.0
    }
}

impl PackedQuant {
    /// Repacks a 2-D Q4_0, Q4_1 or Q8_0 tensor (row length a multiple of 32).
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
        if cols % 32 != 0 || rows == 0 {
            return None;
        }
        let data = t.data().ok()?;
        let nb = cols / 32;
        if data.len() != rows * nb * bsize {
            return None;
        }
        let groups = rows.div_ceil(GROUP);
        let q8 = kind == GgmlDType::Q8_0;
        let gbytes = if q8 { 512 } else { 256 };
        let mut qs = vec![0u8; groups * nb * gbytes];
        let mut d = vec![0u16; groups * nb * GROUP];
        let mut m = if kind == GgmlDType::Q4_1 {
            vec![0u16; groups * nb * GROUP]
        } else {
            Vec::new()
        };
        for (row, rdata) in data.chunks_exact(nb * bsize).enumerate() {
            let (g, lane) = (row / GROUP, row % GROUP);
            for (b, blk) in rdata.chunks_exact(bsize).enumerate() {
                let gb = g * nb + b;
                d[gb * GROUP + lane] = u16::from_le_bytes([blk[0], blk[1]]);
                let dst = &mut qs[gb * gbytes..(gb + 1) * gbytes];
                if q8 {
                    for v in 0..8 {
                        for e in 0..4 {
                            dst[v * 64 + 4 * lane + e] =
                                (blk[2 + 4 * v + e] as i8 as i16 + 128) as u8;
                        }
                    }
                    continue;
                }
                if kind == GgmlDType::Q4_1 {
                    m[gb * GROUP + lane] = u16::from_le_bytes([blk[2], blk[3]]);
                }
                let nib = &blk[bsize - 16..];
                for v in 0..4 {
                    dst[v * 64 + 4 * lane..v * 64 + 4 * lane + 4]
                        .copy_from_slice(&nib[4 * v..4 * v + 4]);
                }
            }
        }
        Some(Self {
            kind,
            rows,
            cols,
            nb,
            qs,
            d,
            m,
        })
    }

    /// `q4_0`, `q4_1` or `q8_0`.
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
        self.qs.len() + (self.d.len() + self.m.len()) * 2
    }

    /// Dequantised `(rows, cols)` f32 values, row-major.
    pub fn dequantize(&self) -> Vec<f32> {
        let f = |bits: u16| half::f16::from_bits(bits).to_f32();
        let q8 = self.kind == GgmlDType::Q8_0;
        let gbytes = if q8 { 512 } else { 256 };
        let mut out = vec![0f32; self.rows * self.cols];
        for (row, o) in out.chunks_exact_mut(self.cols).enumerate() {
            let (g, lane) = (row / GROUP, row % GROUP);
            for b in 0..self.nb {
                let gb = g * self.nb + b;
                let d = f(self.d[gb * GROUP + lane]);
                let qs = &self.qs[gb * gbytes..(gb + 1) * gbytes];
                let o = &mut o[b * 32..b * 32 + 32];
                if q8 {
                    for (k, o) in o.iter_mut().enumerate() {
                        let (v, e) = (k / 4, k % 4);
                        *o = (qs[v * 64 + 4 * lane + e] as f32 - 128.0) * d;
                    }
                    continue;
                }
                let (min, off) = match self.kind {
                    GgmlDType::Q4_1 => (f(self.m[gb * GROUP + lane]), 0.0),
                    _ => (0.0, 8.0),
                };
                for k in 0..16 {
                    let byte = qs[(k / 4) * 64 + 4 * lane + k % 4];
                    o[k] = ((byte & 0x0f) as f32 - off) * d + min;
                    o[k + 16] = ((byte >> 4) as f32 - off) * d + min;
                }
            }
        }
        out
    }

    /// `out[i, r] = sum_c x[i, c] * W[r, c]` for `m = x.len() / cols` rows of `x`.
    /// The caller must have checked [`available`].
    pub fn matmul(&self, x: &[f32], out: &mut [f32]) {
        let m = x.len() / self.cols;
        assert_eq!(
            x.len(),
            m * self.cols,
            "input length is not a multiple of cols"
        );
        assert_eq!(out.len(), m * self.rows, "output length does not match");
        if m == 0 {
            return;
        }
        let qx = quantize_x(x, m, self.cols);
        let groups = self.rows.div_ceil(GROUP);
        let out = OutPtr(out.as_mut_ptr());
        let work = |gr: std::ops::Range<usize>| {
            for xb in (0..m).step_by(X_BLOCK) {
                let xe = (xb + X_BLOCK).min(m);
                for g in gr.clone() {
                    let mut i = xb;
                    while i < xe {
                        let n = (xe - i).min(TILE);
                        // SAFETY: `available()` was checked by the caller; `tile` writes only
                        // rows i..i+n of group g, which no other work item touches.
                        unsafe {
                            match n {
                                8 => self.tile::<8>(g, &qx, i, out.get()),
                                7 => self.tile::<7>(g, &qx, i, out.get()),
                                6 => self.tile::<6>(g, &qx, i, out.get()),
                                5 => self.tile::<5>(g, &qx, i, out.get()),
                                4 => self.tile::<4>(g, &qx, i, out.get()),
                                3 => self.tile::<3>(g, &qx, i, out.get()),
                                2 => self.tile::<2>(g, &qx, i, out.get()),
                                _ => self.tile::<1>(g, &qx, i, out.get()),
                            }
                        }
                        i += n;
                    }
                }
            }
        };
        use rayon::prelude::*;
        let threads = rayon::current_num_threads().max(1);
        if threads == 1 || groups < 2 {
            return work(0..groups);
        }
        let chunk = groups.div_ceil(threads * 4).max(1);
        (0..groups.div_ceil(chunk))
            .into_par_iter()
            .for_each(|c| work(c * chunk..((c + 1) * chunk).min(groups)));
    }

    /// Output features `16g..16g + 16` for activation rows `i0..i0 + J`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile<const J: usize>(&self, g: usize, x: &QuantX, i0: usize, out: *mut f32) {
        use std::arch::x86_64::*;
        let (nb, cols) = (self.nb, self.cols);
        let q8 = self.kind == GgmlDType::Q8_0;
        let q41 = self.kind == GgmlDType::Q4_1;
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
            let w = self.qs.as_ptr().add(gb * gbytes);
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
                self.d.as_ptr().add(gb * GROUP) as *const __m256i
            ));
            let xd = x.d.as_ptr().add(i0 * nb + b);
            let xs = x.s.as_ptr().add(i0 * nb + b);
            if q41 {
                let mw = _mm512_cvtph_ps(_mm256_loadu_si256(
                    self.m.as_ptr().add(gb * GROUP) as *const __m256i
                ));
                for j in 0..J {
                    let isum = if split {
                        _mm512_add_epi32(s0[j], s1[j])
                    } else {
                        s0[j]
                    };
                    let t =
                        _mm512_mul_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(*xd.add(j * nb)));
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
                        _mm512_set1_ps(offset * *xs.add(j * nb)),
                    );
                    acc[j] = _mm512_fmadd_ps(dw, t, acc[j]);
                }
            }
        }
        let valid = (self.rows - g * GROUP).min(GROUP);
        let mask: __mmask16 = if valid == GROUP {
            0xffff
        } else {
            (1u16 << valid) - 1
        };
        for (j, a) in acc.iter().enumerate() {
            _mm512_mask_storeu_ps(out.add((i0 + j) * self.rows + g * GROUP), mask, *a);
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn tile<const J: usize>(&self, _g: usize, _x: &QuantX, _i0: usize, _out: *mut f32) {
        unreachable!("kernels::available() is false off x86_64")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    #[test]
    fn kernels_match_dequantised_matmul() {
        if !available() {
            eprintln!("skipping: CPU lacks AVX-512 VNNI");
            return;
        }
        for dt in [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q8_0] {
            // 70 rows: 4 full groups and a partial one; 96 columns: an odd block count.
            for (rows, cols) in [(70, 192), (16, 96), (5, 32)] {
                for m in [1, 3, 8, 71] {
                    check(dt, rows, cols, m);
                }
            }
        }
    }

    /// Fixed pseudo-random values in [-1.7, 1.7] (an unseeded `randn` made the bound below
    /// fail about one run in six on unlucky draws).
    fn noise(rows: usize, cols: usize, seed: u64) -> Tensor {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let v: Vec<f32> = (0..rows * cols)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 3.4
            })
            .collect();
        Tensor::from_vec(v, (rows, cols), &Device::Cpu).unwrap()
    }

    fn check(dt: GgmlDType, rows: usize, cols: usize, m: usize) {
        let dev = Device::Cpu;
        let w = (noise(rows, cols, 1) + 0.3).unwrap();
        let q = QTensor::quantize(&w, dt).unwrap();
        let p = PackedQuant::from_qtensor(&q).unwrap();
        let wd = q.dequantize(&dev).unwrap();
        assert_eq!(
            p.dequantize(),
            wd.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            "{dt:?} repacking"
        );
        let x = noise(m, cols, 2);
        let want = x
            .matmul(&wd.t().unwrap())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let mut got = vec![f32::NAN; m * rows];
        p.matmul(
            &x.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            &mut got,
        );
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (a, b) in got.iter().zip(&want) {
            assert!(
                (a - b).abs() < 0.02 * scale,
                "{dt:?} {rows}x{cols} m={m}: {a} vs {b}"
            );
        }
    }
}
