//! Harness management on a live server, end to end on loopback with a scripted model: swaps
//! under load, the regression gate, uploads and paths clients may name, the console's
//! editing path (check, activate, roll back).

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

#[test]
fn harness_swaps_under_load_drop_nothing_and_never_mix_versions() {
    swaps_under_load(Box::new(Scripted {
        delay: Duration::from_millis(5),
    }));
}

/// The same with a model that batches continuously: turns join and leave between steps.
#[test]
fn harness_swaps_under_continuous_batching_drop_nothing_and_never_mix_versions() {
    swaps_under_load(Box::new(Stepwise::new(Duration::from_millis(2))));
}

fn swaps_under_load(model: Box<dyn hat_agent::episode::ChatModel + Send>) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_batch = 4;
    let r = start_with(cfg, model, &harness_dir());
    let zoe = renamed_harness(dir.path(), "Zoe");
    let broken = broken_harness(dir.path());
    let mia = harness_dir();
    let hash_of = |p: &std::path::Path| hat_harness::Harness::load(p).unwrap().hash;
    let (mia_hash, zoe_hash) = (hash_of(&mia), hash_of(&zoe));
    for s in ["a", "b", "c"] {
        create(&r, s);
    }
    let url = r.url("");
    let poster = std::thread::spawn(move || {
        let mut results = Vec::new();
        for i in 0..30 {
            let s = ["a", "b", "c"][i % 3];
            let (code, v) = json(
                "POST",
                &format!("{url}/v1/streams/{s}/events?wait=true"),
                &json!({"type": "comment", "viewer": format!("v{i}"), "text": format!("question number {i} about sizes?")}),
            );
            assert_eq!(code, 200, "{v}");
            results.push(v["results"][0].clone());
        }
        results
    });
    for k in 0..20 {
        let path = if k % 2 == 0 { &zoe } else { &mia };
        let (code, v) = json("POST", &r.url("/v1/harness"), &json!({"path": path}));
        assert_eq!(code, 200, "{v}");
        if k == 10 {
            let before = get(&r.url("/v1/harness")).1["active"].clone();
            let (code, v) = json("POST", &r.url("/v1/harness"), &json!({"path": broken}));
            assert_eq!(code, 422, "{v}");
            let p = &v["error"]["problems"][0];
            assert_eq!(p["file"], "tools/check_stock.json", "{v}");
            assert!(p["line"].is_u64(), "{v}");
            assert_eq!(get(&r.url("/v1/harness")).1["active"], before);
        }
        std::thread::sleep(Duration::from_millis(15));
    }
    let results = poster.join().unwrap();
    assert_eq!(results.len(), 30);
    for res in &results {
        assert_eq!(res["type"], "reply", "{res}");
        let h = res["harness"].as_str().unwrap();
        let text = res["text"].as_str().unwrap();
        if h == mia_hash {
            assert!(text.contains("Mia here"), "{res}");
        } else {
            assert_eq!(h, zoe_hash);
            assert!(text.contains("Zoe here"), "{res}");
        }
    }
    // rollback by hash prefix
    let (code, v) = json(
        "POST",
        &r.url("/v1/harness/rollback"),
        &json!({"hash": &zoe_hash[..12]}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(get(&r.url("/v1/harness")).1["active"], zoe_hash.as_str());
    let (_, h) = get(&r.url("/v1/harness"));
    assert!(
        h["last_rejected"]["problems"][0]
            .as_str()
            .unwrap()
            .contains("check_stock.json"),
        "{h}"
    );
    r.stop();
}

/// Refuses any harness whose persona is Zoe (a stand-in for a regression-gate failure).
struct NoZoe;
impl hat_serve::harnesses::SwapGate for NoZoe {
    fn check(&self, new: &std::path::Path, _active: &std::path::Path) -> Result<String, String> {
        let t = std::fs::read_to_string(new.join("harness.toml")).unwrap();
        if t.contains("\"Zoe\"") {
            Err("gate FAILED: lsqa 40.0 against 80.0".into())
        } else {
            Ok("gate passed".into())
        }
    }
}

#[test]
fn a_harness_refused_by_the_gate_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.gate = Some(hat_serve::harnesses::Gate(std::sync::Arc::new(NoZoe)));
    let r = start(cfg, Duration::ZERO);
    let before = get(&r.url("/v1/harness")).1["active"].clone();
    let zoe = renamed_harness(dir.path(), "Zoe");
    let (code, v) = json("POST", &r.url("/v1/harness"), &json!({"path": zoe}));
    assert_eq!(code, 422, "{v}");
    assert_eq!(v["error"]["type"], "gate_failed");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("40.0"),
        "{v}"
    );
    let (_, h) = get(&r.url("/v1/harness"));
    assert_eq!(h["active"], before);
    assert!(
        h["last_rejected"]["problems"][0]
            .as_str()
            .unwrap()
            .contains("gate FAILED"),
        "{h}"
    );
    let ann = renamed_harness(dir.path(), "Ann");
    let (code, v) = json("POST", &r.url("/v1/harness"), &json!({"path": ann}));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["changed"], true);
    r.stop();
}

