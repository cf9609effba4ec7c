//! The episode loop: prompt -> generate -> parse calls -> validate -> dispatch
//! -> hooks -> feed results back -> reply -> reply hooks (retry with feedback).
//!
//! It is a state machine ([`Episode`]): the caller asks for the next prompt,
//! generates, and feeds the output back. [`run`] drives one episode;
//! [`run_batch`] drives many in lockstep so a model can decode them as one
//! batch. Every failure a model can produce (unparseable calls, unknown
//! tools, bad arguments, endless tool rounds) is bounded and recorded,
//! never a crash.

use hat_harness::render::render_turn;
use hat_harness::{CallGrammar, Harness, HookDecision, Message, ReplyReview};
use hat_tasks::episode::{opening, Scene, StoreBackend};
use hat_tasks::task::{event_kind, event_line_with, event_vars};
use hat_tasks::Attempt;
use hat_world::World;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use crate::{AgentError, Trajectory};

/// One model turn as the model produced it. Models that return only text (endpoints,
/// scripts) leave the token fields empty; the embedded engine fills them, so training can
/// consume exactly the tokens that were sampled (token-in/token-out).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Completion {
    pub text: String,
    /// Generated token ids.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<u32>,
    /// Log-probability of each generated token under the model.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub logprobs: Vec<f32>,
    /// The prompt's token ids exactly as the model computed on them (the embedded engine
    /// fills it): with `tokens`, the sequence RL trains on without re-tokenising. Not written
    /// to result files (a system prompt is ~1,700 ids).
    #[serde(skip)]
    pub prompt_ids: Vec<u32>,
    /// Prompt length in tokens (0 when unknown).
    pub prompt_tokens: usize,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: usize,
    /// Prompt tokens a batched decode held once for all its rows (the embedded engine).
    #[serde(skip_serializing_if = "is_zero_usize")]
    pub shared_prefix_tokens: usize,
    /// Speculative decoding (the embedded engine, a turn decoded alone): draft tokens
    /// proposed, and of them taken.
    #[serde(skip_serializing_if = "is_zero_usize")]
    pub drafted_tokens: usize,
    #[serde(skip_serializing_if = "is_zero_usize")]
    pub accepted_tokens: usize,
    /// Tokens sampled while the call check (`--call-grammar`, `hat serve`) refused every
    /// token, so the answer left the grammar there (the embedded engine).
    #[serde(skip_serializing_if = "is_zero_usize")]
    pub unchecked_tokens: usize,
    /// Wall time of the call; rows of one batch share the batch's time equally.
    pub seconds: f64,
    /// Of which prompt processing and token generation, where the model reports them
    /// (the embedded engine; a batch reports its own totals on every row).
    #[serde(skip_serializing_if = "is_zero")]
    pub prefill_seconds: f64,
    #[serde(skip_serializing_if = "is_zero")]
    pub decode_seconds: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn is_zero_usize(x: &usize) -> bool {
    *x == 0
}

impl From<String> for Completion {
    fn from(text: String) -> Self {
        Completion {
            text,
            ..Completion::default()
        }
    }
}

/// What a model turn may hold.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TurnRule {
    /// A tool call or a reply.
    #[default]
    Any,
    /// A tool call or a reply, where a call names one of `names` (the harness's tools):
    /// [`CallCheck::ToolNames`]. `slots` are the texts that open a call's name slot in
    /// the harness's syntax (`CallSyntax::name_slots`); a model that can constrain its
    /// decoding writes only these names there, others answer as they would anyway.
    Named {
        slots: &'static [&'static str],
        names: Arc<[String]>,
    },
    /// A tool call or a reply, where every call is one the harness reads: its syntax, one of
    /// its tools, arguments that fit the tool's schema ([`CallCheck::Grammar`]). A
    /// model that can constrain its decoding holds its calls to the grammar; others answer
    /// as they would anyway.
    Calls(Arc<CallGrammar>),
    /// A reply to the viewers, no tool call: an episode's last turn under
    /// [`EpisodeConfig::final_reply`]. `opener` is the text a call begins with in the
    /// harness's syntax; a model that can constrain its decoding keeps its answer from
    /// opening with it (and from being empty). `grammar` is the harness's call grammar under
    /// [`CallCheck::Grammar`]: the reply keeps to it as every other turn does, and
    /// ends where [`CallGrammar::complete`] finds it past the harness's reply limit.
    ReplyOnly {
        opener: &'static str,
        grammar: Option<Arc<CallGrammar>>,
    },
}

