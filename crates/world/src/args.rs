//! Reading canonical arguments leniently but never loosely.
//!
//! Models send `"2"` for 2, `"p3"` for P3, `null` for "not given". Anything
//! with one obvious meaning is accepted; anything else is an [`OpError`] that
//! names the argument, what it needed and what arrived, so the model can fix
//! its next call.

use hat_harness::Op;
use serde_json::{Map, Value};

use crate::error::OpError;

/// The arguments of one call, checked against the operation's canonical names.
pub(crate) struct Args<'a> {
    op: Op,
    map: &'a Map<String, Value>,
}

/// A short rendering of a bad value for an error message.
pub(crate) fn show(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() > 40 {
        format!("{}...", text.chars().take(40).collect::<String>())
    } else {
        text
    }
}

impl<'a> Args<'a> {
    pub fn new(op: Op, map: &'a Map<String, Value>) -> Result<Self, OpError> {
        if let Some(extra) = map.keys().find(|k| op.arg(k).is_none()) {
            let known = op.args().iter().map(|a| a.name).collect::<Vec<_>>();
            return Err(OpError::UnknownArgument {
                op: op.as_str(),
                arg: extra.chars().take(40).collect(),
                known: if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                },
            });
        }
        Ok(Args { op, map })
    }

    /// The value, treating `null` as absent.
    fn get(&self, name: &str) -> Option<&'a Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    /// A string argument, trimmed; blank counts as absent, and a number is
    /// taken as its decimal text (a shoe size sent as 38).
    pub fn string(&self, name: &'static str) -> Result<Option<String>, OpError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => {
                let t = s.trim();
                Ok((!t.is_empty()).then(|| t.to_string()))
            }
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(other) => Err(OpError::BadType {
                arg: name,
                expected: "a string",
                got: show(other),
            }),
        }
    }

    pub fn required_string(&self, name: &'static str) -> Result<String, OpError> {
        self.string(name)?.ok_or(OpError::MissingArgument {
            op: self.op.as_str(),
            arg: name,
        })
    }

    /// An integer argument; `2`, `2.0` and `"2"` all read as 2.
    pub fn integer(&self, name: &'static str) -> Result<Option<i64>, OpError> {
        let bad = |v: &Value| OpError::BadType {
            arg: name,
            expected: "an integer",
            got: show(v),
        };
        let from_f64 = |f: f64, v: &Value| {
            if f.fract() == 0.0 && f.abs() < 1e15 {
                Ok(Some(f as i64))
            } else {
                Err(bad(v))
            }
        };
        match self.get(name) {
            None => Ok(None),
            Some(v @ Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
                (Some(i), _) => Ok(Some(i)),
                (None, Some(f)) => from_f64(f, v),
                (None, None) => Err(bad(v)),
            },
            Some(v @ Value::String(s)) => {
                let t = s.trim();
                if t.is_empty() {
                    return Ok(None);
                }
                if let Ok(i) = t.parse::<i64>() {
                    return Ok(Some(i));
                }
                match t.parse::<f64>() {
                    Ok(f) if f.is_finite() => from_f64(f, v),
                    _ => Err(bad(v)),
                }
            }
            Some(v) => Err(bad(v)),
        }
    }

    pub fn required_integer(&self, name: &'static str) -> Result<i64, OpError> {
        self.integer(name)?.ok_or(OpError::MissingArgument {
            op: self.op.as_str(),
            arg: name,
        })
    }

    /// A number argument; numeric strings are accepted, with a leading `¥`.
    pub fn number(&self, name: &'static str) -> Result<Option<f64>, OpError> {
        let bad = |v: &Value| OpError::BadType {
            arg: name,
            expected: "a number",
            got: show(v),
        };
        match self.get(name) {
            None => Ok(None),
            Some(v @ Value::Number(n)) => n.as_f64().map(Some).ok_or_else(|| bad(v)),
            Some(v @ Value::String(s)) => {
                let t = s.trim();
                if t.is_empty() {
                    return Ok(None);
                }
                let t = t.strip_prefix('¥').unwrap_or(t).trim();
                match t.parse::<f64>() {
                    Ok(f) if f.is_finite() => Ok(Some(f)),
                    _ => Err(bad(v)),
                }
            }
            Some(v) => Err(bad(v)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn lenient_where_unambiguous() {
        let m = map(json!({"product": " p3 ", "quantity": "2", "coupon": null}));
        let a = Args::new(Op::Quote, &m).unwrap();
        assert_eq!(a.required_string("product").unwrap(), "p3");
        assert_eq!(a.integer("quantity").unwrap(), Some(2));
        assert_eq!(a.string("coupon").unwrap(), None);
        let m = map(json!({"product": "P1", "quantity": 2.0}));
        assert_eq!(
            Args::new(Op::Quote, &m)
                .unwrap()
                .integer("quantity")
                .unwrap(),
            Some(2)
        );
    }

    #[test]
    fn strict_where_ambiguous() {
        let m = map(json!({"product": "P1", "quantity": 2.5}));
        let err = Args::new(Op::Quote, &m)
            .unwrap()
            .integer("quantity")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "argument \"quantity\" must be an integer, got 2.5"
        );
        let m = map(json!({"product": ["P1"]}));
        assert!(Args::new(Op::Product, &m)
            .unwrap()
            .required_string("product")
            .is_err());
        let m = map(json!({"sku": "P1"}));
        let err = Args::new(Op::Product, &m).err().unwrap();
        assert_eq!(
            err.to_string(),
            "product takes no argument \"sku\"; its arguments are product"
        );
        let m = map(json!({"max_price": "inf"}));
        assert!(Args::new(Op::Search, &m)
            .unwrap()
            .number("max_price")
            .is_err());
    }
}
