//! The oracle's trajectory of every task passes the scorer.

use std::path::Path;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use hat_harness::Harness;
use hat_tasks::{expect, score, Split, TaskKind, TaskSet, WorldCache};
use hat_teacher::oracle;

fn production() -> Harness {
    Harness::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream")).expect("production harness loads")
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
            failures.push(format!("{} [{}]: {} || reply: {}", t.id, t.kind, s.reason(), traj.attempt.reply));
        }
    }
    assert!(failures.is_empty(), "{} of {} oracle trajectories fail:\n{}", failures.len(), tasks.len(), failures.join("\n"));
}

#[test]
fn oracle_passes_every_task_type_on_both_splits() {
    let h = production();
    check_all(&h, Split::Train, TaskKind::ALL.len() * 12, 11);
    check_all(&h, Split::Test, TaskKind::ALL.len() * 12, 12);
}
