//! `hat bench train`: the speed and peak memory of one optimiser step (forward, backward,
//! AdamW) on (a) one 512-token sequence scored at every position, as a plain language-model
//! step, and (b) one packed group of conversations from real data, scored on assistant tokens
//! as training does, and optionally (c) the same group's conversations one by one, for the
//! packing speed-up ([`packing_speedup`]). The packed group runs before the one-by-one pass:
//! measured after it, in the same process, the packed step took 40-50% longer than in a process
//! of its own or in a training run (46.6 against 32 s), which understated the speed-up.

use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use hat_model::train::{Packed, TrainModel};

use crate::error::{Result, TrainError};
use crate::optim::{AdamW, AdamWConfig};
use crate::pack::{pack, PackConfig};
use crate::tokens::{read_jsonl, Encoder};

/// Which workload a row measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// One 512-token sequence, every position scored.
    Lm512,
    /// One packed group of conversations.
    Packed,
    /// The packed group's conversations, one sequence each.
    OneByOne,
}

/// One measured workload.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    pub workload: Workload,
    pub name: String,
    /// Tokens processed per step and the tokens scored.
    pub tokens: usize,
    pub loss_tokens: usize,
    /// Median seconds of one full step.
    pub seconds: f64,
    pub tokens_per_s: f64,
    /// Peak resident memory of the process during the workload (GB), where the OS tells.
    pub peak_rss_gb: Option<f64>,
}

/// Resets the kernel's peak-RSS counter for this process (Linux); false where unsupported. The
/// allocator keeps freed memory, so a later workload's peak includes what earlier ones left:
/// the one-by-one pass, which runs after the packed group, reports at least the group's peak.
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// One workload as JSON, for measuring the same work in another trainer
/// (`crates/train/scripts/bench_pytorch.sh`).
#[derive(Serialize)]
struct Dump<'a> {
    name: &'a str,
    /// Every sequence of the step: its tokens, positions, per-query visibility (query `i` sees
    /// keys `[0, prefix_end[i])` and `[segment_start[i], i]`) and scored rows with targets.
    sequences: Vec<DumpSeq<'a>>,
}

#[derive(Serialize)]
struct DumpSeq<'a> {
    ids: &'a [u32],
    positions: &'a [u32],
    prefix_end: &'a [u32],
    segment_start: &'a [u32],
    loss_rows: &'a [u32],
    targets: &'a [u32],
}

fn dump(dir: &Path, index: usize, name: &str, seqs: &[&Packed]) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(crate::error::io(dir.display()))?;
    let d = Dump {
        name,
        sequences: seqs
            .iter()
            .map(|s| {
                let (a, b) = s.visible.bounds();
                DumpSeq {
                    ids: &s.ids,
                    positions: &s.positions,
                    prefix_end: a,
                    segment_start: b,
                    loss_rows: &s.loss_rows,
                    targets: &s.targets,
                }
            })
            .collect(),
    };
    let path = dir.join(format!("workload-{index}.json"));
    std::fs::write(&path, serde_json::to_vec(&d)?).map_err(crate::error::io(path.display()))
}

/// Forward + backward over `seqs` (gradients accumulated) and one AdamW step.
fn step(model: &TrainModel, opt: &mut AdamW, seqs: &[&Packed]) -> Result<()> {
    let vars = model.vars();
    let total: usize = seqs.iter().map(|s| s.targets.len()).sum();
    let mut grads = crate::stage::zero_gradients(vars.len());
    for s in seqs {
        crate::sft::accumulate(model, s, total as f64, &mut grads)?;
    }
    // a tiny learning rate: the bench measures, it should not wander off
    opt.step(vars, &mut grads, 1e-9)?;
    Ok(())
}

struct Bench<'a> {
    model: &'a TrainModel,
    opt: AdamW,
    dump: Option<&'a Path>,
    rows: Vec<BenchRow>,
}

impl Bench<'_> {
    fn measure(
        &mut self,
        workload: Workload,
        name: &str,
        seqs: &[&Packed],
        repeats: usize,
    ) -> Result<()> {
        if let Some(dir) = self.dump {
            dump(dir, self.rows.len(), name, seqs)?;
        }
        let row = measure(workload, name, self.model, &mut self.opt, seqs, repeats)?;
        self.rows.push(row);
        Ok(())
    }
}

