//! CLI integration tests of the data commands: `hat data gen` (chat JSONL, stats, task mix,
//! shared scenes, recovery detours, the teacher endpoint) and `hat tasks sample`.

use std::path::Path;

use predicates::prelude::*;

mod common;

use common::*;

#[test]
fn data_gen_writes_chat_jsonl_and_stats_reads_it() {
    let d = tempfile::tempdir().unwrap();
    // The README's main job writes into a folder a fresh clone does not have.
    let out = d.path().join("out/d.jsonl");
    // the one dataset this test writes, resumes and refuses
    let gen = || {
        let mut c = hat();
        c.args([
            "data",
            "gen",
            "--variants",
            "2",
            "--tasks",
            "60",
            "--seed",
            "1",
        ])
        .arg("--harness")
        .arg(production())
        .arg("--out")
        .arg(&out);
        c
    };
    gen()
        .assert()
        .success()
        .stdout(predicate::str::contains("wrote 60 trajectories"));
    let first: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(first["messages"][0]["role"], "system");
    assert!(first["tools"][0]["function"]["parameters"].is_object());
    assert!(first["harness_hash"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    hat()
        .args(["data", "stats"])
        .arg(&out)
        .assert()
        .success()
        .stdout(
            predicate::str::contains("records            60")
                .and(predicate::str::contains("task types (20)")),
        );
    // Resume skips what is there; without a flag an existing file is refused.
    let resume = |present: &str| {
        gen()
            .arg("--resume")
            .assert()
            .success()
            .stdout(predicate::str::contains(format!(
                "{present} already present"
            )));
    };
    resume("60");
    // Issue 13: a run killed mid-write leaves half a line; the resume cuts it and writes that
    // record again instead of failing on it (or keeping a torn line).
    let full = std::fs::read(&out).unwrap();
    std::fs::write(&out, &full[..full.len() - 40]).unwrap();
    resume("59");
    let again = std::fs::read_to_string(&out).unwrap();
    assert_eq!(again.lines().count(), 60);
    assert!(again
        .lines()
        .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()));
    // A first run that never finished leaves its records in `.partial` (the target does not
    // exist yet): a plain rerun refuses to throw them away, --resume continues them.
    let partial = out.with_extension("jsonl.partial");
    std::fs::rename(&out, &partial).unwrap();
    let torn = again.as_bytes();
    std::fs::write(&partial, &torn[..torn.len() / 2]).unwrap();
    fails_cleanly(&mut gen()).stderr(
        predicate::str::contains("interrupted run").and(predicate::str::contains("--resume")),
    );
    // the whole lines before the cut are kept, the torn one is written again
    let half = String::from_utf8_lossy(&torn[..torn.len() / 2])
        .lines()
        .count()
        - 1;
    assert!(half > 0);
    resume(&half.to_string());
    assert!(!partial.exists());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), again);
    fails_cleanly(
        hat()
            .args(["data", "gen", "--tasks", "5", "--harness"])
            .arg(production())
            .arg("--out")
            .arg(&out),
    )
    .stderr(predicate::str::contains("--resume"));
    std::fs::write(d.path().join("bad.jsonl"), "{\"messages\": []}\nnot json\n").unwrap();
    fails_cleanly(
        hat()
            .args(["data", "stats"])
            .arg(d.path().join("bad.jsonl")),
    )
    .stderr(predicate::str::contains("bad.jsonl:1"));
}

/// The string at JSON `pointer` in every line of a JSONL file.
fn jsonl_strings(path: &Path, pointer: &str) -> Vec<String> {
    jsonl(path)
        .iter()
        .map(|v| {
            v.pointer(pointer)
                .and_then(|x| x.as_str())
                .unwrap()
                .to_string()
        })
        .collect()
}

#[test]
fn data_gen_kind_weights_shape_the_task_mix() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("w.jsonl");
    hat()
        .args([
            "data",
            "gen",
            "--variants",
            "0",
            "--tasks",
            "40",
            "--kind-weights",
            "compare=4,greet_join=0",
            "--harness",
        ])
        .arg(production())
        .arg("--out")
        .arg(&out)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "task kinds weighted: compare=4,greet_join=0",
        ));
    let types = jsonl_strings(&out, "/task_type");
    // 40 draws over a rotation of 22 (19 kinds once, compare four times): 8 compare tasks
    assert!(!types.iter().any(|t| t == "greet_join"), "{types:?}");
    assert_eq!(
        types.iter().filter(|t| *t == "compare").count(),
        8,
        "{types:?}"
    );
    hat()
        .args([
            "data",
            "gen",
            "--tasks",
            "5",
            "--kind-weights",
            "comparison=2",
            "--out",
        ])
        .arg(d.path().join("x.jsonl"))
        .assert()
        .failure()
        .code(2)
        .stderr(predicate::str::contains("`comparison` is not a task kind"));
    assert!(!d.path().join("x.jsonl").exists());
}

