//! The run configuration (TOML), with presets; the resolved form is saved in the run folder
//! and is what `--resume` uses.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};
use crate::optim::AdamWConfig;
use crate::pack::PackConfig;
pub use hat_model::train::LoraConfig;

/// An unknown `--preset` as an error listing the known ones.
pub(crate) fn unknown_preset(name: &str, presets: &[(&str, &str)]) -> TrainError {
    TrainError::Config {
        path: "--preset".into(),
        message: format!(
            "unknown preset `{name}` (known: {})",
            presets.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// Reads a stage's TOML config; unknown keys are errors naming the key.
pub(crate) fn read_toml<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(crate::error::io(path.display()))?;
    toml::from_str(&text).map_err(|e| TrainError::Config {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

/// What to do with a sample longer than a packed sequence may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TooLong {
    /// Stop with an error naming the sample.
    #[default]
    Error,
    /// Skip it and count it.
    Drop,
}

/// The precision of training's dense products (`matmul` in a stage's config): `f32`, the
/// default and the reference, or `bf16`: operands rounded to bf16 with f32 accumulation, about
/// twice the multiply rate on CPUs with AVX-512 BF16 (an error elsewhere). Weights, gradients
/// and the optimiser stay f32 either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Matmul {
    #[default]
    F32,
    Bf16,
}

impl std::str::FromStr for Matmul {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" => Ok(Matmul::F32),
            "bf16" => Ok(Matmul::Bf16),
            other => Err(format!("matmul precision `{other}`: expected f32 or bf16")),
        }
    }
}

impl std::fmt::Display for Matmul {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(hat_model::train::MatmulPrecision::from(*self).name())
    }
}

impl From<Matmul> for hat_model::train::MatmulPrecision {
    fn from(m: Matmul) -> Self {
        match m {
            Matmul::F32 => hat_model::train::MatmulPrecision::F32,
            Matmul::Bf16 => hat_model::train::MatmulPrecision::Bf16,
        }
    }
}

/// Values given on the command line, on top of a preset, a TOML file or a saved run.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub data: Vec<PathBuf>,
    pub model: Option<PathBuf>,
    pub max_steps: Option<usize>,
    pub lr: Option<f64>,
    pub tokens_per_step: Option<usize>,
    pub seed: Option<u64>,
    /// Conversations per packed sequence.
    pub pack: Option<usize>,
    /// Train low-rank adapters instead of every weight.
    pub lora: Option<LoraConfig>,
    /// Precision of the dense products.
    pub matmul: Option<Matmul>,
    /// Loss weight of tool-calling assistant turns.
    pub call_weight: Option<f32>,
    /// Loss weight of the decision tokens of agent trajectories.
    pub decision_weight: Option<f32>,
    /// Data files whose packs each epoch holds more than once (`--repeat FILE=K`).
    pub repeat: BTreeMap<PathBuf, usize>,
}

