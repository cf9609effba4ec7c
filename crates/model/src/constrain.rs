//! Tool names constrained at decode time: once an answer opens a call's name slot (the text a
//! harness's call syntax puts before a tool's name), only the harness's tool names may follow.
//!
//! A compact model that reads an unfamiliar harness often calls a tool by a name it does not
//! have (`catalogEntry` for `CatalogEntry`, `get_product` for `fetch_item`); the call then
//! fails and the viewer waits a turn longer. Hosted APIs rule this out with strict function
//! calling and serving engines with grammar-guided decoding; this is the same idea for the
//! name alone, which needs no grammar: a byte-level check of the text an answer would have
//! with one more token. [`crate::Engine`] samples as usual and resamples when the token it
//! drew breaks the check, so an answer the model writes with a known name is unchanged and
//! its log-probabilities stay those of the unconstrained model.

/// A check on the text an answer would have with one more token, applied at decode time
/// ([`crate::GenerateRequest::check`]): [`NameSlots`] here, a harness's whole-call grammar
/// elsewhere.
pub trait TextCheck: Send + Sync + std::fmt::Debug {
    /// Whether `before` (the answer so far, which this admitted) may be followed by `token`
    /// (its bytes; a NUL byte stands for a token without text, such as the end of the
    /// answer).
    fn admits(&self, before: &[u8], token: &[u8]) -> bool;

    /// Whether `answer` (the answer so far, which this admitted) is complete: nothing the
    /// model could add would reach its reader (a reply at its harness's length limit, which
    /// the runtime cuts there anyway). The engine then ends the answer
    /// ([`crate::FinishReason::Complete`]) instead of decoding tokens that are thrown away.
    fn complete(&self, _answer: &[u8]) -> bool {
        false
    }
}

/// The text of an answer so far: its bytes up to a character still cut at the end (or the
/// first invalid byte), which a [`TextCheck`] judges once it is whole.
pub fn text_so_far(answer: &[u8]) -> &str {
    match std::str::from_utf8(answer) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&answer[..e.valid_up_to()]).unwrap_or_default(),
    }
}

impl TextCheck for NameSlots {
    fn admits(&self, before: &[u8], token: &[u8]) -> bool {
        NameSlots::admits(self, before, token)
    }
}

/// Where tool names stand in an answer, and which names exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameSlots {
    patterns: Vec<Pattern>,
    names: Vec<Vec<u8>>,
    /// Bytes a name may hold (ASCII letters, digits, `_`, `-`, `.`, anything beyond ASCII,
    /// and whatever the names hold): a name runs up to the first byte not among them, so
    /// `get_stock2` is a name of its own, not `get_stock` and more.
    name_byte: [bool; 256],
    /// Bytes of the text before a token that a check reads: enough for the longest opener
    /// (its optional whitespace up to [`MAX_GAP`] bytes a gap) and the longest name.
    window: usize,
}

/// Whitespace a pattern's gap spans at most in [`NameSlots::admits`]'s window (a slot opened
/// further apart than that is not seen, and its name is not constrained).
pub const MAX_GAP: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern {
    /// Only at the start of a line (spaces or tabs before it aside).
    line_start: bool,
    /// Literal pieces, each after the gap it names (the first after [`Gap::None`]).
    pieces: Vec<(Gap, Vec<u8>)>,
}

/// What may stand between two literal pieces of a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gap {
    /// Nothing.
    None,
    /// Any whitespace, newlines included, or none (` ` in a pattern).
    Any,
    /// Spaces or tabs, or none (`*`).
    Blanks,
    /// One or more spaces or tabs (`+`).
    SomeBlanks,
}

impl Pattern {
    fn parse(p: &str) -> Pattern {
        let (line_start, p) = match p.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, p),
        };
        let mut pieces = Vec::new();
        let (mut gap, mut lit) = (Gap::None, Vec::new());
        for b in p.bytes() {
            let next = match b {
                b' ' => Gap::Any,
                b'*' => Gap::Blanks,
                b'+' => Gap::SomeBlanks,
                _ => {
                    lit.push(b);
                    continue;
                }
            };
            pieces.push((gap, std::mem::take(&mut lit)));
            gap = next;
        }
        pieces.push((gap, lit));
        Pattern { line_start, pieces }
    }
}

