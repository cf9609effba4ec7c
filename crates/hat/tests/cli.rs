//! CLI integration tests: every command, and bad input giving a clear error
//! and a non-zero exit (never a panic).

use std::path::{Path, PathBuf};

use predicates::prelude::*;

mod common;

use common::*;

#[test]
fn harness_check_accepts_the_production_harness() {
    hat()
        .args(["harness", "check"])
        .arg(production())
        .assert()
        .success()
        .stdout(predicate::str::contains("taolive-host").and(predicate::str::contains("9 tools")));
}

#[test]
fn harness_check_lists_every_problem_with_file_and_line() {
    let d = broken_copy(|p| {
        std::fs::write(
            p.join("tools/get_product.json"),
            "{\"name\": \"get_product\", \"inputSchema\": ",
        )
        .unwrap();
        let skill = p.join("skills/greet-and-thank/SKILL.md");
        let text = std::fs::read_to_string(&skill)
            .unwrap()
            .replace("name: greet-and-thank", "name: Greet_And_Thank");
        std::fs::write(skill, text).unwrap();
        let hooks = std::fs::read_to_string(p.join("hooks.toml"))
            .unwrap()
            .replace("event = \"gift\"", "event = \"on_gift\"");
        std::fs::write(p.join("hooks.toml"), hooks).unwrap();
        let t = std::fs::read_to_string(p.join("tools/check_stock.json"))
            .unwrap()
            .replace("\"op\": \"stock\"", "\"op\": \"inventory\"");
        std::fs::write(p.join("tools/check_stock.json"), t).unwrap();
    });
    fails_cleanly(hat().args(["harness", "check"]).arg(d.path())).stderr(
        predicate::str::contains("tools/get_product.json:1")
            .and(predicate::str::contains(
                "skills/greet-and-thank/SKILL.md:2",
            ))
            .and(predicate::str::contains("unknown event `on_gift`"))
            .and(predicate::str::contains("binding.op `inventory`"))
            .and(predicate::str::contains(
                "lists tool `get_product`, which the harness does not define",
            ))
            .and(predicate::str::contains("7 problem(s)")),
    );
}

#[cfg(unix)]
#[test]
fn harness_check_refuses_a_hook_program_that_cannot_run() {
    use std::os::unix::fs::PermissionsExt;
    let d = broken_copy(|p| {
        let script = p.join("hooks/no-medical-claims.sh");
        std::fs::set_permissions(script, std::fs::Permissions::from_mode(0o644)).unwrap();
    });
    fails_cleanly(hat().args(["harness", "check"]).arg(d.path())).stderr(
        predicate::str::contains("hooks.toml:")
            .and(predicate::str::contains("not executable (mode 644)"))
            .and(predicate::str::contains(
                "chmod +x hooks/no-medical-claims.sh",
            )),
    );
}

#[test]
fn harness_check_rejects_a_missing_directory_and_a_binding_to_no_parameter() {
    fails_cleanly(hat().args(["harness", "check", "/nonexistent/harness"]))
        .stderr(predicate::str::contains("/nonexistent/harness"));
    let d = broken_copy(|p| {
        let t = std::fs::read_to_string(p.join("tools/shipping_info.json"))
            .unwrap()
            .replace("\"/region\"", "\"/where\"");
        std::fs::write(p.join("tools/shipping_info.json"), t).unwrap();
    });
    fails_cleanly(hat().args(["harness", "check"]).arg(d.path())).stderr(predicate::str::contains(
        "`/where`, which is not a parameter",
    ));
}

#[test]
fn harness_render_prints_the_prompt_and_the_event_turn() {
    let d = tempfile::tempdir().unwrap();
    let ev = d.path().join("ev.json");
    std::fs::write(&ev, r#"{"type": "viewer_join", "viewer": "momo"}"#).unwrap();
    hat()
        .args(["harness", "render"])
        .arg(production())
        .arg("--event")
        .arg(&ev)
        .assert()
        .success()
        .stdout(
            predicate::str::contains("# Tools")
                .and(predicate::str::contains("<tool_call>"))
                .and(predicate::str::contains(
                    "momo just joined: greet them by name",
                )),
        );
    std::fs::write(&ev, r#"{"type": "wave"}"#).unwrap();
    fails_cleanly(
        hat()
            .args(["harness", "render"])
            .arg(production())
            .arg("--event")
            .arg(&ev),
    )
    .stderr(predicate::str::contains("not an event"));
    // Issue 13: `--help` says JSON, and inline JSON was read as a path
    hat()
        .args(["harness", "render"])
        .arg(production())
        .args([
            "--event",
            r#"{"type": "comment", "viewer": "bob", "text": "hi there"}"#,
        ])
        .assert()
        .success()
        .stdout(predicate::str::contains("[comment] bob: hi there"));
}

#[test]
fn world_gen_and_show_round_trip_and_refuse_garbage() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("s.sqlite");
    hat()
        .args(["world", "gen", "--seed", "4", "--out"])
        .arg(&db)
        .assert()
        .success();
    hat()
        .args(["world", "show"])
        .arg(&db)
        .assert()
        .success()
        .stdout(predicate::str::contains("Products ("));
    fails_cleanly(
        hat()
            .args(["world", "gen", "--seed", "4", "--out"])
            .arg(&db),
    )
    .stderr(predicate::str::contains("--force"));
    // Issue 13: a store's text reaches the terminal escaped, never as a live ANSI sequence.
    let evil = d.path().join("evil.sqlite");
    std::fs::copy(&db, &evil).unwrap();
    rusqlite::Connection::open(&evil)
        .unwrap()
        .execute(
            "UPDATE products SET title = ?1 || title WHERE pos = (SELECT MIN(pos) FROM products)",
            ["Wipe\u{1b}[2J"],
        )
        .unwrap();
    let shown = hat().args(["world", "show"]).arg(&evil).assert().success();
    let out = String::from_utf8(shown.get_output().stdout.clone()).unwrap();
    assert!(
        out.contains("Wipe\\x1b[2J") && !out.contains('\u{1b}'),
        "{out}"
    );
    let junk = d.path().join("junk.sqlite");
    std::fs::write(&junk, "not a database").unwrap();
    fails_cleanly(hat().args(["world", "show"]).arg(&junk));
    // The stored world renders like the generated one.
    hat()
        .args(["harness", "render"])
        .arg(production())
        .arg("--stream")
        .arg(&db)
        .assert()
        .success();
}

#[test]
fn augment_writes_valid_states_and_a_manifest() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("v");
    hat()
        .args([
            "augment",
            "--count",
            "3",
            "--seed",
            "5",
            "--pool",
            "heldout",
            "--harness",
        ])
        .arg(production())
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(
        manifest
            .as_array()
            .map(Vec::len)
            .or_else(|| manifest["variants"].as_array().map(Vec::len)),
        Some(3)
    );
    for i in 0..3 {
        hat()
            .args(["harness", "check"])
            .arg(out.join(format!("v{i:03}")))
            .assert()
            .success();
    }
    fails_cleanly(
        hat()
            .args(["augment", "--count", "1", "--pool", "test", "--harness"])
            .arg(production())
            .arg("--out")
            .arg(d.path().join("w")),
    )
    .stderr(predicate::str::contains("--pool"));
    hat()
        .args([
            "augment",
            "--list-heldout",
            "--count",
            "0",
            "--harness",
            ".",
            "--out",
            ".",
        ])
        .assert()
        .success()
        .stdout(predicate::str::contains("held-out parameters"));
}

