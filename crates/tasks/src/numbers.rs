//! Numbers in reply text, normalised so "¥1,299.00", "1299" and "1299.0"
//! compare equal.

/// Every number in `text`, in order. Thousands separators (`1,299`) are
/// joined; a range like `3-5` gives both ends.
pub fn extract(text: &str) -> Vec<f64> {
    spans(text).into_iter().map(|(_, _, v)| v).collect()
}

/// What job a number does in a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A quantity: a price, a count, days ...
    Plain,
    /// A product's link number: `#5`, `no.5`, `link 5`, `5号`, `链接5`.
    Link,
    /// A percentage: `20%`, `20 percent`.
    Percent,
}

/// Every number in `text` with the job it does there ([`extract`]'s numbers, in order).
pub fn with_roles(text: &str) -> Vec<(f64, Role)> {
    spans(text)
        .into_iter()
        .map(|(a, b, v)| (v, role(&text[..a], &text[b..])))
        .collect()
}

fn role(before: &str, after: &str) -> Role {
    let rest = after.trim_start().to_lowercase();
    if rest.starts_with(['%', '％']) || rest.starts_with("percent") {
        return Role::Percent;
    }
    if after.starts_with('号') {
        return Role::Link;
    }
    let pre = before.trim_end().to_lowercase();
    if pre.ends_with('#') || pre.ends_with("链接") {
        return Role::Link;
    }
    // a word ending the text before the number: `no.`, `link`, not `piano` or `unlink`
    let word = |w: &str| {
        pre.strip_suffix(w)
            .is_some_and(|head| !head.ends_with(|c: char| c.is_alphanumeric()))
    };
    if ["no.", "no", "link", "links", "lnk"]
        .iter()
        .any(|w| word(w))
    {
        return Role::Link;
    }
    Role::Plain
}

/// Byte range and value of every number in `text`.
fn spans(text: &str) -> Vec<(usize, usize, f64)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        let mut s = String::new();
        while i < b.len() {
            let c = b[i];
            if c.is_ascii_digit() {
                s.push(c as char);
                i += 1;
            } else if c == b','
                && i + 3 < b.len() + 1
                && b[i + 1..]
                    .iter()
                    .take(3)
                    .filter(|d| d.is_ascii_digit())
                    .count()
                    == 3
                && !b.get(i + 4).is_some_and(u8::is_ascii_digit)
            {
                i += 1; // thousands separator
            } else if c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit) && !s.contains('.')
            {
                s.push('.');
                i += 1;
            } else {
                break;
            }
        }
        if let Ok(v) = s.parse::<f64>() {
            out.push((start, i, v));
        }
    }
    out
}

/// Equal to the cent.
pub fn same(a: f64, b: f64) -> bool {
    (a - b).abs() < 0.005
}

/// Distinct numbers (to the cent).
pub fn distinct(nums: &[f64]) -> Vec<f64> {
    let mut out: Vec<f64> = Vec::new();
    for &n in nums {
        if !out.iter().any(|&m| same(m, n)) {
            out.push(n);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extracts_prices_ranges_and_separators() {
        assert_eq!(extract("¥1,299.00 now, was 1,499"), vec![1299.0, 1499.0]);
        assert_eq!(extract("3-5 days to Tibet"), vec![3.0, 5.0]);
        assert_eq!(extract("link #7, 20% off, 12.5"), vec![7.0, 20.0, 12.5]);
        assert_eq!(extract("1,2,3"), vec![1.0, 2.0, 3.0]);
        assert_eq!(extract("end."), Vec::<f64>::new());
        assert!(same(extract("129.90")[0], 129.9));
    }

    #[test]
    fn link_numbers_and_percentages_are_told_from_quantities() {
        use Role::*;
        assert_eq!(
            with_roles("Link 5 reaches Tibet in 2-3 days"),
            vec![(5.0, Link), (2.0, Plain), (3.0, Plain)]
        );
        assert_eq!(
            with_roles("#3 and no.4, no. 6, link #7: 20% off, 15 percent, 30 min"),
            vec![
                (3.0, Link),
                (4.0, Link),
                (6.0, Link),
                (7.0, Link),
                (20.0, Percent),
                (15.0, Percent),
                (30.0, Plain)
            ]
        );
        assert_eq!(
            with_roles("3号链接 还有5件，链接 8"),
            vec![(3.0, Link), (5.0, Plain), (8.0, Link)]
        );
        assert_eq!(
            with_roles("piano 5, unlink 6"),
            vec![(5.0, Plain), (6.0, Plain)]
        );
    }
}
