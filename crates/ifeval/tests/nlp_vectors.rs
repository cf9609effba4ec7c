//! The NLP building blocks against their Python references on ~6,000 texts: Punkt sentence
//! counts, NLTK `word_tokenize` upper-case token counts and langdetect (seed 0) languages,
//! recorded by `tests/data/gen_nlp_vectors.py` (NLTK 3.10.4, langdetect 1.0.9) for texts
//! derived from `conformance.jsonl`: the prompt, the response and its loose variants, and the
//! response upper- and lower-cased.

use std::path::PathBuf;

use hat_ifeval::text::py_isupper;
use hat_ifeval::{loose, punkt, tokenize};
use serde::Deserialize;

#[derive(Deserialize)]
struct Conf {
    key: i64,
    prompt: String,
    response: String,
}

#[derive(Deserialize)]
struct Expected {
    key: i64,
    sentences: Vec<usize>,
    upper_words: Vec<usize>,
    language: Vec<Option<String>>,
}

/// The IFEval data in this crate: `data/ifeval/` (see `SOURCE.md` and `CONFORMANCE.md` there).
fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/ifeval")
}

#[test]
fn nlp_matches_python() {
    let conf = std::fs::read_to_string(data_dir().join("conformance.jsonl")).unwrap();
    let expected = include_str!("data/nlp_vectors.jsonl");
    let (mut total, mut bad) = (0, 0);
    for (c, e) in conf.lines().zip(expected.lines()) {
        let c: Conf = serde_json::from_str(c).unwrap();
        let e: Expected = serde_json::from_str(e).unwrap();
        assert_eq!(c.key, e.key);
        let mut texts = vec![c.prompt.clone()];
        texts.extend(loose::variants(&c.response));
        texts.push(c.response.to_uppercase());
        texts.push(c.response.to_lowercase());
        for (i, t) in texts.iter().enumerate() {
            total += 1;
            let sents = punkt::count_sentences(t);
            let upper = tokenize::word_tokenize(t)
                .iter()
                .filter(|w| py_isupper(w))
                .count();
            let lang = hat_ifeval::detect_language(t);
            if sents != e.sentences[i] || upper != e.upper_words[i] || lang != e.language[i] {
                bad += 1;
                println!(
                    "key {} text {i}: sentences {sents} vs {}, upper {upper} vs {}, language {lang:?} vs {:?}",
                    c.key, e.sentences[i], e.upper_words[i], e.language[i]
                );
            }
        }
    }
    println!("{} of {total} texts differ", bad);
    assert_eq!(bad, 0);
}
