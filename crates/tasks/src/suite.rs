//! Task sets for a split, and a cache of the worlds they live in.

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use hat_world::World;

use crate::gen;
use crate::kind::TaskKind;
use crate::task::{splitmix64, Split, Task};
use crate::TaskError;

/// How many tasks share one catalog: enough variety per stream, few enough
/// worlds that building them stays cheap.
pub const TASKS_PER_WORLD: usize = 40;

/// Worlds by catalog seed, built on first use.
#[derive(Default)]
pub struct WorldCache {
    worlds: BTreeMap<u64, World>,
}

impl WorldCache {
    /// A world already built by [`WorldCache::get`].
    pub fn peek(&self, seed: u64) -> Option<&World> {
        self.worlds.get(&seed)
    }

    pub fn get(&mut self, seed: u64) -> Result<&World, TaskError> {
        match self.worlds.entry(seed) {
            std::collections::btree_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::btree_map::Entry::Vacant(v) => Ok(v.insert(World::generate(seed)?)),
        }
    }
}

pub struct TaskSet;

impl TaskSet {
    /// `count` tasks of `split`, kinds in rotation so every kind is covered
    /// once `count >= 19`. Deterministic in (split, count, seed).
    pub fn generate(
        split: Split,
        count: usize,
        seed: u64,
        worlds: &mut WorldCache,
    ) -> Result<Vec<Task>, TaskError> {
        Self::generate_kinds(split, count, seed, &TaskKind::ALL, worlds)
    }

    pub fn generate_kinds(
        split: Split,
        count: usize,
        seed: u64,
        kinds: &[TaskKind],
        worlds: &mut WorldCache,
    ) -> Result<Vec<Task>, TaskError> {
        let n_worlds = count.div_ceil(TASKS_PER_WORLD).max(1) as u64;
        let mut out = Vec::with_capacity(count);
        let mut i = 0usize;
        let mut attempts = 0usize;
        while out.len() < count {
            attempts += 1;
            if attempts > count * 4 + 100 {
                return Err(TaskError::Gold(
                    "task generation keeps failing; the catalog cannot support these task kinds"
                        .into(),
                ));
            }
            let kind = kinds[i % kinds.len()];
            let world_seed = split.world_seed(seed, (i as u64) % n_worlds);
            let world = worlds.get(world_seed)?;
            let mut rng =
                ChaCha8Rng::seed_from_u64(splitmix64(seed ^ splitmix64(i as u64 ^ 0xA5A5)));
            if let Some(t) = gen::generate(kind, split, world.catalog(), world_seed, i, &mut rng) {
                out.push(t);
            }
            i += 1;
        }
        Ok(out)
    }
}
