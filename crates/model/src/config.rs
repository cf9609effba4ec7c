//! Architecture hyper-parameters shared by llama and qwen2.

use crate::error::{Error, Result};

/// Supported architectures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    Llama,
    Qwen2,
}

impl Architecture {
    /// Parses a GGUF `general.architecture` or HF `model_type`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "llama" | "LlamaForCausalLM" => Ok(Self::Llama),
            "qwen2" | "Qwen2ForCausalLM" => Ok(Self::Qwen2),
            other => Err(Error::UnsupportedArchitecture(other.to_string())),
        }
    }
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
        }
    }
}

/// How rotary embedding pairs dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeLayout {
    /// Pairs (0,1), (2,3), ... — llama weights in GGUF are permuted for this.
    Interleaved,
    /// Pairs (i, i + d/2) — Hugging Face weights and qwen2 GGUF.
    HalfSplit,
}

/// Llama-3 style frequency scaling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3RopeScaling {
    pub factor: f32,
    pub low_freq_factor: f32,
    pub high_freq_factor: f32,
    pub original_max_position_embeddings: usize,
}

/// Hyper-parameters of one model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub arch: Architecture,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rms_eps: f64,
    pub rope_theta: f32,
    pub rope_layout: RopeLayout,
    pub rope_scaling: Option<Llama3RopeScaling>,
    /// Per-frequency divisors (GGUF `rope_freqs.weight`).
    pub rope_freq_factors: Option<Vec<f32>>,
    pub max_position: usize,
    pub tie_embeddings: bool,
    /// Bias on q/k/v projections (qwen2).
    pub attn_bias: bool,
}

/// The longest context a model file may declare (SmolLM2: 8,192; the largest open models:
/// about a million).
pub const MAX_CONTEXT: usize = 1 << 21;
/// The most layers and attention heads a model file may declare (the largest open models
/// have a few hundred layers and at most a few hundred heads).
pub const MAX_LAYERS: usize = 4096;
pub const MAX_HEADS: usize = 4096;
/// The largest sizes a model file may declare, far above any open model's (head dimension
/// 64-256, hidden size up to ~25k, feed-forward up to ~100k, vocabularies up to ~1M): tables
/// and buffers are sized from them before any tensor is read, and their products must not
/// overflow.
pub const MAX_HEAD_DIM: usize = 1024;
pub const MAX_HIDDEN: usize = 1 << 17;
pub const MAX_FEED_FORWARD: usize = 1 << 20;
pub const MAX_VOCAB: usize = 1 << 22;
/// The most context positions x head dimension: the rotary tables (three of half that many
/// f32) stay under a gigabyte; a 2M-token context at head size 64 or 128k at 1,024 fit.
pub const MAX_ROTARY_ENTRIES: usize = 1 << 27;

