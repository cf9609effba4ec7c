//! GGUF files: metadata to config, tokenizer spec and chat template; tensors to a [`WeightMap`].

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::Device;

use crate::config::{Architecture, ModelConfig, RopeLayout};
use crate::error::{Error, Result};
use crate::tokenizer::{patterns_for_pre, TokenKind, TokenizerSpec};
use crate::weights::{RawTensor, WeightMap};

fn wrong_type(k: &str, v: &Value, want: &str) -> Error {
    Error::InvalidArgument(format!(
        "GGUF metadata `{k}` is {:?}, not {want} (a corrupt or hand-edited file)",
        v.value_type()
    ))
}

/// An opened GGUF file (header parsed, tensors not yet read).
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    content: Content,
}

impl GgufFile {
    /// Opens and parses the header, with clear errors for missing or corrupt files.
    pub fn open(path: &Path) -> Result<Self> {
        if !path.exists() {
            return Err(Error::ModelNotFound(path.to_path_buf()));
        }
        let f = File::open(path)?;
        let size = f.metadata()?.len();
        let mut r = BufReader::new(f);
        let corrupt = |reason: String| Error::CorruptModel {
            path: path.to_path_buf(),
            reason,
        };
        crate::gguf_check::precheck(&mut r).map_err(corrupt)?;
        let content = Content::read(&mut r).map_err(|e| corrupt(e.to_string()))?;
        crate::gguf_check::check_tensors(&content, size).map_err(corrupt)?;
        Ok(Self {
            path: path.to_path_buf(),
            content,
        })
    }

    /// Raw metadata.
    pub fn metadata(&self) -> &std::collections::HashMap<String, Value> {
        &self.content.metadata
    }

    fn get(&self, k: &str) -> Option<&Value> {
        self.content.metadata.get(k)
    }
    fn str(&self, k: &str) -> Option<String> {
        self.get(k).and_then(|v| v.to_string().ok().cloned())
    }
    fn uint(&self, k: &str) -> Option<u64> {
        self.get(k).and_then(|v| match v {
            Value::U8(x) => Some(*x as u64),
            Value::U16(x) => Some(*x as u64),
            Value::U32(x) => Some(*x as u64),
            Value::U64(x) => Some(*x),
            // a negative count is corrupt metadata, not a huge number
            Value::I32(x) => u64::try_from(*x).ok(),
            Value::I64(x) => u64::try_from(*x).ok(),
            _ => None,
        })
    }
    fn req_uint(&self, k: &str) -> Result<usize> {
        self.opt_uint(k)?
            .map(|x| x as usize)
            .ok_or_else(|| Error::Missing(format!("GGUF metadata `{k}`")))
    }
    /// An optional unsigned value: absent is `None`, present with another type an error.
    fn opt_uint(&self, k: &str) -> Result<Option<u64>> {
        match (self.get(k), self.uint(k)) {
            (_, Some(x)) => Ok(Some(x)),
            (None, None) => Ok(None),
            (Some(v), None) => Err(wrong_type(k, v, "a non-negative integer")),
        }
    }
    /// An optional float: absent is `None`, present with another type an error.
    fn opt_float(&self, k: &str) -> Result<Option<f64>> {
        match (self.get(k), self.float(k)) {
            (_, Some(x)) => Ok(Some(x)),
            (None, None) => Ok(None),
            (Some(v), None) => Err(wrong_type(k, v, "a float")),
        }
    }
    fn float(&self, k: &str) -> Option<f64> {
        self.get(k).and_then(|v| match v {
            Value::F32(x) => Some(*x as f64),
            Value::F64(x) => Some(*x),
            _ => None,
        })
    }
    fn boolean(&self, k: &str) -> Option<bool> {
        self.get(k).and_then(|v| v.to_bool().ok())
    }

    /// `general.architecture`, validated.
    pub fn architecture(&self) -> Result<Architecture> {
        let a = self
            .str("general.architecture")
            .ok_or_else(|| Error::Missing("general.architecture".into()))?;
        Architecture::parse(&a)
    }

    /// Model hyper-parameters.
    pub fn config(&self) -> Result<ModelConfig> {
        let arch = self.architecture()?;
        let p = arch.name();
        let hidden = self.req_uint(&format!("{p}.embedding_length"))?;
        let heads = self.req_uint(&format!("{p}.attention.head_count"))?;
        let kv = self
            .opt_uint(&format!("{p}.attention.head_count_kv"))?
            .map(|x| x as usize)
            .unwrap_or(heads);
        let head_dim = self
            .opt_uint(&format!("{p}.attention.key_length"))?
            .or(self.opt_uint(&format!("{p}.rope.dimension_count"))?)
            .map(|x| x as usize)
            .unwrap_or(hidden.checked_div(heads).unwrap_or(0));
        let vocab = match self.opt_uint(&format!("{p}.vocab_size"))? {
            Some(v) => v as usize,
            None => match self.get("tokenizer.ggml.tokens") {
                Some(Value::Array(a)) => a.len(),
                _ => return Err(Error::Missing("vocabulary size".into())),
            },
        };
        let tie = !self.content.tensor_infos.contains_key("output.weight");
        ModelConfig {
            arch,
            vocab_size: vocab,
            hidden_size: hidden,
            intermediate_size: self.req_uint(&format!("{p}.feed_forward_length"))?,
            num_layers: self.req_uint(&format!("{p}.block_count"))?,
            num_heads: heads,
            num_kv_heads: kv,
            head_dim,
            rms_eps: self
                .opt_float(&format!("{p}.attention.layer_norm_rms_epsilon"))?
                .unwrap_or(1e-5),
            rope_theta: self
                .opt_float(&format!("{p}.rope.freq_base"))?
                .unwrap_or(10000.0) as f32,
            rope_layout: match arch {
                Architecture::Llama => RopeLayout::Interleaved,
                Architecture::Qwen2 => RopeLayout::HalfSplit,
            },
            rope_scaling: None,
            rope_freq_factors: None,
            max_position: self
                .opt_uint(&format!("{p}.context_length"))?
                .map(|x| x as usize)
                .unwrap_or(4096),
            tie_embeddings: tie,
            attn_bias: self.content.tensor_infos.contains_key("blk.0.attn_q.bias"),
        }
        .validated()
    }

