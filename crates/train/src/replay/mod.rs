//! Replay data for stage 1: a model's own answers to general prompts, kept only where they
//! satisfy the prompt's verifiable constraint, written as `hat data gen` records so that
//! `hat train sft --data AGENT.jsonl,REPLAY.jsonl` mixes them into supervised fine-tuning.
//!
//! Why: SFT on live-stream trajectories erodes general instruction following (every stage-1
//! row lost 5-10 IFEval points). Training on the starting model's own answers to general
//! prompts holds its behaviour there (a self-distillation replay), and keeping, of several
//! samples, only an answer that passes the prompt's check (rejection sampling) can lift it.
//! The prompts are the distillation generator's (IFEval's 541 prompts and their near copies
//! excluded); an unconstrained prompt keeps its first answer that ends on its own. An answer that
//! repeats itself (`hat_ifeval::repetition`) is never kept, whatever its check says.
//!
//! With `repair` (broad prompts only), a prompt none of whose tries passes keeps its first
//! finished, non-looping try edited by program to meet the constraints that have an edit
//! ([`prompts::Repair`]: case, quotes, a line before or after, commas, JSON), if every check
//! then passes: the base model never writes in capitals or inside quotes on its own, so
//! sampling alone gives nothing to learn those instructions from.

use std::sync::Arc;

use hat_data::Record;
use hat_harness::Message;
use hat_model::chat_template::ChatInput;
use hat_model::constrain::text_so_far;
use hat_model::{Engine, FinishReason, GenerateOutput, GenerateRequest, SamplingParams, TextCheck};
use serde_json::json;

use crate::distill::prompts::{self, Prompt};
use crate::error::{Result, TrainError};

mod output;
pub use output::{Checked, ReplayOutput, ReplayWriter, Start};

/// Names the rules that decide which answers are kept; part of a run's settings, so that a
/// run is never resumed by a build that keeps other answers.
pub const KEEP_RULES: &str = "check+repetition-v1";

/// Names the edits `repair` makes ([`prompts::Repair`]), saved with a run that repairs.
pub const REPAIR_RULES: &str = "repair-v1";

/// What to generate.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    /// Generated prompts to answer (before IFEval look-alikes are removed).
    pub prompts: usize,
    /// Which generator writes them.
    pub prompt_set: prompts::GeneralSet,
    /// Answers tried per prompt: the first greedy, the others sampled.
    pub samples: usize,
    /// Temperature of the sampled tries.
    pub temperature: f32,
    pub max_new_tokens: usize,
    pub seed: u64,
    /// Prompts decoded together.
    pub batch: usize,
    /// Names the answering model in each record's `teacher` field.
    pub model_name: String,
    /// Where no try passes, keep the first try that ended without repeating itself, edited by
    /// its prompt's repairs ([`prompts::Repair`]), if it then passes every check.
    pub repair: bool,
}

/// A setting of [`ReplayConfig`] that cannot work: the key (as `hat data replay` and the
/// pipeline's `[replay]` name it, `max_tokens` for `max_new_tokens`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadSetting {
    pub key: &'static str,
    pub problem: String,
}

impl ReplayConfig {
    /// Checks the settings before a model is loaded or a file touched.
    pub fn validate(&self) -> std::result::Result<(), BadSetting> {
        let bad = |key, problem: String| Err(BadSetting { key, problem });
        if self.prompts == 0 || self.prompts > crate::distill::MAX_GENERAL_PROMPTS {
            return bad(
                "prompts",
                format!(
                    "must be between 1 and {} (the general prompt generator's), not {}",
                    crate::distill::MAX_GENERAL_PROMPTS,
                    self.prompts
                ),
            );
        }
        for (key, v) in [
            ("samples", self.samples),
            ("batch", self.batch),
            ("max_tokens", self.max_new_tokens),
        ] {
            if v == 0 {
                return bad(key, "must be at least 1, not 0".into());
            }
        }
        if !(self.temperature.is_finite() && (0.0..=2.0).contains(&self.temperature)) {
            return bad(
                "temperature",
                format!("must be between 0 and 2, not {}", self.temperature),
            );
        }
        if self.repair && self.prompt_set == prompts::GeneralSet::Basic {
            return bad(
                "repair",
                "needs the broad prompt set (--prompt-set broad; prompt_set = \"broad\" in a \
                 pipeline's [replay]): the basic set's prompts carry no edits"
                    .into(),
            );
        }
        if self.temperature == 0.0 && self.samples > 1 {
            return bad(
                "temperature",
                "0 makes every try after the first repeat it; give a temperature above 0 or one \
                 sample"
                    .into(),
            );
        }
        Ok(())
    }

