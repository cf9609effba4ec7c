//! Reading a harness state from files and writing it back.
//!
//! A harness is handled as a map from relative path to text, so the same code
//! checks a directory on disk and an augmented state built in memory, and the
//! content hash is computed over exactly what would be written.

use std::collections::BTreeMap;
use std::path::Path;

use crate::problem::{line_at, HarnessError, Problem};
use crate::spec::{HarnessSpec, HooksFile, Manifest, SkillFront, SkillSpec, ToolSpec};

/// Files larger than this are refused: a harness is prompt text, not data.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// A harness with more files than this is almost certainly a wrong directory.
pub const MAX_FILES: usize = 2000;
/// All files together.
pub const MAX_TOTAL_BYTES: u64 = 16 << 20;
/// A SKILL.md's front matter, in bytes and in bracket nesting.
pub const MAX_FRONT_MATTER_BYTES: usize = 16 << 10;
pub const MAX_FRONT_MATTER_DEPTH: usize = 16;

pub type FileMap = BTreeMap<String, String>;

/// Folders whose whole content belongs to a harness.
pub const HARNESS_DIRS: [&str; 4] = ["hooks", "prompts", "skills", "tools"];
/// Files at the root that belong to a harness.
pub const ROOT_FILES: [&str; 2] = ["harness.toml", "hooks.toml"];

/// Reads the files of the harness in `dir` into a [`FileMap`]: `harness.toml`, `hooks.toml`,
/// everything below `hooks/`, `prompts/`, `skills/` and `tools/` (hidden entries skipped), and
/// the prompt template and hook programs the two TOML files name wherever they lie in the
/// folder. Nothing else is part of the harness: a README, notes or an evaluation's `--out`
/// written inside the folder are not read, hashed or copied by `hat augment`.
///
/// Unreadable or oversized files become problems rather than errors. Only regular files are
/// read: a symbolic link (which could point outside the folder, at a secret or a device) or a
/// FIFO, socket or device (which could block forever) is a problem naming it, never opened.
pub fn read_dir(dir: &Path) -> Result<(FileMap, Vec<Problem>), HarnessError> {
    let meta = std::fs::metadata(dir).map_err(|source| HarnessError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(HarnessError::Io {
            path: dir.display().to_string(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a directory (pass the harness folder that holds harness.toml)",
            ),
        });
    }
    let mut reader = Reader::default();
    for name in ROOT_FILES {
        let path = dir.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(m) => reader.take(&path, name.to_string(), m.file_type(), m.len())?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => reader
                .problems
                .push(Problem::new(name, None, format!("cannot read: {e}"))),
        }
    }
    let (named, named_dirs) = named_paths(&reader.files);
    // (folder, relative path, whether everything below it belongs to the harness)
    let mut stack = vec![(dir.to_path_buf(), String::new(), false)];
    while let Some((d, rel_dir, whole)) = stack.pop() {
        let entries = std::fs::read_dir(&d).map_err(|source| HarnessError::Io {
            path: d.display().to_string(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| HarnessError::Io {
                path: d.display().to_string(),
                source,
            })?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') {
                continue;
            }
            let rel = if rel_dir.is_empty() {
                name.to_string()
            } else {
                format!("{rel_dir}/{name}")
            };
            if rel_dir.is_empty() && ROOT_FILES.contains(&rel.as_str()) {
                continue; // read above
            }
            let ft = entry.file_type().map_err(|source| HarnessError::Io {
                path: rel.clone(),
                source,
            })?;
            let harness_dir = rel_dir.is_empty() && HARNESS_DIRS.contains(&&*name);
            let leads_to_named = named.iter().chain(&named_dirs).any(|n| {
                n.strip_prefix(rel.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
            });
            // a link where a harness folder, or the way to a named file, belongs is reported
            // (a hook program reached through `bin -> /opt/x` would run code from outside)
            let wanted = whole
                || named.contains(&rel)
                || harness_dir
                || named_dirs.contains(&rel)
                || (ft.is_symlink() && leads_to_named);
            if ft.is_dir() && !ft.is_symlink() {
                let below = whole || harness_dir || named_dirs.contains(&rel);
                if below || leads_to_named {
                    stack.push((entry.path(), rel, below));
                }
                continue;
            }
            if !wanted {
                continue;
            }
            let len = entry.metadata().map(|m| m.len()).unwrap_or(0);
            reader.take(&entry.path(), rel, ft, len)?;
        }
    }
    Ok((reader.files, reader.problems))
}

