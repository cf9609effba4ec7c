//! A compiled harness state: validated, hashed, ready to render prompts,
//! parse model output, dispatch calls and run hooks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::binding::{schema_at, split_pointer, ArgBinding, Binding, Target};
use crate::files::{self, FileMap};
use crate::hooks::{
    self, Action, CheckRule, EventKind, EventOutcome, Hook, HookDecision, ReplyReview,
};
use crate::op::{ArgKind, Op};
use crate::problem::{line_of, HarnessError, Problem};
use crate::render::{self, Format, HarnessView, PersonaView, Renderer, SkillView, ToolView};
use crate::spec::{HarnessSpec, SECTION_NAMES};
use crate::syntax::{CallSyntax, ToolCall};

/// Agent Skills: 1-64 chars of lowercase letters, digits and single hyphens,
/// not starting or ending with a hyphen.
pub fn valid_skill_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--")
}

/// Tool names: 1-64 chars of `A-Z a-z 0-9 _ -`.
pub fn valid_tool_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

pub struct CompiledTool {
    pub name: String,
    pub description: String,
    pub schema: Value,
    validator: jsonschema::Validator,
    pub binding: Binding,
}

impl std::fmt::Debug for CompiledTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledTool")
            .field("name", &self.name)
            .field("binding", &self.binding)
            .finish()
    }
}

/// The store a harness dispatches to. The runtime knows operations only by
/// their canonical names; the live-stream world implements this.
pub trait Backend {
    fn call(&self, op: Op, args: &Map<String, Value>) -> Result<Value, String>;
}

/// The outcome of dispatching one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct Dispatched {
    pub tool: String,
    pub target: Option<Target>,
    /// Canonical arguments, when the call bound.
    pub canonical: Option<Map<String, Value>>,
    /// The result the model sees (an `{"error": ...}` object on failure).
    pub result: Value,
    pub ok: bool,
}

/// Constraints a reply must meet under this harness, as the scorer reads them.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct ReplyConstraints {
    pub forbid: Vec<String>,
    pub require: Vec<String>,
    pub ends_with: Vec<String>,
    pub max_chars: usize,
}

pub struct Harness {
    pub spec: HarnessSpec,
    pub hash: String,
    pub root: Option<PathBuf>,
    pub syntax: CallSyntax,
    pub format: Format,
    pub tools: Vec<CompiledTool>,
    pub hooks: Vec<Hook>,
    view: HarnessView,
    renderer: Renderer,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("name", &self.spec.manifest.harness.name)
            .field("hash", &self.hash)
            .finish()
    }
}

impl Harness {
    /// Loads and validates the harness in `dir`, reporting every problem.
    pub fn load(dir: &Path) -> Result<Harness, HarnessError> {
        let (files, mut problems) = files::read_dir(dir)?;
        let (spec, more) = files::parse(&files);
        problems.extend(more);
        let Some(spec) = spec else {
            return Err(HarnessError::Invalid(problems));
        };
        // Command hooks run from the harness folder; an absolute root keeps
        // `./hooks/x.sh` valid whatever the caller's working directory is.
        let root = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        match Harness::compile_with(spec, Some(root), Some(&files)) {
            Ok(h) if problems.is_empty() => Ok(h),
            Ok(_) => Err(HarnessError::Invalid(problems)),
            Err(HarnessError::Invalid(p)) => {
                problems.extend(p);
                Err(HarnessError::Invalid(problems))
            }
            Err(e) => Err(e),
        }
    }

    /// Compiles an in-memory spec (e.g. an augmented state).
    pub fn compile(spec: HarnessSpec, root: Option<PathBuf>) -> Result<Harness, HarnessError> {
        Harness::compile_with(spec, root, None)
    }

