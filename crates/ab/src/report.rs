//! The experiment's report: each metric per arm, every arm against the control (the first),
//! with the difference, its intervals and the sample size, as JSON and as a Markdown table.
//!
//! Statistics are computed over the assignment units: viewers, or streams (each stream's
//! per-viewer averages), since units, not viewers, were randomised.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::{Experiment, Unit};
use crate::sim::ViewerRecord;
use crate::stats::{compare, CompareConfig, Comparison, Interval};

/// A metric's value for one viewer.
pub type PerViewer = fn(&ViewerRecord) -> f64;

/// The metrics, in report order: (name, what it is, the value per viewer).
pub const METRICS: [(&str, &str, PerViewer); 7] = [
    ("gmv", "GMV per viewer", |r| r.amount),
    ("item_page_views", "item-page views per viewer", |r| {
        f64::from(r.page_view as u8)
    }),
    ("add_to_cart", "add-to-cart rate", |r| {
        f64::from(r.add_to_cart as u8)
    }),
    ("conversion", "conversion (purchases per viewer)", |r| {
        f64::from(r.purchase as u8)
    }),
    ("correct", "answers the scorer passes", |r| {
        f64::from((r.answer == crate::behaviour::Answer::Correct) as u8)
    }),
    ("incidents", "compliance incidents per viewer", |r| {
        f64::from(r.incident as u8)
    }),
    ("latency_s", "reply latency (s)", |r| r.latency_s),
];

#[derive(Debug, Clone, Serialize)]
pub struct ArmSummary {
    pub name: String,
    pub model: String,
    pub harness: String,
    pub viewers: usize,
    pub units: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct MetricRow {
    pub metric: String,
    pub description: String,
    /// Mean per unit, by arm (arms without units are absent).
    pub means: BTreeMap<String, f64>,
    /// Each non-control arm against the control.
    pub comparisons: Vec<(String, Comparison)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub experiment: String,
    pub unit: Unit,
    pub alpha: f64,
    pub mixture_sd: f64,
    pub control: String,
    pub arms: Vec<ArmSummary>,
    pub metrics: Vec<MetricRow>,
}

/// Values per randomised unit: each viewer's value, or each stream's mean over its viewers
/// (`(stream, value)` per viewer), since units, not viewers, were assigned.
pub fn per_unit<'a>(unit: Unit, viewers: impl IntoIterator<Item = (&'a str, f64)>) -> Vec<f64> {
    match unit {
        Unit::Viewer => viewers.into_iter().map(|(_, v)| v).collect(),
        Unit::Stream => {
            let mut by: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
            for (stream, v) in viewers {
                let e = by.entry(stream).or_default();
                e.0 += v;
                e.1 += 1;
            }
            by.values().map(|(s, n)| s / *n as f64).collect()
        }
    }
}

/// Per-unit values of one metric for one arm.
fn unit_values(exp: &Experiment, recs: &[&ViewerRecord], f: PerViewer) -> Vec<f64> {
    per_unit(exp.unit, recs.iter().map(|r| (r.stream.as_str(), f(r))))
}

pub fn report(exp: &Experiment, records: &[ViewerRecord]) -> Report {
    let by_arm: Vec<Vec<&ViewerRecord>> = exp
        .arms
        .iter()
        .map(|a| records.iter().filter(|r| r.arm == a.name).collect())
        .collect();
    let arms = exp
        .arms
        .iter()
        .zip(&by_arm)
        .map(|(a, recs)| ArmSummary {
            name: a.name.clone(),
            model: a.model.clone(),
            harness: a.harness.display().to_string(),
            viewers: recs.len(),
            units: unit_values(exp, recs, |_| 0.0).len(),
        })
        .collect();
    let metrics = METRICS
        .iter()
        .enumerate()
        .map(|(m, (name, description, f))| {
            let values: Vec<Vec<f64>> = by_arm.iter().map(|r| unit_values(exp, r, *f)).collect();
            let means = exp
                .arms
                .iter()
                .zip(&values)
                .filter(|(_, v)| !v.is_empty())
                .map(|(a, v)| (a.name.clone(), v.iter().sum::<f64>() / v.len() as f64))
                .collect();
            let comparisons = (1..exp.arms.len())
                .map(|b| {
                    let cfg = CompareConfig {
                        alpha: exp.alpha,
                        mixture_sd: exp.mixture_sd,
                        seed: exp.seed ^ ((m as u64) << 32) ^ b as u64,
                    };
                    (
                        exp.arms[b].name.clone(),
                        compare(&values[0], &values[b], &cfg),
                    )
                })
                .collect();
            MetricRow {
                metric: name.to_string(),
                description: description.to_string(),
                means,
                comparisons,
            }
        })
        .collect();
    Report {
        experiment: exp.name.clone(),
        unit: exp.unit,
        alpha: exp.alpha,
        mixture_sd: exp.mixture_sd,
        control: exp.arms[0].name.clone(),
        arms,
        metrics,
    }
}

fn fmt_num(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.1}")
    } else if x.abs() >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

fn fmt_interval(i: Option<Interval>) -> String {
    i.map_or("-".into(), |i| {
        format!("[{}, {}]", fmt_num(i.lo), fmt_num(i.hi))
    })
}

impl Report {
    /// The report as Markdown: the arms, then one row per metric and challenger.
    pub fn markdown(&self) -> String {
        let level = format!("{}%", ((1.0 - self.alpha) * 100.0).round());
        let mut s = format!(
            "Experiment `{}`: unit {}, control `{}`, level {level}; \"significant\" only when \
             the always-valid interval (mixture SPRT, safe under peeking) excludes 0.\n\n",
            self.experiment,
            match self.unit {
                Unit::Viewer => "viewer",
                Unit::Stream => "stream",
            },
            self.control
        );
        s.push_str(
            "| arm | model | harness | viewers | units |\n| --- | --- | --- | --- | --- |\n",
        );
        for a in &self.arms {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                a.name, a.model, a.harness, a.viewers, a.units
            ));
        }
        s.push_str(&format!(
            "\n| metric | arm | control mean | arm mean | difference | relative | {level} Welch | {level} bootstrap | {level} always-valid | significant |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
        ));
        for m in &self.metrics {
            for (arm, c) in &m.comparisons {
                s.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                    m.description,
                    arm,
                    fmt_num(c.mean_a),
                    fmt_num(c.mean_b),
                    fmt_num(c.diff),
                    c.relative
                        .map_or("-".into(), |r| format!("{:+.0}%", r * 100.0)),
                    fmt_interval(c.welch),
                    fmt_interval(c.bootstrap),
                    fmt_interval(c.always_valid),
                    if c.significant { "yes" } else { "no" },
                ));
            }
        }
        s
    }
}
