//! `hat model ...` (fetch, info, tokenize) and `hat generate`: the embedded engine from the
//! command line. Text that comes from a model file or a model (chat templates, token strings,
//! generated text) is shown with control characters escaped when it goes to a terminal.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;

use hat_harness::text::terminal_safe;
use hat_model::chat_template::{parse_chat_file, ChatInput};
use hat_model::fetch::{self, model_path};
use hat_model::generate::{Engine, GenerateRequest, TokenEvent};
use hat_model::loader::{inspect, load_tokenizer};
use hat_model::model::LoadOptions;
use hat_model::sampling::SamplingParams;
use hat_model::threads::set_threads;
use hat_model::weights::WeightFormat;

/// `hat model ...`
#[derive(Debug, clap::Subcommand)]
pub enum ModelCommand {
    /// Download the default model (SmolLM2-135M-Instruct Q4_1) into $HAT_HOME.
    Fetch(FetchArgs),
    /// Print architecture, parameter count, tensor formats, tokenizer and chat template.
    Info(InfoArgs),
    /// Print the token ids of TEXT as a JSON array.
    Tokenize(TokenizeArgs),
}

/// `hat model fetch`
#[derive(Debug, clap::Args)]
pub struct FetchArgs {
    /// Download again even when cached.
    #[arg(long)]
    pub force: bool,
}

/// `hat model info`
#[derive(Debug, clap::Args)]
pub struct InfoArgs {
    /// GGUF file or Hugging Face folder (default: the fetched model).
    pub path: Option<PathBuf>,
}

/// `hat model tokenize`
#[derive(Debug, clap::Args)]
pub struct TokenizeArgs {
    /// GGUF file or Hugging Face folder (default: the fetched model).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Prepend BOS when the model asks for it.
    #[arg(long)]
    pub add_special: bool,
    /// Text to tokenise.
    pub text: String,
}

/// Runs `hat model ...`.
pub fn run_model(cmd: ModelCommand) -> anyhow::Result<()> {
    match cmd {
        ModelCommand::Fetch(a) => {
            let t = Instant::now();
            let p = fetch::fetch_default(a.force)?;
            println!("{}", p.display());
            eprintln!("ok ({:.2}s)", t.elapsed().as_secs_f64());
        }
        ModelCommand::Info(a) => {
            let p = model_path(a.path);
            let (info, tok) = inspect(&p).with_context(|| format!("model {}", p.display()))?;
            let c = &info.config;
            println!("source:        {}", terminal_safe(&info.source));
            println!("architecture:  {}", c.arch.name());
            println!(
                "parameters:    {} ({:.1}M)",
                info.parameters,
                info.parameters as f64 / 1e6
            );
            println!(
                "shape:         layers={} hidden={} ffn={} heads={} kv_heads={} head_dim={} vocab={} ctx={}",
                c.num_layers,
                c.hidden_size,
                c.intermediate_size,
                c.num_heads,
                c.num_kv_heads,
                c.head_dim,
                c.vocab_size,
                c.max_position
            );
            println!(
                "rope:          theta={} layout={:?} tied_embeddings={} qkv_bias={}",
                c.rope_theta, c.rope_layout, c.tie_embeddings, c.attn_bias
            );
            let f: Vec<String> = info
                .tensor_formats
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect();
            println!("tensors:       {}", f.join(" "));
            println!(
                "tokenizer:     byte-level BPE, vocab={} pre={} specials={} bos={:?} eos={:?} add_bos={}",
                tok.vocab_size(),
                info.pre_tokenizer,
                tok.special_count(),
                tok.bos(),
                tok.eos(),
                tok.add_bos()
            );
            let eog: Vec<String> = tok
                .eog_tokens()
                .iter()
                .map(|&t| format!("{t}={}", terminal_safe(tok.token_str(t).unwrap_or("?"))))
                .collect();
            println!("stop tokens:   {}", eog.join(" "));
            match &info.chat_template {
                Some(t) => println!("chat template:\n{}", terminal_safe(t)),
                None => println!("chat template: (none)"),
            }
        }
        ModelCommand::Tokenize(a) => {
            let tok = load_tokenizer(&model_path(a.model))?;
            let ids = tok.encode(&a.text, a.add_special)?;
            println!("{}", serde_json::to_string(&ids)?);
        }
    }
    Ok(())
}