/// A turn's handle in a model's running batch ([`ChatModel::begin_turn`]).
pub type TurnId = u64;

/// Anything that continues a chat: a remote endpoint, the embedded model, a script.
pub trait ChatModel {
    fn complete(&mut self, messages: &[Message]) -> Result<String, AgentError>;

    /// Sets the token limit of one answer (IFEval answers need more than an agent turn).
    fn set_max_tokens(&mut self, _max: u32) {}

    /// Serving hint: end an answer that falls into a loop (the same sentence over and over)
    /// after the loop's first copy, instead of decoding copies up to the token limit that
    /// viewers would see and the next turn would read. Models that cannot ignore it.
    fn stop_loops(&mut self, _on: bool) {}

    /// Serving hint: keep each prompt's computed state, so the next turn of the same
    /// conversation (after a tool result) starts from it. Models without such a cache
    /// ignore it.
    fn keep_conversations_cached(&mut self, _on: bool) {}

    /// Serving hint: compute and keep the state of a conversation's opening (its system
    /// prompt and any earlier turns) before a turn needs it, so that turn only pays for what
    /// follows. A server
    /// calls it while idle: for a new stream, after a harness swap, after a reply changed
    /// the stream's recent activity. Returns the prompt tokens computed (0: already cached,
    /// or a model without a cache).
    fn warm(&mut self, _opening: &[Message]) -> Result<usize, AgentError> {
        Ok(0)
    }

    /// Continues several chats; models that decode in batches override this.
    fn complete_batch(&mut self, chats: &[&[Message]]) -> Result<Vec<String>, AgentError> {
        chats.iter().map(|m| self.complete(m)).collect()
    }

    /// [`ChatModel::complete`] with token ids, log-probabilities and timing where the model
    /// has them (the episode loop records these).
    fn generate(&mut self, messages: &[Message]) -> Result<Completion, AgentError> {
        let t0 = Instant::now();
        let text = self.complete(messages)?;
        Ok(Completion {
            seconds: t0.elapsed().as_secs_f64(),
            ..Completion::from(text)
        })
    }

