//! The oracle scores 100 on both agent suites; runs resume; suites hold
//! what the issue asks for (>= 300 lsqa tasks of every type, >= 20 held-out states).

use std::collections::BTreeSet;
use std::path::Path;

use hat_agent::episode::{CallCheck, EpisodeConfig};
use hat_eval::{run_agent, Backend, EvalConfig, Suite};
use hat_tasks::{Split, TaskKind, WorldCache};

fn cfg(out: &Path, limit: Option<usize>, resume: bool) -> EvalConfig {
    EvalConfig {
        kinds: Vec::new(),
        harness_dir: Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream"),
        out_dir: out.to_path_buf(),
        limit,
        resume,
        ifeval_input: None,
        episode: EpisodeConfig::default(),
        batch: 8,
        max_tokens: 128,
        ifeval_max_tokens: 1024,
        tasks: None,
    }
}

#[test]
fn suites_cover_every_type_on_test_data_and_held_out_states() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
    let mut worlds = WorldCache::default();
    let l = hat_eval::suite::lsqa(&dir, &mut worlds).unwrap();
    assert!(l.items.len() >= 300);
    let kinds: BTreeSet<TaskKind> = l.items.iter().map(|i| i.task.kind).collect();
    assert_eq!(kinds.len(), TaskKind::ALL.len());
    assert!(l
        .items
        .iter()
        .all(|i| i.task.split == Split::Test
            && Split::of_world_seed(i.task.world_seed) == Split::Test));
    let h = hat_eval::suite::hvqa(&dir, &mut worlds).unwrap();
    assert!(h.states.len() >= 20);
    let hashes: BTreeSet<&str> = h.states.iter().map(|s| s.hash.as_str()).collect();
    assert_eq!(hashes.len(), h.states.len(), "held-out states are distinct");
    assert!(!hashes.contains(l.states[0].hash.as_str()));
}

#[test]
fn oracle_scores_100_on_lsqa_and_hvqa() {
    let d = tempfile::tempdir().unwrap();
    for s in [Suite::Lsqa, Suite::Hvqa] {
        let r = run_agent(
            s,
            &cfg(d.path(), None, false),
            &mut Backend::Oracle,
            &mut |_, _| {},
        )
        .unwrap();
        assert_eq!(r.headline, 100.0, "{s:?}: {}", r.detail);
        assert!(r.detail["total"].as_u64().unwrap() >= 300);
    }
}

