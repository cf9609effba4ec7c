//! Stage 3, HSA-RL (GRPO-style), as a [`Stage`] of the shared loop. Each step draws tasks of
//! the train split under the base harness and its train-pool augmented states, runs a group
//! of full agent-loop episodes per task on the inference engine (a snapshot of the current
//! weights), rewards each episode with the evaluation scorer, and trains on the sampled
//! tokens with group-relative advantages (see [`loss`]). Groups whose rewards are all equal
//! are skipped and more tasks drawn in their place.
//!
//! Token exactness: every model turn is trained on the ids the engine computed on (the
//! prompt ids it rendered and the ids it sampled), never on re-tokenised text. A turn's
//! context (tool results, hook feedback) is prompt, never loss; a hook that rewrites a reply
//! changes what viewers saw and the reward, not the tokens trained. The G rollouts of a task
//! share their system prompt, so they are packed on it and it is computed once per group.

pub mod config;
pub mod loss;
pub mod rollout;

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use hat_local_model::LocalModel;
use hat_model::train::TrainModel;
use hat_model::{Engine, SamplingParams, WeightFormat};

use crate::checkpoint::RunState;
use crate::error::{io, Result, TrainError};
use crate::snapshot;
use crate::stage::{add_gradients, train, Event, LoopSettings, Stage, StepWork};
pub use config::{RlConfig, PRESETS};
use loss::{LossShape, LossStats, Weighted};
pub use rollout::{Env, Group};

/// Prefix-cache budget of the rollout engine (~20 system prompts of SmolLM2-135M).
const ROLLOUT_PREFIX_CACHE_BYTES: usize = 1 << 30;

/// The RL stage.
pub struct RlStage {
    cfg: RlConfig,
    env: Env,
    rollout: Option<LocalModel>,
    snapshot: PathBuf,
    reference: Option<Engine>,
    /// Minibatches of the current rollout batch still to train on.
    pending: VecDeque<Vec<Weighted>>,
    rollouts_log: Option<std::fs::File>,
    out: PathBuf,
}

/// What one batch of rollouts gave.
#[derive(Debug, Clone, Default)]
pub struct BatchStats {
    pub rollouts: usize,
    pub reward_sum: f64,
    pub passed: usize,
    pub groups_used: usize,
    pub groups_flat: usize,
    pub turns: usize,
    pub sampled_tokens: usize,
    pub seconds: f64,
}

impl RlStage {
    /// Builds the harness states and task pool; loads the reference model when the KL penalty
    /// is on. `out` holds the rollout snapshot and `rollouts.jsonl`.
    pub fn new(cfg: &RlConfig, out: &Path) -> Result<Self> {
        let states = hat_data::gen::states(
            &cfg.harness_dir,
            cfg.variants,
            hat_augment::Pool::Train,
            cfg.variant_seed,
        )
        .map_err(|e| TrainError::Config {
            path: cfg.harness_dir.display().to_string(),
            message: format!("{e} (harness_dir: the base harness RL runs under)"),
        })?;
        let env = Env::new(states, cfg.tasks, cfg.task_seed)?;
        let reference = if cfg.kl_coef > 0.0 {
            let path = cfg.reference.as_ref().unwrap_or(&cfg.model);
            Some(snapshot::load_engine(path, WeightFormat::F32)?)
        } else {
            None
        };
        Ok(Self {
            cfg: cfg.clone(),
            env,
            rollout: None,
            snapshot: out.join(format!("rollout-{}.gguf", cfg.rollout_format)),
            reference,
            pending: VecDeque::new(),
            rollouts_log: None,
            out: out.to_path_buf(),
        })
    }

    /// The harness states and tasks rollouts draw from.
    pub fn env(&self) -> &Env {
        &self.env
    }

    /// A rollout engine on the current weights, built afresh for every batch even when the
    /// weights did not change (a step with no signal): its per-prompt sample counts (part
    /// of the sampling seeds) and prefix cache then start empty, so a resumed run draws what the straight
    /// run drew.
    fn refresh(&mut self, model: &TrainModel) -> Result<()> {
        // the old engine goes first: two copies of the weights need not coexist
        self.rollout = None;
        let format = snapshot::write(
            model,
            &self.cfg.model,
            &self.cfg.rollout_format,
            &self.snapshot,
        )?;
        let sampling = SamplingParams {
            temperature: self.cfg.temperature,
            ..SamplingParams::default()
        };
        let m = LocalModel::load(&self.snapshot, format, sampling, self.cfg.max_new_tokens)
            .map_err(|e| TrainError::Rollout(e.to_string()))?;
        // a step's groups share a few system prompts; the trainer needs the memory
        m.set_prefix_cache_bytes(ROLLOUT_PREFIX_CACHE_BYTES);
        self.rollout = Some(m);
        Ok(())
    }

