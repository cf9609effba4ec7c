//! Hooks: the harness's functions at fixed points of a turn.
//!
//! `compile` turns a [`HookSpec`] into a typed [`Hook`], reporting fields that
//! do not belong to the action; the runtime functions apply hooks to events,
//! tool results and draft replies and record every decision.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use crate::command::{self, CommandOutcome};
use crate::op::Op;
use crate::spec::HookSpec;
use crate::text;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    ViewerJoin,
    Comment,
    Gift,
    Purchase,
    OperatorCue,
    AfterTool,
    BeforeReply,
}

impl EventKind {
    pub const ALL: [EventKind; 7] = [
        EventKind::ViewerJoin,
        EventKind::Comment,
        EventKind::Gift,
        EventKind::Purchase,
        EventKind::OperatorCue,
        EventKind::AfterTool,
        EventKind::BeforeReply,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::ViewerJoin => "viewer_join",
            EventKind::Comment => "comment",
            EventKind::Gift => "gift",
            EventKind::Purchase => "purchase",
            EventKind::OperatorCue => "operator_cue",
            EventKind::AfterTool => "after_tool",
            EventKind::BeforeReply => "before_reply",
        }
    }
    pub fn parse(s: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|e| e.as_str() == s)
    }
    /// Events that arrive from the stream (as opposed to points inside a turn).
    pub fn is_stream_event(self) -> bool {
        !matches!(self, EventKind::AfterTool | EventKind::BeforeReply)
    }
    /// The `{{ name }}` variables a hook text can use at this event. `after_tool` and
    /// `before_reply` run inside a turn of any stream event, so they see any of them (and an
    /// empty value where the turn's event lacks one).
    pub fn vars(self) -> &'static [&'static str] {
        match self {
            EventKind::ViewerJoin => &["viewer"],
            EventKind::Comment => &["viewer", "comment"],
            EventKind::Gift => &["viewer", "gift", "count"],
            EventKind::Purchase => &["viewer", "product", "quantity"],
            EventKind::OperatorCue => &["cue"],
            EventKind::AfterTool | EventKind::BeforeReply => &[
                "viewer", "comment", "gift", "count", "product", "quantity", "cue",
            ],
        }
    }
}

/// What a failed `check` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFail {
    /// Feed the failure back to the model once; after that, rewrite.
    Retry,
    /// Fix the reply mechanically (drop forbidden phrases, add required ones, cut to length).
    Rewrite,
    /// Replace the reply by the hook's fallback text.
    Fallback,
}

