//! Whole tool calls constrained at decode time: once an answer opens a call in its harness's
//! syntax, the rest of the call must be one the harness reads and the tool accepts.
//!
//! A compact model reading a held-out harness state writes the production harness's habits
//! into it: `product_id` where the schema says `sku`, `snacks` where the enum says `sna`,
//! JSON merged into an opening tag (`<invoke name="x","product_id":"P4"}`), a call left
//! without a required key, or markup of another syntax that no parser of this harness
//! reads. Hosted APIs rule this out with strict function calling and serving engines with
//! grammar-guided decoding (llguidance, XGrammar); [`CallGrammar`] is that for the ten call
//! syntaxes of this runtime, as a byte-level check of the text an answer would have with
//! one more token, so the engine can sample as usual and draw again when a token breaks it
//! (the answer keeps the model's own tokens wherever the model writes a valid call).
//!
//! What it holds a call to: the syntax's literal text (whitespace where the parser allows
//! it), a tool name the harness has, and arguments that fit the tool's schema as far as
//! [`json`] models it (keys, required keys, types, enum values); text outside calls is free,
//! except that it may not contain another syntax's call markup.

mod json;

use serde_json::Value;

use self::json::{Matched, ObjectShape, Reader, Shape, Stop};
use crate::hooks::Action;
use crate::{CallSyntax, Harness};

/// One piece of a call's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// This text.
    Lit(&'static str),
    /// Any whitespace, newlines included, or none.
    Ws,
    /// Spaces or tabs, or none.
    Blanks,
    /// One or more spaces or tabs.
    SomeBlanks,
    /// One of the harness's tool names.
    Name,
    /// The named tool's arguments as a JSON object; `optional`: the parser reads no object
    /// as no arguments, which is allowed when the tool requires none. Read under the
    /// syntax's [`Body`] rules, as are `Keywords`.
    Args { optional: bool },
    /// The arguments as `(key=value, ...)`.
    Keywords,
    /// Spaces, tabs or carriage returns, then the end of the line or of the answer: the
    /// parser trims the rest of the line, and `str::lines` ends a line at `\n` only.
    LineEnd,
}

use Step::*;

/// A JSON object between an opener and a closer whose `name_key` holds the tool's name and
/// `args_key` its arguments (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`).
macro_rules! json_object_call {
    ($open:literal, $name_key:literal, $args_key:literal, $close:literal) => {
        &[
            Lit($open),
            Ws,
            Lit("{"),
            Ws,
            Lit($name_key),
            Ws,
            Lit(":"),
            Ws,
            Lit("\""),
            Name,
            Lit("\""),
            Ws,
            Lit(","),
            Ws,
            Lit($args_key),
            Ws,
            Lit(":"),
            Ws,
            Args { optional: false },
            Ws,
            Lit("}"),
            Ws,
            Lit($close),
        ]
    };
}

/// An element whose opening tag names the tool in an attribute and whose body holds the
/// arguments (`<invoke name="...">{...}</invoke>`, `<call tool="...">`, and the element
/// family's members, [`crate::syntax::Element`]).
pub(crate) type AttributeSteps = [Step; 11];

pub(crate) const fn attribute_steps(
    tag: &'static str,
    attr: &'static str,
    close: &'static str,
) -> AttributeSteps {
    [
        Lit(tag),
        SomeBlanks,
        Lit(attr),
        Name,
        Lit("\""),
        Blanks,
        Lit(">"),
        Ws,
        Args { optional: true },
        Ws,
        Lit(close),
    ]
}

/// A word, the tool's name and `(key=value, ...)` on a line of its own: the function syntax
/// (`CALL`) and the keyword family's members ([`crate::syntax::Keyword`]).
pub(crate) type KeywordSteps = [Step; 6];

pub(crate) const fn keyword_steps(word: &'static str) -> KeywordSteps {
    [Lit(word), Blanks, Name, Blanks, Keywords, LineEnd]
}

const INVOKE: AttributeSteps = attribute_steps("<invoke", "name=\"", "</invoke>");
const CALL_ATTR: AttributeSteps = attribute_steps("<call", "tool=\"", "</call>");
const FUNCTION: KeywordSteps = keyword_steps("CALL ");

/// How a call is written in one syntax: each its parser reads, in the form
/// [`CallSyntax::format`] writes (the name first, then the arguments).
fn template(syntax: CallSyntax) -> &'static [Step] {
    match syntax {
        CallSyntax::JsonTags => {
            json_object_call!("<tool_call>", "\"name\"", "\"arguments\"", "</tool_call>")
        }
        CallSyntax::JsonBlock => json_object_call!("```tool", "\"tool\"", "\"args\"", "```"),
        CallSyntax::Function => &FUNCTION,
        CallSyntax::XmlInvoke => &INVOKE,
        CallSyntax::Bracket => &[Lit("[["), Name, Ws, Args { optional: true }, Ws, Lit("]]")],
        CallSyntax::ToolUse => &[
            Lit("<tool_use>"),
            Ws,
            Lit("<name>"),
            Ws,
            Name,
            Ws,
            Lit("</name>"),
            Ws,
            Lit("<input>"),
            Ws,
            Args { optional: true },
            Ws,
            Lit("</input>"),
            Ws,
            Lit("</tool_use>"),
        ],
        CallSyntax::React => &[
            Lit("Action:"),
            Blanks,
            Name,
            Blanks,
            Lit("\n"),
            Ws,
            Lit("Action Input:"),
            Blanks,
            Args { optional: true },
            LineEnd,
        ],
        CallSyntax::FunctionTag => &[
            // the parser reads any `<function` tag as a call attempt (`<function>{...}` is
            // one without its name), so the opener is the tag and `=` must follow it
            Lit("<function"),
            Lit("="),
            Name,
            Blanks,
            Lit(">"),
            Ws,
            Args { optional: true },
            Ws,
            Lit("</function>"),
        ],
        CallSyntax::CallAttr => &CALL_ATTR,
        CallSyntax::Element(_) => match syntax.element() {
            Some(e) => &e.steps,
            None => unreachable!("an Element index comes from ELEMENTS"),
        },
        CallSyntax::Keyword(_) => match syntax.keyword() {
            Some(k) => &k.steps,
            None => unreachable!("a Keyword index comes from KEYWORDS"),
        },
    }
}

