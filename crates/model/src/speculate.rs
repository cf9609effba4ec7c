//! Prompt-lookup drafts for speculative decoding of one request.
//!
//! An agent turn copies a lot from its own context: a tool call repeats the call syntax, a
//! tool name and a product id that the prompt or an earlier turn holds; a reply repeats a
//! product's title and facts from a tool result. [`Drafter::draft`] proposes the tokens that
//! followed the latest earlier occurrence of the last few tokens; the engine then feeds the
//! pending token and the draft in one forward pass (the weights are read once for all of
//! them, where decoding reads them once a token) and keeps the draft tokens the sampler
//! itself picks from those logits, so the answer is the one plain decoding gives (the same
//! sampler draws on the same distributions; with quantised weights the same bits, since
//! decoding's attention gives a query the same result beside other queries).
//! The draft length adapts: longer after a draft taken whole, shorter after a miss.

/// Longest run of recent tokens looked up.
const MAX_MATCH: usize = 4;
/// Shortest run looked up: one token matches too much by chance.
const MIN_MATCH: usize = 2;
/// Draft length bounds and start.
const MAX_DRAFT: usize = 8;
const START_DRAFT: usize = 4;

/// Proposes drafts and adapts their length to how many were taken.
#[derive(Debug, Clone)]
pub(crate) struct Drafter {
    len: usize,
    /// Draft tokens proposed and taken so far.
    pub drafted: usize,
    pub accepted: usize,
}

impl Drafter {
    pub fn new() -> Self {
        Drafter {
            len: START_DRAFT,
            drafted: 0,
            accepted: 0,
        }
    }

    /// Up to `max` tokens (and the current draft length) that followed the latest earlier
    /// occurrence of the longest tail of `seen` (between `MIN_MATCH` and `MAX_MATCH` tokens)
    /// found in it; empty when none occurs.
    pub fn draft<'s>(&self, seen: &'s [u32], max: usize) -> &'s [u32] {
        let max = max.min(self.len);
        let n_seen = seen.len();
        if max == 0 {
            return &[];
        }
        for n in (MIN_MATCH..=MAX_MATCH).rev() {
            if n_seen <= n {
                continue;
            }
            let tail = &seen[n_seen - n..];
            if let Some(start) = (0..n_seen - n).rev().find(|&s| &seen[s..s + n] == tail) {
                let from = start + n;
                return &seen[from..(from + max).min(n_seen)];
            }
        }
        &[]
    }

    /// Records that `taken` of a `proposed`-token draft were the sampler's own picks.
    pub fn taken(&mut self, proposed: usize, taken: usize) {
        self.drafted += proposed;
        self.accepted += taken;
        self.len = if taken == proposed {
            (self.len + 2).min(MAX_DRAFT)
        } else {
            self.len.saturating_sub(1).max(1)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_continue_the_latest_earlier_occurrence_of_the_tail() {
        let d = Drafter::new();
        // "... 7 8 9 | 1 2 ... 7 8" -> what followed the latest "7 8": 9 1 2 3
        let seen = [7, 8, 9, 1, 2, 3, 4, 5, 7, 8, 6, 7, 8];
        assert_eq!(d.draft(&seen, 8), &[6, 7, 8]);
        let seen = [1, 2, 3, 4, 5, 6, 1, 2];
        assert_eq!(d.draft(&seen, 8), &[3, 4, 5, 6]);
        assert_eq!(d.draft(&seen, 2), &[3, 4]);
        // a tail that never occurred before, or a single token, proposes nothing
        assert!(d.draft(&[1, 2, 3, 4], 8).is_empty());
        assert!(d.draft(&[5, 9, 5], 8).is_empty());
        assert!(d.draft(&[], 8).is_empty());
    }

    #[test]
    fn the_draft_length_grows_on_hits_and_shrinks_on_misses() {
        let mut d = Drafter::new();
        let seen: Vec<u32> = (0..20).chain(0..20).collect();
        assert_eq!(d.draft(&seen[..22], 16).len(), START_DRAFT);
        d.taken(4, 4);
        assert_eq!(d.draft(&seen[..22], 16).len(), START_DRAFT + 2);
        for _ in 0..10 {
            d.taken(6, 0);
        }
        assert_eq!(d.draft(&seen[..22], 16).len(), 1);
        for _ in 0..10 {
            d.taken(1, 1);
        }
        assert_eq!(d.draft(&seen[..22], 16).len(), MAX_DRAFT);
        assert_eq!((d.drafted, d.accepted), (4 + 60 + 10, 4 + 10));
    }
}
