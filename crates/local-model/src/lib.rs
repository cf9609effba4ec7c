//! The embedded model behind the agent loop's [`ChatModel`] trait, so the same
//! loop runs on the in-process candle engine or on any OpenAI-compatible
//! endpoint ([`hat_teacher::openai`]).
//!
//! The rendered system prompt starts with the harness (persona, rules,
//! skills, tools), which is the same for every request under a harness
//! state, and ends with the stream (products, recent activity), which is
//! not. Each request caches the longest token prefix it shares with recent
//! system prompts, so the harness part is computed once per state and the
//! full system prompt once per episode; a turn pays for the rest. A server
//! warms a stream's whole opening (system prompt and history turns) while
//! idle, and decodes turns continuously ([`ChatModel::begin_turn`],
//! [`ChatModel::step_turns`] over [`hat_model::ContinuousBatch`]).

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use hat_agent::episode::{ChatModel, Completion, TurnId, TurnRule};
use hat_agent::AgentError;
use hat_harness::{CallGrammar, Message, Role};
use hat_model::chat_template::ChatInput;
use hat_model::{
    ContinuousBatch, Engine, GenerateOutput, GenerateRequest, LoadOptions, NameSlots, RowId,
    SamplingParams, TextCheck, WeightFormat,
};
use hat_teacher::openai::wire_messages;

/// Prefix-cache budget: a 135M model's KV state is ~46 KB a token, so a
/// 1.7k-token system prompt is ~78 MB; this keeps about 50 of them.
pub const PREFIX_CACHE_BYTES: usize = 4 << 30;
/// System prompts remembered for prefix sharing.
const RECENT_SYSTEMS: usize = 32;
/// Shared prefixes shorter than this are not worth a cache entry.
const MIN_SHARED_PREFIX: usize = 128;

/// Distinct prompts whose sample counts [`LocalModel`] keeps.
const SEEN_PROMPTS: usize = 1 << 16;

