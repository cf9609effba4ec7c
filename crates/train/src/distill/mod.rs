//! Stage 2, general on-policy distillation, as a [`Stage`] of the shared loop: the student
//! samples answers with the inference engine from a snapshot of its current weights (refreshed
//! after every optimiser step), a frozen teacher scores every sampled position over the whole
//! vocabulary, and the loss is the per-token reverse KL, KL(student || teacher), summed over
//! the vocabulary and averaged over sampled tokens.
//!
//! General prompts are scored by the general teacher (the base model by default: it holds the
//! general ability SFT erodes); live-stream prompts by the stream teacher (the student's own
//! starting weights by default), so distillation pulls general answers back towards the base
//! model without pulling the agent away from what stage 1 taught. The sampled ids are what
//! the engine computed on; the trainer never re-tokenises text.

mod broad;
pub mod prompts;
pub mod score;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use hat_model::train::TrainModel;
use hat_model::{Engine, GenerateOutput, GenerateRequest, SamplingParams, WeightFormat};

use crate::checkpoint::RunState;
use crate::error::{Result, TrainError};
use crate::optim::AdamWConfig;
use crate::snapshot::{load_engine, same_tokenizer};

/// Why a teacher must share the student's tokenizer (for [`same_tokenizer`]'s error).
const WHY: &str = "distillation compares distributions over the same token ids";
use crate::stage::{add_gradients, train, Event, LoopSettings, Stage, StepWork};
use crate::tokens::Encoder;
use prompts::{Prompt, Source};

/// A distillation run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DistillConfig {
    /// The student's starting weights (the stage-1 model): a GGUF file or Hugging Face folder.
    pub model: PathBuf,
    /// The teacher of general prompts (default: the base model).
    pub teacher: PathBuf,
    /// The teacher of live-stream prompts; unset: the student's starting weights.
    pub stream_teacher: Option<PathBuf>,
    /// Generated general prompts.
    pub general_prompts: usize,
    /// Which generator writes them (`basic` or `broad`; [`prompts::GeneralSet`]).
    pub general_set: prompts::GeneralSet,
    /// More general prompts, JSONL (`{"prompt": ...}` or `{"messages": [...]}` per line).
    pub prompt_files: Vec<PathBuf>,
    /// `hat data gen` files whose openings (system prompt + viewer event) are stream prompts.
    pub stream_data: Vec<PathBuf>,
    /// Share of each step's prompts that are live-stream prompts (needs `stream_data`). They
    /// are drawn a scene at a time (prompts with the same system prompt, as `hat data gen
    /// --shared-scene` writes them) and scored packed on that prompt.
    pub stream_share: f64,
    /// Most tokens in one packed sequence of live-stream answers (0: each answer alone).
    pub pack_tokens: usize,
    pub seed: u64,
    pub max_steps: usize,
    /// Prompts sampled per optimiser step (one answer each).
    pub prompts_per_step: usize,
    /// Longest sampled answer, in tokens.
    pub max_new_tokens: usize,
    /// Sampling temperature of the student's rollouts (1.0: its own distribution).
    pub temperature: f32,
    /// Temperature of the teachers' distributions the student is pulled toward (1.0: as
    /// they are). Below 1 the target is sharpened toward each teacher's most likely tokens,
    /// which is what greedy decoding (how the suites and the server answer) keeps: matched at
    /// 1.0, a student whose end-of-answer token is likely but not the likeliest at the
    /// teacher's stopping points writes on past them when decoded greedily.
    #[serde(skip_serializing_if = "crate::config::is_one")]
    pub teacher_temperature: f32,
    /// Weight format of the rollout snapshot: `q8_0` (fast) or `f32` (the trainer's numbers).
    pub rollout_format: String,
    /// Leaves the student's answers that repeat themselves out of the loss (the rule replay
    /// keeps answers by: a sentence said a third time ends the answer there, and a finished
    /// answer that repeats itself counts too). The base model, the default teacher, loops on
    /// general prompts and inside a loop predicts the loop, so the KL of a looping answer
    /// teaches looping; without those answers only answers that do not loop are pulled toward
    /// the teacher. Validation samples and scores every answer as before.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub drop_looping: bool,
    /// General prompts held out; their reverse KL is the validation loss.
    pub val_prompts: usize,
    pub eval_every: usize,
    pub save_every: usize,
    pub keep: usize,
    /// GGUF formats (or `hf`) written at the end.
    pub export: Vec<String>,
    pub optim: AdamWConfig,
    /// Precision of the dense products (`f32` or `bf16`; see [`crate::config::Matmul`]).
    pub matmul: crate::config::Matmul,
    /// Low-rank adapters instead of full fine-tuning (merged into the weights on export and
    /// in every rollout snapshot).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora: Option<hat_model::train::LoraConfig>,
}

