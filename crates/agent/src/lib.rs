//! The embedded model behind the agent loop's [`ChatModel`] trait, so the same
//! loop runs on the in-process candle engine or on any OpenAI-compatible
//! endpoint ([`hat_teacher::openai`]).
//!
//! Each harness state's rendered system prompt is a token prefix of every
//! request under it; its KV state is stored in the engine's prefix cache on
//! first use and reused by every later request, so a turn pays only for the
//! event and the answer.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use hat_harness::{Message, Role};
use hat_model::chat_template::ChatInput;
use hat_model::{
    Engine, GenerateOutput, GenerateRequest, LoadOptions, SamplingParams, WeightFormat,
};
use hat_teacher::episode::ChatModel;
use hat_teacher::TeacherError;

/// Token and time counters over all requests, for reports.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Usage {
    pub requests: usize,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub generated_tokens: usize,
    pub prefill_secs: f64,
    pub decode_secs: f64,
}

pub struct LocalModel {
    engine: Engine,
    pub sampling: SamplingParams,
    pub max_new_tokens: usize,
    /// Token length of each system prompt's rendering, by the prompt's text.
    system_len: HashMap<String, Option<usize>>,
    pub usage: Usage,
    /// Name and content hash of the weights.
    pub name: String,
    pub hash: String,
}

fn model_err(e: impl std::fmt::Display) -> TeacherError {
    TeacherError::Model(e.to_string())
}

/// `sha256:` and the first 16 hex digits of a file's content.
pub fn file_hash(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format!("sha256:{}", &hex::encode(h.finalize())[..16]))
}

/// Chat messages as the model's template takes them. Tool results become
/// tagged user turns: HAT's call syntax lives in the text, so templates
/// without a tool role work unchanged (the same form the endpoint backend sends).
pub fn template_messages(messages: &[Message]) -> Vec<Value> {
    messages
        .iter()
        .map(|m| match m.role {
            Role::Tool => json!({"role": "user", "content": format!("[tool_result name={}] {}", m.name.as_deref().unwrap_or("tool"), m.content)}),
            Role::System => json!({"role": "system", "content": m.content}),
            Role::User => json!({"role": "user", "content": m.content}),
            Role::Assistant => json!({"role": "assistant", "content": m.content}),
        })
        .collect()
}

impl LocalModel {
    pub fn load(
        path: &Path,
        format: WeightFormat,
        sampling: SamplingParams,
        max_new_tokens: usize,
    ) -> Result<LocalModel, TeacherError> {
        if !path.exists() {
            return Err(TeacherError::Model(format!("{} does not exist; run `hat model fetch` for the default model, or pass a GGUF file or Hugging Face folder", path.display())));
        }
        let hash = if path.is_file() {
            file_hash(path).map_err(model_err)?
        } else {
            format!("dir:{}", path.display())
        };
        let engine = Engine::load(
            path,
            LoadOptions {
                format,
                ..LoadOptions::default()
            },
        )
        .map_err(model_err)?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(LocalModel {
            engine,
            sampling,
            max_new_tokens,
            system_len: HashMap::new(),
            usage: Usage::default(),
            name,
            hash,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The prompt's tokens and how many of them are the system prompt's rendering.
    fn request(&mut self, messages: &[Message]) -> Result<GenerateRequest, TeacherError> {
        let msgs = template_messages(messages);
        let text = self
            .engine
            .render_chat(&ChatInput {
                messages: msgs.clone(),
                tools: None,
                add_generation_prompt: true,
            })
            .map_err(model_err)?;
        let tokens = self.engine.encode(&text).map_err(model_err)?;
        let prefix = match messages.first() {
            Some(m) if m.role == Role::System => {
                let known = self.system_len.get(&m.content).copied();
                let len = match known {
                    Some(l) => l,
                    None => {
                        let sys = self
                            .engine
                            .render_chat(&ChatInput {
                                messages: msgs[..1].to_vec(),
                                tools: None,
                                add_generation_prompt: false,
                            })
                            .map_err(model_err)?;
                        let sys_tokens = self.engine.encode(&sys).map_err(model_err)?;
                        // Only a true token prefix can be cached.
                        let l = tokens.starts_with(&sys_tokens).then_some(sys_tokens.len());
                        self.system_len.insert(m.content.clone(), l);
                        l
                    }
                };
                len.filter(|&l| tokens.len() > l)
            }
            _ => None,
        };
        let mut req = GenerateRequest::new(tokens, self.max_new_tokens);
        req.sampling = self.sampling.clone();
        req.cache_prefix_len = prefix;
        Ok(req)
    }

    fn account(&mut self, o: &GenerateOutput) {
        self.usage.requests += 1;
        self.usage.prompt_tokens += o.prompt_tokens;
        self.usage.cached_tokens += o.cached_tokens;
        self.usage.generated_tokens += o.tokens.len();
        self.usage.prefill_secs += o.prefill_secs;
        self.usage.decode_secs += o.decode_secs;
    }
}

impl ChatModel for LocalModel {
    fn set_max_tokens(&mut self, max: u32) {
        self.max_new_tokens = max as usize;
    }

    fn complete(&mut self, messages: &[Message]) -> Result<String, TeacherError> {
        let req = self.request(messages)?;
        let out = self.engine.generate(&req, None).map_err(model_err)?;
        self.account(&out);
        Ok(out.text)
    }

    fn complete_batch(&mut self, chats: &[&[Message]]) -> Result<Vec<String>, TeacherError> {
        let reqs = chats
            .iter()
            .map(|m| self.request(m))
            .collect::<Result<Vec<_>, _>>()?;
        let outs = self.engine.generate_batch(&reqs).map_err(model_err)?;
        for o in &outs {
            self.account(o);
        }
        Ok(outs.into_iter().map(|o| o.text).collect())
    }
}
