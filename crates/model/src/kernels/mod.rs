//! Hand-written kernels for Q4_0 / Q4_1 / Q8_0 matrix products (decode and prefill), one per
//! instruction set ([`crate::simd::Isa`]): AVX-512 VNNI (`avx512.rs`), AVX2 + FMA + F16C
//! (`avx2.rs`), aarch64 NEON with or without the dot-product extension (`neon.rs`), and the
//! scalar reference here that every path is tested against.
//!
//! Weights are repacked at load into groups of 16 rows, one layout for every path. Within a
//! group and a 32-weight block, 64 bytes hold the same 4 consecutive weights of all 16 rows
//! (4 bytes per row: the int32 lanes of one 512-bit register, two 256-bit or four 128-bit
//! ones), so one integer dot-product step with an activation's 4 int8 values broadcast to
//! every lane advances 16 (8, 4) output features at once, and the steps of a block accumulate
//! in integers. Floats are touched once per block (scale and offset), not once per
//! instruction: that is what makes the prefill GEMM compute-bound instead of
//! conversion-bound. The same layout serves decode (one activation row) and prefill (tiles of
//! several activation rows that share each weight register).
//!
//! Activations are quantised to int8 per 32-value block (scale `dx`, sum `sx = dx * sum(q)`).
//! Q4 nibbles are stored as is (0..15) and their bias comes out per block as `-8 * sx`
//! (Q4_0) or `m * sx` (Q4_1's minimum). Q8_0 is stored biased to `q + 128` (AVX-512's
//! `vpdpbusd` takes unsigned weights; its bias comes out as `-128 * sx`); the other paths
//! flip the bias bit back and multiply signed values exactly. Block scales are kept as f16
//! (half the bytes of f32: decode is bound by memory traffic).
//!
//! Rows are split over rayon, whose idle workers sleep (candle's spinning barrier pool
//! collapses when other processes share the cores).

use candle_core::quantized::{GgmlDType, QTensor};

use crate::simd::Isa;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;

/// Weight rows interleaved per group (the lanes of one 512-bit register of int32).
const GROUP: usize = 16;
/// Activation rows processed per pass over a range of weight groups; their int8 copy
/// (`cols` bytes each) stays in L2 while the weights stream by.
const X_BLOCK: usize = 64;

/// One cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A zero-initialised buffer of `u8` or `u16` that starts on a cache line, so that the
/// kernels' 32- and 64-byte weight loads never straddle two lines (an unaligned `Vec` start
/// split every 64-byte load of the AVX-512 path and half the 32-byte loads of the AVX2 one).
pub(crate) struct Aligned<T> {
    lines: Vec<Line>,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

/// Element types the buffer may hold: plain integers, for which all-zero bytes are zero.
pub(crate) trait Pod: Copy {}
impl Pod for u8 {}
impl Pod for u16 {}

impl<T: Pod> Aligned<T> {
    fn zeroed(len: usize) -> Self {
        let bytes = len * std::mem::size_of::<T>();
        Self {
            lines: vec![Line([0; 64]); bytes.div_ceil(64)],
            len,
            _t: std::marker::PhantomData,
        }
    }
}

impl<T: Pod> std::ops::Deref for Aligned<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the lines hold at least `len` initialised `T`s (integers, any bytes valid),
        // and a line's alignment (64) is a multiple of `T`'s.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr() as *const T, self.len) }
    }
}

impl<T: Pod> std::ops::DerefMut for Aligned<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and the borrow is unique.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr() as *mut T, self.len) }
    }
}

impl<T> std::fmt::Debug for Aligned<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Aligned({} elements)", self.len)
    }
}

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
    qs: Aligned<u8>,
    /// Per group and block: the 16 rows' scales (f16 bits).
    d: Aligned<u16>,
    /// Q4_1 only, per group and block: the 16 rows' minimums (f16 bits).
    m: Aligned<u16>,
}

/// Activation rows quantised for the kernel.
pub(crate) struct QuantX {
    /// `m * cols` int8 values, row-major, natural order.
    pub(crate) q: Vec<i8>,
    /// per row and block: the scale
    pub(crate) d: Vec<f32>,
    /// per row and block: `d * sum(q)` rounded through f16 (Q4_1's minimum term, as ggml's
    /// Q8_1 blocks have it)
    pub(crate) s: Vec<f32>,
    /// per row and block: `d * sum(q)` unrounded, for the Q4_0 / Q8_0 bias, so that it
    /// cancels the bias folded into the integer sums exactly
    pub(crate) u: Vec<f32>,
}

