//! Family 5, hook functions: changes the parameters of check hooks (reply
//! limits, forbidden words, sign-offs, required phrases), rewords inject
//! notes (keeping their template variables) and removes optional hooks.
//!
//! Every check stays satisfiable: `[reply] max_chars` and check limits stay
//! at or above [`MIN_REPLY_CHARS`]; required phrases and sign-offs are at
//! most [`MAX_PHRASE_CHARS`] each and [`MAX_PHRASES_TOTAL`] together; at
//! most one sign-off exists; no required phrase or sign-off contains a
//! forbidden phrase.

use std::collections::BTreeSet;

use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use hat_harness::spec::HookSpec;
use hat_harness::text::contains_phrase;
use hat_harness::HarnessSpec;

use super::{choose_ops, pick, template_vars, unique, SubOp, Transform};
use crate::banks::{
    FORBID_WORDS, INJECT_NOTES, MAX_PHRASES_TOTAL, MAX_PHRASE_CHARS, MIN_REPLY_CHARS,
    REMOVABLE_ACTIONS, REPLY_LIMITS, REQUIRED_PHRASES, SIGN_OFFS,
};
use crate::manifest::{Applied, Family};
use crate::pool::Pool;

pub struct HookFunctions;

const F: Family = Family::HookFunctions;

fn checks(spec: &HarnessSpec) -> impl Iterator<Item = &HookSpec> {
    spec.hooks.iter().filter(|h| h.action == "check")
}

/// Characters all required phrases and sign-offs add up to.
fn phrase_total(spec: &HarnessSpec) -> usize {
    checks(spec)
        .flat_map(|h| h.require.iter().chain(h.ends_with.iter()))
        .map(|p| p.chars().count())
        .sum()
}

fn forbidden(spec: &HarnessSpec) -> Vec<String> {
    checks(spec)
        .flat_map(|h| h.forbid.iter().cloned())
        .collect()
}

/// Whether `phrase` may become a required phrase or sign-off.
fn phrase_fits(spec: &HarnessSpec, phrase: &str, replacing: usize) -> bool {
    let n = phrase.chars().count();
    n <= MAX_PHRASE_CHARS
        && phrase_total(spec) - replacing + n <= MAX_PHRASES_TOTAL
        && !forbidden(spec).iter().any(|f| contains_phrase(phrase, f))
}

fn hook_ids(spec: &HarnessSpec) -> BTreeSet<String> {
    spec.hooks.iter().map(|h| h.id.clone()).collect()
}

fn new_check(spec: &HarnessSpec, id: &str, describe: String) -> HookSpec {
    let id = unique(id, "-", &mut hook_ids(spec));
    HookSpec {
        id,
        event: "before_reply".into(),
        action: "check".into(),
        describe: Some(describe),
        on_fail: Some("rewrite".into()),
        ..Default::default()
    }
}

fn reply_limit(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let cur = spec.manifest.reply.max_chars;
    let options: Vec<usize> = REPLY_LIMITS
        .get(pool)
        .iter()
        .copied()
        .filter(|v| *v != cur && *v >= MIN_REPLY_CHARS)
        .collect();
    let Some(&v) = options.choose(rng) else {
        return Vec::new();
    };
    spec.manifest.reply.max_chars = v;
    vec![Applied::new(
        F,
        "reply_max_chars",
        json!({"from": cur, "to": v}),
        true,
        pool,
    )]
}

fn check_limit(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let v = *pick(rng, REPLY_LIMITS.get(pool));
    let Some(h) = spec.hooks.iter_mut().find(|h| h.action == "check") else {
        return Vec::new();
    };
    let fresh = h.max_chars.is_none();
    h.max_chars = Some(v.max(MIN_REPLY_CHARS));
    if fresh {
        let d = h.describe.get_or_insert_with(String::new);
        *d = format!("{} Keep every reply within {v} characters.", d.trim())
            .trim()
            .to_string();
    }
    vec![Applied::new(
        F,
        "check_max_chars",
        json!({"hook": h.id, "max_chars": v}),
        true,
        pool,
    )]
}

fn forbid_add(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    // Phrases that must stay sayable: required phrases, sign-offs, the persona name.
    let mut keep: Vec<String> = checks(spec)
        .flat_map(|h| h.require.iter().chain(h.ends_with.iter()).cloned())
        .collect();
    keep.push(spec.manifest.persona.name.clone());
    let present = forbidden(spec);
    let mut words: Vec<&str> = FORBID_WORDS
        .get(pool)
        .iter()
        .copied()
        .filter(|w| {
            !present.iter().any(|p| p.eq_ignore_ascii_case(w))
                && !keep.iter().any(|k| contains_phrase(k, w))
        })
        .collect();
    words.shuffle(rng);
    words.truncate(rng.gen_range(1..=2));
    if words.is_empty() {
        return Vec::new();
    }
    let list = words.join(", ");
    let idx = match spec
        .hooks
        .iter()
        .position(|h| h.action == "check" && !h.forbid.is_empty())
    {
        Some(i) => {
            let d = spec.hooks[i].describe.get_or_insert_with(String::new);
            *d = format!("{} Also never say: {list}.", d.trim())
                .trim()
                .to_string();
            i
        }
        None => {
            let h = new_check(spec, "no-hype", format!("Never say: {list}."));
            spec.hooks.push(h);
            spec.hooks.len() - 1
        }
    };
    spec.hooks[idx]
        .forbid
        .extend(words.iter().map(|w| w.to_string()));
    vec![Applied::new(
        F,
        "forbid_add",
        json!({"hook": spec.hooks[idx].id, "words": words}),
        true,
        pool,
    )]
}

