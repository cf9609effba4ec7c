//! Same seed, same dataset bytes; different seed, different data.

use std::path::Path;

use hat_augment::Pool;
use hat_data::{generate, states, GenConfig, Teacher};

fn run(seed: u64) -> Vec<u8> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
    let cfg = GenConfig {
        harness_dir: dir.clone(),
        variants: 3,
        pool: Pool::Train,
        tasks: 120,
        seed,
        group: 1,
        shared_scene: false,
        mix: Default::default(),
    };
    let st = states(&dir, cfg.variants, cfg.pool, seed).unwrap();
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
    assert_eq!((r.written, r.rejected), (120, 0));
    out
}

#[test]
fn generation_is_reproducible() {
    let a = run(4);
    assert_eq!(a, run(4));
    assert_ne!(a, run(5));
}