fn measure(
    workload: Workload,
    name: &str,
    model: &TrainModel,
    opt: &mut AdamW,
    seqs: &[&Packed],
    repeats: usize,
) -> Result<BenchRow> {
    let peak_ok = reset_peak();
    step(model, opt, seqs)?; // warm-up
    let mut times = Vec::new();
    for _ in 0..repeats.max(1) {
        let t = Instant::now();
        step(model, opt, seqs)?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let seconds = times[times.len() / 2];
    let tokens: usize = seqs.iter().map(|s| s.len()).sum();
    Ok(BenchRow {
        workload,
        name: name.to_string(),
        tokens,
        loss_tokens: seqs.iter().map(|s| s.targets.len()).sum(),
        seconds,
        tokens_per_s: tokens as f64 / seconds,
        peak_rss_gb: if peak_ok {
            hat_model::bench::peak_rss_mib().map(|m| m / 1024.0)
        } else {
            None
        },
    })
}

/// Runs the workloads on `model` with trajectories from `data`; with `dump`, each workload is
/// also written there as `workload-N.json` (N in the order of the returned rows).
pub fn run(
    model_path: &Path,
    data: &Path,
    group: usize,
    unpacked: bool,
    repeats: usize,
    dump: Option<&Path>,
) -> Result<Vec<BenchRow>> {
    let loaded = TrainModel::load(model_path)?;
    let model = loaded.model;
    let enc = Encoder::new(loaded.tokenizer, loaded.chat_template.as_deref())?;
    let trajs = read_jsonl(data)?;
    let samples = trajs
        .iter()
        .take(group.max(1) * 8)
        .map(|t| enc.encode(&t.id, &t.record.messages))
        .collect::<Result<Vec<_>>>()?;
    let first = samples
        .iter()
        .find(|s| s.tokens.len() >= 512)
        .ok_or_else(|| {
            TrainError::Invalid("no trajectory of 512 tokens or more in the data".into())
        })?;
    let sizes: Vec<usize> = model.vars().iter().map(|(_, v)| v.elem_count()).collect();
    let mut bench = Bench {
        model: &model,
        opt: AdamW::new(AdamWConfig::default(), &sizes),
        dump,
        rows: Vec::new(),
    };
    let lm = Packed::causal(first.tokens[..512].to_vec(), &[true; 512])?;
    bench.measure(
        Workload::Lm512,
        "512 tokens, every position scored",
        &[&lm],
        repeats,
    )?;
    let packs = pack(
        &samples,
        &PackConfig {
            max_tokens: PackConfig::default().max_tokens.min(model.max_positions()),
            max_conversations: group.max(1),
            ..PackConfig::default()
        },
    )?;
    let best = packs
        .iter()
        .max_by_key(|p| p.members.len())
        .ok_or_else(|| TrainError::Invalid("no trajectories to pack".into()))?;
    bench.measure(
        Workload::Packed,
        &format!("packed group of {} conversations", best.members.len()),
        &[&best.seq],
        repeats,
    )?;
    if unpacked {
        let singles: Vec<Packed> = best
            .members
            .iter()
            .map(|&i| Packed::causal(samples[i].tokens.clone(), &samples[i].mask))
            .collect::<hat_model::Result<_>>()?;
        let refs: Vec<&Packed> = singles.iter().collect();
        bench.measure(
            Workload::OneByOne,
            &format!("the same {} conversations one by one", refs.len()),
            &refs,
            1,
        )?;
    }
    Ok(bench.rows)
}

/// Seconds of the one-by-one pass over seconds of the packed step, when both were measured.
pub fn packing_speedup(rows: &[BenchRow]) -> Option<f64> {
    let secs = |w| rows.iter().find(|r| r.workload == w).map(|r| r.seconds);
    Some(secs(Workload::OneByOne)? / secs(Workload::Packed)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(workload: Workload, seconds: f64) -> BenchRow {
        BenchRow {
            workload,
            name: String::new(),
            tokens: 1,
            loss_tokens: 1,
            seconds,
            tokens_per_s: 1.0 / seconds,
            peak_rss_gb: None,
        }
    }

    #[test]
    fn the_speedup_needs_both_passes() {
        let packed = row(Workload::Packed, 30.0);
        let singles = row(Workload::OneByOne, 120.0);
        assert_eq!(packing_speedup(std::slice::from_ref(&packed)), None);
        assert_eq!(
            packing_speedup(&[row(Workload::Lm512, 1.0), packed, singles]),
            Some(4.0)
        );
    }
}