impl ModelConfig {
    /// Inverse frequencies of the rotary embedding, after scaling.
    pub fn inv_freqs(&self) -> Vec<f32> {
        let d = self.head_dim;
        let mut f: Vec<f32> = (0..d / 2)
            .map(|i| 1.0 / (self.rope_theta as f64).powf(2.0 * i as f64 / d as f64) as f32)
            .collect();
        if let Some(ff) = &self.rope_freq_factors {
            for (x, s) in f.iter_mut().zip(ff) {
                *x /= *s;
            }
        } else if let Some(s) = self.rope_scaling {
            let old = s.original_max_position_embeddings as f32;
            let low_wl = old / s.low_freq_factor;
            let high_wl = old / s.high_freq_factor;
            for x in f.iter_mut() {
                let wl = 2.0 * std::f32::consts::PI / *x;
                if wl < high_wl {
                } else if wl > low_wl {
                    *x /= s.factor;
                } else {
                    let smooth =
                        (old / wl - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
                    *x = (1.0 - smooth) * *x / s.factor + smooth * *x;
                }
            }
        }
        f
    }

    /// Rejects shapes no forward pass can use (zero sizes, kv heads that do not divide the
    /// query heads), so corrupt metadata is an error at load instead of a panic later.
    pub fn validated(self) -> Result<Self> {
        let sizes = [
            ("hidden size", self.hidden_size),
            ("attention heads", self.num_heads),
            ("kv heads", self.num_kv_heads),
            ("head dimension", self.head_dim),
            ("layers", self.num_layers),
            ("vocabulary", self.vocab_size),
            ("feed-forward size", self.intermediate_size),
        ];
        if let Some((what, _)) = sizes.iter().find(|(_, n)| *n == 0) {
            return Err(Error::InvalidArgument(format!("model config: {what} is 0")));
        }
        // Tables are built per layer and head before any tensor is read: a damaged count
        // (4e9 layers) would exhaust memory instead of failing on the first missing tensor.
        let bounds = [
            ("layers", self.num_layers, MAX_LAYERS),
            ("attention heads", self.num_heads, MAX_HEADS),
            ("kv heads", self.num_kv_heads, MAX_HEADS),
        ];
        if let Some((what, n, max)) = bounds.iter().find(|(_, n, max)| n > max) {
            return Err(Error::InvalidArgument(format!(
                "model config: {n} {what}, more than any model has (at most {max}); is the \
                 file damaged? (GGUF `*.block_count` / `*.attention.head_count[_kv]`, \
                 config.json `num_hidden_layers` / `num_attention_heads` / \
                 `num_key_value_heads`)"
            )));
        }
        let sizes = [
            ("head dimension", self.head_dim, MAX_HEAD_DIM),
            ("hidden size", self.hidden_size, MAX_HIDDEN),
            (
                "feed-forward size",
                self.intermediate_size,
                MAX_FEED_FORWARD,
            ),
            ("vocabulary", self.vocab_size, MAX_VOCAB),
        ];
        if let Some((what, n, max)) = sizes.iter().find(|(_, n, max)| n > max) {
            return Err(Error::InvalidArgument(format!(
                "model config: a {what} of {n}, more than any model has (at most {max}); is \
                 the file damaged? (GGUF `*.attention.key_length` / `*.embedding_length` / \
                 `*.feed_forward_length` / the token list, config.json `head_dim` / \
                 `hidden_size` / `intermediate_size` / `vocab_size`)"
            )));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps > 0.0 && self.rms_eps < 1.0) {
            return Err(Error::InvalidArgument(format!(
                "model config: the RMSNorm epsilon is {}; it must be a small positive number \
                 (GGUF `*.attention.layer_norm_rms_epsilon`, config.json `rms_norm_eps`)",
                self.rms_eps
            )));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return Err(Error::InvalidArgument(format!(
                "model config: the rotary base is {}; it must be a positive number (GGUF \
                 `*.rope.freq_base`, config.json `rope_theta`)",
                self.rope_theta
            )));
        }
        // Rotary tables and the KV cache are sized by the context: an absurd length (2^32 from
        // a damaged file) asked for gigabytes before any prompt.
        if self.max_position == 0 || self.max_position > MAX_CONTEXT {
            return Err(Error::InvalidArgument(format!(
                "model config: the context length is {}; it must be 1..={MAX_CONTEXT} (GGUF \
                 `*.context_length`, config.json `max_position_embeddings`)",
                self.max_position
            )));
        }
        if self.max_position.saturating_mul(self.head_dim) > MAX_ROTARY_ENTRIES {
            return Err(Error::InvalidArgument(format!(
                "model config: a context of {} positions at head dimension {} needs rotary \
                 tables of more than {MAX_ROTARY_ENTRIES} entries; is the file damaged? (GGUF \
                 `*.context_length`, config.json `max_position_embeddings`)",
                self.max_position, self.head_dim
            )));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(Error::InvalidArgument(format!(
                "model config: the head dimension {} is odd; rotary embedding needs it even",
                self.head_dim
            )));
        }
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return Err(Error::InvalidArgument(format!(
                "model config: {} attention heads are not a multiple of {} kv heads",
                self.num_heads, self.num_kv_heads
            )));
        }
        Ok(self)
    }

    /// Parameter count implied by the shapes (tied embeddings counted once).
    pub fn parameter_count(&self) -> usize {
        let h = self.hidden_size;
        let q = self.num_heads * self.head_dim;
        let kv = self.num_kv_heads * self.head_dim;
        let bias = if self.attn_bias { q + 2 * kv } else { 0 };
        let per_layer = h * q + 2 * h * kv + q * h + bias + 3 * h * self.intermediate_size + 2 * h;
        let emb = self.vocab_size * h;
        emb + if self.tie_embeddings { 0 } else { emb } + self.num_layers * per_layer + h
    }

