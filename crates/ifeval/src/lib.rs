//! IFEval instruction-following checks, re-implemented from the upstream Python reference
//! (`google-research/instruction_following_eval`).
//!
//! The 25 registered instructions are checked exactly as the reference does, including its
//! Python string semantics, NLTK Punkt sentence splitting and word tokenisation (ported in
//! [`punkt`] and [`tokenize`]) and langdetect 1.0.9 language identification (seeded with 0).
//!
//! * [`check`] / [`check_loose`]: one instruction on one response.
//! * [`score_responses`]: a whole response set → [`Report`] (prompt- and instruction-level
//!   accuracy, strict and loose, per category and per instruction id).
//! * [`read_inputs`], [`read_responses`], [`write_outputs`]: files.
//! * [`builtin_inputs`]: the IFEval prompt set, embedded (`data/ifeval/`, Apache-2.0).
//! * [`repetition`]: whether an answer loops (not an IFEval check: replay data drops such
//!   answers, and `hat eval failures` counts them among IFEval answers).
//!
//! ```
//! use serde_json::{json, Map};
//! let kwargs = json!({"relation": "at least", "num_words": 3});
//! let kwargs = kwargs.as_object().unwrap();
//! assert!(hat_ifeval::check("length_constraints:number_words", kwargs, "Say hi.", "hi there you").unwrap());
//! assert!(!hat_ifeval::check("punctuation:no_comma", &Map::new(), "No commas.", "a, b").unwrap());
//! ```

pub mod checks;
mod error;
mod instruction;
mod io;
mod lang;
pub mod loose;
pub mod punkt;
mod pyjson;
pub mod repetition;
mod report;
pub mod text;
pub mod tokenize;

pub use checks::Relation;
pub use error::IfevalError;
pub use instruction::{Instruction, INSTRUCTION_IDS};
pub use io::{
    builtin_inputs, parse_inputs, parse_responses, read_inputs, read_responses, write_outputs,
    write_outputs_with, InputRecord, BUILTIN_INPUT_DATA,
};
pub use lang::detect as detect_language;
pub use report::{score_responses, GroupScores, ItemResult, ModeScores, Report, Tally};

use serde_json::{Map, Value};

/// Strict verdict of instruction `instruction_id` configured with `kwargs` on `response`:
/// the response is non-blank and passes the check. `prompt` is accepted for parity with
/// upstream, which would re-configure a check taking a `prompt` argument (none does).
pub fn check(
    instruction_id: &str,
    kwargs: &Map<String, Value>,
    prompt: &str,
    response: &str,
) -> Result<bool, IfevalError> {
    let _ = prompt;
    Ok(Instruction::new(instruction_id, kwargs)?.check_strict(response))
}

/// Loose verdict: some non-blank one of the eight [`loose::variants`] passes the check.
pub fn check_loose(
    instruction_id: &str,
    kwargs: &Map<String, Value>,
    prompt: &str,
    response: &str,
) -> Result<bool, IfevalError> {
    let _ = prompt;
    Ok(Instruction::new(instruction_id, kwargs)?.check_loose(response))
}
