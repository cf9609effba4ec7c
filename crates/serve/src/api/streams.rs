//! Streams: create, list, show, post viewer events, follow the host's output over SSE.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::Json;
use futures_util::stream::{self, Stream as FStream, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tokio_stream::wrappers::BroadcastStream;

use hat_world::Event;

use crate::api::{body, parse, parse_value, path_param, Query};
use crate::app::App;
use crate::error::{Result, ServeError};
use crate::stream::{valid_id, Body, OutEvent};
use crate::triage::Admission;
use crate::worker::Command;

/// Limits on one events request.
pub const MAX_EVENTS_PER_REQUEST: usize = 64;
pub const MAX_NAME_CHARS: usize = 64;
pub const MAX_TEXT_CHARS: usize = 2000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateRequest {
    /// Letters, digits, `-`, `_`; default: `s-<n>`.
    id: Option<String>,
    /// Seed of the generated catalog (`hat world gen --seed`); default 1.
    seed: Option<u64>,
}

#[derive(Deserialize)]
pub struct CreateQuery {
    id: Option<String>,
}

/// `POST /v1/streams`: a JSON body `{"id"?, "seed"?}`, or an SQLite store from `hat world
/// gen` as the body (`Content-Type: application/vnd.sqlite3` or `application/octet-stream`,
/// id in `?id=`).
pub async fn create(
    State(app): State<Arc<App>>,
    Query(q): Query<CreateQuery>,
    headers: HeaderMap,
    b: std::result::Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Value>)> {
    let b = body(b)?;
    let ctype = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let sqlite = ctype.starts_with("application/vnd.sqlite3")
        || ctype.starts_with("application/octet-stream");
    let (id, seed) = if sqlite {
        (q.id, None)
    } else if b.is_empty() {
        (q.id, Some(1))
    } else {
        let r: CreateRequest = parse(&b)?;
        (r.id.or(q.id), Some(r.seed.unwrap_or(1)))
    };
    if let Some(id) = &id {
        if !valid_id(id) {
            return Err(ServeError::bad("id", "1 to 64 letters, digits, `-` or `_`"));
        }
    }
    let _guard = app.create_lock.lock().await;
    let count = app.streams.read().unwrap_or_else(|e| e.into_inner()).len();
    if count >= app.cfg.max_streams {
        app.metrics.reject("max_streams");
        return Err(ServeError::Overloaded(format!(
            "the server already serves {count} streams (--max-streams)"
        )));
    }
    let dir_root = app.streams_dir();
    let id = match id {
        Some(id) => {
            if dir_root.join(&id).exists() {
                return Err(ServeError::Conflict(format!("stream `{id}` exists")));
            }
            id
        }
        None => (1..)
            .map(|n| format!("s-{n}"))
            .find(|c| !dir_root.join(c).exists())
            .unwrap_or_default(),
    };
    let store = (seed.is_none()).then_some(b);
    let app2 = app.clone();
    let summary = tokio::task::spawn_blocking(move || app2.new_stream(id, seed, store.as_deref()))
        .await
        .map_err(|e| ServeError::internal("creating the stream", e))??;
    Ok((StatusCode::CREATED, Json(summary)))
}

pub async fn list(State(app): State<Arc<App>>) -> Json<Value> {
    let map = app.streams.read().unwrap_or_else(|e| e.into_inner());
    let mut ids: Vec<&String> = map.keys().collect();
    ids.sort();
    Json(json!({"streams": ids}))
}

pub async fn show(
    State(app): State<Arc<App>>,
    id: std::result::Result<Path<String>, PathRejection>,
) -> Result<Json<Value>> {
    let s = app.stream(&path_param(id, "id")?)?;
    let depth: serde_json::Map<String, Value> = s
        .queue()
        .depth_by_class()
        .into_iter()
        .map(|(c, n)| (c.as_str().to_string(), json!(n)))
        .collect();
    let g = s.inner();
    Ok(Json(json!({
        "id": s.id,
        "seed": g.meta.seed,
        "created_at": g.meta.created_at,
        "state": g.meta.state,
        "queue": depth,
        "in_flight": g.in_flight,
        "counters": g.meta.counters,
        "history": g.meta.history,
        "last_seq": g.meta.next_seq,
        "harness": app.harnesses.active().hash(),
    })))
}

/// A viewer event as the API takes it: `{"type": KIND, ...fields}`.
#[derive(Debug)]
enum ApiEvent {
    Comment(CommentIn),
    Join(ViewerIn),
    Gift(GiftIn),
    Like(LikeIn),
    Purchase(PurchaseIn),
    OperatorCue(CueIn),
}

const KINDS: &str = "comment, join, gift, like, purchase, operator_cue";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommentIn {
    viewer: String,
    text: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ViewerIn {
    viewer: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GiftIn {
    viewer: String,
    gift: String,
    #[serde(default = "one")]
    count: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LikeIn {
    viewer: String,
    #[serde(default = "one")]
    count: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PurchaseIn {
    viewer: String,
    product: String,
    #[serde(default = "one")]
    quantity: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CueIn {
    text: String,
}

/// Reads one event; `at` is its place in the request (`events[2]`, or empty for a body that
/// is one event). Fields are checked by name, so an error says which one.
fn parse_event(mut v: Value, at: &str) -> Result<ApiEvent> {
    let field = |name: &str| {
        if at.is_empty() {
            name.to_string()
        } else {
            format!("{at}.{name}")
        }
    };
    let Some(obj) = v.as_object_mut() else {
        return Err(ServeError::bad(
            if at.is_empty() { "body" } else { at },
            "expected an event object",
        ));
    };
    let kind = match obj.remove("type") {
        Some(Value::String(k)) => k,
        Some(_) => {
            return Err(ServeError::bad(
                field("type"),
                format!("expected a string: one of {KINDS}"),
            ))
        }
        None => {
            return Err(ServeError::bad(
                field("type"),
                format!("missing: one of {KINDS}"),
            ))
        }
    };
    Ok(match kind.as_str() {
        "comment" => ApiEvent::Comment(parse_value(v, at)?),
        "join" | "viewer_join" => ApiEvent::Join(parse_value(v, at)?),
        "gift" => ApiEvent::Gift(parse_value(v, at)?),
        "like" => ApiEvent::Like(parse_value(v, at)?),
        "purchase" => ApiEvent::Purchase(parse_value(v, at)?),
        "operator_cue" => ApiEvent::OperatorCue(parse_value(v, at)?),
        other => {
            return Err(ServeError::bad(
                field("type"),
                format!(
                    "unknown event type `{}`; one of {KINDS}",
                    hat_harness::text::viewer_text(other, 40)
                ),
            ))
        }
    })
}

fn one() -> u32 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsRequest {
    events: Vec<Value>,
}

fn check_text(field: String, s: &str, max: usize) -> Result<()> {
    if s.trim().is_empty() {
        return Err(ServeError::bad(field, "empty"));
    }
    let n = s.chars().count();
    if n > max {
        return Err(ServeError::bad(
            field,
            format!("{n} characters; at most {max}"),
        ));
    }
    Ok(())
}

fn check_count(field: String, n: u32) -> Result<()> {
    if !(1..=10_000).contains(&n) {
        return Err(ServeError::bad(field, format!("{n}; must be 1 to 10000")));
    }
    Ok(())
}

/// Validates an event; `None` for a like (counted, never answered).
fn validate(e: ApiEvent, at: &str) -> Result<(Option<Event>, u32)> {
    let f = |name: &str| format!("{at}{name}");
    Ok(match e {
        ApiEvent::Comment(CommentIn { viewer, text }) => {
            check_text(f("viewer"), &viewer, MAX_NAME_CHARS)?;
            check_text(f("text"), &text, MAX_TEXT_CHARS)?;
            (Some(Event::Comment { viewer, text }), 0)
        }
        ApiEvent::Join(ViewerIn { viewer }) => {
            check_text(f("viewer"), &viewer, MAX_NAME_CHARS)?;
            (Some(Event::ViewerJoin { viewer }), 0)
        }
        ApiEvent::Gift(GiftIn {
            viewer,
            gift,
            count,
        }) => {
            check_text(f("viewer"), &viewer, MAX_NAME_CHARS)?;
            check_text(f("gift"), &gift, MAX_NAME_CHARS)?;
            check_count(f("count"), count)?;
            (
                Some(Event::Gift {
                    viewer,
                    gift,
                    count,
                }),
                0,
            )
        }
        ApiEvent::Like(LikeIn { viewer, count }) => {
            check_text(f("viewer"), &viewer, MAX_NAME_CHARS)?;
            check_count(f("count"), count)?;
            (None, count)
        }
        ApiEvent::Purchase(PurchaseIn {
            viewer,
            product,
            quantity,
        }) => {
            check_text(f("viewer"), &viewer, MAX_NAME_CHARS)?;
            check_text(f("product"), &product, MAX_NAME_CHARS)?;
            check_count(f("quantity"), quantity)?;
            (
                Some(Event::Purchase {
                    viewer,
                    product,
                    quantity,
                }),
                0,
            )
        }
        ApiEvent::OperatorCue(CueIn { text }) => {
            check_text(f("text"), &text, MAX_TEXT_CHARS)?;
            (Some(Event::OperatorCue { text }), 0)
        }
    })
}

#[derive(Deserialize)]
pub struct PostQuery {
    /// Hold the request until every event is answered (or dropped), and return the replies.
    #[serde(default)]
    wait: bool,
}

/// `POST /v1/streams/{id}/events`: one event object, or `{"events": [...]}`. All events are
/// validated before any is queued; a request that does not fit the queue is refused whole
/// with 429 (nothing queued), except that a full queue lets a more important event evict a
/// less important one.
pub async fn post_events(
    State(app): State<Arc<App>>,
    id: std::result::Result<Path<String>, PathRejection>,
    Query(q): Query<PostQuery>,
    b: std::result::Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Value>)> {
    let id = path_param(id, "id")?;
    let b = body(b)?;
    let s = app.stream(&id)?;
    let v: Value = parse(&b)?;
    if !v.is_object() {
        return Err(ServeError::bad(
            "body",
            "expected a JSON object: one event ({\"type\": \"comment\", ...}) or {\"events\": [...]}",
        ));
    }
    let (raw, prefix): (Vec<Value>, bool) = if v.get("events").is_some() {
        let r: EventsRequest = parse_value(v, "")?;
        (r.events, true)
    } else {
        (vec![v], false)
    };
    if raw.is_empty() {
        return Err(ServeError::bad("events", "empty; send at least one event"));
    }
    if raw.len() > MAX_EVENTS_PER_REQUEST {
        return Err(ServeError::bad(
            "events",
            format!(
                "{} events; at most {MAX_EVENTS_PER_REQUEST} per request",
                raw.len()
            ),
        ));
    }
    let mut events = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        let at = if prefix {
            format!("events[{i}]")
        } else {
            String::new()
        };
        let e = parse_event(r, &at)?;
        let at = if at.is_empty() { at } else { format!("{at}.") };
        events.push(validate(e, &at)?);
    }
    let rx = q.wait.then(|| s.subscribe(None).1);
    let now = Instant::now();
    let mut accepted = Vec::new();
    {
        let mut queue = s.queue();
        let needs_room = events.iter().filter(|(e, _)| e.is_some()).count();
        if needs_room > queue.room() && needs_room > 1 {
            drop(queue);
            s.inner().meta.counters.rejected_full += needs_room as u64;
            app.metrics.reject("queue_full");
            return Err(ServeError::Overloaded(format!(
                "stream `{id}` has room for {} more events, not {needs_room}; retry later",
                s.queue().room()
            )));
        }
        // Likes are counted only once every event of the request is in: a request refused
        // with 429 changes nothing, so the client's retry does not count its likes twice.
        let mut likes_at: Vec<(usize, u32)> = Vec::new();
        for (event, likes) in events {
            let Some(event) = event else {
                likes_at.push((accepted.len(), likes));
                accepted.push(Value::Null);
                continue;
            };
            let eid = s.inner().next_id();
            match queue.push(eid, event.clone(), now) {
                Ok((admission, dropped)) => {
                    {
                        let mut g = s.inner();
                        g.meta.counters.received += 1;
                        match admission {
                            Admission::Merged { .. } => g.meta.counters.merged += 1,
                            Admission::Folded { .. } => g.meta.counters.folded += 1,
                            _ => {}
                        }
                    }
                    match admission {
                        Admission::Merged { .. } => {
                            app.metrics.merged.inc();
                        }
                        Admission::Folded { .. } => {
                            app.metrics.folded.inc();
                        }
                        _ => {}
                    }
                    accepted.push(json!({"id": eid, "admission": admission}));
                    s.emit(Body::Accepted {
                        id: eid,
                        event,
                        admission,
                    });
                    if let Some(d) = dropped {
                        app.metrics.dropped(std::slice::from_ref(&d));
                        s.report_dropped(vec![d]);
                    }
                }
                Err(class) => {
                    s.inner().meta.counters.rejected_full += 1;
                    app.metrics.reject("queue_full");
                    drop(queue);
                    return Err(ServeError::Overloaded(format!(
                        "stream `{id}`'s queue is full of events at least as important as this {} event; retry later",
                        class.as_str()
                    )));
                }
            }
        }
        let mut g = s.inner();
        for (at, likes) in likes_at {
            g.meta.counters.likes += likes as u64;
            accepted[at] = json!({"status": "counted", "likes": g.meta.counters.likes});
        }
    }
    if app.tx.send(Command::Wake).is_err() {
        return Err(ServeError::ShuttingDown);
    }
    let Some(rx) = rx else {
        return Ok((StatusCode::ACCEPTED, Json(json!({"accepted": accepted}))));
    };
    // an event merged or folded into a waiting one is answered (or dropped, or failed) with
    // it, whether or not that one lists it (it lists at most MAX_LISTED)
    let ids: Vec<(u64, u64)> = accepted
        .iter()
        .filter_map(|a| {
            let id = a["id"].as_u64()?;
            Some((id, a["admission"]["into"].as_u64().unwrap_or(id)))
        })
        .collect();
    let results = wait_for(rx, &ids, app.cfg.request_timeout).await;
    Ok((
        StatusCode::OK,
        Json(json!({"accepted": accepted, "results": results})),
    ))
}

/// Follows the log until every id is answered, dropped or failed (or the time is up). `ids`
/// pairs each event with the waiting event it went into (itself, unless merged or folded).
async fn wait_for(
    mut rx: tokio::sync::broadcast::Receiver<Arc<OutEvent>>,
    ids: &[(u64, u64)],
    timeout: Duration,
) -> Vec<Value> {
    let mut open: HashSet<u64> = ids.iter().map(|&(id, _)| id).collect();
    let mut out: HashMap<u64, Value> = HashMap::new();
    let deadline = tokio::time::Instant::now() + timeout;
    while !open.is_empty() {
        let ev = match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Ok(ev)) => ev,
            Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => continue,
            _ => break,
        };
        let (covered, v): (Vec<u64>, Value) = match &ev.body {
            Body::Reply { answers, .. } => (
                answers.clone(),
                serde_json::to_value(&*ev).unwrap_or_default(),
            ),
            Body::Dropped(d) => (
                std::iter::once(d.id)
                    .chain(d.merged.iter().copied())
                    .collect(),
                serde_json::to_value(&*ev).unwrap_or_default(),
            ),
            // a failed reply fails the events merged or folded into it too
            Body::Error {
                id: Some(id),
                answers,
                ..
            } => (
                std::iter::once(*id)
                    .chain(answers.iter().copied())
                    .collect(),
                serde_json::to_value(&*ev).unwrap_or_default(),
            ),
            _ => continue,
        };
        let head = covered.first().copied();
        for &(id, into) in ids {
            if (covered.contains(&id) || Some(into) == head) && open.remove(&id) {
                out.insert(id, v.clone());
            }
        }
    }
    ids.iter()
        .map(|(id, _)| {
            out.remove(id)
                .unwrap_or_else(|| json!({"type": "pending", "id": id, "message": "not answered within the request timeout; follow GET /v1/streams/{id}/events"}))
        })
        .collect()
}

#[derive(Deserialize)]
pub struct SseQuery {
    after: Option<u64>,
}

fn sse_event(ev: &OutEvent) -> SseEvent {
    let data = serde_json::to_string(ev).unwrap_or_else(|_| "{}".into());
    let kind = serde_json::to_value(&ev.body)
        .ok()
        .and_then(|v| v["type"].as_str().map(str::to_string))
        .unwrap_or_else(|| "event".into());
    SseEvent::default()
        .id(ev.seq.to_string())
        .event(kind)
        .data(data)
}

/// `GET /v1/streams/{id}/events`: every log entry as an SSE event (`event:` its type, `id:`
/// its sequence number). Reconnect with `Last-Event-ID` or `?after=SEQ` to replay what was
/// missed (the last 512 entries are kept).
pub async fn sse(
    State(app): State<Arc<App>>,
    id: std::result::Result<Path<String>, PathRejection>,
    Query(q): Query<SseQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl FStream<Item = std::result::Result<SseEvent, Infallible>>>> {
    let s = app.stream(&path_param(id, "id")?)?;
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let (replay, rx) = s.subscribe(q.after.or(last));
    let after = replay
        .last()
        .map(|e| e.seq)
        .or(q.after.or(last))
        .unwrap_or(0);
    let replayed = stream::iter(replay.into_iter().map(|e| Ok(sse_event(&e))));
    let live = BroadcastStream::new(rx).filter_map(move |r| async move {
        match r {
            Ok(ev) if ev.seq > after => Some(Ok(sse_event(&ev))),
            Ok(_) => None,
            Err(BroadcastStreamRecvError::Lagged(n)) => Some(Ok(SseEvent::default()
                .event("lagged")
                .data(json!({"missed": n, "message": "this client fell behind; reconnect with Last-Event-ID to replay"}).to_string()))),
        }
    });
    let mut closing = app.closing.subscribe();
    let closed = async move {
        let _ = closing.wait_for(|c| *c).await;
    };
    Ok(Sse::new(replayed.chain(live).take_until(closed)).keep_alive(KeepAlive::default()))
}
