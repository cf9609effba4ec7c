//! Hugging Face model folders: `config.json`, `*.safetensors`, `tokenizer.json`,
//! `tokenizer_config.json` (with its chat template).

use std::path::{Path, PathBuf};

use candle_core::Device;
use serde_json::Value;

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::tokenizer::{TokenKind, TokenizerSpec, DIGITS_PATTERN, GPT2_PATTERN};
use crate::weights::{RawTensor, WeightMap};

fn read_json(path: &Path) -> Result<Value> {
    let s = std::fs::read_to_string(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::ModelNotFound(path.to_path_buf()),
        _ => Error::Io(e),
    })?;
    serde_json::from_str(&s).map_err(|e| Error::CorruptModel {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Whole-model tensors: (Hugging Face name, GGUF name).
const GLOBAL_NAMES: [(&str, &str); 3] = [
    ("model.embed_tokens.weight", "token_embd.weight"),
    ("model.norm.weight", "output_norm.weight"),
    ("lm_head.weight", "output.weight"),
];

/// Per-layer modules: (Hugging Face module, GGUF module); one table for both directions.
const LAYER_NAMES: [(&str, &str); 9] = [
    ("input_layernorm", "attn_norm"),
    ("post_attention_layernorm", "ffn_norm"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
];

/// Maps a Hugging Face tensor name to the GGUF name used internally.
pub fn gguf_name(hf: &str) -> Option<String> {
    // the `model.` prefix is optional on the way in
    let s = hf.strip_prefix("model.").unwrap_or(hf);
    if let Some((_, g)) = GLOBAL_NAMES
        .iter()
        .find(|(h, _)| h.strip_prefix("model.").unwrap_or(h) == s)
    {
        return Some(g.to_string());
    }
    let (i, module, kind) = split_layer(s.strip_prefix("layers.")?)?;
    let (_, m) = LAYER_NAMES.iter().find(|(h, _)| *h == module)?;
    Some(format!("blk.{i}.{m}.{kind}"))
}

/// Maps an internal (GGUF) tensor name back to its Hugging Face name; the inverse of
/// [`gguf_name`].
pub fn hf_name(gguf: &str) -> Option<String> {
    if let Some((h, _)) = GLOBAL_NAMES.iter().find(|(_, g)| *g == gguf) {
        return Some(h.to_string());
    }
    let (i, module, kind) = split_layer(gguf.strip_prefix("blk.")?)?;
    let (h, _) = LAYER_NAMES.iter().find(|(_, g)| *g == module)?;
    Some(format!("model.layers.{i}.{h}.{kind}"))
}

/// `3.self_attn.q_proj.weight` -> (`3`, `self_attn.q_proj`, `weight`).
fn split_layer(rest: &str) -> Option<(&str, &str, &str)> {
    let (i, rest) = rest.split_once('.')?;
    let (module, kind) = rest.rsplit_once('.')?;
    Some((i, module, kind))
}

/// A Hugging Face model folder.
#[derive(Debug)]
pub struct HfFolder {
    dir: PathBuf,
    config: Value,
    tokenizer_config: Value,
}

impl HfFolder {
    /// Opens a folder holding `config.json`.
    pub fn open(dir: &Path) -> Result<Self> {
        if !dir.exists() {
            return Err(Error::ModelNotFound(dir.to_path_buf()));
        }
        let config = read_json(&dir.join("config.json"))?;
        let tokenizer_config = match read_json(&dir.join("tokenizer_config.json")) {
            Ok(v) => v,
            Err(Error::ModelNotFound(_)) => Value::Null,
            // a file that is there but does not parse would silently lose the chat template
            // and the special tokens
            Err(e) => return Err(e),
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            config,
            tokenizer_config,
        })
    }

    /// Model hyper-parameters.
    pub fn config(&self) -> Result<ModelConfig> {
        ModelConfig::from_hf_json(&self.config)
    }

    /// Loads all safetensors shards, renaming tensors to GGUF names.
    pub fn load_tensors(&self, device: &Device) -> Result<WeightMap> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(Error::Missing(format!(
                "*.safetensors in {}",
                self.dir.display()
            )));
        }
        let mut map = WeightMap::new();
        for f in files {
            let tensors =
                candle_core::safetensors::load(&f, device).map_err(|e| Error::CorruptModel {
                    path: f.clone(),
                    reason: e.to_string(),
                })?;
            for (name, t) in tensors {
                if let Some(g) = gguf_name(&name) {
                    map.insert(g, RawTensor::Dense(t));
                }
            }
        }
        Ok(map)
    }

    /// `tokenizer_config.json` (null when the folder has none).
    fn tokenizer_config(&self) -> &Value {
        &self.tokenizer_config
    }

    /// Chat template from `chat_template.jinja` or `tokenizer_config.json`.
    pub fn chat_template(&self) -> Option<String> {
        if let Ok(s) = std::fs::read_to_string(self.dir.join("chat_template.jinja")) {
            return Some(s);
        }
        match &self.tokenizer_config()["chat_template"] {
            Value::String(s) => Some(s.clone()),
            Value::Array(a) => a
                .iter()
                .find(|t| t["name"] == "default")
                .or(a.first())
                .and_then(|t| t["template"].as_str().map(String::from)),
            _ => None,
        }
    }

    /// Tokenizer spec from `tokenizer.json` (byte-level BPE only).
    pub fn tokenizer_spec(&self) -> Result<TokenizerSpec> {
        let path = self.dir.join("tokenizer.json");
        let tj = read_json(&path)?;
        tokenizer_spec_from_json(&tj, self.tokenizer_config())
    }
}

