//! CLI integration tests of the training commands: `hat train sft|distill|rl|pipeline|plot`
//! on tiny fixture models.

mod common;

use common::*;
use predicates::prelude::*;

#[test]
fn train_plot_draws_runs_and_names_a_bad_metrics_line() {
    let d = tempfile::tempdir().unwrap();
    let run = d.path().join("run-a");
    std::fs::create_dir_all(&run).unwrap();
    let line = |s: usize, loss: f64| {
        format!(
            r#"{{"step":{s},"loss":{loss},"lr":0.0003,"grad_norm":1.5,"tokens":1000,"loss_tokens":64,"tokens_per_s":150.0,"seconds":{s}.0,"epoch":0}}"#
        )
    };
    std::fs::write(
        run.join("metrics.jsonl"),
        format!("{}\n{}\n", line(1, 2.5), line(2, 1.25)),
    )
    .unwrap();
    let png = d.path().join("curves.png");
    hat()
        .args(["train", "plot"])
        .arg(&run)
        .arg("--out")
        .arg(&png)
        .assert()
        .success()
        .stdout(predicate::str::contains("1 runs"));
    assert_eq!(&std::fs::read(&png).unwrap()[..4], b"\x89PNG");

    std::fs::write(
        run.join("metrics.jsonl"),
        format!("{}\nnot json\n", line(1, 2.5)),
    )
    .unwrap();
    fails_cleanly(
        hat()
            .args(["train", "plot"])
            .arg(&run)
            .arg("--out")
            .arg(&png),
    )
    .stderr(predicate::str::contains("metrics.jsonl:2"));
    // Red-team findings: a folder or a .txt as --out printed a raw ImageError; `--lr -1` read
    // as an unknown flag, and config errors said "config config".
    std::fs::write(run.join("metrics.jsonl"), format!("{}\n", line(1, 2.5))).unwrap();
    for out in [d.path().to_path_buf(), d.path().join("x.txt")] {
        fails_cleanly(
            hat()
                .args(["train", "plot"])
                .arg(&run)
                .arg("--out")
                .arg(&out),
        )
        .stderr(
            predicate::str::contains("ending in .png")
                .and(predicate::str::contains("ImageError").not()),
        );
    }
    let data = d.path().join("d.jsonl");
    std::fs::write(&data, "{}\n").unwrap();
    let sft = |flags: &[&str], out: &str| {
        let mut c = hat();
        c.args(["train", "sft", "--preset", "smoke"])
            .args(flags)
            .arg("--data")
            .arg(&data)
            .arg("--out")
            .arg(d.path().join(out));
        c
    };
    fails_cleanly(&mut sft(&["--lr", "-1"], "neg")).stderr(
        predicate::str::contains("optim.lr must be a positive number")
            .and(predicate::str::contains("config config").not()),
    );
    // --repeat: not FILE=K (a usage error), and a file that is not training data
    sft(&["--repeat", "x.jsonl"], "rep")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("is not FILE=K"));
    fails_cleanly(&mut sft(&["--repeat", "other.jsonl=3"], "rep")).stderr(
        predicate::str::contains("other.jsonl")
            .and(predicate::str::contains("not one of the data files")),
    );
}

