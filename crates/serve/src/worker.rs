//! The engine worker: one thread that owns the model and every stream's world, and runs
//! the agent loop.
//!
//! Each round it takes the most important waiting event of every stream that has one (one
//! reply in flight per stream), starts their episodes on the harness version active at
//! that moment, and decodes all of them as one batch, so many streams share the engine. On
//! the embedded engine the batch is continuous: a turn that ends leaves the batch at that
//! decode step (its tool runs and its next turn joins at once), and a new event's episode
//! joins between two steps. Models that cannot (endpoints, experiment arms' models) decode
//! turn by turn. Between rounds it serves `/v1/chat/completions` requests (streamed token by
//! token when one runs alone). Tool calls change the stream's world for good (a claimed
//! coupon stays claimed), and the world is saved after every reply.

use std::collections::{HashMap, HashSet};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};
use typed_arena::Arena;

use hat_agent::episode::{ChatModel, Completion, Episode, EpisodeConfig, TurnId, TurnRule};
use hat_harness::{Message, Role};
use hat_tasks::episode::Scene;
use hat_tasks::task::{event_line_with, Turn};
use hat_world::World;
use tokio::sync::{mpsc as tmpsc, oneshot};

use crate::harnesses::{Harnesses, Version};
use crate::metrics::Metrics;
use crate::stream::{activity_line, Body, Latency, Stream, HISTORY_TURNS, RECENT_LINES};
use crate::triage::Pending;

/// A `/v1/chat/completions` request for the worker.
pub struct ChatJob {
    pub messages: Vec<Message>,
    pub max_tokens: u32,
    /// Text as it is generated (streaming requests).
    pub deltas: Option<tmpsc::UnboundedSender<String>>,
    pub done: oneshot::Sender<Result<Completion, String>>,
    pub queued: Instant,
    /// The request's place in the chat queue, held while the job waits.
    pub place: Arc<ChatPlace>,
}

impl ChatJob {
    /// Whether no one waits for the answer any more (the client hung up, or its request
    /// timed out): such a job is dropped, never generated.
    pub fn abandoned(&self) -> bool {
        self.done.is_closed()
    }
}

/// A place in the chat queue (`max_chat_queue`). The request holds it (its handler, or its
/// response stream) and so does its job while the job waits in the worker's queue; it is
/// given back when both are gone, in `Drop`, so no path out of a request (an error, a client
/// that hangs up mid-stream, a timeout) can leak it. A job whose request gave up still counts
/// until the worker drops it, so the worker's queue never holds more jobs than the limit.
pub struct ChatPlace(Arc<AtomicUsize>);

impl ChatPlace {
    /// Takes a place when fewer than `max` are taken.
    pub fn take(taken: &Arc<AtomicUsize>, max: usize) -> Option<Arc<ChatPlace>> {
        taken
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()?;
        Some(Arc::new(ChatPlace(taken.clone())))
    }
}