/// Where a syntax's parser looks for the end of a call's arguments, which the grammar must
/// keep them clear of.
struct Body {
    /// The parser reads the call from a line of its own (`str::lines`), so the arguments
    /// may not hold a newline, not even as JSON whitespace.
    one_line: bool,
    /// The parser ends the call's text at the first of these after the opener, inside a
    /// JSON string or not (only [`CallSyntax::Bracket`]'s reads the arguments as a JSON
    /// stream), so no string in the arguments may hold one.
    closers: &'static [&'static str],
}

fn body(syntax: CallSyntax) -> Body {
    let (one_line, closers): (bool, &'static [&'static str]) = match syntax {
        CallSyntax::JsonTags => (false, &["</tool_call>"]),
        CallSyntax::JsonBlock => (false, &["```"]),
        CallSyntax::XmlInvoke => (false, &["</invoke>"]),
        // the input element ends at its closer, the call at its own
        CallSyntax::ToolUse => (false, &["</input>", "</tool_use>"]),
        CallSyntax::FunctionTag => (false, &["</function>"]),
        CallSyntax::CallAttr => (false, &["</call>"]),
        CallSyntax::Bracket => (false, &[]),
        CallSyntax::Function | CallSyntax::React | CallSyntax::Keyword(_) => (true, &[]),
        CallSyntax::Element(_) => (false, syntax.element().map_or(&[], |e| &e.closers)),
    };
    Body { one_line, closers }
}

/// The calls a harness reads, as a check on an answer's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallGrammar {
    syntax: CallSyntax,
    steps: &'static [Step],
    /// The text a call starts with (the template's first literal).
    opener: &'static [u8],
    /// The call starts a line (whitespace before it aside).
    line_start: bool,
    /// The opener is a tag name (`<invoke`): a name byte right after it makes another word.
    tag: bool,
    /// The arguments stay on the call's line ([`Body::one_line`]).
    one_line: bool,
    /// Texts no string in a call may hold ([`Body::closers`]).
    closers: Vec<&'static [u8]>,
    /// Tool names with the shape of their arguments.
    tools: Vec<(Vec<u8>, ObjectShape)>,
    /// Call markup of the other syntaxes, which no parser of this harness reads.
    foreign: Vec<&'static [u8]>,
    /// The harness's reply limit (`[reply] max_chars`): a reply that reaches it is complete,
    /// since the runtime cuts every reply there.
    reply_chars: Option<usize>,
}