impl Default for DistillConfig {
    fn default() -> Self {
        Self {
            model: PathBuf::new(),
            teacher: PathBuf::new(),
            stream_teacher: None,
            general_prompts: 4000,
            general_set: prompts::GeneralSet::Basic,
            prompt_files: Vec::new(),
            stream_data: Vec::new(),
            stream_share: 0.25,
            pack_tokens: 4096,
            seed: 1,
            max_steps: 40,
            prompts_per_step: 8,
            max_new_tokens: 192,
            temperature: 1.0,
            teacher_temperature: 1.0,
            rollout_format: "q8_0".into(),
            drop_looping: false,
            val_prompts: 8,
            eval_every: 10,
            save_every: 5,
            keep: 2,
            export: vec!["q8_0".into()],
            optim: AdamWConfig {
                lr: 5e-5,
                warmup_steps: 2,
                ..AdamWConfig::default()
            },
            matmul: crate::config::Matmul::F32,
            lora: None,
        }
    }
}

/// Most generated general prompts a run may ask for (the generator's space is a few hundred
/// thousand distinct prompts).
pub const MAX_GENERAL_PROMPTS: usize = 100_000;

/// Shortest prompt prefix shared with a neighbouring prompt that is prefilled once and reused.
const SHARED_PREFILL_MIN: usize = 64;

/// Presets for `hat train distill --preset`.
pub const PRESETS: &[(&str, &str)] = &[
    (
        "cpu",
        "40 steps of 8 prompts (at most 192 sampled tokens each) on 2 cores",
    ),
    ("gpu", "400 steps of 64 prompts, 512 tokens each"),
    ("smoke", "a few steps, for checking a setup end to end"),
];

impl DistillConfig {
    /// A preset by name.
    pub fn preset(name: &str) -> Result<Self> {
        let mut c = Self::default();
        match name {
            "cpu" => {}
            "gpu" => {
                c.max_steps = 400;
                c.prompts_per_step = 64;
                c.max_new_tokens = 512;
                c.general_prompts = 20000;
                c.val_prompts = 32;
                c.save_every = 25;
                c.eval_every = 50;
            }
            "smoke" => {
                c.max_steps = 3;
                c.prompts_per_step = 2;
                c.max_new_tokens = 16;
                c.general_prompts = 50;
                c.val_prompts = 2;
                c.eval_every = 2;
                c.save_every = 1;
            }
            other => return Err(crate::config::unknown_preset(other, PRESETS)),
        }
        Ok(c)
    }

    /// Reads a TOML file; unknown keys are errors naming the key.
    pub fn from_toml(path: &Path) -> Result<Self> {
        crate::config::read_toml(path)
    }

    /// The TOML form.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// Checks values that would make a run meaningless.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| {
            Err(TrainError::Config {
                path: "the training config".into(),
                message: m,
            })
        };
        if self.model.as_os_str().is_empty() || self.teacher.as_os_str().is_empty() {
            return bad("set both `model` (the student) and `teacher`".into());
        }
        if self.max_steps == 0 || self.prompts_per_step == 0 || self.max_new_tokens == 0 {
            return bad("max_steps, prompts_per_step and max_new_tokens must be positive".into());
        }
        if self.general_prompts > MAX_GENERAL_PROMPTS {
            return bad(format!(
                "general_prompts = {} (at most {MAX_GENERAL_PROMPTS}; add more with prompt files)",
                self.general_prompts
            ));
        }
        if !(0.0..=1.0).contains(&self.stream_share) {
            return bad("stream_share must be in [0, 1]".into());
        }
        if self.stream_share > 0.0 && self.stream_data.is_empty() {
            return bad(
                "stream_share > 0 needs `stream_data` (a `hat data gen` file); or set stream_share = 0"
                    .into(),
            );
        }
        if !(self.temperature > 0.0 && self.temperature.is_finite()) {
            return bad("temperature must be positive (on-policy sampling)".into());
        }
        if !(self.teacher_temperature >= 0.05 && self.teacher_temperature <= 10.0) {
            return bad(
                "teacher_temperature must be from 0.05 to 10 (1: the teachers as they are)".into(),
            );
        }
        crate::snapshot::check_format(&self.rollout_format, "rollout_format")?;
        if !(self.optim.lr > 0.0 && self.optim.lr.is_finite()) {
            return bad("optim.lr must be a positive number".into());
        }
        crate::export::check_formats(&self.export)
    }
}

