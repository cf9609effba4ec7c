//! Degenerate answers: a small model sampled at temperature 0.8, or decoded greedily into a
//! loop, often ends on its own with text that repeats itself (the same list item eight times, a
//! refrain of one line, a sentence over and over). Such an answer can pass a prompt's check
//! (it may be under 50 words, or hold the keyword), but trained on, it teaches the repetition
//! that general answers of SFT'd and distilled models already suffer from; so replay
//! (`hat data replay`) drops it, and `hat eval failures` counts such IFEval answers.
//!
//! Three signals, each cheap and each needing enough text to mean anything: the share of
//! non-empty lines that occur more than once, the share of distinct word trigrams, and a
//! sentence of more than a few words repeated three times. The thresholds were set on the
//! base model's replay answers (docs/results.md): they flag list items, refrains and looping
//! paragraphs, not answers that merely reuse a phrase.

use std::collections::{HashMap, HashSet};

/// Lines an answer needs before its duplicate-line share counts.
const MIN_LINES: usize = 4;
/// More than this share of non-empty lines occurring twice or more is a loop.
const MAX_DUPLICATE_LINES: f64 = 0.3;
/// Words an answer needs before its trigram diversity counts.
const MIN_WORDS: usize = 40;
/// Fewer distinct word trigrams than this share of all of them is a loop.
const MIN_DISTINCT_TRIGRAMS: f64 = 0.65;
/// A sentence longer than this many characters said this many times is a loop.
const SENTENCE_CHARS: usize = 20;
const SENTENCE_REPEATS: usize = 3;

/// Which signal marked an answer as degenerate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repetition {
    Lines,
    Trigrams,
    Sentence,
}

/// The first signal `text` trips, or `None` for an answer that does not repeat itself.
pub fn repetition(text: &str) -> Option<Repetition> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.len() >= MIN_LINES {
        let mut count: HashMap<&str, usize> = HashMap::new();
        for l in &lines {
            *count.entry(l).or_default() += 1;
        }
        let dup: usize = count.values().filter(|&&n| n > 1).sum();
        if dup as f64 / lines.len() as f64 > MAX_DUPLICATE_LINES {
            return Some(Repetition::Lines);
        }
    }
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    if words.len() >= MIN_WORDS {
        let trigrams: Vec<&[String]> = words.windows(3).collect();
        let distinct: HashSet<&[String]> = trigrams.iter().copied().collect();
        if (distinct.len() as f64) < MIN_DISTINCT_TRIGRAMS * trigrams.len() as f64 {
            return Some(Repetition::Trigrams);
        }
    }
    sentence_loop(text).then_some(Repetition::Sentence)
}

/// Whether `text` says a sentence of more than [`SENTENCE_CHARS`] characters
/// [`SENTENCE_REPEATS`] times. Only whole sentences (ended by `.`, `!`, `?` or a line break)
/// count, so once a prefix of an answer trips it, the whole answer does: a decoder may stop
/// such an answer there, since [`repetition`] drops it whatever follows.
pub fn sentence_loop(text: &str) -> bool {
    let mut sentences: HashMap<&str, usize> = HashMap::new();
    for s in text.split_inclusive(['.', '!', '?', '\n']) {
        if !s.ends_with(['.', '!', '?', '\n']) {
            break;
        }
        let s = s.trim();
        if s.chars().count() > SENTENCE_CHARS {
            let n = sentences.entry(s).or_default();
            *n += 1;
            if *n >= SENTENCE_REPEATS {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_are_caught_and_ordinary_answers_are_not() {
        let list: String = (1..=8)
            .map(|i| format!("{i}. What's your volunteer experience?\n"))
            .collect();
        // numbered items differ as lines but not as words
        assert_eq!(repetition(&list), Some(Repetition::Trigrams));
        let refrain = "In the hive where shadows lie,\nA bee's a bee.\nAs a bee makes honey,\n\
                       A bee's a bee.\n\nIn the hive where shadows lie,\nA bee's a bee.";
        assert_eq!(repetition(refrain), Some(Repetition::Lines));
        let s = "The article is written in a clear and concise manner. ";
        let looped = format!("It covers the count's life and his wars. {}", s.repeat(3));
        assert_eq!(repetition(&looped), Some(Repetition::Sentence));

        let ordinary = "The sky looks blue because air scatters short wavelengths of sunlight \
            more than long ones. This is called Rayleigh scattering. At sunset the light \
            crosses more air, so the blue is scattered away and reds and oranges remain. On \
            the Moon, with no air, the sky is black even in daylight.";
        assert_eq!(repetition(ordinary), None);
        let bullets =
            "- Pack a warm jacket\n- Bring water\n- Check the weather\n- Tell a friend your route";
        assert_eq!(repetition(bullets), None);
        // a loop in a prefix is a loop in the whole answer, and a sentence still being written
        // does not count yet
        for cut in 0..=looped.len() {
            if let Some(prefix) = looped.get(..cut) {
                if sentence_loop(prefix) {
                    assert!(repetition(&format!("{prefix} And more.")).is_some());
                }
            }
        }
        let third = looped.rfind("The article").unwrap();
        assert!(!sentence_loop(&looped[..looped.len() - 2]));
        assert!(!sentence_loop(&format!(
            "{}The article is written in a clear and concise manner",
            &looped[..third]
        )));
        assert!(sentence_loop(&looped));
        // too short for any signal to mean anything
        assert_eq!(repetition("Yes. Yes. Yes."), None);
        assert_eq!(repetition(""), None);
    }
}
