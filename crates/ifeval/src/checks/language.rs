//! `language:response_language`.

use crate::lang;

/// Passes iff langdetect identifies `language`, or raises (no features).
pub fn response_language(r: &str, language: &str) -> bool {
    match lang::detect(r) {
        None => true,
        Some(l) => l == language,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn language_verdicts() {
        assert!(response_language(
            "Dies ist ein ganz normaler deutscher Satz über das Wetter.",
            "de"
        ));
        assert!(!response_language(
            "This is a perfectly ordinary English sentence about the weather.",
            "de"
        ));
        assert!(response_language("12345 !!! ???", "de"));
    }
}
