//! Tool-call syntaxes: the instructions the model reads, the way a call is
//! written, and the parser for model output. The syntax is part of the
//! harness state, so it can change (and be augmented) without retraining.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A tool call as the model wrote it, in the harness's own names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub name: String,
    pub arguments: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallSyntax {
    /// `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
    JsonTags,
    /// A fenced block tagged `tool` holding `{"tool": ..., "args": {...}}`.
    JsonBlock,
    /// `CALL name(key="value", n=3)` on a line of its own.
    Function,
    /// `<invoke name="...">{...}</invoke>`
    XmlInvoke,
    /// `[[name {...}]]`: the name, a space and the arguments as JSON, in double brackets.
    Bracket,
    /// `<tool_use><name>...</name><input>{...}</input></tool_use>`
    ToolUse,
    /// ReAct style: `Action: name` and, on the next line, `Action Input: {...}`.
    React,
    /// `<function=name>{...}</function>`: the name inside the opening tag (Llama 3.1's custom-tool form).
    FunctionTag,
    /// `<call tool="name">{...}</call>`: the name as an attribute.
    CallAttr,
    /// One of the element family ([`ELEMENTS`]: `<exec fn="name">{...}</exec>`, named
    /// `element:exec:fn`), by index: call-attr's form with other tag and attribute words,
    /// for training states that show many call syntaxes, so that a model learns to copy the
    /// one its harness describes. Not in [`CallSyntax::ALL`], the nine named syntaxes.
    Element(u8),
    /// One of the keyword family ([`KEYWORDS`]: `RUN name(key="value")`, named
    /// `keyword:RUN`), by index: the function syntax's form with another keyword, for the
    /// same purpose as [`CallSyntax::Element`]. Not in [`CallSyntax::ALL`].
    Keyword(u8),
}

/// A member of the keyword family: `KEYWORD name(key=value, ...)` on a line of its own.
#[derive(Debug)]
pub struct Keyword {
    /// The keyword (`RUN`).
    pub word: &'static str,
    /// The syntax's name in `harness.toml` (`keyword:RUN`).
    pub name: &'static str,
    /// The keyword and a space: what a call's line starts with.
    marker: &'static str,
    slots: [&'static str; 1],
    pub(crate) steps: crate::call_grammar::KeywordSteps,
}

macro_rules! keywords {
    ($($word:literal),* $(,)?) => {
        /// The keyword family's members: training-pool words, never `CALL` (the held-out
        /// function syntax's).
        pub static KEYWORDS: &[Keyword] = &[$(Keyword {
            word: $word,
            name: concat!("keyword:", $word),
            marker: concat!($word, " "),
            slots: [concat!("^", $word, "+")],
            steps: crate::call_grammar::keyword_steps(concat!($word, " ")),
        }),*];
    };
}

keywords!["RUN", "EXEC", "USE", "DO", "TOOL", "APPLY", "CMD", "FN"];

/// A member of the element family: `<TAG ATTR="name">{...}</TAG>`.
#[derive(Debug)]
pub struct Element {
    /// The tag word (`exec`).
    pub tag: &'static str,
    /// The attribute that holds the tool's name (`fn`).
    pub attr: &'static str,
    /// The syntax's name in `harness.toml` (`element:exec:fn`).
    pub name: &'static str,
    named: NamedElement,
    slots: [&'static str; 1],
    pub(crate) closers: [&'static str; 1],
    pub(crate) steps: crate::call_grammar::AttributeSteps,
}

macro_rules! elements {
    ($(($tag:literal, $attr:literal)),* $(,)?) => {
        /// The element family's members. Their tag and attribute words are the training
        /// pool's: no `invoke` and no `name` (the held-out xml-invoke syntax's), no `call`
        /// with `tool` (call-attr itself) and no `function` (function-tag's).
        pub static ELEMENTS: &[Element] = &[$(Element {
            tag: $tag,
            attr: $attr,
            name: concat!("element:", $tag, ":", $attr),
            named: NamedElement {
                tag: concat!("<", $tag),
                attr: Some($attr),
                close: concat!("</", $tag, ">"),
                example: concat!("<", $tag, " ", $attr, "=\"tool_name\">{...}</", $tag, ">"),
            },
            slots: [concat!("<", $tag, " ", $attr, "=\"")],
            closers: [concat!("</", $tag, ">")],
            steps: crate::call_grammar::attribute_steps(
                concat!("<", $tag),
                concat!($attr, "=\""),
                concat!("</", $tag, ">"),
            ),
        }),*];
    };
}

elements![
    ("exec", "fn"),
    ("use", "tool"),
    ("run", "target"),
    ("act", "id"),
    ("op", "ref"),
    ("request", "tool"),
    ("task", "fn"),
    ("api", "call"),
    ("cmd", "target"),
    ("do", "op"),
    ("query", "id"),
    ("fn", "key"),
    ("exec", "target"),
    ("run", "tool"),
    ("use", "ref"),
    ("request", "id"),
];

impl CallSyntax {
    pub const ALL: [CallSyntax; 9] = [
        CallSyntax::JsonTags,
        CallSyntax::JsonBlock,
        CallSyntax::Function,
        CallSyntax::XmlInvoke,
        CallSyntax::Bracket,
        CallSyntax::ToolUse,
        CallSyntax::React,
        CallSyntax::FunctionTag,
        CallSyntax::CallAttr,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CallSyntax::JsonTags => "json-tags",
            CallSyntax::JsonBlock => "json-block",
            CallSyntax::Function => "function",
            CallSyntax::XmlInvoke => "xml-invoke",
            CallSyntax::Bracket => "bracket",
            CallSyntax::ToolUse => "tool-use",
            CallSyntax::React => "react",
            CallSyntax::FunctionTag => "function-tag",
            CallSyntax::CallAttr => "call-attr",
            CallSyntax::Element(_) => self.element_def().name,
            CallSyntax::Keyword(_) => self.keyword_def().name,
        }
    }

    /// The keyword family member this syntax is, if it is one.
    pub fn keyword(self) -> Option<&'static Keyword> {
        match self {
            CallSyntax::Keyword(i) => KEYWORDS.get(usize::from(i)),
            _ => None,
        }
    }

