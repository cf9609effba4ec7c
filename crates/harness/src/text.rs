//! Text rules shared by hooks and the scorer: phrase matching and template variables.

use serde_json::Value;

/// Whether a character is CJK (Han, kana, hangul, fullwidth forms): such
/// scripts have no word boundaries, so phrases containing them match as substrings.
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF | 0xFF00..=0xFFEF | 0x20000..=0x2FFFF)
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() && !is_cjk(c)
}

/// Case-insensitive phrase search: on word boundaries for Latin script,
/// as a substring where the phrase contains CJK characters.
pub fn contains_phrase(text: &str, phrase: &str) -> bool {
    find_phrase(text, phrase).is_some()
}

/// Byte range of the first match of `phrase` in `text` (see [`contains_phrase`]).
pub fn find_phrase(text: &str, phrase: &str) -> Option<(usize, usize)> {
    let phrase = phrase.trim();
    if phrase.is_empty() {
        return None;
    }
    let lower_text = text.to_lowercase();
    let lower_phrase = phrase.to_lowercase();
    // Lowercasing can change byte lengths for a few scripts; fall back to a
    // boundary-free search on the original text when it did.
    if lower_text.len() != text.len() {
        return text.find(phrase).map(|s| (s, s + phrase.len()));
    }
    let cjk = lower_phrase.chars().any(is_cjk);
    let mut from = 0;
    while let Some(rel) = lower_text[from..].find(&lower_phrase) {
        let start = from + rel;
        let end = start + lower_phrase.len();
        if cjk {
            return Some((start, end));
        }
        let first = lower_phrase.chars().next().unwrap_or(' ');
        let last = lower_phrase.chars().next_back().unwrap_or(' ');
        let before_ok = !is_word_char(first)
            || lower_text[..start]
                .chars()
                .next_back()
                .is_none_or(|c| !is_word_char(c));
        let after_ok = !is_word_char(last)
            || lower_text[end..]
                .chars()
                .next()
                .is_none_or(|c| !is_word_char(c));
        if before_ok && after_ok {
            return Some((start, end));
        }
        from = start + lower_text[start..].chars().next().map_or(1, char::len_utf8);
    }
    None
}

/// Removes every match of `phrase` and tidies the spaces left behind.
pub fn remove_phrase(text: &str, phrase: &str) -> String {
    let mut out = text.to_string();
    while let Some((s, e)) = find_phrase(&out, phrase) {
        out.replace_range(s..e, "");
    }
    tidy_spaces(&out)
}

/// Replaces every match of `phrase` by `with`.
pub fn replace_phrase(text: &str, phrase: &str, with: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((s, e)) = find_phrase(rest, phrase) {
        out.push_str(&rest[..s]);
        out.push_str(with);
        rest = &rest[e..];
    }
    out.push_str(rest);
    out
}

pub fn tidy_spaces(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_space = false;
    for c in s.trim().chars() {
        if c == ' ' {
            if !prev_space {
                out.push(c);
            }
            prev_space = true;
        } else {
            if prev_space && matches!(c, ',' | '.' | '!' | '?') {
                out.pop();
            }
            out.push(c);
            prev_space = false;
        }
    }
    out
}

/// Cuts `s` to at most `max` characters, preferring a word boundary.
pub fn truncate_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max).collect();
    match cut.rfind([' ', '，', '。']) {
        Some(i) if i > cut.len() / 2 => cut[..i].trim_end_matches([',', ';', ' ']).to_string(),
        _ => cut,
    }
}

/// Fills `{{ name }}` and `{{ a.b }}` from `vars`. Unknown names become empty,
/// as in Jinja's lenient mode; only simple lookups are supported because hook
/// values are short phrases, not templates.
pub fn fill_vars(text: &str, vars: &Value) -> String {
    if !text.contains("{{") {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find("}}") else {
            out.push_str(&rest[start..]);
            return out;
        };
        let name = rest[start + 2..start + end].trim();
        let mut cur = vars;
        let mut ok = true;
        for seg in name.split('.') {
            match cur.get(seg) {
                Some(v) => cur = v,
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            match cur {
                Value::String(s) => out.push_str(s),
                Value::Null => {}
                other => out.push_str(&other.to_string()),
            }
        }
        rest = &rest[start + end + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn latin_phrases_match_on_word_boundaries() {
        assert!(contains_phrase("This is the BEST deal", "best"));
        assert!(!contains_phrase("bestseller list", "best"));
        assert!(contains_phrase("we are No.1 here", "No.1"));
        assert!(!contains_phrase("No.12", "No.1"));
        assert!(contains_phrase("guaranteed!", "guaranteed"));
    }

    #[test]
    fn cjk_phrases_match_as_substrings() {
        assert!(contains_phrase("这是全网最便宜的", "最"));
        assert!(contains_phrase("销量第一名", "第一"));
        assert!(!contains_phrase("很好的选择", "最"));
    }

    #[test]
    fn removing_and_replacing() {
        assert_eq!(
            remove_phrase("the best hoodie , really", "best"),
            "the hoodie, really"
        );
        assert_eq!(
            replace_phrase("Best price, best fit", "best", "great"),
            "great price, great fit"
        );
    }

    #[test]
    fn vars_fill() {
        let v = json!({"viewer": "lily", "product": {"link": 3}});
        assert_eq!(
            fill_vars("Hi {{ viewer }}, tap {{product.link}}!{{ nope }}", &v),
            "Hi lily, tap 3!"
        );
    }

    #[test]
    fn truncation_respects_limit() {
        let s = "one two three four five six";
        let t = truncate_chars(s, 12);
        assert!(t.chars().count() <= 12);
        assert_eq!(t, "one two");
    }
}
