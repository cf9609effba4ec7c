//! `$ref` cycles in tool schemas. A schema may be recursive through a keyword that descends
//! into the instance (`properties`, `items`, ...): every step then consumes part of a finite
//! value. A cycle of references that stays on the same instance location (`$ref`, `allOf`,
//! `anyOf`, `oneOf`, `not`, `if`/`then`/`else`, `$defs` chains) never does, and a validator
//! following it recurses without end. Such schemas are refused when the harness is checked.
//!
//! The check follows local JSON Pointers (`#`, `#/$defs/a`, percent-encoded or not, as the
//! validator reads them). References it cannot follow (anchors, `$id` bases, `$dynamicRef`,
//! other documents) are refused as well: a cycle through one of them would pass the check and
//! crash the process that validates a call.

use std::collections::HashMap;

use serde_json::Value;

/// Keywords whose subschemas apply to the same instance as the schema holding them.
const SAME_INSTANCE_ONE: [&str; 4] = ["not", "if", "then", "else"];
const SAME_INSTANCE_MANY: [&str; 3] = ["allOf", "anyOf", "oneOf"];

/// Bounds on the walk: a harness tool schema is small; anything past these is refused too.
const MAX_NODES: usize = 100_000;
const MAX_DEPTH: usize = 256;

/// Keywords whose values are data, not subschemas.
const DATA: [&str; 5] = ["default", "examples", "example", "const", "enum"];
/// Keywords whose values map names to subschemas (the names are not keywords).
const MAPS: [&str; 5] = [
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// Keywords that move references off the document's own JSON Pointers: refused.
const UNFOLLOWED: [&str; 6] = [
    "$anchor",
    "$dynamicAnchor",
    "$dynamicRef",
    "$recursiveAnchor",
    "$recursiveRef",
    "$id",
];

/// What is wrong with the schema's references, with what to do: the first `$ref` cycle that
/// never descends into the instance, as the chain of JSON Pointers (`#/$defs/a -> #/$defs/b
/// -> #/$defs/a`), a reference the check cannot follow, or a schema too large or deep to
/// check; `None` when the references are fine.
pub fn problem(schema: &Value) -> Option<String> {
    let mut state: HashMap<String, u8> = HashMap::new(); // 1: on the path, 2: done
    let mut path: Vec<String> = Vec::new();
    let mut budget = MAX_NODES;
    // every object in the document may start a same-instance chain (the root, `$defs`
    // entries, subschemas under descending keywords)
    // (pointer, value, whether the value is a map of named subschemas such as `properties`)
    let mut stack = vec![("#".to_string(), schema, false)];
    while let Some((p, v, map)) = stack.pop() {
        if budget == 0 {
            return Some(too_large());
        }
        budget -= 1;
        if let Some(o) = v.as_object().filter(|_| !map) {
            // a string value: the keyword itself, not a property named like it
            let at_root = p == "#";
            for k in UNFOLLOWED {
                if o.get(k).is_some_and(Value::is_string) && !(at_root && k == "$id") {
                    return Some(format!(
                        "`{k}` at {p}: references are checked as local JSON Pointers only; \
                         refer with `\"$ref\": \"#/$defs/name\"` instead"
                    ));
                }
            }
            if let Some(r) = o.get("$ref").and_then(Value::as_str) {
                if resolve(schema, r).is_none() {
                    return Some(format!(
                        "`$ref` `{r}` at {p} does not lead to a part of this schema: use a \
                         local JSON Pointer such as `#/$defs/name` (other documents and \
                         anchors are not followed)"
                    ));
                }
            }
        }
        if v.is_object() && !map && !state.contains_key(&p) {
            if let Some(found) = visit(schema, v, p.clone(), &mut state, &mut path, &mut budget) {
                return Some(found);
            }
        }
        match v {
            Value::Object(o) => {
                for (k, c) in o {
                    // a schema's data (defaults, examples, constants) is not schema: a `$ref`
                    // string in an example is text, and no validator follows it
                    if !map && DATA.contains(&k.as_str()) {
                        continue;
                    }
                    let is_map = !map && MAPS.contains(&k.as_str());
                    stack.push((format!("{p}/{}", escape(k)), c, is_map));
                }
            }
            Value::Array(a) => {
                for (i, c) in a.iter().enumerate() {
                    stack.push((format!("{p}/{i}"), c, false));
                }
            }
            _ => {}
        }
    }
    None
}

fn too_large() -> String {
    format!(
        "the schema is too large or too deeply nested to check (over {MAX_NODES} subschemas \
         or {MAX_DEPTH} levels of references)"
    )
}

fn visit(
    root: &Value,
    node: &Value,
    ptr: String,
    state: &mut HashMap<String, u8>,
    path: &mut Vec<String>,
    budget: &mut usize,
) -> Option<String> {
    match state.get(&ptr) {
        Some(2) => return None,
        Some(_) => {
            let from = path.iter().position(|p| *p == ptr).unwrap_or(0);
            let mut chain: Vec<&str> = path[from..].iter().map(String::as_str).collect();
            chain.push(&ptr);
            return Some(format!(
                "a `$ref` cycle that never reaches a property or an item: {} (a validator \
                 would recurse forever; make each reference reach a property or an item)",
                chain.join(" -> ")
            ));
        }
        None => {}
    }
    if *budget == 0 || path.len() >= MAX_DEPTH {
        return Some(too_large());
    }
    *budget -= 1;
    state.insert(ptr.clone(), 1);
    path.push(ptr.clone());
    let mut next: Vec<(String, &Value)> = Vec::new();
    if let Some(obj) = node.as_object() {
        if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
            if let Some(target) = resolve(root, r) {
                next.push((normalise(&decode(r)), target));
            }
        }
        for k in SAME_INSTANCE_ONE {
            if let Some(s) = obj.get(k) {
                next.push((format!("{ptr}/{k}"), s));
            }
        }
        for k in SAME_INSTANCE_MANY {
            if let Some(arr) = obj.get(k).and_then(Value::as_array) {
                for (i, s) in arr.iter().enumerate() {
                    next.push((format!("{ptr}/{k}/{i}"), s));
                }
            }
        }
    }
    for (p, s) in next {
        if let Some(found) = visit(root, s, p, state, path, budget) {
            return Some(found);
        }
    }
    path.pop();
    state.insert(ptr, 2);
    None
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn normalise(r: &str) -> String {
    let r = r.trim_end_matches('/');
    if r.is_empty() {
        "#".into()
    } else {
        r.to_string()
    }
}

/// A reference with its percent-escapes decoded (`#/%24defs/a` is `#/$defs/a`, as the
/// validator reads it).
fn decode(r: &str) -> String {
    percent_encoding::percent_decode_str(r)
        .decode_utf8_lossy()
        .into_owned()
}

/// Resolves a local reference (`#`, `#/$defs/a`, percent-encoded or not); `None` for
/// anything else.
fn resolve<'a>(root: &'a Value, r: &str) -> Option<&'a Value> {
    let r = decode(r);
    let pointer = r.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    root.pointer(pointer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ref_cycle_between_defs_is_found() {
        let s = json!({
            "type": "object",
            "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
            "properties": {"x": {"$ref": "#/$defs/a"}}
        });
        let m = problem(&s).unwrap();
        assert!(m.contains("#/$defs/a -> #/$defs/b -> #/$defs/a"), "{m}");
    }

    #[test]
    fn self_reference_and_allof_cycles_are_found() {
        assert!(problem(&json!({"$ref": "#"})).is_some());
        let s = json!({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "type": "object"});
        assert!(problem(&s).is_some());
    }

    #[test]
    fn a_cycle_behind_percent_escapes_is_found() {
        let s = json!({
            "type": "object", "$ref": "#/%24defs/a",
            "$defs": {"a": {"$ref": "#/%24defs/b"}, "b": {"$ref": "#/$defs/a"}}
        });
        let m = problem(&s).unwrap();
        assert!(m.contains("#/$defs/a -> #/$defs/b -> #/$defs/a"), "{m}");
    }

    #[test]
    fn references_the_check_cannot_follow_are_refused() {
        // an anchor cycle: the validator follows it, this check would not
        let anchors = json!({
            "type": "object", "$ref": "#A",
            "$defs": {"a": {"$anchor": "A", "$ref": "#B"}, "b": {"$anchor": "B", "$ref": "#A"}}
        });
        let m = problem(&anchors).unwrap();
        assert!(
            m.contains("`$ref` `#A`") && m.contains("#/$defs/name"),
            "{m}"
        );
        let remote = json!({"type": "object", "$ref": "https://example.com/s.json"});
        assert!(problem(&remote)
            .unwrap()
            .contains("does not lead to a part"));
        let dangling = json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/none"}}});
        assert!(problem(&dangling).is_some());
        let sub_id = json!({"type": "object", "properties": {"x": {"$id": "x.json"}}});
        assert!(problem(&sub_id).unwrap().contains("`$id`"));
        // properties named like the keywords are data, not references
        let named = json!({"type": "object", "$id": "tool.json", "properties": {
            "$ref": {"type": "string"}, "$id": {"type": "string"}, "$anchor": {"type": "integer"}}});
        assert_eq!(problem(&named), None);
        // and so are a schema's defaults and examples
        let data = json!({"type": "object", "properties": {"x": {"type": "object",
            "default": {"$ref": "https://example.com"}, "examples": [{"$id": "a"}]}}});
        assert_eq!(problem(&data), None);
        // a property named `default` is a schema all the same
        let hidden = json!({"type": "object", "properties": {"default": {"$ref": "#A"}}});
        assert!(problem(&hidden).is_some());
    }

    #[test]
    fn recursion_through_properties_or_items_is_allowed() {
        let tree = json!({
            "type": "object",
            "$defs": {"node": {"type": "object", "properties": {
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
            "properties": {"root": {"$ref": "#/$defs/node"}}
        });
        assert_eq!(problem(&tree), None);
        let plain = json!({"type": "object", "properties": {"product_id": {"type": "string"}}});
        assert_eq!(problem(&plain), None);
    }
}
