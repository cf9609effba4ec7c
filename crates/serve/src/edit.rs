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
/// executable bit (command hooks' scripts). Files that are not UTF-8 are listed in the third
/// value and left out of the first: the console shows them but cannot edit them.
pub type TextFiles = (
    std::collections::BTreeMap<String, String>,
    Vec<String>,
    Vec<String>,
);

/// Reads a harness folder as text for the console's editor.
pub fn read_text_files(dir: &Path) -> Result<TextFiles> {
    let mut files = std::collections::BTreeMap::new();
    let (mut exec, mut binary) = (Vec::new(), Vec::new());
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    let mut seen = 0usize;
    while let Some((d, prefix)) = stack.pop() {
        let rd = std::fs::read_dir(&d)
            .map_err(|e| ServeError::internal(format!("reading {}", d.display()), e))?;
        let mut entries: Vec<_> = rd.filter_map(|e| e.ok()).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name().to_string_lossy().to_string();
            let rel = format!("{prefix}{name}");
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                if rel.split('/').count() < MAX_ARCHIVE_DEPTH {
                    stack.push((e.path(), format!("{rel}/")));
                }
                continue;
            }
            if !ft.is_file() {
                continue;
            }
            seen += 1;
            if seen > MAX_TEXT_FILES {
                return Err(ServeError::bad(
                    "files",
                    format!("the harness has more than {MAX_TEXT_FILES} files"),
                ));
            }
            let bytes = std::fs::read(e.path())
                .map_err(|err| ServeError::internal(format!("reading {rel}"), err))?;
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                if e.metadata()
                    .is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
                {
                    exec.push(rel.clone());
                }
            }
            match String::from_utf8(bytes) {
                Ok(s) if s.len() <= MAX_TEXT_FILE_BYTES => {
                    files.insert(rel, s);
                }
                _ => binary.push(rel),
            }
        }
    }
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
