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
