//! Writes that survive a crash, a full disk or a power cut: the new bytes go to a temporary
//! file beside the target, are flushed to the disk, and are renamed over the target, and the
//! folder's entry is flushed too. A run's config, its checkpoints and its logs are what
//! `--resume` and `hat train export` read back; a file cut short by ENOSPC, or a rename that
//! reached the disk before the data it names, would lose the run.

use std::fs::File;
use std::io::Write;
use std::path::Path;

/// Flushes a file's contents to the disk.
pub fn sync_file(path: &Path) -> std::io::Result<()> {
    File::open(path)?.sync_all()
}

/// Flushes a folder's entries (renames, new and removed files) to the disk. A no-op where
/// folders cannot be opened as files.
pub fn sync_dir(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        File::open(path)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(())
    }
}

/// Replaces `path` with `bytes` whole: the old contents stay until the new ones are on disk.
pub fn write(path: &Path, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let tmp = dir.join(format!(".{name}.tmp"));
    let written = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes.as_ref())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_replaces_the_file_whole_and_leaves_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.toml");
        write(&p, "a = 1\n").unwrap();
        write(&p, "b = 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "b = 2\n");
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["config.toml"]);
        // a target that cannot be written keeps what it held and leaves no temporary
        let sub = d.path().join("folder");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("keep"), "x").unwrap();
        assert!(write(&sub, "over a folder").is_err());
        assert_eq!(std::fs::read_to_string(sub.join("keep")).unwrap(), "x");
        assert!(!d.path().join(".folder.tmp").exists());
    }
}
