//! Checkpoints written atomically: weights and optimiser moments as safetensors, the step,
//! data cursor and counters as JSON, in a folder that appears under its final name only once
//! complete (written as `.tmp-*`, then renamed), with `latest` naming the newest. A run killed
//! at any moment keeps its previous checkpoint intact.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::durable;
use crate::error::{io, Result, TrainError};
use crate::optim::AdamW;
use hat_model::train::TrainModel;

/// Where the run stands.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Optimiser steps done.
    pub step: usize,
    /// Epoch of the data cursor.
    pub epoch: usize,
    /// Position in that epoch's pack order.
    pub cursor: usize,
    /// Tokens processed (packed sequence lengths).
    pub tokens: u64,
    /// Tokens that carried loss.
    pub loss_tokens: u64,
    /// Seconds spent in optimiser steps so far (across resumes): the time `tokens_per_s` is
    /// measured over.
    pub seconds: f64,
    /// Wall seconds of the run so far (across resumes): steps, validation and checkpoints.
    /// Zero in checkpoints written before it was recorded.
    #[serde(default)]
    pub wall_seconds: f64,
}

const LATEST: &str = "latest";

fn ckpt_root(run: &Path) -> PathBuf {
    run.join("checkpoints")
}

/// Writes a checkpoint of `step` and points `latest` at it; keeps the newest `keep`.
pub fn save(
    run: &Path,
    model: &TrainModel,
    opt: &AdamW,
    state: &RunState,
    keep: usize,
) -> Result<PathBuf> {
    let root = ckpt_root(run);
    std::fs::create_dir_all(&root).map_err(io(root.display()))?;
    let name = format!("step-{:06}", state.step);
    let tmp = root.join(format!(".tmp-{name}"));
    let dst = root.join(&name);
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io(tmp.display()))?;
    }
    std::fs::create_dir_all(&tmp).map_err(io(tmp.display()))?;
    let dev = Device::Cpu;
    let weights: HashMap<String, Tensor> = model
        .vars()
        .iter()
        .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
        .collect();
    candle_core::safetensors::save(&weights, tmp.join("model.safetensors"))?;
    let mut moments = HashMap::new();
    for (i, (n, _)) in model.vars().iter().enumerate() {
        moments.insert(
            format!("m.{n}"),
            Tensor::from_slice(&opt.m[i], opt.m[i].len(), &dev)?,
        );
        moments.insert(
            format!("v.{n}"),
            Tensor::from_slice(&opt.v[i], opt.v[i].len(), &dev)?,
        );
    }
    candle_core::safetensors::save(&moments, tmp.join("optim.safetensors"))?;
    let meta = serde_json::json!({"state": state, "adam_t": opt.t});
    std::fs::write(tmp.join("state.json"), serde_json::to_vec_pretty(&meta)?)
        .map_err(io(tmp.display()))?;
    // on the disk before any name points at it: a power cut must not leave `latest` naming
    // empty files while the older checkpoints are pruned
    for f in ["model.safetensors", "optim.safetensors", "state.json"] {
        durable::sync_file(&tmp.join(f)).map_err(io(tmp.join(f).display()))?;
    }
    durable::sync_dir(&tmp).map_err(io(tmp.display()))?;
    if dst.exists() {
        std::fs::remove_dir_all(&dst).map_err(io(dst.display()))?;
    }
    std::fs::rename(&tmp, &dst).map_err(io(dst.display()))?;
    durable::sync_dir(&root).map_err(io(root.display()))?;
    durable::write(&root.join(LATEST), &name).map_err(io(root.display()))?;
    // prune older complete checkpoints
    let all = by_step(&root).map_err(io(root.display()))?;
    let n = all.len();
    for (_, old) in all.into_iter().take(n.saturating_sub(keep.max(1))) {
        let _ = std::fs::remove_dir_all(root.join(old));
    }
    Ok(dst)
}

