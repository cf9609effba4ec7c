//! Shared-prefix packing: conversations whose renderings start with the same tokens (the same
//! harness state and stream give the same ~1,500-token system prompt) become one sequence
//! `[prefix | tail 1 | tail 2 | ...]`. Each tail sees the prefix and itself only, and its
//! positions continue from the end of the prefix, so every conversation computes exactly what
//! it would alone, while the prefix is computed once per pack instead of once per
//! conversation.

use std::sync::Arc;

use hat_model::train::{Packed, Visible};

use crate::error::{Result, TrainError};
use crate::tokens::Sample;

/// How conversations are packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackConfig {
    /// Most tokens in one packed sequence (also the longest sample accepted).
    pub max_tokens: usize,
    /// Most conversations in one pack (1: no packing).
    pub max_conversations: usize,
    /// Shortest shared prefix worth packing on.
    pub min_prefix: usize,
    /// Conversations of at most this many tokens that share no such prefix with any other
    /// (general-ability replay answers: the chat template's short default system prompt at
    /// most) are packed together anyway, each seeing only itself and whatever prefix they
    /// happen to share, so that one step holds several of them instead of one. 0: off, the
    /// behaviour of configs saved before this field existed.
    #[serde(default)]
    pub merge_below: usize,
}

impl Default for PackConfig {
    fn default() -> Self {
        Self {
            max_tokens: 8192,
            max_conversations: 16,
            min_prefix: 64,
            // below any agent trajectory (its system prompt alone is ~1,500 tokens), so
            // agent data packs as before; a replay answer is a few hundred
            merge_below: 1024,
        }
    }
}

/// One packed sequence and the samples in it.
#[derive(Debug, Clone)]
pub struct Pack {
    pub seq: Packed,
    /// Indices of the samples packed, in order.
    pub members: Vec<usize>,
    /// Tokens the members hold one by one (what unpacked training would process).
    pub unpacked_tokens: usize,
}

/// Length of the common prefix of two token sequences.
pub(crate) fn lcp(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Builds one pack from samples sharing their first `prefix` tokens.
pub fn pack_group(samples: &[&Sample], prefix: usize) -> Result<Packed> {
    Ok(pack_group_tagged(samples, prefix)?.0)
}

/// [`pack_group`], also saying where each scored row came from: `(sample, token)` per entry
/// of `loss_rows`, `token` indexing that sample's tokens (the token predicted). Stages that
/// weight tokens one by one (RL's advantages) line their weights up with it.
pub fn pack_group_tagged(
    samples: &[&Sample],
    prefix: usize,
) -> Result<(Packed, Vec<(usize, usize)>)> {
    let first = samples
        .first()
        .ok_or_else(|| TrainError::Invalid("an empty pack".into()))?;
    if samples
        .iter()
        .any(|s| s.tokens.len() < prefix || s.tokens[..prefix] != first.tokens[..prefix])
    {
        return Err(TrainError::Invalid(
            "packed samples do not share the prefix".into(),
        ));
    }
    let p = prefix;
    let total = p + samples.iter().map(|s| s.tokens.len() - p).sum::<usize>();
    let mut ids = Vec::with_capacity(total);
    let mut positions = Vec::with_capacity(total);
    let mut a = Vec::with_capacity(total);
    let mut b = Vec::with_capacity(total);
    ids.extend_from_slice(&first.tokens[..p]);
    positions.extend(0..p as u32);
    a.resize(p, 0);
    b.resize(p, 0);
    let mut scored: Vec<(u32, u32, usize, usize)> = Vec::new();
    let weighted = samples.iter().any(|s| !s.weight.is_empty());
    for (k, s) in samples.iter().enumerate() {
        let offset = ids.len();
        let row = |i: usize| if i < p { i } else { offset + i - p };
        ids.extend_from_slice(&s.tokens[p..]);
        positions.extend(p as u32..s.tokens.len() as u32);
        a.extend(std::iter::repeat_n(p as u32, s.tokens.len() - p));
        b.extend(std::iter::repeat_n(offset as u32, s.tokens.len() - p));
        for i in 1..s.tokens.len() {
            if s.mask[i] {
                scored.push((row(i - 1) as u32, s.tokens[i], k, i));
            }
        }
    }
    // rows ascending (a stable sort keeps each conversation's order within the shared rows)
    scored.sort_by_key(|&(r, ..)| r);
    let packed = Packed {
        ids,
        positions,
        visible: Arc::new(Visible::new(a, b)?),
        loss_rows: scored.iter().map(|&(r, ..)| r).collect(),
        targets: scored.iter().map(|&(_, t, ..)| t).collect(),
        weights: if weighted {
            scored
                .iter()
                .map(|&(.., k, i)| samples[k].weight.get(i).copied().unwrap_or(1.0))
                .collect()
        } else {
            Vec::new()
        },
    };
    Ok((packed, scored.iter().map(|&(.., k, i)| (k, i)).collect()))
}

/// A packed sequence and, per scored row, `(sample, token)`.
pub type TaggedPack = (Packed, Vec<(usize, usize)>);

/// Splits `samples` (in order, not re-sorted: the caller's order is its grouping) into runs
/// packed on whatever prefix they share, each at most `max_tokens` long once packed (one sample
/// longer than that is packed alone). Returns each pack with, per scored row, `(sample,
/// token)`, `sample` indexing `samples`. Stages that score their own rollouts (RL's groups,
/// distillation's scenes) use it; stage 1 uses [`pack`].
pub fn prefix_packs(samples: &[&Sample], max_tokens: usize) -> Result<Vec<TaggedPack>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < samples.len() {
        let first = &samples[start].tokens;
        // shared prefix and summed lengths of samples[start..end]; packed length is
        // sum - (n - 1) * prefix
        let (mut prefix, mut sum) = (first.len(), first.len());
        let mut end = start + 1;
        while end < samples.len() {
            let t = &samples[end].tokens;
            let p = prefix.min(lcp(first, t));
            let n = end - start + 1;
            if sum + t.len() - (n - 1) * p > max_tokens {
                break;
            }
            (prefix, sum) = (p, sum + t.len());
            end += 1;
        }
        let (packed, tags) = pack_group_tagged(&samples[start..end], prefix)?;
        let tags = tags.into_iter().map(|(k, i)| (start + k, i)).collect();
        out.push((packed, tags));
        start = end;
    }
    Ok(out)
}