/// A prompt's tokens hashed (FNV-1a over their little-endian bytes): stable across
/// builds and machines, unlike `std`'s hasher, so a sampled run draws the same seeds
/// everywhere.
pub fn prompt_key(tokens: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for t in tokens {
        for b in t.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The seed of the `repeat`-th sample (from 0) of the prompt whose key is `key` in a run
/// seeded with `run`: a SplitMix64 finaliser over the three, so nearby inputs give
/// unrelated seeds.
pub fn request_seed(run: u64, key: u64, repeat: u32) -> u64 {
    let mut z = run ^ key.rotate_left(17) ^ u64::from(repeat).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

pub struct LocalModel {
    engine: Engine,
    pub sampling: SamplingParams,
    pub max_new_tokens: usize,
    /// Token length of recent system prompts' rendering (`None`: not a token prefix of the
    /// conversation). Bounded: every episode's system prompt differs in its stream part.
    system_len: VecDeque<(String, Option<usize>)>,
    /// Token sequences of recent system prompts, to find shared prefixes.
    recent: VecDeque<Vec<u32>>,
    /// Keep every prompt's state in the prefix cache for the conversation's next turn.
    pub cache_turns: bool,
    /// End an answer that falls into a loop after its first copy ([`ChatModel::stop_loops`]).
    pub stop_loops: bool,
    /// Name and content hash of the weights.
    pub name: String,
    pub hash: String,
    /// How often each prompt (by [`prompt_key`]) has been sampled: a request's seed mixes
    /// `sampling.seed`, its prompt and this count ([`request_seed`]), so equal prompts (a
    /// group of RL rollouts) draw different answers, while an item's answer depends on its
    /// own prompt only, not on the batch it ran in or on where a resumed run started.
    /// Cleared when it holds [`SEEN_PROMPTS`] (a server's repeated prompt may then draw
    /// a seed again).
    seen: HashMap<u64, u32>,
    /// Per call opener, the tokens a reply-only turn may not start with (a vocabulary scan,
    /// done once per syntax).
    openings: HashMap<&'static str, Vec<u32>>,
    /// Turns decoding continuously ([`ChatModel::begin_turn`]): the running batch, and per
    /// row its prompt's ids and when it began.
    batch: ContinuousBatch,
    turns: HashMap<RowId, (Vec<u32>, Instant)>,
    /// Whether to offer continuous batching (on; `HAT_NO_CONTINUOUS` set, to any value, turns
    /// it off so a server decodes turn by turn, for a side-by-side measurement).
    continuous: bool,
}

fn model_err(e: impl std::fmt::Display) -> AgentError {
    AgentError::Model(e.to_string())
}

impl LocalModel {
    pub fn load(
        path: &Path,
        format: WeightFormat,
        sampling: SamplingParams,
        max_new_tokens: usize,
    ) -> Result<LocalModel, AgentError> {
        if !path.exists() {
            return Err(AgentError::Model(format!("{} does not exist; run `hat model fetch` for the default model, or pass a GGUF file or Hugging Face folder", path.display())));
        }
        let hash = if path.is_file() {
            let hex = hat_model::fetch::sha256_file(path).map_err(model_err)?;
            format!("sha256:{}", &hex[..16])
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
        engine.set_prefix_cache_bytes(PREFIX_CACHE_BYTES);
        Ok(LocalModel {
            engine,
            sampling,
            max_new_tokens,
            system_len: VecDeque::new(),
            recent: VecDeque::new(),
            cache_turns: false,
            stop_loops: false,
            name,
            hash,
            seen: HashMap::new(),
            openings: HashMap::new(),
            batch: ContinuousBatch::new(),
            turns: HashMap::new(),
            continuous: std::env::var_os("HAT_NO_CONTINUOUS").is_none(),
        })
    }

    /// Bounds the prefix cache (default [`PREFIX_CACHE_BYTES`]); RL rollouts share one
    /// prompt per group and need far less.
    pub fn set_prefix_cache_bytes(&self, bytes: usize) {
        self.engine.set_prefix_cache_bytes(bytes);
    }

    /// The prompt's tokens and how many of them to keep in the prefix cache: the system
    /// prompt's rendering once it has been seen whole (or always with `whole_system`),
    /// before that the part it shares with recent system prompts.
    fn request(
        &mut self,
        messages: &[Message],
        whole_system: bool,
    ) -> Result<GenerateRequest, AgentError> {
        let input = ChatInput {
            messages: wire_messages(messages),
            tools: None,
            add_generation_prompt: true,
        };
        let text = self.engine.render_chat(&input).map_err(model_err)?;
        let tokens = self.engine.encode(&text).map_err(model_err)?;
        let prefix = match messages.first() {
            Some(m) if m.role == Role::System => {
                let known = self
                    .system_len
                    .iter()
                    .find(|(s, _)| *s == m.content)
                    .map(|(_, l)| *l);
                let len = match known {
                    Some(l) => l,
                    None => {
                        let sys = self
                            .engine
                            .render_chat(&ChatInput {
                                messages: input.messages[..1].to_vec(),
                                tools: None,
                                add_generation_prompt: false,
                            })
                            .map_err(model_err)?;
                        let sys_tokens = self.engine.encode(&sys).map_err(model_err)?;
                        // Only a true token prefix can be cached.
                        let l = tokens.starts_with(&sys_tokens).then_some(sys_tokens.len());
                        if self.system_len.len() == RECENT_SYSTEMS {
                            self.system_len.pop_front();
                        }
                        self.system_len.push_back((m.content.clone(), l));
                        l
                    }
                };
                match len.filter(|&l| tokens.len() > l) {
                    None => None,
                    Some(l) => {
                        let sys = &tokens[..l];
                        let shared = self
                            .recent
                            .iter()
                            .map(|r| common_prefix(r, sys))
                            .max()
                            .unwrap_or(0);
                        if !self.recent.iter().any(|r| r.as_slice() == sys) {
                            if self.recent.len() == RECENT_SYSTEMS {
                                self.recent.pop_front();
                            }
                            self.recent.push_back(sys.to_vec());
                        }
                        // Seen whole before: cache it whole (later turns of an
                        // episode). New: cache the part shared with others.
                        if shared == l || whole_system {
                            Some(l)
                        } else if shared >= MIN_SHARED_PREFIX {
                            Some(shared)
                        } else {
                            Some(l)
                        }
                    }
                }
            }
            _ => None,
        };
        let mut req = GenerateRequest::new(tokens, self.max_new_tokens);
        req.cache_prefix_len = prefix;
        req.cache_whole_prompt = self.cache_turns;
        req.stop_loops = self.stop_loops;
        Ok(req)
    }

    /// [`LocalModel::request`] for a turn to sample: the next seed of the run.
    fn sampled(&mut self, messages: &[Message]) -> Result<GenerateRequest, AgentError> {
        let mut req = self.request(messages, false)?;
        req.sampling = self.sampling.clone();
        // greedy decoding draws nothing: no key to hash, no count to keep (a server's every turn)
        if self.sampling.temperature == 0.0 {
            return Ok(req);
        }
        if self.seen.len() >= SEEN_PROMPTS {
            self.seen.clear();
        }
        let key = prompt_key(&req.prompt);
        let repeat = self.seen.entry(key).or_insert(0);
        req.sampling.seed = request_seed(self.sampling.seed, key, *repeat);
        *repeat += 1;
        Ok(req)
    }

    /// [`LocalModel::sampled`] for a turn under `rule`: a reply-only turn may not open
    /// with its syntax's call opener.
    fn turn(
        &mut self,
        messages: &[Message],
        rule: TurnRule,
    ) -> Result<GenerateRequest, AgentError> {
        let mut req = self.sampled(messages)?;
        match rule {
            TurnRule::ReplyOnly { opener, grammar } => {
                let engine = &self.engine;
                req.suppress_at_start = self
                    .openings
                    .entry(opener)
                    .or_insert_with(|| engine.tokens_opening(opener))
                    .clone();
                req.check = grammar.map(|g| Arc::new(Calls(g)) as Arc<dyn TextCheck>);
            }
            TurnRule::Named { slots, names } => {
                req.check =
                    NameSlots::new(slots, &names).map(|n| Arc::new(n) as Arc<dyn TextCheck>);
            }
            TurnRule::Calls(grammar) => req.check = Some(Arc::new(Calls(grammar))),
            TurnRule::Any => {}
        }
        Ok(req)
    }
}

/// A harness's call grammar as the engine's decode-time check.
#[derive(Debug)]
struct Calls(Arc<CallGrammar>);

impl TextCheck for Calls {
    fn admits(&self, before: &[u8], token: &[u8]) -> bool {
        self.0.admits(before, token)
    }

    fn complete(&self, answer: &[u8]) -> bool {
        self.0.complete(answer)
    }
}

impl ChatModel for LocalModel {
    fn set_max_tokens(&mut self, max: u32) {
        self.max_new_tokens = max as usize;
    }

    fn keep_conversations_cached(&mut self, on: bool) {
        self.cache_turns = on;
    }

    fn stop_loops(&mut self, on: bool) {
        self.stop_loops = on;
    }

    fn warm(&mut self, opening: &[Message]) -> Result<usize, AgentError> {
        // samples nothing: no seed drawn
        let mut req = self.request(opening, true)?;
        let Some(system) = req.cache_prefix_len else {
            return Ok(0);
        };
        // The whole opening (system prompt and earlier turns) where its rendering is a token
        // prefix of every continuation's; the turn's own header is computed with the turn.
        let mut len = system;
        if opening.len() > 1 {
            let text = self
                .engine
                .render_chat(&ChatInput {
                    messages: wire_messages(opening),
                    tools: None,
                    add_generation_prompt: false,
                })
                .map_err(model_err)?;
            let whole = self.engine.encode(&text).map_err(model_err)?;
            if whole.len() > system
                && whole.len() < req.prompt.len()
                && req.prompt.starts_with(&whole)
            {
                len = whole.len();
            }
        }
        // The system prompt is cached on its own as well: the next opening of this stream
        // keeps it while its turns change (the history window slides).
        req.cache_prefix_len = Some(system);
        req.cache_whole_prompt = len > system;
        req.prompt.truncate(len);
        req.max_new_tokens = 0;
        let out = self.engine.generate(&req, None).map_err(model_err)?;
        Ok(len - out.cached_tokens)
    }

    fn complete(&mut self, messages: &[Message]) -> Result<String, AgentError> {
        Ok(self.generate(messages)?.text)
    }

    fn complete_batch(&mut self, chats: &[&[Message]]) -> Result<Vec<String>, AgentError> {
        Ok(self
            .generate_batch(chats)?
            .into_iter()
            .map(|c| c.text)
            .collect())
    }

    fn generate(&mut self, messages: &[Message]) -> Result<Completion, AgentError> {
        let t0 = Instant::now();
        let req = self.sampled(messages)?;
        let out = self.engine.generate(&req, None).map_err(model_err)?;
        Ok(completion(req.prompt, out, t0.elapsed().as_secs_f64()))
    }

    fn generate_streaming(
        &mut self,
        messages: &[Message],
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Completion, AgentError> {
        let t0 = Instant::now();
        let req = self.sampled(messages)?;
        let mut cb = |e: &hat_model::TokenEvent| e.text_delta.is_empty() || on_text(e.text_delta);
        let out = self
            .engine
            .generate(&req, Some(&mut cb))
            .map_err(model_err)?;
        Ok(completion(req.prompt, out, t0.elapsed().as_secs_f64()))
    }

    fn generate_batch(&mut self, chats: &[&[Message]]) -> Result<Vec<Completion>, AgentError> {
        self.generate_turns(chats, &[])
    }

    fn continuous(&self) -> bool {
        self.continuous
    }

    fn begin_turn(&mut self, chat: &[Message], rule: TurnRule) -> Result<TurnId, AgentError> {
        let t0 = Instant::now();
        let req = self.turn(chat, rule)?;
        let prompt = req.prompt.clone();
        let id = self.batch.add(&self.engine, req).map_err(model_err)?;
        self.turns.insert(id, (prompt, t0));
        Ok(id)
    }

    fn abort_turns(&mut self) {
        self.batch = ContinuousBatch::new();
        self.turns.clear();
    }

    fn step_turns(&mut self) -> Result<Vec<(TurnId, Completion)>, AgentError> {
        self.step_turns_streaming(&mut |_, _| {})
    }

    fn step_turns_streaming(
        &mut self,
        on_text: &mut dyn FnMut(TurnId, &str),
    ) -> Result<Vec<(TurnId, Completion)>, AgentError> {
        let ended = match self.batch.step_streaming(&self.engine, on_text) {
            Ok(e) => e,
            Err(e) => {
                self.turns.clear();
                return Err(model_err(e));
            }
        };
        Ok(ended
            .into_iter()
            .map(|(id, o)| {
                let (prompt, t0) = self
                    .turns
                    .remove(&id)
                    .unwrap_or_else(|| (Vec::new(), Instant::now()));
                (id, completion(prompt, o, t0.elapsed().as_secs_f64()))
            })
            .collect())
    }

    fn generate_turns(
        &mut self,
        chats: &[&[Message]],
        rules: &[TurnRule],
    ) -> Result<Vec<Completion>, AgentError> {
        let t0 = Instant::now();
        let mut reqs = Vec::with_capacity(chats.len());
        for (i, m) in chats.iter().enumerate() {
            reqs.push(self.turn(m, rules.get(i).cloned().unwrap_or_default())?);
        }
        let outs = self.engine.generate_batch(&reqs).map_err(model_err)?;
        let seconds = t0.elapsed().as_secs_f64() / outs.len().max(1) as f64;
        Ok(reqs
            .into_iter()
            .zip(outs)
            .map(|(r, o)| completion(r.prompt, o, seconds))
            .collect())
    }
}

fn completion(prompt_ids: Vec<u32>, o: GenerateOutput, seconds: f64) -> Completion {
    tracing::debug!(
        prompt = o.prompt_tokens,
        cached = o.cached_tokens,
        generated = o.tokens.len(),
        drafted = o.drafted_tokens,
        accepted = o.accepted_tokens,
        prefill_s = o.prefill_secs,
        decode_s = o.decode_secs,
        finish = ?o.finish,
        "request"
    );
    tracing::trace!(text = %o.text, "answer");
    if o.unchecked_tokens > 0 {
        tracing::warn!(
            tokens = o.unchecked_tokens,
            "the call check refused every token: sampled without it (the answer may not parse)"
        );
    }
    Completion {
        text: o.text,
        tokens: o.tokens,
        logprobs: o.logprobs,
        prompt_ids,
        prompt_tokens: o.prompt_tokens,
        cached_tokens: o.cached_tokens,
        shared_prefix_tokens: o.shared_prefix_tokens,
        drafted_tokens: o.drafted_tokens,
        accepted_tokens: o.accepted_tokens,
        unchecked_tokens: o.unchecked_tokens,
        seconds,
        prefill_seconds: o.prefill_secs,
        decode_seconds: o.decode_secs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hat_harness::CallSyntax;
    use serde_json::json;

    #[test]
    fn prompt_keys_are_fixed_by_the_tokens_alone() {
        // FNV-1a's published offset basis, and a value computed outside Rust: the key (and
        // so every sampled run) is the same on every build and machine
        assert_eq!(prompt_key(&[]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(prompt_key(&[1, 49152]), 0x0ab0_f125_6f2b_ef64);
        assert_ne!(prompt_key(&[1, 2]), prompt_key(&[2, 1]));
    }

    #[test]
    fn request_seeds_differ_by_run_prompt_and_repeat() {
        let s = request_seed(1, 2, 0);
        assert_ne!(s, request_seed(1, 2, 1));
        assert_ne!(s, request_seed(1, 3, 0));
        assert_ne!(s, request_seed(2, 2, 0));
        assert_eq!(s, request_seed(1, 2, 0));
    }

    #[test]
    fn each_constrained_turn_hands_the_engine_its_check() {
        let dir = tempfile::tempdir().unwrap();
        let path = hat_train::fixture::tiny_model(&dir.path().join("m"), 1, "qwen2").unwrap();
        let mut m =
            LocalModel::load(&path, WeightFormat::F32, SamplingParams::default(), 12).unwrap();
        let chat = [Message::user("in M?")];
        let schema = json!({"type": "object", "properties": {"sku": {"type": "string"}},
                            "required": ["sku"]});
        let grammar = CallGrammar::new(CallSyntax::Bracket, [("get_stock", &schema)]);
        let req = m.turn(&chat, TurnRule::Calls(Arc::new(grammar))).unwrap();
        let check = req.check.expect("a Calls turn is checked");
        assert!(check.admits(b"[[get_stock ", b"{\"sku\""));
        assert!(!check.admits(b"[[get_stock ", b"{\"id\""));
        assert!(!check.admits(b"[[", b"nope"));
        let named = TurnRule::Named {
            slots: CallSyntax::Bracket.name_slots(),
            names: Arc::from(vec!["get_stock".to_string()]),
        };
        let check = m
            .turn(&chat, named)
            .unwrap()
            .check
            .expect("a Named turn is checked");
        assert!(check.admits(b"[[", b"get_stock {\"id\""));
        assert!(!check.admits(b"[[", b"nope"));
        assert!(m.turn(&chat, TurnRule::Any).unwrap().check.is_none());
    }

    #[test]
    fn a_reply_only_turn_under_the_grammar_ends_at_the_reply_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = hat_train::fixture::tiny_model(&dir.path().join("m"), 1, "qwen2").unwrap();
        let mut m =
            LocalModel::load(&path, WeightFormat::F32, SamplingParams::default(), 12).unwrap();
        let chat = [Message::user("in M?")];
        let schema = json!({"type": "object"});
        let grammar =
            CallGrammar::new(CallSyntax::Bracket, [("get_stock", &schema)]).with_reply_limit(10);
        let rule = |grammar| TurnRule::ReplyOnly {
            opener: "[[",
            grammar,
        };
        let req = m.turn(&chat, rule(Some(Arc::new(grammar)))).unwrap();
        assert!(!req.suppress_at_start.is_empty(), "the opener is kept out");
        let check = req.check.expect("the grammar checks the reply");
        assert!(check.complete(b"Yes, size M is in stock. "));
        assert!(!check.complete(b"Yes, in M "));
        assert!(!check.admits(b"Sure ", b"<tool_call>"), "foreign markup");
        let req = m.turn(&chat, rule(None)).unwrap();
        assert!(!req.suppress_at_start.is_empty());
        assert!(req.check.is_none(), "no grammar, no limit");
    }
}
