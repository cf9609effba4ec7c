//! The seeded catalog generator.
//!
//! Every random choice is drawn, in a fixed order, from one `ChaCha8Rng`
//! seeded with the stream's seed, so the same seed gives a byte-identical
//! catalog on every platform. The generator aims for variety that matters to
//! tasks: link numbers that never equal the product number, sold-out
//! variants, coupons that are used up or expired, sales that are running or
//! scheduled, remote regions that cost more.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::catalog::{
    Catalog, Category, Coupon, CouponScope, FaqEntry, FlashSale, Product, Region, ShippingRate,
    Spec, StreamInfo, Variant,
};
use crate::faq;
use crate::money::Money;
use crate::names::{self, Kind, VariantStyle, Zone};
use crate::time::Timestamp;

const CLOTHING_SIZES: [&str; 4] = ["S", "M", "L", "XL"];
/// The note a product carries when opening it voids the return.
pub const NOT_RETURNABLE_OPENED: &str = "not returnable once opened";

impl Catalog {
    /// Generates the catalog of stream `S-<seed>`. Deterministic in `seed`.
    pub fn generate(seed: u64) -> Catalog {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let stream = stream_info(seed, &mut rng);
        let now = Timestamp::parse(&stream.now).expect("generated times are well formed");

        let n: usize = rng.gen_range(8..=12);
        let picks = pick_kinds(n, &mut rng);
        let mut links: Vec<u32> = (1..=n as u32).collect();
        // Sattolo's shuffle makes one n-cycle, so no product's link equals its number.
        for i in (1..n).rev() {
            let j = rng.gen_range(0..i);
            links.swap(i, j);
        }

        let mut products = Vec::with_capacity(n);
        let mut product_faq: Vec<FaqEntry> = Vec::new();
        for (i, (category, kind)) in picks.into_iter().enumerate() {
            let p = product(format!("P{}", i + 1), links[i], category, kind, &mut rng);
            product_faq.extend(faq::product_entries(&p, kind.tip));
            products.push(p);
        }
        ensure_some_sold_out(&mut products, &mut rng);

        let regions: Vec<Region> = names::REGIONS
            .iter()
            .map(|(name, zh, _, zone)| Region {
                name: name.to_string(),
                name_zh: zh.to_string(),
                remote: matches!(zone, Zone::Remote | Zone::HongKong),
            })
            .collect();
        let shipping = shipping(&products, &regions, &mut rng);
        let coupons = coupons(&products, now, &mut rng);
        let flash_sales = flash_sales(&products, now, &mut rng);
        let installment_from = Money::units(*[199, 299, 499].choose(&mut rng).unwrap_or(&299));

        let mut faq = faq::store_entries(&products, &regions, &shipping, installment_from);
        faq.extend(product_faq);

        Catalog {
            stream,
            products,
            regions,
            shipping,
            coupons,
            flash_sales,
            faq,
        }
    }
}

fn stream_info(seed: u64, rng: &mut ChaCha8Rng) -> StreamInfo {
    // A fixed base date plus a seed-derived day: no wall clock anywhere.
    let day = rng.gen_range(0..365i64);
    let hour = *[19u32, 20, 21].choose(rng).unwrap_or(&20);
    let minute = *[0u32, 30].choose(rng).unwrap_or(&0);
    let start = Timestamp::local(2025, 1, 1, hour, minute).plus_minutes(day * 24 * 60);
    let now = start.plus_minutes(rng.gen_range(15..=150));
    let host = names::HOSTS.choose(rng).unwrap_or(&"Lily");
    let title = names::STREAM_TITLES.choose(rng).unwrap_or(&"Live Deals");
    StreamInfo {
        id: format!("S-{seed}"),
        title: format!("{title} with {host}"),
        host: host.to_string(),
        started_at: start.to_string(),
        now: now.to_string(),
        currency: "CNY".into(),
        currency_symbol: "¥".into(),
    }
}

