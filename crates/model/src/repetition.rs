//! Loops in an answer: the same stretch of tokens over and over, which small models fall
//! into under greedy decoding ("I'm sorry for any mistakes.\n\nI'm sorry for any
//! mistakes.\n\n..."), or the same stretch with a counter in it ("P1 #13 Cap | P2 #13 Cap |
//! ..."). A loop says nothing new after its first copy, costs decode time until the token
//! limit, and, kept in a conversation's history, invites the next answer to repeat it. A
//! request with [`crate::GenerateRequest::stop_loops`] ends when its answer's tail is such a
//! loop and keeps only the answer up to the end of the loop's first copy
//! ([`crate::FinishReason::Loop`]).
//!
//! Numbers count as one symbol whatever their digits ([`LoopWatch`]): a listing copied
//! with counters that climb ("P1 #50 Cap | P2 #51 Cap | ... P10 #59 Cap") is a loop even
//! where a tokenizer writes a digit a token, so copies differ in length when a counter gains a
//! digit.

/// Longest repeating unit looked for, in tokens.
pub const MAX_PERIOD: usize = 64;

/// Fewest repeated tokens (after the first copy) that make a loop: a short unit ("!", "ha")
/// must come back this many tokens in a row, a long one at least twice more.
pub const MIN_RUN: usize = 24;

/// A unit at least this long may change in one place from copy to copy (a counter), if it
/// comes back three more times.
const COUNTED_PERIOD: usize = 8;

/// Where a loop at the end of `tokens` began: the number of tokens to keep (the answer up to
/// the end of the loop's first copy), or `None` when its tail is not a loop.
///
/// A loop is a unit of `p` tokens (1 ..= [`MAX_PERIOD`]) followed by a run of copies of
/// itself: the run is exact and at least `max(2p, MIN_RUN)` tokens long, or, for units of
/// [`COUNTED_PERIOD`] tokens or more, at least `max(3p, MIN_RUN)` tokens long where every
/// copy may differ from the one before it in one token, the same place in each copy.
pub fn loop_start(tokens: &[u32]) -> Option<usize> {
    let n = tokens.len();
    for p in 1..=MAX_PERIOD {
        let exact = (2 * p).max(MIN_RUN);
        if exact + p > n {
            break;
        }
        if repeats(tokens, p, exact, false) {
            return Some(n - exact);
        }
        let counted = (3 * p).max(MIN_RUN);
        if p >= COUNTED_PERIOD && counted + p <= n && repeats(tokens, p, counted, true) {
            return Some(n - counted);
        }
    }
    None
}

/// Symbol that stands for a run of number tokens ([`LoopWatch`]).
const NUMBER: u32 = u32::MAX;

/// An answer's tokens as the loop rule reads them, kept as the answer grows (a decoding row
/// holds one, so a check after each token rebuilds nothing): every run of number tokens is
/// one symbol, so copies that differ only in their numbers are copies.
#[derive(Debug, Clone, Default)]
pub struct LoopWatch {
    symbols: Vec<u32>,
    /// Where each symbol starts among the tokens.
    starts: Vec<usize>,
    tokens: usize,
}

impl LoopWatch {
    /// Takes the answer's next token; returns the number of tokens to keep when the answer's
    /// tail is now a loop, as [`loop_start`] does.
    pub fn push(&mut self, token: u32, is_number: bool) -> Option<usize> {
        let at = self.tokens;
        self.tokens += 1;
        let s = if is_number { NUMBER } else { token };
        if !(s == NUMBER && self.symbols.last() == Some(&NUMBER)) {
            self.symbols.push(s);
            self.starts.push(at);
        }
        loop_start(&self.symbols).map(|k| self.starts.get(k).copied().unwrap_or(self.tokens))
    }
}

/// [`loop_start`] on the answer with every run of number tokens (`is_number`) read as one
/// symbol ([`LoopWatch`]). Returns the number of tokens to keep, as [`loop_start`] does.
pub fn loop_start_with(tokens: &[u32], is_number: impl Fn(u32) -> bool) -> Option<usize> {
    let mut watch = LoopWatch::default();
    tokens
        .iter()
        .fold(None, |_, &t| watch.push(t, is_number(t)))
}

