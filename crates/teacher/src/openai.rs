//! A teacher behind any OpenAI-compatible `/chat/completions` endpoint.
//!
//! Tool results travel as user messages tagged `[tool_result name=...]`:
//! HAT's call syntax lives in the text (it is part of the harness), so the
//! endpoint needs no native tool-calling support.

use std::time::Duration;

use serde_json::{json, Value};

use hat_harness::{Message, Role};

use hat_agent::episode::{ChatModel, Completion, TurnRule};
use hat_agent::AgentError;

/// The largest chat-completion response read from an endpoint.
const MAX_RESPONSE_BYTES: u64 = 16 << 20;

#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// e.g. `http://127.0.0.1:8000/v1`
    pub base_url: String,
    pub model: String,
    /// Name of the environment variable holding the API key (may be unset for local servers).
    pub api_key_env: Option<String>,
    pub temperature: f64,
    pub max_tokens: u32,
    pub timeout: Duration,
}

/// What an endpoint reads on a reply-only turn (it cannot be constrained at decoding, so it is
/// told): sent after the conversation, never kept in it.
pub const LAST_TURN_NOTE: &str =
    "[runtime] This is your last turn for this event: write only your reply to the viewers now, without calling a tool.";

pub struct OpenAiTeacher {
    cfg: OpenAiConfig,
    key: Option<String>,
    agent: ureq::Agent,
}

impl OpenAiTeacher {
    pub fn new(cfg: OpenAiConfig) -> Result<Self, AgentError> {
        let key = match &cfg.api_key_env {
            Some(var) => Some(std::env::var(var).map_err(|_| AgentError::MissingKey(var.clone()))?),
            None => None,
        };
        let agent = ureq::AgentBuilder::new().timeout(cfg.timeout).build();
        Ok(OpenAiTeacher { cfg, key, agent })
    }

    fn url(&self) -> String {
        format!(
            "{}/chat/completions",
            self.cfg.base_url.trim_end_matches('/')
        )
    }
}

/// What went wrong below HTTP, once (ureq's own text repeats the URL and the kind) and with
/// what to do about it.
fn transport_message(t: &ureq::Transport, timeout: Duration) -> String {
    let detail = [
        t.message().map(str::to_string),
        std::error::Error::source(t).map(|s| s.to_string()),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(": ");
    let lower = detail.to_lowercase();
    // a connect that timed out is the OS's, not --request-timeout-s
    let connecting = matches!(
        t.kind(),
        ureq::ErrorKind::ConnectionFailed | ureq::ErrorKind::Dns
    );
    if !connecting && (lower.contains("timed out") || lower.contains("timeout")) {
        return format!(
            "no answer within {} s; check that the endpoint is up and not overloaded, or raise \
             --request-timeout-s for a slow one",
            timeout.as_secs_f64()
        );
    }
    match t.kind() {
        ureq::ErrorKind::ConnectionFailed => {
            format!("cannot connect ({detail}); check --base-url and that the server is running")
        }
        ureq::ErrorKind::Dns => format!("cannot resolve the host ({detail}); check --base-url"),
        kind if detail.is_empty() => kind.to_string(),
        kind => format!("{kind}: {detail}"),
    }
}

/// Chat messages as endpoints and chat templates take them. Tool results become tagged user
/// turns: HAT's call syntax lives in the text, so templates without a tool role work unchanged
/// (the embedded engine renders the same form).
pub fn wire_messages(messages: &[Message]) -> Vec<Value> {
    messages
        .iter()
        .map(|m| match m.role {
            Role::Tool => json!({"role": "user", "content": format!("[tool_result name={}] {}", m.name.as_deref().unwrap_or("tool"), m.content)}),
            Role::System => json!({"role": "system", "content": m.content}),
            Role::User => json!({"role": "user", "content": m.content}),
            Role::Assistant => json!({"role": "assistant", "content": m.content}),
        })
        .collect()
}

impl ChatModel for OpenAiTeacher {
    fn set_max_tokens(&mut self, max: u32) {
        self.cfg.max_tokens = max;
    }

    fn complete(&mut self, messages: &[Message]) -> Result<String, AgentError> {
        self.request(messages)
    }

    /// The chats go to the endpoint at once (one connection each), so a server that batches
    /// (vLLM, SGLang, llama.cpp's server with parallel slots) decodes them together.
    fn complete_batch(&mut self, chats: &[&[Message]]) -> Result<Vec<String>, AgentError> {
        if chats.len() <= 1 {
            return chats.iter().map(|m| self.request(m)).collect();
        }
        let this = &*self;
        std::thread::scope(|s| {
            let handles: Vec<_> = chats
                .iter()
                .map(|m| s.spawn(move || this.request(m)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(AgentError::Model(
                            "an endpoint request thread panicked".into(),
                        ))
                    })
                })
                .collect()
        })
    }

    /// A reply-only turn's request ends with [`LAST_TURN_NOTE`]; the episode keeps what the
    /// model answers either way (text beside a call is the reply).
    fn generate_turns(
        &mut self,
        chats: &[&[Message]],
        rules: &[TurnRule],
    ) -> Result<Vec<Completion>, AgentError> {
        let noted: Vec<Option<Vec<Message>>> = chats
            .iter()
            .enumerate()
            .map(|(i, m)| {
                matches!(rules.get(i), Some(TurnRule::ReplyOnly { .. })).then(|| {
                    let mut v = m.to_vec();
                    v.push(Message::user(LAST_TURN_NOTE));
                    v
                })
            })
            .collect();
        let sent: Vec<&[Message]> = chats
            .iter()
            .zip(&noted)
            .map(|(m, n)| n.as_deref().unwrap_or(m))
            .collect();
        self.generate_batch(&sent)
    }
}

