//! `hat env serve`: the HSA environment over HTTP, so an RL trainer elsewhere (TRL, verl, a
//! cluster) can train against the same tasks, augmented harness states, agent loop and scorer
//! that `hat train rl` uses.
//!
//! - `GET /v1/info`: the harness states (label, hash, call syntax) and the number of tasks.
//! - `POST /v1/reset` `{"task": i?, "state": j?, "seed": s?}`: starts an episode (task and state
//!   drawn from `seed` when not given, redrawn while the state cannot run the task); returns
//!   `session`, the task, the state, the seed, the harness's tools (OpenAI form) and the
//!   prompt messages.
//! - `POST /v1/step` `{"session": id, "text": "..."}`: the model's turn; returns the messages
//!   it caused (tool results, hook or parse feedback) and, at the end, `done` with the
//!   scorer's verdict (`reward` = fraction of components passed, `pass`, components, reason).
//!
//! Each episode runs on a thread that owns its world copy (so concurrent episodes never see
//! each other's tool calls), and is rolled back when it ends or sits idle past the timeout.

mod session;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rand::SeedableRng;
use serde::Deserialize;
use serde_json::{json, Value};

use hat_augment::Pool;
use hat_data::gen::State as HarnessState;
use hat_tasks::{Split, Task, TaskSet, WorldCache};

pub use session::{Observation, Verdict};

#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error("{0}")]
    Setup(String),
    #[error("serving: {0}")]
    Io(#[from] std::io::Error),
}

/// What the environment offers.
#[derive(Debug, Clone)]
pub struct EnvConfig {
    pub harness_dir: PathBuf,
    /// Augmented states besides the base harness, from `pool` and `variant_seed`.
    pub variants: usize,
    pub pool: Pool,
    pub variant_seed: u64,
    pub split: Split,
    pub tasks: usize,
    pub task_seed: u64,
    pub max_turns: usize,
    /// Episodes open at once, at most.
    pub max_sessions: usize,
    /// An episode without a step for this long is rolled back and forgotten.
    pub idle: Duration,
}

impl Default for EnvConfig {
    fn default() -> Self {
        Self {
            harness_dir: PathBuf::from("harnesses/livestream"),
            variants: 64,
            pool: Pool::Train,
            variant_seed: 3,
            split: Split::Train,
            tasks: 2000,
            task_seed: 3,
            max_turns: 5,
            max_sessions: 256,
            idle: Duration::from_secs(600),
        }
    }
}

/// Most tasks and augmented states an environment holds.
pub const MAX_TASKS: usize = 1_000_000;
pub const MAX_VARIANTS: usize = 10_000;

/// The tasks and harness states episodes draw from.
pub struct Catalogue {
    pub states: Vec<HarnessState>,
    pub tasks: Vec<Task>,
}

impl Catalogue {
    pub fn build(cfg: &EnvConfig) -> Result<Self, EnvError> {
        if cfg.tasks == 0 || cfg.tasks > MAX_TASKS || cfg.variants > MAX_VARIANTS {
            return Err(EnvError::Setup(format!(
                "{} tasks and {} variants: use 1 to {MAX_TASKS} tasks and at most {MAX_VARIANTS} \
                 variants (all are kept in memory)",
                cfg.tasks, cfg.variants
            )));
        }
        let states =
            hat_data::gen::states(&cfg.harness_dir, cfg.variants, cfg.pool, cfg.variant_seed)
                .map_err(|e| {
                    EnvError::Setup(format!("harness {}: {e}", cfg.harness_dir.display()))
                })?;
        let mut worlds = WorldCache::default();
        let tasks = TaskSet::generate(cfg.split, cfg.tasks, cfg.task_seed, &mut worlds)
            .map_err(|e| EnvError::Setup(format!("tasks: {e}")))?;
        Ok(Self { states, tasks })
    }
}

struct App {
    cfg: EnvConfig,
    cat: Arc<Catalogue>,
    sessions: Mutex<HashMap<u64, Sender<session::Cmd>>>,
    next: AtomicU64,
}

fn error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (status, Json(json!({"error": message.to_string()}))).into_response()
}

