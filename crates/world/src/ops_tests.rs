//! Tests of the canonical operations: every op on every product, the error
//! texts a model sees, coupon choice, search and a no-panic property.

use hat_harness::Op;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

use crate::catalog::{Catalog, CouponScope, FAQ_TOPICS, STORE_FAQ_TOPICS};
use crate::error::{OpError, WorldError};
use crate::money::Money;
use crate::time::Timestamp;
use crate::World;

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().expect("test args are an object")
}

fn call(w: &World, op: Op, v: Value) -> Result<Value, OpError> {
    w.call(op, &args(v))
}

fn err(w: &World, op: Op, v: Value) -> String {
    call(w, op, v).expect_err("expected an OpError").to_string()
}

#[test]
fn every_op_answers_every_product() {
    for seed in 0..4 {
        let w = World::generate(seed).unwrap();
        let cat = w.catalog().clone();
        w.begin_episode().unwrap();
        for p in &cat.products {
            let id = p.id.as_str();
            let v = call(&w, Op::Product, json!({"product": id})).unwrap();
            assert_eq!(v["id"], id);
            assert_eq!(v["link"], p.link);
            assert_eq!(v["specs"].as_object().unwrap().len(), p.specs.len());
            let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(
                &keys[..6],
                ["id", "title", "title_zh", "brand", "category", "price"]
            );

            let all = call(&w, Op::Stock, json!({"product": id})).unwrap();
            assert_eq!(all["stock"], p.total_stock());
            let v0 = &p.variants[0];
            let one = call(
                &w,
                Op::Stock,
                json!({"product": id, "size": v0.size, "color": v0.color.to_uppercase()}),
            )
            .unwrap();
            assert_eq!(one["stock"], v0.stock);
            assert_eq!(one["color"], v0.color.as_str());

            let coupons = call(&w, Op::Coupons, json!({"product": id})).unwrap();
            for c in coupons["coupons"].as_array().unwrap() {
                assert!(c["remaining"].as_u64().unwrap() > 0);
            }

            for q in [
                json!({"product": id}),
                json!({"product": id, "quantity": 3}),
                json!({"product": id, "quantity": "2"}),
            ] {
                let v = call(&w, Op::Quote, q).unwrap();
                let (sub, disc, fin) = (
                    v["subtotal"].as_f64().unwrap(),
                    v["discount"].as_f64().unwrap(),
                    v["final_price"].as_f64().unwrap(),
                );
                assert!((sub - disc - fin).abs() < 0.001 && fin >= 0.0, "{v}");
            }

            for r in &cat.regions {
                let a = call(&w, Op::Shipping, json!({"product": id, "region": r.name})).unwrap();
                let b = call(
                    &w,
                    Op::Shipping,
                    json!({"product": id, "region": r.name_zh}),
                )
                .unwrap();
                let c = call(
                    &w,
                    Op::Shipping,
                    json!({"product": id.to_lowercase(), "region": r.name.to_uppercase()}),
                )
                .unwrap();
                assert_eq!(a, b);
                assert_eq!(a, c);
                assert_eq!(a["region"], r.name.as_str());
            }

            for t in STORE_FAQ_TOPICS {
                assert!(
                    call(&w, Op::Faq, json!({"topic": t, "product": id})).is_ok(),
                    "{t} for {id}"
                );
            }
            for e in cat.faq.iter().filter(|e| e.product.as_deref() == Some(id)) {
                let v = call(&w, Op::Faq, json!({"topic": e.topic, "product": id})).unwrap();
                assert_eq!(v["answer"], e.answer.as_str());
            }

            let v = call(&w, Op::Pin, json!({"product": id})).unwrap();
            assert_eq!(v["pinned"], id);
            let v = call(&w, Op::FlashSale, json!({"product": id, "minutes": 10})).unwrap();
            assert_eq!(v["discount_pct"], 10);
            assert_eq!(v["sale_price"], p.price.percent_off(10).to_json());
        }
        for t in STORE_FAQ_TOPICS {
            let v = call(&w, Op::Faq, json!({"topic": t})).unwrap();
            assert_eq!(v["product"], Value::Null);
        }
        let all = call(&w, Op::Search, json!({})).unwrap();
        assert_eq!(all["results"].as_array().unwrap().len(), cat.products.len());
        w.end_episode().unwrap();
    }
}