/// Stage 2 end to end on the tiny qwen2 fixture: a run, an extension by `--resume
/// --max-steps`, a resume with a changed flag refused, and an export of the distilled run.
#[test]
fn train_distill_runs_resumes_and_exports_on_a_tiny_model() {
    let d = tempfile::tempdir().unwrap();
    let fixture = hat_train::fixture::tiny_model(&d.path().join("m"), 1, "qwen2").unwrap();
    let run = d.path().join("run");
    let into = |out: &std::path::Path, steps: &str| {
        let mut c = hat();
        c.args([
            "train",
            "distill",
            "--preset",
            "smoke",
            "--rollout-format",
            "f32",
        ])
        .arg("--model")
        .arg(&fixture)
        .arg("--teacher")
        .arg(&fixture)
        .arg("--out")
        .arg(out)
        .args(["--max-steps", steps]);
        c
    };
    let base = |steps: &str| into(&run, steps);
    base("2")
        .assert()
        .success()
        .stderr(predicate::str::contains("dropped as IFEval look-alikes"));
    base("3")
        .arg("--resume")
        .assert()
        .success()
        .stderr(predicate::str::contains("now ends at step 3"));
    let lines = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 3);
    // shortening below the checkpoint is refused before the saved config changes
    let saved = std::fs::read_to_string(run.join("config.toml")).unwrap();
    fails_cleanly(base("2").arg("--resume"))
        .stderr(predicate::str::contains("at step 3, past --max-steps 2"));
    assert_eq!(
        std::fs::read_to_string(run.join("config.toml")).unwrap(),
        saved
    );
    assert!(lines.contains("rollout_mismatch"), "{lines}");
    fails_cleanly(base("3").arg("--resume").args(["--lr", "0.5"]))
        .stderr(predicate::str::contains("only --max-steps may change"));
    // a new run over this one (no --resume) is refused before it writes anything: it used to
    // overwrite the config and metrics, and its checkpoints were pruned as older than the
    // old run's
    fails_cleanly(&mut base("4")).stderr(
        predicate::str::contains("already holds a run (checkpoint step-000003)")
            .and(predicate::str::contains("--resume")),
    );
    assert_eq!(
        std::fs::read_to_string(run.join("config.toml")).unwrap(),
        saved
    );
    assert_eq!(
        std::fs::read_to_string(run.join("metrics.jsonl")).unwrap(),
        lines
    );
    // a finished run whose checkpoints are gone (as the pipeline leaves a stage) is not
    // resumed from step 0 over its model
    std::fs::create_dir_all(run.join("model-hf")).unwrap();
    std::fs::rename(run.join("checkpoints"), d.path().join("ck")).unwrap();
    fails_cleanly(base("4").arg("--resume"))
        .stderr(predicate::str::contains("no checkpoints to resume from"));
    std::fs::remove_dir(run.join("model-hf")).unwrap();
    std::fs::rename(d.path().join("ck"), run.join("checkpoints")).unwrap();
    // the broad prompt set, chosen on the command line, is what the saved config says
    let broad = d.path().join("broad");
    into(&broad, "1")
        .args(["--general-set", "broad"])
        .assert()
        .success();
    let cfg = std::fs::read_to_string(broad.join("config.toml")).unwrap();
    assert!(cfg.contains("general_set = \"broad\""), "{cfg}");
    // looping answers left out: saved in the config, their share in every step's metrics
    let dl = d.path().join("drop-looping");
    into(&dl, "2").arg("--drop-looping").assert().success();
    let cfg = std::fs::read_to_string(dl.join("config.toml")).unwrap();
    assert!(cfg.contains("drop_looping = true"), "{cfg}");
    let m = std::fs::read_to_string(dl.join("metrics.jsonl")).unwrap();
    assert_eq!(m.matches("looping_share").count(), 2, "{m}");
    assert!(!lines.contains("looping_share"), "{lines}");
    let out = d.path().join("distilled.gguf");
    hat()
        .args(["train", "export", "--format", "f32"])
        .arg(&run)
        .arg("--out")
        .arg(&out)
        .assert()
        .success()
        .stdout(predicate::str::contains("step 3"));
    assert!(std::fs::metadata(&out).unwrap().len() > 1000);
    fails_cleanly(
        hat()
            .args(["train", "distill", "--out"])
            .arg(d.path().join("x")),
    )
    .stderr(predicate::str::contains("--model"));
}

/// `default` in a stage's TOML config names the fetched default model, as the flag does: it
/// used to be read as a file named `default` ("model not found: default").
#[test]
fn train_config_files_read_default_as_the_default_model() {
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("home");
    // the fixture stands where `hat model fetch` puts the default model
    let default = home.join("models").join(hat_model::fetch::DEFAULT_FILE);
    hat_train::fixture::tiny_model(&default, 1, "qwen2").unwrap();
    let cfg = d.path().join("distill.toml");
    std::fs::write(
        &cfg,
        "model = \"default\"\nteacher = \"default\"\nprompts_per_step = 2\n\
         max_new_tokens = 16\ngeneral_prompts = 50\nval_prompts = 2\n",
    )
    .unwrap();
    hat()
        .env("HAT_HOME", &home)
        .args(["train", "distill", "--max-steps", "1"])
        .args(["--rollout-format", "f32", "--config"])
        .arg(&cfg)
        .arg("--out")
        .arg(d.path().join("run"))
        .assert()
        .success();
    let saved = std::fs::read_to_string(d.path().join("run/config.toml")).unwrap();
    assert!(!saved.contains("\"default\""), "{saved}");
    assert!(saved.contains(hat_model::fetch::DEFAULT_FILE), "{saved}");
}

