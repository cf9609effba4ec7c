//! Argument checks for the files a command reads: a regular file of a bounded size, checked
//! when the command line is parsed. A FIFO would block a read forever and `/dev/zero` would
//! fill memory; a library reading the path later never sees either.

use std::path::PathBuf;

/// Configs, chats and events.
const SMALL: u64 = 16 << 20;
/// Datasets, responses, task and prompt lists.
const LARGE: u64 = 16 << 30;

fn checked(s: &str, max: u64) -> Result<PathBuf, String> {
    let path = PathBuf::from(s);
    let m = std::fs::metadata(&path).map_err(|e| format!("{s}: {e}"))?;
    if !m.is_file() {
        return Err(format!(
            "{s} is not a regular file (a folder, FIFO or device cannot be read as input); give a file"
        ));
    }
    if m.len() > max {
        return Err(format!(
            "{s} is {} bytes; this input is read whole and may be at most {max} bytes",
            m.len()
        ));
    }
    Ok(path)
}

/// A small input file (at most 16 MiB): a config, a chat, an event.
pub fn small_file(s: &str) -> Result<PathBuf, String> {
    checked(s, SMALL)
}

/// A large input file (at most 16 GiB): a dataset, responses, tasks, prompts.
pub fn large_file(s: &str) -> Result<PathBuf, String> {
    checked(s, LARGE)
}
