//! Progress bars for long work: drawn on a terminal; on a log file (stderr not a terminal) the
//! same line is written as plain text at most every [`LOG_EVERY`], so a background evaluation's
//! log shows how far it got instead of staying empty until the end.

use std::io::{self, IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

/// How often a bar writes its line to a log file.
pub const LOG_EVERY: Duration = Duration::from_secs(30);

/// A bar for `total` items labelled `what`: drawn on a terminal, logged as plain lines
/// otherwise.
pub fn bar(total: u64, what: &str) -> ProgressBar {
    let pb = terminal_bar(total, what);
    if !std::io::stderr().is_terminal() {
        log_to(&pb, io::stderr(), LOG_EVERY);
    }
    pb
}

/// Sends `pb`'s redraws to `out` as plain lines, at most one per `every`.
fn log_to<W: Write + Send + std::fmt::Debug + 'static>(pb: &ProgressBar, out: W, every: Duration) {
    // indicatif's rate and ETA misread positions that jump (items come back a batch at a time;
    // a resume starts at the items on disk), so a log line shows the elapsed time.
    pb.set_style(
        ProgressStyle::with_template("{msg} {pos}/{len} elapsed {elapsed_precise}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.set_draw_target(ProgressDrawTarget::term_like_with_hz(
        Box::new(LogLines::new(out, every)),
        1,
    ));
}

/// A bar drawn on a terminal only: for callers that write their own log lines when stderr is
/// not a terminal (`hat train`'s step lines carry more than the bar).
pub fn terminal_bar(total: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("{msg:>10} [{bar:30}] {pos}/{len} {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

/// A draw target that turns indicatif's redraws into plain lines: the text of one redraw is
/// collected until `flush` and written as one line when `every` has passed since the last one
/// (the first non-empty redraw always). Cursor moves and clears are dropped.
#[derive(Debug)]
struct LogLines<W: Write + Send + std::fmt::Debug> {
    state: Mutex<LogState<W>>,
    every: Duration,
}

#[derive(Debug)]
struct LogState<W> {
    out: W,
    pending: String,
    last: Option<Instant>,
}

impl<W: Write + Send + std::fmt::Debug> LogLines<W> {
    fn new(out: W, every: Duration) -> Self {
        LogLines {
            state: Mutex::new(LogState {
                out,
                pending: String::new(),
                last: None,
            }),
            every,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut LogState<W>) -> T) -> T {
        // A poisoned lock only means another thread panicked mid-write; the text is still usable.
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut s)
    }
}

impl<W: Write + Send + std::fmt::Debug> TermLike for LogLines<W> {
    fn width(&self) -> u16 {
        // Wide enough that indicatif never wraps a line: the log has no width.
        400
    }
    fn height(&self) -> u16 {
        50
    }
    fn move_cursor_up(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn move_cursor_down(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn move_cursor_right(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn move_cursor_left(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn write_line(&self, s: &str) -> io::Result<()> {
        self.with(|st| {
            st.pending.push_str(s);
            st.pending.push(' ');
        });
        Ok(())
    }
    fn write_str(&self, s: &str) -> io::Result<()> {
        self.with(|st| st.pending.push_str(s));
        Ok(())
    }
    fn clear_line(&self) -> io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        let every = self.every;
        self.with(|st| {
            let due = st.last.is_none_or(|t| t.elapsed() >= every);
            let line = st.pending.trim();
            let written = if due && !line.is_empty() {
                st.last = Some(Instant::now());
                writeln!(st.out, "{line}").and_then(|()| st.out.flush())
            } else {
                Ok(())
            };
            st.pending.clear();
            written
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A shared buffer the test can read after the bar wrote to it.
    #[derive(Debug, Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    fn logged_bar(out: &Shared, every: Duration) -> ProgressBar {
        let pb = terminal_bar(10, "lsqa");
        log_to(&pb, out.clone(), every);
        pb
    }

    #[test]
    fn a_log_gets_plain_lines_with_the_position() {
        let out = Shared::default();
        let pb = logged_bar(&out, Duration::ZERO);
        pb.set_position(3);
        pb.set_position(7);
        pb.finish_and_clear();
        let text = out.text();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines
            .iter()
            .any(|l| l.contains("lsqa") && l.contains("3/10")));
        assert!(lines.iter().any(|l| l.contains("7/10")), "{text}");
        // No terminal control sequences and no padding reach the log.
        assert!(!text.contains('\x1b') && !text.contains('\r'), "{text:?}");
        assert!(lines.iter().all(|l| l == &l.trim()), "{text:?}");
    }

    #[test]
    fn a_log_is_written_at_most_once_per_interval() {
        let out = Shared::default();
        let pb = logged_bar(&out, Duration::from_secs(3600));
        for i in 1..=10 {
            pb.set_position(i);
        }
        pb.finish_and_clear();
        // The first redraw is written, the rest fall inside the hour.
        assert_eq!(out.text().lines().count(), 1, "{}", out.text());
    }
}