#[test]
fn invalid_arguments_are_usage_errors() {
    hat()
        .args(["data", "gen", "--tasks", "many"])
        .assert()
        .failure()
        .code(2);
    hat().arg("frobnicate").assert().failure().code(2);
    // Issue 13: `--threads 10000` hung and `--count 1000000000` aborted on a 264 GB allocation.
    for args in [
        vec!["generate", "--threads", "10000", "--user", "hi"],
        vec!["tasks", "sample", "--count", "1000000000"],
        vec!["data", "gen", "--tasks", "100000000000"],
        vec![
            "augment",
            "--harness",
            "x",
            "--out",
            "y",
            "--count",
            "99999999",
        ],
    ] {
        hat()
            .args(&args)
            .assert()
            .failure()
            .code(2)
            .stderr(predicate::str::contains("is not in"));
    }
    // Red-team finding: `/dev/zero` as an input filled memory, a FIFO blocked forever.
    for args in [
        vec!["data", "stats", "/dev/zero"],
        vec!["generate", "--chat", "/dev/zero"],
        vec!["eval", "ifeval", "--responses", "/dev/zero", "--out", "o"],
        vec!["train", "sft", "--data", "/dev/zero", "--out", "o"],
        vec!["train", "pipeline", "--config", "/dev/zero", "--out", "o"],
        vec!["eval", "--model", "oracle", "--tasks", "/tmp", "--out", "o"],
    ] {
        hat()
            .args(&args)
            .timeout(std::time::Duration::from_secs(60))
            .assert()
            .failure()
            .code(2)
            .stderr(predicate::str::contains("not a regular file"));
    }
}

/// The IFEval data in the repository (crate hat-ifeval).
fn ifeval_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../ifeval/data/ifeval")
}

#[test]
fn eval_ifeval_scores_a_standard_response_file() {
    let d = tempfile::tempdir().unwrap();
    // conformance.jsonl carries `prompt` and `response`: the standard response form.
    let responses = ifeval_data().join("conformance.jsonl");
    let input = ifeval_data().join("input_data.jsonl");
    hat()
        .args(["eval", "ifeval", "--responses"])
        .arg(&responses)
        .arg("--input")
        .arg(&input)
        .arg("--out")
        .arg(d.path())
        .assert()
        .success();
    let items = std::fs::read_to_string(d.path().join("items.jsonl")).unwrap();
    assert_eq!(items.lines().count(), 541);
    let first: serde_json::Value = serde_json::from_str(items.lines().next().unwrap()).unwrap();
    assert!(
        first["strict"].is_array()
            && first["loose"].is_array()
            && first["instruction_id_list"].is_array()
    );
    assert!(d.path().join("results.json").exists());
    // Without --input the prompts embedded in the binary are used (run from an empty folder,
    // nothing beside it): the same items.
    let embedded = d.path().join("embedded");
    let empty = tempfile::tempdir().unwrap();
    hat()
        .current_dir(empty.path())
        .args(["eval", "ifeval", "--responses"])
        .arg(&responses)
        .arg("--out")
        .arg(&embedded)
        .assert()
        .success();
    assert_eq!(
        std::fs::read_to_string(embedded.join("items.jsonl")).unwrap(),
        items
    );
    // scores already there (a model run's, say) are replaced only with --force
    let scores = std::fs::read_to_string(embedded.join("results.json")).unwrap();
    let again = || {
        let mut c = hat();
        c.args(["eval", "ifeval", "--responses"])
            .arg(&responses)
            .arg("--out")
            .arg(&embedded);
        c
    };
    fails_cleanly(&mut again()).stderr(predicate::str::contains("--force"));
    again().arg("--force").assert().success();
    assert_eq!(
        std::fs::read_to_string(embedded.join("results.json")).unwrap(),
        scores
    );
    std::fs::write(d.path().join("bad.jsonl"), "{\"prompt\": 1}\n").unwrap();
    fails_cleanly(
        hat()
            .args(["eval", "ifeval", "--responses"])
            .arg(d.path().join("bad.jsonl"))
            .arg("--input")
            .arg(&input)
            .arg("--out")
            .arg(d.path().join("o")),
    );
}