/// The prompts of a run after duplicates of IFEval's were removed.
#[derive(Debug)]
pub struct PromptSet {
    pub general: Vec<Prompt>,
    pub stream: Vec<Prompt>,
    pub val: Vec<Prompt>,
    /// Prompts dropped as equal or near to an IFEval prompt.
    pub excluded: usize,
}

/// Builds the run's prompts: generated and file prompts minus IFEval look-alikes, the first
/// `val_prompts` of them held out, and the stream prompts.
pub fn prompt_set(cfg: &DistillConfig) -> Result<PromptSet> {
    let mut general = cfg.general_set.generate(cfg.general_prompts, cfg.seed);
    for f in &cfg.prompt_files {
        general.extend(prompts::read_jsonl(f)?);
    }
    let (mut general, excluded) = prompts::exclude_near(general, &prompts::ifeval_prompts(), 0.5);
    general.shuffle(&mut ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x0056_414c));
    let n_val = cfg.val_prompts.min(general.len().saturating_sub(1));
    let val = general.drain(..n_val).collect();
    let mut stream = Vec::new();
    for f in &cfg.stream_data {
        stream.extend(prompts::stream(f)?);
    }
    // the general prompts fill every step that stream prompts do not
    if general.is_empty() && (cfg.stream_share <= 0.0 || stream.is_empty()) {
        return Err(TrainError::Config {
            path: "the training config".into(),
            message: format!(
                "no prompts to sample: general_prompts = {} and {} prompt file(s) leave no \
                 general prompt ({} dropped as IFEval look-alikes, {} held out for \
                 validation), and no stream prompts are drawn (stream_share = {}, {} in \
                 stream_data); raise general_prompts or add prompt_files",
                cfg.general_prompts,
                cfg.prompt_files.len(),
                excluded,
                n_val,
                cfg.stream_share,
                stream.len()
            ),
        });
    }
    Ok(PromptSet {
        general,
        stream,
        val,
        excluded,
    })
}

fn snapshot(model: &TrainModel, cfg: &DistillConfig, path: &Path) -> Result<Engine> {
    crate::snapshot::engine(model, &cfg.model, &cfg.rollout_format, path)
}

/// The distillation stage.
pub struct DistillStage {
    cfg: DistillConfig,
    encoder: Encoder,
    prompts: PromptSet,
    teacher: Engine,
    /// The teacher of live-stream prompts (`None` when the run draws none).
    stream_teacher: Option<Engine>,
    rollout: Option<Engine>,
    snapshot: PathBuf,
    max_positions: usize,
    /// Per stream prompt, the stream prompts with its system prompt (itself included).
    scenes: Vec<std::sync::Arc<[usize]>>,
}

/// Groups stream prompts by their first message (the system prompt of a scene).
fn scenes(stream: &[Prompt]) -> Vec<std::sync::Arc<[usize]>> {
    let key = |p: &Prompt| {
        p.messages
            .first()
            .map_or("", |m| m.content.as_str())
            .to_owned()
    };
    let mut by: std::collections::HashMap<String, Vec<usize>> = Default::default();
    for (i, p) in stream.iter().enumerate() {
        by.entry(key(p)).or_default().push(i);
    }
    let by: std::collections::HashMap<String, std::sync::Arc<[usize]>> =
        by.into_iter().map(|(k, v)| (k, v.into())).collect();
    stream.iter().map(|p| by[&key(p)].clone()).collect()
}

