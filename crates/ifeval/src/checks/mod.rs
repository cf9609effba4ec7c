//! The check functions, grouped like the instruction ids (`group:name`). Each takes the text
//! to check and already-normalised arguments and returns upstream `check_following`.
//! None of them applies the blank-response guard; [`crate::Instruction::check`] does.

pub mod case;
pub mod combination;
pub mod content;
pub mod format;
pub mod keywords;
pub mod language;
pub mod length;
pub mod punctuation;
pub mod startend;

/// Python `\s` in a Rust regex: Unicode White_Space plus U+001C..U+001F.
pub(crate) const PY_S: &str = r"[\s\x{1c}-\x{1f}]";

/// Comparison of a counted quantity with the instruction's threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Relation {
    /// `"less than"`: passes iff `count < n`.
    LessThan,
    /// `"at least"`: passes iff `count >= n`.
    AtLeast,
}

impl Relation {
    /// Parses the kwargs spelling (`"less than"` / `"at least"`), nothing else.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "less than" => Some(Relation::LessThan),
            "at least" => Some(Relation::AtLeast),
            _ => None,
        }
    }

    /// Compares `count` with `n`.
    pub fn holds(self, count: usize, n: i64) -> bool {
        let c = i64::try_from(count).unwrap_or(i64::MAX);
        match self {
            Relation::LessThan => c < n,
            Relation::AtLeast => c >= n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Relation;

    #[test]
    fn relations() {
        assert!(Relation::LessThan.holds(2, 3));
        assert!(!Relation::LessThan.holds(3, 3));
        assert!(Relation::AtLeast.holds(3, 3));
        assert!(!Relation::AtLeast.holds(2, 3));
        assert_eq!(Relation::parse("at least"), Some(Relation::AtLeast));
        assert_eq!(Relation::parse("at most"), None);
    }
}
