//! `hat serve`: the live-stream server on the embedded engine or an OpenAI-compatible backend.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use hat_agent::episode::CallCheck;
use hat_serve::{ServeConfig, Server};

use crate::cmd::backend::{chat_model, ModelArgs};

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The harness folder; it is watched, and a valid change is swapped in live.
    #[arg(long, default_value = "harnesses/livestream", env = "HAT_HARNESS")]
    harness: PathBuf,
    /// Do not watch the harness folder (swap only through POST /v1/harness).
    #[arg(long)]
    no_watch: bool,
    /// Address to listen on (loopback by default; put a TLS proxy in front for the internet).
    #[arg(long, default_value = "127.0.0.1:8080", env = "HAT_ADDR")]
    addr: SocketAddr,
    /// Streams' stores and state, and uploaded harnesses (kept across restarts).
    #[arg(long, default_value = "runs/serve", env = "HAT_DATA_DIR")]
    data_dir: PathBuf,
    /// Environment variable holding a key that `/v1/*` requests must send as a bearer token
    /// (the console asks for it). Required when --addr is not a loopback address.
    #[arg(long = "server-api-key-env", env = "HAT_SERVER_API_KEY_ENV")]
    server_api_key_env: Option<String>,
    /// Evaluation and training runs the console charts (`hat eval --out` folders and training
    /// runs directly under it).
    #[arg(long, default_value = "runs", env = "HAT_RUNS")]
    runs: PathBuf,
    /// Listen on a non-loopback address without an API key: anyone who reaches the server
    /// can post events, swap the harness and use the console.
    #[arg(long)]
    insecure_no_auth: bool,
    /// Streams answered together in one engine batch.
    #[arg(long, default_value_t = 8, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    max_batch: usize,
    /// Events waiting per stream at most (beyond: 429, or a less important event is evicted).
    #[arg(long, default_value_t = 64, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    queue: usize,
    /// Streams the server holds at most (beyond: POST /v1/streams answers 429).
    #[arg(long, default_value_t = 256, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    max_streams: usize,
    /// Seconds a client has to send a request's headers (a connection that sends nothing, or
    /// a keep-alive connection left idle, is closed after this).
    #[arg(long, default_value_t = 30, value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..=3_600))]
    header_timeout_s: u64,
    /// Seconds a client has to send a request's body once the server reads it (beyond: 408).
    #[arg(long, default_value_t = 60, value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..=3_600))]
    body_timeout_s: u64,
    /// Seconds a response may go without a byte written (a client that stopped reading an
    /// event stream or a large file) before its connection is closed.
    #[arg(long, default_value_t = 60, value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..=3_600))]
    write_timeout_s: u64,
    /// Open connections at most (SSE subscribers included); more wait to be accepted.
    #[arg(long, default_value_t = 1024, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    max_connections: usize,
    /// Seconds a question may wait before it is dropped (greetings and chit-chat: a third).
    #[arg(long, default_value_t = 60, value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..=86_400))]
    stale_s: u64,
    /// A stream created at start-up if missing (catalog seed 1), so a comment can be posted
    /// right away; `--default-stream ''` creates none.
    #[arg(long, default_value = "demo")]
    default_stream: String,
    /// Model turns a reply may take at most (tool rounds included).
    #[arg(long, default_value_t = hat_harness::hooks::DEFAULT_MODEL_TURNS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=32))]
    max_turns: usize,
    /// Let the last allowed turn call a tool too, so a reply that runs out of turns says
    /// nothing (by default the last turn must answer the viewer).
    #[arg(long)]
    no_final_reply: bool,
    /// Decode an answer that falls into a loop (the same sentence over and over) up to the
    /// token limit; by default it ends after the loop's first copy.
    #[arg(long)]
    keep_loops: bool,
    #[command(flatten)]
    calls: CallArgs,
    /// The name `/v1/models` lists (default: the model's file name).
    #[arg(long)]
    served_name: Option<String>,
    /// Run the regression gate before every live swap (a second copy of the model scores
    /// the new and the active harness on live-stream tasks; a harness that loses more than
    /// --gate-threshold points is refused).
    #[arg(long)]
    gate: bool,
    #[command(flatten)]
    gate_opts: crate::cmd::harness::GateOpts,
    /// Another model that live experiments' arms may use, as NAME=MODEL (MODEL as --model
    /// takes it, with the same --format, --threads and endpoint options); repeat for more.
    /// An arm names it with `"model": "NAME"`; every other reply uses --model.
    #[arg(long = "arm-model", value_name = "NAME=MODEL", value_parser = parse_arm_model)]
    arm_models: Vec<(String, String)>,
}