async fn info(State(app): State<Arc<App>>) -> Json<Value> {
    Json(json!({
        "tasks": app.cat.tasks.len(),
        "split": app.cfg.split.as_str(),
        "max_turns": app.cfg.max_turns,
        "states": app.cat.states.iter().enumerate().map(|(i, s)| json!({
            "index": i,
            "label": s.label,
            "hash": s.harness.hash,
            "call_syntax": s.harness.syntax.as_str(),
        })).collect::<Vec<_>>(),
    }))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ResetBody {
    task: Option<usize>,
    state: Option<usize>,
    seed: Option<u64>,
}

/// Largest request body (a step's text is one model turn; 2 MiB is far above any).
pub const MAX_BODY: usize = 2 * 1024 * 1024;

/// A request error naming the field at fault: `{"error": "session: invalid type ...",
/// "field": "session"}`.
fn bad_field(status: StatusCode, field: &str, message: impl std::fmt::Display) -> Response {
    (
        status,
        Json(json!({"error": format!("{field}: {message}"), "field": field})),
    )
        .into_response()
}

/// Parses a request body; an empty body is `T::default()` when `empty` allows it. Errors are
/// JSON and name the field (`session`, `text`), as serde_json's own message does not; a body
/// over [`MAX_BODY`] gets a JSON 413 (axum's own rejection is plain text).
fn body<T: serde::de::DeserializeOwned + Default>(
    bytes: Result<axum::body::Bytes, BytesRejection>,
    empty: bool,
) -> Result<T, Box<Response>> {
    let bytes = bytes.map_err(|e| {
        let status = e.status();
        Box::new(if status == StatusCode::PAYLOAD_TOO_LARGE {
            bad_field(
                status,
                "body",
                format!("over the {MAX_BODY}-byte limit; send a smaller request"),
            )
        } else {
            bad_field(status, "body", e.body_text())
        })
    })?;
    if empty && bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    use serde_json::error::Category;
    let reply = |field: &str, inner: serde_json::Error| {
        let syntax = matches!(
            inner.classify(),
            Category::Syntax | Category::Eof | Category::Io
        );
        let (field, message) = if syntax {
            ("body", format!("not valid JSON: {inner}"))
        } else {
            (field, inner.to_string())
        };
        Box::new(bad_field(StatusCode::UNPROCESSABLE_ENTITY, field, message))
    };
    let de = &mut serde_json::Deserializer::from_slice(&bytes);
    let v = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." || path == "?" {
            "body".to_string()
        } else {
            path
        };
        reply(&field, e.into_inner())
    })?;
    // trailing text after the object is refused, as serde_json::from_slice does
    de.end().map_err(|e| reply("body", e))?;
    Ok(v)
}