#[test]
fn bad_calls_get_clear_errors() {
    let w = World::generate(5).unwrap();
    let cat = w.catalog();
    let n = cat.products.len();
    assert_eq!(
        err(&w, Op::Product, json!({"product": "P99"})),
        format!("no product \"P99\" in this stream; products are P1..P{n}")
    );
    assert_eq!(
        err(&w, Op::Product, json!({})),
        "missing required argument \"product\" for product"
    );
    assert_eq!(
        err(&w, Op::Product, json!({"product": "  "})),
        "missing required argument \"product\" for product"
    );
    assert!(err(&w, Op::Product, json!({"product": 3})).contains("no product \"3\""));
    assert_eq!(
        err(&w, Op::Quote, json!({"product": "P1", "quantity": "two"})),
        "argument \"quantity\" must be an integer, got \"two\""
    );
    assert!(err(&w, Op::Quote, json!({"product": "P1", "quantity": 0})).contains("1 to 999"));
    assert!(
        err(&w, Op::Quote, json!({"product": "P1", "coupon": "C99"}))
            .starts_with("no coupon \"C99\"")
    );
    assert!(
        err(&w, Op::Shipping, json!({"product": "P1", "region": "Mars"}))
            .contains("Beijing, Shanghai")
    );
    assert!(err(&w, Op::Shipping, json!({"product": "P1"})).contains("\"region\""));
    assert!(err(&w, Op::Faq, json!({"topic": "recipes"})).contains("returns, shipping, warranty"));
    assert!(err(&w, Op::Faq, json!({"topic": "sizing"})).contains("pass a product"));
    assert!(err(&w, Op::Search, json!({"category": "toys"})).contains("apparel, shoes"));
    assert!(err(&w, Op::Search, json!({"max_price": -5})).contains("0 or more"));
    assert!(err(&w, Op::Search, json!({"max_price": [1]})).contains("must be a number"));
    assert!(
        err(&w, Op::FlashSale, json!({"product": "P1", "minutes": 90})).contains("1 to 60 minutes")
    );
    assert!(err(
        &w,
        Op::FlashSale,
        json!({"product": "P1", "minutes": 5, "discount_pct": 95})
    )
    .contains("1 to 90 percent"));
    assert!(err(&w, Op::FlashSale, json!({"product": "P1"})).contains("\"minutes\""));
    assert!(err(&w, Op::Pin, json!({"product": "P1", "link": 3}))
        .contains("takes no argument \"link\""));

    for p in &cat.products {
        let e = err(&w, Op::Stock, json!({"product": p.id, "size": "XXXL"}));
        assert!(
            e.starts_with(&format!("{} has no size \"XXXL\"; ", p.id)),
            "{e}"
        );
        if p.sizes().is_empty() {
            assert!(e.contains("one size"));
        } else {
            assert!(e.contains(&p.sizes().join(", ")));
        }
        let e = err(&w, Op::Stock, json!({"product": p.id, "color": "plaid"}));
        assert!(e.contains(&p.colors().join(", ")), "{e}");
        let sized = p.sizes();
        if let Some(s) = sized.first() {
            let got = call(
                &w,
                Op::Stock,
                json!({"product": p.id, "size": s.to_lowercase()}),
            )
            .unwrap();
            assert_eq!(got["size"], *s);
        }
        let no_topic = ["sizing", "care", "usage"].into_iter().find(|t| {
            !cat.faq
                .iter()
                .any(|e| e.topic == *t && e.product.as_deref() == Some(p.id.as_str()))
        });
        if let Some(t) = no_topic {
            let e = err(&w, Op::Faq, json!({"topic": t, "product": p.id}));
            assert!(e.contains(&format!("for {} ({})", p.id, p.category)), "{e}");
        }
    }
}

