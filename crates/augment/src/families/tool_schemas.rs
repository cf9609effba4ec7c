//! Family 3, tool schemas: renames tools and parameters, nests flat
//! parameters into an object and flattens nested ones, renames enum values
//! (with a value map back to the canonical values), reorders properties,
//! adds optional parameters bound to nothing, rewrites descriptions and adds
//! distractor tools bound to `noop`.
//!
//! Every change updates the binding (JSON Pointers, value maps), the skills'
//! `tools:` lists and mentions, and hooks' `match.tool`, so each canonical
//! operation stays reachable with the same canonical arguments.

use std::collections::{BTreeMap, BTreeSet};

use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Map, Value};

use hat_harness::binding::split_pointer;
use hat_harness::spec::{ArgSourceSpec, ToolSpec};
use hat_harness::HarnessSpec;

use super::SubOp;
use super::{
    choose_ops, distractor_tool, pick, replace_word, split_words, style_name, unique, Transform,
};
use crate::banks::{
    DISTRACTOR_TOOLS, ENUM_VALUE_STYLES, ENUM_VALUE_VOCAB, EXTRA_PARAMS, NEST_CONTAINERS,
    PARAM_NAME_STYLES, PARAM_NAME_VOCAB, TOOL_DESCRIPTIONS, TOOL_NAME_STYLES, TOOL_NAME_VOCAB,
};
use crate::manifest::{Applied, Family};
use crate::pool::Pool;

pub struct ToolSchemas;

const F: Family = Family::ToolSchemas;

fn props(schema: &Value) -> Option<&Map<String, Value>> {
    schema.get("properties").and_then(Value::as_object)
}

fn props_mut(schema: &mut Value) -> Option<&mut Map<String, Value>> {
    schema.get_mut("properties").and_then(Value::as_object_mut)
}

fn required(schema: &Value) -> Vec<String> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(String::from)
        .collect()
}

fn set_required(schema: &mut Value, req: Vec<String>) {
    if let Some(o) = schema.as_object_mut() {
        if req.is_empty() {
            o.remove("required");
        } else {
            o.insert("required".into(), json!(req));
        }
    }
}

fn pointer(segs: &[String]) -> String {
    segs.iter()
        .map(|s| format!("/{}", s.replace('~', "~0").replace('/', "~1")))
        .collect()
}

/// Rewrites every binding pointer through `f` (segments in, segments out).
fn remap_pointers(tool: &mut ToolSpec, f: impl Fn(&[String]) -> Option<Vec<String>>) {
    for src in tool.binding.args.values_mut() {
        let p = match src {
            ArgSourceSpec::Pointer(p) => p,
            ArgSourceSpec::Mapped { from, .. } => from,
        };
        if let Some(new) = split_pointer(p).and_then(|segs| f(&segs)) {
            *p = pointer(&new);
        }
    }
}

/// A name that reads like an identifier rather than an English word, so
/// renaming its mentions in prose is safe.
fn identifier_like(name: &str) -> bool {
    name.chars().any(|c| !c.is_ascii_lowercase())
}

/// Indices chosen each with probability `p`, at least one (if any).
fn some_indices(rng: &mut ChaCha8Rng, n: usize, p: f64) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let mut v: Vec<usize> = (0..n).filter(|_| rng.gen_bool(p)).collect();
    if v.is_empty() {
        v.push(rng.gen_range(0..n));
    }
    v
}

fn suffix_sep(style: &str) -> &'static str {
    match style {
        "camel" | "pascal" | "flat" => "",
        "kebab" => "-",
        _ => "_",
    }
}

/// Renames a tool everywhere it is referenced.
pub(crate) fn rename_tool(spec: &mut HarnessSpec, old: &str, new: &str) {
    for t in spec.tools.iter_mut().filter(|t| t.name == old) {
        t.name = new.to_string();
    }
    for s in &mut spec.skills {
        for t in s.front.tools.iter_mut().filter(|t| *t == old) {
            *t = new.to_string();
        }
        if identifier_like(old) {
            s.body = replace_word(&s.body, old, new);
            s.front.description = replace_word(&s.front.description, old, new);
        }
    }
    for h in &mut spec.hooks {
        if let Some(m) = &mut h.matcher {
            if let Some(v) = m.get_mut("tool").filter(|v| *v == old) {
                *v = new.to_string();
            }
        }
    }
}

/// Replaces a mention of a tool's parameter or enum value in the skills that list the tool.
fn edit_skills_of(spec: &mut HarnessSpec, tool: &str, f: impl Fn(&str) -> String) {
    for s in spec
        .skills
        .iter_mut()
        .filter(|s| s.front.tools.iter().any(|t| t == tool))
    {
        s.body = f(&s.body);
    }
}