    fn compile_with(
        spec: HarnessSpec,
        root: Option<PathBuf>,
        sources: Option<&FileMap>,
    ) -> Result<Harness, HarnessError> {
        let mut problems = Vec::new();
        let src = |file: &str| sources.and_then(|s| s.get(file)).map_or("", String::as_str);
        let at = |file: &str, needle: &str| line_of(src(file), needle);
        let m = &spec.manifest;

        if m.harness.name.trim().is_empty() {
            problems.push(Problem::new(
                "harness.toml",
                at("harness.toml", "name"),
                "[harness] name is empty",
            ));
        }
        let format = Format::parse(&m.prompt.format).unwrap_or_else(|| {
            problems.push(Problem::new(
                "harness.toml",
                at("harness.toml", "format"),
                format!(
                    "[prompt] format `{}` must be markdown, xml, json or toml",
                    m.prompt.format
                ),
            ));
            Format::Markdown
        });
        let mut seen = BTreeSet::new();
        for s in &m.prompt.sections {
            if !SECTION_NAMES.contains(&s.as_str()) {
                problems.push(Problem::new(
                    "harness.toml",
                    at("harness.toml", "sections"),
                    format!(
                        "[prompt] sections: unknown section `{s}` (known: {})",
                        SECTION_NAMES.join(", ")
                    ),
                ));
            } else if !seen.insert(s.as_str()) {
                problems.push(Problem::new(
                    "harness.toml",
                    at("harness.toml", "sections"),
                    format!("[prompt] sections lists `{s}` twice"),
                ));
            }
        }
        let syntax = CallSyntax::parse_name(&m.calls.syntax).unwrap_or_else(|| {
            let known: Vec<_> = CallSyntax::every().map(|c| c.as_str()).collect();
            problems.push(Problem::new(
                "harness.toml",
                at("harness.toml", "syntax"),
                format!(
                    "[calls] syntax `{}` is not one of {}",
                    m.calls.syntax,
                    known.join(", ")
                ),
            ));
            CallSyntax::JsonTags
        });
        if m.calls.max_per_turn == 0 || m.calls.max_per_turn > 16 {
            problems.push(Problem::new(
                "harness.toml",
                at("harness.toml", "max_per_turn"),
                "[calls] max_per_turn must be between 1 and 16",
            ));
        }
        if !(8..=200).contains(&m.viewers.max_name_chars) {
            problems.push(Problem::new(
                "harness.toml",
                at("harness.toml", "max_name_chars"),
                "[viewers] max_name_chars must be between 8 and 200",
            ));
        }
        if !(20..=4000).contains(&m.viewers.max_comment_chars) {
            problems.push(Problem::new(
                "harness.toml",
                at("harness.toml", "max_comment_chars"),
                "[viewers] max_comment_chars must be between 20 and 4000",
            ));
        }
        if m.reply.max_chars < 20 || m.reply.max_chars > 4000 {
            problems.push(Problem::new(
                "harness.toml",
                at("harness.toml", "max_chars"),
                "[reply] max_chars must be between 20 and 4000",
            ));
        }

        // Tools.
        let mut tools = Vec::new();
        let mut tool_names = BTreeSet::new();
        for t in &spec.tools {
            let file = format!("tools/{}.json", t.name);
            let here = |needle: &str| at(&file, needle);
            if !valid_tool_name(&t.name) {
                problems.push(Problem::new(
                    &file,
                    here("\"name\""),
                    format!(
                        "tool name `{}` must be 1-64 characters of A-Z a-z 0-9 _ -",
                        t.name
                    ),
                ));
            }
            if !tool_names.insert(t.name.clone()) {
                problems.push(Problem::new(
                    &file,
                    None,
                    format!("duplicate tool name `{}`", t.name),
                ));
            }
            if t.input_schema.get("type").and_then(Value::as_str) != Some("object") {
                problems.push(Problem::new(
                    &file,
                    here("inputSchema"),
                    "inputSchema must be a JSON Schema with \"type\": \"object\"",
                ));
            }
            let cycle = crate::schema_refs::problem(&t.input_schema);
            if let Some(c) = &cycle {
                problems.push(Problem::new(
                    &file,
                    here("$ref"),
                    format!("inputSchema: {c}"),
                ));
            }
            for why in crate::schema_lint::unsatisfiable(&t.input_schema) {
                problems.push(Problem::new(
                    &file,
                    here("inputSchema"),
                    format!("inputSchema{why}: fix the schema so a call can satisfy it"),
                ));
            }
            let compiled = if cycle.is_some() {
                None
            } else {
                Some(jsonschema::validator_for(&t.input_schema))
            };
            let validator = match compiled {
                None => None,
                Some(Ok(v)) => Some(v),
                Some(Err(e)) => {
                    problems.push(Problem::new(
                        &file,
                        here("inputSchema"),
                        format!("inputSchema is not a valid JSON Schema: {e}"),
                    ));
                    None
                }
            };
            let target = Target::parse(&t.binding.op);
            if target.is_none() {
                problems.push(Problem::new(&file, here("\"op\""), format!("binding.op `{}` is not a known operation (product, stock, coupons, quote, shipping, search, faq, pin, flash_sale, noop)", t.binding.op)));
            }
            let mut args = Vec::new();
            for (canonical, source) in &t.binding.args {
                let ptr = source.pointer();
                if let Some(Target::Op(op)) = target {
                    if op.arg(canonical).is_none() {
                        let known: Vec<_> = op.args().iter().map(|a| a.name).collect();
                        problems.push(Problem::new(&file, here(&format!("\"{canonical}\"")), format!("binding.args: `{canonical}` is not an argument of op `{op}` (it takes {})", known.join(", "))));
                    }
                }
                let Some(path) = split_pointer(ptr) else {
                    problems.push(Problem::new(&file, here(ptr), format!("binding.args.{canonical}: `{ptr}` is not a JSON Pointer (write it like /product_id)")));
                    continue;
                };
                let Some(param) = schema_at(&t.input_schema, &path) else {
                    problems.push(Problem::new(&file, here(ptr), format!("binding.args.{canonical} points at `{ptr}`, which is not a parameter in inputSchema")));
                    continue;
                };
                let map = match source {
                    crate::spec::ArgSourceSpec::Mapped { map, .. } => {
                        if let Some(allowed) = param.get("enum").and_then(Value::as_array) {
                            for k in map.keys() {
                                if !allowed.iter().any(|a| a.as_str() == Some(k)) {
                                    problems.push(Problem::new(&file, here(k), format!("binding.args.{canonical}: map key `{k}` is not in the parameter's enum")));
                                }
                            }
                        }
                        Some(map.clone())
                    }
                    crate::spec::ArgSourceSpec::Pointer(_) => None,
                };
                if let (Some(Target::Op(op)), None) = (target, &map) {
                    if let Some(a) = op.arg(canonical) {
                        let want = match a.kind {
                            ArgKind::String => "string",
                            ArgKind::Integer => "integer",
                            ArgKind::Number => "number",
                        };
                        let got = param.get("type").and_then(Value::as_str);
                        let compatible = match got {
                            None => true,
                            Some(g) => {
                                g == want
                                    || (want == "number" && g == "integer")
                                    || (want == "integer" && g == "number")
                            }
                        };
                        if !compatible {
                            problems.push(Problem::new(&file, here(ptr), format!("binding.args.{canonical}: parameter `{ptr}` has type {}, but op `{op}` expects {want}", got.unwrap_or("?"))));
                        }
                    }
                }
                args.push(ArgBinding {
                    canonical: canonical.clone(),
                    path,
                    map,
                });
            }
            if let Some(Target::Op(op)) = target {
                for a in op.args().iter().filter(|a| a.required) {
                    if !t.binding.args.contains_key(a.name) {
                        problems.push(Problem::new(
                            &file,
                            here("binding"),
                            format!(
                                "binding does not map `{}`, which op `{op}` requires",
                                a.name
                            ),
                        ));
                    }
                }
            }
            if let (Some(validator), Some(target)) = (validator, target) {
                tools.push(CompiledTool {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    schema: t.input_schema.clone(),
                    validator,
                    binding: Binding { target, args },
                });
            }
        }

        // Skills.
        let mut skill_ids = BTreeSet::new();
        for s in &spec.skills {
            let file = format!("skills/{}/SKILL.md", s.folder);
            if !valid_skill_name(&s.front.name) {
                problems.push(Problem::new(&file, at(&file, "name:"), format!("skill name `{}` must be 1-64 lowercase letters, digits and single hyphens, not starting or ending with a hyphen", s.front.name)));
            }
            if s.front.name != s.folder {
                problems.push(Problem::new(
                    &file,
                    at(&file, "name:"),
                    format!(
                        "skill name `{}` differs from its folder `{}`; they must be equal",
                        s.front.name, s.folder
                    ),
                ));
            }
            if !skill_ids.insert(s.front.name.clone()) {
                problems.push(Problem::new(
                    &file,
                    None,
                    format!("duplicate skill id `{}`", s.front.name),
                ));
            }
            if s.front.description.trim().is_empty() || s.front.description.chars().count() > 1024 {
                problems.push(Problem::new(
                    &file,
                    at(&file, "description:"),
                    "description must be 1-1024 characters",
                ));
            }
            if let Some(w) = &s.front.when {
                if EventKind::parse(w).is_none_or(|e| !e.is_stream_event()) {
                    problems.push(Problem::new(&file, at(&file, "when:"), format!("when: `{w}` is not a stream event (viewer_join, comment, gift, purchase, operator_cue)")));
                }
            }
            for t in &s.front.tools {
                if !spec.tools.iter().any(|x| &x.name == t) {
                    problems.push(Problem::new(
                        &file,
                        at(&file, t),
                        format!("lists tool `{t}`, which the harness does not define"),
                    ));
                }
            }
        }

        // Hooks.
        let mut hooks_out = Vec::new();
        let mut hook_ids = BTreeSet::new();
        // Check rules seen so far, for contradictions between hooks.
        let mut checks: Vec<(String, CheckRule)> = Vec::new();
        for h in &spec.hooks {
            let line = at("hooks.toml", &format!("\"{}\"", h.id));
            if !hook_ids.insert(h.id.clone()) {
                problems.push(Problem::new(
                    "hooks.toml",
                    line,
                    format!("duplicate hook id `{}`", h.id),
                ));
            }
            match hooks::compile(h) {
                Ok(c) => {
                    if let Some(t) = &c.match_tool {
                        if !tool_names.contains(t) {
                            problems.push(Problem::new("hooks.toml", line, format!("hook `{}` matches tool `{t}`, which the harness does not define", h.id)));
                        }
                    }
                    if let Action::Check { rule, .. } = &c.action {
                        for (id, earlier) in &checks {
                            for msg in hooks::lint_check_pair((id, earlier), (&h.id, rule)) {
                                problems.push(Problem::new("hooks.toml", line, msg));
                            }
                        }
                        checks.push((h.id.clone(), rule.clone()));
                        if let Some(e) = &rule.ends_with {
                            let n = e.chars().count();
                            if n >= m.reply.max_chars {
                                problems.push(Problem::new("hooks.toml", line, format!("hook `{}`: ends_with needs {n} characters, not less than the reply limit ([reply] max_chars = {}), so no reply can pass", h.id, m.reply.max_chars)));
                            }
                        }
                    }
                    if let Action::Command { argv, .. } = &c.action {
                        let prog = &argv[0];
                        let local = prog
                            .strip_prefix("./")
                            .filter(|_| root.is_some() || sources.is_some());
                        if let Some(rel) = local {
                            // read from a folder: the program must be among the files read (a
                            // path through a link is not); an in-memory state may rely on its root
                            let exists = spec.extra_files.contains_key(rel)
                                || (sources.is_none()
                                    && root.as_ref().is_some_and(|r| r.join(rel).is_file()));
                            if !exists {
                                problems.push(Problem::new(
                                    "hooks.toml",
                                    line,
                                    format!(
                                        "hook `{}` runs `{prog}`, which is not in the harness",
                                        h.id
                                    ),
                                ));
                            }
                        }
                    }
                    hooks_out.push(c)
                }
                Err(errs) => problems.extend(
                    errs.into_iter()
                        .map(|e| Problem::new("hooks.toml", line, e)),
                ),
            }
        }

        let budget_ms = m
            .reply
            .hook_budget_ms
            .unwrap_or(crate::spec::DEFAULT_HOOK_BUDGET_MS);
        if !(100..=600_000).contains(&budget_ms) {
            problems.push(Problem::new(
                "harness.toml",
                at("harness.toml", "hook_budget_ms"),
                "[reply] hook_budget_ms must be between 100 and 600000",
            ));
        } else if let Some((event, worst)) =
            hook_time_worst_case(&hooks_out, m.calls.max_per_turn as u64)
                .filter(|(_, ms)| *ms > budget_ms)
        {
            problems.push(Problem::new(
                "hooks.toml",
                None,
                format!(
                    "command hooks could hold one `{event}` turn for {worst} ms (their timeouts: the \
                     event's own, after_tool's once per call, up to [calls] max_per_turn calls in \
                     each of {} model turns, before_reply's twice for a retry), over the budget \
                     of {budget_ms} ms: lower \
                     timeout_ms, use fewer command hooks, or raise [reply] hook_budget_ms in \
                     harness.toml",
                    hooks::DEFAULT_MODEL_TURNS - 1
                ),
            ));
        }

        let hash = content_hash(&spec.to_files());
        let view = build_view(&spec, &hash, syntax, &tools);
        let template_file = m.prompt.template.clone().unwrap_or_default();
        let renderer = match Renderer::new(format, spec.template.as_deref()) {
            Ok(r) => Some(r),
            Err(e) => {
                problems.push(Problem::new(
                    &template_file,
                    None,
                    format!("template does not compile: {e}"),
                ));
                None
            }
        };
        let budget = m
            .prompt
            .max_chars
            .unwrap_or(crate::render::DEFAULT_PROMPT_BUDGET);
        if !(500..=100_000).contains(&budget) {
            problems.push(Problem::new(
                "harness.toml",
                at("harness.toml", "max_chars"),
                "[prompt] max_chars must be between 500 and 100000",
            ));
        }
        if let Some(r) = &renderer {
            let file = if spec.template.is_some() {
                template_file.as_str()
            } else {
                "harness.toml"
            };
            match r.render(&view, &m.prompt.sections, &sample_stream()) {
                Err(e) => problems.push(Problem::new(
                    file,
                    None,
                    format!("the prompt fails to render: {e}"),
                )),
                Ok(text) => {
                    let n = text.chars().count();
                    if n > budget {
                        problems.push(Problem::new(
                            file,
                            None,
                            format!(
                                "the system prompt renders to {n} characters for a sample stream, \
                                 over its budget of {budget} ([prompt] max_chars in harness.toml, \
                                 default {}): shorten skills, tool descriptions or rules, or raise \
                                 the budget",
                                crate::render::DEFAULT_PROMPT_BUDGET
                            ),
                        ))
                    }
                }
            }
        }
        if !problems.is_empty() {
            return Err(HarnessError::Invalid(problems));
        }
        Ok(Harness {
            syntax,
            format,
            tools,
            hooks: hooks_out,
            hash,
            root,
            view,
            renderer: renderer.expect("checked above"),
            spec,
        })
    }

