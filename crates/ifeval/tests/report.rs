//! Scoring a response set end to end: aggregate scores on the conformance responses, missing
//! responses, output files, and file errors that name the file and line.

use std::collections::HashMap;
use std::path::PathBuf;

use hat_ifeval::{read_inputs, read_responses, score_responses, write_outputs, IfevalError};

/// The IFEval data in this crate: `data/ifeval/` (see `SOURCE.md` and `CONFORMANCE.md` there).
fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/ifeval")
}

#[test]
fn gpt4_scores_match_reference_aggregates() {
    let data = data_dir();
    let inputs = read_inputs(data.join("input_data.jsonl")).unwrap();
    // conformance.jsonl has `prompt` and `response` on every line, so it is a response file too.
    let responses = read_responses(data.join("conformance.jsonl")).unwrap();
    let report = score_responses(&inputs, &responses).unwrap();
    assert_eq!(
        (
            report.strict.prompt_level.passed,
            report.strict.prompt_level.total
        ),
        (417, 541)
    );
    assert_eq!(
        (
            report.strict.instruction_level.passed,
            report.strict.instruction_level.total
        ),
        (698, 834)
    );
    assert_eq!(
        (
            report.loose.prompt_level.passed,
            report.loose.instruction_level.passed
        ),
        (431, 714)
    );
    assert!(report.missing.is_empty());
    let nc = report.by_instruction["punctuation:no_comma"];
    assert_eq!(
        (nc.strict.passed, nc.loose.passed, nc.strict.total),
        (44, 48, 66)
    );
    assert_eq!(report.by_category.len(), 9);
    let table = report.to_string();
    assert!(
        table.contains("prompt-level") && table.contains("77.08% (417/541)"),
        "{table}"
    );
}

#[test]
fn missing_responses_fail_and_are_listed_and_outputs_are_written() {
    let line = r#"{"key": 7, "prompt": "P", "instruction_id_list": ["punctuation:no_comma", "startend:quotation"], "kwargs": [{}, {}]}"#;
    let line2 = r#"{"key": 8, "prompt": "Q", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}"#;
    let inputs =
        hat_ifeval::parse_inputs(&format!("{line}\n{line2}\n"), "in.jsonl".as_ref()).unwrap();
    let responses = HashMap::from([
        ("P".to_string(), "no commas here".to_string()),
        // red-team finding: a response to no known prompt was dropped without a word
        ("Q, edited".to_string(), "x".to_string()),
    ]);
    let report = score_responses(&inputs, &responses).unwrap();
    assert_eq!(report.missing, [8]);
    assert_eq!(report.unmatched, 1);
    assert!(report.to_string().contains("1 responses match no prompt"));
    assert_eq!(report.items[0].strict, [true, false]);
    assert_eq!(report.items[1].loose, [false]);
    assert_eq!(report.strict.instruction_level.passed, 1);
    assert_eq!(report.strict.prompt_level.passed, 0);

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    write_outputs(&report, &out).unwrap();
    let items = std::fs::read_to_string(out.join("items.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(items.lines().next().unwrap()).unwrap();
    assert_eq!(first["key"], 7);
    assert_eq!(first["strict"], serde_json::json!([true, false]));
    assert_eq!(first["response"], "no commas here");
    let second: serde_json::Value = serde_json::from_str(items.lines().nth(1).unwrap()).unwrap();
    assert!(second["response"].is_null());
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["strict"]["instruction_level"]["passed"], 1);
    assert_eq!(results["strict"]["instruction_level"]["total"], 3);
    assert_eq!(results["missing"], serde_json::json!([8]));
    assert_eq!(
        results["by_instruction"]["startend:quotation"]["loose"]["total"],
        1
    );
}

fn write_tmp(content: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("data.jsonl");
    std::fs::write(&p, content).unwrap();
    (dir, p)
}

#[test]
fn malformed_response_line_names_file_and_line() {
    let (_d, p) = write_tmp("{\"prompt\": \"a\", \"response\": \"b\"}\n\n{not json}\n");
    let e = read_responses(&p).unwrap_err();
    assert!(matches!(e, IfevalError::Json { line: 3, .. }), "{e}");
    assert!(
        e.to_string().starts_with(&format!("{}:3:", p.display())),
        "{e}"
    );
    let (_d, p) = write_tmp("{\"prompt\": \"a\"}\n");
    assert!(matches!(
        read_responses(&p).unwrap_err(),
        IfevalError::Json { line: 1, .. }
    ));
}

#[test]
fn bad_instructions_name_file_and_line() {
    let ok = r#"{"key": 1, "prompt": "p", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}"#;
    let unknown =
        r#"{"key": 2, "prompt": "q", "instruction_id_list": ["made:up"], "kwargs": [{}]}"#;
    let (_d, p) = write_tmp(&format!("{ok}\n{unknown}\n"));
    let e = read_inputs(&p).unwrap_err();
    assert!(
        e.to_string()
            .contains(":2: unknown instruction id `made:up`"),
        "{e}"
    );

    let missing = r#"{"key": 3, "prompt": "r", "instruction_id_list": ["length_constraints:number_words"], "kwargs": [{"num_words": 5}]}"#;
    let (_d, p) = write_tmp(&format!("{missing}\n"));
    let e = read_inputs(&p).unwrap_err();
    assert!(
        e.to_string().contains(
            ":1: instruction `length_constraints:number_words`: missing argument `relation`"
        ),
        "{e}"
    );

    let short = r#"{"key": 4, "prompt": "s", "instruction_id_list": ["punctuation:no_comma"], "kwargs": []}"#;
    let (_d, p) = write_tmp(&format!("{short}\n"));
    assert!(matches!(
        read_inputs(&p).unwrap_err(),
        IfevalError::Record { line: 1, .. }
    ));

    let e = read_inputs("/nonexistent/in.jsonl").unwrap_err();
    assert!(matches!(e, IfevalError::Io { .. }));
}

#[test]
#[ignore = "prints the terminal table"]
fn print_table() {
    let data = data_dir();
    let inputs = read_inputs(data.join("input_data.jsonl")).unwrap();
    let responses = read_responses(data.join("conformance.jsonl")).unwrap();
    println!("{}", score_responses(&inputs, &responses).unwrap());
}

/// Red-team finding: `items.jsonl` and `results.json` were truncated and rewritten in place, so
/// a run killed mid-write left a cut file. They are now replaced by a rename: a file linked
/// from elsewhere (here a hard link standing for the old contents) is replaced, never
/// written through, and no temporary file is left behind.
#[cfg(unix)]
#[test]
fn outputs_replace_their_files_whole() {
    let inputs = hat_ifeval::builtin_inputs();
    let report = score_responses(&inputs[..2], &HashMap::new()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    for name in ["items.jsonl", "results.json"] {
        let old = dir.path().join(format!("old-{name}"));
        std::fs::write(&old, "old contents").unwrap();
        std::fs::hard_link(&old, out.join(name)).unwrap();
    }
    let extra = serde_json::json!({"suite": "ifeval", "prompts": 2});
    hat_ifeval::write_outputs_with(&report, &extra, &out).unwrap();
    for name in ["items.jsonl", "results.json"] {
        let old = dir.path().join(format!("old-{name}"));
        assert_eq!(
            std::fs::read_to_string(old).unwrap(),
            "old contents",
            "{name}"
        );
    }
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(results, extra);
    assert_eq!(
        std::fs::read_to_string(out.join("items.jsonl"))
            .unwrap()
            .lines()
            .count(),
        2
    );
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["items.jsonl", "results.json"]);
}
