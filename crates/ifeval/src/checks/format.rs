//! `detectable_format:*` — bullets, constrained answers, highlights, sections, JSON, titles.

use std::sync::OnceLock;

use regex::Regex;

use super::PY_S;
use crate::text::{is_blank, py_trim};

struct Patterns {
    star_bullet: Regex,
    dash_bullet: Regex,
    highlight: Regex,
    double_highlight: Regex,
    title: Regex,
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| Patterns {
        star_bullet: Regex::new(&format!(r"(?m)^{PY_S}*\*[^*].*$")).expect("valid regex"),
        dash_bullet: Regex::new(&format!(r"(?m)^{PY_S}*-.*$")).expect("valid regex"),
        highlight: Regex::new(r"\*[^\n*]*\*").expect("valid regex"),
        double_highlight: Regex::new(r"\*\*[^\n*]*\*\*").expect("valid regex"),
        title: Regex::new(r"<<[^\n]+>>").expect("valid regex"),
    })
}

/// Number of bullet lines as upstream counts them (spec N12).
pub fn count_bullets(r: &str) -> usize {
    let p = patterns();
    p.star_bullet.find_iter(r).count() + p.dash_bullet.find_iter(r).count()
}

/// `detectable_format:number_bullet_lists`: exactly `n` bullets.
pub fn number_bullet_lists(r: &str, n: i64) -> bool {
    count_bullets(r) as i64 == n
}

/// `detectable_format:constrained_response`.
pub fn constrained_response(r: &str) -> bool {
    let t = py_trim(r);
    [
        "My answer is yes.",
        "My answer is no.",
        "My answer is maybe.",
    ]
    .iter()
    .any(|o| t.contains(o))
}

/// Highlight count as upstream computes it (spec N14).
pub fn count_highlights(r: &str) -> usize {
    let p = patterns();
    let single = p
        .highlight
        .find_iter(r)
        .filter(|m| !is_blank(m.as_str().trim_matches('*')))
        .count();
    let double = p
        .double_highlight
        .find_iter(r)
        .filter(|m| {
            let s = m.as_str();
            !is_blank(&s[2..s.len() - 2])
        })
        .count();
    single + double
}

/// `detectable_format:number_highlighted_sections`: at least `n` highlights.
pub fn number_highlighted_sections(r: &str, n: i64) -> bool {
    count_highlights(r) as i64 >= n
}

/// Section header pattern: `\s?SPLITTER\s?\d+\s?` with the splitter used literally.
pub fn section_regex(splitter: &str) -> Regex {
    Regex::new(&format!(
        r"{PY_S}?{}{PY_S}?\d+{PY_S}?",
        regex::escape(splitter)
    ))
    .expect("an escaped literal of at most MAX_PATTERN_CHARS characters compiles")
}

/// `detectable_format:multiple_sections`: at least `n` section headers.
pub fn multiple_sections(r: &str, splitter: &Regex, n: i64) -> bool {
    splitter.find_iter(r).count() as i64 >= n
}

/// `detectable_format:json_format` (spec N16).
pub fn json_format(r: &str) -> bool {
    let mut t = py_trim(r);
    for prefix in ["```json", "```Json", "```JSON", "```"] {
        t = t.strip_prefix(prefix).unwrap_or(t);
    }
    t = t.strip_suffix("```").unwrap_or(t);
    crate::pyjson::is_valid(py_trim(t))
}

/// `detectable_format:title`: some `<<...>>` on one line is non-blank inside.
pub fn title(r: &str) -> bool {
    patterns()
        .title
        .find_iter(r)
        .any(|m| !is_blank(m.as_str().trim_start_matches('<').trim_end_matches('>')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bullets() {
        assert_eq!(
            count_bullets("* a\n* b\n- c\n---\n**bold** line\n  * indented"),
            5
        );
        assert_eq!(count_bullets("*\n* b"), 1);
        assert_eq!(count_bullets("1. one\n• two\n*italic* line"), 1);
        assert!(number_bullet_lists("* a\n* b", 2));
        assert!(!number_bullet_lists("* a\n* b\n* c", 2));
    }

    #[test]
    fn highlights() {
        for (t, n) in [
            ("**bold**", 1),
            ("*a* *b*", 2),
            ("*a*b*", 1),
            ("***x***", 2),
            ("**a** and *b*", 2),
            ("*  *", 0),
            ("* item\n* item2", 0),
        ] {
            assert_eq!(count_highlights(t), n, "{t}");
        }
    }

    #[test]
    fn sections() {
        let s = section_regex("SECTION");
        assert!(multiple_sections("SECTION 1 a SECTION 2 b", &s, 2));
        for t in ["Section 1", "SECTION X", "SECTION  1"] {
            assert!(!multiple_sections(t, &s, 1), "{t}");
        }
        assert!(multiple_sections(
            "Section1 x",
            &section_regex("Section"),
            1
        ));
    }

    #[test]
    fn json() {
        assert!(json_format("```json\n{\"a\": 1}\n```"));
        assert!(json_format("  [1, 2] "));
        assert!(json_format("```JSON\nNaN\n```"));
        assert!(!json_format("Here is the JSON:\n```json\n{}\n```"));
        assert!(!json_format("{'a': 1}"));
    }

    #[test]
    fn titles() {
        assert!(title("<<a>> and <<b>>"));
        for t in ["<< >>", "<<>>", "<<<>>>", "<<x\ny>>"] {
            assert!(!title(t), "{t}");
        }
    }

    #[test]
    fn constrained() {
        assert!(constrained_response("  My answer is maybe. Because"));
        assert!(!constrained_response("my answer is yes."));
    }
}
