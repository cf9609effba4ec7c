//! The serde-level model of a harness state: exactly what the files hold.
//!
//! `HarnessSpec` is plain data that round-trips through the files
//! (`files.rs`); Harness-State Augmentation edits it, and `Harness::compile`
//! turns it into something that can render prompts and dispatch calls.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `harness.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub harness: HarnessMeta,
    #[serde(default)]
    pub persona: Persona,
    #[serde(default)]
    pub prompt: PromptConfig,
    #[serde(default)]
    pub calls: CallsConfig,
    #[serde(default)]
    pub reply: ReplyConfig,
    /// Limits on viewer-controlled text in the prompt (absent: the defaults, and the same hash
    /// as before the table existed).
    #[serde(default, skip_serializing_if = "ViewersConfig::is_default")]
    pub viewers: ViewersConfig,
}

/// `[viewers]`: how much of a viewer's name and comment reaches the prompt; longer text is cut
/// and marked `…`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ViewersConfig {
    #[serde(default = "default_name_chars")]
    pub max_name_chars: usize,
    #[serde(default = "default_comment_chars")]
    pub max_comment_chars: usize,
}

fn default_name_chars() -> usize {
    crate::text::MAX_VIEWER_NAME_CHARS
}
fn default_comment_chars() -> usize {
    crate::text::MAX_COMMENT_CHARS
}

impl Default for ViewersConfig {
    fn default() -> Self {
        ViewersConfig {
            max_name_chars: default_name_chars(),
            max_comment_chars: default_comment_chars(),
        }
    }
}

impl ViewersConfig {
    pub fn is_default(&self) -> bool {
        *self == ViewersConfig::default()
    }

