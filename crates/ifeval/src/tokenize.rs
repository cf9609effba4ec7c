//! Word tokens: NLTK 3.10 `word_tokenize` — Punkt sentences, then the substitution rules of
//! `NLTKWordTokenizer` (improved Treebank) on each sentence, then a whitespace split.

use std::borrow::Cow;
use std::sync::OnceLock;

use regex::Regex;

use crate::punkt;
use crate::text::split_ws;

/// NLTK 3.10 compiles the quote and punctuation rules with the third-party `regex` module,
/// whose `\w`/`\s` are Rust's (marks are word characters, U+001C..U+001F are not spaces);
/// the contraction rules use Python's `re`, whose `\w` excludes combining marks and whose `\s`
/// includes U+001C..U+001F. `PW`/`PS` spell the latter.
const PW: &str = r"[\p{L}\p{N}_]";
const PS: &str = r"[\s\x{1c}-\x{1f}]";

/// Code points after a candidate match that a lookahead may inspect: the longest lookahead,
/// `(?:re|ve|ll|m|t|s|d|n)\b`, reads two letters and the code point after them.
const LOOKAHEAD_CHARS: usize = 4;

/// The substitution rules run in linear time (issue 13: fancy-regex's backtracking made a
/// 300 KB response take seconds and gave up on longer sentences). A rule without lookaround
/// is a plain `regex` crate replacement; a rule with lookaround finds its consuming part with
/// the `regex` crate and checks the lookarounds on the few code points around each candidate.
/// `reference` (tests) keeps the rules as fancy-regex patterns and checks that both agree.
struct Rule {
    kind: Kind,
    /// Every match contains one of these characters (empty: no such set); a text without
    /// them is not searched, which keeps the cost of many short sentences down.
    triggers: Triggers,
}

/// A rule's trigger characters: ASCII ones as a bit set, the others as a list.
struct Triggers {
    ascii: u128,
    other: Vec<char>,
}

impl Triggers {
    fn new(chars: &[char]) -> Self {
        let (ascii, other): (Vec<char>, Vec<char>) = chars.iter().partition(|c| c.is_ascii());
        Triggers {
            ascii: ascii.iter().fold(0, |m, &c| m | 1 << (c as u32)),
            other,
        }
    }

    fn always(&self) -> bool {
        self.ascii == 0 && self.other.is_empty()
    }
}

/// The text being rewritten, with the set of ASCII characters in it.
struct Text {
    s: String,
    ascii: u128,
    non_ascii: bool,
}

impl Text {
    fn new(s: String) -> Self {
        let (mut ascii, mut non_ascii) = (0u128, false);
        for b in s.bytes() {
            if b < 128 {
                ascii |= 1 << b;
            } else {
                non_ascii = true;
            }
        }
        Text {
            s,
            ascii,
            non_ascii,
        }
    }

    /// May a match of `rule` be in the text?
    fn may_match(&self, t: &Triggers) -> bool {
        t.always()
            || self.ascii & t.ascii != 0
            || (self.non_ascii && t.other.iter().any(|&c| self.s.contains(c)))
    }
}