fn token_content(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(|c| c.as_str()).map(String::from),
        _ => None,
    }
}

/// Token ids past this are refused: the largest vocabularies in use have a few hundred
/// thousand entries.
const MAX_TOKEN_ID: u64 = 1 << 24;

/// Builds a tokenizer spec from parsed `tokenizer.json` and `tokenizer_config.json`.
pub fn tokenizer_spec_from_json(tj: &Value, tc: &Value) -> Result<TokenizerSpec> {
    let model = &tj["model"];
    if model["type"].as_str() != Some("BPE") {
        return Err(Error::Tokenizer(format!(
            "tokenizer model {} is not supported (only BPE)",
            model["type"]
        )));
    }
    let vocab = model["vocab"]
        .as_object()
        .ok_or_else(|| Error::Missing("tokenizer.json model.vocab".into()))?;
    let added = tj["added_tokens"].as_array().cloned().unwrap_or_default();
    // ids index a table as long as the largest: a corrupt id must not size it
    let ids = vocab.iter().map(|(t, id)| (t.as_str(), id.as_u64())).chain(
        added
            .iter()
            .map(|a| (a["content"].as_str().unwrap_or("?"), a["id"].as_u64())),
    );
    let mut size = 0usize;
    for (t, id) in ids {
        let Some(id) = id else { continue };
        if id >= MAX_TOKEN_ID {
            return Err(Error::Tokenizer(format!(
                "token {t:?} has id {id}; a vocabulary's ids run from 0 to fewer than \
                 {MAX_TOKEN_ID} (is tokenizer.json damaged?)"
            )));
        }
        size = size.max(id as usize + 1);
    }
    let mut tokens = vec![String::new(); size];
    let mut kinds = vec![TokenKind::Normal; size];
    for (t, id) in vocab {
        if let Some(id) = id.as_u64() {
            tokens[id as usize] = t.clone();
        }
    }
    for a in &added {
        if let (Some(id), Some(c)) = (a["id"].as_u64(), a["content"].as_str()) {
            tokens[id as usize] = c.to_string();
            kinds[id as usize] = if a["special"].as_bool().unwrap_or(false) {
                TokenKind::Control
            } else {
                TokenKind::UserDefined
            };
        }
    }
    let merges = model["merges"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|m| match m {
                    Value::String(s) => Some(s.clone()),
                    Value::Array(p) if p.len() == 2 => {
                        Some(format!("{} {}", p[0].as_str()?, p[1].as_str()?))
                    }
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let mut pre_patterns = Vec::new();
    fn walk(p: &Value, out: &mut Vec<String>) -> Result<()> {
        match p["type"].as_str() {
            Some("Sequence") => {
                for q in p["pretokenizers"].as_array().into_iter().flatten() {
                    walk(q, out)?;
                }
            }
            Some("Split") => {
                let pat = p["pattern"]["Regex"]
                    .as_str()
                    .map(String::from)
                    .or_else(|| {
                        p["pattern"]["String"]
                            .as_str()
                            .map(fancy_regex::escape)
                            .map(|c| c.into_owned())
                    })
                    .ok_or_else(|| Error::Tokenizer("Split without pattern".into()))?;
                out.push(pat);
            }
            Some("Digits") => out.push(if p["individual_digits"].as_bool().unwrap_or(false) {
                DIGITS_PATTERN.into()
            } else {
                r"\p{N}+".into()
            }),
            Some("ByteLevel") if p["use_regex"].as_bool().unwrap_or(true) => {
                out.push(GPT2_PATTERN.into());
            }
            Some("ByteLevel") | None => {}
            Some(other) => {
                return Err(Error::Tokenizer(format!(
                    "unsupported pre-tokenizer `{other}`"
                )))
            }
        }
        Ok(())
    }
    walk(&tj["pre_tokenizer"], &mut pre_patterns)?;
    let find = |key: &str| -> Option<u32> {
        let c = token_content(&tc[key])?;
        tokens.iter().position(|t| *t == c).map(|i| i as u32)
    };
    let mut add_bos = tc["add_bos_token"].as_bool().unwrap_or(false);
    let mut bos = find("bos_token");
    if let Some(first) = tj["post_processor"]["single"]
        .as_array()
        .and_then(|a| a.first())
    {
        if let Some(id) = first["SpecialToken"]["id"].as_str() {
            if let Some(i) = tokens.iter().position(|t| t == id) {
                add_bos = true;
                bos = bos.or(Some(i as u32));
            }
        }
    }
    if let Some(procs) = tj["post_processor"]["processors"].as_array() {
        for p in procs {
            if let Some(first) = p["single"].as_array().and_then(|a| a.first()) {
                if let Some(id) = first["SpecialToken"]["id"].as_str() {
                    if let Some(i) = tokens.iter().position(|t| t == id) {
                        add_bos = true;
                        bos = bos.or(Some(i as u32));
                    }
                }
            }
        }
    }
    Ok(TokenizerSpec {
        kinds,
        merges,
        pre_patterns,
        ignore_merges: model["ignore_merges"].as_bool().unwrap_or(false),
        bos,
        eos: find("eos_token"),
        unk: find("unk_token"),
        pad: find("pad_token"),
        add_bos,
        eog: Vec::new(),
        tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_gguf() {
        assert_eq!(
            gguf_name("model.layers.3.self_attn.q_proj.bias").unwrap(),
            "blk.3.attn_q.bias"
        );
        assert_eq!(
            gguf_name("model.embed_tokens.weight").unwrap(),
            "token_embd.weight"
        );
        assert_eq!(gguf_name("lm_head.weight").unwrap(), "output.weight");
        assert!(gguf_name("model.layers.0.rotary_emb.inv_freq").is_none());
    }

    #[test]
    fn hf_names_invert_gguf_names() {
        for hf in [
            "model.embed_tokens.weight",
            "model.norm.weight",
            "lm_head.weight",
            "model.layers.0.input_layernorm.weight",
            "model.layers.7.post_attention_layernorm.weight",
            "model.layers.3.self_attn.q_proj.bias",
            "model.layers.12.self_attn.o_proj.weight",
            "model.layers.29.mlp.gate_proj.weight",
            "model.layers.1.mlp.up_proj.weight",
            "model.layers.2.mlp.down_proj.weight",
        ] {
            assert_eq!(hf_name(&gguf_name(hf).unwrap()).as_deref(), Some(hf));
        }
        assert!(hf_name("rope_freqs.weight").is_none());
    }

    #[test]
    fn a_damaged_tokenizer_is_an_error_not_a_crash_or_a_silent_default() {
        let tj = |id: u64| serde_json::json!({"model": {"type": "BPE", "vocab": {"a": 0, "b": id}, "merges": []}});
        let e = tokenizer_spec_from_json(&tj(u64::MAX), &Value::Null).unwrap_err();
        assert!(e.to_string().contains("\"b\" has id"), "{e}");
        assert!(tokenizer_spec_from_json(&tj(1_000_000_000_000), &Value::Null).is_err());
        // a tokenizer_config.json that does not parse fails the open: it holds the chat
        // template and the special tokens
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("config.json"), "{}").unwrap();
        HfFolder::open(d.path()).unwrap();
        std::fs::write(d.path().join("tokenizer_config.json"), "{\"a\": 1,}").unwrap();
        let e = HfFolder::open(d.path()).err().unwrap().to_string();
        assert!(e.contains("tokenizer_config.json"), "{e}");
    }
}