    pub fn name(&self) -> &str {
        &self.spec.manifest.harness.name
    }

    /// `sha256:` plus the first 16 hex digits: enough to tell states apart in logs.
    pub fn short_hash(&self) -> &str {
        &self.hash[..self.hash.len().min(23)]
    }

    pub fn max_calls(&self) -> usize {
        self.spec.manifest.calls.max_per_turn
    }

    pub fn tool(&self, name: &str) -> Option<&CompiledTool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// Every tool's name, comma-separated (for messages about an unknown tool).
    pub fn tool_names(&self) -> String {
        let names: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
        names.join(", ")
    }

    /// The first tool bound to `op` (the one the oracle uses).
    pub fn tool_for(&self, op: Op) -> Option<&CompiledTool> {
        self.tools
            .iter()
            .find(|t| t.binding.target == Target::Op(op))
    }

    pub fn view(&self) -> &HarnessView {
        &self.view
    }

    /// The system prompt for a stream state.
    pub fn render_system(&self, stream: &Value) -> Result<String, HarnessError> {
        self.renderer
            .render(&self.view, &self.spec.manifest.prompt.sections, stream)
            .map_err(HarnessError::Render)
    }

    /// Runs a stream event's hooks: injected notes, or a block.
    pub fn on_event(
        &self,
        kind: EventKind,
        event: &Value,
        vars: &Value,
        log: &mut Vec<HookDecision>,
    ) -> EventOutcome {
        hooks::on_event(&self.hooks, self.root.as_deref(), kind, event, vars, log)
    }

