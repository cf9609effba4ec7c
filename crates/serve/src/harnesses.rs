//! Harness versions: the active one, its history, live swaps and rollbacks.
//!
//! A new harness (a server-side folder, or an uploaded zip archive unpacked under the data
//! folder) is loaded with the same checks as `hat harness check` before anything changes;
//! an invalid one is rejected with its problems and the active version keeps serving.
//! Replies hold an `Arc` of the version they started on, so a swap never mixes two
//! versions inside one reply.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use hat_harness::{Harness, HarnessError, Problem};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::{Result, ServeError};

/// Limits on an uploaded archive (the harness reader's own limits apply after unpacking).
pub const MAX_ARCHIVE_BYTES: usize = 16 << 20;
pub const MAX_ARCHIVE_ENTRIES: usize = 1024;
pub const MAX_UNPACKED_BYTES: u64 = 16 << 20;
/// Folders deep an archive entry may sit (a harness is `skills/<name>/SKILL.md` deep): 1,024
/// entries 2,000 folders deep made 2 million folders from a 92 KB upload.
pub const MAX_ARCHIVE_DEPTH: usize = 8;
/// Versions remembered for rollback.
pub const HISTORY: usize = 64;

/// A check a new harness must pass before it goes live (`hat serve --gate`: the regression
/// gate runs live-stream tasks under the new and the active harness). Blocking; the server
/// calls it off the async runtime.
pub trait SwapGate: Send + Sync {
    /// `Err` holds the report that explains the refusal.
    fn check(&self, new: &Path, active: &Path) -> std::result::Result<String, String>;
}

/// A gate in the server's config.
#[derive(Clone)]
pub struct Gate(pub std::sync::Arc<dyn SwapGate>);

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gate")
    }
}

/// One loaded harness.
pub struct Version {
    pub harness: Harness,
    /// Where it came from: a folder path, or `upload:<sha256 of the archive>`.
    pub source: String,
    /// The folder it was loaded from (an upload's or an edit's folder under the data folder).
    pub dir: PathBuf,
    pub loaded_at: u64,
}

impl Version {
    pub fn hash(&self) -> &str {
        &self.harness.hash
    }
}

/// What `GET /v1/harness` shows of a version.
#[derive(Debug, Clone, Serialize)]
pub struct VersionInfo {
    pub hash: String,
    pub name: String,
    pub source: String,
    pub loaded_at: u64,
    pub active: bool,
    pub summary: String,
}

/// A rejected attempt, kept so the operator sees why the watch or an upload changed nothing.
#[derive(Debug, Clone, Serialize)]
pub struct Rejection {
    pub source: String,
    pub at: u64,
    pub problems: Vec<String>,
}

struct State {
    versions: Vec<Arc<Version>>,
    active: usize,
    last_rejected: Option<Rejection>,
}

/// The server's harness versions.
pub struct Harnesses {
    state: RwLock<State>,
    /// Where the history is kept across restarts (`<data_dir>/harness-history.json`).
    store: Option<PathBuf>,
    /// The harness this server was started with, as the history records it.
    boot: Option<StoredVersion>,
    /// Held across a save's snapshot and write, so concurrent swaps cannot land an older
    /// snapshot last or interleave in the temporary file.
    saving: std::sync::Mutex<()>,
    /// Folders that requests wrote or found under the data folder and still work with
    /// (checking, gating, activating): per folder, how many hold it and whether one of them
    /// created it. See [`Harnesses::hold`].
    held: std::sync::Mutex<HashMap<PathBuf, (usize, bool)>>,
}

/// A request's hold on a harness folder it unpacked or wrote ([`Harnesses::hold`]). When the
/// last hold on a folder drops, a folder one of the holders created is removed unless a
/// version in the history runs from it: a refused or only checked upload leaves nothing
/// behind, and no request loses a folder while another one still checks or activates it.
pub struct Held {
    owner: Arc<Harnesses>,
    dir: PathBuf,
}

