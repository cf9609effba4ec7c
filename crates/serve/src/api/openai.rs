//! OpenAI-compatible `/v1/models` and `/v1/chat/completions` (plain and SSE-streamed), on
//! the same engine worker as the streams, so existing clients and evaluation tools can talk
//! to a served model.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use std::collections::HashMap;

use hat_agent::episode::Completion;
use hat_harness::syntax::CallSyntax;
use hat_harness::{Message, Role};

use crate::api::openai_tools as tools;
use crate::api::{body, parse};
use crate::app::App;
use crate::error::{Result, ServeError};
use crate::stream::unix_now;
use crate::worker::{ChatJob, ChatPlace, Command};

/// Largest `max_tokens` a request may ask for.
pub const MAX_COMPLETION_TOKENS: u32 = 4096;

pub async fn models(State(app): State<Arc<App>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{"id": app.cfg.model_name, "object": "model", "created": 0, "owned_by": "hat"}],
    }))
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage {
    role: hat_harness::Role,
    #[serde(default)]
    content: Option<Content>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    tool_calls: Vec<tools::WireToolCall>,
    #[serde(default)]
    tool_call_id: Option<String>,
}

/// The request fields this server reads; other OpenAI fields are accepted and ignored.
#[derive(Deserialize)]
struct ChatRequest {
    #[serde(default)]
    model: Option<String>,
    messages: Vec<WireMessage>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    n: Option<u32>,
    #[serde(default)]
    tools: Vec<tools::ToolDef>,
    #[serde(default)]
    tool_choice: Option<Value>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// The conversation for the model: text parts joined, earlier tool calls written in the
/// harness's syntax, tool results named after their call, and the tools section (when the
/// request has tools) at the end of the system prompt.
fn messages(
    req: Vec<WireMessage>,
    syntax: CallSyntax,
    section: Option<String>,
) -> Result<Vec<Message>> {
    if req.is_empty() {
        return Err(ServeError::bad(
            "messages",
            "empty; send at least one message",
        ));
    }
    let mut names = HashMap::new();
    let mut out: Vec<Message> = Vec::with_capacity(req.len() + 1);
    for (i, m) in req.into_iter().enumerate() {
        let content = match m.content {
            None => String::new(),
            Some(Content::Text(t)) => t,
            Some(Content::Parts(parts)) => {
                let mut s = String::new();
                for (k, p) in parts.into_iter().enumerate() {
                    if p.kind != "text" {
                        return Err(ServeError::bad(
                            format!("messages[{i}].content[{k}].type"),
                            format!("`{}`: only text parts are supported", p.kind),
                        ));
                    }
                    s.push_str(&p.text.unwrap_or_default());
                }
                s
            }
        };
        let msg = match m.role {
            Role::Assistant if !m.tool_calls.is_empty() => {
                tools::names_by_id(&m.tool_calls, &mut names);
                Message::assistant(tools::assistant_text(&content, &m.tool_calls, syntax, i)?)
            }
            Role::Tool => {
                let name = m
                    .name
                    .or_else(|| {
                        m.tool_call_id
                            .as_ref()
                            .and_then(|id| names.get(id).cloned())
                    })
                    .unwrap_or_else(|| "tool".into());
                Message::tool(name, content)
            }
            role => Message {
                role,
                content,
                name: m.name,
                weight: None,
            },
        };
        out.push(msg);
    }
    if let Some(section) = section {
        match out.first_mut() {
            Some(first) if first.role == Role::System => {
                first.content = format!("{}\n\n{section}", first.content);
            }
            _ => out.insert(0, Message::system(section)),
        }
    }
    Ok(out)
}

fn usage(c: &Completion) -> Value {
    json!({
        "prompt_tokens": c.prompt_tokens,
        "completion_tokens": c.tokens.len(),
        "total_tokens": c.prompt_tokens + c.tokens.len(),
        "prompt_tokens_details": {"cached_tokens": c.cached_tokens},
    })
}

fn finish_reason(c: &Completion, max: u32) -> &'static str {
    if c.tokens.len() >= max as usize {
        "length"
    } else {
        "stop"
    }
}

/// One `chat.completion.chunk` SSE event; with `usage`, the usage chunk (no choices).
fn chunk(
    id: &str,
    created: u64,
    model: &str,
    delta: Value,
    finish: Option<&str>,
    usage: Option<Value>,
) -> SseEvent {
    let mut v = json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    });
    if let Some(u) = usage {
        v["choices"] = json!([]);
        v["usage"] = u;
    }
    SseEvent::default().data(v.to_string())
}

