//! Loose scoring: the eight response variants of upstream `test_instruction_following_loose`.

use crate::text::py_trim;

/// The variants in upstream order: the response; without `*`; without the first line; without
/// the last line; without both; and those three without `*`. Lines are split on `\n` only;
/// the line-dropping variants are trimmed. Blank variants are kept here (callers skip them).
pub fn variants(response: &str) -> [String; 8] {
    let lines: Vec<&str> = response.split('\n').collect();
    let n = lines.len();
    let join = |a: usize, b: usize| {
        if a < b {
            py_trim(&lines[a..b].join("\n")).to_string()
        } else {
            String::new()
        }
    };
    let remove_first = join(1, n);
    let remove_last = join(0, n - 1);
    let remove_both = join(1, n.saturating_sub(1));
    let unstar = |s: &str| s.replace('*', "");
    let (uf, ul, ub) = (
        unstar(&remove_first),
        unstar(&remove_last),
        unstar(&remove_both),
    );
    [
        response.to_string(),
        unstar(response),
        remove_first,
        remove_last,
        remove_both,
        uf,
        ul,
        ub,
    ]
}

#[cfg(test)]
mod tests {
    use super::variants;

    #[test]
    fn eight_variants() {
        let v = variants("Sure!\n*a*, b\nBye");
        assert_eq!(v[0], "Sure!\n*a*, b\nBye");
        assert_eq!(v[1], "Sure!\na, b\nBye");
        assert_eq!(v[2], "*a*, b\nBye");
        assert_eq!(v[3], "Sure!\n*a*, b");
        assert_eq!(v[4], "*a*, b");
        assert_eq!(v[7], "a, b");
    }

    #[test]
    fn one_line_response_has_blank_line_variants() {
        let v = variants("only");
        assert!(v[2..].iter().all(String::is_empty));
    }
}
