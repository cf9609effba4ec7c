//! OpenAI tool calling on top of the harness's call syntax.
//!
//! HAT's models call tools in the text, in the syntax of their harness (`<tool_call>{...}`
//! for the production one). A `/v1/chat/completions` request with `tools` gets them the same
//! way: the tool list and the active harness's calling instructions are added to the system
//! prompt, earlier assistant `tool_calls` are written back in that syntax, tool results go in
//! as tool messages, and the answer is parsed with the same syntax into OpenAI `tool_calls`.
//! `tool_choice` becomes an instruction (`none` leaves the tools out); decoding is not
//! constrained.

use std::collections::HashMap;

use hat_harness::syntax::{CallSyntax, ToolCall};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::{Result, ServeError};

pub const MAX_TOOLS: usize = 128;

#[derive(Debug, Deserialize)]
pub struct ToolDef {
    #[serde(rename = "type", default = "function")]
    pub kind: String,
    pub function: FunctionDef,
}

fn function() -> String {
    "function".into()
}

#[derive(Debug, Deserialize)]
pub struct FunctionDef {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub parameters: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct WireToolCall {
    #[serde(default)]
    pub id: Option<String>,
    pub function: WireFunction,
}

#[derive(Debug, Clone, Deserialize)]
pub struct WireFunction {
    pub name: String,
    /// A JSON object, as a string (OpenAI's form).
    #[serde(default)]
    pub arguments: String,
}

fn valid_name(n: &str) -> bool {
    (1..=64).contains(&n.len())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The prompt section for `tools` under `tool_choice`, or `None` when no tool may be used.
pub fn tools_section(
    tools: &[ToolDef],
    choice: Option<&Value>,
    syntax: CallSyntax,
    max_calls: usize,
) -> Result<Option<String>> {
    if tools.len() > MAX_TOOLS {
        return Err(ServeError::bad(
            "tools",
            format!("{} tools; at most {MAX_TOOLS}", tools.len()),
        ));
    }
    for (i, t) in tools.iter().enumerate() {
        if t.kind != "function" {
            return Err(ServeError::bad(
                format!("tools[{i}].type"),
                "only `function` tools are supported",
            ));
        }
        if !valid_name(&t.function.name) {
            return Err(ServeError::bad(
                format!("tools[{i}].function.name"),
                "1 to 64 letters, digits, `_` or `-`",
            ));
        }
        if t.function
            .parameters
            .as_ref()
            .is_some_and(|p| !p.is_object())
        {
            return Err(ServeError::bad(
                format!("tools[{i}].function.parameters"),
                "expected a JSON Schema object",
            ));
        }
    }
    let must = match choice {
        None => None,
        Some(Value::String(s)) => match s.as_str() {
            "none" => return Ok(None),
            "auto" => None,
            "required" => Some("You must call one of these tools in this turn.".to_string()),
            o => {
                return Err(ServeError::bad(
                    "tool_choice",
                    format!("`{o}`; expected none, auto, required or a function"),
                ))
            }
        },
        Some(v) => {
            let name = v["function"]["name"].as_str().unwrap_or_default();
            if !tools.iter().any(|t| t.function.name == name) {
                return Err(ServeError::bad(
                    "tool_choice.function.name",
                    format!("`{name}` is not in tools"),
                ));
            }
            Some(format!("You must call the tool {name} in this turn."))
        }
    };
    let mut s = String::from("# Tools\n");
    for t in tools {
        s.push_str(&format!("- {}", t.function.name));
        if let Some(d) = &t.function.description {
            s.push_str(&format!(": {d}"));
        }
        s.push('\n');
        if let Some(p) = &t.function.parameters {
            s.push_str(&format!("  parameters: {p}\n"));
        }
    }
    s.push('\n');
    s.push_str(&syntax.instructions(max_calls));
    if let Some(m) = must {
        s.push('\n');
        s.push_str(&m);
    }
    Ok(Some(s))
}

/// An assistant turn's text with its earlier `tool_calls` written back in the harness syntax.
pub fn assistant_text(
    content: &str,
    calls: &[WireToolCall],
    syntax: CallSyntax,
    at: usize,
) -> Result<String> {
    let calls = calls
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let arguments = if c.function.arguments.trim().is_empty() {
                json!({})
            } else {
                serde_json::from_str(&c.function.arguments).map_err(|e| {
                    ServeError::bad(
                        format!("messages[{at}].tool_calls[{k}].function.arguments"),
                        format!("not a JSON object: {e}"),
                    )
                })?
            };
            Ok(ToolCall {
                name: c.function.name.clone(),
                arguments,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let written = syntax.format_all(&calls);
    Ok(match (content.trim().is_empty(), written.is_empty()) {
        (_, true) => content.to_string(),
        (true, false) => written,
        (false, false) => format!("{content}\n{written}"),
    })
}

/// Tool names by call id, from the assistant turns so far (tool messages name their call).
pub fn names_by_id(calls: &[WireToolCall], into: &mut HashMap<String, String>) {
    for c in calls {
        if let Some(id) = &c.id {
            into.insert(id.clone(), c.function.name.clone());
        }
    }
}

/// The answer as an OpenAI message: tool calls when the text holds any, else the text.
pub fn answer(text: &str, syntax: CallSyntax, id_seed: &str) -> (Value, &'static str) {
    match syntax.parse(text) {
        Ok(p) if !p.calls.is_empty() => {
            let calls: Vec<Value> = p
                .calls
                .iter()
                .enumerate()
                .map(|(k, c)| {
                    json!({
                        "id": format!("call_{id_seed}_{k}"),
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments.to_string()},
                    })
                })
                .collect();
            let content = (!p.text.is_empty()).then_some(p.text);
            (
                json!({"role": "assistant", "content": content, "tool_calls": calls}),
                "tool_calls",
            )
        }
        _ => (json!({"role": "assistant", "content": text}), "stop"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> ToolDef {
        ToolDef {
            kind: "function".into(),
            function: FunctionDef {
                name: name.into(),
                description: Some("stock of a product".into()),
                parameters: Some(
                    json!({"type": "object", "properties": {"id": {"type": "string"}}}),
                ),
            },
        }
    }

    #[test]
    fn the_section_lists_tools_and_the_syntax_and_honours_tool_choice() {
        let s = tools_section(&[tool("check_stock")], None, CallSyntax::JsonTags, 3)
            .unwrap()
            .unwrap();
        assert!(s.contains("- check_stock: stock of a product"));
        assert!(s.contains("<tool_call>"));
        assert!(
            tools_section(&[tool("a")], Some(&json!("none")), CallSyntax::JsonTags, 3)
                .unwrap()
                .is_none()
        );
        let forced = json!({"type": "function", "function": {"name": "a"}});
        let s = tools_section(&[tool("a")], Some(&forced), CallSyntax::JsonTags, 3)
            .unwrap()
            .unwrap();
        assert!(s.contains("You must call the tool a"));
        let e = tools_section(
            &[tool("a")],
            Some(&json!({"function": {"name": "b"}})),
            CallSyntax::JsonTags,
            3,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("tool_choice.function.name"), "{e}");
        let e = tools_section(&[tool("bad name")], None, CallSyntax::JsonTags, 3)
            .unwrap_err()
            .to_string();
        assert!(e.contains("tools[0].function.name"), "{e}");
    }

    #[test]
    fn calls_round_trip_through_the_syntax() {
        let (m, finish) = answer(
            r#"<tool_call>{"name": "check_stock", "arguments": {"id": "P1"}}</tool_call>"#,
            CallSyntax::JsonTags,
            "x",
        );
        assert_eq!(finish, "tool_calls");
        assert_eq!(m["tool_calls"][0]["function"]["name"], "check_stock");
        let back: Vec<WireToolCall> = serde_json::from_value(m["tool_calls"].clone()).unwrap();
        let text = assistant_text("", &back, CallSyntax::JsonTags, 0).unwrap();
        assert_eq!(
            answer(&text, CallSyntax::JsonTags, "y").0["tool_calls"][0]["function"],
            m["tool_calls"][0]["function"]
        );
        let (m, finish) = answer("Just text.", CallSyntax::JsonTags, "x");
        assert_eq!(
            (m["content"].as_str(), finish),
            (Some("Just text."), "stop")
        );
    }
}