/// Supervised fine-tuning run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SftConfig {
    /// Starting weights: a GGUF file or a Hugging Face folder.
    pub model: PathBuf,
    /// Training data (`hat data gen` JSONL).
    pub data: Vec<PathBuf>,
    pub seed: u64,
    /// Optimiser steps of the run.
    pub max_steps: usize,
    /// Loss-carrying tokens per optimiser step (gradients accumulate over packs until
    /// reached).
    pub tokens_per_step: usize,
    /// Share of trajectories held out for validation loss.
    pub val_fraction: f64,
    /// Most validation trajectories (they are evaluated at every `eval_every`).
    pub val_max: usize,
    pub eval_every: usize,
    pub save_every: usize,
    /// Checkpoints kept.
    pub keep: usize,
    pub on_too_long: TooLong,
    /// GGUF formats written at the end (`f32`, `q8_0`, `q4_0`).
    pub export: Vec<String>,
    pub optim: AdamWConfig,
    pub pack: PackConfig,
    /// Low-rank adapters instead of full fine-tuning (merged into the weights on export).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraConfig>,
    /// Precision of the dense products (`f32` or `bf16`).
    pub matmul: Matmul,
    /// How many times the loss of an assistant turn that calls a tool counts (1: like any
    /// other turn; `Encoder::with_call_weight`). Each step's loss is the weighted mean over
    /// its tokens; validation stays unweighted, so runs with different weights compare.
    #[serde(skip_serializing_if = "is_one")]
    pub call_weight: f32,
    /// How many times the loss of a decision token of an agent trajectory counts: the first
    /// token of each assistant turn and the tokens of a call's tool name and argument values
    /// (`Encoder::with_decision_weight`; 1: like any other token). Validation stays
    /// unweighted.
    #[serde(skip_serializing_if = "is_one")]
    pub decision_weight: f32,
    /// Data files drawn more often: each epoch holds the training packs of such a file K
    /// times (its held-out trajectories once), so a small file (general-ability replay
    /// answers) takes a larger share of the steps without more of it being generated. Keys
    /// are paths as `data` names them; files not named count once.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub repeat: BTreeMap<PathBuf, usize>,
}

/// Most times a data file may repeat in one epoch (`repeat`).
pub const MAX_REPEAT: usize = 100;

/// `skip_serializing_if` of a weight or temperature whose default is 1.
pub(crate) fn is_one(x: &f32) -> bool {
    *x == 1.0
}

impl Default for SftConfig {
    fn default() -> Self {
        Self {
            model: PathBuf::new(),
            data: Vec::new(),
            seed: 1,
            max_steps: 100,
            tokens_per_step: 2048,
            val_fraction: 0.02,
            val_max: 64,
            eval_every: 25,
            save_every: 5,
            keep: 2,
            on_too_long: TooLong::Error,
            export: vec!["q8_0".into()],
            optim: AdamWConfig::default(),
            pack: PackConfig::default(),
            lora: None,
            matmul: Matmul::F32,
            call_weight: 1.0,
            decision_weight: 1.0,
            repeat: BTreeMap::new(),
        }
    }
}

/// Named starting points for a config.
pub const PRESETS: &[(&str, &str)] = &[
    (
        "cpu",
        "about 60 minutes on a 2-core AVX-512 CPU (measured ~270 packed tokens/s), ~100 on an \
         AVX2 one (estimated): 120 steps of one pack each (up to 16 conversations of one harness \
         state; ~1,800 trajectories, ~0.9M processed tokens), validation every 30 steps",
    ),
    (
        "gpu",
        "the same recipe with a bigger budget: 1,000 steps of 8,192 loss tokens",
    ),
    ("smoke", "a few steps, for checking a setup end to end"),
];

impl SftConfig {
    /// A preset by name.
    pub fn preset(name: &str) -> Result<Self> {
        let mut c = Self::default();
        match name {
            "cpu" => {
                // one pack a step: at the same tokens, 120 one-pack steps beat 40 steps of three
                // packs by 9 lsqa points (docs/results.md, "One pack a step")
                c.max_steps = 120;
                c.tokens_per_step = 1;
                c.optim.lr = 3e-4;
                c.optim.warmup_steps = 4;
                // validating (23 packs) every 10 steps and saving (1.6 GB) every 5 took ~22 of
                // that run's 76 minutes
                c.eval_every = 30;
                c.save_every = 10;
            }
            "gpu" => {
                c.max_steps = 1000;
                c.tokens_per_step = 8192;
                c.optim.lr = 2e-4;
                c.optim.warmup_steps = 50;
                c.save_every = 50;
                c.eval_every = 100;
            }
            "smoke" => {
                c.max_steps = 3;
                c.tokens_per_step = 256;
                c.eval_every = 2;
                c.save_every = 1;
                c.val_max = 4;
            }
            other => return Err(unknown_preset(other, PRESETS)),
        }
        Ok(c)
    }