/// Chooses `n` distinct (category, kind) pairs covering at least five categories.
fn pick_kinds(n: usize, rng: &mut ChaCha8Rng) -> Vec<(Category, &'static Kind)> {
    let mut cats = Category::ALL.to_vec();
    cats.shuffle(rng);
    cats.truncate(rng.gen_range(5..=7).min(n));
    // Remaining unused kinds per chosen category.
    let mut pools: Vec<Vec<&'static Kind>> = cats
        .iter()
        .map(|c| names::kinds(*c).iter().collect())
        .collect();
    let mut out = Vec::with_capacity(n);
    for slot in 0..n {
        let ci = if slot < cats.len() {
            slot
        } else {
            let open: Vec<usize> = (0..cats.len()).filter(|&i| !pools[i].is_empty()).collect();
            *open.choose(rng).unwrap_or(&0)
        };
        let pool = &mut pools[ci];
        let k = pool.remove(rng.gen_range(0..pool.len()));
        out.push((cats[ci], k));
    }
    out.shuffle(rng);
    out
}

/// Rounds up to a retail-looking whole price ending in 9 (159, 199, 69).
fn retail_round_up(cents: i64) -> Money {
    let units = (cents + 99) / 100;
    Money::units(units + (9 - units % 10).rem_euclid(10))
}

fn stock(rng: &mut ChaCha8Rng) -> u32 {
    match rng.gen_range(0..100) {
        0..=11 => 0,
        12..=29 => rng.gen_range(1..=9),
        _ => rng.gen_range(10..=300),
    }
}

fn some_colors(list: &[&str], rng: &mut ChaCha8Rng) -> Vec<String> {
    let hi = list.len().min(4);
    let k = if hi <= 2 { hi } else { rng.gen_range(2..=hi) };
    list.choose_multiple(rng, k)
        .map(|c| c.to_string())
        .collect()
}

fn variants(style: VariantStyle, rng: &mut ChaCha8Rng) -> Vec<Variant> {
    let grid = |sizes: Vec<String>, colors: Vec<String>, rng: &mut ChaCha8Rng| {
        let mut out = Vec::new();
        for c in &colors {
            for s in &sizes {
                out.push(Variant {
                    size: Some(s.clone()),
                    color: c.clone(),
                    stock: stock(rng),
                });
            }
        }
        out
    };
    match style {
        VariantStyle::Clothing(colors) => {
            let colors = some_colors(colors, rng);
            grid(CLOTHING_SIZES.map(String::from).to_vec(), colors, rng)
        }
        VariantStyle::Shoes(colors) => {
            let first = rng.gen_range(36..=39);
            let last = rng.gen_range(first + 4..=44);
            let colors = some_colors(colors, rng);
            grid(
                (first..=last).map(|s: u32| s.to_string()).collect(),
                colors,
                rng,
            )
        }
        VariantStyle::Colors(colors) => some_colors(colors, rng)
            .into_iter()
            .map(|color| Variant {
                size: None,
                color,
                stock: stock(rng),
            })
            .collect(),
        VariantStyle::Standard => vec![Variant {
            size: None,
            color: "standard".into(),
            stock: stock(rng),
        }],
    }
}

