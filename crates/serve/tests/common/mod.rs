//! A scripted model and an in-process server on a loopback port.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use hat_agent::episode::{ChatModel, Completion, TurnId, TurnRule};
use hat_agent::AgentError;
use hat_harness::{Message, Role};
use hat_serve::{ServeConfig, Server};

/// Answers like a well-behaved host, deterministically: a comment asking to "pin" gets a
/// `pin_product` call first; every reply names the persona its system prompt shows, so a
/// test can tell which harness version produced it.
pub struct Scripted {
    pub delay: Duration,
}

impl ChatModel for Scripted {
    fn complete(&mut self, messages: &[Message]) -> Result<String, AgentError> {
        std::thread::sleep(self.delay);
        let system = messages.first().map(|m| m.content.as_str()).unwrap_or("");
        let persona = ["Mia", "Zoe"]
            .into_iter()
            .find(|p| system.contains(&format!("You are {p}")) || system.contains(p))
            .unwrap_or("nobody");
        let last = messages.last().expect("a prompt");
        if last.role == Role::Tool && last.name.as_deref() == Some("check_stock") {
            return Ok(format!("There are {} left.", last.content));
        }
        if last.role == Role::User && last.content.contains("stock please") {
            return Ok(
                r#"<tool_call>{"name": "check_stock", "arguments": {"id": "P1"}}</tool_call>"#
                    .into(),
            );
        }
        if last.role == Role::User
            && last.content.contains("pin")
            && !messages.iter().any(|m| m.role == Role::Tool)
        {
            return Ok(r#"<tool_call>{"name": "pin_product", "arguments": {"product_id": "P1"}}</tool_call>"#.into());
        }
        // a comment asking to "keep looking" makes it search on every turn it may
        if messages
            .iter()
            .any(|m| m.role == Role::User && m.content.contains("keep looking"))
        {
            return Ok(
                r#"<tool_call>{"name": "search_products", "arguments": {"query": "socks"}}</tool_call>"#
                    .into(),
            );
        }
        if last.role == Role::User && last.content.starts_with("[runtime]") {
            return Ok(format!("Sorry! {persona} here, let me fix that."));
        }
        if last.role == Role::User && last.content.contains("best deal") {
            // an absolute claim the production harness's reply hook catches
            return Ok(format!("{persona} here: this is the best deal ever!"));
        }
        Ok(format!("Hi, {persona} here! Thanks for stopping by."))
    }

    /// Honours a reply-only turn (the last one a reply may take) with a reply.
    fn generate_turns(
        &mut self,
        chats: &[&[Message]],
        rules: &[TurnRule],
    ) -> Result<Vec<Completion>, AgentError> {
        chats
            .iter()
            .enumerate()
            .map(|(i, m)| match rules.get(i) {
                Some(TurnRule::ReplyOnly { .. }) => {
                    Ok(Completion::from("No socks today, sorry!".to_string()))
                }
                _ => self.generate(m),
            })
            .collect()
    }
}

/// [`Scripted`] batching continuously, as the embedded engine does: a turn's answer is
/// fixed when it begins and takes one decode step per 8 characters of it (at least one); a
/// step takes `step`.
pub struct Stepwise {
    pub inner: Scripted,
    pub step: Duration,
    running: Vec<(TurnId, usize, Completion)>,
    next: TurnId,
    /// Most turns running at once so far.
    pub most: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Stepwise {
    pub fn new(step: Duration) -> Self {
        Stepwise {
            inner: Scripted {
                delay: Duration::ZERO,
            },
            step,
            running: Vec::new(),
            next: 0,
            most: Default::default(),
        }
    }
}

impl ChatModel for Stepwise {
    fn complete(&mut self, messages: &[Message]) -> Result<String, AgentError> {
        self.inner.complete(messages)
    }

    fn generate_turns(
        &mut self,
        chats: &[&[Message]],
        rules: &[TurnRule],
    ) -> Result<Vec<Completion>, AgentError> {
        self.inner.generate_turns(chats, rules)
    }

    fn continuous(&self) -> bool {
        true
    }

    fn begin_turn(&mut self, chat: &[Message], rule: TurnRule) -> Result<TurnId, AgentError> {
        let c = self.inner.generate_turns(&[chat], &[rule])?.remove(0);
        let id = self.next;
        self.next += 1;
        self.running.push((id, 1 + c.text.len() / 8, c));
        self.most
            .fetch_max(self.running.len(), std::sync::atomic::Ordering::SeqCst);
        Ok(id)
    }

    fn step_turns(&mut self) -> Result<Vec<(TurnId, Completion)>, AgentError> {
        self.step_turns_streaming(&mut |_, _| {})
    }