    /// Builds a config from a Hugging Face `config.json`.
    pub fn from_hf_json(v: &serde_json::Value) -> Result<Self> {
        let model_type = v["model_type"].as_str().unwrap_or_default();
        let arch = Architecture::parse(model_type)?;
        let u = |k: &str| -> Result<usize> {
            v[k].as_u64()
                .map(|x| x as usize)
                .ok_or_else(|| Error::Missing(format!("config.json key `{k}`")))
        };
        let hidden = u("hidden_size")?;
        let heads = u("num_attention_heads")?;
        // transformers >= 5 moved rope settings into `rope_parameters`
        let rope = v
            .get("rope_parameters")
            .filter(|r| r.is_object())
            .or(v.get("rope_scaling"));
        let rope_theta = v["rope_theta"]
            .as_f64()
            .or(rope.and_then(|r| r["rope_theta"].as_f64()))
            .unwrap_or(10000.0);
        let rope_scaling = match rope {
            Some(s)
                if s["rope_type"].as_str() == Some("llama3")
                    || s["type"].as_str() == Some("llama3") =>
            {
                Some(Llama3RopeScaling {
                    factor: s["factor"].as_f64().unwrap_or(1.0) as f32,
                    low_freq_factor: s["low_freq_factor"].as_f64().unwrap_or(1.0) as f32,
                    high_freq_factor: s["high_freq_factor"].as_f64().unwrap_or(4.0) as f32,
                    original_max_position_embeddings: s["original_max_position_embeddings"]
                        .as_u64()
                        .unwrap_or(8192)
                        as usize,
                })
            }
            _ => None,
        };
        Self {
            arch,
            vocab_size: u("vocab_size")?,
            hidden_size: hidden,
            intermediate_size: u("intermediate_size")?,
            num_layers: u("num_hidden_layers")?,
            num_heads: heads,
            num_kv_heads: v["num_key_value_heads"]
                .as_u64()
                .map(|x| x as usize)
                .unwrap_or(heads),
            head_dim: v["head_dim"]
                .as_u64()
                .map(|x| x as usize)
                .unwrap_or(hidden.checked_div(heads).unwrap_or(0)),
            rms_eps: v["rms_norm_eps"].as_f64().unwrap_or(1e-6),
            rope_theta: rope_theta as f32,
            rope_layout: RopeLayout::HalfSplit,
            rope_scaling,
            rope_freq_factors: None,
            max_position: u("max_position_embeddings").unwrap_or(4096),
            tie_embeddings: v["tie_word_embeddings"].as_bool().unwrap_or(false),
            attn_bias: match arch {
                Architecture::Qwen2 => true,
                Architecture::Llama => v["attention_bias"].as_bool().unwrap_or(false),
            },
        }
        .validated()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hf_config_parses_and_counts() {
        let v: serde_json::Value = serde_json::json!({
            "model_type": "llama", "vocab_size": 100, "hidden_size": 16, "intermediate_size": 32,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "tie_word_embeddings": true, "max_position_embeddings": 64
        });
        let c = ModelConfig::from_hf_json(&v).unwrap();
        assert_eq!(c.head_dim, 4);
        // corrupt shapes are errors, not a division by zero later
        for (k, bad) in [("num_attention_heads", 0), ("num_key_value_heads", 3)] {
            let mut w = v.clone();
            w[k] = serde_json::json!(bad);
            assert!(matches!(
                ModelConfig::from_hf_json(&w),
                Err(Error::InvalidArgument(_))
            ));
        }
        assert_eq!(c.inv_freqs().len(), 2);
        assert!(c.parameter_count() > 1600);
        // NaN or negative hyper-parameters are refused, naming the key
        for (k, bad) in [
            ("rope_theta", serde_json::json!(-1.0)),
            ("rms_norm_eps", serde_json::json!(0.0)),
            ("rms_norm_eps", serde_json::json!(-1e-5)),
            // red-team finding: a context of 2^32 - 1 allocated gigabytes and aborted
            (
                "max_position_embeddings",
                serde_json::json!(4_294_967_295u64),
            ),
            ("max_position_embeddings", serde_json::json!(0)),
            // a damaged layer count built per-layer tables until memory ran out
            ("num_hidden_layers", serde_json::json!(4_000_000_000u64)),
            // sizes whose products overflowed or whose tables exhausted memory (session 44)
            ("hidden_size", serde_json::json!(1u64 << 33)),
            ("vocab_size", serde_json::json!(1u64 << 33)),
            ("intermediate_size", serde_json::json!(1u64 << 33)),
            ("head_dim", serde_json::json!(16384)),
        ] {
            let mut w = v.clone();
            w[k] = bad;
            let e = ModelConfig::from_hf_json(&w).unwrap_err().to_string();
            assert!(e.contains(k), "{e}");
        }
        // a context each size of which is allowed, whose rotary tables are not
        let mut w = v.clone();
        w["head_dim"] = serde_json::json!(128);
        w["max_position_embeddings"] = serde_json::json!(2_000_000);
        let e = ModelConfig::from_hf_json(&w).unwrap_err().to_string();
        assert!(e.contains("rotary tables"), "{e}");
        w["max_position_embeddings"] = serde_json::json!(131_072);
        ModelConfig::from_hf_json(&w).unwrap();
        let mut nan = c.clone();
        nan.rope_theta = f32::NAN;
        assert!(nan.validated().is_err());
        let bad = serde_json::json!({"model_type": "gpt_neox"});
        assert!(matches!(
            ModelConfig::from_hf_json(&bad),
            Err(Error::UnsupportedArchitecture(_))
        ));
    }
}
