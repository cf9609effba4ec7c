//! What happens on stream: viewer events, their history, and the state a
//! prompt shows.
//!
//! [`Event`]s are what the harness's hooks fire on (`viewer_join`, `comment`,
//! `gift`, `purchase`, `operator_cue`); [`History`] keeps the recent ones for
//! the prompt; [`Crowd`] invents seeded viewer handles and gifts in the mix a
//! Chinese live-shopping room has; [`StreamState`] is the serializable snapshot
//! a prompt template renders.

use std::collections::VecDeque;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::catalog::Category;
use crate::money::Money;
use crate::names;

/// Something that happened in the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    ViewerJoin {
        viewer: String,
    },
    Comment {
        viewer: String,
        text: String,
    },
    Gift {
        viewer: String,
        gift: String,
        count: u32,
    },
    Purchase {
        viewer: String,
        product: String,
        quantity: u32,
    },
    OperatorCue {
        text: String,
    },
}

impl Event {
    /// The harness hook event this is.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::ViewerJoin { .. } => "viewer_join",
            Event::Comment { .. } => "comment",
            Event::Gift { .. } => "gift",
            Event::Purchase { .. } => "purchase",
            Event::OperatorCue { .. } => "operator_cue",
        }
    }

    /// The viewer behind the event (operator cues have none).
    pub fn viewer(&self) -> Option<&str> {
        match self {
            Event::ViewerJoin { viewer }
            | Event::Comment { viewer, .. }
            | Event::Gift { viewer, .. }
            | Event::Purchase { viewer, .. } => Some(viewer),
            Event::OperatorCue { .. } => None,
        }
    }
}

/// The most recent events, oldest first, at most `cap` of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    cap: usize,
    events: VecDeque<Event>,
}

impl History {
    /// Default length: enough context for a reply without flooding the prompt.
    pub const DEFAULT_CAP: usize = 20;

    /// A history keeping the last `cap` events (at least one).
    pub fn new(cap: usize) -> History {
        let cap = cap.max(1);
        History {
            cap,
            events: VecDeque::with_capacity(cap),
        }
    }

    /// Appends an event, dropping the oldest when full.
    pub fn push(&mut self, event: Event) {
        if self.events.len() == self.cap {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Event> + ExactSizeIterator {
        self.events.iter()
    }

    /// The last `n` events, oldest first.
    pub fn last(&self, n: usize) -> impl Iterator<Item = &Event> {
        self.events.iter().skip(self.events.len().saturating_sub(n))
    }

    pub fn clear(&mut self) {
        self.events.clear();
    }
}

impl Default for History {
    fn default() -> Self {
        History::new(History::DEFAULT_CAP)
    }
}

/// A viewer handle: `lily_0921`, `小鱼儿`, `momo🍑`, `Kevin88`, `小鹿1998`.
pub fn viewer_name<R: Rng + ?Sized>(rng: &mut R) -> String {
    let pick = |rng: &mut R, list: &[&'static str]| *list.choose(rng).unwrap_or(&"viewer");
    match rng.gen_range(0..5) {
        0 => format!(
            "{}_{:02}{:02}",
            pick(rng, names::HANDLE_EN),
            rng.gen_range(1..=12),
            rng.gen_range(1..=28)
        ),
        1 => pick(rng, names::HANDLE_ZH).to_string(),
        2 => format!(
            "{}{}",
            pick(rng, names::HANDLE_PINYIN),
            pick(rng, names::HANDLE_EMOJI)
        ),
        3 => {
            let en = pick(rng, names::HANDLE_EN);
            let mut cap = en[..1].to_uppercase();
            cap.push_str(&en[1..]);
            format!("{cap}{}", rng.gen_range(1..100))
        }
        _ => format!(
            "{}{}",
            pick(rng, names::HANDLE_ZH),
            rng.gen_range(1985..=2008)
        ),
    }
}

/// A gift name: `rocket`, `rose`, `小心心`, ...
pub fn gift_name<R: Rng + ?Sized>(rng: &mut R) -> &'static str {
    names::GIFTS.choose(rng).copied().unwrap_or("rose")
}

/// A seeded source of viewer handles and gifts.
#[derive(Debug, Clone)]
pub struct Crowd {
    rng: ChaCha8Rng,
}

impl Crowd {
    pub fn new(seed: u64) -> Crowd {
        Crowd {
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    pub fn viewer(&mut self) -> String {
        viewer_name(&mut self.rng)
    }

    pub fn gift(&mut self) -> &'static str {
        gift_name(&mut self.rng)
    }

    /// A gift event from a new viewer, 1-10 of one gift (mostly 1).
    pub fn gift_event(&mut self) -> Event {
        let viewer = self.viewer();
        let gift = self.gift().to_string();
        let count = if self.rng.gen_bool(0.7) {
            1
        } else {
            self.rng.gen_range(2..=10)
        };
        Event::Gift {
            viewer,
            gift,
            count,
        }
    }

    /// A join event from a new viewer.
    pub fn join_event(&mut self) -> Event {
        Event::ViewerJoin {
            viewer: self.viewer(),
        }
    }
}

/// The product on stage, as a prompt shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OnStage {
    pub id: String,
    pub title: String,
    pub link: u32,
    pub price: Money,
}

/// One product line of the stream state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StateProduct {
    pub id: String,
    pub title: String,
    pub category: Category,
    pub price: Money,
    pub list_price: Money,
    pub link: u32,
}

/// A coupon usable now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StateCoupon {
    pub id: String,
    /// `store`, `category:<name>` or `product:<id>`.
    pub scope: String,
    pub threshold: Money,
    pub amount: Money,
    pub expires_at: String,
}

