//! `length_constraints:*` — sentences, paragraphs, words, nth paragraph's first word.

use std::sync::OnceLock;

use regex::Regex;

use super::{Relation, PY_S};
use crate::text::{count_words, is_blank, py_trim, split_ws};

/// `length_constraints:number_sentences`: Punkt sentence count compared with `n`.
pub fn number_sentences(r: &str, relation: Relation, n: i64) -> bool {
    relation.holds(crate::punkt::count_sentences(r), n)
}

/// `length_constraints:number_words`: runs of word characters compared with `n`.
pub fn number_words(r: &str, relation: Relation, n: i64) -> bool {
    relation.holds(count_words(r), n)
}

fn paragraph_divider() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(&format!(r"{PY_S}?\*\*\*{PY_S}?")).expect("valid regex"))
}

/// `length_constraints:number_paragraphs`: pieces between `***` dividers, exactly `n`.
/// Blank pieces are dropped at either end; a blank piece elsewhere fails the check.
pub fn number_paragraphs(r: &str, n: i64) -> bool {
    let pieces: Vec<&str> = paragraph_divider().split(r).collect();
    let last = pieces.len() - 1;
    let mut count = pieces.len() as i64;
    for (i, p) in pieces.iter().enumerate() {
        if is_blank(p) {
            if i == 0 || i == last {
                count -= 1;
            } else {
                return false;
            }
        }
    }
    count == n
}

/// `length_constraints:nth_paragraph_first_word` (spec N9). `first_word` is already lower-cased.
pub fn nth_paragraph_first_word(r: &str, num_paragraphs: i64, nth: i64, first_word: &str) -> bool {
    let pieces: Vec<&str> = r.split("\n\n").collect();
    let count = pieces.iter().filter(|p| !is_blank(p)).count() as i64;
    if nth > count {
        return false;
    }
    // Python indexing: `paragraphs[nth - 1]`, negative indices count from the end.
    let len = pieces.len() as i64;
    // an input record's `nth_paragraph` may be any i64: i64::MIN - 1 would overflow
    let Some(before) = nth.checked_sub(1) else {
        return false;
    };
    let idx = if before < 0 { before + len } else { before };
    let Some(piece) = usize::try_from(idx).ok().and_then(|i| pieces.get(i)) else {
        return false;
    };
    let paragraph = py_trim(piece);
    let Some(word) = split_ws(paragraph).next() else {
        return false;
    };
    let word = word.trim_start_matches('\'').trim_start_matches('"');
    let found: String = word
        .chars()
        .take_while(|c| !matches!(c, '.' | ',' | '?' | '!' | '\'' | '"'))
        .flat_map(char::to_lowercase)
        .collect();
    count == num_paragraphs && found == first_word
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any `nth_paragraph` an input record holds is answered, i64::MIN included.
    #[test]
    fn an_extreme_paragraph_index_is_false_not_an_overflow() {
        let text = "Alpha one.\n\nBeta two.";
        assert!(nth_paragraph_first_word(text, 2, 2, "beta"));
        // (0 reads the last paragraph, as Python's `paragraphs[-1]` does)
        for nth in [i64::MIN, i64::MIN + 1, -5, i64::MAX] {
            assert!(!nth_paragraph_first_word(text, 2, nth, "beta"), "{nth}");
        }
    }

    #[test]
    fn paragraphs_split_on_stars() {
        assert!(number_paragraphs("a *** b", 2));
        assert!(number_paragraphs("a\n***\nb\n***\n", 2));
        assert!(number_paragraphs("*** a *** b", 2));
        assert!(!number_paragraphs("a ****** b", 1));
        assert!(!number_paragraphs("a ****** b", 2));
        assert!(!number_paragraphs("a ***\n\n*** b", 2));
        assert!(number_paragraphs("just one", 1));
    }

    #[test]
    fn words_and_sentences() {
        assert!(number_words("don't stop", Relation::AtLeast, 3));
        assert!(number_words("don't stop", Relation::LessThan, 4));
        assert!(number_sentences(
            "Hello world. How are you? Fine!",
            Relation::AtLeast,
            3
        ));
        assert!(number_sentences(
            "Hello world. How are you? Fine!",
            Relation::LessThan,
            4
        ));
    }

    #[test]
    fn nth_paragraph() {
        let r = "Intro.\n\n\"Weekend, yes.\n\nEnd";
        assert!(nth_paragraph_first_word(r, 3, 2, "weekend"));
        assert!(!nth_paragraph_first_word(r, 2, 2, "weekend"));
        assert!(!nth_paragraph_first_word(
            "a\n\n**Weekend** x",
            2,
            2,
            "weekend"
        ));
        assert!(nth_paragraph_first_word("a\n\n\nb", 2, 2, "b"));
        // `a`, empty, `b`: count 2 but piece 2 is blank.
        assert!(!nth_paragraph_first_word("a\n\n\n\nb", 2, 2, "b"));
        assert!(!nth_paragraph_first_word("a\n\nb", 2, 3, "b"));
        // CRLF is not a separator.
        assert!(!nth_paragraph_first_word("a\r\n\r\nb", 2, 2, "b"));
        assert!(nth_paragraph_first_word("'\"Don't stop", 1, 1, "don"));
    }
}
