//! Which vector instructions the CPU kernels use, and the vectorised element-wise math of the
//! inference path (`exp`, the unnormalised softmax of attention rows, log-sum-exp over the
//! vocabulary, SwiGLU's `silu(gate) * up`).
//!
//! One binary serves every CPU: the kernels are compiled for each instruction set with
//! `#[target_feature]` and [`isa`] picks the best one the CPU has, once, at run time
//! (`target-cpu=native` is not needed). `HAT_SIMD=avx512|avx2-vnni|avx2|neon|neon-dot|scalar` forces a
//! path for tests and benchmarks; a forced path the CPU cannot run is refused with a warning
//! and the best available one is used instead. Every path is tested against the scalar
//! reference ([`Isa::runnable`] lists those this CPU can run).

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// An instruction-set path of the CPU kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Plain Rust loops: the reference every other path is tested against.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C (integer dot products with `vpmaddubsw`).
    Avx2,
    /// The AVX2 path with 256-bit `vpdpbusd` for the quantised matmul: AVX-VNNI (Intel since
    /// Alder Lake), or its EVEX form on CPUs with AVX-512 VNNI + VL (which is how this path is
    /// tested on AVX-512 machines; they run [`Isa::Avx512`] by default).
    Avx2Vnni,
    /// x86-64 AVX-512 F/BW/VL + VNNI (`vpdpbusd`).
    Avx512,
    /// aarch64 Advanced SIMD (integer dot products with `smull` / `sadalp`).
    Neon,
    /// aarch64 Advanced SIMD with the dot-product extension (`sdot`).
    NeonDot,
}

impl Isa {
    /// Every path, best first within each architecture.
    pub const ALL: [Isa; 6] = [
        Isa::Avx512,
        Isa::Avx2Vnni,
        Isa::Avx2,
        Isa::NeonDot,
        Isa::Neon,
        Isa::Scalar,
    ];

    /// The name `HAT_SIMD` takes and benchmarks print.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx2Vnni => "avx2-vnni",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
            Isa::NeonDot => "neon-dot",
        }
    }

    /// Parses a `HAT_SIMD` value.
    pub fn from_name(s: &str) -> Option<Isa> {
        Isa::ALL
            .into_iter()
            .find(|i| i.name().eq_ignore_ascii_case(s.trim()))
    }

    /// Whether this CPU can run the path; `Err` says what it lacks.
    pub fn check(self) -> Result<(), String> {
        // (feature, present) pairs; the names of the absent ones
        fn absent(features: &[(&'static str, bool)]) -> Vec<&'static str> {
            features
                .iter()
                .filter_map(|&(n, ok)| (!ok).then_some(n))
                .collect()
        }
        #[cfg(target_arch = "x86_64")]
        let avx2 = || {
            [
                ("avx2", std::is_x86_feature_detected!("avx2")),
                ("fma", std::is_x86_feature_detected!("fma")),
                ("f16c", std::is_x86_feature_detected!("f16c")),
            ]
        };
        let missing: Vec<&str> = match self {
            Isa::Scalar => Vec::new(),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => absent(&avx2()),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Vnni => {
                let mut m = absent(&avx2());
                if !x86_vex_vnni() && !x86_evex_vnni() {
                    m.push("avxvnni (or avx512vnni with avx512vl)");
                }
                m
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => absent(&[
                ("avx512f", std::is_x86_feature_detected!("avx512f")),
                ("avx512bw", std::is_x86_feature_detected!("avx512bw")),
                ("avx512vl", std::is_x86_feature_detected!("avx512vl")),
                ("avx512vnni", std::is_x86_feature_detected!("avx512vnni")),
                ("f16c", std::is_x86_feature_detected!("f16c")),
            ]),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => absent(&[("neon", std::arch::is_aarch64_feature_detected!("neon"))]),
            #[cfg(target_arch = "aarch64")]
            Isa::NeonDot => absent(&[
                ("neon", std::arch::is_aarch64_feature_detected!("neon")),
                (
                    "dotprod",
                    std::arch::is_aarch64_feature_detected!("dotprod"),
                ),
            ]),
            #[allow(unreachable_patterns)]
            _ => return Err(format!("{} needs another architecture", self.name())),
        };
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("the CPU lacks {}", missing.join(", ")))
        }
    }

    /// The paths this CPU can run, best first (always ends with [`Isa::Scalar`]).
    pub fn runnable() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.check().is_ok()).collect()
    }

    /// The best path this CPU can run.
    pub fn best() -> Isa {
        Isa::runnable()[0]
    }

    /// In debug builds, panics unless this CPU runs the path: the safe `*_on` functions run
    /// the path's `#[target_feature]` code on their caller's word, and call this first.
    #[inline]
    pub(crate) fn debug_assert_runs(self) {
        #[cfg(debug_assertions)]
        {
            static RUNNABLE: std::sync::OnceLock<Vec<Isa>> = std::sync::OnceLock::new();
            if !RUNNABLE.get_or_init(Isa::runnable).contains(&self) {
                panic!(
                    "the {self} path was asked for on a CPU that cannot run it: {}",
                    self.check().err().unwrap_or_default()
                );
            }
        }
    }
}

