//! Trajectory generation rate: oracle trajectories written and scored per
//! second on one core, over the production harness and augmented states.

use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use hat_augment::Pool;
use hat_data::{generate, states, GenConfig, Teacher};

fn bench(c: &mut Criterion) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
    let cfg = GenConfig {
        harness_dir: dir.clone(),
        variants: 8,
        pool: Pool::Train,
        tasks: 500,
        seed: 1,
        group: 1,
        shared_scene: false,
        mix: Default::default(),
        recovery: 0.0,
        first_turns: 0,
    };
    let st = states(&dir, cfg.variants, cfg.pool, cfg.seed).unwrap();
    let mut g = c.benchmark_group("datagen");
    g.throughput(Throughput::Elements(cfg.tasks as u64));
    g.sample_size(10);
    g.bench_function("oracle_500_tasks_9_states", |b| {
        b.iter(|| {
            let mut sink = Vec::new();
            let r = generate(
                &cfg,
                &st,
                &mut Teacher::Oracle,
                &Default::default(),
                &mut sink,
                &mut |_, _| {},
            )
            .unwrap();
            assert_eq!(r.rejected, 0);
            r.written
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
