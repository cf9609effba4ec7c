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

/// Units each arm needs before a comparison may be called significant. The always-valid
/// interval's guarantee assumes the per-unit variance is known; here it is estimated from the
/// data, and from a handful of units that estimate is noise (two viewers who both did nothing
/// give a variance of 0, hence a zero-width interval), so an experiment watched from its first
/// viewers would declare false winners. Twenty units per arm make the estimate steady enough
/// for the sequential guarantee to hold in practice (an A/A simulation peeking at every sample
/// size from 2 stays at or under `alpha`; see the tests below).
pub const MIN_UNITS_FOR_SIGNIFICANCE: usize = 20;

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
    /// The always-valid interval excludes 0 at the configured level, with at least
    /// [`MIN_UNITS_FOR_SIGNIFICANCE`] units in each arm.
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

/// Compares `b` against `a`. Intervals need at least two units per arm and some variance
/// (when every unit of both arms has the same value there is nothing to scale an interval
/// with); significance needs [`MIN_UNITS_FOR_SIGNIFICANCE`] units per arm.
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
    // resampling arms with no spread gives a zero-width interval: no evidence either
    let bootstrap = (enough && v > 0.0).then(|| bootstrap_interval(a, b, cfg.alpha, cfg.seed));
    let (always_valid, significant) = sequential(diff, (va, na), (vb, nb), cfg);
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
        significant,
        always_valid,
    }
}

/// The always-valid interval of `diff` from each arm's (variance, units), and whether it
/// makes the comparison significant: the one decision [`compare`] reports.
fn sequential(
    diff: f64,
    (va, na): (f64, usize),
    (vb, nb): (f64, usize),
    cfg: &CompareConfig,
) -> (Option<Interval>, bool) {
    if na < 2 || nb < 2 {
        return (None, false);
    }
    let v = va / na as f64 + vb / nb as f64;
    let pooled_sd = ((va * (na - 1) as f64 + vb * (nb - 1) as f64) / (na + nb - 2) as f64)
        .max(0.0)
        .sqrt();
    let interval = always_valid_interval(diff, v, cfg.mixture_sd * pooled_sd, cfg.alpha);
    let significant = na >= MIN_UNITS_FOR_SIGNIFICANCE
        && nb >= MIN_UNITS_FOR_SIGNIFICANCE
        && interval.is_some_and(|i| i.excludes_zero());
    (interval, significant)
}

/// Welch's interval and two-sided p-value; none when neither arm varies, since then there is
/// no estimate of the noise (two viewers per arm who all did the same thing say nothing about
/// the next two, and a zero-width interval with p = 0 would call them significant).
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
    if v <= 0.0 || !v.is_finite() {
        return (None, None);
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
/// None when `v` is not positive: a variance estimated as 0 is a lack of evidence about the
/// noise, not proof that there is none.
pub fn always_valid_interval(diff: f64, v: f64, tau: f64, alpha: f64) -> Option<Interval> {
    if !(v > 0.0 && v.is_finite()) {
        return None;
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

    /// Review finding: two viewers per arm who all did the same thing (variance 0) got a
    /// zero-width interval, p = 0 and "significant".
    #[test]
    fn arms_without_spread_give_no_interval_and_no_significance() {
        let c = compare(&[0.0, 0.0], &[1.0, 1.0], &CFG);
        assert!(!c.significant, "{c:?}");
        assert!(c.welch.is_none() && c.welch_p.is_none(), "{c:?}");
        assert!(c.always_valid.is_none() && c.bootstrap.is_none(), "{c:?}");
        assert_eq!(c.diff, 1.0);
        let big = vec![0.0; 500];
        let c = compare(&big, &[1.0; 500], &CFG);
        assert!(!c.significant && c.always_valid.is_none(), "{c:?}");
    }

    /// A clear difference is not significant before each arm has
    /// [`MIN_UNITS_FOR_SIGNIFICANCE`] units, whatever the interval says.
    #[test]
    fn significance_waits_for_the_minimum_units_per_arm() {
        let few = MIN_UNITS_FOR_SIGNIFICANCE - 1;
        let a: Vec<f64> = (0..few).map(|i| (i % 2) as f64 * 0.01).collect();
        let b: Vec<f64> = (0..few).map(|i| 100.0 + (i % 2) as f64 * 0.01).collect();
        let c = compare(&a, &b, &CFG);
        assert!(c.always_valid.unwrap().excludes_zero(), "{c:?}");
        assert!(!c.significant, "{c:?}");
        let a: Vec<f64> = (0..=few).map(|i| (i % 2) as f64 * 0.01).collect();
        let b: Vec<f64> = (0..=few).map(|i| 100.0 + (i % 2) as f64 * 0.01).collect();
        assert!(compare(&a, &b, &CFG).significant);
    }

    /// Review finding: an A/A experiment (Bernoulli 0.5 in both arms) watched from its
    /// second unit per arm, stopping at the first "significant", declared a false winner in
    /// about 12.5% of runs from n = 2 alone. With the same decision `compare` makes, checked
    /// at every n from 2 to 1,000 in 1,000 seeded experiments, false winners stay near alpha.
    #[test]
    fn an_aa_test_peeked_at_every_unit_from_two_flags_about_alpha() {
        let mut rng = ChaCha8Rng::seed_from_u64(2026);
        let (reps, horizon) = (1000, 1000);
        let mut flagged = 0;
        for _ in 0..reps {
            let a = draws(&mut rng, horizon, 0.5);
            let b = draws(&mut rng, horizon, 0.5);
            let (mut sa, mut sb) = (0.0, 0.0);
            for n in 1..=horizon {
                sa += a[n - 1];
                sb += b[n - 1];
                if n < 2 {
                    continue;
                }
                let nf = n as f64;
                // Bernoulli sample variance from the running sums
                let var = |s: f64| (s - s * s / nf) / (nf - 1.0);
                let (_, significant) =
                    sequential(sb / nf - sa / nf, (var(sa), n), (var(sb), n), &CFG);
                if significant {
                    flagged += 1;
                    break;
                }
            }
        }
        let rate = flagged as f64 / reps as f64;
        eprintln!("A/A false winners under peeking: {rate}");
        assert!(rate <= CFG.alpha + 0.01, "A/A false winners: {rate}");
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