#[test]
fn data_gen_shared_scene_gives_each_group_one_system_prompt() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("sc.jsonl");
    hat()
        .args([
            "data",
            "gen",
            "--variants",
            "2",
            "--tasks",
            "24",
            "--group",
            "8",
            "--shared-scene",
            "--harness",
        ])
        .arg(production())
        .arg("--out")
        .arg(&out)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "shared scenes: each run of 8 tasks",
        ));
    let systems = jsonl_strings(&out, "/messages/0/content");
    assert_eq!(systems.len(), 24);
    for g in systems.chunks(8) {
        assert!(g.iter().all(|s| *s == g[0]), "one system prompt per group");
    }
    assert!(systems[0] != systems[8] && systems[8] != systems[16]);
    // a scene needs a group to share it
    fails_cleanly(
        hat()
            .args(["data", "gen", "--tasks", "4", "--shared-scene", "--out"])
            .arg(d.path().join("x.jsonl")),
    )
    .stderr(predicate::str::contains("pass --group K with K > 1"));
    assert!(!d.path().join("x.jsonl").exists());
}

#[test]
fn data_gen_first_turns_add_cut_trajectories_to_each_scene_and_change_nothing_else() {
    let d = tempfile::tempdir().unwrap();
    let gen = |out: &Path, extra: &[&str]| {
        hat()
            .args([
                "data",
                "gen",
                "--variants",
                "2",
                "--tasks",
                "16",
                "--group",
                "8",
            ])
            .args(["--shared-scene", "--seed", "5", "--harness"])
            .arg(production())
            .args(extra)
            .arg("--out")
            .arg(out)
            .assert()
            .success()
    };
    let (plain, cut) = (d.path().join("plain.jsonl"), d.path().join("cut.jsonl"));
    gen(&plain, &[]);
    gen(&cut, &["--first-turns", "4"]).stdout(predicate::str::contains(
        "first-turn extras: 4 more tasks per scene",
    ));
    let (plain, cut) = (jsonl(&plain), jsonl(&cut));
    assert_eq!(cut.len(), 16 + 2 * 4, "two scenes of 8 and 4 extras each");
    for (scene, rows) in cut.chunks(12).enumerate() {
        assert_eq!(
            &rows[..8],
            &plain[scene * 8..scene * 8 + 8],
            "own tasks unchanged"
        );
        for r in rows {
            assert_eq!(
                r["messages"][0], rows[0]["messages"][0],
                "one system prompt a scene"
            );
            assert_eq!(r["harness_hash"], rows[0]["harness_hash"]);
        }
        for r in &rows[8..] {
            let m = r["messages"].as_array().unwrap();
            let last = m.last().unwrap();
            assert_eq!(last["role"], "assistant", "{r}");
            let trained = m
                .iter()
                .filter(|x| x["role"] == "assistant" && x["weight"] != 0)
                .count();
            assert_eq!(trained, 1, "only the first trained turn: {r}");
            let calls = r["calls"].as_array().unwrap().len();
            let in_turn = last["content"]
                .as_str()
                .unwrap()
                .matches("<tool_call>")
                .count();
            assert_eq!(calls, in_turn, "the calls of that turn: {r}");
        }
    }
    assert!(
        cut[8..12]
            .iter()
            .any(|r| !r["calls"].as_array().unwrap().is_empty()),
        "some extras stop at a look-up"
    );
    fails_cleanly(
        hat()
            .args([
                "data",
                "gen",
                "--tasks",
                "4",
                "--group",
                "4",
                "--first-turns",
                "2",
                "--out",
            ])
            .arg(d.path().join("x.jsonl")),
    )
    .stderr(predicate::str::contains("pass --shared-scene"));
    assert!(!d.path().join("x.jsonl").exists());
}

