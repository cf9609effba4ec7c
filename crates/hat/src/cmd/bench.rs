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
    /// Oracle trajectories generated and scored per minute (single thread).
    Datagen {
        #[arg(long, default_value = "harnesses/livestream")]
        harness: PathBuf,
        #[arg(long, default_value_t = 5000)]
        tasks: usize,
        #[arg(long, default_value_t = 8)]
        variants: usize,
        #[arg(long, default_value = "train")]
        pool: String,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
    },
}

pub fn run(cmd: BenchCmd) -> Result<()> {
    match cmd {
        BenchCmd::Generate(a) => hat_model::bench::run_bench_generate(a),
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
