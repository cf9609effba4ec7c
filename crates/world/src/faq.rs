//! FAQ answers computed from the catalog.
//!
//! Answers are written from the data (return windows, warehouses, shipping
//! rates, warranties, sizes, materials) rather than canned, so an answer never
//! contradicts what the `product` or `shipping` operations say, and an
//! operator who edits a product's data and regenerates FAQ text gets a
//! consistent store.

use crate::catalog::{Category, FaqEntry, Product, Region, ShippingRate};
use crate::money::Money;

fn entry(topic: &str, product: Option<&str>, answer: String) -> FaqEntry {
    FaqEntry {
        topic: topic.to_string(),
        product: product.map(str::to_string),
        answer,
    }
}

/// Per-product entries: returns for every product, warranty for electronics,
/// sizing for apparel/shoes, care for apparel/home, usage for beauty/electronics.
/// `tip` is the kind's care text, usage text or shoe fit note.
pub(crate) fn product_entries(p: &Product, tip: &str) -> Vec<FaqEntry> {
    let id = Some(p.id.as_str());
    let name = format!("{} {}", p.id, p.title);
    let mut out = Vec::new();

    let returns = match p.return_note.as_deref() {
        Some(note) => format!(
            "{name} can be returned within {} days of delivery only if unopened and sealed; it is {note}.",
            p.return_days
        ),
        None => format!(
            "{name} can be returned within {} days of delivery for any reason, unused and with tags or packaging.",
            p.return_days
        ),
    };
    out.push(entry("returns", id, returns));

    if let Some(months) = p.warranty_months {
        out.push(entry(
            "warranty",
            id,
            format!(
                "{name} has a {months}-month manufacturer warranty covering defects (not drops or water damage beyond its rating); \
                 contact customer service with your order number for a free repair or replacement."
            ),
        ));
    }

    match p.category {
        Category::Apparel => {
            let fit = p.spec("fit").unwrap_or("regular");
            out.push(entry(
                "sizing",
                id,
                format!(
                    "{name} comes in {} with a {fit} fit. By height: S 155-165 cm, M 165-172 cm, L 172-180 cm, XL 180-188 cm; \
                     between sizes, take the larger one.",
                    p.sizes().join(", ")
                ),
            ));
        }
        Category::Shoes => {
            let sizes = p.sizes();
            let range = match (sizes.first(), sizes.last()) {
                (Some(a), Some(b)) if a != b => format!("EU sizes {a}-{b}"),
                (Some(a), _) => format!("EU size {a}"),
                _ => "one size".to_string(),
            };
            out.push(entry(
                "sizing",
                id,
                format!("{name} comes in {range} and {tip}. Size 36 fits a 23 cm foot; each size up adds 0.5 cm."),
            ));
        }
        _ => {}
    }

    if matches!(p.category, Category::Apparel | Category::Home) {
        let material = p
            .spec("material")
            .map(|m| format!(" ({m})"))
            .unwrap_or_default();
        out.push(entry("care", id, format!("{name}{material}: {tip}")));
    }
    if matches!(p.category, Category::Beauty | Category::Electronics) {
        let battery = p
            .spec("battery")
            .map(|b| format!(" Battery: {b}."))
            .unwrap_or_default();
        out.push(entry("usage", id, format!("{name}: {tip}{battery}")));
    }
    out
}

/// Store-wide entries, in [`STORE_FAQ_TOPICS`](crate::STORE_FAQ_TOPICS) order.
pub(crate) fn store_entries(
    products: &[Product],
    regions: &[Region],
    shipping: &[ShippingRate],
    installment_from: Money,
) -> Vec<FaqEntry> {
    let mut out = Vec::new();

    let min_days = products.iter().map(|p| p.return_days).min().unwrap_or(7);
    let max_days = products.iter().map(|p| p.return_days).max().unwrap_or(7);
    let window = if min_days == max_days {
        format!("{min_days} days")
    } else {
        format!("{min_days} to {max_days} days")
    };
    let sealed: Vec<&str> = products
        .iter()
        .filter(|p| p.return_note.is_some())
        .map(|p| p.id.as_str())
        .collect();
    let sealed_text = if sealed.is_empty() {
        String::new()
    } else {
        format!(
            " Food and opened beauty items ({}) are not returnable once opened.",
            sealed.join(", ")
        )
    };
    out.push(entry(
        "returns",
        None,
        format!(
            "Returns are accepted within {window} of delivery depending on the item (ask about a product for its window); \
             items must be unused with tags.{sealed_text} Refunds reach your original payment method within 3 working days."
        ),
    ));

    let mut warehouses: Vec<&str> = Vec::new();
    for p in products {
        if !warehouses.contains(&p.warehouse.as_str()) {
            warehouses.push(&p.warehouse);
        }
    }
    let free: Vec<&ShippingRate> = shipping.iter().filter(|s| s.cost == Money::ZERO).collect();
    let fmin = free.iter().map(|s| s.days_min).min().unwrap_or(1);
    let fmax = free.iter().map(|s| s.days_max).max().unwrap_or(5);
    let paid: Vec<String> = regions
        .iter()
        .filter_map(|r| {
            let rates: Vec<&ShippingRate> = shipping
                .iter()
                .filter(|s| s.region == r.name && s.cost > Money::ZERO)
                .collect();
            let lo = rates.iter().map(|s| s.cost).min()?;
            let hi = rates.iter().map(|s| s.cost).max()?;
            let dmax = rates.iter().map(|s| s.days_max).max()?;
            let cost = if lo == hi {
                format!("¥{lo}")
            } else {
                format!("¥{lo}-{hi}")
            };
            Some(format!("{} {cost}, up to {dmax} days", r.name))
        })
        .collect();
    let paid_text = if paid.is_empty() {
        String::new()
    } else {
        format!(" Paid delivery: {}.", paid.join("; "))
    };
    out.push(entry(
        "shipping",
        None,
        format!(
            "Orders ship within 48 hours from our warehouses in {}. Delivery is free to most regions and takes {fmin}-{fmax} days.{paid_text} \
             Ask about a product and your region for exact times.",
            warehouses.join(", ")
        ),
    ));

    let covered: Vec<String> = products
        .iter()
        .filter_map(|p| p.warranty_months.map(|m| format!("{} {m} months", p.id)))
        .collect();
    let warranty = if covered.is_empty() {
        "No product in this stream carries a manufacturer warranty; every item is covered by its return window and by free replacement if it arrives damaged.".to_string()
    } else {
        format!(
            "Electronics carry a manufacturer warranty ({}) covering defects, not accidental damage; other items are covered by their return window \
             and by free replacement if they arrive damaged.",
            covered.join(", ")
        )
    };
    out.push(entry("warranty", None, warranty));

    let mut brands: Vec<&str> = Vec::new();
    for p in products {
        if !brands.contains(&p.brand.as_str()) {
            brands.push(&p.brand);
        }
    }
    out.push(entry(
        "authenticity",
        None,
        format!(
            "Every item is 100% genuine and ships directly from the brand's authorised warehouse ({}). \
             If anything is proven counterfeit we refund three times the price.",
            brands.join(", ")
        ),
    ));

    out.push(entry(
        "payment",
        None,
        format!(
            "We accept Alipay, WeChat Pay and UnionPay cards. Huabei instalments over 3, 6 or 12 months are available on orders of ¥{installment_from} or more, \
             interest-free over 3 months. Coupons are applied at checkout."
        ),
    ));
    out
}