    /// Reads a TOML file; unknown keys are errors naming the key.
    pub fn from_toml(path: &std::path::Path) -> Result<Self> {
        read_toml(path)
    }

    /// The TOML form.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// Applies command-line values on top of a config (a fresh run).
    pub fn apply(&mut self, o: &Overrides) {
        if !o.data.is_empty() {
            self.data = o.data.clone();
        }
        if let Some(m) = &o.model {
            self.model = m.clone();
        }
        if let Some(x) = o.max_steps {
            self.max_steps = x;
        }
        if let Some(x) = o.lr {
            self.optim.lr = x;
        }
        if let Some(x) = o.tokens_per_step {
            self.tokens_per_step = x;
        }
        if let Some(x) = o.seed {
            self.seed = x;
        }
        if let Some(x) = o.pack {
            self.pack.max_conversations = x;
        }
        if let Some(l) = &o.lora {
            self.lora = Some(l.clone());
        }
        if let Some(m) = o.matmul {
            self.matmul = m;
        }
        if let Some(w) = o.call_weight {
            self.call_weight = w;
        }
        if let Some(w) = o.decision_weight {
            self.decision_weight = w;
        }
        if !o.repeat.is_empty() {
            self.repeat = o.repeat.clone();
        }
    }

    /// How many times `file`'s training packs appear in one epoch (1 unless `repeat` names it).
    pub fn repeat_of(&self, file: &std::path::Path) -> usize {
        self.repeat.get(file).copied().unwrap_or(1)
    }

    /// Applies command-line values to a saved run that is being resumed. Repeating the run's
    /// own values is fine; a different value is an error naming the flag, since it would
    /// silently make a different run, except `max_steps`: a new total extends (or shortens)
    /// the run, and the learning-rate schedule is recomputed over the new total from the
    /// step the run has reached; and `matmul`, the products' precision from here on. Returns
    /// whether the config changed (and must be saved).
    pub fn resume_with(&mut self, o: &Overrides) -> Result<bool> {
        let differs = |flag: &str, saved: String, given: String| -> Result<()> {
            Err(TrainError::Config {
                path: format!("--{flag}"),
                message: format!(
                    "the run being resumed has {flag} = {saved}, not {given}; a resumed run keeps \
                     its config.toml (only --max-steps may change: it extends the run); start a \
                     new run folder to change it"
                ),
            })
        };
        if !o.data.is_empty() && o.data != self.data {
            differs("data", format!("{:?}", self.data), format!("{:?}", o.data))?;
        }
        if let Some(m) = o.model.as_ref().filter(|m| **m != self.model) {
            differs(
                "model",
                self.model.display().to_string(),
                m.display().to_string(),
            )?;
        }
        if let Some(x) = o.lr.filter(|x| *x != self.optim.lr) {
            differs("lr", self.optim.lr.to_string(), x.to_string())?;
        }
        if let Some(x) = o.tokens_per_step.filter(|x| *x != self.tokens_per_step) {
            differs(
                "tokens-per-step",
                self.tokens_per_step.to_string(),
                x.to_string(),
            )?;
        }
        if let Some(x) = o.seed.filter(|x| *x != self.seed) {
            differs("seed", self.seed.to_string(), x.to_string())?;
        }
        if let Some(x) = o.pack.filter(|x| *x != self.pack.max_conversations) {
            differs(
                "pack",
                self.pack.max_conversations.to_string(),
                x.to_string(),
            )?;
        }
        if let Some(x) = o.call_weight.filter(|x| *x != self.call_weight) {
            differs("call-weight", self.call_weight.to_string(), x.to_string())?;
        }
        if let Some(x) = o.decision_weight.filter(|x| *x != self.decision_weight) {
            differs(
                "decision-weight",
                self.decision_weight.to_string(),
                x.to_string(),
            )?;
        }
        if !o.repeat.is_empty() && o.repeat != self.repeat {
            differs(
                "repeat",
                format!("{:?}", self.repeat),
                format!("{:?}", o.repeat),
            )?;
        }
        if let Some(l) = o.lora.as_ref().filter(|l| Some(*l) != self.lora.as_ref()) {
            differs("lora-*", format!("{:?}", self.lora), format!("{l:?}"))?;
        }
        // the precision may change on resume (a run started with bf16 continues with f32 on a
        // CPU without BF16); it changes the numerics from that step on, not the data or recipe
        let mut changed = false;
        if let Some(m) = o.matmul.filter(|m| *m != self.matmul) {
            self.matmul = m;
            changed = true;
        }
        match o.max_steps {
            Some(x) if x != self.max_steps => {
                self.max_steps = x;
                self.validate()?;
                Ok(true)
            }
            _ => Ok(changed),
        }
    }