/// The files `harness.toml` and `hooks.toml` name (the template, each command hook's program
/// and the arguments that look like relative paths), and the folders read whole: each hook
/// program's own folder (below the root), where its helper files live. Relative paths; read
/// leniently: a file that does not parse is reported by [`parse`] later.
fn named_paths(
    files: &FileMap,
) -> (
    std::collections::BTreeSet<String>,
    std::collections::BTreeSet<String>,
) {
    let mut named = std::collections::BTreeSet::new();
    let mut dirs = std::collections::BTreeSet::new();
    let clean = |p: &str| -> Option<String> {
        let p = p.strip_prefix("./").unwrap_or(p);
        let ok = !p.is_empty()
            && !p.starts_with('/')
            && !p.split('/').any(|c| c == ".." || c.is_empty());
        ok.then(|| p.to_string())
    };
    if let Some(v) = files
        .get("harness.toml")
        .and_then(|t| toml::from_str::<toml::Value>(t).ok())
    {
        if let Some(t) = v
            .get("prompt")
            .and_then(|p| p.get("template"))
            .and_then(|t| t.as_str())
            .and_then(clean)
        {
            named.insert(t);
        }
    }
    if let Some(v) = files
        .get("hooks.toml")
        .and_then(|t| toml::from_str::<toml::Value>(t).ok())
    {
        for hook in v
            .get("hooks")
            .and_then(|h| h.as_array())
            .into_iter()
            .flatten()
        {
            let argv: Vec<&str> = hook
                .get("command")
                .and_then(|c| c.as_array())
                .into_iter()
                .flatten()
                .filter_map(|a| a.as_str())
                .collect();
            let Some((program, args)) = argv.split_first() else {
                continue;
            };
            if let Some(p) = clean(program) {
                if let Some((folder, _)) = p.rsplit_once('/') {
                    dirs.insert(folder.to_string());
                }
                named.insert(p);
            }
            for a in args
                .iter()
                .filter(|a| !a.starts_with('-') && (a.contains('/') || a.contains('.')))
                .filter_map(|a| clean(a))
            {
                named.insert(a);
            }
        }
    }
    (named, dirs)
}

/// The files read so far, the problems found, and the running totals the limits apply to.
#[derive(Default)]
struct Reader {
    files: FileMap,
    problems: Vec<Problem>,
    total: u64,
}

impl Reader {
    /// Reads one entry at `rel`, or records why not. An error stops the whole read (a folder
    /// past the limits is not a harness, and the rest unread would look missing).
    fn take(
        &mut self,
        path: &Path,
        rel: String,
        ft: std::fs::FileType,
        len: u64,
    ) -> Result<(), HarnessError> {
        if ft.is_symlink() {
            self.problems.push(Problem::new(
                rel,
                None,
                "a symbolic link: harness files are read only as regular files inside the \
                 folder (copy the file in instead)",
            ));
            return Ok(());
        }
        if !ft.is_file() {
            self.problems.push(Problem::new(
                rel,
                None,
                "not a regular file (a folder, FIFO, socket or device): harness files must be \
                 plain text files",
            ));
            return Ok(());
        }
        if self.files.len() >= MAX_FILES {
            self.problems.push(Problem::new(
                rel,
                None,
                format!("more than {MAX_FILES} files; is this really a harness folder?"),
            ));
            return Err(HarnessError::Invalid(std::mem::take(&mut self.problems)));
        }
        if len > MAX_FILE_BYTES {
            self.problems.push(Problem::new(
                rel,
                None,
                format!("file is {len} bytes; harness files must be under {MAX_FILE_BYTES} bytes"),
            ));
            return Ok(());
        }
        if self.total + len > MAX_TOTAL_BYTES {
            self.problems.push(Problem::new(
                rel,
                None,
                format!("the harness files together exceed {MAX_TOTAL_BYTES} bytes"),
            ));
            return Err(HarnessError::Invalid(std::mem::take(&mut self.problems)));
        }
        self.total += len;
        match read_bounded(path) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => {
                    self.files.insert(rel, normalize(&text));
                }
                Err(_) => self
                    .problems
                    .push(Problem::new(rel, None, "not valid UTF-8 text")),
            },
            Err(e) => self
                .problems
                .push(Problem::new(rel, None, format!("cannot read: {e}"))),
        }
        Ok(())
    }
}

