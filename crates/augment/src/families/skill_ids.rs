//! Family 1, skill ids: renames every skill (folder and front-matter name
//! together) in one naming style. `tools:` lists are untouched; files kept
//! beside a `SKILL.md` move with it. Ids stay valid Agent Skills names.

use std::collections::BTreeSet;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Map, Value};

use hat_harness::harness::valid_skill_name;
use hat_harness::HarnessSpec;

use super::{pick, split_words, unique, Transform};
use crate::banks::{SKILL_ID_STYLES, SKILL_ID_VOCAB};
use crate::manifest::{Applied, Family};
use crate::pool::Pool;

pub struct SkillIds;

/// Cuts an id to 64 characters without a trailing hyphen.
fn clamp(id: &str) -> String {
    let cut: String = id.chars().take(64).collect();
    cut.trim_end_matches('-').to_string()
}

/// The new id of `id` (the `index`-th skill) in `style`.
pub(crate) fn restyle(id: &str, index: usize, style: &str, rng: &mut ChaCha8Rng) -> String {
    let vocab = SKILL_ID_VOCAB.iter().find(|v| v.0 == id);
    let new = match style {
        "synonym" => vocab.map_or_else(|| format!("{id}-guide"), |v| v.1.to_string()),
        "verb-first" => vocab.map_or_else(|| format!("do-{id}"), |v| v.2.to_string()),
        "alt-synonym" => vocab.map_or_else(|| format!("{id}-kit"), |v| v.3.to_string()),
        "prefixed" => format!("skill-{id}"),
        "opaque" => format!("sk-{:04x}", rng.gen_range(0..0x10000u32)),
        "abbrev" => {
            let initials: String = split_words(id)
                .iter()
                .filter_map(|w| w.chars().next())
                .collect();
            if initials.len() >= 2 {
                initials
            } else {
                id.chars()
                    .filter(char::is_ascii_alphanumeric)
                    .take(3)
                    .collect()
            }
        }
        "numbered" => format!("s{:02}-{id}", index + 1),
        _ => id.to_string(),
    };
    let new = clamp(&new);
    if valid_skill_name(&new) {
        new
    } else {
        format!("skill-{}", index + 1)
    }
}

impl Transform for SkillIds {
    fn family(&self) -> Family {
        Family::SkillIds
    }

    fn apply(&self, spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
        if spec.skills.is_empty() {
            return Vec::new();
        }
        let style = *pick(rng, SKILL_ID_STYLES.get(pool));
        // Old ids stay taken so no new id equals an id renamed later.
        let mut taken: BTreeSet<String> = spec.skills.iter().map(|s| s.folder.clone()).collect();
        let mut renames = Map::new();
        for (i, skill) in spec.skills.iter_mut().enumerate() {
            let old = skill.folder.clone();
            let candidate = restyle(&old, i, style, rng);
            let new = unique(&candidate, "-", &mut taken);
            let new = if valid_skill_name(&new) {
                new
            } else {
                unique(&format!("skill-{}", i + 1), "-", &mut taken)
            };
            skill.folder = new.clone();
            skill.front.name = new.clone();
            let (from, to) = (format!("skills/{old}/"), format!("skills/{new}/"));
            let moved: Vec<String> = spec
                .extra_files
                .keys()
                .filter(|k| k.starts_with(&from))
                .cloned()
                .collect();
            for k in moved {
                let v = spec.extra_files.remove(&k).expect("listed above");
                spec.extra_files
                    .insert(format!("{to}{}", &k[from.len()..]), v);
            }
            renames.insert(old, Value::String(new));
        }
        vec![Applied::new(
            Family::SkillIds,
            "rename_skills",
            json!({"style": style, "renames": renames}),
            true,
            pool,
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn every_style_gives_valid_ids() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for style in SKILL_ID_STYLES.train.iter().chain(SKILL_ID_STYLES.heldout) {
            for id in [
                "answer-product-question",
                "x",
                "some-unknown-skill",
                &"a".repeat(64),
            ] {
                let new = restyle(id, 3, style, &mut rng);
                assert!(valid_skill_name(&new), "{style}: {id} -> {new}");
            }
        }
        assert_eq!(
            restyle("answer-product-question", 0, "abbrev", &mut rng),
            "apq"
        );
        assert_eq!(
            restyle("stay-compliant", 0, "numbered", &mut rng),
            "s01-stay-compliant"
        );
    }
}
