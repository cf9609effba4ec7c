//! Parameter pools: every family's parameters (naming styles, vocabularies,
//! syntaxes, layouts, sign-offs, ...) are split into a training pool and a
//! held-out pool, so a held-out variant is built from values training never saw.

use serde::{Deserialize, Serialize};

/// Which half of each family's parameters a variant draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pool {
    Train,
    Heldout,
}

impl Pool {
    pub const ALL: [Pool; 2] = [Pool::Train, Pool::Heldout];

    pub fn as_str(self) -> &'static str {
        match self {
            Pool::Train => "train",
            Pool::Heldout => "heldout",
        }
    }

    pub fn parse(s: &str) -> Option<Pool> {
        match s {
            "train" => Some(Pool::Train),
            "heldout" | "held-out" => Some(Pool::Heldout),
            _ => None,
        }
    }
}

impl std::fmt::Display for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One parameter kind split into its two pools.
#[derive(Debug, Clone, Copy)]
pub struct Split<T: 'static> {
    pub train: &'static [T],
    pub heldout: &'static [T],
}

impl<T> Split<T> {
    pub const fn new(train: &'static [T], heldout: &'static [T]) -> Self {
        Split { train, heldout }
    }

    /// The values of `pool`.
    pub fn get(&self, pool: Pool) -> &'static [T] {
        match pool {
            Pool::Train => self.train,
            Pool::Heldout => self.heldout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_parse_and_print() {
        for p in Pool::ALL {
            assert_eq!(Pool::parse(p.as_str()), Some(p));
        }
        const S: Split<&str> = Split::new(&["a"], &["b"]);
        assert_eq!(S.get(Pool::Heldout), &["b"]);
    }
}