/// `hat train sft --lora-rank`: adapters are what the run saves, and the export is a whole
/// model; a resume with another rank is refused by flag.
#[test]
fn train_sft_with_lora_saves_adapters_and_exports_a_merged_model() {
    let d = tempfile::tempdir().unwrap();
    let model = hat_train::fixture::tiny_model(&d.path().join("m"), 2, "qwen2").unwrap();
    let data = d.path().join("d.jsonl");
    let rec = |i: usize| {
        serde_json::json!({
            "messages": [
                {"role": "system", "content": "You are a host. Coat 99."},
                {"role": "user", "content": format!("viewer {i}: price of the coat?")},
                {"role": "assistant", "content": "The coat is 99."}
            ],
            "tools": [{"type": "function", "function": {"name": "get_product"}}],
            "harness_name": "h", "harness_hash": "x", "variant": "base",
            "call_syntax": "json-tags", "task_id": format!("t{i}"), "task_type": "t",
            "split": "train", "lang": "en", "calls": [], "teacher": "oracle", "score": {}
        })
        .to_string()
    };
    std::fs::write(&data, (0..6).map(|i| rec(i) + "\n").collect::<String>()).unwrap();
    let run = d.path().join("run");
    let sft_to = |rank: &str, out: &std::path::Path| {
        let mut c = hat();
        c.args(["train", "sft", "--preset", "smoke", "--lora-rank", rank])
            .arg("--data")
            .arg(&data)
            .arg("--model")
            .arg(&model)
            .arg("--out")
            .arg(out);
        c
    };
    let sft = |rank: &str| sft_to(rank, &run);
    sft("4").assert().success();
    let config = std::fs::read_to_string(run.join("config.toml")).unwrap();
    assert!(
        config.contains("[lora]") && config.contains("rank = 4"),
        "{config}"
    );
    fails_cleanly(sft("8").arg("--resume")).stderr(predicate::str::contains("--lora-*"));
    fails_cleanly(sft("4").arg("--resume").args(["--call-weight", "3"]))
        .stderr(predicate::str::contains("--call-weight"));
    // a call weight is saved with the run; a weight of 0 would learn no call
    let weighted = d.path().join("weighted");
    sft_to("4", &weighted)
        .args(["--call-weight", "3", "--decision-weight", "4"])
        .assert()
        .success()
        .stderr(predicate::str::contains("loss tokens weighted"));
    let saved = std::fs::read_to_string(weighted.join("config.toml")).unwrap();
    assert!(saved.contains("call_weight = 3.0"), "{saved}");
    assert!(saved.contains("decision_weight = 4.0"), "{saved}");
    fails_cleanly(
        sft_to("4", &weighted)
            .arg("--resume")
            .args(["--decision-weight", "2"]),
    )
    .stderr(predicate::str::contains("--decision-weight"));
    fails_cleanly(sft_to("4", &d.path().join("zero")).args(["--call-weight", "0"])).stderr(
        predicate::str::contains("call_weight must be a number above 0"),
    );
    fails_cleanly(sft_to("4", &d.path().join("zero")).args(["--decision-weight", "0"])).stderr(
        predicate::str::contains("decision_weight must be a number above 0"),
    );
    // the smoke preset's 3 steps are done: a resume may extend them, not cut them
    fails_cleanly(sft("4").arg("--resume").args(["--max-steps", "1"]))
        .stderr(predicate::str::contains("at step 3, past --max-steps 1"));
    assert_eq!(
        std::fs::read_to_string(run.join("config.toml")).unwrap(),
        config
    );
    // red-team finding: rank 100,000,000 asked for 230 GB and aborted
    fails_cleanly(
        hat()
            .args([
                "train",
                "sft",
                "--preset",
                "smoke",
                "--lora-rank",
                "100000000",
            ])
            .arg("--data")
            .arg(&data)
            .arg("--model")
            .arg(&model)
            .arg("--out")
            .arg(d.path().join("huge")),
    )
    .stderr(predicate::str::contains(
        "larger than the model's hidden size",
    ));
    let out = d.path().join("merged.gguf");
    hat()
        .args(["train", "export", "--format", "f32"])
        .arg(&run)
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    hat()
        .args(["model", "info"])
        .arg(&out)
        .assert()
        .success()
        // a whole model (2 blocks of 12 tensors, embedding, norm), not 28 adapter tensors
        .stdout(predicate::str::contains("f32:26"));
}

