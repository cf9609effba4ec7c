//! External command hooks: the Claude Code hook contract.
//!
//! The event goes to the program as JSON on stdin. Exit 0 allows (stdout may
//! hold a JSON decision), exit 2 blocks (stderr is the reason fed back to the
//! model); any other exit, a crash or a timeout is a hook failure that the
//! hook's policy handles, and so is an answer that cannot be read. When the hook exits,
//! whatever it left running is killed. The stream waits at most the timeout for the hook,
//! then at most a second for its output.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use serde_json::Value;
use wait_timeout::ChildExt;

/// At most this much of a hook's stdout or stderr is read.
pub const MAX_OUTPUT_BYTES: u64 = 64 * 1024;
pub const DEFAULT_TIMEOUT_MS: u64 = 1000;

#[derive(Debug, Clone, PartialEq)]
pub enum CommandOutcome {
    /// Exit 0; the parsed JSON decision if stdout held one.
    Allow(Option<Value>),
    /// Exit 2, with the reason from stderr.
    Block(String),
    /// Anything else: the program could not run, crashed, timed out, or printed invalid JSON.
    Failed(String),
}

/// The `PATH` a hook runs with: its environment is otherwise empty, so nothing of the
/// server's (keys, tokens) reaches it.
pub const HOOK_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Whether `prog` names a file inside the harness folder: `./a/b`, no `..`, `.` or empty
/// component, no backslash.
pub fn is_local_program(prog: &str) -> bool {
    let Some(rest) = prog.strip_prefix("./") else {
        return false;
    };
    !rest.is_empty()
        && !rest.contains('\\')
        && rest
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Most variables a command hook may declare.
pub const MAX_ENV: usize = 32;

/// A variable name a hook may ask for: letters, digits and `_`, not starting with a digit,
/// at most 64 characters, and not `PATH` (hooks always get [`HOOK_PATH`]).
pub fn valid_env_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name != "PATH"
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Runs `argv` with `input` on stdin, from `cwd` when given, with an empty environment apart
/// from [`HOOK_PATH`] and the declared variables `env` that the server's environment has.
pub fn run(
    argv: &[String],
    env: &[String],
    cwd: Option<&Path>,
    input: &Value,
    timeout: Duration,
) -> CommandOutcome {
    let Some((prog, args)) = argv.split_first() else {
        return CommandOutcome::Failed("empty command".into());
    };
    // A relative program path is resolved against the harness folder here,
    // not by the OS against a working directory that is itself relative.
    let program = match (cwd, prog.starts_with("./") || prog.starts_with("../")) {
        (Some(dir), true) => std::fs::canonicalize(dir)
            .unwrap_or_else(|_| dir.to_path_buf())
            .join(prog)
            .into_os_string(),
        _ => prog.into(),
    };
    let mut cmd = Command::new(program);
    cmd.env_clear().env("PATH", HOOK_PATH);
    for name in env.iter().filter(|n| valid_env_name(n)) {
        if let Some(v) = std::env::var_os(name) {
            cmd.env(name, v);
        }
    }
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    // Its own process group, so a timeout kills what the hook started too (a `sleep` under
    // `sh` outlived a killed shell).
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return CommandOutcome::Failed(format!("cannot start `{prog}`: {e}")),
    };
    let payload = input.to_string();
    let stdin = child.stdin.take();
    // Writing and reading happen on threads so a program that never reads its
    // input, or floods its output, cannot block the stream past the timeout. The threads end
    // when this call returns, even if a process the hook started outside its group
    // (`setsid`) holds the pipes open for good: otherwise each such turn leaked them.
    let stop = StopOnDrop::default();
    let stop_writing = stop.0.clone();
    std::thread::spawn(move || {
        if let Some(s) = stdin {
            write_pipe(s, payload.as_bytes(), &stop_writing);
        }
    });
    let out_rx = read_pipe(child.stdout.take(), stop.0.clone());
    let err_rx = read_pipe(child.stderr.take(), stop.0.clone());
    let waited = child.wait_timeout(timeout);
    // Whatever the hook left running goes with it, so nothing it started outlives the turn,
    // and its children's copies of stdout and stderr close: the pipes are read to their end,
    // which a child left running (`sleep 100 &`) would otherwise hold off for good.
    kill_group(&child);
    let status = match waited {
        Ok(Some(s)) => s,
        Ok(None) => {
            let _ = child.kill();
            let _ = child.wait();
            return CommandOutcome::Failed(format!(
                "`{prog}` timed out after {} ms",
                timeout.as_millis()
            ));
        }
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return CommandOutcome::Failed(format!("waiting for `{prog}` failed: {e}"));
        }
    };
    // The group is dead, so the pipes close at once, unless a process the hook started left
    // the group (`setsid`) and still holds one; the wait for it is bounded.
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    let Ok((stdout, out_over)) =
        out_rx.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
    else {
        // Its decision cannot be known: a failure for the hook's on_error, never an allow.
        return CommandOutcome::Failed(format!(
            "`{prog}` exited but its stdout stayed open (a process it started outside its \
             process group holds it), so its answer cannot be read; a hook must not leave \
             processes running"
        ));
    };
    // Unreadable stderr is no reason: exit 2 still blocks, with the default reason.
    let (stderr, err_over) = err_rx
        .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
        .unwrap_or_default();
    if out_over || err_over {
        return CommandOutcome::Failed(format!(
            "`{prog}` wrote more than {MAX_OUTPUT_BYTES} bytes to its {}; a hook answers with a \
             short JSON object",
            if out_over { "stdout" } else { "stderr" }
        ));
    }
    match status.code() {
        Some(0) => {
            let t = stdout.trim();
            if t.is_empty() {
                CommandOutcome::Allow(None)
            } else {
                match serde_json::from_str::<Value>(t) {
                    Ok(v) if v.is_object() => CommandOutcome::Allow(Some(v)),
                    _ => CommandOutcome::Failed(format!(
                        "`{prog}` exited 0 but stdout is not a JSON object: {}",
                        crate::text::truncate_chars(t, 120)
                    )),
                }
            }
        }
        Some(2) => {
            let reason = stderr.trim();
            CommandOutcome::Block(if reason.is_empty() {
                format!("blocked by `{prog}`")
            } else {
                reason.to_string()
            })
        }
        Some(code) => CommandOutcome::Failed(format!(
            "`{prog}` exited with status {code}: {}",
            crate::text::truncate_chars(stderr.trim(), 200)
        )),
        None => CommandOutcome::Failed(format!("`{prog}` was killed by a signal")),
    }
}

