//! Chat templates rendered with minijinja, compatible with Hugging Face's
//! `apply_chat_template`: `trim_blocks` and `lstrip_blocks`, Python string methods
//! (pycompat), `raise_exception`, `strftime_now`, and a `tojson` that prints like Python's
//! `json.dumps(..., ensure_ascii=False)`.

use minijinja::{Environment, ErrorKind, Value};
use serde::Serialize;

use crate::error::{Error, Result};

/// A compiled chat template.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
    /// Special-token texts that must not appear as such inside a message (see [`defuse`]).
    specials: Vec<String>,
}

/// One chat message (extra fields such as `tool_calls` pass through).
pub type Message = serde_json::Value;

fn py_json(v: &serde_json::Value, indent: Option<usize>, level: usize, out: &mut String) {
    use serde_json::Value as J;
    let nl = |out: &mut String, lvl: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * lvl));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v {
        J::Array(a) if !a.is_empty() => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                nl(out, level + 1);
                py_json(x, indent, level + 1, out);
            }
            nl(out, level);
            out.push(']');
        }
        J::Object(o) if !o.is_empty() => {
            out.push('{');
            for (i, (k, x)) in o.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                nl(out, level + 1);
                out.push_str(&serde_json::to_string(k).unwrap_or_default());
                out.push_str(": ");
                py_json(x, indent, level + 1, out);
            }
            nl(out, level);
            out.push('}');
        }
        other => out.push_str(&serde_json::to_string(other).unwrap_or_default()),
    }
}

/// The widest indent `tojson` writes (Python's own templates use 2 or 4).
const MAX_TOJSON_INDENT: usize = 16;

fn tojson(
    v: Value,
    kwargs: minijinja::value::Kwargs,
) -> std::result::Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    // a template is a model file's text: an indent of 10^12 would ask for a terabyte
    if indent.is_some_and(|n| n > MAX_TOJSON_INDENT) {
        return Err(minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "tojson: indent {} (at most {MAX_TOJSON_INDENT})",
                indent.unwrap_or(0)
            ),
        ));
    }
    let j = serde_json::to_value(&v)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let mut out = String::new();
    py_json(&j, indent, 0, &mut out);
    Ok(Value::from_safe_string(out))
}

fn raise_exception(msg: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
}

fn strftime_now(fmt: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // civil from days (Howard Hinnant)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let month = MONTHS[(m - 1) as usize];
    fmt.replace("%d", &format!("{d:02}"))
        .replace("%m", &format!("{m:02}"))
        .replace("%Y", &y.to_string())
        .replace("%B", month)
        .replace("%b", &month[..3])
        .replace("%H", &format!("{:02}", rem / 3600))
        .replace("%M", &format!("{:02}", rem % 3600 / 60))
}

/// Values passed to the template.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ChatInput {
    pub messages: Vec<Message>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<serde_json::Value>>,
    pub add_generation_prompt: bool,
}

/// Template instructions one render may execute: real chat templates need a few hundred a
/// message; this allows thousands of messages with tools.
pub const TEMPLATE_FUEL: u64 = 5_000_000;

impl ChatTemplate {
    /// Compiles `source`; `bos`/`eos` fill `bos_token`/`eos_token`.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        // a template comes with the model file: a runaway loop in it stops with an error
        // instead of stalling every turn
        env.set_fuel(Some(TEMPLATE_FUEL));
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| Error::ChatTemplate(e.to_string()))?;
        Ok(Self {
            env,
            bos: bos.to_string(),
            eos: eos.to_string(),
            specials: Vec::new(),
        })
    }

    /// Compiles `source` with the tokenizer's BOS and EOS strings.
    pub fn for_tokenizer(source: &str, tok: &crate::Tokenizer) -> Result<Self> {
        let name = |id: Option<u32>| id.and_then(|b| tok.token_str(b)).unwrap_or("").to_string();
        let mut t = Self::new(source, &name(tok.bos()), &name(tok.eos()))?;
        t.specials = tok
            .special_strings()
            .filter(|s| s.chars().count() >= 2)
            .map(str::to_string)
            .collect();
        Ok(t)
    }

    /// Renders messages (and optional tools) like `apply_chat_template(tokenize=False)`.
    pub fn render(&self, input: &ChatInput) -> Result<String> {
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| Error::ChatTemplate(e.to_string()))?;
        // Text inside messages (a viewer's comment, a tool result, a model's output) is text:
        // a special token typed into it must not become the control token that opens a turn.
        let defused;
        let messages = if !input.messages.iter().any(|m| holds_any(m, &self.specials)) {
            // the usual case: nothing to defuse, nothing copied
            &input.messages
        } else {
            defused = input
                .messages
                .iter()
                .map(|m| defuse(m, &self.specials))
                .collect::<Vec<_>>();
            &defused
        };
        let ctx = minijinja::context! {
            messages => Value::from_serialize(messages),
            tools => input.tools.as_ref().map(Value::from_serialize),
            add_generation_prompt => input.add_generation_prompt,
            bos_token => self.bos.clone(),
            eos_token => self.eos.clone(),
        };
        tmpl.render(ctx).map_err(|e| {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(&format!(": {s}"));
                src = s.source();
            }
            Error::ChatTemplate(msg)
        })
    }
}

/// Whether any string value inside `v` contains one of `specials`.
fn holds_any(v: &serde_json::Value, specials: &[String]) -> bool {
    use serde_json::Value as J;
    match v {
        J::String(s) => specials.iter().any(|t| s.contains(t.as_str())),
        J::Array(a) => a.iter().any(|x| holds_any(x, specials)),
        J::Object(o) => o.values().any(|x| holds_any(x, specials)),
        _ => false,
    }
}