    fn keyword_def(self) -> &'static Keyword {
        self.keyword()
            .expect("a Keyword index comes from KEYWORDS (CallSyntax::every, parse_name)")
    }

    /// The word a function-style call's line starts with: `CALL`, or a keyword member's.
    fn call_word(self) -> &'static str {
        match self {
            CallSyntax::Keyword(_) => self.keyword_def().marker,
            _ => "CALL ",
        }
    }

    /// The element family member this syntax is, if it is one.
    pub fn element(self) -> Option<&'static Element> {
        match self {
            CallSyntax::Element(i) => ELEMENTS.get(usize::from(i)),
            _ => None,
        }
    }

    fn element_def(self) -> &'static Element {
        self.element()
            .expect("an Element index comes from ELEMENTS (CallSyntax::every, parse_name)")
    }

    /// Every syntax a harness may name: the nine of [`CallSyntax::ALL`], then the element
    /// and keyword families.
    pub fn every() -> impl Iterator<Item = CallSyntax> {
        CallSyntax::ALL
            .into_iter()
            .chain((0..ELEMENTS.len()).map(|i| CallSyntax::Element(i as u8)))
            .chain((0..KEYWORDS.len()).map(|i| CallSyntax::Keyword(i as u8)))
    }

    pub fn parse_name(s: &str) -> Option<CallSyntax> {
        CallSyntax::every().find(|c| c.as_str() == s)
    }

    /// The text that opens a call in this syntax. A reply to viewers that still holds it
    /// shows them tool-call markup (a call the parser did not take, or one in another
    /// harness's syntax), so the scorer treats it as prompt scaffolding.
    pub fn marker(self) -> &'static str {
        match self {
            CallSyntax::JsonTags => "<tool_call>",
            CallSyntax::JsonBlock => "```tool",
            CallSyntax::Function => "CALL ",
            CallSyntax::XmlInvoke => "<invoke",
            CallSyntax::Bracket => "[[",
            CallSyntax::ToolUse => "<tool_use>",
            CallSyntax::React => "Action Input:",
            CallSyntax::FunctionTag => "<function=",
            CallSyntax::CallAttr => "<call tool=",
            CallSyntax::Element(_) => self.element_def().named.tag,
            CallSyntax::Keyword(_) => self.keyword_def().marker,
        }
    }

    /// The text a call in this syntax begins with (the marker, except for ReAct, whose call
    /// begins with its `Action:` line). A turn that must reply rather than call keeps its
    /// answer from opening with it.
    pub fn opener(self) -> &'static str {
        match self {
            CallSyntax::React => "Action:",
            other => other.marker(),
        }
    }

    /// The texts that open a call's name slot as this syntax's parser reads them, for tool
    /// names constrained at decode time (`hat_model::NameSlots`): a space stands for any
    /// whitespace or none, `*` for spaces or tabs or none, `+` for one or more, a leading `^`
    /// for the start of a line.
    pub fn name_slots(self) -> &'static [&'static str] {
        match self {
            CallSyntax::JsonTags => &[r#"<tool_call> { "name" : ""#],
            CallSyntax::JsonBlock => &[r#"```tool { "tool" : ""#],
            // `CALL ` then the name, on a line of its own
            CallSyntax::Function => &["^CALL+"],
            CallSyntax::XmlInvoke => &[r#"<invoke name=""#],
            // the name right after `[[`
            CallSyntax::Bracket => &["[["],
            CallSyntax::ToolUse => &["<tool_use> <name> "],
            CallSyntax::React => &["^Action:*"],
            // the name right after `=`
            CallSyntax::FunctionTag => &["<function="],
            CallSyntax::CallAttr => &[r#"<call tool=""#],
            CallSyntax::Element(_) => &self.element_def().slots,
            CallSyntax::Keyword(_) => &self.keyword_def().slots,
        }
    }

    /// Writes one call in this syntax.
    pub fn format(self, call: &ToolCall) -> String {
        let args = if call.arguments.is_object() {
            call.arguments.clone()
        } else {
            Value::Object(Map::new())
        };
        match self {
            CallSyntax::JsonTags => {
                let mut m = Map::new();
                m.insert("name".into(), Value::String(call.name.clone()));
                m.insert("arguments".into(), args);
                format!("<tool_call>{}</tool_call>", Value::Object(m))
            }
            CallSyntax::JsonBlock => {
                let mut m = Map::new();
                m.insert("tool".into(), Value::String(call.name.clone()));
                m.insert("args".into(), args);
                format!("```tool\n{}\n```", Value::Object(m))
            }
            CallSyntax::Function | CallSyntax::Keyword(_) => {
                let parts: Vec<String> = args
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                format!("{}{}({})", self.call_word(), call.name, parts.join(", "))
            }
            CallSyntax::XmlInvoke => format!("<invoke name=\"{}\">{}</invoke>", call.name, args),
            CallSyntax::Bracket => format!("[[{} {}]]", call.name, args),
            CallSyntax::ToolUse => format!(
                "<tool_use><name>{}</name><input>{}</input></tool_use>",
                call.name, args
            ),
            CallSyntax::React => format!("Action: {}\nAction Input: {}", call.name, args),
            CallSyntax::FunctionTag => format!("<function={}>{}</function>", call.name, args),
            CallSyntax::CallAttr => format!("<call tool=\"{}\">{}</call>", call.name, args),
            CallSyntax::Element(_) => {
                let e = self.element_def();
                format!(
                    "<{} {}=\"{}\">{}</{}>",
                    e.tag, e.attr, call.name, args, e.tag
                )
            }
        }
    }

    /// Writes several calls, one per line (or block).
    pub fn format_all(self, calls: &[ToolCall]) -> String {
        calls
            .iter()
            .map(|c| self.format(c))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// How to call tools, as the model reads it in the prompt.
    pub fn instructions(self, max_per_turn: usize) -> String {
        let example = ToolCall {
            name: "tool_name".into(),
            arguments: serde_json::json!({"param": "value"}),
        };
        let element;
        let how = match self {
            CallSyntax::JsonTags => "To use a tool, write a tool_call tag holding a JSON object with the tool's name and arguments",
            CallSyntax::JsonBlock => "To use a tool, write a fenced code block tagged tool, holding a JSON object with \"tool\" and \"args\"",
            CallSyntax::Function => "To use a tool, write CALL, the tool name and its arguments as key=JSON value pairs, on a line of its own",
            CallSyntax::XmlInvoke => "To use a tool, write an invoke element named after the tool, holding the arguments as a JSON object",
            CallSyntax::Bracket => "To use a tool, write two opening square brackets, the tool name, a space, the arguments as a JSON object and two closing square brackets",
            CallSyntax::ToolUse => "To use a tool, write a tool_use element holding a name element with the tool's name and an input element with the arguments as a JSON object",
            CallSyntax::React => "To use a tool, write a line Action: with the tool name, then a line Action Input: with the arguments as a JSON object",
            CallSyntax::FunctionTag => "To use a tool, write a function tag whose opening tag holds = and the tool name, holding the arguments as a JSON object",
            CallSyntax::CallAttr => "To use a tool, write a call element whose tool attribute names the tool, holding the arguments as a JSON object",
            CallSyntax::Element(_) => {
                let e = self.element_def();
                element = format!("To use a tool, write an element named {} whose {} attribute names the tool, holding the arguments as a JSON object", e.tag, e.attr);
                &element
            }
            CallSyntax::Keyword(_) => {
                element = format!("To use a tool, write {}, the tool name and its arguments as key=JSON value pairs, on a line of its own", self.keyword_def().word);
                &element
            }
        };
        format!(
            "{how}, exactly like this:\n{}\nUse at most {max_per_turn} calls per turn and nothing else in that message; you will get each tool's result back. When you have what you need, or when no tool is needed, write only your reply to the viewers.",
            self.format(&example)
        )
    }

    /// Splits model output into calls and reply text.
    pub fn parse(self, output: &str) -> Result<Parsed, ParseError> {
        match self {
            CallSyntax::JsonTags => parse_tagged(output, "<tool_call>", "</tool_call>", |body| {
                let v = parse_json(body)?;
                call_from_object(&v, "name", "arguments")
            }),
            CallSyntax::XmlInvoke => parse_named(output, &INVOKE),
            CallSyntax::FunctionTag => parse_named(output, &FUNCTION_TAG),
            CallSyntax::CallAttr => parse_named(output, &CALL_ATTR),
            CallSyntax::Element(_) => parse_named(output, &self.element_def().named),
            CallSyntax::JsonBlock => parse_tagged(output, "```tool", "```", |body| {
                let v = parse_json(body)?;
                call_from_object(&v, "tool", "args")
            }),
            CallSyntax::Function | CallSyntax::Keyword(_) => {
                parse_function(output, self.call_word())
            }
            CallSyntax::Bracket => parse_bracket(output),
            CallSyntax::ToolUse => parse_tagged(output, "<tool_use>", "</tool_use>", |body| {
                let name = element(body, "name")?.trim();
                if name.is_empty() {
                    return Err(ParseError("the <name> of a tool_use is empty".into()));
                }
                let input = element(body, "input")?;
                Ok(ToolCall {
                    name: name.to_string(),
                    arguments: arguments_object(input, "<input>")?,
                })
            }),
            CallSyntax::React => parse_react(output),
        }
    }
}

/// Model output split into tool calls and the text outside them.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub calls: Vec<ToolCall>,
    /// Text outside any call, trimmed: the reply when there are no calls.
    pub text: String,
}

/// Model output that tried to call a tool and got the syntax wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

fn parse_json(body: &str) -> Result<Value, ParseError> {
    serde_json::from_str(body.trim())
        .map_err(|e| ParseError(format!("the tool call is not valid JSON ({e})")))
}

fn call_from_object(v: &Value, name_key: &str, args_key: &str) -> Result<ToolCall, ParseError> {
    let name = v
        .get(name_key)
        .and_then(Value::as_str)
        .ok_or_else(|| ParseError(format!("the tool call needs a string \"{name_key}\" field")))?;
    let arguments = match v.get(args_key) {
        None | Some(Value::Null) => Value::Object(Map::new()),
        // Some models (and the OpenAI wire format) put arguments in a JSON string.
        Some(Value::String(s)) => serde_json::from_str(s).map_err(|e| {
            ParseError(format!("\"{args_key}\" is a string that is not JSON ({e})"))
        })?,
        Some(a) => a.clone(),
    };
    if !arguments.is_object() {
        return Err(ParseError(format!("\"{args_key}\" must be a JSON object")));
    }
    Ok(ToolCall {
        name: name.to_string(),
        arguments,
    })
}

fn parse_tagged(
    output: &str,
    open: &str,
    close: &str,
    body: impl Fn(&str) -> Result<ToolCall, ParseError>,
) -> Result<Parsed, ParseError> {
    let mut calls = Vec::new();
    let mut text = String::new();
    let mut rest = output;
    while let Some(start) = rest.find(open) {
        text.push_str(&rest[..start]);
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(close) else {
            return Err(ParseError(format!(
                "a tool call opened with {open} is never closed with {close}"
            )));
        };
        calls.push(body(&after[..end])?);
        rest = &after[end + close.len()..];
    }
    text.push_str(rest);
    Ok(Parsed {
        calls,
        text: text.trim().to_string(),
    })
}

/// An element whose opening tag names the tool and whose body holds the
/// arguments as JSON: `<invoke name="x">`, `<function=x>`, `<call tool="x">`.
#[derive(Debug)]
struct NamedElement {
    /// The tag (`<invoke`): where a call attempt starts.
    tag: &'static str,
    /// The attribute holding the quoted name (`name`), or `None` when the name follows
    /// `=` right after the tag (`<function=x>`).
    attr: Option<&'static str>,
    close: &'static str,
    /// The call written right, for error messages.
    example: &'static str,
}

const INVOKE: NamedElement = NamedElement {
    tag: "<invoke",
    attr: Some("name"),
    close: "</invoke>",
    example: "<invoke name=\"tool_name\">{...}</invoke>",
};
const FUNCTION_TAG: NamedElement = NamedElement {
    tag: "<function",
    attr: None,
    close: "</function>",
    example: "<function=tool_name>{...}</function>",
};
const CALL_ATTR: NamedElement = NamedElement {
    tag: "<call",
    attr: Some("tool"),
    close: "</call>",
    example: "<call tool=\"tool_name\">{...}</call>",
};

impl NamedElement {
    fn err(&self, what: &str) -> ParseError {
        ParseError(format!("{what}; write {}", self.example))
    }

    /// Reads the opening tag at the start of `inner` (the text right after the tag name):
    /// the tool name and the text after the tag, `None` when it is not a call at all
    /// (`<call me>` in a reply), or what is wrong with an attempted call.
    fn open<'a>(&self, inner: &'a str) -> Result<Option<(&'a str, &'a str)>, ParseError> {
        let tag = self.tag;
        let head_end = inner.find('>');
        let head = &inner[..head_end.unwrap_or(inner.len())];
        // An element with no name that holds JSON is a call attempt; anything else
        // without the name's attribute or `=` is reply text.
        let holds_json = head_end.is_some_and(|e| inner[e + 1..].trim_start().starts_with('{'));
        let Some(attr) = self.attr else {
            let Some(named) = inner.strip_prefix('=') else {
                return if holds_json {
                    Err(self.err(&format!(
                        "a {tag}> call needs = and the tool name in its opening tag"
                    )))
                } else {
                    Ok(None)
                };
            };
            let len = named.find(|c: char| !is_ident(c)).unwrap_or(named.len());
            let name = &named[..len];
            if name.is_empty() {
                return Err(self.err(&format!("the {tag}=...> call has no tool name after =")));
            }
            return match named[len..].trim_start().strip_prefix('>') {
                Some(body) => Ok(Some((name, body))),
                None => Err(self.err(&format!(
                    "the opening tag of the {tag}> call to {name} must end with > right after the name"
                ))),
            };
        };
        if head.contains(&format!("{attr}=\\\"")) {
            return Err(self.err(&format!(
                "the {tag}> call quotes the tool name with \\\" (copied from an escaped example); use plain quotes"
            )));
        }
        let pattern = format!("{attr}=\"");
        let at = head
            .match_indices(&pattern)
            .map(|(i, _)| i)
            .find(|&i| head[..i].ends_with(char::is_whitespace));
        let Some(at) = at else {
            return if holds_json || head.contains('=') {
                Err(self.err(&format!(
                    "a {tag}> call names its tool in a {attr}=\"...\" attribute"
                )))
            } else {
                Ok(None)
            };
        };
        let quoted = &head[at + pattern.len()..];
        let Some(len) = quoted.find('"') else {
            return Err(self.err(&format!(
                "the {attr}=\"...\" of a {tag}> call is never closed with \""
            )));
        };
        let name = &quoted[..len];
        if name.is_empty() || !name.chars().all(is_ident) {
            return Err(self.err(&format!(
                "the tool name in `{tag} {attr}=\"{}\"` is not a plain name",
                truncate(name, 40)
            )));
        }
        // Other attributes may follow the name; JSON or another tag inside the opening tag
        // means it never ended (`<invoke name="x","arguments":{...}}</invoke>`).
        let after_name = &quoted[len + 1..];
        match head_end {
            Some(e) if !after_name.contains(['{', '<', ',', ':']) => {
                Ok(Some((name, &inner[e + 1..])))
            }
            _ => Err(self.err(&format!(
                "the opening tag of the {tag}> call to {name} must end with > right after the name"
            ))),
        }
    }
}

fn parse_named(output: &str, el: &NamedElement) -> Result<Parsed, ParseError> {
    let tag = el.tag;
    let mut calls = Vec::new();
    let mut text = String::new();
    let mut rest = output;
    while let Some(start) = find_tag(rest, tag) {
        text.push_str(&rest[..start]);
        let inner = &rest[start + tag.len()..];
        let Some((name, body_and_rest)) = el.open(inner)? else {
            // not a call: the tag stays in the reply
            text.push_str(tag);
            rest = inner;
            continue;
        };
        let end = body_and_rest.find(el.close).ok_or_else(|| {
            ParseError(format!(
                "the {tag}> call to {name} is never closed with {}",
                el.close
            ))
        })?;
        let arguments = arguments_object(&body_and_rest[..end], &format!("{tag}>"))?;
        calls.push(ToolCall {
            name: name.to_string(),
            arguments,
        });
        rest = &body_and_rest[end + el.close.len()..];
    }
    text.push_str(rest);
    Ok(Parsed {
        calls,
        text: text.trim().to_string(),
    })
}

/// The first `tag` (`<call`) in `s` that is a whole tag name (followed by white space,
/// `=`, `>`, `/` or the end), so `<caller>` in a reply is not a call.
fn find_tag(s: &str, tag: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = s[from..].find(tag) {
        let at = from + i;
        match s[at + tag.len()..].chars().next() {
            Some(c) if c.is_whitespace() || "=>/".contains(c) => return Some(at),
            None => return Some(at),
            _ => from = at + tag.len(),
        }
    }
    None
}

fn truncate(s: &str, max_chars: usize) -> &str {
    s.char_indices().nth(max_chars).map_or(s, |(i, _)| &s[..i])
}

/// The text between `<tag>` and `</tag>` inside `body`.
fn element<'a>(body: &'a str, tag: &str) -> Result<&'a str, ParseError> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = body
        .find(&open)
        .ok_or_else(|| ParseError(format!("a tool_use needs a {open} element")))?
        + open.len();
    let len = body[start..]
        .find(&close)
        .ok_or_else(|| ParseError(format!("{open} is never closed with {close}")))?;
    Ok(&body[start..start + len])
}