/// Kills the process group [`run`] made for `child`, what the hook started included. After
/// the hook itself has been reaped its id cannot go to another process while the group still
/// has members, and an empty group makes this a no-op.
fn kill_group(child: &std::process::Child) {
    #[cfg(unix)]
    // SAFETY: signals the process group this function's caller created for the child.
    unsafe {
        libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
    }
    #[cfg(not(unix))]
    let _ = child;
}

/// Set when [`run`] returns, whichever way: the pipe threads stop waiting then.
#[derive(Default)]
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// How long a pipe thread waits for its pipe before it looks at the stop flag again.
const PIPE_POLL: Duration = Duration::from_millis(50);

/// Reads up to [`MAX_OUTPUT_BYTES`] of a pipe, to its end or until `stop` is set; the flag
/// says there was more.
fn read_pipe<R: Read + Send + 'static + PipeFd>(
    pipe: Option<R>,
    stop: Arc<AtomicBool>,
) -> mpsc::Receiver<(String, bool)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut p) = pipe {
            let nonblocking = set_nonblocking(&p);
            let mut buf = [0u8; 8192];
            while !stop.load(Ordering::Relaxed) && bytes.len() as u64 <= MAX_OUTPUT_BYTES {
                match p.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => bytes.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) if nonblocking && e.kind() == std::io::ErrorKind::WouldBlock => {
                        wait_for(&p, false, PIPE_POLL)
                    }
                    Err(_) => break,
                }
            }
        }
        let over = bytes.len() as u64 > MAX_OUTPUT_BYTES;
        bytes.truncate(MAX_OUTPUT_BYTES as usize);
        let _ = tx.send((String::from_utf8_lossy(&bytes).into_owned(), over));
    });
    rx
}