/// `POST /v1/chat/completions`.
pub async fn chat(
    State(app): State<Arc<App>>,
    b: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    let req: ChatRequest = parse(&body(b)?)?;
    if req.n.is_some_and(|n| n != 1) {
        return Err(ServeError::bad("n", "only n = 1 is supported"));
    }
    let max_tokens = req
        .max_completion_tokens
        .or(req.max_tokens)
        .unwrap_or(app.cfg.max_tokens);
    if !(1..=MAX_COMPLETION_TOKENS).contains(&max_tokens) {
        return Err(ServeError::bad(
            "max_tokens",
            format!("{max_tokens}; must be 1 to {MAX_COMPLETION_TOKENS}"),
        ));
    }
    // tools are written and read in the active harness's call syntax
    let active = app.harnesses.active();
    let syntax = active.harness.syntax;
    let section = if req.tools.is_empty() {
        None
    } else {
        tools::tools_section(
            &req.tools,
            req.tool_choice.as_ref(),
            syntax,
            active.harness.max_calls(),
        )?
    };
    let with_tools = section.is_some();
    let msgs = messages(req.messages, syntax, section)?;
    let model = req.model.unwrap_or_else(|| app.cfg.model_name.clone());
    // Held by this handler (dropped with it, whether it returns or its client hangs up) or,
    // for a token stream, by the response stream; and by the job while it waits.
    let Some(place) = ChatPlace::take(&app.chat_waiting, app.cfg.max_chat_queue) else {
        app.metrics.reject("chat_queue_full");
        return Err(ServeError::Overloaded(format!(
            "{} chat requests are already waiting; retry later",
            app.cfg.max_chat_queue
        )));
    };
    let (done_tx, done_rx) = oneshot::channel();
    // with tools, the answer is parsed before anything is sent (a call is not content)
    let (delta_tx, delta_rx) = if req.stream && !with_tools {
        let (t, r) = mpsc::unbounded_channel();
        (Some(t), Some(r))
    } else {
        (None, None)
    };
    let job = ChatJob {
        messages: msgs,
        max_tokens,
        deltas: delta_tx,
        done: done_tx,
        queued: Instant::now(),
        place: place.clone(),
    };
    if app.tx.send(Command::Chat(job)).is_err() {
        return Err(ServeError::ShuttingDown);
    }
    let id = format!("chatcmpl-{:x}", (unix_now() * 1e6) as u64);
    let created = unix_now() as u64;
    let timeout = app.cfg.request_timeout;
    // the deadline runs from the request, not from the end of generation: a streamed request
    // queued behind busy streams must still end (with a timeout event) rather than wait unseen
    let deadline = tokio::time::Instant::now() + timeout;
    let Some(delta_rx) = delta_rx else {
        let out = tokio::time::timeout_at(deadline, done_rx).await;
        let stream = req.stream;
        drop(place);
        let c = match out {
            Err(_) => return Err(ServeError::Timeout(timeout.as_secs())),
            Ok(Err(_)) => return Err(ServeError::ShuttingDown),
            Ok(Ok(Err(e))) => return Err(ServeError::Model(e)),
            Ok(Ok(Ok(c))) => c,
        };
        let (message, finish) = if with_tools {
            let (m, f) = tools::answer(&c.text, syntax, &id);
            (
                m,
                if f == "stop" {
                    finish_reason(&c, max_tokens)
                } else {
                    f
                },
            )
        } else {
            (
                json!({"role": "assistant", "content": c.text}),
                finish_reason(&c, max_tokens),
            )
        };
        if stream {
            // a streamed request with tools: the parsed answer as one delta, then the end
            let mut delta = message.clone();
            if let Some(calls) = delta["tool_calls"].as_array_mut() {
                for (k, c) in calls.iter_mut().enumerate() {
                    c["index"] = json!(k);
                }
            }
            let mut evs = vec![
                chunk(&id, created, &model, delta, None, None),
                chunk(&id, created, &model, json!({}), Some(finish), None),
            ];
            if req.stream_options.is_some_and(|o| o.include_usage) {
                evs.push(chunk(
                    &id,
                    created,
                    &model,
                    json!({}),
                    None,
                    Some(usage(&c)),
                ));
            }
            evs.push(SseEvent::default().data("[DONE]"));
            return Ok(
                Sse::new(stream::iter(evs.into_iter().map(Ok::<_, Infallible>))).into_response(),
            );
        }
        return Ok(Json(json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [{
                "index": 0,
                "message": message,
                "finish_reason": finish,
            }],
            "usage": usage(&c),
        }))
        .into_response());
    };
    let include_usage = req.stream_options.is_some_and(|o| o.include_usage);
    let chunk = move |delta: Value, finish: Option<&str>, usage: Option<Value>| {
        chunk(&id, created, &model, delta, finish, usage)
    };
    let c1 = chunk.clone();
    let head = stream::iter([Ok::<_, Infallible>(chunk(
        json!({"role": "assistant", "content": ""}),
        None,
        None,
    ))]);
    // The deadline holds until the first token: a request that waits in the queue past it
    // ends with a timeout event; one whose answer has begun streams to its end (its length
    // is bounded by max_tokens) and then waits the request timeout again for the finish.
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let deltas = {
        let started = started.clone();
        stream::unfold((delta_rx, started), move |(mut rx, started)| async move {
            let next = if started.load(std::sync::atomic::Ordering::Relaxed) {
                rx.recv().await
            } else {
                tokio::time::timeout_at(deadline, rx.recv())
                    .await
                    .ok()
                    .flatten()
            };
            next.map(|d| {
                started.store(true, std::sync::atomic::Ordering::Relaxed);
                (d, (rx, started))
            })
        })
        .map(move |d| Ok(c1(json!({"content": d}), None, None)))
    };
    // The place moves into the stream's last part: a client that hangs up drops the stream,
    // and this future with it, polled or not.
    let tail = stream::once(async move {
        let finish_by = if started.load(std::sync::atomic::Ordering::Relaxed) {
            tokio::time::Instant::now() + timeout
        } else {
            deadline
        };
        let out = tokio::time::timeout_at(finish_by, done_rx).await;
        drop(place);
        let mut evs = Vec::new();
        match out {
            Ok(Ok(Ok(c))) => {
                evs.push(chunk(json!({}), Some(finish_reason(&c, max_tokens)), None));
                if include_usage {
                    evs.push(chunk(json!({}), None, Some(usage(&c))));
                }
            }
            other => {
                let message = match other {
                    Err(_) => format!("timed out after {} s", timeout.as_secs()),
                    Ok(Err(_)) => "the server is shutting down".to_string(),
                    Ok(Ok(Err(e))) => format!("model: {e}"),
                    Ok(Ok(Ok(_))) => unreachable!(),
                };
                evs.push(SseEvent::default().data(
                    json!({"error": {"message": message, "type": "model_error"}}).to_string(),
                ));
            }
        }
        evs.push(SseEvent::default().data("[DONE]"));
        stream::iter(evs.into_iter().map(Ok::<_, Infallible>))
    })
    .flatten();
    Ok(Sse::new(head.chain(deltas).chain(tail)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo;

    impl hat_agent::episode::ChatModel for Echo {
        fn complete(
            &mut self,
            _m: &[Message],
        ) -> std::result::Result<String, hat_agent::AgentError> {
            Ok("ok".into())
        }
    }

    fn request(stream: bool) -> std::result::Result<Bytes, BytesRejection> {
        let b = json!({"messages": [{"role": "user", "content": "hi"}], "stream": stream});
        Ok(Bytes::from(b.to_string()))
    }

    /// Waits (bounded, generously) for the worker to drop a job, which it does on its own
    /// thread.
    async fn eventually(what: &str, f: impl Fn() -> bool) {
        for _ in 0..3000 {
            if f() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("not within 30 s: {what}");
    }

    /// Review finding: a streamed chat's place in the queue was given back by the stream's
    /// last part, which never runs when the client hangs up first; after `max_chat_queue`
    /// such clients every chat request got 429 for good.
    #[test]
    fn clients_that_hang_up_mid_stream_give_their_places_back() {
        let dir = tempfile::tempdir().unwrap();
        let h = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
        let v = crate::harnesses::load_dir(&h, "test".into()).unwrap();
        let cfg = crate::app::ServeConfig {
            data_dir: dir.path().to_path_buf(),
            max_chat_queue: 2,
            ..Default::default()
        };
        let server = crate::app::Server::start(cfg, Box::new(Echo), v).unwrap();
        let app = server.app.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            for k in 0..5 {
                let resp = chat(State(app.clone()), request(true))
                    .await
                    .unwrap_or_else(|e| panic!("request {k}: {e}"));
                let mut body = resp.into_body().into_data_stream();
                // the first chunk (the assistant's role) arrives, then the client hangs up
                body.next().await.unwrap().unwrap();
                drop(body);
                eventually("the place is given back", || {
                    app.chat_waiting.load(std::sync::atomic::Ordering::SeqCst) == 0
                })
                .await;
            }
            let resp = chat(State(app.clone()), request(false))
                .await
                .unwrap_or_else(|e| panic!("after 5 hung-up clients: {e}"));
            assert_eq!(resp.status(), 200);
        });
        app.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = app.tx.send(Command::Wake);
    }
}
