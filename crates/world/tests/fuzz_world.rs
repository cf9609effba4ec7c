//! Bounded fuzzing of the world loader (issue 13): a saved world file with rows edited to
//! out-of-range, mistyped or dangling values, tables or columns dropped, bytes overwritten or
//! the file cut short, and files of arbitrary bytes, must open or fail with an error that
//! names the file, never panic or hang. A world that opens answers every operation.
//!
//! `tests/corpus/` is replayed first: `*.sql` is run on a saved world (seed 7) before it is
//! opened, `*.bytes` is opened as the file itself.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hat_harness::Op;
use hat_world::{World, WorldError};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// SQL values written into random cells: out of range for every integer width the loader
/// converts to, of the wrong type, blank, dangling references, bad times, bad UTF-8.
const VALUES: &[&str] = &[
    "NULL",
    "0",
    "-1",
    "1",
    "99",
    "100",
    "255",
    "256",
    "65536",
    "2147483647",
    "2147483648",
    "-2147483649",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "1e308",
    "-1e308",
    "0.5",
    "''",
    "' '",
    "'x'",
    "'P1'",
    "' p1 '",
    "'P999'",
    "'store'",
    "'category:toys'",
    "'category:'",
    "'product:'",
    "'product:P1'",
    "'2026-01-01T00:00:00Z'",
    "'2026-13-45T99:99:99Z'",
    "'9999-12-31T23:59:59Z'",
    "'0000-01-01T00:00:00Z'",
    "x''",
    "x'00ff'",
    "CAST(x'ff80c0' AS TEXT)",
    "char(0)",
    "'ẞİ🤖'",
    "'shipping_fee'",
];

/// A world file edit: `op` picks the statement, `table`/`row`/`column`/`value` its operands.
#[derive(Debug, Clone)]
struct Edit {
    op: u8,
    table: prop::sample::Index,
    row: prop::sample::Index,
    column: prop::sample::Index,
    value: prop::sample::Index,
}

fn edit() -> impl Strategy<Value = Edit> {
    (
        0u8..16,
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(op, table, row, column, value)| Edit {
            op,
            table,
            row,
            column,
            value,
        })
}

/// The bytes of world 7, saved.
fn template() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.sqlite");
        World::generate(7).unwrap().save(&path).unwrap();
        std::fs::read(path).unwrap()
    })
}

fn columns(conn: &rusqlite::Connection, table: &str) -> Vec<String> {
    let mut stmt = conn
        .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
        .unwrap();
    let names = stmt.query_map([], |r| r.get(0)).unwrap();
    names.map(Result::unwrap).collect()
}

/// CHECK constraints off, as in a file written by another program; no syncing to disk.
fn unchecked(conn: &rusqlite::Connection) {
    conn.execute_batch(
        "PRAGMA ignore_check_constraints = ON; PRAGMA synchronous = OFF; PRAGMA journal_mode = MEMORY",
    )
    .unwrap();
}

/// Applies `edits` to the world file at `path`; an edit SQLite refuses (NOT NULL, UNIQUE) is
/// skipped.
fn apply_edits(path: &Path, edits: &[Edit]) {
    let conn = rusqlite::Connection::open(path).unwrap();
    unchecked(&conn);
    for e in edits {
        let table = *e.table.get(&hat_world::store::TABLES);
        let cols = columns(&conn, table);
        if cols.is_empty() {
            continue;
        }
        let column = e.column.get(&cols);
        let value = *e.value.get(VALUES);
        let rows: i64 = conn
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap();
        let row = if rows == 0 {
            0
        } else {
            e.row.index(rows as usize)
        };
        let which = format!("rowid = (SELECT rowid FROM {table} LIMIT 1 OFFSET {row})");
        let sql = match e.op {
            0..=9 => format!("UPDATE {table} SET {column} = {value} WHERE {which}"),
            10 => format!("UPDATE {table} SET {column} = {value}"),
            11 => format!("DELETE FROM {table} WHERE {which}"),
            12 => format!("DELETE FROM {table}"),
            13 => format!(
                "INSERT INTO {table} SELECT * FROM {table} WHERE {which}; \
                 UPDATE {table} SET {column} = {value} WHERE rowid = last_insert_rowid()"
            ),
            14 => format!("ALTER TABLE {table} DROP COLUMN {column}"),
            _ => format!("DROP TABLE {table}"),
        };
        let _ = conn.execute_batch(&sql);
    }
}

