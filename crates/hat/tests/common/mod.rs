//! Helpers shared by the CLI integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;

pub fn hat() -> Command {
    Command::cargo_bin("hat").unwrap()
}

pub fn production() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream")
}

pub fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let e = entry.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&dst).unwrap();
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

pub fn broken_copy(edit: impl FnOnce(&Path)) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    copy_dir(&production(), d.path());
    edit(d.path());
    d
}

/// A panic exits with 101; every handled error exits with 1.
pub fn fails_cleanly(cmd: &mut Command) -> assert_cmd::assert::Assert {
    cmd.assert()
        .failure()
        .code(1)
        .stderr(predicate::str::contains("panicked").not())
}

/// Every line of a JSONL file, parsed.
pub fn jsonl(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
