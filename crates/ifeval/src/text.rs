//! Python string semantics that the checks depend on: whitespace, `strip`, `split`,
//! `\w`, `isupper`/`islower` and word counting, as CPython 3 defines them.

use unicode_general_category::{get_general_category, GeneralCategory as Gc};

/// Python `str.isspace` for one character: Unicode White_Space plus U+001C..U+001F.
pub fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python `str.strip()` with no argument.
pub fn py_trim(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// Python `str.rstrip()` with no argument.
pub fn py_trim_end(s: &str) -> &str {
    s.trim_end_matches(is_py_space)
}

/// True if `s` is empty after [`py_trim`].
pub fn is_blank(s: &str) -> bool {
    s.chars().all(is_py_space)
}

/// Python `str.split()` with no argument: runs of whitespace separate, no empty items.
pub fn split_ws(s: &str) -> impl Iterator<Item = &str> {
    s.split(is_py_space).filter(|p| !p.is_empty())
}

/// A word character of Python's `re` module (str patterns): `_` or `str.isalnum()`,
/// i.e. a letter (L*) or number (N*) category. Combining marks are *not* word characters.
pub fn is_py_word(c: char) -> bool {
    if c == '_' {
        return true;
    }
    if c.is_ascii() {
        return c.is_ascii_alphanumeric();
    }
    matches!(
        get_general_category(c),
        Gc::UppercaseLetter
            | Gc::LowercaseLetter
            | Gc::TitlecaseLetter
            | Gc::ModifierLetter
            | Gc::OtherLetter
            | Gc::DecimalNumber
            | Gc::LetterNumber
            | Gc::OtherNumber
    )
}

/// Python `\d` (str patterns): general category Nd.
pub fn is_py_digit(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_digit();
    }
    get_general_category(c) == Gc::DecimalNumber
}

/// Number of maximal runs of Python word characters (NLTK `RegexpTokenizer(r"\w+")`).
pub fn count_words(s: &str) -> usize {
    let mut count = 0;
    let mut in_word = false;
    for c in s.chars() {
        let w = is_py_word(c);
        if w && !in_word {
            count += 1;
        }
        in_word = w;
    }
    count
}

fn is_titlecase(c: char) -> bool {
    !c.is_ascii() && get_general_category(c) == Gc::TitlecaseLetter
}

/// Python `str.isupper()`: at least one uppercase character and no lowercase or titlecase one.
pub fn py_isupper(s: &str) -> bool {
    let mut cased = false;
    for c in s.chars() {
        if c.is_lowercase() || is_titlecase(c) {
            return false;
        }
        if c.is_uppercase() {
            cased = true;
        }
    }
    cased
}

/// Python `str.islower()`: at least one lowercase character and no uppercase or titlecase one.
pub fn py_islower(s: &str) -> bool {
    let mut cased = false;
    for c in s.chars() {
        if c.is_uppercase() || is_titlecase(c) {
            return false;
        }
        if c.is_lowercase() {
            cased = true;
        }
    }
    cased
}

/// True if byte offset `i` of `s` is a Python `re` word boundary (`\b`).
pub fn is_py_boundary(s: &str, i: usize) -> bool {
    let before = s[..i].chars().next_back().is_some_and(is_py_word);
    let after = s[i..].chars().next().is_some_and(is_py_word);
    before != after
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_includes_information_separators() {
        assert_eq!(py_trim("\u{1c} a \u{1f}\n"), "a");
        assert!(is_blank(" \t\u{1d}\u{3000}"));
        assert!(!is_blank("\u{200b}"));
        assert_eq!(
            split_ws(" a  b\u{1e}c ").collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
    }

    #[test]
    fn word_counts_follow_python() {
        assert_eq!(count_words("नमस्ते दुनिया"), 5);
        assert_eq!(count_words("don't stop state-of-the-art 3.14"), 9);
        assert_eq!(count_words("hello_world"), 1);
        assert_eq!(count_words("😀 🎉"), 0);
        assert_eq!(count_words(""), 0);
    }

    #[test]
    fn case_predicates() {
        assert!(py_isupper("HELLO, WORLD 123"));
        assert!(!py_isupper("123 !!"));
        assert!(!py_isupper("HELLo"));
        assert!(!py_isupper("A\u{1c5}"));
        assert!(!py_islower("a\u{1c5}"));
        assert!(py_islower("hello 世界"));
        assert!(!py_islower("世界"));
    }

    #[test]
    fn boundaries() {
        let s = "re-name x";
        assert!(is_py_boundary(s, 0));
        assert!(is_py_boundary(s, 2));
        assert!(!is_py_boundary(s, 1));
        assert!(is_py_boundary(s, s.len()));
        // A combining mark is not a word character in Python.
        let t = "a\u{301}";
        assert!(is_py_boundary(t, 1));
    }
}
