//! Issue 13: quarter-megabyte responses built to be slow (quotes, runs of punctuation,
//! apostrophes, a sentence break every two characters, many markdown lines) are tokenized as
//! NLTK does and scored by every IFEval check, strict and loose, in linear work.
//!
//! The tokens are counted, not timed. The fancy-regex rules this replaced spent seconds on
//! such text (300 KB took 13 s in a release build) and then gave up on the sentence, falling
//! back to a whitespace split: the punctuation run came out as 20 tokens, the commas as 1.
//! At this size a quadratic step takes minutes even in a release build, so a regression
//! shows as a test that does not finish. `examples/ifeval_bench.rs` times the same inputs.

use hat_ifeval::text::py_isupper;
use hat_ifeval::{builtin_inputs, punkt, tokenize, Instruction, INSTRUCTION_IDS};

const SIZE: usize = 250_000;

fn fill(unit: &str) -> String {
    unit.repeat(SIZE / unit.len())
}

/// One configured instruction of every id, from the built-in prompts.
fn one_of_each() -> Vec<Instruction> {
    let records = builtin_inputs();
    INSTRUCTION_IDS
        .iter()
        .map(|id| {
            records
                .iter()
                .find_map(|r| {
                    let i = r.instruction_id_list.iter().position(|x| x == id)?;
                    Some(r.instructions().unwrap().swap_remove(i))
                })
                .unwrap_or_else(|| panic!("no built-in prompt has {id}"))
        })
        .collect()
}

fn score_all(text: &str) {
    for ins in one_of_each() {
        let _ = ins.check_strict(text);
        let _ = ins.check_loose(text);
    }
}

#[test]
fn quoted_words() {
    let text = fill("\"q\" ");
    let toks = tokenize::word_tokenize(&text);
    // Every `"q"` is `` q '' (NLTK 3.10).
    assert_eq!(toks.len(), SIZE / 4 * 3);
    assert_eq!(toks.iter().filter(|t| *t == "``").count(), SIZE / 4);
    assert_eq!(punkt::count_sentences(&text), 1);
    score_all(&text);
}

#[test]
fn a_run_of_punctuation() {
    let unit = "!?.,;:*'\"()[]{}<>-`";
    let text = fill(unit);
    // Every character is a token of its own.
    assert_eq!(tokenize::word_tokenize(&text).len(), text.chars().count());
    assert_eq!(punkt::count_sentences(&text), 3);
    score_all(&text);
    assert_eq!(tokenize::word_tokenize(&fill(",")).len(), SIZE);
}

#[test]
fn apostrophes_and_contractions() {
    let text = fill("'a CAN'T cannot 'tis ");
    let toks = tokenize::word_tokenize(&text);
    let units = SIZE / 21;
    // ' a CA N'T can not ' tis
    assert_eq!(toks.len(), units * 8);
    assert_eq!(toks.iter().filter(|t| py_isupper(t)).count(), units * 2);
    score_all(&text);
}

#[test]
fn a_sentence_every_two_characters() {
    let text = fill(". ");
    assert_eq!(punkt::count_sentences(&text), SIZE / 2);
    assert_eq!(tokenize::word_tokenize(&text).len(), SIZE / 2);
    score_all(&text);
}

#[test]
fn many_lines_of_markdown() {
    // Eight distinct loose variants, each scored in full.
    let text = fill("* **Bold** claim, e.g. \"THIS\"!\n");
    let lines = SIZE / 31;
    let toks = tokenize::word_tokenize(&text);
    assert_eq!(toks.iter().filter(|t| *t == "THIS").count(), lines);
    score_all(&text);
}