/// Arguments written as a JSON object (empty text: no arguments).
fn arguments_object(text: &str, place: &str) -> Result<Value, ParseError> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let v = parse_json(text)?;
    if !v.is_object() {
        return Err(ParseError(format!(
            "the arguments in {place} must be a JSON object"
        )));
    }
    Ok(v)
}

fn parse_bracket(output: &str) -> Result<Parsed, ParseError> {
    let mut calls = Vec::new();
    let mut text = String::new();
    let mut rest = output;
    while let Some(start) = rest.find("[[") {
        text.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let name_end = after.find(|c: char| !is_ident(c)).unwrap_or(after.len());
        let name = &after[..name_end];
        if name.is_empty() {
            return Err(ParseError(
                "a call needs the tool name right after [[, like [[tool_name {...}]]".into(),
            ));
        }
        let body = after[name_end..].trim_start();
        // The JSON is read as a stream so brackets inside it cannot end the call.
        let (arguments, used) = if body.starts_with('{') {
            let mut it = serde_json::Deserializer::from_str(body).into_iter::<Value>();
            match it.next() {
                Some(Ok(v)) => (v, it.byte_offset()),
                Some(Err(e)) => {
                    return Err(ParseError(format!(
                        "the arguments of [[{name} ...]] are not valid JSON ({e})"
                    )))
                }
                None => {
                    return Err(ParseError(format!(
                        "the arguments of [[{name} ...]] are missing"
                    )))
                }
            }
        } else {
            (Value::Object(Map::new()), 0)
        };
        let tail = body[used..].trim_start();
        let Some(after_call) = tail.strip_prefix("]]") else {
            return Err(ParseError(format!(
                "the call [[{name} ...]] is never closed with ]] after its JSON arguments"
            )));
        };
        calls.push(ToolCall {
            name: name.to_string(),
            arguments,
        });
        rest = after_call;
    }
    text.push_str(rest);
    Ok(Parsed {
        calls,
        text: text.trim().to_string(),
    })
}

