//! `--model` specs shared by `hat run` and `hat eval`.

use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;

use hat_eval::ModelIdentity;
use hat_teacher::episode::ChatModel;
use hat_teacher::openai::{OpenAiConfig, OpenAiTeacher};

#[derive(Args, Clone)]
pub struct ModelArgs {
    /// `openai:<model name>` with --base-url (any OpenAI-compatible endpoint: vLLM, SGLang, llama.cpp's server).
    #[arg(long)]
    pub model: Option<String>,
    /// Endpoint for `openai:` models, e.g. http://127.0.0.1:8000/v1.
    #[arg(long, env = "HAT_BASE_URL")]
    pub base_url: Option<String>,
    /// Environment variable holding the endpoint's API key.
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    /// Token limit of one model turn.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: u32,
}

/// The chat model a spec names, with the identity results record.
pub fn chat_model(a: &ModelArgs) -> Result<(ModelIdentity, Box<dyn ChatModel>)> {
    let Some(model) = a.model.as_deref() else {
        bail!("--model is required (openai:<name> with --base-url)")
    };
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
            timeout: Duration::from_secs(300),
        };
        return Ok((identity, Box::new(OpenAiTeacher::new(cfg)?)));
    }
    bail!("unknown --model `{model}`: use openai:<name> with --base-url")
}
