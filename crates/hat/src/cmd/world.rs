//! `hat world gen|show`.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Subcommand;

use hat_world::World;

#[derive(Subcommand)]
pub enum WorldCmd {
    /// Create a stream's store as a SQLite file.
    Gen {
        /// Seed of the world: the same seed writes the same store.
        #[arg(long)]
        seed: u64,
        /// The SQLite file to write.
        #[arg(long)]
        out: PathBuf,
        /// Replace an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Summarise a store.
    Show { file: PathBuf },
}

pub fn run(cmd: WorldCmd) -> Result<()> {
    match cmd {
        WorldCmd::Gen { seed, out, force } => {
            if out.exists() && !force {
                bail!("{} exists; pass --force to replace it", out.display());
            }
            if let Some(parent) = out
                .parent()
                .filter(|p| !p.as_os_str().is_empty() && !p.exists())
            {
                bail!(
                    "directory {} does not exist; create it first",
                    parent.display()
                );
            }
            let w = World::generate(seed)?;
            w.save(&out)
                .with_context(|| format!("writing {}", out.display()))?;
            println!(
                "wrote {} ({} products)",
                out.display(),
                w.catalog().products.len()
            );
            Ok(())
        }
        WorldCmd::Show { file } => {
            let w = World::open(&file).with_context(|| format!("opening {}", file.display()))?;
            // A store may come from anyone: its titles are shown, never run.
            println!("{}", hat_harness::text::terminal_safe(&w.summary()));
            Ok(())
        }
    }
}
