//! Money as integer cents.
//!
//! Prices are stored and computed in cents so that sums, discounts and
//! comparisons are exact; only the edges (JSON, prompts, summaries) show
//! currency units. A whole amount is written as a JSON integer (`59`) and any
//! other as a number with at most two decimals (`129.9`), which is how retail
//! prices look to viewers and keeps the model's view of prices unambiguous.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An amount of money in cents of the stream's currency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Money(i64);

/// Largest amount accepted from outside (a trillion units): keeps every
/// later multiplication far from `i64` overflow.
pub const MAX_CENTS: i64 = 100_000_000_000_000;

impl Money {
    pub const ZERO: Money = Money(0);

    pub const fn from_cents(cents: i64) -> Money {
        Money(cents)
    }

    /// Whole currency units, e.g. `Money::units(59)` is 59.00.
    pub const fn units(units: i64) -> Money {
        Money(units * 100)
    }

    /// Converts an amount in currency units, rounding to the nearest cent.
    /// `None` for negative, non-finite or absurdly large amounts.
    pub fn from_units_f64(units: f64) -> Option<Money> {
        if !units.is_finite() || units < 0.0 {
            return None;
        }
        let cents = (units * 100.0).round();
        if cents > MAX_CENTS as f64 {
            return None;
        }
        Some(Money(cents as i64))
    }

    /// An amount read from outside (a store row): `None` unless `0 ..= MAX_CENTS`.
    pub const fn checked_from_cents(cents: i64) -> Option<Money> {
        if cents >= 0 && cents <= MAX_CENTS {
            Some(Money(cents))
        } else {
            None
        }
    }

    pub const fn cents(self) -> i64 {
        self.0
    }

    /// The amount in currency units (exact to the cent for display).
    pub fn as_f64(self) -> f64 {
        self.0 as f64 / 100.0
    }

    /// `self * n`, saturating (quantities are bounded long before this matters).
    pub fn times(self, n: i64) -> Money {
        Money(self.0.saturating_mul(n))
    }

    /// The price after taking `pct` percent off, rounded to the nearest cent.
    pub fn percent_off(self, pct: u32) -> Money {
        let keep = 100 - i128::from(pct.min(100));
        // in i128 the product cannot overflow, and the result is at most `self`
        Money(((i128::from(self.0) * keep + 50) / 100) as i64)
    }

    pub fn saturating_sub(self, other: Money) -> Money {
        Money(self.0.saturating_sub(other.0).max(0))
    }

    /// The JSON form: an integer when whole, else a number with two decimals at most.
    pub fn to_json(self) -> serde_json::Value {
        if self.0 % 100 == 0 {
            serde_json::Value::from(self.0 / 100)
        } else {
            serde_json::Value::from(self.as_f64())
        }
    }
}

/// `129.9`, `59`, `0.5`: currency units without a symbol.
impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let abs = self.0.unsigned_abs();
        let (whole, frac) = (abs / 100, abs % 100);
        if frac == 0 {
            write!(f, "{sign}{whole}")
        } else if frac % 10 == 0 {
            write!(f, "{sign}{whole}.{}", frac / 10)
        } else {
            write!(f, "{sign}{whole}.{frac:02}")
        }
    }
}

impl Serialize for Money {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0 % 100 == 0 {
            s.serialize_i64(self.0 / 100)
        } else {
            s.serialize_f64(self.as_f64())
        }
    }
}

impl<'de> Deserialize<'de> for Money {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Money, D::Error> {
        let units = f64::deserialize(d)?;
        Money::from_units_f64(units).ok_or_else(|| {
            serde::de::Error::custom(format!("{units} is not a valid amount of money"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shows_retail_numbers() {
        assert_eq!(Money::from_cents(12990).to_json().to_string(), "129.9");
        assert_eq!(Money::from_cents(5900).to_json().to_string(), "59");
        assert_eq!(Money::from_cents(1995).to_json().to_string(), "19.95");
        assert_eq!(Money::from_cents(12990).to_string(), "129.9");
        assert_eq!(Money::from_cents(5).to_string(), "0.05");
    }

    #[test]
    fn percent_off_rounds_to_cents() {
        assert_eq!(Money::units(129).percent_off(10), Money::from_cents(11610));
        assert_eq!(
            Money::from_cents(1990).percent_off(15),
            Money::from_cents(1692)
        );
    }

    /// Issue 13: `i64::MAX` cents with a sale running gave a negative price.
    #[test]
    fn percent_off_never_overflows() {
        let max = Money::from_cents(i64::MAX);
        assert!(max.percent_off(10).cents() > 0);
        assert_eq!(max.percent_off(0), max);
        assert_eq!(Money::from_cents(i64::MIN).percent_off(100), Money::ZERO);
        assert_eq!(Money::checked_from_cents(i64::MAX), None);
        assert_eq!(Money::checked_from_cents(-1), None);
        assert_eq!(
            Money::checked_from_cents(MAX_CENTS),
            Some(Money::from_cents(MAX_CENTS))
        );
    }

    #[test]
    fn serde_round_trip_is_exact() {
        for cents in [0, 1, 5, 1990, 12990, 99999, 123456789] {
            let m = Money::from_cents(cents);
            let back: Money = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
            assert_eq!(back, m);
        }
        assert!(Money::from_units_f64(-1.0).is_none());
        assert!(Money::from_units_f64(f64::INFINITY).is_none());
    }
}
