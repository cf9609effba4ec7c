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

    /// `count` tasks in scenes of `per_scene`: each run of `per_scene` consecutive tasks
    /// shares one world, one product on stage and one line-up of recent activity (the last
    /// scene may be shorter), so under one harness state their prompts differ only in the
    /// viewer's turn and their trajectories pack whole in training. Kinds rotate as in
    /// [`TaskSet::generate_kinds`] and every task draws from its own seed as there; only the
    /// scene is fixed. Deterministic in (split, count, seed, kinds, per_scene).
    pub fn generate_scenes(
        split: Split,
        count: usize,
        seed: u64,
        kinds: &[TaskKind],
        worlds: &mut WorldCache,
        per_scene: usize,
    ) -> Result<Vec<Task>, TaskError> {
        if kinds.is_empty() {
            return Err(TaskError::Gold("no task kinds to draw from".into()));
        }
        let per_scene = per_scene.max(1);
        let n_worlds = count.div_ceil(TASKS_PER_WORLD).max(1) as u64;
        let mut out = Vec::with_capacity(count);
        let mut i = 0usize;
        let mut attempts = 0usize;
        let mut scene_no = 0u64;
        while out.len() < count {
            let world_seed = split.world_seed(seed, scene_no % n_worlds);
            let world = worlds.get(world_seed)?;
            let mut scene_rng =
                ChaCha8Rng::seed_from_u64(splitmix64(seed ^ splitmix64(scene_no ^ 0x5CE7E)));
            let scene = gen::Scene::draw(world.catalog(), split, &mut scene_rng);
            let want = per_scene.min(count - out.len());
            let mut got = 0;
            while got < want {
                attempts += 1;
                if attempts > count * 4 + 100 {
                    return Err(TaskError::Gold(
                        "task generation keeps failing; the catalog cannot support these task \
                         kinds"
                            .into(),
                    ));
                }
                let kind = kinds[i % kinds.len()];
                let mut rng =
                    ChaCha8Rng::seed_from_u64(splitmix64(seed ^ splitmix64(i as u64 ^ 0xA5A5)));
                let t = gen::generate_in(
                    kind,
                    split,
                    world.catalog(),
                    world_seed,
                    i,
                    &mut rng,
                    Some(&scene),
                );
                if let Some(t) = t {
                    out.push(t);
                    got += 1;
                }
                i += 1;
            }
            scene_no += 1;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Intent;

    #[test]
    fn scenes_share_world_stage_and_recent_and_nothing_else() {
        let mut worlds = WorldCache::default();
        let tasks = TaskSet::generate_scenes(Split::Train, 100, 7, &TaskKind::ALL, &mut worlds, 16)
            .unwrap();
        assert_eq!(tasks.len(), 100);
        let ids: std::collections::HashSet<_> = tasks.iter().map(|t| &t.id).collect();
        assert_eq!(ids.len(), 100, "task ids are unique");
        let scenes: Vec<&[Task]> = tasks.chunks(16).collect();
        assert_eq!(scenes.len(), 7, "6 scenes of 16 and one of 4");
        for sc in &scenes {
            let t0 = &sc[0];
            for t in sc.iter() {
                assert_eq!(
                    (t.world_seed, &t.on_stage, &t.recent),
                    (t0.world_seed, &t0.on_stage, &t0.recent)
                );
            }
            let kinds: std::collections::HashSet<_> = sc.iter().map(|t| t.kind).collect();
            assert!(
                kinds.len() >= sc.len().min(10),
                "kinds rotate within a scene"
            );
        }
        // scenes differ from one another (stage or world)
        let distinct: std::collections::HashSet<_> = scenes
            .iter()
            .map(|sc| (sc[0].world_seed, sc[0].on_stage.clone()))
            .collect();
        assert!(distinct.len() >= 5, "{distinct:?}");
        // a task about "this" product means the scene's product
        let on_stage: Vec<&Task> = tasks
            .iter()
            .filter(|t| t.kind == TaskKind::AmbiguousOnStage)
            .collect();
        assert!(!on_stage.is_empty());
        for t in on_stage {
            match &t.intent {
                Intent::ProductFact { product, .. } => assert_eq!(product, &t.on_stage),
                other => panic!("unexpected intent {other:?}"),
            }
        }
        // deterministic
        let again = TaskSet::generate_scenes(Split::Train, 100, 7, &TaskKind::ALL, &mut worlds, 16)
            .unwrap();
        assert_eq!(tasks, again);
        assert!(
            TaskSet::generate_scenes(Split::Train, 10, 7, &[], &mut worlds, 4).is_err(),
            "no kinds is an error, not a panic"
        );
    }
}