    /// Checks values that would make a run meaningless.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| {
            Err(TrainError::Config {
                path: "the training config".into(),
                message: m.to_string(),
            })
        };
        if self.data.is_empty() {
            return bad("no training data (`data = [\"train.jsonl\"]` or --data FILE)");
        }
        if self.max_steps == 0 || self.tokens_per_step == 0 {
            return bad("max_steps and tokens_per_step must be positive");
        }
        if !(0.0..1.0).contains(&self.val_fraction) {
            return bad("val_fraction must be in [0, 1)");
        }
        for (name, w) in [
            ("call_weight", self.call_weight),
            ("decision_weight", self.decision_weight),
        ] {
            if !(w > 0.0 && w <= 100.0) {
                return bad(&format!(
                    "{name} must be a number above 0 and at most 100 (1: unweighted)"
                ));
            }
        }
        if !(self.optim.lr > 0.0 && self.optim.lr.is_finite()) {
            return bad("optim.lr must be a positive number");
        }
        for (file, k) in &self.repeat {
            if !self.data.contains(file) {
                return bad(&format!(
                    "repeat names {}, which is not one of the data files {:?}; name a file \
                     exactly as `data` (--data) does",
                    file.display(),
                    self.data
                ));
            }
            if !(1..=MAX_REPEAT).contains(k) {
                return bad(&format!(
                    "repeat for {} is {k}: it must be from 1 to {MAX_REPEAT} (times the file's \
                     packs appear in one epoch)",
                    file.display()
                ));
            }
        }
        if self.pack.max_conversations == 0 || self.pack.max_tokens == 0 {
            return bad("pack.max_conversations and pack.max_tokens must be positive");
        }
        crate::export::check_formats(&self.export)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saved() -> SftConfig {
        let mut c = SftConfig::preset("cpu").unwrap();
        c.data = vec!["a.jsonl".into()];
        c.model = "m.gguf".into();
        c
    }

    #[test]
    fn resume_accepts_its_own_flags_and_extends_by_max_steps() {
        let mut c = saved();
        let same = Overrides {
            data: vec!["a.jsonl".into()],
            model: Some("m.gguf".into()),
            lr: Some(c.optim.lr),
            seed: Some(c.seed),
            ..Default::default()
        };
        assert!(!c.resume_with(&same).unwrap());
        assert_eq!(c, saved());
        let (old, total) = (c.max_steps, 2 * c.max_steps);
        let longer = Overrides {
            max_steps: Some(total),
            ..same
        };
        assert!(c.resume_with(&longer).unwrap());
        assert_eq!(c.max_steps, total);
        // the schedule over the new total: past the old end the rate is above its floor again
        assert!(c.optim.lr_at(old, total) > c.optim.lr_at(old, old) * 2.0);
    }

    #[test]
    fn resume_names_a_flag_that_would_change_the_run() {
        for (o, flag) in [
            (
                Overrides {
                    data: vec!["b.jsonl".into()],
                    ..Default::default()
                },
                "--data",
            ),
            (
                Overrides {
                    lr: Some(1.0),
                    ..Default::default()
                },
                "--lr",
            ),
            (
                Overrides {
                    pack: Some(1),
                    ..Default::default()
                },
                "--pack",
            ),
            (
                Overrides {
                    call_weight: Some(3.0),
                    ..Default::default()
                },
                "--call-weight",
            ),
            (
                Overrides {
                    repeat: [("a.jsonl".into(), 4)].into(),
                    ..Default::default()
                },
                "--repeat",
            ),
            (
                Overrides {
                    max_steps: Some(0),
                    ..Default::default()
                },
                "config",
            ),
        ] {
            let mut c = saved();
            let e = c.resume_with(&o).unwrap_err().to_string();
            assert!(e.contains(flag), "{e}");
        }
    }

    #[test]
    fn the_precision_may_change_on_resume_and_round_trips_through_toml() {
        let mut c = saved();
        assert_eq!(c.matmul, Matmul::F32);
        let bf = Overrides {
            matmul: Some(Matmul::Bf16),
            ..Default::default()
        };
        assert!(c.resume_with(&bf).unwrap());
        assert_eq!((c.matmul, c.max_steps), (Matmul::Bf16, saved().max_steps));
        assert!(!c.resume_with(&bf).unwrap());
        let text = c.to_toml();
        assert!(text.contains("matmul = \"bf16\""), "{text}");
        let back: SftConfig = toml::from_str(&text).unwrap();
        assert_eq!(back, c);
        // a config saved before the field existed reads as f32
        let old: SftConfig =
            toml::from_str(&saved().to_toml().replace("matmul = \"f32\"\n", "")).unwrap();
        assert_eq!(old.matmul, Matmul::F32);
        assert!("fp8".parse::<Matmul>().unwrap_err().contains("f32 or bf16"));
    }

    #[test]
    fn a_call_weight_is_saved_only_when_set_and_must_be_positive() {
        let c = saved();
        assert!(!c.to_toml().contains("call_weight"), "{}", c.to_toml());
        let mut w = saved();
        w.apply(&Overrides {
            call_weight: Some(3.0),
            ..Default::default()
        });
        let text = w.to_toml();
        assert!(text.contains("call_weight = 3.0"), "{text}");
        assert_eq!(toml::from_str::<SftConfig>(&text).unwrap(), w);
        w.call_weight = 0.0;
        let e = w.validate().unwrap_err().to_string();
        assert!(e.contains("call_weight"), "{e}");
    }

    #[test]
    fn a_repeat_is_saved_only_when_set_and_must_name_a_data_file() {
        assert!(
            !saved().to_toml().contains("repeat"),
            "{}",
            saved().to_toml()
        );
        let mut r = saved();
        r.data.push("replay.jsonl".into());
        r.apply(&Overrides {
            repeat: [("replay.jsonl".into(), 4)].into(),
            ..Default::default()
        });
        r.validate().unwrap();
        assert_eq!(r.repeat_of("replay.jsonl".as_ref()), 4);
        assert_eq!(r.repeat_of("a.jsonl".as_ref()), 1);
        let text = r.to_toml();
        assert!(text.contains("\"replay.jsonl\" = 4"), "{text}");
        assert_eq!(toml::from_str::<SftConfig>(&text).unwrap(), r);
        // resuming with the same repeat is fine
        let mut again = r.clone();
        assert!(!again
            .resume_with(&Overrides {
                repeat: [("replay.jsonl".into(), 4)].into(),
                ..Default::default()
            })
            .unwrap());
        let mut stray = r.clone();
        stray.repeat.insert("other.jsonl".into(), 2);
        let e = stray.validate().unwrap_err().to_string();
        assert!(
            e.contains("other.jsonl") && e.contains("not one of the data files"),
            "{e}"
        );
        let mut zero = r;
        zero.repeat.insert("replay.jsonl".into(), 0);
        let e = zero.validate().unwrap_err().to_string();
        assert!(e.contains("from 1 to"), "{e}");
    }
}