/// Whether the CPU has AVX-VNNI (the VEX-encoded 256-bit `vpdpbusd`).
#[cfg(target_arch = "x86_64")]
pub(crate) fn x86_vex_vnni() -> bool {
    static VEX: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *VEX.get_or_init(|| std::is_x86_feature_detected!("avxvnni"))
}

/// Whether the CPU has the EVEX-encoded 256-bit `vpdpbusd` (AVX-512 VNNI + VL).
#[cfg(target_arch = "x86_64")]
pub(crate) fn x86_evex_vnni() -> bool {
    std::is_x86_feature_detected!("avx512vnni") && std::is_x86_feature_detected!("avx512vl")
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The path in use: the best this CPU runs, or `HAT_SIMD` when the CPU can run that (`HAT_NO_SIMD`
/// set means `scalar`). Decided once per process.
pub fn isa() -> Isa {
    static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
    *ISA.get_or_init(|| {
        let forced = std::env::var("HAT_SIMD").ok().filter(|s| !s.is_empty());
        if forced.is_none() && std::env::var_os("HAT_NO_SIMD").is_some() {
            return Isa::Scalar;
        }
        let Some(name) = forced else {
            return Isa::best();
        };
        let best = Isa::best();
        match Isa::from_name(&name) {
            Some(i) => match i.check() {
                Ok(()) => i,
                Err(why) => {
                    eprintln!("warning: HAT_SIMD={name} cannot run here ({why}); using {best}");
                    best
                }
            },
            None => {
                let names: Vec<&str> = Isa::ALL.iter().map(|i| i.name()).collect();
                eprintln!(
                    "warning: HAT_SIMD={name} is not a path ({}); using {best}",
                    names.join(", ")
                );
                best
            }
        }
    })
}

/// The kernels of the f32 GEMMs (the `gemm` crate under candle's matmuls and the training
/// ops), which pick their own path from the CPU: `avx512` where the build has the
/// `avx512-gemm` feature and the CPU AVX-512F, `fma` on other x86-64 CPUs with FMA, `neon` on
/// aarch64. `HAT_SIMD` does not change them.
pub fn gemm_path() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if cfg!(feature = "avx512-gemm") && std::arch::is_x86_feature_detected!("avx512f") {
            "avx512"
        } else if std::arch::is_x86_feature_detected!("fma") {
            "fma"
        } else {
            "scalar"
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        "neon"
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        "scalar"
    }
}

/// The CPU's SIMD-related feature flags, for benchmark headers.
pub fn cpu_flags() -> String {
    let mut on: Vec<&str> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! flags {
            ($($f:tt),*) => {
                $(if std::is_x86_feature_detected!($f) { on.push($f); })*
            };
        }
        flags!(
            "sse4.2",
            "avx",
            "avx2",
            "fma",
            "f16c",
            "avx512f",
            "avx512bw",
            "avx512vl",
            "avx512vnni",
            "avx512bf16",
            "avxvnni"
        );
    }
    #[cfg(target_arch = "aarch64")]
    {
        macro_rules! flags {
            ($($f:tt),*) => {
                $(if std::arch::is_aarch64_feature_detected!($f) { on.push($f); })*
            };
        }
        flags!("neon", "fp16", "dotprod", "i8mm", "sve");
    }
    if on.is_empty() {
        "none".into()
    } else {
        on.join(" ")
    }
}

/// Replaces `x` by `exp(x - max)` and returns the sum; a row of `-inf` (no mass anywhere)
/// becomes zeros with sum 0.
pub fn softmax_unnormalised(x: &mut [f32]) -> f32 {
    softmax_unnormalised_on(isa(), x)
}