impl CallGrammar {
    /// Calls in `syntax` to `tools` (name and arguments schema, the tool's `inputSchema`).
    pub fn new<'a>(
        syntax: CallSyntax,
        tools: impl IntoIterator<Item = (&'a str, &'a Value)>,
    ) -> CallGrammar {
        let steps = template(syntax);
        let opener = match steps[0] {
            Lit(s) => s.as_bytes(),
            _ => unreachable!("every template starts with its opener"),
        };
        let mut foreign: Vec<&'static [u8]> = CallSyntax::ALL
            .iter()
            .filter(|&&s| s != syntax)
            .map(|s| s.marker().as_bytes())
            .collect();
        if syntax != CallSyntax::JsonTags {
            foreign.push(b"</tool_call>");
        }
        let Body { one_line, closers } = body(syntax);
        CallGrammar {
            syntax,
            steps,
            opener,
            line_start: matches!(
                syntax,
                CallSyntax::Function | CallSyntax::React | CallSyntax::Keyword(_)
            ),
            tag: matches!(
                syntax,
                CallSyntax::XmlInvoke
                    | CallSyntax::CallAttr
                    | CallSyntax::FunctionTag
                    | CallSyntax::Element(_)
            ),
            one_line,
            closers: closers.iter().map(|c| c.as_bytes()).collect(),
            tools: tools
                .into_iter()
                .map(|(n, s)| (n.as_bytes().to_vec(), Shape::arguments(s)))
                .collect(),
            foreign,
            reply_chars: None,
        }
    }

    /// The calls `harness` reads (its syntax, its tools), and its reply limit, unless a
    /// reply check judges the whole draft: one that requires a phrase or a sign-off passes a
    /// draft that writes them last, past the limit (the runtime's cut keeps them), and would
    /// fail the same draft stopped at the limit.
    pub fn for_harness(harness: &Harness) -> CallGrammar {
        let g = CallGrammar::new(
            harness.syntax,
            harness.tools.iter().map(|t| (t.name.as_str(), &t.schema)),
        );
        let whole_draft = harness.hooks.iter().any(|h| {
            matches!(&h.action, Action::Check { rule, .. }
                if rule.ends_with.is_some() || !rule.require.is_empty())
        });
        if whole_draft {
            g
        } else {
            g.with_reply_limit(harness.spec.manifest.reply.max_chars)
        }
    }

    /// Answers that hold no call are complete past `chars` characters ([`Self::complete`]).
    pub fn with_reply_limit(mut self, chars: usize) -> CallGrammar {
        self.reply_chars = Some(chars);
        self
    }

    /// Whether `answer` (one this admitted) is a reply past the reply limit: it opens no
    /// call, holds more than the limit's number of characters (trimmed), and its last word
    /// has ended (it ends in whitespace or punctuation). The runtime cuts every reply to
    /// the limit, at a word boundary within its first `limit` characters, so nothing a model
    /// adds after that reaches a viewer, and a decoder may stop there instead of writing
    /// text that is thrown away (a base model rambles to its token limit). A reply's hooks
    /// then review what a viewer can see, in whole words: a forbidden word past the limit no
    /// longer costs a retry.
    pub fn complete(&self, answer: &[u8]) -> bool {
        let Some(limit) = self.reply_chars else {
            return false;
        };
        // cheap bound first: a character is at least one byte
        if answer.len() <= limit {
            return false;
        }
        let text = match std::str::from_utf8(answer) {
            Ok(s) => s,
            Err(e) => std::str::from_utf8(&answer[..e.valid_up_to()]).unwrap_or(""),
        };
        let ended = text.chars().next_back().is_some_and(|c| {
            c.is_whitespace()
                || matches!(
                    c,
                    '.' | ','
                        | '!'
                        | '?'
                        | ';'
                        | ':'
                        | '，'
                        | '。'
                        | '！'
                        | '？'
                        | '；'
                        | '：'
                        | '、'
                )
        });
        ended && text.trim().chars().nth(limit).is_some() && self.next_call(answer, 0).is_none()
    }

    pub fn syntax(&self) -> CallSyntax {
        self.syntax
    }

    /// Whether `before` (an answer so far, which this admitted) followed by `token` (its
    /// bytes; a NUL byte stands for the end of the answer) can still be read as text and
    /// calls the harness takes: every call the token reaches is, so far, a call to one of
    /// the tools with arguments that fit its schema, and no other syntax's markup appears.
    pub fn admits(&self, before: &[u8], token: &[u8]) -> bool {
        let mut buf = Vec::with_capacity(before.len() + token.len());
        buf.extend_from_slice(before);
        buf.extend_from_slice(token);
        let old = before.len();
        for m in &self.foreign {
            let from = (old + 1).saturating_sub(m.len());
            if find(&buf[from..], m).is_some() {
                return false;
            }
        }
        if self.breaks_leading_markup(&buf, old) {
            return false;
        }
        let r = Reader {
            b: &buf,
            one_line: self.one_line,
            closers: &self.closers,
        };
        let mut from = 0;
        while let Some(at) = self.next_call(&buf, from) {
            match self.call(&r, at) {
                Ok(end) => from = end,
                Err(Stop::More) => return true,
                Err(Stop::At(p)) if p >= old => return false,
                // broken before this token (written without the check): not judged again
                Err(Stop::At(_)) => from = at + 1,
            }
        }
        true
    }

    /// Whether `buf`'s bytes from `old` on make an answer that starts with markup (`<`, `[`,
    /// `{` or a backtick) start otherwise than its harness's call opener. No reply to a
    /// viewer starts that way, and a compact model on an unseen syntax writes a call of its
    /// own making there (`<call>{"product_id": "P6"}` where the harness reads
    /// `CALL get_product(...)`), which no parser reads: it is held to the opener instead.
    fn breaks_leading_markup(&self, buf: &[u8], old: usize) -> bool {
        let Some(p) = buf.iter().position(|c| !c.is_ascii_whitespace() && *c != 0) else {
            return false;
        };
        if !matches!(buf[p], b'<' | b'[' | b'{' | b'`') {
            return false;
        }
        let text = &buf[p..];
        let n = text.len().min(self.opener.len());
        match (0..n).find(|&i| text[i] != self.opener[i]) {
            Some(i) => p + i >= old,
            None => false,
        }
    }

    /// Where the next call starts at or after `from`.
    fn next_call(&self, b: &[u8], mut from: usize) -> Option<usize> {
        while let Some(p) = find(&b[from..], self.opener).map(|p| p + from) {
            let line_ok = !self.line_start || starts_line(b, p);
            let tag_ok = !self.tag || b.get(p + self.opener.len()).is_none_or(|&c| !name_byte(c));
            if line_ok && tag_ok {
                return Some(p);
            }
            from = p + 1;
        }
        None
    }

    /// The call whose opener is at `at`: where it ends, or why it stopped.
    fn call(&self, r: &Reader, at: usize) -> Matched {
        let b = r.b;
        let mut i = at;
        let mut args: Option<&ObjectShape> = None;
        for step in self.steps {
            i = match *step {
                Lit(s) => r.lit(i, s.as_bytes())?,
                Ws => Reader::new(b).ws(i),
                Blanks => blanks(b, i),
                SomeBlanks => {
                    let j = blanks(b, i);
                    if j == i {
                        return Err(if i < b.len() { Stop::At(i) } else { Stop::More });
                    }
                    j
                }
                Name => {
                    let (j, k) = self.name(b, i)?;
                    args = Some(&self.tools[k].1);
                    j
                }
                Args { optional } => {
                    let o = args.expect("the name comes before the arguments");
                    match b.get(i) {
                        None => return Err(Stop::More),
                        Some(b'{') => r.object(i, o, 0)?,
                        Some(_) if optional && !o.any_required() => i,
                        Some(_) => return Err(Stop::At(i)),
                    }
                }
                Keywords => {
                    let o = args.expect("the name comes before the arguments");
                    match b.get(i) {
                        None => return Err(Stop::More),
                        Some(b'(') => r.keywords(i, o)?,
                        Some(_) => return Err(Stop::At(i)),
                    }
                }
                LineEnd => {
                    let mut j = i;
                    while matches!(b.get(j), Some(b' ' | b'\t' | b'\r')) {
                        j += 1;
                    }
                    match b.get(j) {
                        None => return Err(Stop::More),
                        Some(b'\n' | 0) => j,
                        Some(_) => return Err(Stop::At(j)),
                    }
                }
            };
        }
        Ok(i)
    }

    /// A tool name at `i`: where it ends and which tool it is. While it is being written it
    /// must begin a tool's name; once a byte that cannot be in a name follows, it must be one.
    fn name(&self, b: &[u8], i: usize) -> Result<(usize, usize), Stop> {
        let end = b[i..].iter().position(|&c| !name_byte(c)).map(|n| i + n);
        let run = &b[i..end.unwrap_or(b.len())];
        if let Some(n) = json::leaves(run, self.tools.iter().map(|(t, _)| t.as_slice())) {
            return Err(Stop::At(i + n));
        }
        let end = end.ok_or(Stop::More)?;
        match self.tools.iter().position(|(t, _)| t.as_slice() == run) {
            Some(k) => Ok((end, k)),
            None => Err(Stop::At(end)),
        }
    }
}

