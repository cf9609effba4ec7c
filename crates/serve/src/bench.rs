//! `hat bench serve`: a simulated audience against a running server.
//!
//! Each stream gets seeded Poisson arrivals (one event per `period` seconds on average) with
//! occasional bursts, drawn from the Live-Stream QA test tasks of that stream's catalog (so
//! questions name products the stream really sells). Every event is posted with
//! `?wait=true`; its end-to-end latency is the time from the post to the reply (tool calls
//! and hooks included). The report gives percentiles, throughput, drops and errors, and the
//! server's own breakdown of where the time went.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hat_tasks::{Split, TaskSet, WorldCache};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use serde_json::{json, Value};

use crate::error::{Result, ServeError};
use crate::triage::Class;

/// The audience.
#[derive(Debug, Clone)]
pub struct Audience {
    pub streams: usize,
    /// Mean seconds between events of one stream.
    pub period_s: f64,
    /// Chance that an arrival is a burst.
    pub burst_prob: f64,
    /// Events in a burst.
    pub burst_size: usize,
    /// Seconds of arrivals (the run waits for the last replies after that).
    pub duration_s: f64,
    pub seed: u64,
}

impl Default for Audience {
    fn default() -> Self {
        Audience {
            streams: 4,
            period_s: 5.0,
            burst_prob: 0.1,
            burst_size: 3,
            duration_s: 60.0,
            seed: 1,
        }
    }
}

impl Audience {
    /// Values that would make a plan endless or empty are errors naming the flag.
    pub fn check(&self) -> Result<()> {
        let bad = |f: &str, m: String| Err(ServeError::bad(f, m));
        if self.streams == 0 || self.streams > 10_000 {
            return bad("--streams", format!("{}; must be 1 to 10000", self.streams));
        }
        if !(self.period_s.is_finite() && self.period_s >= 0.01) {
            return bad(
                "--period-s",
                format!("{}; must be at least 0.01", self.period_s),
            );
        }
        if !(self.duration_s.is_finite() && self.duration_s > 0.0 && self.duration_s <= 86_400.0) {
            return bad(
                "--duration-s",
                format!("{}; must be in (0, 86400]", self.duration_s),
            );
        }
        if !(0.0..=1.0).contains(&self.burst_prob) {
            return bad(
                "--burst-prob",
                format!("{}; must be in [0, 1]", self.burst_prob),
            );
        }
        if !(1..=1000).contains(&self.burst_size) {
            return bad(
                "--burst-size",
                format!("{}; must be 1 to 1000", self.burst_size),
            );
        }
        Ok(())
    }
}

/// One planned event.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub at: f64,
    pub stream: usize,
    pub event: Value,
}

/// Tasks to draw from, by catalog seed.
pub struct Mix {
    pub by_world: Vec<(u64, Vec<Value>)>,
}

impl Mix {
    /// The Live-Stream QA test tasks' events (the same generator and split as the suite).
    pub fn lsqa(count: usize, seed: u64) -> Result<Mix> {
        let mut worlds = WorldCache::default();
        let tasks = TaskSet::generate(Split::Test, count, seed, &mut worlds)
            .map_err(|e| ServeError::internal("drawing the test tasks", e))?;
        let mut by: BTreeMap<u64, Vec<Value>> = BTreeMap::new();
        for t in tasks {
            if let Ok(v) = serde_json::to_value(&t.event) {
                by.entry(t.world_seed).or_default().push(v);
            }
        }
        Ok(Mix {
            by_world: by.into_iter().collect(),
        })
    }
}

/// The seeded arrival plan: exponential gaps per stream, bursts of several events at once.
pub fn plan(a: &Audience, mix: &Mix) -> Vec<Arrival> {
    let mut rng = ChaCha8Rng::seed_from_u64(a.seed);
    let mut out = Vec::new();
    if mix.by_world.is_empty() {
        return out;
    }
    for s in 0..a.streams {
        let pool = &mix.by_world[s % mix.by_world.len()].1;
        let mut t = 0.0;
        loop {
            let u: f64 = rng.gen_range(f64::EPSILON..1.0);
            t += -u.ln() * a.period_s;
            if t >= a.duration_s {
                break;
            }
            let n = if rng.gen_bool(a.burst_prob.clamp(0.0, 1.0)) {
                a.burst_size.max(1)
            } else {
                1
            };
            for _ in 0..n {
                out.push(Arrival {
                    at: t,
                    stream: s,
                    event: pool[rng.gen_range(0..pool.len())].clone(),
                });
            }
        }
    }
    out.sort_by(|x, y| x.at.total_cmp(&y.at));
    out
}

