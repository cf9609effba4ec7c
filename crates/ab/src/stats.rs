//! Comparing two arms on one metric: the difference of means with three intervals.
//!
//! - **Welch's t interval**: the classic fixed-horizon interval. Valid only if the sample size
//!   was fixed in advance and the data are looked at once.
//! - **Bootstrap percentile interval**: the same question without the normal approximation
//!   (GMV per viewer is mostly zeros with a few large purchases), also fixed-horizon.
//! - **Always-valid interval (mixture SPRT)**: stays valid however often the experiment is
//!   looked at and stopped (Johari, Pekelis and Walsh, "Always valid inference", 2017;
//!   normal mixture over the effect with standard deviation `tau`). This is the sequential
//!   guard: [`Comparison::significant`] uses it and only it, so a dashboard refreshed every
//!   minute does not inflate false positives.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// Bootstrap resamples for [`bootstrap_interval`].
pub const BOOTSTRAP_RESAMPLES: usize = 2000;

/// Mean and unbiased variance of a sample (variance 0 for fewer than two values).
pub fn mean_var(x: &[f64]) -> (f64, f64) {
    let n = x.len();
    if n == 0 {
        return (0.0, 0.0);
    }
    let mean = x.iter().sum::<f64>() / n as f64;
    if n < 2 {
        return (mean, 0.0);
    }
    let ss: f64 = x.iter().map(|v| (v - mean) * (v - mean)).sum();
    (mean, ss / (n - 1) as f64)
}

/// A two-sided interval `[lo, hi]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    pub lo: f64,
    pub hi: f64,
}

impl Interval {
    pub fn excludes_zero(&self) -> bool {
        self.lo > 0.0 || self.hi < 0.0
    }
}

/// Arm B against arm A (the control) on one metric.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub n_a: usize,
    pub n_b: usize,
    pub mean_a: f64,
    pub mean_b: f64,
    /// `mean_b - mean_a`.
    pub diff: f64,
    /// `diff / mean_a` (none when the control's mean is 0).
    pub relative: Option<f64>,
    /// Standard error of `diff`.
    pub se: f64,
    pub welch: Option<Interval>,
    pub welch_p: Option<f64>,
    pub bootstrap: Option<Interval>,
    pub always_valid: Option<Interval>,
    /// The always-valid interval excludes 0 at the configured level.
    pub significant: bool,
}

/// Settings of a comparison.
#[derive(Debug, Clone, Copy)]
pub struct CompareConfig {
    /// Two-sided error level, e.g. 0.05.
    pub alpha: f64,
    /// The mixture's standard deviation as a fraction of the pooled per-unit standard
    /// deviation: the effect size the sequential test is tuned to detect soonest.
    pub mixture_sd: f64,
    /// Seeds the bootstrap.
    pub seed: u64,
}

/// Compares `b` against `a`. Intervals need at least two units per arm.
pub fn compare(a: &[f64], b: &[f64], cfg: &CompareConfig) -> Comparison {
    let (ma, va) = mean_var(a);
    let (mb, vb) = mean_var(b);
    let (na, nb) = (a.len(), b.len());
    let diff = mb - ma;
    let enough = na >= 2 && nb >= 2;
    let v = if enough {
        va / na as f64 + vb / nb as f64
    } else {
        0.0
    };
    let se = v.sqrt();
    let (welch, welch_p) = if enough {
        welch_interval(diff, va, na, vb, nb, cfg.alpha)
    } else {
        (None, None)
    };
    let bootstrap = enough.then(|| bootstrap_interval(a, b, cfg.alpha, cfg.seed));
    let always_valid = if enough {
        let pooled_sd = ((va * (na - 1) as f64 + vb * (nb - 1) as f64) / (na + nb - 2) as f64)
            .max(0.0)
            .sqrt();
        always_valid_interval(diff, v, cfg.mixture_sd * pooled_sd, cfg.alpha)
    } else {
        None
    };
    Comparison {
        n_a: na,
        n_b: nb,
        mean_a: ma,
        mean_b: mb,
        diff,
        relative: (ma != 0.0).then(|| diff / ma),
        se,
        welch,
        welch_p,
        bootstrap,
        significant: always_valid.is_some_and(|i| i.excludes_zero()),
        always_valid,
    }
}