fn parse_arm_model(s: &str) -> std::result::Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, model)) if hat_ab::config::valid_name(name) && !model.is_empty() => {
            Ok((name.to_string(), model.to_string()))
        }
        _ => Err(format!(
            "`{s}`: write NAME=MODEL, e.g. hsa=runs/hsa-sft/model-q8_0.gguf (NAME: 1 to 64 \
             letters, digits, `-`, `_` or `.`)"
        )),
    }
}

/// The regression gate on its own copy of the model, so gating never blocks live replies'
/// engine worker (it does share the CPU).
struct EvalGate {
    backend: std::sync::Mutex<hat_eval::Backend>,
    cfg: hat_eval::gate::GateConfig,
}

impl hat_serve::harnesses::SwapGate for EvalGate {
    fn check(&self, new: &std::path::Path, active: &std::path::Path) -> Result<String, String> {
        let mut b = self.backend.lock().unwrap_or_else(|e| e.into_inner());
        match hat_eval::gate::gate(new, active, &mut b, &self.cfg) {
            Ok(r) if r.pass => Ok(r.to_string()),
            Ok(r) => Err(r.to_string()),
            Err(e) => Err(format!("the gate could not run: {e}")),
        }
    }
}

/// How the engine holds a reply's tool calls to the harness, for `hat serve`, `hat run` and
/// `hat bench serve`.
#[derive(Args, Debug, Clone, Copy)]
pub struct CallArgs {
    /// Let a call be written freely (by default the engine holds every call to one the
    /// active harness reads: its syntax, one of its tools, arguments that fit the tool's
    /// schema, so the host never calls a tool it lacks or with keys it does not take; a
    /// remote `openai:` model is not constrained).
    #[arg(long)]
    free_tool_names: bool,
    /// Constrain only the tool's name, not the rest of the call (the default before the
    /// call grammar).
    #[arg(long, conflicts_with = "free_tool_names")]
    no_call_grammar: bool,
}

impl CallArgs {
    /// `EpisodeConfig::calls`.
    pub fn check(self) -> CallCheck {
        if self.free_tool_names {
            CallCheck::Free
        } else if self.no_call_grammar {
            CallCheck::ToolNames
        } else {
            CallCheck::Grammar
        }
    }
}

