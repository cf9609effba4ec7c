//! Harness-State Augmentation (HSA): seeded, task-preserving transformations
//! of a harness state.
//!
//! Every tool call maps through its binding back to a canonical operation
//! and canonical arguments, and gold expectations are computed from the
//! harness state itself (check hooks, reply limits, bindings). So a
//! transformation only has to keep the spec valid and every canonical
//! operation reachable; the gold follows automatically.
//!
//! Five families (see [`families`]), each split into a training and a
//! held-out parameter pool ([`Pool`], constants in [`banks`]):
//!
//! 1. skill ids: naming styles for skill ids;
//! 2. skill content: rewording, reordering commuting steps, layouts, distractor skills;
//! 3. tool schemas: tool and parameter renames, nesting/flattening, enum
//!    value maps, property order, optional parameters, descriptions, distractor tools;
//! 4. prompt structure: section order, layout format, persona, call syntax;
//! 5. hook functions: reply limits, forbidden words, sign-offs, required
//!    phrases, inject notes, optional hooks.
//!
//! [`augment`] applies a random subset (at least two families) in that fixed
//! order, drawing everything from `ChaCha8Rng::seed_from_u64(seed)`, and
//! compiles the result; [`write_variants`] writes many variants and a
//! `manifest.json`. The same seed always gives byte-identical output.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use hat_harness::harness::content_hash;
use hat_harness::{files, Harness, HarnessError, HarnessSpec, Problem};

pub mod banks;
pub mod families;
pub mod manifest;
pub mod pool;

pub use families::Transform;
pub use manifest::{Applied, Family, Manifest, Variant, VariantEntry};
pub use pool::{Pool, Split};

/// Probability that a family is drawn for a variant (at least two always are).
pub const FAMILY_PROBABILITY: f64 = 0.6;

/// Errors of augmentation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AugmentError {
    #[error("the base harness {path} is invalid:\n{}", list(.problems))]
    Base {
        path: String,
        problems: Vec<Problem>,
    },
    #[error(transparent)]
    Harness(#[from] HarnessError),
    #[error("variant seed {seed} ({pool}) does not compile after {applied:?}; this is an augmentation bug:\n{}", list(.problems))]
    Invalid {
        seed: u64,
        pool: Pool,
        applied: Vec<String>,
        problems: Vec<Problem>,
    },
    #[error("cannot write {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot serialise the manifest: {0}")]
    Json(#[from] serde_json::Error),
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One augmented harness state from `base`, reproducible from `seed` and `pool`.
pub fn augment(base: &HarnessSpec, seed: u64, pool: Pool) -> Result<Variant, AugmentError> {
    let base_hash = content_hash(&base.to_files());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let families = families::all();
    let mut result = None;
    for _attempt in 0..8 {
        let mut chosen: Vec<bool> = families
            .iter()
            .map(|_| rng.gen_bool(FAMILY_PROBABILITY))
            .collect();
        while chosen.iter().filter(|c| **c).count() < 2 {
            let i = rng.gen_range(0..chosen.len());
            chosen[i] = true;
        }
        let mut spec = base.clone();
        let mut applied = Vec::new();
        for (f, on) in families.iter().zip(&chosen) {
            if *on {
                applied.extend(f.apply(&mut spec, &mut rng, pool));
            }
        }
        if pool == Pool::Heldout && !applied.iter().any(|a: &Applied| a.heldout) {
            // Guarantee the variant is unseen: a held-out call syntax always applies.
            applied.extend(families::prompt::syntax(&mut spec, &mut rng, pool));
        }
        let n_families = {
            let mut f: Vec<Family> = applied.iter().map(|a| a.family).collect();
            f.dedup();
            f.len()
        };
        let done = n_families >= 2;
        result = Some((spec, applied));
        if done {
            break;
        }
    }
    let (mut spec, applied) = result.expect("at least one attempt");
    // The order files load in, so the in-memory state and the written one
    // are the same (and `tool_for` picks the same tool in both).
    spec.skills
        .sort_by_cached_key(|s| format!("skills/{}/SKILL.md", s.folder));
    spec.tools
        .sort_by_cached_key(|t| format!("tools/{}.json", t.name));
    let m = &base.manifest.harness;
    spec.manifest.harness.version = format!("{}+hsa.{}.{}", m.version, pool, seed);
    let compiled = Harness::compile(spec, None).map_err(|e| match e {
        HarnessError::Invalid(problems) => AugmentError::Invalid {
            seed,
            pool,
            applied: applied
                .iter()
                .map(|a| format!("{}/{}", a.family, a.name))
                .collect(),
            problems,
        },
        other => AugmentError::Harness(other),
    })?;
    let manifest = Manifest {
        seed,
        pool,
        base_name: m.name.clone(),
        base_version: m.version.clone(),
        base_hash,
        hash: compiled.hash.clone(),
        applied,
    };
    Ok(Variant {
        spec: compiled.spec,
        manifest,
    })
}

/// Reads and validates the harness spec in `dir`.
pub fn load_spec(dir: &Path) -> Result<HarnessSpec, AugmentError> {
    let (fm, mut problems) = files::read_dir(dir)?;
    let (spec, more) = files::parse(&fm);
    problems.extend(more);
    let base_err = |problems| AugmentError::Base {
        path: dir.display().to_string(),
        problems,
    };
    match spec {
        Some(spec) if problems.is_empty() => {
            Harness::load(dir).map_err(|e| match e {
                HarnessError::Invalid(p) => base_err(p),
                other => AugmentError::Harness(other),
            })?;
            Ok(spec)
        }
        _ => Err(base_err(problems)),
    }
}

/// The seed of the `index`-th variant of a run seeded with `seed`.
pub fn variant_seeds(seed: u64, count: usize) -> Vec<u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x4853_415f_5345_4544);
    (0..count).map(|_| rng.next_u64()).collect()
}

