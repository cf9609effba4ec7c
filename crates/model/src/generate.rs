//! Generation: token-in/token-out requests, KV cache, prefix cache, stop tokens and
//! strings, per-token log-probabilities, streaming callback, and batched decoding.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use candle_core::Tensor;

use crate::chat_template::{ChatInput, ChatTemplate};
use crate::constrain::TextCheck;
use crate::error::{Error, Result};
use crate::loader::{load, Loaded, ModelInfo};
use crate::model::{Cache, LoadOptions, Transformer};
use crate::prefix_cache::PrefixCache;
use crate::sampling::{logprob, Sampler, SamplingParams};
use crate::speculate::Drafter;
use crate::tokenizer::Tokenizer;

/// Draws of one token [`Engine`] makes under a tool-name constraint before it checks the
/// whole vocabulary.
const CHECK_REDRAWS: usize = 8;

/// Prompt tokens processed per forward call during prefill.
pub const PREFILL_CHUNK: usize = 512;

/// One generation request. The prompt is token ids, so training never re-tokenises.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    pub max_new_tokens: usize,
    pub sampling: SamplingParams,
    /// Extra stop tokens (the model's end-of-generation tokens always stop).
    pub stop_tokens: Vec<u32>,
    /// Stop when the generated text contains one of these; the text is cut before it.
    pub stop_strings: Vec<String>,
    /// Number of leading prompt tokens to store in the prefix cache (e.g. the rendered
    /// system prompt). Any cached prefix is reused whether or not this is set.
    pub cache_prefix_len: Option<usize>,
    /// Also store the whole prompt once it is computed, so a longer prompt that continues it
    /// (the next turn of the same conversation) starts from there instead of from the
    /// system prompt.
    pub cache_whole_prompt: bool,
    /// Token ids that may not be sampled while the answer is still blank (nothing but
    /// whitespace so far): an agent turn that must reply to the viewers, not open a tool
    /// call ([`Engine::tokens_opening`]). Log-probabilities stay those of the unconstrained
    /// model.
    pub suppress_at_start: Vec<u32>,
    /// A check on the answer's text at decode time (tool names, or whole tool calls): a
    /// token the check refuses is not sampled (the sampler draws again without it).
    /// Log-probabilities stay those of the unconstrained model.
    pub check: Option<Arc<dyn TextCheck>>,
    /// End the answer when it falls into a loop, keeping it up to the end of the loop's
    /// first copy ([`crate::repetition`], [`FinishReason::Loop`]): for text that goes to
    /// people (a live stream). Off by default, so evaluations and training data see what
    /// the model writes.
    pub stop_loops: bool,
}

impl GenerateRequest {
    /// Greedy request with defaults.
    pub fn new(prompt: Vec<u32>, max_new_tokens: usize) -> Self {
        Self {
            prompt,
            max_new_tokens,
            sampling: SamplingParams::greedy(),
            stop_tokens: Vec::new(),
            stop_strings: Vec::new(),
            cache_prefix_len: None,
            cache_whole_prompt: false,
            suppress_at_start: Vec::new(),
            check: None,
            stop_loops: false,
        }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// A stop token was generated (it is the last of `tokens`).
    StopToken(u32),
    /// A stop string appeared; `text` ends before it.
    StopString(String),
    /// `max_new_tokens` reached.
    Length,
    /// The streaming callback asked to stop.
    Cancelled,
    /// The request's check found the answer complete ([`TextCheck::complete`]).
    Complete,
    /// The answer fell into a loop ([`GenerateRequest::stop_loops`]): `tokens`, their
    /// log-probabilities and `text` end with the loop's first copy.
    Loop,
}

/// A streamed token.
#[derive(Debug, Clone)]
pub struct TokenEvent<'a> {
    pub index: usize,
    pub token: u32,
    pub logprob: f32,
    /// New text that is safe to show (complete UTF-8, not part of a possible stop string).
    pub text_delta: &'a str,
}

