//! The server's shared state, its start-up (streams restored from the data folder, the
//! engine worker started) and its shutdown (in-flight replies finish, state is saved).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hat_agent::episode::{CallCheck, ChatModel, EpisodeConfig};
use hat_world::World;

use crate::error::{Result, ServeError};
use crate::harnesses::{Harnesses, Version};
use crate::metrics::Metrics;
use crate::stream::{valid_id, Meta, Stream};
use crate::triage::{TriageConfig, Vocabulary};
use crate::worker::{Command, Worker, WorkerConfig};

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Streams (`streams/<id>/{world.sqlite,meta.json}`) and uploaded harnesses.
    pub data_dir: PathBuf,
    pub triage: TriageConfig,
    pub max_streams: usize,
    /// Streams answered together in one engine batch.
    pub max_batch: usize,
    /// Token limit of one agent turn.
    pub max_tokens: u32,
    pub max_turns: usize,
    /// A reply's last allowed turn must answer the viewer, not call a tool (see
    /// `hat_agent::episode::EpisodeConfig::final_reply`).
    pub final_reply: bool,
    /// How calls are held to the active harness at decode time (see
    /// `hat_agent::episode::CallCheck`).
    pub calls: CallCheck,
    /// An answer that falls into a loop ends after the loop's first copy (see
    /// `hat_agent::ChatModel::stop_loops`), for every model of the server.
    pub stop_loops: bool,
    /// `Authorization: Bearer <key>` required on `/v1/*` when set.
    pub api_key: Option<String>,
    /// A request waiting on the model longer than this fails with 504.
    pub request_timeout: Duration,
    /// A harness folder to watch: a valid change is swapped in live.
    pub watch: Option<PathBuf>,
    pub watch_interval: Duration,
    /// The name `/v1/models` lists.
    pub model_name: String,
    /// Largest JSON body.
    pub max_body_bytes: usize,
    /// Chat-completion requests waiting at most.
    pub max_chat_queue: usize,
    /// Checked before every live swap (upload, path, watch; not rollbacks).
    pub gate: Option<crate::harnesses::Gate>,
    /// A stream created at start-up when it does not exist yet (id, catalog seed), so a
    /// first comment can be posted right away.
    pub default_stream: Option<(String, u64)>,
    /// Folders `POST /v1/harness {"path"}` may activate a harness from (besides `data_dir`):
    /// a client must not make the server read, or list, any folder it can name.
    pub harness_roots: Vec<PathBuf>,
    /// Evaluation and training runs shown by `GET /v1/runs` (the console's charts).
    pub runs_dir: Option<PathBuf>,
    /// How long a shutdown waits for open connections (a client sending its body a byte at
    /// a time, a response nobody reads) before closing them and stopping anyway.
    pub shutdown_grace: Duration,
    /// What a client may hold open: deadlines for a request's headers (also closing an idle
    /// keep-alive) and its body (408 past it; the largest upload, 16 MiB, needs ~300 KB/s at
    /// the default 60 s), and the most open connections.
    pub connections: hat_http::Limits,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            data_dir: PathBuf::from("runs/serve"),
            triage: TriageConfig::default(),
            max_streams: 256,
            max_batch: 8,
            max_tokens: 256,
            max_turns: 5,
            final_reply: true,
            calls: CallCheck::Grammar,
            stop_loops: true,
            api_key: None,
            request_timeout: Duration::from_secs(120),
            watch: None,
            watch_interval: Duration::from_secs(2),
            model_name: "hat".into(),
            max_body_bytes: 1 << 20,
            max_chat_queue: 64,
            gate: None,
            default_stream: None,
            harness_roots: Vec::new(),
            runs_dir: None,
            shutdown_grace: Duration::from_secs(30),
            connections: hat_http::Limits::default(),
        }
    }
}

/// State shared by every handler.
pub struct App {
    pub cfg: ServeConfig,
    pub streams: RwLock<HashMap<String, Arc<Stream>>>,
    pub harnesses: Arc<Harnesses>,
    /// Live A/B experiments over harness versions.
    pub experiments: Arc<crate::experiments::Experiments>,
    pub metrics: Arc<Metrics>,
    pub tx: Sender<Command>,
    /// Chat requests accepted and not yet done with (see [`crate::worker::ChatPlace`]).
    pub chat_waiting: Arc<AtomicUsize>,
    pub stop: Arc<AtomicBool>,
    /// Turns true when shutdown starts: open event streams (SSE) end, so a graceful shutdown
    /// does not wait forever on a console or client that keeps following a stream.
    pub closing: tokio::sync::watch::Sender<bool>,
    /// Serialises stream creation (id choice and folder).
    pub create_lock: tokio::sync::Mutex<()>,
    /// One regression-gate run at a time: a run is a whole evaluation (minutes), and retried
    /// clicks would queue runs on the blocking pool that nothing cancels.
    pub gate_slot: Arc<tokio::sync::Semaphore>,
    /// An exclusive lock on `<data_dir>/.lock`, held while the server lives: two servers on one
    /// data folder would overwrite each other's streams.
    pub data_lock: std::fs::File,
}

