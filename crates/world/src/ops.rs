//! The canonical operations ([`hat_harness::Op`]) answered from the world.
//!
//! Each operation reads the in-memory index for static data and SQL (through
//! cached prepared statements) for live state, and answers a JSON object with
//! a fixed key order; money is in currency units (see [`Money::to_json`]).
//! Bad arguments get an [`OpError`] whose text tells the model what to fix.

use hat_harness::Op;
use serde_json::{json, Map, Value};

use crate::args::Args;
use crate::catalog::{Category, Coupon, Product, FAQ_TOPICS, PRODUCT_FAQ_TOPICS, STORE_FAQ_TOPICS};
use crate::error::OpError;
use crate::money::Money;
use crate::world::{normalise_region, words, World};

/// Largest quantity a quote accepts (a live-stream order, not a wholesale one).
pub const MAX_QUANTITY: i64 = 999;
/// Flash-sale length bounds, in minutes.
pub const FLASH_SALE_MINUTES: std::ops::RangeInclusive<i64> = 1..=60;
/// Flash-sale discount bounds, in percent, and the default.
pub const FLASH_SALE_PCT: std::ops::RangeInclusive<i64> = 1..=90;
pub const FLASH_SALE_DEFAULT_PCT: i64 = 10;

/// Query words that carry no product meaning.
const STOPWORDS: &[&str] = &[
    "a",
    "an",
    "the",
    "for",
    "and",
    "or",
    "with",
    "of",
    "in",
    "to",
    "me",
    "my",
    "i",
    "any",
    "some",
    "do",
    "you",
    "have",
    "show",
    "is",
    "are",
    "what",
    "something",
    "please",
    "good",
    "best",
    "cheap",
    "under",
    "new",
];

/// Spoken names for FAQ topics that mean the same thing.
fn topic_alias(t: &str) -> &str {
    match t {
        "return" | "refund" | "refunds" => "returns",
        "delivery" => "shipping",
        "size" | "sizes" | "fit" => "sizing",
        "guarantee" => "warranty",
        "pay" | "payments" => "payment",
        other => other,
    }
}

fn variant_json(size: Option<&str>, color: &str, stock: u32) -> Value {
    json!({"size": size, "color": color, "stock": stock})
}

fn coupon_json(c: &Coupon) -> Value {
    json!({
        "id": c.id,
        "scope": c.scope.to_string(),
        "threshold": c.threshold.to_json(),
        "amount": c.amount.to_json(),
        "remaining": c.remaining,
        "expires_at": c.expires_at,
    })
}

impl World {
    /// Runs a canonical operation with canonical argument names.
    ///
    /// Never panics on any argument map; a call the store cannot answer gets
    /// an [`OpError`] the model can read and act on.
    pub fn call(&self, op: Op, args: &Map<String, Value>) -> Result<Value, OpError> {
        let a = Args::new(op, args)?;
        match op {
            Op::Product => self.op_product(&a),
            Op::Stock => self.op_stock(&a),
            Op::Coupons => self.op_coupons(&a),
            Op::Quote => self.op_quote(&a),
            Op::Shipping => self.op_shipping(&a),
            Op::Search => self.op_search(&a),
            Op::Faq => self.op_faq(&a),
            Op::Pin => self.op_pin(&a),
            Op::FlashSale => self.op_flash_sale(&a),
        }
    }

    /// The position of a product id given by a model (`p3`, ` P3 `).
    pub(crate) fn product_index(&self, given: &str) -> Result<usize, OpError> {
        let key = given.trim().to_ascii_uppercase();
        self.index
            .products
            .get(&key)
            .copied()
            .ok_or_else(|| OpError::UnknownProduct {
                given: given.chars().take(40).collect(),
                known: self.index.known_products.clone(),
            })
    }

    /// The product with a model-given id.
    pub fn product_by_id(&self, given: &str) -> Result<&Product, OpError> {
        Ok(&self.catalog.products[self.product_index(given)?])
    }

    fn product_arg(&self, a: &Args, name: &'static str) -> Result<usize, OpError> {
        self.product_index(&a.required_string(name)?)
    }

    fn op_product(&self, a: &Args) -> Result<Value, OpError> {
        let p = &self.catalog.products[self.product_arg(a, "product")?];
        let specs: Map<String, Value> = p
            .specs
            .iter()
            .map(|s| (s.key.clone(), Value::from(s.value.clone())))
            .collect();
        let variants: Vec<Value> = p
            .variants
            .iter()
            .map(|v| variant_json(v.size.as_deref(), &v.color, v.stock))
            .collect();
        Ok(json!({
            "id": p.id,
            "title": p.title,
            "title_zh": p.title_zh,
            "brand": p.brand,
            "category": p.category.as_str(),
            "price": p.price.to_json(),
            "list_price": p.list_price.to_json(),
            "cost_price": p.cost_price.to_json(),
            "specs": specs,
            "variants": variants,
            "link": p.link,
            "return_days": p.return_days,
            "return_note": p.return_note,
            "warranty_months": p.warranty_months,
            "description": p.description,
        }))
    }