    /// What decides a run's records, saved with an unfinished run and compared on resume:
    /// these settings, the model file and weight format, the build and the keep rules.
    pub fn settings(&self, format: &str) -> serde_json::Value {
        let mut s = json!({
            "model": self.model_name, "format": format, "prompts": self.prompts,
            "samples": self.samples, "temperature": self.temperature,
            "max_tokens": self.max_new_tokens, "seed": self.seed, "batch": self.batch,
            "version": env!("CARGO_PKG_VERSION"), "keep": KEEP_RULES,
        });
        // named only when not the defaults, so runs started before these settings resume
        if self.prompt_set != prompts::GeneralSet::Basic {
            s["prompt_set"] = json!(self.prompt_set.name());
        }
        if self.repair {
            s["repair"] = json!(REPAIR_RULES);
        }
        s
    }
}

/// What a replay run kept and why it dropped the rest; with `settled`, where it stands (a
/// resumed run continues after the first `settled` prompts, which it settles in order).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReplayStats {
    pub prompts: usize,
    /// Generated prompts dropped as equal or near to an IFEval prompt.
    pub excluded: usize,
    /// Prompts decided so far (kept or dropped), from the first.
    pub settled: usize,
    pub kept: usize,
    /// Kept answers whose prompt had a constraint (each passed its check).
    pub kept_constrained: usize,
    /// Kept answers that passed only once repaired (counted in `kept` and `kept_constrained`).
    #[serde(default)]
    pub kept_repaired: usize,
    /// Prompts with an answer that ended on its own but failed the check (and none passing).
    pub dropped_failed_check: usize,
    /// Prompts none of whose answers ended within `max_new_tokens`.
    pub dropped_unfinished: usize,
    /// Prompts whose answers that ended (and passed the check, if any) all repeated
    /// themselves (`hat_ifeval::repetition`).
    #[serde(default)]
    pub dropped_repetitive: usize,
    pub generated_tokens: usize,
}

/// Where an unfinished replay run stands, saved beside its `.partial` file after each chunk
/// (by [`ReplayWriter::append`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ReplayState {
    /// The settings that decide the records; a resume must repeat them.
    pub settings: serde_json::Value,
    pub stats: ReplayStats,
    /// Length of the `.partial` file when `stats` was saved (bytes after it are cut).
    pub partial_bytes: u64,
}

/// Prompts settled together: the batch size times this, tried in turn, so that retries still
/// fill batches and each chunk's records can be saved before the next starts.
const CHUNK_BATCHES: usize = 4;

/// Why one answer is not kept, or `None` when it is.
fn reject(p: &Prompt, out: &GenerateOutput) -> Option<Drop> {
    if out.finish == FinishReason::Complete {
        // stopped by `StopLoops`: it said a sentence for the third time
        return Some(Drop::Repetitive);
    }
    if !matches!(
        out.finish,
        FinishReason::StopToken(_) | FinishReason::StopString(_)
    ) || out.text.trim().is_empty()
    {
        return Some(Drop::Unfinished);
    }
    let text = out.text.trim_end();
    if !p.checks.iter().all(|c| c.passes(text)) {
        return Some(Drop::FailedCheck);
    }
    hat_ifeval::repetition::repetition(text).map(|_| Drop::Repetitive)
}

