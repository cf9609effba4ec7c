//! `hat bench generate`: prefill and decode speed, batched decode, cached-prefix latency and
//! peak memory per weight format, optionally side by side with llama.cpp's `llama-bench`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::Context;
use candle_core::Tensor;

use crate::fetch::hat_home;
use crate::fetch::model_path;
use crate::generate::{Engine, GenerateRequest};
use crate::model::LoadOptions;
use crate::threads::set_threads;
use crate::weights::WeightFormat;

/// `hat bench generate`
#[derive(Debug, clap::Args)]
pub struct BenchGenerateArgs {
    /// GGUF file (default: the fetched model).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Comma-separated weight formats.
    #[arg(long, default_value = "original,q8_0,q4_0,f32")]
    pub formats: String,
    /// Compute threads (fixed for comparisons).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Prompt lengths for prefill.
    #[arg(long, default_value = "256,512,1024,2048")]
    pub prompt_lens: String,
    /// Context depths for batch-1 decode (tokens already in the KV cache).
    #[arg(long, default_value = "1000,2000")]
    pub depths: String,
    /// Tokens decoded per measurement.
    #[arg(long, default_value_t = 64)]
    pub decode_tokens: usize,
    /// Rows for batched decode.
    #[arg(long, default_value_t = 8)]
    pub batch: usize,
    /// Length of the cached prefix for the latency test.
    #[arg(long, default_value_t = 1000)]
    pub prefix_len: usize,
    /// Repetitions (the mean is reported).
    #[arg(long, default_value_t = 2)]
    pub reps: usize,
    /// Also measure a ragged batch: `--batch` requests of `--prefix-len`-token prompts whose
    /// answers stop after 16, 32, ... tokens (as an agent batch's tool calls and replies do),
    /// with finished rows muted (their attention reads no context) and not, side by side.
    #[arg(long)]
    pub ragged: bool,
    /// Also measure a batch that shares its prompt's start: `--batch` requests of one cached
    /// `--prefix-len`-token prefix and 64 tokens of their own each (an agent batch under one
    /// harness), decoding 64 tokens with the prefix held once and with a copy per row.
    #[arg(long)]
    pub shared: bool,
    /// Also run llama.cpp's llama-bench (built by scripts/build_llama_cpp.sh) and print ratios.
    #[arg(long)]
    pub llama_cpp: bool,
    /// Folder holding llama-bench and llama-quantize (default $HAT_HOME/llama.cpp/bin).
    #[arg(long)]
    pub llama_cpp_bin: Option<PathBuf>,
}

/// The CPU's model name (Linux `/proc/cpuinfo`).
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// Peak resident memory of this process in MiB (Linux `VmHWM`).
pub fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// One engine's figures for one format.
#[derive(Debug, Clone, Default)]
pub struct BenchRow {
    pub format: String,
    pub prefill: Vec<(usize, f64)>,
    pub decode_b1: f64,
    pub decode_batch: f64,
    /// (depth, tok/s) of batch-1 decode after `depth` tokens of context.
    pub decode_depth: Vec<(usize, f64)>,
    /// (depth, tok/s) of prefilling the first prompt length after `depth` tokens of context
    /// (a tool result or a viewer's event after an agent's cached prompt).
    pub prefill_depth: Vec<(usize, f64)>,
    pub cached_prefix_ms: f64,
    pub uncached_prefix_ms: f64,
    pub peak_mib: f64,
    /// Ragged-batch decode tok/s: (finished rows muted, not).
    pub ragged: Option<(f64, f64)>,
    /// Shared-prefix batch decode tok/s: (prefix held once, a copy per row), and the rows
    /// whose tokens differed between the two.
    pub shared: Option<(f64, f64, usize)>,
}

fn prompt_tokens(engine: &Engine, n: usize) -> anyhow::Result<Vec<u32>> {
    let text =
        "Live shopping stream: the host shows a red jacket, size M, price 49.99, and asks viewers \
                for questions about delivery, returns and colours. ";
    let base = engine.tokenizer.encode(text, false)?;
    Ok(base.iter().copied().cycle().take(n).collect())
}

fn time_prefill(engine: &Engine, toks: &[u32]) -> anyhow::Result<f64> {
    let mut cache = engine.model.new_cache(1);
    let t = Instant::now();
    engine.prefill(&mut cache, toks)?;
    Ok(t.elapsed().as_secs_f64())
}