impl Held {
    /// The held folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.owner.held_folders();
        let Some(entry) = held.get_mut(&self.dir) else {
            return;
        };
        entry.0 -= 1;
        if entry.0 == 0 {
            let created = entry.1;
            held.remove(&self.dir);
            // under the lock: a request finding the folder now waits, then writes it anew
            if created && !self.owner.uses_dir(&self.dir) {
                let _ = std::fs::remove_dir_all(&self.dir);
            }
        }
    }
}

/// The history as kept on disk: each version by hash and folder, which one is active, and the
/// harness the server was started with (to tell a plain restart from a new `--harness`).
#[derive(Debug, Default, Serialize, serde::Deserialize)]
struct StoredHistory {
    boot: Option<StoredVersion>,
    active: String,
    versions: Vec<StoredVersion>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
struct StoredVersion {
    hash: String,
    source: String,
    dir: PathBuf,
    loaded_at: u64,
}

impl StoredVersion {
    fn of(v: &Version) -> StoredVersion {
        StoredVersion {
            hash: v.hash().to_string(),
            source: v.source.clone(),
            dir: v.dir.clone(),
            loaded_at: v.loaded_at,
        }
    }
}

/// The file the history is kept in, under the data folder.
pub const HISTORY_FILE: &str = "harness-history.json";

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Loads and checks a harness folder.
pub fn load_dir(dir: &Path, source: String) -> Result<Version> {
    match Harness::load(dir) {
        Ok(harness) => Ok(Version {
            harness,
            source,
            dir: std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()),
            loaded_at: now_s(),
        }),
        Err(HarnessError::Invalid(problems)) => Err(ServeError::InvalidHarness(problems)),
        Err(e) => Err(ServeError::InvalidHarness(vec![Problem::new(
            dir.display().to_string(),
            None,
            e.to_string(),
        )])),
    }
}

impl Harnesses {
    /// A history of one version, kept in memory only.
    pub fn new(first: Version) -> Self {
        Harnesses {
            state: RwLock::new(State {
                versions: vec![Arc::new(first)],
                active: 0,
                last_rejected: None,
            }),
            store: None,
            boot: None,
            saving: std::sync::Mutex::new(()),
            held: Default::default(),
        }
    }