/// Bytes of a tool name as the parsers read one.
fn name_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-')
}

fn blanks(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t') {
        i += 1;
    }
    i
}

/// Whether `i` starts a line, whitespace before it aside: the keyword syntaxes' parsers read a
/// line trimmed (`str::trim`), so any Unicode whitespace may indent a call (U+3000 included).
fn starts_line(b: &[u8], i: usize) -> bool {
    // mid-line, the common case, is told by the byte before the opener
    if b[..i]
        .last()
        .is_some_and(|&c| c.is_ascii() && !(c as char).is_whitespace())
    {
        return false;
    }
    let start = b[..i]
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |p| p + 1);
    std::str::from_utf8(&b[start..i]).is_ok_and(|s| s.chars().all(char::is_whitespace))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolCall;
    use serde_json::json;

    fn schemas() -> Vec<(&'static str, Value)> {
        vec![
            (
                "t_3876",
                json!({"type": "object", "properties": {
                    "sku": {"type": "string"}, "size": {"type": "string"}},
                    "required": ["sku"]}),
            ),
            (
                "match_goods",
                json!({"type": "object", "properties": {
                    "category": {"type": "string", "enum": ["app", "sna"]},
                    "max_price": {"type": "number"}}}),
            ),
            ("list_coupons", json!({"type": "object", "properties": {}})),
        ]
    }

    fn grammar(syntax: CallSyntax) -> CallGrammar {
        let s = schemas();
        CallGrammar::new(syntax, s.iter().map(|(n, v)| (*n, v)))
    }

    /// A reply is complete once it holds more than the limit's characters (trimmed;
    /// characters, not bytes) and its last word has ended; an answer that opens a call never
    /// is, nor is any answer under a grammar without a limit, or under a harness whose reply
    /// check needs a sign-off.
    #[test]
    fn a_reply_past_the_limit_is_complete_once_its_word_ends() {
        for syntax in CallSyntax::every() {
            let g = grammar(syntax).with_reply_limit(12);
            assert!(!grammar(syntax).complete(format!("{} ", "x".repeat(500)).as_bytes()));
            for (text, complete) in [
                ("  Hello there!", false),     // 12 characters: not past the limit
                ("  Hello there! \n", false),  // trailing whitespace does not count
                ("  Hello there, Amy", false), // past it, inside a word
                ("  Hello there, Amy ", true),
                ("  Hello there, Amy.", true),
                ("价格是九十九元，现在下单吧", false),
                ("价格是九十九元，现在下单吧。", true),
            ] {
                assert_eq!(
                    g.complete(text.as_bytes()),
                    complete,
                    "{syntax:?}: {text:?}"
                );
            }
            // a character cut in the middle is not there yet
            let cut = "价格是九十九元，现在下单吧。".as_bytes();
            assert!(!g.complete(&cut[..cut.len() - 1]), "{syntax:?}");
            let call = syntax.format(&calls()[0]);
            let long = format!(
                "{} and a long preamble before it\n{call}\n",
                "words ".repeat(9)
            );
            assert!(!g.complete(long.as_bytes()), "{syntax:?}: {long}");
            let tail = format!("{call}\n{} ", "x".repeat(40));
            assert!(!g.complete(tail.as_bytes()), "{syntax:?}: {tail}");
        }
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
        let mut h = Harness::load(&dir).unwrap();
        let limit = h.spec.manifest.reply.max_chars;
        let g = CallGrammar::for_harness(&h);
        assert!(!g.complete(format!("{}.", "a".repeat(limit - 1)).as_bytes()));
        assert!(g.complete(format!("{} .", "a".repeat(limit)).as_bytes()));
        h.hooks.push(crate::hooks::Hook {
            id: "sign-off".into(),
            event: crate::EventKind::BeforeReply,
            match_op: None,
            match_tool: None,
            describe: None,
            action: Action::Check {
                rule: crate::hooks::CheckRule {
                    forbid: vec![],
                    require: vec![],
                    ends_with: Some("See you soon!".into()),
                    max_chars: None,
                },
                on_fail: crate::hooks::OnFail::Retry,
                fallback: None,
            },
        });
        let signed = CallGrammar::for_harness(&h);
        assert!(!signed.complete(format!("{} .", "a".repeat(limit * 2)).as_bytes()));
    }

    /// Feeds `text` one byte at a time, then the end of the answer; the index of the first
    /// byte refused (`text.len()` for the end).
    fn first_refused(g: &CallGrammar, text: &str) -> Option<usize> {
        let mut b = text.as_bytes().to_vec();
        b.push(0);
        (0..b.len()).find(|&i| !g.admits(&b[..i], &b[i..i + 1]))
    }

    fn calls() -> Vec<ToolCall> {
        vec![
            ToolCall {
                name: "t_3876".into(),
                arguments: json!({"sku": "P3", "size": "M"}),
            },
            ToolCall {
                name: "match_goods".into(),
                arguments: json!({"category": "sna", "max_price": 50.5}),
            },
            ToolCall {
                name: "list_coupons".into(),
                arguments: json!({}),
            },
        ]
    }

    #[test]
    fn every_call_each_syntax_writes_passes_and_parses() {
        for s in CallSyntax::every() {
            let g = grammar(s);
            let text = format!("Let me check.\n{}", s.format_all(&calls()));
            assert_eq!(first_refused(&g, &text), None, "{}: {text}", s.as_str());
            assert_eq!(s.parse(&text).unwrap().calls, calls(), "{}", s.as_str());
            // a reply after the calls is free text
            let text = format!("{text}\nHere you go!");
            assert_eq!(first_refused(&g, &text), None, "{}", s.as_str());
        }
    }

    #[test]
    fn the_production_key_under_a_renamed_schema_is_refused() {
        let g = grammar(CallSyntax::JsonTags);
        let t = r#"<tool_call>{"name": "t_3876", "arguments": {"product_id": "P3"}}</tool_call>"#;
        assert_eq!(first_refused(&g, t), Some(t.find("product_id").unwrap()));
        let t = r#"<tool_call>{"name": "t_3876", "arguments": {"size": "M"}}</tool_call>"#;
        assert_eq!(first_refused(&g, t), Some(t.find("}}").unwrap()));
        let t = r#"<tool_call>{"name": "match_goods", "arguments": {"category": "snacks"}}</tool_call>"#;
        assert_eq!(first_refused(&g, t), Some(t.find("cks").unwrap()));
        let t = r#"<tool_call>{"name": "get_product", "arguments": {}}</tool_call>"#;
        assert_eq!(first_refused(&g, t), Some(t.find("get").unwrap()));
    }

    #[test]
    fn json_merged_into_an_opening_tag_is_refused() {
        let g = grammar(CallSyntax::XmlInvoke);
        let t = r#"<invoke name="t_3876","sku":"P4"}</invoke>"#;
        assert_eq!(first_refused(&g, t), Some(t.find(',').unwrap()));
        // a word that begins with the tag is not a call
        assert_eq!(first_refused(&g, "<invoker> is fine"), None);
    }

    #[test]
    fn keyword_calls_start_a_line_and_end_it() {
        let g = grammar(CallSyntax::Function);
        assert_eq!(first_refused(&g, "CALL t_3876(sku=\"P3\")\nThanks!"), None);
        let t = "CALL t_3876(product_id=\"P3\")";
        assert_eq!(first_refused(&g, t), Some(t.find("product").unwrap()));
        let t = "CALL t_3876(sku=\"P3\") now";
        assert_eq!(first_refused(&g, t), Some(t.find("now").unwrap()));
        // mid-line it is prose (the parser reads it as text)
        assert_eq!(first_refused(&g, "Please CALL us(1)."), None);
        // indented by any whitespace the parser trims, it is a call
        for indent in [" \t", "\u{3000}", "\u{a0}", "\r"] {
            let t = format!("ok\n{indent}CALL t_3876(product_id=\"P3\")");
            assert!(CallSyntax::Function.parse(&t).unwrap().calls.len() == 1);
            assert_eq!(
                first_refused(&g, &t),
                Some(t.find("product").unwrap()),
                "{indent:?}"
            );
        }
        let g = grammar(CallSyntax::React);
        let t = "\u{3000}Action: t_3876\nAction Input: {\"product_id\": \"P3\"}";
        assert_eq!(first_refused(&g, t), Some(t.find("product").unwrap()));
    }

    #[test]
    fn another_syntaxs_markup_is_refused_anywhere() {
        let g = grammar(CallSyntax::Function);
        let t = "ok <function=t_3876>{\"sku\": \"P3\"}</function>";
        assert_eq!(first_refused(&g, t), Some("ok <function".len()));
        let t = "ok</tool_call>";
        assert_eq!(first_refused(&g, t), Some(t.len() - 1));
        let g = grammar(CallSyntax::JsonTags);
        assert_eq!(first_refused(&g, "done</tool_call> bye"), None);
    }

    /// Calls of the model's own making (seen on held-out `function` states) are refused at
    /// their first byte that leaves the opener; markup later in an answer is prose.
    #[test]
    fn an_answer_that_starts_with_markup_starts_a_call() {
        let g = grammar(CallSyntax::Function);
        for t in ["<call>{\"sku\": \"P6\"}", "[call>{", " {\"sku\"", "`x`"] {
            assert_eq!(
                first_refused(&g, t),
                Some(t.find(|c: char| c != ' ').unwrap()),
                "{t}"
            );
        }
        for t in ["Hi! <3", "ok [AI]", "CALL t_3876(sku=\"P3\")", "\n"] {
            assert_eq!(first_refused(&g, t), None, "{t}");
        }
        let g = grammar(CallSyntax::JsonTags);
        assert_eq!(first_refused(&g, "<call>{"), Some(1));
        assert_eq!(first_refused(&g, "[tool_call]"), Some(0));
        let t = r#"<tool_call>{"name": "t_3876", "arguments": {"sku": "P3"}}</tool_call>"#;
        assert_eq!(first_refused(&g, t), None);
        // text written before the check is not judged again
        assert!(g.admits(b"<call>", b"x"));
    }

    #[test]
    fn an_answer_may_not_end_inside_a_call() {
        let g = grammar(CallSyntax::Bracket);
        let t = "[[t_3876 {\"sku\": \"P3\"}";
        assert_eq!(first_refused(&g, t), Some(t.len()));
        // a tool that requires nothing may be called without an object
        assert_eq!(first_refused(&g, "[[list_coupons]]"), None);
        let t = "[[t_3876]]";
        assert_eq!(first_refused(&g, t), Some(t.find("]]").unwrap()));
    }

    const PIECES: &[&str] = &[
        "<tool_call>",
        "{",
        "}",
        "\"name\"",
        ":",
        " ",
        "\n",
        ",",
        "\"t_3876\"",
        "\"arguments\"",
        "\"sku\"",
        "\"size\"",
        "\"P1\"",
        "\"category\"",
        "\"sna\"",
        "12",
        "-",
        ".5",
        "</tool_call>",
        "[[",
        "]]",
        "CALL ",
        "(",
        ")",
        "=",
        "hi",
        "\"",
        "\\",
        "<invoke",
        "Action:",
        "\u{0}",
        "é",
        "\r",
        "\u{3000}",
        "\u{a0}",
        "\u{b}",
    ];

    proptest::proptest! {
        /// A token is admitted exactly when each of its bytes would be, one at a time: the
        /// check is the same whatever the tokenizer's pieces, and no input makes it panic.
        #[test]
        fn a_token_is_judged_as_its_bytes_are(
            picks in proptest::collection::vec(0..PIECES.len(), 0..40),
            split in 0usize..1000,
            syntax in 0..CallSyntax::every().count(),
            call in 0usize..4,
            cut in 0usize..1000,
        ) {
            let syntax = CallSyntax::every().nth(syntax).unwrap();
            let g = grammar(syntax);
            // a valid call (or none) cut anywhere, then random pieces
            let mut text = calls().get(call).map_or(Vec::new(), |c| syntax.format(c).into_bytes());
            text.truncate(cut % (text.len() + 1));
            text.extend(picks.iter().flat_map(|&i| PIECES[i].bytes()));
            let k = (0..text.len()).find(|&i| !g.admits(&text[..i], &text[i..i + 1]));
            let end = k.unwrap_or(text.len());
            let s = split % (end + 1);
            proptest::prop_assert!(g.admits(&text[..s], &text[s..end]));
            if let Some(k) = k {
                proptest::prop_assert!(!g.admits(&text[..s], &text[s..=k]));
            }
        }
    }

    /// The function and ReAct parsers read a call's arguments on its own line, so the
    /// grammar may not let them run onto the next one.
    #[test]
    fn single_line_calls_keep_their_arguments_on_the_line() {
        let g = grammar(CallSyntax::React);
        let t = "Action: t_3876\nAction Input: {\n\"sku\":\"P3\"}";
        assert!(CallSyntax::React.parse(t).is_err());
        assert_eq!(first_refused(&g, t), Some(t.find("{\n").unwrap() + 1));
        let g = grammar(CallSyntax::Function);
        for t in [
            "CALL t_3876(\nsku=\"P3\")",
            "CALL t_3876(sku=\n\"P3\")",
            "CALL match_goods(category=\"sna\"\n, max_price=1)",
        ] {
            assert!(CallSyntax::Function.parse(t).is_err(), "{t:?}");
            assert_eq!(first_refused(&g, t), Some(t.find('\n').unwrap()), "{t:?}");
        }
        // a carriage return does not end a line for `str::lines`: text after one is on
        // the call's line, where the parser takes only whitespace
        let t = "CALL t_3876(sku=\"P3\")\rThanks!";
        assert!(CallSyntax::Function.parse(t).is_err());
        assert_eq!(first_refused(&g, t), Some(t.find('T').unwrap()));
        let g = grammar(CallSyntax::React);
        let t = "Action: t_3876\nAction Input: {\"sku\":\"P3\"}\rThanks!";
        assert!(CallSyntax::React.parse(t).is_err());
        assert_eq!(first_refused(&g, t), Some(t.find('T').unwrap()));
        // whitespace (a carriage return included) within the line, and CRLF after it
        for syntax in [CallSyntax::Function, CallSyntax::React] {
            let g = grammar(syntax);
            let call = syntax.format(&calls()[0]);
            for t in [
                format!("{call}\r\nThanks!"),
                format!("{call} \r \nThanks!"),
                format!("{call}\r"),
                call.replace(", ", " ,\r\t")
                    .replace("\":", "\"\r:")
                    .replace(",\"", ", \""),
            ] {
                assert_eq!(first_refused(&g, &t), None, "{syntax:?}: {t:?}");
                assert_eq!(syntax.parse(&t).unwrap().calls[..1], calls()[..1], "{t:?}");
            }
        }
    }

    /// The parser reads `<function>{...}` as a call without its name, so the grammar
    /// takes a `<function` tag only as the opening of `<function=name>`.
    #[test]
    fn a_function_tag_names_its_tool() {
        let g = grammar(CallSyntax::FunctionTag);
        for t in [
            "<function>{\"sku\":\"P3\"}</function>",
            "<function >{\"sku\":\"P3\"}</function>",
            "<function b\"<function=t_3876>{\"sku\":\"P3\"}</function>",
        ] {
            assert!(CallSyntax::FunctionTag.parse(t).is_err(), "{t}");
            assert_eq!(first_refused(&g, t), Some("<function".len()), "{t}");
        }
        assert_eq!(first_refused(&g, "our <functional> tests"), None);
    }

    /// The tagged parsers end a call at the first closer after its opener, inside a JSON
    /// string or not, so the grammar refuses a string that holds one.
    #[test]
    fn a_string_may_not_hold_its_syntaxs_closer() {
        for (syntax, closers) in [
            (CallSyntax::JsonTags, &["</tool_call>"][..]),
            (CallSyntax::JsonBlock, &["```"]),
            (CallSyntax::XmlInvoke, &["</invoke>"]),
            (CallSyntax::ToolUse, &["</input>", "</tool_use>"]),
            (CallSyntax::FunctionTag, &["</function>"]),
            (CallSyntax::CallAttr, &["</call>"]),
        ] {
            for closer in closers {
                let held = format!("a {closer} b");
                // in a value, and in a key of an open object
                for (name, arguments) in [
                    ("t_3876", json!({ "sku": held })),
                    ("free", json!({ held.as_str(): 1 })),
                ] {
                    let t = syntax.format(&ToolCall {
                        name: name.into(),
                        arguments,
                    });
                    assert!(syntax.parse(&t).is_err(), "{t}");
                    let at = t.find(&held).unwrap() + 2 + closer.len() - 1;
                    assert_eq!(first_refused(&open_grammar(syntax), &t), Some(at), "{t}");
                }
                // the closer cut short, or with its `/` escaped, is plain text
                let mut fine = vec![closer[..closer.len() - 1].to_string()];
                if closer.contains('/') {
                    fine.push(closer.replace('/', "\\/"));
                }
                for sku in fine {
                    let call = ToolCall {
                        name: "t_3876".into(),
                        arguments: json!({"sku": format!("a {sku} b")}),
                    };
                    let t = serde_json::to_string(&call.arguments).unwrap();
                    let t = syntax.format(&call).replace(&t, &t.replace("\\\\/", "\\/"));
                    assert_eq!(first_refused(&grammar(syntax), &t), None, "{t}");
                    assert_eq!(syntax.parse(&t).unwrap().calls.len(), 1, "{t}");
                }
            }
        }
    }

    /// The test tools and `free` (any arguments), `flags` (a boolean and a null) and `one`
    /// (a single key: an object that is soon full).
    fn open_grammar(syntax: CallSyntax) -> CallGrammar {
        let mut s = schemas();
        s.push(("free", json!({"type": "object"})));
        s.push((
            "one",
            json!({"type": "object", "properties": {"k": {"type": "integer"}}}),
        ));
        s.push((
            "flags",
            json!({"type": "object", "properties": {
                "f": {"type": "boolean"}, "n": {"type": "null"}, "q": {"type": "string"}}}),
        ));
        CallGrammar::new(syntax, s.iter().map(|(n, v)| (*n, v)))
    }

    /// Pieces of calls in every syntax, for texts the grammar admits; no NUL, which ends
    /// an answer.
    const CALL_PIECES: &[&str] = &[
        "<tool_call>",
        "</tool_call>",
        "```tool",
        "```",
        "CALL ",
        "(",
        ")",
        "=",
        ",",
        ":",
        "<invoke",
        " name=\"",
        "</invoke>",
        "[[",
        "]]",
        "<tool_use>",
        "<name>",
        "</name>",
        "<input>",
        "</input>",
        "</tool_use>",
        "Action:",
        "Action Input:",
        "<function=",
        "<function",
        "</function>",
        "<call",
        " tool=\"",
        "</call>",
        "{",
        "}",
        "[",
        "]",
        "\"",
        ">",
        "\"name\"",
        "\"arguments\"",
        "\"tool\"",
        "\"args\"",
        "t_3876",
        "free",
        "flags",
        "list_coupons",
        "\"t_3876\"",
        "\"free\"",
        "\"flags\"",
        "\"sku\"",
        "sku",
        "\"f\"",
        "f",
        "\"n\"",
        "n",
        "\"q\"",
        "q",
        "\"P3\"",
        "one",
        "\"one\"",
        "\"k\"",
        "k",
        "true",
        "false",
        "null",
        "True",
        "12",
        "-",
        ".5",
        "\"a ",
        " b\"",
        "\n",
        "\r",
        "\r\n",
        " ",
        "\t",
        "hi",
        "é",
        "\\",
        "\u{3000}",
    ];

    proptest::proptest! {
        /// Every answer the grammar admits to its end is one the syntax's parser reads:
        /// pieces are added while the grammar admits them, and the answer ends where it
        /// admits the end.
        #[test]
        fn every_answer_the_grammar_admits_parses(
            picks in proptest::collection::vec(0usize..1000, 0..60),
            syntax in 0..CallSyntax::every().count(),
        ) {
            let syntax = CallSyntax::every().nth(syntax).unwrap();
            let g = open_grammar(syntax);
            let whole: Vec<String> = [
                json!({"sku": "P3", "size": "M"}),
                json!({"f": true}),
                json!({"q": "x", "f": false, "n": null}),
            ]
            .into_iter()
            .zip(["t_3876", "flags", "flags"])
            .map(|(a, n)| syntax.format(&ToolCall { name: n.into(), arguments: a }))
            .collect();
            let mut text = String::new();
            for p in picks {
                let piece = match CALL_PIECES.get(p % (CALL_PIECES.len() + whole.len())) {
                    Some(piece) => *piece,
                    None => &whole[p % (CALL_PIECES.len() + whole.len()) - CALL_PIECES.len()],
                };
                if g.admits(text.as_bytes(), piece.as_bytes()) {
                    text.push_str(piece);
                }
            }
            if g.admits(text.as_bytes(), b"\0") {
                let parsed = syntax.parse(&text);
                proptest::prop_assert!(parsed.is_ok(), "{}: {text:?}: {parsed:?}", syntax.as_str());
            }
        }
    }

    /// The bytes that open, close and separate the parts of a call, and a few of its content.
    const STRUCTURE: &[u8] = b",}])\" :=\n5k(";

    /// No byte the grammar admits leads to a dead end: after a valid call cut anywhere and two
    /// more structural bytes, some byte (or the end of the answer) still follows. A decoder
    /// that meets a dead end has no token left to draw and falls back to the model's
    /// unconstrained choice, which breaks the call anyway.
    #[test]
    fn no_admitted_byte_leads_to_a_dead_end() {
        let g_calls = [
            ("t_3876", json!({"sku": "P3", "size": "M"})),
            ("one", json!({"k": 5})),
            ("flags", json!({"q": "x", "f": false, "n": null})),
            ("match_goods", json!({"category": "sna"})),
        ];
        for syntax in CallSyntax::every() {
            let g = open_grammar(syntax);
            for (name, args) in &g_calls {
                let text = syntax.format(&ToolCall {
                    name: (*name).into(),
                    arguments: args.clone(),
                });
                for cut in 0..=text.len() {
                    let mut t = text.as_bytes()[..cut].to_vec();
                    // two more bytes: a dead end can open one byte after the wrong one
                    // (`,` then `"` in an object with no key left)
                    for &b1 in STRUCTURE {
                        if !g.admits(&t, &[b1]) {
                            continue;
                        }
                        t.push(b1);
                        for &b2 in STRUCTURE {
                            if !g.admits(&t, &[b2]) {
                                continue;
                            }
                            t.push(b2);
                            let next = STRUCTURE
                                .iter()
                                .copied()
                                .chain(0..=255u8)
                                .find(|&c| g.admits(&t, &[c]));
                            assert!(
                                next.is_some(),
                                "{}: {:?} has no next byte",
                                syntax.as_str(),
                                String::from_utf8_lossy(&t)
                            );
                            t.pop();
                        }
                        t.pop();
                    }
                }
            }
        }
    }

    /// A closed object with all its keys written takes `}` and nothing else: the comma
    /// that would start another key is refused (the decoder was left with no byte to
    /// draw after it and wrote `"region"` into a `target` object that has no such key).
    #[test]
    fn a_full_closed_object_must_close() {
        let schema = json!({"type": "object", "properties": {
            "target": {"type": "object", "properties": {"product_id": {"type": "string"}},
                       "required": ["product_id"]},
            "region": {"type": "string"}},
            "required": ["target", "region"]});
        let g = CallGrammar::new(CallSyntax::JsonTags, [("shipping_info", &schema)]);
        let before =
            br#"<tool_call>{"name":"shipping_info","arguments":{"target":{"product_id":"P7""#;
        assert!(!g.admits(before, b","));
        assert!(!g.admits(before, b"\",\"region"));
        assert!(g.admits(before, b"},\"region\":\"Sichuan\"}}</tool_call>"));
        // the same inside a string of the nested object: no second key after `product_id`
        assert!(!g.admits(&before[..before.len() - 4], b"\"P7\", \"size\""));
    }

    #[test]
    fn a_token_may_carry_a_whole_call() {
        let g = grammar(CallSyntax::JsonTags);
        assert!(g.admits(
            b"Sure! ",
            br#"<tool_call>{"name":"t_3876","arguments":{"sku":"P1"}}</tool_call>"#
        ));
        assert!(!g.admits(
            b"<tool_call>{\"name\":\"t_38",
            b"76\",\"arguments\":{\"id\""
        ));
        // a call broken before the check began is not judged again
        assert!(g.admits(b"<tool_call>{\"name\":\"nope\"}</tool_call>\n", b"Hi"));
    }
}
