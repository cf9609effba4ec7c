//! Tool schemas no call can satisfy. A JSON Schema validator accepts `"enum": []` or a
//! `required` property the schema never describes, but the model can then never make a valid
//! call: every turn that needs the tool fails, and data generation writes nothing for it.
//! `hat harness check` reports each such place with its JSON Pointer.

use serde_json::Value;

/// Keywords whose subschemas every value must satisfy where they apply: one subschema, a map
/// of them, or a list of them. Alternatives (`anyOf`, `oneOf`), negations (`not`) and
/// conditions (`if`/`then`/`else`) are not walked: an unsatisfiable branch there can be
/// intended.
const ONE: [&str; 2] = ["items", "additionalProperties"];
const MAP: [&str; 4] = ["properties", "$defs", "definitions", "patternProperties"];
const LIST: [&str; 2] = ["allOf", "prefixItems"];
/// Keywords through which a `required` name may be described elsewhere than `properties`.
const DESCRIBED_ELSEWHERE: [&str; 6] = [
    "allOf",
    "anyOf",
    "oneOf",
    "patternProperties",
    "$ref",
    "dependentSchemas",
];
/// Bounds on the walk (a tool schema is small; `schema_refs` refuses huge ones).
const MAX_NODES: usize = 100_000;
const MAX_DEPTH: usize = 256;

/// Every place in `schema` that no value can satisfy, as `pointer: why`.
pub fn unsatisfiable(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![(String::new(), schema, 0usize)];
    let mut budget = MAX_NODES;
    while let Some((at, node, depth)) = stack.pop() {
        budget = budget.saturating_sub(1);
        if budget == 0 || depth > MAX_DEPTH {
            break;
        }
        let Some(obj) = node.as_object() else {
            continue;
        };
        let here = if at.is_empty() { "/" } else { at.as_str() };
        if obj
            .get("enum")
            .and_then(Value::as_array)
            .is_some_and(|e| e.is_empty())
        {
            out.push(format!("{here}: `enum` is empty, so no value matches"));
        }
        if obj
            .get("type")
            .and_then(Value::as_array)
            .is_some_and(|t| t.is_empty())
        {
            out.push(format!(
                "{here}: `type` is an empty list, so no value matches"
            ));
        }
        for (lo, hi) in [
            ("minimum", "maximum"),
            ("minLength", "maxLength"),
            ("minItems", "maxItems"),
            ("minProperties", "maxProperties"),
        ] {
            let (Some(a), Some(b)) = (
                obj.get(lo).and_then(Value::as_f64),
                obj.get(hi).and_then(Value::as_f64),
            ) else {
                continue;
            };
            if a > b {
                out.push(format!("{here}: `{lo}` {a} is above `{hi}` {b}"));
            }
        }
        if let Some(required) = obj.get("required").and_then(Value::as_array) {
            let props = obj.get("properties").and_then(Value::as_object);
            let closed = obj.get("additionalProperties") == Some(&Value::Bool(false));
            let elsewhere = DESCRIBED_ELSEWHERE.iter().any(|k| obj.contains_key(*k));
            if (props.is_some() || closed) && !elsewhere {
                for r in required.iter().filter_map(Value::as_str) {
                    if !props.is_some_and(|p| p.contains_key(r)) {
                        out.push(format!(
                            "{here}: `required` names `{r}`, which `properties` does not \
                             describe (the model cannot know what to send)"
                        ));
                    }
                }
            }
        }
        let child = |key: &str| format!("{at}/{}", escape(key));
        for k in ONE {
            if let Some(v) = obj.get(k).filter(|v| v.is_object()) {
                stack.push((child(k), v, depth + 1));
            }
        }
        for k in MAP {
            if let Some(m) = obj.get(k).and_then(Value::as_object) {
                for (name, v) in m {
                    stack.push((format!("{}/{}", child(k), escape(name)), v, depth + 1));
                }
            }
        }
        for k in LIST {
            if let Some(l) = obj.get(k).and_then(Value::as_array) {
                for (i, v) in l.iter().enumerate() {
                    stack.push((format!("{}/{i}", child(k)), v, depth + 1));
                }
            }
        }
    }
    out.sort();
    out
}

/// A key as a JSON Pointer token (RFC 6901).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Red-team finding: these passed `hat harness check`, and no call could ever satisfy them.
    #[test]
    fn schemas_no_call_satisfies_are_found() {
        let s = json!({
            "type": "object",
            "properties": {
                "size": {"type": "string", "enum": []},
                "qty": {"type": "integer", "minimum": 5, "maximum": 1},
                "tags": {"type": "array", "items": {"type": []}}
            },
            "required": ["size", "colour"]
        });
        let found = unsatisfiable(&s);
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(found
            .iter()
            .any(|f| f.starts_with("/properties/size: `enum` is empty")));
        assert!(found
            .iter()
            .any(|f| f.starts_with("/properties/qty: `minimum` 5")));
        assert!(found
            .iter()
            .any(|f| f.starts_with("/properties/tags/items: `type`")));
        assert!(found
            .iter()
            .any(|f| f.starts_with("/: `required` names `colour`")));
    }

    #[test]
    fn ordinary_schemas_pass() {
        let s = json!({
            "type": "object",
            "properties": {
                "product_id": {"type": "string", "enum": ["p1", "p2"]},
                "n": {"type": "integer", "minimum": 1, "maximum": 1},
                "a/b": {"anyOf": [{"type": "string"}, {"type": "null"}]}
            },
            "required": ["product_id"],
            "$defs": {"free": {"type": "object", "required": ["x"]}},
            "anyOf": [{"type": "object"}, {"enum": []}],
            "not": {"enum": []},
            "allOf": [{"required": ["y"]}]
        });
        let mut s = s;
        s["properties"]["m"] = json!({"type": "object", "properties": {}, "required": ["k"],
            "patternProperties": {"^k$": {"type": "string"}}});
        assert!(unsatisfiable(&s).is_empty(), "{:?}", unsatisfiable(&s));
    }
}