#[test]
fn runs_resume_and_refuse_to_overwrite() {
    let d = tempfile::tempdir().unwrap();
    run_agent(
        Suite::Lsqa,
        &cfg(d.path(), Some(10), false),
        &mut Backend::Oracle,
        &mut |_, _| {},
    )
    .unwrap();
    assert!(run_agent(
        Suite::Lsqa,
        &cfg(d.path(), Some(10), false),
        &mut Backend::Oracle,
        &mut |_, _| {}
    )
    .is_err());
    let r = run_agent(
        Suite::Lsqa,
        &cfg(d.path(), Some(25), true),
        &mut Backend::Oracle,
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(r.detail["total"], 25);
    let lines = std::fs::read_to_string(d.path().join("lsqa/items.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(lines, 25, "the first 10 items were not redone");
    // a resume with nothing left to do reports the time the suite took, not its own instant
    let results = d.path().join("lsqa/results.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    v["wall_seconds"] = serde_json::json!(1000.0);
    std::fs::write(&results, v.to_string()).unwrap();
    let again = run_agent(
        Suite::Lsqa,
        &cfg(d.path(), Some(25), true),
        &mut Backend::Oracle,
        &mut |_, _| {},
    )
    .unwrap();
    let wall = again.detail["wall_seconds"].as_f64().unwrap();
    assert!(wall >= 1000.0, "{wall}");
    // a resume whose episodes would run another way is refused, and changes nothing
    let mut other = cfg(d.path(), Some(30), true);
    other.episode.final_reply = true;
    let e = run_agent(Suite::Lsqa, &other, &mut Backend::Oracle, &mut |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("--final-reply") && e.contains("lsqa"), "{e}");
    let mut named = cfg(d.path(), Some(30), true);
    named.episode.calls = CallCheck::ToolNames;
    let e = run_agent(Suite::Lsqa, &named, &mut Backend::Oracle, &mut |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--tool-names") && e.contains("\"tool_names\":true"),
        "{e}"
    );
    let after = std::fs::read_to_string(d.path().join("lsqa/items.jsonl")).unwrap();
    assert_eq!(after.lines().count(), 25);
}

/// A run with the call grammar records that its replies end at the reply limit, so items
/// scored before the grammar did that (their `episode.json` says only `call_grammar`) are
/// not mixed with items scored after.
#[test]
fn a_call_grammar_run_from_before_the_reply_limit_is_not_resumed() {
    let d = tempfile::tempdir().unwrap();
    let mut first = cfg(d.path(), Some(6), false);
    first.episode.calls = CallCheck::Grammar;
    run_agent(Suite::Lsqa, &first, &mut Backend::Oracle, &mut |_, _| {}).unwrap();
    let path = d.path().join("lsqa/episode.json");
    let mut episode: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(episode["replies_end_at_limit"], true);
    let mut again = cfg(d.path(), Some(8), true);
    again.episode.calls = CallCheck::Grammar;
    run_agent(Suite::Lsqa, &again, &mut Backend::Oracle, &mut |_, _| {}).unwrap();
    // as written before: the grammar, no limit
    episode
        .as_object_mut()
        .unwrap()
        .remove("replies_end_at_limit");
    std::fs::write(&path, episode.to_string()).unwrap();
    again.limit = Some(10);
    let e = run_agent(Suite::Lsqa, &again, &mut Backend::Oracle, &mut |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("replies_end_at_limit") && e.contains("--call-grammar"),
        "{e}"
    );
}

/// `--tool-names --call-grammar` ran the grammar alone but wrote both keys: such a folder
/// resumes under the grammar. A `--final-reply` grammar run from before the last turn kept to
/// the grammar (no `final_turn_checked`) does not.
#[test]
fn call_grammar_folders_resume_as_they_ran() {
    let d = tempfile::tempdir().unwrap();
    let mut first = cfg(d.path(), Some(4), false);
    first.episode.calls = CallCheck::Grammar;
    first.episode.final_reply = true;
    run_agent(Suite::Lsqa, &first, &mut Backend::Oracle, &mut |_, _| {}).unwrap();
    let path = d.path().join("lsqa/episode.json");
    let mut episode: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(episode["final_turn_checked"], true);
    episode["tool_names"] = serde_json::json!(true);
    std::fs::write(&path, episode.to_string()).unwrap();
    let mut again = cfg(d.path(), Some(6), true);
    again.episode = first.episode;
    run_agent(Suite::Lsqa, &again, &mut Backend::Oracle, &mut |_, _| {}).unwrap();
    let mut episode: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    episode
        .as_object_mut()
        .unwrap()
        .remove("final_turn_checked");
    std::fs::write(&path, episode.to_string()).unwrap();
    again.limit = Some(8);
    let e = run_agent(Suite::Lsqa, &again, &mut Backend::Oracle, &mut |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("final_turn_checked"), "{e}");
}

/// A run killed mid-write (or stopped by a full disk) leaves half a line: the resume cuts it
/// and redoes that item; a damaged line in the middle is still an error naming the line.
#[test]
fn a_resume_after_an_interrupted_write_redoes_the_cut_item() {
    let d = tempfile::tempdir().unwrap();
    run_agent(
        Suite::Lsqa,
        &cfg(d.path(), Some(6), false),
        &mut Backend::Oracle,
        &mut |_, _| {},
    )
    .unwrap();
    let path = d.path().join("lsqa/items.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let cut = text.trim_end().rfind('\n').unwrap() + 1 + 40;
    std::fs::write(&path, &text[..cut]).unwrap();
    let r = run_agent(
        Suite::Lsqa,
        &cfg(d.path(), Some(6), true),
        &mut Backend::Oracle,
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(r.detail["total"], 6);
    assert_eq!(r.headline, 100.0);
    let after = std::fs::read_to_string(&path).unwrap();
    assert_eq!(after.lines().count(), 6);
    assert!(after
        .lines()
        .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()));
    // damage that is not an unfinished last line is reported, not repaired
    let mut lines: Vec<&str> = after.lines().collect();
    lines[2] = "{\"id\": ";
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let e = run_agent(
        Suite::Lsqa,
        &cfg(d.path(), Some(6), true),
        &mut Backend::Oracle,
        &mut |_, _| {},
    )
    .unwrap_err();
    assert!(e.to_string().contains(":3:"), "{e}");
}

struct Lowercase(usize);

impl hat_agent::episode::ChatModel for Lowercase {
    fn complete(&mut self, m: &[hat_harness::Message]) -> Result<String, hat_agent::AgentError> {
        self.0 += 1;
        Ok(m.last()
            .map(|x| x.content.to_lowercase())
            .unwrap_or_default())
    }
}

#[test]
fn ifeval_with_a_model_writes_standard_responses_and_resumes() {
    let d = tempfile::tempdir().unwrap();
    let mut c = cfg(d.path(), Some(12), false);
    // An explicit prompt file (the repository's copy); `None` would use the embedded set.
    c.ifeval_input =
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../ifeval/data/ifeval/input_data.jsonl"));
    let identity = hat_eval::ModelIdentity {
        name: "lowercase".into(),
        hash: "-".into(),
        decoding: serde_json::json!({}),
    };
    let mut b = Backend::Chat {
        identity: identity.clone(),
        model: Box::new(Lowercase(0)),
    };
    let r = hat_eval::run_ifeval(&c, &mut b, &mut |_, _| {}).unwrap();
    assert_eq!(r.detail["prompts"], 12);
    assert!(r.detail["model"]["name"] == "lowercase" && r.detail["average_loose"].is_number());
    let lines = std::fs::read_to_string(d.path().join("ifeval/responses.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    assert!(first["prompt"].is_string() && first["response"].is_string());
    // Resuming with a larger limit asks the model only for the new prompts.
    c.limit = Some(20);
    c.resume = true;
    let mut b = Backend::Chat {
        identity,
        model: Box::new(Lowercase(0)),
    };
    hat_eval::run_ifeval(&c, &mut b, &mut |_, _| {}).unwrap();
    assert_eq!(
        std::fs::read_to_string(d.path().join("ifeval/responses.jsonl"))
            .unwrap()
            .lines()
            .count(),
        20
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("ifeval/items.jsonl"))
            .unwrap()
            .lines()
            .count(),
        20
    );
}

/// Answers a prompt with its lowercase text after a number of decode steps that depends on
/// the prompt, so that turns end out of order; batches continuously or not.
struct Staggered {
    continuous: bool,
    running: Vec<(u64, String, usize)>,
    next_id: u64,
    most_running: usize,
}

impl Staggered {
    fn new(continuous: bool) -> Self {
        Staggered {
            continuous,
            running: Vec::new(),
            next_id: 0,
            most_running: 0,
        }
    }
}

impl hat_agent::episode::ChatModel for Staggered {
    fn complete(&mut self, m: &[hat_harness::Message]) -> Result<String, hat_agent::AgentError> {
        Ok(m.last()
            .map(|x| x.content.to_lowercase())
            .unwrap_or_default())
    }

    fn continuous(&self) -> bool {
        self.continuous
    }

    fn begin_turn(
        &mut self,
        chat: &[hat_harness::Message],
        _rule: hat_agent::episode::TurnRule,
    ) -> Result<u64, hat_agent::AgentError> {
        let text = self.complete(chat)?;
        let steps = 1 + text.len() % 7;
        self.next_id += 1;
        self.running.push((self.next_id, text, steps));
        self.most_running = self.most_running.max(self.running.len());
        Ok(self.next_id)
    }

    fn step_turns(
        &mut self,
    ) -> Result<Vec<(u64, hat_agent::episode::Completion)>, hat_agent::AgentError> {
        let mut ended = Vec::new();
        self.running.retain_mut(|(id, text, steps)| {
            *steps -= 1;
            if *steps == 0 {
                ended.push((*id, std::mem::take(text).into()));
            }
            *steps > 0
        });
        Ok(ended)
    }
}

/// IFEval on a model that batches continuously keeps `--batch` prompts decoding, and writes
/// the same responses file, in the prompts' order, as a model that decodes a batch at a time.
#[test]
fn ifeval_answers_continuously_in_the_prompts_order() {
    let run = |continuous: bool| {
        let d = tempfile::tempdir().unwrap();
        let mut c = cfg(d.path(), Some(30), false);
        c.batch = 4;
        let model = Staggered::new(continuous);
        let mut b = Backend::Chat {
            identity: hat_eval::ModelIdentity {
                name: "staggered".into(),
                hash: "-".into(),
                decoding: serde_json::json!({}),
            },
            model: Box::new(model),
        };
        let mut seen = Vec::new();
        hat_eval::run_ifeval(&c, &mut b, &mut |done, _| seen.push(done)).unwrap();
        assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
        assert_eq!(seen.last(), Some(&30));
        std::fs::read_to_string(d.path().join("ifeval/responses.jsonl")).unwrap()
    };
    let (batched, continuous) = (run(false), run(true));
    assert_eq!(batched.lines().count(), 30);
    assert_eq!(continuous, batched);
}

/// Records the token limit in force at every call.
struct Limits(u32, std::sync::Arc<std::sync::Mutex<Vec<u32>>>);

impl hat_agent::episode::ChatModel for Limits {
    fn complete(&mut self, _: &[hat_harness::Message]) -> Result<String, hat_agent::AgentError> {
        self.1.lock().unwrap().push(self.0);
        Ok("Welcome to the stream!".into())
    }
    fn set_max_tokens(&mut self, max: u32) {
        self.0 = max;
    }
}

#[test]
fn an_agent_suite_after_ifeval_uses_the_agent_token_limit() {
    let d = tempfile::tempdir().unwrap();
    // ifeval_input: None, the prompts embedded in hat-ifeval.
    let c = cfg(d.path(), Some(2), false);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut b = Backend::Chat {
        identity: hat_eval::ModelIdentity {
            name: "limits".into(),
            hash: "-".into(),
            decoding: serde_json::json!({}),
        },
        model: Box::new(Limits(0, seen.clone())),
    };
    hat_eval::run_ifeval(&c, &mut b, &mut |_, _| {}).unwrap();
    let ifeval_calls = seen.lock().unwrap().len();
    run_agent(Suite::Lsqa, &c, &mut b, &mut |_, _| {}).unwrap();
    let seen = seen.lock().unwrap();
    assert!(seen[..ifeval_calls]
        .iter()
        .all(|&m| m == c.ifeval_max_tokens));
    assert!(seen.len() > ifeval_calls);
    assert!(seen[ifeval_calls..].iter().all(|&m| m == c.max_tokens));
}

#[test]
fn a_tasks_file_replaces_the_built_in_items_and_names_a_bad_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut worlds = WorldCache::default();
    let tasks = hat_tasks::TaskSet::generate(hat_tasks::Split::Test, 19, 5, &mut worlds).unwrap();
    let file = dir.path().join("tasks.jsonl");
    let lines: Vec<String> = tasks
        .iter()
        .map(|t| serde_json::to_string(t).unwrap())
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let mut c = cfg(&dir.path().join("out"), None, false);
    c.tasks = Some(file.clone());
    let s =
        hat_eval::run::run_agent(Suite::Lsqa, &c, &mut Backend::Oracle, &mut |_, _| {}).unwrap();
    assert_eq!(s.detail["total"], 19);
    assert_eq!(s.headline, 100.0);
    assert_eq!(s.detail["tasks_file"], file.display().to_string());
    std::fs::write(&file, format!("{}\n{{\"id\": 3}}\n", lines[0])).unwrap();
    c.out_dir = dir.path().join("out2");
    let e = hat_eval::run::run_agent(Suite::Lsqa, &c, &mut Backend::Oracle, &mut |_, _| {})
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("tasks.jsonl") && e.contains('2'), "{e}");
    // a copied line keeps its id: its result would replace the first one's
    std::fs::write(&file, format!("{}\n{}\n{}\n", lines[0], lines[1], lines[0])).unwrap();
    c.out_dir = dir.path().join("out-dup");
    let e = hat_eval::run::run_agent(Suite::Lsqa, &c, &mut Backend::Oracle, &mut |_, _| {})
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("tasks.jsonl:3") && e.contains("already the id of line 1"),
        "{e}"
    );
    // Red-team finding: an unknown on_stage or attribute was accepted, or failed later as
    // "cannot compute gold" without the file.
    let fact = tasks
        .iter()
        .find(|t| matches!(t.intent, hat_tasks::Intent::ProductFact { .. }))
        .unwrap();
    for (field, value, want) in [
        ("/on_stage", serde_json::json!("P999"), "on_stage `P999`"),
        (
            "/intent/attr",
            serde_json::json!("nonsense"),
            "no attribute `nonsense`",
        ),
    ] {
        let mut v = serde_json::to_value(fact).unwrap();
        *v.pointer_mut(field).unwrap() = value;
        std::fs::write(&file, format!("{}\n{v}\n", lines[0])).unwrap();
        c.out_dir = dir.path().join(format!("out-{}", field.len()));
        let e = hat_eval::run::run_agent(Suite::Lsqa, &c, &mut Backend::Oracle, &mut |_, _| {})
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("tasks.jsonl:2") && e.contains(want), "{e}");
    }
}

#[test]
fn the_gate_passes_an_equal_harness_and_fails_past_its_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let h = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
    let mut g = hat_eval::gate::GateConfig {
        tasks: None,
        limit: Some(19),
        threshold: 2.0,
        out_dir: dir.path().to_path_buf(),
        batch: 8,
        max_tokens: 128,
    };
    let r = hat_eval::gate::gate(&h, &h, &mut Backend::Oracle, &g).unwrap();
    assert!(r.pass, "{r}");
    assert_eq!((r.old_score, r.new_score, r.items), (100.0, 100.0, 19));
    // a gate that demands an improvement fails on an equal harness (and reuses the results)
    g.threshold = -1.0;
    let r = hat_eval::gate::gate(&h, &h, &mut Backend::Oracle, &g).unwrap();
    assert!(!r.pass);
    assert!(r.to_string().contains("FAILED"), "{r}");
}

