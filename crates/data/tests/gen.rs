//! `hat data gen` as a library: the same seed gives the same dataset bytes, a different seed
//! different data; with `shared_scene` each run of `group` trajectories shows one identical
//! system prompt (one harness state, one stream, one product on stage), so training packs the
//! whole group on it, where without it only the part of the prompt before the scene is shared.

use std::path::Path;

use hat_augment::Pool;
use hat_data::{generate, states, GenConfig, Record, Teacher};

/// The dataset bytes of `tasks` oracle trajectories over the production harness and 3 states;
/// asserts that the oracle passes every task.
fn run(tasks: usize, seed: u64, group: usize, shared_scene: bool) -> Vec<u8> {
    let shares = hat_data::gen::FamilyShares::default();
    oracle_bytes(3, tasks, seed, group, shared_scene, shares)
}

/// The dataset bytes of `tasks` oracle trajectories over the production harness and
/// `variants` train-pool states drawn with `shares`; asserts that the oracle passes every task.
fn oracle_bytes(
    variants: usize,
    tasks: usize,
    seed: u64,
    group: usize,
    shared_scene: bool,
    shares: hat_data::gen::FamilyShares,
) -> Vec<u8> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
    let cfg = GenConfig {
        harness_dir: dir.clone(),
        variants,
        pool: Pool::Train,
        tasks,
        seed,
        group,
        shared_scene,
        mix: Default::default(),
        recovery: 0.0,
        first_turns: 0,
    };
    let st = hat_data::gen::states_with(&dir, variants, Pool::Train, seed, shares).unwrap();
    let mut out = Vec::new();
    let r = generate(
        &cfg,
        &st,
        &mut Teacher::Oracle,
        &Default::default(),
        &mut out,
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(
        (r.written, r.rejected),
        (tasks, 0),
        "the oracle passes every task"
    );
    out
}

#[test]
fn generation_is_reproducible() {
    let a = run(120, 4, 1, false);
    assert_eq!(a, run(120, 4, 1, false));
    assert_ne!(a, run(120, 5, 1, false));
}

fn records(bytes: &[u8]) -> Vec<Record> {
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

/// How many runs of 8 show one system prompt throughout.
fn whole_groups(recs: &[Record]) -> usize {
    recs.chunks(8)
        .filter(|g| {
            g.iter()
                .all(|r| r.messages[0].content == g[0].messages[0].content)
        })
        .count()
}

#[test]
fn a_shared_scene_gives_each_group_one_system_prompt() {
    let recs = records(&run(96, 11, 8, true));
    assert_eq!(whole_groups(&recs), 12);
    for g in recs.chunks(8) {
        assert!(g.iter().all(|r| r.harness_hash == g[0].harness_hash));
        let kinds: std::collections::HashSet<_> = g.iter().map(|r| &r.task_type).collect();
        assert!(kinds.len() > 4, "a scene still mixes task kinds: {kinds:?}");
    }
    // the plain draw varies the product on stage inside a group
    assert!(whole_groups(&records(&run(96, 11, 8, false))) < 3);
}

/// The oracle's trajectories for `tasks` tasks over `variants` train-pool states drawn with
/// `shares` (seed 5, one task a group), as JSONL text.
fn oracle_text(variants: usize, tasks: usize, shares: hat_data::gen::FamilyShares) -> String {
    String::from_utf8(oracle_bytes(variants, tasks, 5, 1, false, shares)).unwrap()
}

fn element(share: f64) -> hat_data::gen::FamilyShares {
    hat_data::gen::FamilyShares {
        element: share,
        keyword: 0.0,
    }
}

/// `--element-syntaxes`: 0 leaves every state as it was (the published datasets' states); a
/// share of 1 gives every augmented state, not the production one, an element-family call
/// syntax, and the oracle passes every task in them; a held-out pool refuses the family.
#[test]
fn element_syntaxes_change_only_the_share_of_states_asked_for() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
    let hashes = |share: f64| -> Vec<(String, String)> {
        hat_data::gen::states_with(&dir, 12, Pool::Train, 5, element(share))
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s.harness.hash.clone(),
                    s.harness.syntax.as_str().to_string(),
                )
            })
            .collect()
    };
    let plain: Vec<(String, String)> = states(&dir, 12, Pool::Train, 5)
        .unwrap()
        .iter()
        .map(|s| {
            (
                s.harness.hash.clone(),
                s.harness.syntax.as_str().to_string(),
            )
        })
        .collect();
    assert_eq!(hashes(0.0), plain);
    let all = hashes(1.0);
    assert_eq!(all[0], plain[0], "the production harness is left alone");
    assert!(
        all[1..].iter().all(|(_, s)| s.starts_with("element:")),
        "{all:?}"
    );
    let some = hashes(0.5);
    let changed = some.iter().zip(&plain).filter(|(a, b)| a != b).count();
    assert!(changed > 0 && changed < 12, "{changed} of 12 changed");

    let text = oracle_text(12, 60, element(1.0));
    // calls in the JSON lines: `<exec fn=\"name\">`, its quotes escaped
    let calls = hat_harness::syntax::ELEMENTS
        .iter()
        .filter(|e| text.contains(&format!("<{} {}=\\\"", e.tag, e.attr)))
        .count();
    assert!(calls > 1, "{calls} element syntaxes called in");

    let e = hat_data::gen::states_with(&dir, 2, Pool::Heldout, 5, element(0.5))
        .err()
        .expect("a held-out pool refuses the family")
        .to_string();
    assert!(e.contains("train pool only"), "{e}");
}

/// `--keyword-syntaxes` draws only among the states the element draw left alone, so adding it
/// to a run keeps that run's element states; the two shares may not pass 1; the oracle passes
/// every task in a keyword state.
#[test]
fn keyword_syntaxes_take_the_states_the_element_draw_left() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
    let syntaxes = |element: f64, keyword: f64| -> Vec<String> {
        let shares = hat_data::gen::FamilyShares { element, keyword };
        hat_data::gen::states_with(&dir, 12, Pool::Train, 5, shares)
            .unwrap()
            .iter()
            .map(|s| s.harness.syntax.as_str().to_string())
            .collect()
    };
    let el = syntaxes(0.5, 0.0);
    let both = syntaxes(0.5, 0.5);
    for (a, b) in el.iter().zip(&both).skip(1) {
        if a.starts_with("element:") {
            assert_eq!(a, b);
        } else {
            assert!(b.starts_with("keyword:"), "{b}");
        }
    }
    assert!(syntaxes(0.0, 1.0)[1..]
        .iter()
        .all(|s| s.starts_with("keyword:")));
    let e = hat_data::gen::states_with(
        &dir,
        2,
        Pool::Train,
        5,
        hat_data::gen::FamilyShares {
            element: 0.7,
            keyword: 0.5,
        },
    )
    .err()
    .expect("shares past 1 are refused")
    .to_string();
    assert!(e.contains("more than 1"), "{e}");

    let text = oracle_text(
        6,
        40,
        hat_data::gen::FamilyShares {
            element: 0.0,
            keyword: 1.0,
        },
    );
    let words = hat_harness::syntax::KEYWORDS
        .iter()
        .filter(|k| {
            text.contains(&format!("\"{} ", k.word)) || text.contains(&format!("\\n{} ", k.word))
        })
        .count();
    assert!(words > 1, "{words} keywords called with");
}
