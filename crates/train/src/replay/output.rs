//! The file a replay run writes, safe to interrupt: records go to `OUT.partial` chunk by chunk,
//! and after each chunk `OUT.partial.state` records the settings, the stats and the partial
//! file's length. A killed run resumes from its last saved chunk (bytes appended after it are cut
//! and done again); only the finished file is renamed to `OUT`. A rerun never silently wipes an
//! unfinished run or a finished file: it needs `--resume` or `--force`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use hat_data::Record;

use super::{ReplayState, ReplayStats};
use crate::error::{io, Result, TrainError};

/// What the user asked for about existing files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Refuse to touch an existing output or an unfinished run.
    New,
    /// Continue the unfinished run (a finished output means there is nothing to do).
    Resume,
    /// Replace whatever is there.
    Force,
}

/// The outcome of [`ReplayOutput::check`].
#[derive(Debug)]
pub enum Checked {
    /// `--resume` on a finished output: nothing to do.
    Complete,
    /// Ready to [`ReplayOutput::open`]; nothing has been created yet.
    Ready(ReplayOutput),
}

/// Paths of a replay run's output and working files.
#[derive(Debug, Clone)]
pub struct ReplayOutput {
    out: PathBuf,
    partial: PathBuf,
    state: PathBuf,
    start: Start,
}

/// `path` with `suffix` appended to its file name (`x.jsonl` -> `x.jsonl.partial`), so runs
/// writing different files never share their working files.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Removes `path`; one that is not there is fine.
fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(path.display())(e)),
        _ => Ok(()),
    }
}

fn invalid(message: String) -> TrainError {
    TrainError::Invalid(message)
}

impl ReplayOutput {
    /// Checks `out` and its working files against `start` without creating anything, so that a
    /// refused run (or a model that then fails to load) leaves no trace.
    pub fn check(out: &Path, start: Start) -> Result<Checked> {
        let o = ReplayOutput {
            out: out.to_path_buf(),
            partial: beside(out, ".partial"),
            state: beside(out, ".partial.state"),
            start,
        };
        let unfinished = o.state.exists();
        if unfinished && start == Start::New {
            return Err(invalid(format!(
                "{} holds an unfinished run; pass --resume to continue it (same flags) or --force \
                 to start over",
                o.state.display()
            )));
        }
        if out.exists() && start != Start::Force && !(start == Start::Resume && unfinished) {
            if start == Start::Resume {
                return Ok(Checked::Complete);
            }
            return Err(invalid(format!(
                "{} exists; pass --force to replace it",
                out.display()
            )));
        }
        Ok(Checked::Ready(o))
    }

    /// Opens the working files: a resume checks that the saved `settings` equal these and cuts
    /// the partial file back to the last saved chunk, returning the stats to continue from; a
    /// new run starts an empty partial file and returns `None`.
    pub fn open(self, settings: serde_json::Value) -> Result<(ReplayWriter, Option<ReplayStats>)> {
        let start_over = "start over with --force";
        let resumed = if self.start == Start::Resume && self.state.exists() {
            let bytes = std::fs::read(&self.state).map_err(io(self.state.display()))?;
            let st: ReplayState = serde_json::from_slice(&bytes).map_err(|e| {
                invalid(format!(
                    "{} is not a replay state file ({e}); {start_over}",
                    self.state.display()
                ))
            })?;
            if st.settings != settings {
                return Err(invalid(format!(
                    "{} was started with other settings ({}); resume with the same flags, or \
                     {start_over}",
                    self.partial.display(),
                    st.settings
                )));
            }
            let have = std::fs::metadata(&self.partial).map(|m| m.len()).ok();
            if have.is_none_or(|n| n < st.partial_bytes) {
                return Err(invalid(format!(
                    "{} is missing or shorter ({} bytes) than its state file says ({}); \
                     {start_over}",
                    self.partial.display(),
                    have.unwrap_or(0),
                    st.partial_bytes
                )));
            }
            let f = OpenOptions::new()
                .write(true)
                .open(&self.partial)
                .map_err(io(self.partial.display()))?;
            // a chunk appended after the state was saved is cut and done again
            f.set_len(st.partial_bytes)
                .map_err(io(self.partial.display()))?;
            Some(st.stats)
        } else {
            remove_if_present(&self.state)?;
            File::create(&self.partial).map_err(io(self.partial.display()))?;
            None
        };
        let file = OpenOptions::new()
            .append(true)
            .open(&self.partial)
            .map_err(io(self.partial.display()))?;
        Ok((
            ReplayWriter {
                paths: self,
                settings,
                file,
            },
            resumed,
        ))
    }
}

/// Appends chunks to an open replay run (from [`ReplayOutput::open`]).
#[derive(Debug)]
pub struct ReplayWriter {
    paths: ReplayOutput,
    settings: serde_json::Value,
    file: File,
}

impl ReplayWriter {
    /// Appends a chunk's records and then saves the state that covers them: the records are on
    /// disk before the state says so.
    pub fn append(&mut self, records: &[Record], stats: &ReplayStats) -> Result<()> {
        let partial = self.paths.partial.display();
        let mut text = Vec::new();
        for r in records {
            serde_json::to_writer(&mut text, r)?;
            text.push(b'\n');
        }
        self.file.write_all(&text).map_err(io(&partial))?;
        self.file.sync_all().map_err(io(&partial))?;
        let st = ReplayState {
            settings: self.settings.clone(),
            stats: stats.clone(),
            partial_bytes: self.file.metadata().map_err(io(&partial))?.len(),
        };
        let tmp = beside(&self.paths.state, ".tmp");
        let mut t = File::create(&tmp).map_err(io(tmp.display()))?;
        t.write_all(&serde_json::to_vec(&st)?)
            .and_then(|()| t.sync_all())
            .map_err(io(tmp.display()))?;
        std::fs::rename(&tmp, &self.paths.state).map_err(io(self.paths.state.display()))
    }

