//! Export as a Hugging Face folder that transformers loads: `config.json`,
//! `model.safetensors` (f32, Hugging Face tensor names and rotary layout), `tokenizer.json`,
//! `tokenizer_config.json` (with the chat template) and `generation_config.json`.
//!
//! From a Hugging Face start the tokenizer files are copied as they are. From a GGUF start the
//! tokenizer is rebuilt from the GGUF vocabulary: a byte-level BPE model with the same merges,
//! the pre-tokenizer's regexes as `Split` steps, and control tokens as special added tokens.
//! The folder is written under a temporary name and renamed, so a folder under the final name
//! is always complete.

use std::collections::HashMap;
use std::path::Path;

use candle_core::Tensor;
use serde_json::{json, Map, Value};

use hat_model::gguf::GgufFile;
use hat_model::tokenizer::{TokenKind, TokenizerSpec};
use hat_model::train::TrainModel;
use hat_model::{Architecture, ModelConfig, RopeLayout};

use crate::error::{io, Result, TrainError};

/// Names the folder as an export of ours, so a later export may replace it.
const MARKER: &str = "hat-export.json";

/// Whether `out` may receive a Hugging Face export: it must not exist, or be an earlier export.
/// Callers with minutes of work before the export check it first.
pub fn check_out(out: &Path) -> Result<()> {
    if out.exists() && !out.join(MARKER).is_file() {
        return Err(TrainError::Invalid(format!(
            "{} already exists and is not an earlier export: choose a new folder",
            out.display()
        )));
    }
    Ok(())
}

/// Writes `model` as a Hugging Face folder at `out`, with the tokenizer and chat template of
/// `source` (the GGUF file or folder the run started from). `out` must not exist, or be an
/// earlier export (which is replaced once the new one is complete).
pub fn hf_folder(model: &TrainModel, source: &Path, out: &Path) -> Result<()> {
    check_out(out)?;
    let cfg = model.config();
    let tmp = out.with_file_name(format!(
        ".{}.tmp",
        out.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "export".into())
    ));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io(tmp.display()))?;
    }
    std::fs::create_dir_all(&tmp).map_err(io(tmp.display()))?;

    let spec = if source.is_dir() {
        for f in [
            "tokenizer.json",
            "tokenizer_config.json",
            "special_tokens_map.json",
            "chat_template.jinja",
        ] {
            let from = source.join(f);
            if from.is_file() {
                std::fs::copy(&from, tmp.join(f)).map_err(io(from.display()))?;
            }
        }
        hat_model::hf::HfFolder::open(source)?.tokenizer_spec()?
    } else {
        let g = GgufFile::open(source)?;
        let spec = g.tokenizer_spec()?;
        let template = g.chat_template();
        write_json(&tmp.join("tokenizer.json"), &tokenizer_json(&spec))?;
        write_json(
            &tmp.join("tokenizer_config.json"),
            &tokenizer_config(&spec, template.as_deref(), cfg.max_position),
        )?;
        spec
    };
    write_json(&tmp.join("config.json"), &config_json(model, &spec)?)?;
    write_json(
        &tmp.join("generation_config.json"),
        &generation_config(&spec),
    )?;

    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    // GGUF llama q/k rows (and biases) are permuted for the interleaved rotary layout;
    // transformers uses the half-split one.
    let unpermute = cfg.arch == Architecture::Llama && cfg.rope_layout == RopeLayout::Interleaved;
    for (name, mut t) in model.weights()? {
        let hf = hat_model::hf::hf_name(&name).ok_or_else(|| {
            TrainError::Invalid(format!("tensor `{name}` has no Hugging Face name"))
        })?;
        if unpermute && crate::rotary::is_rotary(&name) {
            t = crate::rotary::reorder_rows(&t, RopeLayout::Interleaved, cfg.head_dim)?;
        }
        tensors.insert(hf, t.contiguous()?);
    }
    let weights = tmp.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &weights)?;
    write_json(
        &tmp.join(MARKER),
        &json!({ "source": source.display().to_string(), "format": "hf" }),
    )?;
    if out.exists() {
        std::fs::remove_dir_all(out).map_err(io(out.display()))?;
    }
    std::fs::rename(&tmp, out).map_err(io(out.display()))?;
    Ok(())
}

fn write_json(path: &Path, v: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v)?;
    std::fs::write(path, text).map_err(io(path.display()))
}

