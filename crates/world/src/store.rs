//! The SQLite form of a world: schema, loading and reading back.
//!
//! The database is the world's source of truth on disk and the place the
//! stream's changing state lives while it runs. Money is stored as integer
//! cents (`*_cents` columns) so an operator editing prices in `sqlite3` cannot
//! introduce float drift; times are ISO 8601 text so they stay readable.
//! Every table has an explicit `pos INTEGER PRIMARY KEY`: row order is part of
//! the data (spec order, variant order) and `VACUUM` keeps explicit rowids.
//!
//! Tables (static catalog first, then live state):
//!
//! | table | one row per | key columns |
//! | --- | --- | --- |
//! | `stream` | the stream (exactly one) | id, title, host, started_at, now, currency, currency_symbol, on_stage |
//! | `products` | product | id, link, title, title_zh, brand, category, price_cents, list_price_cents, cost_price_cents, keywords, return_days, return_note, warranty_months, warehouse, description |
//! | `specs` | spec line | product, key, value |
//! | `variants` | size/colour | product, size (NULL = one size), color, stock |
//! | `regions` | delivery region | name, name_zh, remote |
//! | `shipping` | (product, region) | days_min, days_max, cost_cents |
//! | `coupons` | coupon | id, scope (`store`, `category:<c>`, `product:<id>`), threshold_cents, amount_cents, remaining, expires_at |
//! | `flash_sales` | scheduled sale | product, discount_pct, starts_at, ends_at |
//! | `faq` | answer | topic, product (NULL = store-wide), answer |
//! | `pins` | `pin` call (live) | product, link, pinned_at |
//! | `live_flash_sales` | operator sale (live) | product, discount_pct, starts_at, ends_at |

use std::collections::HashMap;

use rusqlite::{params, Connection, ErrorCode};

use crate::catalog::{
    Catalog, Category, Coupon, CouponScope, FaqEntry, FlashSale, Pin, Product, Region,
    ShippingRate, Spec, StreamInfo, Variant,
};
use crate::error::WorldError;
use crate::money::Money;

/// Every table a world file must have, in creation order.
pub const TABLES: [&str; 11] = [
    "stream",
    "products",
    "specs",
    "variants",
    "regions",
    "shipping",
    "coupons",
    "flash_sales",
    "faq",
    "pins",
    "live_flash_sales",
];

