//! Why an agent suite's items failed: each failed item's scorer reasons sorted into causes
//! (the wrong product looked up, a tool the harness does not have, a fact missing from the
//! reply, ...), and for hvqa the pass rate under each held-out transformation of its harness
//! states. `hat eval failures RUN...` prints both, side by side for several runs: the evidence
//! for what limits a model, and where the next training data should go.

use std::collections::BTreeMap;
use std::path::Path;

use hat_harness::CallSyntax;

use crate::EvalError;

/// A cause of failure, read from the scorer's reasons. An item can have several.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cause {
    /// A tool call that does not parse in the harness's call syntax.
    CallSyntax,
    /// No reply to the viewers, or prompt scaffolding in it.
    Reply,
    /// A call to a tool name the harness does not have.
    UnknownTool,
    /// A call to a real tool that the task does not need (a wrong choice).
    UnneededTool,
    /// A needed operation never called.
    MissingCall,
    /// Tool-call markup left in the reply: a call in another syntax than the harness's, or
    /// one its parser did not take (`<function=x>` under a `CALL x(...)` harness). Such an
    /// item is not also counted as a missing call: the model tried to call.
    ForeignSyntax,
    /// A tool called where the task needs none.
    NeedlessCall,
    /// The right operation with another product than the one the viewer meant.
    WrongProduct,
    /// Arguments that do not fit the tool's schema (missing, unexpected or mistyped names).
    Schema,
    /// Another argument with a wrong value (a size, a region, a budget ...).
    WrongValue,
    /// The reply leaves out a fact the task needs.
    MissingFact,
    /// The reply states something wrong: a wrong figure, a phrase that does not fit (a product
    /// over budget, a denial of being an AI), or more unexplained numbers than allowed.
    WrongFact,
    /// A hook, length or wording constraint broken.
    Constraint,
    /// A reason none of the above recognise.
    Other,
}

impl Cause {
    pub const ALL: [Cause; 14] = [
        Cause::WrongProduct,
        Cause::UnknownTool,
        Cause::UnneededTool,
        Cause::MissingCall,
        Cause::ForeignSyntax,
        Cause::NeedlessCall,
        Cause::Schema,
        Cause::WrongValue,
        Cause::CallSyntax,
        Cause::MissingFact,
        Cause::WrongFact,
        Cause::Reply,
        Cause::Constraint,
        Cause::Other,
    ];

    pub fn describe(self) -> &'static str {
        match self {
            Cause::CallSyntax => "a tool call that does not parse",
            Cause::Reply => "no reply, or scaffolding in it",
            Cause::UnknownTool => "calls a tool the harness lacks",
            Cause::UnneededTool => "calls the wrong tool",
            Cause::MissingCall => "misses a needed call",
            Cause::ForeignSyntax => "a call the harness cannot read",
            Cause::NeedlessCall => "calls a tool where none is needed",
            Cause::WrongProduct => "looks up the wrong product",
            Cause::Schema => "arguments off the tool's schema",
            Cause::WrongValue => "another argument wrong",
            Cause::MissingFact => "reply misses a fact",
            Cause::WrongFact => "reply states a wrong fact",
            Cause::Constraint => "breaks a constraint",
            Cause::Other => "other",
        }
    }
}

