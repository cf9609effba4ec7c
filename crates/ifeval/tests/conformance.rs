//! Conformance with the upstream Python checker: `data/ifeval/conformance.jsonl` (in this crate)
//! holds GPT-4 responses with the reference's strict and loose verdicts.

use std::path::PathBuf;

use hat_ifeval::{read_inputs, InputRecord, Instruction};
use serde::Deserialize;

#[derive(Deserialize)]
struct Vector {
    #[serde(flatten)]
    record: InputRecord,
    response: String,
    strict: Vec<bool>,
    loose: Vec<bool>,
}

/// The IFEval data in this crate: `data/ifeval/` (see `SOURCE.md` and `CONFORMANCE.md` there).
fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/ifeval")
}

fn data_file(name: &str) -> PathBuf {
    let p = data_dir().join(name);
    assert!(p.exists(), "{} not found", p.display());
    p
}

const MIN_AGREEMENT: f64 = 0.995;

#[test]
fn verdicts_agree_with_reference() {
    let text = std::fs::read_to_string(data_file("conformance.jsonl")).unwrap();
    let (mut total, mut strict_ok, mut loose_ok) = (0usize, 0usize, 0usize);
    for (n, line) in text.lines().enumerate() {
        let v: Vector =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("line {}: {e}", n + 1));
        let instructions = v.record.instructions().unwrap();
        for (i, ins) in instructions.iter().enumerate() {
            let id = &v.record.instruction_id_list[i];
            total += 1;
            let s = ins.check_strict(&v.response);
            let l = ins.check_loose(&v.response);
            if s == v.strict[i] {
                strict_ok += 1;
            } else {
                println!(
                    "strict disagreement: key {} {id}: expected {}, got {s}",
                    v.record.key, v.strict[i]
                );
            }
            if l == v.loose[i] {
                loose_ok += 1;
            } else {
                println!(
                    "loose disagreement: key {} {id}: expected {}, got {l}",
                    v.record.key, v.loose[i]
                );
            }
        }
    }
    let (s, l) = (
        strict_ok as f64 / total as f64,
        loose_ok as f64 / total as f64,
    );
    println!("strict agreement {strict_ok}/{total} = {:.4}%", 100.0 * s);
    println!("loose agreement {loose_ok}/{total} = {:.4}%", 100.0 * l);
    assert_eq!(total, 834);
    assert!(s >= MIN_AGREEMENT, "strict agreement {s}");
    assert!(l >= MIN_AGREEMENT, "loose agreement {l}");
}

#[test]
fn input_data_loads_and_configures() {
    let inputs = read_inputs(data_file("input_data.jsonl")).unwrap();
    assert_eq!(inputs.len(), 541);
    let n: usize = inputs
        .iter()
        .map(|r| r.instructions().map(|v: Vec<Instruction>| v.len()).unwrap())
        .sum();
    assert_eq!(n, 834);
}

#[test]
fn embedded_prompts_are_the_data_file() {
    let file = read_inputs(data_file("input_data.jsonl")).unwrap();
    assert_eq!(hat_ifeval::builtin_inputs(), file);
    assert_eq!(
        hat_ifeval::BUILTIN_INPUT_DATA,
        std::fs::read_to_string(data_file("input_data.jsonl")).unwrap()
    );
}