fn forbid_remove(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let candidates: Vec<usize> = (0..spec.hooks.len())
        .filter(|&i| spec.hooks[i].action == "check" && spec.hooks[i].forbid.len() >= 3)
        .collect();
    let Some(&i) = candidates.choose(rng) else {
        return Vec::new();
    };
    let h = &mut spec.hooks[i];
    let w = h.forbid.remove(rng.gen_range(0..h.forbid.len()));
    vec![Applied::new(
        F,
        "forbid_remove",
        json!({"hook": h.id, "word": w}),
        false,
        pool,
    )]
}

fn sign_off(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    // A later rewrite that appends or truncates could break an ending.
    if spec
        .hooks
        .iter()
        .any(|h| h.action == "rewrite" && (h.append.is_some() || h.truncate_chars.is_some()))
    {
        return Vec::new();
    }
    let name = spec.manifest.persona.name.clone();
    let existing = spec
        .hooks
        .iter()
        .position(|h| h.action == "check" && h.ends_with.is_some());
    let replacing = existing
        .and_then(|i| spec.hooks[i].ends_with.as_ref())
        .map_or(0, |e| e.chars().count());
    let mut options: Vec<String> = SIGN_OFFS
        .get(pool)
        .iter()
        .map(|s| s.replace("{name}", &name))
        .filter(|s| phrase_fits(spec, s, replacing))
        .collect();
    if let Some(i) = existing {
        options.retain(|s| Some(s) != spec.hooks[i].ends_with.as_ref());
    }
    let Some(s) = options.choose(rng).cloned() else {
        return Vec::new();
    };
    let describe = format!("End every reply with \"{s}\".");
    let id = match existing {
        Some(i) => {
            let h = &mut spec.hooks[i];
            h.ends_with = Some(s.clone());
            if h.forbid.is_empty() && h.require.is_empty() {
                h.describe = Some(describe);
            }
            h.id.clone()
        }
        None => {
            let mut h = new_check(spec, "sign-off", describe);
            h.ends_with = Some(s.clone());
            let id = h.id.clone();
            spec.hooks.push(h);
            id
        }
    };
    vec![Applied::new(
        F,
        "sign_off",
        json!({"hook": id, "ends_with": s}),
        true,
        pool,
    )]
}

fn require(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let present: Vec<String> = checks(spec)
        .flat_map(|h| h.require.iter().cloned())
        .collect();
    let options: Vec<&str> = REQUIRED_PHRASES
        .get(pool)
        .iter()
        .copied()
        .filter(|p| !present.iter().any(|x| x == p) && phrase_fits(spec, p, 0))
        .collect();
    let Some(&p) = options.choose(rng) else {
        return Vec::new();
    };
    let mut h = new_check(
        spec,
        "must-include",
        format!("Include \"{p}\" in every reply."),
    );
    h.require = vec![p.to_string()];
    let id = h.id.clone();
    spec.hooks.push(h);
    vec![Applied::new(
        F,
        "require_phrase",
        json!({"hook": id, "require": p}),
        true,
        pool,
    )]
}

fn inject_notes(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let mut changed = Vec::new();
    for h in spec.hooks.iter_mut().filter(|h| h.action == "inject") {
        let Some(note) = h.note.clone() else { continue };
        let vars = template_vars(&note);
        let options: Vec<&str> = INJECT_NOTES
            .get(pool)
            .iter()
            .filter(|(ev, n)| *ev == h.event && template_vars(n) == vars && *n != note)
            .map(|(_, n)| *n)
            .collect();
        if options.is_empty() || !rng.gen_bool(0.7) {
            continue;
        }
        let n = *pick(rng, &options);
        h.note = Some(n.to_string());
        changed.push(json!([h.id, n]));
    }
    if changed.is_empty() {
        return Vec::new();
    }
    vec![Applied::new(
        F,
        "inject_notes",
        json!({"notes": changed}),
        true,
        pool,
    )]
}

fn remove_hook(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let candidates: Vec<usize> = (0..spec.hooks.len())
        .filter(|&i| REMOVABLE_ACTIONS.contains(&spec.hooks[i].action.as_str()))
        .collect();
    let Some(&i) = candidates.choose(rng) else {
        return Vec::new();
    };
    let h = spec.hooks.remove(i);
    // A hook script nothing runs any more goes with its hook.
    if let Some(script) = h.command.first().and_then(|p| p.strip_prefix("./")) {
        if !spec.hooks.iter().any(|o| {
            o.command
                .iter()
                .any(|c| c.trim_start_matches("./") == script)
        }) {
            spec.extra_files.remove(script);
        }
    }
    vec![Applied::new(
        F,
        "remove_hook",
        json!({"hook": h.id, "action": h.action}),
        false,
        pool,
    )]
}

impl Transform for HookFunctions {
    fn family(&self) -> Family {
        F
    }

    fn apply(&self, spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
        let ops: [(SubOp, f64); 8] = [
            (reply_limit, 0.5),
            (check_limit, 0.2),
            (forbid_add, 0.4),
            (forbid_remove, 0.2),
            (sign_off, 0.35),
            (require, 0.25),
            (inject_notes, 0.4),
            (remove_hook, 0.25),
        ];
        let on = choose_ops(rng, &ops.map(|o| o.1));
        let mut out = Vec::new();
        for ((op, _), on) in ops.iter().zip(on) {
            if on {
                out.extend(op(spec, rng, pool));
            }
        }
        if out.is_empty() {
            out.extend(reply_limit(spec, rng, pool));
        }
        out
    }
}