/// Writes `bytes` to a pipe until they are all written, the reader is gone, or `stop` is set.
fn write_pipe<W: Write + PipeFd>(mut pipe: W, mut bytes: &[u8], stop: &AtomicBool) {
    let nonblocking = set_nonblocking(&pipe);
    while !bytes.is_empty() && !stop.load(Ordering::Relaxed) {
        match pipe.write(bytes) {
            Ok(0) => break,
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if nonblocking && e.kind() == std::io::ErrorKind::WouldBlock => {
                wait_for(&pipe, true, PIPE_POLL)
            }
            Err(_) => break,
        }
    }
}

/// A pipe end whose descriptor can be polled (every child pipe on unix).
#[cfg(unix)]
trait PipeFd: std::os::fd::AsRawFd {}
#[cfg(unix)]
impl<T: std::os::fd::AsRawFd> PipeFd for T {}
#[cfg(not(unix))]
trait PipeFd {}
#[cfg(not(unix))]
impl<T> PipeFd for T {}

/// Makes a pipe end non-blocking; false where it cannot (the thread then blocks as before).
fn set_nonblocking<P: PipeFd>(p: &P) -> bool {
    #[cfg(unix)]
    {
        let fd = p.as_raw_fd();
        // SAFETY: fcntl on a descriptor this thread owns, only adding O_NONBLOCK.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
        }
    }
    #[cfg(not(unix))]
    {
        let _ = p;
        false
    }
}

