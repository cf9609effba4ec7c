//! `hat env serve`: the HSA environment over HTTP for external RL trainers.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};

use hat_env::{Catalogue, EnvConfig};

use crate::cmd::augment::parse_pool;

#[derive(Subcommand)]
pub enum EnvCmd {
    /// Serve episodes over HTTP: POST /v1/reset, POST /v1/step, GET /v1/info (docs/training.md).
    Serve(ServeArgs),
}

#[derive(Args)]
pub struct ServeArgs {
    /// The base harness directory.
    #[arg(long, default_value = "harnesses/livestream")]
    harness: PathBuf,
    /// Augmented harness states besides the base one (at most 10,000: all are kept compiled).
    #[arg(long, default_value_t = 64, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=10_000))]
    variants: usize,
    /// Augmentation pool: train or heldout.
    #[arg(long, default_value = "train")]
    pool: String,
    /// Seed of the augmented states.
    #[arg(long, default_value_t = 3)]
    variant_seed: u64,
    /// Task split: train or test.
    #[arg(long, default_value = "train")]
    split: String,
    /// Tasks episodes draw from (1 to 1,000,000).
    #[arg(long, default_value_t = 2000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    tasks: usize,
    /// Seed of the tasks episodes draw from.
    #[arg(long, default_value_t = 3)]
    task_seed: u64,
    /// Model turns per episode (tool rounds and hook retries included).
    #[arg(long, default_value_t = 5)]
    max_turns: usize,
    /// Episodes open at once, at most.
    #[arg(long, default_value_t = 256)]
    max_sessions: usize,
    /// Seconds without a step after which an episode is rolled back and forgotten (1 to
    /// 86,400: a day; an open episode holds a thread and a world copy).
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    idle_s: u64,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8090")]
    addr: SocketAddr,
}

pub fn run(c: EnvCmd) -> Result<()> {
    let EnvCmd::Serve(a) = c;
    let split = match a.split.as_str() {
        "train" => hat_tasks::Split::Train,
        "test" => hat_tasks::Split::Test,
        other => anyhow::bail!("--split {other}: train or test"),
    };
    let cfg = EnvConfig {
        harness_dir: a.harness.clone(),
        variants: a.variants,
        pool: parse_pool(&a.pool)?,
        variant_seed: a.variant_seed,
        split,
        tasks: a.tasks,
        task_seed: a.task_seed,
        max_turns: a.max_turns.max(1),
        max_sessions: a.max_sessions.max(1),
        idle: Duration::from_secs(a.idle_s),
    };
    let cat = Catalogue::build(&cfg)?;
    let (n_tasks, n_states) = (cat.tasks.len(), cat.states.len());
    let router = hat_env::router(cfg, cat);
    crate::cmd::serve::listen(a.addr, |listener, at| async move {
        eprintln!(
            "serving {n_tasks} {} tasks under {n_states} harness states on http://{at}",
            a.split
        );
        hat_env::serve(router, listener, crate::cmd::serve::shutdown_signal()).await?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        env: EnvCmd,
    }

    /// Review finding: a huge `--idle-s` overflowed `Instant::now() + idle` in every episode's
    /// thread (a panic after the first observation); the flag is now range-checked by clap.
    #[test]
    fn idle_s_is_range_checked() {
        let parse = |v: &str| Cli::try_parse_from(["env", "serve", "--idle-s", v]);
        let EnvCmd::Serve(a) = parse("86400").unwrap().env;
        assert_eq!(a.idle_s, 86_400);
        for bad in ["0", "86401", "18446744073709551615"] {
            let e = parse(bad).err().unwrap().to_string();
            assert!(
                e.contains("--idle-s") && e.contains("1..=86400"),
                "{bad}: {e}"
            );
        }
    }
}