/// `hat train rl` on a tiny model: rollouts through the agent loop, a resume that extends the
/// run, and a clear error without a model.
#[test]
fn train_rl_runs_and_resumes_on_a_tiny_model() {
    let d = tempfile::tempdir().unwrap();
    let fixture = hat_train::fixture::tiny_model(&d.path().join("m"), 1, "qwen2").unwrap();
    let run = d.path().join("run");
    let base = |steps: &str| {
        let mut c = hat();
        c.args([
            "train",
            "rl",
            "--preset",
            "smoke",
            "--rollout-format",
            "f32",
        ])
        .args(["--max-new-tokens", "8"])
        .arg("--model")
        .arg(&fixture)
        .arg("--harness")
        .arg(production())
        .arg("--out")
        .arg(&run)
        .args(["--max-steps", steps]);
        c
    };
    base("1")
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "train-split tasks under 3 harness states",
        ));
    base("2").arg("--resume").assert().success();
    let lines = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 2);
    assert!(lines.contains("reward_mean"), "{lines}");
    assert!(run.join("rollouts.jsonl").exists());
    fails_cleanly(base("2").arg("--resume").args(["--group-size", "5"]))
        .stderr(predicate::str::contains("only --max-steps may change"));
    fails_cleanly(hat().args(["train", "rl", "--out"]).arg(d.path().join("x")))
        .stderr(predicate::str::contains("--model"));
}

/// `hat train pipeline`: every stage on a tiny model, evaluated after each, one report; a
/// second invocation resumes and skips what is done.
#[test]
fn train_pipeline_runs_every_stage_reports_and_resumes() {
    let d = tempfile::tempdir().unwrap();
    let fixture = hat_train::fixture::tiny_model(&d.path().join("m"), 1, "qwen2").unwrap();
    let cfg = d.path().join("p.toml");
    std::fs::write(
        &cfg,
        r#"preset = "quick"
[data]
tasks = 40
variants = 1
group = 4
[replay]
prompts = 12
samples = 2
max_tokens = 64
batch = 1
repeat = 2
[sft]
max_steps = 2
save_every = 2
[sft.pack]
max_tokens = 8192
[distill]
max_steps = 1
save_every = 1
rollout_format = "f32"
general_prompts = 20
[rl]
max_steps = 1
save_every = 1
max_new_tokens = 8
rollout_format = "f32"
[eval]
limit = 2
max_tokens = 16
ifeval_max_tokens = 8
"#,
    )
    .unwrap();
    let out = d.path().join("p");
    let run = |resume: bool| {
        let mut c = hat();
        c.args(["train", "pipeline"]);
        if resume {
            c.arg("--resume");
        } else {
            c.arg("--config")
                .arg(&cfg)
                .arg("--model")
                .arg(&fixture)
                .arg("--harness")
                .arg(production());
        }
        c.arg("--out").arg(&out);
        c
    };
    run(false)
        .assert()
        .success()
        .stdout(predicate::str::contains("rl"));
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    for stage in ["| base |", "| sft |", "| distill |", "| rl |"] {
        assert!(report.contains(stage), "{report}");
    }
    assert!(out.join("curves.png").exists());
    // the replay answers went into SFT, not into distillation's live-stream prompts
    assert!(report.contains("Replay data mixed into SFT"), "{report}");
    let sft_cfg = std::fs::read_to_string(out.join("sft/config.toml")).unwrap();
    assert!(sft_cfg.contains("replay.jsonl"), "{sft_cfg}");
    // drawn twice an epoch ([replay] repeat)
    let sft: toml::Value = toml::from_str(&sft_cfg).unwrap();
    let repeat = sft["repeat"].as_table().expect("a [repeat] table");
    assert_eq!(repeat.len(), 1, "{sft_cfg}");
    let (file, k) = repeat.iter().next().unwrap();
    assert!(
        file.ends_with("replay.jsonl") && k.as_integer() == Some(2),
        "{sft_cfg}"
    );
    let distill_cfg = std::fs::read_to_string(out.join("distill/config.toml")).unwrap();
    assert!(!distill_cfg.contains("replay.jsonl"), "{distill_cfg}");
    assert!(out.join("rl/model-q8_0.gguf").exists());
    assert!(out.join("eval/rl/hvqa/results.json").exists());
    assert!(
        !out.join("sft/checkpoints").exists(),
        "a finished stage keeps its exports only"
    );
    let first = std::fs::read_to_string(out.join("report.json")).unwrap();
    // a finished pipeline resumes to the same report without training again
    run(true)
        .assert()
        .success()
        .stderr(predicate::str::contains("sft: finished before"))
        .stderr(predicate::str::contains("replay: generated before"));
    let again = std::fs::read_to_string(out.join("report.json")).unwrap();
    assert_eq!(first, again);
    // a second start into the same folder must say how to continue
    fails_cleanly(&mut run(false)).stderr(predicate::str::contains("--resume"));
    // and a resume of nothing starts nothing
    fails_cleanly(
        hat()
            .args(["train", "pipeline", "--resume", "--out"])
            .arg(d.path().join("none")),
    )
    .stderr(predicate::str::contains("no pipeline to continue"));
    assert!(!d.path().join("none").exists());
}

