//! Scoring a response set: per-prompt verdicts, prompt- and instruction-level accuracy in
//! both modes, and breakdowns per category and per instruction id.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::Serialize;

use crate::error::IfevalError;
use crate::io::InputRecord;

/// A pass count out of a total.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub passed: usize,
    pub total: usize,
}

impl Tally {
    /// `passed / total`, 0 for an empty tally.
    pub fn accuracy(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.passed as f64 / self.total as f64
        }
    }

    fn add(&mut self, pass: bool) {
        self.total += 1;
        self.passed += usize::from(pass);
    }
}

/// Headline numbers of one mode (strict or loose).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModeScores {
    /// Prompts whose instructions all pass.
    pub prompt_level: Tally,
    /// Passing instruction instances (micro average).
    pub instruction_level: Tally,
}

/// Strict and loose tallies of one group (a category or an instruction id).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupScores {
    pub strict: Tally,
    pub loose: Tally,
}

/// The verdicts for one prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ItemResult {
    pub key: i64,
    pub instruction_id_list: Vec<String>,
    /// One verdict per instruction, strict mode.
    pub strict: Vec<bool>,
    /// One verdict per instruction, loose mode.
    pub loose: Vec<bool>,
    pub prompt: String,
    /// `None` where the response set has no response for this prompt (all verdicts false).
    pub response: Option<String>,
}

/// Everything computed for a response set.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub items: Vec<ItemResult>,
    pub strict: ModeScores,
    pub loose: ModeScores,
    /// Keyed by the part of the id before `:`.
    pub by_category: BTreeMap<String, GroupScores>,
    pub by_instruction: BTreeMap<String, GroupScores>,
    /// Keys of prompts without a response; they count as failures.
    pub missing: Vec<i64>,
    /// Responses whose prompt is none of the inputs' (a changed prompt text); not scored.
    pub unmatched: usize,
}

/// Scores `responses` (prompt text → response) against `inputs`. A prompt without a response
/// fails all its instructions and is listed in [`Report::missing`]. Errors only for invalid
/// instructions in `inputs` (unknown id, bad or missing kwargs).
pub fn score_responses(
    inputs: &[InputRecord],
    responses: &HashMap<String, String>,
) -> Result<Report, IfevalError> {
    let mut report = Report::default();
    let known: std::collections::HashSet<&str> = inputs.iter().map(|r| r.prompt.as_str()).collect();
    report.unmatched = responses
        .keys()
        .filter(|p| !known.contains(p.as_str()))
        .count();
    for rec in inputs {
        let instructions = rec.instructions()?;
        let response = responses.get(&rec.prompt);
        let (strict, loose): (Vec<bool>, Vec<bool>) = match response {
            Some(r) => instructions
                .iter()
                .map(|i| (i.check_strict(r), i.check_loose(r)))
                .unzip(),
            None => {
                report.missing.push(rec.key);
                (
                    vec![false; instructions.len()],
                    vec![false; instructions.len()],
                )
            }
        };
        report.strict.prompt_level.add(strict.iter().all(|&b| b));
        report.loose.prompt_level.add(loose.iter().all(|&b| b));
        for ((id, &s), &l) in rec.instruction_id_list.iter().zip(&strict).zip(&loose) {
            report.strict.instruction_level.add(s);
            report.loose.instruction_level.add(l);
            let category = id.split(':').next().unwrap_or(id);
            for g in [
                report.by_category.entry(category.to_string()).or_default(),
                report.by_instruction.entry(id.clone()).or_default(),
            ] {
                g.strict.add(s);
                g.loose.add(l);
            }
        }
        report.items.push(ItemResult {
            key: rec.key,
            instruction_id_list: rec.instruction_id_list.clone(),
            strict,
            loose,
            prompt: rec.prompt.clone(),
            response: response.cloned(),
        });
    }
    Ok(report)
}

fn tally_json(t: Tally) -> serde_json::Value {
    serde_json::json!({ "passed": t.passed, "total": t.total, "accuracy": t.accuracy() })
}

fn groups_json(groups: &BTreeMap<String, GroupScores>) -> serde_json::Value {
    groups
        .iter()
        .map(|(k, g)| {
            (
                k.clone(),
                serde_json::json!({ "strict": tally_json(g.strict), "loose": tally_json(g.loose) }),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

impl Report {
    /// The content of `results.json`: headline scores, breakdowns and missing keys.
    pub fn results_json(&self) -> serde_json::Value {
        serde_json::json!({
            "prompts": self.items.len(),
            "strict": {
                "prompt_level": tally_json(self.strict.prompt_level),
                "instruction_level": tally_json(self.strict.instruction_level),
            },
            "loose": {
                "prompt_level": tally_json(self.loose.prompt_level),
                "instruction_level": tally_json(self.loose.instruction_level),
            },
            "by_category": groups_json(&self.by_category),
            "by_instruction": groups_json(&self.by_instruction),
            "missing": self.missing,
            "unmatched_responses": self.unmatched,
        })
    }
}

fn pct(t: Tally) -> String {
    format!("{:.2}% ({}/{})", 100.0 * t.accuracy(), t.passed, t.total)
}

/// One table row: a label and the strict and loose cells, right-aligned.
fn row(
    f: &mut fmt::Formatter<'_>,
    label: &str,
    width: usize,
    strict: &str,
    loose: &str,
) -> fmt::Result {
    writeln!(f, "{label:<width$}  {strict:>18}  {loose:>18}")
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self
            .by_instruction
            .keys()
            .map(String::len)
            .max()
            .unwrap_or(0)
            .max(17);
        writeln!(f, "IFEval: {} prompts", self.items.len())?;
        row(f, "", width, "strict", "loose")?;
        row(
            f,
            "prompt-level",
            width,
            &pct(self.strict.prompt_level),
            &pct(self.loose.prompt_level),
        )?;
        let (s, l) = (self.strict.instruction_level, self.loose.instruction_level);
        row(f, "instruction-level", width, &pct(s), &pct(l))?;
        for (title, groups) in [
            ("category", &self.by_category),
            ("instruction", &self.by_instruction),
        ] {
            writeln!(f)?;
            row(f, title, width, "strict", "loose")?;
            for (k, g) in groups {
                row(f, k, width, &pct(g.strict), &pct(g.loose))?;
            }
        }
        if self.unmatched > 0 {
            writeln!(
                f,
                "{} responses match no prompt (their prompt text differs from every input's) and were not scored",
                self.unmatched
            )?;
        }
        if !self.missing.is_empty() {
            writeln!(f)?;
            let keys: Vec<String> = self.missing.iter().map(i64::to_string).collect();
            writeln!(f, "missing responses ({}): {}", keys.len(), keys.join(", "))?;
        }
        Ok(())
    }
}
