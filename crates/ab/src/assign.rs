//! Assignment: a unit (a viewer or a stream) goes to an arm by a stable hash of its id and
//! the experiment's seed, so the same viewer lands in the same arm on every request, on every
//! server, across restarts, with no table to keep.

/// FNV-1a over the seed and the key, then a splitmix64 finaliser to spread the bits.
pub fn unit_hash(key: &str, seed: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in seed.to_le_bytes().iter().chain(key.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    hat_tasks::task::splitmix64(h)
}

/// The arm of `key`: arm `i` gets a `weights[i] / sum` share of the hash space. Weights must
/// be positive (the config checks them).
pub fn assign(key: &str, seed: u64, weights: &[f64]) -> usize {
    // 53 bits give a uniform value in [0, 1) exactly representable as f64.
    let u = (unit_hash(key, seed) >> 11) as f64 / (1u64 << 53) as f64;
    let total: f64 = weights.iter().sum();
    let mut acc = 0.0;
    for (i, w) in weights.iter().enumerate() {
        acc += w / total;
        if u < acc {
            return i;
        }
    }
    weights.len().saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_same_unit_always_gets_the_same_arm(key in ".{0,40}", seed: u64, n in 2usize..6) {
            let w = vec![1.0; n];
            let arm = assign(&key, seed, &w);
            prop_assert!(arm < n);
            prop_assert_eq!(arm, assign(&key, seed, &w));
        }
    }

    #[test]
    fn shares_follow_the_weights() {
        let w = [1.0, 3.0];
        let n = 40_000;
        let b = (0..n)
            .filter(|i| assign(&format!("v{i}"), 9, &w) == 1)
            .count() as f64
            / n as f64;
        assert!((b - 0.75).abs() < 0.01, "{b}");
    }

    #[test]
    fn another_seed_reshuffles_the_units() {
        let w = [1.0, 1.0];
        let same = (0..2000)
            .filter(|i| {
                let k = format!("v{i}");
                assign(&k, 1, &w) == assign(&k, 2, &w)
            })
            .count();
        // independent assignments agree about half the time
        assert!((800..1200).contains(&same), "{same}");
    }
}