/// What a failing `command` hook (crash, timeout, bad output) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    Allow,
    Block,
    Fallback,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CheckRule {
    pub forbid: Vec<String>,
    pub require: Vec<String>,
    pub ends_with: Option<String>,
    pub max_chars: Option<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Check {
        rule: CheckRule,
        on_fail: OnFail,
        fallback: Option<String>,
    },
    Rewrite {
        replace: Vec<(String, String)>,
        append: Option<String>,
        truncate_chars: Option<usize>,
    },
    Inject {
        note: String,
    },
    DropFields {
        fields: Vec<String>,
    },
    Command {
        argv: Vec<String>,
        /// Variables passed through from the server's environment.
        env: Vec<String>,
        timeout: Duration,
        on_error: OnError,
        fallback: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Hook {
    pub id: String,
    pub event: EventKind,
    pub match_op: Option<Op>,
    pub match_tool: Option<String>,
    pub describe: Option<String>,
    pub action: Action,
}

/// Model turns an agent turn takes at most by default (tool rounds and retries included);
/// the hook time budget assumes it.
pub const DEFAULT_MODEL_TURNS: usize = 5;

pub const ACTIONS: [&str; 5] = ["check", "rewrite", "inject", "drop_fields", "command"];
pub const DEFAULT_FALLBACK: &str =
    "Thanks for asking! Let me double-check that and come back to you in a moment.";

/// Every `{{ name }}` in a hook's texts must be closed and name a variable of its event: an
/// unknown or unclosed one would send the viewer an empty gap or raw braces.
fn lint_placeholders(spec: &HookSpec, event: EventKind, errs: &mut Vec<String>) {
    let texts = spec
        .forbid
        .iter()
        .chain(&spec.require)
        .map(|t| ("forbid/require", t))
        .chain(spec.ends_with.iter().map(|t| ("ends_with", t)))
        .chain(spec.fallback.iter().map(|t| ("fallback", t)))
        .chain(spec.append.iter().map(|t| ("append", t)))
        .chain(spec.note.iter().map(|t| ("note", t)))
        .chain(
            spec.replace
                .iter()
                .flatten()
                .flat_map(|(k, v)| [("replace", k), ("replace", v)]),
        );
    for (field, t) in texts {
        match text::placeholders(t) {
            Err(e) => errs.push(format!("hook `{}`: {field}: {e}", spec.id)),
            Ok(names) => {
                for n in names {
                    if !event.vars().contains(&n) {
                        errs.push(format!(
                            "hook `{}`: {field}: `{{{{ {n} }}}}` is not a variable of event `{}` \
                             (it has: {})",
                            spec.id,
                            event.as_str(),
                            event.vars().join(", ")
                        ));
                    }
                }
            }
        }
    }
}

/// Compiles one hook; `Err` holds every problem found.
/// Check rules that can never pass, or that contradict themselves: every reply would fail
/// them, and data generation would write nothing.
fn lint_check(id: &str, rule: &CheckRule) -> Vec<String> {
    let mut errs = Vec::new();
    let blank = |v: &[String]| v.iter().any(|p| p.trim().is_empty());
    if blank(&rule.forbid) || blank(&rule.require) {
        errs.push(format!(
            "hook `{id}`: an empty phrase in forbid or require never matches anything; remove it"
        ));
    }
    for f in &rule.forbid {
        if let Some(r) = rule
            .require
            .iter()
            .find(|r| !f.trim().is_empty() && crate::text::contains_phrase(r, f))
        {
            errs.push(format!(
                "hook `{id}`: `{r}` is required but contains the forbidden `{f}`, so no reply can pass"
            ));
        }
    }
    if let Some(e) = &rule.ends_with {
        if rule
            .forbid
            .iter()
            .any(|f| !f.trim().is_empty() && crate::text::contains_phrase(e, f))
        {
            errs.push(format!(
                "hook `{id}`: ends_with `{e}` contains a forbidden phrase, so no reply can pass"
            ));
        }
    }
    if let Some(m) = rule.max_chars {
        if m == 0 {
            errs.push(format!("hook `{id}`: max_chars = 0 rejects every reply"));
        }
        if let Some(r) = rule.require.iter().find(|r| r.chars().count() > m) {
            errs.push(format!(
                "hook `{id}`: the required `{}` is longer than max_chars = {m}, so no reply can pass",
                crate::text::truncate_chars(r, 60)
            ));
        }
        let needed = rule.ends_with.as_deref().map_or(0, |e| e.chars().count());
        if m > 0 && needed >= m {
            errs.push(format!(
                "hook `{id}`: ends_with needs {needed} characters, not less than max_chars = {m}"
            ));
        }
    }
    errs
}

/// Check rules of two hooks that contradict each other. Every `check` hook reviews every
/// reply, so a phrase one requires and another forbids, or two endings, reject every reply
/// as surely as a contradiction inside one hook.
pub fn lint_check_pair(a: (&str, &CheckRule), b: (&str, &CheckRule)) -> Vec<String> {
    use crate::text::contains_phrase;
    let mut errs = Vec::new();
    for ((id, rule), (other_id, other)) in [(a, b), (b, a)] {
        for f in other.forbid.iter().filter(|f| !f.trim().is_empty()) {
            if let Some(r) = rule.require.iter().find(|r| contains_phrase(r, f)) {
                errs.push(format!(
                    "hook `{id}` requires `{r}`, which contains `{f}`, forbidden by hook `{other_id}`: no reply can pass both"
                ));
            }
            if let Some(e) = rule.ends_with.as_ref().filter(|e| contains_phrase(e, f)) {
                errs.push(format!(
                    "hook `{id}` needs the ending `{e}`, which contains `{f}`, forbidden by hook `{other_id}`: no reply can pass both"
                ));
            }
        }
        if let (Some(e), Some(m)) = (&rule.ends_with, other.max_chars) {
            let n = e.chars().count();
            if n >= m {
                errs.push(format!(
                    "hook `{id}` needs the ending `{e}` ({n} characters), not less than hook `{other_id}`'s max_chars = {m}: no reply can pass both"
                ));
            }
        }
    }
    if let (Some(x), Some(y)) = (&a.1.ends_with, &b.1.ends_with) {
        let (x, y) = (x.trim(), y.trim());
        if !x.ends_with(y) && !y.ends_with(x) {
            errs.push(format!(
                "hooks `{}` and `{}` need different endings (`{x}`, `{y}`): no reply can end with both",
                a.0, b.0
            ));
        }
    }
    errs
}

pub fn compile(spec: &HookSpec) -> Result<Hook, Vec<String>> {
    let mut errs = Vec::new();
    if spec.id.trim().is_empty() {
        errs.push("hook has an empty id".to_string());
    }
    let event = EventKind::parse(&spec.event);
    if event.is_none() {
        errs.push(format!(
            "hook `{}`: unknown event `{}` (known: {})",
            spec.id,
            spec.event,
            EventKind::ALL.map(EventKind::as_str).join(", ")
        ));
    }
    // Which optional fields each action takes; anything else is a mistake the
    // operator wants to hear about (a `forbid` on an inject hook does nothing).
    let set: Vec<&str> = [
        ("forbid", !spec.forbid.is_empty()),
        ("require", !spec.require.is_empty()),
        ("ends_with", spec.ends_with.is_some()),
        ("max_chars", spec.max_chars.is_some()),
        ("on_fail", spec.on_fail.is_some()),
        ("fallback", spec.fallback.is_some()),
        ("replace", spec.replace.is_some()),
        ("append", spec.append.is_some()),
        ("truncate_chars", spec.truncate_chars.is_some()),
        ("note", spec.note.is_some()),
        ("fields", !spec.fields.is_empty()),
        ("command", !spec.command.is_empty()),
        ("timeout_ms", spec.timeout_ms.is_some()),
        ("on_error", spec.on_error.is_some()),
        ("env", !spec.env.is_empty()),
    ]
    .into_iter()
    .filter_map(|(k, on)| on.then_some(k))
    .collect();
    let allowed: &[&str] = match spec.action.as_str() {
        "check" => &[
            "forbid",
            "require",
            "ends_with",
            "max_chars",
            "on_fail",
            "fallback",
        ],
        "rewrite" => &["replace", "append", "truncate_chars"],
        "inject" => &["note"],
        "drop_fields" => &["fields"],
        "command" => &["command", "timeout_ms", "on_error", "fallback", "env"],
        other => {
            errs.push(format!(
                "hook `{}`: unknown action `{other}` (known: {})",
                spec.id,
                ACTIONS.join(", ")
            ));
            &[]
        }
    };
    if ACTIONS.contains(&spec.action.as_str()) {
        for f in set.iter().filter(|f| !allowed.contains(f)) {
            errs.push(format!(
                "hook `{}`: field `{f}` does not apply to action `{}` (it takes: {})",
                spec.id,
                spec.action,
                allowed.join(", ")
            ));
        }
    }
    let (mut match_op, mut match_tool) = (None, None);
    for (k, v) in spec.matcher.iter().flatten() {
        match k.as_str() {
            "op" => match v.parse::<Op>() {
                Ok(op) => match_op = Some(op),
                Err(e) => errs.push(format!("hook `{}`: match.op: {e}", spec.id)),
            },
            "tool" => match_tool = Some(v.clone()),
            other => errs.push(format!(
                "hook `{}`: unknown match key `{other}` (use op or tool)",
                spec.id
            )),
        }
    }
    let on_fail = match spec.on_fail.as_deref() {
        None | Some("retry") => OnFail::Retry,
        Some("rewrite") => OnFail::Rewrite,
        Some("fallback") => OnFail::Fallback,
        Some(o) => {
            errs.push(format!(
                "hook `{}`: on_fail `{o}` must be retry, rewrite or fallback",
                spec.id
            ));
            OnFail::Retry
        }
    };
    let on_error = match spec.on_error.as_deref() {
        None | Some("allow") => OnError::Allow,
        Some("block") => OnError::Block,
        Some("fallback") => OnError::Fallback,
        Some(o) => {
            errs.push(format!(
                "hook `{}`: on_error `{o}` must be allow, block or fallback",
                spec.id
            ));
            OnError::Allow
        }
    };
    if let Some(ev) = event {
        lint_placeholders(spec, ev, &mut errs);
    }
    match (spec.action.as_str(), &spec.fallback) {
        ("check", None) if on_fail == OnFail::Fallback => errs.push(format!(
            "hook `{}`: on_fail = \"fallback\" needs `fallback = \"...\"`, the reply sent \
             instead (in the persona's language)",
            spec.id
        )),
        ("check", Some(_)) if on_fail != OnFail::Fallback => errs.push(format!(
            "hook `{}`: `fallback` is never sent because on_fail is not \"fallback\"; remove it \
             or set on_fail = \"fallback\"",
            spec.id
        )),
        // only a reply hook replaces the reply; a stream-event or tool hook's failure blocks
        ("command", None)
            if on_error == OnError::Fallback && event == Some(EventKind::BeforeReply) =>
        {
            errs.push(format!(
                "hook `{}`: on_error = \"fallback\" needs `fallback = \"...\"`, the reply sent \
             instead (in the persona's language)",
                spec.id
            ))
        }
        _ => {}
    }
    let action = match spec.action.as_str() {
        "check" => {
            let rule = CheckRule {
                forbid: spec.forbid.clone(),
                require: spec.require.clone(),
                ends_with: spec.ends_with.clone(),
                max_chars: spec.max_chars,
            };
            if rule.forbid.is_empty()
                && rule.require.is_empty()
                && rule.ends_with.is_none()
                && rule.max_chars.is_none()
            {
                errs.push(format!("hook `{}`: a check needs at least one of forbid, require, ends_with, max_chars", spec.id));
            }
            errs.extend(lint_check(&spec.id, &rule));
            Some(Action::Check {
                rule,
                on_fail,
                fallback: spec.fallback.clone(),
            })
        }
        "rewrite" => {
            if spec.replace.is_none() && spec.append.is_none() && spec.truncate_chars.is_none() {
                errs.push(format!(
                    "hook `{}`: a rewrite needs at least one of replace, append, truncate_chars",
                    spec.id
                ));
            }
            if spec.replace.iter().flatten().any(|(a, _)| a.is_empty()) {
                // "" matches between every two characters: the text would be interleaved
                errs.push(format!(
                    "hook `{}`: an empty phrase in replace matches everywhere; remove it",
                    spec.id
                ));
            }
            let replace = spec
                .replace
                .iter()
                .flatten()
                .map(|(a, b)| (a.clone(), b.clone()))
                .collect();
            Some(Action::Rewrite {
                replace,
                append: spec.append.clone(),
                truncate_chars: spec.truncate_chars,
            })
        }
        "inject" => match &spec.note {
            Some(n) if !n.trim().is_empty() => Some(Action::Inject { note: n.clone() }),
            _ => {
                errs.push(format!("hook `{}`: an inject hook needs a `note`", spec.id));
                None
            }
        },
        "drop_fields" => {
            if spec.fields.is_empty() {
                errs.push(format!(
                    "hook `{}`: drop_fields needs a non-empty `fields` list",
                    spec.id
                ));
            }
            Some(Action::DropFields {
                fields: spec.fields.clone(),
            })
        }
        "command" => {
            match spec.command.first() {
                None => errs.push(format!(
                    "hook `{}`: a command hook needs `command = [\"./hooks/program\", \"arg\", ...]`",
                    spec.id
                )),
                Some(p) if !command::is_local_program(p) => errs.push(format!(
                    "hook `{}`: the program `{p}` must be a file inside the harness folder, written \
                     `./path` without `..` (e.g. `./hooks/check.sh`; name an interpreter on the \
                     script's #! line)",
                    spec.id
                )),
                Some(_) => {}
            }
            let ms = spec.timeout_ms.unwrap_or(command::DEFAULT_TIMEOUT_MS);
            if ms == 0 || ms > 60_000 {
                errs.push(format!(
                    "hook `{}`: timeout_ms must be between 1 and 60000",
                    spec.id
                ));
            }
            for name in &spec.env {
                if !command::valid_env_name(name) {
                    errs.push(format!(
                        "hook `{}`: env `{}` is not a variable name other than PATH (letters, \
                         digits and `_`, not starting with a digit, at most 64)",
                        spec.id,
                        text::truncate_chars(name, 64)
                    ));
                }
            }
            if spec.env.len() > command::MAX_ENV {
                errs.push(format!(
                    "hook `{}`: at most {} env variables",
                    spec.id,
                    command::MAX_ENV
                ));
            }
            Some(Action::Command {
                argv: spec.command.clone(),
                env: spec.env.clone(),
                timeout: Duration::from_millis(ms),
                on_error,
                fallback: spec.fallback.clone(),
            })
        }
        _ => None,
    };
    if let (Some(ev), Some(act)) = (event, &action) {
        let fits = match act {
            Action::Check { .. } | Action::Rewrite { .. } => ev == EventKind::BeforeReply,
            Action::DropFields { .. } => ev == EventKind::AfterTool,
            Action::Inject { .. } => ev.is_stream_event(),
            Action::Command { .. } => true,
        };
        if !fits {
            errs.push(format!(
                "hook `{}`: action `{}` cannot run on event `{}`",
                spec.id, spec.action, spec.event
            ));
        }
    }
    if (match_op.is_some() || match_tool.is_some()) && event != Some(EventKind::AfterTool) {
        errs.push(format!(
            "hook `{}`: `match` only applies to after_tool hooks",
            spec.id
        ));
    }
    match (event, action) {
        (Some(event), Some(action)) if errs.is_empty() => Ok(Hook {
            id: spec.id.clone(),
            event,
            match_op,
            match_tool,
            describe: spec.describe.clone(),
            action,
        }),
        _ => Err(errs),
    }
}

/// One hook decision, recorded in the transcript.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HookDecision {
    pub hook: String,
    pub event: EventKind,
    pub outcome: String,
}

/// How the decisions that caught a rule-breaking draft begin (`review_reply` writes them).
const CAUGHT: [&str; 5] = ["retry:", "repaired:", "fallback:", "blocked", "reconciled:"];

impl HookDecision {
    /// Whether a reply hook caught a draft that broke a rule (and had it retried, repaired,
    /// replaced or blocked): a compliance incident the hooks prevented. Routine rewrites
    /// (`replace` wording) and hook failures are not.
    pub fn caught_violation(&self) -> bool {
        self.event == EventKind::BeforeReply && CAUGHT.iter().any(|c| self.outcome.starts_with(c))
    }
}

impl CheckRule {
    /// Each way `reply` breaks the rule, in words the model can act on.
    pub fn violations(&self, reply: &str, vars: &Value) -> Vec<String> {
        let mut v = Vec::new();
        for f in &self.forbid {
            let f = text::fill_vars(f, vars);
            if text::contains_phrase(reply, &f) {
                v.push(format!("must not say \"{f}\""));
            }
        }
        for r in &self.require {
            let r = text::fill_vars(r, vars);
            if !text::contains_phrase(reply, &r) {
                v.push(format!("must include \"{r}\""));
            }
        }
        if let Some(e) = &self.ends_with {
            let e = text::fill_vars(e, vars);
            if !reply.trim_end().ends_with(e.trim()) {
                v.push(format!("must end with \"{e}\""));
            }
        }
        if let Some(m) = self.max_chars {
            let n = reply.chars().count();
            if n > m {
                v.push(format!("must be at most {m} characters (it has {n})"));
            }
        }
        v
    }

    /// Mechanical repair: drop forbidden phrases, add required ones before
    /// the sign-off, keep the sign-off last, and cut the body so the whole
    /// reply fits.
    pub fn repair(&self, reply: &str, vars: &Value) -> String {
        let ending = self
            .ends_with
            .as_ref()
            .map(|e| text::fill_vars(e, vars).trim().to_string())
            .filter(|e| !e.is_empty());
        let mut body = reply.trim_end().to_string();
        if let Some(e) = &ending {
            // The sign-off goes last exactly once, wherever an earlier repair left it.
            body = text::tidy_spaces(&body.replace(e.as_str(), " "));
        }
        for f in &self.forbid {
            body = text::remove_phrase(&body, &text::fill_vars(f, vars));
        }
        let required: Vec<String> = self
            .require
            .iter()
            .map(|r| text::fill_vars(r, vars).trim().to_string())
            .filter(|r| !r.is_empty())
            .collect();
        if let Some(m) = self.max_chars {
            // Room for every required phrase and the sign-off, in case the
            // cut removes a phrase the body already had.
            let reserve: usize = required
                .iter()
                .chain(&ending)
                .map(|p| p.chars().count() + 1)
                .sum();
            body = text::truncate_chars(&body, m.saturating_sub(reserve));
        }
        let mut tail = String::new();
        for r in &required {
            if !text::contains_phrase(&body, r) && !text::contains_phrase(&tail, r) {
                tail.push(' ');
                tail.push_str(r);
            }
        }
        if let Some(e) = &ending {
            tail.push(' ');
            tail.push_str(e);
        }
        text::tidy_spaces(&format!("{body}{tail}"))
    }

    /// All rules in one: what a reply must meet when several checks apply.
    pub fn merged<'a>(rules: impl IntoIterator<Item = &'a CheckRule>) -> CheckRule {
        let mut m = CheckRule {
            forbid: vec![],
            require: vec![],
            ends_with: None,
            max_chars: None,
        };
        for r in rules {
            m.forbid.extend(r.forbid.iter().cloned());
            m.require.extend(r.require.iter().cloned());
            if r.ends_with.is_some() {
                m.ends_with = r.ends_with.clone();
            }
            m.max_chars = match (m.max_chars, r.max_chars) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        m
    }
}

/// The result of reviewing a draft reply against the `before_reply` hooks.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplyReview {
    /// Send this reply (possibly rewritten).
    Accept(String),
    /// Ask the model to write the reply again, with this feedback.
    Retry(String),
}

