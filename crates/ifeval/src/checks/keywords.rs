//! `keywords:*` — existence, frequency, forbidden words, letter frequency.

use regex::Regex;

use super::Relation;
use crate::text::is_py_boundary;

/// Case-insensitive regex for a keyword used literally (upstream uses it as a pattern; every
/// keyword in the data is a plain word, for which both agree).
pub fn keyword_regex(keyword: &str) -> Regex {
    Regex::new(&format!("(?i){}", regex::escape(keyword)))
        .expect("an escaped literal of at most MAX_PATTERN_CHARS characters compiles")
}

/// `keywords:existence`: every keyword occurs, case-insensitively, without word boundaries.
pub fn existence(r: &str, keywords: &[Regex]) -> bool {
    keywords.iter().all(|k| k.is_match(r))
}

/// `keywords:frequency`: non-overlapping case-insensitive occurrences compared with `n`.
pub fn frequency(r: &str, keyword: &Regex, relation: Relation, n: i64) -> bool {
    relation.holds(keyword.find_iter(r).count(), n)
}

/// True if `word` occurs in `r` as `\bword\b` (case-insensitive, Python word boundaries).
pub fn contains_word(r: &str, word: &Regex) -> bool {
    let mut pos = 0;
    while let Some(m) = word.find_at(r, pos) {
        if is_py_boundary(r, m.start()) && is_py_boundary(r, m.end()) {
            return true;
        }
        // Try the next start position: candidates may overlap.
        match r[m.start()..].chars().next() {
            Some(c) => pos = m.start() + c.len_utf8(),
            None => break,
        }
    }
    false
}

/// `keywords:forbidden_words`: none of the words occurs between word boundaries.
pub fn forbidden_words(r: &str, words: &[Regex]) -> bool {
    !words.iter().any(|w| contains_word(r, w))
}

/// `keywords:letter_frequency`: code points equal to `letter` in `lower(r)`, compared with `n`.
/// A `letter` that is not exactly one code point counts 0, as a Python `Counter` lookup does.
pub fn letter_frequency(r: &str, letter: &str, relation: Relation, n: i64) -> bool {
    let mut it = letter.chars();
    let count = match (it.next(), it.next()) {
        (Some(l), None) => r.to_lowercase().chars().filter(|&c| c == l).count(),
        _ => 0,
    };
    relation.holds(count, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn existence_has_no_word_boundaries() {
        let ks = [keyword_regex("java"), keyword_regex("LE")];
        assert!(existence("JavaScript and apple", &ks));
        assert!(!existence("JavaScript only", &ks));
    }

    #[test]
    fn frequency_counts_inside_words() {
        let k = keyword_regex("war");
        assert!(frequency(
            "War software warm toward WAR",
            &k,
            Relation::AtLeast,
            5
        ));
        assert!(!frequency(
            "War software warm toward WAR",
            &k,
            Relation::LessThan,
            5
        ));
        assert!(frequency("x", &k, Relation::LessThan, 1));
    }

    #[test]
    fn forbidden_words_use_boundaries() {
        let w = [keyword_regex("name")];
        assert!(forbidden_words("please rename it", &w));
        assert!(!forbidden_words("the name's", &w));
        assert!(!forbidden_words("NAME", &w));
        assert!(!forbidden_words("in 300 bc.", &[keyword_regex("BC")]));
        // Overlapping candidates: the second one is a whole word.
        assert!(!forbidden_words("aaa aa", &[keyword_regex("aa")]));
        // Python: a combining mark is not a word character, so `cafe` is found in `café`.
        assert!(!forbidden_words("cafe\u{301}", &[keyword_regex("cafe")]));
    }

    #[test]
    fn letter_frequency_counts_code_points_after_lowercasing() {
        assert!(letter_frequency("Banana", "a", Relation::AtLeast, 3));
        assert!(letter_frequency("## # x", "#", Relation::AtLeast, 3));
        assert!(letter_frequency("AAA", "a", Relation::LessThan, 4));
        // `İ` lowercases to `i` + U+0307.
        assert!(letter_frequency("İ", "i", Relation::AtLeast, 1));
        assert!(letter_frequency("aaaa", "aa", Relation::LessThan, 1));
    }
}