impl OpenAiTeacher {
    fn request(&self, messages: &[Message]) -> Result<String, AgentError> {
        let url = self.url();
        let body = json!({
            "model": self.cfg.model,
            "messages": wire_messages(messages),
            "temperature": self.cfg.temperature,
            "max_tokens": self.cfg.max_tokens,
        });
        let mut req = self
            .agent
            .post(&url)
            .set("content-type", "application/json");
        if let Some(k) = &self.key {
            req = req.set("authorization", &format!("Bearer {k}"));
        }
        let err = |message: String| AgentError::Endpoint {
            url: url.clone(),
            message,
        };
        let resp = match req.send_json(body) {
            Ok(r) => r,
            Err(ureq::Error::Status(code, r)) => {
                let text = r.into_string().unwrap_or_default();
                return Err(err(format!(
                    "HTTP {code}: {}",
                    hat_harness::text::truncate_chars(&text, 300)
                )));
            }
            Err(ureq::Error::Transport(t)) => {
                return Err(err(transport_message(&t, self.cfg.timeout)))
            }
        };
        // a chat completion is kilobytes: an endpoint streaming more is refused, not held
        use std::io::Read;
        let v: Value = serde_json::from_reader(resp.into_reader().take(MAX_RESPONSE_BYTES))
            .map_err(|e| {
                err(format!(
                    "response is not JSON (or is over {MAX_RESPONSE_BYTES} bytes): {e}"
                ))
            })?;
        v["choices"][0]["message"]["content"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| {
                err(format!(
                    "no choices[0].message.content in {}",
                    hat_harness::text::truncate_chars(&v.to_string(), 200)
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;

    /// A one-connection-per-answer HTTP server on loopback with canned replies.
    pub fn serve(answers: Vec<String>) -> (String, std::thread::JoinHandle<Vec<Value>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for a in answers {
                let (mut s, _) = listener.accept().unwrap();
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut len = 0;
                loop {
                    let mut line = String::new();
                    r.read_line(&mut line).unwrap();
                    if line == "\r\n" || line.is_empty() {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; len];
                r.read_exact(&mut body).unwrap();
                seen.push(serde_json::from_slice(&body).unwrap());
                let resp = json!({"choices": [{"message": {"role": "assistant", "content": a}}]})
                    .to_string();
                write!(s, "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{resp}", resp.len()).unwrap();
            }
            seen
        });
        (format!("http://{addr}/v1"), h)
    }

    /// A teacher on a loopback endpoint, no key.
    fn local(base_url: String) -> OpenAiTeacher {
        OpenAiTeacher::new(OpenAiConfig {
            base_url,
            model: "m".into(),
            api_key_env: None,
            temperature: 0.0,
            max_tokens: 16,
            timeout: Duration::from_secs(10),
        })
        .unwrap()
    }

    #[test]
    fn completes_against_a_local_endpoint() {
        let (url, h) = serve(vec!["hello there".into()]);
        let mut t = local(url);
        let out = t
            .complete(&[Message::system("s"), Message::tool("get_product", "{}")])
            .unwrap();
        assert_eq!(out, "hello there");
        let seen = h.join().unwrap();
        assert_eq!(seen[0]["messages"][1]["role"], "user");
        assert!(seen[0]["messages"][1]["content"]
            .as_str()
            .unwrap()
            .starts_with("[tool_result name=get_product]"));
    }

    #[test]
    fn a_batch_goes_out_at_once_and_every_chat_gets_an_answer() {
        let answers: Vec<String> = (0..3).map(|i| format!("answer {i}")).collect();
        let (url, h) = serve(answers.clone());
        let mut t = local(url);
        let chats: Vec<Vec<Message>> = (0..3)
            .map(|i| vec![Message::user(format!("q{i}"))])
            .collect();
        let refs: Vec<&[Message]> = chats.iter().map(|c| c.as_slice()).collect();
        let mut out = t.complete_batch(&refs).unwrap();
        out.sort();
        assert_eq!(out, answers);
        assert_eq!(h.join().unwrap().len(), 3);
    }

    #[test]
    fn a_reply_only_turn_is_told_so_and_the_others_are_not() {
        let (url, h) = serve(vec!["a".into(), "b".into()]);
        let mut t = local(url);
        let chat = [Message::system("s"), Message::user("q")];
        let rules = [
            TurnRule::Any,
            TurnRule::ReplyOnly {
                opener: "<tool_call>",
                grammar: None,
            },
        ];
        let out = t.generate_turns(&[&chat, &chat], &rules).unwrap();
        assert_eq!(out.len(), 2);
        let seen = h.join().unwrap();
        let lasts: Vec<&str> = seen
            .iter()
            .map(|b| {
                b["messages"].as_array().unwrap().last().unwrap()["content"]
                    .as_str()
                    .unwrap()
            })
            .collect();
        // the two requests may arrive in either order
        assert_eq!(lasts.iter().filter(|l| **l == LAST_TURN_NOTE).count(), 1);
        assert_eq!(lasts.iter().filter(|l| **l == "q").count(), 1);
    }

    #[test]
    fn missing_key_and_dead_endpoint_are_clear_errors() {
        let cfg = OpenAiConfig {
            base_url: "http://127.0.0.1:9".into(),
            model: "m".into(),
            api_key_env: Some("HAT_TEST_SURELY_UNSET".into()),
            temperature: 0.0,
            max_tokens: 8,
            timeout: Duration::from_secs(2),
        };
        assert!(matches!(
            OpenAiTeacher::new(cfg.clone()),
            Err(AgentError::MissingKey(_))
        ));
        let mut t = OpenAiTeacher::new(OpenAiConfig {
            api_key_env: None,
            ..cfg
        })
        .unwrap();
        let e = t.complete(&[Message::user("x")]).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, AgentError::Endpoint { .. }), "{text}");
        // issue 13: ureq's text named the URL twice and said nothing of what to do
        assert!(
            text.matches("127.0.0.1:9").count() == 1 && text.contains("check --base-url"),
            "{text}"
        );
    }

    /// Issue 13: a stalled endpoint held a live turn for a hard-coded 300 s; the timeout is an
    /// option and its error says so.
    #[test]
    fn a_stalled_endpoint_times_out_with_a_clear_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let h = std::thread::spawn(move || {
            // accept, then say nothing until the client gives up
            let (s, _) = listener.accept().unwrap();
            std::thread::sleep(Duration::from_secs(3));
            drop(s);
        });
        let mut t = OpenAiTeacher::new(OpenAiConfig {
            base_url: format!("http://127.0.0.1:{port}"),
            model: "m".into(),
            api_key_env: None,
            temperature: 0.0,
            max_tokens: 8,
            timeout: Duration::from_millis(300),
        })
        .unwrap();
        let text = t.complete(&[Message::user("x")]).unwrap_err().to_string();
        assert!(
            text.contains("no answer within 0.3 s") && text.contains("--request-timeout-s"),
            "{text}"
        );
        h.join().unwrap();
    }
}
