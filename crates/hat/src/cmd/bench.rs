//! `hat bench datagen`: trajectory-generation rate on this machine.

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;

use hat_data::{gen, GenConfig, Teacher};

use crate::cmd::augment::parse_pool;

#[derive(Subcommand)]
pub enum BenchCmd {
    /// Prefill and decode speed of the embedded engine per weight format, optionally beside llama.cpp.
    Generate(hat_model::bench::BenchGenerateArgs),
    /// Training step speed and peak memory: one 512-token sequence, one packed group.
    Train {
        /// Starting model (`default` or a path).
        #[arg(long, default_value = "default")]
        model: String,
        /// Trajectories (`hat data gen --group 16` output).
        #[arg(long)]
        data: PathBuf,
        /// Conversations per packed group.
        #[arg(long, default_value_t = 16, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256))]
        group: usize,
        /// Also time the group's conversations one by one (the packing speed-up; slow).
        #[arg(long)]
        unpacked: bool,
        /// Timed steps per workload, after one warm-up step (the median is reported).
        #[arg(long, default_value_t = 2, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100))]
        repeats: usize,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
        /// Also write each workload (tokens, positions, attention visibility, scored rows) as
        /// JSON into this folder, for `crates/train/scripts/bench_pytorch.sh`.
        #[arg(long)]
        dump: Option<PathBuf>,
        /// Precision of the dense products: f32, or bf16 (operands rounded, f32 accumulation;
        /// CPUs with AVX-512 BF16).
        #[arg(long, default_value = "f32")]
        matmul: hat_train::config::Matmul,
    },
    /// The live-stream server under a simulated audience, beside llama.cpp's server as the
    /// upstream of the same pipeline.
    Serve(crate::cmd::bench_serve::ServeBenchArgs),
    /// Oracle trajectories generated and scored per minute (single thread).
    Datagen {
        /// The base harness directory.
        #[arg(long, default_value = "harnesses/livestream")]
        harness: PathBuf,
        /// Tasks generated per repeat.
        #[arg(long, default_value_t = 5000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000_000))]
        tasks: usize,
        /// Augmented harness states besides the base one.
        #[arg(long, default_value_t = 8, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=100_000))]
        variants: usize,
        /// train or heldout: which half of every family's parameters to draw from.
        #[arg(long, default_value = "train")]
        pool: String,
        /// Timed repeats (the median is reported).
        #[arg(long, default_value_t = 3)]
        repeats: usize,
    },
}

fn rayon_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

pub fn run(cmd: BenchCmd) -> Result<()> {
    match cmd {
        BenchCmd::Generate(a) => hat_model::bench::run_bench_generate(a),
        BenchCmd::Train {
            model,
            data,
            group,
            unpacked,
            repeats,
            json,
            dump,
            matmul,
        } => {
            let path = crate::cmd::backend::model_path(&model);
            hat_model::train::set_matmul_precision(matmul.into())?;
            println!(
                "cpu: {} | simd path: {} | f32 gemm: {} | matmul: {} | threads: {}",
                hat_model::simd::cpu_flags(),
                hat_model::simd::isa().name(),
                hat_model::simd::gemm_path(),
                hat_model::train::matmul_precision().name(),
                rayon_threads()
            );
            hat_train::keep_freed_memory();
            let rows =
                hat_train::bench::run(&path, &data, group, unpacked, repeats, dump.as_deref())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                println!("| workload | tokens | loss tokens | s/step | tokens/s | peak RSS GB |");
                println!("| --- | --- | --- | --- | --- | --- |");
                for r in &rows {
                    println!(
                        "| {} | {} | {} | {:.2} | {:.1} | {} |",
                        r.name,
                        r.tokens,
                        r.loss_tokens,
                        r.seconds,
                        r.tokens_per_s,
                        r.peak_rss_gb
                            .map(|g| format!("{g:.2}"))
                            .unwrap_or("-".into())
                    );
                }
                if let Some(x) = hat_train::bench::packing_speedup(&rows) {
                    println!(
                        "packing speed-up: {x:.2}x (the conversations one by one against the \
                         packed step, in seconds)"
                    );
                }
            }
            Ok(())
        }
        BenchCmd::Serve(a) => crate::cmd::bench_serve::run(a),
        BenchCmd::Datagen {
            harness,
            tasks,
            variants,
            pool,
            repeats,
        } => {
            let pool = parse_pool(&pool)?;
            let cfg = GenConfig {
                harness_dir: harness.clone(),
                variants,
                pool,
                tasks,
                seed: 7,
                group: 1,
                shared_scene: false,
                mix: Default::default(),
                recovery: 0.0,
                first_turns: 0,
            };
            let states = gen::states(&harness, variants, pool, cfg.seed)?;
            let mut rates = Vec::new();
            for i in 0..repeats.max(1) {
                let mut sink = std::io::sink();
                let r = gen::generate(
                    &cfg,
                    &states,
                    &mut Teacher::Oracle,
                    &Default::default(),
                    &mut sink,
                    &mut |_, _| {},
                )?;
                println!(
                    "run {}: {} trajectories ({} rejected) in {:.3}s = {:.0}/min",
                    i + 1,
                    r.written,
                    r.rejected,
                    r.seconds,
                    r.per_minute
                );
                rates.push(r.per_minute);
            }
            rates.sort_by(f64::total_cmp);
            println!(
                "median {:.0} scored trajectories/min on one thread ({} harness states)",
                rates[rates.len() / 2],
                states.len()
            );
            Ok(())
        }
    }
}