    /// Renames the finished partial file to the output and removes the state file.
    pub fn finish(self) -> Result<PathBuf> {
        let p = self.paths;
        std::fs::rename(&p.partial, &p.out).map_err(io(p.out.display()))?;
        remove_if_present(&p.state)?;
        Ok(p.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hat_harness::Message;

    fn rec(id: usize) -> Record {
        Record {
            messages: vec![Message::user("q"), Message::assistant("a")],
            tools: serde_json::json!([]),
            harness_name: "general".into(),
            harness_hash: String::new(),
            variant: "none".into(),
            call_syntax: "none".into(),
            task_id: format!("replay-{id}"),
            task_type: "general".into(),
            split: "train".into(),
            lang: "en".into(),
            calls: Vec::new(),
            teacher: "self:m".into(),
            score: serde_json::json!({}),
        }
    }

    fn stats(settled: usize) -> ReplayStats {
        ReplayStats {
            prompts: 8,
            settled,
            kept: settled,
            ..Default::default()
        }
    }

    fn ready(out: &Path, start: Start) -> ReplayOutput {
        match ReplayOutput::check(out, start).unwrap() {
            Checked::Ready(o) => o,
            Checked::Complete => panic!("{} is complete", out.display()),
        }
    }

    fn err(r: Result<impl std::fmt::Debug>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn an_interrupted_run_resumes_after_its_last_saved_chunk() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("r.jsonl");
        let settings = serde_json::json!({"seed": 1});
        let (mut w, from) = ready(&out, Start::New).open(settings.clone()).unwrap();
        assert_eq!(from, None);
        w.append(&[rec(0), rec(1)], &stats(2)).unwrap();
        let saved = std::fs::read(d.path().join("r.jsonl.partial")).unwrap();
        // killed while the next chunk was half written
        drop(w);
        let mut f = OpenOptions::new()
            .append(true)
            .open(d.path().join("r.jsonl.partial"))
            .unwrap();
        f.write_all(b"{\"messages\": [").unwrap();

        // a plain rerun neither starts over nor touches the files
        assert!(err(ReplayOutput::check(&out, Start::New)).contains("--resume"));
        // other settings are refused
        let o = ready(&out, Start::Resume);
        assert!(err(o.open(serde_json::json!({"seed": 2}))).contains("other settings"));

        let (mut w, from) = ready(&out, Start::Resume).open(settings.clone()).unwrap();
        assert_eq!(from, Some(stats(2)));
        assert_eq!(
            std::fs::read(d.path().join("r.jsonl.partial")).unwrap(),
            saved,
            "the half-written chunk is cut"
        );
        w.append(&[rec(2)], &stats(3)).unwrap();
        assert_eq!(w.finish().unwrap(), out);
        let lines: Vec<Record> = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let ids: Vec<&str> = lines.iter().map(|r| r.task_id.as_str()).collect();
        assert_eq!(ids, ["replay-0", "replay-1", "replay-2"]);
        assert!(!d.path().join("r.jsonl.partial").exists());
        assert!(!d.path().join("r.jsonl.partial.state").exists());

        // finished: a resume has nothing to do, a new run needs --force
        assert!(matches!(
            ReplayOutput::check(&out, Start::Resume).unwrap(),
            Checked::Complete
        ));
        assert!(err(ReplayOutput::check(&out, Start::New)).contains("--force"));
        let (w, from) = ready(&out, Start::Force).open(settings).unwrap();
        assert_eq!(from, None);
        assert_eq!(
            std::fs::read(d.path().join("r.jsonl.partial")).unwrap(),
            b""
        );
        w.finish().unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"");
    }

    #[test]
    fn a_damaged_unfinished_run_is_refused_not_padded() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("r.jsonl");
        let settings = serde_json::json!({"seed": 1});
        let (mut w, _) = ready(&out, Start::New).open(settings.clone()).unwrap();
        w.append(&[rec(0)], &stats(1)).unwrap();
        drop(w);
        // the partial file lost bytes the state counts on
        std::fs::write(d.path().join("r.jsonl.partial"), b"{").unwrap();
        let e = err(ready(&out, Start::Resume).open(settings.clone()));
        assert!(e.contains("shorter (1 bytes)"), "{e}");
        std::fs::remove_file(d.path().join("r.jsonl.partial")).unwrap();
        assert!(err(ready(&out, Start::Resume).open(settings.clone())).contains("missing"));
        // a state file that is not one
        std::fs::write(d.path().join("r.jsonl.partial.state"), b"garbage").unwrap();
        let e = err(ready(&out, Start::Resume).open(settings.clone()));
        assert!(e.contains("not a replay state file"), "{e}");
        assert!(e.contains("--force"), "{e}");
        // --force starts over
        let (_, from) = ready(&out, Start::Force).open(settings).unwrap();
        assert_eq!(from, None);
        assert!(!d.path().join("r.jsonl.partial.state").exists());
    }

    #[test]
    fn working_files_sit_beside_the_output_whatever_its_name() {
        let d = tempfile::tempdir().unwrap();
        let o = ready(&d.path().join("data"), Start::New);
        assert_eq!(o.partial, d.path().join("data.partial"));
        assert_eq!(o.state, d.path().join("data.partial.state"));
    }
}