/// Whether an answer repeats itself by the rules replay keeps answers by: stopped by
/// [`StopLoops`] (it said a sentence a third time) or found repetitive by
/// [`hat_ifeval::repetition::repetition`], whether it ended or was cut at the token limit
/// (replay drops a cut answer as unfinished anyway).
pub(crate) fn repeats_itself(out: &GenerateOutput) -> bool {
    out.finish == FinishReason::Complete
        || hat_ifeval::repetition::repetition(out.text.trim_end()).is_some()
}

/// `answer` (which ended on its own and failed a check) edited by its prompt's repairs, when
/// it does not repeat itself and then passes every check.
fn repair(p: &Prompt, answer: &str) -> Option<String> {
    if p.repairs.is_empty() || hat_ifeval::repetition::repetition(answer.trim_end()).is_some() {
        return None;
    }
    let fixed = prompts::Repair::apply_all(&p.repairs, answer);
    (p.checks.iter().all(|c| c.passes(&fixed))
        && hat_ifeval::repetition::repetition(&fixed).is_none())
    .then_some(fixed)
}

/// Ends an answer once it repeats a sentence a third time ([`hat_ifeval::repetition::sentence_loop`]): the
/// answer is dropped whatever follows (as unfinished, failing its check, or repetitive), so the
/// tokens up to the limit are not worth decoding. A looping answer of the base model otherwise
/// runs to `--max-tokens`.
#[derive(Debug)]
pub(crate) struct StopLoops;

impl TextCheck for StopLoops {
    fn admits(&self, _before: &[u8], _token: &[u8]) -> bool {
        true
    }

    fn complete(&self, answer: &[u8]) -> bool {
        hat_ifeval::repetition::sentence_loop(text_so_far(answer))
    }
}

/// Why a prompt's tries were dropped, in the order that counts: a prompt is counted under the
/// highest reason any of its tries had (one answer failing the check makes it a check failure,
/// whatever its other tries did).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Drop {
    Unfinished,
    Repetitive,
    FailedCheck,
}

/// The record of a kept answer (no tools, no harness: `variant` and `call_syntax` are
/// `none`, `task_type` says whether the prompt was constrained).
fn record(p: &Prompt, answer: &str, try_no: usize, model: &str) -> Record {
    let mut messages = p.messages.clone();
    messages.push(Message::assistant(answer.trim_end()));
    Record {
        messages,
        tools: json!([]),
        harness_name: "general".into(),
        harness_hash: String::new(),
        variant: "none".into(),
        call_syntax: "none".into(),
        task_id: format!("replay-{}", p.id),
        task_type: if p.checks.is_empty() {
            "general".into()
        } else {
            "general_constrained".into()
        },
        split: "train".into(),
        lang: "en".into(),
        calls: Vec::new(),
        teacher: format!("self:{model}"),
        score: json!({"checks": p.checks.len(), "passed": true, "try": try_no}),
    }
}

