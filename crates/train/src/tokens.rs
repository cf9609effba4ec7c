//! From chat trajectories to tokens with a loss mask, exactly as the agent loop renders them.
//!
//! The agent loop renders a conversation with the model's own chat template (tool results
//! as user turns, see [`hat_teacher::openai::wire_messages`]) and no tools argument; training
//! must see the same tokens. Chat templates such as SmolLM2's have no generation markers, so
//! the assistant spans are found by rendering successive prefixes of the conversation: the
//! tokens of "everything before assistant message k, plus the generation prompt" and of
//! "everything up to and including message k" must both be token prefixes of the full
//! rendering, and the difference is message k. The loss covers that span up to and including
//! its first end-of-generation token (what the model must emit to stop); what the template
//! puts after it (SmolLM2's newline) is context, never generated. A template that is not
//! prefix-preserving is an error, never a silently shifted mask.

use std::io::BufRead;
use std::path::Path;

use hat_data::Record;
use hat_harness::{Message, Role};
use hat_model::chat_template::{ChatInput, ChatTemplate};
use hat_model::Tokenizer;

use crate::error::{io, Result, TrainError};

/// A tokenised trajectory.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Where it came from (`file:line task_id`), for error messages.
    pub id: String,
    pub tokens: Vec<u32>,
    /// `mask[i]`: token `i` is one the model learns to produce.
    pub mask: Vec<bool>,
    /// `weight[i]`: how many times token `i`'s loss counts (empty: once each;
    /// [`Encoder::with_call_weight`]).
    pub weight: Vec<f32>,
}

impl Sample {
    /// Tokens that carry loss.
    pub fn loss_tokens(&self) -> usize {
        self.mask.iter().filter(|&&m| m).count()
    }
}

/// Renders and tokenises conversations for one model.
pub struct Encoder {
    tok: Tokenizer,
    template: ChatTemplate,
    /// Loss weight of an assistant turn that calls a tool (1: as any other turn).
    call_weight: f32,
    /// Loss weight of the decision tokens of agent trajectories (1: as any other token).
    decision_weight: f32,
}

/// The tool names and argument values of an agent trajectory's calls as the call text spells
/// them (`get_product`, `P5`, `30`), for [`Encoder::with_decision_weight`]; `None` for a
/// general answer (no tools, no calls), whose first token is not a choice between calling and
/// replying.
fn decision_values(record: &Record) -> Option<Vec<String>> {
    let has_tools = record.tools.as_array().is_some_and(|t| !t.is_empty());
    if !has_tools && record.calls.is_empty() {
        return None;
    }
    let mut values = Vec::new();
    for c in &record.calls {
        values.push(c.name.clone());
        leaf_values(&c.arguments, &mut values);
    }
    values.sort();
    values.dedup();
    Some(values)
}

/// The scalar leaves of a call's arguments, as text (strings as they are, numbers and
/// booleans as JSON writes them).
fn leaf_values(v: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    match v {
        Value::String(s) if !s.trim().is_empty() => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        Value::Bool(b) => out.push(b.to_string()),
        Value::Array(a) => a.iter().for_each(|x| leaf_values(x, out)),
        Value::Object(o) => o.values().for_each(|x| leaf_values(x, out)),
        _ => {}
    }
}

/// Byte ranges of `text` where one of `values` stands as a whole word (no letter or digit
/// right before or after it: `P5` in `{"id":"P5"}` or `id=P5`, not in `P51`).
fn value_spans(text: &str, values: &[String]) -> Vec<(usize, usize)> {
    let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    let mut spans = Vec::new();
    // an empty value (a call named "") would match between every two bytes
    for v in values.iter().filter(|v| !v.is_empty()) {
        let mut from = 0;
        while let Some(at) = text[from..].find(v.as_str()) {
            let (a, b) = (from + at, from + at + v.len());
            if !word(text[..a].chars().next_back()) && !word(text[b..].chars().next()) {
                spans.push((a, b));
            }
            from = a + v.chars().next().map_or(1, char::len_utf8);
        }
    }
    spans
}

impl Encoder {
    /// From the model's tokenizer and chat template source.
    pub fn new(tok: Tokenizer, template: Option<&str>) -> Result<Self> {
        let src = template.ok_or_else(|| {
            TrainError::Invalid(
                "the model has no chat template; training renders conversations with it".into(),
            )
        })?;
        let template = ChatTemplate::for_tokenizer(src, &tok)?;
        Ok(Self {
            tok,
            template,
            call_weight: 1.0,
            decision_weight: 1.0,
        })
    }

