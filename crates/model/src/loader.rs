//! One entry point that loads a GGUF file or a Hugging Face folder.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::Device;

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::hf::HfFolder;
use crate::model::{LoadOptions, Transformer};
use crate::tokenizer::Tokenizer;
use crate::weights::WeightMap;

/// Facts about a model, as `hat model info` prints them.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    pub source: String,
    pub config: ModelConfig,
    pub parameters: usize,
    pub tensor_formats: BTreeMap<String, usize>,
    pub pre_tokenizer: String,
    pub chat_template: Option<String>,
}

/// Model, tokenizer and chat template loaded together.
#[derive(Debug)]
pub struct Loaded {
    pub model: Transformer,
    pub tokenizer: Tokenizer,
    pub chat_template: Option<String>,
    pub info: ModelInfo,
}

/// Reads only what `info` needs (no tensor data for GGUF).
pub fn inspect(path: &Path) -> Result<(ModelInfo, Tokenizer)> {
    let (info, tok, _) = open(path, false)?;
    Ok((info, tok))
}

/// Opens a GGUF file or a Hugging Face folder once: facts, tokenizer, and the weights when
/// `weights` is set (a folder's weights are read either way: its tensor formats come from them).
fn open(path: &Path, weights: bool) -> Result<(ModelInfo, Tokenizer, Option<WeightMap>)> {
    if !path.exists() {
        return Err(Error::ModelNotFound(path.to_path_buf()));
    }
    if path.is_dir() {
        let f = HfFolder::open(path)?;
        let config = f.config()?;
        let spec = f.tokenizer_spec()?;
        let pre = spec.pre_patterns.join(" | ");
        let tok = Tokenizer::new(spec)?;
        let w = f.load_tensors(&Device::Cpu)?;
        let info = ModelInfo {
            source: format!("safetensors folder {}", path.display()),
            parameters: config.parameter_count(),
            config,
            tensor_formats: w.format_counts(),
            pre_tokenizer: pre,
            chat_template: f.chat_template(),
        };
        Ok((info, tok, weights.then_some(w)))
    } else {
        let g = GgufFile::open(path)?;
        let config = g.config()?;
        let tok = Tokenizer::new(g.tokenizer_spec()?)?;
        let info = ModelInfo {
            source: format!("gguf {}", path.display()),
            parameters: g.tensor_elements(),
            config,
            tensor_formats: g.tensor_formats(),
            pre_tokenizer: g.pre_tokenizer_name().unwrap_or_default(),
            chat_template: g.chat_template(),
        };
        let w = if weights {
            Some(g.load_tensors(&Device::Cpu)?)
        } else {
            None
        };
        Ok((info, tok, w))
    }
}

/// Loads everything from a GGUF file or a Hugging Face folder.
pub fn load(path: &Path, opts: LoadOptions) -> Result<Loaded> {
    quiet_candle_pool();
    let device = Device::Cpu;
    let (info, tokenizer, weights) = open(path, true)?;
    let mut weights = weights.ok_or_else(|| Error::Missing("model weights".into()))?;
    let model = Transformer::load(info.config.clone(), &mut weights, opts, &device)?;
    Ok(Loaded {
        model,
        tokenizer,
        chat_template: info.chat_template.clone(),
        info,
    })
}

/// candle runs large element-wise ops (the residual adds of a prefill) on its own thread pool,
/// whose workers then spin for 25,000 iterations before sleeping; on a 2-core machine that
/// spinning takes a core from the kernels' rayon threads (4% of prefill samples). Unless the
/// user set `CANDLE_BARRIER_POOL_SPIN_LIMIT`, make them sleep at once. Takes effect when
/// candle's pool starts, i.e. before the first such op.
fn quiet_candle_pool() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("CANDLE_BARRIER_POOL_SPIN_LIMIT").is_none() {
            std::env::set_var("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0");
        }
    });
}

/// Loads only the tokenizer of a model.
pub fn load_tokenizer(path: &Path) -> Result<Tokenizer> {
    if path.is_dir() {
        Tokenizer::new(HfFolder::open(path)?.tokenizer_spec()?)
    } else {
        Tokenizer::new(GgufFile::open(path)?.tokenizer_spec()?)
    }
}
