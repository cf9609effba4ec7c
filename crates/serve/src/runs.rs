//! Evaluation, training and A/B runs on disk, summarised for the console: every `hat eval`
//! result folder (`<run>/<suite>/results.json`), every training run (`<run>/metrics.jsonl`) and
//! every `hat ab run` result (`<run>/report.json`) directly under the server's `--runs` folder.
//! Read-only; nothing outside that folder.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

/// Runs listed at most (newest first by folder modification time).
pub const MAX_RUNS: usize = 200;
/// Points kept per training curve (evenly thinned beyond).
pub const MAX_POINTS: usize = 400;
/// Largest results or metrics file read.
const MAX_FILE_BYTES: u64 = 64 << 20;

#[derive(Debug, Clone, Serialize)]
pub struct EvalRun {
    pub name: String,
    /// Suite -> headline score (percent).
    pub scores: BTreeMap<String, f64>,
    pub model: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TrainRun {
    pub name: String,
    /// `[step, loss]`.
    pub loss: Vec<(u64, f64)>,
    /// `[step, validation loss]`.
    pub val_loss: Vec<(u64, f64)>,
}

/// A `hat ab run` on the simulated audience, its report in the form of a live experiment's
/// (`control`, `unit`, `alpha`, `arms`, `metrics[].comparisons[] = {arm, comparison}`), so the
/// console shows both alike.
#[derive(Debug, Clone, Serialize)]
pub struct AbRun {
    pub name: String,
    pub experiment: String,
    pub report: Value,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Runs {
    pub evals: Vec<EvalRun>,
    pub training: Vec<TrainRun>,
    pub ab: Vec<AbRun>,
}

fn read_json(path: &Path) -> Option<Value> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return None;
    }
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn eval_run(dir: &Path, name: &str) -> Option<EvalRun> {
    let mut scores = BTreeMap::new();
    let mut model = None;
    for suite in ["lsqa", "hvqa", "ifeval"] {
        let Some(v) = read_json(&dir.join(suite).join("results.json")) else {
            continue;
        };
        if let Some(s) = v["score"].as_f64().filter(|s| s.is_finite()) {
            scores.insert(suite.to_string(), s);
        }
        if model.is_none() {
            model = v["model"]["name"].as_str().map(str::to_string);
        }
    }
    (!scores.is_empty()).then(|| EvalRun {
        name: name.to_string(),
        scores,
        model,
    })
}

fn ab_run(dir: &Path, name: &str) -> Option<AbRun> {
    let mut v = read_json(&dir.join("report.json"))?;
    let experiment = v["experiment"].as_str()?.to_string();
    for m in v["metrics"].as_array_mut()? {
        let comparisons = m["comparisons"].as_array()?;
        let live: Vec<Value> = comparisons
            .iter()
            .filter_map(|c| {
                let (arm, cmp) = (c.get(0)?.as_str()?, c.get(1)?);
                Some(serde_json::json!({"arm": arm, "comparison": cmp}))
            })
            .collect();
        m["comparisons"] = Value::Array(live);
    }
    Some(AbRun {
        name: name.to_string(),
        experiment,
        report: v,
    })
}

fn thin(points: Vec<(u64, f64)>) -> Vec<(u64, f64)> {
    if points.len() <= MAX_POINTS {
        return points;
    }
    let step = points.len().div_ceil(MAX_POINTS);
    let last = *points.last().expect("non-empty");
    let mut out: Vec<_> = points.into_iter().step_by(step).collect();
    if out.last() != Some(&last) {
        out.push(last);
    }
    out
}

fn train_run(dir: &Path, name: &str) -> Option<TrainRun> {
    let path = dir.join("metrics.jsonl");
    let meta = std::fs::metadata(&path).ok()?;
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return None;
    }
    let f = std::fs::File::open(&path).ok()?;
    let (mut loss, mut val) = (Vec::new(), Vec::new());
    for line in std::io::BufReader::new(f).lines().map_while(Result::ok) {
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue; // a torn last line of a running job
        };
        let Some(step) = v["step"].as_u64() else {
            continue;
        };
        if let Some(l) = v["loss"].as_f64().filter(|x| x.is_finite()) {
            loss.push((step, l));
        }
        if let Some(l) = v["val_loss"].as_f64().filter(|x| x.is_finite()) {
            val.push((step, l));
        }
    }
    (!loss.is_empty()).then(|| TrainRun {
        name: name.to_string(),
        loss: thin(loss),
        val_loss: thin(val),
    })
}