    /// Reviews a draft reply against the `before_reply` hooks and the hard length limit.
    pub fn review_reply(
        &self,
        draft: &str,
        vars: &Value,
        attempt: usize,
        log: &mut Vec<HookDecision>,
    ) -> ReplyReview {
        self.review(draft, vars, attempt, true, log)
    }

    /// Like [`Harness::review_reply`] but without running external command
    /// hooks: what a teacher that writes compliant text by construction needs,
    /// at data-generation speed.
    pub fn review_reply_static(
        &self,
        draft: &str,
        vars: &Value,
        log: &mut Vec<HookDecision>,
    ) -> String {
        match self.review(draft, vars, 1, false, log) {
            ReplyReview::Accept(r) => r,
            ReplyReview::Retry(_) => unreachable!("attempt 1 never retries"),
        }
    }

    fn review(
        &self,
        draft: &str,
        vars: &Value,
        attempt: usize,
        run_commands: bool,
        log: &mut Vec<HookDecision>,
    ) -> ReplyReview {
        match hooks::review_reply(
            &self.hooks,
            self.root.as_deref(),
            draft,
            vars,
            attempt,
            run_commands,
            log,
        ) {
            ReplyReview::Accept(r) => {
                let max = self.spec.manifest.reply.max_chars;
                if r.chars().count() > max {
                    log.push(HookDecision {
                        hook: "reply.max_chars".into(),
                        event: EventKind::BeforeReply,
                        outcome: format!("cut to {max} characters"),
                    });
                    // Cut the body, not the sign-off or required phrases.
                    let mut rule =
                        CheckRule::merged(self.hooks.iter().filter_map(|h| match &h.action {
                            Action::Check { rule, .. } => Some(rule),
                            _ => None,
                        }));
                    rule.max_chars = Some(rule.max_chars.map_or(max, |m| m.min(max)));
                    ReplyReview::Accept(rule.repair(&r, vars))
                } else {
                    ReplyReview::Accept(r)
                }
            }
            retry => retry,
        }
    }