    /// The history kept in `data_dir` by an earlier server, with `boot` (the harness this
    /// server was started with) in it. Each recorded version is loaded again from its folder
    /// and kept only when its hash is unchanged (an upload's or an edit's folder never
    /// changes; a folder on the server may have been edited since). After a plain restart
    /// (`boot` is the harness the last server started with, unchanged) the version that was
    /// active stays active, so an operator's live change survives; a different `--harness`
    /// becomes active itself. Returns what happened, one line per event, for the log.
    pub fn restore(boot: Version, data_dir: &Path) -> (Harnesses, Vec<String>) {
        let store = data_dir.join(HISTORY_FILE);
        let mut notes = Vec::new();
        let stored: StoredHistory = match std::fs::read(&store) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                notes.push(format!(
                    "{} is not a harness history ({e}); starting a new one",
                    store.display()
                ));
                StoredHistory::default()
            }),
            Err(_) => StoredHistory::default(),
        };
        let same_boot = stored
            .boot
            .as_ref()
            .is_some_and(|b| b.hash == boot.hash() && b.dir == boot.dir);
        let boot_info = StoredVersion::of(&boot);
        let mut versions: Vec<Arc<Version>> = Vec::new();
        let mut boot = Some(boot);
        // the newest stored versions, leaving room for the boot version
        for sv in stored.versions.iter().rev().take(HISTORY - 1).rev() {
            if versions.iter().any(|v| v.hash() == sv.hash) {
                continue;
            }
            if sv.hash == boot_info.hash {
                if let Some(b) = boot.take() {
                    versions.push(Arc::new(Version {
                        loaded_at: sv.loaded_at,
                        ..b
                    }));
                }
                continue;
            }
            match load_dir(&sv.dir, sv.source.clone()) {
                Ok(v) if v.hash() == sv.hash => versions.push(Arc::new(Version {
                    loaded_at: sv.loaded_at,
                    ..v
                })),
                Ok(v) => notes.push(format!(
                    "dropped {} from the history: its folder {} now holds {}",
                    short(&sv.hash),
                    sv.dir.display(),
                    short(v.hash())
                )),
                Err(_) => notes.push(format!(
                    "dropped {} from the history: its folder {} is gone or no longer loads",
                    short(&sv.hash),
                    sv.dir.display()
                )),
            }
        }
        if let Some(b) = boot.take() {
            versions.push(Arc::new(b));
        }
        let boot_at = versions
            .iter()
            .position(|v| v.hash() == boot_info.hash)
            .unwrap_or(versions.len() - 1);
        let active = match versions.iter().position(|v| v.hash() == stored.active) {
            Some(i) if same_boot => {
                if i != boot_at {
                    notes.push(format!(
                        "kept {} active from before the restart (the server was started with {}; \
                         roll back to it in the console or with POST /v1/harness/rollback)",
                        short(&stored.active),
                        short(&boot_info.hash)
                    ));
                }
                i
            }
            _ => boot_at,
        };
        if versions.len() > 1 {
            notes.push(format!(
                "restored {} harness versions from {}",
                versions.len(),
                store.display()
            ));
        }
        let h = Harnesses {
            state: RwLock::new(State {
                versions,
                active,
                last_rejected: None,
            }),
            store: Some(store),
            boot: Some(boot_info),
            saving: std::sync::Mutex::new(()),
            held: Default::default(),
        };
        h.save();
        (h, notes)
    }

    /// Writes the history (atomically: a crash leaves the old file or the new one). A
    /// failure is logged, not fatal: serving goes on with the history in memory.
    fn save(&self) {
        let Some(path) = &self.store else {
            return;
        };
        let _saving = self.saving.lock().unwrap_or_else(|e| e.into_inner());
        let stored = {
            let s = self.read();
            StoredHistory {
                boot: self.boot.clone(),
                active: s.versions[s.active].hash().to_string(),
                versions: s.versions.iter().map(|v| StoredVersion::of(v)).collect(),
            }
        };
        let tmp = path.with_extension("json.tmp");
        let written = serde_json::to_vec_pretty(&stored)
            .map_err(std::io::Error::other)
            .and_then(|bytes| {
                use std::io::Write;
                let mut f = std::fs::File::create(&tmp)?;
                f.write_all(&bytes)?;
                f.sync_all()
            })
            .and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), error = %e, "could not save the harness history");
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        // a panic while holding the lock cannot leave the state half-written (every
        // writer swaps whole values), so a poisoned lock is still consistent
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The version new replies start on.
    pub fn active(&self) -> Arc<Version> {
        let s = self.read();
        s.versions[s.active].clone()
    }

    /// Makes `v` active (or re-activates an identical version already known). Returns
    /// whether the active hash changed.
    pub fn activate(&self, v: Version) -> bool {
        let mut s = self.write();
        let before = s.versions[s.active].hash().to_string();
        if let Some(i) = s.versions.iter().position(|x| x.hash() == v.hash()) {
            s.active = i;
        } else {
            s.versions.push(Arc::new(v));
            if s.versions.len() > HISTORY {
                // never forget the active one
                let drop_at = usize::from(s.active == 0);
                s.versions.remove(drop_at);
            }
            s.active = s.versions.len() - 1;
        }
        let changed = s.versions[s.active].hash() != before;
        drop(s);
        self.save();
        changed
    }

    /// Activates an earlier version by hash (or a unique prefix of at least 8 characters).
    pub fn rollback(&self, hash: &str) -> Result<Arc<Version>> {
        let v = {
            let mut s = self.write();
            let i = Self::index(&s, hash)?;
            s.active = i;
            s.versions[i].clone()
        };
        self.save();
        Ok(v)
    }

    /// Whether a version of the history runs from `dir` (its folder, or the harness's root):
    /// such a folder must never be removed.
    pub fn uses_dir(&self, dir: &Path) -> bool {
        let want = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        let same = |p: &Path| p == dir || std::fs::canonicalize(p).is_ok_and(|c| c == want);
        self.read()
            .versions
            .iter()
            .any(|v| same(&v.dir) || v.harness.root.as_deref().is_some_and(same))
    }

    fn held_folders(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, (usize, bool)>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `write` (which unpacks or writes a harness folder and returns it, its source and
    /// whether it created it, like [`unpack_zip`]) and holds the folder it returns. Writes
    /// are serialised with the last release of a hold, so a folder found in place cannot be
    /// removed under the request that found it. Blocking: call it off the async runtime.
    pub fn hold<F>(self: &Arc<Self>, write: F) -> Result<(Held, String)>
    where
        F: FnOnce() -> Result<(PathBuf, String, bool)>,
    {
        let mut held = self.held_folders();
        let (dir, source, created) = write()?;
        // one key per folder however it is named (`runs/serve/...` by a request, the absolute
        // root of a loaded harness by the gate): holds on one folder must count together
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        let entry = held.entry(dir.clone()).or_insert((0, false));
        entry.0 += 1;
        entry.1 |= created;
        drop(held);
        Ok((
            Held {
                owner: self.clone(),
                dir,
            },
            source,
        ))
    }

    /// Whether a version with this exact hash is in the history.
    pub fn knows(&self, hash: &str) -> bool {
        self.read().versions.iter().any(|v| v.hash() == hash)
    }

    /// A version of the history by hash (or a unique prefix of at least 8 characters).
    pub fn find(&self, hash: &str) -> Result<Arc<Version>> {
        let s = self.read();
        Self::index(&s, hash).map(|i| s.versions[i].clone())
    }

    fn index(s: &State, hash: &str) -> Result<usize> {
        let hits: Vec<usize> = (0..s.versions.len())
            .filter(|&i| hash.len() >= 8 && s.versions[i].hash().starts_with(hash))
            .collect();
        match hits.as_slice() {
            [i] => Ok(*i),
            [] => Err(ServeError::NotFound(format!(
                "no harness version {hash} in the history (GET /v1/harness lists them; give at least 8 characters)"
            ))),
            _ => Err(ServeError::bad(
                "hash",
                format!("{hash} matches {} versions; give more characters", hits.len()),
            )),
        }
    }

    pub fn reject(&self, source: String, problems: &[Problem]) {
        self.write().last_rejected = Some(Rejection {
            source,
            at: now_s(),
            problems: problems.iter().map(|p| p.to_string()).collect(),
        });
    }

    /// The history, oldest first, and the last rejected attempt.
    pub fn list(&self) -> (Vec<VersionInfo>, Option<Rejection>) {
        let s = self.read();
        let v = s
            .versions
            .iter()
            .enumerate()
            .map(|(i, v)| VersionInfo {
                hash: v.hash().to_string(),
                name: v.harness.spec.manifest.harness.name.clone(),
                source: v.source.clone(),
                loaded_at: v.loaded_at,
                active: i == s.active,
                summary: v.harness.summary(),
            })
            .collect();
        (v, s.last_rejected.clone())
    }
}

/// A hash as the log shows it: `sha256:` and 16 hex digits.
fn short(hash: &str) -> &str {
    hash.get(..23).unwrap_or(hash)
}

fn archive_err(message: impl Into<String>) -> ServeError {
    ServeError::bad("archive", message)
}

/// A name for a temporary folder no other request of this process uses at the same time
/// (two uploads of one archive, or two saves of one edit, must not share one).
pub(crate) fn unique_tmp(root: &Path, prefix: &str, digest: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    root.join(format!("{prefix}-{digest}-{}-{n}", std::process::id()))
}

/// Unpacks an uploaded zip archive of a harness folder into `<root>/<sha256>/` and returns
/// that folder, its source, and whether this call created it. Paths that leave the folder,
/// links, and archives past the limits are refused; the archive may hold the harness at its
/// top or inside one folder. Executable bits are kept only when `trusted` (the server
/// requires an API key, so only its operators upload); otherwise every file is written 0644.
///
/// The same archive uploaded before reuses its folder as it is (`false`): a live version
/// may be running from it, so it is never removed or rewritten, and a caller must remove
/// only a folder it created.
pub fn unpack_zip(bytes: &[u8], root: &Path, trusted: bool) -> Result<(PathBuf, String, bool)> {
    if bytes.len() > MAX_ARCHIVE_BYTES {
        return Err(archive_err(format!(
            "{} bytes; archives are limited to {MAX_ARCHIVE_BYTES}",
            bytes.len()
        )));
    }
    let digest = hex::encode(Sha256::digest(bytes));
    let dest = root.join(&digest[..16]);
    let source = format!("upload:{}", &digest[..16]);
    if dest.is_dir() {
        return Ok((dest, source, false));
    }
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| archive_err(format!("not a zip archive: {e}")))?;
    if zip.is_empty() {
        return Err(archive_err("the archive is empty; zip the harness folder"));
    }
    if zip.len() > MAX_ARCHIVE_ENTRIES {
        return Err(archive_err(format!(
            "{} entries; at most {MAX_ARCHIVE_ENTRIES}",
            zip.len()
        )));
    }
    let tmp = unique_tmp(root, ".unpack", &digest[..16]);
    let result = (|| {
        let mut total = 0u64;
        for i in 0..zip.len() {
            let mut f = zip
                .by_index(i)
                .map_err(|e| archive_err(format!("entry {i}: {e}")))?;
            let name = f.name().to_string();
            let rel = f
                .enclosed_name()
                .filter(|p| p.components().all(|c| matches!(c, Component::Normal(_))))
                .ok_or_else(|| archive_err(format!("`{name}` leaves the harness folder")))?;
            if rel.components().count() > MAX_ARCHIVE_DEPTH || name.len() > 1024 {
                return Err(archive_err(format!(
                    "`{}` is nested more than {MAX_ARCHIVE_DEPTH} folders deep or named too long",
                    hat_harness::text::truncate_chars(&name, 80)
                )));
            }
            if f.is_symlink() {
                return Err(archive_err(format!(
                    "`{name}` is a link; only files and folders are accepted"
                )));
            }
            let out = tmp.join(&rel);
            if f.is_dir() {
                std::fs::create_dir_all(&out).map_err(|e| {
                    archive_err(format!("`{name}` cannot be unpacked: {}", e.kind()))
                })?;
                continue;
            }
            if let Some(parent) = out.parent() {
                std::fs::create_dir_all(parent).map_err(|e| {
                    archive_err(format!("`{name}` cannot be unpacked: {}", e.kind()))
                })?;
            }
            let mut data = Vec::new();
            let left = MAX_UNPACKED_BYTES - total;
            (&mut f)
                .take(left + 1)
                .read_to_end(&mut data)
                .map_err(|e| archive_err(format!("`{name}`: {e}")))?;
            total += data.len() as u64;
            if total > MAX_UNPACKED_BYTES {
                return Err(archive_err(format!(
                    "unpacks to more than {MAX_UNPACKED_BYTES} bytes"
                )));
            }
            std::fs::write(&out, &data)
                .map_err(|e| archive_err(format!("`{name}` cannot be unpacked: {}", e.kind())))?;
            #[cfg(unix)]
            if let Some(mode) = f.unix_mode().filter(|_| trusted) {
                use std::os::unix::fs::PermissionsExt;
                // keep only the executable bits a command hook needs
                let m = 0o644 | (mode & 0o111);
                let _ = std::fs::set_permissions(&out, std::fs::Permissions::from_mode(m));
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    // a harness zipped as its folder: descend into the single top folder
    let mut top = tmp.clone();
    if !top.join("harness.toml").exists() {
        let entries: Vec<PathBuf> = std::fs::read_dir(&tmp)
            .map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        if let [only] = entries.as_slice() {
            if only.is_dir() {
                top = only.clone();
            }
        }
    }
    // never over an existing folder: a concurrent upload of the same archive may have put it
    // there, and a version may already run from it
    let moved = std::fs::rename(&top, &dest);
    let _ = std::fs::remove_dir_all(&tmp);
    match moved {
        Ok(()) => Ok((dest, source, true)),
        Err(_) if dest.is_dir() => Ok((dest, source, false)),
        Err(e) => Err(ServeError::internal(
            format!("moving the upload to {}", dest.display()),
            e,
        )),
    }
}

/// A cheap fingerprint of a folder (names, sizes, modification times) for the file watch.
pub fn fingerprint(dir: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = 0;
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut entries: Vec<_> = rd.filter_map(|e| e.ok()).collect();
        entries.sort_by_key(|e| e.path());
        for e in entries {
            seen += 1;
            if seen > 4096 {
                return h.finish();
            }
            let p = e.path();
            p.hash(&mut h);
            if let Ok(m) = std::fs::symlink_metadata(&p) {
                m.len().hash(&mut h);
                m.modified().ok().hash(&mut h);
                if m.is_dir() {
                    stack.push(p);
                }
            }
        }
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn zip_of(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        for (name, data) in files {
            w.start_file(*name, zip::write::SimpleFileOptions::default())
                .unwrap();
            w.write_all(data).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    /// Review finding: a request held its folder as `runs/serve/...` (a relative --data-dir)
    /// and the gate as the loaded harness's absolute root, so the request's release deleted the
    /// folder under the gate's run. Holds on one folder count together however it is named.
    #[test]
    fn holds_on_one_folder_count_together_under_any_name() {
        let base = std::env::current_dir().unwrap();
        let root = tempfile::tempdir_in(&base).unwrap();
        let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
        let h = Arc::new(Harnesses::new(load_dir(&demo, "demo".into()).unwrap()));
        let absolute = root.path().join("edit-1");
        std::fs::create_dir_all(&absolute).unwrap();
        let relative = absolute.strip_prefix(&base).unwrap().to_path_buf();
        assert!(relative.is_relative());
        let (by_request, _) = h
            .hold(|| Ok((relative.clone(), "edit".into(), true)))
            .unwrap();
        let (by_gate, _) = h
            .hold(|| Ok((absolute.clone(), String::new(), false)))
            .unwrap();
        drop(by_request);
        assert!(absolute.is_dir(), "released under the gate");
        drop(by_gate);
        assert!(
            !absolute.exists(),
            "the last release removes a folder a request created"
        );
    }

    /// Red-team finding: an empty zip or a file and a folder of one name gave a 500 naming
    /// server paths; they are the archive's problems.
    #[test]
    fn malformed_archives_are_the_uploaders_problem() {
        let dir = tempfile::tempdir().unwrap();
        let e = unpack_zip(&zip_of(&[]), dir.path(), false).unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
        let z = zip_of(&[("tools", b"x"), ("tools/a.json", b"{}")]);
        let e = unpack_zip(&z, dir.path(), false).unwrap_err().to_string();
        assert!(
            e.contains("cannot be unpacked") && !e.contains(&dir.path().display().to_string()),
            "{e}"
        );
    }

    /// Red-team finding: 10 entries 1,990 folders deep made 20,000 folders from a 92 KB zip.
    #[test]
    fn an_archive_nested_past_the_depth_limit_is_refused_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let deep = format!("{}x.md", "d/".repeat(40));
        let z = zip_of(&[(deep.as_str(), b"x")]);
        let e = unpack_zip(&z, dir.path(), false).unwrap_err().to_string();
        assert!(e.contains("nested more than"), "{e}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn an_archive_that_leaves_its_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let z = zip_of(&[("../evil.toml", b"x")]);
        let e = unpack_zip(&z, dir.path(), false).unwrap_err().to_string();
        assert!(e.contains("leaves the harness folder"), "{e}");
        assert!(!dir.path().parent().unwrap().join("evil.toml").exists());
        let e = unpack_zip(b"not a zip", dir.path(), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a zip archive"), "{e}");
    }

    #[test]
    fn an_archive_of_the_folder_unpacks_to_its_contents() {
        let dir = tempfile::tempdir().unwrap();
        let z = zip_of(&[("h/harness.toml", b"a"), ("h/tools/x.json", b"{}")]);
        let (out, source, created) = unpack_zip(&z, dir.path(), false).unwrap();
        assert!(created);
        assert!(out.join("harness.toml").is_file());
        assert!(out.join("tools/x.json").is_file());
        assert!(source.starts_with("upload:"));
    }

    /// Review finding: unpacking an archive uploaded before removed its folder and unpacked
    /// it again, under a version that may be running from it. The folder is reused as it is.
    #[test]
    fn an_archive_uploaded_again_reuses_its_folder_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let z = zip_of(&[("harness.toml", b"a")]);
        let (first, _, created) = unpack_zip(&z, dir.path(), false).unwrap();
        assert!(created);
        // stands in for a live version's folder: it must not be removed or rewritten
        std::fs::write(first.join("marker"), "live").unwrap();
        let (again, _, created) = unpack_zip(&z, dir.path(), false).unwrap();
        assert_eq!(again, first);
        assert!(!created, "the second upload did not create the folder");
        assert_eq!(
            std::fs::read_to_string(first.join("marker")).unwrap(),
            "live"
        );
        // no temporary folder is left behind
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    fn production() -> Version {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
        load_dir(&dir, "test".into()).unwrap()
    }

    /// Review finding: two uploads of one archive: the second found the folder, then the
    /// first one's refusal removed it under the second's check (a confusing error). A
    /// folder now goes only when its last hold drops.
    #[test]
    fn a_written_folder_stays_while_any_request_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let history = Arc::new(Harnesses::new(production()));
        let z = zip_of(&[("harness.toml", b"a")]);
        let (first, _) = history.hold(|| unpack_zip(&z, dir.path(), false)).unwrap();
        let (second, _) = history.hold(|| unpack_zip(&z, dir.path(), false)).unwrap();
        assert_eq!(first.dir(), second.dir());
        let folder = first.dir().to_path_buf();
        drop(first);
        assert!(
            folder.join("harness.toml").is_file(),
            "the second still holds it"
        );
        drop(second);
        assert!(!folder.exists(), "created, not live, no hold left: removed");

        // a folder no holder created (already there) is left as it is
        let (third, _) = history.hold(|| unpack_zip(&z, dir.path(), false)).unwrap();
        let folder = third.dir().to_path_buf();
        let (fourth, _) = history
            .hold(|| Ok((folder.clone(), "found".into(), false)))
            .unwrap();
        drop(third);
        drop(fourth);
        assert!(!folder.exists(), "one holder created it");
        std::fs::create_dir_all(&folder).unwrap();
        let (found, _) = history
            .hold(|| Ok((folder.clone(), "found".into(), false)))
            .unwrap();
        drop(found);
        assert!(folder.is_dir(), "found in place: never removed");
    }

    #[test]
    fn a_held_folder_that_went_live_stays() {
        let root = tempfile::tempdir().unwrap();
        let history = Arc::new(Harnesses::new(production()));
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
        let mut files = crate::edit::read_text_files(&src).unwrap().0;
        let toml = files.get_mut("harness.toml").unwrap();
        assert!(toml.contains("name = \"Mia\""));
        *toml = toml.replace("name = \"Mia\"", "name = \"Ana\""); // another version
        let (held, source) = history
            .hold(|| crate::edit::write_text_files(&files, &[], root.path()))
            .unwrap();
        let v = load_dir(held.dir(), source).unwrap();
        assert!(history.activate(v));
        let folder = held.dir().to_path_buf();
        drop(held);
        assert!(
            folder.join("harness.toml").is_file(),
            "a live version's folder stays"
        );
    }
}