/// Published scores stay comparable: the launch items of both suites are exactly the ones
/// every earlier evaluation ran (a fingerprint of their ids, in order), and each kind added
/// later only appends a block of its own.
#[test]
fn later_kinds_append_items_and_never_change_published_ones() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
    let mut worlds = WorldCache::default();
    // FNV-1a over the ids joined by newlines.
    let fingerprint = |ids: &[&str]| {
        ids.join("\n")
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            })
    };
    let l = hat_eval::suite::lsqa(&dir, &mut worlds).unwrap();
    let launch = 16 * TaskKind::LAUNCH.len();
    let ids: Vec<&str> = l.items[..launch]
        .iter()
        .map(|i| i.task.id.as_str())
        .collect();
    assert_eq!(
        fingerprint(&ids),
        16_901_736_448_908_453_927,
        "lsqa launch items changed"
    );
    assert_eq!(l.items.len(), launch + 16);
    assert!(l.items[launch..]
        .iter()
        .all(|i| i.task.kind == TaskKind::PromptInjection));
    let h = hat_eval::suite::hvqa(&dir, &mut worlds).unwrap();
    let ids: Vec<&str> = h.items[..320].iter().map(|i| i.task.id.as_str()).collect();
    assert_eq!(
        fingerprint(&ids),
        15_172_576_023_297_873_699,
        "hvqa launch items changed"
    );
    assert_eq!(h.items.len(), 340);
    let states: BTreeSet<usize> = h.items[320..].iter().map(|i| i.state).collect();
    assert_eq!(
        states.len(),
        20,
        "one injection item under each held-out state"
    );
}