pub fn run(a: ServeArgs) -> Result<()> {
    if !a.harness.is_dir() {
        bail!(
            "--harness {}: not a folder; give the harness folder to serve (e.g. harnesses/livestream)",
            a.harness.display()
        );
    }
    // At start-up there is no active harness to keep serving: the problems are the error.
    let harness =
        hat_serve::load_dir(&a.harness, a.harness.display().to_string()).map_err(|e| match e {
            hat_serve::ServeError::InvalidHarness(problems) => {
                for p in &problems {
                    eprintln!("{}/{p}", a.harness.display());
                }
                anyhow::anyhow!(
                    "{} has {} problem(s); fix them (`hat harness check {}`) and start again",
                    a.harness.display(),
                    problems.len(),
                    a.harness.display()
                )
            }
            other => anyhow::anyhow!("{}: {other}", a.harness.display()),
        })?;
    let api_key = match &a.server_api_key_env {
        Some(var) => match std::env::var(var) {
            Ok(k) if !k.is_empty() => Some(k),
            _ => bail!("--server-api-key-env {var}: the variable is not set or empty"),
        },
        None => None,
    };
    if api_key.is_none() && !a.addr.ip().is_loopback() && !a.insecure_no_auth {
        bail!(
            "--addr {} is reachable from other machines, and without --server-api-key-env anyone \
             there could post events, swap the harness and use the console; set \
             --server-api-key-env VAR (requests then need `Authorization: Bearer $VAR`), listen on \
             127.0.0.1, or pass --insecure-no-auth to accept that",
            a.addr
        );
    }
    let (identity, model) = chat_model(&a.model)?;
    let cfg = ServeConfig {
        data_dir: a.data_dir.clone(),
        triage: hat_serve::triage::TriageConfig {
            capacity: a.queue,
            stale_questions: Duration::from_secs(a.stale_s),
            stale_social: Duration::from_secs((a.stale_s / 3).max(1)),
        },
        max_streams: a.max_streams,
        max_batch: a.max_batch,
        max_tokens: a.model.max_tokens,
        max_turns: a.max_turns,
        final_reply: !a.no_final_reply,
        stop_loops: !a.keep_loops,
        calls: a.calls.check(),
        api_key,
        request_timeout: Duration::from_secs(a.model.request_timeout_s.max(60)),
        watch: (!a.no_watch).then(|| a.harness.clone()),
        model_name: a.served_name.clone().unwrap_or(identity.name.clone()),
        default_stream: (!a.default_stream.is_empty()).then(|| (a.default_stream.clone(), 1)),
        runs_dir: Some(a.runs.clone()),
        connections: hat_http::Limits {
            header_timeout: Duration::from_secs(a.header_timeout_s),
            body_timeout: Duration::from_secs(a.body_timeout_s),
            max_connections: a.max_connections,
            write_timeout: Duration::from_secs(a.write_timeout_s),
        },
        // Versions of the served harness usually sit beside it.
        harness_roots: vec![a
            .harness
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."))
            .to_path_buf()],
        ..ServeConfig::default()
    };
    let mut cfg = cfg;
    if a.gate {
        let (identity, model) = chat_model(&a.model)?;
        cfg.gate = Some(hat_serve::harnesses::Gate(std::sync::Arc::new(EvalGate {
            backend: std::sync::Mutex::new(hat_eval::Backend::Chat { identity, model }),
            cfg: a.gate_opts.config(a.model.max_tokens),
        })));
    }
    let mut arm_models = Vec::new();
    for (name, m) in &a.arm_models {
        let args = ModelArgs {
            model: Some(m.clone()),
            ..a.model.clone()
        };
        let (_, model) = chat_model(&args).with_context(|| format!("--arm-model {name}={m}"))?;
        arm_models.push((name.clone(), model));
    }
    let hash = harness.harness.short_hash().to_string();
    let server = Server::start_with_arm_models(cfg, model, arm_models, harness)?
        .with_routes(hat_console::router());
    listen(a.addr, |listener, at| async move {
        eprintln!(
            "serving {} with harness {hash} on http://{at}  (data in {}; console: http://{at}{})",
            identity.name,
            a.data_dir.display(),
            hat_console::ROOT
        );
        server.run(listener, shutdown_signal()).await?;
        eprintln!("stopped; in-flight replies finished, state saved");
        Ok(())
    })
}

/// Binds `addr` on a two-worker async runtime and runs `serve` on the listener (with the
/// address actually bound) until it returns; `hat serve` and `hat env serve` start this way.
pub(crate) fn listen<F, Fut>(addr: std::net::SocketAddr, serve: F) -> Result<()>
where
    F: FnOnce(tokio::net::TcpListener, std::net::SocketAddr) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding {addr} (is another server running there?)"))?;
        let at = listener.local_addr().unwrap_or(addr);
        serve(listener, at).await
    })
}

pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    eprintln!(
        "shutting down: replies in flight finish and state is saved (Ctrl-C again to quit now)"
    );
    // the handler replaced Ctrl-C's default: a second one must still end the process
    tokio::spawn(async {
        let _ = tokio::signal::ctrl_c().await;
        eprintln!(
            "second interrupt: quitting without waiting (streams keep their last saved reply)"
        );
        std::process::exit(130);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        calls: CallArgs,
    }

    #[test]
    fn the_call_flags_pick_the_check() {
        let check = |args: &[&str]| {
            Cli::try_parse_from([&["hat"], args].concat())
                .map(|c| c.calls.check())
                .map_err(|e| e.kind())
        };
        assert_eq!(check(&[]), Ok(CallCheck::Grammar));
        assert_eq!(check(&["--no-call-grammar"]), Ok(CallCheck::ToolNames));
        assert_eq!(check(&["--free-tool-names"]), Ok(CallCheck::Free));
        assert_eq!(
            check(&["--free-tool-names", "--no-call-grammar"]),
            Err(clap::error::ErrorKind::ArgumentConflict)
        );
    }
}