/// Breaks every special-token text inside the string values of `v` with a zero-width space
/// after its first character (`<|im_start|>` becomes `<\u{200b}|im_start|>`): it reads the same
/// and encodes as ordinary text, never as the control token.
pub fn defuse(v: &serde_json::Value, specials: &[String]) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        J::String(s) if holds_any(v, specials) => {
            let mut out = s.clone();
            for t in specials {
                if out.contains(t.as_str()) {
                    let first = t.chars().next().map_or(0, char::len_utf8);
                    out = out.replace(
                        t.as_str(),
                        &format!("{}\u{200b}{}", &t[..first], &t[first..]),
                    );
                }
            }
            J::String(out)
        }
        J::Array(a) => J::Array(a.iter().map(|x| defuse(x, specials)).collect()),
        J::Object(o) => J::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), defuse(x, specials)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Parses a chat file: either `[messages...]` or `{"messages": [...], "tools": [...]}`.
pub fn parse_chat_file(text: &str) -> Result<ChatInput> {
    let v: serde_json::Value = serde_json::from_str(text)?;
    let input = chat_input(v)?;
    // Each message is checked here, by index: a template fails on a wrong type with a message
    // about its own operators ("+ operator on unsupported types string and number").
    for (i, m) in input.messages.iter().enumerate() {
        let role_ok = m.get("role").is_some_and(serde_json::Value::is_string);
        let content_ok = match m.get("content") {
            None | Some(serde_json::Value::Null) => m.get("tool_calls").is_some(),
            Some(c) => c.is_string(),
        };
        if !m.is_object() || !role_ok || !content_ok {
            return Err(Error::InvalidArgument(format!(
                "message {i}: each message needs a string `role` and a string `content` (or \
                 `tool_calls`), got {}",
                short_json(m)
            )));
        }
    }
    Ok(input)
}

fn short_json(v: &serde_json::Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

fn chat_input(v: serde_json::Value) -> Result<ChatInput> {
    match v {
        serde_json::Value::Array(messages) => Ok(ChatInput {
            messages,
            tools: None,
            add_generation_prompt: true,
        }),
        serde_json::Value::Object(mut o) => {
            let messages = match o.remove("messages") {
                Some(serde_json::Value::Array(m)) => m,
                _ => {
                    return Err(Error::InvalidArgument(
                        "chat file needs a `messages` array".into(),
                    ))
                }
            };
            let tools = match o.remove("tools") {
                Some(serde_json::Value::Array(t)) => Some(t),
                _ => None,
            };
            Ok(ChatInput {
                messages,
                tools,
                add_generation_prompt: true,
            })
        }
        _ => Err(Error::InvalidArgument(
            "chat file must be a JSON array or object".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SMOL: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn a_runaway_template_stops_with_an_error() {
        let t = ChatTemplate::new(
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
            "",
            "",
        )
        .unwrap();
        let e = t.render(&ChatInput::default()).unwrap_err().to_string();
        assert!(e.contains("fuel"), "{e}");
        // a long conversation in a real template stays far within the budget
        let smol = ChatTemplate::new(SMOL, "<|im_start|>", "<|im_end|>").unwrap();
        let messages = (0..2000)
            .map(
                |i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": "hi"}),
            )
            .collect();
        smol.render(&ChatInput {
            messages,
            tools: None,
            add_generation_prompt: true,
        })
        .unwrap();
    }

    #[test]
    fn renders_smollm_template() {
        let t = ChatTemplate::new(SMOL, "<|im_start|>", "<|im_end|>").unwrap();
        let s = t
            .render(&ChatInput {
                messages: vec![json!({"role": "user", "content": "Hi"})],
                tools: None,
                add_generation_prompt: true,
            })
            .unwrap();
        assert_eq!(
            s,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn tools_pycompat_and_exceptions() {
        let src = "{% if tools %}{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% endif %}{{ messages[0].content.strip().upper() }}{% if messages|length > 1 %}{{ raise_exception('only one') }}{% endif %}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let out = t
            .render(&ChatInput {
                messages: vec![json!({"role": "user", "content": "  héllo "})],
                tools: Some(vec![
                    json!({"name": "buy", "parameters": {"sku": "x", "n": [1, 2]}}),
                ]),
                add_generation_prompt: false,
            })
            .unwrap();
        assert_eq!(
            out,
            "{\"name\": \"buy\", \"parameters\": {\"sku\": \"x\", \"n\": [1, 2]}}\nHÉLLO"
        );
        let err = t
            .render(&ChatInput {
                messages: vec![
                    json!({"role": "user", "content": "a"}),
                    json!({"role": "user", "content": "b"}),
                ],
                ..Default::default()
            })
            .unwrap_err();
        assert!(err.to_string().contains("only one"), "{err}");
        // a model file's template cannot ask tojson for a terabyte of indent
        let wide = ChatTemplate::new("{{ messages | tojson(indent=1000000000000) }}", "", "")
            .unwrap()
            .render(&ChatInput {
                messages: vec![json!({"role": "user", "content": "a"})],
                ..Default::default()
            })
            .unwrap_err();
        assert!(wide.to_string().contains("at most 16"), "{wide}");
    }

    #[test]
    fn chat_file_forms() {
        assert_eq!(
            parse_chat_file(r#"[{"role":"user","content":"x"}]"#)
                .unwrap()
                .messages
                .len(),
            1
        );
        assert!(parse_chat_file(r#"{"tools": []}"#).is_err());
        // red-team finding: a number as content failed inside the template without the index
        let e = parse_chat_file(r#"[{"role":"user","content":"x"},{"role":"user","content":5}]"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("message 1") && e.contains("string `content`"),
            "{e}"
        );
        let calls = r#"[{"role":"assistant","content":null,"tool_calls":[]}]"#;
        assert!(parse_chat_file(calls).is_ok());
    }
}