    /// The reply constraints the `check` hooks and `[reply]` impose.
    pub fn reply_constraints(&self, vars: &Value) -> ReplyConstraints {
        let mut c = ReplyConstraints {
            max_chars: self.spec.manifest.reply.max_chars,
            ..Default::default()
        };
        for h in &self.hooks {
            if let Action::Check {
                rule:
                    CheckRule {
                        forbid,
                        require,
                        ends_with,
                        max_chars,
                    },
                ..
            } = &h.action
            {
                c.forbid
                    .extend(forbid.iter().map(|f| crate::text::fill_vars(f, vars)));
                c.require
                    .extend(require.iter().map(|f| crate::text::fill_vars(f, vars)));
                c.ends_with
                    .extend(ends_with.iter().map(|f| crate::text::fill_vars(f, vars)));
                if let Some(m) = max_chars {
                    c.max_chars = c.max_chars.min(*m);
                }
            }
        }
        c
    }

    /// Notes the `inject` hooks add for an event (no command hooks run).
    /// How much viewer text reaches this harness's prompts (`[viewers]`).
    pub fn viewer_limits(&self) -> crate::text::ViewerLimits {
        self.spec.manifest.viewers.limits()
    }

    pub fn inject_notes(&self, kind: EventKind, vars: &Value) -> Vec<String> {
        self.hooks
            .iter()
            .filter(|h| h.event == kind)
            .filter_map(|h| match &h.action {
                Action::Inject { note } => Some(crate::text::fill_vars(note, vars)),
                _ => None,
            })
            .collect()
    }