#[test]
fn shoe_sizes_accept_numbers() {
    let w = (0..50)
        .map(|s| World::generate(s).unwrap())
        .find(|w| {
            w.catalog()
                .products
                .iter()
                .any(|p| p.category == crate::Category::Shoes)
        })
        .unwrap();
    let p = w
        .catalog()
        .products
        .iter()
        .find(|p| p.category == crate::Category::Shoes)
        .unwrap()
        .clone();
    let size: i64 = p.sizes()[0].parse().unwrap();
    for given in [json!(size), json!(size as f64), json!(size.to_string())] {
        let v = call(&w, Op::Stock, json!({"product": p.id, "size": given})).unwrap();
        assert_eq!(v["size"], size.to_string());
    }
}

/// A hand-built coupon set on P1 priced ¥100 with no flash sale.
fn coupon_world() -> World {
    let mut cat = Catalog::generate(1);
    let now = cat.now();
    let later = now.plus_minutes(600).to_string();
    let earlier = now.plus_minutes(-5).to_string();
    cat.flash_sales.clear();
    let p1 = &mut cat.products[0];
    p1.price = Money::units(100);
    p1.list_price = Money::units(129);
    let category = p1.category;
    let other = crate::Category::ALL
        .into_iter()
        .find(|c| *c != category)
        .unwrap();
    let c = |id: &str,
             scope: CouponScope,
             threshold: i64,
             amount: i64,
             remaining: u32,
             expires: &str| crate::Coupon {
        id: id.into(),
        scope,
        threshold: Money::units(threshold),
        amount: Money::units(amount),
        remaining,
        expires_at: expires.into(),
    };
    cat.coupons = vec![
        c("C1", CouponScope::Store, 99, 10, 5, &later),
        c("C2", CouponScope::Category(category), 0, 15, 5, &later),
        c("C3", CouponScope::Product("P1".into()), 200, 40, 5, &later),
        c("C4", CouponScope::Product("P1".into()), 0, 50, 5, &earlier),
        c("C5", CouponScope::Store, 0, 60, 0, &later),
        c("C6", CouponScope::Category(other), 0, 70, 5, &later),
    ];
    World::from_catalog(cat).unwrap()
}