    pub fn limits(&self) -> crate::text::ViewerLimits {
        crate::text::ViewerLimits {
            name: self.max_name_chars,
            comment: self.max_comment_chars,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HarnessMeta {
    pub name: String,
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Persona {
    pub name: String,
    #[serde(default)]
    pub style: String,
    #[serde(default = "default_language")]
    pub language: String,
    /// Free text the persona section shows after the name and style.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intro: Option<String>,
}

fn default_language() -> String {
    "en".into()
}

impl Default for Persona {
    fn default() -> Self {
        Persona {
            name: "Host".into(),
            style: String::new(),
            language: default_language(),
            intro: None,
        }
    }
}

pub const SECTION_NAMES: [&str; 5] = ["persona", "rules", "skills", "tools", "stream"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    #[serde(default = "default_format")]
    pub format: String,
    #[serde(default = "default_sections")]
    pub sections: Vec<String>,
    /// The rendered system prompt's budget in characters (default
    /// [`crate::render::DEFAULT_PROMPT_BUDGET`]), checked by `hat harness check`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_chars: Option<usize>,
}

fn default_format() -> String {
    "markdown".into()
}
fn default_sections() -> Vec<String> {
    SECTION_NAMES.iter().map(|s| s.to_string()).collect()
}

impl Default for PromptConfig {
    fn default() -> Self {
        PromptConfig {
            template: None,
            format: default_format(),
            sections: default_sections(),
            max_chars: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallsConfig {
    #[serde(default = "default_syntax")]
    pub syntax: String,
    #[serde(default = "default_max_calls")]
    pub max_per_turn: usize,
}

fn default_syntax() -> String {
    "json-tags".into()
}
fn default_max_calls() -> usize {
    3
}

impl Default for CallsConfig {
    fn default() -> Self {
        CallsConfig {
            syntax: default_syntax(),
            max_per_turn: default_max_calls(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplyConfig {
    #[serde(default = "default_max_chars")]
    pub max_chars: usize,
    /// Most milliseconds the command hooks may take in one turn, their timeouts added up over
    /// the worst case (see `Harness::hook_time_worst_case`); default
    /// [`DEFAULT_HOOK_BUDGET_MS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_budget_ms: Option<u64>,
}

/// A live reply is due in a few seconds, and the worst case (every hook at its timeout in
/// every model turn) is rare: hooks that could hold one turn longer than this are refused by
/// `hat harness check` unless `[reply] hook_budget_ms` says otherwise.
pub const DEFAULT_HOOK_BUDGET_MS: u64 = 30_000;

fn default_max_chars() -> usize {
    280
}

impl Default for ReplyConfig {
    fn default() -> Self {
        ReplyConfig {
            max_chars: default_max_chars(),
            hook_budget_ms: None,
        }
    }
}

/// `skills/<id>/SKILL.md`: YAML front matter plus a Markdown procedure.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillSpec {
    /// The folder name; must equal `front.name`.
    pub folder: String,
    pub front: SkillFront,
    pub body: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillFront {
    pub name: String,
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
}

/// `tools/<name>.json`: an MCP tool definition plus its binding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(rename = "inputSchema")]
    pub input_schema: Value,
    pub binding: BindingSpec,
    /// Other MCP fields (`title`, `annotations`, ...) kept as they are.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BindingSpec {
    pub op: String,
    /// Canonical argument name -> where to find it in the call's arguments.
    #[serde(default)]
    pub args: BTreeMap<String, ArgSourceSpec>,
}

/// A JSON Pointer, or a pointer with a value map for renamed enum values.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ArgSourceSpec {
    Pointer(String),
    Mapped {
        from: String,
        /// Value the model writes -> canonical value.
        map: BTreeMap<String, String>,
    },
}

/// Read by hand so a misspelt key is named (serde's untagged enums only say "data did not
/// match any variant").
impl<'de> Deserialize<'de> for ArgSourceSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const EXPECTED: &str =
            "a JSON Pointer string like \"/product_id\", or {\"from\": \"/sz\", \"map\": {\"medium\": \"M\"}}";
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ArgSourceSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(EXPECTED)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(ArgSourceSpec::Pointer(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Self::Value, A::Error> {
                let (mut from, mut map) = (None, None);
                while let Some(k) = m.next_key::<String>()? {
                    match k.as_str() {
                        "from" => from = Some(m.next_value::<String>()?),
                        "map" => map = Some(m.next_value::<BTreeMap<String, String>>()?),
                        other => {
                            return Err(serde::de::Error::custom(format!(
                                "unknown key `{other}` in a binding argument (it takes `from` and \
                                 `map`; or write {EXPECTED})"
                            )))
                        }
                    }
                }
                let from = from.ok_or_else(|| {
                    serde::de::Error::custom(
                        "a mapped binding argument needs `from` (a JSON Pointer)",
                    )
                })?;
                let map = map.ok_or_else(|| {
                    serde::de::Error::custom(
                        "a mapped binding argument needs `map` (value -> canonical value)",
                    )
                })?;
                Ok(ArgSourceSpec::Mapped { from, map })
            }
        }
        d.deserialize_any(V)
    }
}

impl ArgSourceSpec {
    pub fn pointer(&self) -> &str {
        match self {
            ArgSourceSpec::Pointer(p) => p,
            ArgSourceSpec::Mapped { from, .. } => from,
        }
    }
}

/// `hooks.toml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksFile {
    #[serde(default)]
    pub hooks: Vec<HookSpec>,
}

/// One hook as written. Which fields apply depends on `action`; the
/// compiler reports fields that do not belong to the action.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookSpec {
    pub id: String,
    pub event: String,
    pub action: String,
    #[serde(rename = "match", default, skip_serializing_if = "Option::is_none")]
    pub matcher: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub describe: Option<String>,
    // check
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forbid: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub require: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends_with: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_chars: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_fail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    // rewrite
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncate_chars: Option<usize>,
    // inject
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    // drop_fields
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
    // command
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_error: Option<String>,
    /// Environment variables a command hook receives from the server's environment (it
    /// otherwise runs with `PATH` alone), e.g. `["MODERATION_URL"]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
}

/// A whole harness state as data.
#[derive(Debug, Clone, PartialEq)]
pub struct HarnessSpec {
    pub manifest: Manifest,
    pub skills: Vec<SkillSpec>,
    pub tools: Vec<ToolSpec>,
    pub hooks: Vec<HookSpec>,
    /// Template source when `[prompt] template` names one.
    pub template: Option<String>,
    /// Any other files (hook scripts, notes), path -> content, kept verbatim.
    pub extra_files: BTreeMap<String, String>,
}
