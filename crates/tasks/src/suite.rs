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

    /// Drops every world but `seed`'s (a cache that serves one episode at a time need not
    /// keep what earlier episodes used).
    pub fn keep_only(&mut self, seed: u64) {
        self.worlds.retain(|s, _| *s == seed);
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
        Ok(
            Self::generate_scenes_with_extras(split, count, seed, kinds, worlds, per_scene, 0)?
                .into_iter()
                .map(|s| s.task)
                .collect(),
        )
    }

    /// [`TaskSet::generate_scenes`], and after each scene's own tasks `extra` more in the same
    /// scene (kinds rotating on a counter of their own, each from a seed of its own, ids
    /// numbered from [`EXTRA_INDEX_BASE`]), so a scene's own tasks are exactly those
    /// `generate_scenes` draws with the same arguments and the extras only add to them. `count`
    /// counts the scenes' own tasks. Deterministic in all the arguments.
    pub fn generate_scenes_with_extras(
        split: Split,
        count: usize,
        seed: u64,
        kinds: &[TaskKind],
        worlds: &mut WorldCache,
        per_scene: usize,
        extra: usize,
    ) -> Result<Vec<SceneTask>, TaskError> {
        if kinds.is_empty() {
            return Err(TaskError::Gold("no task kinds to draw from".into()));
        }
        let per_scene = per_scene.max(1);
        let n_worlds = count.div_ceil(TASKS_PER_WORLD).max(1) as u64;
        let total = count + count.div_ceil(per_scene) * extra;
        let mut out = Vec::with_capacity(total);
        // A scene's own tasks and its extras each draw from a stream of their own: a counter
        // that rotates the kinds and seeds each draw (salt), and where the ids start.
        const STREAMS: [(u64, usize, bool); 2] =
            [(0xA5A5, 0, false), (0xE7A5_E7A5, EXTRA_INDEX_BASE, true)];
        let mut drawn = [0usize; 2];
        let (mut own, mut attempts, mut scene_no) = (0usize, 0usize, 0u64);
        while own < count {
            let world_seed = split.world_seed(seed, scene_no % n_worlds);
            let world = worlds.get(world_seed)?;
            let mut scene_rng =
                ChaCha8Rng::seed_from_u64(splitmix64(seed ^ splitmix64(scene_no ^ 0x5CE7E)));
            let scene = gen::Scene::draw(world.catalog(), split, &mut scene_rng);
            for (stream, &(salt, first_id, is_extra)) in STREAMS.iter().enumerate() {
                let want = if is_extra {
                    extra
                } else {
                    per_scene.min(count - own)
                };
                let mut got = 0;
                while got < want {
                    attempts += 1;
                    if attempts > total * 4 + 100 {
                        return Err(TaskError::Gold(
                            "task generation keeps failing; the catalog cannot support these \
                             task kinds"
                                .into(),
                        ));
                    }
                    let n = drawn[stream];
                    drawn[stream] += 1;
                    let mut rng =
                        ChaCha8Rng::seed_from_u64(splitmix64(seed ^ splitmix64(n as u64 ^ salt)));
                    if let Some(task) = gen::generate_in(
                        kinds[n % kinds.len()],
                        split,
                        world.catalog(),
                        world_seed,
                        first_id + n,
                        &mut rng,
                        Some(&scene),
                    ) {
                        out.push(SceneTask {
                            task,
                            scene: scene_no as usize,
                            extra: is_extra,
                        });
                        got += 1;
                    }
                }
                if !is_extra {
                    own += got;
                }
            }
            scene_no += 1;
        }
        Ok(out)
    }
}

/// Where the extra tasks of [`TaskSet::generate_scenes_with_extras`] start numbering their ids,
/// above any count of a scene's own tasks.
pub const EXTRA_INDEX_BASE: usize = 1_000_000;

/// A task of [`TaskSet::generate_scenes_with_extras`]: its scene (numbered from 0 in the order
/// drawn) and whether it is one of the scene's extras.
#[derive(Debug, Clone)]
pub struct SceneTask {
    pub task: Task,
    pub scene: usize,
    pub extra: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Intent;

    #[test]
    fn a_cache_keeps_only_the_world_it_is_told_to() {
        let mut worlds = WorldCache::default();
        worlds.get(1).unwrap();
        worlds.get(2).unwrap();
        worlds.keep_only(2);
        assert!(worlds.peek(1).is_none() && worlds.peek(2).is_some());
        worlds.keep_only(3);
        assert!(worlds.peek(2).is_none());
    }

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

    #[test]
    fn extras_join_their_scene_and_leave_its_own_tasks_unchanged() {
        let mut worlds = WorldCache::default();
        let own =
            TaskSet::generate_scenes(Split::Train, 40, 9, &TaskKind::ALL, &mut worlds, 16).unwrap();
        let all = TaskSet::generate_scenes_with_extras(
            Split::Train,
            40,
            9,
            &TaskKind::ALL,
            &mut worlds,
            16,
            5,
        )
        .unwrap();
        // 3 scenes (16, 16, 8 own tasks), each followed by its 5 extras
        assert_eq!(all.len(), 40 + 3 * 5);
        let kept: Vec<Task> = all
            .iter()
            .filter(|s| !s.extra)
            .map(|s| s.task.clone())
            .collect();
        assert_eq!(
            kept, own,
            "the scenes' own tasks are generate_scenes' tasks"
        );
        let layout: Vec<(usize, bool)> = all.iter().map(|s| (s.scene, s.extra)).collect();
        let mut expected = Vec::new();
        for (scene, n) in [(0, 16), (1, 16), (2, 8)] {
            expected.extend(std::iter::repeat_n((scene, false), n));
            expected.extend(std::iter::repeat_n((scene, true), 5));
        }
        assert_eq!(layout, expected);
        for s in &all {
            let first = all.iter().find(|x| x.scene == s.scene).unwrap();
            assert_eq!(
                (s.task.world_seed, &s.task.on_stage, &s.task.recent),
                (
                    first.task.world_seed,
                    &first.task.on_stage,
                    &first.task.recent
                ),
                "{} is in its scene",
                s.task.id
            );
        }
        let ids: std::collections::HashSet<_> = all.iter().map(|s| &s.task.id).collect();
        assert_eq!(ids.len(), all.len(), "task ids are unique");
        let extra_kinds: std::collections::HashSet<_> = all
            .iter()
            .filter(|s| s.extra)
            .map(|s| s.task.kind)
            .collect();
        assert!(
            extra_kinds.len() >= 10,
            "extras rotate through the kinds: {extra_kinds:?}"
        );
    }
}
