//! Tool bindings: from the arguments a model wrote to canonical arguments, and back.
//!
//! The forward direction serves dispatch; the inverse (`from_canonical`) lets
//! the oracle teacher write a call in whatever names, nesting and enum values
//! the current harness state uses.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::op::Op;

/// What a binding targets: a canonical operation, or `noop` (a tool that
/// exists in the harness but does nothing in the stream, e.g. a distractor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Op(Op),
    Noop,
}

impl Target {
    pub fn parse(s: &str) -> Option<Target> {
        if s == "noop" {
            Some(Target::Noop)
        } else {
            s.parse().ok().map(Target::Op)
        }
    }
    pub fn op(self) -> Option<Op> {
        match self {
            Target::Op(op) => Some(op),
            Target::Noop => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ArgBinding {
    pub canonical: String,
    /// Pointer split into unescaped segments.
    pub path: Vec<String>,
    /// Model value -> canonical value.
    pub map: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    pub target: Target,
    pub args: Vec<ArgBinding>,
}

/// Splits a JSON Pointer (RFC 6901) into segments; `None` if malformed.
pub fn split_pointer(p: &str) -> Option<Vec<String>> {
    if p.is_empty() {
        return Some(Vec::new());
    }
    let rest = p.strip_prefix('/')?;
    Some(
        rest.split('/')
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect(),
    )
}

impl Binding {
    /// Canonical arguments for a call. Missing optional arguments are simply
    /// absent; a value outside a value map is a model-readable error.
    pub fn to_canonical(&self, call_args: &Value) -> Result<Map<String, Value>, String> {
        let mut out = Map::new();
        for a in &self.args {
            let mut cur = call_args;
            let mut found = true;
            for seg in &a.path {
                match cur.get(seg.as_str()) {
                    Some(v) => cur = v,
                    None => {
                        found = false;
                        break;
                    }
                }
            }
            if !found || cur.is_null() {
                continue;
            }
            let value = match (&a.map, cur) {
                (Some(map), Value::String(s)) => match map.get(s) {
                    Some(c) => Value::String(c.clone()),
                    None => {
                        let allowed: Vec<&str> = map.keys().map(String::as_str).collect();
                        return Err(format!(
                            "`{}` must be one of {allowed:?}, got \"{s}\"",
                            a.path.join(".")
                        ));
                    }
                },
                _ => cur.clone(),
            };
            out.insert(a.canonical.clone(), value);
        }
        if let Target::Op(op) = self.target {
            for spec in op.args().iter().filter(|s| s.required) {
                if !out.contains_key(spec.name) {
                    let at = self
                        .args
                        .iter()
                        .find(|a| a.canonical == spec.name)
                        .map(|a| a.path.join("."));
                    return Err(format!(
                        "missing required argument `{}`",
                        at.unwrap_or_else(|| spec.name.to_string())
                    ));
                }
            }
        }
        Ok(out)
    }

    /// Call arguments that bind to the given canonical arguments: the inverse
    /// of [`Binding::to_canonical`].
    pub fn from_canonical(&self, canonical: &Map<String, Value>) -> Value {
        let mut root = Value::Object(Map::new());
        for a in &self.args {
            let Some(v) = canonical.get(&a.canonical) else {
                continue;
            };
            let v = match (&a.map, v) {
                (Some(map), Value::String(s)) => map
                    .iter()
                    .find(|(_, c)| *c == s)
                    .map(|(k, _)| Value::String(k.clone()))
                    .unwrap_or_else(|| v.clone()),
                _ => v.clone(),
            };
            set_path(&mut root, &a.path, v);
        }
        root
    }
}

fn set_path(root: &mut Value, path: &[String], v: Value) {
    let mut cur = root;
    for (i, seg) in path.iter().enumerate() {
        let obj = match cur {
            Value::Object(o) => o,
            other => {
                *other = Value::Object(Map::new());
                other.as_object_mut().expect("just set")
            }
        };
        if i + 1 == path.len() {
            obj.insert(seg.clone(), v);
            return;
        }
        cur = obj
            .entry(seg.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// The sub-schema a pointer reaches by walking `properties`; `None` if the
/// schema declares no such parameter.
pub fn schema_at<'a>(schema: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = schema;
    for seg in path {
        cur = cur.get("properties")?.get(seg.as_str())?;
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested() -> Binding {
        Binding {
            target: Target::Op(Op::Stock),
            args: vec![
                ArgBinding {
                    canonical: "product".into(),
                    path: vec!["item".into(), "id".into()],
                    map: None,
                },
                ArgBinding {
                    canonical: "size".into(),
                    path: vec!["item".into(), "sz".into()],
                    map: Some(BTreeMap::from([
                        ("medium".into(), "M".into()),
                        ("large".into(), "L".into()),
                    ])),
                },
            ],
        }
    }

    #[test]
    fn nested_and_mapped_arguments_bind() {
        let c = nested()
            .to_canonical(&json!({"item": {"id": "P3", "sz": "medium"}}))
            .unwrap();
        assert_eq!(Value::Object(c), json!({"product": "P3", "size": "M"}));
    }

    #[test]
    fn inverse_round_trips() {
        let b = nested();
        let canonical = json!({"product": "P7", "size": "L"});
        let call = b.from_canonical(canonical.as_object().unwrap());
        assert_eq!(call, json!({"item": {"id": "P7", "sz": "large"}}));
        assert_eq!(Value::Object(b.to_canonical(&call).unwrap()), canonical);
    }

    #[test]
    fn unmapped_value_and_missing_required_are_errors() {
        let e = nested()
            .to_canonical(&json!({"item": {"id": "P3", "sz": "huge"}}))
            .unwrap_err();
        assert!(e.contains("must be one of"), "{e}");
        let e = nested().to_canonical(&json!({"item": {}})).unwrap_err();
        assert!(e.contains("item.id"), "{e}");
    }

    #[test]
    fn pointers_unescape() {
        assert_eq!(split_pointer("/a~1b/c~0d").unwrap(), vec!["a/b", "c~d"]);
        assert!(split_pointer("a/b").is_none());
    }
}