impl DistillStage {
    /// Loads the teachers (checking that they share the student's tokenizer) and builds the
    /// prompt set. `model` holds the starting weights: without a `stream_teacher` they become
    /// it, snapshotted like a rollout so that an unchanged student scores zero against it.
    /// `out` holds the rollout snapshot.
    pub fn new(
        cfg: &DistillConfig,
        encoder: Encoder,
        model: &TrainModel,
        out: &Path,
    ) -> Result<Self> {
        let prompts = prompt_set(cfg)?;
        let samples_stream = cfg.stream_share > 0.0 && !prompts.stream.is_empty();
        let teacher = load_engine(&cfg.teacher, WeightFormat::Original)?;
        same_tokenizer(encoder.tokenizer(), &teacher, "teacher", &cfg.teacher, WHY)?;
        let stream_teacher = if samples_stream {
            Some(match &cfg.stream_teacher {
                Some(path) => {
                    let t = load_engine(path, WeightFormat::Original)?;
                    same_tokenizer(encoder.tokenizer(), &t, "stream teacher", path, WHY)?;
                    t
                }
                None => snapshot(model, cfg, &out.join("stream-teacher.gguf"))?,
            })
        } else {
            None
        };
        let scenes = scenes(&prompts.stream);
        Ok(Self {
            cfg: cfg.clone(),
            encoder,
            scenes,
            prompts,
            teacher,
            stream_teacher,
            rollout: None,
            snapshot: out.join(format!("rollout-{}.gguf", cfg.rollout_format)),
            max_positions: model.max_positions(),
        })
    }

    /// The prompt set in use.
    pub fn prompts(&self) -> &PromptSet {
        &self.prompts
    }

    fn refresh(&mut self, model: &TrainModel) -> Result<()> {
        // the old engine goes first: two copies of the weights need not coexist
        self.rollout = None;
        self.rollout = Some(snapshot(model, &self.cfg, &self.snapshot)?);
        Ok(())
    }