enum Kind {
    /// `regex.replace_all(text, rep)`.
    Plain(Regex, &'static str),
    /// `regex.replace_all(text, " $0 ")`, without the cost of capture groups.
    Pad(Regex),
    /// `\s+` → ` ` (`\s`: Unicode White_Space, as `char::is_whitespace`).
    Squeeze,
    Guarded(Guarded),
}

/// `regex.replace_all(text, " $0 ")`.
fn pad<'t>(regex: &Regex, text: &'t str) -> Cow<'t, str> {
    let mut out = String::new();
    let mut copied = 0;
    for m in regex.find_iter(text) {
        if out.is_empty() {
            out.reserve(text.len() + text.len() / 4);
        }
        out.push_str(&text[copied..m.start()]);
        out.push(' ');
        out.push_str(m.as_str());
        out.push(' ');
        copied = m.end();
    }
    if out.is_empty() {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// Runs of whitespace become one space; the text is kept when it has no other runs.
fn squeeze(text: &str) -> Cow<'_, str> {
    let mut prev_space = false;
    let unchanged = text.chars().all(|c| {
        let ws = c.is_whitespace();
        let keep = !ws || (c == ' ' && !prev_space);
        prev_space = ws;
        keep
    });
    if unchanged {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut prev_space = false;
    for c in text.chars() {
        if c.is_whitespace() {
            if !prev_space {
                out.push(' ');
            }
            prev_space = true;
        } else {
            out.push(c);
            prev_space = false;
        }
    }
    Cow::Owned(out)
}

/// `(?<!B)core(?=A)(?!N)`: `core` consumes; the assertions are one-code-point (`B`) or
/// short (`A`, `N`, at most [`LOOKAHEAD_CHARS`] code points) patterns.
struct Guarded {
    core: Regex,
    /// `(?<!B)`, as `\A(?:B)\z` on the code point before the match.
    not_after: Option<Regex>,
    /// `(?=A)`, as `\A(?:A)` on the code points after the match.
    before: Option<Regex>,
    /// `(?!N)`, as `\A(?:N)` on the code points after the match.
    not_before: Option<Regex>,
    rep: &'static str,
}

impl Guarded {
    fn accepts(&self, text: &str, start: usize, end: usize) -> bool {
        if let Some(b) = &self.not_after {
            if let Some(c) = text[..start].chars().next_back() {
                if b.is_match(&text[start - c.len_utf8()..start]) {
                    return false;
                }
            }
        }
        let rest = &text[end..];
        let window = rest
            .char_indices()
            .nth(LOOKAHEAD_CHARS)
            .map_or(rest, |(i, _)| &rest[..i]);
        self.before.as_ref().is_none_or(|a| a.is_match(window))
            && !self.not_before.as_ref().is_some_and(|n| n.is_match(window))
    }

    /// `re.sub` with the lookarounds: candidates are tried left to right, a rejected one
    /// resumes the search one code point further (every core is a fixed sequence of code
    /// points, so a start position has at most one candidate).
    fn replace<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut out = String::new();
        let (mut copied, mut pos, mut replaced) = (0, 0, false);
        while pos <= text.len() {
            let Some(caps) = self.core.captures_at(text, pos) else {
                break;
            };
            let m = caps.get(0).expect("group 0 is the match");
            if self.accepts(text, m.start(), m.end()) {
                out.push_str(&text[copied..m.start()]);
                caps.expand(self.rep, &mut out);
                copied = m.end();
                // Every core consumes at least one code point.
                pos = m.end();
                replaced = true;
            } else {
                pos = m.start() + text[m.start()..].chars().next().map_or(1, char::len_utf8);
            }
        }
        if !replaced {
            return Cow::Borrowed(text);
        }
        out.push_str(&text[copied..]);
        Cow::Owned(out)
    }
}

struct Rules {
    starting: Vec<Rule>,
    punctuation: Vec<Rule>,
    parens: Rule,
    dashes: Rule,
    ending: Vec<Rule>,
    contractions: Vec<Rule>,
}

fn re(p: &str) -> Regex {
    Regex::new(p).expect("valid tokenizer regex")
}

fn plain(p: &str, rep: &'static str, triggers: &'static [char]) -> Rule {
    Rule {
        kind: Kind::Plain(re(p), rep),
        triggers: Triggers::new(triggers),
    }
}

fn padded(p: &str, triggers: &'static [char]) -> Rule {
    Rule {
        kind: Kind::Pad(re(p)),
        triggers: Triggers::new(triggers),
    }
}

fn guarded(g: Guarded, triggers: &'static [char]) -> Rule {
    Rule {
        kind: Kind::Guarded(g),
        triggers: Triggers::new(triggers),
    }
}

/// `(?i)(?<!PW)(a)(b)(?!PW)` (or `(?=PS)` when `then_space`) → ` $1 $2 `. `triggers`: a
/// letter of the contraction in both cases (no other character case-folds to `m`, `n`, `t`)
/// or its apostrophe.
fn contraction(a: &str, b: &str, then_space: bool, triggers: &'static [char]) -> Rule {
    let (before, not_before) = if then_space {
        (Some(re(&format!(r"(?i)\A{PS}"))), None)
    } else {
        (None, Some(re(&format!(r"(?i)\A{PW}"))))
    };
    guarded(
        Guarded {
            core: re(&format!("(?i)({a})({b})")),
            not_after: Some(re(&format!(r"(?i)\A{PW}\z"))),
            before,
            not_before,
            rep: " $1 $2 ",
        },
        triggers,
    )
}

