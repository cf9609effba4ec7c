//! `hat ab run`: the oracle against a tiny untrained model on the simulated audience.

mod common;

use common::{fails_cleanly, hat, jsonl, production};
use predicates::prelude::*;

fn config(dir: &std::path::Path, model: &std::path::Path, extra: &str) -> std::path::PathBuf {
    let p = dir.join("exp.toml");
    std::fs::write(
        &p,
        format!(
            r#"name = "tiny-vs-oracle"
seed = 3
[[arms]]
name = "tiny"
model = "{}"
harness = "{}"
[[arms]]
name = "oracle"
model = "oracle"
harness = "{}"
[audience]
viewers = 24
batch = 4
{extra}"#,
            model.display(),
            production().display(),
            production().display()
        ),
    )
    .unwrap();
    p
}

#[test]
fn ab_run_reports_each_metric_per_arm_and_keeps_earlier_results() {
    let d = tempfile::tempdir().unwrap();
    let model = hat_train::fixture::tiny_model(&d.path().join("m"), 1, "qwen2").unwrap();
    let cfg = config(d.path(), &model, "");
    let out = d.path().join("out");
    hat()
        .args([
            "ab",
            "run",
            "--threads",
            "1",
            "--max-tokens",
            "8",
            "--config",
        ])
        .arg(&cfg)
        .arg("--out")
        .arg(&out)
        .assert()
        .success()
        .stdout(predicate::str::contains("| GMV per viewer | oracle |"))
        .stdout(predicate::str::contains("always-valid"));
    let lines = jsonl(&out.join("viewers.jsonl"));
    assert_eq!(lines.len(), 24);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let correct = report["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "correct")
        .unwrap();
    assert_eq!(correct["means"]["oracle"], 1.0);
    let viewers: u64 = report["arms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["viewers"].as_u64().unwrap())
        .sum();
    assert_eq!(viewers, 24);
    // the resolved experiment reads back as the same experiment
    let resolved = std::fs::read_to_string(out.join("experiment.toml")).unwrap();
    assert!(hat_ab::Experiment::parse(&resolved, "resolved").is_ok());
    // a second run into the same folder needs --force
    fails_cleanly(
        hat()
            .args(["ab", "run", "--max-tokens", "8", "--config"])
            .arg(&cfg)
            .arg("--out")
            .arg(&out),
    )
    .stderr(predicate::str::contains("--force"));
}

#[test]
fn a_bad_experiment_file_names_its_line_and_runs_nothing() {
    let d = tempfile::tempdir().unwrap();
    let cfg = config(
        d.path(),
        std::path::Path::new("oracle"),
        "[behaviour]\nview_correct = 2\n",
    );
    let out = d.path().join("out");
    fails_cleanly(
        hat()
            .args(["ab", "run", "--config"])
            .arg(&cfg)
            .arg("--out")
            .arg(&out),
    )
    .stderr(predicate::str::contains("exp.toml, line 15: view_correct"));
    assert!(!out.exists());
    let missing = config(d.path(), std::path::Path::new("oracle"), "");
    std::fs::write(
        &missing,
        std::fs::read_to_string(&missing)
            .unwrap()
            .replace(&production().display().to_string(), "/no/such/harness"),
    )
    .unwrap();
    fails_cleanly(
        hat()
            .args(["ab", "run", "--config"])
            .arg(&missing)
            .arg("--out")
            .arg(&out),
    )
    .stderr(predicate::str::contains("/no/such/harness"));
    // a missing model is refused before anything is written
    let no_model = config(d.path(), std::path::Path::new("/no/such/model.gguf"), "");
    fails_cleanly(
        hat()
            .args(["ab", "run", "--config"])
            .arg(&no_model)
            .arg("--out")
            .arg(&out),
    )
    .stderr(predicate::str::contains(
        "model /no/such/model.gguf does not exist",
    ));
    assert!(!out.exists());
}