/// Answers the generated prompts with `engine`, from prompt `from.settled` on (a fresh run
/// passes `ReplayStats::default()`), a chunk of prompts at a time: `on_chunk` gets each chunk's
/// kept records and the stats after it, in prompt order. Returns the final stats.
pub fn generate(
    engine: &Engine,
    cfg: &ReplayConfig,
    from: ReplayStats,
    on_chunk: &mut dyn FnMut(Vec<Record>, &ReplayStats) -> Result<()>,
) -> Result<ReplayStats> {
    cfg.validate()
        .map_err(|b| TrainError::Invalid(format!("replay: {} {}", b.key, b.problem)))?;
    let (prompts, excluded) = prompts::exclude_near(
        cfg.prompt_set.generate(cfg.prompts, cfg.seed),
        &prompts::ifeval_prompts(),
        0.5,
    );
    if from != ReplayStats::default()
        && (from.prompts != prompts.len()
            || from.excluded != excluded
            || from.settled > from.prompts)
    {
        return Err(TrainError::Invalid(format!(
            "replay: the run being resumed had {} prompts ({} excluded) and settled {}, but this \
             build and these settings give {} ({} excluded); start over with --force",
            from.prompts,
            from.excluded,
            from.settled,
            prompts.len(),
            excluded
        )));
    }
    let mut stats = ReplayStats {
        prompts: prompts.len(),
        excluded,
        ..from
    };
    let chunk_len = cfg.batch.saturating_mul(CHUNK_BATCHES);
    let stop_loops: Arc<dyn TextCheck> = Arc::new(StopLoops);
    while stats.settled < prompts.len() {
        let range = stats.settled..(stats.settled + chunk_len).min(prompts.len());
        let mut ids = Vec::with_capacity(range.len());
        for p in &prompts[range.clone()] {
            let text = engine.render_chat(&ChatInput {
                messages: hat_teacher::openai::wire_messages(&p.messages),
                tools: None,
                add_generation_prompt: true,
            })?;
            ids.push(engine.encode(&text)?);
        }
        // per prompt of the chunk: the kept answer, or why its last try failed
        let mut kept: Vec<Option<(String, usize)>> = vec![None; range.len()];
        // and the first try that passes once repaired, kept if no try passes as it is
        let mut repaired: Vec<Option<(String, usize)>> = vec![None; range.len()];
        let mut last_drop = vec![Drop::Unfinished; range.len()];
        for try_no in 0..cfg.samples {
            let open: Vec<usize> = (0..range.len()).filter(|&k| kept[k].is_none()).collect();
            let reqs: Vec<GenerateRequest> = open
                .iter()
                .map(|&k| {
                    let i = range.start + k;
                    let mut r = GenerateRequest::new(ids[k].clone(), cfg.max_new_tokens);
                    r.check = Some(stop_loops.clone());
                    r.sampling = SamplingParams {
                        temperature: if try_no == 0 { 0.0 } else { cfg.temperature },
                        seed: cfg.seed ^ ((i * cfg.samples + try_no) as u64).wrapping_mul(0x9E37),
                        ..SamplingParams::default()
                    };
                    r
                })
                .collect();
            // answers run from a few tokens to the limit: a row that ends takes the next prompt
            for (&k, out) in open
                .iter()
                .zip(engine.generate_continuous(reqs, cfg.batch)?)
            {
                stats.generated_tokens += out.tokens.len();
                let p = &prompts[range.start + k];
                match reject(p, &out) {
                    None => kept[k] = Some((out.text, try_no)),
                    // counted under the weightiest reason of its tries (see `Drop`)
                    Some(d) => {
                        last_drop[k] = last_drop[k].max(d);
                        if cfg.repair && d == Drop::FailedCheck && repaired[k].is_none() {
                            repaired[k] = repair(p, &out.text).map(|t| (t, try_no));
                        }
                    }
                }
            }
        }
        let mut records = Vec::new();
        for (k, (found, fixed)) in kept.into_iter().zip(repaired).enumerate() {
            let p = &prompts[range.start + k];
            match (found, fixed) {
                (Some((text, try_no)), _) => {
                    stats.kept += 1;
                    stats.kept_constrained += usize::from(!p.checks.is_empty());
                    records.push(record(p, &text, try_no, &cfg.model_name));
                }
                (None, Some((text, try_no))) => {
                    stats.kept += 1;
                    stats.kept_constrained += 1;
                    stats.kept_repaired += 1;
                    let mut r = record(p, &text, try_no, &cfg.model_name);
                    r.score["repaired"] = json!(true);
                    records.push(r);
                }
                (None, None) => match last_drop[k] {
                    Drop::FailedCheck => stats.dropped_failed_check += 1,
                    Drop::Repetitive => stats.dropped_repetitive += 1,
                    Drop::Unfinished => stats.dropped_unfinished += 1,
                },
            }
        }
        stats.settled = range.end;
        on_chunk(records, &stats)?;
    }
    Ok(stats)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::distill::prompts::Check;

    /// An answer of two tokens with `text`, ended by `finish` (shared with distill's tests).
    pub(crate) fn out(text: &str, finish: FinishReason) -> GenerateOutput {
        GenerateOutput {
            tokens: vec![1, 2],
            logprobs: vec![0.0, 0.0],
            text: text.into(),
            finish,
            prompt_tokens: 3,
            cached_tokens: 0,
            shared_prefix_tokens: 0,
            prefill_secs: 0.0,
            decode_secs: 0.0,
            drafted_tokens: 0,
            accepted_tokens: 0,
            unchecked_tokens: 0,
        }
    }

    #[test]
    fn answers_are_kept_only_when_finished_and_compliant() {
        let mut p = prompts::general(50, 1)
            .into_iter()
            .find(|p| p.checks.is_empty())
            .unwrap();
        let stop = FinishReason::StopToken(2);
        assert_eq!(reject(&p, &out("Sure, here it is.", stop.clone())), None);
        assert_eq!(
            reject(&p, &out("Sure, here it", FinishReason::Length)),
            Some(Drop::Unfinished)
        );
        assert_eq!(
            reject(&p, &out("  \n", stop.clone())),
            Some(Drop::Unfinished)
        );
        p.checks.push(Check::EndsWithQuestion);
        assert_eq!(
            reject(&p, &out("Sure, here it is.", stop.clone())),
            Some(Drop::FailedCheck)
        );
        assert_eq!(reject(&p, &out("Is it?\n", stop.clone())), None);
        // an answer that loops is dropped even when it passes the check
        let looped = "Is it? It is a fine day for a walk in the park.\n".repeat(3) + "Is it?";
        assert_eq!(reject(&p, &out(&looped, stop)), Some(Drop::Repetitive));
        assert!(Drop::FailedCheck > Drop::Repetitive && Drop::Repetitive > Drop::Unfinished);
        let r = record(&p, "Is it?\n", 2, "m");
        assert_eq!(r.messages.len(), 2);
        assert_eq!(r.messages[1].content, "Is it?");
        assert_eq!(r.task_type, "general_constrained");
        assert_eq!(r.score["try"], 2);
    }

    #[test]
    fn a_repair_is_kept_only_when_every_check_then_passes() {
        let broad = prompts::GeneralSet::Broad.generate(3000, 8);
        // one constraint, lowercase: the edit makes any answer pass
        let p = broad
            .iter()
            .find(|p| p.checks.len() == 1 && p.repairs == [prompts::Repair::Lowercase])
            .unwrap();
        let answer = "Sure, Here is a short answer about it.";
        assert_eq!(
            reject(p, &out(answer, FinishReason::StopToken(2))),
            Some(Drop::FailedCheck)
        );
        assert_eq!(
            repair(p, answer).as_deref(),
            Some("sure, here is a short answer about it.")
        );
        // an answer that loops is not worth repairing
        let looped = "It is a fine day for a walk in the park. ".repeat(4);
        assert_eq!(repair(p, &looped), None);
        // a constraint with no edit (a word count here) still has to pass on its own
        let p = broad
            .iter()
            .find(|p| {
                p.checks.len() == 2
                    && p.repairs == [prompts::Repair::Lowercase]
                    && p.request().contains("at least")
                    && p.request().contains("words")
            })
            .unwrap();
        assert_eq!(repair(p, answer), None, "{}", p.request());
        // and a prompt without edits (the basic set's) is never repaired
        let basic = prompts::general(50, 1);
        let q = basic.iter().find(|p| !p.checks.is_empty()).unwrap();
        assert_eq!(repair(q, answer), None);
    }
}