/// `hat data replay` on a tiny model: every prompt is accounted for (kept, failed its check,
/// or never ended), each kept line is a training record the trainer reads, an existing file
/// needs --force, and a resumed run continues where its state file says, giving the same lines.
#[test]
fn data_replay_accounts_for_every_prompt_and_resumes() {
    let d = tempfile::tempdir().unwrap();
    let fixture = hat_train::fixture::tiny_model(&d.path().join("m"), 1, "qwen2").unwrap();
    let run_wide = |out: &std::path::Path, batch: &str| {
        let mut c = hat();
        c.args(["data", "replay", "--prompts", "12", "--samples", "2"])
            .args(["--max-tokens", "64", "--batch", batch, "--threads", "1"])
            .arg("--model")
            .arg(&fixture)
            .arg("--out")
            .arg(out);
        c
    };
    let run = |out: &std::path::Path| run_wide(out, "1");
    let out = d.path().join("replay.jsonl");
    let done = run(&out).assert().success();
    let said = String::from_utf8(done.get_output().stdout.clone()).unwrap();
    // the number written before the words `at`
    let words: Vec<&str> = said.split_whitespace().collect();
    let num = |at: &[&str]| -> usize {
        let i = (1..words.len())
            .find(|&i| words[i..].starts_with(at))
            .unwrap_or_else(|| panic!("{at:?} in {said}"));
        words[i - 1].trim_start_matches('(').parse().unwrap()
    };
    let kept = num(&["answers", "to"]);
    let prompts = num(&["prompts"]);
    let failed = num(&["dropped", "for", "failing"]);
    let repetitive = num(&["for", "repeating"]);
    let unfinished = num(&["for", "never"]);
    assert_eq!(prompts, 12, "{said}");
    assert_eq!(kept + failed + repetitive + unfinished, prompts, "{said}");
    // the tiny model ends an answer now and then within 64 tokens (seeded, so always the same)
    assert!(kept > 0, "{said}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.lines().count(), kept);
    let ids: Vec<usize> = text
        .lines()
        .map(|l| {
            let r: hat_data::Record = serde_json::from_str(l).unwrap();
            assert_eq!(r.messages.len(), 2);
            assert!(r.task_type.starts_with("general"));
            r.task_id.trim_start_matches("replay-gen-").parse().unwrap()
        })
        .collect();
    assert!(!d.path().join("replay.jsonl.partial").exists());
    assert!(!d.path().join("replay.jsonl.partial.state").exists());
    // several prompts and tries decoding together (continuously) keep the same answers
    let wide = d.path().join("wide.jsonl");
    run_wide(&wide, "3").assert().success();
    assert_eq!(std::fs::read_to_string(&wide).unwrap(), text);
    fails_cleanly(&mut run(&out)).stderr(predicate::str::contains("--force"));
    run(&out)
        .arg("--resume")
        .assert()
        .success()
        .stdout(predicate::str::contains("nothing to resume"));
    // one smoke SFT step on `data` into `run`
    let sft = |data: &str, run: &str| {
        let mut c = hat();
        c.args(["train", "sft", "--preset", "smoke", "--max-steps", "1"])
            .args(["--data", data])
            .arg("--model")
            .arg(&fixture)
            .arg("--out")
            .arg(d.path().join(run));
        c
    };
    // and the trainer reads the records as they are
    sft(&out.display().to_string(), "run").assert().success();

    // a run stopped after its first chunk (4 prompts at batch 1): its state file and an empty
    // partial file; the resume settles prompts 4.. and writes exactly their lines
    let out2 = d.path().join("again.jsonl");
    std::fs::write(d.path().join("again.jsonl.partial"), "").unwrap();
    let settings = serde_json::json!({
        "model": fixture.display().to_string(), "format": "original", "prompts": 12,
        "samples": 2, "temperature": 0.8f32, "max_tokens": 64, "seed": 0, "batch": 1,
        "version": env!("CARGO_PKG_VERSION"), "keep": hat_train::replay::KEEP_RULES,
    });
    let state = |settings: &serde_json::Value| {
        serde_json::json!({
            "settings": settings,
            "stats": {"prompts": 12, "excluded": 0, "settled": 4, "kept": 0, "kept_constrained": 0,
                      "dropped_failed_check": 0, "dropped_unfinished": 4, "generated_tokens": 0},
            "partial_bytes": 0,
        })
        .to_string()
    };
    let mut other = settings.clone();
    other["seed"] = 5.into();
    std::fs::write(d.path().join("again.jsonl.partial.state"), state(&other)).unwrap();
    fails_cleanly(run(&out2).arg("--resume")).stderr(predicate::str::contains("other settings"));
    std::fs::write(d.path().join("again.jsonl.partial.state"), state(&settings)).unwrap();
    // forgetting --resume does not wipe the unfinished run
    fails_cleanly(&mut run(&out2)).stderr(predicate::str::contains("unfinished run"));
    run(&out2)
        .arg("--resume")
        .assert()
        .success()
        .stderr(predicate::str::contains("resuming after 4 of 12 prompts"));
    let want: Vec<&str> = text
        .lines()
        .zip(&ids)
        .filter(|(_, &i)| i >= 4)
        .map(|(l, _)| l)
        .collect();
    assert!(!want.is_empty(), "kept prompts {ids:?}");
    let got = std::fs::read_to_string(&out2).unwrap();
    assert_eq!(got.lines().collect::<Vec<_>>(), want);
    // mixed files: the trainer says what each one holds of the loss
    let (a, b) = (out.display().to_string(), out2.display().to_string());
    sft(&format!("{a},{b}"), "run2")
        .assert()
        .success()
        .stderr(predicate::str::contains(format!(
            "  {a}: {kept} trajectories"
        )))
        .stderr(predicate::str::contains(format!(
            "  {b}: {} trajectories",
            want.len()
        )))
        .stderr(predicate::str::contains("% of the loss"));
}

/// `hat data replay --prompt-set broad`: the broad generator's prompts (ids `broad-N`, some with
/// several constraints, each kept answer passing all of them); a resume under the other set is
/// refused as other settings; an unknown set is named with the ones there are.
#[test]
fn data_replay_draws_from_the_broad_prompt_set() {
    let d = tempfile::tempdir().unwrap();
    let fixture = hat_train::fixture::tiny_model(&d.path().join("m"), 1, "qwen2").unwrap();
    let run = |set: &str, out: &std::path::Path| {
        let mut c = hat();
        c.args(["data", "replay", "--prompts", "40", "--samples", "2"])
            .args(["--max-tokens", "64", "--batch", "4", "--threads", "1"])
            .args(["--prompt-set", set])
            .arg("--model")
            .arg(&fixture)
            .arg("--out")
            .arg(out);
        c
    };
    let out = d.path().join("broad.jsonl");
    run("broad", &out).assert().success();
    let text = std::fs::read_to_string(&out).unwrap();
    // the tiny model ends some answers within 64 tokens (seeded, so always the same ones)
    assert!(text.lines().count() > 0);
    for l in text.lines() {
        let r: hat_data::Record = serde_json::from_str(l).unwrap();
        assert!(r.task_id.starts_with("replay-broad-"), "{}", r.task_id);
    }
    // the settings a broad run saves name its set, so a basic resume is refused
    let partial = d.path().join("again.jsonl");
    std::fs::write(d.path().join("again.jsonl.partial"), "").unwrap();
    let settings = serde_json::json!({
        "model": fixture.display().to_string(), "format": "original", "prompts": 40,
        "samples": 2, "temperature": 0.8f32, "max_tokens": 64, "seed": 0, "batch": 4,
        "version": env!("CARGO_PKG_VERSION"), "keep": hat_train::replay::KEEP_RULES,
        "prompt_set": "broad",
    });
    let state = serde_json::json!({
        "settings": settings,
        "stats": {"prompts": 40, "excluded": 0, "settled": 0, "kept": 0, "kept_constrained": 0,
                  "dropped_failed_check": 0, "dropped_unfinished": 0, "generated_tokens": 0},
        "partial_bytes": 0,
    });
    std::fs::write(
        d.path().join("again.jsonl.partial.state"),
        state.to_string(),
    )
    .unwrap();
    fails_cleanly(run("basic", &partial).arg("--resume"))
        .stderr(predicate::str::contains("other settings"));
    run("broad", &partial).arg("--resume").assert().success();
    assert_eq!(std::fs::read_to_string(&partial).unwrap(), text);
    // with --repair, the answers edited to pass are counted and marked, and it keeps at
    // least every answer kept without
    let fixed = d.path().join("fixed.jsonl");
    let said = run("broad", &fixed).arg("--repair").assert().success();
    let said = String::from_utf8(said.get_output().stdout.clone()).unwrap();
    assert!(said.contains("of those repaired"), "{said}");
    let repaired = std::fs::read_to_string(&fixed).unwrap();
    assert!(repaired.lines().count() >= text.lines().count());
    let marked = repaired
        .lines()
        .filter(|l| {
            let r: hat_data::Record = serde_json::from_str(l).unwrap();
            r.score.get("repaired").is_some()
        })
        .count();
    assert!(
        said.contains(&format!(", {marked} of those repaired")),
        "{said}"
    );
    fails_cleanly(run("basic", &d.path().join("y.jsonl")).arg("--repair")).stderr(
        predicate::str::contains("--repair needs the broad prompt set"),
    );
    // a usage error (exit 2, as clap answers every bad flag value)
    run("wide", &d.path().join("x.jsonl"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("basic or broad"));
}

/// `hat bench train --unpacked` on the tiny fixture: the three workloads in order (the packed
/// group before its conversations one by one) and the packing speed-up line.
#[test]
fn bench_train_times_the_packed_group_and_the_speedup() {
    let d = tempfile::tempdir().unwrap();
    let model = hat_train::fixture::tiny_model(&d.path().join("m"), 3, "qwen2").unwrap();
    let data = d.path().join("d.jsonl");
    // one shared system prompt long enough for the 512-token workload
    let system = "You are a host of a live stream. ".repeat(80);
    let rec = |i: usize| {
        serde_json::json!({
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": format!("viewer {i}: price of the coat?")},
                {"role": "assistant", "content": format!("The coat is {i}9.")}
            ],
            "tools": [], "harness_name": "h", "harness_hash": "x", "variant": "base",
            "call_syntax": "json-tags", "task_id": format!("t{i}"), "task_type": "t",
            "split": "train", "lang": "en", "calls": [], "teacher": "oracle", "score": {}
        })
        .to_string()
    };
    std::fs::write(&data, (0..4).map(|i| rec(i) + "\n").collect::<String>()).unwrap();
    let done = hat()
        .args([
            "bench",
            "train",
            "--group",
            "4",
            "--repeats",
            "1",
            "--unpacked",
        ])
        .arg("--model")
        .arg(&model)
        .arg("--data")
        .arg(&data)
        .assert()
        .success();
    let said = String::from_utf8(done.get_output().stdout.clone()).unwrap();
    let at = |s: &str| said.find(s).unwrap_or_else(|| panic!("{s:?} in {said}"));
    assert!(at("512 tokens") < at("packed group of 4"), "{said}");
    assert!(at("packed group of 4") < at("the same 4 conversations one by one"));
    assert!(at("packing speed-up: ") > at("one by one"));
    // an empty group is refused by flag, not read as one
    hat()
        .args(["bench", "train", "--group", "0", "--data"])
        .arg(&data)
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("--group").and(predicate::str::contains("panicked").not()),
        );
}