fn product(
    id: String,
    link: u32,
    category: Category,
    kind: &Kind,
    rng: &mut ChaCha8Rng,
) -> Product {
    let (word, word_zh) = *names::title_words(category)
        .choose(rng)
        .unwrap_or(&("Daily", "日常"));
    let brand = names::brands(category)
        .choose(rng)
        .unwrap_or(&"Hat")
        .to_string();
    let price = Money::from_cents(*kind.prices.choose(rng).unwrap_or(&9900));
    let markup = *[100i64, 100, 120, 130, 150, 200]
        .choose(rng)
        .unwrap_or(&100);
    let list_price = if markup == 100 {
        price
    } else {
        retail_round_up(price.cents() * markup / 100)
    };
    let cost_pct = rng.gen_range(35..=60);
    let cost_price = Money::from_cents((price.cents() * cost_pct / 100 + 5) / 10 * 10);
    let specs = kind
        .specs
        .iter()
        .map(|(key, values)| Spec {
            key: key.to_string(),
            value: values.choose(rng).unwrap_or(&"").to_string(),
        })
        .collect();
    let mut keywords: Vec<String> = kind.keywords.iter().map(|k| k.to_string()).collect();
    if !keywords.iter().any(|k| k == category.as_str()) {
        keywords.push(category.as_str().to_string());
    }
    let variants = variants(kind.variants, rng);
    let return_days = *match category {
        Category::Snacks => &[7u32][..],
        Category::Beauty | Category::Electronics => &[7, 15],
        _ => &[7, 15, 30],
    }
    .choose(rng)
    .unwrap_or(&7);
    let return_note = match category {
        Category::Snacks => Some(NOT_RETURNABLE_OPENED.to_string()),
        Category::Beauty if rng.gen_bool(0.6) => Some(NOT_RETURNABLE_OPENED.to_string()),
        _ => None,
    };
    let warranty_months =
        (category == Category::Electronics).then(|| *[12u32, 24].choose(rng).unwrap_or(&12));
    let warehouse = names::WAREHOUSES
        .choose(rng)
        .unwrap_or(&"Guangdong")
        .to_string();
    let title = format!("{word} {}", kind.noun);
    let description = format!("{brand}'s {title} is {}.", kind.pitch);
    Product {
        id,
        link,
        title,
        title_zh: format!("{word_zh}{}", kind.noun_zh),
        brand,
        category,
        price,
        list_price,
        cost_price,
        specs,
        keywords,
        variants,
        return_days,
        return_note,
        warranty_months,
        warehouse,
        description,
    }
}

/// Guarantees at least one sold-out variant per stream, so stock questions
/// with the answer "none left" always exist.
fn ensure_some_sold_out(products: &mut [Product], rng: &mut ChaCha8Rng) {
    if products
        .iter()
        .flat_map(|p| &p.variants)
        .any(|v| v.stock == 0)
    {
        return;
    }
    let multi: Vec<usize> = (0..products.len())
        .filter(|&i| products[i].variants.len() > 1)
        .collect();
    if let Some(&i) = multi.choose(rng) {
        let j = rng.gen_range(0..products[i].variants.len());
        products[i].variants[j].stock = 0;
    }
}

/// How far apart two zones are, 1 (same zone) to 3 (opposite ends).
fn distance(a: Zone, b: Zone) -> usize {
    use Zone::*;
    if a == b {
        return 1;
    }
    match (a, b) {
        (East, Central) | (Central, East) | (West, Central) | (Central, West) => 1,
        (North, East) | (East, North) | (North, Central) | (Central, North) => 2,
        (East, South)
        | (South, East)
        | (South, West)
        | (West, South)
        | (South, Central)
        | (Central, South) => 2,
        _ => 3,
    }
}

fn shipping(products: &[Product], regions: &[Region], rng: &mut ChaCha8Rng) -> Vec<ShippingRate> {
    let mut out = Vec::with_capacity(products.len() * regions.len());
    for p in products {
        let from = names::zone_of(&p.warehouse).unwrap_or(Zone::East);
        for r in regions {
            let to = names::zone_of(&r.name).unwrap_or(Zone::East);
            let (mut lo, mut hi, cost) = match to {
                Zone::Remote => {
                    let (lo, hi) = if from == Zone::West { (4, 7) } else { (5, 8) };
                    (
                        lo,
                        hi,
                        Money::units(*[10, 15, 20].choose(rng).unwrap_or(&15)),
                    )
                }
                Zone::HongKong => {
                    let (lo, hi) = if from == Zone::South { (2, 4) } else { (3, 6) };
                    (
                        lo,
                        hi,
                        Money::units(*[12, 15, 18].choose(rng).unwrap_or(&15)),
                    )
                }
                _ if r.name == p.warehouse => (1, 2, Money::ZERO),
                _ => {
                    let (lo, hi) = [(1, 2), (1, 3), (2, 4), (3, 5)][distance(from, to)];
                    (lo, hi, Money::ZERO)
                }
            };
            // Bulky or fragile goods take a little longer on some routes.
            if r.name != p.warehouse && rng.gen_bool(0.2) {
                lo += 1;
                hi += 1;
            }
            out.push(ShippingRate {
                product: p.id.clone(),
                region: r.name.clone(),
                days_min: lo,
                days_max: hi,
                cost,
            });
        }
    }
    out
}