/// hvqa lists its items round-robin over its states; a run takes each state's items one after
/// another (so the model's prefix cache computes a state's prompt once), and scores them all.
#[test]
fn hvqa_items_run_grouped_by_harness_state() {
    let d = tempfile::tempdir().unwrap();
    let mut c = cfg(d.path(), Some(45), false);
    c.batch = 1;
    let s = run_agent(Suite::Hvqa, &c, &mut Backend::Oracle, &mut |_, _| {}).unwrap();
    assert_eq!(s.headline, 100.0, "the oracle passes every item");
    let text = std::fs::read_to_string(d.path().join("hvqa/items.jsonl")).unwrap();
    let hashes: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["harness_hash"].to_string())
        .collect();
    assert_eq!(hashes.len(), 45);
    let runs = 1 + hashes.windows(2).filter(|w| w[0] != w[1]).count();
    let states: BTreeSet<&String> = hashes.iter().collect();
    assert_eq!(states.len(), 20, "45 items cover every state");
    assert_eq!(
        runs,
        states.len(),
        "each state's items in one run: {hashes:?}"
    );
}

fn chat(name: &str, format: &str, max_tokens: u32) -> Backend {
    Backend::Chat {
        identity: hat_eval::ModelIdentity {
            name: name.into(),
            hash: format!("sha256:{name}"),
            decoding: serde_json::json!({"temperature": 0.0, "max_tokens": max_tokens, "format": format}),
        },
        model: Box::new(Limits(0, Default::default())),
    }
}