/// What happened to one event.
#[derive(Debug, Clone)]
struct Outcome {
    /// Index into the run's arrival plan.
    arrival: usize,
    kind: String,
    /// When it was posted.
    sent: Instant,
    /// The id the server gave the event its reply answers.
    event_id: Option<u64>,
    e2e: f64,
    server: Option<Value>,
    text: String,
    /// A reply event with no text for viewers (the episode ran out of turns or failed its
    /// checks): it ends the event but says nothing.
    empty: bool,
    tool_calls: usize,
}

impl Outcome {
    /// An event that got no reply event (refused, failed, lost).
    fn unanswered(arrival: usize, kind: String) -> Self {
        Outcome {
            arrival,
            kind,
            sent: Instant::now(),
            event_id: None,
            e2e: 0.0,
            server: None,
            text: String::new(),
            empty: false,
            tool_calls: 0,
        }
    }
}

/// Latency percentiles and counts of one run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub label: String,
    pub streams: usize,
    pub sent: usize,
    pub replies: usize,
    pub dropped: usize,
    pub errors: usize,
    /// Refused with 429.
    pub rejected: usize,
    pub p50_s: f64,
    pub p95_s: f64,
    pub p99_s: f64,
    pub mean_s: f64,
    pub replies_per_s: f64,
    /// Server-side means over replies: queue, prefill, decode, tools and hooks.
    pub mean_queue_s: f64,
    pub mean_prefill_s: f64,
    pub mean_decode_s: f64,
    pub mean_tools_hooks_s: f64,
    /// Replies that said nothing to viewers (counted in `replies` and the percentiles: the
    /// event was answered, with silence).
    pub empty_replies: usize,
    /// Tool calls a reply made, on average.
    pub mean_tool_calls: f64,
    pub wall_s: f64,
    /// Time to first token of the reply (post to the first decoded text of the model turn
    /// that became the reply, from the stream's SSE): `None` for a model that does not
    /// stream its turns (an `openai:` upstream), whose text comes with the whole turn.
    pub ttft_p50_s: Option<f64>,
    pub ttft_p95_s: Option<f64>,
    pub ttft_p99_s: Option<f64>,
    /// Latency of the replies to each triage class (the classes that had replies).
    pub by_class: Vec<ClassLatency>,
    /// Every event of the run in arrival order (`hat bench serve --trace` writes it out).
    #[serde(skip)]
    pub trace: Vec<TraceRow>,
}

/// The replies to one triage class of events.
#[derive(Debug, Clone, Serialize)]
pub struct ClassLatency {
    pub class: Class,
    pub replies: usize,
    pub p50_s: f64,
    pub p95_s: f64,
    pub mean_queue_s: f64,
}

fn by_class(rows: &[TraceRow]) -> Vec<ClassLatency> {
    Class::ALL
        .iter()
        .filter_map(|&c| {
            let of: Vec<&TraceRow> = rows
                .iter()
                .filter(|r| r.class == Some(c) && r.outcome == "reply")
                .collect();
            if of.is_empty() {
                return None;
            }
            let mut lat: Vec<f64> = of.iter().map(|r| r.e2e_s).collect();
            lat.sort_by(f64::total_cmp);
            let queue: Vec<f64> = of
                .iter()
                .filter_map(|r| r.latency.as_ref()?["queue"].as_f64())
                .collect();
            Some(ClassLatency {
                class: c,
                replies: of.len(),
                p50_s: percentile(&lat, 50.0),
                p95_s: percentile(&lat, 95.0),
                mean_queue_s: queue.iter().sum::<f64>() / queue.len().max(1) as f64,
            })
        })
        .collect()
}

