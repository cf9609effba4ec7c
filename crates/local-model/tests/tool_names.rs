//! Tool names constrained at decode time, end to end: every call syntax's name slots
//! (`CallSyntax::name_slots`) find the name in the calls that syntax writes, and a turn under
//! `TurnRule::Named` reaches the engine's sampler.

use std::path::Path;
use std::sync::Arc;

use hat_agent::episode::{ChatModel, TurnRule};
use hat_harness::{CallSyntax, Message, ToolCall};
use hat_local_model::LocalModel;
use hat_model::{NameSlots, SamplingParams, WeightFormat};
use serde_json::json;

const NAMES: [&str; 3] = ["get_stock", "Stock_Lookup", "pin-product"];

/// The index of the first byte of `text` the slots refuse, fed one byte at a time.
fn first_refused(s: &NameSlots, text: &str) -> Option<usize> {
    let b = text.as_bytes();
    (0..b.len()).find(|&i| !s.admits(&b[..i], &b[i..i + 1]))
}

#[test]
fn every_syntax_admits_its_calls_to_known_tools_and_refuses_others_inside_the_name() {
    for syntax in CallSyntax::ALL {
        let slots = NameSlots::new(syntax.name_slots(), &NAMES).unwrap();
        for name in NAMES {
            // an argument called `name` is not a name slot, nor a nested array one
            let call = ToolCall {
                name: name.into(),
                arguments: json!({"name": "Hoodie", "tool": "x", "qty": 2, "grid": [[1, 2]]}),
            };
            let text = format!("Sure!\n{}", syntax.format(&call));
            assert_eq!(first_refused(&slots, &text), None, "{syntax:?}: {text}");
        }
        let call = ToolCall {
            name: "getStock".into(),
            arguments: json!({"product_id": "P1"}),
        };
        let text = syntax.format(&call);
        let at = text.find("getStock").unwrap();
        assert_eq!(
            first_refused(&slots, &text),
            Some(at + 3),
            "{syntax:?}: {text}"
        );
    }
}

fn model(dir: &Path) -> LocalModel {
    let path = hat_train::fixture::tiny_model(&dir.join("m"), 1, "qwen2").unwrap();
    LocalModel::load(&path, WeightFormat::F32, SamplingParams::default(), 12).unwrap()
}

#[test]
fn a_named_turn_reaches_the_sampler() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = model(dir.path());
    let chat = [Message::system("You are Mia."), Message::user("in M?")];
    let free = m.generate_turns(&[&chat], &[TurnRule::Any]).unwrap();
    let text = free[0].text.clone();
    // the free answer's first ASCII letter or digit opens the slot; it is not followed by
    // the one name there is
    let opener: String = text
        .chars()
        .find(char::is_ascii_alphanumeric)
        .map(String::from)
        .unwrap_or_else(|| panic!("no letter in the fixture's answer {text:?}"));
    assert!(!text.contains(&format!("{opener}z")));
    let named = TurnRule::Named {
        slots: Box::leak(vec![&*Box::leak(opener.clone().into_boxed_str())].into_boxed_slice()),
        names: Arc::from(vec!["zzqzz".to_string()]),
    };
    let out = m.generate_turns(&[&chat], &[named]).unwrap();
    assert_ne!(out[0].text, text);
    // wherever the slot opens, the name follows (or the answer ends)
    for (at, _) in out[0].text.match_indices(&opener) {
        let after = &out[0].text[at + opener.len()..];
        assert!(
            after.is_empty() || after.starts_with('z'),
            "{opener:?} then {after:?}"
        );
    }
}
