//! `$ref` cycles in tool schemas. A schema may be recursive through a keyword that descends
//! into the instance (`properties`, `items`, ...): every step then consumes part of a finite
//! value. A cycle of references that stays on the same instance location (`$ref`, `allOf`,
//! `anyOf`, `oneOf`, `not`, `if`/`then`/`else`, `$defs` chains) never does, and a validator
//! following it recurses without end. Such schemas are refused when the harness is checked.

use std::collections::HashMap;

use serde_json::Value;

/// Keywords whose subschemas apply to the same instance as the schema holding them.
const SAME_INSTANCE_ONE: [&str; 4] = ["not", "if", "then", "else"];
const SAME_INSTANCE_MANY: [&str; 3] = ["allOf", "anyOf", "oneOf"];

/// Bounds on the walk: a harness tool schema is small; anything past these is refused too.
const MAX_NODES: usize = 100_000;
const MAX_DEPTH: usize = 256;

/// The first `$ref` cycle that never descends into the instance, as the chain of JSON
/// Pointers (`#/$defs/a -> #/$defs/b -> #/$defs/a`), or a message when the schema is too
/// large or deep to check; `None` when there is no such cycle.
pub fn same_instance_ref_cycle(schema: &Value) -> Option<String> {
    let mut state: HashMap<String, u8> = HashMap::new(); // 1: on the path, 2: done
    let mut path: Vec<String> = Vec::new();
    let mut budget = MAX_NODES;
    // every object in the document may start a same-instance chain (the root, `$defs`
    // entries, subschemas under descending keywords)
    let mut stack = vec![("#".to_string(), schema)];
    while let Some((p, v)) = stack.pop() {
        if budget == 0 {
            return Some(too_large());
        }
        budget -= 1;
        if v.is_object() && !state.contains_key(&p) {
            if let Some(found) = visit(schema, v, p.clone(), &mut state, &mut path, &mut budget) {
                return Some(found);
            }
        }
        match v {
            Value::Object(o) => {
                for (k, c) in o {
                    stack.push((format!("{p}/{}", escape(k)), c));
                }
            }
            Value::Array(a) => {
                for (i, c) in a.iter().enumerate() {
                    stack.push((format!("{p}/{i}"), c));
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
                "a `$ref` cycle that never reaches a property or an item: {}",
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
                next.push((normalise(r), target));
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

/// Resolves a local reference (`#`, `#/$defs/a`); other references are left to the
/// validator.
fn resolve<'a>(root: &'a Value, r: &str) -> Option<&'a Value> {
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
        let m = same_instance_ref_cycle(&s).unwrap();
        assert!(m.contains("#/$defs/a -> #/$defs/b -> #/$defs/a"), "{m}");
    }

    #[test]
    fn self_reference_and_allof_cycles_are_found() {
        assert!(same_instance_ref_cycle(&json!({"$ref": "#"})).is_some());
        let s = json!({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "type": "object"});
        assert!(same_instance_ref_cycle(&s).is_some());
    }

    #[test]
    fn recursion_through_properties_or_items_is_allowed() {
        let tree = json!({
            "type": "object",
            "$defs": {"node": {"type": "object", "properties": {
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
            "properties": {"root": {"$ref": "#/$defs/node"}}
        });
        assert_eq!(same_instance_ref_cycle(&tree), None);
        let plain = json!({"type": "object", "properties": {"product_id": {"type": "string"}}});
        assert_eq!(same_instance_ref_cycle(&plain), None);
    }
}