/// Runs `before_reply` hooks over a draft. `attempt` counts previous retries:
/// a `retry` check asks the model once, then repairs.
pub fn review_reply(
    hooks: &[Hook],
    root: Option<&Path>,
    draft: &str,
    vars: &Value,
    attempt: usize,
    run_commands: bool,
    log: &mut Vec<HookDecision>,
) -> ReplyReview {
    let mut reply = draft.trim().to_string();
    // On the first attempt every hook that wants a retry says why, so the
    // model hears all broken rules at once rather than one per retry.
    let mut feedback: Vec<String> = Vec::new();
    for h in hooks.iter().filter(|h| h.event == EventKind::BeforeReply) {
        match &h.action {
            Action::Rewrite {
                replace,
                append,
                truncate_chars,
            } => {
                let before = reply.clone();
                for (from, to) in replace {
                    reply = text::replace_phrase(
                        &reply,
                        &text::fill_vars(from, vars),
                        &text::fill_vars(to, vars),
                    );
                }
                if let Some(a) = append {
                    let a = text::fill_vars(a, vars);
                    if !reply.trim_end().ends_with(a.trim()) {
                        reply = format!("{} {}", reply.trim_end(), a.trim());
                    }
                }
                if let Some(n) = truncate_chars {
                    reply = text::truncate_chars(&reply, *n);
                }
                if reply != before {
                    log.push(decision(h, "rewrote the reply"));
                }
            }
            Action::Check {
                rule,
                on_fail,
                fallback,
            } => {
                let v = rule.violations(&reply, vars);
                if v.is_empty() {
                    continue;
                }
                let why = v.join("; ");
                match on_fail {
                    OnFail::Retry if attempt == 0 => {
                        log.push(decision(h, &format!("retry: {why}")));
                        let rule_text = h
                            .describe
                            .as_deref()
                            .map(|d| format!(" Rule: {d}"))
                            .unwrap_or_default();
                        feedback.push(format!("Your reply breaks a rule ({why}).{rule_text}"));
                    }
                    OnFail::Retry | OnFail::Rewrite => {
                        reply = rule.repair(&reply, vars);
                        log.push(decision(h, &format!("repaired: {why}")));
                    }
                    OnFail::Fallback => {
                        reply =
                            text::fill_vars(fallback.as_deref().unwrap_or(DEFAULT_FALLBACK), vars);
                        log.push(decision(h, &format!("fallback: {why}")));
                    }
                }
            }
            Action::Command { .. } if !run_commands => {}
            Action::Command {
                argv,
                env,
                timeout,
                on_error,
                fallback,
            } => {
                let input = json!({"hook_event_name": "before_reply", "hook_id": h.id, "reply": reply, "context": vars});
                match command::run(argv, env, root, &input, *timeout) {
                    CommandOutcome::Allow(decision_json) => {
                        if let Some(new) = decision_json
                            .as_ref()
                            .and_then(|d| d.get("reply"))
                            .and_then(Value::as_str)
                        {
                            reply = new.to_string();
                            log.push(decision(h, "rewrote the reply"));
                        } else {
                            log.push(decision(h, "allowed"));
                        }
                    }
                    CommandOutcome::Block(reason) => {
                        if attempt == 0 {
                            log.push(decision(h, &format!("blocked, retry: {reason}")));
                            feedback.push(format!("Your reply was blocked: {reason}"));
                            continue;
                        }
                        reply =
                            text::fill_vars(fallback.as_deref().unwrap_or(DEFAULT_FALLBACK), vars);
                        log.push(decision(h, &format!("blocked again, fallback: {reason}")));
                    }
                    CommandOutcome::Failed(why) => match on_error {
                        OnError::Allow => {
                            log.push(decision(h, &format!("hook failed, allowed: {why}")))
                        }
                        OnError::Block | OnError::Fallback => {
                            reply = text::fill_vars(
                                fallback.as_deref().unwrap_or(DEFAULT_FALLBACK),
                                vars,
                            );
                            log.push(decision(h, &format!("hook failed, fallback: {why}")));
                        }
                    },
                }
            }
            Action::Inject { .. } | Action::DropFields { .. } => {}
        }
    }
    if !feedback.is_empty() {
        return ReplyReview::Retry(format!("{} Write the reply again.", feedback.join(" ")));
    }
    // One hook's repair can undo another's (a required phrase appended after
    // a sign-off): a last pass checks every rule together.
    let all = CheckRule::merged(
        hooks
            .iter()
            .filter(|h| h.event == EventKind::BeforeReply)
            .filter_map(|h| match &h.action {
                Action::Check { rule, .. } => Some(rule),
                _ => None,
            }),
    );
    let v = all.violations(&reply, vars);
    if !v.is_empty() {
        reply = all.repair(&reply, vars);
        log.push(HookDecision {
            hook: "checks".into(),
            event: EventKind::BeforeReply,
            outcome: format!("reconciled: {}", v.join("; ")),
        });
    }
    ReplyReview::Accept(reply)
}