/// Reads at most [`MAX_FILE_BYTES`] (a file that grew since its size was taken is an error),
/// without following a symbolic link swapped in since the directory was listed.
fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // O_NOFOLLOW | O_NONBLOCK: no symlink, and a FIFO swapped in cannot block the open
        opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let f = opts.open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut bytes = Vec::new();
    f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("grew past {MAX_FILE_BYTES} bytes while being read"),
        ));
    }
    Ok(bytes)
}

/// Line endings normalised so a checkout on Windows hashes the same.
pub fn normalize(text: &str) -> String {
    // a byte-order mark from an editor would hide the front matter's opening `---`
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.contains('\r') {
        text.replace("\r\n", "\n")
    } else {
        text.to_string()
    }
}

/// Parses a file map into a spec, collecting every syntax problem.
/// Returns `None` for the spec only when `harness.toml` is unusable.
pub fn parse(files: &FileMap) -> (Option<HarnessSpec>, Vec<Problem>) {
    let mut problems = Vec::new();
    let manifest = match files.get("harness.toml") {
        None => {
            problems.push(Problem::new(
                "harness.toml",
                None,
                "missing: every harness needs a harness.toml manifest at its root",
            ));
            None
        }
        Some(text) => match toml::from_str::<Manifest>(text) {
            Ok(m) => Some(m),
            Err(e) => {
                problems.push(toml_problem("harness.toml", text, &e));
                None
            }
        },
    };

    let mut skills = Vec::new();
    let mut tools = Vec::new();
    let mut hooks = Vec::new();
    let mut extra = BTreeMap::new();
    // `./prompts/x.j2` names the same file as `prompts/x.j2`
    let template_path = manifest.as_ref().and_then(|m| {
        m.prompt
            .template
            .as_deref()
            .map(|t| t.strip_prefix("./").unwrap_or(t).to_string())
    });
    let mut template = None;
    let mut skill_dirs: BTreeMap<String, bool> = BTreeMap::new();

    for (path, text) in files {
        if path == "harness.toml" {
            continue;
        }
        if Some(path) == template_path.as_ref() {
            template = Some(text.clone());
            continue;
        }
        if path == "hooks.toml" {
            match toml::from_str::<HooksFile>(text) {
                Ok(h) => hooks = h.hooks,
                Err(e) => problems.push(toml_problem(path, text, &e)),
            }
            continue;
        }
        if let Some(rest) = path.strip_prefix("skills/") {
            if let Some((folder, file)) = rest.split_once('/') {
                let seen = skill_dirs.entry(folder.to_string()).or_insert(false);
                if file == "SKILL.md" {
                    *seen = true;
                    match parse_skill(folder, path, text) {
                        Ok(s) => skills.push(s),
                        Err(p) => problems.push(p),
                    }
                } else {
                    extra.insert(path.clone(), text.clone());
                }
                continue;
            }
        }
        if let Some(rest) = path.strip_prefix("tools/") {
            if let Some(stem) = rest.strip_suffix(".json").filter(|s| !s.contains('/')) {
                match serde_json::from_str::<ToolSpec>(text) {
                    Ok(t) => {
                        if t.name != stem {
                            problems.push(Problem::new(
                                path.as_str(),
                                crate::problem::line_of(text, "\"name\""),
                                format!("tool name `{}` differs from its file name; rename the file to tools/{}.json or the tool to `{stem}`", t.name, t.name),
                            ));
                        }
                        tools.push(t)
                    }
                    Err(e) => problems.push(Problem::new(
                        path.as_str(),
                        Some(e.line()),
                        format!("invalid tool definition: {e}"),
                    )),
                }
                continue;
            }
        }
        extra.insert(path.clone(), text.clone());
    }
    for (folder, has_skill) in skill_dirs {
        if !has_skill {
            problems.push(Problem::new(
                format!("skills/{folder}"),
                None,
                "skill folder has no SKILL.md",
            ));
        }
    }
    if let (Some(tp), None) = (&template_path, &template) {
        problems.push(Problem::new(
            "harness.toml",
            crate::problem::line_of(files.get("harness.toml").map_or("", |s| s), "template"),
            format!("[prompt] template names `{tp}`, which does not exist in the harness"),
        ));
    }
    let spec = manifest.map(|manifest| HarnessSpec {
        manifest,
        skills,
        tools,
        hooks,
        template,
        extra_files: extra,
    });
    (spec, problems)
}

