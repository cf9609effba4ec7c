//! `hat tasks sample`.

use anyhow::{anyhow, Result};
use clap::Subcommand;

use hat_tasks::{Split, TaskKind, TaskSet, WorldCache};

#[derive(Subcommand)]
pub enum TasksCmd {
    /// Print tasks of a split as JSON lines.
    Sample {
        /// train or test.
        #[arg(long, default_value = "test")]
        split: String,
        /// Tasks to print (at most 100,000: each 40 share a generated world, ~6 KB a task).
        #[arg(long, default_value_t = 19, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
        count: usize,
        /// Seed of the draw.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Only this task type.
        #[arg(long)]
        kind: Option<String>,
    },
    /// List the task types.
    Kinds,
}

pub fn parse_split(s: &str) -> Result<Split> {
    match s {
        "train" => Ok(Split::Train),
        "test" => Ok(Split::Test),
        o => Err(anyhow!("--split must be train or test, not `{o}`")),
    }
}

pub fn run(cmd: TasksCmd) -> Result<()> {
    match cmd {
        TasksCmd::Kinds => {
            for k in TaskKind::ALL {
                println!("{k}");
            }
            Ok(())
        }
        TasksCmd::Sample {
            split,
            count,
            seed,
            kind,
        } => {
            let split = parse_split(&split)?;
            let kinds: Vec<TaskKind> = match kind {
                Some(k) => vec![TaskKind::parse(&k).ok_or_else(|| {
                    anyhow!("unknown task type `{k}`; `hat tasks kinds` lists them")
                })?],
                None => TaskKind::ALL.to_vec(),
            };
            let mut worlds = WorldCache::default();
            for t in TaskSet::generate_kinds(split, count, seed, &kinds, &mut worlds)? {
                println!("{}", serde_json::to_string(&t)?);
            }
            Ok(())
        }
    }
}
