//! Reading input records and response files (JSON lines), writing `items.jsonl` and
//! `results.json`. Errors name the file and the 1-based line.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::IfevalError;
use crate::instruction::Instruction;
use crate::report::Report;

/// One IFEval prompt with its verifiable instructions (a line of `input_data.jsonl`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InputRecord {
    pub key: i64,
    pub prompt: String,
    pub instruction_id_list: Vec<String>,
    /// Arguments of each instruction, parallel to `instruction_id_list`.
    pub kwargs: Vec<Map<String, Value>>,
}

impl InputRecord {
    /// Configures every instruction of the record.
    pub fn instructions(&self) -> Result<Vec<Instruction>, IfevalError> {
        if self.kwargs.len() != self.instruction_id_list.len() {
            return Err(IfevalError::KwargsLength {
                ids: self.instruction_id_list.len(),
                kwargs: self.kwargs.len(),
            });
        }
        self.instruction_id_list
            .iter()
            .zip(&self.kwargs)
            .map(|(id, kw)| Instruction::new(id, kw))
            .collect()
    }
}

#[derive(Deserialize)]
struct ResponseLine {
    prompt: String,
    response: String,
}

fn read(path: &Path) -> Result<String, IfevalError> {
    fs::read_to_string(path).map_err(|source| IfevalError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Non-blank lines of a JSON-lines text with their 1-based line numbers.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        // a byte-order mark from an editor is not part of the JSON
        .map(|(i, l)| (i + 1, l.trim_start_matches('\u{feff}')))
        .filter(|(_, l)| !l.trim().is_empty())
}

/// Parses input records from JSON-lines text; `path` is only used in errors. Every record's
/// instructions are validated.
pub fn parse_inputs(text: &str, path: &Path) -> Result<Vec<InputRecord>, IfevalError> {
    lines(text)
        .map(|(line, l)| {
            let rec: InputRecord = serde_json::from_str(l).map_err(|source| IfevalError::Json {
                path: path.to_path_buf(),
                line,
                source,
            })?;
            rec.instructions().map_err(|e| IfevalError::Record {
                path: path.to_path_buf(),
                line,
                source: Box::new(e),
            })?;
            Ok(rec)
        })
        .collect()
}

/// Reads and validates an IFEval input file (`input_data.jsonl` format).
pub fn read_inputs(path: impl AsRef<Path>) -> Result<Vec<InputRecord>, IfevalError> {
    let path = path.as_ref();
    parse_inputs(&read(path)?, path)
}

/// The IFEval prompt set (`data/ifeval/input_data.jsonl`: 541 records, Apache-2.0, Zhou et al.
/// 2023; provenance in `data/ifeval/SOURCE.md`), embedded in the library so that an installed
/// binary needs no data folder.
pub const BUILTIN_INPUT_DATA: &str = include_str!("../data/ifeval/input_data.jsonl");

/// The embedded IFEval prompts ([`BUILTIN_INPUT_DATA`]), parsed and validated.
pub fn builtin_inputs() -> Vec<InputRecord> {
    parse_inputs(BUILTIN_INPUT_DATA, Path::new("<embedded input_data.jsonl>"))
        .expect("the embedded IFEval prompts parse (checked by the crate's tests)")
}

/// Parses a response set from JSON-lines text: objects with `prompt` and `response` (other
/// fields are ignored; a later line for the same prompt wins, as upstream).
pub fn parse_responses(text: &str, path: &Path) -> Result<HashMap<String, String>, IfevalError> {
    let mut out = HashMap::new();
    for (line, l) in lines(text) {
        let r: ResponseLine = serde_json::from_str(l).map_err(|source| IfevalError::Json {
            path: path.to_path_buf(),
            line,
            source,
        })?;
        out.insert(r.prompt, r.response);
    }
    Ok(out)
}

/// Reads a response file: one JSON object per line with `prompt` and `response`.
pub fn read_responses(path: impl AsRef<Path>) -> Result<HashMap<String, String>, IfevalError> {
    let path = path.as_ref();
    parse_responses(&read(path)?, path)
}

fn io_err(path: PathBuf) -> impl FnOnce(std::io::Error) -> IfevalError {
    move |source| IfevalError::Io { path, source }
}

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename, so a
/// run killed mid-write leaves the old file or the new one, never a truncated one (and a file
/// linked from elsewhere is replaced, not written through).
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), IfevalError> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    let tmp = path.with_file_name(name);
    fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .map_err(io_err(tmp.clone()))?;
    fs::rename(&tmp, path).map_err(io_err(path.to_path_buf()))
}

/// Writes `items.jsonl` (one line per prompt: `key`, `instruction_id_list`, `strict`, `loose`,
/// `prompt`, `response`) and `results.json` (scores and breakdowns) into `out_dir`, creating it.
pub fn write_outputs(report: &Report, out_dir: impl AsRef<Path>) -> Result<(), IfevalError> {
    write_outputs_with(report, &report.results_json(), out_dir)
}

/// [`write_outputs`] with `results` as `results.json`: a caller adding its own fields to
/// [`Report::results_json`] writes the file once, whole, instead of patching it afterwards.
/// Both files are replaced atomically.
pub fn write_outputs_with(
    report: &Report,
    results: &Value,
    out_dir: impl AsRef<Path>,
) -> Result<(), IfevalError> {
    let dir = out_dir.as_ref();
    fs::create_dir_all(dir).map_err(io_err(dir.to_path_buf()))?;
    let mut items = Vec::new();
    for item in &report.items {
        serde_json::to_writer(&mut items, item)?;
        items.push(b'\n');
    }
    write_atomic(&dir.join("items.jsonl"), &items)?;
    let mut results = serde_json::to_vec_pretty(results)?;
    results.push(b'\n');
    write_atomic(&dir.join("results.json"), &results)
}
