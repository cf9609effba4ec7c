//! Continuous batching: requests join a running batch and leave it between decode steps.
//!
//! [`Engine::generate_batch`] decodes a fixed set of requests until the last one ends, so a
//! request that needs 18 tokens waits for the one that needs 60, and a request that arrives
//! meanwhile waits for the whole batch. A server (many live streams, each reply a chain of
//! turns with tool calls between them) wants each turn back the step it ends and each new
//! turn decoding from the next step on. [`ContinuousBatch`] holds the running rows and their
//! KV cache: [`ContinuousBatch::add`] prefills a request on its own (with the prefix cache)
//! and regroups the cache with it ([`Cache::regroup`]: the batch's shared system-prompt
//! prefix stays shared, rows that ended are dropped, padding shrinks to the longest row);
//! [`ContinuousBatch::step`] decodes one token for every running row and returns the
//! requests that ended. A row that ends is muted in place until the next regroup, which
//! happens when a request joins, when only one row is left running (it then decodes with
//! prompt-lookup drafts, as a request alone does), or when ended rows outnumber running
//! ones. Each answer is the one [`Engine::generate`] gives for the same request: with
//! quantised weights (an f16 cache) the same bits (see [`crate::attention`]), with f32
//! weights up to float rounding.

use std::time::Instant;

use candle_core::Tensor;

use crate::error::Result;
use crate::generate::{
    Engine, FinishReason, GenerateOutput, GenerateRequest, RowState, TokenEvent,
};
use crate::model::Cache;
use crate::speculate::Drafter;

/// A request's handle in a [`ContinuousBatch`].
pub type RowId = u64;

impl Engine {
    /// Answers every request of `reqs`, at most `width` decoding at once, the next request
    /// joining as soon as a row ends ([`ContinuousBatch`]); the outputs come back in the order
    /// of `reqs`. The same answers as [`Engine::generate_batch`] over chunks of `width` (with
    /// quantised weights the same bits), without the chunk's short answers waiting for its longest: offline
    /// sampling (replay data, distillation rollouts) whose answers run from a few tokens to
    /// the limit keeps `width` rows busy.
    pub fn generate_continuous(
        &self,
        reqs: Vec<GenerateRequest>,
        width: usize,
    ) -> Result<Vec<GenerateOutput>> {
        let width = width.max(1);
        let total = reqs.len();
        let mut outs: Vec<Option<GenerateOutput>> = (0..total).map(|_| None).collect();
        let mut slot = std::collections::HashMap::with_capacity(width);
        let mut batch = ContinuousBatch::new();
        let mut waiting = reqs.into_iter().enumerate();
        let mut done = 0;
        while done < total {
            while batch.running() < width {
                let Some((i, req)) = waiting.next() else {
                    break;
                };
                slot.insert(batch.add(self, req)?, i);
            }
            for (id, out) in batch.step(self)? {
                if let Some(i) = slot.remove(&id) {
                    outs[i] = Some(out);
                    done += 1;
                }
            }
        }
        Ok(outs.into_iter().flatten().collect())
    }
}

/// The engine's per-token callback that hands row `id`'s new text to `on_text`.
fn text_of<'a>(
    id: RowId,
    on_text: &'a mut dyn FnMut(RowId, &str),
) -> impl FnMut(&TokenEvent) -> bool + 'a {
    move |ev| {
        if !ev.text_delta.is_empty() {
            on_text(id, ev.text_delta);
        }
        true
    }
}

struct Row {
    id: RowId,
    req: GenerateRequest,
    /// `None` once its output went to the caller (the row stays, muted, until a regroup).
    state: Option<RowState>,
    /// The token sampled last, not yet fed to the model (`None` once the row ended).
    pending: Option<u32>,
    cached: usize,
    prefill_secs: f64,
    joined: Instant,
    /// Shared-prefix positions of the batch when it last decoded with the row.
    shared: usize,
    /// Text of the token sampled at the join, for the next [`ContinuousBatch::step_streaming`].
    unsent: String,
}