/// The checkpoint folders under `root` (`step-N`), oldest first by step number (names past
/// step 999,999 have more digits and would sort before older ones as text).
fn by_step(root: &Path) -> std::io::Result<Vec<(u64, String)>> {
    let mut all: Vec<(u64, String)> = std::fs::read_dir(root)?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let step = name.strip_prefix("step-")?.parse().ok()?;
            Some((step, name))
        })
        .collect();
    all.sort();
    Ok(all)
}

/// The model a run started from (`model` in its `config.toml`, whichever stage wrote it),
/// built the way the run trains it (with its `[lora]` adapters, if any), with the weights of
/// its latest checkpoint; and that checkpoint's step. What `hat train export` writes.
pub fn load_run(run: &Path) -> Result<(TrainModel, PathBuf, usize)> {
    let path = run.join("config.toml");
    let text = std::fs::read_to_string(&path).map_err(io(path.display()))?;
    let bad = |message: String| TrainError::Config {
        path: path.display().to_string(),
        message,
    };
    let cfg: toml::Value = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let source = cfg
        .get("model")
        .and_then(|m| m.as_str())
        .map(PathBuf::from)
        .ok_or_else(|| bad("names no starting `model`".into()))?;
    let lora: Option<hat_model::train::LoraConfig> = match cfg.get("lora") {
        Some(l) => Some(
            l.clone()
                .try_into()
                .map_err(|e| bad(format!("[lora]: {e}")))?,
        ),
        None => None,
    };
    let dir = latest(run)?.ok_or_else(|| TrainError::Checkpoint {
        path: run.join("checkpoints"),
        message: "the run has no checkpoint yet".into(),
    })?;
    let model = TrainModel::load_maybe_lora(&source, lora.as_ref())?.model;
    let step = load_weights(&dir, &model)?;
    Ok((model, source, step))
}