/// Result of one request.
#[derive(Debug, Clone)]
pub struct GenerateOutput {
    /// Generated ids, including a final stop token.
    pub tokens: Vec<u32>,
    /// Log-probability of each generated token under the model (temperature 1, unfiltered).
    pub logprobs: Vec<f32>,
    /// Decoded text (special tokens and stop string removed).
    pub text: String,
    pub finish: FinishReason,
    pub prompt_tokens: usize,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: usize,
    /// Prompt tokens whose keys and values a batched decode held once for all its rows
    /// (0 for a request decoded alone).
    pub shared_prefix_tokens: usize,
    pub prefill_secs: f64,
    pub decode_secs: f64,
    /// Speculative decoding: draft tokens proposed, and of them taken (a request decoded
    /// alone, or the last row of a batch left decoding; 0 with speculation off).
    pub drafted_tokens: usize,
    pub accepted_tokens: usize,
    /// Tokens sampled while the request's check refused every token (the answer left what
    /// the check holds it to; 0 without a check). Counted so that a serving or evaluation run
    /// can tell a check that fails open from one that held.
    pub unchecked_tokens: usize,
}

/// Streaming callback: return `false` to stop.
pub type OnToken<'a> = &'a mut dyn FnMut(&TokenEvent) -> bool;

/// Model + tokenizer + chat template + prefix cache.
#[derive(Debug)]
pub struct Engine {
    pub model: Transformer,
    pub tokenizer: Tokenizer,
    pub info: ModelInfo,
    template: Option<ChatTemplate>,
    prefix_cache: Mutex<PrefixCache>,
    /// Batched decode mutes finished rows (on by default; off only to measure what that
    /// saves: `hat bench generate --ragged`, or `HAT_KEEP_FINISHED_ROWS=1`).
    mute_finished_rows: std::sync::atomic::AtomicBool,
    /// Batched decode keeps a prefix whose keys and values every row holds bit for bit
    /// once, when it is at least this long (`usize::MAX`: never; `HAT_NO_SHARED_PREFIX` set,
    /// to any value).
    shared_prefix_min: std::sync::atomic::AtomicUsize,
    /// A request decoded alone feeds prompt-lookup drafts with its pending token
    /// ([`crate::speculate`]); on by default, off with `HAT_NO_SPECULATION` set (any value).
    speculate: std::sync::atomic::AtomicBool,
    /// Per token id, whether it writes only digits (and spaces): numbers are one symbol to
    /// the loop rule ([`crate::repetition::loop_start_with`]); built on first use.
    number_tokens: std::sync::OnceLock<Vec<bool>>,
}

/// Shortest common prefix that batched decode keeps once for all rows: below it, splitting
/// each row's attention in two costs more than the reads it saves.
pub const DEFAULT_SHARED_PREFIX_MIN: usize = 64;

/// Default prefix-cache budget.
pub const DEFAULT_PREFIX_CACHE_BYTES: usize = 256 << 20;

pub(crate) struct RowState {
    pub(crate) sampler: Sampler,
    pub(crate) seen: Vec<u32>,
    pub(crate) tokens: Vec<u32>,
    pub(crate) logprobs: Vec<f32>,
    pub(crate) bytes: Vec<u8>,
    pub(crate) emitted: usize,
    pub(crate) finish: Option<FinishReason>,
    pub(crate) stop_at: Option<usize>,
    /// The answer as the loop rule reads it (fed only under `stop_loops`).
    pub(crate) loops: crate::repetition::LoopWatch,
    /// Generated tokens the answer keeps when it ended in a loop (the rest were its copies).
    pub(crate) keep_tokens: Option<usize>,
    /// Its prompt-lookup drafts, once it decodes with them (alone, or the last row of a
    /// batch left decoding).
    pub(crate) drafter: Option<Drafter>,
    /// Tokens sampled without the check, which refused every token ([`Engine::sample_checked`]).
    pub(crate) unchecked: usize,
}