    /// Each step sends the next 8 bytes of each running turn's text (to a character
    /// boundary), the last step the rest.
    fn step_turns_streaming(
        &mut self,
        on_text: &mut dyn FnMut(TurnId, &str),
    ) -> Result<Vec<(TurnId, Completion)>, AgentError> {
        std::thread::sleep(self.step);
        let mut ended = Vec::new();
        self.running.retain_mut(|(id, left, c)| {
            *left -= 1;
            let steps = 1 + c.text.len() / 8;
            let done = steps - *left;
            let upto = |k: usize| {
                let mut b = (k * 8).min(c.text.len());
                while !c.text.is_char_boundary(b) {
                    b += 1;
                }
                b
            };
            let to = if *left == 0 { c.text.len() } else { upto(done) };
            let from = upto(done - 1).min(to);
            if from < to {
                on_text(*id, &c.text[from..to]);
            }
            if *left == 0 {
                ended.push((*id, std::mem::take(c)));
            }
            *left > 0
        });
        Ok(ended)
    }
}

pub fn harness_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream")
}

/// A copy of the production harness with the persona renamed (another version).
pub fn renamed_harness(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(format!("h-{name}"));
    copy_dir(&harness_dir(), &dir);
    let t = dir.join("harness.toml");
    let text = std::fs::read_to_string(&t).unwrap();
    std::fs::write(
        &t,
        text.replace("name = \"Mia\"", &format!("name = \"{name}\"")),
    )
    .unwrap();
    dir
}

/// A copy whose tool schema does not parse.
pub fn broken_harness(root: &Path) -> PathBuf {
    let dir = root.join("h-broken");
    copy_dir(&harness_dir(), &dir);
    std::fs::write(dir.join("tools/check_stock.json"), "{ not json").unwrap();
    dir
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        let dest = to.join(e.file_name());
        if p.is_dir() {
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

/// A server on a loopback port; `stop` shuts it down gracefully.
pub struct Running(hat_serve::Background);

impl From<hat_serve::Background> for Running {
    fn from(b: hat_serve::Background) -> Self {
        Running(b)
    }
}

impl Running {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.0.url())
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        self.0.addr
    }

    /// Graceful shutdown: waits for in-flight replies and the worker.
    pub fn stop(self) {
        self.0.stop().unwrap();
    }
}

pub fn start(cfg: ServeConfig, delay: Duration) -> Running {
    start_with(cfg, Box::new(Scripted { delay }), &harness_dir())
}

pub fn start_with(cfg: ServeConfig, model: Box<dyn ChatModel + Send>, harness: &Path) -> Running {
    let version = hat_serve::load_dir(harness, harness.display().to_string()).unwrap();
    let server = Server::start(cfg, model, version).unwrap();
    Running(server.spawn(([127, 0, 0, 1], 0).into()).unwrap())
}

/// POSTs a JSON body and returns the status and the raw text (SSE answers are not JSON).
pub fn post_text(url: &str, body: &serde_json::Value) -> (u16, String) {
    let b = body.to_string();
    call("POST", url, Some(("application/json", b.as_bytes())))
}

pub fn config(data: &Path) -> ServeConfig {
    ServeConfig {
        data_dir: data.to_path_buf(),
        request_timeout: Duration::from_secs(60),
        // as `hat serve --harness harnesses/livestream` allows: the served harness's folder
        harness_roots: vec![harness_dir().parent().unwrap().to_path_buf()],
        ..ServeConfig::default()
    }
}

/// One request: status and body (4xx and 5xx are answers, not errors).
pub fn call(method: &str, url: &str, body: Option<(&str, &[u8])>) -> (u16, String) {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(90))
        .build();
    let req = agent.request(method, url);
    let r = match body {
        Some((ctype, b)) => req.set("Content-Type", ctype).send_bytes(b),
        None => req.call(),
    };
    match r {
        Ok(resp) => (resp.status(), resp.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, resp)) => (code, resp.into_string().unwrap_or_default()),
        Err(e) => panic!("{method} {url}: {e}"),
    }
}

pub fn json(method: &str, url: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let b = body.to_string();
    let (code, text) = call(method, url, Some(("application/json", b.as_bytes())));
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({code}): {text}"));
    (code, v)
}

pub fn get(url: &str) -> (u16, serde_json::Value) {
    let (code, text) = call("GET", url, None);
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({code}): {text}"));
    (code, v)
}

/// Creates stream `id` (seed 3).
pub fn create(r: &Running, id: &str) {
    let (code, v) = json(
        "POST",
        &r.url("/v1/streams"),
        &serde_json::json!({"id": id, "seed": 3}),
    );
    assert_eq!(code, 201, "{v}");
}

/// Posts a comment of `lily` to stream `id` and waits for its result.
pub fn ask(r: &Running, id: &str, text: &str) -> serde_json::Value {
    let (code, v) = json(
        "POST",
        &r.url(&format!("/v1/streams/{id}/events?wait=true")),
        &serde_json::json!({"type": "comment", "viewer": "lily", "text": text}),
    );
    assert_eq!(code, 200, "{v}");
    v["results"][0].clone()
}
