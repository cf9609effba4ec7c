//! Mixed-precision matrix products for training on x86-64 CPUs with AVX-512 BF16: operands
//! rounded to bf16, products accumulated in f32 (`vdpbf16ps`, twice the multiply rate of f32
//! FMAs), as mixed-precision training on accelerators does. Weights, gradients, the optimiser
//! state and every other op stay f32; only the GEMMs of the dense layers (forward, input
//! gradient, weight gradient) and of the output layer take this path, and only when
//! [`set_enabled`] asked for it (the trainer's `matmul = "bf16"`): f32 stays the default and
//! the reference the gradient checks use.
//!
//! `c = [c +] beta * a b`: `a` is packed into rows of bf16 pairs along `k`, `b` into panels
//! of 16 columns holding each pair of `k` for the 16 columns side by side; a tile of 8 rows x
//! 32 columns keeps 16 f32 accumulators in registers while it walks a block of `k`. Blocks of
//! 256 pairs of `k` and 512 columns keep a block of `b` in L2 while the rows stream past it.

use std::arch::x86_64::*;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::simd::x86::{as_bh, as_si, bf16_supported, interleave_bf16};

/// Rows per tile.
const MR: usize = 8;
/// Columns per packed panel.
const PANEL: usize = 16;
/// Columns per tile (two panels).
const NR: usize = 2 * PANEL;
/// Pairs of `k` per block.
const KC: usize = 256;
/// Columns per block.
const NC: usize = 512;

static ON: AtomicBool = AtomicBool::new(false);

/// Whether this CPU has the instructions of this path.
pub fn supported() -> bool {
    bf16_supported()
}

/// Asks for bf16 products in training (`true`) or f32 ones; `Err` when the CPU lacks the
/// instructions (the setting is left unchanged).
pub fn set_enabled(on: bool) -> Result<(), String> {
    if on && !supported() {
        return Err(
            "bf16 matrix products need a CPU with AVX-512 BF16 (avx512bf16); this one has none: use matmul = \"f32\"".into(),
        );
    }
    ON.store(on, Ordering::Relaxed);
    Ok(())
}

/// Whether training's products take this path.
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// One bf16 value's bits from `x`, rounded to nearest even (as `vcvtne2ps2bf16`).
#[inline]
fn bf16_bits(x: f32) -> u32 {
    half::bf16::from_f32(x).to_bits() as u32
}

/// A raw pointer that may cross to rayon's threads (each task writes its own rows).
#[derive(Clone, Copy)]
struct Ptr<T>(*mut T);
// SAFETY: the tasks that share one write disjoint parts of what it points to.
unsafe impl<T> Send for Ptr<T> {}
unsafe impl<T> Sync for Ptr<T> {}

impl<T> Ptr<T> {
    /// The pointer (a method, so that closures capture the `Send` wrapper, not its field).
    fn get(self) -> *mut T {
        self.0
    }
}

