//! Warming a conversation's opening (what a server does while idle): the first turn then
//! finds its whole system prompt in the prefix cache.

use std::path::Path;

use hat_agent::episode::ChatModel;
use hat_harness::Message;
use hat_local_model::LocalModel;
use hat_model::{SamplingParams, WeightFormat};

fn model(dir: &Path) -> LocalModel {
    let path = hat_train::fixture::tiny_model(&dir.join("m"), 1, "qwen2").unwrap();
    LocalModel::load(&path, WeightFormat::F32, SamplingParams::default(), 4).unwrap()
}

fn opening() -> Message {
    // the fixture's context is 128 tokens
    Message::system("You are Mia. P1 Hoodie.")
}

#[test]
fn a_warmed_opening_is_cached_whole_for_the_first_turn() {
    let dir = tempfile::tempdir().unwrap();
    let chat = [opening(), Message::user("in M?")];
    let cold = model(dir.path()).generate(&chat).unwrap();
    assert_eq!(cold.cached_tokens, 0, "a fresh model has nothing cached");

    let mut m = model(dir.path());
    let n = m.warm(&[opening()]).unwrap();
    assert!(n > 0, "warming computed nothing");
    assert_eq!(
        m.warm(&[opening()]).unwrap(),
        0,
        "a warm opening is not computed again"
    );
    let warm = m.generate(&chat).unwrap();
    assert_eq!(
        warm.cached_tokens, n,
        "the first turn did not find the opening cached"
    );
    // same prompt, same greedy answer: warming changes what is computed, not the result
    assert_eq!(warm.tokens, cold.tokens);
    assert_eq!(warm.prompt_ids, cold.prompt_ids);
}

#[test]
fn a_chat_without_a_system_prompt_has_nothing_to_warm() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = model(dir.path());
    assert_eq!(m.warm(&[Message::user("hello")]).unwrap(), 0);
}

/// An opening with earlier turns (a stream's history) is cached whole: the next event's
/// turn pays only for the event.
#[test]
fn an_opening_with_earlier_turns_is_cached_whole() {
    let dir = tempfile::tempdir().unwrap();
    let opening = [
        opening(),
        Message::user("hi!"),
        Message::assistant("Hello, welcome!"),
    ];
    let mut chat = opening.to_vec();
    chat.push(Message::user("in M?"));
    let cold = model(dir.path()).generate(&chat).unwrap();

    let mut m = model(dir.path());
    let system_only = m.warm(&opening[..1]).unwrap();
    let rest = m.warm(&opening).unwrap();
    assert!(rest > 0, "the turns were not computed");
    assert_eq!(m.warm(&opening).unwrap(), 0, "computed twice");
    let warm = m.generate(&chat).unwrap();
    // the system prompt and the turns: all but the event's message and the answer header
    assert_eq!(warm.cached_tokens, system_only + rest);
    assert_eq!(warm.tokens, cold.tokens);
    assert_eq!(warm.prompt_ids, cold.prompt_ids);
}

/// A stream's history window slides after every reply: the next opening shares only the
/// system prompt with the last one, which stays cached on its own.
#[test]
fn a_new_history_reuses_the_cached_system_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = model(dir.path());
    let with =
        |user: &str, reply: &str| [opening(), Message::user(user), Message::assistant(reply)];
    // what each costs from nothing
    let system_only = model(dir.path()).warm(&[opening()]).unwrap();
    let fresh = model(dir.path())
        .warm(&with("in M?", "Yes, M is there."))
        .unwrap();
    assert!(fresh > system_only);
    let first = m.warm(&with("hi!", "Hello, welcome!")).unwrap();
    assert!(first > system_only);
    let second = m.warm(&with("in M?", "Yes, M is there.")).unwrap();
    assert_eq!(
        second,
        fresh - system_only,
        "the system prompt was computed again"
    );
}