#[test]
fn bench_datagen_reports_a_rate() {
    hat()
        .args([
            "bench",
            "datagen",
            "--tasks",
            "40",
            "--variants",
            "1",
            "--repeats",
            "1",
            "--harness",
        ])
        .arg(production())
        .assert()
        .success()
        .stdout(predicate::str::contains("scored trajectories/min"));
}

/// `--kinds` evaluates one task type of the suites: the prompt-injection block of both.
#[test]
fn eval_kinds_runs_only_those_task_types() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("inj");
    hat()
        .args([
            "eval",
            "--model",
            "oracle",
            "--suite",
            "lsqa,hvqa",
            "--kinds",
            "prompt_injection",
            "--harness",
        ])
        .arg(production())
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    for (suite, n) in [("lsqa", 16), ("hvqa", 20)] {
        let r: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(suite).join("results.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(r["total"], n, "{suite}");
        assert_eq!(r["score"], 100.0, "{suite}");
        assert_eq!(r["launch_kinds"]["total"], 0, "{suite}");
        assert_eq!(r["by_task_type"]["prompt_injection"]["total"], n, "{suite}");
    }
    // Red-team finding: a resume under another harness mixed both harnesses' items.
    let other = broken_copy(|p| {
        let t = std::fs::read_to_string(p.join("harness.toml")).unwrap();
        std::fs::write(
            p.join("harness.toml"),
            t.replace("name = \"Mia\"", "name = \"Zoe\""),
        )
        .unwrap();
    });
    fails_cleanly(
        hat()
            .args([
                "eval",
                "--model",
                "oracle",
                "--suite",
                "lsqa",
                "--resume",
                "--harness",
            ])
            .arg(other.path())
            .arg("--out")
            .arg(&out),
    )
    .stderr(predicate::str::contains("another harness state"));
    // A suite named twice runs once.
    hat()
        .args([
            "eval",
            "--model",
            "oracle",
            "--suite",
            "lsqa,lsqa",
            "--kinds",
            "prompt_injection",
            "--harness",
        ])
        .arg(production())
        .arg("--out")
        .arg(d.path().join("twice"))
        .assert()
        .success();
    fails_cleanly(
        hat()
            .args([
                "eval", "--model", "oracle", "--suite", "lsqa", "--kinds", "bogus",
            ])
            .arg("--out")
            .arg(d.path().join("x")),
    )
    .stderr(predicate::str::contains("unknown task type `bogus`"));
    // An error quoting its input shows control characters instead of sending them.
    fails_cleanly(
        hat()
            .args([
                "eval",
                "--model",
                "oracle",
                "--suite",
                "lsqa",
                "--kinds",
                "x\u{1b}[2J",
            ])
            .arg("--out")
            .arg(d.path().join("x")),
    )
    .stderr(predicate::str::contains("x\\x1b[2J").and(predicate::str::contains('\u{1b}').not()));
}

#[test]
fn eval_runs_the_oracle_resumes_and_compares() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    hat()
        .args([
            "eval",
            "--model",
            "oracle",
            "--suite",
            "lsqa,hvqa",
            "--limit",
            "12",
            "--harness",
        ])
        .arg(production())
        .arg("--out")
        .arg(&a)
        .assert()
        .success()
        .stdout(predicate::str::contains("100.0%"));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("lsqa/results.json")).unwrap())
            .unwrap();
    assert_eq!(r["score"], 100.0);
    assert!(
        r["by_task_type"].is_object()
            && r["components"]["facts"].is_object()
            && r["harness_hashes"].is_array()
    );
    fails_cleanly(
        hat()
            .args([
                "eval",
                "--model",
                "oracle",
                "--suite",
                "lsqa",
                "--limit",
                "12",
                "--harness",
            ])
            .arg(production())
            .arg("--out")
            .arg(&a),
    )
    .stderr(predicate::str::contains("--resume"));
    let resume_to_20 = || {
        hat()
            .args([
                "eval",
                "--model",
                "oracle",
                "--suite",
                "lsqa",
                "--limit",
                "20",
                "--resume",
                "--harness",
            ])
            .arg(production())
            .arg("--out")
            .arg(&a)
            .assert()
            .success();
    };
    resume_to_20();
    // Issue 13: an item written twice (a killed run) was counted twice on --resume.
    let items = a.join("lsqa/items.jsonl");
    let text = std::fs::read_to_string(&items).unwrap();
    let first = text.lines().next().unwrap().to_string();
    std::fs::write(&items, format!("\u{feff}{text}{first}\n")).unwrap();
    resume_to_20();
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("lsqa/results.json")).unwrap())
            .unwrap();
    assert_eq!(r["total"], 20, "{r}");
    hat()
        .args([
            "eval",
            "--model",
            "oracle",
            "--suite",
            "lsqa",
            "--limit",
            "5",
            "--harness",
        ])
        .arg(production())
        .arg("--out")
        .arg(&b)
        .assert()
        .success();
    hat()
        .args(["eval", "compare"])
        .arg(&a)
        .arg(&b)
        .assert()
        .success()
        .stdout(predicate::str::contains("lsqa.score"));
    fails_cleanly(
        hat()
            .args(["eval", "--model", "gpt-17", "--out"])
            .arg(d.path().join("c")),
    )
    .stderr(predicate::str::contains("no such file or folder"));
    fails_cleanly(
        hat()
            .args(["eval", "--model", "oracle", "--suite", "mmlu", "--out"])
            .arg(d.path().join("c")),
    )
    .stderr(predicate::str::contains("unknown suite"));
}

