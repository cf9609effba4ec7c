//! Paraphrase banks: how viewers word each kind of comment.
//!
//! Two disjoint banks (`banks/train.toml`, `banks/test.toml`) so that test
//! comments are worded in ways training never saw; each also has its own
//! noise pools (emoji, openers, sign-offs, slang).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Deserialize;

use crate::Split;

#[derive(Debug, Deserialize)]
struct Templates {
    templates: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct Noise {
    pub emoji: Vec<String>,
    pub prefixes: Vec<String>,
    pub suffixes: Vec<String>,
    pub slang: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Deserialize)]
struct RawBank {
    noise: Noise,
    zh: BTreeMap<String, Templates>,
    #[serde(flatten)]
    en: BTreeMap<String, Templates>,
}

/// One split's bank, parsed once.
#[derive(Debug)]
pub struct Bank {
    pub en: BTreeMap<String, Vec<String>>,
    pub zh: BTreeMap<String, Vec<String>>,
    pub noise: Noise,
}

impl Bank {
    pub fn get(split: Split) -> &'static Bank {
        static TRAIN: OnceLock<Bank> = OnceLock::new();
        static TEST: OnceLock<Bank> = OnceLock::new();
        match split {
            Split::Train => TRAIN.get_or_init(|| Bank::parse(include_str!("../banks/train.toml"))),
            Split::Test => TEST.get_or_init(|| Bank::parse(include_str!("../banks/test.toml"))),
        }
    }

    fn parse(text: &str) -> Bank {
        // The banks are compiled in and checked by the tests below, so a
        // parse failure here is a build defect, not bad user input.
        let raw: RawBank = toml::from_str(text).expect("embedded paraphrase bank is valid TOML");
        Bank {
            en: raw.en.into_iter().map(|(k, v)| (k, v.templates)).collect(),
            zh: raw.zh.into_iter().map(|(k, v)| (k, v.templates)).collect(),
            noise: raw.noise,
        }
    }

    pub fn templates(&self, kind: &str, zh: bool) -> &[String] {
        let m = if zh { &self.zh } else { &self.en };
        m.get(kind).map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banks_parse_and_are_disjoint() {
        let tr = Bank::get(Split::Train);
        let te = Bank::get(Split::Test);
        assert!(tr.en.len() >= 13 && te.en.len() >= 13);
        let norm = |s: &str| {
            s.to_lowercase()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        for (kind, ts) in &tr.en {
            for t in ts {
                assert!(
                    !te.templates(kind, false).iter().any(|u| norm(u) == norm(t)),
                    "{kind}: {t}"
                );
            }
        }
        for (kind, ts) in &tr.zh {
            for t in ts {
                assert!(
                    !te.templates(kind, true).iter().any(|u| norm(u) == norm(t)),
                    "zh {kind}: {t}"
                );
            }
        }
    }
}