/// `1 / scale` for a block of activations, or 0 where that is not finite: a block of zeros,
/// and one whose largest magnitude is below `127 / f32::MAX` (~3.7e-37, e.g. `silu(g) * u` for
/// `g <= -88`), whose scale is subnormal. Such a block quantises to zeros with sum 0 on every
/// path (its f16 scale is 0 anyway); `inf` would map its values to `i32::MIN` / `MAX`, which
/// overflowed the sum and left each path different int8 bytes.
#[inline(always)]
pub(crate) fn inv_scale(scale: f32) -> f32 {
    let inv = 1.0 / scale;
    if inv.is_finite() {
        inv
    } else {
        0.0
    }
}

/// Quantises one row with the scalar reference (round half to even, as the vector paths'
/// conversions do).
fn quantize_row(x: &[f32], mut r: RowOut) {
    for (b, xs) in x.chunks_exact(32).enumerate() {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = amax / 127.0;
        let inv = inv_scale(scale);
        let mut sum = 0i32;
        for (t, v) in r.q[b * 32..b * 32 + 32].iter_mut().zip(xs) {
            let q = (v * inv).round_ties_even() as i32;
            *t = q as i8;
            sum += q;
        }
        r.set_block(b, scale, sum);
    }
}

/// One activation row's share of [`QuantX`].
pub(crate) struct RowOut<'a> {
    pub(crate) q: &'a mut [i8],
    d: &'a mut [f32],
    s: &'a mut [f32],
    u: &'a mut [f32],
}

impl RowOut<'_> {
    /// Stores block `b`'s scale and sums. The scale and `s` are rounded through f16 like
    /// ggml's Q8_1 blocks, so greedy decoding tracks llama.cpp.
    #[inline(always)]
    pub(crate) fn set_block(&mut self, b: usize, scale: f32, sum: i32) {
        let d = half::f16::from_f32(scale).to_f32();
        self.d[b] = d;
        self.s[b] = half::f16::from_f32(scale * sum as f32).to_f32();
        self.u[b] = d * sum as f32;
    }
}

/// Quantises one row on `isa` (every path rounds half to even, as the vector conversions do,
/// so all of them write the same bytes).
fn quantize_row_on(isa: Isa, x: &[f32], r: RowOut) {
    match isa {
        // SAFETY (each arm): the caller checked that the CPU runs `isa`.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { avx512::quantize_row(x, r) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx2Vnni => unsafe { avx2::quantize_row(x, r) },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon | Isa::NeonDot => unsafe { neon::quantize_row(x, r) },
        _ => quantize_row(x, r),
    }
}

fn quantize_x(isa: Isa, x: &[f32], m: usize, cols: usize) -> QuantX {
    let nb = cols / 32;
    let mut qx = QuantX {
        q: vec![0i8; m * cols],
        d: vec![0f32; m * nb],
        s: vec![0f32; m * nb],
        u: vec![0f32; m * nb],
    };
    let rows = x
        .chunks_exact(cols)
        .zip(qx.q.chunks_exact_mut(cols))
        .zip(qx.d.chunks_exact_mut(nb))
        .zip(qx.s.chunks_exact_mut(nb).zip(qx.u.chunks_exact_mut(nb)))
        .map(|(((x, q), d), (s, u))| (x, RowOut { q, d, s, u }));
    if m >= 16 {
        use rayon::prelude::*;
        rows.par_bridge()
            .for_each(|(x, r)| quantize_row_on(isa, x, r));
    } else {
        rows.for_each(|(x, r)| quantize_row_on(isa, x, r));
    }
    qx
}

/// Whether a block of `rows` activation rows is walked tile by tile with the weight groups
/// inside (each tile's activations stay in L1 while the groups stream from L2) instead of
/// group by group (each group's weights stay in L1 while the block's activations pass by).
/// The tile's many 4-byte activation broadcasts want L1 more than its few weight loads, so
/// once the block's int8 activations outgrow L1 the tile goes outside. AVX2 only for now:
/// measured there (prefill tiles of 64 rows, Zen 3); the other paths keep the order they
/// were tuned with.
fn x_outer(isa: Isa, rows: usize, cols: usize) -> bool {
    isa == Isa::Avx2 && rows * cols > X_L1_BYTES
}

