//! An experiment, as written in its TOML file.
//!
//! ```toml
//! name = "base-vs-hsa"
//! seed = 7
//! unit = "viewer"            # or "stream": every viewer of a stream sees the same arm
//! alpha = 0.05
//!
//! [[arms]]                   # the first arm is the control
//! name = "base"
//! model = "default"          # `default`, a GGUF file or Hugging Face folder, or `oracle`
//! harness = "harnesses/livestream"
//! weight = 1                 # traffic split: arms get weight / sum of weights
//!
//! [[arms]]
//! name = "hsa-sft"
//! model = "runs/hsa-sft/model-q8_0.gguf"
//!
//! [audience]                 # the simulated audience (see `behaviour`)
//! viewers = 200
//!
//! [behaviour]                # every field optional; defaults in `Behaviour::default`
//! patience_s = 3.0
//! ```
//!
//! Relative paths are read from the current directory, as on the command line.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::AbError;

/// Most arms an experiment may have.
pub const MAX_ARMS: usize = 16;
/// Most simulated viewers in one run.
pub const MAX_VIEWERS: usize = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Each viewer is assigned on their own.
    Viewer,
    /// A whole stream (its viewers) goes to one arm: no viewer sees two hosts, at the price
    /// of fewer, correlated units.
    Stream,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arm {
    /// Letters, digits, `-`, `_`, `.`.
    pub name: String,
    /// `default`, a model path, or `oracle` (the gold teacher: an upper bound).
    pub model: String,
    #[serde(default = "default_harness")]
    pub harness: PathBuf,
    #[serde(default = "one")]
    pub weight: f64,
}

fn default_harness() -> PathBuf {
    PathBuf::from("harnesses/livestream")
}

fn one() -> f64 {
    1.0
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Audience {
    /// Simulated viewers; each asks one question (an lsqa-style task on a test-split stream).
    #[serde(default = "default_viewers")]
    pub viewers: usize,
    /// Episodes decoded together when an arm answers.
    #[serde(default = "default_batch")]
    pub batch: usize,
}

fn default_viewers() -> usize {
    200
}

fn default_batch() -> usize {
    4
}

impl Default for Audience {
    fn default() -> Self {
        Audience {
            viewers: default_viewers(),
            batch: default_batch(),
        }
    }
}

/// How a simulated viewer reacts to the host's answer. The defaults are a stand-in chosen to
/// be plausible for live shopping, not measured on real traffic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Behaviour {
    /// Chance of opening the item page after a correct answer.
    pub view_correct: f64,
    /// ... after an answer with a wrong fact, argument or tool.
    pub view_wrong: f64,
    /// ... after no usable answer (a malformed call, no reply).
    pub view_missed: f64,
    /// Chance of adding to cart once on the item page, after a correct answer.
    pub cart_correct: f64,
    /// ... after a wrong or missing answer.
    pub cart_other: f64,
    /// Chance of buying once the item is in the cart.
    pub buy_given_cart: f64,
    /// Multiplies the chance to buy after a compliance incident (lost trust).
    pub incident_trust: f64,
    /// Seconds a viewer waits for a reply without losing interest.
    pub patience_s: f64,
    /// Every this many seconds beyond `patience_s` halve the chance of opening the page.
    pub latency_halflife_s: f64,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            view_correct: 0.35,
            view_wrong: 0.15,
            view_missed: 0.05,
            cart_correct: 0.45,
            cart_other: 0.25,
            buy_given_cart: 0.6,
            incident_trust: 0.5,
            patience_s: 3.0,
            latency_halflife_s: 6.0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub name: String,
    #[serde(default)]
    pub seed: u64,
    #[serde(default = "default_unit")]
    pub unit: Unit,
    /// Two-sided error level of every interval.
    #[serde(default = "default_alpha")]
    pub alpha: f64,
    /// The sequential test's mixture standard deviation, as a fraction of the pooled per-unit
    /// standard deviation (0.2: tuned to a "small" standardised effect).
    #[serde(default = "default_mixture_sd")]
    pub mixture_sd: f64,
    pub arms: Vec<Arm>,
    #[serde(default)]
    pub audience: Audience,
    #[serde(default)]
    pub behaviour: Behaviour,
}