fn parse_react(output: &str) -> Result<Parsed, ParseError> {
    let mut calls = Vec::new();
    let mut text = Vec::new();
    let mut lines = output.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line.trim().strip_prefix("Action:") else {
            text.push(line);
            continue;
        };
        let name = name.trim();
        if name.is_empty() || !name.chars().all(is_ident) {
            return Err(ParseError(format!(
                "`Action: {name}` needs a tool name (letters, digits, _ or -)"
            )));
        }
        let input = lines
            .by_ref()
            .find(|l| !l.trim().is_empty())
            .and_then(|l| l.trim().strip_prefix("Action Input:"))
            .ok_or_else(|| {
                ParseError(format!(
                    "`Action: {name}` must be followed by a line `Action Input: {{...}}` with the arguments as JSON"
                ))
            })?;
        calls.push(ToolCall {
            name: name.to_string(),
            arguments: arguments_object(input, "Action Input")?,
        });
    }
    Ok(Parsed {
        calls,
        text: text.join("\n").trim().to_string(),
    })
}

/// Calls written `WORD name(key=value, ...)`, one a line; `word` is the word and its space
/// (`CALL `, or a keyword member's).
fn parse_function(output: &str, word: &str) -> Result<Parsed, ParseError> {
    let mut calls = Vec::new();
    let mut text = Vec::new();
    for line in output.lines() {
        let t = line.trim();
        match t.strip_prefix(word) {
            Some(call) => calls.push(parse_function_call(call.trim(), word.trim_end())?),
            None => text.push(line),
        }
    }
    Ok(Parsed {
        calls,
        text: text.join("\n").trim().to_string(),
    })
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

fn parse_function_call(s: &str, word: &str) -> Result<ToolCall, ParseError> {
    let open = s.find('(').ok_or_else(|| {
        ParseError(format!(
            "`{word} {s}` needs parentheses: {word} name(key=value)"
        ))
    })?;
    let name = s[..open].trim();
    if name.is_empty() || !name.chars().all(is_ident) {
        return Err(ParseError(format!("`{name}` is not a valid tool name")));
    }
    let mut rest = &s[open + 1..];
    let mut args = Map::new();
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix(')') {
            if !r.trim().is_empty() {
                return Err(ParseError(format!(
                    "unexpected text after the call: `{}`",
                    r.trim()
                )));
            }
            return Ok(ToolCall {
                name: name.to_string(),
                arguments: Value::Object(args),
            });
        }
        let key_end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        let key = &rest[..key_end];
        if key.is_empty() {
            return Err(ParseError(format!(
                "expected key=value in the call to {name}"
            )));
        }
        rest = rest[key_end..].trim_start();
        rest = rest
            .strip_prefix('=')
            .ok_or_else(|| ParseError(format!("`{key}` needs =value in the call to {name}")))?
            .trim_start();
        let (value, used) = parse_value(rest).ok_or_else(|| {
            ParseError(format!(
                "the value of `{key}` is not a JSON value (quote strings with \")"
            ))
        })?;
        args.insert(key.to_string(), value);
        rest = rest[used..].trim_start();
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.starts_with(')') {
            return Err(ParseError(format!(
                "expected , or ) after `{key}` in the call to {name}"
            )));
        }
    }
}