    fn op_stock(&self, a: &Args) -> Result<Value, OpError> {
        let p = &self.catalog.products[self.product_arg(a, "product")?];
        let size = match a.string("size")? {
            None => None,
            Some(given) => Some(self.match_size(p, &given)?),
        };
        let color = match a.string("color")? {
            None => None,
            Some(given) => {
                let colors = p.colors();
                let found = colors
                    .iter()
                    .find(|c| c.eq_ignore_ascii_case(&given))
                    .copied();
                Some(found.ok_or_else(|| OpError::UnknownVariant {
                    product: p.id.clone(),
                    dimension: "color",
                    given: given.chars().take(40).collect(),
                    available: format!("colors: {}", colors.join(", ")),
                })?)
            }
        };
        let rows: Vec<_> = p
            .variants
            .iter()
            .filter(|v| {
                size.is_none_or(|s| v.size.as_deref() == Some(s))
                    && color.is_none_or(|c| c == v.color)
            })
            .collect();
        let total: u64 = rows.iter().map(|v| u64::from(v.stock)).sum();
        let variants: Vec<Value> = rows
            .iter()
            .map(|v| variant_json(v.size.as_deref(), &v.color, v.stock))
            .collect();
        Ok(
            json!({"product": p.id, "size": size, "color": color, "stock": total, "variants": variants}),
        )
    }