fn default_unit() -> Unit {
    Unit::Viewer
}

fn default_alpha() -> f64 {
    0.05
}

fn default_mixture_sd() -> f64 {
    0.2
}

impl Experiment {
    /// Reads and checks an experiment file.
    pub fn load(path: &Path) -> Result<Experiment, AbError> {
        let text = std::fs::read_to_string(path).map_err(|e| AbError::Io {
            path: path.to_path_buf(),
            source: e,
        })?;
        Experiment::parse(&text, &path.display().to_string())
    }

    /// Parses and checks experiment TOML; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Experiment, AbError> {
        let exp: Experiment = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            AbError::Config {
                origin: origin.to_string(),
                line,
                message: e.message().to_string(),
            }
        })?;
        exp.check()
            .map_err(|(field, arm, message)| AbError::Config {
                origin: origin.to_string(),
                line: line_of(text, field, arm),
                message: format!("{field}: {message}"),
            })?;
        Ok(exp)
    }

    /// Checks values the types allow but an experiment cannot use: `(field, the arm it is
    /// in, problem)`.
    fn check(&self) -> Result<(), (&'static str, Option<usize>, String)> {
        if !valid_name(&self.name) {
            return Err((
                "name",
                None,
                "1 to 64 letters, digits, `-`, `_` or `.`".into(),
            ));
        }
        if self.arms.len() < 2 || self.arms.len() > MAX_ARMS {
            return Err((
                "arms",
                None,
                format!(
                    "an experiment needs 2 to {MAX_ARMS} [[arms]], not {}",
                    self.arms.len()
                ),
            ));
        }
        let mut names = std::collections::HashSet::new();
        for (i, a) in self.arms.iter().enumerate() {
            if !valid_name(&a.name) {
                return Err((
                    "name",
                    Some(i),
                    format!(
                        "arm name `{}`: 1 to 64 letters, digits, `-`, `_` or `.`",
                        a.name
                    ),
                ));
            }
            if !names.insert(a.name.as_str()) {
                return Err(("name", Some(i), format!("two arms are named `{}`", a.name)));
            }
            if a.model.trim().is_empty() {
                return Err((
                    "model",
                    Some(i),
                    format!("arm `{}` has an empty model", a.name),
                ));
            }
            check_weight(a.weight)
                .map_err(|m| ("weight", Some(i), format!("arm `{}`: weight {m}", a.name)))?;
        }
        check_levels(self.alpha, self.mixture_sd).map_err(|(f, m)| (f, None, m))?;
        let au = &self.audience;
        if au.viewers < 2 || au.viewers > MAX_VIEWERS {
            return Err((
                "viewers",
                None,
                format!("must be 2 to {MAX_VIEWERS}, not {}", au.viewers),
            ));
        }
        if au.batch == 0 || au.batch > 64 {
            return Err(("batch", None, format!("must be 1 to 64, not {}", au.batch)));
        }
        let b = &self.behaviour;
        for (field, p) in [
            ("view_correct", b.view_correct),
            ("view_wrong", b.view_wrong),
            ("view_missed", b.view_missed),
            ("cart_correct", b.cart_correct),
            ("cart_other", b.cart_other),
            ("buy_given_cart", b.buy_given_cart),
            ("incident_trust", b.incident_trust),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err((field, None, format!("is a probability: 0 to 1, not {p}")));
            }
        }
        for (field, s) in [
            ("patience_s", b.patience_s),
            ("latency_halflife_s", b.latency_halflife_s),
        ] {
            if !(s.is_finite() && s > 0.0 && s <= 3600.0) {
                return Err((
                    field,
                    None,
                    format!("must be above 0 and at most 3600 seconds, not {s}"),
                ));
            }
        }
        Ok(())
    }

    /// Each arm's share of the traffic.
    pub fn weights(&self) -> Vec<f64> {
        self.arms.iter().map(|a| a.weight).collect()
    }
}

