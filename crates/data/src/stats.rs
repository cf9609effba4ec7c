//! Summaries of a dataset file.

use std::collections::BTreeMap;
use std::fmt;
use std::io::BufRead;
use std::path::Path;

use crate::record::Record;
use crate::DataError;

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Stats {
    pub records: usize,
    pub by_task_type: BTreeMap<String, usize>,
    pub by_harness: BTreeMap<String, usize>,
    pub by_syntax: BTreeMap<String, usize>,
    pub by_lang: BTreeMap<String, usize>,
    pub by_teacher: BTreeMap<String, usize>,
    pub calls_per_record: BTreeMap<usize, usize>,
    pub messages_total: usize,
    pub chars_total: usize,
    pub system_chars_max: usize,
    /// Records with an untrained assistant turn (`weight: 0`) that made calls: a recovery detour.
    pub detours: usize,
}

impl Stats {
    pub fn add(&mut self, r: &Record) {
        self.records += 1;
        *self.by_task_type.entry(r.task_type.clone()).or_default() += 1;
        *self.by_harness.entry(r.harness_hash.clone()).or_default() += 1;
        *self.by_syntax.entry(r.call_syntax.clone()).or_default() += 1;
        *self.by_lang.entry(r.lang.clone()).or_default() += 1;
        *self.by_teacher.entry(r.teacher.clone()).or_default() += 1;
        *self.calls_per_record.entry(r.calls.len()).or_default() += 1;
        self.messages_total += r.messages.len();
        if (0..r.messages.len()).any(|k| hat_harness::chat::opens_detour(&r.messages, k)) {
            self.detours += 1;
        }
        self.chars_total += r
            .messages
            .iter()
            .map(|m| m.content.chars().count())
            .sum::<usize>();
        if let Some(s) = r.messages.first() {
            self.system_chars_max = self.system_chars_max.max(s.content.chars().count());
        }
    }

    /// Reads a JSONL file; a malformed line is an error naming its line number.
    pub fn of_file(path: &Path) -> Result<Stats, DataError> {
        let f =
            std::fs::File::open(path).map_err(|e| DataError::Io(path.display().to_string(), e))?;
        let mut s = Stats::default();
        for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
            let line = crate::jsonl_line(path, i, line)?;
            if line.trim().is_empty() {
                continue;
            }
            let r: Record =
                serde_json::from_str(line.trim_start_matches('\u{feff}')).map_err(|e| {
                    DataError::Parse {
                        file: path.display().to_string(),
                        line: i + 1,
                        message: e.to_string(),
                    }
                })?;
            s.add(&r);
        }
        Ok(s)
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.records.max(1);
        writeln!(f, "records            {}", self.records)?;
        writeln!(f, "harness states     {}", self.by_harness.len())?;
        writeln!(
            f,
            "messages/record    {:.1}",
            self.messages_total as f64 / n as f64
        )?;
        writeln!(
            f,
            "chars/record       {:.0}",
            self.chars_total as f64 / n as f64
        )?;
        writeln!(f, "max system prompt  {} chars", self.system_chars_max)?;
        if self.detours > 0 {
            writeln!(
                f,
                "recovery detours   {} ({:.1}%; their wrong turn is not trained)",
                self.detours,
                self.detours as f64 * 100.0 / n as f64
            )?;
        }
        let line = |m: &BTreeMap<String, usize>| {
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        writeln!(f, "call syntax        {}", line(&self.by_syntax))?;
        writeln!(f, "language           {}", line(&self.by_lang))?;
        writeln!(f, "teacher            {}", line(&self.by_teacher))?;
        writeln!(
            f,
            "calls/record       {}",
            self.calls_per_record
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect::<Vec<_>>()
                .join(" ")
        )?;
        writeln!(f, "task types ({}):", self.by_task_type.len())?;
        for (k, v) in &self.by_task_type {
            writeln!(f, "  {k:<22}{v}")?;
        }
        Ok(())
    }
}
