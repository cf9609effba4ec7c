//! Llama wiring (SmolLM2, Llama 3.x): no projection biases; GGUF llama weights use the
//! interleaved rotary layout because the converter permutes q/k, Hugging Face weights the
//! half-split layout (chosen by the loader in [`crate::config::RopeLayout`]).

use crate::config::ModelConfig;
use crate::model::Wiring;

/// Wiring of the shared layers for llama.
pub fn wiring(cfg: &ModelConfig) -> Wiring {
    Wiring {
        qkv_bias: cfg.attn_bias,
    }
}