impl Engine {
    /// Wraps a loaded model.
    pub fn new(l: Loaded) -> Result<Self> {
        let template = match &l.chat_template {
            Some(src) => Some(ChatTemplate::for_tokenizer(src, &l.tokenizer)?),
            None => None,
        };
        Ok(Self {
            model: l.model,
            tokenizer: l.tokenizer,
            info: l.info,
            template,
            prefix_cache: Mutex::new(PrefixCache::new(DEFAULT_PREFIX_CACHE_BYTES)),
            // HAT_KEEP_FINISHED_ROWS=1 turns it off for a side-by-side measurement of any
            // command that decodes in batches (evaluation, serving, rollouts)
            mute_finished_rows: std::sync::atomic::AtomicBool::new(
                std::env::var_os("HAT_KEEP_FINISHED_ROWS").is_none(),
            ),
            // HAT_NO_SHARED_PREFIX (any value): every row reads its own copy (side-by-side timing)
            shared_prefix_min: std::sync::atomic::AtomicUsize::new(
                if std::env::var_os("HAT_NO_SHARED_PREFIX").is_some() {
                    usize::MAX
                } else {
                    DEFAULT_SHARED_PREFIX_MIN
                },
            ),
            // HAT_NO_SPECULATION (any value): one token a forward pass (side-by-side timing)
            speculate: std::sync::atomic::AtomicBool::new(
                std::env::var_os("HAT_NO_SPECULATION").is_none(),
            ),
            number_tokens: std::sync::OnceLock::new(),
        })
    }

