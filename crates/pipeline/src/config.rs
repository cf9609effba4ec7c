//! The pipeline's TOML: the base model and harness at the top, then one section per stage.
//! A stage section names a preset of that stage and overrides any of its keys (the same keys
//! as `hat train sft|distill|rl --config`); the pipeline fills the keys that chain the stages
//! (each stage's starting model, the SFT data, the distillation teacher).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::Table;

use hat_train::config::SftConfig;
use hat_train::distill::DistillConfig;
use hat_train::rl::RlConfig;

use crate::PipelineError;

/// Where the SFT trajectories come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataSection {
    /// Use these `hat data gen` files instead of generating.
    pub files: Vec<PathBuf>,
    /// Otherwise generate (oracle teacher) this many train-split tasks over the base harness
    /// and `variants` train-pool states, `group` tasks per (state, stream).
    pub tasks: usize,
    pub variants: usize,
    pub group: usize,
    /// Each run of `group` tasks is also one scene (product on stage, recent activity), as
    /// `hat data gen --shared-scene` draws them: identical system prompts that pack whole.
    pub shared_scene: bool,
    pub seed: u64,
    /// How often each task kind is drawn, as `hat data gen --kind-weights` reads it
    /// (`compare=3,greet_join=0`; empty: every kind equally often).
    pub kind_weights: String,
    /// Share of trajectories (0 to 1) whose first look-up names a wrong product and is
    /// corrected after the tool's answer shows it, as `hat data gen --recovery` writes them.
    pub recovery: f64,
}

impl DataSection {
    /// The parsed `kind_weights`.
    pub fn mix(&self) -> Result<hat_tasks::KindMix, PipelineError> {
        self.kind_weights
            .parse()
            .map_err(|message| PipelineError::Config {
                path: "[data] kind_weights".into(),
                message,
            })
    }
}

impl Default for DataSection {
    fn default() -> Self {
        Self {
            files: Vec::new(),
            tasks: 3000,
            variants: 32,
            group: 16,
            shared_scene: false,
            seed: 1,
            kind_weights: String::new(),
            recovery: 0.0,
        }
    }
}

/// Replay data mixed into SFT (`hat data replay`): the base model's own answers to general
/// prompts, kept where they pass the prompt's verifiable check, so that stage 1 erodes less
/// general instruction following. Generated once into `OUT/replay.jsonl` (resumable), and
/// added to the SFT data only (distillation draws its live-stream prompts from `[data]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplaySection {
    /// General prompts to answer (0: no replay data).
    pub prompts: usize,
    /// Which generator writes them: `basic` (half with one constraint) or `broad` (zero to
    /// three constraints of 31 kinds).
    pub prompt_set: hat_train::distill::prompts::GeneralSet,
    /// Keep answers edited by program to meet what they missed where no try passes
    /// (`hat data replay --repair`; broad prompts only).
    pub repair: bool,
    /// Answers tried per prompt until one passes: the first greedy, the rest sampled.
    pub samples: usize,
    pub temperature: f32,
    /// Token limit of one answer (an answer cut there is not kept).
    pub max_tokens: usize,
    pub seed: u64,
    /// Prompts decoded together.
    pub batch: usize,
    /// Times SFT draws the replay answers in one epoch (`hat train sft --repeat`): 1 gives
    /// them the share of the steps their packs have; 4 gives a 20% share about 50%.
    pub repeat: usize,
}

impl Default for ReplaySection {
    fn default() -> Self {
        Self {
            prompts: 0,
            prompt_set: hat_train::distill::prompts::GeneralSet::Basic,
            repair: false,
            samples: 4,
            temperature: 0.8,
            max_tokens: 512,
            seed: 0,
            batch: 8,
            repeat: 1,
        }
    }
}

impl ReplaySection {
    /// The generator's settings, answering with `model`.
    pub fn config(&self, model: &Path) -> hat_train::replay::ReplayConfig {
        hat_train::replay::ReplayConfig {
            prompts: self.prompts,
            prompt_set: self.prompt_set,
            samples: self.samples,
            temperature: self.temperature,
            max_new_tokens: self.max_tokens,
            seed: self.seed,
            batch: self.batch,
            model_name: model.display().to_string(),
            repair: self.repair,
        }
    }