/// Whether each of the last `run` tokens equals the token `p` before it; with `counter`,
/// allowing one difference a copy, all at the same offset in the unit.
fn repeats(tokens: &[u32], p: usize, run: usize, counter: bool) -> bool {
    let n = tokens.len();
    let mut offset = None;
    let mut misses = 0;
    for i in n - run..n {
        if tokens[i] == tokens[i - p] {
            continue;
        }
        if !counter || offset.is_some_and(|o| o != i % p) {
            return false;
        }
        offset = Some(i % p);
        misses += 1;
        if misses > run.div_ceil(p) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cycle(unit: &[u32], times: usize) -> Vec<u32> {
        unit.iter()
            .copied()
            .cycle()
            .take(unit.len() * times)
            .collect()
    }

    #[test]
    fn a_repeated_sentence_is_cut_to_its_first_copy() {
        // "I'm sorry for any other mistakes.\n\n": 11 tokens
        let unit: Vec<u32> = (100..111).collect();
        let mut grow = vec![1, 2, 3];
        let first = (1..200)
            .find_map(|k| {
                grow.push(unit[(k - 1) % 11]);
                loop_start(&grow).map(|keep| (grow.len(), keep))
            })
            .unwrap();
        assert_eq!(first, (3 + 11 + 24, 3 + 11));
    }

    #[test]
    fn a_run_of_one_token_is_a_loop_once_it_is_long() {
        let mut t = vec![7, 8];
        t.extend(std::iter::repeat_n(9, 24));
        assert_eq!(loop_start(&t), None);
        t.push(9);
        assert_eq!(loop_start(&t), Some(3));
    }

    #[test]
    fn a_unit_with_a_counter_is_a_loop_after_three_more_copies() {
        // "P1 #13 GoPro Hero 13 (app) | P2 ...": 12 tokens, the second one counts
        let unit = |k: u32| vec![50, 1000 + k, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60];
        let mut t = vec![1];
        for k in 1..=3 {
            t.extend(unit(k));
        }
        assert_eq!(loop_start(&t), None, "three items of a list are not a loop");
        t.extend(unit(4));
        assert_eq!(loop_start(&t), Some(1 + 12));
        // two places changing per copy are a list, not a loop
        let unit2 = |k: u32| {
            let mut u = unit(k);
            u[7] = 2000 + k;
            u
        };
        let t: Vec<u32> = (1..=6).flat_map(unit2).collect();
        assert_eq!(loop_start(&t), None);
    }

    #[test]
    fn short_units_do_not_get_the_counter_allowance() {
        // 4-token unit whose first token counts: "1 a b c 2 a b c ..." is a numbered list
        let t: Vec<u32> = (0..20).flat_map(|k| [1000 + k, 1, 2, 3]).collect();
        assert_eq!(loop_start(&t), None);
    }

    #[test]
    fn counters_that_gain_a_digit_still_make_a_loop() {
        // "P1 #50 Yummy: | P2 #51 Yummy: | ...": digits are tokens 0-9, one a digit
        let digits = |n: u32| {
            n.to_string()
                .bytes()
                .map(|b| u32::from(b - b'0'))
                .collect::<Vec<_>>()
        };
        let mut t = vec![500, 501];
        let mut starts = Vec::new();
        for k in 1..=12u32 {
            starts.push(t.len());
            t.push(100); // "P"
            t.extend(digits(k));
            t.push(101); // "#"
            t.extend(digits(49 + k));
            t.extend([102, 103, 104]); // " Yummy: |"
        }
        let is_digit = |x: u32| x < 10;
        assert_eq!(loop_start(&t), None, "two counters a copy are not one");
        // as the engine checks it: after every token; the first copy is kept, whole
        let keep = (1..=t.len())
            .find_map(|n| loop_start_with(&t[..n], is_digit))
            .unwrap();
        assert_eq!(keep, starts[1]);
        // numbers that differ in a list of different things do not make one
        let list: Vec<u32> = (0..12u32)
            .flat_map(|k| [100, k % 10, 200 + k, 201 + k, 104])
            .collect();
        assert_eq!(loop_start_with(&list, is_digit), None);
    }

    proptest! {
        /// Any unit repeated long enough is found, and the kept part holds what came before
        /// the loop; text with no token repeated is never a loop.
        #[test]
        fn loops_are_found_and_distinct_tokens_never_are(
            head in proptest::collection::vec(0u32..50, 0..20),
            unit in proptest::collection::vec(100u32..200, 1..=MAX_PERIOD),
            extra in 0usize..5,
        ) {
            let p = unit.len();
            let copies = 1 + (2 * p).max(MIN_RUN).div_ceil(p) + extra;
            let mut t = head.clone();
            t.extend(cycle(&unit, copies));
            let keep = loop_start(&t);
            prop_assert!(keep.is_some());
            let keep = keep.unwrap();
            prop_assert!(keep > head.len() && keep < t.len());
            let distinct: Vec<u32> = (0..300).collect();
            prop_assert_eq!(loop_start(&distinct[..head.len() + copies]), None);
        }
    }
}