/// What stream-event hooks decided: notes to show the model, or a block.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventOutcome {
    pub notes: Vec<String>,
    pub blocked: Option<String>,
}

/// Runs the hooks of a stream event (`inject` notes and `command` hooks).
pub fn on_event(
    hooks: &[Hook],
    root: Option<&Path>,
    kind: EventKind,
    event: &Value,
    vars: &Value,
    log: &mut Vec<HookDecision>,
) -> EventOutcome {
    let mut out = EventOutcome::default();
    for h in hooks.iter().filter(|h| h.event == kind) {
        match &h.action {
            Action::Inject { note } => {
                out.notes.push(text::fill_vars(note, vars));
                log.push(decision(h, "injected a note"));
            }
            Action::Command {
                argv,
                env,
                timeout,
                on_error,
                ..
            } => {
                let input = json!({"hook_event_name": kind.as_str(), "hook_id": h.id, "event": event, "context": vars});
                match command::run(argv, env, root, &input, *timeout) {
                    CommandOutcome::Allow(d) => {
                        let ctx = d
                            .as_ref()
                            .and_then(|d| d.get("additional_context").or_else(|| d.get("context")))
                            .and_then(Value::as_str);
                        if let Some(c) = ctx {
                            out.notes.push(c.to_string());
                        }
                        log.push(decision(h, "allowed"));
                    }
                    CommandOutcome::Block(reason) => {
                        log.push(decision(h, &format!("blocked: {reason}")));
                        out.blocked = Some(reason);
                    }
                    CommandOutcome::Failed(why) => {
                        if *on_error != OnError::Allow {
                            out.blocked = Some(why.clone());
                        }
                        log.push(decision(h, &format!("hook failed: {why}")));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Runs `after_tool` hooks over a tool result, in place.
pub fn after_tool(
    hooks: &[Hook],
    root: Option<&Path>,
    op: Option<Op>,
    tool: &str,
    result: &mut Value,
    log: &mut Vec<HookDecision>,
) {
    for h in hooks.iter().filter(|h| h.event == EventKind::AfterTool) {
        if h.match_op.is_some() && h.match_op != op {
            continue;
        }
        if h.match_tool.as_deref().is_some_and(|t| t != tool) {
            continue;
        }
        match &h.action {
            Action::DropFields { fields } => {
                let mut n = 0;
                drop_fields(result, fields, &mut n);
                if n > 0 {
                    log.push(decision(h, &format!("dropped {n} field(s)")));
                }
            }
            Action::Command {
                argv,
                env,
                timeout,
                on_error,
                ..
            } => {
                let input = json!({"hook_event_name": "after_tool", "hook_id": h.id, "tool": tool, "op": op.map(Op::as_str), "result": result});
                match command::run(argv, env, root, &input, *timeout) {
                    CommandOutcome::Allow(Some(d)) if d.get("result").is_some() => {
                        *result = d["result"].clone();
                        log.push(decision(h, "replaced the result"));
                    }
                    CommandOutcome::Allow(_) => log.push(decision(h, "allowed")),
                    CommandOutcome::Block(reason) => {
                        *result = json!({"error": reason});
                        log.push(decision(h, "blocked the result"));
                    }
                    CommandOutcome::Failed(why) => {
                        if *on_error != OnError::Allow {
                            *result = json!({"error": "the result was withheld by a failing hook"});
                        }
                        log.push(decision(h, &format!("hook failed: {why}")));
                    }
                }
            }
            _ => {}
        }
    }
}

fn drop_fields(v: &mut Value, fields: &[String], n: &mut usize) {
    match v {
        Value::Object(m) => {
            for f in fields {
                if m.shift_remove(f).is_some() {
                    *n += 1;
                }
            }
            for (_, c) in m.iter_mut() {
                drop_fields(c, fields, n);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|c| drop_fields(c, fields, n)),
        _ => {}
    }
}

fn decision(h: &Hook, outcome: &str) -> HookDecision {
    HookDecision {
        hook: h.id.clone(),
        event: h.event,
        outcome: outcome.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(forbid: &[&str], ends_with: Option<&str>, on_fail: &str) -> HookSpec {
        HookSpec {
            id: "c".into(),
            event: "before_reply".into(),
            action: "check".into(),
            forbid: forbid.iter().map(|s| s.to_string()).collect(),
            ends_with: ends_with.map(String::from),
            on_fail: Some(on_fail.into()),
            ..Default::default()
        }
    }

    #[test]
    fn misplaced_fields_and_unknown_names_are_reported() {
        let mut h = check(&["best"], None, "retry");
        h.note = Some("x".into());
        h.event = "on_reply".into();
        let errs = compile(&h).unwrap_err();
        assert!(
            errs.iter().any(|e| e.contains("`note` does not apply")),
            "{errs:?}"
        );
        assert!(
            errs.iter().any(|e| e.contains("unknown event `on_reply`")),
            "{errs:?}"
        );
    }

    /// Red-team finding: `on_fail = "fallback"` with no fallback text passed `check` and sent
    /// a built-in English sentence whatever the persona's language.
    #[test]
    fn a_fallback_action_needs_its_text_and_a_text_needs_its_action() {
        let errs = compile(&check(&["best"], None, "fallback")).unwrap_err();
        assert!(errs[0].contains("needs `fallback"), "{errs:?}");
        let mut h = check(&["best"], None, "retry");
        h.fallback = Some("稍等一下".into());
        let errs = compile(&h).unwrap_err();
        assert!(errs[0].contains("never sent"), "{errs:?}");
        h.on_fail = Some("fallback".into());
        assert!(compile(&h).is_ok());
        let cmd = HookSpec {
            id: "x".into(),
            event: "before_reply".into(),
            action: "command".into(),
            command: vec!["./hooks/x.sh".into()],
            on_error: Some("fallback".into()),
            ..Default::default()
        };
        assert!(compile(&cmd).unwrap_err()[0].contains("needs `fallback"));
    }

    /// Red-team finding: a malformed or unknown `{{ viewer` placeholder in a note passed
    /// `check` and reached viewers as raw braces or an empty gap.
    #[test]
    fn placeholders_must_be_closed_and_known_at_their_event() {
        let inject = |event: &str, note: &str| HookSpec {
            id: "i".into(),
            event: event.into(),
            action: "inject".into(),
            note: Some(note.into()),
            ..Default::default()
        };
        assert!(compile(&inject(
            "gift",
            "Thank {{ viewer }} for {{count}} {{ gift }}"
        ))
        .is_ok());
        let errs = compile(&inject("gift", "Thank {{ viewer for the gift")).unwrap_err();
        assert!(errs[0].contains("never closed"), "{errs:?}");
        let errs = compile(&inject("viewer_join", "Hi {{ gift }}")).unwrap_err();
        assert!(
            errs[0].contains("not a variable of event `viewer_join`"),
            "{errs:?}"
        );
        let errs = compile(&inject("comment", "Hi {{ viewer name }}")).unwrap_err();
        assert!(errs[0].contains("not a placeholder"), "{errs:?}");
        let mut c = check(&["{{ cue }}"], None, "retry");
        c.event = "before_reply".into();
        assert!(
            compile(&c).is_ok(),
            "before_reply sees every event's variables"
        );
    }

    #[test]
    fn decisions_that_caught_a_rule_breaking_draft_are_told_apart() {
        let hooks = vec![
            compile(&check(&["best"], None, "retry")).unwrap(),
            compile(&HookSpec {
                id: "w".into(),
                event: "before_reply".into(),
                action: "rewrite".into(),
                replace: Some([("cheap".to_string(), "good value".to_string())].into()),
                ..Default::default()
            })
            .unwrap(),
        ];
        for (draft, attempt, caught) in [
            ("A cheap hoodie.", 0, false),
            ("The best hoodie.", 0, true),
            ("The best hoodie.", 1, true),
        ] {
            let mut log = Vec::new();
            review_reply(&hooks, None, draft, &json!({}), attempt, true, &mut log);
            assert_eq!(
                log.iter().any(HookDecision::caught_violation),
                caught,
                "{draft}: {log:?}"
            );
        }
    }

    #[test]
    fn retry_once_then_repair() {
        let hooks = vec![compile(&check(&["best", "最"], Some("✨"), "retry")).unwrap()];
        let mut log = Vec::new();
        let r = review_reply(
            &hooks,
            None,
            "This is the best hoodie, 最好",
            &json!({}),
            0,
            true,
            &mut log,
        );
        assert!(
            matches!(r, ReplyReview::Retry(ref f) if f.contains("best")),
            "{r:?}"
        );
        let r = review_reply(
            &hooks,
            None,
            "This is the best hoodie, 最好",
            &json!({}),
            1,
            true,
            &mut log,
        );
        let ReplyReview::Accept(text) = r else {
            panic!()
        };
        assert!(compile(&check(&["best", "最"], Some("✨"), "retry")).is_ok());
        let CheckRule { .. } = match &hooks[0].action {
            Action::Check { rule, .. } => rule.clone(),
            _ => unreachable!(),
        };
        assert!(
            !text::contains_phrase(&text, "best") && !text.contains('最') && text.ends_with('✨'),
            "{text}"
        );
    }

    #[test]
    fn drop_fields_removes_nested_fields() {
        let spec = HookSpec {
            id: "d".into(),
            event: "after_tool".into(),
            action: "drop_fields".into(),
            fields: vec!["cost_price".into()],
            ..Default::default()
        };
        let hooks = vec![compile(&spec).unwrap()];
        let mut v = json!({"cost_price": 1, "items": [{"cost_price": 2, "price": 3}]});
        let mut log = Vec::new();
        after_tool(
            &hooks,
            None,
            Some(Op::Product),
            "get_product",
            &mut v,
            &mut log,
        );
        assert_eq!(v, json!({"items": [{"price": 3}]}));
        assert_eq!(log.len(), 1);
    }

    #[test]
    fn inject_fills_event_variables() {
        let spec = HookSpec {
            id: "g".into(),
            event: "viewer_join".into(),
            action: "inject".into(),
            note: Some("Greet {{ viewer }}".into()),
            ..Default::default()
        };
        let hooks = vec![compile(&spec).unwrap()];
        let out = on_event(
            &hooks,
            None,
            EventKind::ViewerJoin,
            &json!({}),
            &json!({"viewer": "momo"}),
            &mut Vec::new(),
        );
        assert_eq!(out.notes, vec!["Greet momo"]);
    }

    #[test]
    fn required_phrases_go_before_the_sign_off() {
        let a = compile(&check(&[], Some("— Mia"), "rewrite")).unwrap();
        let mut b = check(&[], None, "rewrite");
        b.id = "b".into();
        b.require = vec!["[AI]".into()];
        let hooks = vec![a, compile(&b).unwrap()];
        let ReplyReview::Accept(r) = review_reply(
            &hooks,
            None,
            "Hello there",
            &json!({}),
            1,
            true,
            &mut Vec::new(),
        ) else {
            panic!()
        };
        assert_eq!(r, "Hello there [AI] — Mia");
    }

    #[test]
    fn repair_keeps_sign_off_within_limit() {
        let rule = CheckRule {
            forbid: vec![],
            require: vec![],
            ends_with: Some("— Mia".into()),
            max_chars: Some(30),
        };
        let out = rule.repair("a very long reply that keeps going and going", &json!({}));
        assert!(out.chars().count() <= 30 && out.ends_with("— Mia"), "{out}");
        assert!(rule.violations(&out, &json!({})).is_empty());
    }
}