fn add_distractors(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let mut free: Vec<_> = DISTRACTOR_TOOLS
        .get(pool)
        .iter()
        .filter(|d| !spec.tools.iter().any(|t| t.name == d.name))
        .collect();
    free.shuffle(rng);
    let n = rng.gen_range(1..=2).min(free.len());
    let added: Vec<&str> = free[..n].iter().map(|d| d.name).collect();
    for d in &free[..n] {
        spec.tools.push(distractor_tool(d));
    }
    changed(&added, "distractor_tools", "tools", true, pool)
}

fn rename_tools(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let style = *pick(rng, TOOL_NAME_STYLES.get(pool));
    let mut taken: BTreeSet<String> = spec.tools.iter().map(|t| t.name.clone()).collect();
    let mut renames = Map::new();
    for i in some_indices(rng, spec.tools.len(), 0.7) {
        let old = spec.tools[i].name.clone();
        let words: Vec<String> = match TOOL_NAME_VOCAB
            .iter()
            .find(|v| v.0 == spec.tools[i].binding.op)
        {
            Some((_, train, heldout)) => {
                pick(rng, if pool == Pool::Train { train } else { heldout })
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            }
            None => split_words(&old),
        };
        let candidate = style_name(&words, style, rng);
        let new = unique(&candidate, suffix_sep(style), &mut taken);
        rename_tool(spec, &old, &new);
        renames.insert(old, Value::String(new));
    }
    vec![Applied::new(
        F,
        "rename_tools",
        json!({"style": style, "renames": renames}),
        true,
        pool,
    )]
}

/// Renames top-level parameter `old` of tool `ti` to `new`.
fn rename_param(spec: &mut HarnessSpec, ti: usize, old: &str, new: &str) {
    let tool = &mut spec.tools[ti];
    if let Some(p) = props_mut(&mut tool.input_schema) {
        let entries: Vec<(String, Value)> = std::mem::take(p).into_iter().collect();
        for (k, v) in entries {
            p.insert(if k == old { new.to_string() } else { k }, v);
        }
    }
    let req: Vec<String> = required(&tool.input_schema)
        .into_iter()
        .map(|r| if r == old { new.to_string() } else { r })
        .collect();
    if tool.input_schema.get("required").is_some() {
        set_required(&mut tool.input_schema, req);
    }
    remap_pointers(tool, |segs| {
        (segs.first().map(String::as_str) == Some(old)).then(|| {
            let mut s = segs.to_vec();
            s[0] = new.to_string();
            s
        })
    });
    let name = tool.name.clone();
    if old.contains('_') {
        edit_skills_of(spec, &name, |b| replace_word(b, old, new));
    }
}

fn rename_params(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let style = *pick(rng, PARAM_NAME_STYLES.get(pool));
    let mut renames = Vec::new();
    for ti in 0..spec.tools.len() {
        let names: Vec<String> = props(&spec.tools[ti].input_schema)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        let mut taken: BTreeSet<String> = names.iter().cloned().collect();
        for old in names {
            if !rng.gen_bool(0.5) {
                continue;
            }
            let bound_as = spec.tools[ti]
                .binding
                .args
                .iter()
                .find(|(_, s)| s.pointer() == format!("/{old}"))
                .map(|(c, _)| c.clone());
            let root = bound_as.unwrap_or_else(|| old.clone());
            let words: Vec<String> = match PARAM_NAME_VOCAB.iter().find(|v| v.0 == root) {
                Some((_, train, heldout)) => {
                    pick(rng, if pool == Pool::Train { train } else { heldout })
                        .iter()
                        .map(|s| s.to_string())
                        .collect()
                }
                None => split_words(&old),
            };
            let candidate = style_name(&words, style, rng);
            if candidate == old {
                continue;
            }
            let new = unique(&candidate, suffix_sep(style), &mut taken);
            rename_param(spec, ti, &old, &new);
            renames.push(json!([spec.tools[ti].name, old, new]));
        }
    }
    if renames.is_empty() {
        return Vec::new();
    }
    vec![Applied::new(
        F,
        "rename_params",
        json!({"style": style, "renames": renames}),
        true,
        pool,
    )]
}

