//! Stand-alone driver for the model engine's CLI until the `hat` binary wires it:
//! `cargo run --release -p hat-model --example hat_model -- model info`.

use clap::{Parser, Subcommand};
use hat_model::bench::{run_bench_generate, BenchGenerateArgs};
use hat_model::cli::{run_generate, run_model, GenerateArgs, ModelCommand};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Model files.
    #[command(subcommand)]
    Model(ModelCommand),
    /// Generate text.
    Generate(GenerateArgs),
    /// Benchmark generation.
    Bench(BenchGenerateArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Model(c) => run_model(c),
        Cmd::Generate(a) => run_generate(a),
        Cmd::Bench(a) => run_bench_generate(a),
    }
}
