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
    /// The JSON layout's tree as TOML tables, every string a basic (escaped) string.
    Toml,
}

impl Format {
    pub const ALL: [Format; 4] = [Format::Markdown, Format::Xml, Format::Json, Format::Toml];
    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "markdown" => Some(Format::Markdown),
            "xml" => Some(Format::Xml),
            "json" => Some(Format::Json),
            "toml" => Some(Format::Toml),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Markdown => "markdown",
            Format::Xml => "xml",
            Format::Json => "json",
            Format::Toml => "toml",
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
                Format::Toml => return Ok(render_toml(harness, sections, stream)),
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
    serde_json::to_string_pretty(&Value::Object(layout_tree(h, sections, stream)))
        .expect("values serialise")
}

/// The TOML layout: the JSON layout's tree, one table per section in section order.
/// Every string is a basic string, so quotes and newlines inside it are escaped
/// (`\"`, `\n`) as they are in the JSON layout: a model that learns to read the
/// escaped call example here has learnt something the JSON layout asks of it too.
fn render_toml(h: &HarnessView, sections: &[String], stream: &Value) -> String {
    let mut out = String::new();
    for (name, v) in layout_tree(h, sections, stream) {
        match v {
            Value::Object(m) => toml_table(&mut out, &toml_key(&name), &m),
            Value::Array(items) if items.iter().all(Value::is_object) && !items.is_empty() => {
                for item in items {
                    if let Value::Object(m) = item {
                        toml_array_entry(&mut out, &toml_key(&name), &m);
                    }
                }
            }
            other => {
                // A section that is a list or a scalar gets a table of its own so the
                // sections stay in their configured order.
                let mut m = Map::new();
                m.insert("items".into(), other);
                toml_table(&mut out, &toml_key(&name), &m);
            }
        }
    }
    out.trim().to_string()
}

fn toml_table(out: &mut String, path: &str, m: &Map<String, Value>) {
    out.push_str(&format!("[{path}]\n"));
    toml_body(out, path, m);
}

fn toml_array_entry(out: &mut String, path: &str, m: &Map<String, Value>) {
    out.push_str(&format!("[[{path}]]\n"));
    toml_body(out, path, m);
}

/// Key-value lines first (TOML puts a table's own keys before its sub-tables),
/// then sub-tables and arrays of tables. `null` has no TOML form and is left out.
fn toml_body(out: &mut String, path: &str, m: &Map<String, Value>) {
    let is_table_array =
        |v: &Value| matches!(v, Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_object));
    for (k, v) in m {
        if v.is_null() || v.is_object() || is_table_array(v) {
            continue;
        }
        out.push_str(&toml_key(k));
        out.push_str(" = ");
        toml_inline(out, v);
        out.push('\n');
    }
    out.push('\n');
    for (k, v) in m {
        let sub = format!("{path}.{}", toml_key(k));
        match v {
            Value::Object(t) => toml_table(out, &sub, t),
            Value::Array(items) if is_table_array(v) => {
                for item in items {
                    if let Value::Object(t) = item {
                        toml_array_entry(out, &sub, t);
                    }
                }
            }
            _ => {}
        }
    }
}

fn toml_inline(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("\"\""),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => toml_string(out, s),
        Value::Array(items) => {
            let multi = items.len() > 1;
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(if multi { "\n  " } else { "" });
                toml_inline(out, x);
            }
            out.push_str(if multi { ",\n]" } else { "]" });
        }
        Value::Object(m) => {
            out.push('{');
            let mut first = true;
            for (k, x) in m.iter().filter(|(_, x)| !x.is_null()) {
                out.push_str(if first { " " } else { ", " });
                first = false;
                out.push_str(&toml_key(k));
                out.push_str(" = ");
                toml_inline(out, x);
            }
            out.push_str(" }");
        }
    }
}

fn toml_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn toml_key(k: &str) -> String {
    if !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        k.to_string()
    } else {
        let mut s = String::new();
        toml_string(&mut s, k);
        s
    }
}

/// The section tree the JSON and TOML layouts share, in section order.
fn layout_tree(h: &HarnessView, sections: &[String], stream: &Value) -> Map<String, Value> {
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
    root
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

    fn view() -> HarnessView {
        HarnessView {
            name: "demo".into(),
            version: "1".into(),
            hash: "sha256:0".into(),
            persona: PersonaView {
                name: "Mia".into(),
                style: "warm".into(),
                language: "en".into(),
                language_name: "English".into(),
                intro: None,
            },
            rules: vec!["Say \"hi\".".into(), "两行\nline".into()],
            skills: vec![SkillView {
                id: "greet".into(),
                description: "Greets".into(),
                when: None,
                tools: vec!["get product".into()],
                body: "1. Say hello\n2. Tab\there \\ back".into(),
            }],
            tools: vec![],
            call_syntax: "xml-invoke".into(),
            call_instructions: CallSyntax::XmlInvoke.instructions(2),
            max_chars: 200,
            max_calls: 2,
        }
    }

    fn strip_nulls(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|_, x| !x.is_null());
                m.values_mut().for_each(strip_nulls);
            }
            Value::Array(a) => a.iter_mut().for_each(strip_nulls),
            _ => {}
        }
    }

    #[test]
    fn toml_layout_is_valid_toml_holding_the_json_layouts_tree_with_escaped_strings() {
        let stream = json!({"title": "Spring \"sale\"", "products": [
            {"id": "P1", "price": 19.5, "variants": [{"color": "red", "size": null, "stock": 3}]},
            {"id": "P2", "price": 7, "tags": ["a", "b"], "variants": []}
        ], "odd key": true});
        let sections: Vec<String> = ["persona", "rules", "skills", "tools", "stream"]
            .map(String::from)
            .to_vec();
        let h = view();
        let out = Renderer::new(Format::Toml, None)
            .unwrap()
            .render(&h, &sections, &stream)
            .unwrap();
        // The call example is escaped, as in the JSON layout.
        assert!(out.contains(r#"<invoke name=\"tool_name\">"#), "{out}");
        // Sections keep their order.
        let at = |s: &str| out.find(s).unwrap();
        assert!(at("[persona]") < at("[rules]") && at("[rules]") < at("[[skills]]"));
        assert!(at("[[skills]]") < at("[tools]") && at("[tools]") < at("[stream]"));
        let parsed: toml::Value = toml::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        let got = serde_json::to_value(parsed).unwrap();
        let mut want = Value::Object(layout_tree(&h, &sections, &stream));
        strip_nulls(&mut want);
        want["rules"] = json!({"items": want["rules"].take()});
        assert_eq!(got, want, "{out}");
    }

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
