//! Live-chat noise: openers, emoji, slang and the odd typo, drawn from the
//! split's own pools so test noise differs from training noise.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::bank::Noise;

/// Applies noise to a comment template before its slots are filled, so
/// product names, sizes and numbers are never garbled.
pub fn apply(template: &str, noise: &Noise, zh: bool, rng: &mut ChaCha8Rng) -> String {
    let mut words: Vec<String> = template.split(' ').map(str::to_string).collect();
    if !zh {
        for w in words.iter_mut() {
            if w.contains('{') {
                continue;
            }
            let key = w
                .trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase();
            if let Some(subs) = noise.slang.get(&key) {
                if !subs.is_empty() && rng.gen_bool(0.35) {
                    *w = w
                        .to_lowercase()
                        .replace(&key, &subs[rng.gen_range(0..subs.len())]);
                }
            } else if w.len() > 4 && w.is_ascii() && rng.gen_bool(0.03) {
                // A transposition typo.
                let i = rng.gen_range(1..w.len() - 2);
                let mut b = w.clone().into_bytes();
                b.swap(i, i + 1);
                *w = String::from_utf8(b).unwrap_or_else(|_| w.clone());
            }
        }
    }
    let mut s = words.join(" ");
    if !noise.prefixes.is_empty() && rng.gen_bool(0.2) {
        s = format!(
            "{} {s}",
            noise.prefixes[rng.gen_range(0..noise.prefixes.len())]
        );
    }
    if !noise.suffixes.is_empty() && rng.gen_bool(0.15) {
        s = format!(
            "{s} {}",
            noise.suffixes[rng.gen_range(0..noise.suffixes.len())]
        );
    }
    if !noise.emoji.is_empty() && rng.gen_bool(0.3) {
        s = format!("{s} {}", noise.emoji[rng.gen_range(0..noise.emoji.len())]);
    }
    s
}