/// `c (m x n, row stride ldc) = [c +] beta * a (m x k) * b (k x n)` in bf16 products with f32
/// accumulation; `a` and `b` as (pointer, row stride, column stride) in elements. Uses every
/// thread of the pool when `par`.
///
/// # Safety
/// The CPU has [`supported`]'s instructions; the pointers cover the matrices their strides
/// describe, and `c` does not overlap `a` or `b`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm(
    (m, n, k): (usize, usize, usize),
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
    a: (*const f32, usize, usize),
    b: (*const f32, usize, usize),
    beta: f32,
    par: bool,
) {
    use rayon::prelude::*;
    let kp = k.div_ceil(2);
    let panels = n.div_ceil(PANEL).next_multiple_of(2);
    let tiles = m.div_ceil(MR);
    // `a` in tiles of 8 rows, pair-major: pair `p` of the tile's row `r` at `p * 8 + r`, so
    // that a step of the kernel broadcasts its 8 values from one 32-byte run
    let mut ap = vec![0u32; tiles * kp * MR];
    let mut bp = vec![0u32; panels * kp * PANEL];
    let pa = Ptr(a.0 as *mut f32);
    let pb = Ptr(b.0 as *mut f32);
    // `a` stored transposed (a weight gradient's `dy^T`, rows adjacent): two tiles at a time
    // from each contiguous run of a column; otherwise row by row
    let transposed = a.1 == 1 && a.2 != 1;
    // SAFETY (both packs): each task reads within the operand and writes its own tiles of
    // `ap` / its own panel of `bp`.
    let pack_a = |(t, tiles2): (usize, &mut [u32])| unsafe {
        let r0 = t * 2 * MR;
        let rows = (2 * MR).min(m - r0);
        if transposed && rows == 2 * MR {
            pack_transposed16(pa.get().add(r0), a.2, k, kp, tiles2);
        } else {
            let mut pairs = vec![0u32; kp];
            for r in 0..rows {
                pack_row(pa.get().add((r0 + r) * a.1), a.2, k, &mut pairs);
                let tile = &mut tiles2[r / MR * kp * MR..];
                for (p, &x) in pairs.iter().enumerate() {
                    tile[p * MR + r % MR] = x;
                }
            }
        }
    };
    let pack_b = |(p, panel): (usize, &mut [u32])| unsafe {
        // the panel that rounds the count up to even may have no columns: it stays zero (and
        // its first column would lie past the end of `b`, out of `ptr::add`'s bounds)
        let j0 = p * PANEL;
        if j0 < n {
            pack_panel(pb.get().add(j0 * b.2), b.1, b.2, k, n - j0, panel);
        }
    };
    if par {
        ap.par_chunks_mut(2 * kp * MR).enumerate().for_each(pack_a);
        bp.par_chunks_exact_mut(kp * PANEL)
            .enumerate()
            .for_each(pack_b);
    } else {
        ap.chunks_mut(2 * kp * MR).enumerate().for_each(pack_a);
        bp.chunks_exact_mut(kp * PANEL).enumerate().for_each(pack_b);
    }
    let pc = Ptr(c);
    let beta_v = beta;
    for k0 in (0..kp).step_by(KC) {
        let kn = KC.min(kp - k0);
        // the first block of k writes (or adds to) c, the later ones add
        let add = accumulate || k0 > 0;
        for n0 in (0..n).step_by(NC) {
            let n1 = (n0 + NC).min(n);
            let (ap, bp) = (&ap, &bp);
            // SAFETY: the tile reads its rows of `ap` and the block's panels of `bp`, and
            // writes only its rows of `c` within columns n0..n1.
            let tile = |t: usize| unsafe {
                let r0 = t * MR;
                let rows = MR.min(m - r0);
                for j in (n0..n1).step_by(NR) {
                    let cols = NR.min(n1 - j);
                    tile_any(
                        rows,
                        ap.as_ptr().add((t * kp + k0) * MR),
                        bp.as_ptr().add((j / PANEL * kp + k0) * PANEL),
                        kp * PANEL,
                        kn,
                        pc.get().add(r0 * ldc + j),
                        ldc,
                        cols,
                        add,
                        beta_v,
                    );
                }
            };
            if par {
                (0..tiles).into_par_iter().for_each(tile);
            } else {
                (0..tiles).for_each(tile);
            }
        }
    }
}

/// Row `a[0], a[cs], ... a[(k - 1) cs]` as bf16 pairs (zero past `k`).
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pack_row(a: *const f32, cs: usize, k: usize, dst: &mut [u32]) {
    let mut p = 0;
    if cs == 1 {
        while 2 * p + 32 <= k {
            let lo = _mm512_loadu_ps(a.add(2 * p));
            let hi = _mm512_loadu_ps(a.add(2 * p + 16));
            _mm512_storeu_si512(
                dst.as_mut_ptr().add(p).cast(),
                as_si(_mm512_cvtne2ps_pbh(hi, lo)),
            );
            p += 16;
        }
    }
    while p < dst.len() {
        let x0 = *a.add(2 * p * cs);
        let x1 = if 2 * p + 1 < k {
            *a.add((2 * p + 1) * cs)
        } else {
            0.0
        };
        dst[p] = bf16_bits(x0) | bf16_bits(x1) << 16;
        p += 1;
    }
}