/// Seconds to prefill `n` tokens into a one-row cache that already holds `depth`.
fn time_prefill_at(engine: &Engine, depth: usize, n: usize) -> anyhow::Result<f64> {
    let toks = prompt_tokens(engine, depth + n)?;
    let mut cache = engine.model.new_cache(1);
    engine.prefill(&mut cache, &toks[..depth])?;
    let t = Instant::now();
    engine.prefill(&mut cache, &toks[depth..])?;
    Ok(t.elapsed().as_secs_f64())
}

fn time_decode(engine: &Engine, batch: usize, n: usize, ctx: usize) -> anyhow::Result<f64> {
    let m = &engine.model;
    let mut cache = m.new_cache(batch);
    if ctx > 0 {
        let toks = prompt_tokens(engine, ctx)?;
        let rows: Vec<u32> = (0..batch).flat_map(|_| toks.iter().copied()).collect();
        let all = Tensor::from_vec(rows, (batch, ctx), m.device())?;
        for chunk_start in (0..ctx).step_by(crate::generate::PREFILL_CHUNK) {
            let len = crate::generate::PREFILL_CHUNK.min(ctx - chunk_start);
            let ids = all.narrow(1, chunk_start, len)?.contiguous()?;
            m.forward_prompt(&ids, &mut cache, true)?;
        }
    }
    let start = Tensor::new(vec![1u32; batch].as_slice(), m.device())?.unsqueeze(1)?;
    m.forward(&start, &mut cache, true)?;
    let t = Instant::now();
    let mut ids = start;
    for _ in 0..n {
        let logits = m.forward(&ids, &mut cache, true)?;
        ids = logits
            .squeeze(1)?
            .argmax(candle_core::D::Minus1)?
            .unsqueeze(1)?;
    }
    Ok((batch * n) as f64 / t.elapsed().as_secs_f64())
}

/// Decode tok/s of a ragged batch (see `BenchGenerateArgs::ragged`): (rows muted, not).
fn time_ragged(
    engine: &Engine,
    batch: usize,
    prompt_len: usize,
    flip: usize,
) -> anyhow::Result<(f64, f64)> {
    let base = prompt_tokens(engine, prompt_len)?;
    let vocab = engine.model.config().vocab_size as u32;
    // The first token differs per row (and from the cached-prefix test's prompt), so no
    // row's prompt is a cached prefix of another's.
    let reqs: Vec<GenerateRequest> = (0..batch)
        .map(|i| {
            let mut p = base.clone();
            p[0] = (p[0] + 1 + i as u32) % vocab;
            GenerateRequest::new(p, 16 * (i + 1))
        })
        .collect();
    let both = decode_both(engine, &reqs, flip, |muted| {
        engine.set_mute_finished_rows(muted);
    });
    engine.set_mute_finished_rows(true);
    let [(muted, _), (kept, _)] = both?;
    Ok((muted, kept))
}

/// Decodes `reqs` in one batch twice, after `variant(true)` and after `variant(false)`; which
/// runs first alternates with `flip`, so neither always finds the caches warm. Returns each
/// run's decode tok/s and outputs, the `true` run first. The caller restores the setting.
fn decode_both(
    engine: &Engine,
    reqs: &[GenerateRequest],
    flip: usize,
    variant: impl Fn(bool),
) -> anyhow::Result<[(f64, Vec<crate::GenerateOutput>); 2]> {
    let mut out: [(f64, Vec<crate::GenerateOutput>); 2] = Default::default();
    let order = if flip == 0 { [0, 1] } else { [1, 0] };
    for k in order {
        variant(k == 0);
        let o = engine.generate_batch(reqs)?;
        let n: usize = o.iter().map(|x| x.tokens.len()).sum();
        let secs = o.first().map_or(0.0, |x| x.decode_secs);
        out[k] = (n as f64 / secs.max(1e-9), o);
    }
    Ok(out)
}

