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
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
    let base = hat_augment::load_spec(&dir).unwrap();
    let mut worlds = WorldCache::default();
    let tasks = TaskSet::generate(Split::Train, TaskKind::ALL.len() * 3, 5, &mut worlds).unwrap();
    let mut failures = Vec::new();
    for pool in hat_augment::Pool::ALL {
        for seed in 0..40u64 {
            let v = hat_augment::augment(&base, seed, pool).unwrap();
            let h = Harness::compile(v.spec, Some(dir.clone())).unwrap();
            for t in &tasks {
                let w = worlds.get(t.world_seed).unwrap();
                let exp = expect(t, &h, w).unwrap();
                let traj = oracle::trajectory(t, &h, w, &exp, &mut ChaCha8Rng::seed_from_u64(seed))
                    .unwrap();
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
/// takes one still passes the scorer, its wrong turn is untrained and names another product
/// whose answer shows the mistake, and the next turn makes the gold call. Without detours the
/// generator draws exactly what `trajectory` draws.
#[test]
fn recovery_detours_pass_and_are_untrained() {
    use hat_harness::{Message, Role};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
    let base = hat_augment::load_spec(&dir).unwrap();
    let mut states = vec![production()];
    for seed in 0..4u64 {
        let v = hat_augment::augment(&base, seed, hat_augment::Pool::Train).unwrap();
        states.push(Harness::compile(v.spec, Some(dir.clone())).unwrap());
    }
    let mut worlds = WorldCache::default();
    let tasks = TaskSet::generate(Split::Train, TaskKind::ALL.len() * 6, 7, &mut worlds).unwrap();
    let (mut detours, mut kinds) = (0, std::collections::BTreeSet::new());
    for (i, t) in tasks.iter().enumerate() {
        let h = &states[i % states.len()];
        let w = worlds.get(t.world_seed).unwrap();
        let exp = expect(t, h, w).unwrap();
        let seed = i as u64;
        let plain =
            oracle::trajectory(t, h, w, &exp, &mut ChaCha8Rng::seed_from_u64(seed)).unwrap();
        let none =
            oracle::trajectory_with(t, h, w, &exp, &mut ChaCha8Rng::seed_from_u64(seed), 0.0)
                .unwrap();
        assert_eq!(
            plain.messages, none.messages,
            "{}: recovery 0 changed the draw",
            t.id
        );
        let traj =
            oracle::trajectory_with(t, h, w, &exp, &mut ChaCha8Rng::seed_from_u64(seed), 1.0)
                .unwrap();
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
        detours += 1;
        kinds.insert(t.kind.as_str());
        assert!(!m[k].trained() && m.iter().skip(k + 1).any(Message::trained));
        let wrong = h.syntax.parse(&m[k].content).unwrap().calls;
        let gold: Vec<_> = exp.calls.iter().map(|g| g.canonical()).collect();
        let answers: Vec<&Message> = m[k + 1..]
            .iter()
            .take_while(|x| x.role == Role::Tool)
            .collect();
        assert_eq!(answers.len(), wrong.len(), "{}: one answer per call", t.id);
        // exactly one call of the detour misses its gold product, and its answer shows it
        let missed: Vec<usize> = (0..wrong.len())
            .filter(|&j| {
                let tool = h
                    .tool(&wrong[j].name)
                    .expect("the detour calls the harness's tools");
                let c = tool.binding.to_canonical(&wrong[j].arguments).unwrap();
                !gold.contains(&c)
            })
            .collect();
        assert_eq!(missed.len(), 1, "{}: {}", t.id, m[k].content);
        let shown = &answers[missed[0]].content;
        let tool = h.tool(&wrong[missed[0]].name).unwrap();
        let c = tool
            .binding
            .to_canonical(&wrong[missed[0]].arguments)
            .unwrap();
        let p = w.catalog().product(c["product"].as_str().unwrap()).unwrap();
        let next = &m[k + 1 + answers.len()];
        assert!(next.role == Role::Assistant && next.trained(), "{}", t.id);
        let fix = h.syntax.parse(&next.content).unwrap().calls;
        assert!(!fix.is_empty(), "{}: no correction", t.id);
        assert!(
            shown.contains("error") || shown.contains(&p.title) || shown.contains(&p.title_zh),
            "{}: the wrong answer does not show the mistake: {shown}",
            t.id
        );
    }
    assert!(
        detours >= 20,
        "only {detours} detours in {} tasks",
        tasks.len()
    );
    for k in ["product_fact", "variant_stock", "compare"] {
        assert!(kinds.contains(k), "no detour on {k}: {kinds:?}");
    }
}