/// The schema, as run on a fresh database.
pub const SCHEMA: &str = r#"
CREATE TABLE stream (
    id              TEXT PRIMARY KEY,
    title           TEXT NOT NULL,
    host            TEXT NOT NULL,
    started_at      TEXT NOT NULL,          -- ISO 8601
    now             TEXT NOT NULL,          -- the stream's clock; expiry and sales are judged against it
    currency        TEXT NOT NULL,
    currency_symbol TEXT NOT NULL,
    on_stage        TEXT NOT NULL           -- product id (live state)
);
CREATE TABLE products (
    pos              INTEGER PRIMARY KEY,
    id               TEXT NOT NULL UNIQUE,
    link             INTEGER NOT NULL UNIQUE,
    title            TEXT NOT NULL,
    title_zh         TEXT NOT NULL,
    brand            TEXT NOT NULL,
    category         TEXT NOT NULL,
    price_cents      INTEGER NOT NULL CHECK (price_cents >= 0),
    list_price_cents INTEGER NOT NULL CHECK (list_price_cents >= 0),
    cost_price_cents INTEGER NOT NULL CHECK (cost_price_cents >= 0),
    keywords         TEXT NOT NULL,         -- space-separated lowercase search words
    return_days      INTEGER NOT NULL,
    return_note      TEXT,
    warranty_months  INTEGER,
    warehouse        TEXT NOT NULL,         -- region name
    description      TEXT NOT NULL
);
CREATE TABLE specs (
    pos     INTEGER PRIMARY KEY,
    product TEXT NOT NULL,
    key     TEXT NOT NULL,
    value   TEXT NOT NULL
);
CREATE TABLE variants (
    pos     INTEGER PRIMARY KEY,
    product TEXT NOT NULL,
    size    TEXT,                           -- NULL for one-size products
    color   TEXT NOT NULL,
    stock   INTEGER NOT NULL CHECK (stock >= 0)
);
CREATE TABLE regions (
    pos     INTEGER PRIMARY KEY,
    name    TEXT NOT NULL UNIQUE,
    name_zh TEXT NOT NULL,
    remote  INTEGER NOT NULL
);
CREATE TABLE shipping (
    pos        INTEGER PRIMARY KEY,
    product    TEXT NOT NULL,
    region     TEXT NOT NULL,
    days_min   INTEGER NOT NULL,
    days_max   INTEGER NOT NULL,
    cost_cents INTEGER NOT NULL CHECK (cost_cents >= 0),
    UNIQUE (product, region)
);
CREATE TABLE coupons (
    pos             INTEGER PRIMARY KEY,
    id              TEXT NOT NULL UNIQUE,
    scope           TEXT NOT NULL,          -- store | category:<name> | product:<id>
    threshold_cents INTEGER NOT NULL CHECK (threshold_cents >= 0),
    amount_cents    INTEGER NOT NULL CHECK (amount_cents >= 0),
    remaining       INTEGER NOT NULL CHECK (remaining >= 0),
    expires_at      TEXT NOT NULL
);
CREATE TABLE flash_sales (
    pos          INTEGER PRIMARY KEY,
    product      TEXT NOT NULL,
    discount_pct INTEGER NOT NULL,
    starts_at    TEXT NOT NULL,
    ends_at      TEXT NOT NULL
);
CREATE TABLE faq (
    pos     INTEGER PRIMARY KEY,
    topic   TEXT NOT NULL,
    product TEXT,                           -- NULL for store-wide answers
    answer  TEXT NOT NULL
);
CREATE TABLE pins (
    pos       INTEGER PRIMARY KEY,
    product   TEXT NOT NULL,
    link      INTEGER NOT NULL,
    pinned_at TEXT NOT NULL
);
CREATE TABLE live_flash_sales (
    pos          INTEGER PRIMARY KEY,
    product      TEXT NOT NULL,
    discount_pct INTEGER NOT NULL,
    starts_at    TEXT NOT NULL,
    ends_at      TEXT NOT NULL
);
CREATE INDEX live_flash_sales_product ON live_flash_sales (product);
"#;

/// What the stream changes while it runs; kept only in SQL so episodes can undo it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LiveState {
    pub on_stage: String,
    pub pins: Vec<Pin>,
    pub live_flash_sales: Vec<FlashSale>,
}