/// Red-team finding: a resume checked only the harness and the episode settings, so `--model
/// b.gguf --format q4_0 --max-tokens 64 --resume` on a folder of model A mixed both models'
/// items under B's name.
#[test]
fn a_resume_under_another_model_or_decoding_is_refused_and_changes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let mut c = cfg(d.path(), Some(3), false);
    run_agent(
        Suite::Lsqa,
        &c,
        &mut chat("a.gguf", "q8_0", 128),
        &mut |_, _| {},
    )
    .unwrap();
    let path = d.path().join("lsqa/items.jsonl");
    let before = std::fs::read(&path).unwrap();
    c.resume = true;
    c.limit = Some(5);
    c.max_tokens = 64;
    let e = run_agent(
        Suite::Lsqa,
        &c,
        &mut chat("b.gguf", "q4_0", 64),
        &mut |_, _| {},
    )
    .unwrap_err()
    .to_string();
    for want in [
        "lsqa",
        "model.name",
        "a.gguf",
        "model.hash",
        "decoding.format",
        "decoding.max_tokens (128, now 64)",
        "new --out",
    ] {
        assert!(e.contains(want), "{want}: {e}");
    }
    assert_eq!(std::fs::read(&path).unwrap(), before);
    // the same model and settings resume
    c.max_tokens = 128;
    let r = run_agent(
        Suite::Lsqa,
        &c,
        &mut chat("a.gguf", "q8_0", 128),
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(r.detail["total"], 5);
}

