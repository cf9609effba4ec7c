//! `combination:*` — two responses, repeat the prompt.

use crate::text::{is_blank, py_trim};

/// `combination:two_responses` (spec N18).
pub fn two_responses(r: &str) -> bool {
    let pieces: Vec<&str> = r.split("******").collect();
    let last = pieces.len() - 1;
    let mut valid = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        if is_blank(p) {
            if i != 0 && i != last {
                return false;
            }
        } else {
            valid.push(*p);
        }
    }
    valid.len() == 2 && py_trim(valid[0]) != py_trim(valid[1])
}

/// `combination:repeat_prompt`: `lower(trim(r))` starts with `lower(trim(prompt_to_repeat))`.
pub fn repeat_prompt(r: &str, prompt_to_repeat: &str) -> bool {
    py_trim(r)
        .to_lowercase()
        .starts_with(&py_trim(prompt_to_repeat).to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two() {
        assert!(two_responses("x******y******"));
        assert!(two_responses("a ****** b"));
        assert!(!two_responses("a ****** a "));
        assert!(!two_responses("a ************ b"));
        assert!(two_responses("a ******* b"));
        assert!(!two_responses("a ****** b ****** c"));
    }

    #[test]
    fn repeat() {
        assert!(repeat_prompt("  WRITE a poem. Sure: ...", "Write a poem."));
        assert!(!repeat_prompt("Write a poem: sure", "Write a poem."));
    }
}