/// One event of a run: when it arrived, what triage made of it, and what came back.
#[derive(Debug, Clone, Serialize)]
pub struct TraceRow {
    /// Seconds from the start of the run to the post.
    pub at_s: f64,
    pub stream: usize,
    /// The triage class the server gave it (from the stream's `accepted` or `started`
    /// event; `None` when it was refused before it was queued).
    pub class: Option<Class>,
    pub event: Value,
    /// `reply`, `dropped`, `rejected`, or what went wrong.
    pub outcome: String,
    /// Post to reply, seconds (0 without a reply).
    pub e2e_s: f64,
    /// Post to the first decoded text of the turn that became the reply (see
    /// [`Report::ttft_p50_s`]).
    pub ttft_s: Option<f64>,
    /// The server's breakdown (queue, prefill, decode, tools and hooks).
    pub latency: Option<Value>,
    pub text: String,
    pub tool_calls: usize,
    /// The tokens of each model turn of the reply, in order (from the stream's `turn`
    /// events): where a slow reply's time went, a long prompt or a long answer.
    pub turns: Vec<TurnTokens>,
}

/// One model turn's tokens, as the server reported them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TurnTokens {
    pub prompt: usize,
    /// Of `prompt`, the tokens found in the prefix cache.
    pub cached: usize,
    pub generated: usize,
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn post(agent: &ureq::Agent, url: &str, body: &Value) -> std::result::Result<(u16, Value), String> {
    match agent
        .post(url)
        .set("Content-Type", "application/json")
        .send_string(&body.to_string())
    {
        Ok(r) => {
            let code = r.status();
            r.into_json::<Value>()
                .map(|v| (code, v))
                .map_err(|e| e.to_string())
        }
        Err(ureq::Error::Status(code, r)) => Ok((code, r.into_json().unwrap_or(Value::Null))),
        Err(e) => Err(e.to_string()),
    }
}