    /// Runs rollouts until `tasks_per_step` groups carry signal or the draw rounds run out.
    /// Drawn by a generator seeded with the run seed and the step, so a resumed run draws the
    /// same tasks.
    pub fn collect(
        &mut self,
        model: &TrainModel,
        step: usize,
    ) -> Result<(Vec<Group>, Vec<Group>, BatchStats)> {
        self.refresh(model)?;
        let t0 = Instant::now();
        let mut rng = ChaCha8Rng::seed_from_u64(
            self.cfg.seed ^ (step as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        let m = self.rollout.as_mut().expect("refreshed above");
        m.sampling.seed = self.cfg.seed ^ (step as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
        let (mut used, mut flat) = (Vec::new(), Vec::new());
        let mut st = BatchStats::default();
        for _ in 0..self.cfg.max_draw_rounds {
            let need = self.cfg.tasks_per_step - used.len();
            if need == 0 {
                break;
            }
            let groups = self.env.rollouts(
                &mut rng,
                need,
                self.cfg.group_size,
                m,
                self.cfg.max_turns,
                self.cfg.pass_weight,
            )?;
            for g in groups {
                for r in &g.rollouts {
                    st.rollouts += 1;
                    st.reward_sum += r.reward;
                    st.passed += usize::from(r.pass);
                    st.turns += r.segments.len();
                    st.sampled_tokens += r.segments.iter().map(|s| s.tokens.len()).sum::<usize>();
                }
                if loss::advantages(&g.rewards(), self.cfg.scale_by_std).is_some() {
                    used.push(g);
                } else {
                    flat.push(g);
                }
            }
        }
        st.groups_used = used.len();
        st.groups_flat = flat.len();
        st.seconds = t0.elapsed().as_secs_f64();
        Ok((used, flat, st))
    }

    /// The turns of `groups` with their advantages (and reference log-probabilities when the
    /// KL penalty is on).
    pub fn weigh(&self, groups: &[Group]) -> Result<Vec<Weighted>> {
        let mut out = Vec::new();
        for g in groups {
            let Some(adv) = loss::advantages(&g.rewards(), self.cfg.scale_by_std) else {
                continue;
            };
            for (i, (r, a)) in g.rollouts.iter().zip(adv).enumerate() {
                let mut seqs: Vec<Weighted> = Vec::new();
                for (t, s) in r.segments.iter().enumerate() {
                    if s.tokens.is_empty() {
                        continue;
                    }
                    if let Some(w) = seqs.last_mut() {
                        if w.extend(&s.prompt_ids, &s.tokens, &s.logprobs)? {
                            continue;
                        }
                    }
                    seqs.push(Weighted::new(
                        format!("{}@{} rollout {i} turn {t}", g.task_id, &g.harness_hash),
                        &s.prompt_ids,
                        &s.tokens,
                        &s.logprobs,
                        a,
                    )?);
                }
                if let Some(reference) = &self.reference {
                    for w in &mut seqs {
                        w.reference = Some(reference_logprobs(reference, &w.sample.tokens)?);
                    }
                }
                out.extend(seqs);
            }
        }
        Ok(out)
    }

    fn shape(&self) -> LossShape {
        LossShape {
            clip_low: self.cfg.clip_low,
            clip_high: self.cfg.clip_high,
            tis_cap: self.cfg.tis_cap,
            kl_coef: self.cfg.kl_coef,
        }
    }

    /// The trainer's log-probabilities of each item's sampled tokens at the current weights,
    /// stored as `old` (the denominator of the ratio when a batch trains several steps).
    fn remember_old(&self, model: &TrainModel, items: &mut [Weighted]) -> Result<()> {
        for (packed, tags) in loss::packs(items, self.cfg.max_pack_tokens)? {
            let lp = loss::token_logprobs(model, &packed)?
                .detach()
                .to_vec1::<f32>()?;
            for (row, &(k, i)) in tags.iter().enumerate() {
                let w = &mut items[k];
                let n = w.sample.tokens.len();
                w.old.get_or_insert_with(|| vec![0.0; n])[i] = lp[row];
            }
        }
        Ok(())
    }

    /// Adds the gradient of the token loss over `items` (normalised by their sampled tokens).
    pub fn train_on(
        &self,
        model: &TrainModel,
        items: &[Weighted],
        grads: &mut [Vec<f32>],
    ) -> Result<LossStats> {
        let norm = items.iter().map(Weighted::sampled).sum::<usize>().max(1) as f64;
        let shape = self.shape();
        let mut total = LossStats::default();
        for (packed, tags) in loss::packs(items, self.cfg.max_pack_tokens)? {
            let lp = loss::token_logprobs(model, &packed)?;
            let (l, mut st) = loss::pack_loss(&lp, &tags, items, &shape)?;
            st.seq_tokens = packed.len();
            add_gradients(model, &(l / norm)?, grads)?;
            total.add(&st);
        }
        Ok(total)
    }

    fn log_groups(&mut self, step: usize, used: &[Group], flat: &[Group]) -> Result<()> {
        if !self.cfg.save_rollouts {
            return Ok(());
        }
        let path = self.out.join("rollouts.jsonl");
        let f = match &mut self.rollouts_log {
            Some(f) => f,
            None => self.rollouts_log.insert(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(io(path.display()))?,
            ),
        };
        let mut buf = Vec::new();
        for (g, signal) in used
            .iter()
            .map(|g| (g, true))
            .chain(flat.iter().map(|g| (g, false)))
        {
            let adv = loss::advantages(&g.rewards(), self.cfg.scale_by_std);
            let line = json!({
                "step": step + 1,
                "task_id": g.task_id,
                "task_type": g.task_type,
                "state": g.state,
                "harness_hash": g.harness_hash,
                "call_syntax": g.call_syntax,
                "trained": signal,
                "rollouts": g.rollouts.iter().enumerate().map(|(i, r)| json!({
                    "reward": r.reward,
                    "advantage": adv.as_ref().map(|a| a[i]),
                    "pass": r.pass,
                    "reason": r.reason,
                    "reply": r.reply,
                    // each turn: ids = prompt then sampled; loss on ids[mask_from..]
                    "turns": r.segments.iter().map(|s| {
                        let mut ids = s.prompt_ids.clone();
                        ids.extend_from_slice(&s.tokens);
                        json!({"ids": ids, "mask_from": s.prompt_ids.len(), "logprobs": s.logprobs})
                    }).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            });
            serde_json::to_writer(&mut buf, &line)?;
            buf.push(b'\n');
        }
        f.write_all(&buf).map_err(io(path.display()))
    }
}

/// `engine`'s log-probability of each token given the ones before it (0 for the first).
fn reference_logprobs(engine: &Engine, ids: &[u32]) -> Result<Vec<f32>> {
    let rows = snapshot::scored_rows(engine, ids, 1)?;
    let tgt =
        candle_core::Tensor::from_slice(&ids[1..], (ids.len() - 1, 1), &candle_core::Device::Cpu)?;
    let mut out = vec![0.0];
    out.extend(rows.gather(&tgt, 1)?.flatten_all()?.to_vec1::<f32>()?);
    Ok(out)
}

/// Keeps the lines of `rollouts.jsonl` up to `step` (a resumed run redoes later steps).
fn trim_rollouts(out: &Path, step: usize) -> Result<()> {
    let path = out.join("rollouts.jsonl");
    // bytes, not text: a line torn by a full disk may end inside a character
    let text = match std::fs::read(&path) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(path.display())(e)),
    };
    let kept: String = text
        .lines()
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|v| v["step"].as_u64())
                .is_some_and(|s| s as usize <= step)
        })
        .flat_map(|l| [l, "\n"])
        .collect();
    // replaced whole, so a run killed here keeps its log
    crate::durable::write(&path, kept).map_err(io(path.display()))
}

impl Stage for RlStage {
    fn start(&mut self, _model: &TrainModel, state: &RunState) -> Result<()> {
        trim_rollouts(&self.out, state.step)
    }

