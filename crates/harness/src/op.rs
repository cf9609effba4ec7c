//! Canonical backend operations: the fixed vocabulary every tool binding maps onto.
//!
//! However a harness names, nests or types a tool's parameters, its `binding`
//! maps the call back to one of these operations with these argument names.
//! That is what makes tool-schema augmentation task-preserving.

use std::fmt;
use std::str::FromStr;

/// A canonical operation of the live-stream store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Product,
    Stock,
    Coupons,
    Quote,
    Shipping,
    Search,
    Faq,
    Pin,
    FlashSale,
}

/// One canonical argument of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgSpec {
    pub name: &'static str,
    pub required: bool,
    /// JSON type the store expects: "string", "integer" or "number".
    pub kind: ArgKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgKind {
    String,
    Integer,
    Number,
}

const fn req(name: &'static str, kind: ArgKind) -> ArgSpec {
    ArgSpec {
        name,
        required: true,
        kind,
    }
}
const fn opt(name: &'static str, kind: ArgKind) -> ArgSpec {
    ArgSpec {
        name,
        required: false,
        kind,
    }
}

impl Op {
    pub const ALL: [Op; 9] = [
        Op::Product,
        Op::Stock,
        Op::Coupons,
        Op::Quote,
        Op::Shipping,
        Op::Search,
        Op::Faq,
        Op::Pin,
        Op::FlashSale,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Product => "product",
            Op::Stock => "stock",
            Op::Coupons => "coupons",
            Op::Quote => "quote",
            Op::Shipping => "shipping",
            Op::Search => "search",
            Op::Faq => "faq",
            Op::Pin => "pin",
            Op::FlashSale => "flash_sale",
        }
    }

    /// Canonical arguments, in canonical order.
    pub fn args(self) -> &'static [ArgSpec] {
        use ArgKind::{Integer as I, Number as N, String as S};
        const PRODUCT: &[ArgSpec] = &[req("product", S)];
        const STOCK: &[ArgSpec] = &[req("product", S), opt("size", S), opt("color", S)];
        const QUOTE: &[ArgSpec] = &[req("product", S), opt("quantity", I), opt("coupon", S)];
        const SHIPPING: &[ArgSpec] = &[req("product", S), req("region", S)];
        const SEARCH: &[ArgSpec] = &[opt("query", S), opt("category", S), opt("max_price", N)];
        const FAQ: &[ArgSpec] = &[req("topic", S), opt("product", S)];
        const FLASH: &[ArgSpec] = &[req("product", S), req("minutes", I), opt("discount_pct", I)];
        match self {
            Op::Product | Op::Coupons | Op::Pin => PRODUCT,
            Op::Stock => STOCK,
            Op::Quote => QUOTE,
            Op::Shipping => SHIPPING,
            Op::Search => SEARCH,
            Op::Faq => FAQ,
            Op::FlashSale => FLASH,
        }
    }

    /// Whether the operation changes the stream (pins, sales) rather than reading it.
    pub fn mutates(self) -> bool {
        matches!(self, Op::Pin | Op::FlashSale)
    }

    pub fn arg(self, name: &str) -> Option<&'static ArgSpec> {
        self.args().iter().find(|a| a.name == name)
    }
}

impl serde::Serialize for Op {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Op {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The name is not one of the canonical operations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown operation `{0}` (known: product, stock, coupons, quote, shipping, search, faq, pin, flash_sale)")]
pub struct UnknownOp(pub String);

impl FromStr for Op {
    type Err = UnknownOp;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Op::ALL
            .into_iter()
            .find(|op| op.as_str() == s)
            .ok_or_else(|| UnknownOp(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for op in Op::ALL {
            assert_eq!(op.as_str().parse::<Op>().unwrap(), op);
        }
        assert!("refund".parse::<Op>().is_err());
    }

    #[test]
    fn required_args_come_first() {
        for op in Op::ALL {
            let first_opt = op
                .args()
                .iter()
                .position(|a| !a.required)
                .unwrap_or(op.args().len());
            assert!(op.args()[first_opt..].iter().all(|a| !a.required), "{op}");
        }
    }
}