fn coupons(products: &[Product], now: Timestamp, rng: &mut ChaCha8Rng) -> Vec<Coupon> {
    let count = rng.gen_range(4..=8usize);
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        // The first three cover every scope; the rest are mixed.
        let kind = if i < 3 { i } else { rng.gen_range(0..3) };
        let (scope, threshold, amount) = match kind {
            0 => {
                let (t, a) = *[
                    (99, 10),
                    (199, 20),
                    (199, 30),
                    (299, 30),
                    (299, 50),
                    (499, 50),
                    (499, 80),
                ]
                .choose(rng)
                .unwrap_or(&(199, 20));
                (CouponScope::Store, Money::units(t), Money::units(a))
            }
            1 => {
                let p = products.choose(rng).expect("a stream has products");
                let (t, a) = *[(0, 5), (99, 10), (149, 15), (199, 25)]
                    .choose(rng)
                    .unwrap_or(&(99, 10));
                (
                    CouponScope::Category(p.category),
                    Money::units(t),
                    Money::units(a),
                )
            }
            _ => {
                let p = products.choose(rng).expect("a stream has products");
                let units = p.price.cents() / 100;
                let threshold = match rng.gen_range(0..3) {
                    0 => 0,
                    1 => units,
                    _ => units * 2,
                };
                let pct = *[5i64, 10, 15].choose(rng).unwrap_or(&10);
                let amount = (units * pct / 100).max(1);
                (
                    CouponScope::Product(p.id.clone()),
                    Money::units(threshold),
                    Money::units(amount),
                )
            }
        };
        let remaining = if rng.gen_bool(0.15) {
            0
        } else {
            rng.gen_range(5..=500)
        };
        let expires = if rng.gen_bool(0.2) {
            now.plus_minutes(-rng.gen_range(10..=2880))
        } else {
            now.plus_minutes(rng.gen_range(30..=4320))
        };
        out.push(Coupon {
            id: String::new(),
            scope,
            threshold,
            amount,
            remaining,
            expires_at: expires.to_string(),
        });
    }
    // The store-wide coupon stays usable so every product has at least one
    // coupon; one other is forced expired and one used up when chance gave none.
    out[0].remaining = out[0].remaining.max(50);
    if Timestamp::parse(&out[0].expires_at).is_none_or(|t| t <= now) {
        out[0].expires_at = now.plus_minutes(24 * 60).to_string();
    }
    if !out[1..]
        .iter()
        .any(|c| Timestamp::parse(&c.expires_at).is_some_and(|t| t <= now))
    {
        let i = rng.gen_range(1..count);
        out[i].expires_at = now.plus_minutes(-rng.gen_range(10..=2880)).to_string();
    }
    if !out[1..].iter().any(|c| c.remaining == 0) {
        let i = rng.gen_range(1..count);
        out[i].remaining = 0;
    }
    out.shuffle(rng);
    for (i, c) in out.iter_mut().enumerate() {
        c.id = format!("C{}", i + 1);
    }
    out
}