/// The prefill attention's precision follows the machine (bf16 where the CPU has it): a run
/// moved to another machine goes on (with a warning), while a setting that differs does not.
#[test]
fn a_resume_on_a_machine_with_another_prefill_precision_goes_on() {
    let d = tempfile::tempdir().unwrap();
    let mut c = cfg(d.path(), Some(3), false);
    let on = |attention: &str| {
        let mut b = chat("a.gguf", "q8_0", 128);
        if let Backend::Chat { identity, .. } = &mut b {
            identity.decoding["prefill_attention"] = attention.into();
        }
        b
    };
    run_agent(Suite::Lsqa, &c, &mut on("bf16"), &mut |_, _| {}).unwrap();
    c.resume = true;
    c.limit = Some(5);
    let r = run_agent(Suite::Lsqa, &c, &mut on("f32"), &mut |_, _| {}).unwrap();
    assert_eq!(r.detail["total"], 5);
}

#[test]
fn a_resume_on_another_tasks_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut worlds = WorldCache::default();
    let tasks = hat_tasks::TaskSet::generate(hat_tasks::Split::Test, 4, 5, &mut worlds).unwrap();
    let file = dir.path().join("tasks.jsonl");
    let lines: Vec<String> = tasks
        .iter()
        .map(|t| serde_json::to_string(t).unwrap())
        .collect();
    std::fs::write(&file, lines[..3].join("\n")).unwrap();
    let mut c = cfg(&dir.path().join("out"), None, false);
    c.tasks = Some(file.clone());
    run_agent(Suite::Lsqa, &c, &mut Backend::Oracle, &mut |_, _| {}).unwrap();
    std::fs::write(&file, lines.join("\n")).unwrap();
    c.resume = true;
    let e = run_agent(Suite::Lsqa, &c, &mut Backend::Oracle, &mut |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("input (\"sha256:"), "{e}");
}

#[test]
fn an_ifeval_resume_with_another_answer_limit_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let mut c = cfg(d.path(), Some(3), false);
    hat_eval::run_ifeval(&c, &mut chat("a.gguf", "q8_0", 128), &mut |_, _| {}).unwrap();
    let path = d.path().join("ifeval/responses.jsonl");
    let before = std::fs::read(&path).unwrap();
    c.resume = true;
    c.limit = Some(5);
    c.ifeval_max_tokens = 256;
    let e = hat_eval::run_ifeval(&c, &mut chat("a.gguf", "q8_0", 128), &mut |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ifeval") && e.contains("decoding.max_tokens (1024, now 256)"),
        "{e}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before);
    // the agent turn limit is no part of an IFEval answer: changing it alone resumes
    c.ifeval_max_tokens = 1024;
    let r = hat_eval::run_ifeval(&c, &mut chat("a.gguf", "q8_0", 64), &mut |_, _| {}).unwrap();
    assert_eq!(r.detail["prompts"], 5);
}

