//! `hat-world`: the live-shopping stream a HAT agent works in.
//!
//! A [`World`] is one seeded live stream: an AI avatar host, 8-12 products on
//! sale with link numbers, variants and stock, shipping to fixed regions,
//! coupons, scheduled flash sales and FAQ answers. The typed [`Catalog`] lives
//! in memory (fast sampling for task generators); the same data, plus the
//! state the stream changes while it runs (pins, operator flash sales, the
//! product on stage), lives in an SQLite database that the canonical
//! operations ([`hat_harness::Op`]) run against.
//!
//! ```
//! use hat_harness::Op;
//! use serde_json::{json, Map, Value};
//!
//! let world = hat_world::World::generate(7).unwrap();
//! let mut args = Map::new();
//! args.insert("product".into(), json!("p1"));
//! let quote: Value = world.call(Op::Quote, &args).unwrap();
//! assert_eq!(quote["product"], "P1");
//! ```
//!
//! The same seed always gives the same store ([`Catalog::generate`] draws
//! from a `ChaCha8Rng`), and nothing reads the wall clock: the stream's `now`
//! is part of the data.
//!
//! # Operation results
//!
//! [`World::call`] answers JSON objects with a fixed key order. Money is in
//! currency units, an integer when whole (`59`) and otherwise at most two
//! decimals (`129.9`).
//!
//! | op | result |
//! | --- | --- |
//! | `product` | `{id, title, title_zh, brand, category, price, list_price, cost_price, specs:{..}, variants:[{size,color,stock}], link, return_days, return_note, warranty_months, description}` |
//! | `stock` | `{product, size, color, stock, variants:[..]}`: `stock` sums the matching variants |
//! | `coupons` | `{product, coupons:[{id, scope, threshold, amount, remaining, expires_at}]}`: usable now on the product |
//! | `quote` | `{product, quantity, unit_price, subtotal, coupon, discount, final_price}` |
//! | `shipping` | `{product, region, days_min, days_max, cost}` |
//! | `search` | `{results:[{id, title, category, price, link}]}`, cheapest first |
//! | `faq` | `{topic, product, answer}` |
//! | `pin` | `{pinned, link, title}` |
//! | `flash_sale` | `{product, minutes, discount_pct, sale_price, ends_at}` |
//!
//! Pricing rules: the unit price is the lowest price among the running flash
//! sales (scheduled or operator-started) and the list `price`; a coupon
//! applies when its scope covers the product, some remain, it has not expired
//! and the subtotal reaches its threshold; without a `coupon` argument the
//! applicable coupon taking the most off is used (the lower id on a tie). A
//! new operator flash sale on a product replaces that product's previous one.

mod args;
pub mod catalog;
pub mod error;
mod faq;
mod generate;
pub mod money;
mod names;
mod ops;
pub mod store;
pub mod stream;
pub mod time;
mod world;

pub use catalog::{
    Catalog, Category, Coupon, CouponScope, FaqEntry, FlashSale, Pin, Product, Region,
    ShippingRate, Spec, StreamInfo, Variant, FAQ_TOPICS, PRODUCT_FAQ_TOPICS, STORE_FAQ_TOPICS,
};
pub use error::{OpError, WorldError};
pub use generate::NOT_RETURNABLE_OPENED;
pub use money::Money;
pub use ops::{FLASH_SALE_DEFAULT_PCT, FLASH_SALE_MINUTES, FLASH_SALE_PCT, MAX_QUANTITY};
pub use stream::{Crowd, Event, History, StreamState};
pub use time::Timestamp;
pub use world::World;
