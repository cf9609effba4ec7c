//! Family 4, prompt structure: section order, layout format, persona wording
//! (intro, style, name) and the tool-call syntax.
//!
//! Section orders are split by a rule: training orders put the persona
//! first, held-out orders do not.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use hat_harness::HarnessSpec;

use super::{choose_ops, pick, pick_other, replace_word, SubOp, Transform};
use crate::banks::{CALL_SYNTAXES, FORMATS, PERSONA_INTROS, PERSONA_NAMES, PERSONA_STYLES};
use crate::manifest::{Applied, Family};
use crate::pool::Pool;

pub struct PromptStructure;

const F: Family = Family::PromptStructure;

/// Every permutation of `items`, in lexicographic order of indices.
pub fn permutations(items: &[String]) -> Vec<Vec<String>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    for i in 0..items.len() {
        let mut rest = items.to_vec();
        let first = rest.remove(i);
        for mut p in permutations(&rest) {
            p.insert(0, first.clone());
            out.push(p);
        }
    }
    out
}

/// Section orders of `pool` over the given sections: training orders start
/// with the persona, held-out ones do not (without a persona section, the
/// training pool keeps the current first section).
pub fn section_orders(sections: &[String], pool: Pool) -> Vec<Vec<String>> {
    let has_persona = sections.iter().any(|s| s == "persona");
    permutations(sections)
        .into_iter()
        .filter(|p| {
            let first_is_persona = p.first().is_some_and(|s| s == "persona");
            match (pool, has_persona) {
                (Pool::Train, true) => first_is_persona,
                (Pool::Train, false) => p.first() == sections.first(),
                (Pool::Heldout, true) => !first_is_persona,
                (Pool::Heldout, false) => p.first() != sections.first(),
            }
        })
        .collect()
}

fn sections(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let current = spec.manifest.prompt.sections.clone();
    let orders: Vec<Vec<String>> = section_orders(&current, pool)
        .into_iter()
        .filter(|o| *o != current)
        .collect();
    if orders.is_empty() {
        return Vec::new();
    }
    let order = pick(rng, &orders).clone();
    spec.manifest.prompt.sections = order.clone();
    vec![Applied::new(
        F,
        "section_order",
        json!({"sections": order}),
        true,
        pool,
    )]
}

fn format(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let Some(f) = pick_other(rng, FORMATS.get(pool), &spec.manifest.prompt.format) else {
        return Vec::new();
    };
    spec.manifest.prompt.format = f.to_string();
    vec![Applied::new(F, "format", json!({"format": f}), true, pool)]
}

/// Sets the call syntax to one of `pool` other than the current one.
pub(crate) fn syntax(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let Some(s) = pick_other(rng, CALL_SYNTAXES.get(pool), &spec.manifest.calls.syntax) else {
        return Vec::new();
    };
    spec.manifest.calls.syntax = s.to_string();
    vec![Applied::new(
        F,
        "call_syntax",
        json!({"syntax": s}),
        true,
        pool,
    )]
}

/// Sets the call syntax to a member of the element family (`hat_harness::syntax::ELEMENTS`,
/// `<exec fn="name">{...}</exec>`) other than the current one: training states that show
/// many call syntaxes, so that a model learns to copy the one its harness describes instead
/// of recalling the training pool's few. [`crate::augment`] never draws it (its draws keep
/// published datasets reproducible); `hat data gen --element-syntaxes` applies it to a share
/// of training states.
pub fn element_syntax(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng) -> Vec<Applied> {
    let names: Vec<&str> = hat_harness::syntax::ELEMENTS
        .iter()
        .map(|e| e.name)
        .collect();
    family_syntax(spec, rng, &names)
}