impl App {
    pub fn stream(&self, id: &str) -> Result<Arc<Stream>> {
        self.streams
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| {
                ServeError::NotFound(format!(
                    "no stream `{}`; create one with POST /v1/streams",
                    hat_harness::text::viewer_text(id, 64)
                ))
            })
    }

    pub fn streams_dir(&self) -> PathBuf {
        self.cfg.data_dir.join("streams")
    }

    /// Creates stream `id` (its folder must not exist yet): a catalog generated from `seed`,
    /// or the `hat world gen` store in `store`. Blocking (SQLite and files).
    pub fn new_stream(
        &self,
        id: String,
        seed: Option<u64>,
        store: Option<&[u8]>,
    ) -> Result<serde_json::Value> {
        let dir = self.streams_dir().join(&id);
        let world = match (seed, store) {
            (Some(s), _) => {
                World::generate(s).map_err(|e| ServeError::internal("generating the world", e))?
            }
            (None, store) => {
                let tmp = dir.with_extension("upload.sqlite");
                std::fs::write(&tmp, store.unwrap_or_default())
                    .map_err(|e| ServeError::internal("saving the upload", e))?;
                let w = World::open(&tmp);
                let _ = std::fs::remove_file(&tmp);
                w.map_err(|e| {
                    ServeError::bad(
                        "body",
                        format!("not a stream store from `hat world gen`: {e}"),
                    )
                })?
            }
        };
        std::fs::create_dir_all(&dir)
            .map_err(|e| ServeError::internal(format!("creating {}", dir.display()), e))?;
        let cleanup = |e: ServeError| {
            let _ = std::fs::remove_dir_all(&dir);
            e
        };
        world
            .save(dir.join("world.sqlite"))
            .map_err(|e| cleanup(ServeError::internal("saving the world", e)))?;
        let state = crate::stream::world_state(&world);
        let meta = Meta {
            id: id.clone(),
            seed,
            created_at: crate::stream::unix_now(),
            counters: Default::default(),
            history: Default::default(),
            recent: Default::default(),
            next_event: 0,
            next_seq: 0,
            state: state.clone(),
        };
        let vocabulary = Vocabulary::from_catalog(world.catalog());
        let stream = Arc::new(Stream::new(dir.clone(), meta, self.cfg.triage, vocabulary));
        stream.save_meta().map_err(cleanup)?;
        let summary = serde_json::json!({"id": id, "seed": seed, "title": world.stream().title, "state": state});
        self.add_stream(stream, world)?;
        Ok(summary)
    }

    /// Registers a stream and hands its world to the worker.
    pub fn add_stream(&self, stream: Arc<Stream>, world: World) -> Result<()> {
        let mut map = self.streams.write().unwrap_or_else(|e| e.into_inner());
        map.insert(stream.id.clone(), stream.clone());
        self.metrics.streams.set(map.len() as i64);
        if self.tx.send(Command::Add(stream, Box::new(world))).is_err() {
            return Err(ServeError::ShuttingDown);
        }
        Ok(())
    }
}

/// A started server: the state and the engine worker's thread.
pub struct Server {
    pub app: Arc<App>,
    worker: std::thread::JoinHandle<()>,
    /// More routes served beside the API (the operator console's pages).
    extra: Option<axum::Router>,
}

impl Server {
    /// Restores the streams saved in the data folder and starts the engine worker.
    pub fn start(
        cfg: ServeConfig,
        model: Box<dyn ChatModel + Send>,
        harness: Version,
    ) -> Result<Server> {
        Server::start_with_arm_models(cfg, model, Vec::new(), harness)
    }

