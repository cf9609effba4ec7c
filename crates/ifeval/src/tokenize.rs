//! Word tokens: NLTK 3.10 `word_tokenize` — Punkt sentences, then the substitution rules of
//! `NLTKWordTokenizer` (improved Treebank) on each sentence, then a whitespace split.

use std::sync::OnceLock;

use fancy_regex::Regex;

use crate::punkt;
use crate::text::split_ws;

struct Rules {
    starting: Vec<(Regex, &'static str)>,
    punctuation: Vec<(Regex, &'static str)>,
    parens: (Regex, &'static str),
    dashes: (Regex, &'static str),
    ending: Vec<(Regex, &'static str)>,
    contractions: Vec<(Regex, &'static str)>,
}

/// NLTK 3.10 compiles the quote and punctuation rules with the third-party `regex` module,
/// whose `\w`/`\s` are Rust's (marks are word characters, U+001C..U+001F are not spaces);
/// the contraction rules use Python's `re`, whose `\w` excludes combining marks and whose `\s`
/// includes U+001C..U+001F. `PW`/`PS` spell the latter.
const PW: &str = r"[\p{L}\p{N}_]";
const PS: &str = r"[\s\x{1c}-\x{1f}]";

fn re(p: &str) -> Regex {
    Regex::new(p).expect("valid tokenizer regex")
}

fn rules() -> &'static Rules {
    static RULES: OnceLock<Rules> = OnceLock::new();
    RULES.get_or_init(|| Rules {
        starting: vec![
            (re(r"([«“‘„]|[`]+)"), " $1 "),
            (re(r#"^""#), "``"),
            (re(r"(``)"), " $1 "),
            (re(r#"([ (\[{<])("|'{2})"#), "$1 `` "),
            (
                re(r"(?i)(?<!\w)(')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w)"),
                "$1 ",
            ),
        ],
        punctuation: vec![
            // Python uses the possessive `*+` here; with the trailing `\s*$` it is equivalent.
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
        ],
        parens: (re(r"[\]\[(){}<>]"), " $0 "),
        dashes: (re(r"--"), " -- "),
        ending: vec![
            (re(r"([»”’])"), " $1 "),
            (re(r"''"), " '' "),
            (re(r#"""#), " '' "),
            (re(r"\s+"), " "),
            (re(r"([^' ])('[sS]|'[mM]|'[dD]|') "), "$1 $2 "),
            (re(r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) "), "$1 $2 "),
        ],
        contractions: vec![
            (re(&format!(r"(?i)(?<!{PW})(can)(not)(?!{PW})")), " $1 $2 "),
            (re(&format!(r"(?i)(?<!{PW})(d)('ye)(?!{PW})")), " $1 $2 "),
            (re(&format!(r"(?i)(?<!{PW})(gim)(me)(?!{PW})")), " $1 $2 "),
            (re(&format!(r"(?i)(?<!{PW})(gon)(na)(?!{PW})")), " $1 $2 "),
            (re(&format!(r"(?i)(?<!{PW})(got)(ta)(?!{PW})")), " $1 $2 "),
            (re(&format!(r"(?i)(?<!{PW})(lem)(me)(?!{PW})")), " $1 $2 "),
            (re(&format!(r"(?i)(?<!{PW})(more)('n)(?!{PW})")), " $1 $2 "),
            (re(&format!(r"(?i)(?<!{PW})(wan)(na)(?={PS})")), " $1 $2 "),
            (re(&format!(r"(?i) ('t)(is)(?!{PW})")), " $1 $2 "),
            (re(&format!(r"(?i) ('t)(was)(?!{PW})")), " $1 $2 "),
        ],
    })
}

/// One substitution rule; an error when the regex engine gives up (its backtracking is
/// bounded, and a pathological sentence can exhaust the bound).
fn apply(text: String, (regex, rep): &(Regex, &'static str)) -> Result<String, Exhausted> {
    regex
        .try_replacen(&text, 0, *rep)
        .map(|t| t.into_owned())
        .map_err(|_| Exhausted)
}

/// The regex engine gave up on a rule.
struct Exhausted;

/// `NLTKWordTokenizer().tokenize(sentence)`. A sentence on which a rule exhausts the regex
/// engine's backtracking bound (a megabyte without a sentence break) falls back to a
/// whitespace split instead of aborting the scoring.
pub fn treebank_tokenize(sentence: &str) -> Vec<String> {
    treebank_rules(sentence).unwrap_or_else(|_| split_ws(sentence).map(str::to_string).collect())
}

fn treebank_rules(sentence: &str) -> Result<Vec<String>, Exhausted> {
    let r = rules();
    let mut text = sentence.to_string();
    for rule in &r.starting {
        text = apply(text, rule)?;
    }
    for rule in &r.punctuation {
        text = apply(text, rule)?;
    }
    text = apply(text, &r.parens)?;
    text = apply(text, &r.dashes)?;
    text = format!(" {text} ");
    for rule in &r.ending {
        text = apply(text, rule)?;
    }
    for rule in &r.contractions {
        text = apply(text, rule)?;
    }
    Ok(split_ws(&text).map(str::to_string).collect())
}

/// NLTK `word_tokenize(text)`: Punkt sentences, each tokenized by [`treebank_tokenize`].
pub fn word_tokenize(text: &str) -> Vec<String> {
    punkt::sentences(text)
        .iter()
        .flat_map(|s| treebank_tokenize(s))
        .collect()
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