    /// Whether a request decoded alone is sped up with prompt-lookup drafts (default on).
    /// Each answer is the one plain decoding gives (with quantised weights the same bits, f32
    /// weights up to float rounding); only the time
    /// differs.
    pub fn set_speculative(&self, on: bool) {
        self.speculate
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Which token ids write a number (digits, perhaps after spaces), by id.
    fn number_tokens(&self) -> &[bool] {
        self.number_tokens.get_or_init(|| {
            (0..self.tokenizer.vocab_size() as u32)
                .map(|t| {
                    let b = self.tokenizer.decode_bytes(&[t], true);
                    let digits = b.trim_ascii_start();
                    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
                })
                .collect()
        })
    }

    /// The setting of [`Engine::set_speculative`].
    pub fn speculative(&self) -> bool {
        self.speculate.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Batched decode keeps a common prefix of at least `min` positions once for all rows
    /// (`None`: never), in whole blocks of [`crate::attention::KEY_BLOCK`] positions. Answers
    /// are the same bits on the f16 cache this needs (a row's keys are cut into the same
    /// blocks, shared or copied); only the time differs.
    pub fn set_shared_prefix_min(&self, min: Option<usize>) {
        self.shared_prefix_min.store(
            min.unwrap_or(usize::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The setting of [`Engine::set_shared_prefix_min`].
    pub fn shared_prefix_min(&self) -> Option<usize> {
        let m = self
            .shared_prefix_min
            .load(std::sync::atomic::Ordering::Relaxed);
        (m != usize::MAX).then_some(m)
    }

    /// Whether batched decode mutes finished rows, so they stop reading their context
    /// (default on). Each row's answer is the same either way; only the time differs.
    pub fn set_mute_finished_rows(&self, on: bool) {
        self.mute_finished_rows
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Loads from a GGUF file or HF folder.
    pub fn load(path: &Path, opts: LoadOptions) -> Result<Self> {
        Self::new(load(path, opts)?)
    }

    /// Replaces the prefix cache with one of `bytes` capacity.
    pub fn set_prefix_cache_bytes(&self, bytes: usize) {
        *self.prefix_cache.lock().unwrap_or_else(|e| e.into_inner()) = PrefixCache::new(bytes);
    }

    /// Prefix cache statistics: (entries, bytes, hits, misses).
    pub fn prefix_cache_stats(&self) -> (usize, usize, u64, u64) {
        let pc = self.prefix_cache.lock().unwrap_or_else(|e| e.into_inner());
        let (h, m) = pc.stats();
        (pc.len(), pc.used_bytes(), h, m)
    }

    /// Renders a chat with the model's template.
    pub fn render_chat(&self, input: &ChatInput) -> Result<String> {
        self.template
            .as_ref()
            .ok_or_else(|| Error::ChatTemplate("the model has no chat template".into()))?
            .render(input)
    }

    /// Tokenises text (special tokens recognised, BOS added when the model wants it).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer.encode(text, true)
    }

    pub(crate) fn check(&self, req: &GenerateRequest) -> Result<()> {
        req.sampling.validate()?;
        if req.prompt.is_empty() {
            return Err(Error::InvalidArgument("empty prompt".into()));
        }
        let ctx = self.model.max_positions();
        if req.prompt.len().saturating_add(req.max_new_tokens) > ctx {
            return Err(Error::ContextOverflow {
                prompt: req.prompt.len(),
                max_new_tokens: req.max_new_tokens,
                context: ctx,
            });
        }
        let vocab = self.model.config().vocab_size as u32;
        if let Some(t) = req.prompt.iter().find(|&&t| t >= vocab) {
            return Err(Error::InvalidArgument(format!(
                "token id {t} out of vocabulary ({vocab})"
            )));
        }
        Ok(())
    }

    /// The tokens an answer that must not open with `opener` may not start with: every token
    /// whose text, leading whitespace aside, is a start of `opener` or begins with it, and the
    /// end-of-generation tokens (an empty answer is no reply either). Sorted.
    pub fn tokens_opening(&self, opener: &str) -> Vec<u32> {
        let opener = opener.trim_start();
        let mut out: Vec<u32> = self.tokenizer.eog_tokens().to_vec();
        if !opener.is_empty() {
            for id in 0..self.tokenizer.vocab_size() as u32 {
                let bytes = self.tokenizer.token_bytes(id);
                let Ok(text) = std::str::from_utf8(&bytes) else {
                    continue;
                };
                let t = text.trim_start();
                if !t.is_empty() && (opener.starts_with(t) || t.starts_with(opener)) {
                    out.push(id);
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    pub(crate) fn last_row(logits: &Tensor, row: usize) -> Result<Vec<f32>> {
        Ok(logits.get(row)?.flatten_all()?.to_vec1::<f32>()?)
    }

    /// Feeds `tokens` into a single-row cache in chunks, returning the last logits.
    pub(crate) fn prefill(&self, cache: &mut Cache, tokens: &[u32]) -> Result<Vec<f32>> {
        let mut last = Vec::new();
        for chunk in tokens.chunks(PREFILL_CHUNK) {
            let ids = Tensor::new(chunk, self.model.device())?.unsqueeze(0)?;
            let logits = self.model.forward_prompt(&ids, cache, true)?;
            last = Self::last_row(&logits, 0)?;
        }
        Ok(last)
    }

    /// Prefills one prompt using and feeding the prefix cache. Returns (cache, logits, cached).
    pub(crate) fn prefill_with_prefix(
        &self,
        req: &GenerateRequest,
    ) -> Result<(Cache, Vec<f32>, usize)> {
        let prompt = &req.prompt;
        let hit = self
            .prefix_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .lookup(prompt);
        let (mut cache, mut logits, mut done) = match hit {
            Some(h) => (h.cache, h.last_logits, h.len),
            None => (self.model.new_cache(1), Vec::new(), 0),
        };
        let cached = done;
        if let Some(n) = req.cache_prefix_len {
            let n = n.min(prompt.len());
            if n > done {
                logits = self.prefill(&mut cache, &prompt[done..n])?;
                done = n;
                self.prefix_cache
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(prompt[..n].to_vec(), cache.clone(), logits.clone());
            }
        }
        if done < prompt.len() {
            logits = self.prefill(&mut cache, &prompt[done..])?;
            if req.cache_whole_prompt {
                self.prefix_cache
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(prompt.to_vec(), cache.clone(), logits.clone());
            }
        }
        Ok((cache, logits, cached))
    }

    pub(crate) fn new_row(&self, req: &GenerateRequest) -> Result<RowState> {
        Ok(RowState {
            sampler: Sampler::new(req.sampling.clone())?,
            seen: req.prompt.clone(),
            tokens: Vec::new(),
            logprobs: Vec::new(),
            bytes: Vec::new(),
            emitted: 0,
            finish: None,
            stop_at: None,
            loops: Default::default(),
            keep_tokens: None,
            drafter: None,
            unchecked: 0,
        })
    }

    /// Samples from `logits` into `row`; returns the token and whether the row finished.
    pub(crate) fn step_row<'f>(
        &self,
        req: &GenerateRequest,
        row: &mut RowState,
        logits: &[f32],
        on_token: Option<&mut (dyn FnMut(&TokenEvent) -> bool + 'f)>,
    ) -> u32 {
        let held = !req.suppress_at_start.is_empty() && is_blank(&row.bytes);
        let mut masked = held.then(|| {
            let mut masked = logits.to_vec();
            for &t in &req.suppress_at_start {
                if let Some(x) = masked.get_mut(t as usize) {
                    *x = f32::NEG_INFINITY;
                }
            }
            masked
        });
        let tok = match &req.check {
            Some(check) => {
                let suppress = held.then_some(req.suppress_at_start.as_slice());
                self.sample_checked(check.as_ref(), row, logits, &mut masked, suppress)
            }
            None => row
                .sampler
                .sample(masked.as_deref().unwrap_or(logits), &row.seen),
        };
        let lp = logprob(logits, tok);
        row.seen.push(tok);
        row.tokens.push(tok);
        row.logprobs.push(lp);
        let is_stop = self.tokenizer.eog_tokens().contains(&tok) || req.stop_tokens.contains(&tok);
        if !is_stop {
            row.bytes.extend(self.tokenizer.decode_bytes(&[tok], true));
        }
        // stop strings
        let text = crate::constrain::text_so_far(&row.bytes);
        let valid_len = text.len();
        let mut safe = valid_len;
        for s in &req.stop_strings {
            if s.is_empty() {
                continue;
            }
            if let Some(pos) = text.find(s.as_str()) {
                if row.stop_at.is_none_or(|p| pos < p) {
                    row.stop_at = Some(pos);
                    row.finish = Some(FinishReason::StopString(s.clone()));
                }
            }
            // hold back a suffix that could start a stop string
            for k in (1..s.len()).rev() {
                if text.len() >= k
                    && text.is_char_boundary(text.len() - k)
                    && s.starts_with(&text[text.len() - k..])
                {
                    safe = safe.min(text.len() - k);
                    break;
                }
            }
        }
        if let Some(p) = row.stop_at {
            safe = p;
        }
        if row.finish.is_none() && is_stop {
            row.finish = Some(FinishReason::StopToken(tok));
            safe = valid_len;
        }
        if row.finish.is_none()
            && !is_stop
            && req.check.as_ref().is_some_and(|c| c.complete(&row.bytes))
        {
            row.finish = Some(FinishReason::Complete);
            safe = valid_len;
        }
        if row.finish.is_none() && !is_stop && req.stop_loops {
            let is_number = self
                .number_tokens()
                .get(tok as usize)
                .copied()
                .unwrap_or(false);
            if let Some(keep) = row.loops.push(tok, is_number) {
                // the answer's text as it stood after its first `keep` tokens (each token's
                // bytes were appended one by one), on a character boundary
                let bytes: usize = row.tokens[..keep]
                    .iter()
                    .map(|&t| self.tokenizer.decode_bytes(&[t], true).len())
                    .sum();
                let mut p = bytes.min(valid_len);
                while !text.is_char_boundary(p) {
                    p -= 1;
                }
                row.finish = Some(FinishReason::Loop);
                row.keep_tokens = Some(keep);
                // no stop string was found: it would have finished the row
                row.stop_at = Some(p);
                safe = p;
            }
        }
        if row.finish.is_none() && row.tokens.len() >= req.max_new_tokens {
            row.finish = Some(FinishReason::Length);
            safe = valid_len;
        }
        let safe = safe.max(row.emitted);
        if let Some(cb) = on_token {
            let delta = std::str::from_utf8(&row.bytes[row.emitted..safe]).unwrap_or("");
            let ev = TokenEvent {
                index: row.tokens.len() - 1,
                token: tok,
                logprob: lp,
                text_delta: delta,
            };
            if !cb(&ev) && row.finish.is_none() {
                row.finish = Some(FinishReason::Cancelled);
            }
        }
        row.emitted = safe;
        tok
    }

    /// Samples a token that the request's check admits after the row's text: the sampler
    /// draws, and a refused token is masked and the sampler draws again. A token without text
    /// (the end of the answer, a control token) is checked as a NUL byte, so an answer cannot
    /// stop halfway through a name or a call. After [`CHECK_REDRAWS`] refusals every token
    /// the check refuses is masked at once; when it refuses them all (it cannot, as long as
    /// single bytes are tokens), the sampler draws from the unconstrained logits, less the
    /// tokens `suppress` holds back (an answer that may not open with a call).
    fn sample_checked(
        &self,
        check: &dyn TextCheck,
        row: &mut RowState,
        logits: &[f32],
        masked: &mut Option<Vec<f32>>,
        suppress: Option<&[u32]>,
    ) -> u32 {
        let text = |t: u32| {
            let b = self.tokenizer.decode_bytes(&[t], true);
            if b.is_empty() {
                vec![0]
            } else {
                b
            }
        };
        for _ in 0..CHECK_REDRAWS {
            let t = row
                .sampler
                .sample(masked.as_deref().unwrap_or(logits), &row.seen);
            if check.admits(&row.bytes, &text(t)) {
                return t;
            }
            masked.get_or_insert_with(|| logits.to_vec())[t as usize] = f32::NEG_INFINITY;
        }
        let m = masked.get_or_insert_with(|| logits.to_vec());
        let mut any = false;
        for (t, x) in m.iter_mut().enumerate() {
            if *x != f32::NEG_INFINITY {
                if check.admits(&row.bytes, &text(t as u32)) {
                    any = true;
                } else {
                    *x = f32::NEG_INFINITY;
                }
            }
        }
        if any {
            return row.sampler.sample(m, &row.seen);
        }
        row.unchecked += 1;
        m.copy_from_slice(logits);
        for &t in suppress.unwrap_or_default() {
            if let Some(x) = m.get_mut(t as usize) {
                *x = f32::NEG_INFINITY;
            }
        }
        row.sampler.sample(m, &row.seen)
    }

    /// Draft tokens that fit after the pending token: within the context and the tokens the
    /// request may still generate.
    pub(crate) fn draft_room(&self, cache: &Cache, req: &GenerateRequest, row: &RowState) -> usize {
        self.model
            .max_positions()
            .saturating_sub(cache.shared_len() + cache.len() + 1)
            .min(req.max_new_tokens.saturating_sub(row.tokens.len() + 1))
    }

    /// After a pass over `[pending, draft..]`, samples from each position's logits in turn
    /// (position i's follow the pending token and the first i draft tokens) while the sampler
    /// picks the draft's next token; the row's drafter learns how many it took and the cache
    /// keeps the positions of the pending token and those. Returns the last token sampled,
    /// not yet fed to the model.
    pub(crate) fn take_draft<'f>(
        &self,
        req: &GenerateRequest,
        row: &mut RowState,
        logits: &[f32],
        draft: &[u32],
        cache: &mut Cache,
        mut on_token: Option<&mut (dyn FnMut(&TokenEvent) -> bool + 'f)>,
    ) -> u32 {
        let base = cache.len() - 1 - draft.len();
        let mut taken = 0;
        let mut last = 0;
        for (i, l) in logits
            .chunks_exact(self.model.config().vocab_size)
            .enumerate()
        {
            last = self.step_row(req, row, l, on_token.as_deref_mut());
            if row.finish.is_some() || draft.get(i) != Some(&last) {
                break;
            }
            taken += 1;
        }
        if let (Some(d), false) = (&mut row.drafter, draft.is_empty()) {
            d.taken(draft.len(), taken);
        }
        cache.truncate(base + 1 + taken);
        last
    }

    /// One step of a row decoding alone in `cache`: its pending token `tok` and, when the row
    /// has a drafter, a prompt-lookup draft in one pass ([`Engine::take_draft`]). Returns the
    /// last token sampled, not yet fed to the model.
    pub(crate) fn decode_alone<'f>(
        &self,
        req: &GenerateRequest,
        row: &mut RowState,
        tok: u32,
        cache: &mut Cache,
        on_token: Option<&mut (dyn FnMut(&TokenEvent) -> bool + 'f)>,
    ) -> Result<u32> {
        let mut ids = vec![tok];
        if let Some(d) = &row.drafter {
            ids.extend_from_slice(d.draft(&row.seen, self.draft_room(cache, req, row)));
        }
        let input = Tensor::new(ids.as_slice(), self.model.device())?.unsqueeze(0)?;
        let out = self
            .model
            .forward(&input, cache, ids.len() == 1)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        Ok(self.take_draft(req, row, &out, &ids[1..], cache, on_token))
    }

    /// The token a muted row of a batch is fed (its outputs are ignored).
    pub(crate) fn filler(&self) -> u32 {
        self.tokenizer.pad().or(self.tokenizer.eos()).unwrap_or(0)
    }

    pub(crate) fn finish_row(
        row: RowState,
        prompt_tokens: usize,
        cached: usize,
        prefill: f64,
        decode: f64,
    ) -> GenerateOutput {
        let mut text = String::from_utf8_lossy(&row.bytes).into_owned();
        if let Some(p) = row.stop_at {
            text.truncate(p);
        }
        let (mut tokens, mut logprobs) = (row.tokens, row.logprobs);
        if let Some(k) = row.keep_tokens {
            tokens.truncate(k);
            logprobs.truncate(k);
        }
        // a loop's copies cut off above may hold some of them
        let unchecked = row.unchecked.min(tokens.len());
        GenerateOutput {
            tokens,
            logprobs,
            text,
            finish: row.finish.unwrap_or(FinishReason::Length),
            prompt_tokens,
            cached_tokens: cached,
            shared_prefix_tokens: 0,
            prefill_secs: prefill,
            decode_secs: decode,
            drafted_tokens: row.drafter.as_ref().map_or(0, |d| d.drafted),
            accepted_tokens: row.drafter.as_ref().map_or(0, |d| d.accepted),
            unchecked_tokens: unchecked,
        }
    }

    /// Generates for one request, calling `on_token` for each new token.
    pub fn generate(
        &self,
        req: &GenerateRequest,
        mut on_token: Option<OnToken>,
    ) -> Result<GenerateOutput> {
        self.check(req)?;
        let t0 = Instant::now();
        let (mut cache, logits, cached) = self.prefill_with_prefix(req)?;
        let prefill = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let mut row = self.new_row(req)?;
        if req.max_new_tokens == 0 {
            row.finish = Some(FinishReason::Length);
        }
        row.drafter = self.speculative().then(Drafter::new);
        // the token sampled last, not yet fed to the model
        let mut pending = None;
        if row.finish.is_none() {
            pending = Some(self.step_row(req, &mut row, &logits, on_token.as_deref_mut()));
        }
        while let (Some(tok), None) = (pending, &row.finish) {
            pending =
                Some(self.decode_alone(req, &mut row, tok, &mut cache, on_token.as_deref_mut())?);
        }
        Ok(Self::finish_row(
            row,
            req.prompt.len(),
            cached,
            prefill,
            t1.elapsed().as_secs_f64(),
        ))
    }

    /// Generates for several requests at once: each prompt is prefilled on its own (with
    /// the prefix cache), then all rows decode together in one batch.
    pub fn generate_batch(&self, reqs: &[GenerateRequest]) -> Result<Vec<GenerateOutput>> {
        if reqs.is_empty() {
            return Ok(Vec::new());
        }
        if let [one] = reqs {
            // alone it decodes with speculation (where that is on)
            return Ok(vec![self.generate(one, None)?]);
        }
        for r in reqs {
            self.check(r)?;
        }
        let t0 = Instant::now();
        let mut caches = Vec::with_capacity(reqs.len());
        let mut logits = Vec::with_capacity(reqs.len());
        let mut cached = Vec::with_capacity(reqs.len());
        for r in reqs {
            let (c, l, n) = self.prefill_with_prefix(r)?;
            caches.push(c);
            logits.push(l);
            cached.push(n);
        }
        let mut cache = match self.shared_prefix_min() {
            Some(min) => Cache::stack_shared(&caches, min)?,
            None => Cache::stack(&caches)?,
        };
        drop(caches);
        let shared = cache.shared_len();
        let prefill = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let mut rows = reqs
            .iter()
            .map(|r| self.new_row(r))
            .collect::<Result<Vec<_>>>()?;
        for (row, r) in rows.iter_mut().zip(reqs) {
            if r.max_new_tokens == 0 {
                row.finish = Some(FinishReason::Length);
            }
        }
        let filler = self.filler();
        // A finished row stays in the batch but is muted: its attention reads no context
        // any more (at agent-prompt lengths that read is most of a row's cost per step).
        // Copying the other rows into a smaller cache instead cost more than it saved.
        let mute_finished = self
            .mute_finished_rows
            .load(std::sync::atomic::Ordering::Relaxed);
        // Once one row is left unfinished (the others muted), it decodes with drafts like a
        // request alone: the other rows get filler tokens, and the cache's one length follows
        // that row.
        let b = rows.len();
        // the last row's token sampled by a speculative pass, not yet fed
        let mut carry: Option<u32> = None;
        loop {
            let mut next = Vec::with_capacity(rows.len());
            for (i, row) in rows.iter_mut().enumerate() {
                if row.finish.is_some() {
                    next.push(filler);
                } else if let Some(t) = carry.take() {
                    next.push(t);
                } else {
                    next.push(self.step_row(&reqs[i], row, &logits[i], None));
                }
                if mute_finished && row.finish.is_some() {
                    cache.mute_row(i);
                }
            }
            if rows.iter().all(|r| r.finish.is_some()) {
                break;
            }
            let mut live = rows.iter().enumerate().filter(|(_, r)| r.finish.is_none());
            if let (true, Some((r, _)), None) = (self.speculative(), live.next(), live.next()) {
                let room = self.draft_room(&cache, &reqs[r], &rows[r]);
                let row = &mut rows[r];
                let draft = row
                    .drafter
                    .get_or_insert_with(Drafter::new)
                    .draft(&row.seen, room)
                    .to_vec();
                if !draft.is_empty() {
                    let k = draft.len();
                    let mut ids = vec![filler; b * (k + 1)];
                    ids[r * (k + 1)] = next[r];
                    ids[r * (k + 1) + 1..(r + 1) * (k + 1)].copy_from_slice(&draft);
                    let input = Tensor::from_vec(ids, (b, k + 1), self.model.device())?;
                    let out = self
                        .model
                        .forward(&input, &mut cache, false)?
                        .get(r)?
                        .flatten_all()?
                        .to_vec1::<f32>()?;
                    let t = self.take_draft(&reqs[r], row, &out, &draft, &mut cache, None);
                    carry = row.finish.is_none().then_some(t);
                    continue;
                }
            }
            let ids = Tensor::new(next.as_slice(), self.model.device())?.unsqueeze(1)?;
            let out = self.model.forward(&ids, &mut cache, true)?;
            for (i, row) in rows.iter().enumerate() {
                if row.finish.is_none() {
                    logits[i] = Self::last_row(&out, i)?;
                }
            }
        }
        let decode = t1.elapsed().as_secs_f64();
        Ok(rows
            .into_iter()
            .zip(reqs)
            .zip(cached)
            .map(|((row, r), c)| GenerateOutput {
                shared_prefix_tokens: shared,
                ..Self::finish_row(row, r.prompt.len(), c, prefill, decode)
            })
            .collect())
    }
}

/// Whether an answer so far says nothing yet: whitespace only, any Unicode whitespace (the
/// parsers trim an answer with `str::trim`), a character still cut at the end counting as
/// blank until it is whole. Stops at the first character that is not blank.
fn is_blank(bytes: &[u8]) -> bool {
    let mut i = 0;
    while let Some(&c) = bytes.get(i) {
        let n = match c {
            0x00..=0x7F => {
                if !(c as char).is_whitespace() {
                    return false;
                }
                i += 1;
                continue;
            }
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return false,
        };
        let Some(ch) = bytes.get(i..i + n) else {
            return true;
        };
        match std::str::from_utf8(ch) {
            Ok(s) if s.chars().all(char::is_whitespace) => i += n,
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::is_blank;

    #[test]
    fn an_answer_is_blank_while_it_holds_whitespace_only() {
        for t in ["", " \n\t", "\r\u{b}\u{c}", "\u{3000}", " \u{a0}\u{2028}"] {
            assert!(is_blank(t.as_bytes()), "{t:?}");
            assert_eq!(is_blank(t.as_bytes()), t.trim().is_empty());
        }
        for t in ["x", " CALL", "\u{3000}<", "é", "\u{3000}好"] {
            assert!(!is_blank(t.as_bytes()), "{t:?}");
        }
        // a character cut at the end is blank until it is whole
        let ideo = "\u{3000}".as_bytes();
        assert!(is_blank(&ideo[..2]));
        assert!(!is_blank(&[b' ', 0x80]), "a stray continuation byte");
        assert!(!is_blank(&[0xE3, 0x80, b'x']), "an invalid sequence");
    }
}