fn config_json(model: &TrainModel, spec: &TokenizerSpec) -> Result<Value> {
    let cfg: &ModelConfig = model.config();
    let tied = cfg.tie_embeddings;
    let (class, kind) = match cfg.arch {
        Architecture::Llama => ("LlamaForCausalLM", "llama"),
        Architecture::Qwen2 => ("Qwen2ForCausalLM", "qwen2"),
    };
    let mut c = json!({
        "architectures": [class],
        "model_type": kind,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_position,
        "rms_norm_eps": cfg.rms_eps,
        "rope_theta": cfg.rope_theta,
        "tie_word_embeddings": tied,
        "torch_dtype": "float32",
        "bos_token_id": spec.bos,
        "eos_token_id": spec.eos,
        "pad_token_id": spec.pad,
    });
    if cfg.arch == Architecture::Llama {
        c["attention_bias"] = json!(cfg.attn_bias);
        c["mlp_bias"] = json!(false);
    }
    match (&cfg.rope_scaling, &cfg.rope_freq_factors) {
        (Some(s), _) => {
            c["rope_scaling"] = json!({
                "rope_type": "llama3",
                "factor": s.factor,
                "low_freq_factor": s.low_freq_factor,
                "high_freq_factor": s.high_freq_factor,
                "original_max_position_embeddings": s.original_max_position_embeddings,
            });
        }
        (None, Some(_)) => {
            return Err(TrainError::Invalid(
                "the model's rotary frequencies come as a per-frequency table (GGUF \
                 `rope_freqs.weight`) without the scaling parameters transformers needs: export \
                 it as GGUF instead"
                    .into(),
            ))
        }
        (None, None) => {}
    }
    Ok(c)
}

fn generation_config(spec: &TokenizerSpec) -> Value {
    let mut stops: Vec<u32> = spec.eos.into_iter().collect();
    for &e in &spec.eog {
        if !stops.contains(&e) {
            stops.push(e);
        }
    }
    json!({ "bos_token_id": spec.bos, "eos_token_id": stops, "pad_token_id": spec.pad })
}

fn token(spec: &TokenizerSpec, id: Option<u32>) -> Value {
    id.and_then(|i| spec.tokens.get(i as usize))
        .map_or(Value::Null, |t| Value::String(t.clone()))
}

fn tokenizer_config(spec: &TokenizerSpec, template: Option<&str>, max_len: usize) -> Value {
    let mut c = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": spec.add_bos,
        "add_eos_token": false,
        "bos_token": token(spec, spec.bos),
        "eos_token": token(spec, spec.eos),
        "unk_token": token(spec, spec.unk),
        "pad_token": token(spec, spec.pad),
        "model_max_length": max_len,
        "clean_up_tokenization_spaces": false,
    });
    if let Some(t) = template {
        c["chat_template"] = Value::String(t.to_string());
    }
    c
}

/// A `tokenizer.json` for a byte-level BPE vocabulary.
fn tokenizer_json(spec: &TokenizerSpec) -> Value {
    let mut vocab = Map::new();
    let mut added = Vec::new();
    for (id, (t, k)) in spec.tokens.iter().zip(&spec.kinds).enumerate() {
        vocab.insert(t.clone(), json!(id));
        if k.is_special() {
            added.push(json!({
                "id": id,
                "content": t,
                "single_word": false,
                "lstrip": false,
                "rstrip": false,
                "normalized": false,
                "special": *k == TokenKind::Control,
            }));
        }
    }
    let mut pre: Vec<Value> = spec
        .pre_patterns
        .iter()
        .map(|p| {
            json!({
                "type": "Split",
                "pattern": { "Regex": p },
                "behavior": "Isolated",
                "invert": false,
            })
        })
        .collect();
    pre.push(json!({
        "type": "ByteLevel",
        "add_prefix_space": false,
        "trim_offsets": true,
        "use_regex": false,
    }));
    let post = match spec.bos.filter(|_| spec.add_bos) {
        Some(b) => {
            let bos = spec.tokens[b as usize].clone();
            let mut special = Map::new();
            special.insert(
                bos.clone(),
                json!({ "id": bos, "ids": [b], "tokens": [bos] }),
            );
            json!({
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": special,
            })
        }
        None => json!({
            "type": "ByteLevel",
            "add_prefix_space": false,
            "trim_offsets": false,
            "use_regex": false,
        }),
    };
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": { "type": "Sequence", "pretokenizers": pre },
        "post_processor": post,
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": false,
            "trim_offsets": true,
            "use_regex": false,
        },
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": null,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": false,
            "byte_fallback": false,
            "ignore_merges": spec.ignore_merges,
            "vocab": vocab,
            "merges": spec.merges,
        },
    })
}