/// An arm's traffic weight: above 0 and at most 1e6. `Err` says what is wrong.
pub fn check_weight(w: f64) -> Result<(), String> {
    if w.is_finite() && w > 0.0 && w <= 1e6 {
        Ok(())
    } else {
        Err(format!("must be above 0 and at most 1e6, not {w}"))
    }
}

/// The error level and the sequential test's mixture: `Err((field, problem))`.
pub fn check_levels(alpha: f64, mixture_sd: f64) -> Result<(), (&'static str, String)> {
    if !(alpha > 0.0 && alpha < 0.5) {
        return Err(("alpha", format!("must be between 0 and 0.5, not {alpha}")));
    }
    if !(mixture_sd > 0.0 && mixture_sd <= 10.0) {
        return Err((
            "mixture_sd",
            format!("must be above 0 and at most 10, not {mixture_sd}"),
        ));
    }
    Ok(())
}

/// A name for an experiment or an arm: 1 to 64 letters, digits, `-`, `_` or `.`.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The line that sets `field` (`field =` at the start of a line): the first one, or the
/// first after the header of the `arm`-th `[[arms]]` table.
fn line_of(text: &str, field: &str, arm: Option<usize>) -> Option<usize> {
    let start = match arm {
        None => 0,
        Some(n) => {
            text.lines()
                .enumerate()
                .filter(|(_, l)| l.trim() == "[[arms]]")
                .nth(n)?
                .0
        }
    };
    text.lines()
        .enumerate()
        .skip(start)
        .find(|(_, l)| {
            l.trim_start()
                .strip_prefix(field)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map(|(i, _)| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"
name = "t"
[[arms]]
name = "a"
model = "oracle"
[[arms]]
name = "b"
model = "oracle"
weight = 3
"#;

    #[test]
    fn defaults_fill_what_the_file_leaves_out() {
        let e = Experiment::parse(OK, "x.toml").unwrap();
        assert_eq!(e.unit, Unit::Viewer);
        assert_eq!(e.alpha, 0.05);
        assert_eq!(e.audience.viewers, 200);
        assert_eq!(e.behaviour, Behaviour::default());
        assert_eq!(e.weights(), vec![1.0, 3.0]);
        assert_eq!(e.arms[0].harness, PathBuf::from("harnesses/livestream"));
    }

    #[test]
    fn errors_name_the_file_the_line_and_the_field() {
        let bad = OK.replace("weight = 3", "weight = -1");
        let e = Experiment::parse(&bad, "x.toml").unwrap_err().to_string();
        assert!(
            e.contains("x.toml") && e.contains("line 9") && e.contains("weight"),
            "{e}"
        );
        // the second arm's name, not the experiment's or the first arm's
        let bad = OK.replace("name = \"b\"", "name = \"b c\"");
        let e = Experiment::parse(&bad, "x.toml").unwrap_err().to_string();
        assert!(e.contains("line 7") && e.contains("b c"), "{e}");
        let e = Experiment::parse(
            &OK.replace("model = \"oracle\"\nweight", "modle = \"o\"\nweight"),
            "x.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("x.toml") && e.contains("line") && e.contains("modle"),
            "{e}"
        );
        let one_arm = "name = \"t\"\n[[arms]]\nname = \"a\"\nmodel = \"oracle\"\n";
        let e = Experiment::parse(one_arm, "x.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 to 16"), "{e}");
        let dup = OK.replace("name = \"b\"", "name = \"a\"");
        assert!(Experiment::parse(&dup, "x.toml")
            .unwrap_err()
            .to_string()
            .contains("two arms"));
        let p = format!("{OK}\n[behaviour]\nview_correct = 1.5\n");
        assert!(Experiment::parse(&p, "x.toml")
            .unwrap_err()
            .to_string()
            .contains("view_correct"));
    }
}