/// `hat generate`
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["prompt", "user", "chat"])))]
pub struct GenerateArgs {
    /// GGUF file or Hugging Face folder (default: the fetched model).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Raw prompt text (no chat template).
    #[arg(long, conflicts_with = "chat")]
    pub prompt: Option<String>,
    /// JSON chat file: `[messages]` or `{"messages": [...], "tools": [...]}`.
    #[arg(long, value_parser = crate::input::small_file)]
    pub chat: Option<PathBuf>,
    /// Single user message rendered with the chat template.
    #[arg(long, conflicts_with_all = ["prompt", "chat"])]
    pub user: Option<String>,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Sample from the K likeliest tokens only (0: all).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Sample from the smallest set of tokens whose probability reaches P (1: all).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub top_p: f32,
    /// Penalise tokens already seen: positive logits divided by it, negative multiplied (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub repetition_penalty: f32,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Stop string (repeatable).
    #[arg(long = "stop")]
    pub stop: Vec<String>,
    /// Weight format: original, q8_0, q4_0, f32, f16, bf16.
    #[arg(long, default_value = "original")]
    pub format: String,
    /// Compute threads (0 = all cores; at most 256).
    #[arg(long, default_value_t = 0, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=256))]
    pub threads: usize,
    /// Print generated ids and log-probabilities as JSON after the text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `hat generate`.
pub fn run_generate(a: GenerateArgs) -> anyhow::Result<()> {
    set_threads(a.threads);
    let format: WeightFormat = a.format.parse()?;
    // every argument is checked before the model loads
    let sampling = SamplingParams {
        temperature: a.temperature,
        top_k: a.top_k,
        top_p: a.top_p,
        repetition_penalty: a.repetition_penalty,
        seed: a.seed,
    };
    sampling.validate()?;
    let chat = if let Some(u) = &a.user {
        Some(ChatInput {
            messages: vec![serde_json::json!({"role": "user", "content": u})],
            tools: None,
            add_generation_prompt: true,
        })
    } else if let Some(f) = &a.chat {
        let s = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        Some(
            parse_chat_file(s.trim_start_matches('\u{feff}'))
                .with_context(|| format!("chat file {}", f.display()))?,
        )
    } else {
        None
    };
    let path = model_path(a.model.clone());
    let t = Instant::now();
    let engine = Engine::load(
        &path,
        LoadOptions {
            format,
            trainable: false,
        },
    )
    .with_context(|| format!("loading {}", path.display()))?;
    let load_s = t.elapsed().as_secs_f64();
    let text = match (&chat, &a.prompt) {
        (Some(c), _) => engine.render_chat(c)?,
        (None, Some(p)) => p.clone(),
        (None, None) => anyhow::bail!("give --prompt TEXT, --user TEXT or --chat FILE"),
    };
    let prompt = engine.encode(&text)?;
    let req = GenerateRequest {
        sampling,
        stop_strings: a.stop.clone(),
        ..GenerateRequest::new(prompt, a.max_tokens)
    };
    let mut out = std::io::stdout();
    // Generated text is the model's: on a terminal its control characters are shown, not run
    // (an ESC sequence could rewrite the screen); piped, it passes byte for byte.
    let tty = out.is_terminal();
    let mut cb = |ev: &TokenEvent| {
        let _ = if tty {
            out.write_all(terminal_safe(ev.text_delta).as_bytes())
        } else {
            out.write_all(ev.text_delta.as_bytes())
        };
        let _ = out.flush();
        true
    };
    let r = engine.generate(&req, Some(&mut cb))?;
    println!();
    if a.json {
        println!(
            "{}",
            serde_json::json!({"tokens": r.tokens, "logprobs": r.logprobs, "finish": format!("{:?}", r.finish)})
        );
    }
    let n = r.tokens.len();
    eprintln!(
        "[load {:.2}s | prompt {} tok, prefill {:.3}s ({:.1} tok/s) | {} new tok, decode {:.3}s ({:.1} tok/s) | {:?} | format {}]",
        load_s,
        r.prompt_tokens,
        r.prefill_secs,
        r.prompt_tokens as f64 / r.prefill_secs.max(1e-9),
        n,
        r.decode_secs,
        n as f64 / r.decode_secs.max(1e-9),
        r.finish,
        format
    );
    Ok(())
}
