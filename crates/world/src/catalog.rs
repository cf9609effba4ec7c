//! The typed, in-memory catalog of one stream.
//!
//! These structs are the static part of a world: what is on sale, where it
//! ships, which coupons and scheduled flash sales exist, and the FAQ. They
//! serialize with serde so generators in other crates can sample from them
//! without SQL, and so two catalogs can be compared byte for byte. What the
//! stream changes while it runs (pins, operator flash sales, the product on
//! stage) is not here: it lives only in SQL so episodes can roll it back.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::money::Money;
use crate::time::Timestamp;

/// Store-wide FAQ topics.
pub const STORE_FAQ_TOPICS: [&str; 5] =
    ["returns", "shipping", "warranty", "authenticity", "payment"];
/// FAQ topics that need a product.
pub const PRODUCT_FAQ_TOPICS: [&str; 3] = ["sizing", "care", "usage"];
/// Every FAQ topic.
pub const FAQ_TOPICS: [&str; 8] = [
    "returns",
    "shipping",
    "warranty",
    "authenticity",
    "payment",
    "sizing",
    "care",
    "usage",
];

/// Product categories. Every one of them can appear in a generated stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Category {
    Apparel,
    Shoes,
    Beauty,
    Electronics,
    Home,
    Snacks,
    Accessories,
}

impl Category {
    pub const ALL: [Category; 7] = [
        Category::Apparel,
        Category::Shoes,
        Category::Beauty,
        Category::Electronics,
        Category::Home,
        Category::Snacks,
        Category::Accessories,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Category::Apparel => "apparel",
            Category::Shoes => "shoes",
            Category::Beauty => "beauty",
            Category::Electronics => "electronics",
            Category::Home => "home",
            Category::Snacks => "snacks",
            Category::Accessories => "accessories",
        }
    }

    /// Comma-separated list of all categories, for error messages.
    pub fn list() -> String {
        Category::ALL.map(Category::as_str).join(", ")
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Category {
    type Err = String;
    /// Case-insensitive; the error lists the categories.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        Category::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(t))
            .ok_or_else(|| {
                format!(
                    "unknown category \"{t}\" (categories: {})",
                    Category::list()
                )
            })
    }
}

/// The stream itself: who hosts it and when it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamInfo {
    /// `S-<seed>` for generated streams.
    pub id: String,
    pub title: String,
    pub host: String,
    /// ISO 8601, `+08:00`.
    pub started_at: String,
    /// The stream's current time, ISO 8601; coupon expiry and flash sales are judged against it.
    pub now: String,
    /// ISO 4217 code, "CNY".
    pub currency: String,
    pub currency_symbol: String,
}

/// One ordered spec line, e.g. material = "100% cotton".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    pub key: String,
    pub value: String,
}

/// A sellable size/colour combination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variant {
    /// `S`..`XL`, `36`..`44`, or `None` for one-size products.
    pub size: Option<String>,
    /// Lowercase colour or shade, or "standard".
    pub color: String,
    pub stock: u32,
}

/// A product on sale in the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Product {
    /// `P1`..`Pn`.
    pub id: String,
    /// The number viewers tap ("link 3"); a permutation of 1..n unrelated to the id.
    pub link: u32,
    pub title: String,
    pub title_zh: String,
    pub brand: String,
    pub category: Category,
    /// The current selling price.
    pub price: Money,
    /// The crossed-out reference price (>= price).
    pub list_price: Money,
    /// Internal cost; harness hooks hide it from the model.
    pub cost_price: Money,
    pub specs: Vec<Spec>,
    /// Lowercase search words (product-type nouns, category words).
    pub keywords: Vec<String>,
    pub variants: Vec<Variant>,
    /// Days after delivery a return is accepted.
    pub return_days: u32,
    /// A restriction on returns, e.g. "not returnable once opened".
    pub return_note: Option<String>,
    /// Manufacturer warranty (electronics).
    pub warranty_months: Option<u32>,
    /// The region the product ships from.
    pub warehouse: String,
    pub description: String,
}

impl Product {
    /// Total units over all variants.
    pub fn total_stock(&self) -> u64 {
        self.variants.iter().map(|v| u64::from(v.stock)).sum()
    }

    /// Distinct sizes in variant order (empty for one-size products).
    pub fn sizes(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for s in self.variants.iter().filter_map(|v| v.size.as_deref()) {
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }

    /// Distinct colours in variant order.
    pub fn colors(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for v in &self.variants {
            if !out.contains(&v.color.as_str()) {
                out.push(&v.color);
            }
        }
        out
    }

    pub fn spec(&self, key: &str) -> Option<&str> {
        self.specs
            .iter()
            .find(|s| s.key == key)
            .map(|s| s.value.as_str())
    }
}

/// A delivery region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    pub name: String,
    pub name_zh: String,
    /// Slow, paid delivery (far west, cross-border).
    pub remote: bool,
}

