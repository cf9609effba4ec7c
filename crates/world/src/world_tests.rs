//! Tests of building, saving, opening and episodes.

use hat_harness::Op;
use serde_json::{json, Map, Value};

use crate::error::WorldError;
use crate::World;

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

#[test]
fn same_seed_same_world() {
    let a = World::generate(77).unwrap();
    let b = World::generate(77).unwrap();
    assert_eq!(
        serde_json::to_string(a.catalog()).unwrap(),
        serde_json::to_string(b.catalog()).unwrap()
    );
    assert_eq!(a.summary(), b.summary());
    assert_ne!(a.catalog(), World::generate(78).unwrap().catalog());
}

#[test]
fn save_open_round_trip_keeps_catalog_and_live_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("world.sqlite");
    let w = World::generate(3).unwrap();
    w.call(Op::Pin, &args(json!({"product": "P2"}))).unwrap();
    w.call(
        Op::FlashSale,
        &args(json!({"product": "P3", "minutes": 20})),
    )
    .unwrap();
    w.set_on_stage("p4").unwrap();
    w.save(&path).unwrap();
    // Saving again replaces the file and leaves no temporary behind.
    w.save(&path).unwrap();
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");

    let back = World::open(&path).unwrap();
    assert_eq!(back.catalog(), w.catalog());
    assert_eq!(back.pins().unwrap(), w.pins().unwrap());
    assert_eq!(
        back.live_flash_sales().unwrap(),
        w.live_flash_sales().unwrap()
    );
    assert_eq!(back.on_stage().unwrap().id, "P4");
    assert_eq!(back.stream_state(), w.stream_state());
    let q = |w: &World| w.call(Op::Quote, &args(json!({"product": "P3"}))).unwrap();
    assert_eq!(q(&back), q(&w));
}

#[test]
fn operator_edits_show_after_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.sqlite");
    World::generate(8).unwrap().save(&path).unwrap();
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute("UPDATE products SET price_cents = 4990 WHERE id = 'P1'", [])
            .unwrap();
    }
    let w = World::open(&path).unwrap();
    assert_eq!(w.catalog().products[0].price.cents(), 4990);
    let v = w
        .call(Op::Product, &args(json!({"product": "P1"})))
        .unwrap();
    assert_eq!(v["price"], 49.9);
}