/// Every tensor of the model in `dir`, flattened.
fn weights(dir: &std::path::Path) -> std::collections::HashMap<String, Vec<f32>> {
    hat_model::train::TrainModel::load(dir)
        .unwrap()
        .model
        .weights()
        .unwrap()
        .into_iter()
        .map(|(n, t)| (n, t.flatten_all().unwrap().to_vec1::<f32>().unwrap()))
        .collect()
}

/// `hat train soup`: the mean of three tiny models (random starts, so only with `--any-start`),
/// exported as a Hugging Face folder and as GGUF; one model, a missing one, models of other
/// shapes, or of other starts without `--any-start` are clear errors that write nothing.
#[test]
fn train_soup_averages_its_models_and_refuses_bad_input() {
    let d = tempfile::tempdir().unwrap();
    let models: Vec<_> = (1..=3)
        .map(|seed| {
            hat_train::fixture::tiny_model(&d.path().join(format!("m{seed}")), seed, "qwen2")
                .unwrap()
        })
        .collect();
    let hf = d.path().join("soup-hf");
    // three random starts are not fine-tunes of one start: refused unless any start is allowed
    fails_cleanly(
        hat()
            .args(["train", "soup", "--format", "hf"])
            .args(&models)
            .arg("--out")
            .arg(&hf),
    )
    .stderr(predicate::str::contains("same start").and(predicate::str::contains("--any-start")));
    assert!(!hf.exists());
    hat()
        .args(["train", "soup", "--format", "hf", "--any-start"])
        .args(&models)
        .arg("--out")
        .arg(&hf)
        .assert()
        .success()
        .stdout(predicate::str::contains("the mean of 3 models"));
    let ws: Vec<_> = models.iter().map(|m| weights(m)).collect();
    let mean = weights(&hf);
    assert_eq!(mean.len(), ws[0].len());
    for (name, m) in &mean {
        for (i, x) in m.iter().enumerate() {
            let want = (ws[0][name][i] + ws[1][name][i] + ws[2][name][i]) / 3.0;
            assert!((x - want).abs() < 1e-6, "{name}: {x} {want}");
        }
    }
    let gguf = d.path().join("soup.gguf");
    hat()
        .args(["train", "soup", "--any-start"])
        .args(&models[..2])
        .arg("--out")
        .arg(&gguf)
        .assert()
        .success();
    hat().args(["model", "info"]).arg(&gguf).assert().success();
    // an existing file is replaced only with --force; a folder is never a GGUF's --out
    let soup_again = |out: &std::path::Path| {
        let mut c = hat();
        c.args(["train", "soup", "--any-start"])
            .args(&models[..2])
            .arg("--out")
            .arg(out);
        c
    };
    let before = std::fs::read(&gguf).unwrap();
    fails_cleanly(&mut soup_again(&gguf)).stderr(predicate::str::contains("--force"));
    assert_eq!(std::fs::read(&gguf).unwrap(), before);
    soup_again(&gguf).arg("--force").assert().success();
    fails_cleanly(&mut soup_again(d.path())).stderr(predicate::str::contains("is a folder"));
    let out = d.path().join("bad.gguf");
    hat()
        .args(["train", "soup"])
        .arg(&models[0])
        .arg("--out")
        .arg(&out)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("2 values required"));
    fails_cleanly(
        hat()
            .args(["train", "soup"])
            .arg(&models[0])
            .arg(d.path().join("nowhere"))
            .arg("--out")
            .arg(&out),
    )
    .stderr(predicate::str::contains("nowhere: no such model"));
    let other = hat_train::fixture::tiny_model(&d.path().join("llama"), 4, "llama").unwrap();
    fails_cleanly(
        hat()
            .args(["train", "soup"])
            .arg(&models[0])
            .arg(&other)
            .arg("--out")
            .arg(&out),
    )
    .stderr(predicate::str::contains("differ in shape"));
    assert!(!out.exists());
}