    /// The product's own spelling of a size (`m` -> `M`, `38.0` -> `38`).
    fn match_size<'p>(&self, p: &'p Product, given: &str) -> Result<&'p str, OpError> {
        let sizes = p.sizes();
        if let Some(s) = sizes.iter().find(|s| s.eq_ignore_ascii_case(given)) {
            return Ok(s);
        }
        if let Ok(f) = given.parse::<f64>() {
            if f.fract() == 0.0 && f.abs() < 1e6 {
                let whole = format!("{}", f as i64);
                if let Some(s) = sizes.iter().find(|s| **s == whole) {
                    return Ok(s);
                }
            }
        }
        let available = if sizes.is_empty() {
            format!("it is one size; colors: {}", p.colors().join(", "))
        } else {
            format!("sizes: {}", sizes.join(", "))
        };
        Err(OpError::UnknownVariant {
            product: p.id.clone(),
            dimension: "size",
            given: given.chars().take(40).collect(),
            available,
        })
    }

    fn op_coupons(&self, a: &Args) -> Result<Value, OpError> {
        let p = &self.catalog.products[self.product_arg(a, "product")?];
        let list: Vec<Value> = self.catalog.coupons_for(p).map(coupon_json).collect();
        Ok(json!({"product": p.id, "coupons": list}))
    }

    /// Why `c` cannot be used on `p` for `subtotal`, if it cannot.
    fn coupon_problem(&self, ci: usize, p: &Product, subtotal: Money) -> Option<String> {
        let c = &self.catalog.coupons[ci];
        if !c.scope.covers(p) {
            return Some(match &c.scope {
                crate::catalog::CouponScope::Category(cat) => {
                    format!(
                        "it is only for {cat} products and {} is {}",
                        p.id, p.category
                    )
                }
                crate::catalog::CouponScope::Product(id) => format!("it is only for product {id}"),
                crate::catalog::CouponScope::Store => "it is not valid here".into(),
            });
        }
        if c.remaining == 0 {
            return Some("it is used up (0 remaining)".into());
        }
        if self.index.coupon_expiry[ci] <= self.index.now {
            return Some(format!("it expired at {}", c.expires_at));
        }
        if c.threshold > subtotal {
            return Some(format!(
                "it needs a spend of at least {} and the subtotal is {}",
                c.threshold, subtotal
            ));
        }
        None
    }

    fn op_quote(&self, a: &Args) -> Result<Value, OpError> {
        let pi = self.product_arg(a, "product")?;
        let p = &self.catalog.products[pi];
        let quantity = a.integer("quantity")?.unwrap_or(1);
        if !(1..=MAX_QUANTITY).contains(&quantity) {
            return Err(OpError::BadValue {
                arg: "quantity",
                value: quantity.to_string(),
                reason: format!("it must be 1 to {MAX_QUANTITY}"),
            });
        }
        let unit = self.unit_price(pi)?;
        let subtotal = unit.times(quantity);
        let chosen = match a.string("coupon")? {
            Some(given) => {
                let ci = *self
                    .index
                    .coupons
                    .get(&given.to_ascii_uppercase())
                    .ok_or_else(|| OpError::UnknownCoupon {
                        given: given.chars().take(40).collect(),
                        known: self.index.known_coupons.clone(),
                    })?;
                if let Some(reason) = self.coupon_problem(ci, p, subtotal) {
                    return Err(OpError::CouponNotApplicable {
                        coupon: self.catalog.coupons[ci].id.clone(),
                        product: p.id.clone(),
                        reason,
                    });
                }
                Some(ci)
            }
            // The best coupon is the one taking most off; the earlier id wins a tie.
            None => (0..self.catalog.coupons.len())
                .filter(|&ci| self.coupon_problem(ci, p, subtotal).is_none())
                .fold(None, |best: Option<(usize, Money)>, ci| {
                    let d = self.catalog.coupons[ci].amount.min(subtotal);
                    match best {
                        Some((_, bd)) if bd >= d => best,
                        _ => Some((ci, d)),
                    }
                })
                .map(|(ci, _)| ci),
        };
        let discount = chosen.map_or(Money::ZERO, |ci| {
            self.catalog.coupons[ci].amount.min(subtotal)
        });
        Ok(json!({
            "product": p.id,
            "quantity": quantity,
            "unit_price": unit.to_json(),
            "subtotal": subtotal.to_json(),
            "coupon": chosen.map(|ci| self.catalog.coupons[ci].id.clone()),
            "discount": discount.to_json(),
            "final_price": subtotal.saturating_sub(discount).to_json(),
        }))
    }

    fn op_shipping(&self, a: &Args) -> Result<Value, OpError> {
        let pi = self.product_arg(a, "product")?;
        let given = a.required_string("region")?;
        let ri = *self
            .index
            .regions
            .get(&normalise_region(&given))
            .ok_or_else(|| OpError::UnknownRegion {
                given: given.chars().take(40).collect(),
                known: self.index.known_regions.clone(),
            })?;
        let rate = self
            .index
            .shipping
            .get(&(pi, ri))
            .map(|&i| &self.catalog.shipping[i])
            .ok_or_else(|| {
                OpError::Store(format!(
                    "no shipping rate for {} to {}",
                    self.catalog.products[pi].id, self.catalog.regions[ri].name
                ))
            })?;
        Ok(json!({
            "product": rate.product,
            "region": rate.region,
            "days_min": rate.days_min,
            "days_max": rate.days_max,
            "cost": rate.cost.to_json(),
        }))
    }

    fn op_search(&self, a: &Args) -> Result<Value, OpError> {
        let query = a.string("query")?;
        let category = match a.string("category")? {
            None => None,
            Some(c) => Some(c.parse::<Category>().map_err(|_| OpError::BadValue {
                arg: "category",
                value: format!("\"{}\"", c.chars().take(40).collect::<String>()),
                reason: format!("categories are {}", Category::list()),
            })?),
        };
        let max_price = match a.number("max_price")? {
            None => None,
            Some(x) => Some(Money::from_units_f64(x).ok_or_else(|| OpError::BadValue {
                arg: "max_price",
                value: x.to_string(),
                reason: "it must be a price of 0 or more".into(),
            })?),
        };
        let tokens: Vec<String> = query
            .as_deref()
            .map(|q| {
                words(q)
                    .filter(|w| !STOPWORDS.contains(&w.as_str()))
                    .collect()
            })
            .unwrap_or_default();
        let mut hits: Vec<&Product> = self
            .catalog
            .products
            .iter()
            .enumerate()
            .filter(|(i, p)| {
                category.is_none_or(|c| c == p.category)
                    && max_price.is_none_or(|m| p.price <= m)
                    && (tokens.is_empty() || tokens.iter().any(|t| self.word_matches(*i, t)))
            })
            .map(|(_, p)| p)
            .collect();
        hits.sort_by_key(|p| p.price);
        let results: Vec<Value> = hits
            .iter()
            .map(|p| {
                json!({"id": p.id, "title": p.title, "category": p.category.as_str(), "price": p.price.to_json(), "link": p.link})
            })
            .collect();
        Ok(json!({"results": results}))
    }

    /// A query word matches a title word, keyword or category (plural `s`
    /// forgiven), or is contained in the Chinese title.
    fn word_matches(&self, product: usize, token: &str) -> bool {
        let set = &self.index.search_words[product];
        if set.contains(token) {
            return true;
        }
        if let Some(singular) = token.strip_suffix('s').filter(|s| s.len() >= 3) {
            if set.contains(singular) {
                return true;
            }
        }
        !token.is_ascii() && self.index.title_zh[product].contains(token)
    }

    fn op_faq(&self, a: &Args) -> Result<Value, OpError> {
        let raw = a.required_string("topic")?;
        let lower = raw.to_lowercase();
        let topic = topic_alias(&lower);
        let product = match a.string("product")? {
            None => None,
            Some(id) => Some(self.product_index(&id)?),
        };
        let shown: String = raw.chars().take(40).collect();
        if !FAQ_TOPICS.contains(&topic) {
            return Err(OpError::UnknownTopic {
                topic: shown,
                context: String::new(),
                known: FAQ_TOPICS.join(", "),
            });
        }
        let entry = match product {
            Some(pi) => self
                .index
                .faq
                .get(&(topic.to_string(), Some(pi)))
                .or_else(|| {
                    (!PRODUCT_FAQ_TOPICS.contains(&topic))
                        .then(|| self.index.faq.get(&(topic.to_string(), None)))
                        .flatten()
                }),
            None => {
                if PRODUCT_FAQ_TOPICS.contains(&topic) {
                    return Err(OpError::BadValue {
                        arg: "topic",
                        value: format!("\"{shown}\""),
                        reason: format!("{topic} is answered per product; pass a product too"),
                    });
                }
                self.index.faq.get(&(topic.to_string(), None))
            }
        };
        let Some(&ei) = entry else {
            let (context, known) = match product {
                Some(pi) => {
                    let p = &self.catalog.products[pi];
                    let mut known: Vec<&str> = STORE_FAQ_TOPICS.to_vec();
                    known.extend(
                        PRODUCT_FAQ_TOPICS
                            .iter()
                            .filter(|t| self.index.faq.contains_key(&(t.to_string(), Some(pi)))),
                    );
                    (format!(" for {} ({})", p.id, p.category), known.join(", "))
                }
                None => (String::new(), STORE_FAQ_TOPICS.join(", ")),
            };
            return Err(OpError::UnknownTopic {
                topic: shown,
                context,
                known,
            });
        };
        let e = &self.catalog.faq[ei];
        Ok(json!({
            "topic": topic,
            "product": product.map(|pi| self.catalog.products[pi].id.clone()),
            "answer": e.answer,
        }))
    }

    fn op_pin(&self, a: &Args) -> Result<Value, OpError> {
        let p = &self.catalog.products[self.product_arg(a, "product")?];
        self.conn
            .prepare_cached("INSERT INTO pins (product, link, pinned_at) VALUES (?1, ?2, ?3)")?
            .execute(rusqlite::params![p.id, p.link, self.catalog.stream.now])?;
        Ok(json!({"pinned": p.id, "link": p.link, "title": p.title}))
    }

    fn op_flash_sale(&self, a: &Args) -> Result<Value, OpError> {
        let pi = self.product_arg(a, "product")?;
        let p = &self.catalog.products[pi];
        let minutes = a.required_integer("minutes")?;
        if !FLASH_SALE_MINUTES.contains(&minutes) {
            return Err(OpError::BadValue {
                arg: "minutes",
                value: minutes.to_string(),
                reason: format!(
                    "a flash sale lasts {} to {} minutes",
                    FLASH_SALE_MINUTES.start(),
                    FLASH_SALE_MINUTES.end()
                ),
            });
        }
        let pct = a.integer("discount_pct")?.unwrap_or(FLASH_SALE_DEFAULT_PCT);
        if !FLASH_SALE_PCT.contains(&pct) {
            return Err(OpError::BadValue {
                arg: "discount_pct",
                value: pct.to_string(),
                reason: format!(
                    "the discount must be {} to {} percent",
                    FLASH_SALE_PCT.start(),
                    FLASH_SALE_PCT.end()
                ),
            });
        }
        let pct = pct as u32;
        let now = self.index.now;
        let ends = now.plus_minutes(minutes);
        // A new operator sale on a product replaces the previous one.
        self.conn
            .prepare_cached("DELETE FROM live_flash_sales WHERE product = ?1")?
            .execute([&p.id])?;
        self.conn
            .prepare_cached("INSERT INTO live_flash_sales (product, discount_pct, starts_at, ends_at) VALUES (?1, ?2, ?3, ?4)")?
            .execute(rusqlite::params![p.id, pct, now.to_string(), ends.to_string()])?;
        Ok(json!({
            "product": p.id,
            "minutes": minutes,
            "discount_pct": pct,
            "sale_price": p.price.percent_off(pct).to_json(),
            "ends_at": ends.to_string(),
        }))
    }
}

#[cfg(test)]
#[path = "ops_tests.rs"]
mod tests;
