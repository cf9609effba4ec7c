//! A harness folder as text, for the console's editor: read a version's files, and write an
//! edited set of files into a folder of its own under the data folder (as an uploaded archive
//! is unpacked), with the same path and size limits.

use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Result, ServeError};
use crate::harnesses::{MAX_ARCHIVE_DEPTH, MAX_UNPACKED_BYTES};

/// Most files a harness edited as text may hold, and the largest one.
pub const MAX_TEXT_FILES: usize = 256;
pub const MAX_TEXT_FILE_BYTES: usize = 1 << 20;

/// A harness folder as text: relative path (with `/`) to contents, and the paths with an
/// executable bit (command hooks' scripts). Harness files that cannot be edited as text (not
/// UTF-8, or too large) are listed in the third value and left out of the first: the console
/// shows them but cannot edit them.
pub type TextFiles = (
    std::collections::BTreeMap<String, String>,
    Vec<String>,
    Vec<String>,
);

/// Reads a harness folder as text for the console's editor: the files that make up the
/// harness as `hat harness check` reads them (`hat_harness::files::read_dir`), so a `.git`
/// folder, notes or an evaluation's output kept in the folder are neither shown nor counted.
pub fn read_text_files(dir: &Path) -> Result<TextFiles> {
    let (files, problems) =
        hat_harness::files::read_dir(dir).map_err(crate::api::harness::harness_error)?;
    let mut exec = Vec::new();
    #[cfg(unix)]
    for rel in files.keys() {
        use std::os::unix::fs::PermissionsExt;
        if std::fs::metadata(dir.join(rel)).is_ok_and(|m| m.permissions().mode() & 0o111 != 0) {
            exec.push(rel.clone());
        }
    }
    // harness files the reader could not take as text (links and devices are not files of
    // the harness: left out)
    let mut binary: Vec<String> = problems
        .into_iter()
        .map(|p| p.file)
        .filter(|rel| {
            std::fs::symlink_metadata(dir.join(rel)).is_ok_and(|m| m.file_type().is_file())
        })
        .collect();
    binary.sort();
    binary.dedup();
    Ok((files, exec, binary))
}

/// Writes an edited harness (relative path to text) under `root`, in a folder named after
/// its contents, as `unpack_zip` does for archives. Paths must stay inside the folder;
/// `exec` paths get an executable bit (the caller decides which may). Returns the folder, the
/// version's source, and whether this call created the folder: the same files written before
/// reuse that folder, which a live version may be running from, so a caller must remove only
/// a folder it created.
pub fn write_text_files(
    files: &std::collections::BTreeMap<String, String>,
    exec: &[String],
    root: &Path,
) -> Result<(PathBuf, String, bool)> {
    let bad = |m: String| ServeError::bad("files", m);
    if files.is_empty() {
        return Err(bad("no files; a harness needs at least harness.toml".into()));
    }
    if files.len() > MAX_TEXT_FILES {
        return Err(bad(format!(
            "{} files; at most {MAX_TEXT_FILES}",
            files.len()
        )));
    }
    let mut digest = Sha256::new();
    let mut total = 0u64;
    for (rel, text) in files {
        let p = Path::new(rel);
        let inside = !rel.is_empty()
            && rel.len() <= 1024
            && !rel.contains('\\')
            && p.components().all(|c| matches!(c, Component::Normal(_)))
            && p.components().count() <= MAX_ARCHIVE_DEPTH;
        if !inside {
            return Err(bad(format!(
                "`{}` is not a relative path inside the harness folder",
                hat_harness::text::truncate_chars(rel, 80)
            )));
        }
        // `hooks` and `hooks/a.sh` cannot both be written: one would be a file and a folder
        let folder = format!("{rel}/");
        if let Some((below, _)) = files.range(folder.clone()..).next() {
            if below.starts_with(&folder) {
                return Err(bad(format!(
                    "`{rel}` is a file and `{below}` puts a file inside it: rename one of them"
                )));
            }
        }
        if text.len() > MAX_TEXT_FILE_BYTES {
            return Err(bad(format!(
                "`{rel}` has {} bytes; at most {MAX_TEXT_FILE_BYTES}",
                text.len()
            )));
        }
        total += text.len() as u64;
        digest.update((rel.len() as u64).to_le_bytes());
        digest.update(rel.as_bytes());
        digest.update((text.len() as u64).to_le_bytes());
        digest.update(text.as_bytes());
    }
    if total > MAX_UNPACKED_BYTES {
        return Err(bad(format!("more than {MAX_UNPACKED_BYTES} bytes in all")));
    }
    for e in exec.iter().filter(|e| files.contains_key(*e)) {
        digest.update(b"exec\0");
        digest.update(e.as_bytes());
    }
    let digest = hex::encode(digest.finalize());
    let dest = root.join(format!("edit-{}", &digest[..16]));
    let source = format!("edit:{}", &digest[..16]);
    if dest.is_dir() {
        return Ok((dest, source, false));
    }
    let tmp = crate::harnesses::unique_tmp(root, ".edit", &digest[..16]);
    let written = (|| -> std::io::Result<()> {
        for (rel, text) in files {
            let out = tmp.join(rel);
            if let Some(parent) = out.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&out, text)?;
            #[cfg(unix)]
            if exec.iter().any(|e| e == rel) {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755))?;
            }
        }
        Ok(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(ServeError::internal("writing the edited harness", e));
    }
    // never over an existing folder: a concurrent save of the same files may have put it there
    let moved = std::fs::rename(&tmp, &dest);
    if moved.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    match moved {
        Ok(()) => Ok((dest, source, true)),
        Err(_) if dest.is_dir() => Ok((dest, source, false)),
        Err(e) => Err(ServeError::internal(
            format!("moving the edit to {}", dest.display()),
            e,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_editor_reads_the_harness_files_and_nothing_else_in_the_folder() {
        let d = tempfile::tempdir().unwrap();
        let w = |rel: &str, bytes: &[u8]| {
            let p = d.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        };
        w("harness.toml", b"name = \"h\"\r\n");
        w("tools/a.json", b"{}");
        w("hooks/bin/filter", &[0x7f, b'E', b'L', b'F', 0xff, 0xfe]);
        // a git checkout and an evaluation's output beside the harness: more files than an
        // edit may hold, none of them the harness's
        for i in 0..300 {
            w(&format!(".git/objects/{i}"), b"x");
            w(&format!("runs/eval/{i}.json"), b"{}");
        }
        w("README.md", b"notes");
        let (files, _exec, binary) = read_text_files(d.path()).unwrap();
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            ["harness.toml", "tools/a.json"]
        );
        assert_eq!(files["harness.toml"], "name = \"h\"\n");
        assert_eq!(binary, ["hooks/bin/filter"]);
    }

    #[test]
    fn an_edit_naming_a_path_as_both_file_and_folder_is_a_bad_request() {
        let d = tempfile::tempdir().unwrap();
        let files: std::collections::BTreeMap<String, String> = [
            ("harness.toml", "name = 'h'"),
            ("hooks", "x"),
            ("hooks/a.sh", "echo"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let e = write_text_files(&files, &[], d.path()).unwrap_err();
        assert!(matches!(e, ServeError::BadRequest { .. }), "{e}");
        assert!(
            e.to_string().contains("`hooks` is a file and `hooks/a.sh`"),
            "{e}"
        );
    }
}