fn toml_problem(path: &str, text: &str, e: &toml::de::Error) -> Problem {
    let line = e.span().map(|s| line_at(text, s.start));
    let msg = e.message().trim().to_string();
    Problem::new(path, line, format!("invalid TOML: {msg}"))
}

fn parse_skill(folder: &str, path: &str, text: &str) -> Result<SkillSpec, Problem> {
    let Some(rest) = text.strip_prefix("---\n") else {
        return Err(Problem::new(
            path,
            Some(1),
            "SKILL.md must start with YAML front matter between `---` lines",
        ));
    };
    let (front_text, body) = match rest.find("\n---") {
        Some(end) => {
            let after = &rest[end + 4..];
            let body = after.split_once('\n').map_or("", |(_, b)| b);
            (&rest[..end + 1], body)
        }
        None if rest.starts_with("---") => ("", rest.split_once('\n').map_or("", |(_, b)| b)),
        None => {
            return Err(Problem::new(
                path,
                Some(1),
                "front matter is not closed by a `---` line",
            ))
        }
    };
    // The YAML parser's time grows fast with nesting (`when: [[[...]]]` 32,000 deep took 8.5 s):
    // front matter is a few short keys, so its size and depth are bounded before parsing.
    if front_text.len() > MAX_FRONT_MATTER_BYTES {
        return Err(Problem::new(
            path,
            Some(1),
            format!(
                "front matter is {} bytes; at most {MAX_FRONT_MATTER_BYTES} (name, description, \
                 when and tools are short; instructions go in the body)",
                front_text.len()
            ),
        ));
    }
    let mut depth = 0usize;
    for (i, c) in front_text.chars().enumerate() {
        match c {
            '[' | '{' => depth += 1,
            ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > MAX_FRONT_MATTER_DEPTH {
            let line = front_text[..front_text.char_indices().nth(i).map_or(0, |(b, _)| b)]
                .matches('\n')
                .count()
                + 2;
            return Err(Problem::new(
                path,
                Some(line),
                format!("front matter nests more than {MAX_FRONT_MATTER_DEPTH} brackets deep"),
            ));
        }
    }
    let front: SkillFront = serde_yaml::from_str(front_text).map_err(|e| {
        let line = e.location().map(|l| l.line() + 1);
        Problem::new(path, line, format!("invalid front matter: {e}"))
    })?;
    Ok(SkillSpec {
        folder: folder.to_string(),
        front,
        body: body.trim().to_string(),
    })
}

impl HarnessSpec {
    /// The files this spec is written as. Deterministic: the same spec gives
    /// the same bytes, which is what the content hash and caching rely on.
    pub fn to_files(&self) -> FileMap {
        let mut out = FileMap::new();
        out.insert(
            "harness.toml".into(),
            toml::to_string(&self.manifest).expect("manifest serialises"),
        );
        for s in &self.skills {
            let front = serde_yaml::to_string(&s.front).expect("front matter serialises");
            out.insert(
                format!("skills/{}/SKILL.md", s.folder),
                format!("---\n{front}---\n{}\n", s.body),
            );
        }
        for t in &self.tools {
            let mut json = serde_json::to_string_pretty(t).expect("tool serialises");
            json.push('\n');
            out.insert(format!("tools/{}.json", t.name), json);
        }
        if !self.hooks.is_empty() {
            let file = HooksFile {
                hooks: self.hooks.clone(),
            };
            out.insert(
                "hooks.toml".into(),
                toml::to_string(&file).expect("hooks serialise"),
            );
        }
        if let (Some(path), Some(t)) = (&self.manifest.prompt.template, &self.template) {
            out.insert(path.clone(), t.clone());
        }
        for (k, v) in &self.extra_files {
            out.insert(k.clone(), v.clone());
        }
        out
    }

    /// Writes the spec under `dir` (created if missing). Files are written to
    /// a temporary name first and renamed, so a failure never leaves a torn file.
    pub fn write_to(&self, dir: &Path) -> Result<(), HarnessError> {
        write_files(&self.to_files(), dir)
    }
}

pub fn write_files(files: &FileMap, dir: &Path) -> Result<(), HarnessError> {
    let programs = hook_programs(files);
    for (rel, text) in files {
        let path = dir.join(rel);
        let err = |source| HarnessError::Write {
            path: path.display().to_string(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(err)?;
        }
        let tmp = path.with_extension("hat-tmp");
        std::fs::write(&tmp, text).map_err(err)?;
        // Hook scripts must stay runnable after a copy: those under hooks/, and any other a
        // command hook runs (`./scripts/mod.sh`); written without the bit it fails to start on
        // every event.
        #[cfg(unix)]
        if rel.starts_with("hooks/") || programs.contains(rel.as_str()) {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755));
        }
        std::fs::rename(&tmp, &path).map_err(err)?;
    }
    Ok(())
}