/// 16 rows of an `a` whose rows are adjacent (`a[i + l * cs]`) into two tiles (`8 * kp`
/// each, pair-major).
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pack_transposed16(a: *const f32, cs: usize, k: usize, kp: usize, dst: &mut [u32]) {
    let idx = interleave_bf16();
    let (t0, t1) = dst.split_at_mut(kp * MR);
    for p in 0..kp {
        let r0 = _mm512_loadu_ps(a.add(2 * p * cs));
        let r1 = if 2 * p + 1 < k {
            _mm512_loadu_ps(a.add((2 * p + 1) * cs))
        } else {
            _mm512_setzero_ps()
        };
        let both = _mm512_permutexvar_epi16(idx, as_si(_mm512_cvtne2ps_pbh(r1, r0)));
        _mm256_storeu_si256(
            t0.as_mut_ptr().add(p * MR).cast(),
            _mm512_castsi512_si256(both),
        );
        _mm256_storeu_si256(
            t1.as_mut_ptr().add(p * MR).cast(),
            _mm512_extracti64x4_epi64::<1>(both),
        );
    }
}

/// Columns `0..min(cols, 16)` of `b` (from its first column; `rs`, `cs` strides) as one
/// panel: pair `p` of column `j` at `p * 16 + j` (zero past `k` and past the columns).
/// `cols` is at least 1: `b` points at a column of the operand.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pack_panel(b: *const f32, rs: usize, cs: usize, k: usize, cols: usize, dst: &mut [u32]) {
    debug_assert!(cols > 0, "a panel past the operand's last column");
    let cols = cols.min(PANEL);
    let kp = k.div_ceil(2);
    if cs == 1 && cols == PANEL {
        // rows contiguous: two rows' 16 values, rounded, interleaved into 16 pairs
        let idx = interleave_bf16();
        for p in 0..kp {
            let r0 = _mm512_loadu_ps(b.add(2 * p * rs));
            let r1 = if 2 * p + 1 < k {
                _mm512_loadu_ps(b.add((2 * p + 1) * rs))
            } else {
                _mm512_setzero_ps()
            };
            let both = as_si(_mm512_cvtne2ps_pbh(r1, r0));
            _mm512_storeu_si512(
                dst.as_mut_ptr().add(p * PANEL).cast(),
                _mm512_permutexvar_epi16(idx, both),
            );
        }
        return;
    }
    if rs == 1 {
        // columns contiguous: each column's pairs, scattered 16 apart
        let mut pairs = vec![0u32; kp];
        for j in 0..cols {
            pack_row(b.add(j * cs), 1, k, &mut pairs);
            for (p, &x) in pairs.iter().enumerate() {
                dst[p * PANEL + j] = x;
            }
        }
        return;
    }
    for p in 0..kp {
        for j in 0..cols {
            let x0 = *b.add(2 * p * rs + j * cs);
            let x1 = if 2 * p + 1 < k {
                *b.add((2 * p + 1) * rs + j * cs)
            } else {
                0.0
            };
            dst[p * PANEL + j] = bf16_bits(x0) | bf16_bits(x1) << 16;
        }
    }
}

/// [`tile`] for `rows` (1..=8) rows.
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn tile_any(
    rows: usize,
    a: *const u32,
    b: *const u32,
    panel_stride: usize,
    kn: usize,
    c: *mut f32,
    ldc: usize,
    cols: usize,
    add: bool,
    beta: f32,
) {
    macro_rules! go {
        ($r:literal) => {
            tile::<$r>(a, b, panel_stride, kn, c, ldc, cols, add, beta)
        };
    }
    match rows {
        8 => go!(8),
        7 => go!(7),
        6 => go!(6),
        5 => go!(5),
        4 => go!(4),
        3 => go!(3),
        2 => go!(2),
        _ => go!(1),
    }
}

