//! The JSON-lines logs the agent loop's drivers append to (datasets, evaluation items and
//! responses), and how a resume recovers from a write that was cut off.

use std::fs::OpenOptions;
use std::path::Path;

/// A run killed in the middle of a write (or stopped by a full disk) leaves a last line without
/// its newline: that line is cut off, so its item is done again instead of the resume failing
/// on it. A last line that is a whole JSON value (a file written by another tool without a
/// final newline) is kept and given its newline. Returns the bytes cut (0 for a missing or
/// intact file). Damage anywhere else is left for the reader, which names the line.
pub fn repair_tail(path: &Path) -> std::io::Result<usize> {
    let data = match std::fs::read(path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    if data.is_empty() || data.ends_with(b"\n") {
        return Ok(0);
    }
    let keep = data.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    if serde_json::from_slice::<serde::de::IgnoredAny>(&data[keep..]).is_ok() {
        use std::io::Write;
        OpenOptions::new()
            .append(true)
            .open(path)?
            .write_all(b"\n")?;
        return Ok(0);
    }
    OpenOptions::new()
        .write(true)
        .open(path)?
        .set_len(keep as u64)?;
    let cut = data.len() - keep;
    tracing::warn!(
        file = %path.display(),
        bytes = cut,
        "dropped an unfinished last line (an interrupted write); its item runs again"
    );
    Ok(cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unfinished_last_line_is_cut() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.jsonl");
        assert_eq!(repair_tail(&p).unwrap(), 0);
        std::fs::write(&p, "{\"a\":1}\n{\"a\":2}\n").unwrap();
        assert_eq!(repair_tail(&p).unwrap(), 0);
        std::fs::write(&p, "{\"a\":1}\n{\"a\":").unwrap();
        assert_eq!(repair_tail(&p).unwrap(), 5);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "{\"a\":1}\n");
        std::fs::write(&p, "{\"a\"").unwrap();
        assert_eq!(repair_tail(&p).unwrap(), 4);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "");
        // a whole last record without its newline (written by another tool) is kept
        std::fs::write(&p, "{\"a\":1}\n{\"a\":2}").unwrap();
        assert_eq!(repair_tail(&p).unwrap(), 0);
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "{\"a\":1}\n{\"a\":2}\n"
        );
    }
}