    /// [`ChatModel::generate`], calling `on_text` with each piece of new text as it is
    /// generated (return `false` to stop early). Models that cannot stream call it once
    /// with the whole answer.
    fn generate_streaming(
        &mut self,
        messages: &[Message],
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Completion, AgentError> {
        let c = self.generate(messages)?;
        on_text(&c.text);
        Ok(c)
    }

    /// [`ChatModel::generate_batch`] where each chat's turn follows its [`TurnRule`]. Models
    /// that cannot constrain their decoding answer as they would anyway (the default); the
    /// episode then takes what text its last turn holds outside any call as the reply.
    fn generate_turns(
        &mut self,
        chats: &[&[Message]],
        _rules: &[TurnRule],
    ) -> Result<Vec<Completion>, AgentError> {
        self.generate_batch(chats)
    }

    /// Whether this model batches continuously: turns join a running batch and leave it
    /// between decode steps ([`ChatModel::begin_turn`], [`ChatModel::step_turns`]), so a turn
    /// that ends early goes back to its episode at once instead of waiting for the longest
    /// turn of its batch (the embedded engine). A server uses it when it is there.
    fn continuous(&self) -> bool {
        false
    }

    /// Starts `chat`'s next turn under `rule` in the running batch (its prompt is computed
    /// now); the answer comes from a later [`ChatModel::step_turns`]. An error concerns this
    /// turn only.
    fn begin_turn(&mut self, _chat: &[Message], _rule: TurnRule) -> Result<TurnId, AgentError> {
        Err(AgentError::Model(
            "this model does not batch continuously; use generate_turns".into(),
        ))
    }

    /// Decodes one step of every running turn and returns the turns that ended, with their
    /// answers. An error ends every running turn.
    fn step_turns(&mut self) -> Result<Vec<(TurnId, Completion)>, AgentError> {
        Ok(Vec::new())
    }

    /// [`ChatModel::step_turns`], calling `on_text` with each running turn's new text as it is
    /// decoded. Models that cannot stream send nothing (the default): the text comes with the
    /// ended turn.
    fn step_turns_streaming(
        &mut self,
        _on_text: &mut dyn FnMut(TurnId, &str),
    ) -> Result<Vec<(TurnId, Completion)>, AgentError> {
        self.step_turns()
    }

    /// Drops every running turn (a caller that gives up on them after an error).
    fn abort_turns(&mut self) {}

    /// [`ChatModel::complete_batch`] with token ids, log-probabilities and timing.
    fn generate_batch(&mut self, chats: &[&[Message]]) -> Result<Vec<Completion>, AgentError> {
        let t0 = Instant::now();
        let texts = self.complete_batch(chats)?;
        let seconds = t0.elapsed().as_secs_f64() / texts.len().max(1) as f64;
        Ok(texts
            .into_iter()
            .map(|text| Completion {
                seconds,
                ..Completion::from(text)
            })
            .collect())
    }
}

#[derive(Debug, Clone, Copy)]
pub struct EpisodeConfig {
    /// Model turns at most, tool rounds and retries included.
    pub max_turns: usize,
    /// Keep what the episode's tool calls changed in the world (a live stream: a claimed
    /// coupon stays claimed). Off for evaluation and data generation, which roll every
    /// episode back so the next task sees the same world. An episode that fails is rolled
    /// back either way.
    pub keep_changes: bool,
    /// The last allowed turn must reply ([`TurnRule::ReplyOnly`]): a live host answers the
    /// viewer within its turn budget instead of ending silent after a run of tool calls. On
    /// for serving; off by default for evaluation, data generation and RL rollouts, whose
    /// published rows were measured without it (and whose RL log-probabilities are those of
    /// the unconstrained model).
    pub final_reply: bool,
    /// How the model's calls are held to the harness at decode time: [`CallCheck::Grammar`]
    /// for serving; [`CallCheck::Free`] by default for evaluation, data generation and RL
    /// rollouts (the published rows were measured without a check, and RL's
    /// log-probabilities are those of the unconstrained model).
    pub calls: CallCheck,
}

/// How a model's tool calls are held to the harness at decode time ([`EpisodeConfig::calls`]).
/// A model that cannot constrain its decoding (a remote endpoint, a script) answers as it
/// would anyway under every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CallCheck {
    /// Calls are written freely ([`TurnRule::Any`]).
    #[default]
    Free,
    /// A call may name only the harness's tools ([`TurnRule::Named`]): a host never calls a
    /// tool it lacks.
    ToolNames,
    /// Every call is one the harness reads, arguments included, and a reply ends at the
    /// harness's reply limit ([`TurnRule::Calls`], `hat_harness::CallGrammar`).
    Grammar,
}

impl Default for EpisodeConfig {
    fn default() -> Self {
        EpisodeConfig {
            max_turns: hat_harness::hooks::DEFAULT_MODEL_TURNS,
            keep_changes: false,
            final_reply: false,
            calls: CallCheck::Free,
        }
    }
}

/// One episode in progress. Mutating tool calls run inside a world episode
/// that is rolled back when the episode ends, so episodes on one world must
/// run one after another (see [`run_batch`]).
pub struct Episode<'a> {
    scene: Scene<'a>,
    harness: &'a Harness,
    world: &'a World,
    cfg: EpisodeConfig,
    vars: Value,
    messages: Vec<Message>,
    attempt: Attempt,
    log: Vec<HookDecision>,
    completions: Vec<Completion>,
    turns: usize,
    retries: usize,
    open: bool,
    done: bool,
    /// What every turn but a reply-only one may hold ([`EpisodeConfig::calls`] for this
    /// harness), built once.
    calls: TurnRule,
}