    /// Tokenizer spec from `tokenizer.ggml.*`.
    pub fn tokenizer_spec(&self) -> Result<TokenizerSpec> {
        let model = self.str("tokenizer.ggml.model").unwrap_or_default();
        if model != "gpt2" {
            return Err(Error::Tokenizer(format!(
                "tokenizer model `{model}` is not supported (only byte-level BPE, `gpt2`)"
            )));
        }
        let strings = |k: &str| -> Result<Vec<String>> {
            match self.get(k) {
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| {
                        v.to_string()
                            .cloned()
                            .map_err(|e| Error::Tokenizer(e.to_string()))
                    })
                    .collect(),
                _ => Err(Error::Missing(format!("GGUF metadata `{k}`"))),
            }
        };
        let tokens = strings("tokenizer.ggml.tokens")?;
        let merges = strings("tokenizer.ggml.merges").unwrap_or_default();
        let kinds = match self.get("tokenizer.ggml.token_type") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| match v {
                    Value::I32(x) => TokenKind::from_gguf_i32(*x),
                    Value::U32(x) => TokenKind::from_gguf_i32(*x as i32),
                    _ => TokenKind::Normal,
                })
                .collect(),
            _ => vec![TokenKind::Normal; tokens.len()],
        };
        let pre = self
            .str("tokenizer.ggml.pre")
            .unwrap_or_else(|| "default".into());
        let (pre_patterns, ignore_merges) = patterns_for_pre(&pre)?;
        let id = |k: &str| self.uint(k).map(|x| x as u32);
        let mut eog = Vec::new();
        for k in ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
            if let Some(x) = id(k) {
                eog.push(x);
            }
        }
        Ok(TokenizerSpec {
            tokens,
            kinds,
            merges,
            pre_patterns,
            ignore_merges,
            bos: id("tokenizer.ggml.bos_token_id"),
            eos: id("tokenizer.ggml.eos_token_id"),
            unk: id("tokenizer.ggml.unknown_token_id"),
            pad: id("tokenizer.ggml.padding_token_id"),
            add_bos: self
                .boolean("tokenizer.ggml.add_bos_token")
                .unwrap_or(false),
            eog,
        })
    }

    /// `tokenizer.ggml.pre`.
    pub fn pre_tokenizer_name(&self) -> Option<String> {
        self.str("tokenizer.ggml.pre")
    }

    /// The chat template, if the file has one.
    pub fn chat_template(&self) -> Option<String> {
        self.str("tokenizer.chat_template")
    }

    /// Count of tensors per ggml type.
    pub fn tensor_formats(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for t in self.content.tensor_infos.values() {
            *m.entry(format!("{:?}", t.ggml_dtype).to_lowercase())
                .or_insert(0) += 1;
        }
        m
    }

    /// Total elements over all tensors.
    pub fn tensor_elements(&self) -> usize {
        self.content
            .tensor_infos
            .values()
            .map(|t| t.shape.elem_count())
            .sum()
    }

    /// Reads every tensor.
    pub fn load_tensors(&self, device: &Device) -> Result<WeightMap> {
        let mut r = BufReader::new(File::open(&self.path)?);
        let mut map = WeightMap::new();
        let corrupt = |e: candle_core::Error| Error::CorruptModel {
            path: self.path.clone(),
            reason: e.to_string(),
        };
        for name in self.content.tensor_infos.keys() {
            let q = self.content.tensor(&mut r, name, device).map_err(corrupt)?;
            map.insert(name.clone(), RawTensor::Quant(q));
        }
        Ok(map)
    }
}

impl TokenKind {
    /// From the GGUF `token_type` integer.
    pub fn from_gguf_i32(v: i32) -> Self {
        match v {
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => Self::Normal,
        }
    }
    /// The GGUF `token_type` integer.
    pub fn to_gguf_i32(self) -> i32 {
        match self {
            Self::Normal => 1,
            Self::Unknown => 2,
            Self::Control => 3,
            Self::UserDefined => 4,
            Self::Unused => 5,
            Self::Byte => 6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_corrupt_files_are_clear_errors() {
        let e = GgufFile::open(Path::new("/nonexistent/x.gguf")).unwrap_err();
        assert!(matches!(e, Error::ModelNotFound(_)));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.gguf");
        std::fs::write(&p, b"not a gguf file at all").unwrap();
        let e = GgufFile::open(&p).unwrap_err();
        assert!(matches!(e, Error::CorruptModel { .. }), "{e}");
    }
}
