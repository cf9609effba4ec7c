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
}

impl Default for PackConfig {
    fn default() -> Self {
        Self {
            max_tokens: 8192,
            max_conversations: 16,
            min_prefix: 64,
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
    };
    Ok((packed, scored.iter().map(|&(.., k, i)| (k, i)).collect()))
}

/// Packs samples greedily: sorted by their tokens (so long shared prefixes are neighbours),
/// then grouped while the shared prefix stays at least `min_prefix` tokens and the pack fits.
/// Every sample must already fit in `max_tokens`.
pub fn pack(samples: &[Sample], cfg: &PackConfig) -> Result<Vec<Pack>> {
    let mut order: Vec<usize> = (0..samples.len()).collect();
    order.sort_by(|&x, &y| samples[x].tokens.cmp(&samples[y].tokens));
    let mut packs = Vec::new();
    let mut group: Vec<usize> = Vec::new();
    let mut prefix = 0usize;
    let mut tails = 0usize;
    let flush = |group: &mut Vec<usize>, prefix: usize, packs: &mut Vec<Pack>| -> Result<()> {
        if group.is_empty() {
            return Ok(());
        }
        let members: Vec<&Sample> = group.iter().map(|&i| &samples[i]).collect();
        let p = if members.len() == 1 {
            members[0].tokens.len()
        } else {
            prefix
        };
        packs.push(Pack {
            seq: pack_group(&members, p)?,
            unpacked_tokens: members.iter().map(|s| s.tokens.len()).sum(),
            members: std::mem::take(group),
        });
        Ok(())
    };
    for &i in &order {
        let s = &samples[i];
        if s.tokens.len() > cfg.max_tokens {
            return Err(TrainError::TooLong {
                sample: s.id.clone(),
                tokens: s.tokens.len(),
                limit: cfg.max_tokens,
            });
        }
        if let Some(&g0) = group.first() {
            let shared = if group.len() == 1 {
                lcp(&samples[g0].tokens, &s.tokens)
            } else {
                prefix.min(lcp(&samples[g0].tokens, &s.tokens))
            };
            // tails grow when the shared prefix shrinks
            let len_with = |p: usize| {
                let old_tails = if group.len() == 1 {
                    samples[g0].tokens.len() - p
                } else {
                    tails + group.len() * (prefix - p)
                };
                (p, old_tails + s.tokens.len() - p)
            };
            let (p, new_tails) = len_with(shared);
            if group.len() < cfg.max_conversations
                && shared >= cfg.min_prefix
                && p + new_tails <= cfg.max_tokens
            {
                group.push(i);
                prefix = p;
                tails = new_tails;
                continue;
            }
            flush(&mut group, prefix, &mut packs)?;
        }
        group.push(i);
        prefix = s.tokens.len();
        tails = 0;
    }
    flush(&mut group, prefix, &mut packs)?;
    Ok(packs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(tokens: &[u32], mask: &[bool]) -> Sample {
        Sample {
            id: "t".into(),
            tokens: tokens.to_vec(),
            mask: mask.to_vec(),
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
        };
        let packs = pack(&s, &cfg).unwrap();
        for p in &packs {
            assert!(p.seq.len() <= 12 && p.members.len() <= 3);
        }
        assert_eq!(packs.iter().map(|p| p.members.len()).sum::<usize>(), 10);
    }
}