#[test]
fn data_gen_recovery_writes_untrained_detours_and_stats_counts_them() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("r.jsonl");
    hat()
        .args([
            "data",
            "gen",
            "--variants",
            "2",
            "--tasks",
            "120",
            "--recovery",
            "1",
            "--harness",
        ])
        .arg(production())
        .arg("--out")
        .arg(&out)
        .assert()
        .success()
        .stdout(predicate::str::contains("recovery detours: "));
    let text = std::fs::read_to_string(&out).unwrap();
    let mut detours = 0;
    for line in text.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let m = r["messages"].as_array().unwrap();
        for (k, x) in m.iter().enumerate() {
            if x.get("weight").is_some() {
                assert_eq!(x["weight"], 0);
                assert_eq!(x["role"], "assistant");
            }
            if x["weight"] == 0 && m.get(k + 1).is_some_and(|n| n["role"] == "tool") {
                detours += 1;
                // the wrong turn is followed by its answers, then a trained call
                let next = m[k + 1..].iter().find(|n| n["role"] != "tool").unwrap();
                assert_eq!(next["role"], "assistant");
                assert!(next.get("weight").is_none(), "{line}");
            }
        }
    }
    assert!(detours >= 10, "{detours} detours in 120 trajectories");
    hat()
        .args(["data", "stats"])
        .arg(&out)
        .assert()
        .success()
        .stdout(predicate::str::contains(format!(
            "recovery detours   {detours} ("
        )));
    for bad in ["1.5", "-0.1", "half"] {
        hat()
            .args(["data", "gen", "--tasks", "4", "--recovery", bad, "--out"])
            .arg(d.path().join("x.jsonl"))
            .assert()
            .failure()
            .code(2)
            .stderr(predicate::str::contains("is not a share"));
    }
    fails_cleanly(
        hat()
            .args([
                "data",
                "gen",
                "--tasks",
                "4",
                "--recovery",
                "0.3",
                "--teacher",
                "openai",
            ])
            .args([
                "--base-url",
                "http://127.0.0.1:9/v1",
                "--model",
                "m",
                "--out",
            ])
            .arg(d.path().join("x.jsonl")),
    )
    .stderr(predicate::str::contains(
        "drop --recovery or use --teacher oracle",
    ));
    assert!(!d.path().join("x.jsonl").exists());
}

#[test]
fn data_gen_with_openai_teacher_needs_an_endpoint() {
    let d = tempfile::tempdir().unwrap();
    fails_cleanly(
        hat()
            .env_remove("HAT_TEACHER_BASE_URL")
            .args([
                "data",
                "gen",
                "--teacher",
                "openai",
                "--tasks",
                "1",
                "--harness",
            ])
            .arg(production())
            .arg("--out")
            .arg(d.path().join("x.jsonl")),
    )
    .stderr(predicate::str::contains("--base-url"));
}

#[test]
fn tasks_sample_covers_every_kind() {
    let out = hat()
        .args(["tasks", "sample", "--split", "test", "--count", "19"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), 19);
    fails_cleanly(hat().args(["tasks", "sample", "--kind", "nope"]))
        .stderr(predicate::str::contains("hat tasks kinds"));
}

/// `--element-syntaxes` and `--keyword-syntaxes` take shares adding up to at most 1, and only
/// for the train pool; each refusal says why.
#[test]
fn data_gen_element_syntaxes_refuses_a_bad_share_and_the_held_out_pool() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("e.jsonl");
    for (args, said) in [
        (vec!["--element-syntaxes", "1.5"], "not a share"),
        (vec!["--element-syntaxes", "lots"], "not a number"),
        (
            vec!["--element-syntaxes", "0.3", "--pool", "heldout"],
            "train pool only",
        ),
        (vec!["--keyword-syntaxes", "-0.1"], "not a share"),
        (
            vec!["--element-syntaxes", "0.7", "--keyword-syntaxes", "0.5"],
            "more than 1",
        ),
    ] {
        // a share out of range is a usage error (exit 2), the pool's a run's (exit 1)
        hat()
            .args(["data", "gen", "--tasks", "4", "--variants", "2"])
            .args(&args)
            .arg("--harness")
            .arg(production())
            .arg("--out")
            .arg(&out)
            .assert()
            .failure()
            .stderr(predicate::str::contains(said))
            .stderr(predicate::str::contains("panicked").not());
        assert!(!out.exists(), "{args:?} wrote data");
    }
}