/// `(?i) ('t)(b)(?!PW)` → ` $1 $2 `.
fn tis(b: &str) -> Rule {
    guarded(
        Guarded {
            core: re(&format!("(?i) ('t)({b})")),
            not_after: None,
            before: None,
            not_before: Some(re(&format!(r"(?i)\A{PW}"))),
            rep: " $1 $2 ",
        },
        &['\''],
    )
}

fn rules() -> &'static Rules {
    static RULES: OnceLock<Rules> = OnceLock::new();
    RULES.get_or_init(|| Rules {
        starting: vec![
            padded(r"[«“‘„]|[`]+", &['«', '“', '‘', '„', '`']),
            plain(r#"^""#, "``", &['"']),
            padded(r"``", &['`']),
            plain(r#"([ (\[{<])("|'{2})"#, "$1 `` ", &['"', '\'']),
            // (?i)(?<!\w)(')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w) → "$1 "
            guarded(
                Guarded {
                    core: re(r"(')"),
                    not_after: Some(re(r"(?i)\A\w\z")),
                    before: Some(re(r"(?i)\A\w")),
                    not_before: Some(re(r"(?i)\A(?:re|ve|ll|m|t|s|d|n)\b")),
                    rep: "$1 ",
                },
                &['\''],
            ),
        ],
        punctuation: vec![
            // Python uses the possessive `*+` here; with the trailing `\s*$` it is equivalent.
            plain(r#"([^.])(\.)([\])}>"'»”’ ]*)\s*$"#, "$1 $2 $3 ", &['.']),
            plain(r"([:,])([^\d])", " $1 $2", &[':', ',']),
            plain(r"([:,])$", " $1 ", &[':', ',']),
            padded(r"\.{2,}", &['.']),
            padded(r"[;@#$%&]", &[';', '@', '#', '$', '%', '&']),
            padded(
                r"[\x{2012}-\x{2015}]",
                &['\u{2012}', '\u{2013}', '\u{2014}', '\u{2015}'],
            ),
            plain(r#"([^.])(\.)([\])}>"']*)\s*$"#, "$1 $2$3 ", &['.']),
            padded(r"[?!]", &['?', '!']),
            plain(r"([^'])' ", "$1 ' ", &['\'']),
            padded(r"[*]", &['*']),
        ],
        parens: padded(r"[\]\[(){}<>]", &[']', '[', '(', ')', '{', '}', '<', '>']),
        dashes: plain(r"--", " -- ", &['-']),
        ending: vec![
            padded(r"[»”’]", &['»', '”', '’']),
            plain(r"''", " '' ", &['\'']),
            plain(r#"""#, " '' ", &['"']),
            Rule {
                kind: Kind::Squeeze,
                triggers: Triggers::new(&[]),
            },
            plain(r"([^' ])('[sS]|'[mM]|'[dD]|') ", "$1 $2 ", &['\'']),
            plain(
                r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ",
                "$1 $2 ",
                &['\''],
            ),
        ],
        contractions: vec![
            contraction("can", "not", false, &['n', 'N']),
            contraction("d", "'ye", false, &['\'']),
            contraction("gim", "me", false, &['m', 'M']),
            contraction("gon", "na", false, &['n', 'N']),
            contraction("got", "ta", false, &['t', 'T']),
            contraction("lem", "me", false, &['m', 'M']),
            contraction("more", "'n", false, &['\'']),
            contraction("wan", "na", true, &['n', 'N']),
            tis("is"),
            tis("was"),
        ],
    })
}

/// One substitution rule; the text is kept (not copied) when the rule does not match.
fn apply(text: Text, rule: &Rule) -> Text {
    if !text.may_match(&rule.triggers) {
        return text;
    }
    let replaced = match &rule.kind {
        Kind::Plain(regex, rep) => regex.replace_all(&text.s, *rep),
        Kind::Pad(regex) => pad(regex, &text.s),
        Kind::Squeeze => squeeze(&text.s),
        Kind::Guarded(g) => g.replace(&text.s),
    };
    match replaced {
        Cow::Borrowed(_) => text,
        Cow::Owned(t) => Text::new(t),
    }
}

/// `NLTKWordTokenizer().tokenize(sentence)`.
pub fn treebank_tokenize(sentence: &str) -> Vec<String> {
    let r = rules();
    let mut text = Text::new(sentence.to_string());
    for rule in &r.starting {
        text = apply(text, rule);
    }
    for rule in &r.punctuation {
        text = apply(text, rule);
    }
    text = apply(text, &r.parens);
    text = apply(text, &r.dashes);
    text = Text::new(format!(" {} ", text.s));
    for rule in &r.ending {
        text = apply(text, rule);
    }
    for rule in &r.contractions {
        text = apply(text, rule);
    }
    split_ws(&text.s).map(str::to_string).collect()
}

/// NLTK `word_tokenize(text)`: Punkt sentences, each tokenized by [`treebank_tokenize`].
pub fn word_tokenize(text: &str) -> Vec<String> {
    punkt::sentences(text)
        .iter()
        .flat_map(|s| treebank_tokenize(s))
        .collect()
}

/// The rules as NLTK spells them (with lookaround), run by fancy-regex: the oracle the
/// linear-time rules above are checked against (they were the implementation until issue 13).
#[cfg(test)]
mod reference {
    use std::sync::OnceLock;

    use fancy_regex::Regex;

    use super::{PS, PW};
    use crate::text::split_ws;

    type Rule = (Regex, &'static str);

    fn re(p: &str) -> Regex {
        Regex::new(p).expect("valid tokenizer regex")
    }

    fn rules() -> &'static [Rule] {
        static RULES: OnceLock<Vec<Rule>> = OnceLock::new();
        RULES.get_or_init(|| {
            let mut v = vec![
                (re(r"([«“‘„]|[`]+)"), " $1 "),
                (re(r#"^""#), "``"),
                (re(r"(``)"), " $1 "),
                (re(r#"([ (\[{<])("|'{2})"#), "$1 `` "),
                (
                    re(r"(?i)(?<!\w)(')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w)"),
                    "$1 ",
                ),
                (re(r#"([^.])(\.)([\])}>"'»”’ ]*)\s*$"#), "$1 $2 $3 "),
                (re(r"([:,])([^\d])"), " $1 $2"),
                (re(r"([:,])$"), " $1 "),
                (re(r"\.{2,}"), " $0 "),
                (re(r"[;@#$%&]"), " $0 "),
                (re(r"[\x{2012}-\x{2015}]"), " $0 "),
                (re(r#"([^.])(\.)([\])}>"']*)\s*$"#), "$1 $2$3 "),
                (re(r"[?!]"), " $0 "),
                (re(r"([^'])' "), "$1 ' "),
                (re(r"[*]"), " $0 "),
                (re(r"[\]\[(){}<>]"), " $0 "),
                (re(r"--"), " -- "),
                // The text is padded with spaces here (`PAD`).
                (re(r"([»”’])"), " $1 "),
                (re(r"''"), " '' "),
                (re(r#"""#), " '' "),
                (re(r"\s+"), " "),
                (re(r"([^' ])('[sS]|'[mM]|'[dD]|') "), "$1 $2 "),
                (re(r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) "), "$1 $2 "),
            ];
            for (a, b) in [
                ("can", "not"),
                ("d", "'ye"),
                ("gim", "me"),
                ("gon", "na"),
                ("got", "ta"),
                ("lem", "me"),
                ("more", "'n"),
            ] {
                v.push((re(&format!(r"(?i)(?<!{PW})({a})({b})(?!{PW})")), " $1 $2 "));
            }
            v.push((re(&format!(r"(?i)(?<!{PW})(wan)(na)(?={PS})")), " $1 $2 "));
            v.push((re(&format!(r"(?i) ('t)(is)(?!{PW})")), " $1 $2 "));
            v.push((re(&format!(r"(?i) ('t)(was)(?!{PW})")), " $1 $2 "));
            v
        })
    }

    /// Index of the first rule applied to the space-padded text.
    const PAD: usize = 17;

    /// `NLTKWordTokenizer().tokenize(sentence)`, or `None` when fancy-regex gives up.
    pub fn treebank_tokenize(sentence: &str) -> Option<Vec<String>> {
        let mut text = sentence.to_string();
        for (i, (regex, rep)) in rules().iter().enumerate() {
            if i == PAD {
                text = format!(" {text} ");
            }
            text = regex.try_replacen(&text, 0, *rep).ok()?.into_owned();
        }
        Some(split_ws(&text).map(str::to_string).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::py_isupper;

    #[test]
    fn spec_example_has_28_upper_tokens() {
        let text = "I'M SO HAPPY, DON'T YOU THINK? NASA's AT&T U.S. WELL-KNOWN *BOLD* **VERY** CANNOT \
                    gonna GONNA 2B COVID-19 Ph.D. A/B \"QUOTE\" 'SINGLE' HELLO,WORLD TIME:10 e.g. I";
        let toks = word_tokenize(text);
        let upper: Vec<_> = toks.iter().filter(|t| py_isupper(t)).collect();
        assert_eq!(upper.len(), 28, "{toks:?}");
    }

    #[test]
    fn treebank_rules() {
        assert_eq!(
            treebank_tokenize("Good muffins cost $3.88 (roughly 3,36 euros) in New York."),
            [
                "Good", "muffins", "cost", "$", "3.88", "(", "roughly", "3,36", "euros", ")", "in",
                "New", "York", "."
            ]
        );
        assert_eq!(
            treebank_tokenize("\"Hi,\" she said: don't."),
            ["``", "Hi", ",", "''", "she", "said", ":", "do", "n't", "."]
        );
        assert_eq!(
            treebank_tokenize("I cannot wanna go"),
            ["I", "can", "not", "wan", "na", "go"]
        );
    }

    #[test]
    fn apostrophe_after_combining_mark_stays() {
        // NLTK 3.10.4 (verified): the mark is a word character for the `regex` module.
        assert_eq!(treebank_tokenize("e\u{301}'abc"), ["e\u{301}'abc"]);
        // The contraction rules use Python `re`, where the mark is not a word character.
        assert_eq!(
            treebank_tokenize("x\u{301}cannot"),
            ["x\u{301}", "can", "not"]
        );
    }

    #[test]
    fn nasa_possessive() {
        let toks = word_tokenize("I love NASA's work");
        assert_eq!(toks.iter().filter(|t| py_isupper(t)).count(), 2);
    }
}

#[cfg(test)]
mod limits {
    use super::*;

    /// Issue 13: a megabyte-long response exhausted fancy-regex's backtracking bound and the
    /// unwrap inside `replace_all` aborted the scoring run.
    #[test]
    fn a_huge_sentence_never_aborts_the_tokenizer() {
        for unit in ["a", "A'", "x-"] {
            let text = unit.repeat(1_000_000 / unit.len());
            let toks = word_tokenize(&text);
            assert!(!toks.is_empty());
        }
    }
}

/// The linear-time rules against the fancy-regex spelling of NLTK's ([`reference`]).
#[cfg(test)]
mod equivalence {
    use proptest::prelude::*;

    use super::*;

    fn same(sentence: &str) {
        let expected = reference::treebank_tokenize(sentence).expect("fancy-regex finishes");
        assert_eq!(treebank_tokenize(sentence), expected, "{sentence:?}");
    }

    /// Every sentence of the conformance prompts, responses and their loose variants.
    #[test]
    fn agrees_on_the_conformance_texts() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/ifeval/conformance.jsonl");
        let text = std::fs::read_to_string(path).unwrap();
        let mut n = 0;
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let response = v["response"].as_str().unwrap();
            let mut texts = vec![v["prompt"].as_str().unwrap().to_string()];
            texts.extend(crate::loose::variants(response));
            texts.push(response.to_uppercase());
            for t in &texts {
                for s in punkt::sentences(t) {
                    same(&s);
                    n += 1;
                }
            }
        }
        assert!(n > 20_000, "{n} sentences");
    }

    #[test]
    fn agrees_on_lookaround_edges() {
        for s in [
            "'tis 'Tis 'twas 't is cannot CANNOT cannotx xcannot _cannot 1cannot",
            "wanna wanna\u{1c}x wanna_ wanna. WANNA\u{3000}",
            "d'ye more'n gimme gonna gotta lemme lemmex ſgonna gonnaſ",
            "'re 're' 'rex 'abc x'abc 'Abc 'ſ 'K 'Ke 'ke'",
            "e\u{301}'abc \u{345}cannot cannot\u{345} a\u{301}cannot",
            "'",
            "''",
            "'a",
            "a'",
            "\"'a\" ('b) [c'd]",
        ] {
            same(s);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn agrees_on_arbitrary_sentences(
            s in "(can|not|wan|na|gon|gim|me|got|ta|lem|more|'n|'ye|d|'t|is|was|re|ve|ll|'s|n't|N'T\
                  |[ '\"`«“‘„»”’.,:;@#$%&?!*()\\[\\]{}<>\\-\u{2012}-\u{2015}\\x1c\\t\\n]\
                  |[a-zA-Z0-9_]|ſ|K|\u{301}|\u{345}|Ⅰ|\\PC){0,40}"
        ) {
            same(&s);
        }
    }
}