/// New enum values in `style` for `values` (whose canonical values are `canonical`).
fn restyle_values(
    values: &[String],
    canonical: &[String],
    param: &str,
    style: &str,
    pool: Pool,
) -> Vec<String> {
    let mut taken = BTreeSet::new();
    let mut out = Vec::new();
    for (i, (v, c)) in values.iter().zip(canonical).enumerate() {
        let candidate = match style {
            "synonyms-train" | "synonyms-heldout" => {
                let heldout = pool == Pool::Heldout;
                ENUM_VALUE_VOCAB
                    .iter()
                    .find(|e| e.0 == c.as_str())
                    .map_or_else(
                        || v.clone(),
                        |e| {
                            if heldout {
                                e.2.to_string()
                            } else {
                                e.1.to_string()
                            }
                        },
                    )
            }
            "upper" => v
                .chars()
                .map(|ch| {
                    if ch.is_alphanumeric() {
                        ch.to_ascii_uppercase()
                    } else {
                        '_'
                    }
                })
                .collect(),
            "prefixed" => format!("{}_{v}", split_words(param).join("_")),
            "coded" => format!("c{:02}", i + 1),
            "abbrev" => {
                let letters: String = v
                    .chars()
                    .filter(char::is_ascii_alphanumeric)
                    .map(|c| c.to_ascii_lowercase())
                    .collect();
                let mut n = 3.min(letters.len()).max(1);
                while n < letters.len() && taken.contains(&letters[..n]) {
                    n += 1;
                }
                if letters.is_empty() {
                    format!("v{i}")
                } else {
                    letters[..n].to_string()
                }
            }
            _ => v.clone(),
        };
        out.push(unique(&candidate, "_", &mut taken));
    }
    out
}

/// Paths (segments) of string-enum parameters, top level and one level down.
fn enum_paths(schema: &Value) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let is_str_enum = |v: &Value| {
        v.get("enum")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_string))
    };
    for (k, v) in props(schema).into_iter().flatten() {
        if is_str_enum(v) {
            out.push(vec![k.clone()]);
        }
        for (k2, v2) in props(v).into_iter().flatten() {
            if is_str_enum(v2) {
                out.push(vec![k.clone(), k2.clone()]);
            }
        }
    }
    out
}

fn schema_at_mut<'a>(schema: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    let mut cur = schema;
    for seg in path {
        cur = cur.get_mut("properties")?.get_mut(seg.as_str())?;
    }
    Some(cur)
}