#[test]
fn bad_files_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();

    let missing = dir.path().join("nope.sqlite");
    let e = World::open(&missing).unwrap_err();
    assert!(matches!(e, WorldError::NotFound { .. }), "{e}");

    let garbage = dir.path().join("garbage.sqlite");
    std::fs::write(
        &garbage,
        "this is not a database, just some text that goes on for a while ".repeat(20),
    )
    .unwrap();
    let e = World::open(&garbage).unwrap_err();
    assert!(matches!(e, WorldError::NotSqlite { .. }), "{e}");
    assert!(e.to_string().contains("garbage.sqlite"));

    let short = dir.path().join("short.sqlite");
    std::fs::write(&short, "hi").unwrap();
    assert!(World::open(&short).is_err());

    let partial = dir.path().join("partial.sqlite");
    rusqlite::Connection::open(&partial)
        .unwrap()
        .execute_batch("CREATE TABLE stream (id TEXT)")
        .unwrap();
    let e = World::open(&partial).unwrap_err();
    assert!(
        matches!(
            e,
            WorldError::MissingTable {
                table: "products",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("partial.sqlite") && e.to_string().contains("`products`"));

    let empty = dir.path().join("empty.sqlite");
    std::fs::write(&empty, "").unwrap();
    assert!(matches!(
        World::open(&empty).unwrap_err(),
        WorldError::MissingTable {
            table: "stream",
            ..
        }
    ));

    // a column computed on read (a gigabyte a row in an uploaded store) is refused unread
    let computed = dir.path().join("computed.sqlite");
    World::generate(1).unwrap().save(&computed).unwrap();
    rusqlite::Connection::open(&computed)
        .unwrap()
        .execute_batch(
            "ALTER TABLE products ADD COLUMN blurb TEXT \
             GENERATED ALWAYS AS (hex(zeroblob(499999999))) VIRTUAL",
        )
        .unwrap();
    let e = World::open(&computed).unwrap_err();
    assert!(
        matches!(e, WorldError::Invalid { .. })
            && e.to_string().contains("generated column `blurb`")
            && e.to_string().contains("computed.sqlite"),
        "{e}"
    );

    let broken = dir.path().join("broken.sqlite");
    World::generate(1).unwrap().save(&broken).unwrap();
    rusqlite::Connection::open(&broken)
        .unwrap()
        .execute("UPDATE coupons SET scope = 'galaxy'", [])
        .unwrap();
    let e = World::open(&broken).unwrap_err();
    assert!(
        matches!(e, WorldError::Invalid { .. }) && e.to_string().contains("galaxy"),
        "{e}"
    );
}

#[test]
fn episodes_undo_live_changes() {
    let w = World::generate(6).unwrap();
    let stage = w.on_stage().unwrap().id.clone();
    assert!(matches!(w.end_episode(), Err(WorldError::NoEpisode)));
    w.begin_episode().unwrap();
    w.call(Op::Pin, &args(json!({"product": "P1"}))).unwrap();
    w.set_on_stage("P2").unwrap();
    assert_eq!(w.pins().unwrap().len(), 1);
    assert!(matches!(
        w.save(std::env::temp_dir().join("never.sqlite")),
        Err(WorldError::EpisodeOpen)
    ));
    w.end_episode().unwrap();
    assert!(w.pins().unwrap().is_empty());
    assert_eq!(w.on_stage().unwrap().id, stage);
    // Episodes can run back to back.
    w.begin_episode().unwrap();
    w.end_episode().unwrap();
    assert!(w.set_on_stage("P404").is_err());
}

#[test]
fn stream_state_shows_usable_coupons_and_stage() {
    let w = World::generate(10).unwrap();
    let s = w.stream_state();
    assert_eq!(s.stream_id, "S-10");
    assert_eq!(s.currency, "CNY");
    assert_eq!(s.products.len(), w.catalog().products.len());
    assert_eq!(s.coupons.len(), w.catalog().usable_coupons().count());
    assert!(!s.coupons.is_empty());
    assert_eq!(s.on_stage.link, 1);
    let v = serde_json::to_value(&s).unwrap();
    assert!(v["on_stage"]["price"].is_number());
}

#[test]
fn summary_reads_well() {
    let w = World::generate(12).unwrap();
    let s = w.summary();
    for needle in [
        "Stream S-12",
        "Products (",
        "Coupons (",
        "Flash sales (",
        "Regions (",
        "FAQ: ",
    ] {
        assert!(s.contains(needle), "missing {needle} in\n{s}");
    }
}

#[test]
fn invalid_catalogs_are_refused() {
    let mut cat = crate::Catalog::generate(2);
    cat.products[1].id = "P1".into();
    let e = World::from_catalog(cat).unwrap_err();
    assert!(e.to_string().contains("appears twice"), "{e}");
}

#[test]
fn world_can_move_to_another_thread() {
    fn is_send<T: Send>() {}
    is_send::<World>();
}

/// The error of opening world 3 saved and then edited with `sql`; `{id0}`/`{id1}` in it stand
/// for the first and second product ids, which are returned too.
fn open_after_edit(sql: &str) -> (String, [String; 2]) {
    let dir = tempfile::tempdir().unwrap();
    let w = World::generate(3).unwrap();
    let ids = [0, 1].map(|i| w.catalog().products[i].id.clone());
    let path = dir.path().join("w.sqlite");
    w.save(&path).unwrap();
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(&sql.replace("{id0}", &ids[0]).replace("{id1}", &ids[1]))
        .unwrap();
    (World::open(&path).unwrap_err().to_string(), ids)
}

/// Issue 13: `price_cents = i64::MAX` on a product with a running sale gave a negative unit
/// price, and a 2^31 % flash sale was shown; store values are range-checked on open, naming the
/// table, column and row.
#[test]
fn out_of_range_store_values_are_refused_with_their_row() {
    for (sql, want) in [
        (
            "UPDATE products SET price_cents = 9223372036854775807 WHERE id = '{id0}'",
            "`price_cents`",
        ),
        (
            "INSERT INTO flash_sales (pos, product, discount_pct, starts_at, ends_at) \
             VALUES (999, '{id0}', 2147483648, '2026-01-01T00:00:00Z', '2026-01-01T00:10:00Z')",
            "`discount_pct`",
        ),
    ] {
        let (e, [id, _]) = open_after_edit(sql);
        assert!(e.contains(want) && e.contains(&id), "{e}");
    }
}

/// Issue 13: world integer errors named no column or row, nor what the column holds.
#[test]
fn a_badly_typed_store_value_names_its_column_and_row() {
    let (e, _) =
        open_after_edit("UPDATE products SET warranty_months = 'forever' WHERE id = '{id1}'");
    assert!(
        e.contains("`warranty_months`")
            && e.contains("row 2")
            && e.contains("products")
            && e.contains("the column holds `INTEGER`, a whole number"),
        "{e}"
    );
}

/// Issue 13 (red-team): coupon amounts and shipping costs were not range-checked, so a
/// coupon of i64::MAX cents reached price arithmetic.
#[test]
fn coupon_amounts_and_shipping_costs_are_range_checked() {
    for (sql, want) in [
        (
            "UPDATE coupons SET amount_cents = 9223372036854775807",
            "`amount_cents` is 9223372036854775807, outside 0 to",
        ),
        ("UPDATE coupons SET amount_cents = 0", "`amount_cents` is 0"),
        (
            "UPDATE coupons SET threshold_cents = 9223372036854775807",
            "`threshold_cents`",
        ),
        (
            "UPDATE shipping SET cost_cents = 9223372036854775807 WHERE pos = 2",
            "row 2, column `cost_cents`: 9223372036854775807 is out of range; the column holds \
             `INTEGER NOT NULL CHECK (cost_cents >= 0)`, cents from 0 to",
        ),
    ] {
        let (e, _) = open_after_edit(sql);
        assert!(e.contains(want), "{sql}: {e}");
    }
}