/// `hat train merge`: a model halfway between two tiny models, exported as GGUF and as a
/// Hugging Face folder; a bad ratio, format or model pair is a clear error and writes nothing.
#[test]
fn train_merge_interpolates_toward_the_base_and_refuses_bad_input() {
    let d = tempfile::tempdir().unwrap();
    let base = hat_train::fixture::tiny_model(&d.path().join("base"), 1, "qwen2").unwrap();
    let tuned = hat_train::fixture::tiny_model(&d.path().join("tuned"), 2, "qwen2").unwrap();
    let merge = |ratio: &str, format: &str, out: &std::path::Path| {
        let mut c = hat();
        c.args(["train", "merge", "--ratio", ratio, "--format", format])
            .arg(&tuned)
            .arg("--base")
            .arg(&base)
            .arg("--out")
            .arg(out);
        c
    };
    let hf = d.path().join("half-hf");
    merge("0.5", "hf", &hf)
        .assert()
        .success()
        .stdout(predicate::str::contains("0.5 x"));
    let (b, t, m) = (weights(&base), weights(&tuned), weights(&hf));
    let name = "blk.0.ffn_down.weight";
    for ((x, bx), tx) in m[name].iter().zip(&b[name]).zip(&t[name]) {
        assert!((x - (bx + tx) / 2.0).abs() < 1e-6, "{x} {bx} {tx}");
    }
    let gguf = d.path().join("half.gguf");
    merge("0.5", "q8_0", &gguf).assert().success();
    hat().args(["model", "info"]).arg(&gguf).assert().success();
    for (ratio, format, want) in [
        ("2.5", "q8_0", "--ratio 2.5"),
        ("nan", "q8_0", "--ratio NaN"),
        (
            "0.5",
            "q5_k",
            "--format q5_k: give one of f32, q8_0, q4_0, hf",
        ),
    ] {
        let out = d.path().join(format!("bad-{ratio}-{format}"));
        fails_cleanly(&mut merge(ratio, format, &out)).stderr(predicate::str::contains(want));
        assert!(!out.exists());
    }
    let other = hat_train::fixture::tiny_model(&d.path().join("llama"), 3, "llama").unwrap();
    let out = d.path().join("mixed.gguf");
    fails_cleanly(
        hat()
            .args(["train", "merge", "--ratio", "0.5"])
            .arg(&tuned)
            .arg("--base")
            .arg(&other)
            .arg("--out")
            .arg(&out),
    )
    .stderr(predicate::str::contains("differ in shape"))
    .stderr(predicate::str::contains("architecture"));
    assert!(!out.exists());
    // a folder that is not an earlier export is refused before anything is loaded
    let taken = d.path().join("taken");
    std::fs::create_dir(&taken).unwrap();
    std::fs::write(taken.join("notes.txt"), "mine").unwrap();
    fails_cleanly(&mut merge("0.5", "hf", &taken))
        .stderr(predicate::str::contains("is not an earlier export"));
    assert_eq!(
        std::fs::read_to_string(taken.join("notes.txt")).unwrap(),
        "mine"
    );
}
