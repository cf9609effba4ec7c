//! The simulated audience's behaviour model: what a viewer does after the host answers.
//!
//! A viewer asked a question (an lsqa-style task). The scorer's verdict on the host's
//! answer sorts it into one of three [`Answer`] classes; the viewer then opens the item page,
//! adds to cart and buys with chances that depend on that class, on a compliance incident
//! and on how long the reply took:
//!
//! ```text
//! P(view) = view[class] * 0.5 ^ (max(0, latency - patience_s) / latency_halflife_s)
//! P(cart | view) = cart_correct if class is correct, else cart_other
//! P(buy | cart) = buy_given_cart * (incident_trust if a compliance incident)
//! amount = the price of the product the question is about (on stage when it names none)
//! ```
//!
//! Every draw comes from a generator seeded by the experiment seed and the viewer, so a
//! run is reproducible. Simulated GMV is a stand-in for real traffic, not evidence about it:
//! it measures how the scorer's verdicts and the latency translate under these assumptions.

use rand::Rng;
use serde::Serialize;

use hat_tasks::{Intent, Score, Task, TaskKind};
use hat_world::World;

use crate::config::Behaviour;

/// The scorer's verdict on an answer, as a viewer experiences it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// Every check passed.
    Correct,
    /// A reply came, but with a wrong fact, argument or tool.
    Wrong,
    /// No usable reply: a malformed call, or nothing said.
    Missed,
}

/// How an answer went, from its score.
pub fn classify(score: &Score, reply: &str) -> Answer {
    if score.pass {
        return Answer::Correct;
    }
    let format_ok = score.component("format").is_none_or(|c| c.pass);
    if !format_ok || reply.trim().is_empty() {
        Answer::Missed
    } else {
        Answer::Wrong
    }
}

/// A compliance incident: the reply broke a constraint (forbidden claim, length, required
/// disclosure), or the host fell for a compliance trap.
pub fn incident(score: &Score, kind: TaskKind) -> bool {
    let constraints = score.component("constraints").is_some_and(|c| !c.pass);
    constraints || (kind == TaskKind::ComplianceTrap && !score.pass)
}

/// What one viewer did.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Reaction {
    pub page_view: bool,
    pub add_to_cart: bool,
    pub purchase: bool,
    /// What the purchase paid (0 without one), in the stream's currency.
    pub amount: f64,
}

/// The viewer's reaction to an answer of class `answer` that took `latency_s` seconds.
pub fn react(
    b: &Behaviour,
    answer: Answer,
    incident: bool,
    latency_s: f64,
    price: f64,
    rng: &mut impl Rng,
) -> Reaction {
    let view_p = match answer {
        Answer::Correct => b.view_correct,
        Answer::Wrong => b.view_wrong,
        Answer::Missed => b.view_missed,
    };
    let late = (latency_s - b.patience_s).max(0.0) / b.latency_halflife_s;
    let view_p = (view_p * 0.5f64.powf(late)).clamp(0.0, 1.0);
    // Draw all three in order every time, so one viewer's draws do not depend on the
    // earlier outcomes of other viewers.
    let (u_view, u_cart, u_buy): (f64, f64, f64) = (rng.gen(), rng.gen(), rng.gen());
    let page_view = u_view < view_p;
    let cart_p = if answer == Answer::Correct {
        b.cart_correct
    } else {
        b.cart_other
    };
    let add_to_cart = page_view && u_cart < cart_p;
    let buy_p = b.buy_given_cart * if incident { b.incident_trust } else { 1.0 };
    let purchase = add_to_cart && u_buy < buy_p;
    Reaction {
        page_view,
        add_to_cart,
        purchase,
        amount: if purchase { price } else { 0.0 },
    }
}

/// The product a question is about: the one it names, else the product on stage.
pub fn product_of(task: &Task) -> &str {
    match &task.intent {
        Intent::ProductFact { product, .. }
        | Intent::VariantStock { product, .. }
        | Intent::FinalPrice { product, .. }
        | Intent::Shipping { product, .. }
        | Intent::ThankPurchase { product, .. }
        | Intent::Pin { product }
        | Intent::FlashSale { product, .. } => product,
        Intent::Compare { a, .. } => a,
        Intent::AfterSales {
            product: Some(product),
            ..
        }
        | Intent::ComplianceTrap {
            product: Some(product),
        } => product,
        _ => &task.on_stage,
    }
}

/// The price a purchase after `task` pays: its product's selling price.
pub fn price_of(task: &Task, world: &World) -> f64 {
    world
        .catalog()
        .product(product_of(task))
        .or_else(|| world.catalog().product(&task.on_stage))
        .map_or(0.0, |p| p.price.as_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn rate(answer: Answer, incident: bool, latency: f64) -> (f64, f64) {
        let b = Behaviour::default();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let n = 20_000;
        let (mut views, mut gmv) = (0, 0.0);
        for _ in 0..n {
            let r = react(&b, answer, incident, latency, 100.0, &mut rng);
            views += r.page_view as usize;
            gmv += r.amount;
            assert!(!r.purchase || (r.add_to_cart && r.page_view));
        }
        (views as f64 / n as f64, gmv / n as f64)
    }

    #[test]
    fn better_answers_sell_more() {
        let (vc, gc) = rate(Answer::Correct, false, 0.0);
        let (vw, gw) = rate(Answer::Wrong, false, 0.0);
        let (vm, gm) = rate(Answer::Missed, false, 0.0);
        assert!(vc > vw && vw > vm, "{vc} {vw} {vm}");
        assert!(gc > gw && gw > gm, "{gc} {gw} {gm}");
        // the model's expectation: 0.35 * 0.45 * 0.6 * 100 = 9.45 per viewer
        assert!((gc - 9.45).abs() < 0.6, "{gc}");
    }

    #[test]
    fn incidents_and_slow_replies_cost_sales() {
        let (_, g) = rate(Answer::Correct, false, 0.0);
        let (_, gi) = rate(Answer::Correct, true, 0.0);
        assert!(gi < g * 0.65, "{gi} {g}");
        // one half-life past patience halves the views
        let (v, _) = rate(Answer::Correct, false, 3.0);
        let (vl, _) = rate(Answer::Correct, false, 9.0);
        assert!((vl / v - 0.5).abs() < 0.06, "{vl} {v}");
    }
}