/// Creates the streams (`<prefix>-<k>`, catalog of the mix's k-th world) and plays the
/// audience against `base` (e.g. `http://127.0.0.1:8080`).
pub fn run(base: &str, label: &str, prefix: &str, a: &Audience, mix: &Mix) -> Result<Report> {
    a.check()?;
    if mix.by_world.is_empty() {
        return Err(ServeError::bad("mix", "no events to draw from"));
    }
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(600))
        .max_idle_connections_per_host(256)
        .build();
    for s in 0..a.streams {
        let seed = mix.by_world[s % mix.by_world.len()].0;
        let (code, v) = post(
            &agent,
            &format!("{base}/v1/streams"),
            &json!({"id": format!("{prefix}-{s}"), "seed": seed}),
        )
        .map_err(|e| ServeError::internal("creating a bench stream", e))?;
        if code != 201 {
            return Err(ServeError::internal(
                "creating a bench stream",
                format!("{code}: {v}"),
            ));
        }
    }
    let seen: SeenBy = Arc::default();
    for s in 0..a.streams {
        follow(
            &agent,
            &format!("{base}/v1/streams/{prefix}-{s}/events"),
            s,
            seen.clone(),
        )?;
    }
    let arrivals = plan(a, mix);
    let outcomes: Arc<Mutex<Vec<Outcome>>> = Arc::default();
    let t0 = Instant::now();
    let mut threads = Vec::with_capacity(arrivals.len());
    for (i, arr) in arrivals.iter().enumerate() {
        let wait = Duration::from_secs_f64(arr.at).saturating_sub(t0.elapsed());
        std::thread::sleep(wait);
        let url = format!("{base}/v1/streams/{prefix}-{}/events?wait=true", arr.stream);
        let (agent, event, outcomes) = (agent.clone(), arr.event.clone(), outcomes.clone());
        threads.push(std::thread::spawn(move || {
            let sent = Instant::now();
            let o = match post(&agent, &url, &event) {
                Ok((200, v)) => {
                    let r = &v["results"][0];
                    let text = r["text"].as_str().unwrap_or_default();
                    Outcome {
                        arrival: i,
                        kind: r["type"].as_str().unwrap_or("none").to_string(),
                        sent,
                        event_id: r["id"].as_u64(),
                        e2e: sent.elapsed().as_secs_f64(),
                        server: r.get("latency").cloned(),
                        text: text.to_string(),
                        empty: text.trim().is_empty(),
                        tool_calls: r["tool_calls"].as_array().map_or(0, Vec::len),
                    }
                }
                Ok((429, _)) => Outcome::unanswered(i, "rejected".into()),
                Ok((code, v)) => Outcome::unanswered(i, format!("http {code}: {v}")),
                Err(e) => Outcome::unanswered(i, format!("transport: {e}")),
            };
            outcomes.lock().unwrap_or_else(|e| e.into_inner()).push(o);
        }));
    }
    for t in threads {
        let _ = t.join();
    }
    let wall = t0.elapsed().as_secs_f64();
    let outs = outcomes.lock().unwrap_or_else(|e| e.into_inner()).clone();
    // the followers keep running until the server ends the streams: take what they saw
    let seen = std::mem::take(&mut *seen.lock().unwrap_or_else(|e| e.into_inner()));
    let rows = trace(&arrivals, &outs, &seen);
    let mut ttft: Vec<f64> = rows
        .iter()
        .filter(|r| r.outcome == "reply")
        .filter_map(|r| r.ttft_s)
        .collect();
    ttft.sort_by(f64::total_cmp);
    let ttft_at = |p: f64| (!ttft.is_empty()).then(|| percentile(&ttft, p));
    let replies: Vec<&Outcome> = outs.iter().filter(|o| o.kind == "reply").collect();
    let mut lat: Vec<f64> = replies.iter().map(|o| o.e2e).collect();
    lat.sort_by(f64::total_cmp);
    let mean = |f: &dyn Fn(&Value) -> f64| {
        let v: Vec<f64> = replies
            .iter()
            .filter_map(|o| o.server.as_ref())
            .map(f)
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    for o in outs
        .iter()
        .filter(|o| o.kind.starts_with("http") || o.kind.starts_with("transport"))
    {
        tracing::warn!(outcome = %o.kind, "bench request failed");
    }
    Ok(Report {
        label: label.to_string(),
        streams: a.streams,
        sent: outs.len(),
        replies: replies.len(),
        dropped: outs.iter().filter(|o| o.kind == "dropped").count(),
        errors: outs
            .iter()
            .filter(|o| !matches!(o.kind.as_str(), "reply" | "dropped" | "rejected"))
            .count(),
        rejected: outs.iter().filter(|o| o.kind == "rejected").count(),
        p50_s: percentile(&lat, 50.0),
        p95_s: percentile(&lat, 95.0),
        p99_s: percentile(&lat, 99.0),
        mean_s: lat.iter().sum::<f64>() / lat.len().max(1) as f64,
        replies_per_s: replies.len() as f64 / wall.max(1e-9),
        mean_queue_s: mean(&|v| v["queue"].as_f64().unwrap_or(0.0)),
        mean_prefill_s: mean(&|v| v["prefill"].as_f64().unwrap_or(0.0)),
        mean_decode_s: mean(&|v| v["decode"].as_f64().unwrap_or(0.0)),
        mean_tools_hooks_s: mean(&|v| v["tools_hooks"].as_f64().unwrap_or(0.0)),
        empty_replies: replies.iter().filter(|o| o.empty).count(),
        mean_tool_calls: replies.iter().map(|o| o.tool_calls as f64).sum::<f64>()
            / replies.len().max(1) as f64,
        wall_s: wall,
        ttft_p50_s: ttft_at(50.0),
        ttft_p95_s: ttft_at(95.0),
        ttft_p99_s: ttft_at(99.0),
        by_class: by_class(&rows),
        trace: rows,
    })
}

/// What a stream's events said about one event of the run.
#[derive(Debug, Clone, Default)]
struct Seen {
    class: Option<Class>,
    /// When each model turn (by index) first sent decoded text.
    first_text: BTreeMap<usize, Instant>,
    /// Each model turn's tokens, by index.
    turns: BTreeMap<usize, TurnTokens>,
}

/// What the streams' events said, by (stream, event id).
type SeenBy = Arc<Mutex<HashMap<(usize, u64), Seen>>>;

/// Subscribes to stream `stream`'s events (`url`) and records, on a thread of its own until
/// the server ends the stream of events, each event's class and when and how its model
/// turns came.
fn follow(agent: &ureq::Agent, url: &str, stream: usize, seen: SeenBy) -> Result<()> {
    // returns once the server has subscribed the client: no event of the run is missed
    let r = agent
        .get(url)
        .call()
        .map_err(|e| ServeError::internal("following a bench stream's events", e))?;
    let reader = std::io::BufReader::new(r.into_reader());
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in reader.lines() {
            let Ok(line) = line else { break };
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<Value>(data.trim()) else {
                continue;
            };
            note(
                &mut seen.lock().unwrap_or_else(|e| e.into_inner()),
                stream,
                &v,
                Instant::now(),
            );
        }
    });
    Ok(())
}