/// Decode tok/s of a batch over one shared prefix (see `BenchGenerateArgs::shared`):
/// (prefix held once, a copy per row, rows whose tokens differ).
fn time_shared(
    engine: &Engine,
    batch: usize,
    prefix_len: usize,
    flip: usize,
) -> anyhow::Result<(f64, f64, usize)> {
    let prefix = prompt_tokens(engine, prefix_len)?;
    let own = prompt_tokens(engine, 64 + batch)?;
    let reqs: Vec<GenerateRequest> = (0..batch)
        .map(|i| {
            let mut p = prefix.clone();
            p.extend_from_slice(&own[i..i + 64]);
            GenerateRequest {
                cache_prefix_len: Some(prefix.len()),
                cache_whole_prompt: false,
                ..GenerateRequest::new(p, 64)
            }
        })
        .collect();
    let setting = engine.shared_prefix_min();
    let both = decode_both(engine, &reqs, flip, |shared| {
        engine.set_shared_prefix_min(if shared { Some(1) } else { None });
    });
    engine.set_shared_prefix_min(setting);
    let [(once, shared), (copies, plain)] = both?;
    // decoding shares whole blocks of keys: the prefix less a partial last block
    let whole = crate::attention::whole_blocks(prefix.len());
    anyhow::ensure!(
        shared.iter().all(|x| x.shared_prefix_tokens >= whole),
        "the batch did not share its {}-token prefix",
        prefix.len()
    );
    let differ = shared
        .iter()
        .zip(&plain)
        .filter(|(a, b)| a.tokens != b.tokens)
        .count();
    Ok((once, copies, differ))
}

/// Measures one format.
pub fn bench_engine(
    engine: &Engine,
    a: &BenchGenerateArgs,
    lens: &[usize],
    depths: &[usize],
) -> anyhow::Result<BenchRow> {
    let reps = a.reps.max(1);
    let mut row = BenchRow::default();
    // warm up
    time_prefill(engine, &prompt_tokens(engine, 64)?)?;
    for &n in lens {
        let toks = prompt_tokens(engine, n)?;
        let mut total = 0.0;
        for _ in 0..reps {
            total += time_prefill(engine, &toks)?;
        }
        row.prefill.push((n, n as f64 * reps as f64 / total));
    }
    let mut d1 = 0.0;
    let mut db = 0.0;
    for _ in 0..reps {
        d1 += time_decode(engine, 1, a.decode_tokens, 0)?;
        db += time_decode(engine, a.batch, a.decode_tokens / 2, 0)?;
    }
    for &d in depths {
        let mut total = 0.0;
        for _ in 0..reps {
            total += time_decode(engine, 1, a.decode_tokens, d)?;
        }
        row.decode_depth.push((d, total / reps as f64));
    }
    if let Some(&n) = lens.first() {
        for &d in depths {
            let mut total = 0.0;
            for _ in 0..reps {
                total += time_prefill_at(engine, d, n)?;
            }
            row.prefill_depth.push((d, (n * reps) as f64 / total));
        }
    }
    row.decode_b1 = d1 / reps as f64;
    row.decode_batch = db / reps as f64;
    // cached-prefix latency: time to first token of a request whose prefix is cached
    let prefix = prompt_tokens(engine, a.prefix_len)?;
    let mut prompt = prefix.clone();
    prompt.extend(engine.tokenizer.encode(" Is it waterproof?", false)?);
    let req = GenerateRequest {
        cache_prefix_len: Some(prefix.len()),
        cache_whole_prompt: false,
        ..GenerateRequest::new(prompt.clone(), 1)
    };
    engine.generate(&req, None)?; // fills the cache
    let mut cached = 0.0;
    for _ in 0..reps {
        let t = Instant::now();
        let out = engine.generate(&req, None)?;
        cached += t.elapsed().as_secs_f64();
        anyhow::ensure!(out.cached_tokens == prefix.len(), "prefix cache missed");
    }
    let mut other = prompt.clone();
    other[0] = other[0].wrapping_add(1) % engine.model.config().vocab_size as u32;
    let t = Instant::now();
    engine.generate(&GenerateRequest::new(other, 1), None)?;
    row.uncached_prefix_ms = t.elapsed().as_secs_f64() * 1e3;
    row.cached_prefix_ms = cached / reps as f64 * 1e3;
    // before the ragged batch, so the column means the same with and without --ragged
    row.peak_mib = peak_rss_mib().unwrap_or(0.0);
    if a.ragged {
        let mut muted = 0.0;
        let mut kept = 0.0;
        for rep in 0..reps {
            let (d, k) = time_ragged(engine, a.batch, a.prefix_len, rep % 2)?;
            muted += d;
            kept += k;
        }
        row.ragged = Some((muted / reps as f64, kept / reps as f64));
    }
    if a.shared {
        let (mut once, mut copies, mut differ) = (0.0, 0.0, 0);
        for rep in 0..reps {
            let (o, c, d) = time_shared(engine, a.batch, a.prefix_len, rep % 2)?;
            once += o;
            copies += c;
            differ = differ.max(d);
        }
        row.shared = Some((once / reps as f64, copies / reps as f64, differ));
    }
    Ok(row)
}