    fn validate(&self) -> Result<(), PipelineError> {
        if self.prompts == 0 {
            return Ok(());
        }
        if !(1..=hat_train::config::MAX_REPEAT).contains(&self.repeat) {
            return Err(PipelineError::Config {
                path: "[replay]".into(),
                message: format!(
                    "repeat = {}: it must be from 1 to {} (times SFT draws the replay answers \
                     in one epoch)",
                    self.repeat,
                    hat_train::config::MAX_REPEAT
                ),
            });
        }
        self.config(Path::new(""))
            .validate()
            .map_err(|b| PipelineError::Config {
                path: "[replay]".into(),
                message: format!("{} {}", b.key, b.problem),
            })
    }
}

/// The evaluation after each stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvalSection {
    /// Comma-separated suites: lsqa, hvqa, ifeval.
    pub suites: String,
    /// Only the first N items of each suite (unset: all).
    pub limit: Option<usize>,
    /// Evaluate the base model too (the table's first row).
    pub base: bool,
    pub batch: usize,
    pub max_tokens: u32,
    pub ifeval_max_tokens: u32,
}

impl Default for EvalSection {
    fn default() -> Self {
        Self {
            suites: "lsqa,hvqa,ifeval".into(),
            limit: None,
            base: true,
            batch: 8,
            max_tokens: 128,
            ifeval_max_tokens: 512,
        }
    }
}

/// A pipeline run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PipelineConfig {
    /// The base model: a GGUF file or Hugging Face folder (the CLI resolves `default`).
    pub model: PathBuf,
    pub harness_dir: PathBuf,
    pub data: DataSection,
    pub replay: ReplaySection,
    /// Stage sections: `preset` (of that stage), `skip = true` to leave the stage out, and
    /// any key of the stage's config.
    pub sft: Table,
    pub distill: Table,
    pub rl: Table,
    pub eval: EvalSection,
    /// Keep each finished stage's checkpoints (1.6 GB each for a 135M model with its AdamW
    /// moments); by default only the exports stay, which is all the next stage needs.
    pub keep_checkpoints: bool,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            model: PathBuf::new(),
            harness_dir: PathBuf::from("harnesses/livestream"),
            data: DataSection::default(),
            replay: ReplaySection::default(),
            sft: Table::new(),
            distill: Table::new(),
            rl: Table::new(),
            eval: EvalSection::default(),
            keep_checkpoints: false,
        }
    }
}

/// Pipeline presets.
pub const PRESETS: &[(&str, &str)] = &[
    (
        "quick",
        "minutes on 2 cores: 200 trajectories, 4 SFT steps, 2 distillation steps, 2 RL steps \
         of 4 rollouts, 10 items a suite; checks the whole recipe end to end and ends with an \
         evaluated, exported model",
    ),
    (
        "cpu",
        "about 3 hours on 2 cores (an estimate from measured stage costs, see \
         docs/results.md): 3,000 trajectories (~5 min), 84 one-pack SFT steps (~55 min), 16 \
         distillation steps (~14 min), 20 RL steps (~30 min), the full suites after each stage \
         (~24 min each)",
    ),
    (
        "gpu",
        "each stage's gpu preset and the full suites after every stage",
    ),
];