/// Delivery time and cost of one product to one region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShippingRate {
    pub product: String,
    pub region: String,
    pub days_min: u32,
    pub days_max: u32,
    pub cost: Money,
}

/// What a coupon can be used on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CouponScope {
    /// Any product in the stream.
    Store,
    Category(Category),
    /// One product id.
    Product(String),
}

impl CouponScope {
    pub fn covers(&self, product: &Product) -> bool {
        match self {
            CouponScope::Store => true,
            CouponScope::Category(c) => *c == product.category,
            CouponScope::Product(id) => *id == product.id,
        }
    }
}

/// `store`, `category:beauty`, `product:P3`.
impl fmt::Display for CouponScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CouponScope::Store => f.write_str("store"),
            CouponScope::Category(c) => write!(f, "category:{c}"),
            CouponScope::Product(p) => write!(f, "product:{p}"),
        }
    }
}

impl FromStr for CouponScope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().split_once(':') {
            None if s.trim() == "store" => Ok(CouponScope::Store),
            Some(("category", c)) => c.parse().map(CouponScope::Category),
            Some(("product", p)) if !p.trim().is_empty() => {
                Ok(CouponScope::Product(p.trim().to_string()))
            }
            _ => Err(format!(
                "bad coupon scope \"{s}\" (expected store, category:<name> or product:<id>)"
            )),
        }
    }
}

impl Serialize for CouponScope {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CouponScope {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// A fixed-amount coupon: spend at least `threshold`, get `amount` off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coupon {
    /// `C1`..
    pub id: String,
    pub scope: CouponScope,
    pub threshold: Money,
    pub amount: Money,
    /// How many are left to claim; 0 = used up.
    pub remaining: u32,
    /// ISO 8601; the coupon is void at and after this time.
    pub expires_at: String,
}

impl Coupon {
    /// Not used up and not expired at `now` (ignores scope and threshold).
    pub fn usable_at(&self, now: Timestamp) -> bool {
        self.remaining > 0 && Timestamp::parse(&self.expires_at).is_some_and(|t| t > now)
    }
}

/// A percentage-off sale on one product for a time window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlashSale {
    pub product: String,
    pub discount_pct: u32,
    pub starts_at: String,
    pub ends_at: String,
}

impl FlashSale {
    /// Running at `now`: started at or before it, ending after it.
    pub fn active_at(&self, now: Timestamp) -> bool {
        matches!(
            (Timestamp::parse(&self.starts_at), Timestamp::parse(&self.ends_at)),
            (Some(s), Some(e)) if s <= now && now < e
        )
    }
}

/// A pinned product link, recorded by the `pin` operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    pub product: String,
    pub link: u32,
    pub pinned_at: String,
}

/// One FAQ answer; `product` is `None` for store-wide entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaqEntry {
    pub topic: String,
    pub product: Option<String>,
    pub answer: String,
}

/// Everything static about one stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    pub stream: StreamInfo,
    pub products: Vec<Product>,
    pub regions: Vec<Region>,
    /// One rate per (product, region), product-major.
    pub shipping: Vec<ShippingRate>,
    pub coupons: Vec<Coupon>,
    /// Flash sales scheduled before the stream (operator sales are live state).
    pub flash_sales: Vec<FlashSale>,
    pub faq: Vec<FaqEntry>,
}

impl Catalog {
    /// The product with this id, ignoring case and surrounding spaces.
    pub fn product(&self, id: &str) -> Option<&Product> {
        let id = id.trim();
        self.products.iter().find(|p| p.id.eq_ignore_ascii_case(id))
    }

    /// The product viewers reach by tapping `link`.
    pub fn product_by_link(&self, link: u32) -> Option<&Product> {
        self.products.iter().find(|p| p.link == link)
    }

    /// The stream's `now`. Validated catalogs always parse; a bad one reads as the epoch.
    pub fn now(&self) -> Timestamp {
        Timestamp::parse(&self.stream.now).unwrap_or(Timestamp::local(1970, 1, 1, 8, 0))
    }

    /// Categories present, in [`Category::ALL`] order.
    pub fn categories(&self) -> Vec<Category> {
        Category::ALL
            .into_iter()
            .filter(|c| self.products.iter().any(|p| p.category == *c))
            .collect()
    }

    /// Coupons not used up and not expired now.
    pub fn usable_coupons(&self) -> impl Iterator<Item = &Coupon> {
        let now = self.now();
        self.coupons.iter().filter(move |c| c.usable_at(now))
    }

    /// Coupons usable now on `product` (scope, quantity left, expiry; not threshold).
    pub fn coupons_for<'a>(&'a self, product: &'a Product) -> impl Iterator<Item = &'a Coupon> {
        self.usable_coupons()
            .filter(move |c| c.scope.covers(product))
    }