/// Packs samples greedily: sorted by their tokens (so long shared prefixes are neighbours),
/// then grouped while the shared prefix stays at least `min_prefix` tokens and the pack fits.
/// Short samples left alone by that are then grouped among themselves whatever they share
/// (`merge_below`); each such group takes the place of its first member, so data without
/// short loners packs exactly as without the option. Every sample must already fit in
/// `max_tokens`.
pub fn pack(samples: &[Sample], cfg: &PackConfig) -> Result<Vec<Pack>> {
    let mut order: Vec<usize> = (0..samples.len()).collect();
    order.sort_by(|&x, &y| samples[x].tokens.cmp(&samples[y].tokens));
    if let Some(s) = order
        .iter()
        .map(|&i| &samples[i])
        .find(|s| s.tokens.len() > cfg.max_tokens)
    {
        return Err(TrainError::TooLong {
            sample: s.id.clone(),
            tokens: s.tokens.len(),
            limit: cfg.max_tokens,
        });
    }
    let groups = group(samples, &order, cfg, cfg.min_prefix);
    let short =
        |g: &(Vec<usize>, usize)| g.0.len() == 1 && samples[g.0[0]].tokens.len() <= cfg.merge_below;
    let loners: Vec<usize> = groups.iter().filter(|g| short(g)).map(|g| g.0[0]).collect();
    // the loners regrouped in their order: each group starts at one of them
    let mut merged = group(samples, &loners, cfg, 0).into_iter().peekable();
    let mut packs = Vec::with_capacity(groups.len());
    for g in groups {
        let (members, prefix) = if !short(&g) {
            g
        } else if merged.peek().is_some_and(|m| m.0[0] == g.0[0]) {
            merged.next().expect("peeked")
        } else {
            continue; // packed with an earlier loner
        };
        let refs: Vec<&Sample> = members.iter().map(|&i| &samples[i]).collect();
        packs.push(Pack {
            seq: pack_group(&refs, prefix)?,
            unpacked_tokens: refs.iter().map(|s| s.tokens.len()).sum(),
            members,
        });
    }
    Ok(packs)
}

