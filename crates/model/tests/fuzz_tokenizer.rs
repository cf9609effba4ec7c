//! Bounded fuzzing of the BPE tokenizer (issue 13), as `hat model tokenize` runs it
//! (`Tokenizer::encode`): arbitrary Unicode strings, and arbitrary bytes read as lossy UTF-8,
//! encode without a panic or an error and decode back to the same text. Every tokenizer here
//! is lossless: the tiny committed Qwen2 `tokenizer.json` (all 256 byte symbols, special
//! tokens), with its own pre-tokenizer and with each one `tokenizer.ggml.pre` selects.
//!
//! `tests/corpus/tokenizer/` is replayed first: `*.txt` as text, `*.bytes` as lossy UTF-8.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hat_model::hf::HfFolder;
use hat_model::tokenizer::{patterns_for_pre, TokenizerSpec};
use hat_model::Tokenizer;
use proptest::prelude::*;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn tokenizers() -> &'static [(String, Tokenizer)] {
    static TOKS: OnceLock<Vec<(String, Tokenizer)>> = OnceLock::new();
    TOKS.get_or_init(|| {
        let qwen: TokenizerSpec = HfFolder::open(&fixtures().join("qwen2"))
            .unwrap()
            .tokenizer_spec()
            .unwrap();
        let mut out = vec![(
            "qwen2 tokenizer.json".to_string(),
            Tokenizer::new(qwen.clone()).unwrap(),
        )];
        for pre in ["smollm", "llama-bpe", "qwen2", "gpt-2"] {
            let (pre_patterns, ignore_merges) = patterns_for_pre(pre).unwrap();
            let spec = TokenizerSpec {
                pre_patterns,
                ignore_merges,
                ..qwen.clone()
            };
            out.push((
                format!("qwen2 vocabulary, pre {pre}"),
                Tokenizer::new(spec).unwrap(),
            ));
        }
        assert!(
            lossless(&out[0].1),
            "the qwen2 fixture has a token for every byte"
        );
        out
    })
}

/// Whether every byte has a token (GPT-2's byte-to-symbol table): then no text is lost.
fn lossless(tok: &Tokenizer) -> bool {
    let mut shifted = 0;
    (0u32..256).all(|b| {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let c = if printable {
            b
        } else {
            shifted += 1;
            255 + shifted
        };
        tok.token_id(&char::from_u32(c).unwrap().to_string())
            .is_some()
    })
}

/// `text` encodes with and without BOS, and, where the tokenizer is lossless, without an
/// error and back to the same text.
fn round_trips(text: &str) -> Result<(), TestCaseError> {
    for (name, tok) in tokenizers() {
        let ids = tok.encode(text, false);
        let with_bos = tok.encode(text, true);
        if !lossless(tok) {
            continue;
        }
        let ids = match ids {
            Ok(ids) => ids,
            Err(e) => return Err(TestCaseError::fail(format!("{name}: {text:?}: {e}"))),
        };
        prop_assert_eq!(&tok.decode(&ids, false), text, "{}: {:?}", name, ids);
        let with_bos = with_bos.unwrap();
        prop_assert!(with_bos.ends_with(&ids), "{}: BOS changed the ids", name);
    }
    Ok(())
}

#[test]
fn corpus_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/tokenizer");
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    let mut n = 0;
    for path in entries {
        let text = match path.extension().and_then(|e| e.to_str()) {
            Some("txt") => std::fs::read_to_string(&path).unwrap(),
            Some("bytes") => String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned(),
            _ => continue,
        };
        round_trips(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        n += 1;
    }
    assert!(n >= 5, "{n} corpus entries");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Any Unicode scalar values, weighted towards what splits pre-tokens: letters, digits,
    /// marks, spaces and newlines, apostrophes, special-token text and its fragments.
    #[test]
    fn any_string_round_trips(
        text in "(\\PC|\\pM|\\pN|\\pZ|[\\s\\r\\n\\t ]|'s|'LL|<\\|im_start\\|>|<\\|im_end\\|>|<\\||\\|>|\u{fffd}|\u{0}|[a-z]{1,12}|[0-9]{1,6}|.){0,64}"
    ) {
        round_trips(&text)?;
    }

    /// Arbitrary bytes, read as lossy UTF-8 (as text from a file or socket would be).
    #[test]
    fn any_bytes_round_trip_as_lossy_text(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        round_trips(&String::from_utf8_lossy(&bytes))?;
    }

}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// Long runs of one class, past the 4,096-byte chunks the pre-tokenizer cuts a piece
    /// into when its regex gives up.
    #[test]
    fn long_runs_round_trip(unit in "(a|1|' |\\n|  |é|🤖|<\\|im_end\\|>)", n in 1usize..6000) {
        round_trips(&unit.repeat(n))?;
    }
}