impl NameSlots {
    /// `patterns` are the texts that open a name slot: literal text where a space stands for
    /// any whitespace or none, `*` for spaces or tabs or none, `+` for one or more spaces or
    /// tabs, and a leading `^` when the opener starts a line (e.g. `<tool_call> { "name" : "`
    /// or `^CALL+`). `names` are the tools that exist. `None` when there is nothing to
    /// constrain (no pattern, or no name).
    pub fn new<S: AsRef<str>>(patterns: &[&str], names: &[S]) -> Option<NameSlots> {
        let names: Vec<Vec<u8>> = names
            .iter()
            .map(|n| n.as_ref().as_bytes().to_vec())
            .filter(|n| !n.is_empty())
            .collect();
        let patterns: Vec<Pattern> = patterns
            .iter()
            .map(|p| Pattern::parse(p))
            .filter(|p| p.pieces.iter().any(|(_, x)| !x.is_empty()))
            .collect();
        if names.is_empty() || patterns.is_empty() {
            return None;
        }
        let mut name_byte = [false; 256];
        for (b, x) in name_byte.iter_mut().enumerate() {
            let b = b as u8;
            *x = b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.') || b >= 0x80;
        }
        for n in &names {
            for &b in n {
                name_byte[b as usize] = true;
            }
        }
        let longest_name = names.iter().map(Vec::len).max().unwrap_or(0);
        let longest_opener = patterns
            .iter()
            .map(|p| {
                p.pieces
                    .iter()
                    .map(|(_, x)| x.len() + MAX_GAP)
                    .sum::<usize>()
            })
            .max()
            .unwrap_or(0);
        Some(NameSlots {
            patterns,
            names,
            name_byte,
            window: longest_opener + longest_name + 1,
        })
    }

    /// The tool names.
    pub fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.names.iter().map(Vec::as_slice)
    }

    /// Whether `before` (an answer so far, which this admitted) followed by `token` still
    /// names only known tools: every name slot the token reaches holds a known name once
    /// something other than a name byte follows it, or a start of one at the end.
    pub fn admits(&self, before: &[u8], token: &[u8]) -> bool {
        let mut start = before.len().saturating_sub(self.window);
        // A window cut inside a UTF-8 character would make no difference to the byte
        // matching, but the line-start test needs to know whether it sees the text's start.
        let whole = start == 0;
        if !whole {
            while start < before.len() && (before[start] & 0xC0) == 0x80 {
                start += 1;
            }
        }
        let mut buf = Vec::with_capacity(before.len() - start + token.len());
        buf.extend_from_slice(&before[start..]);
        buf.extend_from_slice(token);
        let old = before.len() - start;
        for p in &self.patterns {
            for i in 0..buf.len() {
                if p.line_start && !starts_line(&buf, i, whole) {
                    continue;
                }
                // an opener right after JSON punctuation is data inside a call's arguments
                // (`[[1, 2]]` in a bracket call's JSON), not a call
                if buf[..i]
                    .iter()
                    .rev()
                    .find(|b| !b.is_ascii_whitespace())
                    .is_some_and(|b| matches!(b, b':' | b',' | b'[' | b'{'))
                {
                    continue;
                }
                let Some(slot) = p.match_at(&buf, i) else {
                    continue;
                };
                let end = slot
                    + buf[slot..]
                        .iter()
                        .position(|&b| !self.name_byte[b as usize])
                        .unwrap_or(buf.len() - slot);
                // judged when `before` was: the name ended inside it
                if end < old {
                    continue;
                }
                let run = &buf[slot..end];
                let ok = if end == buf.len() {
                    self.names.iter().any(|n| n.starts_with(run))
                } else {
                    self.names.iter().any(|n| n.as_slice() == run)
                };
                if !ok {
                    return false;
                }
            }
        }
        true
    }
}

impl Pattern {
    /// Where the name slot starts when the pattern matches at `i`.
    fn match_at(&self, buf: &[u8], i: usize) -> Option<usize> {
        let mut at = i;
        for (gap, piece) in &self.pieces {
            let skip = |at: &mut usize, blank: fn(&u8) -> bool| {
                let from = *at;
                while *at < buf.len() && blank(&buf[*at]) {
                    *at += 1;
                }
                *at - from
            };
            let blank = |b: &u8| matches!(b, b' ' | b'\t');
            match gap {
                Gap::None => {}
                Gap::Any => {
                    skip(&mut at, u8::is_ascii_whitespace);
                }
                Gap::Blanks => {
                    skip(&mut at, blank);
                }
                Gap::SomeBlanks => {
                    if skip(&mut at, blank) == 0 {
                        return None;
                    }
                }
            }
            if !buf[at..].starts_with(piece) {
                return None;
            }
            at += piece.len();
        }
        Some(at)
    }
}