/// A hook program nobody may execute would fail on every event, and the production hook's
/// `on_error = "allow"` would then let every reply through: such a folder is refused.
#[cfg(unix)]
#[test]
fn a_folder_whose_hook_program_cannot_run_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let r = start(config(dir.path()), Duration::ZERO);
    let zoe = renamed_harness(dir.path(), "Zoe");
    let script = zoe.join("hooks/no-medical-claims.sh");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, v) = json("POST", &r.url("/v1/harness"), &json!({"path": zoe}));
    assert_eq!(code, 422, "{v}");
    assert!(
        v.to_string()
            .contains("chmod +x hooks/no-medical-claims.sh"),
        "{v}"
    );
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, v) = json("POST", &r.url("/v1/harness"), &json!({"path": zoe}));
    assert_eq!(code, 200, "{v}");
    r.stop();
}

/// Red-team findings: an uploaded zip kept its executable bits and its command hook ran as the
/// server's user; `{"path": "/etc"}` listed a folder outside the server's own. Uploads may not
/// run programs, and paths are confined to the data folder and the served harness's folder.
#[test]
fn uploads_cannot_run_programs_and_paths_stay_inside_the_server() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let r = start(config(dir.path()), Duration::ZERO);
    let src = renamed_harness(dir.path(), "Zoe");
    let mut hooks = std::fs::read_to_string(src.join("hooks.toml")).unwrap();
    hooks.push_str("\n[[hooks]]\nid = \"pwn\"\nevent = \"comment\"\naction = \"command\"\ncommand = [\"./hooks/pwn.sh\"]\n");
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let exec = zip::write::SimpleFileOptions::default().unix_permissions(0o755);
    let mut files: Vec<(String, Vec<u8>)> = vec![
        ("hooks.toml".into(), hooks.into_bytes()),
        (
            "hooks/pwn.sh".into(),
            b"#!/bin/sh\ntouch /tmp/hat-pwned\n".to_vec(),
        ),
    ];
    for f in walk(&src) {
        let rel = f.strip_prefix(&src).unwrap().to_string_lossy().to_string();
        if rel != "hooks.toml" {
            files.push((rel, std::fs::read(&f).unwrap()));
        }
    }
    for (name, data) in &files {
        w.start_file(name.as_str(), exec).unwrap();
        w.write_all(data).unwrap();
    }
    let bytes = w.finish().unwrap().into_inner();
    let (code, text) = call(
        "POST",
        &r.url("/v1/harness"),
        Some(("application/zip", &bytes)),
    );
    assert!((400..500).contains(&code), "{code} {text}");
    assert!(
        text.contains("cannot run command hooks") && text.contains("pwn"),
        "{text}"
    );
    for (path, want) in [("/etc", 400), ("/definitely/not/here", 400)] {
        let (code, v) = json("POST", &r.url("/v1/harness"), &json!({ "path": path }));
        assert_eq!(code, want, "{v}");
        assert_eq!(v["error"]["field"], "path", "{v}");
        assert!(!v.to_string().contains("passwd"), "{v}");
    }
    // A folder under the data folder still activates.
    let (code, v) = json("POST", &r.url("/v1/harness"), &json!({ "path": src }));
    assert_eq!(code, 200, "{v}");
}

