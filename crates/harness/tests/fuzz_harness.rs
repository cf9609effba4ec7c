//! Bounded fuzzing of the harness loader (issue 13): the production harness with one file
//! mutated (bytes replaced, inserted or cut, from a set of troublesome fragments) must load or
//! give problems, never panic.

use std::path::Path;

use hat_harness::files;
use hat_harness::Harness;
use proptest::prelude::*;

const FRAGMENTS: &[&str] = &[
    "\"",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "=",
    "\n",
    "---",
    "$ref",
    "#/$defs/a",
    "..",
    "./",
    "ẞ",
    "İ",
    "\u{feff}",
    "\u{0}",
    "18446744073709551615",
    "-1",
    "1e999",
    "NaN",
    "{{",
    "}}",
    "{%",
    "%}",
    "[[hooks]]",
    "true",
    "null",
    "\\u0000",
    "🤖",
];

fn production() -> files::FileMap {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
    files::read_dir(&dir).unwrap().0
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn a_mutated_harness_loads_or_reports_problems(
        file in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0usize..FRAGMENTS.len(), 0u8..3), 1..6),
    ) {
        let mut fm = production();
        let keys: Vec<String> = fm.keys().cloned().collect();
        let key = file.get(&keys).clone();
        let mut text = fm[&key].clone();
        for (at, frag, op) in edits {
            let boundaries: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
            let i = *at.get(&boundaries);
            match op {
                0 => text.insert_str(i, FRAGMENTS[frag]),
                1 => {
                    let j = boundaries.iter().copied().find(|&b| b > i).unwrap_or(i);
                    text.replace_range(i..j, FRAGMENTS[frag]);
                }
                _ => text.truncate(i),
            }
        }
        fm.insert(key, text);
        let (spec, _problems) = files::parse(&fm);
        if let Some(spec) = spec {
            let _ = Harness::compile(spec, None);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Model output of any shape through the production hooks (without command hooks) and
    /// every call syntax's parser.
    #[test]
    fn any_model_output_survives_hooks_and_call_parsing(
        reply in "(\\PC|ẞ|İ|best|BEST|最|第一|<tool_call>|</tool_call>|\\{|\\}|\"|CALL |\\n){0,80}",
    ) {
        static H: std::sync::OnceLock<Harness> = std::sync::OnceLock::new();
        let h = H.get_or_init(|| {
            Harness::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream")).unwrap()
        });
        let vars = serde_json::json!({"viewer": "ẞİ", "persona": {"name": "Mia"}});
        let mut log = Vec::new();
        let out = h.review_reply_static(&reply, &vars, &mut log);
        prop_assert!(out.chars().count() <= h.reply_constraints(&vars).max_chars);
        for syntax in hat_harness::CallSyntax::every() {
            let _ = syntax.parse(&reply);
        }
    }
}