    /// The prompts of `step`: drawn by a generator seeded with the run seed and the step, so a
    /// resumed run draws the same ones. Stream prompts come first, a scene at a time: a prompt
    /// drawn at random, then the others of its scene in random order, so that they pack on
    /// their shared system prompt.
    fn draw(&self, step: usize) -> Vec<&Prompt> {
        let mut rng = ChaCha8Rng::seed_from_u64(
            self.cfg.seed ^ (step as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        let n = self.cfg.prompts_per_step;
        let n_stream = if self.stream_teacher.is_none() {
            0
        } else if self.prompts.general.is_empty() {
            n
        } else {
            (n as f64 * self.cfg.stream_share).round() as usize
        };
        let mut out = Vec::with_capacity(n);
        while out.len() < n_stream {
            let stream = &self.prompts.stream;
            let i = rng.gen_range(0..stream.len());
            out.push(&stream[i]);
            let mut rest: Vec<usize> = self.scenes[i].iter().copied().filter(|&j| j != i).collect();
            rest.shuffle(&mut rng);
            out.extend(rest.iter().take(n_stream - out.len()).map(|&j| &stream[j]));
        }
        let general = &self.prompts.general;
        while out.len() < n {
            out.push(&general[rng.gen_range(0..general.len())]);
        }
        out
    }

    /// Samples one answer per prompt with the rollout snapshot; `stop_loops` ends an answer at
    /// a sentence's third copy ([`crate::replay::StopLoops`]).
    fn sample(
        &self,
        prompts: &[&Prompt],
        seed: u64,
        stop_loops: bool,
    ) -> Result<Vec<(Vec<u32>, GenerateOutput)>> {
        let engine = self
            .rollout
            .as_ref()
            .ok_or_else(|| TrainError::Invalid("the rollout snapshot is not loaded".into()))?;
        let mut reqs = Vec::with_capacity(prompts.len());
        for (i, p) in prompts.iter().enumerate() {
            let prompt = self.encoder.prompt_tokens(&p.messages)?;
            if prompt.len() + self.cfg.max_new_tokens > self.max_positions {
                return Err(TrainError::TooLong {
                    sample: p.id.clone(),
                    tokens: prompt.len() + self.cfg.max_new_tokens,
                    limit: self.max_positions,
                });
            }
            let mut r = GenerateRequest::new(prompt, self.cfg.max_new_tokens);
            r.sampling = SamplingParams {
                temperature: self.cfg.temperature,
                seed: seed.wrapping_add(i as u64),
                ..SamplingParams::default()
            };
            if stop_loops {
                // a looping answer is left out whatever follows: no need to decode the rest
                r.check = Some(std::sync::Arc::new(crate::replay::StopLoops));
            }
            reqs.push(r);
        }
        // the stream prompts of a scene share their system prompt: the engine prefills it once
        // and the others start from its prefix cache
        let shared: Vec<usize> = (0..reqs.len())
            .map(|i| {
                let near = |j: usize| crate::pack::lcp(&reqs[i].prompt, &reqs[j].prompt);
                let before = if i > 0 { near(i - 1) } else { 0 };
                let after = if i + 1 < reqs.len() { near(i + 1) } else { 0 };
                before.max(after)
            })
            .collect();
        for (r, n) in reqs.iter_mut().zip(shared) {
            if n >= SHARED_PREFILL_MIN {
                r.cache_prefix_len = Some(n);
            }
        }
        let outs = engine.generate_batch(&reqs)?;
        Ok(reqs.into_iter().map(|r| r.prompt).zip(outs).collect())
    }

    /// Scores the sampled answers, stream ones against the stream teacher (packed on their
    /// scene's system prompt) and general ones against the teacher, one by one.
    fn score(
        &self,
        model: &TrainModel,
        prompts: &[&Prompt],
        samples: Vec<(Vec<u32>, GenerateOutput)>,
    ) -> Result<Vec<score::Scored>> {
        let (mut stream, mut general) = (Vec::new(), Vec::new());
        for (p, (ids, out)) in prompts.iter().zip(samples) {
            if out.tokens.is_empty() {
                continue;
            }
            let a = score::Answer::new(p.id.clone(), ids, &out.tokens, &out.logprobs)?;
            match p.source {
                Source::Stream => stream.push(a),
                Source::General => general.push(a),
            }
        }
        let st = self.stream_teacher.as_ref().unwrap_or(&self.teacher);
        let t = self.cfg.teacher_temperature;
        let mut out = score::score(model, st, &stream, self.cfg.pack_tokens, t)?;
        out.extend(score::score(model, &self.teacher, &general, 0, t)?);
        Ok(out)
    }
}

/// One sampled answer: its prompt's token ids and what the engine generated.
type Sample = (Vec<u32>, GenerateOutput);

/// The prompts and answers that carry loss, and how many answers were left out as
/// repeating themselves ([`crate::replay::repeats_itself`]; none unless `drop_looping`).
fn keep_answers(
    prompts: Vec<&Prompt>,
    samples: Vec<Sample>,
    drop_looping: bool,
) -> (Vec<&Prompt>, Vec<Sample>, usize) {
    if !drop_looping {
        return (prompts, samples, 0);
    }
    let before = samples.len();
    let (prompts, samples): (Vec<_>, Vec<_>) = prompts
        .into_iter()
        .zip(samples)
        .filter(|(_, (_, o))| !crate::replay::repeats_itself(o))
        .unzip();
    let looping = before - samples.len();
    (prompts, samples, looping)
}

impl Stage for DistillStage {
    fn start(&mut self, model: &TrainModel, _state: &RunState) -> Result<()> {
        self.refresh(model)
    }

    fn step(
        &mut self,
        model: &TrainModel,
        state: &mut RunState,
        grads: &mut [Vec<f32>],
    ) -> Result<StepWork> {
        let t0 = Instant::now();
        let prompts = self.draw(state.step);
        let seed = self.cfg.seed ^ (state.step as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
        let samples = self.sample(&prompts, seed, self.cfg.drop_looping)?;
        let sample_secs = t0.elapsed().as_secs_f64();
        if samples.iter().all(|(_, o)| o.tokens.is_empty()) {
            return Err(TrainError::Invalid(format!(
                "step {}: every sampled answer was empty (the student stops at once); nothing to \
                 distil",
                state.step + 1
            )));
        }
        let drawn = prompts.len();
        let (prompts, samples, looping) = keep_answers(prompts, samples, self.cfg.drop_looping);
        let answer_tokens: usize = samples.iter().map(|(_, o)| o.tokens.len()).sum();
        let t1 = Instant::now();
        let (mut kl_sum, mut tokens, mut mismatch, mut nll) = (0f64, 0usize, 0f64, 0f64);
        for s in self.score(model, &prompts, samples)? {
            let value = s.kl.to_scalar::<f32>()?;
            if !value.is_finite() {
                return Err(TrainError::Diverged {
                    step: state.step,
                    value,
                });
            }
            add_gradients(model, &(s.kl / answer_tokens.max(1) as f64)?, grads)?;
            kl_sum += value as f64;
            tokens += s.tokens;
            mismatch += s.mismatch;
            nll += s.teacher_nll;
        }
        // every answer looped: nothing to learn this step (the loop leaves the weights alone)
        let n = answer_tokens.max(1) as f64;
        let mut extra = BTreeMap::new();
        extra.insert("sample_seconds".into(), sample_secs);
        extra.insert("score_seconds".into(), t1.elapsed().as_secs_f64());
        extra.insert(
            "answer_tokens_mean".into(),
            answer_tokens as f64 / prompts.len().max(1) as f64,
        );
        extra.insert("rollout_mismatch".into(), mismatch / n);
        extra.insert("teacher_nll".into(), nll / n);
        if self.cfg.drop_looping {
            extra.insert("looping_share".into(), looping as f64 / drawn as f64);
        }
        state.epoch = (state.step + 1) * self.cfg.prompts_per_step
            / self
                .prompts
                .general
                .len()
                .max(self.prompts.stream.len())
                .max(1);
        Ok(StepWork {
            loss: kl_sum / n,
            tokens,
            loss_tokens: answer_tokens,
            extra,
        })
    }

    fn validate(&mut self, model: &TrainModel) -> Result<Option<f64>> {
        if self.prompts.val.is_empty() {
            return Ok(None);
        }
        let val: Vec<&Prompt> = self.prompts.val.iter().collect();
        // every answer as it comes, so that runs with and without drop_looping compare
        let samples = self.sample(&val, self.cfg.seed ^ 0x5641_4c5f_4b4c, false)?;
        let (mut sum, mut n) = (0f64, 0usize);
        for s in self.score(model, &val, samples)? {
            sum += s.kl.to_scalar::<f32>()? as f64;
            n += s.answer_tokens;
        }
        Ok((n > 0).then(|| sum / n as f64))
    }

    fn updated(&mut self, model: &TrainModel, _state: &RunState) -> Result<()> {
        self.refresh(model)
    }
}

/// Runs (or resumes) a distillation run in `out`.
pub fn run(
    cfg: &DistillConfig,
    out: &Path,
    resume: bool,
    on: &mut dyn FnMut(Event),
) -> Result<PathBuf> {
    cfg.validate()?;
    std::fs::create_dir_all(out).map_err(crate::error::io(out.display()))?;
    let loaded = TrainModel::load_maybe_lora(&cfg.model, cfg.lora.as_ref())?;
    let model = loaded.model;
    let encoder = Encoder::new(loaded.tokenizer, loaded.chat_template.as_deref())?;
    let mut stage = DistillStage::new(cfg, encoder, &model, out)?;
    let p = stage.prompts();
    on(Event::Note(&format!(
        "prompts: {} general ({} held out for validation, {} dropped as IFEval look-alikes), {} \
         live-stream; {} a step, {:.0}% live-stream",
        p.general.len(),
        p.val.len(),
        p.excluded,
        p.stream.len(),
        cfg.prompts_per_step,
        cfg.stream_share * 100.0
    )));
    let settings = LoopSettings {
        source: &cfg.model,
        max_steps: cfg.max_steps,
        eval_every: cfg.eval_every,
        save_every: cfg.save_every,
        keep: cfg.keep,
        export: &cfg.export,
        optim: cfg.optim,
        matmul: cfg.matmul,
    };
    let last = train(&settings, &model, &mut stage, out, resume, on)?;
    let _ = std::fs::remove_file(&stage.snapshot);
    let _ = std::fs::remove_file(out.join("stream-teacher.gguf"));
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hat_harness::{Message, Role};

    #[test]
    fn a_teacher_temperature_is_saved_only_when_set_and_must_be_sane() {
        let mut c = DistillConfig {
            model: "m".into(),
            teacher: "t".into(),
            stream_share: 0.0,
            ..DistillConfig::default()
        };
        assert!(!c.to_toml().contains("teacher_temperature"));
        c.teacher_temperature = 0.5;
        assert!(c.to_toml().contains("teacher_temperature = 0.5"));
        c.validate().unwrap();
        c.teacher_temperature = 0.0;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("teacher_temperature must be from 0.05"), "{e}");
    }

    fn answer(text: &str, finish: hat_model::FinishReason) -> Sample {
        (vec![7, 8], crate::replay::tests::out(text, finish))
    }

    /// With `drop_looping`, an answer cut at a sentence's third copy and a finished answer
    /// that repeats itself carry no loss, with their prompts; the others keep their order.
    /// Without it every answer is kept. Saved in a config only when on.
    #[test]
    fn looping_answers_are_left_out_only_when_asked() {
        use hat_model::FinishReason::{Complete, Length, StopToken};
        let ps: Vec<Prompt> = ["a", "b", "c", "d"]
            .iter()
            .map(|id| stream_prompt(id, "s", "hi"))
            .collect();
        let refs: Vec<&Prompt> = ps.iter().collect();
        let looped = "Buy the hoodie. It is warm. ".repeat(12);
        let answers = || {
            vec![
                answer("A short, plain answer.", StopToken(2)),
                answer("Cut at the third copy.", Complete),
                answer(&looped, StopToken(2)),
                answer("Ran out of tokens but did not loop", Length),
            ]
        };
        let (p, s, n) = keep_answers(refs.clone(), answers(), false);
        assert_eq!((p.len(), s.len(), n), (4, 4, 0));
        let (p, s, n) = keep_answers(refs, answers(), true);
        assert_eq!(n, 2);
        let ids: Vec<&str> = p.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["a", "d"]);
        assert_eq!(s[1].1.text, "Ran out of tokens but did not loop");
        let mut c = DistillConfig::default();
        assert!(!c.to_toml().contains("drop_looping"));
        c.drop_looping = true;
        assert!(c.to_toml().contains("drop_looping = true"));
    }

    fn stream_prompt(id: &str, system: &str, event: &str) -> Prompt {
        let m = |role, c: &str| Message {
            role,
            content: c.into(),
            name: None,
            weight: None,
        };
        Prompt {
            id: id.into(),
            messages: vec![m(Role::System, system), m(Role::User, event)],
            source: Source::Stream,
            checks: Vec::new(),
            repairs: Vec::new(),
        }
    }

    #[test]
    fn stream_prompts_group_into_scenes_by_their_system_prompt() {
        let ps = vec![
            stream_prompt("a", "scene 1", "hi"),
            stream_prompt("b", "scene 2", "price?"),
            stream_prompt("c", "scene 1", "size M?"),
            stream_prompt("d", "scene 1", "hi"),
        ];
        let s = scenes(&ps);
        assert_eq!(s.len(), 4);
        assert_eq!(&*s[0], &[0, 2, 3]);
        assert_eq!(&*s[1], &[1]);
        assert!(std::sync::Arc::ptr_eq(&s[0], &s[3]));
        assert!(scenes(&[]).is_empty());
    }

    #[test]
    fn a_config_that_leaves_no_prompt_to_sample_is_refused_before_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let stream = dir.path().join("stream.jsonl");
        std::fs::write(&stream, "").unwrap();
        let cfg = DistillConfig {
            general_prompts: 0,
            stream_data: vec![stream],
            stream_share: 0.0,
            ..DistillConfig::default()
        };
        let e = prompt_set(&cfg).unwrap_err().to_string();
        assert!(e.contains("no prompts to sample"), "{e}");
        assert!(e.contains("raise general_prompts"), "{e}");
        // the same with general prompts: ready
        let cfg = DistillConfig {
            general_prompts: 8,
            ..cfg
        };
        assert!(!prompt_set(&cfg).unwrap().general.is_empty());
    }

    #[test]
    fn general_set_in_a_config_picks_the_generator() {
        let cfg: DistillConfig =
            toml::from_str("general_prompts = 40\ngeneral_set = \"broad\"\nstream_share = 0.0\n")
                .unwrap();
        let ps = prompt_set(&cfg).unwrap();
        assert!(ps
            .general
            .iter()
            .chain(&ps.val)
            .all(|p| p.id.starts_with("broad-")));
        let basic: DistillConfig =
            toml::from_str("general_prompts = 40\nstream_share = 0.0\n").unwrap();
        let ps = prompt_set(&basic).unwrap();
        assert!(ps.general.iter().all(|p| p.id.starts_with("gen-")));
        assert!(toml::from_str::<DistillConfig>("general_set = \"wide\"\n").is_err());
    }
}