impl<'a> Episode<'a> {
    pub fn start(
        scene: Scene<'a>,
        harness: &'a Harness,
        world: &'a World,
        cfg: EpisodeConfig,
    ) -> Result<Episode<'a>, AgentError> {
        let mut messages = opening(&scene, harness, world)?;
        let vars = event_vars(scene.event, harness.viewer_limits());
        let mut log = Vec::new();
        let kind = event_kind(scene.event);
        let event = serde_json::to_value(scene.event).unwrap_or_default();
        let outcome = harness.on_event(kind, &event, &vars, &mut log);
        // the event's turn carries every note its hooks gave, in hook order: `inject` notes
        // and a command hook's context (`additional_context`)
        messages.push(Message::user(render_turn(
            &event_line_with(scene.event, harness.viewer_limits()),
            &outcome.notes,
        )));
        let mut ep = Episode {
            scene,
            harness,
            world,
            cfg,
            vars,
            messages,
            attempt: Attempt::default(),
            log,
            completions: Vec::new(),
            turns: 0,
            retries: 0,
            open: false,
            done: false,
            calls: match cfg.calls {
                CallCheck::Free => TurnRule::Any,
                CallCheck::ToolNames => TurnRule::Named {
                    slots: harness.syntax.name_slots(),
                    names: harness.tools.iter().map(|t| t.name.clone()).collect(),
                },
                CallCheck::Grammar => TurnRule::Calls(Arc::new(CallGrammar::for_harness(harness))),
            },
        };
        if let Some(reason) = outcome.blocked {
            ep.attempt
                .format_errors
                .push(format!("event blocked by a hook: {reason}"));
            ep.done = true;
            return Ok(ep);
        }
        world
            .begin_episode()
            .map_err(|e| AgentError::World(e.to_string()))?;
        ep.open = true;
        Ok(ep)
    }

    /// The conversation to continue, or `None` when the episode is over.
    pub fn prompt(&self) -> Option<&[Message]> {
        (!self.done).then_some(self.messages.as_slice())
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// What the next turn may hold.
    pub fn rule(&self) -> TurnRule {
        if self.cfg.final_reply && !self.done && self.turns + 1 >= self.cfg.max_turns {
            TurnRule::ReplyOnly {
                opener: self.harness.syntax.opener(),
                grammar: match &self.calls {
                    TurnRule::Calls(g) => Some(g.clone()),
                    _ => None,
                },
            }
        } else {
            self.calls.clone()
        }
    }

    /// The conversation so far (the prompt, then every model turn and what it was fed back).
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The hook decisions so far.
    pub fn hook_log(&self) -> &[HookDecision] {
        &self.log
    }

    /// Feeds one model output (a [`Completion`], or plain text) and advances the episode.
    pub fn feed(&mut self, out: impl Into<Completion>) -> Result<(), AgentError> {
        if self.done {
            return Ok(());
        }
        let completion = out.into();
        let reply_only = matches!(self.rule(), TurnRule::ReplyOnly { .. });
        let mut parsed = self.harness.syntax.parse(&completion.text);
        // a reply-only turn cannot run a call: what it says besides one is its reply
        if let (true, Ok(p)) = (reply_only, &mut parsed) {
            if !p.text.is_empty() {
                p.calls.clear();
            }
        }
        self.messages
            .push(Message::assistant(completion.text.clone()));
        self.completions.push(completion);
        let turn = self.turns;
        self.turns += 1;
        match parsed {
            Err(e) => {
                self.attempt.format_errors.push(format!("turn {turn}: {e}"));
                self.messages.push(Message::user(format!("[runtime] Your tool call could not be parsed: {e}. Write it again in the required format, or reply to the viewer.")));
            }
            Ok(parsed) if !parsed.calls.is_empty() => {
                let max = self.harness.max_calls();
                if parsed.calls.len() > max {
                    self.attempt.format_errors.push(format!(
                        "turn {turn}: {} calls, at most {max} allowed",
                        parsed.calls.len()
                    ));
                }
                let backend = StoreBackend(self.world);
                for c in parsed.calls.into_iter().take(max) {
                    let d = self.harness.dispatch(&c, &backend, &mut self.log);
                    self.messages
                        .push(Message::tool(c.name.clone(), d.result.to_string()));
                    self.attempt.calls.push(c);
                }
            }
            // On the last turn the episode allows, a retry could never be written: the
            // review repairs the draft (or sends the hook's fallback) at once, as it does a
            // second attempt, instead of asking for a rewrite and leaving the viewer silent.
            Ok(parsed) => match self.harness.review_reply(
                &parsed.text,
                &self.vars,
                if self.turns >= self.cfg.max_turns {
                    self.retries.max(1)
                } else {
                    self.retries
                },
                &mut self.log,
            ) {
                ReplyReview::Retry(feedback) => {
                    self.retries += 1;
                    self.messages
                        .push(Message::user(format!("[runtime] {feedback}")));
                }
                ReplyReview::Accept(reply) => {
                    if let Some(last) = self.messages.last_mut() {
                        last.content = reply.clone();
                    }
                    self.attempt.reply = reply;
                    return self.close();
                }
            },
        }
        if self.turns >= self.cfg.max_turns {
            self.attempt
                .format_errors
                .push(format!("no reply after {} model turns", self.cfg.max_turns));
            return self.close();
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), AgentError> {
        self.done = true;
        if self.open {
            self.open = false;
            let r = if self.cfg.keep_changes {
                self.world.commit_episode()
            } else {
                self.world.end_episode()
            };
            r.map_err(|e| AgentError::World(e.to_string()))?;
        }
        Ok(())
    }

    pub fn finish(mut self) -> Result<Trajectory, AgentError> {
        self.close()?;
        Ok(Trajectory {
            task_id: self.scene.id.to_string(),
            messages: std::mem::take(&mut self.messages),
            attempt: std::mem::take(&mut self.attempt),
            hook_log: std::mem::take(&mut self.log),
            turns: std::mem::take(&mut self.completions),
        })
    }
}

impl Drop for Episode<'_> {
    fn drop(&mut self) {
        // An episode abandoned on an error must not leave its changes in the world.
        if self.open {
            let _ = self.world.end_episode();
        }
    }
}

