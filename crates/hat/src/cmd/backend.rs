//! `--model` specs shared by `hat run` and `hat eval`.

use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;

use hat_agent::episode::ChatModel;
use hat_eval::ModelIdentity;
use hat_teacher::openai::{OpenAiConfig, OpenAiTeacher};

#[derive(Args, Clone)]
pub struct ModelArgs {
    /// The model: `default` (SmolLM2-135M-Instruct from `hat model fetch`), a GGUF file or
    /// Hugging Face folder (embedded engine), or `openai:<name>` with --base-url (any
    /// OpenAI-compatible endpoint: vLLM, SGLang, llama.cpp's server).
    #[arg(long)]
    pub model: Option<String>,
    /// Weight format for the embedded engine: original, q8_0, q4_0, f32, f16, bf16.
    #[arg(long, default_value = "original")]
    pub format: String,
    /// Compute threads for the embedded engine (0 = all cores; at most 256).
    #[arg(long, default_value_t = 0, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=256))]
    pub threads: usize,
    /// Endpoint for `openai:` models, e.g. http://127.0.0.1:8000/v1.
    #[arg(long, env = "HAT_BASE_URL")]
    pub base_url: Option<String>,
    /// Environment variable holding the endpoint's API key.
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// Seconds an endpoint may take for one request before the turn fails (live streams need
    /// a few seconds; a slow evaluation endpoint may need more).
    #[arg(long, default_value_t = 60, value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..=3600))]
    pub request_timeout_s: u64,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub temperature: f64,
    /// Token limit of one model turn.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: u32,
}

/// A model argument as a path: `default` is SmolLM2-135M-Instruct from `hat model fetch`.
pub fn model_path(model: &str) -> std::path::PathBuf {
    if model == "default" {
        hat_model::fetch::default_model_path()
    } else {
        std::path::PathBuf::from(model)
    }
}

/// A model path read from a config file: `default` there means what it means on the command
/// line (the fetched SmolLM2-135M-Instruct), not a file named `default`.
pub fn config_model(p: &mut std::path::PathBuf) {
    if p.as_os_str() == "default" {
        *p = model_path("default");
    }
}

/// An endpoint's sampling temperature: 0 (greedy) to 2.
pub fn check_temperature(t: f64) -> Result<()> {
    if !(t.is_finite() && (0.0..=2.0).contains(&t)) {
        bail!("--temperature must be between 0 (greedy) and 2, not {t}")
    }
    Ok(())
}

/// The chat model a spec names, with the identity results record.
pub fn chat_model(a: &ModelArgs) -> Result<(ModelIdentity, Box<dyn ChatModel + Send>)> {
    let Some(model) = a.model.as_deref() else {
        bail!("--model is required (openai:<name> with --base-url)")
    };
    check_temperature(a.temperature)?;
    let decoding = json!({"temperature": a.temperature, "max_tokens": a.max_tokens});
    if let Some(name) = model.strip_prefix("openai:") {
        let Some(base_url) = a.base_url.clone() else {
            bail!("--model {model} needs --base-url (or HAT_BASE_URL)")
        };
        let identity = ModelIdentity {
            name: model.to_string(),
            hash: format!("endpoint:{base_url}"),
            decoding,
        };
        let cfg = OpenAiConfig {
            base_url,
            model: name.to_string(),
            api_key_env: a.api_key_env.clone(),
            temperature: a.temperature,
            max_tokens: a.max_tokens,
            timeout: Duration::from_secs(a.request_timeout_s),
        };
        return Ok((identity, Box::new(OpenAiTeacher::new(cfg)?)));
    }
    let path = model_path(model);
    if !path.exists() {
        if model == "default" {
            bail!("the default model is not downloaded yet; run `hat model fetch` first");
        }
        bail!("--model `{model}`: no such file or folder (use default, a GGUF file, a Hugging Face folder, or openai:<name> with --base-url)");
    }
    hat_model::threads::set_threads(a.threads);
    let format: hat_model::WeightFormat = a.format.parse()?;
    let sampling = hat_model::SamplingParams {
        temperature: a.temperature as f32,
        ..Default::default()
    };
    let local = hat_local_model::LocalModel::load(&path, format, sampling, a.max_tokens as usize)?;
    let identity = ModelIdentity {
        name: local.name.clone(),
        hash: local.hash.clone(),
        decoding: json!({"temperature": a.temperature, "max_tokens": a.max_tokens, "format": a.format, "engine": "hat-model (candle)", "prefill_attention": hat_model::attention::prefill_precision()}),
    };
    Ok((identity, Box::new(local)))
}
