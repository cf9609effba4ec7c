//! `hat`: the one command line of Harness-Aware Training. A thin layer: each
//! subcommand parses its arguments and calls a library crate.

use clap::{Parser, Subcommand};

mod cmd;
mod input;
mod progress;

#[derive(Parser)]
#[command(
    name = "hat",
    version,
    about = "Harness-Aware Training: compact live-stream agents that keep working when their harness changes"
)]
struct Cli {
    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check or render a harness directory.
    #[command(subcommand)]
    Harness(cmd::harness::HarnessCmd),
    /// Generate or inspect a live-stream world (a SQLite store).
    #[command(subcommand)]
    World(cmd::world::WorldCmd),
    /// Write augmented harness states (Harness-State Augmentation).
    Augment(cmd::augment::AugmentArgs),
    /// Run one live turn: a viewer's comment through the agent loop.
    Run(cmd::run::RunArgs),
    /// Sample tasks of a split.
    #[command(subcommand)]
    Tasks(cmd::tasks::TasksCmd),
    /// Generate or summarise trajectory datasets.
    #[command(subcommand)]
    Data(cmd::data::DataCmd),
    /// Run the evaluation suites (lsqa, hvqa, ifeval), score IFEval responses, compare runs.
    Eval(cmd::eval::EvalArgs),
    /// Model files: fetch the default model, inspect, tokenize.
    #[command(subcommand)]
    Model(cmd::model::ModelCommand),
    /// Generate text with the embedded engine.
    Generate(cmd::model::GenerateArgs),
    /// Measure speed.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCmd),
    /// Train models: the three HAT stages (SFT, distillation, RL), the pipeline, export, merge, plots.
    #[command(subcommand)]
    Train(cmd::train::TrainCmd),
    /// Serve live streams and an OpenAI-compatible API.
    Serve(cmd::serve::ServeArgs),
    /// The HSA environment for external RL trainers.
    #[command(subcommand)]
    Env(cmd::env::EnvCmd),
    /// A/B experiments: arms of models and harness versions on a simulated audience.
    #[command(subcommand)]
    Ab(cmd::ab::AbCmd),
}

fn main() {
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    if !matches!(cli.command, Command::Serve(_) | Command::Env(_)) {
        exit_quietly_when_stdout_closes();
    }
    let result = match cli.command {
        Command::Harness(c) => cmd::harness::run(c),
        Command::World(c) => cmd::world::run(c),
        Command::Augment(a) => cmd::augment::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Tasks(c) => cmd::tasks::run(c),
        Command::Data(c) => cmd::data::run(c),
        Command::Eval(c) => cmd::eval::run(c),
        Command::Model(c) => cmd::model::run_model(c),
        Command::Generate(a) => cmd::model::run_generate(a),
        Command::Bench(c) => cmd::bench::run(c),
        Command::Train(c) => cmd::train::run(c),
        Command::Env(c) => cmd::env::run(c),
        Command::Ab(c) => cmd::ab::run(c),
    };
    if let Err(e) = result {
        // An error can quote what it read (a store's value, a file's line, a model's output):
        // its control characters are shown, never run by the terminal.
        eprintln!("error: {}", hat_harness::text::terminal_safe(&describe(&e)));
        std::process::exit(1);
    }
}

/// `hat ... | head` closes stdout early: Rust ignores SIGPIPE, so the next `println!` panics
/// with "failed printing to stdout: Broken pipe". The command-line tools end quietly on it
/// instead, as Unix tools do. SIGPIPE itself stays ignored: restoring its default killed `hat`
/// (exit 141, no message) whenever a command hook exited without reading its stdin. A
/// long-running server does not call this.
fn exit_quietly_when_stdout_closes() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info.payload_as_str().unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

/// The error and its causes, each said once: library errors already quote
/// their source in their message, so a cause already in the text is skipped.
fn describe(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !msg.contains(&c) {
            msg.push_str(": ");
            msg.push_str(&c);
        }
    }
    msg
}
