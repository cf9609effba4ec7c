//! `detectable_content:*` — placeholders and postscripts.

use std::sync::OnceLock;

use regex::Regex;

use super::PY_S;

fn placeholder() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"\[.*?\]").expect("valid regex"))
}

/// `detectable_content:number_placeholders`: matches of `\[.*?\]` at least `n`.
pub fn number_placeholders(r: &str, n: i64) -> bool {
    (placeholder().find_iter(r).count() as i64) >= n
}

/// The search pattern for a (trimmed) postscript marker, matched against `lower(r)`.
pub fn postscript_regex(marker: &str) -> Regex {
    let pattern = match marker {
        "P.P.S" => format!(r"p\.{PY_S}?p\.{PY_S}?s"),
        "P.S." => format!(r"p\.{PY_S}?s\."),
        other => regex::escape(&other.to_lowercase()),
    };
    Regex::new(&pattern)
        .expect("an escaped literal of at most MAX_PATTERN_CHARS characters compiles")
}

/// `detectable_content:postscript`: the marker pattern occurs anywhere in `lower(r)`.
pub fn postscript(r: &str, marker: &Regex) -> bool {
    marker.is_match(&r.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders() {
        assert!(number_placeholders("[a] [] [b\nc] [[x]] [l](u)", 4));
        assert!(!number_placeholders("[a] [] [b\nc] [[x]] [l](u)", 5));
    }

    #[test]
    fn postscript_markers() {
        let ps = postscript_regex("P.S.");
        let pps = postscript_regex("P.P.S");
        assert!(postscript("text\nP. S. note", &ps));
        assert!(postscript("P.P.S. x", &ps) && postscript("P.P.S. x", &pps));
        assert!(!postscript("p.p.s", &ps) && postscript("p.p.s", &pps));
        assert!(!postscript("PS: x", &ps) && !postscript("PS: x", &pps));
        assert!(postscript("help.p.s.", &ps) && postscript("help.p.s.", &pps));
        assert!(postscript("x Note: y", &postscript_regex("Note:")));
    }
}