    /// Writes a call to `op` with canonical arguments in this harness's names,
    /// nesting, enum values and syntax. `None` if no tool is bound to `op`.
    pub fn call_for(&self, op: Op, canonical: &Map<String, Value>) -> Option<ToolCall> {
        let tool = self.tool_for(op)?;
        Some(ToolCall {
            name: tool.name.clone(),
            arguments: tool.binding.from_canonical(canonical),
        })
    }

    /// Checks call arguments against the tool's `inputSchema`; the error lists
    /// up to three violations, each with where in the arguments it is.
    pub fn validate_args(&self, tool: &str, args: &Value) -> Result<(), String> {
        let Some(t) = self.tool(tool) else {
            return Err(format!("unknown tool `{tool}`"));
        };
        let errors: Vec<String> = t
            .validator
            .iter_errors(args)
            .take(3)
            .map(|e| {
                let at = e.instance_path.to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("{at}: {e}")
                }
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "invalid arguments for {tool}: {}",
                errors.join("; ")
            ))
        }
    }

    /// Validates, binds and runs one call, then the `after_tool` hooks.
    /// Every failure becomes a model-readable error result.
    pub fn dispatch(
        &self,
        call: &ToolCall,
        backend: &dyn Backend,
        log: &mut Vec<HookDecision>,
    ) -> Dispatched {
        let fail = |target, canonical, msg: String| Dispatched {
            tool: call.name.clone(),
            target,
            canonical,
            result: json!({"error": msg}),
            ok: false,
        };
        let Some(tool) = self.tool(&call.name) else {
            return fail(
                None,
                None,
                format!(
                    "unknown tool `{}`; available tools: {}",
                    call.name,
                    self.tool_names()
                ),
            );
        };
        if let Err(e) = self.validate_args(&tool.name, &call.arguments) {
            return fail(Some(tool.binding.target), None, e);
        }
        let canonical = match tool.binding.to_canonical(&call.arguments) {
            Ok(c) => c,
            Err(e) => {
                return fail(
                    Some(tool.binding.target),
                    None,
                    format!("invalid arguments for {}: {e}", tool.name),
                )
            }
        };
        let (mut result, ok) = match tool.binding.target {
            Target::Noop => (
                json!({"ok": true, "note": "this tool has no effect in the current stream"}),
                true,
            ),
            Target::Op(op) => match backend.call(op, &canonical) {
                Ok(v) => (v, true),
                Err(e) => (json!({"error": e}), false),
            },
        };
        hooks::after_tool(
            &self.hooks,
            self.root.as_deref(),
            tool.binding.target.op(),
            &tool.name,
            &mut result,
            log,
        );
        Dispatched {
            tool: tool.name.clone(),
            target: Some(tool.binding.target),
            canonical: Some(canonical),
            result,
            ok,
        }
    }

    /// The tools in OpenAI function-calling form, as chat datasets carry them.
    pub fn openai_tools(&self) -> Value {
        Value::Array(
            self.tools
                .iter()
                .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.schema}}))
                .collect(),
        )
    }

    /// Counts for the one-line summary.
    /// Command hooks whose program, a file of the harness folder, nobody may execute: such
    /// a hook fails to start on every event, which `on_error = "allow"` (the default) turns
    /// into letting everything through. Checked where a folder is loaded for use (the CLI,
    /// `hat serve`'s trusted loads), not by [`Harness::load`] itself: a server strips the
    /// execute bits of untrusted uploads and refuses their command hooks for that reason.
    /// Empty off Unix, where no bit says.
    pub fn unrunnable_hooks(&self) -> Vec<Problem> {
        let Some(root) = &self.root else {
            return Vec::new();
        };
        let hooks_toml = std::fs::read_to_string(root.join("hooks.toml")).unwrap_or_default();
        self.hooks
            .iter()
            .filter_map(|h| match &h.action {
                Action::Command { argv, .. } => {
                    let rel = argv.first()?.strip_prefix("./")?;
                    let mode = not_executable(&root.join(rel))?;
                    Some(Problem::new(
                        "hooks.toml",
                        line_of(&hooks_toml, &format!("\"{}\"", h.id)),
                        format!(
                            "hook `{}` runs `./{rel}`, which is not executable (mode {mode:o}); \
                             run `chmod +x {rel}` in the harness folder",
                            h.id
                        ),
                    ))
                }
                _ => None,
            })
            .collect()
    }

    pub fn summary(&self) -> String {
        let m = &self.spec.manifest;
        format!(
            "{} {} {} — {} skills, {} tools, {} hooks, syntax {}, format {}",
            m.harness.name,
            m.harness.version,
            self.short_hash(),
            self.spec.skills.len(),
            self.tools.len(),
            self.hooks.len(),
            self.syntax.as_str(),
            self.format.as_str()
        )
    }
}