/// The greedy grouping of [`pack`] over `order` (sorted by tokens): members and the prefix
/// they share (a lone sample's whole length).
fn group(
    samples: &[Sample],
    order: &[usize],
    cfg: &PackConfig,
    min_prefix: usize,
) -> Vec<(Vec<usize>, usize)> {
    let mut groups = Vec::new();
    let mut group: Vec<usize> = Vec::new();
    let mut prefix = 0usize;
    let mut tails = 0usize;
    for &i in order {
        let s = &samples[i];
        if let Some(&g0) = group.first() {
            let shared = if group.len() == 1 {
                lcp(&samples[g0].tokens, &s.tokens)
            } else {
                prefix.min(lcp(&samples[g0].tokens, &s.tokens))
            };
            // tails grow when the shared prefix shrinks
            let old_tails = if group.len() == 1 {
                samples[g0].tokens.len() - shared
            } else {
                tails + group.len() * (prefix - shared)
            };
            let new_tails = old_tails + s.tokens.len() - shared;
            if group.len() < cfg.max_conversations
                && shared >= min_prefix
                && shared + new_tails <= cfg.max_tokens
            {
                group.push(i);
                prefix = shared;
                tails = new_tails;
                continue;
            }
            groups.push((std::mem::take(&mut group), prefix));
        }
        group.push(i);
        prefix = s.tokens.len();
        tails = 0;
    }
    if !group.is_empty() {
        groups.push((group, prefix));
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(tokens: &[u32], mask: &[bool]) -> Sample {
        Sample {
            id: "t".into(),
            tokens: tokens.to_vec(),
            mask: mask.to_vec(),
            weight: Vec::new(),
        }
    }

    #[test]
    fn packs_share_prefixes_and_keep_every_target() {
        let s = vec![
            sample(
                &[1, 2, 3, 4, 5, 6],
                &[false, false, false, true, true, false],
            ),
            sample(&[1, 2, 3, 7, 8], &[false, false, false, false, true]),
            sample(&[9, 9, 9], &[false, true, true]),
            sample(&[1, 2, 3, 4, 9], &[false, false, false, true, true]),
        ];
        let cfg = PackConfig {
            max_tokens: 100,
            max_conversations: 8,
            min_prefix: 3,
            merge_below: 0,
        };
        let packs = pack(&s, &cfg).unwrap();
        assert_eq!(packs.len(), 2);
        let big = packs.iter().find(|p| p.members.len() == 3).unwrap();
        // sorted: [1,2,3,4,5,6], [1,2,3,4,9], [1,2,3,7,8]: shared prefix [1,2,3]
        assert_eq!(big.seq.ids, vec![1, 2, 3, 4, 5, 6, 4, 9, 7, 8]);
        assert_eq!(big.seq.positions, vec![0, 1, 2, 3, 4, 5, 3, 4, 3, 4]);
        assert!(big.seq.visible.sees(6, 2) && !big.seq.visible.sees(6, 5));
        let n_targets: usize = big.members.iter().map(|&i| s[i].loss_tokens()).sum();
        assert_eq!(big.seq.targets.len(), n_targets);
        // token 4 at index 3 is scored twice from the shared row 2
        assert_eq!(big.seq.loss_rows.iter().filter(|&&r| r == 2).count(), 2);
        assert_eq!(big.unpacked_tokens, 16);
    }

    #[test]
    fn a_sample_longer_than_a_sequence_is_named() {
        let s = vec![sample(&[1, 2, 3, 4], &[false; 4])];
        let cfg = PackConfig {
            max_tokens: 3,
            ..Default::default()
        };
        let e = pack(&s, &cfg).unwrap_err().to_string();
        assert!(e.contains("4 tokens") && e.contains("3"), "{e}");
    }

    #[test]
    fn packs_respect_size_limits() {
        let s: Vec<Sample> = (0..10)
            .map(|i| {
                sample(
                    &[1, 2, 3, 4, i, i],
                    &[false, false, false, false, true, true],
                )
            })
            .collect();
        let cfg = PackConfig {
            max_tokens: 12,
            max_conversations: 3,
            min_prefix: 2,
            merge_below: 0,
        };
        let packs = pack(&s, &cfg).unwrap();
        for p in &packs {
            assert!(p.seq.len() <= 12 && p.members.len() <= 3);
        }
        assert_eq!(packs.iter().map(|p| p.members.len()).sum::<usize>(), 10);
    }

    #[test]
    fn short_loners_are_packed_together_and_nothing_else_changes() {
        let m = |n: usize| (0..n).map(|i| i > 0).collect::<Vec<_>>();
        let s = vec![
            sample(&[5, 1, 1, 1], &m(4)),             // loner, short
            sample(&[1, 2, 3, 4, 5], &m(5)),          // a prefix group ...
            sample(&[1, 2, 3, 4, 6], &m(5)),          // ... of two
            sample(&[7, 7, 7, 7, 7, 7, 7, 7], &m(8)), // loner, too long to merge
            sample(&[6, 2], &m(2)),                   // loner, short
            sample(&[5, 1, 2], &m(3)),                // loner, short (shares only [5, 1])
        ];
        let cfg = |merge_below| PackConfig {
            max_tokens: 100,
            max_conversations: 8,
            min_prefix: 3,
            merge_below,
        };
        let plain = pack(&s, &cfg(0)).unwrap();
        let members = |ps: &[Pack]| ps.iter().map(|p| p.members.clone()).collect::<Vec<_>>();
        // sorted: [1,2,3,4,5] [1,2,3,4,6] | [5,1,1,1] | [5,1,2] | [6,2] | [7 x 8]
        assert_eq!(
            members(&plain),
            vec![vec![1, 2], vec![0], vec![5], vec![4], vec![3]]
        );
        let merged = pack(&s, &cfg(4)).unwrap();
        // the three short loners become one pack where the first of them was
        assert_eq!(members(&merged), vec![vec![1, 2], vec![0, 5, 4], vec![3]]);
        let p = &merged[1];
        // shared prefix: none across all three ([5,1] is only shared by two)
        assert_eq!(p.seq.ids, vec![5, 1, 1, 1, 5, 1, 2, 6, 2]);
        assert_eq!(p.seq.positions, vec![0, 1, 2, 3, 0, 1, 2, 0, 1]);
        assert!(!p.seq.visible.sees(4, 3) && p.seq.visible.sees(8, 7) && !p.seq.visible.sees(8, 4));
        assert_eq!(p.unpacked_tokens, 9);
        let targets: usize = p.members.iter().map(|&i| s[i].loss_tokens()).sum();
        assert_eq!(p.seq.targets.len(), targets);
        // with no short loners at all, the option changes nothing
        let agent: Vec<Sample> = s[1..4].to_vec();
        assert_eq!(
            members(&pack(&agent, &cfg(0)).unwrap()),
            members(&pack(&agent, &cfg(4)).unwrap())
        );
    }

    proptest::proptest! {
        /// Whatever the options: every sample lands in exactly one pack, within the limits,
        /// and each member reads back as its own tokens (the shared rows, then its segment).
        #[test]
        fn every_sample_packs_once_and_reads_back(
            toks in proptest::collection::vec(proptest::collection::vec(0u32..3, 1..12), 1..24),
            max_conversations in 1usize..6,
            min_prefix in 0usize..5,
            merge_below in 0usize..14,
        ) {
            let s: Vec<Sample> = toks
                .iter()
                .map(|t| sample(t, &(0..t.len()).map(|i| i > 0).collect::<Vec<_>>()))
                .collect();
            let cfg = PackConfig { max_tokens: 24, max_conversations, min_prefix, merge_below };
            let packs = pack(&s, &cfg).unwrap();
            let mut seen = vec![0; s.len()];
            for p in &packs {
                proptest::prop_assert!(p.seq.len() <= 24 && p.members.len() <= max_conversations);
                let ids = &p.seq.ids;
                let (a, b) = p.seq.visible.bounds();
                let last = ids.len() - 1;
                // rows of the shared prefix have b = 0; a segment starting at 0 means no shared rows
                let prefix = if b[last] == 0 { ids.len() } else { a[last] as usize };
                let mut starts: Vec<usize> = (prefix..ids.len()).map(|r| b[r] as usize).collect();
                starts.dedup();
                starts.push(ids.len());
                let mut seg = 0;
                for &m in &p.members {
                    seen[m] += 1;
                    let mut back = ids[..prefix].to_vec();
                    // a member that is all prefix has no segment of its own
                    if s[m].tokens.len() > prefix {
                        back.extend_from_slice(&ids[starts[seg]..starts[seg + 1]]);
                        seg += 1;
                    }
                    proptest::prop_assert_eq!(&back, &s[m].tokens);
                }
                let targets: usize = p.members.iter().map(|&i| s[i].loss_tokens()).sum();
                proptest::prop_assert_eq!(p.seq.targets.len(), targets);
            }
            proptest::prop_assert!(seen.iter().all(|&n| n == 1), "{:?}", seen);
        }
    }
}