/// One JSON value (or Python's True/False/None) at the start of `s`.
fn parse_value(s: &str) -> Option<(Value, usize)> {
    // serde_json's stream reader rejects a literal or a number followed directly by `)`
    // (it takes only whitespace or JSON punctuation after one), which is how the last
    // argument of a call ends, so these are cut out by hand.
    for (word, v) in [
        ("true", Value::Bool(true)),
        ("false", Value::Bool(false)),
        ("null", Value::Null),
        ("True", Value::Bool(true)),
        ("False", Value::Bool(false)),
        ("None", Value::Null),
    ] {
        if s.starts_with(word) && !s[word.len()..].starts_with(is_ident) {
            return Some((v, word.len()));
        }
    }
    if s.starts_with(|c: char| c.is_ascii_digit() || c == '-') {
        let end = s
            .find(|c: char| !(c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E')))
            .unwrap_or(s.len());
        return serde_json::from_str::<Value>(&s[..end])
            .ok()
            .map(|v| (v, end));
    }
    let mut it = serde_json::Deserializer::from_str(s).into_iter::<Value>();
    match it.next() {
        Some(Ok(v)) => Some((v, it.byte_offset())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call() -> ToolCall {
        ToolCall {
            name: "check_stock".into(),
            arguments: json!({"product_id": "P3", "size": "M", "n": 2, "o": {"a": [1, "x,y)"]}}),
        }
    }

    #[test]
    fn every_syntax_round_trips() {
        for s in CallSyntax::every() {
            let text = format!(
                "Let me check.\n{}\n{}",
                s.format(&call()),
                s.format(&call())
            );
            let p = s.parse(&text).unwrap();
            assert_eq!(p.calls, vec![call(), call()], "{}", s.as_str());
            assert_eq!(p.text, "Let me check.", "{}", s.as_str());
        }
    }

    /// Regression: `CALL f(b=true)` was refused, since serde_json's stream reader takes no
    /// `)` right after a literal, and `format` writes exactly that.
    #[test]
    fn booleans_and_null_round_trip_through_every_syntax() {
        for arguments in [
            json!({"a": 1, "f": true}),
            json!({"n": null}),
            json!({"s": "x", "b": false}),
            json!({"t": true, "l": [true, null], "o": {"z": false}}),
        ] {
            let call = ToolCall {
                name: "get_product".into(),
                arguments,
            };
            for s in CallSyntax::every() {
                let text = s.format(&call);
                let p = s
                    .parse(&text)
                    .unwrap_or_else(|e| panic!("{}: {text}: {e}", s.as_str()));
                assert_eq!(p.calls, vec![call.clone()], "{}: {text}", s.as_str());
                assert_eq!(p.text, "", "{}: {text}", s.as_str());
            }
        }
        // a literal is a whole word: `trueish` is not `true`
        assert!(CallSyntax::Function.parse("CALL f(a=trueish)").is_err());
        assert!(CallSyntax::Function.parse("CALL f(a=nullx)").is_err());
    }

    /// The element family is named, described and parsed like call-attr, with its own words;
    /// none of them is the held-out xml-invoke's (or call-attr's own pair, or function-tag's).
    #[test]
    fn the_element_family_reads_its_own_words() {
        let names: std::collections::HashSet<&str> =
            CallSyntax::every().map(CallSyntax::as_str).collect();
        assert_eq!(
            names.len(),
            CallSyntax::ALL.len() + ELEMENTS.len() + KEYWORDS.len()
        );
        for e in ELEMENTS {
            assert!(
                !["invoke", "function"].contains(&e.tag) && e.attr != "name",
                "{}",
                e.name
            );
            assert!(!(e.tag == "call" && e.attr == "tool"), "{}", e.name);
        }
        let s = CallSyntax::parse_name("element:exec:fn").unwrap();
        assert_eq!(s.element().unwrap().tag, "exec");
        let text = s.format(&call());
        assert!(text.starts_with("<exec fn=\"check_stock\">{"), "{text}");
        assert!(text.ends_with("}</exec>"), "{text}");
        let how = s.instructions(2);
        assert!(
            how.contains("write an element named exec whose fn attribute names the tool"),
            "{how}"
        );
        assert!(
            how.contains("<exec fn=\"tool_name\">{\"param\":\"value\"}</exec>"),
            "{how}"
        );
        // another member's markup is reply text to this one, its own a call
        let other = CallSyntax::parse_name("element:exec:target").unwrap();
        let p = s.parse(&other.format(&call())).unwrap_err();
        assert!(p.0.contains("fn=\""), "{p}");
        assert!(CallSyntax::parse_name("element:invoke:name").is_none());
    }

    /// The keyword family is the function syntax with other words, never `CALL`: a line that
    /// opens with the harness's word is a call, one with another member's word is text.
    #[test]
    fn the_keyword_family_reads_its_own_word() {
        assert!(KEYWORDS.iter().all(|k| k.word != "CALL"));
        let s = CallSyntax::parse_name("keyword:RUN").unwrap();
        let text = s.format(&call());
        assert!(
            text.starts_with("RUN check_stock(product_id=\"P3\", "),
            "{text}"
        );
        let how = s.instructions(2);
        assert!(
            how.contains("write RUN, the tool name and its arguments"),
            "{how}"
        );
        assert!(how.contains("RUN tool_name(param=\"value\")"), "{how}");
        let other = CallSyntax::parse_name("keyword:EXEC")
            .unwrap()
            .format(&call());
        let p = s.parse(&format!("{other}\nok")).unwrap();
        assert!(
            p.calls.is_empty() && p.text.starts_with("EXEC check_stock("),
            "{p:?}"
        );
        let e = s.parse("RUN check_stock").unwrap_err();
        assert!(e.0.contains("RUN name(key=value)"), "{e}");
        assert!(CallSyntax::parse_name("keyword:CALL").is_none());
    }

    #[test]
    fn every_call_begins_with_its_opener() {
        for s in CallSyntax::every() {
            assert!(s.format(&call()).starts_with(s.opener()), "{}", s.as_str());
        }
    }

    #[test]
    fn plain_text_is_a_reply() {
        for s in CallSyntax::every() {
            let p = s.parse("  Hi lily! Welcome 🎉 ").unwrap();
            assert!(p.calls.is_empty());
            assert_eq!(p.text, "Hi lily! Welcome 🎉");
        }
    }

    #[test]
    fn malformed_calls_are_errors_not_panics() {
        assert!(CallSyntax::JsonTags
            .parse("<tool_call>{\"name\": ")
            .is_err());
        assert!(CallSyntax::JsonTags
            .parse("<tool_call>{\"nam\": 1}</tool_call>")
            .is_err());
        assert!(CallSyntax::JsonTags
            .parse("<tool_call>[1]</tool_call>")
            .is_err());
        assert!(CallSyntax::JsonBlock
            .parse("```tool\n{\"tool\": \"x\", \"args\": 3}\n```")
            .is_err());
        assert!(CallSyntax::Function.parse("CALL x(a=unquoted)").is_err());
        assert!(CallSyntax::Function.parse("CALL x(a=1").is_err());
        assert!(CallSyntax::Function.parse("CALL (a=1)").is_err());
        assert!(CallSyntax::XmlInvoke.parse("<invoke>{}</invoke>").is_err());
        assert!(CallSyntax::XmlInvoke
            .parse("<invoke name=\"x\">{}")
            .is_err());
        for bad in [
            "[[ {}]]",
            "[[x {\"a\": 1}",
            "[[x {\"a\": ]]",
            "[[x {} extra]]",
        ] {
            assert!(CallSyntax::Bracket.parse(bad).is_err(), "{bad}");
        }
        for bad in [
            "<tool_use><input>{}</input></tool_use>",
            "<tool_use><name>x</name></tool_use>",
            "<tool_use><name>x</name><input>[1]</input></tool_use>",
            "<tool_use><name>x</name><input>{}</input>",
        ] {
            assert!(CallSyntax::ToolUse.parse(bad).is_err(), "{bad}");
        }
        for bad in [
            "Action: x",
            "Action: x\nhello",
            "Action: \nAction Input: {}",
            "Action: x\nAction Input: {\"a\"",
        ] {
            assert!(CallSyntax::React.parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn named_element_syntaxes_explain_what_is_wrong() {
        let msg = |syn: CallSyntax, out: &str| syn.parse(out).unwrap_err().0;
        // The hybrid a json-tags-trained model writes for an <invoke> state: the
        // opening tag never ends, so the message must say so, not "never closed".
        let e = msg(
            CallSyntax::XmlInvoke,
            r#"<invoke name="store_faq","arguments":{"q":"size"}}</invoke>"#,
        );
        assert!(e.contains("must end with > right after the name"), "{e}");
        let e = msg(CallSyntax::FunctionTag, r#"<function=x{"a":1}</function>"#);
        assert!(e.contains("must end with > right after the name"), "{e}");
        for (syn, out) in [
            (CallSyntax::XmlInvoke, r#"<invoke name=\"x\">{}</invoke>"#),
            (CallSyntax::CallAttr, r#"<call tool=\"x\">{}</call>"#),
        ] {
            assert!(msg(syn, out).contains("use plain quotes"), "{out}");
        }
        for bad in [
            "<function=>{}</function>",
            "<function=x>{\"a\": 1}",
            "<function=x>[1]</function>",
            "<function>{\"a\": 1}</function>",
        ] {
            assert!(CallSyntax::FunctionTag.parse(bad).is_err(), "{bad}");
        }
        for bad in [
            "<call tool=\"x\">{}",
            "<call name=\"x\">{}</call>",
            "<call tool=\"x\"{}</call>",
            "<call>{}</call>",
            "<call tool=\"x y\">{}</call>",
            "<call tool=\"x\\\">{}</call>",
        ] {
            assert!(CallSyntax::CallAttr.parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn named_element_syntaxes_leave_prose_alone() {
        // Tags in a reply that are no call attempt stay reply text.
        let p = CallSyntax::CallAttr
            .parse("<call tool=\"pin\" >{\"id\": \"P1\"}</call> our <caller> line, <call> me <call")
            .unwrap();
        assert_eq!(p.calls[0].name, "pin");
        assert_eq!(p.text, "our <caller> line, <call> me <call");
        let p = CallSyntax::FunctionTag
            .parse("the <functional> one <function=list_coupons ></function> <function> x")
            .unwrap();
        assert_eq!(p.calls[0].arguments, json!({}));
        assert_eq!(p.text, "the <functional> one  <function> x");
        // Extra attributes around the name, as the earlier <invoke> parser allowed.
        let p = CallSyntax::XmlInvoke
            .parse("<invoke id=\"1\" name=\"x\" kind=\"t\">{\"a\": 1}</invoke>\n<invoke\r\n name=\"y\">{}</invoke>")
            .unwrap();
        assert_eq!(p.calls.len(), 2);
        assert_eq!(
            (p.calls[0].name.as_str(), p.calls[1].name.as_str()),
            ("x", "y")
        );
    }

    #[test]
    fn calls_without_arguments_and_brackets_in_json() {
        let p = CallSyntax::Bracket
            .parse("[[list_coupons]] and [[x {\"a\": [[1]]}]]")
            .unwrap();
        assert_eq!(p.calls[0].arguments, json!({}));
        assert_eq!(p.calls[1].arguments, json!({"a": [[1]]}));
        assert_eq!(p.text, "and");
        let p = CallSyntax::React
            .parse("Action: list_coupons\n\nAction Input: {}")
            .unwrap();
        assert_eq!(p.calls[0].name, "list_coupons");
        // Plain text that merely mentions an action is a reply, not a call.
        let p = CallSyntax::React
            .parse("Our next Action: giveaway!")
            .unwrap();
        assert!(p.calls.is_empty());
    }

    #[test]
    fn string_arguments_are_accepted() {
        let p = CallSyntax::JsonTags
            .parse(r#"<tool_call>{"name": "x", "arguments": "{\"a\": 1}"}</tool_call>"#)
            .unwrap();
        assert_eq!(p.calls[0].arguments, json!({"a": 1}));
        let p = CallSyntax::Function
            .parse("CALL x(flag=True, none=None)")
            .unwrap();
        assert_eq!(p.calls[0].arguments, json!({"flag": true, "none": null}));
        // Regression: a number as the last argument.
        let p = CallSyntax::Function
            .parse("CALL quote(product=\"P3\", n=2)")
            .unwrap();
        assert_eq!(p.calls[0].arguments, json!({"product": "P3", "n": 2}));
        let p = CallSyntax::Function.parse("CALL f(x=-1.5e2)").unwrap();
        assert_eq!(p.calls[0].arguments, json!({"x": -150.0}));
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic(s in ".{0,200}") {
            for syn in CallSyntax::every() {
                let _ = syn.parse(&s);
            }
        }

        /// Random text is unlikely to hold a tag; this builds text from the pieces of calls.
        #[test]
        fn parsers_never_panic_on_call_fragments(parts in proptest::collection::vec(
            proptest::sample::select(vec![
                "<call", " tool=\"", "<function", "=", "<invoke", " name=\"", "x", "\"", "\\\"",
                ">", "{", "}", "\"a\": 1", ",", "</call>", "</function>", "</invoke>", "é", " ", "\r\n",
            ]),
            0..24,
        )) {
            let s = parts.concat();
            for syn in CallSyntax::every() {
                let _ = syn.parse(&s);
            }
        }
    }
}
