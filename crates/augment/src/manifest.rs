//! What a variant records about itself: the base it came from, its seed and
//! pool, and every transformation applied, in order.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use hat_harness::HarnessSpec;

use crate::pool::Pool;

/// The five HSA families, in the fixed order they are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    SkillIds,
    SkillContent,
    ToolSchemas,
    PromptStructure,
    HookFunctions,
}

impl Family {
    pub const ALL: [Family; 5] = [
        Family::SkillIds,
        Family::SkillContent,
        Family::ToolSchemas,
        Family::PromptStructure,
        Family::HookFunctions,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Family::SkillIds => "skill_ids",
            Family::SkillContent => "skill_content",
            Family::ToolSchemas => "tool_schemas",
            Family::PromptStructure => "prompt_structure",
            Family::HookFunctions => "hook_functions",
        }
    }
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One transformation that was applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Applied {
    pub family: Family,
    /// The transformation, e.g. `rename_tools`.
    pub name: String,
    /// What exactly changed (old -> new names, the style drawn, ...).
    pub detail: Value,
    /// Whether it drew a parameter from the held-out pool.
    pub heldout: bool,
}

impl Applied {
    /// `pooled`: whether the transformation drew a pool-split parameter
    /// (a pure reordering, say, does not).
    pub fn new(family: Family, name: &str, detail: Value, pooled: bool, pool: Pool) -> Applied {
        Applied {
            family,
            name: name.to_string(),
            detail,
            heldout: pooled && pool == Pool::Heldout,
        }
    }
}

/// The record of one variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub seed: u64,
    pub pool: Pool,
    pub base_name: String,
    pub base_version: String,
    pub base_hash: String,
    /// Content hash of the variant.
    pub hash: String,
    pub applied: Vec<Applied>,
}

impl Manifest {
    /// The families that changed something, in order, without repeats.
    pub fn families(&self) -> Vec<Family> {
        let mut out: Vec<Family> = Vec::new();
        for a in &self.applied {
            if !out.contains(&a.family) {
                out.push(a.family);
            }
        }
        out
    }

    /// Whether any applied transformation drew a held-out parameter.
    pub fn uses_heldout(&self) -> bool {
        self.applied.iter().any(|a| a.heldout)
    }
}

/// An augmented harness state and its record.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    pub spec: HarnessSpec,
    pub manifest: Manifest,
}

/// One row of `manifest.json` written by [`crate::write_variants`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantEntry {
    pub dir: String,
    pub seed: u64,
    pub pool: Pool,
    pub hash: String,
    pub applied: Vec<Applied>,
}
