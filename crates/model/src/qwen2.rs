//! Qwen2 wiring (Qwen2, Qwen2.5): llama plus a bias on the q, k and v projections;
//! rotary embedding is half-split both in GGUF and Hugging Face weights.

use crate::config::ModelConfig;
use crate::model::Wiring;

/// Wiring of the shared layers for qwen2.
pub fn wiring(_cfg: &ModelConfig) -> Wiring {
    Wiring { qkv_bias: true }
}