/// The runs directly under `root` (none when it does not exist).
pub fn scan(root: &Path) -> Runs {
    let Ok(rd) = std::fs::read_dir(root) else {
        return Runs::default();
    };
    let mut dirs: Vec<(std::time::SystemTime, String, std::path::PathBuf)> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| {
            let t = e
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            (t, e.file_name().to_string_lossy().to_string(), e.path())
        })
        .collect();
    dirs.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut runs = Runs::default();
    for (_, name, path) in dirs.into_iter().take(MAX_RUNS) {
        if let Some(e) = eval_run(&path, &name) {
            runs.evals.push(e);
        }
        if let Some(t) = train_run(&path, &name) {
            runs.training.push(t);
        }
        if let Some(a) = ab_run(&path, &name) {
            runs.ab.push(a);
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_eval_and_training_runs_and_skips_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let e = d.path().join("eval-a/lsqa");
        std::fs::create_dir_all(&e).unwrap();
        std::fs::write(
            e.join("results.json"),
            r#"{"suite":"lsqa","score":53.5,"model":{"name":"m"}}"#,
        )
        .unwrap();
        let t = d.path().join("sft-a");
        std::fs::create_dir_all(&t).unwrap();
        let mut lines = String::new();
        for s in 1..=1000 {
            lines.push_str(&format!("{{\"step\":{s},\"loss\":{}}}\n", 1.0 / s as f64));
        }
        lines.push_str("{\"step\":1000,\"val_loss\":0.5}\n{\"step\":10"); // torn tail
        std::fs::write(t.join("metrics.jsonl"), lines).unwrap();
        std::fs::create_dir_all(d.path().join("empty")).unwrap();
        std::fs::write(d.path().join("stray.txt"), "x").unwrap();
        let r = scan(d.path());
        assert_eq!(r.evals.len(), 1);
        assert_eq!(r.evals[0].scores["lsqa"], 53.5);
        assert_eq!(r.evals[0].model.as_deref(), Some("m"));
        assert_eq!(r.training.len(), 1);
        let tr = &r.training[0];
        assert!(tr.loss.len() <= MAX_POINTS + 1 && tr.loss.len() > 100);
        assert_eq!(tr.loss.last().unwrap().0, 1000);
        assert_eq!(tr.val_loss, vec![(1000, 0.5)]);
        assert!(scan(&d.path().join("missing")).evals.is_empty());
    }

    #[test]
    fn an_ab_run_report_takes_the_live_experiments_form() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("ab-x");
        std::fs::create_dir_all(&a).unwrap();
        std::fs::write(
            a.join("report.json"),
            r#"{"experiment":"x","unit":"viewer","control":"base","arms":[{"name":"base"},{"name":"b"}],
               "metrics":[{"metric":"gmv","comparisons":[["b",{"mean_a":1.0,"mean_b":2.0}]]}]}"#,
        )
        .unwrap();
        let r = scan(d.path());
        assert_eq!(r.ab.len(), 1);
        assert_eq!(r.ab[0].experiment, "x");
        let c = &r.ab[0].report["metrics"][0]["comparisons"][0];
        assert_eq!(c["arm"], "b");
        assert_eq!(c["comparison"]["mean_b"], 2.0);
        assert!(r.evals.is_empty() && r.training.is_empty());
    }
}