/// A stored item keeps the pass its scorer gave it: a resume by a `hat` of another scorer
/// version (or one whose run.json predates recording it) would mix two scorers in one score.
#[test]
fn a_resume_under_another_scorer_version_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let mut c = cfg(d.path(), Some(3), false);
    run_agent(Suite::Lsqa, &c, &mut Backend::Oracle, &mut |_, _| {}).unwrap();
    let path = d.path().join("lsqa/run.json");
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(record["scorer_version"], hat_tasks::SCORER_VERSION);
    let items = std::fs::read(d.path().join("lsqa/items.jsonl")).unwrap();
    c.resume = true;
    c.limit = Some(5);
    for (older, said) in [
        (
            Some(hat_tasks::SCORER_VERSION - 1),
            format!("scorer version {}", hat_tasks::SCORER_VERSION - 1),
        ),
        (None, "scorer version not recorded".to_string()),
    ] {
        match older {
            Some(v) => record["scorer_version"] = v.into(),
            None => {
                record.as_object_mut().unwrap().remove("scorer_version");
            }
        }
        std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
        let e = run_agent(Suite::Lsqa, &c, &mut Backend::Oracle, &mut |_, _| {})
            .unwrap_err()
            .to_string();
        assert!(e.contains(&said) && e.contains("scorer_version ("), "{e}");
        assert_eq!(
            std::fs::read(d.path().join("lsqa/items.jsonl")).unwrap(),
            items
        );
    }
}

/// `runs/` holds folders written before `run.json` existed: they resume (unchecked, said in a
/// log line) and get one.
#[test]
fn a_folder_from_before_run_json_resumes() {
    let d = tempfile::tempdir().unwrap();
    let mut c = cfg(d.path(), Some(3), false);
    run_agent(
        Suite::Lsqa,
        &c,
        &mut chat("a.gguf", "q8_0", 128),
        &mut |_, _| {},
    )
    .unwrap();
    hat_eval::run_ifeval(&c, &mut chat("a.gguf", "q8_0", 128), &mut |_, _| {}).unwrap();
    for s in ["lsqa", "ifeval"] {
        std::fs::remove_file(d.path().join(s).join("run.json")).unwrap();
    }
    c.resume = true;
    c.limit = Some(4);
    let r = run_agent(
        Suite::Lsqa,
        &c,
        &mut chat("b.gguf", "q8_0", 128),
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(r.detail["total"], 4);
    let r = hat_eval::run_ifeval(&c, &mut chat("b.gguf", "q8_0", 128), &mut |_, _| {}).unwrap();
    assert_eq!(r.detail["prompts"], 4);
    for s in ["lsqa", "ifeval"] {
        let saved: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.path().join(s).join("run.json")).unwrap())
                .unwrap();
        assert_eq!(saved["model"]["name"], "b.gguf", "{s}");
    }
}

/// Red-team finding: results.json counted every line of items.jsonl, so a run resumed with a
/// smaller `--limit` (or other `--kinds`) reported the earlier, larger item set.
#[test]
fn a_resume_with_a_smaller_limit_or_other_kinds_scores_only_its_items() {
    let d = tempfile::tempdir().unwrap();
    run_agent(
        Suite::Lsqa,
        &cfg(d.path(), Some(25), false),
        &mut Backend::Oracle,
        &mut |_, _| {},
    )
    .unwrap();
    let r = run_agent(
        Suite::Lsqa,
        &cfg(d.path(), Some(10), true),
        &mut Backend::Oracle,
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(r.detail["total"], 10);
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.path().join("lsqa/results.json")).unwrap())
            .unwrap();
    assert_eq!(saved["total"], 10);
    // which scorer judged the items (v1 numbers are not comparable with v2's)
    assert_eq!(saved["scorer_version"], hat_tasks::SCORER_VERSION);
    let mut c = cfg(d.path(), Some(25), true);
    c.kinds = vec![TaskKind::LAUNCH[0]];
    let r = run_agent(Suite::Lsqa, &c, &mut Backend::Oracle, &mut |_, _| {}).unwrap();
    let n = r.detail["total"].as_u64().unwrap();
    assert!(
        n > 0 && r.detail["by_task_type"].as_object().unwrap().len() == 1,
        "{}",
        r.detail
    );
    // nothing stored was dropped
    let lines = std::fs::read_to_string(d.path().join("lsqa/items.jsonl")).unwrap();
    assert!(lines.lines().count() >= 25);
}