/// The causes in one item's joined reason (`Score::reason`: `component: detail; detail;
/// component: detail`). Consequences of an earlier cause (`no valid stock call` after a missing
/// or unknown call) add nothing.
pub fn causes(reason: &str) -> Vec<Cause> {
    const COMPONENTS: [&str; 5] = ["format", "calls", "arguments", "facts", "constraints"];
    let mut out = Vec::new();
    let mut component = "";
    for seg in reason.split("; ").filter(|s| !s.trim().is_empty()) {
        let mut detail = seg;
        let mut continues = true;
        if let Some((head, rest)) = seg.split_once(": ") {
            if COMPONENTS.contains(&head) {
                component = head;
                detail = rest;
                continues = false;
            }
        }
        let cause = match component {
            "format" if call_markup(detail) => Some(Cause::ForeignSyntax),
            "format" if detail.contains("no reply") || detail.contains("scaffolding") => {
                Some(Cause::Reply)
            }
            "format" if detail.contains("calls is too many") => Some(Cause::Other),
            "format" => Some(Cause::CallSyntax),
            "calls" if detail.starts_with("unknown tool") => Some(Cause::UnknownTool),
            "calls" if detail.contains("which this task does not need") => {
                Some(Cause::UnneededTool)
            }
            "calls" if detail.starts_with("did not call") => Some(Cause::MissingCall),
            "calls" if detail.starts_with("no tool is needed") => Some(Cause::NeedlessCall),
            "arguments" if detail.starts_with("no valid ") => None,
            "arguments" if detail.contains("`product` is ") => Some(Cause::WrongProduct),
            "arguments"
                if detail.contains("invalid arguments")
                    || detail.contains("missing `")
                    || detail.contains("unexpected argument")
                    || detail.contains("required property") =>
            {
                Some(Cause::Schema)
            }
            "arguments" if detail.contains(" is ") && detail.contains("expected") => {
                Some(Cause::WrongValue)
            }
            "facts" if detail.contains("does not state") => Some(Cause::MissingFact),
            "facts"
                if detail.starts_with("states the wrong figure")
                    || detail.contains("which does not fit")
                    || detail.contains("unexplained numbers") =>
            {
                Some(Cause::WrongFact)
            }
            "constraints" => Some(Cause::Constraint),
            // Details are joined with "; " too, and some hold one themselves (a schema error
            // lists up to three): an unrecognised piece after the first of a component is the
            // rest of the detail before it, not a cause of its own.
            _ if continues && !out.is_empty() => None,
            _ => Some(Cause::Other),
        };
        if let Some(c) = cause {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    if out.contains(&Cause::ForeignSyntax) {
        out.retain(|&c| c != Cause::MissingCall);
    }
    // a missing call whose reason is only a consequence still failed the item
    if out.is_empty() && !reason.is_empty() {
        out.push(Cause::Other);
    }
    out
}

/// Whether a format detail is the scorer's "the reply contains prompt scaffolding `M`" with
/// `M` a call syntax's marker (`hat_tasks::scaffolding_in`): call markup in the reply.
fn call_markup(detail: &str) -> bool {
    let Some(rest) = detail.strip_prefix("the reply contains prompt scaffolding `") else {
        return false;
    };
    let marker = rest.strip_suffix('`').unwrap_or(rest);
    marker == "</tool_call>" || CallSyntax::ALL.iter().any(|c| c.marker() == marker)
}

/// An agent suite's failures in one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Breakdown {
    pub items: usize,
    pub failed: usize,
    /// Failed items per cause (an item counts once under each of its causes).
    pub causes: BTreeMap<Cause, usize>,
    /// (passed, total) per task type.
    pub by_type: BTreeMap<String, (usize, usize)>,
    /// (passed, total) per harness hash.
    pub by_harness: BTreeMap<String, (usize, usize)>,
    /// (passed, total) of the items whose viewer names a product by its link number (`#3`,
    /// `no.3`, `link 3`, `3号` ...), and of the rest: the product list maps links to ids, a
    /// look-up a small model gets wrong far more often than a title.
    pub by_link: [(usize, usize); 2],
    /// Items with a turn sampled past a call grammar that refused every token
    /// (`unchecked_tokens` in a turn: the call check failed open; served runs only).
    pub unchecked: usize,
}

/// Reads `DIR/SUITE/items.jsonl` of a `hat eval` run (each item once, as `results.json` counts
/// them); `None` when the run has no such suite.
pub fn read(run: &Path, suite: &str) -> Result<Option<Breakdown>, EvalError> {
    let path = run.join(suite).join("items.jsonl");
    if !path.is_file() {
        return Ok(None);
    }
    let mut b = Breakdown::default();
    for item in crate::run::read_items(&path)? {
        let pass = item["pass"].as_bool().unwrap_or(false);
        b.items += 1;
        for (key, map) in [
            (item["task_type"].as_str(), &mut b.by_type),
            (item["harness_hash"].as_str(), &mut b.by_harness),
        ] {
            let e = map.entry(key.unwrap_or("?").to_string()).or_default();
            e.0 += usize::from(pass);
            e.1 += 1;
        }
        let turns = item["turns"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if turns
            .iter()
            .any(|t| t["unchecked_tokens"].as_u64().is_some_and(|n| n > 0))
        {
            b.unchecked += 1;
        }
        let link = usize::from(!names_a_link(item["input"].as_str().unwrap_or("")));
        b.by_link[link].0 += usize::from(pass);
        b.by_link[link].1 += 1;
        if !pass {
            b.failed += 1;
            for c in causes(item["reason"].as_str().unwrap_or("")) {
                *b.causes.entry(c).or_default() += 1;
            }
        }
    }
    Ok(Some(b))
}

/// What IFEval's answers in one run look like: the length and looping that SFT on short host
/// replies brings to general answers, beside the strict pass rate per instruction category.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IfevalAnswers {
    pub prompts: usize,
    /// Prompts whose every instruction passed (strict).
    pub passed: usize,
    /// Median answer length in words (whitespace-separated).
    pub median_words: usize,
    /// Answers under [`SHORT_ANSWER_WORDS`] words (IFEval's prompts mostly ask for essays,
    /// letters, stories: the base model's median answer is ~140 words).
    pub short: usize,
    /// Answers that repeat themselves (`hat_ifeval::repetition`: the rule replay data drops).
    pub looping: usize,
    /// (passed, total) instructions per category (`punctuation`, `length_constraints`, ...), strict.
    pub by_category: BTreeMap<String, (usize, usize)>,
    /// (passed, total) per instruction (`punctuation:no_comma`, ...), strict: where a
    /// category's change comes from.
    pub by_instruction: BTreeMap<String, (usize, usize)>,
}

/// An answer shorter than this many words counts as short in [`IfevalAnswers`].
pub const SHORT_ANSWER_WORDS: usize = 40;

/// Reads `DIR/ifeval/items.jsonl` of a `hat eval` run (a prompt written twice counts once);
/// `None` when the run has no IFEval suite.
pub fn read_ifeval(run: &Path) -> Result<Option<IfevalAnswers>, EvalError> {
    let path = run.join("ifeval").join("items.jsonl");
    if !path.is_file() {
        return Ok(None);
    }
    let mut a = IfevalAnswers::default();
    let mut seen = std::collections::HashSet::new();
    let mut words = Vec::new();
    for item in crate::run::read_items(&path)? {
        if !seen.insert(item["key"].to_string()) {
            continue;
        }
        let response = item["response"].as_str().unwrap_or("");
        let strict: Vec<bool> = item["strict"]
            .as_array()
            .map(|v| v.iter().map(|b| b.as_bool().unwrap_or(false)).collect())
            .unwrap_or_default();
        let ids = item["instruction_id_list"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        a.prompts += 1;
        a.passed += usize::from(!strict.is_empty() && strict.iter().all(|&b| b));
        let n = response.split_whitespace().count();
        words.push(n);
        a.short += usize::from(n < SHORT_ANSWER_WORDS);
        a.looping += usize::from(hat_ifeval::repetition::repetition(response).is_some());
        for (id, ok) in ids.iter().zip(&strict) {
            let id = id.as_str().unwrap_or("?");
            let category = id.split(':').next().unwrap_or("?");
            for (map, key) in [(&mut a.by_category, category), (&mut a.by_instruction, id)] {
                let e = map.entry(key.to_string()).or_default();
                e.0 += usize::from(*ok);
                e.1 += 1;
            }
        }
    }
    words.sort_unstable();
    a.median_words = words.get(words.len() / 2).copied().unwrap_or(0);
    Ok(Some(a))
}

/// Whether a task's input names a product by link number: a digit right after `#`, `no.`,
/// `link`, `lnk`, `item`, `number` (a space between allowed) or `链接` / `第`, or right before
/// `号` or an ordinal's `th link`.
pub fn names_a_link(input: &str) -> bool {
    let lower = input.to_lowercase();
    let b = lower.as_bytes();
    let digit_at = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    (0..b.len()).any(|i| {
        let rest = &b[i..];
        let after = |w: &str| {
            rest.starts_with(w.as_bytes())
                && (digit_at(i + w.len())
                    || (b.get(i + w.len()) == Some(&b' ') && digit_at(i + w.len() + 1)))
        };
        ["#", "no.", "link", "lnk", "item", "number", "链接", "第"]
            .iter()
            .any(|w| after(w))
            || (digit_at(i) && b[i + 1..].starts_with("号".as_bytes()))
            || (digit_at(i)
                && ["st link", "nd link", "rd link", "th link"]
                    .iter()
                    .any(|o| b[i + 1..].starts_with(o.as_bytes())))
    })
}

/// The held-out transformations of hvqa's harness states, by state hash: `name` or
/// `name:style` (the style, syntax or layout drawn), e.g. `rename_tools:pascal`.
pub fn hvqa_transformations(
    harness_dir: &Path,
) -> Result<BTreeMap<String, Vec<String>>, EvalError> {
    let base = hat_augment::load_spec(harness_dir)?;
    let mut out = BTreeMap::new();
    for s in crate::suite::hvqa_seeds() {
        let v = hat_augment::augment(&base, s, hat_augment::Pool::Heldout)?;
        let mut labels: Vec<String> = v
            .manifest
            .applied
            .iter()
            .filter(|a| a.heldout)
            .map(|a| {
                let kind = ["style", "syntax", "layout", "format"]
                    .iter()
                    .find_map(|k| a.detail.get(*k).and_then(|x| x.as_str()));
                match kind {
                    Some(k) => format!("{}:{k}", a.name),
                    None => a.name.clone(),
                }
            })
            .collect();
        labels.sort();
        labels.dedup();
        out.insert(v.manifest.hash.clone(), labels);
    }
    Ok(out)
}

/// (passed, total, states) per held-out transformation, over the states of `by_harness` that
/// `transformations` knows; also how many items' states it did not know (a run made with
/// another harness directory).
pub fn by_transformation(
    by_harness: &BTreeMap<String, (usize, usize)>,
    transformations: &BTreeMap<String, Vec<String>>,
) -> (BTreeMap<String, (usize, usize, usize)>, usize) {
    let mut out: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    let mut unknown = 0;
    for (hash, &(p, t)) in by_harness {
        match transformations.get(hash) {
            Some(labels) => {
                for l in labels {
                    let e = out.entry(l.clone()).or_default();
                    e.0 += p;
                    e.1 += t;
                    e.2 += 1;
                }
            }
            None => unknown += t,
        }
    }
    (out, unknown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hat_harness::Harness;
    use hat_tasks::{Attempt, Split, TaskKind, TaskSet, WorldCache};

    #[test]
    fn reasons_from_eval_runs_sort_into_causes() {
        let r = "calls: unknown tool `get_product_id` (this harness has: a, b); did not call \
                 product; arguments: no valid product call; facts: does not state material (x)";
        assert_eq!(
            causes(r),
            vec![Cause::UnknownTool, Cause::MissingCall, Cause::MissingFact]
        );
        let r = "arguments: product: `product` is \"P4\", expected \"P3\"; facts: does not \
                 state price of P3 (69.9)";
        assert_eq!(causes(r), vec![Cause::WrongProduct, Cause::MissingFact]);
        let r = "format: turn 0: the tool call is not valid JSON (expected `,`); calls: called \
                 `t_9701` (stock), which this task does not need";
        assert_eq!(causes(r), vec![Cause::CallSyntax, Cause::UnneededTool]);
        assert_eq!(
            causes("arguments: invalid arguments for t: \"Listing\" is a required property"),
            vec![Cause::Schema]
        );
        assert_eq!(causes("constraints: uses `best`"), vec![Cause::Constraint]);
        let r = "format: the reply contains prompt scaffolding `<function=`; calls: did not \
                 call search; arguments: no valid search call";
        assert_eq!(causes(r), vec![Cause::ForeignSyntax]);
        let r = "format: the reply contains prompt scaffolding `[comment]`; calls: did not \
                 call search";
        assert_eq!(causes(r), vec![Cause::Reply, Cause::MissingCall]);
        assert_eq!(causes("something new"), vec![Cause::Other]);
        let r = "facts: states the wrong figure 12; mentions `Calm Throw`, which does not fit; \
                 5 unexplained numbers (at most 2)";
        assert_eq!(causes(r), vec![Cause::WrongFact]);
        // a detail holding "; " of its own is one detail
        let r = "arguments: invalid arguments for t: /a: 3 is not of type \"string\"; /b: \"x\" \
                 is not one of [\"y\"]; facts: does not state price (9)";
        assert_eq!(causes(r), vec![Cause::Schema, Cause::MissingFact]);
        assert!(causes("").is_empty());
    }

    /// The scorer's own words for a wrong product and an unknown tool land in their causes, so
    /// a change of wording there fails here instead of moving items to `other`.
    #[test]
    fn the_scorers_reasons_are_recognised() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
        let h = Harness::load(&dir).unwrap();
        let mut worlds = WorldCache::default();
        let tasks =
            TaskSet::generate_kinds(Split::Test, 1, 3, &[TaskKind::ProductFact], &mut worlds)
                .unwrap();
        let task = &tasks[0];
        let world = worlds.get(task.world_seed).unwrap();
        let exp = hat_tasks::expect(task, &h, world).unwrap();
        let gold = match &task.intent {
            hat_tasks::Intent::ProductFact { product, .. } => product.clone(),
            other => panic!("{other:?}"),
        };
        let other = if gold == "P1" { "P2" } else { "P1" };
        let call = |name: &str, pid: &str| hat_harness::ToolCall {
            name: name.into(),
            arguments: serde_json::json!({ "product_id": pid }),
        };
        let score_reply = |calls, reply: &str| {
            hat_tasks::score(
                &exp,
                &h,
                &Attempt {
                    calls,
                    format_errors: vec![],
                    reply: reply.into(),
                },
            )
            .reason()
        };
        let score = |calls| score_reply(calls, "Here you go!");
        let foreign = score_reply(vec![], r#"<invoke name="get_product">{}</invoke>"#);
        let c = causes(&foreign);
        assert!(c.contains(&Cause::ForeignSyntax), "{foreign}");
        assert!(!c.contains(&Cause::MissingCall), "{foreign}");
        let wrong = score(vec![call("get_product", other)]);
        assert!(causes(&wrong).contains(&Cause::WrongProduct), "{wrong}");
        let unknown = score(vec![call("get_product_id", &gold)]);
        assert!(causes(&unknown).contains(&Cause::UnknownTool), "{unknown}");
        let unneeded = score(vec![call("check_stock", &gold)]);
        assert!(
            causes(&unneeded).contains(&Cause::UnneededTool),
            "{unneeded}"
        );
        let schema = score(vec![hat_harness::ToolCall {
            name: "get_product".into(),
            arguments: serde_json::json!({ "item": gold }),
        }]);
        assert!(causes(&schema).contains(&Cause::Schema), "{schema}");
        assert!(!causes(&wrong).contains(&Cause::Other), "{wrong}");
    }

    #[test]
    fn link_numbers_are_told_from_titles() {
        for yes in [
            "[comment] tata: wat material is no.5",
            "#9 beats no.7 or meh",
            "how much link 3",
            "the 3rd link v the hoodie",
            "lnk 4 price",
            "3号多少钱",
            "链接3还有吗",
            "Link 12?",
        ] {
            assert!(names_a_link(yes), "{yes}");
        }
        for no in [
            "how much is the hoodie",
            "can u calc Swift Running Shoes x2 for me",
            "3 dailyfit hoodie how much??",
            "is there a linked coupon",
            "",
        ] {
            assert!(!names_a_link(no), "{no}");
        }
    }

    #[test]
    fn transformations_add_up_over_states() {
        let by_harness = BTreeMap::from([
            ("a".to_string(), (3, 10)),
            ("b".to_string(), (5, 10)),
            ("zz".to_string(), (1, 4)),
        ]);
        let t = BTreeMap::from([
            ("a".to_string(), vec!["x".to_string(), "y".to_string()]),
            ("b".to_string(), vec!["y".to_string()]),
        ]);
        let (rows, unknown) = by_transformation(&by_harness, &t);
        assert_eq!(rows["x"], (3, 10, 1));
        assert_eq!(rows["y"], (8, 20, 2));
        assert_eq!(unknown, 4);
    }

    #[test]
    fn ifeval_answers_count_length_loops_and_categories() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read_ifeval(d.path()).unwrap(), None);
        std::fs::create_dir_all(d.path().join("ifeval")).unwrap();
        let looped = "The war was long and hard for all. ".repeat(4);
        let long = (0..60)
            .map(|i| format!("word{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        let items = [
            serde_json::json!({"key": 1, "instruction_id_list": ["punctuation:no_comma", "length_constraints:number_words"],
                "strict": [true, false], "response": looped}),
            serde_json::json!({"key": 2, "instruction_id_list": ["punctuation:no_comma"],
                "strict": [true], "response": long}),
            serde_json::json!({"key": 3, "instruction_id_list": ["startend:quotation"],
                "strict": [false], "response": "Hi there!"}),
        ];
        let mut text: String = items.iter().map(|i| format!("{i}\n")).collect();
        // a prompt written twice (a resumed run) counts once
        text.push_str(&format!("{}\n", items[2]));
        std::fs::write(d.path().join("ifeval/items.jsonl"), text).unwrap();
        let a = read_ifeval(d.path()).unwrap().unwrap();
        assert_eq!((a.prompts, a.passed, a.short, a.looping), (3, 1, 2, 1));
        assert_eq!(a.median_words, 32);
        assert_eq!(a.by_category["punctuation"], (2, 2));
        assert_eq!(a.by_category["length_constraints"], (0, 1));
        assert_eq!(a.by_category["startend"], (0, 1));
        assert_eq!(a.by_instruction["punctuation:no_comma"], (2, 2));
        assert_eq!(a.by_instruction["length_constraints:number_words"], (0, 1));
        assert_eq!(a.by_instruction.len(), 3);
    }
}