    /// [`Server::start`] with more models that live experiments' arms may use, by name
    /// (`{"model": NAME}` in an arm); the served model answers everything else.
    pub fn start_with_arm_models(
        cfg: ServeConfig,
        model: Box<dyn ChatModel + Send>,
        arm_models: Vec<(String, Box<dyn ChatModel + Send>)>,
        harness: Version,
    ) -> Result<Server> {
        let mut names = vec![cfg.model_name.clone()];
        for (n, _) in &arm_models {
            if !hat_ab::config::valid_name(n) || names.contains(n) {
                return Err(ServeError::bad(
                    "arm_models",
                    format!(
                        "arm model name `{}`: give each model a unique name of 1 to 64 letters, \
                         digits, `-`, `_` or `.`, other than the served model's",
                        hat_harness::text::truncate_chars(n, 64)
                    ),
                ));
            }
            names.push(n.clone());
        }
        let dirs = [cfg.data_dir.join("streams"), cfg.data_dir.join("harnesses")];
        for d in &dirs {
            std::fs::create_dir_all(d)
                .map_err(|e| ServeError::internal(format!("creating {}", d.display()), e))?;
        }
        let lock_path = cfg.data_dir.join(".lock");
        let data_lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| ServeError::internal(format!("opening {}", lock_path.display()), e))?;
        if data_lock.try_lock().is_err() {
            return Err(ServeError::bad(
                "data_dir",
                format!(
                    "{} is in use by another hat serve; give each server its own --data-dir",
                    cfg.data_dir.display()
                ),
            ));
        }
        let metrics = Arc::new(Metrics::new());
        let (harnesses, notes) = Harnesses::restore(harness, &cfg.data_dir);
        for n in notes {
            tracing::info!("harness history: {n}");
        }
        let harnesses = Arc::new(harnesses);
        metrics.set_harness(harnesses.active().hash());
        let experiments = Arc::new(crate::experiments::Experiments::open(
            &cfg.data_dir,
            &harnesses,
            names,
        )?);
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let mut model = model;
        model.set_max_tokens(cfg.max_tokens);
        // an episode's next turn (after a tool result) continues its last prompt
        model.keep_conversations_cached(true);
        model.stop_loops(cfg.stop_loops);
        let arm_models: Vec<Box<dyn ChatModel + Send>> = arm_models
            .into_iter()
            .map(|(_, mut m)| {
                m.set_max_tokens(cfg.max_tokens);
                m.keep_conversations_cached(true);
                m.stop_loops(cfg.stop_loops);
                m
            })
            .collect();
        let worker = Worker {
            model,
            arm_models,
            harnesses: harnesses.clone(),
            experiments: experiments.clone(),
            metrics: metrics.clone(),
            cfg: WorkerConfig {
                max_batch: cfg.max_batch,
                episode: EpisodeConfig {
                    max_turns: cfg.max_turns,
                    keep_changes: true,
                    final_reply: cfg.final_reply,
                    calls: cfg.calls,
                },
                max_tokens: cfg.max_tokens,
            },
            rx,
            stop: stop.clone(),
        };
        let handle = std::thread::Builder::new()
            .name("hat-engine".into())
            .spawn(move || worker.run())
            .map_err(|e| ServeError::internal("starting the engine worker", e))?;
        let app = Arc::new(App {
            cfg,
            streams: RwLock::new(HashMap::new()),
            harnesses,
            experiments,
            metrics,
            tx,
            chat_waiting: Arc::new(AtomicUsize::new(0)),
            stop,
            closing: tokio::sync::watch::channel(false).0,
            create_lock: tokio::sync::Mutex::new(()),
            gate_slot: Arc::new(tokio::sync::Semaphore::new(1)),
            data_lock,
        });
        let restored = restore(&app)?;
        if restored > 0 {
            tracing::info!(
                streams = restored,
                "restored streams from {}",
                app.streams_dir().display()
            );
        }
        if let Some((id, seed)) = app.cfg.default_stream.clone() {
            if !valid_id(&id) {
                return Err(ServeError::bad(
                    "default stream",
                    "1 to 64 letters, digits, `-` or `_`",
                ));
            }
            let known = app
                .streams
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .contains_key(&id);
            if !known && !app.streams_dir().join(&id).exists() {
                app.new_stream(id, Some(seed), None)?;
            }
        }
        Ok(Server {
            app,
            worker: handle,
            extra: None,
        })
    }

    /// Serves `routes` beside the API (routes without state, e.g. static pages that call
    /// the API like any client).
    pub fn with_routes(mut self, routes: axum::Router) -> Self {
        self.extra = Some(match self.extra.take() {
            Some(r) => r.merge(routes),
            None => routes,
        });
        self
    }

    /// Serves on `listener` until `shutdown` resolves, then lets in-flight replies finish and
    /// stops the worker.
    pub async fn run(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        let mut router = crate::api::router(self.app.clone());
        if let Some(extra) = self.extra {
            router = router.merge(extra);
        }
        if let Some(dir) = self.app.cfg.watch.clone() {
            tokio::spawn(crate::api::harness::watch(self.app.clone(), dir));
        }
        let closing = self.app.closing.clone();
        let serving = hat_http::serve(
            listener,
            router,
            self.app.cfg.connections,
            closing.subscribe(),
        );
        // Shutdown waits for every open connection: one that never finishes must not keep
        // the worker from stopping and saving.
        let grace = self.app.cfg.shutdown_grace;
        tokio::select! {
            () = serving => {}
            () = async move {
                shutdown.await;
                let _ = closing.send(true);
                tokio::time::sleep(grace).await;
            } => {
                tracing::warn!(
                    grace_s = grace.as_secs_f64(),
                    "connections still open after the shutdown grace: closing them"
                );
            }
        }
        self.app.stop.store(true, Ordering::SeqCst);
        let _ = self.app.tx.send(Command::Wake);
        let worker = self.worker;
        let _ = tokio::task::spawn_blocking(move || worker.join()).await;
        Ok(())
    }
}