async fn reset(
    State(app): State<Arc<App>>,
    bytes: Result<axum::body::Bytes, BytesRejection>,
) -> Response {
    let b: ResetBody = match body(bytes, true) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    // The episode's id, and the default seed, come from one fetch_add: the seed used to be
    // read with a load before the counter advanced, so concurrent unseeded resets shared a
    // seed and drew the same episode.
    let id = app.next.fetch_add(1, Ordering::Relaxed) + 1;
    let seed = b.seed.unwrap_or_else(|| id.wrapping_mul(0x9E37_79B9));
    let (n_tasks, n_states) = (app.cat.tasks.len(), app.cat.states.len());
    let out_of_range = |i: &Option<usize>, n| i.is_some_and(|i| i >= n);
    if out_of_range(&b.task, n_tasks) || out_of_range(&b.state, n_states) {
        let shown = |i: Option<usize>| i.map_or("random".to_string(), |i| i.to_string());
        return error(
            StatusCode::BAD_REQUEST,
            format!(
                "task {} / state {}: there are {n_tasks} tasks and {n_states} states (GET /v1/info)",
                shown(b.task),
                shown(b.state)
            ),
        );
    }
    let pick = session::Pick {
        task: b.task,
        state: b.state,
        rng: rand_chacha::ChaCha8Rng::seed_from_u64(seed),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let mut s = app.sessions.lock().unwrap_or_else(|e| e.into_inner());
        // sessions whose thread ended (done or idle) no longer count
        s.retain(|_, tx| tx.send(session::Cmd::Ping).is_ok());
        if s.len() >= app.cfg.max_sessions {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "{} episodes open (the --max-sessions limit); finish some first",
                    s.len()
                ),
            );
        }
        // The slot is taken under the same lock as the count (concurrent resets raced past
        // the limit between the check and the insert).
        s.insert(id, tx.clone());
    }
    let release = || {
        app.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    };
    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    let (cat, turns, idle) = (app.cat.clone(), app.cfg.max_turns, app.cfg.idle);
    let spawned = std::thread::Builder::new()
        .name(format!("hat-env-{id}"))
        .spawn(move || session::run(cat, pick, turns, idle, rx, first_tx));
    if let Err(e) = spawned {
        release();
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("starting the episode: {e}"),
        );
    }
    let session::Started { obs, task, state } = match first_rx.await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            release();
            return error(StatusCode::UNPROCESSABLE_ENTITY, e);
        }
        Err(_) => {
            release();
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the episode ended at its start",
            );
        }
    };
    drop(tx);
    if obs.done {
        release();
    }
    let t = &app.cat.tasks[task];
    let h = &app.cat.states[state].harness;
    Json(json!({
        "session": id,
        "task": task,
        "task_id": t.id,
        "task_type": t.kind.as_str(),
        "state": state,
        "seed": seed,
        "harness_hash": h.hash,
        "call_syntax": h.syntax.as_str(),
        "tools": h.openai_tools(),
        "messages": obs.messages,
        "done": obs.done,
    }))
    .into_response()
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct StepBody {
    session: u64,
    text: String,
}

async fn step(
    State(app): State<Arc<App>>,
    bytes: Result<axum::body::Bytes, BytesRejection>,
) -> Response {
    let b: StepBody = match body(bytes, false) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let tx = app
        .sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&b.session)
        .cloned();
    let Some(tx) = tx else {
        return error(
            StatusCode::NOT_FOUND,
            format!(
                "no open episode {} (finished, idle too long, or never started)",
                b.session
            ),
        );
    };
    let (reply_tx, reply_rx) = tokio::sync::oneshot::channel();
    let gone = || {
        app.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&b.session);
        error(
            StatusCode::NOT_FOUND,
            format!("episode {} ended (idle too long)", b.session),
        )
    };
    if tx.send(session::Cmd::Step(b.text, reply_tx)).is_err() {
        return gone();
    }
    match reply_rx.await {
        Ok(Ok(obs)) => {
            if obs.done {
                app.sessions
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&b.session);
            }
            Json(obs).into_response()
        }
        Ok(Err(e)) => {
            app.sessions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&b.session);
            error(StatusCode::INTERNAL_SERVER_ERROR, e)
        }
        Err(_) => gone(),
    }
}

/// The HTTP routes.
pub fn router(cfg: EnvConfig, cat: Catalogue) -> Router {
    let app = Arc::new(App {
        cfg,
        cat: Arc::new(cat),
        sessions: Mutex::new(HashMap::new()),
        next: AtomicU64::new(0),
    });
    Router::new()
        .route("/v1/info", get(info))
        .route("/v1/reset", post(reset))
        .route("/v1/step", post(step))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(app)
}

/// Serves until `shutdown` resolves, with [`hat_http`]'s default limits on slow clients and
/// open connections (a trainer elsewhere on the network reaches it like any client).
pub async fn serve(
    router: Router,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), EnvError> {
    hat_http::serve_until(listener, router, hat_http::Limits::default(), shutdown).await;
    Ok(())
}

/// A server on a thread of its own (tests, embedding); stops when dropped.
pub struct Background {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    pub fn start(router: Router, addr: SocketAddr) -> Result<Self, EnvError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let listener = rt.block_on(tokio::net::TcpListener::bind(addr))?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("hat-env".into())
            .spawn(move || {
                let _ = rt.block_on(serve(router, listener, async {
                    let _ = stopped.await;
                }));
            })?;
        Ok(Self {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