    fn step(
        &mut self,
        model: &TrainModel,
        state: &mut RunState,
        grads: &mut [Vec<f32>],
    ) -> Result<StepWork> {
        let mut extra = BTreeMap::new();
        if self.pending.is_empty() {
            let (used, flat, b) = self.collect(model, state.step)?;
            self.log_groups(state.step, &used, &flat)?;
            let n = b.rollouts.max(1) as f64;
            extra.insert("reward_mean".into(), b.reward_sum / n);
            extra.insert("pass_rate".into(), b.passed as f64 / n);
            extra.insert("groups_used".into(), b.groups_used as f64);
            extra.insert("groups_flat".into(), b.groups_flat as f64);
            extra.insert("turns_mean".into(), b.turns as f64 / n);
            extra.insert("sampled_tokens_mean".into(), b.sampled_tokens as f64 / n);
            extra.insert("rollout_seconds".into(), b.seconds);
            // minibatches by group: a group's advantages stay together
            let k = self.cfg.minibatches.min(used.len()).max(1);
            let per = used.len().div_ceil(k).max(1);
            for chunk in used.chunks(per) {
                let mut items = self.weigh(chunk)?;
                if self.cfg.minibatches > 1 {
                    self.remember_old(model, &mut items)?;
                }
                self.pending.push_back(items);
            }
        }
        let t = Instant::now();
        let items = self.pending.pop_front().unwrap_or_default();
        let st = self.train_on(model, &items, grads)?;
        let n = st.tokens.max(1) as f64;
        extra.insert("train_seconds".into(), t.elapsed().as_secs_f64());
        extra.insert("rollout_mismatch".into(), st.mismatch / n);
        extra.insert("clip_fraction".into(), st.clipped as f64 / n);
        extra.insert("tis_truncated_fraction".into(), st.truncated as f64 / n);
        if self.cfg.kl_coef > 0.0 {
            extra.insert("kl".into(), st.kl / n);
        }
        state.epoch = (state.step + 1) * self.cfg.tasks_per_step / self.env.tasks.len().max(1);
        Ok(StepWork {
            loss: st.loss / n,
            tokens: st.seq_tokens,
            loss_tokens: st.tokens,
            extra,
        })
    }