#[test]
fn eval_failures_sorts_failed_items_into_causes() {
    let d = tempfile::tempdir().unwrap();
    let run = d.path().join("run");
    let item = |id: &str, kind: &str, hash: &str, pass: bool, reason: &str| {
        serde_json::json!({"id": id, "task_type": kind, "harness_hash": hash, "pass": pass, "reason": reason})
            .to_string()
    };
    for (suite, hash) in [("lsqa", "sha256:prod"), ("hvqa", "sha256:elsewhere")] {
        std::fs::create_dir_all(run.join(suite)).unwrap();
        let lines = [
            item("a", "compare", hash, false, "arguments: product: `product` is \"P4\", expected \"P3\"; facts: does not state price of P3 (69.9)"),
            {
                // a served run's turn that left the call grammar
                let mut b: serde_json::Value = serde_json::from_str(&item("b", "compare", hash, false, "calls: unknown tool `x` (this harness has: a); did not call product; arguments: no valid product call")).unwrap();
                b["turns"] = serde_json::json!([{"text": "<tool_call>", "unchecked_tokens": 3}]);
                b.to_string()
            },
            item("c", "greet_join", hash, true, ""),
            // written twice by a killed run: counted once, as results.json counts it
            item("c", "greet_join", hash, true, ""),
        ];
        std::fs::write(run.join(suite).join("items.jsonl"), lines.join("\n") + "\n").unwrap();
    }
    std::fs::create_dir_all(run.join("ifeval")).unwrap();
    let answers = [
        serde_json::json!({"key": 1, "instruction_id_list": ["punctuation:no_comma"], "strict": [true],
            "response": "That stays backstage, sorry! Ask me about today's products."}),
        serde_json::json!({"key": 2, "instruction_id_list": ["startend:quotation"], "strict": [false],
            "response": "The war was long and hard for all of us. ".repeat(5)}),
    ];
    let text: String = answers.iter().map(|a| format!("{a}\n")).collect();
    std::fs::write(run.join("ifeval/items.jsonl"), text).unwrap();
    let out = hat()
        .args(["eval", "failures"])
        .arg(&run)
        .arg("--harness")
        .arg(production())
        .assert()
        .success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    // each labelled row, once per suite, with this run's cell
    let rows = |label: &str, cell: &str| {
        let hits: Vec<&str> = text
            .lines()
            .filter(|l| l.trim_start().starts_with(label))
            .collect();
        assert_eq!(hits.len(), 2, "{label}: {text}");
        assert!(
            hits.iter().all(|l| l.trim_end().ends_with(cell)),
            "{label}: {text}"
        );
    };
    rows("failed / items", "2 / 3");
    rows("looks up the wrong product", "1 (50%)");
    rows("calls a tool the harness lacks", "1 (50%)");
    rows("misses a needed call", "1 (50%)");
    rows("reply misses a fact", "1 (50%)");
    rows("the other items", "1/3 (33%)");
    rows("items past the call grammar (unchecked)", "1");
    assert!(
        text.contains("compare") && !text.contains("greet_join"),
        "{text}"
    );
    assert!(text.contains("3 items under harness states that"), "{text}");
    let row = |label: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("{label}: {text}"))
            .trim_end()
            .to_string()
    };
    assert!(row("prompts passed (strict)").ends_with("1 / 2"), "{text}");
    assert!(row("answers under 40 words").ends_with("1 (50%)"), "{text}");
    assert!(
        row("answers that repeat themselves").ends_with("1 (50%)"),
        "{text}"
    );
    assert!(row("punctuation").ends_with("1/1"), "{text}");
    fails_cleanly(hat().args(["eval", "failures"]).arg(d.path().join("nope")))
        .stderr(predicate::str::contains("is not a `hat eval --out` folder"));
    fails_cleanly(hat().args(["eval", "failures"]).arg(d.path()))
        .stderr(predicate::str::contains("no lsqa, hvqa or ifeval items"));
}

/// A loopback OpenAI-compatible server that answers with canned completions.
fn fake_endpoint(answers: Vec<&'static str>) -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for a in answers {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut len = 0;
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            let resp =
                serde_json::json!({"choices": [{"message": {"role": "assistant", "content": a}}]})
                    .to_string();
            write!(s, "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{resp}", resp.len()).unwrap();
        }
    });
    format!("http://{addr}/v1")
}