/// [`softmax_unnormalised`] on a given path, which the CPU must run ([`Isa::check`]).
pub(crate) fn softmax_unnormalised_on(isa: Isa, x: &mut [f32]) -> f32 {
    isa.debug_assert_runs();
    match isa {
        // SAFETY (each arm): `isa()` or the caller checked the CPU runs the path.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::softmax_avx512(x) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx2Vnni => unsafe { x86::softmax_avx2(x) },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon | Isa::NeonDot => unsafe { neon::softmax(x) },
        _ => {
            let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            if max == f32::NEG_INFINITY {
                x.fill(0.0);
                return 0.0;
            }
            let mut sum = 0.0;
            for v in x.iter_mut() {
                *v = (*v - max).exp();
                sum += *v;
            }
            sum
        }
    }
}

/// The largest element of `x` (`-inf` for an empty slice), on a given path the CPU runs.
pub(crate) fn max_on(isa: Isa, x: &[f32]) -> f32 {
    isa.debug_assert_runs();
    match isa {
        // SAFETY (each arm): the caller checked the CPU runs the path.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::max_avx512(x) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx2Vnni => unsafe { x86::max_avx2(x) },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon | Isa::NeonDot => unsafe { neon::max(x) },
        _ => x.iter().copied().fold(f32::NEG_INFINITY, f32::max),
    }
}

/// Replaces `x` by `exp(x - shift)` and returns the sum, on a given path the CPU runs. With
/// `shift` a log-sum-exp of a row that holds `x`, these are the row's probabilities directly.
pub(crate) fn exp_shift_on(isa: Isa, x: &mut [f32], shift: f32) -> f32 {
    isa.debug_assert_runs();
    match isa {
        // SAFETY (each arm): the caller checked the CPU runs the path.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::exp_shift_avx512(x, shift) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx2Vnni => unsafe { x86::exp_shift_avx2(x, shift) },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon | Isa::NeonDot => unsafe { neon::exp_shift(x, shift) },
        _ => {
            let mut sum = 0.0;
            for v in x.iter_mut() {
                *v = (*v - shift).exp();
                sum += *v;
            }
            sum
        }
    }
}

/// `ln(sum(exp(x)))`, computed stably (used for the log-probability of every generated
/// token over the whole vocabulary, so it runs once per token on ~50k logits); `-inf` for a
/// row of `-inf` or an empty one.
pub fn log_sum_exp(x: &[f32]) -> f32 {
    log_sum_exp_on(isa(), x)
}

/// [`log_sum_exp`] on a given path, which the CPU must run.
pub(crate) fn log_sum_exp_on(isa: Isa, x: &[f32]) -> f32 {
    isa.debug_assert_runs();
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::log_sum_exp_avx512(x) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx2Vnni => unsafe { x86::log_sum_exp_avx2(x) },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon | Isa::NeonDot => unsafe { neon::log_sum_exp(x) },
        _ => {
            let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            if max == f32::NEG_INFINITY {
                return max;
            }
            let sum: f64 = x.iter().map(|&v| ((v - max) as f64).exp()).sum();
            sum.ln() as f32 + max
        }
    }
}

/// `out[r, j] = silu(y[r, j]) * y[r, i + j]` for `y` of shape `(rows, 2i)` (gate and up
/// stacked by the fused projection). Rows are split over rayon's threads.
pub fn silu_mul(y: &[f32], i: usize, out: &mut [f32]) {
    let isa = isa();
    let rows = out.len() / i.max(1);
    // below a prefill's worth of rows the handoff costs more than the work
    if rows < 16 || rayon::current_num_threads() == 1 {
        return silu_mul_on(isa, y, i, out);
    }
    use rayon::prelude::*;
    let per = rows.div_ceil(4 * rayon::current_num_threads()).max(1);
    y.par_chunks(2 * i * per)
        .zip(out.par_chunks_mut(i * per))
        .for_each(|(y, o)| silu_mul_on(isa, y, i, o));
}