/// Records what one stream event `v`, received at `now`, says about the run's events.
fn note(seen: &mut HashMap<(usize, u64), Seen>, stream: usize, v: &Value, now: Instant) {
    let Some(id) = v["id"].as_u64() else { return };
    let class = || serde_json::from_value::<Class>(v["class"].clone()).ok();
    let index = v["index"].as_u64().map(|i| i as usize);
    match v["type"].as_str() {
        // a queued event names its class; a merged or folded one gets it when it starts
        Some("accepted") => {
            if let Some(c) = class() {
                seen.entry((stream, id)).or_default().class = Some(c);
            }
        }
        Some("started") => {
            if let Some(c) = class() {
                let answers = v["answers"].as_array().into_iter().flatten();
                for a in std::iter::once(id).chain(answers.filter_map(Value::as_u64)) {
                    seen.entry((stream, a)).or_default().class = Some(c);
                }
            }
        }
        Some("delta") => {
            if let Some(i) = index {
                seen.entry((stream, id))
                    .or_default()
                    .first_text
                    .entry(i)
                    .or_insert(now);
            }
        }
        Some("turn") => {
            let n = |k: &str| v[k].as_u64().unwrap_or(0) as usize;
            if let Some(i) = index {
                seen.entry((stream, id)).or_default().turns.insert(
                    i,
                    TurnTokens {
                        prompt: n("prompt_tokens"),
                        cached: n("cached_tokens"),
                        generated: n("generated_tokens"),
                    },
                );
            }
        }
        _ => {}
    }
}