/// What [`write_variants`] wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub out: PathBuf,
    pub count: usize,
    pub pool: Pool,
    pub base_hash: String,
    /// Variants that used at least one held-out parameter.
    pub heldout_variants: usize,
    /// How many variants each family changed.
    pub families: BTreeMap<Family, usize>,
}

/// Writes `count` variants of the harness in `base_dir` to `out/v000/`,
/// `out/v001/`, ... and `out/manifest.json`. Deterministic in `seed`.
pub fn write_variants(
    base_dir: &Path,
    count: usize,
    seed: u64,
    pool: Pool,
    out: &Path,
) -> Result<Summary, AugmentError> {
    let base = load_spec(base_dir)?;
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| AugmentError::Io { path, source }
    };
    std::fs::create_dir_all(out).map_err(io(out))?;
    let mut entries = Vec::new();
    let mut summary = Summary {
        out: out.to_path_buf(),
        count,
        pool,
        base_hash: content_hash(&base.to_files()),
        heldout_variants: 0,
        families: BTreeMap::new(),
    };
    for (i, s) in variant_seeds(seed, count).into_iter().enumerate() {
        let v = augment(&base, s, pool)?;
        let dir = format!("v{i:03}");
        let path = out.join(&dir);
        if path.exists() {
            // Only this run's own slot: stale files of an earlier run would change the state.
            std::fs::remove_dir_all(&path).map_err(io(&path))?;
        }
        v.spec.write_to(&path)?;
        summary.heldout_variants += usize::from(v.manifest.uses_heldout());
        for f in v.manifest.families() {
            *summary.families.entry(f).or_default() += 1;
        }
        entries.push(VariantEntry {
            dir,
            seed: s,
            pool,
            hash: v.manifest.hash,
            applied: v.manifest.applied,
        });
    }
    let path = out.join("manifest.json");
    let mut text = serde_json::to_string_pretty(&entries)?;
    text.push('\n');
    std::fs::write(&path, text).map_err(io(&path))?;
    Ok(summary)
}

