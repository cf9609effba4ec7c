//! The scorer: deterministic pass/fail with components and reasons.
//!
//! The same function is the evaluation metric and the RL reward, so it must
//! be fast and hard to game: a reply that recites every number it saw trips
//! the wrong-answer and number-budget checks, and calls are judged by the
//! canonical operation and arguments they bind to, not by their spelling.

use serde::Serialize;
use serde_json::{Map, Value};

use hat_harness::text::{contains_phrase, find_phrase};
use hat_harness::{CallSyntax, Harness, Op, Target, ToolCall};

use crate::gold::{Expectations, GoldArg};
use crate::numbers;

/// What an agent did on a task.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Attempt {
    /// Every call, as written, in order.
    pub calls: Vec<ToolCall>,
    /// Outputs that tried to call a tool and failed to parse, and other format faults.
    pub format_errors: Vec<String>,
    /// The final reply sent to viewers.
    pub reply: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Component {
    pub name: &'static str,
    pub pass: bool,
    /// Why it failed (empty when it passed).
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Score {
    pub pass: bool,
    pub components: Vec<Component>,
}

impl Score {
    /// The reasons of failed components, joined.
    pub fn reason(&self) -> String {
        self.components
            .iter()
            .filter(|c| !c.pass)
            .map(|c| format!("{}: {}", c.name, c.reason))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Fraction of components passed: a dense reward signal for RL.
    pub fn fraction(&self) -> f64 {
        self.components.iter().filter(|c| c.pass).count() as f64 / self.components.len() as f64
    }

    pub fn component(&self, name: &str) -> Option<&Component> {
        self.components.iter().find(|c| c.name == name)
    }
}

/// Markers of the prompt's structure that never belong in a reply (besides every call
/// syntax's [`CallSyntax::marker`], see [`scaffolding_in`]).
pub const SCAFFOLDING: &[&str] = &[
    "[comment]",
    "[viewer_join]",
    "[gift]",
    "[purchase]",
    "[operator_cue]",
    "[note]",
    "[tool_result",
    "[runtime]",
    "</tool_call>",
];

/// The first piece of prompt scaffolding or tool-call markup (of any of the nine call
/// syntaxes, and of `own`, the harness's, which may be a family member) that `reply`
/// contains: text viewers would see on screen.
pub fn scaffolding_in(reply: &str, own: CallSyntax) -> Option<&'static str> {
    CallSyntax::ALL
        .iter()
        .map(|c| c.marker())
        .chain(std::iter::once(own.marker()))
        .chain(SCAFFOLDING.iter().copied())
        .find(|m| reply.contains(m))
}

pub const COMPONENTS: [&str; 5] = ["format", "calls", "arguments", "facts", "constraints"];

struct Bound {
    op: Option<Op>,
    canonical: Option<Map<String, Value>>,
    note: String,
}

fn bind(h: &Harness, c: &ToolCall) -> Bound {
    let Some(tool) = h.tool(&c.name) else {
        return Bound {
            op: None,
            canonical: None,
            // the state's own names beside the wrong one: reading failures item by item
            // shows whether the model ignored the tool list or garbled one of its names
            note: format!(
                "unknown tool `{}` (this harness has: {})",
                c.name,
                h.tool_names()
            ),
        };
    };
    let op = tool.binding.target.op();
    if tool.binding.target == Target::Noop {
        return Bound {
            op,
            canonical: None,
            note: format!("`{}` does nothing here", c.name),
        };
    }
    if let Err(e) = h.validate_args(&c.name, &c.arguments) {
        return Bound {
            op,
            canonical: None,
            note: e,
        };
    }
    match tool.binding.to_canonical(&c.arguments) {
        Ok(m) => Bound {
            op,
            canonical: Some(m),
            note: String::new(),
        },
        Err(e) => Bound {
            op,
            canonical: None,
            note: e,
        },
    }
}

fn norm_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::String(x), Value::String(y)) => x.trim().eq_ignore_ascii_case(y.trim()),
        _ => match (numeric(a), numeric(b)) {
            (Some(x), Some(y)) => numbers::same(x, y),
            _ => a == b,
        },
    }
}

