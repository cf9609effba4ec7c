//! Family 2, skill content: rewords procedures and descriptions from phrase
//! banks, reorders commuting steps (only `- ` bullet lists; numbered steps
//! keep their order), re-lays procedures out (bullets, numbered, prose,
//! `Step n:`) and adds an irrelevant distractor playbook.

use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use hat_harness::spec::{SkillFront, SkillSpec};
use hat_harness::HarnessSpec;

use super::{choose_ops, distractor_tool, pick, SubOp, Transform};
use crate::banks::{DISTRACTOR_SKILLS, SKILL_LAYOUTS, SKILL_PHRASES};
use crate::manifest::{Applied, Family};
use crate::pool::Pool;

pub struct SkillContent;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListKind {
    Bullets,
    Numbered,
    Steps,
}

/// The items of a body that is entirely a list (one item per line), with
/// the list's kind; `None` for anything else (prose, mixed text).
fn parse_list(body: &str) -> Option<(ListKind, Vec<String>)> {
    let mut kind = None;
    let mut items = Vec::new();
    for line in body.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (k, text) = if let Some(t) = line.strip_prefix("- ") {
            (ListKind::Bullets, t)
        } else if let Some(rest) = line.strip_prefix("Step ") {
            let (n, t) = rest.split_once(": ")?;
            n.parse::<usize>().ok()?;
            (ListKind::Steps, t)
        } else {
            let (n, t) = line.split_once(". ")?;
            n.parse::<usize>().ok()?;
            (ListKind::Numbered, t)
        };
        if kind.is_some_and(|x| x != k) {
            return None;
        }
        kind = Some(k);
        items.push(text.trim().to_string());
    }
    Some((kind?, items))
}

fn render(layout: &str, items: &[String]) -> String {
    match layout {
        "bullets" => items
            .iter()
            .map(|i| format!("- {i}"))
            .collect::<Vec<_>>()
            .join("\n"),
        "prose" => items.join(" "),
        "steps" => items
            .iter()
            .enumerate()
            .map(|(n, i)| format!("Step {}: {i}", n + 1))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => items
            .iter()
            .enumerate()
            .map(|(n, i)| format!("{}. {i}", n + 1))
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

fn reword(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let mut used = Vec::new();
    for skill in &mut spec.skills {
        for (from, to) in SKILL_PHRASES.get(pool) {
            let hit = skill.body.contains(from) || skill.front.description.contains(from);
            if hit && rng.gen_bool(0.7) {
                skill.body = skill.body.replace(from, to);
                skill.front.description = skill.front.description.replace(from, to);
                used.push(json!([skill.folder, from, to]));
            }
        }
    }
    if used.is_empty() {
        return Vec::new();
    }
    vec![Applied::new(
        Family::SkillContent,
        "reword",
        json!({"phrases": used}),
        true,
        pool,
    )]
}

fn reorder(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let mut touched = Vec::new();
    for skill in &mut spec.skills {
        let Some((ListKind::Bullets, mut items)) = parse_list(&skill.body) else {
            continue;
        };
        if items.len() < 2 {
            continue;
        }
        let before = items.clone();
        items.shuffle(rng);
        if items != before {
            skill.body = render("bullets", &items);
            touched.push(skill.folder.clone());
        }
    }
    if touched.is_empty() {
        return Vec::new();
    }
    vec![Applied::new(
        Family::SkillContent,
        "reorder_bullets",
        json!({"skills": touched}),
        false,
        pool,
    )]
}

fn relayout(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let layout = *pick(rng, SKILL_LAYOUTS.get(pool));
    let mut touched = Vec::new();
    for skill in &mut spec.skills {
        let Some((_, items)) = parse_list(&skill.body) else {
            continue;
        };
        let new = render(layout, &items);
        if new != skill.body {
            skill.body = new;
            touched.push(skill.folder.clone());
        }
    }
    if touched.is_empty() {
        return Vec::new();
    }
    vec![Applied::new(
        Family::SkillContent,
        "layout",
        json!({"layout": layout, "skills": touched}),
        true,
        pool,
    )]
}

fn add_distractor(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let free: Vec<_> = DISTRACTOR_SKILLS
        .get(pool)
        .iter()
        .filter(|d| !spec.skills.iter().any(|s| s.folder == d.id))
        .collect();
    if free.is_empty() {
        return Vec::new();
    }
    let d = *pick(rng, &free);
    let mut tools = Vec::new();
    let mut added_tool = None;
    if let Some(t) = &d.tool {
        if !spec.tools.iter().any(|x| x.name == t.name) {
            spec.tools.push(distractor_tool(t));
            added_tool = Some(t.name);
        }
        tools.push(t.name.to_string());
    }
    spec.skills.push(SkillSpec {
        folder: d.id.into(),
        front: SkillFront {
            name: d.id.into(),
            description: d.description.into(),
            when: None,
            tools,
        },
        body: d.body.into(),
    });
    vec![Applied::new(
        Family::SkillContent,
        "distractor_skill",
        json!({"skill": d.id, "tool": added_tool}),
        true,
        pool,
    )]
}

impl Transform for SkillContent {
    fn family(&self) -> Family {
        Family::SkillContent
    }

    fn apply(&self, spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
        let on = choose_ops(rng, &[0.6, 0.4, 0.4, 0.4]);
        let mut out = Vec::new();
        // Reorder before re-layout, so only lists that were bullets in the
        // source (commuting steps) are ever shuffled.
        let ops: [SubOp; 4] = [reword, reorder, relayout, add_distractor];
        for (op, on) in ops.iter().zip(on) {
            if on {
                out.extend(op(spec, rng, pool));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_render() {
        let (k, items) = parse_list("1. a\n2. b").unwrap();
        assert_eq!(k, ListKind::Numbered);
        assert_eq!(render("steps", &items), "Step 1: a\nStep 2: b");
        assert_eq!(parse_list(&render("steps", &items)).unwrap().1, items);
        assert_eq!(render("prose", &items), "a b");
        assert!(parse_list("a b").is_none());
        assert!(parse_list("- a\n1. b").is_none());
        assert_eq!(parse_list("- a\n- b").unwrap().0, ListKind::Bullets);
    }
}