fn rename_enums(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let style = *pick(rng, ENUM_VALUE_STYLES.get(pool));
    let mut changes = Vec::new();
    for ti in 0..spec.tools.len() {
        for path in enum_paths(&spec.tools[ti].input_schema) {
            if !rng.gen_bool(0.8) {
                continue;
            }
            let tool = &mut spec.tools[ti];
            let ptr = pointer(&path);
            let Some(param) = schema_at_mut(&mut tool.input_schema, &path) else {
                continue;
            };
            let values: Vec<String> = param["enum"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect();
            let bound = tool
                .binding
                .args
                .iter()
                .find(|(_, s)| s.pointer() == ptr)
                .map(|(c, _)| c.clone());
            let old_map = bound.as_ref().and_then(|c| match &tool.binding.args[c] {
                ArgSourceSpec::Mapped { map, .. } => Some(map.clone()),
                ArgSourceSpec::Pointer(_) => None,
            });
            let canonical: Vec<String> = values
                .iter()
                .map(|v| {
                    old_map
                        .as_ref()
                        .and_then(|m| m.get(v).cloned())
                        .unwrap_or_else(|| v.clone())
                })
                .collect();
            let new = restyle_values(
                &values,
                &canonical,
                path.last().expect("non-empty"),
                style,
                pool,
            );
            if new == values {
                continue;
            }
            param["enum"] = json!(new);
            if let Some(c) = &bound {
                let mut map = BTreeMap::new();
                for ((old, newv), canon) in values.iter().zip(&new).zip(&canonical) {
                    // A value the old map did not cover never bound; keep it unbound.
                    if old_map.as_ref().is_none_or(|m| m.contains_key(old)) {
                        map.insert(newv.clone(), canon.clone());
                    }
                }
                tool.binding.args.insert(
                    c.clone(),
                    ArgSourceSpec::Mapped {
                        from: ptr.clone(),
                        map,
                    },
                );
            }
            let name = tool.name.clone();
            let pairs: Vec<(String, String)> =
                values.iter().cloned().zip(new.iter().cloned()).collect();
            edit_skills_of(spec, &name, |b| {
                pairs.iter().fold(b.to_string(), |acc, (o, n)| {
                    acc.replace(&format!("\"{o}\""), &format!("\"{n}\""))
                })
            });
            changes.push(json!({"tool": name, "param": ptr, "values": pairs.iter().map(|(o, n)| json!([o, n])).collect::<Vec<_>>()}));
        }
    }
    if changes.is_empty() {
        return Vec::new();
    }
    vec![Applied::new(
        F,
        "rename_enum_values",
        json!({"style": style, "changes": changes}),
        true,
        pool,
    )]
}

fn is_object(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("object") || v.get("properties").is_some()
}

fn nest(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let base = *pick(rng, NEST_CONTAINERS.get(pool));
    let candidates: Vec<usize> = (0..spec.tools.len())
        .filter(|&i| {
            props(&spec.tools[i].input_schema).is_some_and(|p| p.values().any(|v| !is_object(v)))
        })
        .collect();
    let mut changes = Vec::new();
    for ci in some_indices(rng, candidates.len(), 0.4) {
        let tool = &mut spec.tools[candidates[ci]];
        let p = props(&tool.input_schema).expect("candidate").clone();
        let flat: Vec<String> = p
            .iter()
            .filter(|(_, v)| !is_object(v))
            .map(|(k, _)| k.clone())
            .collect();
        let moved: Vec<String> = if rng.gen_bool(0.5) {
            flat
        } else {
            let idx = some_indices(rng, flat.len(), 0.5);
            idx.into_iter().map(|i| flat[i].clone()).collect()
        };
        let mut taken: BTreeSet<String> =
            p.keys().filter(|k| !moved.contains(k)).cloned().collect();
        let container = unique(base, "_", &mut taken);
        let req = required(&tool.input_schema);
        let inner_req: Vec<String> = req.iter().filter(|r| moved.contains(r)).cloned().collect();
        let mut inner = Map::new();
        let mut outer = Map::new();
        for (k, v) in p {
            if moved.contains(&k) {
                if inner.is_empty() {
                    outer.insert(container.clone(), Value::Null);
                }
                inner.insert(k, v);
            } else {
                outer.insert(k, v);
            }
        }
        let mut obj = Map::new();
        obj.insert("type".into(), json!("object"));
        obj.insert("properties".into(), Value::Object(inner));
        if !inner_req.is_empty() {
            obj.insert("required".into(), json!(inner_req));
        }
        outer.insert(container.clone(), Value::Object(obj));
        *props_mut(&mut tool.input_schema).expect("candidate") = outer;
        let mut new_req: Vec<String> = req.iter().filter(|r| !moved.contains(r)).cloned().collect();
        if !inner_req.is_empty() {
            new_req.insert(0, container.clone());
        }
        if tool.input_schema.get("required").is_some() || !new_req.is_empty() {
            set_required(&mut tool.input_schema, new_req);
        }
        remap_pointers(tool, |segs| {
            segs.first().filter(|s| moved.contains(s)).map(|_| {
                let mut s = vec![container.clone()];
                s.extend(segs.iter().cloned());
                s
            })
        });
        changes.push(json!({"tool": tool.name, "container": container, "params": moved}));
    }
    changed(&changes, "nest_params", "changes", true, pool)
}

fn flatten(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let mut changes = Vec::new();
    for tool in &mut spec.tools {
        let containers: Vec<String> = props(&tool.input_schema)
            .into_iter()
            .flatten()
            .filter(|(_, v)| props(v).is_some())
            .map(|(k, _)| k.clone())
            .collect();
        for c in containers {
            // A binding to the whole object would lose its target.
            if tool
                .binding
                .args
                .values()
                .any(|s| s.pointer() == format!("/{c}"))
                || !rng.gen_bool(0.8)
            {
                continue;
            }
            let p = props(&tool.input_schema).expect("has properties").clone();
            let inner_schema = p[&c].clone();
            let inner = props(&inner_schema).expect("container").clone();
            let inner_req = required(&inner_schema);
            let mut taken: BTreeSet<String> = p.keys().filter(|k| **k != c).cloned().collect();
            let mut renamed = BTreeMap::new();
            for k in inner.keys() {
                let n = if taken.contains(k) {
                    unique(&format!("{c}_{k}"), "_", &mut taken)
                } else {
                    unique(k, "_", &mut taken)
                };
                renamed.insert(k.clone(), n);
            }
            let mut outer = Map::new();
            for (k, v) in p {
                if k == c {
                    for (ik, iv) in &inner {
                        outer.insert(renamed[ik].clone(), iv.clone());
                    }
                } else {
                    outer.insert(k, v);
                }
            }
            *props_mut(&mut tool.input_schema).expect("has properties") = outer;
            let req = required(&tool.input_schema);
            let was_required = req.contains(&c);
            let mut new_req: Vec<String> = req.into_iter().filter(|r| *r != c).collect();
            if was_required {
                new_req.extend(inner_req.iter().filter_map(|r| renamed.get(r).cloned()));
            }
            if tool.input_schema.get("required").is_some() {
                set_required(&mut tool.input_schema, new_req);
            }
            remap_pointers(tool, |segs| {
                (segs.len() >= 2 && segs[0] == c).then(|| {
                    let mut s = vec![renamed
                        .get(&segs[1])
                        .cloned()
                        .unwrap_or_else(|| segs[1].clone())];
                    s.extend(segs[2..].iter().cloned());
                    s
                })
            });
            changes.push(json!({"tool": tool.name, "container": c}));
        }
    }
    changed(&changes, "flatten_params", "changes", false, pool)
}

fn reorder(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let mut touched = Vec::new();
    for tool in &mut spec.tools {
        if !rng.gen_bool(0.5) {
            continue;
        }
        let Some(p) = props_mut(&mut tool.input_schema) else {
            continue;
        };
        let mut entries: Vec<(String, Value)> = std::mem::take(p).into_iter().collect();
        let before: Vec<String> = entries.iter().map(|e| e.0.clone()).collect();
        entries.shuffle(rng);
        let changed = entries.iter().map(|e| &e.0).ne(before.iter());
        p.extend(entries);
        if changed {
            touched.push(tool.name.clone());
        }
    }
    changed(&touched, "reorder_properties", "tools", false, pool)
}

fn add_optional(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let (name, ty, desc) = *pick(rng, EXTRA_PARAMS.get(pool));
    let mut touched = Vec::new();
    for i in some_indices(rng, spec.tools.len(), 0.3) {
        let tool = &mut spec.tools[i];
        let Some(p) = props_mut(&mut tool.input_schema) else {
            continue;
        };
        if p.contains_key(name) {
            continue;
        }
        p.insert(name.to_string(), json!({"type": ty, "description": desc}));
        touched.push(tool.name.clone());
    }
    if touched.is_empty() {
        return Vec::new();
    }
    vec![Applied::new(
        F,
        "optional_param",
        json!({"param": name, "tools": touched}),
        true,
        pool,
    )]
}

fn describe(spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
    let mut touched = Vec::new();
    for tool in &mut spec.tools {
        let Some((_, train, heldout)) = TOOL_DESCRIPTIONS.iter().find(|d| d.0 == tool.binding.op)
        else {
            continue;
        };
        if !rng.gen_bool(0.6) {
            continue;
        }
        let d = *pick(rng, if pool == Pool::Train { train } else { heldout });
        if tool.description != d {
            tool.description = d.to_string();
            touched.push(tool.name.clone());
        }
    }
    changed(&touched, "rewrite_descriptions", "tools", true, pool)
}

impl Transform for ToolSchemas {
    fn family(&self) -> Family {
        F
    }

    fn apply(&self, spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied> {
        // Flatten runs before nest, so it only ever undoes nesting that was
        // already in the base, never this pass's own.
        let ops: [(SubOp, f64); 9] = [
            (add_distractors, 0.35),
            (rename_tools, 0.5),
            (flatten, 0.5),
            (rename_params, 0.5),
            (rename_enums, 0.4),
            (nest, 0.35),
            (reorder, 0.3),
            (add_optional, 0.3),
            (describe, 0.4),
        ];
        let on = choose_ops(rng, &ops.map(|o| o.1));
        let mut out = Vec::new();
        for ((op, _), on) in ops.iter().zip(on) {
            if on {
                out.extend(op(spec, rng, pool));
            }
        }
        out
    }
}

/// One `Applied` record for the changes a transform made, or none when it changed nothing.
fn changed<T: serde::Serialize>(
    changes: &[T],
    name: &str,
    key: &str,
    heldout: bool,
    pool: Pool,
) -> Vec<Applied> {
    if changes.is_empty() {
        return Vec::new();
    }
    vec![Applied::new(
        F,
        name,
        json!({ key: changes }),
        heldout,
        pool,
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enum_styles_are_unique_and_nonempty() {
        let v: Vec<String> = ["shipping", "shoes", "sizing", "snacks"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for style in ENUM_VALUE_STYLES
            .train
            .iter()
            .chain(ENUM_VALUE_STYLES.heldout)
        {
            let pool = if ENUM_VALUE_STYLES.train.contains(style) {
                Pool::Train
            } else {
                Pool::Heldout
            };
            let out = restyle_values(&v, &v, "topic", style, pool);
            let set: BTreeSet<_> = out.iter().collect();
            assert_eq!(set.len(), v.len(), "{style}: {out:?}");
        }
        assert_eq!(
            restyle_values(&v, &v, "topic", "abbrev", Pool::Heldout),
            vec!["shi", "sho", "siz", "sna"]
        );
    }
}