impl Drop for ChatPlace {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether a command is still worth keeping: a chat job no one waits for is dropped (which
/// gives its place back), and a wake-up has done its work.
fn worth_keeping(c: &Command) -> bool {
    match c {
        Command::Chat(job) => !job.abandoned(),
        Command::Wake => false,
        Command::Add(..) => true,
    }
}

pub enum Command {
    /// A new (or restored) stream and its world.
    Add(Arc<Stream>, Box<World>),
    Chat(ChatJob),
    /// Something was queued.
    Wake,
}

pub struct WorkerConfig {
    pub max_batch: usize,
    pub episode: EpisodeConfig,
    /// The model's token limit for one agent turn (chat requests set their own).
    pub max_tokens: u32,
}

pub struct Worker {
    pub model: Box<dyn ChatModel + Send>,
    /// Models experiment arms may use (`hat serve --arm-model`): arm model `i` is
    /// `arm_models[i - 1]`, 0 being `model`.
    pub arm_models: Vec<Box<dyn ChatModel + Send>>,
    pub harnesses: Arc<Harnesses>,
    pub experiments: Arc<crate::experiments::Experiments>,
    pub metrics: Arc<Metrics>,
    pub cfg: WorkerConfig,
    pub rx: Receiver<Command>,
    /// Set on shutdown: finish what is in flight, then stop.
    pub stop: Arc<AtomicBool>,
}

struct Live {
    stream: Arc<Stream>,
    world: Box<World>,
}

/// How long a round keeps taking new events while chat requests or new streams wait.
const MAX_ROUND: Duration = Duration::from_secs(2);

/// One event being answered.
struct Job {
    scene_id: String,
    stream: Arc<Stream>,
    pending: Pending,
    event: hat_world::Event,
    on_stage: String,
    history: Vec<Turn>,
    recent: Vec<String>,
    version: Arc<Version>,
    /// The experiment arm serving this reply: (experiment, arm, viewer).
    arm: Option<(String, usize, String)>,
    /// Which model answers (see `Worker::arm_models`).
    model: usize,
    started: Instant,
}

/// An episode in the running batch.
struct Slot<'a> {
    stream: usize,
    job: &'a Job,
    world: &'a World,
    ep: Episode<'a>,
    turns: Vec<Completion>,
    /// Wall time of the batches this episode was part of (its model time as it waited).
    model_wall: f64,
    /// Messages and hook decisions already sent as events.
    seen: (usize, usize),
    /// Its turn running in the model's batch (continuous batching).
    turn: Option<TurnId>,
}

/// What one step of a round gives: the slots answered (by index, with the answer), and the
/// slots done (by index: `true` when the episode ended, `false` when it failed).
type Stepped = (Vec<(usize, Completion)>, Vec<(usize, bool)>);

/// The next event of up to `room` streams that are not busy, round robin from `next`.
fn pick(
    streams: &[Live],
    next: &mut usize,
    room: usize,
    busy: &HashSet<usize>,
) -> Vec<(usize, Pending)> {
    let n = streams.len();
    let mut out = Vec::new();
    for k in 0..n {
        if out.len() >= room {
            break;
        }
        let i = (*next + k) % n;
        if busy.contains(&i) {
            continue;
        }
        if let Some(p) = streams[i].stream.queue().pop() {
            out.push((i, p));
        }
    }
    if n > 0 {
        *next = (*next + 1) % n;
    }
    out
}

impl Worker {
    pub fn run(mut self) {
        let mut streams: Vec<Live> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut chats: std::collections::VecDeque<ChatJob> = Default::default();
        let mut deferred: Vec<Command> = Vec::new();
        let mut next = 0usize; // round-robin start, so no stream starves when batches are full
        let mut warm = Warm::default();
        loop {
            let active = self.harnesses.active();
            if warm.version != active.hash() {
                warm.version = active.hash().to_string();
                warm.dirty.extend(0..streams.len());
            }
            let mut cmds = std::mem::take(&mut deferred);
            if cmds.is_empty() {
                let busy = !chats.is_empty()
                    || !warm.dirty.is_empty()
                    || streams.iter().any(|l| !l.stream.queue().is_empty());
                let first = if busy {
                    self.rx.try_recv().map_err(|e| match e {
                        std::sync::mpsc::TryRecvError::Empty => RecvTimeoutError::Timeout,
                        std::sync::mpsc::TryRecvError::Disconnected => {
                            RecvTimeoutError::Disconnected
                        }
                    })
                } else {
                    self.rx.recv_timeout(Duration::from_millis(250))
                };
                match first {
                    Ok(c) => cmds.push(c),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
            cmds.extend(self.rx.try_iter());
            for c in cmds {
                match c {
                    Command::Add(stream, world) => {
                        let i = match index.get(&stream.id) {
                            Some(&i) => {
                                streams[i] = Live { stream, world };
                                i
                            }
                            None => {
                                index.insert(stream.id.clone(), streams.len());
                                streams.push(Live { stream, world });
                                streams.len() - 1
                            }
                        };
                        warm.dirty.insert(i);
                    }
                    Command::Chat(job) => chats.push_back(job),
                    Command::Wake => {}
                }
            }
            self.sweep(&streams);
            // jobs whose clients gave up while they waited are never generated
            chats.retain(|j| !j.abandoned());
            if let Some(job) = chats.pop_front() {
                self.chat(job);
            }
            if self.stop.load(Ordering::SeqCst) {
                // in-flight replies finished with the last round; nothing new starts
                for j in chats.drain(..) {
                    let _ = j.done.send(Err("the server is shutting down".into()));
                }
                break;
            }
            let picked = pick(
                &streams,
                &mut next,
                self.cfg.max_batch.max(1),
                &HashSet::new(),
            );
            if !picked.is_empty() {
                // replies change their streams' recent activity and history
                warm.dirty.extend(0..streams.len());
                deferred = self.round(&streams, picked, &mut next, !chats.is_empty());
            } else if chats.is_empty() {
                // idle: warm one stream's opening, then look for work again
                if let Some(i) = warm.dirty.pop_first() {
                    self.warm(&streams[i], i, &active, &mut warm.done);
                }
            }
        }
        // events answered 202 that no reply will follow: reported as dropped (their clients
        // see it on the event log after a restart), not lost
        let now = Instant::now();
        for l in &streams {
            let dropped = l.stream.queue().drain(now);
            self.metrics.dropped(&dropped);
            l.stream.report_dropped(dropped);
            let _ = l.stream.save_meta();
        }
    }

    /// Computes stream `i`'s opening under the active version (its system prompt and history
    /// turns) ahead of its next event (the embedded engine keeps it in its prefix cache), so
    /// that event's first turn pays only for the event; unless that exact opening was the last
    /// one warmed for it. Only the main model: arm models of an experiment and chat
    /// requests pay their own.
    fn warm(&mut self, l: &Live, i: usize, version: &Version, done: &mut HashMap<usize, u64>) {
        let Some(messages) = opening(l, version) else {
            return;
        };
        let key = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            for m in &messages {
                m.content.hash(&mut h);
            }
            h.finish()
        };
        if done.get(&i) == Some(&key) {
            return;
        }
        let t0 = Instant::now();
        match self.model.warm(&messages) {
            Ok(n) => {
                done.insert(i, key);
                self.metrics.warmed_tokens.inc_by(n as u64);
                tracing::debug!(stream = %l.stream.id, tokens = n, seconds = t0.elapsed().as_secs_f64(), "warmed");
            }
            Err(e) => {
                tracing::warn!(stream = %l.stream.id, error = %e, "warming the stream's prompt")
            }
        }
    }

    /// Drops events that waited too long, and updates the queue-depth gauge.
    fn sweep(&self, streams: &[Live]) {
        let now = Instant::now();
        let mut depth = 0;
        for l in streams {
            let dropped = {
                let mut q = l.stream.queue();
                let d = q.sweep(now);
                depth += q.len();
                d
            };
            self.metrics.dropped(&dropped);
            l.stream.report_dropped(dropped);
        }
        self.metrics.queue_depth.set(depth as i64);
    }

    fn chat(&mut self, job: ChatJob) {
        if job.abandoned() {
            return;
        }
        let wait = job.queued.elapsed().as_secs_f64();
        self.model.set_max_tokens(job.max_tokens);
        let t0 = Instant::now();
        let mut first: Option<f64> = None;
        let out = match &job.deltas {
            Some(tx) => self.model.generate_streaming(&job.messages, &mut |d| {
                first.get_or_insert_with(|| t0.elapsed().as_secs_f64());
                // a closed connection stops the generation
                tx.send(d.to_string()).is_ok()
            }),
            None => self.model.generate(&job.messages),
        };
        self.model.set_max_tokens(self.cfg.max_tokens);
        if let Ok(c) = &out {
            self.metrics.generated(c);
            self.metrics
                .ttft
                .observe(wait + first.unwrap_or_else(|| t0.elapsed().as_secs_f64()));
        }
        let _ = job.done.send(out.map_err(|e| e.to_string()));
    }

    /// Decodes each slot's prompt with its model, one batch per model: per slot its answer
    /// (or why there is none) and the seconds its model's batch took.
    fn generate_by_model(
        &mut self,
        chats: &[(usize, Option<&[Message]>, TurnRule)],
    ) -> Vec<(Result<Completion, String>, f64)> {
        let mut out: Vec<(Result<Completion, String>, f64)> = chats
            .iter()
            .map(|_| {
                (
                    Err("the episode has no prompt to continue".to_string()),
                    0.0,
                )
            })
            .collect();
        for m in 0..=self.arm_models.len() {
            let idx: Vec<usize> = (0..chats.len())
                .filter(|&k| chats[k].0 == m && chats[k].1.is_some())
                .collect();
            if idx.is_empty() {
                continue;
            }
            let prompts: Vec<&[Message]> = idx.iter().filter_map(|&k| chats[k].1).collect();
            let rules: Vec<TurnRule> = idx.iter().map(|&k| chats[k].2.clone()).collect();
            let model = if m == 0 {
                &mut self.model
            } else {
                &mut self.arm_models[m - 1]
            };
            let t0 = Instant::now();
            let answers = model.generate_turns(&prompts, &rules);
            let wall = t0.elapsed().as_secs_f64();
            match answers {
                Ok(a) if a.len() == idx.len() => {
                    for (k, c) in idx.into_iter().zip(a) {
                        out[k] = (Ok(c), wall);
                    }
                }
                other => {
                    let why = match other {
                        Ok(a) => format!(
                            "the model returned {} answers for {} prompts",
                            a.len(),
                            idx.len()
                        ),
                        Err(e) => e.to_string(),
                    };
                    for k in idx {
                        out[k] = (Err(why.clone()), wall);
                    }
                }
            }
        }
        out
    }

    /// Starts answering `pending` on stream `i`: the episode begins on the harness version
    /// active now.
    fn begin<'a>(
        &self,
        arena: &'a Arena<Job>,
        streams: &'a [Live],
        i: usize,
        pending: Pending,
    ) -> Option<Slot<'a>> {
        let l = &streams[i];
        let on_stage = match l.world.on_stage() {
            Ok(p) => p.id.clone(),
            Err(e) => {
                l.stream.emit(Body::Error {
                    id: Some(pending.id),
                    answers: answers(&pending),
                    unlisted: pending.unlisted,
                    message: format!("the stream's world: {e}"),
                });
                return None;
            }
        };
        let (history, recent) = {
            let mut g = l.stream.inner();
            g.in_flight = Some(pending.id);
            (
                g.meta.history.iter().cloned().collect(),
                g.meta.recent.iter().cloned().collect(),
            )
        };
        let event = pending.event();
        // A running experiment serves each viewer from their arm's harness version.
        let (version, arm, model) = match (self.experiments.running(), event.viewer()) {
            (Some(r), Some(viewer)) => {
                let a = r.arm_of(viewer, &l.stream.id);
                self.experiments.expose(&r, a, viewer, &l.stream.id);
                (
                    r.versions[a].clone(),
                    Some((r.def.name.clone(), a, viewer.to_string())),
                    r.models[a].min(self.arm_models.len()),
                )
            }
            _ => (self.harnesses.active(), None, 0),
        };
        self.metrics
            .queue_wait
            .observe(pending.arrived.elapsed().as_secs_f64());
        l.stream.emit(Body::Started {
            id: pending.id,
            answers: answers(&pending),
            unlisted: pending.unlisted,
            event: event.clone(),
            class: pending.class,
            harness: version.hash().to_string(),
        });
        let job: &'a Job = arena.alloc(Job {
            scene_id: format!("live-{}", pending.id),
            stream: l.stream.clone(),
            event,
            pending,
            on_stage,
            history,
            recent,
            version,
            arm,
            model,
            started: Instant::now(),
        });
        let scene = Scene {
            id: &job.scene_id,
            event: &job.event,
            on_stage: &job.on_stage,
            history: &job.history,
            recent: &job.recent,
        };
        match Episode::start(scene, &job.version.harness, &l.world, self.cfg.episode) {
            Ok(ep) if ep.is_done() => {
                // An event hook blocked the event: the harness decided there is nothing to
                // say. That is an answer (the hook's decision and an empty reply naming why),
                // not a failure of the server or the model.
                for d in ep.hook_log() {
                    l.stream.emit(Body::Hook {
                        id: job.pending.id,
                        hook: d.hook.clone(),
                        outcome: d.outcome.clone(),
                    });
                }
                match ep.finish() {
                    Ok(t) => self.replied(job, &[], 0.0, t, &l.world),
                    Err(e) => self.fail(job, &e.to_string()),
                }
                None
            }
            Ok(ep) => Some(Slot {
                seen: (ep.messages().len(), ep.hook_log().len()),
                ep,
                job,
                stream: i,
                world: &l.world,
                turns: Vec::new(),
                model_wall: 0.0,
                turn: None,
            }),
            Err(e) => {
                self.fail(job, &e.to_string());
                None
            }
        }
    }

    /// Answers the picked events as one batch. Between decode steps (continuous batching)
    /// or between turns (models that decode turn by turn), a stream with no reply in flight
    /// and an event waiting joins the batch; a finished reply goes out at once. The round
    /// ends when nothing is left to decode, or stops taking new events once it has run
    /// `MAX_ROUND` while a chat request or a new stream waits. Returns the commands that
    /// arrived meanwhile.
    fn round(
        &mut self,
        streams: &[Live],
        picked: Vec<(usize, Pending)>,
        next: &mut usize,
        chats_queued: bool,
    ) -> Vec<Command> {
        let arena: Arena<Job> = Arena::new();
        let mut slots: Vec<Slot<'_>> = Vec::new();
        let mut deferred: Vec<Command> = Vec::new();
        let began = Instant::now();
        let mut admit = picked;
        // token granularity where the model can (experiment arms' models decode turn by turn)
        let continuous = self.arm_models.is_empty() && self.model.continuous();
        loop {
            for (i, p) in admit.drain(..) {
                if let Some(s) = self.begin(&arena, streams, i, p) {
                    slots.push(s);
                }
            }
            if slots.is_empty() {
                break;
            }
            let (answers, mut done) = if continuous {
                self.step_continuous(&mut slots)
            } else {
                self.step_turn_batch(&mut slots)
            };
            for (k, out) in answers {
                if let Some(ok) = self.absorb(&mut slots[k], out) {
                    done.push((k, ok));
                }
            }
            // remove from the highest index
            done.sort_unstable_by_key(|d| d.0);
            for &(k, ok) in done.iter().rev() {
                let s = slots.remove(k);
                if !ok {
                    continue;
                }
                match s.ep.finish() {
                    Ok(t) => self.replied(s.job, &s.turns, s.model_wall, t, s.world),
                    Err(e) => self.fail(s.job, &e.to_string()),
                }
            }
            // chat jobs whose clients gave up meanwhile are dropped now, not after the round
            deferred.retain(worth_keeping);
            deferred.extend(self.rx.try_iter().filter(worth_keeping));
            // chat requests queued before the round count too: with only the new arrivals a
            // backlog waited until every stream's queue ran dry
            let others_wait = (chats_queued || !deferred.is_empty()) && began.elapsed() > MAX_ROUND;
            if others_wait || self.stop.load(Ordering::SeqCst) {
                continue;
            }
            self.sweep(streams);
            let busy: HashSet<usize> = slots.iter().map(|s| s.stream).collect();
            let room = self.cfg.max_batch.max(1).saturating_sub(slots.len());
            if room > 0 {
                admit = pick(streams, next, room, &busy);
            }
        }
        deferred
    }

    /// One turn of every slot, decoded as one batch per model: the slots answered (by
    /// index) and the slots that failed.
    fn step_turn_batch(&mut self, slots: &mut [Slot<'_>]) -> Stepped {
        // each model decodes its own slots; a model that fails fails only those
        let outs = {
            let chats: Vec<(usize, Option<&[Message]>, TurnRule)> = slots
                .iter()
                .map(|s| (s.job.model, s.ep.prompt(), s.ep.rule()))
                .collect();
            self.generate_by_model(&chats)
        };
        let mut done = Vec::new();
        let mut answers = Vec::with_capacity(outs.len());
        for (k, (out, wall)) in outs.into_iter().enumerate() {
            slots[k].model_wall += wall;
            match out {
                Ok(o) => answers.push((k, o)),
                Err(m) => {
                    self.fail(slots[k].job, &m);
                    done.push((k, false));
                }
            }
        }
        (answers, done)
    }

    /// One decode step of the main model's running batch (continuous batching): slots
    /// without a running turn begin their next one first. Returns the slots whose turn ended
    /// (by index) and the slots that failed.
    fn step_continuous(&mut self, slots: &mut [Slot<'_>]) -> Stepped {
        let mut done = Vec::new();
        for (k, s) in slots.iter_mut().enumerate() {
            if s.turn.is_some() {
                continue;
            }
            let begun = match s.ep.prompt() {
                Some(p) => self
                    .model
                    .begin_turn(p, s.ep.rule())
                    .map_err(|e| e.to_string()),
                None => Err("the episode has no prompt to continue".to_string()),
            };
            match begun {
                Ok(id) => s.turn = Some(id),
                Err(m) => {
                    self.fail(s.job, &m);
                    done.push((k, false));
                }
            }
        }
        let t0 = Instant::now();
        let mut deltas: Vec<(TurnId, String)> = Vec::new();
        let stepped = self
            .model
            .step_turns_streaming(&mut |id, text| deltas.push((id, text.to_string())));
        let wall = t0.elapsed().as_secs_f64();
        for (id, text) in deltas {
            if let Some(s) = slots.iter().find(|s| s.turn == Some(id)) {
                s.job.stream.emit_live(Body::Delta {
                    id: s.job.pending.id,
                    index: s.turns.len(),
                    text,
                });
            }
        }
        let mut answers = Vec::new();
        match stepped {
            Ok(ended) => {
                for s in slots.iter_mut().filter(|s| s.turn.is_some()) {
                    s.model_wall += wall;
                }
                for (id, out) in ended {
                    if let Some(k) = slots.iter().position(|s| s.turn == Some(id)) {
                        slots[k].turn = None;
                        answers.push((k, out));
                    }
                }
            }
            Err(e) => {
                for (k, s) in slots.iter_mut().enumerate() {
                    if s.turn.take().is_some() {
                        self.fail(s.job, &e.to_string());
                        done.push((k, false));
                    }
                }
            }
        }
        (answers, done)
    }

    /// Feeds a slot's answered turn to its episode and sends what happened as events
    /// (the turn, tool results, hook decisions). Returns `Some(true)` when its episode
    /// ended, `Some(false)` when it failed (reported here), `None` while it goes on.
    fn absorb(&self, s: &mut Slot<'_>, out: Completion) -> Option<bool> {
        let j = s.job;
        self.metrics.generated(&out);
        j.stream.emit(Body::Turn {
            id: j.pending.id,
            index: s.turns.len(),
            text: out.text.clone(),
            prompt_tokens: out.prompt_tokens,
            cached_tokens: out.cached_tokens,
            generated_tokens: out.tokens.len(),
            seconds: out.seconds,
        });
        s.turns.push(out.clone());
        if let Err(e) = s.ep.feed(out) {
            self.fail(j, &e.to_string());
            return Some(false);
        }
        let (m0, h0) = s.seen;
        for m in s.ep.messages().iter().skip(m0) {
            if m.role == Role::Tool {
                j.stream.emit(Body::ToolResult {
                    id: j.pending.id,
                    name: m.name.clone().unwrap_or_default(),
                    result: m.content.clone(),
                });
            }
        }
        for d in s.ep.hook_log().iter().skip(h0) {
            j.stream.emit(Body::Hook {
                id: j.pending.id,
                hook: d.hook.clone(),
                outcome: d.outcome.clone(),
            });
        }
        s.seen = (s.ep.messages().len(), s.ep.hook_log().len());
        s.ep.is_done().then_some(true)
    }

    fn fail(&self, j: &Job, message: &str) {
        tracing::warn!(stream = %j.stream.id, event = j.pending.id, error = %message, "no reply");
        self.metrics.errors.inc();
        {
            let mut g = j.stream.inner();
            g.meta.counters.errors += 1;
            g.in_flight = None;
        }
        j.stream.emit(Body::Error {
            id: Some(j.pending.id),
            answers: answers(&j.pending),
            unlisted: j.pending.unlisted,
            message: message.to_string(),
        });
    }

    fn replied(
        &self,
        j: &Job,
        turns: &[Completion],
        model_wall: f64,
        t: hat_agent::Trajectory,
        world: &World,
    ) {
        let queue = j.started.duration_since(j.pending.arrived).as_secs_f64();
        let busy = j.started.elapsed().as_secs_f64();
        let prefill: f64 = turns.iter().map(|c| c.prefill_seconds).sum();
        let decode: f64 = turns.iter().map(|c| c.decode_seconds).sum();
        // models that do not split their time (endpoints) report the batches' wall time as
        // decoding: each request waited for its whole batch
        let decode = if prefill + decode == 0.0 {
            model_wall
        } else {
            decode
        };
        let latency = Latency {
            queue,
            prefill,
            decode,
            tools_hooks: (busy - prefill - decode).max(0.0),
            total: queue + busy,
        };
        tracing::info!(
            stream = %j.stream.id,
            event = j.pending.id,
            class = j.pending.class.as_str(),
            harness = %j.version.harness.short_hash(),
            turns = turns.len(),
            total_s = latency.total,
            queue_s = latency.queue,
            "reply"
        );
        self.metrics.latency.observe(latency.total);
        if let Some((experiment, arm, viewer)) = &j.arm {
            let caught = t
                .hook_log
                .iter()
                .any(hat_harness::hooks::HookDecision::caught_violation);
            self.experiments
                .reply(experiment, *arm, viewer, latency.total, caught);
        }
        self.metrics.ttft.observe(latency.total);
        self.metrics.replies.inc();
        let reply = t.attempt.reply.clone();
        {
            let mut g = j.stream.inner();
            g.in_flight = None;
            let m = &mut g.meta;
            m.counters.replied += 1;
            if let Some(line) = activity_line(&j.event) {
                m.recent.push_back(line);
                while m.recent.len() > RECENT_LINES {
                    m.recent.pop_front();
                }
            }
            if !reply.is_empty() {
                m.history.push_back(Turn {
                    user: event_line_with(&j.event, j.version.harness.viewer_limits()),
                    assistant: reply.clone(),
                });
                while m.history.len() > HISTORY_TURNS {
                    m.history.pop_front();
                }
            }
            let state = crate::stream::world_state(world);
            if !state.is_null() {
                m.state = state;
            }
        }
        if let Err(e) = world.save(j.stream.dir.join("world.sqlite")) {
            tracing::error!(stream = %j.stream.id, error = %e, "saving the stream's world");
        }
        if let Err(e) = j.stream.save_meta() {
            tracing::error!(stream = %j.stream.id, error = %e, "saving the stream's state");
        }
        j.stream.emit(Body::Reply {
            id: j.pending.id,
            answers: answers(&j.pending),
            unlisted: j.pending.unlisted,
            text: reply,
            harness: j.version.hash().to_string(),
            tool_calls: t.attempt.calls.iter().map(|c| c.name.clone()).collect(),
            errors: t.attempt.format_errors.clone(),
            latency,
        });
    }
}

/// Streams whose next opening may differ from what was last warmed, and what was (see
/// [`Worker::warm`]).
#[derive(Default)]
struct Warm {
    /// The active harness version when streams were last marked.
    version: String,
    /// Streams to check, lowest index first.
    dirty: std::collections::BTreeSet<usize>,
    /// Per stream, a hash of the system prompt last warmed.
    done: HashMap<usize, u64>,
}

/// What stream `l`'s next event will open with under `version` (see
/// [`hat_tasks::episode::opening`]: the system prompt from the stream's state now, and its
/// history turns; not the event). `None` when the world cannot say what is on stage.
fn opening(l: &Live, version: &Version) -> Option<Vec<Message>> {
    let on_stage = l.world.on_stage().ok()?.id.clone();
    let (recent, history): (Vec<String>, Vec<Turn>) = {
        let g = l.stream.inner();
        (
            g.meta.recent.iter().cloned().collect(),
            g.meta.history.iter().cloned().collect(),
        )
    };
    // the scene's event is not part of its opening
    let event = hat_world::Event::Comment {
        viewer: String::new(),
        text: String::new(),
    };
    let scene = Scene {
        id: "warm",
        event: &event,
        on_stage: &on_stage,
        history: &history,
        recent: &recent,
    };
    hat_tasks::episode::opening(&scene, &version.harness, &l.world).ok()
}

/// The event ids one reply answers: the event and what merged or folded into it.
fn answers(p: &Pending) -> Vec<u64> {
    std::iter::once(p.id)
        .chain(p.merged.iter().copied())
        .collect()
}

/// Sends `cmd` to the worker; `false` when the worker has stopped.
pub fn send(tx: &Sender<Command>, cmd: Command) -> bool {
    tx.send(cmd).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers "ok" and counts the answers it generated.
    struct Counting(Arc<AtomicUsize>);

    impl ChatModel for Counting {
        fn complete(&mut self, _m: &[Message]) -> Result<String, hat_agent::AgentError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok("ok".into())
        }
    }

    fn worker(
        dir: &std::path::Path,
        model: Box<dyn ChatModel + Send>,
    ) -> (Worker, Sender<Command>) {
        let h = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
        let v = crate::harnesses::load_dir(&h, "test".into()).unwrap();
        let harnesses = Arc::new(Harnesses::new(v));
        let experiments = Arc::new(
            crate::experiments::Experiments::open(dir, &harnesses, vec!["hat".into()]).unwrap(),
        );
        let (tx, rx) = std::sync::mpsc::channel();
        let w = Worker {
            model,
            arm_models: Vec::new(),
            harnesses,
            experiments,
            metrics: Arc::new(Metrics::new()),
            cfg: WorkerConfig {
                max_batch: 1,
                episode: EpisodeConfig::default(),
                max_tokens: 16,
            },
            rx,
            stop: Arc::new(AtomicBool::new(false)),
        };
        (w, tx)
    }

    fn job(place: Arc<ChatPlace>) -> (ChatJob, oneshot::Receiver<Result<Completion, String>>) {
        let (done, rx) = oneshot::channel();
        let job = ChatJob {
            messages: vec![Message::user("hi")],
            max_tokens: 16,
            deltas: None,
            done,
            queued: Instant::now(),
            place,
        };
        (job, rx)
    }

    /// Review finding: a chat request that timed out (504) or whose client hung up left its
    /// job queued, and the worker still generated it; and the queue's count dropped while
    /// the job still waited, so the worker's queue could outgrow the limit.
    #[test]
    fn chat_jobs_no_one_waits_for_are_never_generated_and_hold_their_places_while_queued() {
        let dir = tempfile::tempdir().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let (w, tx) = worker(dir.path(), Box::new(Counting(calls.clone())));
        let stop = w.stop.clone();
        let taken = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            let (j, rx) = job(ChatPlace::take(&taken, 4).unwrap());
            // the client gave up before the worker got to its job
            drop(rx);
            tx.send(Command::Chat(j)).unwrap();
        }
        let (live, live_rx) = job(ChatPlace::take(&taken, 4).unwrap());
        assert!(
            ChatPlace::take(&taken, 4).is_none(),
            "abandoned jobs still queued hold their places"
        );
        tx.send(Command::Chat(live)).unwrap();
        let t = std::thread::spawn(move || w.run());
        let answer = live_rx.blocking_recv().unwrap().unwrap();
        assert_eq!(answer.text, "ok");
        stop.store(true, Ordering::SeqCst);
        tx.send(Command::Wake).unwrap();
        drop(tx);
        t.join().unwrap();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "only the live job is generated"
        );
        assert_eq!(taken.load(Ordering::SeqCst), 0, "every place is given back");
    }
}