    /// Counts the loss of an assistant turn that calls a tool (one a tool result follows)
    /// `w` times: the decisions a live host is scored on (which tool, which product) are a
    /// few tokens of such a turn, while a reply's many tokens of phrasing carry most of a
    /// plain SFT gradient. Validation stays unweighted.
    pub fn with_call_weight(mut self, w: f32) -> Self {
        self.call_weight = w;
        self
    }

    /// Counts the loss of the decision tokens of agent trajectories `w` times, as
    /// [`Self::encode_record`] finds them: the first token of every trained assistant turn
    /// (calling or replying; under a call syntax, which opener) and, in a turn that calls a
    /// tool, the tokens that spell the tool's name and the call's argument values (which tool,
    /// which product, colour, region). The wrong tool and the wrong product, the commonest
    /// failures of trained models, are decided by a few such tokens among a trajectory's
    /// hundreds. A token that is also in a weighted calling turn counts the larger of the two
    /// weights. General answers (no tools, no calls) are left alone. Validation stays
    /// unweighted.
    pub fn with_decision_weight(mut self, w: f32) -> Self {
        self.decision_weight = w;
        self
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tok
    }

    fn tokens(&self, messages: &[Message], generation_prompt: bool) -> Result<Vec<u32>> {
        let text = self.template.render(&ChatInput {
            messages: hat_teacher::openai::wire_messages(messages),
            tools: None,
            add_generation_prompt: generation_prompt,
        })?;
        Ok(self.tok.encode(&text, true)?)
    }

    /// Tokens of a conversation followed by the generation prompt: what the model sees when it
    /// writes the next assistant turn.
    pub fn prompt_tokens(&self, messages: &[Message]) -> Result<Vec<u32>> {
        self.tokens(messages, true)
    }

    /// Tokens and loss mask of a conversation; `id` names it in errors.
    pub fn encode(&self, id: &str, messages: &[Message]) -> Result<Sample> {
        self.encode_within(id, messages, usize::MAX)
    }

    /// [`Self::encode`] for a conversation that may be longer than `limit` tokens: such a
    /// conversation comes back unmasked (its tokens only, for the caller to drop or refuse),
    /// without the render of every prefix that finding the assistant spans takes (quadratic in
    /// the turns: hours for an imported chat of thousands of turns).
    pub fn encode_within(&self, id: &str, messages: &[Message], limit: usize) -> Result<Sample> {
        self.encode_inner(id, messages, limit, None)
    }

    /// [`Self::encode_within`] for a dataset line: its record's calls tell which tokens are
    /// decisions ([`Self::with_decision_weight`]).
    pub fn encode_record(&self, t: &Trajectory, limit: usize) -> Result<Sample> {
        let decisions = (self.decision_weight != 1.0)
            .then(|| decision_values(&t.record))
            .flatten();
        self.encode_inner(&t.id, &t.record.messages, limit, decisions.as_deref())
    }

    fn encode_inner(
        &self,
        id: &str,
        messages: &[Message],
        limit: usize,
        decisions: Option<&[String]>,
    ) -> Result<Sample> {
        let tokens = self.tokens(messages, false).map_err(|e| {
            TrainError::Invalid(format!(
                "{id}: {e} (a conversation the chat template cannot render, or one so long it \
                 runs out of the template's fuel: remove it from the data)"
            ))
        })?;
        if tokens.len() > limit {
            return Ok(Sample {
                id: id.to_string(),
                mask: vec![false; tokens.len()],
                tokens,
                weight: Vec::new(),
            });
        }
        let mut mask = vec![false; tokens.len()];
        let mut weight = Vec::new();
        let eog = self.tok.eog_tokens();
        for (k, m) in messages.iter().enumerate() {
            // Untrained assistant turns (`weight: 0`) are context; their spans are still
            // checked below, so a template that shifts them is caught all the same.
            if m.role != Role::Assistant {
                continue;
            }
            let before = self.tokens(&messages[..k], true)?;
            let after = self.tokens(&messages[..=k], false)?;
            if !(after.starts_with(&before) && tokens.starts_with(&after)) {
                return Err(TrainError::NotPrefixPreserving {
                    sample: id.to_string(),
                    message: k,
                });
            }
            if !m.trained() {
                continue;
            }
            let calls = messages.get(k + 1).is_some_and(|n| n.role == Role::Tool);
            let c = if calls { self.call_weight } else { 1.0 };
            if (c != 1.0 || decisions.is_some()) && weight.is_empty() {
                weight = vec![1.0; tokens.len()];
            }
            let mut end = before.len();
            for i in before.len()..after.len() {
                mask[i] = true;
                if let Some(x) = weight.get_mut(i) {
                    *x = c;
                }
                end = i + 1;
                if eog.contains(&tokens[i]) {
                    break;
                }
            }
            if let Some(values) = decisions.filter(|_| end > before.len()) {
                let dw = self.decision_weight;
                let mut lift = |i: usize| weight[i] = weight[i].max(dw);
                lift(before.len());
                if calls && !values.is_empty() {
                    self.lift_values(&tokens[before.len()..end], values, |j| {
                        lift(before.len() + j)
                    });
                }
            }
        }
        Ok(Sample {
            id: id.to_string(),
            tokens,
            mask,
            weight,
        })
    }