fn flash_sales(products: &[Product], now: Timestamp, rng: &mut ChaCha8Rng) -> Vec<FlashSale> {
    let count = rng.gen_range(0..=2usize);
    let chosen: Vec<&Product> = products.choose_multiple(rng, count).collect();
    let mut out = Vec::with_capacity(count);
    for (i, p) in chosen.into_iter().enumerate() {
        let discount_pct = *[10u32, 15, 20, 30, 50].choose(rng).unwrap_or(&10);
        let (start, end) = if i == 0 && rng.gen_bool(0.6) {
            // Running now.
            (
                now.plus_minutes(-rng.gen_range(5..=20)),
                now.plus_minutes(rng.gen_range(10..=40)),
            )
        } else if rng.gen_bool(0.5) {
            let s = now.plus_minutes(rng.gen_range(20..=60));
            (s, s.plus_minutes(rng.gen_range(15..=30)))
        } else {
            // Already over.
            let e = now.plus_minutes(-rng.gen_range(5..=40));
            (e.plus_minutes(-rng.gen_range(15..=30)), e)
        };
        out.push(FlashSale {
            product: p.id.clone(),
            discount_pct,
            starts_at: start.to_string(),
            ends_at: end.to_string(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn same_seed_same_catalog_and_seeds_differ() {
        let a = serde_json::to_string(&Catalog::generate(11)).unwrap();
        let b = serde_json::to_string(&Catalog::generate(11)).unwrap();
        let c = serde_json::to_string(&Catalog::generate(12)).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn generated_catalogs_have_the_promised_shape() {
        for seed in 0..50 {
            let cat = Catalog::generate(seed);
            cat.validate()
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            let n = cat.products.len();
            assert!((8..=12).contains(&n), "seed {seed}");
            assert!(cat.categories().len() >= 5, "seed {seed}");
            for (i, p) in cat.products.iter().enumerate() {
                assert_eq!(p.id, format!("P{}", i + 1));
                assert_ne!(p.link as usize, i + 1, "seed {seed}: link equals id");
                assert!(p.list_price >= p.price && p.cost_price < p.price);
                assert!([7, 15, 30].contains(&p.return_days));
                assert_eq!(
                    p.warranty_months.is_some(),
                    p.category == Category::Electronics
                );
                if matches!(p.category, Category::Apparel | Category::Shoes) {
                    assert_eq!(p.specs[0].key, "material");
                    assert!(p.sizes().len() >= 4 && (2..=4).contains(&p.colors().len()));
                }
            }
            let links: BTreeSet<u32> = cat.products.iter().map(|p| p.link).collect();
            assert_eq!(links, (1..=n as u32).collect());
            assert!((4..=8).contains(&cat.coupons.len()));
            assert!(cat.coupons.iter().any(|c| c.remaining == 0));
            let now = cat.now();
            assert!(cat
                .coupons
                .iter()
                .any(|c| Timestamp::parse(&c.expires_at).unwrap() <= now));
            assert!(cat
                .coupons
                .iter()
                .any(|c| c.usable_at(now) && c.scope == CouponScope::Store));
            assert!(cat.flash_sales.len() <= 2);
            assert!(
                cat.products
                    .iter()
                    .flat_map(|p| &p.variants)
                    .any(|v| v.stock == 0),
                "seed {seed}"
            );
            assert!(cat.regions.len() >= 8);
            assert_eq!(cat.shipping.len(), n * cat.regions.len());
        }
    }

    #[test]
    fn every_category_appears_over_fifty_seeds() {
        let seen: BTreeSet<Category> = (0..50)
            .flat_map(|s| Catalog::generate(s).categories())
            .collect();
        assert_eq!(seen.len(), Category::ALL.len());
    }

    #[test]
    fn remote_regions_are_slower_and_paid() {
        let cat = Catalog::generate(3);
        for s in &cat.shipping {
            let region = cat.regions.iter().find(|r| r.name == s.region).unwrap();
            assert_eq!(
                region.remote,
                s.cost > Money::ZERO,
                "{} to {}",
                s.product,
                s.region
            );
        }
    }

    #[test]
    fn retail_rounding() {
        assert_eq!(retail_round_up(15480), Money::units(159));
        assert_eq!(retail_round_up(19900), Money::units(199));
        assert_eq!(retail_round_up(5985), Money::units(69));
    }
}