/// Every parameter of `pool`, by family and kind.
pub fn parameters(pool: Pool) -> Vec<(Family, &'static str, Vec<String>)> {
    use banks::*;
    let s = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let heldout = pool == Pool::Heldout;
    let vocab = |v: &[Vocab]| -> Vec<String> {
        v.iter()
            .flat_map(|(_, t, h)| if heldout { *h } else { *t })
            .map(|w| w.join("_"))
            .collect()
    };
    let sections: Vec<String> = {
        let all: Vec<String> = hat_harness::spec::SECTION_NAMES
            .iter()
            .map(|x| x.to_string())
            .collect();
        families::prompt::section_orders(&all, pool)
            .into_iter()
            .map(|o| o.join(","))
            .collect()
    };
    vec![
        (
            Family::SkillIds,
            "skill id style",
            s(SKILL_ID_STYLES.get(pool)),
        ),
        (
            Family::SkillIds,
            "skill id vocabulary",
            SKILL_ID_VOCAB
                .iter()
                .flat_map(|v| {
                    if heldout {
                        vec![v.3.to_string()]
                    } else {
                        vec![v.1.to_string(), v.2.to_string()]
                    }
                })
                .collect(),
        ),
        (
            Family::SkillContent,
            "phrase rewording",
            SKILL_PHRASES
                .get(pool)
                .iter()
                .map(|(a, b)| format!("{a} -> {b}"))
                .collect(),
        ),
        (
            Family::SkillContent,
            "procedure layout",
            s(SKILL_LAYOUTS.get(pool)),
        ),
        (
            Family::SkillContent,
            "distractor skill",
            DISTRACTOR_SKILLS
                .get(pool)
                .iter()
                .map(|d| d.id.to_string())
                .collect(),
        ),
        (
            Family::ToolSchemas,
            "tool name style",
            s(TOOL_NAME_STYLES.get(pool)),
        ),
        (
            Family::ToolSchemas,
            "tool name vocabulary",
            vocab(TOOL_NAME_VOCAB),
        ),
        (
            Family::ToolSchemas,
            "parameter name style",
            s(PARAM_NAME_STYLES.get(pool)),
        ),
        (
            Family::ToolSchemas,
            "parameter name vocabulary",
            vocab(PARAM_NAME_VOCAB),
        ),
        (
            Family::ToolSchemas,
            "enum value style",
            s(ENUM_VALUE_STYLES.get(pool)),
        ),
        (
            Family::ToolSchemas,
            "enum value vocabulary",
            ENUM_VALUE_VOCAB
                .iter()
                .map(|v| if heldout { v.2 } else { v.1 }.to_string())
                .collect(),
        ),
        (
            Family::ToolSchemas,
            "nesting object",
            s(NEST_CONTAINERS.get(pool)),
        ),
        (
            Family::ToolSchemas,
            "optional parameter",
            EXTRA_PARAMS
                .get(pool)
                .iter()
                .map(|p| p.0.to_string())
                .collect(),
        ),
        (
            Family::ToolSchemas,
            "tool description",
            TOOL_DESCRIPTIONS
                .iter()
                .flat_map(|(_, t, h)| if heldout { *h } else { *t })
                .map(|d| d.to_string())
                .collect(),
        ),
        (
            Family::ToolSchemas,
            "distractor tool",
            DISTRACTOR_TOOLS
                .get(pool)
                .iter()
                .map(|d| d.name.to_string())
                .collect(),
        ),
        (Family::PromptStructure, "section order", sections),
        (
            Family::PromptStructure,
            "layout format",
            s(FORMATS.get(pool)),
        ),
        (
            Family::PromptStructure,
            "call syntax",
            s(CALL_SYNTAXES.get(pool)),
        ),
        (
            Family::PromptStructure,
            "persona name",
            s(PERSONA_NAMES.get(pool)),
        ),
        (
            Family::PromptStructure,
            "persona style",
            s(PERSONA_STYLES.get(pool)),
        ),
        (
            Family::PromptStructure,
            "persona intro",
            s(PERSONA_INTROS.get(pool)),
        ),
        (
            Family::HookFunctions,
            "reply limit",
            REPLY_LIMITS
                .get(pool)
                .iter()
                .map(|v| v.to_string())
                .collect(),
        ),
        (
            Family::HookFunctions,
            "forbidden phrase",
            s(FORBID_WORDS.get(pool)),
        ),
        (Family::HookFunctions, "sign-off", s(SIGN_OFFS.get(pool))),
        (
            Family::HookFunctions,
            "required phrase",
            s(REQUIRED_PHRASES.get(pool)),
        ),
        (
            Family::HookFunctions,
            "inject note",
            INJECT_NOTES
                .get(pool)
                .iter()
                .map(|(e, n)| format!("{e}: {n}"))
                .collect(),
        ),
    ]
}

/// Every held-out parameter, by family and kind (for the docs).
pub fn heldout_parameters() -> Vec<(Family, &'static str, Vec<String>)> {
    parameters(Pool::Heldout)
}

/// How many held-out parameter values there are in all.
pub fn heldout_parameter_count() -> usize {
    heldout_parameters().iter().map(|p| p.2.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_seeds_are_deterministic_and_distinct() {
        let a = variant_seeds(7, 50);
        assert_eq!(a, variant_seeds(7, 50));
        let set: std::collections::BTreeSet<_> = a.iter().collect();
        assert_eq!(set.len(), 50);
    }

    #[test]
    fn parameter_lists_cover_every_family_in_both_pools() {
        for pool in Pool::ALL {
            let p = parameters(pool);
            for f in Family::ALL {
                assert!(p.iter().any(|x| x.0 == f && !x.2.is_empty()), "{pool} {f}");
            }
        }
        assert!(heldout_parameter_count() > 100);
    }
}
