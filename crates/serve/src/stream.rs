//! A live stream as the server holds it: its waiting events, what it has said, its
//! counters, and the event log clients follow over SSE. The stream's world (catalog and
//! what tools changed) lives with the engine worker and is saved beside `meta.json` in the
//! stream's folder after every reply, so a restart loses nothing.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use hat_tasks::task::Turn;
use hat_world::Event;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::error::{Result, ServeError};
use crate::triage::{Admission, Class, Dropped, Queue, TriageConfig, Vocabulary};

/// Events kept for clients that (re)connect with `Last-Event-ID` or `?after=`.
pub const REPLAY: usize = 512;
/// Earlier turns shown to the model (the training data has at most one).
pub const HISTORY_TURNS: usize = 2;
/// Recent activity lines shown to the model (joins, gifts).
pub const RECENT_LINES: usize = 3;

pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Where one reply's time went, in seconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    /// Waiting in the stream's queue.
    pub queue: f64,
    /// Prompt processing (all model turns).
    pub prefill: f64,
    /// Token generation (all model turns).
    pub decode: f64,
    /// Tool calls, hooks and the loop's own work.
    pub tools_hooks: f64,
    /// From the event's arrival to the reply.
    pub total: f64,
}

/// What the host did, as clients see it over SSE.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Body {
    /// An event was accepted (queued, merged into a waiting duplicate, or folded).
    Accepted {
        id: u64,
        event: Event,
        #[serde(flatten)]
        admission: Admission,
    },
    /// A waiting event (and what merged into it) will not be answered.
    Dropped(Dropped),
    Like {
        viewer: String,
        likes: u64,
    },
    /// The host started on an event.
    Started {
        id: u64,
        /// Events answered by this reply (merged duplicates, folded joins).
        answers: Vec<u64>,
        /// Events it answers past the listed ones (see [`crate::triage::MAX_LISTED`]).
        #[serde(skip_serializing_if = "is_zero")]
        unlisted: u64,
        event: Event,
        class: Class,
        harness: String,
    },
    /// New text of the model turn `index` as it is decoded (on models that stream: the
    /// embedded engine); the whole turn follows as [`Body::Turn`]. Like the turn, it is the
    /// draft: what viewers see is the [`Body::Reply`] after reply hooks.
    Delta {
        id: u64,
        index: usize,
        text: String,
    },
    /// One model turn as generated (tool calls in the harness's syntax, or the draft reply
    /// before reply hooks review it).
    Turn {
        id: u64,
        index: usize,
        text: String,
        prompt_tokens: usize,
        cached_tokens: usize,
        generated_tokens: usize,
        seconds: f64,
    },
    ToolResult {
        id: u64,
        name: String,
        result: String,
    },
    Hook {
        id: u64,
        hook: String,
        outcome: String,
    },
    /// The reply viewers see (after reply hooks).
    Reply {
        id: u64,
        answers: Vec<u64>,
        #[serde(skip_serializing_if = "is_zero")]
        unlisted: u64,
        text: String,
        harness: String,
        tool_calls: Vec<String>,
        errors: Vec<String>,
        latency: Latency,
    },
    /// No reply: the event `id` (and every event in `answers`, the ones merged or folded
    /// into it, which this failure leaves unanswered too) failed.
    Error {
        id: Option<u64>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        answers: Vec<u64>,
        #[serde(skip_serializing_if = "is_zero")]
        unlisted: u64,
        message: String,
    },
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One entry of the event log.
#[derive(Debug, Clone, Serialize)]
pub struct OutEvent {
    pub seq: u64,
    /// Unix time, seconds.
    pub at: f64,
    #[serde(flatten)]
    pub body: Body,
}

/// Counts shown in the stream's state and the server's metrics.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Counters {
    pub received: u64,
    pub replied: u64,
    pub merged: u64,
    pub folded: u64,
    pub dropped_stale: u64,
    pub dropped_evicted: u64,
    /// Still waiting when the server stopped (a `meta.json` from before it reads 0).
    #[serde(default)]
    pub dropped_shutdown: u64,
    pub rejected_full: u64,
    pub likes: u64,
    pub errors: u64,
}