/// Whether `i` is the start of a line, whitespace aside (`whole`: `buf` starts where the
/// text does). Any Unicode whitespace counts, as the keyword syntaxes' parsers trim a line
/// (`str::trim`): a call indented by U+3000 is a call.
fn starts_line(buf: &[u8], i: usize, whole: bool) -> bool {
    let mut j = i;
    while j > 0 {
        let c = buf[j - 1];
        if c == b'\n' {
            return true;
        }
        j = if c.is_ascii() {
            if !(c as char).is_whitespace() {
                return false;
            }
            j - 1
        } else {
            // the first byte of the multi-byte character that ends at `j`
            let Some(k) = (j.saturating_sub(4)..j)
                .rev()
                .find(|&k| buf[k] & 0xC0 != 0x80)
            else {
                return false;
            };
            match std::str::from_utf8(&buf[k..j]) {
                Ok(s) if s.chars().all(char::is_whitespace) => k,
                _ => return false,
            }
        };
    }
    whole
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &[&str] = &[r#"<tool_call> { "name" : ""#];

    fn slots(patterns: &[&str]) -> NameSlots {
        NameSlots::new(patterns, &["get_product", "get_stock", "pin"]).unwrap()
    }

    /// Feeds `text` byte by byte; the index of the first byte refused.
    fn first_refused(s: &NameSlots, text: &str) -> Option<usize> {
        let b = text.as_bytes();
        (0..b.len()).find(|&i| !s.admits(&b[..i], &b[i..i + 1]))
    }

    #[test]
    fn a_known_name_passes_and_an_unknown_one_is_refused_where_it_leaves_the_names() {
        let s = slots(JSON);
        let ok = r#"<tool_call>{"name": "get_stock", "arguments": {"name": "Hoodie"}}</tool_call>"#;
        assert_eq!(first_refused(&s, ok), None);
        let bad = r#"<tool_call>{"name": "get_item", "arguments": {}}</tool_call>"#;
        assert_eq!(first_refused(&s, bad), Some(bad.find("item").unwrap()));
        // a start of a name followed by its closer is no name
        let cut = r#"<tool_call>{"name":"get"}"#;
        assert_eq!(first_refused(&s, cut), Some(cut.len() - 2));
        // a known name that begins a longer one may end there
        assert_eq!(first_refused(&s, r#"<tool_call>{"name":"pin"}"#), None);
        // and a known name continued is another name
        let longer = r#"<tool_call>{"name":"get_stock2"}"#;
        assert_eq!(first_refused(&s, longer), Some(longer.find('2').unwrap()));
    }

    #[test]
    fn a_token_may_carry_the_opener_and_the_name_at_once() {
        let s = slots(JSON);
        let before = b"<tool_call>{\"name";
        assert!(s.admits(before, b"\": \"get_stock\","));
        assert!(!s.admits(before, b"\": \"getStock\","));
        assert!(s.admits(before, b"\": \"get_"));
        // the slot is judged, not the rest of the answer
        assert!(s.admits(b"", b"hello, the get_item tool"));
    }

    #[test]
    fn anchored_patterns_only_open_a_slot_at_the_start_of_a_line() {
        let s = slots(&["^CALL+"]);
        assert_eq!(first_refused(&s, "CALL get_stock(product_id=\"P1\")"), None);
        assert_eq!(first_refused(&s, "  \nCALL pin(x=1)"), None);
        assert_eq!(first_refused(&s, "CALL fetch(x=1)"), Some(5));
        // indented by whitespace the parser trims, it is a call all the same
        for indent in ["\u{3000}", "\u{a0}", "\r", " \u{b}"] {
            let t = format!("ok\n{indent}CALL fetch(x=1)");
            assert_eq!(first_refused(&s, &t), t.find("fetch"), "{indent:?}");
        }
        assert_eq!(first_refused(&s, "ok\u{e9}CALL fetch(x=1)"), None);
        // prose that says CALL mid-line is left alone, and so is a word that starts with it
        // or a CALL with no name on its line (the parser reads both as text)
        assert_eq!(first_refused(&s, "please CALL us(1)"), None);
        assert_eq!(first_refused(&s, "CALLBACK soon\nCALLS"), None);
        assert_eq!(first_refused(&s, "CALL\nThanks!"), None);
        assert_eq!(first_refused(&s, "CALL \t pin(x=1)"), None);
    }

    #[test]
    fn an_opener_inside_a_calls_json_is_data() {
        let s = slots(&["[["]);
        assert_eq!(
            first_refused(&s, r#"[[get_stock {"m": [[1, 2]], "n": [ [[3]]]}]]"#),
            None
        );
        assert_eq!(first_refused(&s, "[[fetch {}]]"), Some(2));
    }

    #[test]
    fn gaps_take_any_whitespace_or_none() {
        let s = slots(JSON);
        assert_eq!(
            first_refused(&s, "<tool_call>\n{\"name\":\"nope\"}"),
            Some(21)
        );
        assert_eq!(
            first_refused(&s, "<tool_call>\n{ \"name\" : \"pin\"}"),
            None
        );
        let spaced = "<tool_call>{ \"name\" : \"nope\"}";
        assert_eq!(
            first_refused(&s, spaced),
            Some(spaced.find("nope").unwrap())
        );
    }

    #[test]
    fn a_long_answer_is_checked_in_a_window_that_still_sees_the_slot() {
        let s = slots(JSON);
        let mut text = "x".repeat(5000);
        text.push_str(r#"<tool_call>{"name": "get_stoc"#);
        assert!(s.admits(text.as_bytes(), b"k\""));
        assert!(!s.admits(text.as_bytes(), b"x\""));
    }

    #[test]
    fn nothing_to_constrain_is_none() {
        assert!(NameSlots::new(JSON, &[] as &[&str]).is_none());
        assert!(NameSlots::new(&[], &["a"]).is_none());
        assert!(NameSlots::new(&[""], &["a"]).is_none());
    }
}