/// Requests decoding together, joining and leaving between steps (see the module docs).
/// Owns no engine: every call takes the one it decodes with, which must be the same.
#[derive(Default)]
pub struct ContinuousBatch {
    /// Row `i` of the cache is `rows[i]`; rows whose `pending` is `None` ended and are muted.
    cache: Option<Cache>,
    rows: Vec<Row>,
    /// Requests that ended, to hand out with the next step.
    ended: Vec<(RowId, GenerateOutput)>,
    next_id: RowId,
}

impl ContinuousBatch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Requests still decoding.
    pub fn running(&self) -> usize {
        self.rows.iter().filter(|r| r.pending.is_some()).count()
    }

    /// Whether nothing is decoding and no ended request waits to be handed out.
    pub fn is_empty(&self) -> bool {
        self.running() == 0 && self.ended.is_empty()
    }

    /// Rows the cache holds (running and muted).
    pub fn rows(&self) -> usize {
        self.cache.as_ref().map_or(0, Cache::batch)
    }

    /// Prefills `req` (from the prefix cache where it can), samples its first token, and
    /// makes it a row of the batch; its output comes from a later [`ContinuousBatch::step`].
    /// A request that is invalid or does not fit is refused here and changes nothing.
    pub fn add(&mut self, engine: &Engine, req: GenerateRequest) -> Result<RowId> {
        engine.check(&req)?;
        let t0 = Instant::now();
        let (single, logits, cached) = engine.prefill_with_prefix(&req)?;
        let mut state = engine.new_row(&req)?;
        // drafts serve the row once it decodes alone
        state.drafter = engine.speculative().then(Drafter::new);
        let id = self.next_id;
        self.next_id += 1;
        let mut unsent = String::new();
        let pending = if req.max_new_tokens == 0 {
            state.finish = Some(FinishReason::Length);
            None
        } else {
            let mut keep = |ev: &TokenEvent| {
                unsent.push_str(ev.text_delta);
                true
            };
            let t = engine.step_row(&req, &mut state, &logits, Some(&mut keep));
            state.finish.is_none().then_some(t)
        };
        let mut row = Row {
            id,
            req,
            state: Some(state),
            pending,
            cached,
            prefill_secs: t0.elapsed().as_secs_f64(),
            joined: Instant::now(),
            shared: 0,
            unsent,
        };
        if row.pending.is_none() {
            self.ended.extend(Self::hand_out(&mut row));
            return Ok(id);
        }
        let keep = self.live_rows();
        let cache = match &self.cache {
            Some(c) => c.regroup(&keep, Some(&single), engine.shared_prefix_min())?,
            None => single,
        };
        self.retain(&keep);
        self.cache = Some(cache);
        row.prefill_secs = t0.elapsed().as_secs_f64();
        row.joined = Instant::now();
        self.rows.push(row);
        Ok(id)
    }

    /// Decodes one step for every running row (several tokens for a row running alone,
    /// with drafts) and returns the requests that ended since the last step. An error fails
    /// every running request: the batch is empty afterwards.
    pub fn step(&mut self, engine: &Engine) -> Result<Vec<(RowId, GenerateOutput)>> {
        self.step_streaming(engine, &mut |_, _| {})
    }

    /// [`ContinuousBatch::step`], calling `on_text` with each row's new text as it is decoded
    /// (complete UTF-8, held back where it could start a stop string, as
    /// [`Engine::generate`]'s `on_token` gives it): the text of a row's first token comes
    /// with the first step after it joined.
    pub fn step_streaming(
        &mut self,
        engine: &Engine,
        on_text: &mut dyn FnMut(RowId, &str),
    ) -> Result<Vec<(RowId, GenerateOutput)>> {
        for r in &mut self.rows {
            if !r.unsent.is_empty() {
                on_text(r.id, &std::mem::take(&mut r.unsent));
            }
        }
        // between steps only rows that ended at their join wait here (a step hands out the
        // rows it ends): they never decode, so their text goes out whole
        for (id, out) in &self.ended {
            if !out.text.is_empty() {
                on_text(*id, &out.text);
            }
        }
        match self.decode(engine, on_text) {
            Ok(()) => Ok(std::mem::take(&mut self.ended)),
            Err(e) => {
                self.rows.clear();
                self.cache = None;
                self.ended.clear();
                Err(e)
            }
        }
    }

    fn live_rows(&self) -> Vec<usize> {
        (0..self.rows.len())
            .filter(|&i| self.rows[i].pending.is_some())
            .collect()
    }

    /// Keeps `rows[i]` for `i` in `keep` (sorted), in order.
    fn retain(&mut self, keep: &[usize]) {
        let mut i = 0;
        self.rows.retain(|_| {
            let k = keep.binary_search(&i).is_ok();
            i += 1;
            k
        });
    }

    fn decode(&mut self, engine: &Engine, on_text: &mut dyn FnMut(RowId, &str)) -> Result<()> {
        let live = self.live_rows();
        if live.is_empty() {
            self.rows.clear();
            self.cache = None;
            return Ok(());
        }
        let Some(cache) = &self.cache else {
            return Ok(());
        };
        let ended = self.rows.len() - live.len();
        // an ended row's positions also keep the batch long: near the context's end, drop them
        let near_end = cache.shared_len() + cache.len() + 16 > engine.model.max_positions();
        if ended > 0 && (live.len() == 1 || ended >= live.len() || near_end) {
            let c = cache.regroup(&live, None, engine.shared_prefix_min())?;
            self.retain(&live);
            self.cache = Some(c);
        }
        let Some(cache) = self.cache.as_mut() else {
            return Ok(());
        };
        let shared = cache.shared_len();
        if let [row] = self.rows.as_mut_slice() {
            // alone: the pending token and a prompt-lookup draft in one pass
            let (Some(tok), Some(state)) = (row.pending, row.state.as_mut()) else {
                return Ok(());
            };
            row.shared = shared;
            let mut send = text_of(row.id, on_text);
            let t = engine.decode_alone(&row.req, state, tok, cache, Some(&mut send))?;
            row.pending = state.finish.is_none().then_some(t);
        } else {
            let filler = engine.filler();
            let mut next = Vec::with_capacity(self.rows.len());
            for (i, r) in self.rows.iter().enumerate() {
                match r.pending {
                    Some(t) => next.push(t),
                    None => {
                        next.push(filler);
                        // muted again each step: it reads only what it writes from now on
                        cache.mute_row(i);
                    }
                }
            }
            let ids = Tensor::new(next.as_slice(), engine.model.device())?.unsqueeze(1)?;
            let out = engine.model.forward(&ids, cache, true)?;
            for (i, r) in self.rows.iter_mut().enumerate() {
                let (Some(_), Some(state)) = (r.pending, r.state.as_mut()) else {
                    continue;
                };
                r.shared = shared;
                let logits = Engine::last_row(&out, i)?;
                let mut send = text_of(r.id, on_text);
                let t = engine.step_row(&r.req, state, &logits, Some(&mut send));
                r.pending = state.finish.is_none().then_some(t);
            }
        }
        // hand out the rows that ended; they stay in the cache, muted, until a regroup
        for r in self.rows.iter_mut().filter(|r| r.pending.is_none()) {
            self.ended.extend(Self::hand_out(r));
        }
        Ok(())
    }

    /// The output of a row that ended, once: its state moves out.
    fn hand_out(r: &mut Row) -> Option<(RowId, GenerateOutput)> {
        let state = r.state.take()?;
        Some((
            r.id,
            GenerateOutput {
                shared_prefix_tokens: r.shared,
                ..Engine::finish_row(
                    state,
                    r.req.prompt.len(),
                    r.cached,
                    r.prefill_secs,
                    r.joined.elapsed().as_secs_f64(),
                )
            },
        ))
    }
}