fn gate_cfg(out: &Path) -> hat_eval::gate::GateConfig {
    hat_eval::gate::GateConfig {
        tasks: None,
        limit: Some(2),
        threshold: 2.0,
        out_dir: out.to_path_buf(),
        batch: 8,
        max_tokens: 128,
    }
}

fn with_hash(name: &str, hash: &str) -> Backend {
    Backend::Chat {
        identity: hat_eval::ModelIdentity {
            name: name.into(),
            hash: hash.into(),
            decoding: serde_json::json!({"temperature": 0.0, "max_tokens": 128}),
        },
        model: Box::new(Limits(0, Default::default())),
    }
}

fn folders(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// Red-team finding: the gate's results folder was named by 12 bytes of the model hash after
/// `:` and `/` were replaced, so every endpoint model shared `endpoint_htt` and one model's
/// results were reused for another.
#[test]
fn the_gate_keeps_two_models_behind_one_endpoint_apart() {
    let dir = tempfile::tempdir().unwrap();
    let h = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
    let g = gate_cfg(dir.path());
    let url = "endpoint:http://127.0.0.1:8000/v1";
    hat_eval::gate::gate(&h, &h, &mut with_hash("openai:a", url), &g).unwrap();
    assert_eq!(folders(dir.path()).len(), 1);
    hat_eval::gate::gate(&h, &h, &mut with_hash("openai:b", url), &g).unwrap();
    assert_eq!(folders(dir.path()).len(), 2, "{:?}", folders(dir.path()));
    // the same model again reuses its folder
    hat_eval::gate::gate(&h, &h, &mut with_hash("openai:a", url), &g).unwrap();
    assert_eq!(folders(dir.path()).len(), 2);
}

/// A folder model's hash is its path: one that is not ASCII cut at 12 bytes panicked.
#[test]
fn the_gate_takes_a_model_path_that_is_not_ascii() {
    let dir = tempfile::tempdir().unwrap();
    let h = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
    let r = hat_eval::gate::gate(
        &h,
        &h,
        &mut with_hash("m", "dir:/runs/añ/model"),
        &gate_cfg(dir.path()),
    )
    .unwrap();
    assert_eq!(r.items, 2);
}

/// Red-team finding: `--gate-limit 0` scored no items, 0 against 0, and passed any harness.
#[test]
fn a_gate_over_no_items_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let h = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
    let mut g = gate_cfg(dir.path());
    g.limit = Some(0);
    let e = hat_eval::gate::gate(&h, &h, &mut Backend::Oracle, &g)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--gate-limit") && e.contains("at least 1"),
        "{e}"
    );
    // a report over no items, or over different items, fails whatever the scores
    let r = hat_eval::gate::GateReport {
        old_hash: "sha256:a".into(),
        new_hash: "sha256:b".into(),
        old_score: 0.0,
        new_score: 0.0,
        items: 0,
        old_items: 0,
        threshold: 2.0,
        pass: false,
        worse: Vec::new(),
    };
    assert!(r.to_string().contains("scored 0 and 0 items"), "{r}");
}

/// Red-team finding: IFEval's results.json recorded the agent turn limit of the model's
/// identity (`--max-tokens`), not the `--ifeval-max-tokens` its answers ran under.
#[test]
fn results_record_the_token_limit_each_suite_ran_under() {
    let d = tempfile::tempdir().unwrap();
    let mut c = cfg(d.path(), Some(2), false);
    c.max_tokens = 96;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut b = Backend::Chat {
        identity: hat_eval::ModelIdentity {
            name: "limits".into(),
            hash: "-".into(),
            decoding: serde_json::json!({"temperature": 0.0, "max_tokens": 256}),
        },
        model: Box::new(Limits(0, seen.clone())),
    };
    let r = hat_eval::run_ifeval(&c, &mut b, &mut |_, _| {}).unwrap();
    assert_eq!(
        seen.lock().unwrap()[0],
        1024,
        "the model ran under ifeval_max_tokens"
    );
    assert_eq!(r.detail["model"]["decoding"]["max_tokens"], 1024);
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.path().join("ifeval/results.json")).unwrap())
            .unwrap();
    assert_eq!(saved["model"]["decoding"]["max_tokens"], 1024);
    let r = run_agent(Suite::Lsqa, &c, &mut b, &mut |_, _| {}).unwrap();
    assert_eq!(r.detail["model"]["decoding"]["max_tokens"], 96);
}