/// The newest complete checkpoint of a run, if any.
pub fn latest(run: &Path) -> Result<Option<PathBuf>> {
    let root = ckpt_root(run);
    match std::fs::read_to_string(root.join(LATEST)) {
        Ok(name) => {
            let name = name.trim();
            // `latest` holds a folder name written by `save`; anything else (an absolute path,
            // `..`) would make export read a model from outside the run.
            if name.is_empty()
                || name.len() > 255
                || name.contains(['/', '\\'])
                || name == ".."
                || name == "."
            {
                return Err(TrainError::Checkpoint {
                    path: root.join(LATEST),
                    message: format!(
                        "`latest` must hold a checkpoint folder's name, not `{}`",
                        name.chars().take(80).collect::<String>()
                    ),
                });
            }
            let p = root.join(name);
            if p.join("state.json").exists() {
                Ok(Some(p))
            } else {
                Err(TrainError::Checkpoint {
                    path: p,
                    message: "`latest` names a checkpoint that is not there".into(),
                })
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(TrainError::Io {
            path: root.display().to_string(),
            source: e,
        }),
    }
}

/// Restores only the weights of a checkpoint folder (what export needs), and returns its step.
pub fn load_weights(dir: &Path, model: &TrainModel) -> Result<usize> {
    let file = dir.join("model.safetensors");
    // candle's message ("header too small") names no file
    let weights = candle_core::safetensors::load(&file, &Device::Cpu).map_err(|e| {
        TrainError::Checkpoint {
            path: file.clone(),
            message: format!("cannot read the checkpoint's weights: {e}"),
        }
    })?;
    model.set_weights(&weights)?;
    Ok(read_meta(dir)?["state"]["step"].as_u64().unwrap_or(0) as usize)
}

/// A checkpoint folder's `state.json` (run state and AdamW's step count).
fn read_meta(dir: &Path) -> Result<serde_json::Value> {
    Ok(serde_json::from_slice(
        &std::fs::read(dir.join("state.json")).map_err(io(dir.display()))?,
    )?)
}

/// Whether `run` holds a run's checkpoints: the name of the newest checkpoint folder (or of
/// the `latest` pointer when no folder is left), for refusing to start a new run over it.
pub fn existing(run: &Path) -> Option<String> {
    let root = ckpt_root(run);
    let newest = by_step(&root).ok()?.pop().map(|(_, name)| name);
    newest.or_else(|| root.join(LATEST).is_file().then(|| LATEST.to_string()))
}

/// The step of a run's newest checkpoint (`None` before the first), without loading weights:
/// what a resumed run may not be shortened below.
pub fn latest_step(run: &Path) -> Result<Option<usize>> {
    let Some(dir) = latest(run)? else {
        return Ok(None);
    };
    match read_meta(&dir)?["state"]["step"].as_u64() {
        Some(s) => Ok(Some(s as usize)),
        None => Err(TrainError::Checkpoint {
            path: dir.join("state.json"),
            message: "state.json holds no `state.step`".into(),
        }),
    }
}

/// Restores weights, optimiser state and run state from a checkpoint folder.
pub fn load(dir: &Path, model: &TrainModel, opt: &mut AdamW) -> Result<RunState> {
    let bad = |message: String| TrainError::Checkpoint {
        path: dir.to_path_buf(),
        message,
    };
    let dev = Device::Cpu;
    let weights = candle_core::safetensors::load(dir.join("model.safetensors"), &dev)?;
    model.set_weights(&weights)?;
    let moments = candle_core::safetensors::load(dir.join("optim.safetensors"), &dev)?;
    for (i, (n, _)) in model.vars().iter().enumerate() {
        for (key, dst) in [
            (format!("m.{n}"), &mut opt.m[i]),
            (format!("v.{n}"), &mut opt.v[i]),
        ] {
            let t = moments
                .get(&key)
                .ok_or_else(|| bad(format!("optimiser state lacks `{key}`")))?;
            let v = t.to_vec1::<f32>()?;
            if v.len() != dst.len() {
                return Err(bad(format!(
                    "`{key}` has {} values, the model {}",
                    v.len(),
                    dst.len()
                )));
            }
            *dst = v;
        }
    }
    let meta = read_meta(dir)?;
    opt.t = meta["adam_t"]
        .as_u64()
        .ok_or_else(|| bad("state.json lacks adam_t".into()))?;
    Ok(serde_json::from_value(meta["state"].clone())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Red-team finding: a `latest` holding an absolute path was followed outside the run.
    #[test]
    fn latest_names_a_folder_of_the_run_only() {
        let d = tempfile::tempdir().unwrap();
        let root = ckpt_root(d.path());
        std::fs::create_dir_all(root.join("step-000001")).unwrap();
        std::fs::write(root.join("step-000001/state.json"), "{}").unwrap();
        std::fs::write(root.join(LATEST), "step-000001\n").unwrap();
        assert_eq!(latest(d.path()).unwrap(), Some(root.join("step-000001")));
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("state.json"), "{}").unwrap();
        for bad in [
            outside.path().display().to_string(),
            "../..".into(),
            "..".into(),
        ] {
            std::fs::write(root.join(LATEST), &bad).unwrap();
            let e = latest(d.path()).unwrap_err().to_string();
            assert!(e.contains("checkpoint folder's name"), "{bad}: {e}");
        }
    }

    #[test]
    fn checkpoints_order_by_step_number_past_a_million_steps() {
        let d = tempfile::tempdir().unwrap();
        let root = ckpt_root(d.path());
        for n in [
            "step-999995",
            "step-1000000",
            "step-000010",
            ".tmp-step-000011",
        ] {
            std::fs::create_dir_all(root.join(n)).unwrap();
        }
        let names: Vec<String> = by_step(&root).unwrap().into_iter().map(|x| x.1).collect();
        assert_eq!(names, ["step-000010", "step-999995", "step-1000000"]);
        assert_eq!(existing(d.path()).as_deref(), Some("step-1000000"));
    }
}