    /// Scheduled flash sales running now.
    pub fn active_flash_sales(&self) -> impl Iterator<Item = &FlashSale> {
        let now = self.now();
        self.flash_sales.iter().filter(move |f| f.active_at(now))
    }

    pub fn shipping_rate(&self, product: &str, region: &str) -> Option<&ShippingRate> {
        self.shipping
            .iter()
            .find(|s| s.product == product && s.region == region)
    }

    /// The FAQ entry for a topic, preferring the product's own entry over the store-wide one.
    pub fn faq_entry(&self, topic: &str, product: Option<&str>) -> Option<&FaqEntry> {
        product
            .and_then(|p| {
                self.faq
                    .iter()
                    .find(|f| f.topic == topic && f.product.as_deref() == Some(p))
            })
            .or_else(|| {
                self.faq
                    .iter()
                    .find(|f| f.topic == topic && f.product.is_none())
            })
    }

    /// Checks the references and values a world relies on; the error names the offending row.
    pub fn validate(&self) -> Result<(), String> {
        if self.products.is_empty() {
            return Err("there are no products".into());
        }
        for field in [
            ("stream.started_at", &self.stream.started_at),
            ("stream.now", &self.stream.now),
        ] {
            if Timestamp::parse(field.1).is_none() {
                return Err(format!(
                    "{} \"{}\" is not an ISO 8601 time",
                    field.0, field.1
                ));
            }
        }
        let mut ids = std::collections::HashSet::new();
        let mut links = std::collections::HashSet::new();
        for p in &self.products {
            if p.id.trim().is_empty() || p.id.trim() != p.id {
                return Err(format!("product id \"{}\" is blank or padded", p.id));
            }
            if !ids.insert(p.id.to_ascii_uppercase()) {
                return Err(format!("product id {} appears twice", p.id));
            }
            if !links.insert(p.link) {
                return Err(format!("link number {} is used by two products", p.link));
            }
            if p.variants.is_empty() {
                return Err(format!("product {} has no variants", p.id));
            }
            if !self.regions.iter().any(|r| r.name == p.warehouse) {
                return Err(format!(
                    "product {} ships from unknown region \"{}\"",
                    p.id, p.warehouse
                ));
            }
            for r in &self.regions {
                if self.shipping_rate(&p.id, &r.name).is_none() {
                    return Err(format!(
                        "product {} has no shipping rate to {}",
                        p.id, r.name
                    ));
                }
            }
        }
        for s in &self.shipping {
            if s.days_min > s.days_max {
                return Err(format!(
                    "shipping {} to {} has days_min > days_max",
                    s.product, s.region
                ));
            }
        }
        for c in &self.coupons {
            if let CouponScope::Product(p) = &c.scope {
                if self.product(p).is_none() {
                    return Err(format!("coupon {} is for unknown product {p}", c.id));
                }
            }
            if Timestamp::parse(&c.expires_at).is_none() {
                return Err(format!(
                    "coupon {} expires_at \"{}\" is not an ISO 8601 time",
                    c.id, c.expires_at
                ));
            }
        }
        for f in &self.flash_sales {
            if self.product(&f.product).is_none() {
                return Err(format!("flash sale for unknown product {}", f.product));
            }
            if !(1..=99).contains(&f.discount_pct) {
                return Err(format!(
                    "flash sale on {} has discount {}%",
                    f.product, f.discount_pct
                ));
            }
            if Timestamp::parse(&f.starts_at).is_none() || Timestamp::parse(&f.ends_at).is_none() {
                return Err(format!(
                    "flash sale on {} has a bad start or end time",
                    f.product
                ));
            }
        }
        for e in &self.faq {
            if !FAQ_TOPICS.contains(&e.topic.as_str()) {
                return Err(format!(
                    "FAQ topic \"{}\" is not one of {}",
                    e.topic,
                    FAQ_TOPICS.join(", ")
                ));
            }
            if let Some(p) = &e.product {
                if self.product(p).is_none() {
                    return Err(format!("FAQ entry {} is for unknown product {p}", e.topic));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_text_round_trips() {
        for s in [
            CouponScope::Store,
            CouponScope::Category(Category::Beauty),
            CouponScope::Product("P3".into()),
        ] {
            assert_eq!(s.to_string().parse::<CouponScope>().unwrap(), s);
        }
        assert!("category:toys".parse::<CouponScope>().is_err());
        assert!("product:".parse::<CouponScope>().is_err());
    }

    #[test]
    fn category_parse_is_case_insensitive() {
        assert_eq!(" Shoes ".parse::<Category>().unwrap(), Category::Shoes);
        assert!("toys".parse::<Category>().unwrap_err().contains("apparel"));
    }
}