/// What is saved in `meta.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    pub id: String,
    pub seed: Option<u64>,
    pub created_at: f64,
    pub counters: Counters,
    pub history: VecDeque<Turn>,
    pub recent: VecDeque<String>,
    pub next_event: u64,
    pub next_seq: u64,
    /// The world's live state after the last reply (on stage, pins, flash sales).
    pub state: serde_json::Value,
}

pub struct Inner {
    pub meta: Meta,
    pub in_flight: Option<u64>,
    ring: VecDeque<Arc<OutEvent>>,
    /// Event ids and log sequence numbers handed out up to these are on disk in `ids.json`.
    reserved: Reserved,
    /// The stream's folder, for `ids.json`.
    dir: PathBuf,
}

/// Event ids and log sequence numbers are handed out in 202 answers and SSE `id:` lines
/// long before `meta.json` is saved (after a reply). A server killed in between would hand
/// the same ones out again after its restart, and a client resuming with `Last-Event-ID`
/// would silently miss the new events. So blocks of [`RESERVE`] are reserved in `ids.json`
/// before any of them is handed out (one small write per block), and a restored stream
/// goes on after its last reserved block: ids may skip after a crash, never repeat.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Reserved {
    pub event: u64,
    pub seq: u64,
}

/// Ids reserved per write of `ids.json`.
pub const RESERVE: u64 = 1024;

/// The file the reserved blocks are kept in, beside `meta.json`.
pub const IDS_FILE: &str = "ids.json";

impl Inner {
    pub fn next_id(&mut self) -> u64 {
        self.meta.next_event += 1;
        if self.meta.next_event > self.reserved.event {
            self.reserved.event = self.meta.next_event + RESERVE;
            self.save_reserved();
        }
        self.meta.next_event
    }

    fn next_seq(&mut self) -> u64 {
        self.meta.next_seq += 1;
        if self.meta.next_seq > self.reserved.seq {
            self.reserved.seq = self.meta.next_seq + RESERVE;
            self.save_reserved();
        }
        self.meta.next_seq
    }

    /// Written under the stream's lock, so writes of `ids.json` never interleave. A failure
    /// is logged, not fatal: the stream goes on, with only `meta.json` to restore from.
    fn save_reserved(&self) {
        let written = serde_json::to_vec(&self.reserved)
            .map_err(|e| ServeError::internal("encoding the reserved ids", e))
            .and_then(|b| write_atomic(&self.dir.join(IDS_FILE), &b));
        if let Err(e) = written {
            tracing::warn!(dir = %self.dir.display(), error = %e, "could not reserve event ids");
        }
    }
}

/// Moves a restored stream's counters past every id its last server could have handed out
/// (see [`Reserved`]); a missing or unreadable `ids.json` leaves them as `meta.json` has
/// them.
pub fn restore_ids(dir: &Path, meta: &mut Meta) {
    let Ok(bytes) = std::fs::read(dir.join(IDS_FILE)) else {
        return;
    };
    let Ok(r) = serde_json::from_slice::<Reserved>(&bytes) else {
        tracing::warn!(dir = %dir.display(), "{IDS_FILE} does not parse; ids go on from meta.json");
        return;
    };
    meta.next_event = meta.next_event.max(r.event);
    meta.next_seq = meta.next_seq.max(r.seq);
}

/// A stream shared by the HTTP handlers and the engine worker.
pub struct Stream {
    pub id: String,
    pub dir: PathBuf,
    queue: Mutex<Queue>,
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<OutEvent>>,
}

impl Stream {
    /// A stream whose triage classes comments by `vocabulary` (its catalog's words) too.
    pub fn new(dir: PathBuf, meta: Meta, triage: TriageConfig, vocabulary: Vocabulary) -> Stream {
        let (tx, _) = broadcast::channel(REPLAY);
        let ids_dir = dir.clone();
        Stream {
            id: meta.id.clone(),
            dir,
            queue: Mutex::new(Queue::with_vocabulary(triage, vocabulary)),
            inner: Mutex::new(Inner {
                // what meta.json says is handed out is reserved: the next id reserves more
                reserved: Reserved {
                    event: meta.next_event,
                    seq: meta.next_seq,
                },
                meta,
                in_flight: None,
                ring: VecDeque::new(),
                dir: ids_dir,
            }),
            tx,
        }
    }

