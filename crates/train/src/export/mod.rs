//! Export of trained weights: as a GGUF file that `hat generate`, `hat run`, `hat eval` and
//! llama.cpp load (the starting model's metadata: tokenizer, chat template, hyper-parameters,
//! rebuilt from config and tokenizer for a Hugging Face folder; the trained tensors in f32,
//! q8_0 or q4_0), or as a Hugging Face folder ([`hf`]). Written to a temporary name and
//! renamed, so an export under the final name is always complete.

mod hf;

pub use hf::{check_out as check_hf_out, hf_folder};

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};

use hat_model::gguf::GgufFile;
use hat_model::hf::HfFolder;
use hat_model::train::TrainModel;
use hat_model::{Architecture, ModelConfig, RopeLayout};

use crate::error::{io, Result, TrainError};

/// Export formats: GGUF types, and `hf` for a Hugging Face folder.
pub const FORMATS: [&str; 4] = ["f32", "q8_0", "q4_0", "hf"];

/// Checks a run config's `export` list: each an export format.
pub fn check_formats(formats: &[String]) -> crate::Result<()> {
    match formats.iter().find(|f| !FORMATS.contains(&f.as_str())) {
        None => Ok(()),
        Some(f) => Err(crate::TrainError::Config {
            path: "the training config".into(),
            message: format!("export format `{f}` (known: {})", FORMATS.join(", ")),
        }),
    }
}

/// Where a run's end-of-run export in `format` goes.
pub fn run_output(run: &Path, format: &str) -> std::path::PathBuf {
    if format == "hf" {
        run.join("model-hf")
    } else {
        run.join(format!("model-{format}.gguf"))
    }
}

/// Writes `model` in `format` (one of [`FORMATS`]) to `out`.
pub fn export(model: &TrainModel, source: &Path, format: &str, out: &Path) -> Result<()> {
    if format == "hf" {
        hf_folder(model, source, out)
    } else {
        gguf(model, source, format, out)
    }
}

fn dtype(format: &str) -> Result<GgmlDType> {
    Ok(match format {
        "f32" => GgmlDType::F32,
        "q8_0" => GgmlDType::Q8_0,
        "q4_0" => GgmlDType::Q4_0,
        other => {
            return Err(TrainError::Invalid(format!(
                "export format `{other}` (known: {})",
                FORMATS.join(", ")
            )))
        }
    })
}

/// GGUF metadata rebuilt from a Hugging Face folder.
fn metadata_from_hf(dir: &Path, cfg: &ModelConfig) -> Result<HashMap<String, Value>> {
    let f = HfFolder::open(dir)?;
    let spec = f.tokenizer_spec()?;
    let arch = cfg.arch.name();
    let mut m = HashMap::new();
    let mut put = |k: String, v: Value| {
        m.insert(k, v);
    };
    put("general.architecture".into(), Value::String(arch.into()));
    put("general.name".into(), Value::String("hat-trained".into()));
    for (key, n) in [
        ("context_length", cfg.max_position),
        ("embedding_length", cfg.hidden_size),
        ("block_count", cfg.num_layers),
        ("feed_forward_length", cfg.intermediate_size),
        ("attention.head_count", cfg.num_heads),
        ("attention.head_count_kv", cfg.num_kv_heads),
        ("attention.key_length", cfg.head_dim),
        ("attention.value_length", cfg.head_dim),
        ("rope.dimension_count", cfg.head_dim),
        ("vocab_size", cfg.vocab_size),
    ] {
        put(format!("{arch}.{key}"), Value::U32(n as u32));
    }
    put(
        format!("{arch}.attention.layer_norm_rms_epsilon"),
        Value::F32(cfg.rms_eps as f32),
    );
    put(format!("{arch}.rope.freq_base"), Value::F32(cfg.rope_theta));
    put("tokenizer.ggml.model".into(), Value::String("gpt2".into()));
    let pre = ["smollm", "llama-bpe", "qwen2", "gpt2"]
        .into_iter()
        .find(|p| {
            hat_model::tokenizer::patterns_for_pre(p)
                .is_ok_and(|(pats, _)| pats == spec.pre_patterns)
        })
        .unwrap_or("default");
    put("tokenizer.ggml.pre".into(), Value::String(pre.into()));
    put(
        "tokenizer.ggml.tokens".into(),
        Value::Array(spec.tokens.iter().cloned().map(Value::String).collect()),
    );
    put(
        "tokenizer.ggml.token_type".into(),
        Value::Array(
            spec.kinds
                .iter()
                .map(|k| Value::I32(k.to_gguf_i32()))
                .collect(),
        ),
    );
    put(
        "tokenizer.ggml.merges".into(),
        Value::Array(spec.merges.iter().cloned().map(Value::String).collect()),
    );
    for (k, v) in [
        ("bos", spec.bos),
        ("eos", spec.eos),
        ("unknown", spec.unk),
        ("padding", spec.pad),
    ] {
        if let Some(id) = v {
            put(format!("tokenizer.ggml.{k}_token_id"), Value::U32(id));
        }
    }
    if let Some(&eot) = spec.eog.first() {
        put("tokenizer.ggml.eot_token_id".into(), Value::U32(eot));
    }
    put(
        "tokenizer.ggml.add_bos_token".into(),
        Value::Bool(spec.add_bos),
    );
    if let Some(t) = f.chat_template() {
        put("tokenizer.chat_template".into(), Value::String(t));
    }
    Ok(m)
}

/// Writes `model`'s weights as GGUF `format` to `out`, with the metadata of `source` (the
/// file or folder the run started from).
pub fn gguf(model: &TrainModel, source: &Path, format: &str, out: &Path) -> Result<()> {
    let dt = dtype(format)?;
    let cfg = model.config();
    let metadata = if source.is_dir() {
        metadata_from_hf(source, cfg)?
    } else {
        let mut m = GgufFile::open(source)?.metadata().clone();
        m.remove("general.file_type");
        m.remove("general.quantization_version");
        m
    };
    // Hugging Face llama weights use the half-split rotary layout; GGUF llama tensors (q/k
    // weights and biases) are permuted for the interleaved one.
    let permute = cfg.arch == Architecture::Llama && cfg.rope_layout == RopeLayout::HalfSplit;
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    for (name, mut t) in model.weights()? {
        if permute && crate::rotary::is_rotary(&name) {
            t = crate::rotary::reorder_rows(&t, RopeLayout::HalfSplit, cfg.head_dim)?;
        }
        let quantise = t.rank() == 2 && t.dim(1)? % dt.block_size() == 0;
        let q = QTensor::quantize(&t, if quantise { dt } else { GgmlDType::F32 })?;
        tensors.push((name.clone(), q));
    }
    let tmp = out.with_extension("gguf.tmp");
    {
        let mut f =
            std::io::BufWriter::new(std::fs::File::create(&tmp).map_err(io(tmp.display()))?);
        let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
        candle_core::quantized::gguf_file::write(&mut f, &md, &ts)?;
        use std::io::Write;
        f.flush().map_err(io(tmp.display()))?;
    }
    std::fs::rename(&tmp, out).map_err(io(out.display()))?;
    Ok(())
}