/// Waits up to `limit` for a pipe end to be readable (or writable).
fn wait_for<P: PipeFd>(p: &P, write: bool, limit: Duration) {
    #[cfg(unix)]
    {
        let mut fds = libc::pollfd {
            fd: p.as_raw_fd(),
            events: if write { libc::POLLOUT } else { libc::POLLIN },
            revents: 0,
        };
        // SAFETY: one pollfd for a descriptor this thread owns.
        unsafe {
            libc::poll(&mut fds, 1, limit.as_millis() as libc::c_int);
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (p, write);
        std::thread::sleep(limit);
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// Asserts that the process whose pid `pidfile` holds was killed: gone, or a zombie
    /// waiting for its new parent to reap it (polled for up to 10 s: a kill is not instant).
    #[cfg(target_os = "linux")]
    fn assert_killed(pidfile: &std::path::Path) {
        let pid = std::fs::read_to_string(pidfile).unwrap().trim().to_string();
        let dead = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |st| {
                st.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        };
        let mut tries = 0;
        while !dead() && tries < 100 {
            std::thread::sleep(Duration::from_millis(100));
            tries += 1;
        }
        assert!(dead(), "process {pid} outlived its hook");
    }
    use serde_json::json;

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    /// A pipe held open for good (by a process the hook started outside its group) does not
    /// keep its thread: the stop flag ends the read, with what came before it.
    #[test]
    fn a_pipe_thread_ends_when_the_call_returns() {
        let (reader, mut writer) = std::io::pipe().unwrap();
        writer.write_all(b"partial").unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let rx = read_pipe(Some(reader), stop.clone());
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
        stop.store(true, Ordering::Relaxed);
        let (text, over) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!((text.as_str(), over), ("partial", false));
        // a writer whose reader never reads stops too, past a full pipe buffer
        let (_reader, writer) = std::io::pipe().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let t = std::thread::spawn(move || write_pipe(writer, &vec![b'x'; 1 << 20], &flag));
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, Ordering::Relaxed);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !t.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(t.is_finished(), "the writer still waits on a full pipe");
    }

    #[test]
    fn only_local_programs_are_accepted() {
        for ok in ["./hooks/x.sh", "./x", "./a/b/c.py"] {
            assert!(is_local_program(ok), "{ok}");
        }
        for bad in [
            "",
            "sh",
            "/bin/sh",
            "./",
            "./../../../../bin/sh",
            "./a/../../b",
            "./a//b",
            "./a\\b",
            "hooks/x.sh",
            "././x",
        ] {
            assert!(!is_local_program(bad), "{bad}");
        }
    }

    /// Issue 13: output over 64 KiB was reported as "killed by a signal"; the environment of
    /// the server leaked into hooks.
    #[test]
    fn big_output_is_named_and_the_environment_is_empty() {
        let t = Duration::from_secs(10);
        let input = json!({"event": "before_reply", "reply": "hi"});
        match run(
            &sh("cat >/dev/null; head -c 200000 /dev/zero | tr '\\0' x"),
            &[],
            None,
            &input,
            t,
        ) {
            CommandOutcome::Failed(m) => {
                assert!(m.contains("more than 65536 bytes to its stdout"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            run(&sh("cat >/dev/null; echo \"{\\\"home\\\": \\\"$HOME\\\", \\\"path\\\": \\\"$PATH\\\"}\""), &[], None, &input, t),
            CommandOutcome::Allow(Some(json!({"home": "", "path": HOOK_PATH})))
        );
    }

    /// Issue 13: command hooks run with an empty environment apart from declared variables.
    #[test]
    fn only_declared_variables_reach_a_hook() {
        // set once for this test process; no other test reads these names
        std::env::set_var("HAT_TEST_HOOK_DECLARED", "yes");
        std::env::set_var("HAT_TEST_HOOK_SECRET", "no");
        let script = r#"cat >/dev/null; echo "{\"d\": \"$HAT_TEST_HOOK_DECLARED\", \"s\": \"$HAT_TEST_HOOK_SECRET\"}""#;
        let out = run(
            &sh(script),
            &["HAT_TEST_HOOK_DECLARED".into(), "PATH".into()],
            None,
            &json!({}),
            Duration::from_secs(5),
        );
        assert_eq!(
            out,
            CommandOutcome::Allow(Some(json!({"d": "yes", "s": ""})))
        );
        assert!(valid_env_name("MODERATION_URL") && !valid_env_name("PATH"));
        assert!(!valid_env_name("1X") && !valid_env_name("A-B") && !valid_env_name(""));
    }

    #[test]
    fn exit_codes_map_to_outcomes() {
        let t = Duration::from_secs(5);
        let input = json!({"event": "before_reply", "reply": "hi"});
        assert_eq!(
            run(&sh("cat >/dev/null"), &[], None, &input, t),
            CommandOutcome::Allow(None)
        );
        assert_eq!(
            run(
                &sh("cat >/dev/null; echo '{\"reply\": \"ok\"}'"),
                &[],
                None,
                &input,
                t
            ),
            CommandOutcome::Allow(Some(json!({"reply": "ok"})))
        );
        assert_eq!(
            run(
                &sh("echo 'no absolute claims' >&2; exit 2"),
                &[],
                None,
                &input,
                t
            ),
            CommandOutcome::Block("no absolute claims".into())
        );
        assert!(matches!(
            run(&sh("exit 7"), &[], None, &input, t),
            CommandOutcome::Failed(_)
        ));
        assert!(matches!(
            run(&sh("echo not-json"), &[], None, &input, t),
            CommandOutcome::Failed(_)
        ));
        assert!(matches!(
            run(&["/nonexistent/hook".into()], &[], None, &input, t),
            CommandOutcome::Failed(_)
        ));
    }

    #[test]
    fn the_hook_sees_the_event_on_stdin() {
        let input = json!({"reply": "hello"});
        let out = run(
            &sh("grep -q hello && echo '{}'"),
            &[],
            None,
            &input,
            Duration::from_secs(5),
        );
        assert_eq!(out, CommandOutcome::Allow(Some(json!({}))));
    }

    /// Regression: a relative harness folder made `./hooks/x.sh` resolve twice.
    #[test]
    fn relative_programs_resolve_against_a_relative_folder() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("h/hooks")).unwrap();
        let script = d.path().join("h/hooks/ok.sh");
        std::fs::write(&script, "#!/bin/sh\ncat >/dev/null\nexit 0\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let cwd = std::env::current_dir().unwrap();
        let rel = pathdiff(&d.path().join("h"), &cwd);
        let out = run(
            &["./hooks/ok.sh".into()],
            &[],
            Some(&rel),
            &json!({}),
            Duration::from_secs(5),
        );
        assert_eq!(out, CommandOutcome::Allow(None), "{}", rel.display());
    }

    fn pathdiff(target: &std::path::Path, base: &std::path::Path) -> std::path::PathBuf {
        let up = base.components().count() - 1;
        let mut p = std::path::PathBuf::new();
        for _ in 0..up {
            p.push("..");
        }
        p.join(target.strip_prefix("/").unwrap())
    }

    /// Red-team finding: a timed-out hook's children (`sleep` under `sh`) kept running.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_timeout_kills_what_the_hook_started() {
        let d = tempfile::tempdir().unwrap();
        let pidfile = d.path().join("pid");
        let script = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
        let out = run(
            &sh(&script),
            &[],
            None,
            &json!({}),
            Duration::from_millis(300),
        );
        assert!(matches!(out, CommandOutcome::Failed(ref m) if m.contains("timed out")));
        assert_killed(&pidfile);
    }

    /// Review finding: a hook that left a child holding its stdout (`sleep 100 &`) had its
    /// output lost (the read waited for an end of file that never came, and read as empty:
    /// an allow), and the child outlived the turn.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_child_left_running_is_killed_and_the_decision_kept() {
        let d = tempfile::tempdir().unwrap();
        let pidfile = d.path().join("pid");
        let script = format!(
            "cat >/dev/null; echo '{{\"reply\": \"redacted\"}}'; sleep 100 & echo $! > {}",
            pidfile.display()
        );
        let out = run(
            &sh(&script),
            &[],
            None,
            &json!({"reply": "call me at 555-0100"}),
            Duration::from_secs(30),
        );
        assert_eq!(
            out,
            CommandOutcome::Allow(Some(json!({"reply": "redacted"})))
        );
        // the read ended, so the child's end of the pipe closed: it was killed
        assert_killed(&pidfile);
    }

    /// A process that left the hook's group (`setsid`) still holds stdout after the group is
    /// killed: the hook's answer is unknown, which is a failure (its on_error decides),
    /// never an allow.
    #[cfg(target_os = "linux")]
    #[test]
    fn stdout_held_past_the_group_is_a_failure() {
        if !["/usr/bin/setsid", "/bin/setsid"]
            .iter()
            .any(|p| std::path::Path::new(p).exists())
        {
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let pidfile = d.path().join("pid");
        // the hook exits only once its child has left the group (it writes its pid from
        // inside the new session), so the kill cannot catch it first
        let script = format!(
            "cat >/dev/null; echo '{{\"reply\": \"redacted\"}}'; \
             setsid sh -c 'echo $$ > {p}; exec sleep 100' & \
             while [ ! -s {p} ]; do sleep 0.01; done",
            p = pidfile.display()
        );
        let out = run(&sh(&script), &[], None, &json!({}), Duration::from_secs(30));
        let pid: libc::pid_t = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // SAFETY: the test's own `sleep`, outside the group `run` killed.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
        assert!(
            matches!(out, CommandOutcome::Failed(ref m) if m.contains("stdout stayed open")),
            "{out:?}"
        );
    }

    #[test]
    fn a_hanging_hook_times_out() {
        let out = run(
            &sh("sleep 30"),
            &[],
            None,
            &json!({}),
            Duration::from_millis(100),
        );
        assert!(
            matches!(out, CommandOutcome::Failed(ref m) if m.contains("timed out")),
            "{out:?}"
        );
    }
}