/// [`silu_mul`] on a given path, which the CPU must run.
pub(crate) fn silu_mul_on(isa: Isa, y: &[f32], i: usize, out: &mut [f32]) {
    isa.debug_assert_runs();
    for (yr, o) in y.chunks_exact(2 * i).zip(out.chunks_exact_mut(i)) {
        let (g, u) = yr.split_at(i);
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { x86::silu_mul_avx512(g, u, o) },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx2Vnni => unsafe { x86::silu_mul_avx2(g, u, o) },
            #[cfg(target_arch = "aarch64")]
            Isa::Neon | Isa::NeonDot => unsafe { neon::silu_mul(g, u, o) },
            _ => {
                for ((o, g), u) in o.iter_mut().zip(g).zip(u) {
                    *o = g / (1.0 + (-g).exp()) * u;
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The paths to test on this CPU; prints the ones skipped and why, so a run on a smaller
    /// CPU says what it did not cover.
    pub(crate) fn paths(what: &str) -> Vec<Isa> {
        for i in Isa::ALL {
            if let Err(why) = i.check() {
                eprintln!("{what}: {} path not tested: {why}", i.name());
            }
        }
        Isa::runnable()
    }

    #[test]
    fn path_names_round_trip_and_scalar_always_runs() {
        for i in Isa::ALL {
            assert_eq!(Isa::from_name(i.name()), Some(i));
        }
        assert_eq!(Isa::from_name("AVX2"), Some(Isa::Avx2));
        assert_eq!(Isa::from_name("sse"), None);
        assert_eq!(*Isa::runnable().last().unwrap(), Isa::Scalar);
        assert!(Isa::runnable().contains(&isa()));
        // the architecture's own vector unit is there on every CPU this is built for
        #[cfg(target_arch = "aarch64")]
        assert!(Isa::runnable().contains(&Isa::Neon));
    }

    #[test]
    fn vector_exp_is_accurate() {
        for isa in paths("vector_exp_is_accurate") {
            // lengths around every vector width, and values down to underflow
            for n in [1usize, 3, 4, 7, 8, 15, 16, 17, 33, 1000] {
                let mut xs: Vec<f32> = (0..n).map(|i| -(i as f32) * 0.09).collect();
                if n == 1000 {
                    xs[999] = -200.0;
                }
                let max = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let want: Vec<f32> = xs.iter().map(|x| (x - max).exp()).collect();
                let sum = softmax_unnormalised_on(isa, &mut xs);
                for (a, b) in xs.iter().zip(&want) {
                    assert!(
                        (a - b).abs() <= 1e-6 * b.max(1e-30) + 1e-38,
                        "{isa} n={n}: {a} vs {b}"
                    );
                }
                let ws = want.iter().sum::<f32>();
                assert!((sum - ws).abs() < 1e-5 * ws, "{isa} n={n}: {sum} vs {ws}");
            }
        }
    }

    #[test]
    fn max_and_shifted_exp_match_scalar() {
        for isa in paths("max_and_shifted_exp_match_scalar") {
            for n in [0usize, 1, 7, 8, 9, 16, 17, 100] {
                let x: Vec<f32> = (0..n).map(|k| ((k * 37 % 23) as f32) * 0.5 - 6.0).collect();
                let want = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                assert_eq!(max_on(isa, &x), want, "{isa} n={n}");
                let mut y = x.clone();
                let sum = exp_shift_on(isa, &mut y, 3.25);
                for (a, v) in y.iter().zip(&x) {
                    let b = (v - 3.25).exp();
                    assert!((a - b).abs() <= 1e-6 * b, "{isa} n={n}: {a} vs {b}");
                }
                let ws: f32 = x.iter().map(|v| (v - 3.25).exp()).sum();
                assert!((sum - ws).abs() <= 1e-5 * ws.max(1e-30), "{isa} n={n}");
            }
        }
    }

    /// Rows of `-inf` (no mass anywhere): softmax gives zeros with sum 0 and log-sum-exp
    /// `-inf` on every path (they gave NaN, a tiny uniform row or zeros); a row with one 0
    /// among `-inf` gives exactly one 1, and `exp` far below the smallest normal float is 0 on
    /// the vector paths, close to the scalar value near it.
    #[test]
    fn rows_without_mass_agree_on_every_path() {
        let ninf = f32::NEG_INFINITY;
        for isa in paths("rows_without_mass_agree_on_every_path") {
            for n in [1usize, 3, 4, 7, 8, 9, 15, 16, 17, 33] {
                let mut x = vec![ninf; n];
                assert_eq!(softmax_unnormalised_on(isa, &mut x), 0.0, "{isa} n={n}");
                assert!(x.iter().all(|&v| v == 0.0), "{isa} n={n}: {x:?}");
                assert_eq!(log_sum_exp_on(isa, &vec![ninf; n]), ninf, "{isa} n={n}");
                for one in [0, n / 2, n - 1] {
                    let mut x = vec![ninf; n];
                    x[one] = 0.0;
                    assert_eq!(log_sum_exp_on(isa, &x), 0.0, "{isa} n={n}");
                    assert_eq!(softmax_unnormalised_on(isa, &mut x), 1.0, "{isa} n={n}");
                    let mut want = vec![0f32; n];
                    want[one] = 1.0;
                    assert_eq!(x, want, "{isa} n={n} one at {one}");
                }
            }
            assert_eq!(log_sum_exp_on(isa, &[]), ninf, "{isa}");
            assert_eq!(softmax_unnormalised_on(isa, &mut []), 0.0, "{isa}");
            // near and below the smallest normal float, 8 lanes and a tail
            let x = [
                -87.0, -87.2, -87.29, -87.31, -87.5, -90.0, -103.0, -200.0, -87.1, ninf, -300.0,
            ];
            let mut y = x;
            exp_shift_on(isa, &mut y, 0.0);
            for (&a, &v) in y.iter().zip(&x) {
                let b = v.exp();
                if v >= -87.29 {
                    assert!((a - b).abs() <= 1e-6 * b, "{isa} exp({v}): {a} vs {b}");
                } else {
                    assert!(
                        a <= b.max(f32::MIN_POSITIVE) * 1.000_001,
                        "{isa} exp({v}): {a} vs {b}"
                    );
                }
                if v < -104.0 {
                    assert_eq!(a, 0.0, "{isa} exp({v})");
                }
            }
        }
    }

    /// In debug builds every safe `*_on` function refuses a path this CPU cannot run (they
    /// run its `#[target_feature]` code on the caller's word).
    #[cfg(debug_assertions)]
    #[test]
    fn on_functions_refuse_a_path_the_cpu_lacks() {
        let Some(other) = Isa::ALL.into_iter().find(|i| i.check().is_err()) else {
            return eprintln!("every path runs here: nothing to refuse");
        };
        let refused = |what: &str, f: &dyn Fn()| {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            assert!(r.is_err(), "{what} ran the {other} path");
        };
        let x = [0.5f32; 64];
        refused("softmax_unnormalised_on", &|| {
            softmax_unnormalised_on(other, &mut x.clone());
        });
        refused("max_on", &|| {
            max_on(other, &x);
        });
        refused("exp_shift_on", &|| {
            exp_shift_on(other, &mut x.clone(), 1.0);
        });
        refused("log_sum_exp_on", &|| {
            log_sum_exp_on(other, &x);
        });
        refused("silu_mul_on", &|| {
            silu_mul_on(other, &x, 32, &mut [0.0; 32])
        });
        use candle_core::{quantized::GgmlDType, quantized::QTensor, Device, Tensor};
        let w = Tensor::ones((16, 64), candle_core::DType::F32, &Device::Cpu).unwrap();
        let q = QTensor::quantize(&w, GgmlDType::Q8_0).unwrap();
        let p = crate::kernels::PackedQuant::from_qtensor(&q).unwrap();
        refused("matmul_on", &|| p.matmul_on(other, &x, &mut [0.0; 16]));
        let t = Tensor::ones((1, 1, 2, 8), candle_core::DType::F32, &Device::Cpu).unwrap();
        refused("causal_attention_on", &|| {
            let _ =
                crate::attention::causal_attention_on(other, &t, &t, &t, &[0], 1.0, None, false);
        });
        // the runnable ones pass
        for isa in Isa::runnable() {
            isa.debug_assert_runs();
        }
    }

    #[test]
    fn log_sum_exp_matches_f64() {
        for isa in paths("log_sum_exp_matches_f64") {
            for n in [1usize, 5, 9, 49_157] {
                let x: Vec<f32> = (0..n)
                    .map(|k| ((k * 7919 % 3001) as f32) * 0.01 - 12.0)
                    .collect();
                let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
                let want = x.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln() + max;
                let got = log_sum_exp_on(isa, &x) as f64;
                assert!((got - want).abs() < 1e-4, "{isa} n={n}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn silu_mul_matches_scalar() {
        for isa in paths("silu_mul_matches_scalar") {
            for i in [1usize, 8, 37, 64] {
                let y: Vec<f32> = (0..3 * 2 * i)
                    .map(|k| ((k * 7919 % 200) as f32 - 100.0) * 0.11)
                    .collect();
                let mut out = vec![0f32; 3 * i];
                silu_mul_on(isa, &y, i, &mut out);
                for r in 0..3 {
                    for j in 0..i {
                        let g = y[r * 2 * i + j];
                        let want = g / (1.0 + (-g).exp()) * y[r * 2 * i + i + j];
                        let got = out[r * i + j];
                        assert!(
                            (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                            "{isa} i={i}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