    /// Calls `lift(j)` for each token `j` of `span` that overlaps an argument value.
    fn lift_values(&self, span: &[u32], values: &[String], mut lift: impl FnMut(usize)) {
        let mut bytes = Vec::new();
        let mut ends = Vec::with_capacity(span.len());
        for &t in span {
            bytes.extend(self.tok.token_bytes(t));
            ends.push(bytes.len());
        }
        // a span cut inside a multi-byte character reads as replacement characters there,
        // which no value matches; the offsets stay the tokens' own
        let text = String::from_utf8_lossy(&bytes);
        if text.len() != bytes.len() {
            return;
        }
        for (a, b) in value_spans(&text, values) {
            let first = ends.partition_point(|&e| e <= a);
            let last = ends.partition_point(|&e| e < b);
            (first..=last.min(span.len() - 1)).for_each(&mut lift);
        }
    }
}

/// A dataset line as the trainer needs it.
#[derive(Debug, Clone)]
pub struct Trajectory {
    /// `file:line task_id`.
    pub id: String,
    pub record: Record,
}

/// Line `i` (0-based) of the JSON-lines file `path`, as `BufRead::lines` gave it: a line that
/// is not UTF-8 is that line's error (named by number), any other failure the file's.
pub(crate) fn jsonl_line(path: &Path, i: usize, line: std::io::Result<String>) -> Result<String> {
    line.map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData => TrainError::Data {
            file: path.display().to_string(),
            line: i + 1,
            message: "not UTF-8 text: save the file as UTF-8".into(),
        },
        _ => io(path.display())(e),
    })
}

/// Reads `hat data gen` JSONL; a line that does not parse is an error naming file and line.
pub fn read_jsonl(path: &Path) -> Result<Vec<Trajectory>> {
    let f = std::fs::File::open(path).map_err(io(path.display()))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = jsonl_line(path, i, line)?;
        if line.trim().is_empty() {
            continue;
        }
        let record: Record =
            serde_json::from_str(line.trim_start_matches('\u{feff}')).map_err(|e| {
                TrainError::Data {
                    file: path.display().to_string(),
                    line: i + 1,
                    message: format!(
                "not a `hat data gen` record ({e}); each line must be one JSON object with \
                 `messages`, `tools`, `harness_hash`, `task_id`, ..."
            ),
                }
            })?;
        if record.messages.is_empty() {
            return Err(TrainError::Data {
                file: path.display().to_string(),
                line: i + 1,
                message: "the record has no messages".into(),
            });
        }
        if let Some((k, m)) = record.messages.iter().enumerate().find(|(_, m)| {
            m.weight.is_some_and(|w| w > 1) || (m.weight.is_some() && m.role != Role::Assistant)
        }) {
            return Err(TrainError::Data {
                file: path.display().to_string(),
                line: i + 1,
                message: format!(
                    "message {k} has `weight: {}` on a {:?} message; weight is 0 (not trained) or 1 \
                     (trained), on assistant messages only",
                    m.weight.unwrap_or_default(),
                    m.role
                ),
            });
        }
        out.push(Trajectory {
            id: format!("{}:{} {}", path.display(), i + 1, record.task_id),
            record,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_counts_only_as_a_whole_word() {
        let v = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let text = r#"{"id":"P5"} P51 xP5 id=P5 P5"#;
        let spans = value_spans(text, &v(&["P5"]));
        let got: Vec<&str> = spans.iter().map(|&(a, b)| &text[a..b]).collect();
        assert_eq!(got, ["P5", "P5", "P5"]);
        assert_eq!(spans[0].0, 7);
        // non-ASCII values and neighbours are found by character, not by byte
        let zh = "运到江苏要几天 江苏";
        assert_eq!(value_spans(zh, &v(&["江苏"])).len(), 1);
        assert_eq!(value_spans("size: M, Maple", &v(&["M"])), [(6, 7)]);
        // a call named "" in a data file: no span, no endless match
        assert_eq!(value_spans(zh, &v(&["", "江苏"])).len(), 1);
    }

    #[test]
    fn leaf_values_spell_numbers_as_json_does() {
        let mut out = Vec::new();
        let args = serde_json::json!({"a": "P5", "b": 30, "c": 19.9, "d": {"e": [true, " "]}});
        leaf_values(&args, &mut out);
        out.sort();
        assert_eq!(out, ["19.9", "30", "P5", "true"]);
    }
}