#[test]
fn best_coupon_is_chosen() {
    let w = coupon_world();
    let q = call(&w, Op::Quote, json!({"product": "P1"})).unwrap();
    assert_eq!(
        q,
        json!({"product": "P1", "quantity": 1, "unit_price": 100, "subtotal": 100, "coupon": "C2", "discount": 15, "final_price": 85})
    );
    let q = call(&w, Op::Quote, json!({"product": "P1", "quantity": 2})).unwrap();
    assert_eq!(
        (q["coupon"].as_str(), q["final_price"].as_i64()),
        (Some("C3"), Some(160))
    );
    let q = call(&w, Op::Quote, json!({"product": "p1", "coupon": "c1"})).unwrap();
    assert_eq!(
        (q["coupon"].as_str(), q["discount"].as_i64()),
        (Some("C1"), Some(10))
    );

    let e = |coupon: &str| err(&w, Op::Quote, json!({"product": "P1", "coupon": coupon}));
    assert!(
        e("C3").contains("at least 200 and the subtotal is 100"),
        "{}",
        e("C3")
    );
    assert!(e("C4").contains("expired"));
    assert!(e("C5").contains("used up"));
    assert!(e("C6").starts_with("coupon C6 does not apply to P1: it is only for"));

    let listed = call(&w, Op::Coupons, json!({"product": "P1"})).unwrap();
    let ids: Vec<&str> = listed["coupons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["C1", "C2", "C3"]);
}

#[test]
fn flash_sale_price_flows_into_quotes_within_an_episode() {
    let w = coupon_world();
    let before = call(&w, Op::Quote, json!({"product": "P1"})).unwrap();
    w.begin_episode().unwrap();
    let sale = call(
        &w,
        Op::FlashSale,
        json!({"product": "P1", "minutes": "15", "discount_pct": 20}),
    )
    .unwrap();
    assert_eq!(sale["sale_price"], 80);
    assert_eq!(sale["ends_at"], w.now().plus_minutes(15).to_string());
    let q = call(&w, Op::Quote, json!({"product": "P1"})).unwrap();
    assert_eq!(q["unit_price"], 80);
    // At ¥80 the ¥99 store coupon no longer qualifies; the category one still does.
    assert_eq!(q["coupon"], "C2");
    assert_eq!(w.stream_state().flash_sales.len(), 1);
    w.end_episode().unwrap();
    assert_eq!(
        call(&w, Op::Quote, json!({"product": "P1"})).unwrap(),
        before
    );
    assert!(w.live_flash_sales().unwrap().is_empty());
}

#[test]
fn scheduled_active_sale_applies() {
    let mut cat = Catalog::generate(1);
    let now = cat.now();
    cat.products[1].price = Money::units(200);
    cat.flash_sales = vec![crate::FlashSale {
        product: "P2".into(),
        discount_pct: 30,
        starts_at: now.plus_minutes(-1).to_string(),
        ends_at: now.plus_minutes(1).to_string(),
    }];
    let w = World::from_catalog(cat).unwrap();
    let q = call(&w, Op::Quote, json!({"product": "P2"})).unwrap();
    assert_eq!(q["unit_price"], 140);
}

#[test]
fn search_filters_and_sorts() {
    let w = World::generate(9).unwrap();
    let cat = w.catalog();
    let all = call(&w, Op::Search, json!({"query": "", "category": null})).unwrap();
    let prices: Vec<f64> = all["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["price"].as_f64().unwrap())
        .collect();
    assert!(prices.windows(2).all(|w| w[0] <= w[1]));

    let p = &cat.products[2];
    let cap = call(&w, Op::Search, json!({"max_price": p.price.as_f64()})).unwrap();
    assert!(
        cap["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == p.id.as_str()),
        "max_price is inclusive"
    );
    assert!(cap["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["price"].as_f64().unwrap() <= p.price.as_f64()));

    let noun = p.keywords[0].clone();
    let hits = call(
        &w,
        Op::Search,
        json!({"query": format!("do you have {}", noun.to_uppercase())}),
    )
    .unwrap();
    assert!(hits["results"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["id"] == p.id.as_str()));
    let by_cat = call(
        &w,
        Op::Search,
        json!({"category": p.category.as_str().to_uppercase()}),
    )
    .unwrap();
    assert!(by_cat["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["category"] == p.category.as_str()));
    let zh: String = p
        .title_zh
        .chars()
        .rev()
        .take(2)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let hits = call(&w, Op::Search, json!({"query": zh})).unwrap();
    assert!(hits["results"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["id"] == p.id.as_str()));
    let none = call(&w, Op::Search, json!({"query": "zzzqqq"})).unwrap();
    assert_eq!(none, json!({"results": []}));
}

#[test]
fn regions_accept_spellings() {
    let w = World::generate(2).unwrap();
    for (given, canon) in [
        ("hong kong", "Hong Kong"),
        ("HK", "Hong Kong"),
        ("香港", "Hong Kong"),
        ("北京市", "Beijing"),
        ("广东省", "Guangdong"),
        ("xizang", "Tibet"),
    ] {
        let v = call(&w, Op::Shipping, json!({"product": "P1", "region": given})).unwrap();
        assert_eq!(v["region"], canon, "{given}");
    }
}

#[test]
fn faq_answers_use_the_data() {
    let w = World::generate(4).unwrap();
    let p = &w.catalog().products[0];
    let v = call(&w, Op::Faq, json!({"topic": "Returns", "product": "p1"})).unwrap();
    assert_eq!(v["topic"], "returns");
    assert_eq!(v["product"], "P1");
    assert!(v["answer"]
        .as_str()
        .unwrap()
        .contains(&format!("{} days", p.return_days)));
    assert!(FAQ_TOPICS.contains(&"usage"));
}

#[test]
fn ten_thousand_mixed_calls_succeed() {
    let w = World::generate(42).unwrap();
    let cat = w.catalog().clone();
    let regions: Vec<&str> = cat.regions.iter().map(|r| r.name.as_str()).collect();
    w.begin_episode().unwrap();
    for i in 0..10_000usize {
        let p = &cat.products[i % cat.products.len()];
        let (op, a) = match i % 9 {
            0 => (Op::Product, json!({"product": p.id})),
            1 => (
                Op::Stock,
                json!({"product": p.id, "color": p.variants[0].color}),
            ),
            2 => (Op::Coupons, json!({"product": p.id})),
            3 => (Op::Quote, json!({"product": p.id, "quantity": 1 + i % 3})),
            4 => (
                Op::Shipping,
                json!({"product": p.id, "region": regions[i % regions.len()]}),
            ),
            5 => (
                Op::Search,
                json!({"query": p.keywords[0], "max_price": 500}),
            ),
            6 => (
                Op::Faq,
                json!({"topic": STORE_FAQ_TOPICS[i % 5], "product": p.id}),
            ),
            7 => (Op::Pin, json!({"product": p.id})),
            _ => (
                Op::FlashSale,
                json!({"product": p.id, "minutes": 1 + i % 60}),
            ),
        };
        call(&w, op, a).unwrap_or_else(|e| panic!("call {i} ({op}) failed: {e}"));
    }
    w.end_episode().unwrap();
    assert!(w.pins().unwrap().is_empty());
}

#[test]
fn expired_means_at_or_after_expiry() {
    let w = coupon_world();
    let c4 = &w.catalog().coupons[3];
    assert!(Timestamp::parse(&c4.expires_at).unwrap() < w.now());
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1000i64..1000).prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "[pPcC]?[0-9]{0,3}".prop_map(Value::from),
        "(?s).{0,12}".prop_map(Value::from),
        prop::sample::select(vec![
            "P1", "p2", "M", "xl", "black", "香港", "returns", "sizing", "C1", "1e400", "-0", " 7 "
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    #[test]
    fn call_never_panics(
        seed in 0u64..1000,
        op in prop::sample::select(Op::ALL.to_vec()),
        entries in prop::collection::vec(
            (prop::sample::select(vec!["product", "size", "color", "quantity", "coupon", "region", "query",
                                       "category", "max_price", "topic", "minutes", "discount_pct", "bogus"]),
             json_value()),
            0..5),
    ) {
        let w = World::generate(seed).unwrap();
        let map: Map<String, Value> = entries.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let mut filtered = map.clone();
        filtered.retain(|k, _| op.arg(k).is_some());
        w.begin_episode().unwrap();
        for m in [&map, &filtered] {
            match w.call(op, m) {
                Ok(v) => prop_assert!(v.is_object()),
                Err(e) => prop_assert!(!e.to_string().is_empty() && !matches!(e, OpError::Store(_)), "{e}"),
            }
        }
        w.end_episode().unwrap();
    }
}

#[test]
fn a_committed_episode_keeps_its_changes_and_survives_save_and_open() {
    let w = coupon_world();
    w.begin_episode().unwrap();
    call(
        &w,
        Op::FlashSale,
        json!({"product": "P1", "minutes": "15", "discount_pct": 20}),
    )
    .unwrap();
    w.commit_episode().unwrap();
    assert!(matches!(w.commit_episode(), Err(WorldError::NoEpisode)));
    assert_eq!(w.live_flash_sales().unwrap().len(), 1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sqlite");
    w.save(&path).unwrap();
    let back = World::open(&path).unwrap();
    assert_eq!(back.live_flash_sales().unwrap().len(), 1);
    assert_eq!(
        call(&back, Op::Quote, json!({"product": "P1"})).unwrap()["unit_price"],
        80
    );
}