/// Activation bytes that leave room in a 32 KiB L1 for the weights and the output.
const X_L1_BYTES: usize = 16 * 1024;

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
    /// Repacks a 2-D Q4_0, Q4_1 or Q8_0 tensor (row length a positive multiple of 32, at
    /// least one row); `None` for any other tensor, which stays as it is.
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
        // no columns: nothing to pack, and `matmul` counts activation rows as `len / cols`
        if cols == 0 || cols % 32 != 0 || rows == 0 {
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
        let mut qs = Aligned::<u8>::zeroed(groups * nb * gbytes);
        let mut d = Aligned::<u16>::zeroed(groups * nb * GROUP);
        let mut m = Aligned::<u16>::zeroed(if kind == GgmlDType::Q4_1 {
            groups * nb * GROUP
        } else {
            0
        });
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

    /// `out[i, r] = sum_c x[i, c] * W[r, c]` for `m = x.len() / cols` rows of `x`, on the
    /// path [`crate::simd::isa`] picked for this CPU.
    pub fn matmul(&self, x: &[f32], out: &mut [f32]) {
        self.matmul_on(crate::simd::isa(), x, out)
    }

    /// [`PackedQuant::matmul`] on a given path, which the CPU must run ([`Isa::check`]).
    pub(crate) fn matmul_on(&self, isa: Isa, x: &[f32], out: &mut [f32]) {
        isa.debug_assert_runs();
        // `from_qtensor` refuses a matrix without columns
        debug_assert!(self.cols > 0);
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
        let qx = quantize_x(isa, x, m, self.cols);
        let groups = self.rows.div_ceil(GROUP);
        // AVX2's 16 registers: tiles of 8 rows spill (measured 10-30% slower than two of 4)
        let tile_rows = match isa {
            Isa::Avx512 => 8,
            _ => 4,
        };
        let out = OutPtr(out.as_mut_ptr());
        let work = |gr: std::ops::Range<usize>| {
            for xb in (0..m).step_by(X_BLOCK) {
                let xe = (xb + X_BLOCK).min(m);
                // SAFETY: the CPU runs `isa` (checked by `isa()` or the caller); `tile` writes
                // only rows i..i+n of group g, which no other work item touches.
                let tile = |g: usize, i: usize| unsafe {
                    self.tile(isa, (xe - i).min(tile_rows), g, &qx, i, out.get())
                };
                if x_outer(isa, xe - xb, self.cols) {
                    for i in (xb..xe).step_by(tile_rows) {
                        for g in gr.clone() {
                            tile(g, i);
                        }
                    }
                } else {
                    for g in gr.clone() {
                        for i in (xb..xe).step_by(tile_rows) {
                            tile(g, i);
                        }
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

    /// Output features `16g..16g + 16` for activation rows `i0..i0 + n` on `isa`.
    ///
    /// # Safety
    /// The CPU runs `isa`; `out` holds `(i0 + n) * rows` elements; `n` is at most 8 on
    /// AVX-512, 4 elsewhere.
    unsafe fn tile(&self, isa: Isa, n: usize, g: usize, x: &QuantX, i0: usize, out: *mut f32) {
        #[allow(unused_macros)]
        macro_rules! rows {
            ($m:ident :: $f:ident, $($n:literal)*) => {
                match n {
                    $($n => $m::$f::<$n>(self, g, x, i0, out),)*
                    _ => unreachable!("tile of {n} rows"),
                }
            };
        }
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => rows!(avx512::tile, 1 2 3 4 5 6 7 8),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => rows!(avx2::tile, 1 2 3 4),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Vnni if crate::simd::x86_vex_vnni() => {
                rows!(avx2::tile_avxvnni, 1 2 3 4)
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Vnni => rows!(avx2::tile_evex_vnni, 1 2 3 4),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => rows!(neon::tile, 1 2 3 4),
            #[cfg(target_arch = "aarch64")]
            Isa::NeonDot => rows!(neon::tile_dot, 1 2 3 4),
            _ => self.tile_scalar(n, g, x, i0, out),
        }
    }

    /// The reference tile: the same integer sums and per-block float math as the vector
    /// paths, one output at a time.
    unsafe fn tile_scalar(&self, n: usize, g: usize, x: &QuantX, i0: usize, out: *mut f32) {
        let (nb, cols) = (self.nb, self.cols);
        let f = |bits: u16| half::f16::from_bits(bits).to_f32();
        let gbytes = self.group_block_bytes();
        let valid = (self.rows - g * GROUP).min(GROUP);
        for j in i0..i0 + n {
            for lane in 0..valid {
                let mut acc = 0f32;
                for b in 0..nb {
                    let gb = g * nb + b;
                    let w = &self.qs[gb * gbytes..(gb + 1) * gbytes];
                    let xr = &x.q[j * cols + b * 32..j * cols + b * 32 + 32];
                    let (xd, xs, xu) = (x.d[j * nb + b], x.s[j * nb + b], x.u[j * nb + b]);
                    let dw = f(self.d[gb * GROUP + lane]);
                    match self.kind {
                        GgmlDType::Q8_0 => {
                            let mut isum = 0i32;
                            for (k, &xv) in xr.iter().enumerate() {
                                let q = (w[(k / 4) * 64 + 4 * lane + k % 4] ^ 0x80) as i8;
                                isum += q as i32 * xv as i32;
                            }
                            acc += dw * (isum as f32 * xd);
                        }
                        kind => {
                            let mut isum = 0i32;
                            for k in 0..16 {
                                let byte = w[(k / 4) * 64 + 4 * lane + k % 4];
                                isum += (byte & 0x0f) as i32 * xr[k] as i32
                                    + (byte >> 4) as i32 * xr[k + 16] as i32;
                            }
                            if kind == GgmlDType::Q4_1 {
                                acc += dw * (isum as f32 * xd) + f(self.m[gb * GROUP + lane]) * xs;
                            } else {
                                acc += dw * (isum as f32 * xd - 8.0 * xu);
                            }
                        }
                    }
                }
                *out.add(j * self.rows + g * GROUP + lane) = acc;
            }
        }
    }

    /// Bytes of one group's block of weights.
    fn group_block_bytes(&self) -> usize {
        if self.kind == GgmlDType::Q8_0 {
            512
        } else {
            256
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    #[test]
    fn kernels_match_dequantised_matmul() {
        for isa in crate::simd::tests::paths("kernels_match_dequantised_matmul") {
            for dt in [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q8_0] {
                // 70 rows: 4 full groups and a partial one; 96 columns: an odd block count;
                // 9 rows: half of an 8-lane register; m = 1 (decode), tiles and a remainder;
                // 40 x 320: 64 rows of 320 int8 activations outgrow L1, which turns the loop
                // order on AVX2 (`x_outer`).
                for (rows, cols) in [(70, 192), (16, 96), (5, 32), (9, 64), (40, 320)] {
                    for m in [1, 3, 4, 5, 8, 71] {
                        check(isa, dt, rows, cols, m);
                    }
                }
            }
        }
    }

    /// A row's output is the same bits whatever rows share its call (one alone when
    /// decoding, 71 in a prefill chunk, any place in a tile): a prompt then gives the same
    /// logits however it is split, and an answer the same tokens in any batch.
    #[test]
    fn a_row_gives_the_same_bits_in_any_call() {
        for isa in crate::simd::tests::paths("a_row_gives_the_same_bits_in_any_call") {
            for dt in [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q8_0] {
                for (rows, cols) in [(70, 192), (40, 320), (48, 576)] {
                    let w = (noise(rows, cols, 1) + 0.3).unwrap();
                    let p = PackedQuant::from_qtensor(&QTensor::quantize(&w, dt).unwrap()).unwrap();
                    let m = 71;
                    let xs = noise(m, cols, 2)
                        .flatten_all()
                        .unwrap()
                        .to_vec1::<f32>()
                        .unwrap();
                    let mut all = vec![0f32; m * rows];
                    p.matmul_on(isa, &xs, &mut all);
                    for (from, n) in [(0, 1), (70, 1), (5, 1), (3, 2), (9, 7), (64, 7), (1, 70)] {
                        let mut part = vec![0f32; n * rows];
                        p.matmul_on(isa, &xs[from * cols..(from + n) * cols], &mut part);
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(
                            bits(&part),
                            bits(&all[from * rows..(from + n) * rows]),
                            "{isa} {dt:?} {rows}x{cols}: rows {from}..{} alone",
                            from + n
                        );
                    }
                }
            }
        }
    }

    /// `x` (`m` rows) quantised on every runnable path: each path's int8 bytes, scales and
    /// sums equal the scalar reference's exactly. Returns the reference.
    fn quantised_alike(what: &str, x: &[f32], m: usize) -> QuantX {
        let cols = x.len() / m;
        let want = quantize_x(Isa::Scalar, x, m, cols);
        for isa in crate::simd::tests::paths(what) {
            let got = quantize_x(isa, x, m, cols);
            assert_eq!(got.q, want.q, "{isa}: int8 activations");
            for (name, a, b) in [
                ("d", &got.d, &want.d),
                ("s", &got.s, &want.s),
                ("u", &got.u, &want.u),
            ] {
                let (a, b): (Vec<u32>, Vec<u32>) = (
                    a.iter().map(|v| v.to_bits()).collect(),
                    b.iter().map(|v| v.to_bits()).collect(),
                );
                assert_eq!(a, b, "{isa}: block {name}");
            }
        }
        want
    }

    /// Blocks whose largest magnitude is below `127 / f32::MAX` have a subnormal scale whose
    /// inverse is `inf`: they quantise to zeros with sum 0 on every path (the scalar sum
    /// overflowed, a panic in debug builds, and the paths wrote -128, 0 or 127), and the
    /// product is the one of the same rows with those blocks zero.
    #[test]
    fn tiny_activation_blocks_quantise_to_zero_on_every_path() {
        let normal = noise(1, 32, 3)
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let tiny_blocks: [Vec<f32>; 3] = [
            vec![1e-37; 32],
            (0..32)
                .map(|k| match k % 4 {
                    0 => -1e-37,
                    1 => 3e-38,
                    2 => -1e-40,
                    _ => 0.0,
                })
                .collect(),
            (0..32)
                .map(|k| if k == 7 { -3.5e-37 } else { 1e-45 })
                .collect(),
        ];
        let mut x = Vec::new();
        let mut zeroed = Vec::new();
        for (r, order) in [[0, 1, 2, 3], [3, 2, 1, 0]].into_iter().enumerate() {
            for b in order {
                let block = tiny_blocks.get(b).unwrap_or(&normal);
                x.extend(block.iter().map(|v| v * (1 - 2 * r as i32) as f32));
                let keep = b == 3;
                zeroed.extend(block.iter().map(|&v| {
                    if keep {
                        v * (1 - 2 * r as i32) as f32
                    } else {
                        0.0
                    }
                }));
            }
        }
        let (m, cols) = (2, 128);
        let qx = quantised_alike("tiny_activation_blocks_quantise_to_zero", &x, m);
        // row 0 holds the tiny blocks first, row 1 last
        for (row, tiny) in [(0usize, 0..3), (1, 1..4)] {
            for b in tiny {
                let at = row * cols + b * 32;
                assert!(
                    qx.q[at..at + 32].iter().all(|&q| q == 0),
                    "row {row} block {b}"
                );
                let k = row * 4 + b;
                assert_eq!((qx.d[k], qx.s[k], qx.u[k]), (0.0, 0.0, 0.0));
            }
        }
        let w = noise(20, cols, 4);
        for dt in [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q8_0] {
            let p = PackedQuant::from_qtensor(&QTensor::quantize(&w, dt).unwrap()).unwrap();
            let mut reference = vec![f32::NAN; m * 20];
            p.matmul_on(Isa::Scalar, &x, &mut reference);
            for isa in Isa::runnable() {
                let (mut got, mut want) = (vec![f32::NAN; m * 20], vec![f32::NAN; m * 20]);
                p.matmul_on(isa, &x, &mut got);
                p.matmul_on(isa, &zeroed, &mut want);
                assert_eq!(got, want, "{isa} {dt:?}: against the zeroed blocks");
                for (a, r) in got.iter().zip(&reference) {
                    assert!(
                        (a - r).abs() <= 1e-5 * (1.0 + r.abs()),
                        "{isa} {dt:?}: {a} vs {r}"
                    );
                }
            }
        }
    }

    /// A block whose scale is exactly 1 (largest magnitude 127) with values halfway between
    /// integers: every path rounds them half to even, the scalar reference too (it rounded
    /// away from zero), so the int8 bytes and products agree.
    #[test]
    fn activation_ties_round_to_even_on_every_path() {
        let mut block = vec![0f32; 32];
        let ties = [127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -126.5, 125.5];
        block[..ties.len()].copy_from_slice(&ties);
        let even = [127i8, 0, 2, 2, 0, -2, -2, 4, -126, 126];
        let x: Vec<f32> = block.iter().chain(&block).copied().collect();
        let qx = quantised_alike("activation_ties_round_to_even_on_every_path", &x, 1);
        assert_eq!(qx.d, [1.0, 1.0]);
        for b in 0..2 {
            assert_eq!(qx.q[b * 32..b * 32 + even.len()], even, "block {b}");
        }
        // the kernel-vs-reference check on this row
        for isa in Isa::runnable() {
            for dt in [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q8_0] {
                let w = (noise(16, 64, 5) + 0.3).unwrap();
                let p = PackedQuant::from_qtensor(&QTensor::quantize(&w, dt).unwrap()).unwrap();
                let (mut got, mut want) = (vec![f32::NAN; 16], vec![f32::NAN; 16]);
                p.matmul_on(isa, &x, &mut got);
                p.matmul_on(Isa::Scalar, &x, &mut want);
                let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
                for (a, r) in got.iter().zip(&want) {
                    assert!(
                        (a - r).abs() < 1e-5 * scale,
                        "{isa} {dt:?}: {a} vs scalar {r}"
                    );
                }
            }
        }
    }

    /// A matrix without columns (or rows) is not packed (`matmul` would divide by zero
    /// counting activation rows); the smallest real one is.
    #[test]
    fn empty_matrices_are_refused() {
        for dt in [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q8_0] {
            for (rows, cols, packs) in [(4, 0, false), (0, 32, false), (1, 32, true)] {
                let w = Tensor::zeros((rows, cols), candle_core::DType::F32, &Device::Cpu).unwrap();
                let q = QTensor::quantize(&w, dt).unwrap();
                assert_eq!(q.shape().dims(), [rows, cols]);
                let p = PackedQuant::from_qtensor(&q);
                assert_eq!(p.is_some(), packs, "{dt:?} {rows}x{cols}");
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

    /// One product on `isa` against (a) the dequantised f32 matmul, within the error of
    /// int8 activations, and (b) the scalar reference, which computes the same integer sums:
    /// equal up to float summation order.
    fn check(isa: Isa, dt: GgmlDType, rows: usize, cols: usize, m: usize) {
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
        let xs = x.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let mut got = vec![f32::NAN; m * rows];
        p.matmul_on(isa, &xs, &mut got);
        let mut reference = vec![f32::NAN; m * rows];
        p.matmul_on(Isa::Scalar, &xs, &mut reference);
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        for ((a, b), r) in got.iter().zip(&want).zip(&reference) {
            assert!(
                (a - b).abs() < 0.02 * scale,
                "{isa} {dt:?} {rows}x{cols} m={m}: {a} vs dequantised {b}"
            );
            assert!(
                (a - r).abs() < 1e-4 * scale,
                "{isa} {dt:?} {rows}x{cols} m={m}: {a} vs scalar {r}"
            );
        }
    }
}

#[cfg(test)]
mod throughput {
    use super::*;
    use candle_core::{Device, Tensor};

    /// Kernel throughput per path on one SmolLM2-sized product (3,072 x 576, weights in
    /// cache), for 1, 4, 8 and 64 activation rows. Prints figures, asserts nothing:
    /// `cargo test --release -p hat-model --lib -- --ignored kernel_throughput --nocapture`.
    #[test]
    #[ignore]
    fn kernel_throughput() {
        let (rows, cols) = (3072, 576);
        let w = Tensor::randn(0f32, 1.0, (rows, cols), &Device::Cpu).unwrap();
        for dt in [GgmlDType::Q4_0, GgmlDType::Q8_0] {
            let p = PackedQuant::from_qtensor(&QTensor::quantize(&w, dt).unwrap()).unwrap();
            for isa in Isa::runnable() {
                if isa == Isa::Scalar {
                    continue;
                }
                for m in [1usize, 4, 8, 64] {
                    let x = vec![0.5f32; m * cols];
                    let mut out = vec![0f32; m * rows];
                    let iters = 2000 / m.min(16);
                    let t = std::time::Instant::now();
                    for _ in 0..iters {
                        p.matmul_on(isa, &x, &mut out);
                    }
                    let s = t.elapsed().as_secs_f64();
                    let gmacs = (iters * m * rows * cols) as f64 / s / 1e9;
                    eprintln!(
                        "{dt:?} {isa} m={m}: {:.1} us/call, {gmacs:.1} GMAC/s",
                        s / iters as f64 * 1e6
                    );
                }
            }
        }
    }
}