/// Sets the call syntax to a member of the keyword family (`hat_harness::syntax::KEYWORDS`,
/// `RUN name(key="value")`) other than the current one: the function syntax's form with words
/// other than its `CALL`, for the same purpose as [`element_syntax`] and, like it, drawn only
/// by `hat data gen --keyword-syntaxes`.
pub fn keyword_syntax(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng) -> Vec<Applied> {
    let names: Vec<&str> = hat_harness::syntax::KEYWORDS
        .iter()
        .map(|k| k.name)
        .collect();
    family_syntax(spec, rng, &names)
}

/// Sets the call syntax to one of a family's `names` other than the current one.
fn family_syntax(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, names: &[&str]) -> Vec<Applied> {
    let Some(s) = pick_other(rng, names, &spec.manifest.calls.syntax) else {
        return Vec::new();
    };
    spec.manifest.calls.syntax = s.to_string();
    vec![Applied::new(
        F,
        "call_syntax",
        json!({"syntax": s}),
        false,
        Pool::Train,
    )]
}

/// Renames the persona, and the name wherever hooks and skills use it.
fn rename_persona(spec: &mut HarnessSpec, new: &str) {
    let old = std::mem::replace(&mut spec.manifest.persona.name, new.to_string());
    let fix = |s: &mut String| *s = replace_word(s, &old, new);
    for h in &mut spec.hooks {
        for s in [
            &mut h.ends_with,
            &mut h.describe,
            &mut h.note,
            &mut h.fallback,
            &mut h.append,
        ]
        .into_iter()
        .flatten()
        {
            fix(s);
        }
        h.require.iter_mut().for_each(fix);
    }
    for s in &mut spec.skills {
        fix(&mut s.body);
    }
    if let Some(i) = &mut spec.manifest.persona.intro {
        fix(i);
    }
}

fn persona(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let on = choose_ops(rng, &[0.5, 0.5, 0.5]);
    let mut detail = serde_json::Map::new();
    let p = spec.manifest.persona.clone();
    if on[0] {
        if let Some(i) = pick_other(
            rng,
            PERSONA_INTROS.get(pool),
            p.intro.as_deref().unwrap_or(""),
        ) {
            spec.manifest.persona.intro = Some(i.to_string());
            detail.insert("intro".into(), json!(i));
        }
    }
    if on[1] {
        if let Some(s) = pick_other(rng, PERSONA_STYLES.get(pool), &p.style) {
            spec.manifest.persona.style = s.to_string();
            detail.insert("style".into(), json!(s));
        }
    }
    if on[2] {
        // A name that is not a word used elsewhere (so renaming mentions is safe).
        let names: Vec<&str> = PERSONA_NAMES
            .get(pool)
            .iter()
            .copied()
            .filter(|n| *n != p.name)
            .collect();
        if !names.is_empty() {
            let n = names[rng.gen_range(0..names.len())];
            rename_persona(spec, n);
            detail.insert("name".into(), json!([p.name, n]));
        }
    }
    if detail.is_empty() {
        return Vec::new();
    }
    vec![Applied::new(
        F,
        "persona",
        serde_json::Value::Object(detail),
        true,
        pool,
    )]
}

impl Transform for PromptStructure {
    fn family(&self) -> Family {
        F
    }

    fn apply(&self, spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
        let ops: [SubOp; 4] = [sections, format, persona, syntax];
        let on = choose_ops(rng, &[0.5, 0.5, 0.5, 0.5]);
        let mut out = Vec::new();
        for (op, on) in ops.iter().zip(on) {
            if on {
                out.extend(op(spec, rng, pool));
            }
        }
        if out.is_empty() {
            // Every pool has at least one syntax other than any current one.
            out.extend(syntax(spec, rng, pool));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_orders_split_by_persona_first() {
        let s: Vec<String> = hat_harness::spec::SECTION_NAMES
            .iter()
            .map(|s| s.to_string())
            .collect();
        let train = section_orders(&s, Pool::Train);
        let held = section_orders(&s, Pool::Heldout);
        assert_eq!((train.len(), held.len()), (24, 96));
        assert!(train.iter().all(|o| !held.contains(o)));
    }
}