/// Welch's interval and two-sided p-value. With zero variance in both arms the difference
/// is exact: a point interval, p = 0 when it is non-zero.
fn welch_interval(
    diff: f64,
    va: f64,
    na: usize,
    vb: f64,
    nb: usize,
    alpha: f64,
) -> (Option<Interval>, Option<f64>) {
    let (sa, sb) = (va / na as f64, vb / nb as f64);
    let v = sa + sb;
    if v <= 0.0 {
        let p = if diff == 0.0 { 1.0 } else { 0.0 };
        return (Some(Interval { lo: diff, hi: diff }), Some(p));
    }
    let df = v * v / (sa * sa / (na - 1) as f64 + sb * sb / (nb - 1) as f64);
    let Ok(t) = StudentsT::new(0.0, 1.0, df) else {
        return (None, None);
    };
    let q = t.inverse_cdf(1.0 - alpha / 2.0);
    let se = v.sqrt();
    let p = 2.0 * (1.0 - t.cdf((diff / se).abs()));
    (
        Some(Interval {
            lo: diff - q * se,
            hi: diff + q * se,
        }),
        Some(p.clamp(0.0, 1.0)),
    )
}

/// Percentile bootstrap of the difference of means, each arm resampled on its own.
pub fn bootstrap_interval(a: &[f64], b: &[f64], alpha: f64, seed: u64) -> Interval {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mean_of = |x: &[f64], rng: &mut ChaCha8Rng| {
        let mut s = 0.0;
        for _ in 0..x.len() {
            s += x[rng.gen_range(0..x.len())];
        }
        s / x.len() as f64
    };
    let mut diffs: Vec<f64> = (0..BOOTSTRAP_RESAMPLES)
        .map(|_| {
            let ma = mean_of(a, &mut rng);
            mean_of(b, &mut rng) - ma
        })
        .collect();
    diffs.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let i = (q * (diffs.len() - 1) as f64).round() as usize;
        diffs[i.min(diffs.len() - 1)]
    };
    Interval {
        lo: at(alpha / 2.0),
        hi: at(1.0 - alpha / 2.0),
    }
}

