//! The oracle's trajectory of every task passes the scorer.

use std::path::Path;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use hat_harness::Harness;
use hat_tasks::{expect, score, Split, TaskKind, TaskSet, WorldCache};
use hat_teacher::oracle;

fn production() -> Harness {
    Harness::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream"))
        .expect("production harness loads")
}

/// Every augmented state of both pools for seeds `0..seeds`, with its pool and seed.
fn augmented(seeds: u64) -> Vec<(hat_augment::Pool, u64, Harness)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
    let base = hat_augment::load_spec(&dir).unwrap();
    let mut out = Vec::new();
    for pool in hat_augment::Pool::ALL {
        for seed in 0..seeds {
            let v = hat_augment::augment(&base, seed, pool).unwrap();
            out.push((
                pool,
                seed,
                Harness::compile(v.spec, Some(dir.clone())).unwrap(),
            ));
        }
    }
    out
}

fn check_all(h: &Harness, split: Split, count: usize, seed: u64) {
    let mut worlds = WorldCache::default();
    let tasks = TaskSet::generate(split, count, seed, &mut worlds).unwrap();
    let mut failures = Vec::new();
    for t in &tasks {
        let w = worlds.get(t.world_seed).unwrap();
        let exp = expect(t, h, w).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let traj = oracle::trajectory(t, h, w, &exp, &mut rng).unwrap();
        let s = score(&exp, h, &traj.attempt);
        if !s.pass {
            failures.push(format!(
                "{} [{}]: {} || reply: {}",
                t.id,
                t.kind,
                s.reason(),
                traj.attempt.reply
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} oracle trajectories fail:\n{}",
        failures.len(),
        tasks.len(),
        failures.join("\n")
    );
}

#[test]
fn oracle_passes_every_task_type_on_both_splits() {
    let h = production();
    check_all(&h, Split::Train, TaskKind::ALL.len() * 12, 11);
    check_all(&h, Split::Test, TaskKind::ALL.len() * 12, 12);
}

/// The HSA invariant: transformations preserve the task, so the oracle's
/// trajectory passes under every augmented state, training and held-out.
#[test]
fn oracle_passes_under_every_augmented_variant() {
    let mut worlds = WorldCache::default();
    let tasks = TaskSet::generate(Split::Train, TaskKind::ALL.len() * 3, 5, &mut worlds).unwrap();
    let mut failures = Vec::new();
    for (pool, seed, h) in augmented(40) {
        for t in &tasks {
            let w = worlds.get(t.world_seed).unwrap();
            let exp = expect(t, &h, w).unwrap();
            let traj =
                oracle::trajectory(t, &h, w, &exp, &mut ChaCha8Rng::seed_from_u64(seed)).unwrap();
            let s = score(&exp, &h, &traj.attempt);
            if !s.pass {
                failures.push(format!(
                    "{pool} seed {seed} {} [{}]: {} || {}",
                    t.id,
                    t.kind,
                    s.reason(),
                    traj.attempt.reply
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Recovery detours: under the production harness and train-pool states, a trajectory that
/// takes one still passes the scorer, its wrong turn is untrained, exactly one of its calls is
/// wrong (another product, or arguments the state's schema refuses) and its answer shows the
/// mistake, and the next turn is a trained call. Without detours the generator draws exactly
/// what `trajectory` draws.
#[test]
fn recovery_detours_pass_and_are_untrained() {
    use hat_harness::{Message, Role};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
    let spec = hat_augment::load_spec(&dir).unwrap();
    let mut states = vec![production()];
    for seed in 0..12u64 {
        let v = hat_augment::augment(&spec, seed, hat_augment::Pool::Train).unwrap();
        states.push(Harness::compile(v.spec, Some(dir.clone())).unwrap());
    }
    let base = &states[0];
    let mut worlds = WorldCache::default();
    let tasks = TaskSet::generate(Split::Train, TaskKind::ALL.len() * 13, 7, &mut worlds).unwrap();
    let (mut products, mut drifts, mut kinds) = (0, 0, std::collections::BTreeSet::new());
    for (i, t) in tasks.iter().enumerate() {
        let h = &states[i % states.len()];
        let w = worlds.get(t.world_seed).unwrap();
        let exp = expect(t, h, w).unwrap();
        let rng = || ChaCha8Rng::seed_from_u64(i as u64);
        let plain = oracle::trajectory(t, h, w, &exp, &mut rng()).unwrap();
        let none = oracle::trajectory_with(t, h, w, &exp, &mut rng(), 0.0, Some(base)).unwrap();
        assert_eq!(
            plain.messages, none.messages,
            "{}: recovery 0 changed the draw",
            t.id
        );
        let traj = oracle::trajectory_with(t, h, w, &exp, &mut rng(), 1.0, Some(base)).unwrap();
        let s = score(&exp, h, &traj.attempt);
        assert!(
            s.pass,
            "{} [{}] with a detour: {}",
            t.id,
            t.kind,
            s.reason()
        );
        let m: &[Message] = &traj.messages;
        let Some(k) = (0..m.len().saturating_sub(1))
            .find(|&k| m[k].weight == Some(0) && m[k + 1].role == Role::Tool)
        else {
            continue;
        };
        kinds.insert(t.kind.as_str());
        assert!(!m[k].trained());
        let wrong = h.syntax.parse(&m[k].content).unwrap().calls;
        let gold: Vec<_> = exp.calls.iter().map(|g| g.canonical()).collect();
        let answers: Vec<&Message> = m[k + 1..]
            .iter()
            .take_while(|x| x.role == Role::Tool)
            .collect();
        assert_eq!(answers.len(), wrong.len(), "{}: one answer per call", t.id);
        // the state's canonical arguments of each call, None where its schema refuses them
        let canon: Vec<_> = wrong
            .iter()
            .map(|c| {
                let tool = h
                    .tool(&c.name)
                    .expect("a detour calls the state's own tools");
                h.validate_args(&c.name, &c.arguments)
                    .ok()
                    .and_then(|()| tool.binding.to_canonical(&c.arguments).ok())
            })
            .collect();
        let missed: Vec<usize> = (0..wrong.len())
            .filter(|&j| canon[j].as_ref().is_none_or(|c| !gold.contains(c)))
            .collect();
        assert_eq!(missed.len(), 1, "{}: {}", t.id, m[k].content);
        let shown = &answers[missed[0]].content;
        match &canon[missed[0]] {
            None => {
                drifts += 1;
                assert!(
                    h.hash != base.hash,
                    "{}: a drifted call under the base harness",
                    t.id
                );
                assert!(shown.contains("error"), "{}: {shown}", t.id);
            }
            Some(c) => {
                products += 1;
                let p = w.catalog().product(c["product"].as_str().unwrap()).unwrap();
                assert!(
                    shown.contains("error")
                        || shown.contains(&p.title)
                        || shown.contains(&p.title_zh),
                    "{}: the wrong answer does not show the mistake: {shown}",
                    t.id
                );
            }
        }
        let next = &m[k + 1 + answers.len()];
        assert!(next.role == Role::Assistant && next.trained(), "{}", t.id);
        let fix = h.syntax.parse(&next.content).unwrap().calls;
        assert!(!fix.is_empty(), "{}: no correction", t.id);
    }
    // few training states change a tool's arguments (4 of 260 tasks here), so few drifts
    assert!(
        products >= 30 && drifts >= 2,
        "{products} wrong-product and {drifts} drifted-argument detours in {} tasks",
        tasks.len()
    );
    for k in ["product_fact", "variant_stock", "compare"] {
        assert!(kinds.contains(k), "no detour on {k}: {kinds:?}");
    }
}

/// The whole-call grammar (`hat_harness::CallGrammar`, decode-time constraint) refuses
/// nothing the oracle writes: every call of every gold trajectory, under the production
/// harness and every augmented state, training and held-out, passes it byte by byte, and the
/// answer may end where the oracle's does, and not before (the reply limit that the grammar
/// carries never ends one of its answers early).
#[test]
fn the_call_grammar_admits_every_oracle_turn() {
    use hat_harness::{CallGrammar, Role};
    let mut worlds = WorldCache::default();
    let tasks = TaskSet::generate(Split::Test, TaskKind::ALL.len() * 2, 9, &mut worlds).unwrap();
    let mut states = vec![production()];
    states.extend(augmented(40).into_iter().map(|(_, _, h)| h));
    let (mut turns, mut calls, mut failures) = (0, 0, Vec::new());
    for (i, h) in states.iter().enumerate() {
        let g = CallGrammar::for_harness(h);
        for t in tasks.iter().skip(i % 3).step_by(3) {
            let w = worlds.get(t.world_seed).unwrap();
            let exp = expect(t, h, w).unwrap();
            let traj = oracle::trajectory(t, h, w, &exp, &mut ChaCha8Rng::seed_from_u64(i as u64))
                .unwrap();
            for m in traj.messages.iter().filter(|m| m.role == Role::Assistant) {
                turns += 1;
                // the grammar is engaged: the first call's name, continued, is refused
                if let Some(c) = h.syntax.parse(&m.content).unwrap().calls.first() {
                    calls += 1;
                    let at = m.content.find(c.name.as_str()).unwrap() + c.name.len();
                    if g.admits(&m.content.as_bytes()[..at], b"Zq") {
                        failures.push(format!(
                            "{}: not engaged in {:?}",
                            h.syntax.as_str(),
                            m.content
                        ));
                    }
                }
                // the reply limit never ends one early: no strict prefix is complete (it
                // holds fewer characters, and a call opened later is not in it yet; the
                // check only grows with the text until a call opens, so the longest prefix
                // stands for all of them)
                let body = m.content.as_bytes();
                let cut = m.content.char_indices().last().map_or(0, |(i, _)| i);
                if !body.is_empty() && g.complete(&body[..cut]) {
                    failures.push(format!(
                        "{} ({}) {}: complete before its end: {:?}",
                        h.syntax.as_str(),
                        h.hash,
                        t.id,
                        m.content
                    ));
                }
                let mut b = body.to_vec();
                b.push(0);
                if let Some(k) = (0..b.len()).find(|&k| !g.admits(&b[..k], &b[k..k + 1])) {
                    failures.push(format!(
                        "{} ({}) {}: refused at byte {k} of {:?}",
                        h.syntax.as_str(),
                        h.hash,
                        t.id,
                        m.content
                    ));
                }
            }
        }
    }
    assert!(
        turns > 1000 && calls > 500,
        "{turns} turns, {calls} with calls, checked"
    );
    assert!(
        failures.is_empty(),
        "{} of {turns} turns refused:\n{}",
        failures.len(),
        failures
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
