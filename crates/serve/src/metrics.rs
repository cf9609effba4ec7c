//! `/metrics` in the Prometheus text format: latency histograms (queue wait, time to first
//! reply text, end to end), tokens (rate them for tokens/s), prefix-cache hits, dropped,
//! merged and folded comments, queue depth and the active harness version.

use std::sync::Mutex;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use hat_agent::episode::Completion;

use crate::triage::{DropReason, Dropped};

type Labels = Vec<(String, String)>;

pub struct Metrics {
    registry: Registry,
    pub queue_wait: Histogram,
    pub ttft: Histogram,
    pub latency: Histogram,
    pub replies: Counter,
    pub errors: Counter,
    pub generated_tokens: Counter,
    pub prompt_tokens: Counter,
    pub cached_tokens: Counter,
    pub shared_prefix_tokens: Counter,
    pub warmed_tokens: Counter,
    pub drafted_tokens: Counter,
    pub accepted_tokens: Counter,
    pub unchecked_tokens: Counter,
    pub dropped_total: Family<Labels, Counter>,
    pub merged: Counter,
    pub folded: Counter,
    pub rejected: Family<Labels, Counter>,
    pub queue_depth: Gauge,
    pub streams: Gauge,
    pub harness: Family<Labels, Gauge>,
    active_hash: Mutex<String>,
}

fn seconds() -> Histogram {
    // 10 ms .. ~82 s
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("hat");
        let m = Metrics {
            queue_wait: seconds(),
            ttft: seconds(),
            latency: seconds(),
            replies: Counter::default(),
            errors: Counter::default(),
            generated_tokens: Counter::default(),
            prompt_tokens: Counter::default(),
            cached_tokens: Counter::default(),
            shared_prefix_tokens: Counter::default(),
            warmed_tokens: Counter::default(),
            drafted_tokens: Counter::default(),
            accepted_tokens: Counter::default(),
            unchecked_tokens: Counter::default(),
            dropped_total: Family::default(),
            merged: Counter::default(),
            folded: Counter::default(),
            rejected: Family::default(),
            queue_depth: Gauge::default(),
            streams: Gauge::default(),
            harness: Family::default(),
            active_hash: Mutex::new(String::new()),
            registry: Registry::default(),
        };
        r.register(
            "queue_wait_seconds",
            "Time an event waited in its stream's queue",
            m.queue_wait.clone(),
        );
        r.register(
            "time_to_first_token_seconds",
            "Event arrival to the first reply text a client can show (streams: the reviewed reply; chat completions: the first token)",
            m.ttft.clone(),
        );
        r.register(
            "reply_latency_seconds",
            "Event arrival to the reply, tool calls and hooks included",
            m.latency.clone(),
        );
        r.register("replies", "Replies sent", m.replies.clone());
        r.register(
            "reply_errors",
            "Events that ended in an error",
            m.errors.clone(),
        );
        r.register(
            "generated_tokens",
            "Tokens generated (rate it for tokens/s)",
            m.generated_tokens.clone(),
        );
        r.register(
            "prompt_tokens",
            "Prompt tokens of model turns",
            m.prompt_tokens.clone(),
        );
        r.register(
            "cached_prompt_tokens",
            "Prompt tokens served from the prefix cache",
            m.cached_tokens.clone(),
        );
        r.register(
            "shared_prefix_tokens",
            "Prompt tokens whose keys and values a batched decode held once for all its rows (counted for every row)",
            m.shared_prefix_tokens.clone(),
        );
        r.register(
            "warmed_prompt_tokens",
            "System-prompt tokens computed while idle, ahead of the events that need them (new streams, harness swaps, recent activity)",
            m.warmed_tokens.clone(),
        );
        r.register(
            "draft_tokens",
            "Speculative draft tokens proposed (a turn decoded alone)",
            m.drafted_tokens.clone(),
        );
        r.register(
            "draft_tokens_accepted",
            "Speculative draft tokens the sampler took (each saves a forward pass)",
            m.accepted_tokens.clone(),
        );
        r.register(
            "unchecked_tokens",
            "Tokens sampled while the call grammar refused every token, so the reply left it (should stay 0)",
            m.unchecked_tokens.clone(),
        );
        r.register(
            "comments_dropped",
            "Events not answered, by reason",
            m.dropped_total.clone(),
        );
        r.register(
            "comments_merged",
            "Duplicate comments merged into one waiting",
            m.merged.clone(),
        );
        r.register(
            "joins_folded",
            "Joins folded into one greeting",
            m.folded.clone(),
        );
        r.register(
            "requests_rejected",
            "Requests refused, by reason",
            m.rejected.clone(),
        );
        r.register(
            "queue_depth",
            "Events waiting over all streams",
            m.queue_depth.clone(),
        );
        r.register("streams", "Streams served", m.streams.clone());
        r.register(
            "harness_active",
            "1 for the active harness version",
            m.harness.clone(),
        );
        Metrics { registry: r, ..m }
    }

    pub fn generated(&self, c: &Completion) {
        self.generated_tokens.inc_by(c.tokens.len() as u64);
        self.prompt_tokens.inc_by(c.prompt_tokens as u64);
        self.cached_tokens.inc_by(c.cached_tokens as u64);
        self.shared_prefix_tokens
            .inc_by(c.shared_prefix_tokens as u64);
        self.drafted_tokens.inc_by(c.drafted_tokens as u64);
        self.accepted_tokens.inc_by(c.accepted_tokens as u64);
        self.unchecked_tokens.inc_by(c.unchecked_tokens as u64);
    }

    pub fn dropped(&self, d: &[Dropped]) {
        for x in d {
            let reason = match x.reason {
                DropReason::Stale => "stale",
                DropReason::Evicted => "evicted",
                DropReason::Shutdown => "shutdown",
            };
            self.dropped_total
                .get_or_create(&vec![("reason".into(), reason.into())])
                .inc_by(1 + x.merged.len() as u64 + x.unlisted);
        }
    }

    pub fn reject(&self, reason: &str) {
        self.rejected
            .get_or_create(&vec![("reason".into(), reason.into())])
            .inc();
    }

    pub fn set_harness(&self, hash: &str) {
        let mut a = self.active_hash.lock().unwrap_or_else(|e| e.into_inner());
        if !a.is_empty() && *a != hash {
            // one series per live version, not one for every version ever served
            self.harness.remove(&vec![("hash".into(), a.clone())]);
        }
        self.harness
            .get_or_create(&vec![("hash".into(), hash.into())])
            .set(1);
        *a = hash.to_string();
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        // encoding into a String cannot fail
        let _ = encode(&mut out, &self.registry);
        out
    }
}
