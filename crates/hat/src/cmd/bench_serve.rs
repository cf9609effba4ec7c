//! `hat bench serve`: the live-stream pipeline under a simulated audience, the embedded engine
//! beside llama.cpp's `llama-server` as the upstream of the same `hat serve` pipeline, in one
//! run on the same model file and threads.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cmd::backend::model_path;
use anyhow::{bail, Context, Result};
use clap::Args;

use hat_agent::episode::ChatModel;
use hat_serve::bench::{Audience, Mix, Report};
use hat_serve::{ServeConfig, Server};
use hat_teacher::openai::{OpenAiConfig, OpenAiTeacher};

#[derive(Args)]
pub struct ServeBenchArgs {
    /// The model file (`default`: SmolLM2-135M-Instruct from `hat model fetch`).
    #[arg(long, default_value = "default")]
    model: String,
    /// Weight format of the embedded engine.
    #[arg(long, default_value = "original")]
    format: String,
    /// The harness every stream is served with.
    #[arg(long, default_value = "harnesses/livestream")]
    harness: PathBuf,
    /// Compute threads, for both engines.
    #[arg(long, default_value_t = 2, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256))]
    threads: usize,
    /// Stream counts to run (the knee is the first count whose P95 passes 2 s).
    #[arg(long, value_delimiter = ',', default_value = "4")]
    streams: Vec<usize>,
    /// Mean seconds between one stream's events.
    #[arg(long, default_value_t = 5.0)]
    period_s: f64,
    /// Seconds of arrivals per run.
    #[arg(long, default_value_t = 60.0)]
    duration_s: f64,
    /// Chance that an arrival is a burst of events instead of one.
    #[arg(long, default_value_t = 0.1)]
    burst_prob: f64,
    /// Events in a burst.
    #[arg(long, default_value_t = 3)]
    burst_size: usize,
    /// Seed of the simulated audience (arrivals and comments).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Token limit of one model turn.
    #[arg(long, default_value_t = 128)]
    max_tokens: u32,
    /// Model turns a reply may take at most.
    #[arg(long, default_value_t = hat_harness::hooks::DEFAULT_MODEL_TURNS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=32))]
    max_turns: usize,
    /// Let the last allowed turn call a tool too (as `hat serve --no-final-reply`).
    #[arg(long)]
    no_final_reply: bool,
    /// Decode an answer that falls into a loop (the same sentence over and over) up to the
    /// token limit; by default it ends after the loop's first copy.
    #[arg(long)]
    keep_loops: bool,
    /// How calls are held to the harness (as in `hat serve`).
    #[command(flatten)]
    calls: crate::cmd::serve::CallArgs,
    /// Streams decoded together.
    #[arg(long, default_value_t = 8)]
    max_batch: usize,
    /// llama.cpp's server binary (`crates/model/scripts/build_llama_cpp.sh` builds it).
    #[arg(long)]
    llama_server: Option<PathBuf>,
    /// Only the embedded engine.
    #[arg(long)]
    no_peer: bool,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
    /// Write every event of every run as a JSON line (run, pipeline, streams, arrival time,
    /// stream, triage class, the event, outcome, end-to-end seconds, the server's breakdown,
    /// the reply): where the tail comes from. Each pipeline's runs are written as it finishes.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
}

/// The simulated audience the flags describe, for `streams` streams.
fn audience(a: &ServeBenchArgs, streams: usize) -> Audience {
    Audience {
        streams,
        period_s: a.period_s,
        burst_prob: a.burst_prob,
        burst_size: a.burst_size,
        duration_s: a.duration_s,
        seed: a.seed,
    }
}

fn cfg(a: &ServeBenchArgs, data: &std::path::Path, name: &str) -> ServeConfig {
    ServeConfig {
        data_dir: data.to_path_buf(),
        max_batch: a.max_batch,
        max_tokens: a.max_tokens,
        max_turns: a.max_turns,
        final_reply: !a.no_final_reply,
        stop_loops: !a.keep_loops,
        calls: a.calls.check(),
        model_name: name.into(),
        // the bench measures latency, not triage: nothing goes stale during a run
        triage: hat_serve::triage::TriageConfig {
            capacity: 4096,
            stale_questions: Duration::from_secs(3600),
            stale_social: Duration::from_secs(3600),
        },
        request_timeout: Duration::from_secs(600),
        ..ServeConfig::default()
    }
}