fn numeric(v: &Value) -> Option<f64> {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

fn args_match(gold: &[GoldArg], made: &Map<String, Value>) -> Result<(), String> {
    for g in gold {
        match made.get(&g.name) {
            None if g.must => return Err(format!("missing `{}`", g.name)),
            None => {}
            Some(v) if !g.accept.is_empty() && !g.accept.iter().any(|a| norm_eq(a, v)) => {
                let want: Vec<String> = g.accept.iter().map(Value::to_string).collect();
                return Err(format!(
                    "`{}` is {v}, expected {}",
                    g.name,
                    want.join(" or ")
                ));
            }
            Some(_) => {}
        }
    }
    for k in made.keys() {
        if !gold.iter().any(|g| &g.name == k) {
            return Err(format!("unexpected argument `{k}`"));
        }
    }
    Ok(())
}

/// Scores an attempt against gold under the harness it ran in.
pub fn score(exp: &Expectations, harness: &Harness, attempt: &Attempt) -> Score {
    let mut comps = Vec::with_capacity(5);
    let reply = attempt.reply.trim();

    // Format: everything parsed, within the call budget, a reply at the end.
    let mut fmt = Vec::new();
    fmt.extend(attempt.format_errors.iter().cloned());
    if reply.is_empty() {
        fmt.push("no reply to viewers".into());
    }
    // Prompt scaffolding in a reply means the model echoed its input instead
    // of answering; viewers would see it on screen.
    if let Some(m) = scaffolding_in(reply, harness.syntax) {
        fmt.push(format!("the reply contains prompt scaffolding `{m}`"));
    }
    if attempt.calls.len() > exp.max_calls.max(exp.calls.len()) * 2 {
        fmt.push(format!("{} calls is too many", attempt.calls.len()));
    }
    comps.push(Component {
        name: "format",
        pass: fmt.is_empty(),
        reason: fmt.join("; "),
    });

    // Calls: every gold op made; nothing outside gold and the allowed look-ups.
    let bound: Vec<Bound> = attempt.calls.iter().map(|c| bind(harness, c)).collect();
    let mut call_issues = Vec::new();
    for (c, b) in attempt.calls.iter().zip(&bound) {
        match b.op {
            Some(op) if exp.calls.iter().any(|g| g.op == op) || exp.optional_ops.contains(&op) => {}
            Some(op) => call_issues.push(format!(
                "called `{}` ({op}), which this task does not need",
                c.name
            )),
            None => call_issues.push(b.note.clone()),
        }
    }
    for g in &exp.calls {
        let need = exp.calls.iter().filter(|x| x.op == g.op).count();
        let made = bound.iter().filter(|b| b.op == Some(g.op)).count();
        if made < need {
            call_issues.push(format!("did not call {}", g.op));
        }
    }
    call_issues.dedup();
    if exp.calls.is_empty()
        && exp.optional_ops.is_empty()
        && !attempt.calls.is_empty()
        && call_issues.is_empty()
    {
        call_issues.push("no tool is needed here".into());
    }
    comps.push(Component {
        name: "calls",
        pass: call_issues.is_empty(),
        reason: call_issues.join("; "),
    });

    // Arguments: each gold call matched by a distinct made call with the right canonical args.
    let mut used = vec![false; bound.len()];
    let mut arg_issues = Vec::new();
    for g in &exp.calls {
        let mut last_err = format!("no valid {} call", g.op);
        let mut found = false;
        for (i, b) in bound.iter().enumerate() {
            if used[i] || b.op != Some(g.op) {
                continue;
            }
            match &b.canonical {
                None => last_err = b.note.clone(),
                Some(m) => match args_match(&g.args, m) {
                    Ok(()) => {
                        used[i] = true;
                        found = true;
                        break;
                    }
                    Err(e) => last_err = format!("{}: {e}", g.op),
                },
            }
        }
        if !found {
            arg_issues.push(last_err);
        }
    }
    comps.push(Component {
        name: "arguments",
        pass: arg_issues.is_empty(),
        reason: arg_issues.join("; "),
    });

    // Facts: stated, not contradicted, not buried in a list of every number.
    let mut stripped = reply.to_string();
    let mut strip: Vec<&String> = exp.strip.iter().filter(|s| !s.trim().is_empty()).collect();
    strip.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for s in strip {
        while let Some((a, b)) = find_phrase(&stripped, s) {
            stripped.replace_range(a..b, " ");
        }
    }
    let roles = numbers::with_roles(&stripped);
    let nums = numbers::distinct(&roles.iter().map(|&(v, _)| v).collect::<Vec<_>>());
    let mut fact_issues = Vec::new();
    for f in &exp.facts {
        // A number doing another job states no fact: "link 5" is not 5 days, "20% off" is not
        // 20 minutes. Unless that is the fact's own job: a link fact, or a fact its gold
        // phrase writes as a percentage ("80% cotton").
        let fits = |n: f64, role: numbers::Role| match role {
            numbers::Role::Plain => true,
            numbers::Role::Link => f.label == crate::gold::LINK_FACT,
            numbers::Role::Percent => f.phrases.iter().any(|p| {
                numbers::with_roles(p)
                    .iter()
                    .any(|&(m, r)| r == numbers::Role::Percent && numbers::same(m, n))
            }),
        };
        let by_num = f.numbers.iter().any(|n| {
            roles
                .iter()
                .any(|&(m, role)| numbers::same(m, *n) && fits(*n, role))
        });
        let by_phrase = f.phrases.iter().any(|p| contains_phrase(reply, p));
        if !by_num && !by_phrase {
            let want: Vec<String> = f
                .numbers
                .iter()
                .map(|n| n.to_string())
                .chain(f.phrases.iter().take(3).cloned())
                .collect();
            fact_issues.push(format!("does not state {} ({})", f.label, want.join(" / ")));
        }
    }
    for w in &exp.wrong_numbers {
        if nums.iter().any(|m| numbers::same(*m, *w)) {
            fact_issues.push(format!("states the wrong figure {w}"));
        }
    }
    for w in &exp.wrong_phrases {
        if contains_phrase(reply, w) {
            fact_issues.push(format!("mentions `{w}`, which does not fit"));
        }
    }
    let known: Vec<f64> = exp
        .facts
        .iter()
        .flat_map(|f| f.numbers.iter().copied())
        .chain(exp.context_numbers.iter().copied())
        .collect();
    let extra = nums
        .iter()
        .filter(|m| !known.iter().any(|k| numbers::same(*k, **m)))
        .count();
    if extra > exp.number_slack {
        fact_issues.push(format!(
            "{extra} unexplained numbers (at most {})",
            exp.number_slack
        ));
    }
    comps.push(Component {
        name: "facts",
        pass: fact_issues.is_empty(),
        reason: fact_issues.join("; "),
    });

    // Constraints: the harness's rules and the task's own.
    let c = &exp.constraints;
    let mut con = Vec::new();
    for f in c.forbid.iter().chain(&exp.forbid) {
        if contains_phrase(reply, f) {
            con.push(format!("says \"{f}\""));
        }
    }
    for r in &c.require {
        if !contains_phrase(reply, r) {
            con.push(format!("lacks \"{r}\""));
        }
    }
    for e in &c.ends_with {
        if !reply.ends_with(e.trim()) {
            con.push(format!("does not end with \"{e}\""));
        }
    }
    let n = reply.chars().count();
    if n > c.max_chars {
        con.push(format!("{n} characters, limit {}", c.max_chars));
    }
    comps.push(Component {
        name: "constraints",
        pass: con.is_empty(),
        reason: con.join("; "),
    });

    Score {
        pass: comps.iter().all(|c| c.pass),
        components: comps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_left_in_a_reply_is_scaffolding_in_every_syntax() {
        let call = ToolCall {
            name: "get_price".into(),
            arguments: serde_json::json!({"product": 3}),
        };
        for syntax in CallSyntax::ALL {
            let reply = format!("Sure! {} It is on sale.", syntax.format(&call));
            assert_eq!(
                scaffolding_in(&reply, CallSyntax::JsonTags),
                Some(syntax.marker()),
                "{} call left in a reply",
                syntax.as_str()
            );
        }
        assert_eq!(
            scaffolding_in("[comment] ann: hi", CallSyntax::JsonTags),
            Some("[comment]")
        );
    }

    #[test]
    fn plain_replies_hold_no_scaffolding() {
        for reply in [
            "Hi ann, welcome! The hoodie is $39.90 and size M is in stock.",
            "Call us any time, the action starts at 8 pm: function over form!",
            "我们的连帽衫有M码，价格39.90元。",
        ] {
            assert_eq!(scaffolding_in(reply, CallSyntax::JsonTags), None, "{reply}");
        }
    }
}