fn table(pairs: &[(&str, toml::Value)]) -> Table {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn s(v: &str) -> toml::Value {
    toml::Value::String(v.into())
}

fn i(v: i64) -> toml::Value {
    toml::Value::Integer(v)
}

impl PipelineConfig {
    pub fn preset(name: &str) -> Result<Self, PipelineError> {
        let mut c = Self::default();
        match name {
            "quick" => {
                c.data = DataSection {
                    tasks: 200,
                    variants: 4,
                    group: 8,
                    ..DataSection::default()
                };
                // one checkpoint, at the end of each stage (a checkpoint is 1.6 GB)
                c.sft = table(&[
                    ("preset", s("smoke")),
                    ("max_steps", i(4)),
                    ("save_every", i(4)),
                    ("keep", i(1)),
                    // half the default pack: the quick run stays under ~8 GB of memory
                    (
                        "pack",
                        toml::Value::Table(table(&[("max_tokens", i(4096))])),
                    ),
                ]);
                c.distill = table(&[
                    ("preset", s("smoke")),
                    ("max_steps", i(2)),
                    ("save_every", i(2)),
                    ("keep", i(1)),
                ]);
                // answers long enough to call a tool, and groups big enough to differ
                c.rl = table(&[
                    ("preset", s("smoke")),
                    ("max_steps", i(2)),
                    ("save_every", i(2)),
                    ("keep", i(1)),
                    ("group_size", i(4)),
                    ("max_new_tokens", i(96)),
                    ("max_turns", i(3)),
                    ("max_draw_rounds", i(3)),
                ]);
                c.eval.limit = Some(10);
                c.eval.ifeval_max_tokens = 256;
            }
            "cpu" => {
                // one scene a group: 16 conversations a pack, so a one-pack step sees twice
                // the trajectories (docs/results.md: leg 1 lsqa 49.7 -> 60.6 at equal steps)
                c.data.shared_scene = true;
                c.sft = table(&[("preset", s("cpu")), ("max_steps", i(84))]);
                c.distill = table(&[
                    ("preset", s("cpu")),
                    ("max_steps", i(16)),
                    ("stream_share", toml::Value::Float(0.25)),
                ]);
                c.rl = table(&[("preset", s("cpu")), ("max_steps", i(20))]);
                // the base model's figures are in docs/results.md; 24 minutes saved
                c.eval.base = false;
            }
            "gpu" => {
                c.data.tasks = 20000;
                c.data.variants = 400;
                c.data.shared_scene = true;
                c.sft = table(&[("preset", s("gpu"))]);
                c.distill = table(&[("preset", s("gpu"))]);
                c.rl = table(&[("preset", s("gpu"))]);
            }
            other => {
                return Err(PipelineError::Config {
                    path: "--preset".into(),
                    message: format!(
                        "unknown preset `{other}` (known: {})",
                        PRESETS.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
                    ),
                })
            }
        }
        Ok(c)
    }

    /// Reads a pipeline TOML: a `preset` key at the top starts from that preset, and the
    /// file's keys override it (stage sections key by key).
    pub fn from_toml(path: &Path) -> Result<Self, PipelineError> {
        let text = std::fs::read_to_string(path).map_err(|e| PipelineError::Io {
            path: path.display().to_string(),
            source: e,
        })?;
        Self::from_str(&text, &path.display().to_string())
    }

    /// [`PipelineConfig::from_toml`] on text; `origin` names it in errors.
    pub fn from_str(text: &str, origin: &str) -> Result<Self, PipelineError> {
        let err = |m: String| PipelineError::Config {
            path: origin.to_string(),
            message: m,
        };
        let mut t: Table = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        let base = match t.remove("preset") {
            Some(toml::Value::String(p)) => Self::preset(&p)?,
            Some(v) => {
                return Err(err(format!(
                    "preset = {v}: a preset name (quick, cpu, gpu)"
                )))
            }
            None => Self::default(),
        };
        let mut merged: Table = toml::Value::try_from(&base)
            .map_err(|e| err(e.to_string()))?
            .as_table()
            .cloned()
            .unwrap_or_default();
        merge(&mut merged, t);
        let c: Self = toml::Value::Table(merged)
            .try_into()
            .map_err(|e: toml::de::Error| err(e.to_string()))?;
        Ok(c)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }
}

/// Deep merge: tables key by key, anything else replaced.
fn merge(into: &mut Table, from: Table) {
    for (k, v) in from {
        match (into.get_mut(&k), v) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

/// Keys of a stage section that the pipeline reads itself.
const PIPELINE_KEYS: &[&str] = &["preset", "skip", "evaluate"];
/// Keys the pipeline fills to chain the stages.
const CHAINED: &[&str] = &["model", "data", "teacher", "harness_dir"];

/// A stage section split into the pipeline's keys and the stage's config.
pub struct StageSection<T> {
    pub skip: bool,
    pub evaluate: bool,
    pub config: T,
}

fn section<T: Serialize + serde::de::DeserializeOwned>(
    name: &str,
    t: &Table,
    preset: impl Fn(&str) -> Result<T, hat_train::TrainError>,
    default_preset: &str,
) -> Result<StageSection<T>, PipelineError> {
    let err = |m: String| PipelineError::Config {
        path: format!("[{name}]"),
        message: m,
    };
    let p = match t.get("preset") {
        Some(toml::Value::String(p)) => p.clone(),
        Some(v) => return Err(err(format!("preset = {v}: a preset name"))),
        None => default_preset.to_string(),
    };
    let flag = |k: &str, default: bool| match t.get(k) {
        None => Ok(default),
        Some(toml::Value::Boolean(b)) => Ok(*b),
        Some(v) => Err(err(format!("{k} = {v}: true or false"))),
    };
    let skip = flag("skip", false)?;
    let evaluate = flag("evaluate", true)?;
    let base = preset(&p).map_err(|e| err(e.to_string()))?;
    let mut merged: Table = toml::Value::try_from(&base)
        .map_err(|e| err(e.to_string()))?
        .as_table()
        .cloned()
        .unwrap_or_default();
    let mut own = t.clone();
    for k in PIPELINE_KEYS {
        own.remove(*k);
    }
    for k in CHAINED {
        if own.contains_key(*k) {
            return Err(err(format!(
                "`{k}` is filled by the pipeline (each stage starts from the one before; set \
                 the base model with the top-level `model`, the SFT data in [data])"
            )));
        }
    }
    merge(&mut merged, own);
    let config = toml::Value::Table(merged)
        .try_into()
        .map_err(|e: toml::de::Error| err(e.to_string()))?;
    Ok(StageSection {
        skip,
        evaluate,
        config,
    })
}

impl PipelineConfig {
    pub fn sft(&self) -> Result<StageSection<SftConfig>, PipelineError> {
        section("sft", &self.sft, SftConfig::preset, "cpu")
    }
    pub fn distill(&self) -> Result<StageSection<DistillConfig>, PipelineError> {
        section("distill", &self.distill, DistillConfig::preset, "cpu")
    }
    pub fn rl(&self) -> Result<StageSection<RlConfig>, PipelineError> {
        section("rl", &self.rl, RlConfig::preset, "cpu")
    }

    /// Checks everything that can be checked before hours of work.
    pub fn validate(&self) -> Result<(), PipelineError> {
        if self.model.as_os_str().is_empty() {
            return Err(PipelineError::Config {
                path: "the pipeline config, key `model`".into(),
                message: "set the base model (a GGUF file or Hugging Face folder)".into(),
            });
        }
        if !self.harness_dir.is_dir() {
            return Err(PipelineError::Config {
                path: "the pipeline config, key `harness_dir`".into(),
                message: format!(
                    "{} is not a directory (the base harness, e.g. harnesses/livestream)",
                    self.harness_dir.display()
                ),
            });
        }
        let d = &self.data;
        if d.files.is_empty() && (d.tasks == 0 || d.tasks > 10_000_000 || d.variants > 100_000) {
            return Err(PipelineError::Config {
                path: "[data]".into(),
                message: format!(
                    "tasks = {}, variants = {}: use 1 to 10,000,000 tasks and at most 100,000 \
                     variants (the limits of `hat data gen`), or give `files`",
                    d.tasks, d.variants
                ),
            });
        }
        d.mix()?;
        if !d.files.is_empty() && d.recovery > 0.0 {
            return Err(PipelineError::Config {
                path: "[data] recovery".into(),
                message: "recovery shapes the trajectories the pipeline generates; with `files` \
                          nothing is generated: drop one of the two"
                    .into(),
            });
        }
        hat_data::gen::check_recovery(d.recovery).map_err(|message| PipelineError::Config {
            path: "[data] recovery".into(),
            message,
        })?;
        self.replay.validate()?;
        self.sft()?;
        self.distill()?;
        self.rl()?;
        hat_eval::Suite::parse_list(&self.eval.suites).map_err(|e| PipelineError::Config {
            path: "[eval] suites".into(),
            message: e.to_string(),
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_overrides_its_preset_key_by_key() {
        let c = PipelineConfig::from_str(
            "preset = \"quick\"\nmodel = \"m\"\n[sft]\nmax_steps = 7\n[sft.optim]\nlr = 0.001\n[eval]\nlimit = 3\n",
            "p.toml",
        )
        .unwrap();
        let sft = c.sft().unwrap().config;
        assert_eq!(sft.max_steps, 7);
        assert_eq!(sft.optim.lr, 0.001);
        // the rest of the quick preset stays
        assert_eq!(
            sft.tokens_per_step,
            SftConfig::preset("smoke").unwrap().tokens_per_step
        );
        assert_eq!(c.data.tasks, 200);
        assert!(!c.data.shared_scene, "plain groups unless asked");
        assert!(PipelineConfig::preset("cpu").unwrap().data.shared_scene);
        let sc = PipelineConfig::from_str("[data]\nshared_scene = true\n", "p.toml").unwrap();
        assert!(sc.data.shared_scene);
        assert_eq!(c.eval.limit, Some(3));
        assert_eq!(c.rl().unwrap().config.max_steps, 2);
    }

    #[test]
    fn typos_and_chained_keys_are_errors_naming_the_section() {
        let c = PipelineConfig::from_str("[rl]\ngroup_sise = 3\n", "p.toml").unwrap();
        let e = c.rl().err().unwrap().to_string();
        assert!(e.contains("[rl]") && e.contains("group_sise"), "{e}");
        let c = PipelineConfig::from_str("[distill]\nmodel = \"x\"\n", "p.toml").unwrap();
        let e = c.distill().err().unwrap().to_string();
        assert!(e.contains("filled by the pipeline"), "{e}");
        let e = PipelineConfig::from_str("[daat]\n", "p.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("p.toml") && e.contains("daat"), "{e}");
        let e = PipelineConfig::from_str("preset = \"huge\"\n", "p.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("quick, cpu, gpu"), "{e}");
    }

    #[test]
    fn kind_weights_are_read_and_a_bad_one_names_the_key() {
        let c =
            PipelineConfig::from_str("[data]\nkind_weights = \"compare=3\"\n", "p.toml").unwrap();
        assert_eq!(
            c.data.mix().unwrap().weight(hat_tasks::TaskKind::Compare),
            3
        );
        assert!(PipelineConfig::default().data.mix().unwrap().is_uniform());
        let c = PipelineConfig::from_str("[data]\nkind_weights = \"compare=three\"\n", "p.toml")
            .unwrap();
        let e = c.data.mix().unwrap_err().to_string();
        assert!(
            e.contains("[data] kind_weights") && e.contains("whole number"),
            "{e}"
        );
    }

    #[test]
    fn recovery_is_a_share_and_a_bad_one_names_the_key() {
        let ok = |t: &str| {
            let mut c = PipelineConfig::from_str(t, "p.toml").unwrap();
            c.harness_dir = std::env::temp_dir();
            c.model = "m.gguf".into();
            c.validate()
        };
        assert!(ok("[data]\nrecovery = 0.4\n").is_ok());
        assert_eq!(PipelineConfig::default().data.recovery, 0.0);
        for bad in ["1.5", "-0.2", "nan"] {
            let e = ok(&format!("[data]\nrecovery = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("[data] recovery") && e.contains("not a share"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn replay_is_off_by_default_and_bad_values_name_the_section() {
        assert_eq!(PipelineConfig::default().replay.prompts, 0);
        let c = PipelineConfig::from_str("[replay]\nprompts = 300\n", "p.toml").unwrap();
        assert_eq!(c.replay.prompts, 300);
        assert_eq!(c.replay.samples, 4, "the rest keeps its defaults");
        c.replay.validate().unwrap();
        let c =
            PipelineConfig::from_str("[replay]\nprompts = 30\nprompt_set = \"broad\"\n", "p.toml")
                .unwrap();
        let set = c.replay.config(Path::new("m")).prompt_set;
        assert_eq!(set, hat_train::distill::prompts::GeneralSet::Broad);
        let e = PipelineConfig::from_str("[replay]\nprompt_set = \"wide\"\n", "p.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("prompt_set") || e.contains("wide"), "{e}");
        for bad in [
            "[replay]\nprompts = 10\nsamples = 0\n",
            "[replay]\nprompts = 10\ntemperature = 0.0\n",
            "[replay]\nprompts = 10\ntemperature = 3.0\n",
            "[replay]\nprompts = 1000000\n",
            "[replay]\nprompts = 10\nrepeat = 0\n",
            "[replay]\nprompts = 10\nrepair = true\n",
        ] {
            let c = PipelineConfig::from_str(bad, "p.toml").unwrap();
            let e = c.replay.validate().unwrap_err().to_string();
            assert!(e.contains("[replay]"), "{bad}: {e}");
        }
        let e = PipelineConfig::from_str("[replay]\nprompt = 10\n", "p.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("prompt"), "{e}");
    }

    #[test]
    fn every_preset_resolves_its_stages() {
        for (p, _) in PRESETS {
            let c = PipelineConfig::preset(p).unwrap();
            c.sft().unwrap();
            c.distill().unwrap();
            c.rl().unwrap();
        }
    }
}