/// The files command hooks run (`./scripts/mod.sh` as `scripts/mod.sh`), as `hooks.toml` in
/// `files` names them.
fn hook_programs(files: &FileMap) -> std::collections::BTreeSet<String> {
    let Some(v) = files
        .get("hooks.toml")
        .and_then(|t| toml::from_str::<toml::Value>(t).ok())
    else {
        return Default::default();
    };
    v.get("hooks")
        .and_then(|h| h.as_array())
        .into_iter()
        .flatten()
        .filter_map(|hook| hook.get("command")?.as_array()?.first()?.as_str())
        .filter(|p| crate::command::is_local_program(p))
        .filter_map(|p| p.strip_prefix("./"))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skill_front_matter_round_trips() {
        let text =
            "---\nname: greet\ndescription: Say hi.\nwhen: viewer_join\n---\n1. Wave.\n2. Smile.\n";
        let s = parse_skill("greet", "skills/greet/SKILL.md", text).unwrap();
        assert_eq!(s.front.name, "greet");
        assert_eq!(s.front.when.as_deref(), Some("viewer_join"));
        assert_eq!(s.body, "1. Wave.\n2. Smile.");
    }

    /// Red-team finding: a folder past the file limit also got a false "harness.toml: missing"
    /// (the rest of the folder was unread, then parsed as if complete).
    #[test]
    fn a_folder_past_the_file_limit_reports_only_the_limit() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("tools")).unwrap();
        for i in 0..=MAX_FILES {
            std::fs::write(d.path().join(format!("tools/{i}.md")), "x").unwrap();
        }
        std::fs::write(d.path().join("zz.toml"), "x = 1").unwrap();
        let e = read_dir(d.path()).unwrap_err().to_string();
        assert!(e.contains("more than") && !e.contains("missing"), "{e}");
    }

    /// Red-team finding: an evaluation's `--out` inside a harness folder changed its hash, and
    /// a big enough one made the folder unreadable. Only the harness's own files are read.
    #[test]
    fn files_outside_the_harness_layout_are_not_read() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        for dir in [
            "skills/x", "tools", "hooks", "out/lsqa", "bin", "notes", "data",
        ] {
            std::fs::create_dir_all(p.join(dir)).unwrap();
        }
        #[cfg(unix)]
        std::os::unix::fs::symlink("/etc", p.join("prompts")).unwrap();
        std::fs::write(p.join("harness.toml"), "[prompt]\ntemplate = \"main.j2\"\n").unwrap();
        std::fs::write(
            p.join("hooks.toml"),
            "[[hooks]]\nid = \"a\"\ncommand = [\"./bin/check.sh\", \"data/banned.txt\", \"-v\"]\n\
             [[hooks]]\nid = \"b\"\ncommand = [\"./../escape.sh\"]\n",
        )
        .unwrap();
        for f in [
            "main.j2",
            "skills/x/SKILL.md",
            "skills/x/notes.txt",
            "tools/t.json",
            "hooks/h.sh",
            "bin/check.sh",
            "bin/other.sh",
            "data/banned.txt",
            "data/unrelated.txt",
            "README.md",
            "out/lsqa/items.jsonl",
            "notes/todo.md",
        ] {
            std::fs::write(p.join(f), "x").unwrap();
        }
        // an output too big for a harness file must not make the folder unreadable
        std::fs::write(
            p.join("out/big.jsonl"),
            vec![b'x'; MAX_FILE_BYTES as usize + 1],
        )
        .unwrap();
        let (files, problems) = read_dir(p).unwrap();
        #[cfg(unix)]
        assert!(
            problems.len() == 1 && problems[0].message.contains("symbolic link"),
            "a linked harness folder is reported, not skipped: {problems:?}"
        );
        let read: Vec<&str> = files.keys().map(|k| k.as_str()).collect();
        assert_eq!(
            read,
            [
                "bin/check.sh",
                "bin/other.sh",
                "data/banned.txt",
                "harness.toml",
                "hooks.toml",
                "hooks/h.sh",
                "main.j2",
                "skills/x/SKILL.md",
                "skills/x/notes.txt",
                "tools/t.json"
            ]
        );
    }

    /// Review finding: a hook program reached through a linked folder (`bin -> /opt/x`) was
    /// skipped by the reader but found by the existence check, so code outside ran.
    #[cfg(unix)]
    #[test]
    fn a_link_on_the_way_to_a_hook_program_is_reported() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("check.sh"), "#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("bin")).unwrap();
        std::fs::write(
            d.path().join("hooks.toml"),
            "[[hooks]]\nid = \"a\"\ncommand = [\"./bin/check.sh\"]\n",
        )
        .unwrap();
        let (files, problems) = read_dir(d.path()).unwrap();
        assert!(!files.contains_key("bin/check.sh"));
        assert!(
            problems.len() == 1
                && problems[0].file == "bin"
                && problems[0].message.contains("symbolic link"),
            "{problems:?}"
        );
    }

    /// Review finding: writing a harness (`hat augment`) kept the executable bit only under
    /// hooks/, so `command = ["./scripts/mod.sh"]` was written 0644 and failed to start.
    #[cfg(unix)]
    #[test]
    fn every_program_a_hook_runs_stays_executable_when_written() {
        use std::os::unix::fs::PermissionsExt;
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
        let (mut files, problems) = read_dir(&src).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        let script = files.remove("hooks/no-medical-claims.sh").unwrap();
        files.insert("scripts/mod.sh".into(), script);
        let hooks = files["hooks.toml"].replace("./hooks/no-medical-claims.sh", "./scripts/mod.sh");
        files.insert("hooks.toml".into(), hooks);
        let (spec, problems) = parse(&files);
        assert!(problems.is_empty(), "{problems:?}");
        let d = tempfile::tempdir().unwrap();
        spec.unwrap().write_to(d.path()).unwrap();
        let mode = |rel: &str| {
            std::fs::metadata(d.path().join(rel))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("scripts/mod.sh"), 0o755);
        assert_eq!(mode("hooks.toml") & 0o111, 0);
        crate::Harness::load(d.path()).unwrap();
    }

    /// Red-team finding: `when: [[[...]]]` 32,000 deep took 8.5 s to parse; 100 KB ran past 20 s.
    #[test]
    fn deep_or_huge_front_matter_is_refused_before_the_yaml_parser() {
        let deep = format!("---\nname: x\nwhen: {}\n---\nbody\n", "[".repeat(5_000));
        let p = parse_skill("x", "skills/x/SKILL.md", &deep).unwrap_err();
        assert!(
            p.message.contains("brackets deep") && p.line == Some(3),
            "{p}"
        );
        let huge = format!(
            "---\nname: x\ndescription: {}\n---\nbody\n",
            "a".repeat(40_000)
        );
        let p = parse_skill("x", "skills/x/SKILL.md", &huge).unwrap_err();
        assert!(p.message.contains("bytes"), "{p}");
    }

    #[test]
    fn skill_without_front_matter_is_a_problem() {
        let p = parse_skill("x", "skills/x/SKILL.md", "hello").unwrap_err();
        assert!(p.message.contains("front matter"), "{p}");
        let p = parse_skill("x", "skills/x/SKILL.md", "---\nname: x\n").unwrap_err();
        assert!(p.message.contains("not closed"), "{p}");
    }

    #[test]
    fn broken_toml_reports_the_line() {
        let mut files = FileMap::new();
        files.insert(
            "harness.toml".into(),
            "[harness]\nname = \"x\"\nversion = \n".into(),
        );
        let (spec, problems) = parse(&files);
        assert!(spec.is_none());
        assert_eq!(problems[0].file, "harness.toml");
        assert_eq!(problems[0].line, Some(3));
    }
}