/// A flash sale running now (scheduled or operator-started).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StateFlashSale {
    pub product: String,
    pub discount_pct: u32,
    pub sale_price: Money,
    pub ends_at: String,
}

/// What a prompt shows about the stream right now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamState {
    pub stream_id: String,
    pub title: String,
    pub host: String,
    pub now: String,
    pub currency: String,
    pub on_stage: OnStage,
    pub products: Vec<StateProduct>,
    /// Usable now: not used up, not expired.
    pub coupons: Vec<StateCoupon>,
    /// Running now.
    pub flash_sales: Vec<StateFlashSale>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_serialize_with_hook_names() {
        let e = Event::Gift {
            viewer: "momo🍑".into(),
            gift: "rocket".into(),
            count: 2,
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["type"], e.kind());
        assert_eq!(serde_json::from_value::<Event>(v).unwrap(), e);
        let cue = Event::OperatorCue {
            text: "start a flash sale".into(),
        };
        assert_eq!(serde_json::to_value(&cue).unwrap()["type"], "operator_cue");
        assert_eq!(cue.viewer(), None);
    }

    #[test]
    fn history_keeps_the_latest() {
        let mut h = History::new(3);
        for i in 0..5 {
            h.push(Event::ViewerJoin {
                viewer: format!("v{i}"),
            });
        }
        let names: Vec<_> = h.iter().filter_map(Event::viewer).collect();
        assert_eq!(names, ["v2", "v3", "v4"]);
        assert_eq!(h.last(2).count(), 2);
        assert_eq!(h.last(2).next().and_then(Event::viewer), Some("v3"));
    }

    #[test]
    fn crowd_is_seeded_and_varied() {
        let a: Vec<String> = {
            let mut c = Crowd::new(5);
            (0..30).map(|_| c.viewer()).collect()
        };
        let b: Vec<String> = {
            let mut c = Crowd::new(5);
            (0..30).map(|_| c.viewer()).collect()
        };
        assert_eq!(a, b);
        assert!(a.iter().any(|n| !n.is_ascii()) && a.iter().any(|n| n.is_ascii()));
        let mut c = Crowd::new(1);
        assert!(matches!(c.gift_event(), Event::Gift { count: 1..=10, .. }));
    }
}