/// The always-valid interval of a difference `diff` whose variance is `v`, from the normal
/// mixture SPRT with mixing standard deviation `tau`: the set of effects the test has not
/// rejected. Its coverage holds at every sample size at once, so it may be read at any time.
pub fn always_valid_interval(diff: f64, v: f64, tau: f64, alpha: f64) -> Option<Interval> {
    if v <= 0.0 {
        return Some(Interval { lo: diff, hi: diff });
    }
    if !(tau > 0.0 && tau.is_finite()) {
        return None;
    }
    let t2 = tau * tau;
    let half = (v * (v + t2) / t2 * (((v + t2) / v).ln() - 2.0 * alpha.ln())).sqrt();
    Some(Interval {
        lo: diff - half,
        hi: diff + half,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: CompareConfig = CompareConfig {
        alpha: 0.05,
        mixture_sd: 0.2,
        seed: 1,
    };

    #[test]
    fn welch_matches_a_worked_example() {
        // Two samples whose Welch statistics are easy to check by hand:
        // means 2 and 5, variances 2.5 and 2.5, n 5 each: se = 1, df = 8, t(0.975, 8) = 2.306.
        let a = [0.0, 1.0, 2.0, 3.0, 4.0];
        let b = [3.0, 4.0, 5.0, 6.0, 7.0];
        let c = compare(&a, &b, &CFG);
        assert_eq!(c.diff, 3.0);
        assert!((c.se - 1.0).abs() < 1e-12);
        let w = c.welch.unwrap();
        assert!((w.lo - (3.0 - 2.306004)).abs() < 1e-5, "{w:?}");
        assert!((w.hi - (3.0 + 2.306004)).abs() < 1e-5, "{w:?}");
        // p for t = 3 on 8 degrees of freedom
        assert!(
            (c.welch_p.unwrap() - 0.017071).abs() < 1e-5,
            "{:?}",
            c.welch_p
        );
    }

    #[test]
    fn the_always_valid_interval_is_wider_than_welchs_and_contains_it() {
        let a: Vec<f64> = (0..200).map(|i| (i % 7) as f64).collect();
        let b: Vec<f64> = (0..200).map(|i| (i % 7) as f64 + 0.5).collect();
        let c = compare(&a, &b, &CFG);
        let (w, av) = (c.welch.unwrap(), c.always_valid.unwrap());
        assert!(av.lo < w.lo && av.hi > w.hi, "{w:?} {av:?}");
        let bs = c.bootstrap.unwrap();
        assert!(bs.lo < c.diff && bs.hi > c.diff);
    }

    #[test]
    fn too_few_units_give_no_interval_and_no_significance() {
        let c = compare(&[1.0], &[5.0, 6.0], &CFG);
        assert!(c.welch.is_none() && c.always_valid.is_none() && c.bootstrap.is_none());
        assert!(!c.significant);
        let c = compare(&[], &[], &CFG);
        assert_eq!(c.diff, 0.0);
        assert!(!c.significant);
    }

    /// Bernoulli(p) draws.
    fn draws(rng: &mut ChaCha8Rng, n: usize, p: f64) -> Vec<f64> {
        (0..n).map(|_| f64::from(rng.gen_bool(p) as u8)).collect()
    }

    /// A/A experiments looked at every 25 units per arm up to 1,000: stopping at the first
    /// look where Welch's interval excludes zero declares a false winner far more often
    /// than 5%; the always-valid interval keeps it under 5%.
    #[test]
    fn peeking_inflates_welch_but_not_the_always_valid_interval() {
        let mut rng = ChaCha8Rng::seed_from_u64(42);
        let reps = 300;
        let (mut naive, mut guarded) = (0, 0);
        for _ in 0..reps {
            let a = draws(&mut rng, 1000, 0.2);
            let b = draws(&mut rng, 1000, 0.2);
            let (mut hit_naive, mut hit_guarded) = (false, false);
            for n in (25..=1000).step_by(25) {
                let (ma, va) = mean_var(&a[..n]);
                let (mb, vb) = mean_var(&b[..n]);
                let v = va / n as f64 + vb / n as f64;
                let (w, _) = welch_interval(mb - ma, va, n, vb, n, 0.05);
                hit_naive |= w.is_some_and(|i| i.excludes_zero());
                let tau = 0.2 * ((va + vb) / 2.0).sqrt();
                hit_guarded |=
                    always_valid_interval(mb - ma, v, tau, 0.05).is_some_and(|i| i.excludes_zero());
            }
            naive += hit_naive as usize;
            guarded += hit_guarded as usize;
        }
        let (naive, guarded) = (naive as f64 / reps as f64, guarded as f64 / reps as f64);
        assert!(naive > 0.15, "peeking at Welch: {naive}");
        assert!(guarded <= 0.05, "always-valid under peeking: {guarded}");
    }

    /// A real effect is found: 0.2 against 0.3 conversion with 1,500 units per arm.
    #[test]
    fn a_real_difference_is_significant() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let a = draws(&mut rng, 1500, 0.2);
        let b = draws(&mut rng, 1500, 0.3);
        let c = compare(&a, &b, &CFG);
        assert!(c.significant, "{c:?}");
        assert!(c.always_valid.unwrap().lo > 0.0);
    }
}