/// Review finding: two uploads of one archive at once: when the first one's check refused
/// it and removed its folder, the second read a vanishing folder and answered with a
/// confusing error instead of the harness's problems. Every upload now gets the problems,
/// and nothing is left behind.
#[test]
fn concurrent_uploads_of_one_refused_archive_all_get_its_problems() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let r = start(config(dir.path()), Duration::ZERO);
    let src = broken_harness(dir.path());
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for f in walk(&src) {
        let rel = f.strip_prefix(&src).unwrap().to_string_lossy().to_string();
        w.start_file(rel.as_str(), zip::write::SimpleFileOptions::default())
            .unwrap();
        w.write_all(&std::fs::read(&f).unwrap()).unwrap();
    }
    let bytes = std::sync::Arc::new(w.finish().unwrap().into_inner());
    let url = r.url("/v1/harness");
    let posters: Vec<_> = (0..8)
        .map(|_| {
            let (bytes, url) = (bytes.clone(), url.clone());
            std::thread::spawn(move || call("POST", &url, Some(("application/zip", &bytes))))
        })
        .collect();
    for p in posters {
        let (code, text) = p.join().unwrap();
        assert_eq!(code, 422, "{text}");
        assert!(text.contains("check_stock.json"), "{text}");
    }
    let uploads = dir.path().join("harnesses");
    let left: Vec<_> = std::fs::read_dir(&uploads)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

