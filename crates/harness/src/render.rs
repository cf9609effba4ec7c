//! Rendering the prompt the model sees: the system prompt (persona, rules,
//! skills, tools, stream) and the user turn for an event.
//!
//! Rendering is deterministic — the same harness state and stream state give
//! the same bytes — so the system prompt is a cacheable prefix.

use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::syntax::CallSyntax;

/// Everything a template sees under `harness`.
#[derive(Debug, Clone, Serialize)]
pub struct HarnessView {
    pub name: String,
    pub version: String,
    pub hash: String,
    pub persona: PersonaView,
    pub rules: Vec<String>,
    pub skills: Vec<SkillView>,
    pub tools: Vec<ToolView>,
    pub call_syntax: String,
    pub call_instructions: String,
    pub max_chars: usize,
    pub max_calls: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct PersonaView {
    pub name: String,
    pub style: String,
    pub language: String,
    pub language_name: String,
    pub intro: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SkillView {
    pub id: String,
    pub description: String,
    pub when: Option<String>,
    pub tools: Vec<String>,
    pub body: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ToolView {
    pub name: String,
    pub description: String,
    /// A compact one-line signature, e.g. `check_stock(product_id: string, size?: "S"|"M")`.
    pub signature: String,
    pub schema: Value,
}

pub fn language_name(code: &str) -> String {
    match code {
        "en" => "English".into(),
        "zh" => "Chinese".into(),
        "es" => "Spanish".into(),
        "ja" => "Japanese".into(),
        other => other.into(),
    }
}

/// A compact signature for a tool's input schema: cheaper in the prompt than
/// the full JSON Schema and still shows names, nesting, types and enums.
pub fn signature(name: &str, schema: &Value) -> String {
    format!("{name}({})", params(schema))
}

fn params(schema: &Value) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return String::new();
    };
    props
        .iter()
        .map(|(k, v)| {
            let opt = if required.contains(&k.as_str()) {
                ""
            } else {
                "?"
            };
            format!("{k}{opt}: {}", type_of(v))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn type_of(v: &Value) -> String {
    if let Some(e) = v.get("enum").and_then(Value::as_array) {
        return e
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join("|");
    }
    match v.get("type").and_then(Value::as_str) {
        Some("object") => format!("{{{}}}", params(v)),
        Some("array") => format!(
            "[{}]",
            v.get("items").map(type_of).unwrap_or_else(|| "any".into())
        ),
        Some(t) => t.to_string(),
        None => "any".into(),
    }
}

/// The system prompt's default budget in characters: about twice the production prompt
/// (5,600-5,900) and above every augmented layout, far below a prompt that would not fit a
/// compact model's context. A harness may set its own (`[prompt] max_chars`).
pub const DEFAULT_PROMPT_BUDGET: usize = 12_000;
/// Template instructions one render may execute: the built-in layouts need a few thousand;
/// a template with runaway loops stops with an error instead of running for minutes.
pub const TEMPLATE_FUEL: u64 = 1_000_000;
/// Largest rendered prompt, whatever the budget says.
pub const MAX_RENDER_BYTES: usize = 1 << 20;

/// The built-in layouts plus an optional custom template, compiled once.
pub struct Renderer {
    env: Environment<'static>,
    format: Format,
    custom: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Xml,
    Json,
}

impl Format {
    pub const ALL: [Format; 3] = [Format::Markdown, Format::Xml, Format::Json];
    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "markdown" => Some(Format::Markdown),
            "xml" => Some(Format::Xml),
            "json" => Some(Format::Json),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Markdown => "markdown",
            Format::Xml => "xml",
            Format::Json => "json",
        }
    }
}

impl Renderer {
    pub fn new(format: Format, custom: Option<&str>) -> Result<Renderer, String> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        env.set_trim_blocks(false);
        env.set_keep_trailing_newline(false);
        env.set_fuel(Some(TEMPLATE_FUEL));
        env.add_template("markdown", include_str!("templates/markdown.j2"))
            .map_err(|e| e.to_string())?;
        env.add_template("xml", include_str!("templates/xml.j2"))
            .map_err(|e| e.to_string())?;
        if let Some(src) = custom {
            env.add_template_owned("custom", src.to_string())
                .map_err(|e| describe_template_error(&e))?;
        }
        Ok(Renderer {
            env,
            format,
            custom: custom.is_some(),
        })
    }

    pub fn render(
        &self,
        harness: &HarnessView,
        sections: &[String],
        stream: &Value,
    ) -> Result<String, String> {
        let ctx =
            minijinja::context! { harness => harness, stream => stream, sections => sections };
        let name = if self.custom {
            "custom"
        } else {
            match self.format {
                Format::Markdown => "markdown",
                Format::Xml => "xml",
                Format::Json => return Ok(render_json(harness, sections, stream)),
            }
        };
        let tmpl = self
            .env
            .get_template(name)
            .map_err(|e| describe_template_error(&e))?;
        let out = tmpl.render(ctx).map_err(|e| describe_template_error(&e))?;
        if out.len() > MAX_RENDER_BYTES {
            return Err(format!(
                "the template renders {} bytes, more than the {MAX_RENDER_BYTES} any prompt may have",
                out.len()
            ));
        }
        Ok(out.trim().to_string())
    }
}

fn describe_template_error(e: &minijinja::Error) -> String {
    match e.line() {
        Some(l) => format!("line {l}: {}", e.detail().unwrap_or(&e.to_string())),
        None => e.to_string(),
    }
}

fn render_json(h: &HarnessView, sections: &[String], stream: &Value) -> String {
    let mut root = Map::new();
    for s in sections {
        let v = match s.as_str() {
            "persona" => serde_json::json!({
                "role": format!("You are {}, the AI host of a live-shopping stream.", h.persona.name),
                "style": h.persona.style,
                "language": h.persona.language_name,
                "intro": h.persona.intro,
            }),
            "rules" => {
                let mut r = h.rules.clone();
                r.push(format!("Keep every reply under {} characters.", h.max_chars));
                Value::from(r)
            }
            "skills" => Value::Array(
                h.skills
                    .iter()
                    .map(|k| serde_json::json!({"id": k.id, "description": k.description, "on": k.when, "tools": k.tools, "steps": k.body}))
                    .collect(),
            ),
            "tools" => serde_json::json!({
                "available": h.tools.iter().map(|t| format!("{}: {}", t.signature, t.description)).collect::<Vec<_>>(),
                "how_to_call": h.call_instructions,
            }),
            "stream" => stream.clone(),
            _ => continue,
        };
        root.insert(s.clone(), v);
    }
    serde_json::to_string_pretty(&Value::Object(root)).expect("values serialise")
}

/// The user turn for an event: what happened, then any injected notes.
pub fn render_turn(line: &str, notes: &[String]) -> String {
    let mut s = line.trim().to_string();
    for n in notes {
        s.push_str("\n[note] ");
        s.push_str(n.trim());
    }
    s
}

/// The call-syntax instructions for a harness.
pub fn call_instructions(syntax: CallSyntax, max_calls: usize) -> String {
    syntax.instructions(max_calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn signatures_show_nesting_enums_and_optionality() {
        let schema = json!({"type": "object", "properties": {
            "item": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
            "size": {"enum": ["small", "large"]}
        }, "required": ["item"]});
        assert_eq!(
            signature("stock", &schema),
            r#"stock(item: {id: string}, size?: "small"|"large")"#
        );
    }
}
