//! Comment triage: what the host answers first when viewers write faster than it can reply.
//!
//! Each stream has a bounded queue. An event gets a class (operator cue, product question,
//! compliance-sensitive comment, greeting or thanks, chit-chat) and the queue hands out the
//! most important, oldest first. Duplicate comments merge into the one already waiting;
//! joins fold into one greeting ("A, B and C"); events that waited past their class's
//! budget are dropped, since a late answer to a live comment is worse than none. Every
//! merge, fold and drop is reported to the caller, which counts it and shows it in the
//! stream's events.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use hat_world::Event;
use serde::{Deserialize, Serialize};

mod classify;
pub use classify::{classify, classify_comment, classify_comment_in, classify_in, Vocabulary};

/// What an event is about, most urgent first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// The operator's cue (push the flash sale): the stream's own plan.
    Operator,
    /// A question about a product: price, size, stock, shipping, coupons.
    Product,
    /// Claims, refunds, "is it fake", "are you a bot": must be answered carefully.
    Compliance,
    /// Joins, gifts, purchases, hellos: a thank-you or a greeting.
    Greeting,
    Chitchat,
}

impl Class {
    pub const ALL: [Class; 5] = [
        Class::Operator,
        Class::Product,
        Class::Compliance,
        Class::Greeting,
        Class::Chitchat,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::Operator => "operator",
            Class::Product => "product",
            Class::Compliance => "compliance",
            Class::Greeting => "greeting",
            Class::Chitchat => "chitchat",
        }
    }

    /// Social events go stale sooner than questions.
    fn is_social(self) -> bool {
        matches!(self, Class::Greeting | Class::Chitchat)
    }
}

/// Comment text compared for duplicates: case, spacing and trailing punctuation ignored.
fn dedup_key(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for w in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.extend(w.chars().flat_map(char::to_lowercase));
    }
    out.trim_end_matches(|c: char| c.is_ascii_punctuation() || c == '？' || c == '！')
        .to_string()
}

#[derive(Debug, Clone, Copy)]
pub struct TriageConfig {
    /// Events waiting per stream at most.
    pub capacity: usize,
    /// How long a question (operator, product, compliance) may wait before it is dropped.
    pub stale_questions: Duration,
    /// How long a greeting or chit-chat may wait.
    pub stale_social: Duration,
}

impl Default for TriageConfig {
    fn default() -> Self {
        TriageConfig {
            capacity: 64,
            stale_questions: Duration::from_secs(60),
            stale_social: Duration::from_secs(20),
        }
    }
}

/// Ids (and folded viewers' names) one waiting event lists of the events merged or folded
/// into it. A flood of duplicates or joins is counted past this, not listed, so a queue's
/// memory stays bounded however many arrive while the event waits.
pub const MAX_LISTED: usize = 64;

/// An event waiting for the host.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The id the client got when the event was accepted.
    pub id: u64,
    pub event: Event,
    pub class: Class,
    pub arrived: Instant,
    /// Ids of duplicates merged into this one, and of joins folded into it (the first
    /// [`MAX_LISTED`]).
    pub merged: Vec<u64>,
    /// Events merged or folded into this one past [`MAX_LISTED`]: counted, not listed.
    pub unlisted: u64,
    /// Viewers whose joins were folded into this one (the first is the event's own; the
    /// viewers of unlisted joins are not kept).
    pub viewers: Vec<String>,
}

impl Pending {
    /// The event the host answers: folded joins become one join naming every viewer.
    pub fn event(&self) -> Event {
        match (&self.event, self.viewers.len()) {
            (Event::ViewerJoin { .. }, n) if n > 1 => Event::ViewerJoin {
                viewer: join_names_and(&self.viewers, self.unlisted),
            },
            (e, _) => e.clone(),
        }
    }

    /// Events merged or folded into this one, listed or not.
    pub fn absorbed(&self) -> u64 {
        self.merged.len() as u64 + self.unlisted
    }

    /// Takes event `id` (and its viewer, for a join) in, listing it while there is room.
    fn absorb(&mut self, id: u64, viewer: Option<&str>) {
        if self.merged.len() < MAX_LISTED {
            self.merged.push(id);
            self.viewers.extend(viewer.map(str::to_string));
        } else {
            self.unlisted += 1;
        }
    }
}

/// "A", "A and B", "A, B and C", "A, B, C and 4 others".
pub fn join_names(names: &[String]) -> String {
    join_names_and(names, 0)
}