/// `R` rows x up to 32 columns of `c` (`cols` of them) from `kn` pairs of `k`: a tile of `a`
/// (pair `p` of row `r` at `p * 8 + r`) against two panels of `b` (`panel_stride` apart), `beta` times the sum
/// written to `c` or added to it.
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn tile<const R: usize>(
    a: *const u32,
    b: *const u32,
    panel_stride: usize,
    kn: usize,
    c: *mut f32,
    ldc: usize,
    cols: usize,
    add: bool,
    beta: f32,
) {
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    let b1 = b.add(panel_stride);
    for p in 0..kn {
        let v0 = as_bh(_mm512_loadu_si512(b.add(p * PANEL).cast()));
        let v1 = as_bh(_mm512_loadu_si512(b1.add(p * PANEL).cast()));
        for (r, acc) in acc.iter_mut().enumerate() {
            let x = as_bh(_mm512_set1_epi32(*a.add(p * MR + r) as i32));
            acc[0] = _mm512_dpbf16_ps(acc[0], x, v0);
            acc[1] = _mm512_dpbf16_ps(acc[1], x, v1);
        }
    }
    let bv = _mm512_set1_ps(beta);
    let m0: __mmask16 = if cols >= PANEL {
        0xffff
    } else {
        (1u32 << cols) as u16 - 1
    };
    let m1: __mmask16 = if cols >= NR {
        0xffff
    } else if cols <= PANEL {
        0
    } else {
        (1u32 << (cols - PANEL)) as u16 - 1
    };
    for (r, acc) in acc.iter().enumerate() {
        let row = c.add(r * ldc);
        for (h, (&v, mask)) in acc.iter().zip([m0, m1]).enumerate() {
            let at = row.add(h * PANEL);
            let mut y = _mm512_mul_ps(v, bv);
            if add {
                y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, at));
            }
            _mm512_mask_storeu_ps(at, mask, y);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[c +] beta * a b` in f64 over bf16-rounded operands.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        (m, n, k): (usize, usize, usize),
        c: &mut [f32],
        ldc: usize,
        accumulate: bool,
        a: (&[f32], usize, usize),
        b: (&[f32], usize, usize),
        beta: f32,
    ) {
        let r = |x: f32| half::bf16::from_f32(x).to_f32() as f64;
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k)
                    .map(|l| r(a.0[i * a.1 + l * a.2]) * r(b.0[l * b.1 + j * b.2]))
                    .sum();
                let v = beta as f64 * s;
                let o = &mut c[i * ldc + j];
                *o = if accumulate { *o + v as f32 } else { v as f32 };
            }
        }
    }

    #[test]
    fn products_match_the_rounded_reference_in_every_layout() {
        if !supported() {
            // this CPU's path is f32: asking for bf16 is refused, the setting stays off
            assert!(set_enabled(true).unwrap_err().contains("avx512bf16"));
            assert!(!enabled());
            eprintln!("train bf16 products not run: the CPU lacks avx512bf16 (or avx512f/bw)");
            return;
        }
        let mut seed = 7u64;
        let mut rnd = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
        };
        // tails in every dimension, k odd and longer than a block, n past a block; n = 8 and
        // 48 (a LoRA rank, three panels) end on a panel that only pads the count to even
        for (m, n, k) in [
            (1, 1, 1),
            (5, 8, 19),
            (12, 48, 40),
            (9, 33, 5),
            (17, 70, 67),
            (8, 530, 600),
            (20, 16, 513),
        ] {
            for (a_t, b_t) in [(false, false), (true, false), (false, true), (true, true)] {
                for (accumulate, beta, par) in [(false, 1.0, false), (true, 0.5, true)] {
                    let av: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
                    let bv: Vec<f32> = (0..k * n).map(|_| rnd()).collect();
                    // (row stride, column stride) of a row-major or transposed layout
                    let sa = if a_t { (1, m) } else { (k, 1) };
                    let sb = if b_t { (1, k) } else { (n, 1) };
                    let ldc = n + 3;
                    let c0: Vec<f32> = (0..m * ldc).map(|_| rnd()).collect();
                    let mut want = c0.clone();
                    reference(
                        (m, n, k),
                        &mut want,
                        ldc,
                        accumulate,
                        (&av, sa.0, sa.1),
                        (&bv, sb.0, sb.1),
                        beta,
                    );
                    let mut got = c0.clone();
                    unsafe {
                        gemm(
                            (m, n, k),
                            got.as_mut_ptr(),
                            ldc,
                            accumulate,
                            (av.as_ptr(), sa.0, sa.1),
                            (bv.as_ptr(), sb.0, sb.1),
                            beta,
                            par,
                        );
                    }
                    for i in 0..m {
                        for j in 0..ldc {
                            let (g, w) = (got[i * ldc + j], want[i * ldc + j]);
                            if j >= n {
                                // past the columns: untouched
                                assert_eq!(g, c0[i * ldc + j], "m={m} n={n} k={k} ({i},{j})");
                            } else {
                                assert!(
                                    (g - w).abs() <= 1e-4 * (1.0 + w.abs()) + 1e-5 * k as f32,
                                    "m={m} n={n} k={k} a_t={a_t} b_t={b_t} acc={accumulate} ({i},{j}): {g} vs {w}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// Throughput against the f32 GEMM on the dense layers' shapes (`cargo test --release -p
    /// hat-model --lib -- --ignored bf16_gemm_throughput --nocapture`).
    #[test]
    #[ignore]
    fn bf16_gemm_throughput() {
        // without AVX-512 BF16 there is no bf16 product: measure the f32 one this CPU trains with
        let bf16 = supported();
        if !bf16 {
            eprintln!("no AVX-512 BF16 on this CPU: the f32 GEMM alone");
        }
        for (m, n, k, at, bt) in [
            (2048, 1536, 576, false, true),  // forward: x W^T
            (2048, 576, 1536, false, false), // input gradient: dy W
            (1536, 576, 2048, true, false),  // weight gradient: dy^T x
        ] {
            let a = vec![0.5f32; m * k];
            let b = vec![0.25f32; k * n];
            let sa = if at { (1, m) } else { (k, 1) };
            let sb = if bt { (1, k) } else { (n, 1) };
            let mut c = vec![0f32; m * n];
            let time = |bf: bool, c: &mut [f32]| {
                let t = std::time::Instant::now();
                for _ in 0..3 {
                    unsafe {
                        if bf {
                            gemm(
                                (m, n, k),
                                c.as_mut_ptr(),
                                n,
                                false,
                                (a.as_ptr(), sa.0, sa.1),
                                (b.as_ptr(), sb.0, sb.1),
                                1.0,
                                true,
                            );
                        } else {
                            super::super::attention::gemm_on(
                                (m, n, k),
                                c.as_mut_ptr(),
                                n,
                                false,
                                (a.as_ptr(), sa.0, sa.1),
                                (b.as_ptr(), sb.0, sb.1),
                                1.0,
                                gemm::Parallelism::Rayon(rayon::current_num_threads()),
                            );
                        }
                    }
                }
                (3 * m * n * k) as f64 / t.elapsed().as_secs_f64() / 1e9
            };
            let f = time(false, &mut c);
            if bf16 {
                let g = time(true, &mut c);
                eprintln!(
                    "m={m} n={n} k={k}: f32 {f:.1} GMAC/s, bf16 {g:.1} GMAC/s ({:.2}x)",
                    g / f
                );
            } else {
                eprintln!("m={m} n={n} k={k}: f32 {f:.1} GMAC/s");
            }
        }
    }
}
