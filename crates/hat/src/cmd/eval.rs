//! `hat eval ifeval`: score an existing IFEval response file.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Subcommand;

#[derive(Subcommand)]
pub enum EvalCmd {
    /// Score IFEval responses (one JSON object per line with `prompt` and `response`).
    Ifeval {
        #[arg(long)]
        responses: PathBuf,
        #[arg(long)]
        out: PathBuf,
        /// The IFEval prompts; default: ../shared/data/ifeval/input_data.jsonl beside the repo, or $HAT_SHARED/data/ifeval/input_data.jsonl.
        #[arg(long)]
        input: Option<PathBuf>,
    },
}

fn default_input() -> PathBuf {
    let shared = std::env::var_os("HAT_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("../shared"));
    shared.join("data/ifeval/input_data.jsonl")
}

pub fn run(cmd: EvalCmd) -> Result<()> {
    match cmd {
        EvalCmd::Ifeval {
            responses,
            out,
            input,
        } => {
            let input = input.unwrap_or_else(default_input);
            let inputs = hat_ifeval::read_inputs(&input).with_context(|| {
                format!("reading IFEval prompts {} (pass --input)", input.display())
            })?;
            let resp = hat_ifeval::read_responses(&responses)?;
            let report = hat_ifeval::score_responses(&inputs, &resp)?;
            hat_ifeval::write_outputs(&report, &out)?;
            print!("{report}");
            println!(
                "wrote {}/items.jsonl and {}/results.json",
                out.display(),
                out.display()
            );
            Ok(())
        }
    }
}
