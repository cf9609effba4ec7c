//! OpenAI-compatible `/v1/models` and `/v1/chat/completions` (plain and SSE-streamed), on
//! the same engine worker as the streams, so existing clients and evaluation tools can talk
//! to a served model.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
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
use tokio_stream::wrappers::UnboundedReceiverStream;

use hat_harness::Message;
use hat_teacher::episode::Completion;

use crate::api::{body, parse};
use crate::app::App;
use crate::error::{Result, ServeError};
use crate::stream::unix_now;
use crate::worker::{ChatJob, Command};

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
    tools: Option<Vec<Value>>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

fn messages(req: Vec<WireMessage>) -> Result<Vec<Message>> {
    if req.is_empty() {
        return Err(ServeError::bad(
            "messages",
            "empty; send at least one message",
        ));
    }
    req.into_iter()
        .enumerate()
        .map(|(i, m)| {
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
            Ok(Message {
                role: m.role,
                content,
                name: m.name,
            })
        })
        .collect()
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

/// `POST /v1/chat/completions`.
pub async fn chat(
    State(app): State<Arc<App>>,
    b: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    let req: ChatRequest = parse(&body(b)?)?;
    if req.n.is_some_and(|n| n != 1) {
        return Err(ServeError::bad("n", "only n = 1 is supported"));
    }
    if req.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(ServeError::bad(
            "tools",
            "tool definitions are not supported on /v1/chat/completions yet; the live-stream API \
             (/v1/streams) runs tools through the harness",
        ));
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
    let msgs = messages(req.messages)?;
    let model = req.model.unwrap_or_else(|| app.cfg.model_name.clone());
    if app.chat_waiting.fetch_add(1, Ordering::SeqCst) >= app.cfg.max_chat_queue {
        app.chat_waiting.fetch_sub(1, Ordering::SeqCst);
        app.metrics.reject("chat_queue_full");
        return Err(ServeError::Overloaded(format!(
            "{} chat requests are already waiting; retry later",
            app.cfg.max_chat_queue
        )));
    }
    let (done_tx, done_rx) = oneshot::channel();
    let (delta_tx, delta_rx) = if req.stream {
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
    };
    if app.tx.send(Command::Chat(job)).is_err() {
        app.chat_waiting.fetch_sub(1, Ordering::SeqCst);
        return Err(ServeError::ShuttingDown);
    }
    let id = format!("chatcmpl-{:x}", (unix_now() * 1e6) as u64);
    let created = unix_now() as u64;
    let timeout = app.cfg.request_timeout;
    let Some(delta_rx) = delta_rx else {
        let out = tokio::time::timeout(timeout, done_rx).await;
        app.chat_waiting.fetch_sub(1, Ordering::SeqCst);
        let c = match out {
            Err(_) => return Err(ServeError::Timeout(timeout.as_secs())),
            Ok(Err(_)) => return Err(ServeError::ShuttingDown),
            Ok(Ok(Err(e))) => return Err(ServeError::Model(e)),
            Ok(Ok(Ok(c))) => c,
        };
        return Ok(Json(json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": c.text},
                "finish_reason": finish_reason(&c, max_tokens),
            }],
            "usage": usage(&c),
        }))
        .into_response());
    };
    let include_usage = req.stream_options.is_some_and(|o| o.include_usage);
    let chunk = move |delta: Value, finish: Option<&str>, usage: Option<Value>| {
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
    };
    let c1 = chunk.clone();
    let head = stream::iter([Ok::<_, Infallible>(chunk(
        json!({"role": "assistant", "content": ""}),
        None,
        None,
    ))]);
    let deltas = UnboundedReceiverStream::new(delta_rx)
        .map(move |d| Ok(c1(json!({"content": d}), None, None)));
    let app2 = app.clone();
    let tail = stream::once(async move {
        let out = tokio::time::timeout(timeout, done_rx).await;
        app2.chat_waiting.fetch_sub(1, Ordering::SeqCst);
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