fn pipeline(
    a: &ServeBenchArgs,
    label: &str,
    model: Box<dyn ChatModel + Send>,
    mix: &Mix,
) -> Result<Vec<Report>> {
    let harness = hat_serve::load_dir(&a.harness, a.harness.display().to_string())
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.harness.display()))?;
    let data = tempfile::tempdir().context("a temporary data folder")?;
    let server = Server::start(cfg(a, data.path(), label), model, harness)?;
    let bg = server.spawn(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let mut out = Vec::new();
    // one warm-up reply: loads pages, fills the harness prefix cache
    let warm = Audience {
        streams: 1,
        period_s: 1.0,
        burst_prob: 0.0,
        burst_size: 1,
        duration_s: 1.0,
        seed: a.seed ^ 0xABCD,
    };
    hat_serve::bench::run(&bg.url(), label, "warm", &warm, mix)?;
    for (k, &n) in a.streams.iter().enumerate() {
        let aud = audience(a, n);
        eprintln!(
            "{label}: {n} streams, one event per {} s each, {} s ...",
            a.period_s, a.duration_s
        );
        let r = hat_serve::bench::run(&bg.url(), label, &format!("b{k}"), &aud, mix)?;
        eprintln!(
            "  P50 {:.2} s  P95 {:.2} s  ({} replies, {} errors)",
            r.p50_s, r.p95_s, r.replies, r.errors
        );
        out.push(r);
    }
    bg.stop()?;
    Ok(out)
}

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn start_llama_server(
    a: &ServeBenchArgs,
    bin: &std::path::Path,
    model: &std::path::Path,
) -> Result<(Killed, String)> {
    let port = free_port()?;
    let slots = a.max_batch.max(1);
    let child = Command::new(bin)
        .args(["-m"])
        .arg(model)
        .args([
            "-t",
            &a.threads.to_string(),
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ])
        .args([
            "-np",
            &slots.to_string(),
            "-c",
            &(slots * 4096).to_string(),
            "--no-webui",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let child = Killed(child);
    let url = format!("http://127.0.0.1:{port}");
    let t0 = Instant::now();
    loop {
        if let Ok(r) = ureq::get(&format!("{url}/health"))
            .timeout(Duration::from_secs(2))
            .call()
        {
            if r.status() == 200 {
                break;
            }
        }
        if t0.elapsed() > Duration::from_secs(120) {
            bail!(
                "{} did not come up on port {port} within 120 s",
                bin.display()
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Ok((child, format!("{url}/v1")))
}

/// Appends the events of `reports` (runs `first..`) to the trace as JSON lines and flushes,
/// so the runs finished so far are kept if a later one fails.
fn write_trace(
    w: &mut std::io::BufWriter<std::fs::File>,
    path: &std::path::Path,
    first: usize,
    reports: &[Report],
) -> Result<()> {
    use std::io::Write;
    for (k, r) in reports.iter().enumerate() {
        for row in &r.trace {
            let mut v = serde_json::to_value(row)?;
            v["run"] = (first + k).into();
            v["pipeline"] = r.label.clone().into();
            v["streams"] = r.streams.into();
            writeln!(w, "{v}").with_context(|| format!("writing {}", path.display()))?;
        }
    }
    w.flush()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

pub fn run(a: ServeBenchArgs) -> Result<()> {
    for &n in &a.streams {
        audience(&a, n).check()?;
    }
    let path = model_path(&a.model);
    if !path.is_file() {
        bail!(
            "{}: no such model file (run `hat model fetch`, or pass a GGUF file)",
            path.display()
        );
    }
    // created before the runs, so a path that cannot be written fails at once
    let mut trace = match &a.trace {
        Some(p) => Some((
            std::io::BufWriter::new(
                std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
            ),
            p.as_path(),
        )),
        None => None,
    };
    hat_model::threads::set_threads(a.threads);
    let mix = Mix::lsqa(304, 1)?;
    let format: hat_model::WeightFormat = a.format.parse()?;
    let local = hat_local_model::LocalModel::load(
        &path,
        format,
        hat_model::SamplingParams::default(),
        a.max_tokens as usize,
    )?;
    let mut reports = pipeline(&a, "hat (embedded engine)", Box::new(local), &mix)?;
    if let Some((w, p)) = trace.as_mut() {
        write_trace(w, p, 0, &reports)?;
    }
    if !a.no_peer {
        let bin = a
            .llama_server
            .clone()
            .unwrap_or_else(|| hat_model::fetch::hat_home().join("llama.cpp/bin/llama-server"));
        if !bin.is_file() {
            bail!(
                "{} not found: run crates/model/scripts/build_llama_cpp.sh, pass --llama-server, or --no-peer",
                bin.display()
            );
        }
        let (server, base_url) = start_llama_server(&a, &bin, &path)?;
        let peer = OpenAiTeacher::new(OpenAiConfig {
            base_url,
            model: "peer".into(),
            api_key_env: None,
            temperature: 0.0,
            max_tokens: a.max_tokens,
            timeout: Duration::from_secs(600),
        })?;
        let peer = pipeline(&a, "hat serve + llama-server", Box::new(peer), &mix)?;
        if let Some((w, p)) = trace.as_mut() {
            write_trace(w, p, reports.len(), &peer)?;
        }
        reports.extend(peer);
        drop(server);
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
        return Ok(());
    }
    println!(
        "model {} · format {} · {} threads · one event per {} s per stream, bursts {}x{} · {} s\n{}",
        path.display(),
        a.format,
        a.threads,
        a.period_s,
        a.burst_prob,
        a.burst_size,
        a.duration_s,
        hat_model::bench::machine()
    );
    println!("| pipeline | streams | events | replies | of which silent | errors | P50 s | P95 s | P99 s | TTFT P50 / P95 s | replies/s | calls a reply | queue s | prefill s | decode s | tools+hooks s |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let secs = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.2}"));
    for r in &reports {
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {} / {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            r.label, r.streams, r.sent, r.replies, r.empty_replies, r.errors + r.dropped + r.rejected, r.p50_s, r.p95_s, r.p99_s,
            secs(r.ttft_p50_s), secs(r.ttft_p95_s),
            r.replies_per_s, r.mean_tool_calls, r.mean_queue_s, r.mean_prefill_s, r.mean_decode_s, r.mean_tools_hooks_s
        );
    }
    println!(
        "(TTFT: post to the first decoded text of the reply's model turn, over the stream's SSE; \
         `-` where the model sends its turns whole)"
    );
    println!("\nby triage class (`--trace FILE` writes every event):\n");
    println!("| pipeline | streams | class | replies | P50 s | P95 s | queue s |");
    println!("|---|---|---|---|---|---|---|");
    for r in &reports {
        for c in &r.by_class {
            println!(
                "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} |",
                r.label,
                r.streams,
                c.class.as_str(),
                c.replies,
                c.p50_s,
                c.p95_s,
                c.mean_queue_s
            );
        }
    }
    let n = a.streams.len();
    if reports.len() == 2 * n {
        for k in 0..n {
            let (h, p) = (&reports[k], &reports[n + k]);
            println!(
                "{} streams: hat / llama-server pipeline latency  P50 {:.2}x  P95 {:.2}x",
                h.streams,
                h.p50_s / p.p50_s,
                h.p95_s / p.p95_s
            );
        }
    }
    for label in reports
        .iter()
        .map(|r| r.label.clone())
        .collect::<std::collections::BTreeSet<_>>()
    {
        let knee = reports
            .iter()
            .filter(|r| r.label == label)
            .find(|r| r.p95_s > 2.0 || r.p95_s.is_nan());
        match knee {
            Some(r) => println!("{label}: P95 passes 2 s at {} streams", r.streams),
            None => println!(
                "{label}: P95 stays within 2 s up to {} streams",
                a.streams.iter().max().unwrap_or(&0)
            ),
        }
    }
    Ok(())
}