/// [`join_names`] with `more` viewers not named in `names`.
pub fn join_names_and(names: &[String], more: u64) -> String {
    const SHOWN: usize = 4;
    match names {
        [] => String::new(),
        [a] if more == 0 => a.clone(),
        _ if more > 0 || names.len() > SHOWN + 1 => {
            let shown = names.len().min(SHOWN);
            format!(
                "{} and {} others",
                names[..shown].join(", "),
                (names.len() - shown) as u64 + more
            )
        }
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What happened to an event offered to the queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Admission {
    Queued {
        class: Class,
    },
    /// The same comment was already waiting; it is answered once.
    Merged {
        into: u64,
    },
    /// A join folded into a waiting join.
    Folded {
        into: u64,
    },
    /// Admitted by evicting a less important waiting event.
    QueuedEvicting {
        class: Class,
        evicted: u64,
    },
}

/// Why a waiting event was not answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// Waited past its class's budget.
    Stale,
    /// Pushed out of a full queue by a more important event.
    Evicted,
    /// Still waiting when the server stopped.
    Shutdown,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dropped {
    pub id: u64,
    pub merged: Vec<u64>,
    /// Events merged into it past [`MAX_LISTED`], dropped with it.
    #[serde(skip_serializing_if = "is_zero")]
    pub unlisted: u64,
    pub class: Class,
    pub reason: DropReason,
    pub waited_s: f64,
}

/// One stream's waiting events.
#[derive(Debug)]
pub struct Queue {
    cfg: TriageConfig,
    items: VecDeque<Pending>,
    /// The stream's catalog words: a comment naming the goods is a product question.
    vocabulary: Option<Vocabulary>,
}

impl Queue {
    pub fn new(cfg: TriageConfig) -> Self {
        Queue {
            cfg,
            items: VecDeque::new(),
            vocabulary: None,
        }
    }

    /// A queue that classes comments with the stream's catalog too.
    pub fn with_vocabulary(cfg: TriageConfig, vocabulary: Vocabulary) -> Self {
        Queue {
            vocabulary: Some(vocabulary),
            ..Queue::new(cfg)
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Room left (a request of several events checks this first, so it is all or nothing).
    pub fn room(&self) -> usize {
        self.cfg.capacity.saturating_sub(self.items.len())
    }

    /// Offers an event. `Err` when the queue is full of events at least as important.
    pub fn push(
        &mut self,
        id: u64,
        event: Event,
        now: Instant,
    ) -> Result<(Admission, Option<Dropped>), Class> {
        let class = classify_in(&event, self.vocabulary.as_ref());
        if let Event::Comment { text, .. } = &event {
            let key = dedup_key(text);
            if let Some(p) = self
                .items
                .iter_mut()
                .find(|p| matches!(&p.event, Event::Comment { text, .. } if dedup_key(text) == key))
            {
                p.absorb(id, None);
                return Ok((Admission::Merged { into: p.id }, None));
            }
        }
        if let Event::ViewerJoin { viewer } = &event {
            if let Some(p) = self
                .items
                .iter_mut()
                .find(|p| matches!(p.event, Event::ViewerJoin { .. }))
            {
                p.absorb(id, Some(viewer));
                return Ok((Admission::Folded { into: p.id }, None));
            }
        }
        let viewers = match &event {
            Event::ViewerJoin { viewer } => vec![viewer.clone()],
            _ => Vec::new(),
        };
        let pending = Pending {
            id,
            event,
            class,
            arrived: now,
            merged: Vec::new(),
            unlisted: 0,
            viewers,
        };
        if self.items.len() < self.cfg.capacity {
            self.items.push_back(pending);
            return Ok((Admission::Queued { class }, None));
        }
        // full: the least important, newest waiting event makes room for a more important one
        let worst = (0..self.items.len())
            .max_by_key(|&i| (self.items[i].class, self.items[i].arrived))
            .filter(|&i| self.items[i].class > class)
            .ok_or(class)?;
        let out = self.items.remove(worst).ok_or(class)?;
        self.items.push_back(pending);
        let dropped = Dropped {
            id: out.id,
            merged: out.merged,
            unlisted: out.unlisted,
            class: out.class,
            reason: DropReason::Evicted,
            waited_s: now.saturating_duration_since(out.arrived).as_secs_f64(),
        };
        Ok((
            Admission::QueuedEvicting {
                class,
                evicted: dropped.id,
            },
            Some(dropped),
        ))
    }

    /// Drops every waiting event (the server is stopping): each is reported, none vanishes.
    pub fn drain(&mut self, now: Instant) -> Vec<Dropped> {
        self.items
            .drain(..)
            .map(|p| Dropped {
                id: p.id,
                merged: p.merged,
                unlisted: p.unlisted,
                class: p.class,
                reason: DropReason::Shutdown,
                waited_s: now.saturating_duration_since(p.arrived).as_secs_f64(),
            })
            .collect()
    }

    /// Drops events that waited too long.
    pub fn sweep(&mut self, now: Instant) -> Vec<Dropped> {
        let cfg = self.cfg;
        let mut dropped = Vec::new();
        self.items.retain(|p| {
            let budget = if p.class.is_social() {
                cfg.stale_social
            } else {
                cfg.stale_questions
            };
            let waited = now.saturating_duration_since(p.arrived);
            if waited <= budget {
                return true;
            }
            dropped.push(Dropped {
                id: p.id,
                merged: p.merged.clone(),
                unlisted: p.unlisted,
                class: p.class,
                reason: DropReason::Stale,
                waited_s: waited.as_secs_f64(),
            });
            false
        });
        dropped
    }

    /// The next event to answer: the most important class, oldest first.
    pub fn pop(&mut self) -> Option<Pending> {
        let best =
            (0..self.items.len()).min_by_key(|&i| (self.items[i].class, self.items[i].arrived))?;
        self.items.remove(best)
    }

    /// Waiting events per class.
    pub fn depth_by_class(&self) -> Vec<(Class, usize)> {
        Class::ALL
            .iter()
            .map(|&c| (c, self.items.iter().filter(|p| p.class == c).count()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn comment(text: &str) -> Event {
        Event::Comment {
            viewer: "v".into(),
            text: text.into(),
        }
    }

    fn join(v: &str) -> Event {
        Event::ViewerJoin { viewer: v.into() }
    }

    #[test]
    fn questions_come_before_greetings_and_chitchat_oldest_first() {
        let mut q = Queue::new(TriageConfig::default());
        let t = Instant::now();
        q.push(1, comment("lol"), t).unwrap();
        q.push(2, join("amy"), t).unwrap();
        q.push(3, comment("is it fake?"), t).unwrap();
        q.push(4, comment("price of link 2?"), t).unwrap();
        q.push(
            5,
            comment("does it ship to Osaka?"),
            t + Duration::from_millis(1),
        )
        .unwrap();
        let order: Vec<u64> = std::iter::from_fn(|| q.pop()).map(|p| p.id).collect();
        assert_eq!(order, [4, 5, 3, 2, 1]);
    }

    #[test]
    fn duplicates_merge_and_joins_fold() {
        let mut q = Queue::new(TriageConfig::default());
        let t = Instant::now();
        q.push(1, comment("Price of the hoodie?"), t).unwrap();
        let (a, _) = q.push(2, comment("price of the  HOODIE"), t).unwrap();
        assert_eq!(a, Admission::Merged { into: 1 });
        q.push(3, join("A"), t).unwrap();
        assert_eq!(
            q.push(4, join("B"), t).unwrap().0,
            Admission::Folded { into: 3 }
        );
        q.push(5, join("C"), t).unwrap();
        assert_eq!(q.len(), 2);
        q.pop().unwrap();
        let j = q.pop().unwrap();
        assert_eq!(j.merged, [4, 5]);
        assert_eq!(j.event(), join("A, B and C"));
    }

    #[test]
    fn stale_events_are_dropped_by_class_budget() {
        let cfg = TriageConfig {
            capacity: 8,
            stale_questions: Duration::from_secs(60),
            stale_social: Duration::from_secs(20),
        };
        let mut q = Queue::new(cfg);
        let t = Instant::now();
        q.push(1, comment("hello"), t).unwrap();
        q.push(2, comment("what sizes are there?"), t).unwrap();
        let d = q.sweep(t + Duration::from_secs(30));
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].id, d[0].reason), (1, DropReason::Stale));
        assert_eq!(q.pop().unwrap().id, 2);
    }

    /// At shutdown every waiting event is reported dropped, with what was merged into it.
    #[test]
    fn draining_reports_every_waiting_event() {
        let mut q = Queue::new(TriageConfig::default());
        let t = Instant::now();
        q.push(1, comment("Price of the hoodie?"), t).unwrap();
        q.push(2, comment("price of the hoodie"), t).unwrap();
        q.push(3, join("A"), t).unwrap();
        let d = q.drain(t + Duration::from_secs(2));
        assert!(q.is_empty());
        let got: Vec<(u64, Vec<u64>, DropReason)> = d
            .iter()
            .map(|x| (x.id, x.merged.clone(), x.reason))
            .collect();
        assert_eq!(
            got,
            [
                (1, vec![2], DropReason::Shutdown),
                (3, vec![], DropReason::Shutdown)
            ]
        );
        assert!(d.iter().all(|x| x.waited_s >= 2.0));
    }

    #[test]
    fn a_full_queue_evicts_only_for_something_more_important() {
        let cfg = TriageConfig {
            capacity: 2,
            ..TriageConfig::default()
        };
        let mut q = Queue::new(cfg);
        let t = Instant::now();
        q.push(1, comment("lol"), t).unwrap();
        q.push(2, comment("so pretty"), t).unwrap();
        assert_eq!(q.push(3, comment("nice"), t), Err(Class::Chitchat));
        let (a, d) = q.push(4, comment("how much is it?"), t).unwrap();
        assert_eq!(
            a,
            Admission::QueuedEvicting {
                class: Class::Product,
                evicted: 2
            }
        );
        assert_eq!(d.unwrap().reason, DropReason::Evicted);
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn names_fold_readably() {
        let n = |k: usize| (0..k).map(|i| format!("v{i}")).collect::<Vec<_>>();
        assert_eq!(join_names(&n(1)), "v0");
        assert_eq!(join_names(&n(2)), "v0 and v1");
        assert_eq!(join_names(&n(3)), "v0, v1 and v2");
        assert_eq!(join_names(&n(9)), "v0, v1, v2, v3 and 5 others");
    }

    /// Review finding: every duplicate's id and every folded viewer was kept, so a flood of
    /// one comment or of joins grew a waiting event without bound.
    #[test]
    fn a_flood_of_duplicates_or_joins_is_counted_past_the_listed_ids() {
        let mut q = Queue::new(TriageConfig::default());
        let t = Instant::now();
        q.push(0, comment("price of the hoodie?"), t).unwrap();
        q.push(1, join("v1"), t).unwrap();
        for id in 2..200_002 {
            let e = if id % 2 == 0 {
                comment("Price of the hoodie")
            } else {
                join(&format!("v{id}"))
            };
            q.push(id, e, t).unwrap();
        }
        let c = q.pop().unwrap();
        assert_eq!((c.merged.len(), c.absorbed()), (MAX_LISTED, 100_000));
        let j = q.pop().unwrap();
        assert_eq!((j.merged.len(), j.absorbed()), (MAX_LISTED, 100_000));
        assert_eq!(j.viewers.len(), MAX_LISTED + 1);
        assert_eq!(j.event(), join("v1, v3, v5, v7 and 99997 others"));
        // a dropped event reports the count too
        let mut q = Queue::new(TriageConfig::default());
        q.push(0, comment("lol"), t).unwrap();
        for id in 1..1000 {
            q.push(id, comment("LOL"), t).unwrap();
        }
        let d = q.sweep(t + Duration::from_secs(3600));
        assert_eq!((d[0].merged.len() as u64 + d[0].unlisted), 999);
        let v = serde_json::to_value(&d[0]).unwrap();
        assert_eq!(v["unlisted"], 999 - MAX_LISTED as u64, "{v}");
    }

    proptest! {
        /// Whatever arrives, the queue never holds more than its capacity, never loses an
        /// event silently (each is queued, merged, folded, rejected or reported dropped),
        /// and classifying never panics.
        #[test]
        fn every_event_is_accounted_for(texts in proptest::collection::vec("\\PC{0,24}", 1..60), cap in 1usize..8) {
            let mut q = Queue::new(TriageConfig { capacity: cap, ..TriageConfig::default() });
            let t = Instant::now();
            let (mut queued, mut absorbed, mut rejected, mut dropped) = (0usize, 0usize, 0usize, 0usize);
            for (i, text) in texts.iter().enumerate() {
                let ev = if i % 5 == 0 { join(text) } else { comment(text) };
                match q.push(i as u64, ev, t) {
                    Ok((Admission::Merged { .. } | Admission::Folded { .. }, _)) => absorbed += 1,
                    Ok((_, d)) => { queued += 1; if let Some(d) = d { dropped += 1 + d.merged.len() + d.unlisted as usize; } }
                    Err(_) => rejected += 1,
                }
                prop_assert!(q.len() <= cap);
            }
            let mut left = 0;
            while let Some(p) = q.pop() { left += 1 + p.absorbed() as usize; }
            prop_assert_eq!(queued + absorbed + rejected, texts.len());
            prop_assert_eq!(left + dropped + rejected, texts.len());
        }
    }
}