/// Writes `catalog` and `live` into an empty database that has [`SCHEMA`].
pub(crate) fn load(conn: &Connection, cat: &Catalog, live: &LiveState) -> rusqlite::Result<()> {
    let tx = conn.unchecked_transaction()?;
    let s = &cat.stream;
    tx.execute(
        "INSERT INTO stream (id, title, host, started_at, now, currency, currency_symbol, on_stage) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![s.id, s.title, s.host, s.started_at, s.now, s.currency, s.currency_symbol, live.on_stage],
    )?;
    {
        let mut prod = tx.prepare(
            "INSERT INTO products (id, link, title, title_zh, brand, category, price_cents, list_price_cents, cost_price_cents, \
             keywords, return_days, return_note, warranty_months, warehouse, description) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        )?;
        let mut spec = tx.prepare("INSERT INTO specs (product, key, value) VALUES (?1, ?2, ?3)")?;
        let mut var = tx.prepare(
            "INSERT INTO variants (product, size, color, stock) VALUES (?1, ?2, ?3, ?4)",
        )?;
        for p in &cat.products {
            prod.execute(params![
                p.id,
                p.link,
                p.title,
                p.title_zh,
                p.brand,
                p.category.as_str(),
                p.price.cents(),
                p.list_price.cents(),
                p.cost_price.cents(),
                p.keywords.join(" "),
                p.return_days,
                p.return_note,
                p.warranty_months,
                p.warehouse,
                p.description
            ])?;
            for sp in &p.specs {
                spec.execute(params![p.id, sp.key, sp.value])?;
            }
            for v in &p.variants {
                var.execute(params![p.id, v.size, v.color, v.stock])?;
            }
        }
        let mut reg =
            tx.prepare("INSERT INTO regions (name, name_zh, remote) VALUES (?1, ?2, ?3)")?;
        for r in &cat.regions {
            reg.execute(params![r.name, r.name_zh, r.remote])?;
        }
        let mut ship = tx.prepare(
            "INSERT INTO shipping (product, region, days_min, days_max, cost_cents) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for r in &cat.shipping {
            ship.execute(params![
                r.product,
                r.region,
                r.days_min,
                r.days_max,
                r.cost.cents()
            ])?;
        }
        let mut coup = tx.prepare(
            "INSERT INTO coupons (id, scope, threshold_cents, amount_cents, remaining, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for c in &cat.coupons {
            coup.execute(params![
                c.id,
                c.scope.to_string(),
                c.threshold.cents(),
                c.amount.cents(),
                c.remaining,
                c.expires_at
            ])?;
        }
        for (table, sales) in [
            ("flash_sales", &cat.flash_sales),
            ("live_flash_sales", &live.live_flash_sales),
        ] {
            let mut fs = tx.prepare(&format!(
                "INSERT INTO {table} (product, discount_pct, starts_at, ends_at) VALUES (?1, ?2, ?3, ?4)"
            ))?;
            for f in sales {
                fs.execute(params![f.product, f.discount_pct, f.starts_at, f.ends_at])?;
            }
        }
        let mut faq = tx.prepare("INSERT INTO faq (topic, product, answer) VALUES (?1, ?2, ?3)")?;
        for e in &cat.faq {
            faq.execute(params![e.topic, e.product, e.answer])?;
        }
        let mut pin =
            tx.prepare("INSERT INTO pins (product, link, pinned_at) VALUES (?1, ?2, ?3)")?;
        for p in &live.pins {
            pin.execute(params![p.product, p.link, p.pinned_at])?;
        }
    }
    tx.commit()
}

/// Runs a query and collects every row.
fn all<T>(
    conn: &Connection,
    query: &str,
    mut row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Vec<T>> {
    let mut stmt = conn.prepare(query)?;
    let names: Vec<String> = stmt.column_names().iter().map(|n| n.to_string()).collect();
    let table = query
        .split_once(" FROM ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("");
    let mut out = Vec::new();
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        // a bad value names its column and row, not just a column index
        let n = out.len() + 1;
        out.push(row(r).map_err(|e| with_column(e, table, &names, n))?);
    }
    Ok(out)
}

/// Rewrites a value-conversion error to name the column, the (1-based) row and what the
/// column holds (its declaration in [`SCHEMA`]).
fn with_column(e: rusqlite::Error, table: &str, names: &[String], row: usize) -> rusqlite::Error {
    use rusqlite::Error as E;
    let col = |i: usize| names.get(i).map_or("?", String::as_str).to_string();
    let wants = |i: usize| {
        declared(table, &col(i)).map_or(String::new(), |d| format!("; the column holds {d}"))
    };
    let msg = match &e {
        E::IntegralValueOutOfRange(i, v) => {
            format!(
                "row {row}, column `{}`: {v} is out of range{}",
                col(*i),
                wants(*i)
            )
        }
        E::FromSqlConversionFailure(i, t, inner) => {
            format!(
                "row {row}, column `{}`: a {t} value that does not fit ({inner}){}",
                col(*i),
                wants(*i)
            )
        }
        E::InvalidColumnType(i, _, t) => {
            format!("row {row}, column `{}`: a {t} value{}", col(*i), wants(*i))
        }
        _ => return e,
    };
    E::ToSqlConversionFailure(msg.into())
}

/// A column's declaration in [`SCHEMA`] (`INTEGER NOT NULL CHECK (stock >= 0)`), with the
/// integer widths the loader reads: what a value in that column must be.
fn declared(table: &str, column: &str) -> Option<String> {
    let start = SCHEMA.find(&format!("CREATE TABLE {table} ("))?;
    let body = &SCHEMA[start..];
    let body = &body[..body.find("\n);").unwrap_or(body.len())];
    let line = body.lines().skip(1).find_map(|l| {
        let l = l.trim();
        let rest = l.strip_prefix(column)?;
        rest.starts_with(' ').then_some(rest.trim())
    })?;
    let decl = line
        .split("--")
        .next()
        .unwrap_or(line)
        .trim()
        .trim_end_matches(',')
        .trim();
    let range = if column.ends_with("_cents") {
        format!(", cents from 0 to {}", crate::money::MAX_CENTS)
    } else if decl.starts_with("INTEGER") {
        ", a whole number".to_string()
    } else {
        String::new()
    };
    Some(format!("`{decl}`{range}"))
}

/// The first of [`TABLES`] the database lacks, if any.
fn first_missing_table(conn: &Connection) -> rusqlite::Result<Option<&'static str>> {
    let mut stmt =
        conn.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1")?;
    for t in TABLES {
        if !stmt.exists([t])? {
            return Ok(Some(t));
        }
    }
    Ok(None)
}

/// The first generated (computed) column of `table`, if any (`table_xinfo`'s `hidden` is 2
/// for a virtual and 3 for a stored one).
fn generated_column(conn: &Connection, table: &str) -> rusqlite::Result<Option<String>> {
    let mut stmt = conn.prepare("SELECT name, hidden FROM pragma_table_xinfo(?1)")?;
    let mut rows = stmt.query([table])?;
    while let Some(row) = rows.next()? {
        let hidden: i64 = row.get(1)?;
        if hidden == 2 || hidden == 3 {
            return Ok(Some(row.get(0)?));
        }
    }
    Ok(None)
}

/// Reads a whole world back. `origin` names the database in error messages.
pub(crate) fn read(
    conn: &Connection,
    origin: &std::path::Path,
) -> Result<(Catalog, LiveState), WorldError> {
    let show = origin.display().to_string();
    match first_missing_table(conn) {
        Ok(None) => {}
        Ok(Some(table)) => {
            return Err(WorldError::MissingTable {
                path: origin.to_path_buf(),
                table,
            })
        }
        Err(e) if e.sqlite_error_code() == Some(ErrorCode::NotADatabase) => {
            return Err(WorldError::NotSqlite {
                path: origin.to_path_buf(),
            })
        }
        Err(e) => {
            return Err(WorldError::Sqlite {
                context: format!("listing the tables of {show}"),
                source: e,
            })
        }
    }
    let invalid = |detail: String| WorldError::Invalid {
        origin: show.clone(),
        detail,
    };
    // A generated column is computed on every read: `hex(zeroblob(5e8))` in an uploaded store
    // turned a 16 MB file into a gigabyte a row. Worlds hold plain values only.
    for table in TABLES {
        match generated_column(conn, table) {
            Ok(None) => {}
            Ok(Some(column)) => {
                return Err(invalid(format!(
                    "table `{table}` has the generated column `{column}`; a world stores plain \
                     values only (write the file with `hat world` or World::save)"
                )))
            }
            Err(e) => {
                return Err(WorldError::Sqlite {
                    context: format!("listing the columns of `{table}` in {show}"),
                    source: e,
                })
            }
        }
    }
    let sql = |table: &str| WorldError::sql(format!("reading table `{table}` of {show}"));

    let (stream, on_stage) = {
        let mut rows = all(
            conn,
            "SELECT id, title, host, started_at, now, currency, currency_symbol, on_stage FROM stream",
            |r| {
                let info = StreamInfo {
                    id: r.get(0)?,
                    title: r.get(1)?,
                    host: r.get(2)?,
                    started_at: r.get(3)?,
                    now: r.get(4)?,
                    currency: r.get(5)?,
                    currency_symbol: r.get(6)?,
                };
                Ok((info, r.get::<_, String>(7)?))
            },
        )
        .map_err(sql("stream"))?;
        if rows.len() != 1 {
            return Err(invalid(format!(
                "table `stream` has {} rows, it needs exactly one",
                rows.len()
            )));
        }
        rows.remove(0)
    };

    let product_rows = all(
        conn,
        "SELECT id, link, title, title_zh, brand, category, price_cents, list_price_cents, cost_price_cents, \
         keywords, return_days, return_note, warranty_months, warehouse, description FROM products ORDER BY pos",
        |r| {
            let keywords: String = r.get(9)?;
            let product = Product {
                id: r.get(0)?,
                link: r.get(1)?,
                title: r.get(2)?,
                title_zh: r.get(3)?,
                brand: r.get(4)?,
                // Parsed below, where a bad value can name the product.
                category: Category::Apparel,
                // range-checked below, where a bad value can name the product
                price: Money::from_cents(r.get(6)?),
                list_price: Money::from_cents(r.get(7)?),
                cost_price: Money::from_cents(r.get(8)?),
                specs: Vec::new(),
                keywords: keywords.split_whitespace().map(str::to_lowercase).collect(),
                variants: Vec::new(),
                return_days: r.get(10)?,
                return_note: r.get(11)?,
                warranty_months: r.get(12)?,
                warehouse: r.get(13)?,
                description: r.get(14)?,
            };
            Ok((product, r.get::<_, String>(5)?))
        },
    )
    .map_err(sql("products"))?;
    let mut products = product_rows
        .into_iter()
        .map(|(mut p, cat)| {
            p.category = cat
                .parse()
                .map_err(|e: String| invalid(format!("product {}: {e}", p.id)))?;
            for (column, m) in [
                ("price_cents", p.price),
                ("list_price_cents", p.list_price),
                ("cost_price_cents", p.cost_price),
            ] {
                if Money::checked_from_cents(m.cents()).is_none() {
                    return Err(invalid(format!(
                        "table `products`, product {}: `{column}` is {}, outside 0 to {}",
                        p.id,
                        m.cents(),
                        crate::money::MAX_CENTS
                    )));
                }
            }
            Ok(p)
        })
        .collect::<Result<Vec<Product>, WorldError>>()?;
    let by_id: HashMap<String, usize> = products
        .iter()
        .enumerate()
        .map(|(i, p)| (p.id.clone(), i))
        .collect();
    let owner = |table: &str, id: &str| {
        by_id.get(id).copied().ok_or_else(|| {
            invalid(format!(
                "table `{table}` has a row for unknown product \"{id}\""
            ))
        })
    };

    let spec_rows = all(
        conn,
        "SELECT product, key, value FROM specs ORDER BY pos",
        |r| {
            Ok((
                r.get::<_, String>(0)?,
                Spec {
                    key: r.get(1)?,
                    value: r.get(2)?,
                },
            ))
        },
    )
    .map_err(sql("specs"))?;
    for (product, spec) in spec_rows {
        let i = owner("specs", &product)?;
        products[i].specs.push(spec);
    }
    let variant_rows = all(
        conn,
        "SELECT product, size, color, stock FROM variants ORDER BY pos",
        |r| {
            Ok((
                r.get::<_, String>(0)?,
                Variant {
                    size: r.get(1)?,
                    color: r.get(2)?,
                    stock: r.get(3)?,
                },
            ))
        },
    )
    .map_err(sql("variants"))?;
    for (product, v) in variant_rows {
        let i = owner("variants", &product)?;
        products[i].variants.push(v);
    }

    let regions = all(
        conn,
        "SELECT name, name_zh, remote FROM regions ORDER BY pos",
        |r| {
            Ok(Region {
                name: r.get(0)?,
                name_zh: r.get(1)?,
                remote: r.get(2)?,
            })
        },
    )
    .map_err(sql("regions"))?;

    let shipping = all(
        conn,
        "SELECT product, region, days_min, days_max, cost_cents FROM shipping ORDER BY pos",
        |r| {
            Ok(ShippingRate {
                product: r.get(0)?,
                region: r.get(1)?,
                days_min: r.get(2)?,
                days_max: r.get(3)?,
                cost: {
                    let cents: i64 = r.get(4)?;
                    Money::checked_from_cents(cents)
                        .ok_or(rusqlite::Error::IntegralValueOutOfRange(4, cents))?
                },
            })
        },
    )
    .map_err(sql("shipping"))?;

    let coupon_rows = all(
        conn,
        "SELECT id, scope, threshold_cents, amount_cents, remaining, expires_at FROM coupons ORDER BY pos",
        |r| {
            let coupon = Coupon {
                id: r.get(0)?,
                // Parsed below, where a bad value can name the coupon.
                scope: CouponScope::Store,
                threshold: Money::from_cents(r.get(2)?),
                amount: Money::from_cents(r.get(3)?),
                remaining: r.get(4)?,
                expires_at: r.get(5)?,
            };
            Ok((coupon, r.get::<_, String>(1)?))
        },
    )
    .map_err(sql("coupons"))?;
    let coupons = coupon_rows
        .into_iter()
        .map(|(mut c, scope)| {
            c.scope = scope
                .parse()
                .map_err(|e: String| invalid(format!("coupon {}: {e}", c.id)))?;
            for (column, m) in [("threshold_cents", c.threshold), ("amount_cents", c.amount)] {
                if Money::checked_from_cents(m.cents()).is_none() {
                    return Err(invalid(format!(
                        "table `coupons`, coupon {}: `{column}` is {}, outside 0 to {}",
                        c.id,
                        m.cents(),
                        crate::money::MAX_CENTS
                    )));
                }
            }
            if c.amount == Money::ZERO {
                return Err(invalid(format!(
                    "table `coupons`, coupon {}: `amount_cents` is 0; a coupon takes something off",
                    c.id
                )));
            }
            Ok(c)
        })
        .collect::<Result<Vec<_>, WorldError>>()?;

    let sales = |table: &str| {
        all(
            conn,
            &format!("SELECT product, discount_pct, starts_at, ends_at FROM {table} ORDER BY pos"),
            |r| {
                Ok(FlashSale {
                    product: r.get(0)?,
                    discount_pct: r.get(1)?,
                    starts_at: r.get(2)?,
                    ends_at: r.get(3)?,
                })
            },
        )
        .map_err(sql(table))
    };
    let flash_sales = sales("flash_sales")?;
    let live_flash_sales = sales("live_flash_sales")?;
    for (table, list) in [
        ("flash_sales", &flash_sales),
        ("live_flash_sales", &live_flash_sales),
    ] {
        for (row, f) in list.iter().enumerate() {
            if !(1..=99).contains(&f.discount_pct) {
                return Err(invalid(format!(
                    "table `{table}`, row {} (product {}): `discount_pct` is {}, outside 1 to 99",
                    row + 1,
                    f.product,
                    f.discount_pct
                )));
            }
        }
    }

    let faq = all(
        conn,
        "SELECT topic, product, answer FROM faq ORDER BY pos",
        |r| {
            Ok(FaqEntry {
                topic: r.get(0)?,
                product: r.get(1)?,
                answer: r.get(2)?,
            })
        },
    )
    .map_err(sql("faq"))?;

    let pins = all(
        conn,
        "SELECT product, link, pinned_at FROM pins ORDER BY pos",
        |r| {
            Ok(Pin {
                product: r.get(0)?,
                link: r.get(1)?,
                pinned_at: r.get(2)?,
            })
        },
    )
    .map_err(sql("pins"))?;

    let catalog = Catalog {
        stream,
        products,
        regions,
        shipping,
        coupons,
        flash_sales,
        faq,
    };
    Ok((
        catalog,
        LiveState {
            on_stage,
            pins,
            live_flash_sales,
        },
    ))
}
