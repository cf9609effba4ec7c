//! Rollout snapshots: the trainer's current weights written as a GGUF the inference engine
//! loads (q8_0 for speed, f32 for the trainer's own numbers), and scoring of fixed token
//! sequences with an engine. On-policy stages (distillation, RL) sample from a snapshot
//! refreshed after every optimiser step.

use std::path::Path;

use candle_core::{DType, Device, Tensor, D};

use hat_model::train::TrainModel;
use hat_model::{Engine, LoadOptions, Tokenizer, WeightFormat};

use crate::error::{Result, TrainError};

/// Weight formats a snapshot may take.
pub const FORMATS: &[&str] = &["q8_0", "f32"];

/// Checks a snapshot format name; `field` names the config key in the error.
pub fn check_format(format: &str, field: &str) -> Result<()> {
    if FORMATS.contains(&format) {
        Ok(())
    } else {
        Err(TrainError::Config {
            path: "the training config".into(),
            message: format!("{field} `{format}` (known: {})", FORMATS.join(", ")),
        })
    }
}

/// Writes `model`'s weights to `path` in `format` (metadata from `source`, the run's starting
/// model) and returns the format to load it with (f32 stays f32; q8_0 keeps the file's formats).
pub fn write(model: &TrainModel, source: &Path, format: &str, path: &Path) -> Result<WeightFormat> {
    crate::export::gguf(model, source, format, path)?;
    Ok(if format == "f32" {
        WeightFormat::F32
    } else {
        WeightFormat::Original
    })
}

/// Loads an inference engine.
pub fn load_engine(path: &Path, format: WeightFormat) -> Result<Engine> {
    Ok(Engine::load(
        path,
        LoadOptions {
            format,
            ..Default::default()
        },
    )?)
}

/// Whether `other` (a teacher, a reference) reads the trained model's token ids as the same
/// text: the same vocabulary size and the same ids for a probe text. `role` names it and
/// `why` says what compares the two models' token ids, for the error.
pub(crate) fn same_tokenizer(
    student: &Tokenizer,
    other: &Engine,
    role: &str,
    path: &Path,
    why: &str,
) -> Result<()> {
    let probe = "Hi there! Is the hoodie (no.3) 20% off? 好的 ✨ <|im_end|>";
    let (a, b) = (student, &other.tokenizer);
    if a.vocab_size() != b.vocab_size() || a.encode(probe, false)? != b.encode(probe, false)? {
        return Err(TrainError::Invalid(format!(
            "the {role} {} does not share the trained model's tokenizer (vocabulary {} vs {}); \
             {why}, so use a model of the same family",
            path.display(),
            b.vocab_size(),
            a.vocab_size()
        )));
    }
    Ok(())
}

/// `model`'s current weights as an inference engine (see [`write`]).
pub fn engine(model: &TrainModel, source: &Path, format: &str, path: &Path) -> Result<Engine> {
    let f = write(model, source, format, path)?;
    load_engine(path, f)
}

/// Log-probabilities `(n - p, vocab)` that `engine` gives each token of `ids[p..]` (`p` the
/// prompt length, at least 1), computed on exactly those ids.
pub fn scored_rows(engine: &Engine, ids: &[u32], p: usize) -> Result<Tensor> {
    let mut rows = scored_group(engine, &[(ids, p)])?;
    rows.pop()
        .ok_or_else(|| TrainError::Invalid("no rows scored".into()))
}

/// [`scored_rows`] of several sequences `(ids, p)` that may begin with the same tokens (live-
/// stream prompts of one scene share a ~1,900-token system prompt): the common head is
/// computed once and each sequence continues from a copy of its cache.
pub fn scored_group(engine: &Engine, seqs: &[(&[u32], usize)]) -> Result<Vec<Tensor>> {
    let Some(&(first, _)) = seqs.first() else {
        return Ok(Vec::new());
    };
    for &(ids, p) in seqs {
        if p == 0 || p >= ids.len() {
            return Err(TrainError::Invalid(format!(
                "scoring {} tokens from position {p}: needs 1 <= p < n",
                ids.len()
            )));
        }
    }
    // the head ends before the first position any sequence needs logits for
    let head = seqs
        .iter()
        .map(|&(ids, p)| (p - 1).min(crate::pack::lcp(first, ids)))
        .min()
        .unwrap_or(0);
    let dev = Device::Cpu;
    let mut cache = engine.model.new_cache(1);
    if head > 0 {
        let h = Tensor::from_slice(&first[..head], (1, head), &dev)?;
        engine.model.forward_prompt(&h, &mut cache, true)?;
    }
    let mut out = Vec::with_capacity(seqs.len());
    for (i, &(ids, p)) in seqs.iter().enumerate() {
        // the last sequence takes the cache itself: no copy of the head
        let mut c = if i + 1 == seqs.len() {
            std::mem::replace(&mut cache, engine.model.new_cache(1))
        } else {
            cache.clone()
        };
        let n = ids.len();
        let rest = Tensor::from_slice(&ids[head..n - 1], (1, n - 1 - head), &dev)?;
        let logits = engine
            .model
            .forward_prompt(&rest, &mut c, false)?
            .squeeze(0)?;
        // rows for positions head+1..n; the scored ones are the last n - p
        let logits = logits.narrow(0, p - 1 - head, n - p)?;
        out.push(candle_nn::ops::log_softmax(
            &logits.to_dtype(DType::F32)?,
            D::Minus1,
        )?);
    }
    Ok(out)
}
