//! `startend:*` — end phrase, wrapping in double quotes.

use crate::text::py_trim;

/// `startend:end_checker`: trimmed, outer `"` removed, lower-cased text ends with `end_phrase`
/// (already trimmed and lower-cased).
pub fn end_checker(r: &str, end_phrase: &str) -> bool {
    py_trim(r)
        .trim_matches('"')
        .to_lowercase()
        .ends_with(end_phrase)
}

/// `startend:quotation`: the trimmed text has ≥ 2 chars and starts and ends with `"`.
pub fn quotation(r: &str) -> bool {
    let t = py_trim(r);
    t.chars().count() > 1 && t.starts_with('"') && t.ends_with('"')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_phrase() {
        assert!(end_checker(
            "Bye. Any other questions?\" \n",
            "any other questions?"
        ));
        assert!(!end_checker(
            "Any other questions? ok",
            "any other questions?"
        ));
        // No second trim after removing the quotes.
        assert!(!end_checker(
            "\"Any other questions? \"",
            "any other questions?"
        ));
    }

    #[test]
    fn quotes() {
        assert!(quotation(" \"hi\" "));
        assert!(quotation("\"\""));
        assert!(!quotation("\""));
        assert!(!quotation("“hi”"));
    }
}