    pub fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends to the event log and sends it to every subscriber.
    pub fn emit(&self, body: Body) {
        self.send(body, true);
    }

    /// Sends to the subscribers connected now, outside the event log that a new subscriber
    /// replays: decoded text ([`Body::Delta`]), which the turn's own event repeats whole, would
    /// otherwise push a few replies' worth of it out of the log's [`REPLAY`] entries.
    pub fn emit_live(&self, body: Body) {
        self.send(body, false);
    }

    fn send(&self, body: Body, logged: bool) {
        let mut g = self.inner();
        let seq = g.next_seq();
        let ev = Arc::new(OutEvent {
            seq,
            at: unix_now(),
            body,
        });
        if logged {
            if g.ring.len() == REPLAY {
                g.ring.pop_front();
            }
            g.ring.push_back(ev.clone());
        }
        // no subscriber is fine: the ring keeps a logged event for the next one
        let _ = self.tx.send(ev);
    }

    /// Subscribes, with the logged events after `after` to replay first.
    pub fn subscribe(
        &self,
        after: Option<u64>,
    ) -> (Vec<Arc<OutEvent>>, broadcast::Receiver<Arc<OutEvent>>) {
        let g = self.inner();
        let rx = self.tx.subscribe();
        let replay = match after {
            Some(a) => g.ring.iter().filter(|e| e.seq > a).cloned().collect(),
            None => Vec::new(),
        };
        (replay, rx)
    }

    /// Records events that will not be answered.
    pub fn report_dropped(&self, dropped: Vec<Dropped>) {
        for d in dropped {
            {
                let mut g = self.inner();
                let n = 1 + d.merged.len() as u64 + d.unlisted;
                match d.reason {
                    crate::triage::DropReason::Stale => g.meta.counters.dropped_stale += n,
                    crate::triage::DropReason::Evicted => g.meta.counters.dropped_evicted += n,
                    crate::triage::DropReason::Shutdown => g.meta.counters.dropped_shutdown += n,
                }
            }
            self.emit(Body::Dropped(d));
        }
    }

    /// Writes `meta.json` (atomically: a temporary file renamed over it).
    pub fn save_meta(&self) -> Result<()> {
        let text = serde_json::to_vec_pretty(&self.inner().meta)
            .map_err(|e| ServeError::internal("encoding the stream state", e))?;
        write_atomic(&self.dir.join("meta.json"), &text)
    }
}

/// Writes `bytes` to `path` through a temporary file renamed over it, so a reader (or a
/// restart after a kill) sees the old content or the new, never a part. The temporary name is
/// unique per call, so two writers of the same file (a handler and the worker) never write
/// into one temporary file; the last rename wins.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp-{}-{n}", std::process::id()));
    std::fs::write(&tmp, bytes)
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            ServeError::internal(format!("writing {}", path.display()), e)
        })
}

/// What the stream's state shows of its world: on stage, flash sales, pins (`Null` when the
/// store cannot be read).
pub fn world_state(w: &hat_world::World) -> serde_json::Value {
    match w.try_stream_state() {
        Ok(s) => serde_json::json!({
            "on_stage": s.on_stage,
            "flash_sales": s.flash_sales,
            "pins": w.pins().unwrap_or_default(),
        }),
        Err(_) => serde_json::Value::Null,
    }
}

/// The line a join or gift leaves in the stream's recent activity.
pub fn activity_line(e: &Event) -> Option<String> {
    match e {
        Event::ViewerJoin { viewer } => Some(format!("{viewer} joined")),
        Event::Gift { viewer, gift, .. } => Some(format!("{viewer} sent a {gift}")),
        _ => None,
    }
}

/// A stream id: letters, digits, `-` and `_`, 1 to 64 characters (it names a folder).
pub fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_atomic_writes_of_one_file_leave_one_whole_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.json");
        let a = vec![b'a'; 64 * 1024];
        let b = vec![b'b'; 32 * 1024];
        std::thread::scope(|s| {
            for bytes in [&a, &b] {
                let path = &path;
                s.spawn(move || {
                    for _ in 0..50 {
                        write_atomic(path, bytes).unwrap();
                    }
                });
            }
        });
        let got = std::fs::read(&path).unwrap();
        assert!(
            got == a || got == b,
            "a mix of two writes: {} bytes",
            got.len()
        );
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
    }
}