/// Runs one scene (a task's, or a live event's) to the end with `model`.
pub fn run(
    scene: &Scene,
    harness: &Harness,
    world: &World,
    model: &mut dyn ChatModel,
    cfg: EpisodeConfig,
) -> Result<Trajectory, AgentError> {
    let mut ep = Episode::start(*scene, harness, world, cfg)?;
    while let Some(p) = ep.prompt() {
        let out = match ep.rule() {
            TurnRule::Any => model.generate(p)?,
            rule => model
                .generate_turns(&[p], &[rule])?
                .pop()
                .ok_or_else(|| AgentError::Model("the model returned no answer".into()))?,
        };
        ep.feed(out)?;
    }
    ep.finish()
}

/// Runs several episodes in lockstep: each step sends every unfinished
/// episode's prompt to the model as one batch. The episodes must use
/// distinct worlds (their tool calls run in world episodes).
pub fn run_batch(
    episodes: Vec<Episode<'_>>,
    model: &mut dyn ChatModel,
) -> Result<Vec<Trajectory>, AgentError> {
    if episodes.len() > 1 && model.continuous() {
        return run_continuous(episodes, model);
    }
    let mut eps = episodes;
    loop {
        let live: Vec<usize> = (0..eps.len()).filter(|&i| !eps[i].is_done()).collect();
        if live.is_empty() {
            break;
        }
        let outs = {
            let chats: Vec<&[Message]> = live.iter().filter_map(|&i| eps[i].prompt()).collect();
            let rules: Vec<TurnRule> = live.iter().map(|&i| eps[i].rule()).collect();
            model.generate_turns(&chats, &rules)?
        };
        if outs.len() != live.len() {
            // a short answer list would leave episodes unfinished forever
            return Err(AgentError::Model(format!(
                "the model returned {} answers for {} prompts",
                outs.len(),
                live.len()
            )));
        }
        for (i, out) in live.into_iter().zip(outs) {
            eps[i].feed(out)?;
        }
    }
    eps.into_iter().map(Episode::finish).collect()
}

/// [`run_batch`] on a model that batches continuously: an episode whose turn ends feeds it
/// and begins its next turn at once, instead of waiting for the batch's longest turn.
fn run_continuous(
    episodes: Vec<Episode<'_>>,
    model: &mut dyn ChatModel,
) -> Result<Vec<Trajectory>, AgentError> {
    let mut eps = episodes;
    let mut running: Vec<Option<TurnId>> = vec![None; eps.len()];
    let result = (|| loop {
        for (ep, turn) in eps.iter().zip(running.iter_mut()) {
            if turn.is_none() && !ep.is_done() {
                if let Some(p) = ep.prompt() {
                    *turn = Some(model.begin_turn(p, ep.rule())?);
                }
            }
        }
        if running.iter().all(Option::is_none) {
            return Ok(());
        }
        for (id, out) in model.step_turns()? {
            if let Some(i) = running.iter().position(|t| *t == Some(id)) {
                running[i] = None;
                eps[i].feed(out)?;
            }
        }
    })();
    if let Err(e) = result {
        model.abort_turns();
        return Err(e);
    }
    eps.into_iter().map(Episode::finish).collect()
}