/// llama-bench's figures: (test name, tokens/s).
pub fn run_llama_bench(
    bin: &Path,
    model: &Path,
    threads: usize,
    lens: &[usize],
    depths: &[usize],
    n_gen: usize,
    reps: usize,
) -> anyhow::Result<Vec<(String, f64)>> {
    let p: Vec<String> = lens.iter().map(|l| l.to_string()).collect();
    let mut d: Vec<String> = vec!["0".into()];
    d.extend(depths.iter().map(|l| l.to_string()));
    let out = Command::new(bin.join("llama-bench"))
        .arg("-m")
        .arg(model)
        .args([
            "-t",
            &threads.to_string(),
            "-p",
            &p.join(","),
            "-n",
            &n_gen.to_string(),
            "-d",
            &d.join(","),
            "-r",
            &reps.to_string(),
            "-o",
            "json",
        ])
        .output()
        .with_context(|| format!("running {}", bin.join("llama-bench").display()))?;
    anyhow::ensure!(
        out.status.success(),
        "llama-bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let mut res = Vec::new();
    for t in v.as_array().into_iter().flatten() {
        let np = t["n_prompt"].as_u64().unwrap_or(0);
        let ng = t["n_gen"].as_u64().unwrap_or(0);
        let depth = t["n_depth"].as_u64().unwrap_or(0);
        let name = match (ng > 0, depth) {
            (true, 0) => format!("tg{ng}"),
            (true, d) => format!("tg{ng}@d{d}"),
            (false, 0) => format!("pp{np}"),
            (false, d) => format!("pp{np}@d{d}"),
        };
        res.push((name, t["avg_ts"].as_f64().unwrap_or(0.0)));
    }
    Ok(res)
}

fn quantized_copy(bin: &Path, model: &Path, fmt: WeightFormat) -> anyhow::Result<Option<PathBuf>> {
    let ty = match fmt {
        WeightFormat::Original => return Ok(Some(model.to_path_buf())),
        WeightFormat::Q8_0 => "Q8_0",
        WeightFormat::Q4_0 => "Q4_0",
        WeightFormat::F32 => "F32",
        WeightFormat::F16 => "F16",
        WeightFormat::BF16 => "BF16",
    };
    let dir = hat_home().join("bench");
    std::fs::create_dir_all(&dir)?;
    let stem = model
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("model");
    let out = dir.join(format!("{stem}.{ty}.gguf"));
    if out.exists() {
        return Ok(Some(out));
    }
    let q = bin.join("llama-quantize");
    if !q.exists() {
        return Ok(None);
    }
    let st = Command::new(q)
        .arg("--allow-requantize")
        .arg(model)
        .arg(&out)
        .arg(ty)
        .output()?;
    anyhow::ensure!(
        st.status.success(),
        "llama-quantize failed: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    Ok(Some(out))
}

/// Runs `hat bench generate`.
pub fn run_bench_generate(a: BenchGenerateArgs) -> anyhow::Result<()> {
    set_threads(a.threads);
    let path = model_path(a.model.clone());
    let lens: Vec<usize> = a
        .prompt_lens
        .split(',')
        .map(|s| s.trim().parse())
        .collect::<Result<_, _>>()
        .with_context(|| {
            format!(
                "--prompt-lens `{}`: expected comma-separated token counts, e.g. 256,512",
                a.prompt_lens
            )
        })?;
    let formats: Vec<WeightFormat> = a
        .formats
        .split(',')
        .map(|s| s.trim().parse())
        .collect::<Result<_, _>>()?;
    let depths: Vec<usize> = a
        .depths
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse())
        .collect::<Result<_, _>>()
        .with_context(|| {
            format!(
                "--depths `{}`: expected comma-separated token counts, e.g. 1000,2000",
                a.depths
            )
        })?;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("{}", machine());
    println!(
        "model {} | threads {} | reps {} | decode {} tok | batch {} | loadavg {}",
        path.display(),
        a.threads,
        a.reps,
        a.decode_tokens,
        a.batch,
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut header = String::from("| engine | format |");
    for l in &lens {
        header.push_str(&format!(" pp{l} tok/s |"));
    }
    header.push_str(" tg b1 tok/s |");
    for d in &depths {
        header.push_str(&format!(" tg b1 @{d} ctx |"));
    }
    if let Some(l) = lens.first() {
        for d in &depths {
            header.push_str(&format!(" pp{l} @{d} ctx |"));
        }
    }
    header.push_str(&format!(
        " tg b{} tok/s | {}-tok prefix cached / uncached ms | peak MiB |",
        a.batch, a.prefix_len
    ));
    println!("{header}");
    println!("|{}", "---|".repeat(header.matches('|').count() - 1));
    let bin = a
        .llama_cpp_bin
        .clone()
        .unwrap_or_else(|| hat_home().join("llama.cpp").join("bin"));
    // per format, the columns both engines report (prefill lengths, decode b1, depths)
    let (mut hat_cols, mut peer_cols) = (Vec::new(), Vec::new());
    let mut scaling = Vec::new();
    for fmt in formats {
        // reset the peak-RSS counter so each format reports its own peak
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        let engine = Engine::load(
            &path,
            LoadOptions {
                format: fmt,
                trainable: false,
            },
        )?;
        if a.shared {
            let need = a.prefix_len + 128;
            anyhow::ensure!(
                a.batch > 1 && a.prefix_len > 0 && need <= engine.model.max_positions(),
                "--shared needs --batch >= 2, --prefix-len >= 1 and --prefix-len + 128 ({need}) within the model's context ({}); change them",
                engine.model.max_positions()
            );
        }
        if a.ragged {
            let need = a.prefix_len + 16 * a.batch;
            anyhow::ensure!(
                a.batch > 0 && need <= engine.model.max_positions(),
                "--ragged needs --batch >= 1 and --prefix-len + 16 x --batch ({need}) within the model's context ({}); lower them",
                engine.model.max_positions()
            );
        }
        let r = bench_engine(&engine, &a, &lens, &depths)?;
        let shown = if fmt == WeightFormat::Original {
            engine
                .model
                .linear_formats()
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join("+")
        } else {
            fmt.to_string()
        };
        let cols = speed_columns(&r);
        scaling.push((
            shown.clone(),
            r.decode_batch / r.decode_b1,
            r.cached_prefix_ms,
        ));
        let mut line = format!("| hat | {shown} |");
        for v in &cols {
            line.push_str(&format!(" {v:.1} |"));
        }
        line.push_str(&format!(
            " {:.1} | {:.1} / {:.1} | {:.0} |",
            r.decode_batch, r.cached_prefix_ms, r.uncached_prefix_ms, r.peak_mib
        ));
        println!("{line}");
        if let Some((o, c, d)) = r.shared {
            println!(
                "|   shared-prefix b{} decode after one {}-token prefix + 64 own tokens a row: {o:.1} tok/s prefix held once, {c:.1} a copy per row ({:.2}x; rows with other tokens: {d}) |",
                a.batch,
                a.prefix_len,
                o / c
            );
        }
        if let Some((d, k)) = r.ragged {
            println!(
                "|   ragged b{} decode after {}-token prompts (rows stop at 16..{} tokens): {d:.1} tok/s muting finished rows, {k:.1} not ({:.2}x) |",
                a.batch,
                a.prefix_len,
                16 * a.batch,
                d / k
            );
        }
        drop(engine);
        if a.llama_cpp {
            match quantized_copy(&bin, &path, fmt)? {
                Some(file) => {
                    let l = run_llama_bench(
                        &bin,
                        &file,
                        a.threads,
                        &lens,
                        &depths,
                        a.decode_tokens,
                        a.reps.max(2),
                    )?;
                    let find = |name: String| {
                        l.iter()
                            .find(|(k, _)| *k == name)
                            .map(|x| x.1)
                            .unwrap_or(f64::NAN)
                    };
                    // the same columns as `speed_columns`, in llama-bench's names
                    let mut peer: Vec<f64> = lens.iter().map(|n| find(format!("pp{n}"))).collect();
                    peer.push(find(format!("tg{}", a.decode_tokens)));
                    peer.extend(
                        depths
                            .iter()
                            .map(|d| find(format!("tg{}@d{d}", a.decode_tokens))),
                    );
                    if let Some(l) = lens.first() {
                        peer.extend(depths.iter().map(|d| find(format!("pp{l}@d{d}"))));
                    }
                    let mut line = format!("| llama.cpp | {shown} |");
                    let mut ratios = String::from("| ratio hat/llama.cpp | |");
                    for (v, lv) in cols.iter().zip(&peer) {
                        line.push_str(&format!(" {lv:.1} |"));
                        ratios.push_str(&format!(" {:.2}x |", v / lv));
                    }
                    line.push_str(" - | - | - |");
                    ratios.push_str(" | | |");
                    println!("{line}");
                    println!("{ratios}");
                    peer_cols.push(peer);
                }
                None => println!("| llama.cpp | {shown} | (no llama-quantize; skipped) |"),
            }
        }
        hat_cols.push(cols);
    }
    if !peer_cols.is_empty() {
        let mut line = String::from("| best format of each, hat / llama.cpp | |");
        for r in best_ratios(&hat_cols, &peer_cols) {
            line.push_str(&format!(" {r:.2}x |"));
        }
        println!("{line}");
    }
    let each = scaling
        .iter()
        .map(|(f, x, ms)| format!("{f} {x:.2}x (prefix {ms:.1} ms)"))
        .collect::<Vec<_>>()
        .join(", ");
    println!("batch {} / batch 1 decode throughput: {each}", a.batch);
    Ok(())
}

/// The columns a hat row shares with llama-bench's: tok/s of each prefill length, batch-1
/// decode, decode at each depth, and the first prefill length at each depth.
fn speed_columns(r: &BenchRow) -> Vec<f64> {
    let mut v: Vec<f64> = r.prefill.iter().map(|p| p.1).collect();
    v.push(r.decode_b1);
    v.extend(r.decode_depth.iter().map(|d| d.1));
    v.extend(r.prefill_depth.iter().map(|d| d.1));
    v
}

/// Per column, the best hat format over the best llama.cpp format (what issue-style targets
/// compare: each engine in its fastest format). Missing values (NaN) are skipped; a column
/// with none on one side is NaN.
fn best_ratios(hat: &[Vec<f64>], peer: &[Vec<f64>]) -> Vec<f64> {
    let best = |rows: &[Vec<f64>], c: usize| {
        rows.iter()
            .filter_map(|r| r.get(c).copied())
            .filter(|v| v.is_finite())
            .fold(f64::NAN, f64::max)
    };
    let cols = hat.iter().map(Vec::len).max().unwrap_or(0);
    (0..cols).map(|c| best(hat, c) / best(peer, c)).collect()
}

/// The line every speed figure carries: the CPU, the SIMD path in use, the precision of
/// prefill attention and the CPU's flags.
pub fn machine() -> String {
    format!(
        "cpu {} | simd path {} (HAT_SIMD to force) | f32 gemm {} | prefill attention {} (HAT_ATTENTION=f32 to force) | flags {}",
        cpu_model(),
        crate::simd::isa(),
        crate::simd::gemm_path(),
        crate::attention::prefill_precision(),
        crate::simd::cpu_flags()
    )
}

#[cfg(test)]
mod tests {
    use super::best_ratios;

    #[test]
    fn best_ratios_take_each_engines_fastest_format_per_column() {
        let hat = vec![vec![500.0, 140.0], vec![600.0, 120.0]];
        let peer = vec![vec![450.0, 100.0], vec![200.0, f64::NAN]];
        let r = best_ratios(&hat, &peer);
        assert!((r[0] - 600.0 / 450.0).abs() < 1e-12, "{r:?}");
        assert!((r[1] - 1.4).abs() < 1e-12, "{r:?}");
        assert!(best_ratios(&hat, &[vec![f64::NAN, f64::NAN]])[0].is_nan());
    }
}