/// SHA-256 over the normalised files (path, NUL, content, NUL; sorted by path).
pub fn content_hash(files: &FileMap) -> String {
    let mut h = Sha256::new();
    for (path, content) in files {
        h.update(path.as_bytes());
        h.update([0]);
        h.update(content.as_bytes());
        h.update([0]);
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

fn build_view(
    spec: &HarnessSpec,
    hash: &str,
    syntax: CallSyntax,
    tools: &[CompiledTool],
) -> HarnessView {
    let m = &spec.manifest;
    let mut rules: Vec<String> = spec
        .hooks
        .iter()
        .filter_map(|h| h.describe.clone())
        .collect();
    rules.dedup();
    HarnessView {
        name: m.harness.name.clone(),
        version: m.harness.version.clone(),
        hash: hash.to_string(),
        persona: PersonaView {
            name: m.persona.name.clone(),
            style: m.persona.style.clone(),
            language: m.persona.language.clone(),
            language_name: render::language_name(&m.persona.language),
            intro: m.persona.intro.clone(),
        },
        rules,
        skills: spec
            .skills
            .iter()
            .map(|s| SkillView {
                id: s.front.name.clone(),
                description: s.front.description.clone(),
                when: s.front.when.clone(),
                tools: s.front.tools.clone(),
                body: s.body.clone(),
            })
            .collect(),
        tools: tools
            .iter()
            .map(|t| ToolView {
                name: t.name.clone(),
                description: t.description.clone(),
                signature: render::signature(&t.name, &t.schema),
                schema: t.schema.clone(),
            })
            .collect(),
        call_syntax: syntax.as_str().to_string(),
        call_instructions: syntax.instructions(m.calls.max_per_turn),
        max_chars: m.reply.max_chars,
        max_calls: m.calls.max_per_turn,
    }
}

/// A small stream state used to prove a template renders at check time.
/// The stream event whose turn the command hooks could hold longest, and for how many
/// milliseconds (timeouts added up: the event's own hooks, `after_tool` hooks once per call of
/// every model turn that may call tools, `before_reply` hooks twice since a blocked reply is
/// retried once); `None` without command hooks.
pub fn hook_time_worst_case(hooks: &[Hook], max_calls: u64) -> Option<(&'static str, u64)> {
    let ms_at = |e: EventKind| -> u64 {
        hooks
            .iter()
            .filter(|h| h.event == e)
            .map(|h| match &h.action {
                Action::Command { timeout, .. } => timeout.as_millis() as u64,
                _ => 0,
            })
            .sum()
    };
    // every model turn but the last may call tools
    let tool_rounds = hooks::DEFAULT_MODEL_TURNS.saturating_sub(1) as u64;
    let inside =
        ms_at(EventKind::AfterTool) * max_calls * tool_rounds + ms_at(EventKind::BeforeReply) * 2;
    EventKind::ALL
        .into_iter()
        .filter(|e| e.is_stream_event())
        .map(|e| (e.as_str(), ms_at(e) + inside))
        .max_by_key(|(_, ms)| *ms)
        .filter(|(_, ms)| *ms > 0)
}

/// The stream a harness's prompt is rendered for by `hat harness check`. It holds one of each
/// list a live stream may fill (a coupon, a running flash sale): a template's loop over them
/// is then run by the check, so an error in a loop body fails the check instead of every live
/// prompt.
fn sample_stream() -> Value {
    json!({
        "stream_id": "S-check", "title": "Check stream", "host": "Host", "now": "2026-01-01T20:00:00",
        "currency": "CNY", "currency_symbol": "¥",
        "on_stage": {"id": "P1", "title": "Sample", "link": 1, "price": 9.9},
        "products": [{"id": "P1", "title": "Sample", "category": "home", "price": 9.9, "list_price": 19.9, "link": 1}],
        "coupons": [{"id": "C1", "scope": "store", "threshold": 99.0, "amount": 10.0, "expires_at": "2026-01-01T23:00:00"}],
        "flash_sales": [{"product": "P1", "discount_pct": 20, "sale_price": 7.92, "ends_at": "2026-01-01T20:15:00"}],
        "recent": ["lily joined"]
    })
}

/// Per-tool lookups used by augmentation and the scorer.
pub fn tools_by_op(h: &Harness) -> BTreeMap<Op, Vec<&str>> {
    let mut m: BTreeMap<Op, Vec<&str>> = BTreeMap::new();
    for t in &h.tools {
        if let Target::Op(op) = t.binding.target {
            m.entry(op).or_default().push(&t.name);
        }
    }
    m
}

/// The permission bits of `path` when it is a file no one may execute; `None` for anything
/// else (an executable file, one that cannot be read, or any file off Unix).
fn not_executable(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::symlink_metadata(path).ok()?;
        let mode = meta.permissions().mode() & 0o7777;
        (meta.is_file() && mode & 0o111 == 0).then_some(mode)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// `hat harness check` passed a command hook whose program was not executable; it failed
    /// to start on every event (with on_error = "allow", every reply went through unchecked).
    #[test]
    fn a_hook_program_that_cannot_be_executed_is_named_with_its_line() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
        let (mut files, _) = files::read_dir(&src).unwrap();
        let script = files.remove("hooks/no-medical-claims.sh").unwrap();
        files.insert("scripts/mod.sh".into(), script);
        let hooks = files["hooks.toml"].replace("./hooks/no-medical-claims.sh", "./scripts/mod.sh");
        files.insert("hooks.toml".into(), hooks.clone());
        let d = tempfile::tempdir().unwrap();
        for (rel, text) in &files {
            let path = d.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let script = d.path().join("scripts/mod.sh");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
        // the folder loads (a server may still refuse its command hooks for other reasons)
        let h = Harness::load(d.path()).unwrap();
        let problems = h.unrunnable_hooks();
        let id_line = line_of(&hooks, "\"no-medical-claims\"");
        assert!(
            problems.len() == 1
                && problems[0].file == "hooks.toml"
                && problems[0].line == id_line
                && id_line.is_some()
                && problems[0].message.contains("`./scripts/mod.sh`")
                && problems[0].message.contains("not executable (mode 644)")
                && problems[0].message.contains("chmod +x scripts/mod.sh"),
            "{problems:?}"
        );
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(Harness::load(d.path())
            .unwrap()
            .unrunnable_hooks()
            .is_empty());
    }
}