fn walk(d: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The console's editing path: read the active files, check an invalid edit (problems with
/// file and line, nothing changes), check and activate a fixed one, roll back.
#[test]
fn harness_files_are_read_checked_and_activated_as_text() {
    let dir = tempfile::tempdir().unwrap();
    let r = start(config(dir.path()), Duration::ZERO);
    create(&r, "demo");
    let (code, v) = get(&r.url("/v1/harness/files"));
    assert_eq!(code, 200, "{v}");
    let first = v["hash"].as_str().unwrap().to_string();
    assert_eq!(v["active"], true);
    let mut files = v["files"].as_object().unwrap().clone();
    assert!(files.contains_key("harness.toml"));
    assert!(files.keys().any(|k| k.starts_with("tools/")), "{v}");

    // an invalid tool schema: 422 with the file and the problem; the active hash stays
    files.insert("tools/check_stock.json".into(), json!("{ not json"));
    let (code, v) = json(
        "POST",
        &r.url("/v1/harness/check"),
        &json!({"files": files}),
    );
    assert_eq!(code, 422, "{v}");
    let problems = v["error"]["problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p["file"].as_str().unwrap().contains("check_stock.json")),
        "{v}"
    );
    let (code, _) = json(
        "POST",
        &r.url("/v1/harness/files"),
        &json!({"files": files}),
    );
    assert_eq!(code, 422);
    assert_eq!(get(&r.url("/v1/harness")).1["active"], first.as_str());
    // nothing of the refused edits stays on disk
    let left: Vec<_> = std::fs::read_dir(dir.path().join("harnesses"))
        .map(|d| d.filter_map(|e| e.ok()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");

    // a path outside the folder is refused before anything is written
    let (code, v) = json(
        "POST",
        &r.url("/v1/harness/check"),
        &json!({"files": {"../escape.toml": "x"}}),
    );
    assert_eq!(code, 400, "{v}");

    // without an API key an edit may not change what a command hook runs
    let mut evil = get(&r.url("/v1/harness/files")).1["files"]
        .as_object()
        .unwrap()
        .clone();
    let script = evil
        .keys()
        .find(|k| k.ends_with(".sh"))
        .expect("the production harness has a command hook script")
        .clone();
    evil.insert(script, json!("#!/bin/sh\ntouch /tmp/pwned\n"));
    let (code, v) = json("POST", &r.url("/v1/harness/files"), &json!({"files": evil}));
    assert_eq!(code, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("command hooks"),
        "{v}"
    );
    assert_eq!(get(&r.url("/v1/harness")).1["active"], first.as_str());

    // fixed, with the persona renamed: checks, activates, replies carry the new hash
    let good = get(&r.url("/v1/harness/files")).1["files"].clone();
    let mut files = good.as_object().unwrap().clone();
    let toml = files["harness.toml"]
        .as_str()
        .unwrap()
        .replace("name = \"Mia\"", "name = \"Zoe\"");
    files.insert("harness.toml".into(), json!(toml));
    let (code, v) = json(
        "POST",
        &r.url("/v1/harness/check"),
        &json!({"files": files}),
    );
    assert_eq!(code, 200, "{v}");
    let checked = v["hash"].as_str().unwrap().to_string();
    assert_ne!(checked, first);
    assert_eq!(get(&r.url("/v1/harness")).1["active"], first.as_str());
    let (code, v) = json(
        "POST",
        &r.url("/v1/harness/files"),
        &json!({"files": files}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["active"], checked.as_str());
    let reply = ask(&r, "demo", "hello");
    assert_eq!(reply["harness"], checked.as_str());
    assert!(reply["text"].as_str().unwrap().contains("Zoe"), "{reply}");
    // the edited version's files read back; the first version's too, by hash
    let (_, v) = get(&r.url(&format!("/v1/harness/files?hash={}", &first[..20])));
    assert_eq!(v["active"], false);
    let (code, _) = json(
        "POST",
        &r.url("/v1/harness/rollback"),
        &json!({"hash": first}),
    );
    assert_eq!(code, 200);
    assert_eq!(ask(&r, "demo", "hello")["harness"], first.as_str());
    r.stop();
}

/// A gate an operator switches: refuses every harness while `refuse` is set.
struct Switch(std::sync::Arc<std::sync::atomic::AtomicBool>);
impl hat_serve::harnesses::SwapGate for Switch {
    fn check(&self, _new: &std::path::Path, _active: &std::path::Path) -> Result<String, String> {
        if self.0.load(std::sync::atomic::Ordering::SeqCst) {
            Err("gate FAILED: switched off".into())
        } else {
            Ok("gate passed".into())
        }
    }
}

/// The production harness's files with the persona renamed, as the console sends an edit.
fn edited_files(r: &Running, name: &str) -> serde_json::Map<String, Value> {
    let (code, v) = get(&r.url("/v1/harness/files"));
    assert_eq!(code, 200, "{v}");
    let mut files = v["files"].as_object().unwrap().clone();
    let toml = files["harness.toml"]
        .as_str()
        .unwrap()
        .replace("name = \"Mia\"", &format!("name = \"{name}\""));
    files.insert("harness.toml".into(), json!(toml));
    files
}

/// The folder under the data folder a version of the history runs from (an edit's).
fn edit_dir(data: &std::path::Path, r: &Running, hash: &str) -> std::path::PathBuf {
    let (_, h) = get(&r.url("/v1/harness"));
    let v = h["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["hash"] == hash)
        .unwrap_or_else(|| panic!("{hash} in {h}"))
        .clone();
    let digest = v["source"].as_str().unwrap().strip_prefix("edit:").unwrap();
    data.join("harnesses").join(format!("edit-{digest}"))
}

/// Review finding: an edit reuses the folder of a version with the same files, and a check
/// with the gate (or a save the gate refused) then removed that folder under the live
/// version.
#[test]
fn a_check_or_a_refused_save_never_removes_a_live_versions_folder() {
    let dir = tempfile::tempdir().unwrap();
    let refuse = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut cfg = config(dir.path());
    cfg.gate = Some(hat_serve::harnesses::Gate(std::sync::Arc::new(Switch(
        refuse.clone(),
    ))));
    let r = start(cfg, Duration::ZERO);
    let first = get(&r.url("/v1/harness")).1["active"]
        .as_str()
        .unwrap()
        .to_string();
    let files = edited_files(&r, "Ann");
    let (code, v) = json(
        "POST",
        &r.url("/v1/harness/files"),
        &json!({"files": files}),
    );
    assert_eq!(code, 200, "{v}");
    let edited = v["active"].as_str().unwrap().to_string();
    let folder = edit_dir(dir.path(), &r, &edited);
    assert!(folder.join("harness.toml").is_file());

    // the same files checked with the gate: the active version keeps its folder
    let (code, v) = json(
        "POST",
        &r.url("/v1/harness/check"),
        &json!({"files": files, "gate": true}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["gate"]["passed"], true, "{v}");
    assert!(
        folder.join("harness.toml").is_file(),
        "the live folder is gone"
    );
    let (code, v) = get(&r.url("/v1/harness/files"));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["hash"], edited.as_str());

    // a version of the history saved again and refused by the gate keeps its folder too
    let (code, _) = json(
        "POST",
        &r.url("/v1/harness/rollback"),
        &json!({"hash": first}),
    );
    assert_eq!(code, 200);
    refuse.store(true, std::sync::atomic::Ordering::SeqCst);
    let (code, v) = json(
        "POST",
        &r.url("/v1/harness/files"),
        &json!({"files": files}),
    );
    assert_eq!(code, 422, "{v}");
    assert_eq!(v["error"]["type"], "gate_failed");
    assert!(folder.join("harness.toml").is_file(), "the folder is gone");
    let (code, v) = get(&r.url(&format!("/v1/harness/files?hash={edited}")));
    assert_eq!(code, 200, "{v}");
    let (code, v) = json(
        "POST",
        &r.url("/v1/harness/rollback"),
        &json!({"hash": edited}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(ask_on(&r, "hello")["harness"], edited.as_str());
    r.stop();
}

/// Review finding: without an API key, `{"path": "<data_dir>/harnesses/<upload>"}` could
/// activate an uploaded harness's command hook while the upload's own request still checked
/// it; folders clients write are held to the uploads' rule. And a cross-site form or
/// `text/plain` post could drive the API: every POST must declare a JSON body (or the
/// route's archive or store type).
#[test]
fn client_written_folders_keep_the_upload_rule_and_posts_must_declare_json() {
    let dir = tempfile::tempdir().unwrap();
    let r = start(config(dir.path()), Duration::ZERO);
    let first = get(&r.url("/v1/harness")).1["active"]
        .as_str()
        .unwrap()
        .to_string();
    // an upload being checked: unpacked under <data_dir>/harnesses, with a command hook
    let upload = dir.path().join("harnesses").join("0123456789abcdef");
    copy_dir(&renamed_harness(dir.path(), "Zoe"), &upload);
    let (code, v) = json("POST", &r.url("/v1/harness"), &json!({"path": upload}));
    assert_eq!(code, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot run command hooks"),
        "{v}"
    );
    assert_eq!(get(&r.url("/v1/harness")).1["active"], first.as_str());
    // a version the history holds (it was checked when it went in) may be named by its folder
    let files = edited_files(&r, "Ann");
    let (code, v) = json(
        "POST",
        &r.url("/v1/harness/files"),
        &json!({"files": files}),
    );
    assert_eq!(code, 200, "{v}");
    let edited = v["active"].as_str().unwrap().to_string();
    let (code, _) = json(
        "POST",
        &r.url("/v1/harness/rollback"),
        &json!({"hash": first}),
    );
    assert_eq!(code, 200);
    let folder = edit_dir(dir.path(), &r, &edited);
    let (code, v) = json("POST", &r.url("/v1/harness"), &json!({"path": folder}));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["active"], edited.as_str());

    create(&r, "x");
    let event = br#"{"type": "comment", "viewer": "v", "text": "hi"}"#;
    for (path, ctype) in [
        ("/v1/streams/x/events", Some("text/plain")),
        (
            "/v1/streams/x/events",
            Some("application/x-www-form-urlencoded"),
        ),
        ("/v1/streams/x/events", None),
        ("/v1/harness/rollback", Some("text/plain;charset=UTF-8")),
        ("/v1/harness", Some("multipart/form-data; boundary=x")),
        ("/v1/experiments/none/stop", None),
    ] {
        let (code, text) = match ctype {
            Some(t) => call("POST", &r.url(path), Some((t, event.as_slice()))),
            None if path.ends_with("/stop") => call("POST", &r.url(path), None),
            None => {
                // a body without a declared type (a fetch of a Blob)
                let agent = ureq::AgentBuilder::new().build();
                match agent.post(&r.url(path)).send_bytes(event) {
                    Ok(resp) => (resp.status(), resp.into_string().unwrap()),
                    Err(ureq::Error::Status(c, resp)) => (c, resp.into_string().unwrap()),
                    Err(e) => panic!("{e}"),
                }
            }
        };
        assert_eq!(code, 415, "{path} {ctype:?}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("application/json"),
            "{v}"
        );
    }
    let (_, s) = get(&r.url("/v1/streams/x"));
    assert_eq!(s["counters"]["received"], 0, "{s}");
    // a JSON body with a charset parameter is fine
    let (code, text) = call(
        "POST",
        &r.url("/v1/streams/x/events"),
        Some(("application/json; charset=utf-8", event.as_slice())),
    );
    assert_eq!(code, 202, "{text}");
    r.stop();
}

/// A reply on a fresh stream of its own.
fn ask_on(r: &Running, text: &str) -> Value {
    let id = format!("t{}", rand_id());
    create(r, &id);
    ask(r, &id, text)
}

fn rand_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}

/// A gate that reports when a run starts and finishes only when the test says so.
struct PausedGate {
    started: std::sync::Mutex<std::sync::mpsc::Sender<std::path::PathBuf>>,
    finish: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl hat_serve::harnesses::SwapGate for PausedGate {
    fn check(&self, new: &std::path::Path, _active: &std::path::Path) -> Result<String, String> {
        let _ = self.started.lock().unwrap().send(new.to_path_buf());
        let _ = self.finish.lock().unwrap().recv();
        // the folder under review is still there, whatever the client did meanwhile
        if new.join("harness.toml").is_file() {
            Ok("gate passed".into())
        } else {
            Err("the folder under review is gone".into())
        }
    }
}

/// Audit finding: gate runs (whole evaluations) piled up on the blocking pool when a client
/// clicked again, and a client that left had the folder under review deleted mid-run.
#[test]
fn one_gate_run_at_a_time_and_a_run_keeps_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let (started_tx, started) = std::sync::mpsc::channel();
    let (finish, finish_rx) = std::sync::mpsc::channel();
    let mut cfg = config(dir.path());
    cfg.gate = Some(hat_serve::harnesses::Gate(std::sync::Arc::new(
        PausedGate {
            started: std::sync::Mutex::new(started_tx),
            finish: std::sync::Mutex::new(finish_rx),
        },
    )));
    let r = start(cfg, Duration::ZERO);
    let files = edited_files(&r, "Ann");
    let url = r.url("/v1/harness/check");
    let body = json!({"files": files, "gate": true});
    let first = {
        let (url, body) = (url.clone(), body.clone());
        std::thread::spawn(move || json("POST", &url, &body))
    };
    let folder = started.recv().unwrap();
    // a second run while the first is under way is refused, not queued
    let (code, v) = json("POST", &url, &body);
    assert_eq!(code, 429, "{v}");
    assert!(v.to_string().contains("already under way"), "{v}");
    finish.send(()).unwrap();
    let (code, v) = first.join().unwrap();
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["gate"]["passed"], true, "{v}");
    // a checked edit leaves nothing behind once its run is over
    assert!(!folder.exists(), "{}", folder.display());
}

/// Audit finding: a prompt template is rendered when a harness is checked, and a few dozen
/// `~` concatenations build gigabytes (fuel counts instructions, not bytes). Without an API
/// key, a client's harness may not bring a template of its own.
#[test]
fn without_an_api_key_a_client_harness_brings_no_template_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let r = start(config(dir.path()), Duration::ZERO);
    let active = get(&r.url("/v1/harness")).1["active"].clone();
    let mut files = edited_files(&r, "Ann");
    let toml = files["harness.toml"]
        .as_str()
        .unwrap()
        .replace("[prompt]\n", "[prompt]\ntemplate = \"prompts/p.j2\"\n");
    files.insert("harness.toml".into(), json!(toml));
    // a small template here; the point is that none is rendered at all
    files.insert(
        "prompts/p.j2".into(),
        json!("{% set s = 'x' %}{% set s = s ~ s %}{{ s }} {{ harness.persona.name }}"),
    );
    for route in ["/v1/harness/check", "/v1/harness/files"] {
        let (code, v) = json("POST", &r.url(route), &json!({"files": files}));
        assert_eq!(code, 400, "{route}: {v}");
        assert!(v.to_string().contains("prompt template of its own"), "{v}");
    }
    assert_eq!(get(&r.url("/v1/harness")).1["active"], active);
}
