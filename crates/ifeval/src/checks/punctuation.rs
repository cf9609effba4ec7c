//! `punctuation:no_comma`.

/// Passes iff `r` contains no ASCII comma (U+002C); other commas are allowed.
pub fn no_comma(r: &str) -> bool {
    !r.contains(',')
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_ascii_commas_count() {
        assert!(super::no_comma("a，b、c،d"));
        assert!(!super::no_comma("a, b"));
    }
}