    fn validate(&mut self, _model: &TrainModel) -> Result<Option<f64>> {
        // the reward curve is the signal; evaluate the suites on the exported model
        Ok(None)
    }

    fn can_checkpoint(&self) -> bool {
        // the batch's remaining minibatches (and their old log-probabilities) live only here
        self.pending.is_empty()
    }
}

/// Runs (or resumes) an RL run in `out`.
pub fn run(cfg: &RlConfig, out: &Path, resume: bool, on: &mut dyn FnMut(Event)) -> Result<PathBuf> {
    cfg.validate()?;
    std::fs::create_dir_all(out).map_err(io(out.display()))?;
    let loaded = TrainModel::load_maybe_lora(&cfg.model, cfg.lora.as_ref())?;
    let model = loaded.model;
    let mut stage = RlStage::new(cfg, out)?;
    if let Some(reference) = &stage.reference {
        snapshot::same_tokenizer(
            &loaded.tokenizer,
            reference,
            "reference model",
            cfg.reference.as_ref().unwrap_or(&cfg.model),
            "the KL penalty compares the two models' log-probabilities of the same token ids",
        )?;
    }
    on(Event::Note(&format!(
        "rollouts: {} train-split tasks under {} harness states (the base and {} train-pool \
         variants); {} tasks x {} rollouts a step, at most {} turns of {} tokens",
        stage.env.tasks.len(),
        stage.env.states.len(),
        cfg.variants,
        cfg.tasks_per_step,
        cfg.group_size,
        cfg.max_turns,
        cfg.max_new_tokens
    )));
    let settings = LoopSettings {
        source: &cfg.model,
        max_steps: cfg.max_steps,
        eval_every: cfg.max_steps,
        save_every: cfg.save_every,
        keep: cfg.keep,
        export: &cfg.export,
        optim: cfg.optim,
        matmul: cfg.matmul,
    };
    let last = train(&settings, &model, &mut stage, out, resume, on)?;
    stage.rollout = None;
    let _ = std::fs::remove_file(&stage.snapshot);
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_waits_while_minibatches_of_the_batch_remain() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = RlConfig::preset("smoke").unwrap();
        c.harness_dir =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
        let mut stage = RlStage::new(&c, dir.path()).unwrap();
        assert!(stage.can_checkpoint());
        stage.pending.push_back(Vec::new());
        assert!(!stage.can_checkpoint(), "a minibatch of the batch is left");
        stage.pending.pop_front();
        assert!(stage.can_checkpoint());
    }
}
