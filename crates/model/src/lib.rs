//! HAT model engine: loads SmolLM2 / Llama / Qwen2 models from GGUF or Hugging Face
//! folders into one candle transformer, tokenises with a byte-level BPE built from the
//! file's metadata, renders chat templates, and generates with a KV cache, a prefix cache
//! and batched decoding.

pub mod attention;
pub mod bench;
pub mod chat_template;
pub mod config;
pub mod constrain;
pub mod continuous;
pub mod cpu;
pub mod error;
pub mod fetch;
pub mod generate;
pub mod gguf;
pub mod gguf_check;
pub mod hf;
pub mod kernels;
pub mod layers;
pub mod llama;
pub mod loader;
pub mod model;
pub mod prefix_cache;
pub mod qwen2;
pub mod repetition;
pub mod sampling;
pub mod simd;
mod speculate;
pub mod threads;
pub mod tokenizer;
pub mod train;
pub mod weights;

pub use config::{Architecture, ModelConfig, RopeLayout};
pub use constrain::{NameSlots, TextCheck};
pub use continuous::{ContinuousBatch, RowId};
pub use error::{Error, Result};
pub use generate::{Engine, FinishReason, GenerateOutput, GenerateRequest, TokenEvent};
pub use loader::{inspect, load, Loaded, ModelInfo};
pub use model::{Cache, LoadOptions, Transformer};
pub use sampling::SamplingParams;
pub use tokenizer::Tokenizer;
pub use weights::WeightFormat;
