//! `change_case:*` — capital word frequency, all upper case English, all lower case English.

use super::Relation;
use crate::lang;
use crate::text::{py_islower, py_isupper};
use crate::tokenize::word_tokenize;

/// Number of NLTK word tokens that are upper case (Python `str.isupper`).
pub fn count_capital_words(r: &str) -> usize {
    word_tokenize(r).iter().filter(|t| py_isupper(t)).count()
}

/// `change_case:capital_word_frequency`.
pub fn capital_word_frequency(r: &str, relation: Relation, n: i64) -> bool {
    relation.holds(count_capital_words(r), n)
}

fn english_or_undetectable(r: &str) -> bool {
    match lang::detect(r) {
        None => true,
        Some(l) => l == "en",
    }
}

/// `change_case:english_capital`: `isupper(r)` and langdetect says `en` (or raises).
pub fn english_capital(r: &str) -> bool {
    py_isupper(r) && english_or_undetectable(r)
}

/// `change_case:english_lowercase`: `islower(r)` and langdetect says `en` (or raises).
pub fn english_lowercase(r: &str) -> bool {
    py_islower(r) && english_or_undetectable(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capital_words() {
        assert_eq!(count_capital_words("I love NASA's work"), 2);
        assert!(capital_word_frequency("I love NASA", Relation::AtLeast, 2));
        assert!(capital_word_frequency("no caps 123", Relation::LessThan, 1));
    }

    #[test]
    fn english_case() {
        assert!(english_lowercase(
            "this is a perfectly ordinary english sentence about the weather."
        ));
        assert!(!english_lowercase(
            "This is a perfectly ordinary English sentence."
        ));
        assert!(english_capital(
            "THIS IS A PERFECTLY ORDINARY ENGLISH SENTENCE ABOUT THE WEATHER."
        ));
        assert!(!english_capital("123 !!!"));
        assert!(!english_lowercase(
            "dies ist ein ganz normaler deutscher satz über das wetter und die welt."
        ));
    }
}
