//! `hat augment`.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use clap::Args;

use hat_augment::Pool;

#[derive(Args)]
pub struct AugmentArgs {
    /// The base harness directory.
    #[arg(long)]
    harness: PathBuf,
    /// Variants to write (at most 100,000).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=100_000))]
    count: usize,
    /// Seed of the draws: the same seed writes byte-identical variants.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// train or heldout: which half of every family's parameters to draw from.
    #[arg(long, default_value = "train")]
    pool: String,
    /// Folder to write the variants into (one harness folder each, and a manifest).
    #[arg(long)]
    out: PathBuf,
    /// List the held-out parameters and exit.
    #[arg(long)]
    list_heldout: bool,
}

pub fn parse_pool(s: &str) -> Result<Pool> {
    Pool::parse(s).ok_or_else(|| anyhow!("--pool must be train or heldout, not `{s}`"))
}

pub fn run(a: AugmentArgs) -> Result<()> {
    if a.list_heldout {
        for (family, kind, values) in hat_augment::heldout_parameters() {
            println!("{family:<16} {kind:<24} {}", values.join(", "));
        }
        println!(
            "{} held-out parameters",
            hat_augment::heldout_parameter_count()
        );
        return Ok(());
    }
    let pool = parse_pool(&a.pool)?;
    if a.count == 0 {
        bail!("--count must be at least 1");
    }
    if a.out.exists()
        && std::fs::read_dir(&a.out)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        bail!(
            "{} exists and is not empty; choose a new --out directory",
            a.out.display()
        );
    }
    let s = hat_augment::write_variants(&a.harness, a.count, a.seed, pool, &a.out)?;
    println!(
        "wrote {} {} variants to {} (base {})",
        s.count,
        s.pool,
        s.out.display(),
        &s.base_hash[..s.base_hash.len().min(23)]
    );
    println!("variants using held-out parameters: {}", s.heldout_variants);
    for (family, n) in &s.families {
        println!("  {family:<16} changed {n} variant(s)");
    }
    Ok(())
}
