//! Numbers in reply text, normalised so "¥1,299.00", "1299" and "1299.0"
//! compare equal.

/// Every number in `text`, in order. Thousands separators (`1,299`) are
/// joined; a range like `3-5` gives both ends.
pub fn extract(text: &str) -> Vec<f64> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit() {
            i += 1;
            continue;
        }
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
            out.push(v);
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
}