/// Opens `path`: a world answers every operation; an error names the file.
fn open_checked(path: &Path) -> Result<(), TestCaseError> {
    match World::open(path) {
        Ok(w) => {
            exercise(&w);
            Ok(())
        }
        Err(e) => {
            let msg = e.to_string();
            let name = path.file_name().unwrap().to_str().unwrap();
            prop_assert!(msg.contains(name), "error does not name the file: {msg}");
            if let WorldError::Sqlite { source, .. } = &e {
                // A value SQLite holds but the loader cannot convert names its column and row.
                let conversion = matches!(
                    source,
                    rusqlite::Error::IntegralValueOutOfRange(..)
                        | rusqlite::Error::FromSqlConversionFailure(..)
                        | rusqlite::Error::InvalidColumnType(..)
                );
                prop_assert!(!conversion, "conversion error without its column: {msg}");
            }
            Ok(())
        }
    }
}

/// Every operation with arguments taken from the world's own data.
fn exercise(w: &World) {
    let _ = w.summary();
    let _ = w.try_stream_state();
    let _ = w.pins();
    let _ = w.live_flash_sales();
    let cat = w.catalog();
    let product = cat
        .products
        .first()
        .map(|p| p.id.clone())
        .unwrap_or_default();
    let region = cat
        .regions
        .first()
        .map(|r| r.name.clone())
        .unwrap_or_default();
    let coupon = cat
        .coupons
        .first()
        .map(|c| c.id.clone())
        .unwrap_or_default();
    let variant = cat.products.first().and_then(|p| p.variants.first());
    let args = |v: Value| -> Map<String, Value> { v.as_object().unwrap().clone() };
    let calls = [
        (Op::Product, json!({"product": product})),
        (Op::Stock, json!({"product": product})),
        (
            Op::Stock,
            json!({"product": product, "size": variant.and_then(|v| v.size.clone()),
                   "color": variant.map(|v| v.color.clone())}),
        ),
        (Op::Coupons, json!({"product": product})),
        (Op::Quote, json!({"product": product})),
        (
            Op::Quote,
            json!({"product": product, "quantity": 3, "coupon": coupon}),
        ),
        (Op::Shipping, json!({"product": product, "region": region})),
        (Op::Search, json!({})),
        (Op::Search, json!({"query": "a", "max_price": 1e9})),
        (Op::Faq, json!({"topic": "returns"})),
        (Op::Faq, json!({"topic": "sizing", "product": product})),
        (Op::Pin, json!({"product": product})),
        (Op::FlashSale, json!({"product": product, "minutes": 5})),
        (Op::Quote, json!({"product": product, "quantity": 2})),
    ];
    for (op, a) in calls {
        let a = args(a);
        let _ = w.call(op, &a);
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn corpus_replays() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut entries: Vec<_> = std::fs::read_dir(&corpus)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    for entry in entries {
        let name = entry.file_name().unwrap().to_str().unwrap().to_string();
        let path = match entry.extension().and_then(|e| e.to_str()) {
            Some("sql") => {
                let path = write(dir.path(), &format!("{name}.sqlite"), template());
                let conn = rusqlite::Connection::open(&path).unwrap();
                unchecked(&conn);
                conn.execute_batch(&std::fs::read_to_string(&entry).unwrap())
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                path
            }
            Some("bytes") => write(dir.path(), &name, &std::fs::read(&entry).unwrap()),
            _ => continue,
        };
        open_checked(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        n += 1;
    }
    assert!(n >= 5, "{n} corpus entries");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Cells set to troublesome values, rows deleted or duplicated, columns and tables dropped.
    #[test]
    fn an_edited_store_opens_or_names_the_problem(edits in prop::collection::vec(edit(), 1..5)) {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "edited.sqlite", template());
        apply_edits(&path, &edits);
        open_checked(&path)?;
    }

    /// Bytes overwritten anywhere (the header, the schema, the b-tree pages), then maybe cut.
    #[test]
    fn a_damaged_file_opens_or_names_the_problem(
        writes in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..16),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let mut bytes = template().to_vec();
        for (at, v) in writes {
            let i = at.index(bytes.len());
            bytes[i] = v;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        let dir = tempfile::tempdir().unwrap();
        open_checked(&write(dir.path(), "damaged.sqlite", &bytes))?;
    }

    /// Arbitrary bytes, half of them behind a valid SQLite header.
    #[test]
    fn arbitrary_bytes_are_refused_with_the_file_name(
        header in any::<bool>(),
        tail in prop::collection::vec(any::<u8>(), 0..4096),
    ) {
        let mut bytes = if header { template()[..100].to_vec() } else { Vec::new() };
        bytes.extend(tail);
        let dir = tempfile::tempdir().unwrap();
        open_checked(&write(dir.path(), "arbitrary.sqlite", &bytes))?;
    }
}
