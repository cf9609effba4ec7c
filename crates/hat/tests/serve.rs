//! `hat serve` as a process: killed with SIGKILL and restarted, its streams and what their
//! tools changed are intact. The model is an OpenAI-compatible endpoint (the scale-out path),
//! played by an in-process server with a scripted model.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hat_agent::episode::ChatModel;
use hat_agent::AgentError;
use hat_harness::{Message, Role};
use serde_json::{json, Value};

struct Scripted;

impl ChatModel for Scripted {
    fn complete(&mut self, messages: &[Message]) -> Result<String, AgentError> {
        let last = messages.last().map(|m| m.content.as_str()).unwrap_or("");
        let fed_back = messages
            .iter()
            .any(|m| m.role == Role::Tool || m.content.starts_with("[tool_result"));
        if last.contains("pin") && !fed_back {
            return Ok(r#"<tool_call>{"name": "pin_product", "arguments": {"product_id": "P1"}}</tool_call>"#.into());
        }
        Ok("Done, it's pinned on screen!".into())
    }
}

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn start_hat(upstream: &str, data: &Path, port: u16) -> Proc {
    let child = Command::new(env!("CARGO_BIN_EXE_hat"))
        .current_dir(repo())
        .args([
            "serve",
            "--model",
            "openai:scripted",
            "--base-url",
            upstream,
        ])
        .args(["--harness", "harnesses/livestream", "--no-watch"])
        .args(["--addr", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(data)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let p = Proc(child);
    let t0 = Instant::now();
    while ureq::get(&format!("http://127.0.0.1:{port}/health"))
        .call()
        .is_err()
    {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "hat serve did not come up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    p
}

fn post(url: &str, body: Value) -> Value {
    match ureq::post(url).send_json(body) {
        Ok(r) => r.into_json().unwrap(),
        Err(ureq::Error::Status(c, r)) => panic!("{url}: {c} {}", r.into_string().unwrap()),
        Err(e) => panic!("{url}: {e}"),
    }
}

#[test]
fn a_server_killed_with_sigkill_restarts_with_its_streams_intact() {
    let dir = tempfile::tempdir().unwrap();
    let harness = hat_serve::load_dir(&repo().join("harnesses/livestream"), "h".into()).unwrap();
    let upstream = hat_serve::Server::start(
        hat_serve::ServeConfig {
            data_dir: dir.path().join("upstream"),
            ..Default::default()
        },
        Box::new(Scripted),
        harness,
    )
    .unwrap()
    .spawn(([127, 0, 0, 1], 0).into())
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let data = dir.path().join("data");
    let up = format!("{}/v1", upstream.url());
    let hat = start_hat(&up, &data, port);
    post(&format!("{base}/v1/streams"), json!({"id": "k", "seed": 2}));
    let v = post(
        &format!("{base}/v1/streams/k/events?wait=true"),
        json!({"type": "comment", "viewer": "amy", "text": "can you pin the first one?"}),
    );
    assert_eq!(v["results"][0]["tool_calls"], json!(["pin_product"]), "{v}");
    drop(hat); // SIGKILL: no graceful shutdown
    let _hat = start_hat(&up, &data, port);
    let s: Value = ureq::get(&format!("{base}/v1/streams/k"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    assert_eq!(s["state"]["pins"][0]["product"], "P1", "{s}");
    assert_eq!(s["counters"]["replied"], 1, "{s}");
    let v = post(
        &format!("{base}/v1/streams/k/events?wait=true"),
        json!({"type": "comment", "viewer": "bo", "text": "nice"}),
    );
    assert_eq!(v["results"][0]["type"], "reply", "{v}");
}

/// A server reachable from other machines needs an API key (or an explicit opt-out): the
/// console and the API would otherwise be open to anyone there.
#[test]
fn serving_beyond_loopback_without_a_key_is_refused() {
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hat"))
        .current_dir(repo())
        .args([
            "serve",
            "--model",
            "openai:m",
            "--base-url",
            "http://127.0.0.1:9",
        ])
        .args(["--addr", "0.0.0.0:0", "--data-dir"])
        .arg(data.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--server-api-key-env") && err.contains("--insecure-no-auth"),
        "{err}"
    );
}