fn trace(
    arrivals: &[Arrival],
    outs: &[Outcome],
    seen: &HashMap<(usize, u64), Seen>,
) -> Vec<TraceRow> {
    let mut outs: Vec<&Outcome> = outs.iter().collect();
    // the plan's order: a burst's events share their time and stream
    outs.sort_by_key(|o| o.arrival);
    outs.into_iter()
        .filter_map(|o| {
            let arr = arrivals.get(o.arrival)?;
            let s = o.event_id.and_then(|id| seen.get(&(arr.stream, id)));
            Some(TraceRow {
                at_s: arr.at,
                stream: arr.stream,
                class: s.and_then(|s| s.class),
                event: arr.event.clone(),
                outcome: o.kind.clone(),
                e2e_s: o.e2e,
                // the reply is the episode's last turn
                ttft_s: s
                    .and_then(|s| s.first_text.values().next_back())
                    .map(|t| t.saturating_duration_since(o.sent).as_secs_f64()),
                latency: o.server.clone(),
                text: o.text.clone(),
                tool_calls: o.tool_calls,
                turns: s
                    .map(|s| s.turns.values().copied().collect())
                    .unwrap_or_default(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_is_seeded_and_near_its_rate() {
        let mix = Mix {
            by_world: vec![(1, vec![json!({"type": "join", "viewer": "a"})])],
        };
        let a = Audience {
            streams: 4,
            period_s: 5.0,
            burst_prob: 0.0,
            burst_size: 1,
            duration_s: 1000.0,
            seed: 7,
        };
        let p = plan(&a, &mix);
        assert_eq!(p.len(), plan(&a, &mix).len());
        // 4 streams x 200 expected arrivals; Poisson spread is ~sqrt(800)
        assert!((700..900).contains(&p.len()), "{}", p.len());
        assert!(p.windows(2).all(|w| w[0].at <= w[1].at));
        let bursty = plan(
            &Audience {
                burst_prob: 1.0,
                burst_size: 3,
                ..a.clone()
            },
            &mix,
        );
        assert_eq!(bursty.len() % 3, 0);
    }

    #[test]
    fn an_audience_that_would_never_end_is_an_error() {
        let ok = Audience::default();
        assert!(ok.check().is_ok());
        for (a, flag) in [
            (
                Audience {
                    period_s: 0.0,
                    ..ok.clone()
                },
                "--period-s",
            ),
            (
                Audience {
                    duration_s: f64::INFINITY,
                    ..ok.clone()
                },
                "--duration-s",
            ),
            (
                Audience {
                    streams: 0,
                    ..ok.clone()
                },
                "--streams",
            ),
            (
                Audience {
                    burst_prob: 2.0,
                    ..ok.clone()
                },
                "--burst-prob",
            ),
        ] {
            let e = a.check().unwrap_err().to_string();
            assert!(e.contains(flag), "{e}");
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 95.0), 95.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert!(percentile(&[], 50.0).is_nan());
    }

    #[test]
    fn the_trace_lists_every_event_in_arrival_order_and_splits_latency_by_class() {
        let ev = |v: Value| Arrival {
            at: 0.0,
            stream: 0,
            event: v,
        };
        let mut arrivals = vec![
            ev(json!({"type": "comment", "viewer": "a", "text": "#2 got black left anot"})),
            ev(json!({"type": "viewer_join", "viewer": "b"})),
            ev(json!({"type": "comment", "viewer": "c", "text": "price of no.3?"})),
            ev(json!({"type": "comment", "viewer": "d", "text": "lol ur cat"})),
        ];
        for (i, a) in arrivals.iter_mut().enumerate() {
            a.at = i as f64;
        }
        let reply = |arrival: usize, e2e: f64| Outcome {
            arrival,
            kind: "reply".into(),
            sent: Instant::now(),
            event_id: None,
            e2e,
            server: Some(json!({"queue": e2e / 2.0})),
            text: "ok".into(),
            empty: false,
            tool_calls: 0,
        };
        // finished out of order; the last one was refused
        let mut outs = vec![
            reply(2, 3.0),
            reply(0, 1.0),
            reply(1, 0.5),
            Outcome::unanswered(3, "rejected".into()),
        ];
        // what the streams' events said: classes (the refused one was never accepted), and
        // two turns of the first event
        let mut seen = HashMap::new();
        let t = Instant::now();
        let events = [
            json!({"type": "accepted", "id": 10, "status": "queued", "class": "product"}),
            json!({"type": "accepted", "id": 11, "status": "queued", "class": "greeting"}),
            json!({"type": "accepted", "id": 12, "status": "merged", "into": 10}),
            json!({"type": "started", "id": 10, "answers": [12], "class": "product"}),
            json!({"type": "turn", "id": 10, "index": 0, "prompt_tokens": 900, "cached_tokens": 880, "generated_tokens": 12}),
            json!({"type": "turn", "id": 10, "index": 1, "prompt_tokens": 940, "cached_tokens": 912, "generated_tokens": 40}),
            json!({"type": "delta", "id": 10, "index": 1, "text": "Yes"}),
            json!({"type": "delta", "id": 10, "index": 1, "text": " it is"}),
        ];
        for (k, e) in events.iter().enumerate() {
            note(&mut seen, 0, e, t + Duration::from_millis(k as u64));
        }
        assert_eq!(seen[&(0, 12)].class, Some(Class::Product));
        for (o, id) in outs.iter_mut().zip([12, 10, 11]) {
            o.event_id = Some(id);
        }
        let rows = trace(&arrivals, &outs, &seen);
        let at: Vec<f64> = rows.iter().map(|r| r.at_s).collect();
        assert_eq!(at, [0.0, 1.0, 2.0, 3.0]);
        assert_eq!(rows[3].outcome, "rejected");
        assert_eq!(rows[3].class, None);
        assert_eq!(
            rows[0].turns,
            [
                TurnTokens {
                    prompt: 900,
                    cached: 880,
                    generated: 12
                },
                TurnTokens {
                    prompt: 940,
                    cached: 912,
                    generated: 40
                }
            ]
        );
        assert!(rows[0].ttft_s.is_some() && rows[1].turns.is_empty());
        let c = by_class(&rows);
        let classes: Vec<Class> = c.iter().map(|c| c.class).collect();
        // the refused chit-chat had no reply, so it has no row
        assert_eq!(classes, [Class::Product, Class::Greeting]);
        assert_eq!(c[0].replies, 2);
        assert_eq!((c[0].p50_s, c[0].p95_s), (1.0, 3.0));
        assert!((c[0].mean_queue_s - 1.0).abs() < 1e-9);
    }
}