/// A server running on a thread of its own (tests, benchmarks, embedding).
pub struct Background {
    pub addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

impl Background {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Graceful shutdown: in-flight replies finish, state is saved.
    pub fn stop(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| ServeError::internal("the server thread", "panicked"))?,
            None => Ok(()),
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

impl Server {
    /// Serves on `addr` (port 0: any free port) from a thread with its own runtime.
    pub fn spawn(self, addr: std::net::SocketAddr) -> Result<Background> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("hat-serve".into())
            .spawn(move || -> Result<()> {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .map_err(|e| ServeError::internal("starting the async runtime", e))?;
                rt.block_on(async move {
                    let l = match tokio::net::TcpListener::bind(addr).await {
                        Ok(l) => l,
                        Err(e) => {
                            let _ =
                                tx.send(Err(ServeError::internal(format!("binding {addr}"), e)));
                            return Ok(());
                        }
                    };
                    let _ = tx.send(
                        l.local_addr()
                            .map_err(|e| ServeError::internal("local address", e)),
                    );
                    self.run(l, async move {
                        let _ = stop_rx.await;
                    })
                    .await
                })
            })
            .map_err(|e| ServeError::internal("starting the server thread", e))?;
        let addr = rx
            .recv()
            .map_err(|_| ServeError::internal("starting the server", "the thread ended"))??;
        Ok(Background {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

/// Loads every saved stream; a stream folder that cannot be read is reported and skipped
/// (never deleted).
fn restore(app: &App) -> Result<usize> {
    let dir = app.streams_dir();
    let entries = std::fs::read_dir(&dir)
        .map_err(|e| ServeError::internal(format!("reading {}", dir.display()), e))?;
    let mut n = 0;
    for e in entries.flatten() {
        let path = e.path();
        let Some(id) = path
            .file_name()
            .and_then(|s| s.to_str())
            .map(str::to_string)
        else {
            continue;
        };
        if !valid_id(&id) || !path.is_dir() {
            continue;
        }
        match load_stream(&path, &id) {
            Ok((meta, world)) => {
                let vocabulary = Vocabulary::from_catalog(world.catalog());
                let s = Arc::new(Stream::new(path.clone(), meta, app.cfg.triage, vocabulary));
                app.add_stream(s, world)?;
                n += 1;
            }
            Err(e) => tracing::error!(stream = %id, error = %e, "not restored"),
        }
    }
    Ok(n)
}

fn load_stream(dir: &Path, id: &str) -> Result<(Meta, World)> {
    let meta_path = dir.join("meta.json");
    let text = std::fs::read(&meta_path)
        .map_err(|e| ServeError::internal(format!("reading {}", meta_path.display()), e))?;
    let mut meta: Meta = serde_json::from_slice(&text)
        .map_err(|e| ServeError::internal(format!("parsing {}", meta_path.display()), e))?;
    meta.id = id.to_string();
    crate::stream::restore_ids(dir, &mut meta);
    let world = World::open(dir.join("world.sqlite"))
        .map_err(|e| ServeError::internal(format!("opening {}", dir.display()), e))?;
    Ok((meta, world))
}