#[test]
fn run_drives_one_turn_through_an_endpoint() {
    let url = fake_endpoint(vec![
        r#"<tool_call>{"name": "get_product", "arguments": {"product_id": "P1"}}</tool_call>"#,
        "It is the best one!",
        "Here are the details, tap the link!",
    ]);
    hat()
        .args([
            "run",
            "--model",
            "openai:test",
            "--base-url",
            &url,
            "--comment",
            "what is P1 made of?",
            "--viewer",
            "lily",
            "--harness",
        ])
        .arg(production())
        .assert()
        .success()
        .stdout(
            predicate::str::contains("--- Tool (get_product)")
                .and(predicate::str::contains("cost_price").not())
                .and(predicate::str::contains("[hook no-absolute-claims] retry"))
                .and(
                    predicate::str::contains("=== reply")
                        .and(predicate::str::contains("Here are the details")),
                ),
        );
    // --json: the whole transcript, one record per model turn
    let url = fake_endpoint(vec![
        r#"<tool_call>{"name": "get_product", "arguments": {"product_id": "P1"}}</tool_call>"#,
        "It is the best one!",
        "Here are the details, tap the link!",
    ]);
    let out = hat()
        .args([
            "run",
            "--model",
            "openai:test",
            "--base-url",
            &url,
            "--comment",
            "what is P1 made of?",
            "--json",
            "--harness",
        ])
        .arg(production())
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let turns = v["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 3);
    assert!(turns[0]["text"].as_str().unwrap().contains("get_product"));
    assert!(turns.iter().all(|t| t["seconds"].as_f64().unwrap() >= 0.0));
    assert!(v["reply"]
        .as_str()
        .unwrap()
        .contains("Here are the details"));
    assert!(v["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["hook"] == "no-absolute-claims"));
    fails_cleanly(
        hat()
            .args([
                "run",
                "--model",
                "openai:test",
                "--base-url",
                "http://127.0.0.1:9/v1",
                "--comment",
                "hi",
                "--harness",
            ])
            .arg(production()),
    )
    .stderr(predicate::str::contains("127.0.0.1:9"));
}

/// Issue 13: a `$ref` cycle passed `check` and the first validation grew memory without bound.
#[test]
fn harness_check_rejects_a_ref_cycle_in_a_tool_schema() {
    let d = broken_copy(|p| {
        let t = std::fs::read_to_string(p.join("tools/check_stock.json"))
            .unwrap()
            .replace(
                "\"product_id\": {\"type\": \"string\", \"description\": \"Product id, e.g. P3\"}",
                "\"product_id\": {\"$ref\": \"#/$defs/a\"}",
            )
            .replace(
                "\"required\": [\"product_id\"]",
                "\"required\": [\"product_id\"], \"$defs\": {\"a\": {\"$ref\": \"#/$defs/b\"}, \"b\": {\"$ref\": \"#/$defs/a\"}}",
            );
        std::fs::write(p.join("tools/check_stock.json"), t).unwrap();
    });
    fails_cleanly(hat().args(["harness", "check"]).arg(d.path())).stderr(
        predicate::str::contains("tools/check_stock.json:7")
            .and(predicate::str::contains("`$ref` cycle"))
            .and(
                predicate::str::contains("#/$defs/a -> #/$defs/b")
                    .or(predicate::str::contains("#/$defs/b -> #/$defs/a")),
            ),
    );
}

/// Issue 13: schemas no call satisfies, 300 command hooks of 60 s each, a fallback with no
/// text and an unknown placeholder all passed `check`.
#[test]
fn harness_check_rejects_unsatisfiable_schemas_hook_time_and_dead_hook_texts() {
    let d = broken_copy(|p| {
        let t = std::fs::read_to_string(p.join("tools/check_stock.json"))
            .unwrap()
            .replace(
                "\"required\": [\"product_id\"]",
                "\"required\": [\"product_id\", \"colour\"]",
            );
        std::fs::write(p.join("tools/check_stock.json"), t).unwrap();
        let mut h = std::fs::read_to_string(p.join("hooks.toml")).unwrap();
        for i in 0..300 {
            h.push_str(&format!(
                "\n[[hooks]]\nid = \"slow-{i}\"\nevent = \"comment\"\naction = \"command\"\n\
                 command = [\"./hooks/no-medical-claims.sh\"]\ntimeout_ms = 60000\n"
            ));
        }
        h.push_str(
            "\n[[hooks]]\nid = \"fb\"\nevent = \"before_reply\"\naction = \"check\"\n\
             forbid = [\"cure\"]\non_fail = \"fallback\"\n\
             \n[[hooks]]\nid = \"hi\"\nevent = \"viewer_join\"\naction = \"inject\"\n\
             note = \"Hi {{ viewr }}\"\n",
        );
        std::fs::write(p.join("hooks.toml"), h).unwrap();
    });
    fails_cleanly(hat().args(["harness", "check"]).arg(d.path())).stderr(
        predicate::str::contains("tools/check_stock.json")
            .and(predicate::str::contains("`required` names `colour`"))
            .and(predicate::str::contains(
                "could hold one `comment` turn for",
            ))
            .and(predicate::str::contains("hook_budget_ms"))
            .and(predicate::str::contains(
                "hook `fb`: on_fail = \"fallback\" needs",
            ))
            .and(predicate::str::contains(
                "`{{ viewr }}` is not a variable of event `viewer_join`",
            )),
    );
}

/// Issue 13: viewer text in the prompt is length-limited, and the limit is the harness's to
/// set (`[viewers]`), checked like every other setting.
#[test]
fn viewer_text_limits_are_configurable_and_checked() {
    let d = broken_copy(|p| {
        let t = std::fs::read_to_string(p.join("harness.toml")).unwrap();
        std::fs::write(
            p.join("harness.toml"),
            t + "\n[viewers]\nmax_name_chars = 8\nmax_comment_chars = 30\n",
        )
        .unwrap();
    });
    let comment = "z".repeat(100);
    let event =
        format!(r#"{{"type":"comment","viewer":"averyveryverylongname","text":"{comment}"}}"#);
    let out = hat()
        .args(["harness", "render"])
        .arg(d.path())
        .args(["--event", &event])
        .assert()
        .success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(
        text.contains(&format!("{}…", "z".repeat(29))) && !text.contains(&"z".repeat(31)),
        "{text}"
    );
    assert!(
        text.contains("averyve…") && !text.contains("averyver"),
        "{text}"
    );
    let bad = broken_copy(|p| {
        let t = std::fs::read_to_string(p.join("harness.toml")).unwrap();
        std::fs::write(
            p.join("harness.toml"),
            t + "\n[viewers]\nmax_comment_chars = 5\n",
        )
        .unwrap();
    });
    fails_cleanly(hat().args(["harness", "check"]).arg(bad.path())).stderr(
        predicate::str::contains("[viewers] max_comment_chars must be between 20 and 4000"),
    );
}

/// Issue 13: an evaluation written inside a harness folder changed the harness's hash.
#[test]
fn files_outside_the_harness_layout_leave_its_hash_alone() {
    let hash = |dir: &Path| {
        let out = hat().args(["harness", "check"]).arg(dir).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        text.split_whitespace()
            .find(|w| w.starts_with("sha256:"))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no hash in {text}"))
    };
    let d = broken_copy(|_| {});
    let before = hash(d.path());
    std::fs::create_dir_all(d.path().join("runs/eval/lsqa")).unwrap();
    std::fs::write(d.path().join("runs/eval/lsqa/items.jsonl"), "{}\n").unwrap();
    std::fs::write(d.path().join("README.md"), "notes").unwrap();
    assert_eq!(hash(d.path()), before);
    std::fs::write(d.path().join("hooks/helper.py"), "print(1)").unwrap();
    assert_ne!(
        hash(d.path()),
        before,
        "files under hooks/ are part of the harness"
    );
}

/// Issue 13: a FIFO hung `check` forever, a symlink to /dev/zero read until memory ran out,
/// and symlinks to files outside the folder were read (and copied by `augment`) silently.
#[cfg(unix)]
#[test]
fn harness_reader_refuses_symlinks_and_special_files() {
    let outside = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(outside.path(), "TOP-SECRET-VALUE").unwrap();
    let d = broken_copy(|p| {
        std::os::unix::fs::symlink(outside.path(), p.join("skills/leak.md")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", p.join("tools/zero.md")).unwrap();
        let fifo = std::ffi::CString::new(p.join("hooks/pipe.md").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    });
    for args in [vec!["harness", "check"], vec!["harness", "render"]] {
        fails_cleanly(
            hat()
                .args(&args)
                .arg(d.path())
                .timeout(std::time::Duration::from_secs(60)),
        )
        .stderr(
            predicate::str::contains("skills/leak.md")
                .and(predicate::str::contains("symbolic link"))
                .and(predicate::str::contains("zero.md"))
                .and(predicate::str::contains("pipe.md"))
                .and(predicate::str::contains("not a regular file"))
                .and(predicate::str::contains("TOP-SECRET").not()),
        );
    }
    let out = tempfile::tempdir().unwrap();
    fails_cleanly(
        hat()
            .args(["augment", "--count", "2", "--harness"])
            .arg(d.path())
            .arg("--out")
            .arg(out.path().join("aug"))
            .timeout(std::time::Duration::from_secs(60)),
    );
    let copied = walk(out.path());
    assert!(
        !copied.iter().any(|t| t.contains("TOP-SECRET")),
        "augment copied the outside file"
    );
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else if let Ok(t) = std::fs::read_to_string(&p) {
                out.push(t);
            }
        }
    }
    out
}

/// Issue 13: `hat ... | head` panicked with "failed printing to stdout: Broken pipe".
#[cfg(unix)]
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    use std::process::Stdio;
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("hat"))
        .args(["tasks", "sample", "--split", "train", "--count", "20000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(out.status.code(), Some(101), "{stderr}");
}

/// Red-team finding: with SIGPIPE restored to its default, a command hook that exited without
/// reading its stdin killed `hat` (exit 141, no message) in eval and data gen.
#[cfg(unix)]
#[test]
fn a_hook_that_ignores_its_input_does_not_kill_the_run() {
    use std::os::unix::fs::PermissionsExt;
    let d = broken_copy(|p| {
        let script = p.join("hooks/quiet.sh");
        std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut h = std::fs::read_to_string(p.join("hooks.toml")).unwrap();
        h.push_str("\n[[hooks]]\nid = \"quiet\"\nevent = \"after_tool\"\naction = \"command\"\ncommand = [\"./hooks/quiet.sh\"]\n");
        std::fs::write(p.join("hooks.toml"), h).unwrap();
    });
    let out = tempfile::tempdir().unwrap();
    for _ in 0..3 {
        hat()
            .args([
                "eval",
                "--model",
                "oracle",
                "--suite",
                "lsqa",
                "--limit",
                "3",
                "--harness",
            ])
            .arg(d.path())
            .arg("--out")
            .arg(out.path())
            .arg("--resume")
            .assert()
            .success();
    }
}

/// Red-team finding: `hat serve` with a missing or broken harness said "the active harness
/// keeps serving" while it exited.
#[test]
fn serve_refuses_malformed_or_missing_arm_models() {
    hat()
        .args(["serve", "--arm-model", "just-a-path.gguf"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("write NAME=MODEL"));
    let d = tempfile::tempdir().unwrap();
    fails_cleanly(
        hat()
            .args([
                "serve",
                "--model",
                "openai:m",
                "--base-url",
                "http://127.0.0.1:9/v1",
            ])
            .args(["--arm-model", "b=/definitely/not/here.gguf", "--data-dir"])
            .arg(d.path())
            .arg("--harness")
            .arg(production()),
    )
    .stderr(predicate::str::contains(
        "--arm-model b=/definitely/not/here.gguf",
    ));
}

#[test]
fn serve_refuses_a_missing_or_broken_harness_at_start() {
    fails_cleanly(hat().args(["serve", "--harness", "/definitely/not/here"]))
        .stderr(predicate::str::contains("not a folder"));
    let d = broken_copy(|p| {
        let t = std::fs::read_to_string(p.join("harness.toml")).unwrap();
        std::fs::write(p.join("harness.toml"), t + "\ngarbage = \n").unwrap();
    });
    fails_cleanly(hat().args(["serve", "--harness"]).arg(d.path())).stderr(
        predicate::str::contains("harness.toml:")
            .and(predicate::str::contains("problem(s)"))
            .and(predicate::str::contains("keeps serving").not()),
    );
}

/// Makes the harness at `p` render its prompt with `template` (as `prompt.j2`).
fn with_template(p: &Path, template: &str) {
    std::fs::write(p.join("prompt.j2"), template).unwrap();
    let m = std::fs::read_to_string(p.join("harness.toml"))
        .unwrap()
        .replace(
            "format = \"markdown\"",
            "format = \"markdown\"\ntemplate = \"prompt.j2\"",
        );
    std::fs::write(p.join("harness.toml"), m).unwrap();
}

/// Issue 13: templates had no limits (nested loops ran away, `render` printed 100 MB) and a
/// 1 MB tool description passed `check`.
#[test]
fn harness_check_enforces_template_fuel_and_the_prompt_budget() {
    let d = broken_copy(|p| {
        with_template(
            p,
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
        )
    });
    fails_cleanly(
        hat()
            .args(["harness", "check"])
            .arg(d.path())
            .timeout(std::time::Duration::from_secs(60)),
    )
    .stderr(predicate::str::contains("prompt.j2").and(predicate::str::contains("fuel")));

    // a loop body runs in the check: the sample stream has a coupon and a flash sale
    for list in ["coupons", "flash_sales"] {
        let d = broken_copy(|p| {
            with_template(
                p,
                &format!("{{% for c in stream.{list} %}}{{{{ c.typo.x }}}}{{% endfor %}}"),
            )
        });
        fails_cleanly(hat().args(["harness", "check"]).arg(d.path()))
            .stderr(predicate::str::contains("prompt.j2"));
    }

    let d = broken_copy(|p| {
        let t = std::fs::read_to_string(p.join("tools/check_stock.json"))
            .unwrap()
            .replace(
                "Units in stock for a product, optionally for one size and colour.",
                &"very long description ".repeat(45_000),
            );
        std::fs::write(p.join("tools/check_stock.json"), t).unwrap();
    });
    fails_cleanly(hat().args(["harness", "check"]).arg(d.path()))
        .stderr(predicate::str::contains("over its budget of 12000"));
    // the production harness is within its budget
    hat()
        .args(["harness", "check"])
        .arg(production())
        .assert()
        .success();
}

/// Issue 13: `command = [""]` and `./../../../../bin/sh` passed as hook programs.
#[test]
fn harness_check_refuses_hook_programs_outside_the_folder() {
    for prog in ["", "./../../../../bin/sh", "/bin/sh", "sh"] {
        let d = broken_copy(|p| {
            let h = std::fs::read_to_string(p.join("hooks.toml"))
                .unwrap()
                .replace("\"./hooks/no-medical-claims.sh\"", &format!("\"{prog}\""));
            std::fs::write(p.join("hooks.toml"), h).unwrap();
        });
        fails_cleanly(hat().args(["harness", "check"]).arg(d.path())).stderr(
            predicate::str::contains("hooks.toml").and(predicate::str::contains(
                "must be a file inside the harness folder",
            )),
        );
    }
}

/// Issue 13: a UTF-8 byte-order mark broke SKILL.md front matter and harness.toml.
#[test]
fn harness_files_with_a_byte_order_mark_load() {
    let d = broken_copy(|p| {
        for f in [
            "skills/greet-and-thank/SKILL.md",
            "harness.toml",
            "tools/check_stock.json",
        ] {
            let t = std::fs::read_to_string(p.join(f)).unwrap();
            std::fs::write(p.join(f), format!("\u{feff}{t}")).unwrap();
        }
    });
    hat()
        .args(["harness", "check"])
        .arg(d.path())
        .assert()
        .success();
}

/// Issue 13: `--temperature -1` was read as a flag; an endpoint's timeout was a hard-coded 300 s.
#[test]
fn negative_temperatures_are_values_with_a_clear_error() {
    fails_cleanly(
        hat()
            .args([
                "run",
                "--model",
                "openai:x",
                "--base-url",
                "http://127.0.0.1:9",
                "--temperature",
                "-1",
                "--comment",
                "hi",
                "--harness",
            ])
            .arg(production()),
    )
    .stderr(predicate::str::contains("--temperature must be between 0"));
    hat()
        .args(["run", "--request-timeout-s", "0", "--comment", "hi"])
        .assert()
        .failure()
        .code(2)
        .stderr(predicate::str::contains("is not in 1..=3600"));
}

/// Issue 13: dead or contradictory hook rules passed `check`, and `data gen` then wrote 0
/// trajectories and exited 0.
#[test]
fn dead_hook_rules_are_refused_and_an_empty_data_gen_fails() {
    for (rule, want) in [
        ("forbid = [\"\"]", "an empty phrase"),
        ("max_chars = 0", "max_chars = 0"),
        (
            "forbid = [\"deal\"]\nrequire = [\"great deal\"]",
            "no reply can pass",
        ),
        ("ends_with = \"", "not less than the reply limit"),
        // red-team findings: a required phrase past the hook's own limit
        (
            "require = [\"thanks for watching the stream\"]\nmax_chars = 10",
            "longer than max_chars = 10",
        ),
    ] {
        let rule = if rule.starts_with("ends_with") {
            format!("ends_with = \"{}\"", "x".repeat(400))
        } else {
            rule.to_string()
        };
        let d = broken_copy(|p| {
            let mut h = std::fs::read_to_string(p.join("hooks.toml")).unwrap();
            h.push_str(&format!(
                "\n[[hooks]]\nid = \"dead\"\nevent = \"before_reply\"\naction = \"check\"\n{rule}\non_fail = \"retry\"\n"
            ));
            std::fs::write(p.join("hooks.toml"), h).unwrap();
        });
        fails_cleanly(hat().args(["harness", "check"]).arg(d.path()))
            .stderr(predicate::str::contains("hook `dead`").and(predicate::str::contains(want)));
    }
    // An empty phrase in a rewrite's replace matches between every two characters.
    let d = broken_copy(|p| {
        let mut h = std::fs::read_to_string(p.join("hooks.toml")).unwrap();
        h.push_str("\n[[hooks]]\nid = \"dead\"\nevent = \"before_reply\"\naction = \"rewrite\"\nreplace = { \"\" = \"x\" }\n");
        std::fs::write(p.join("hooks.toml"), h).unwrap();
    });
    fails_cleanly(hat().args(["harness", "check"]).arg(d.path()))
        .stderr(predicate::str::contains("empty phrase in replace"));
    // Contradictions across two hooks reject every reply as surely: check names both.
    for (a, b, want) in [
        (
            "require = [\"zebra crossing\"]",
            "forbid = [\"zebra\"]",
            "forbidden by hook `two`",
        ),
        (
            "ends_with = \"#ad\"",
            "ends_with = \"— Mia\"",
            "different endings",
        ),
        (
            "max_chars = 30",
            "ends_with = \"see you at the next live stream!!\"",
            "max_chars = 30",
        ),
    ] {
        let d = broken_copy(|p| {
            let mut h = std::fs::read_to_string(p.join("hooks.toml")).unwrap();
            for (id, rule) in [("one", a), ("two", b)] {
                h.push_str(&format!(
                    "\n[[hooks]]\nid = \"{id}\"\nevent = \"before_reply\"\naction = \"check\"\n{rule}\non_fail = \"retry\"\n"
                ));
            }
            std::fs::write(p.join("hooks.toml"), h).unwrap();
        });
        fails_cleanly(hat().args(["harness", "check"]).arg(d.path())).stderr(
            predicate::str::contains("hooks.toml")
                .and(predicate::str::contains("no reply can"))
                .and(predicate::str::contains(want)),
        );
    }
    // A valid harness whose rewrite leaves no reply standing (every reply cut to one
    // character): data gen writes nothing and says why instead of exiting 0.
    let d = broken_copy(|p| {
        let mut h = std::fs::read_to_string(p.join("hooks.toml")).unwrap();
        h.push_str("\n[[hooks]]\nid = \"cut\"\nevent = \"before_reply\"\naction = \"rewrite\"\ntruncate_chars = 1\n");
        std::fs::write(p.join("hooks.toml"), h).unwrap();
    });
    hat()
        .args(["harness", "check"])
        .arg(d.path())
        .assert()
        .success();
    fails_cleanly(
        hat()
            .args([
                "data",
                "gen",
                "--tasks",
                "6",
                "--variants",
                "0",
                "--harness",
            ])
            .arg(d.path())
            .arg("--out")
            .arg(d.path().join("out.jsonl")),
    )
    .stderr(predicate::str::contains("no trajectory was written"));
}

/// Issue 13: a misspelt binding key read "data did not match any variant of untagged enum".
#[test]
fn a_misspelt_binding_key_is_named() {
    let d = broken_copy(|p| {
        let t = std::fs::read_to_string(p.join("tools/check_stock.json"))
            .unwrap()
            .replace(
                "\"size\": \"/size\"",
                "\"size\": {\"frm\": \"/size\", \"map\": {}}",
            );
        std::fs::write(p.join("tools/check_stock.json"), t).unwrap();
    });
    fails_cleanly(hat().args(["harness", "check"]).arg(d.path())).stderr(
        predicate::str::contains("tools/check_stock.json")
            .and(predicate::str::contains("unknown key `frm`"))
            .and(predicate::str::contains("untagged").not()),
    );
}

#[test]
fn harness_gate_passes_an_equal_harness_and_exits_1_with_a_report_when_it_regresses() {
    let out = tempfile::tempdir().unwrap();
    let p = production();
    let gate = |threshold: &str| {
        let mut c = hat();
        c.args(["harness", "gate"])
            .arg(&p)
            .arg("--against")
            .arg(&p)
            .args([
                "--model",
                "oracle",
                "--gate-limit",
                "19",
                "--gate-threshold",
                threshold,
            ])
            .arg("--gate-out")
            .arg(out.path());
        c
    };
    gate("2")
        .assert()
        .success()
        .stdout(predicate::str::contains("gate passed").and(predicate::str::contains("100.0")));
    // demanding an improvement of one point fails on the same harness
    fails_cleanly(&mut gate("-1"))
        .stdout(predicate::str::contains("gate FAILED"))
        .stderr(predicate::str::contains("--gate-threshold"));
}

#[test]
fn eval_scores_a_tasks_file_from_tasks_sample() {
    let d = tempfile::tempdir().unwrap();
    let out = hat()
        .args(["tasks", "sample", "--count", "19", "--seed", "4"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let file = d.path().join("mine.jsonl");
    std::fs::write(&file, &out.stdout).unwrap();
    hat()
        .args(["eval", "--model", "oracle", "--suite", "lsqa", "--tasks"])
        .arg(&file)
        .arg("--harness")
        .arg(production())
        .arg("--out")
        .arg(d.path().join("r"))
        .assert()
        .success()
        .stdout(predicate::str::contains("100.0%").and(predicate::str::contains("19")));
}

/// `hat eval --stop-loops` asks the embedded engine to end looping answers; an endpoint
/// decodes its own, so the flag is refused there instead of being recorded as if it applied.
#[test]
fn eval_stop_loops_is_refused_for_an_endpoint() {
    let out = tempfile::tempdir().unwrap();
    fails_cleanly(
        hat()
            .args([
                "eval",
                "--model",
                "openai:x",
                "--base-url",
                "http://127.0.0.1:9",
                "--stop-loops",
                "--suite",
                "lsqa",
                "--out",
            ])
            .arg(out.path()),
    )
    .stderr(predicate::str::contains(
        "--stop-loops needs the embedded engine",
    ));
}
