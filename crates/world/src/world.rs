//! [`World`]: a catalog plus the SQLite database the operations run on.
//!
//! The static catalog is read once and indexed in memory (so a call costs a
//! hash lookup, not a query); the live state (product on stage, pins,
//! operator flash sales) exists only in SQL, so [`World::begin_episode`] /
//! [`World::end_episode`] can undo a task's changes with one savepoint and
//! nothing in memory goes stale.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use crate::catalog::{Catalog, Category, CouponScope, FlashSale, Pin, Product, StreamInfo};
use crate::error::{OpError, WorldError};
use crate::money::Money;
use crate::store::{self, LiveState};
use crate::stream::{OnStage, StateCoupon, StateFlashSale, StateProduct, StreamState};
use crate::time::Timestamp;

/// A live stream's store: catalog, database and indexes.
pub struct World {
    pub(crate) conn: Connection,
    pub(crate) catalog: Catalog,
    pub(crate) index: Index,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("stream", &self.catalog.stream.id)
            .finish_non_exhaustive()
    }
}

/// Lookups precomputed from the catalog.
pub(crate) struct Index {
    pub now: Timestamp,
    /// Upper-case product id -> position.
    pub products: HashMap<String, usize>,
    /// `P1..P10`, or the ids listed when they are not a run.
    pub known_products: String,
    /// Normalised region spelling (English, Chinese, alias) -> position.
    pub regions: HashMap<String, usize>,
    pub known_regions: String,
    /// (product, region) positions -> shipping rate position.
    pub shipping: HashMap<(usize, usize), usize>,
    /// Upper-case coupon id -> position.
    pub coupons: HashMap<String, usize>,
    pub known_coupons: String,
    pub coupon_expiry: Vec<Timestamp>,
    /// Per product: lowercase title words, keywords and category.
    pub search_words: Vec<HashSet<String>>,
    /// Per product: lowercase Chinese title, for CJK queries.
    pub title_zh: Vec<String>,
    /// Per product: scheduled sales as (discount, start, end).
    pub scheduled_sales: Vec<Vec<(u32, Timestamp, Timestamp)>>,
    /// (topic, product position or None) -> FAQ entry position.
    pub faq: HashMap<(String, Option<usize>), usize>,
}

/// Lowercase, without spaces, hyphens, underscores, dots or Chinese
/// administrative suffixes, so "hong-kong", "Hong Kong" and "香港特别行政区" meet.
pub(crate) fn normalise_region(s: &str) -> String {
    let mut t: String = s
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| !matches!(c, ' ' | '-' | '_' | '.'))
        .collect();
    for suffix in ["特别行政区", "维吾尔自治区", "自治区", "省", "市"] {
        if let Some(stripped) = t.strip_suffix(suffix) {
            if !stripped.is_empty() {
                t = stripped.to_string();
                break;
            }
        }
    }
    t
}

/// Splits text into lowercase search words (letters, digits and hyphens).
pub(crate) fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || c == '-'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// `P1..P10` when ids are a run, else the list.
fn id_list(ids: &[&str], prefix: char) -> String {
    if ids.is_empty() {
        return "none".into();
    }
    let run = ids
        .iter()
        .enumerate()
        .all(|(i, id)| *id == format!("{prefix}{}", i + 1));
    if run && ids.len() > 2 {
        format!("{}..{}", ids[0], ids[ids.len() - 1])
    } else {
        ids.join(", ")
    }
}

impl Index {
    fn build(cat: &Catalog) -> Index {
        let now = cat.now();
        let products = cat
            .products
            .iter()
            .enumerate()
            .map(|(i, p)| (p.id.to_ascii_uppercase(), i))
            .collect();
        let ids: Vec<&str> = cat.products.iter().map(|p| p.id.as_str()).collect();
        let mut regions = HashMap::new();
        for (i, r) in cat.regions.iter().enumerate() {
            regions.insert(normalise_region(&r.name), i);
            regions.insert(normalise_region(&r.name_zh), i);
            for alias in crate::names::region_aliases(&r.name) {
                regions.insert(normalise_region(alias), i);
            }
        }
        let known_regions = cat
            .regions
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let pos: HashMap<&str, usize> = cat
            .products
            .iter()
            .enumerate()
            .map(|(i, p)| (p.id.as_str(), i))
            .collect();
        let rpos: HashMap<&str, usize> = cat
            .regions
            .iter()
            .enumerate()
            .map(|(i, r)| (r.name.as_str(), i))
            .collect();
        let shipping = cat
            .shipping
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                Some((
                    (*pos.get(s.product.as_str())?, *rpos.get(s.region.as_str())?),
                    i,
                ))
            })
            .collect();
        let coupons = cat
            .coupons
            .iter()
            .enumerate()
            .map(|(i, c)| (c.id.to_ascii_uppercase(), i))
            .collect();
        let coupon_ids: Vec<&str> = cat.coupons.iter().map(|c| c.id.as_str()).collect();
        let coupon_expiry = cat
            .coupons
            .iter()
            .map(|c| Timestamp::parse(&c.expires_at).unwrap_or(Timestamp::local(1970, 1, 1, 8, 0)))
            .collect();
        let search_words = cat
            .products
            .iter()
            .map(|p| {
                let mut set: HashSet<String> = words(&p.title).collect();
                set.extend(p.keywords.iter().flat_map(|k| words(k)));
                set.insert(p.category.as_str().to_string());
                set
            })
            .collect();
        let title_zh = cat
            .products
            .iter()
            .map(|p| p.title_zh.to_lowercase())
            .collect();
        let mut scheduled_sales = vec![Vec::new(); cat.products.len()];
        for f in &cat.flash_sales {
            if let (Some(&i), Some(s), Some(e)) = (
                pos.get(f.product.as_str()),
                Timestamp::parse(&f.starts_at),
                Timestamp::parse(&f.ends_at),
            ) {
                scheduled_sales[i].push((f.discount_pct, s, e));
            }
        }
        let faq = cat
            .faq
            .iter()
            .enumerate()
            .map(|(i, e)| {
                (
                    (
                        e.topic.clone(),
                        e.product.as_deref().and_then(|p| pos.get(p).copied()),
                    ),
                    i,
                )
            })
            .collect();
        Index {
            now,
            products,
            known_products: id_list(&ids, 'P'),
            regions,
            known_regions,
            shipping,
            coupons,
            known_coupons: id_list(&coupon_ids, 'C'),
            coupon_expiry,
            search_words,
            title_zh,
            scheduled_sales,
            faq,
        }
    }
}

impl World {
    /// Generates stream `S-<seed>`; the same seed always gives the same world.
    pub fn generate(seed: u64) -> Result<World, WorldError> {
        World::from_catalog(Catalog::generate(seed))
    }

    /// Builds a world from a (possibly hand-edited) catalog. The product with
    /// the lowest link number starts on stage; nothing is pinned.
    pub fn from_catalog(catalog: Catalog) -> Result<World, WorldError> {
        let on_stage = catalog
            .products
            .iter()
            .min_by_key(|p| p.link)
            .map(|p| p.id.clone())
            .unwrap_or_default();
        let live = LiveState {
            on_stage,
            pins: Vec::new(),
            live_flash_sales: Vec::new(),
        };
        let origin = format!("catalog of stream {}", catalog.stream.id);
        World::build(catalog, live, origin)
    }

    fn build(catalog: Catalog, live: LiveState, origin: String) -> Result<World, WorldError> {
        catalog.validate().map_err(|detail| WorldError::Invalid {
            origin: origin.clone(),
            detail,
        })?;
        if catalog.product(&live.on_stage).is_none() {
            return Err(WorldError::Invalid {
                origin,
                detail: format!(
                    "the product on stage, \"{}\", is not in the products table",
                    live.on_stage
                ),
            });
        }
        let conn = Connection::open_in_memory()
            .map_err(WorldError::sql("opening an in-memory database"))?;
        conn.set_prepared_statement_cache_capacity(64);
        conn.execute_batch(store::SCHEMA)
            .map_err(WorldError::sql("creating the schema"))?;
        store::load(&conn, &catalog, &live)
            .map_err(WorldError::sql(format!("loading the {origin}")))?;
        let index = Index::build(&catalog);
        Ok(World {
            conn,
            catalog,
            index,
        })
    }

    /// Loads a world file written by [`World::save`] (or edited by an
    /// operator in SQLite: the tables are read afresh, so edits show).
    pub fn open(path: impl AsRef<Path>) -> Result<World, WorldError> {
        let path = path.as_ref();
        if !path.is_file() {
            return Err(WorldError::NotFound {
                path: path.to_path_buf(),
            });
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let src =
            Connection::open_with_flags(path, flags).map_err(|e| match e.sqlite_error_code() {
                Some(rusqlite::ErrorCode::NotADatabase) => WorldError::NotSqlite {
                    path: path.to_path_buf(),
                },
                _ => WorldError::Sqlite {
                    context: format!("opening {}", path.display()),
                    source: e,
                },
            })?;
        let (catalog, live) = store::read(&src, path)?;
        World::build(catalog, live, path.display().to_string())
    }

    /// Writes the world (catalog and live state) to `path` as an SQLite file.
    /// The file is written beside the target and renamed over it, so a failure
    /// never leaves a half-written world; an existing file is replaced.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), WorldError> {
        if !self.conn.is_autocommit() {
            return Err(WorldError::EpisodeOpen);
        }
        let path = path.as_ref();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "world".into());
        let tmp: PathBuf = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
        let tmp_str = tmp.to_str().ok_or_else(|| WorldError::NonUtf8Path {
            path: path.to_path_buf(),
        })?;
        remove_if_present(&tmp)?;
        if let Err(source) = self.conn.execute("VACUUM INTO ?1", [tmp_str]) {
            let _ = std::fs::remove_file(&tmp);
            return Err(WorldError::Sqlite {
                context: format!("writing {}", tmp.display()),
                source,
            });
        }
        std::fs::rename(&tmp, path).map_err(|source| {
            let _ = std::fs::remove_file(&tmp);
            WorldError::Io {
                action: "replace",
                path: path.to_path_buf(),
                source,
            }
        })
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    pub fn stream(&self) -> &StreamInfo {
        &self.catalog.stream
    }

    /// The stream's clock.
    pub fn now(&self) -> Timestamp {
        self.index.now
    }

    /// Starts an episode: everything the world changes from here can be undone by [`World::end_episode`].
    pub fn begin_episode(&self) -> Result<(), WorldError> {
        self.conn
            .execute_batch("SAVEPOINT episode")
            .map_err(WorldError::sql("starting an episode"))
    }

    /// Undoes every change since the matching [`World::begin_episode`].
    pub fn end_episode(&self) -> Result<(), WorldError> {
        if self.conn.is_autocommit() {
            return Err(WorldError::NoEpisode);
        }
        self.conn
            .execute_batch("ROLLBACK TO episode; RELEASE episode")
            .map_err(WorldError::sql("rolling back an episode"))
    }

    /// Keeps every change since the matching [`World::begin_episode`] (a live stream).
    pub fn commit_episode(&self) -> Result<(), WorldError> {
        if self.conn.is_autocommit() {
            return Err(WorldError::NoEpisode);
        }
        self.conn
            .execute_batch("RELEASE episode")
            .map_err(WorldError::sql("keeping an episode's changes"))
    }

    /// The product on stage now.
    pub fn on_stage(&self) -> Result<&Product, WorldError> {
        let id: String = self
            .conn
            .prepare_cached("SELECT on_stage FROM stream")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .map_err(WorldError::sql("reading the product on stage"))?;
        self.catalog
            .product(&id)
            .ok_or_else(|| WorldError::Invalid {
                origin: "the live state".into(),
                detail: format!("the product on stage, \"{id}\", is not in the catalog"),
            })
    }

    /// Puts a product on stage (undone by [`World::end_episode`] when inside an episode).
    pub fn set_on_stage(&self, product: &str) -> Result<(), OpError> {
        let p = self.product_by_id(product)?;
        self.conn
            .prepare_cached("UPDATE stream SET on_stage = ?1")?
            .execute([&p.id])?;
        Ok(())
    }

    /// Pins recorded by the `pin` operation, oldest first.
    pub fn pins(&self) -> Result<Vec<Pin>, WorldError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT product, link, pinned_at FROM pins ORDER BY pos")
            .map_err(WorldError::sql("reading pins"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(Pin {
                    product: r.get(0)?,
                    link: r.get(1)?,
                    pinned_at: r.get(2)?,
                })
            })
            .map_err(WorldError::sql("reading pins"))?;
        rows.collect::<Result<_, _>>()
            .map_err(WorldError::sql("reading pins"))
    }

    /// Flash sales started by the `flash_sale` operation, oldest first.
    pub fn live_flash_sales(&self) -> Result<Vec<FlashSale>, WorldError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT product, discount_pct, starts_at, ends_at FROM live_flash_sales ORDER BY pos")
            .map_err(WorldError::sql("reading live flash sales"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(FlashSale {
                    product: r.get(0)?,
                    discount_pct: r.get(1)?,
                    starts_at: r.get(2)?,
                    ends_at: r.get(3)?,
                })
            })
            .map_err(WorldError::sql("reading live flash sales"))?;
        rows.collect::<Result<_, _>>()
            .map_err(WorldError::sql("reading live flash sales"))
    }

    /// Every flash sale running now on `product`, scheduled and live, as discount percentages.
    pub(crate) fn active_discounts(
        &self,
        product: usize,
    ) -> Result<Vec<(u32, Timestamp)>, OpError> {
        let now = self.index.now;
        let mut out: Vec<(u32, Timestamp)> = self.index.scheduled_sales[product]
            .iter()
            .filter(|(_, s, e)| *s <= now && now < *e)
            .map(|(pct, _, e)| (*pct, *e))
            .collect();
        let mut stmt = self.conn.prepare_cached(
            "SELECT discount_pct, starts_at, ends_at FROM live_flash_sales WHERE product = ?1",
        )?;
        let mut rows = stmt.query([&self.catalog.products[product].id])?;
        while let Some(r) = rows.next()? {
            let pct: u32 = r.get(0)?;
            let (s, e): (String, String) = (r.get(1)?, r.get(2)?);
            if let (Some(s), Some(e)) = (Timestamp::parse(&s), Timestamp::parse(&e)) {
                if s <= now && now < e {
                    out.push((pct, e));
                }
            }
        }
        Ok(out)
    }

    /// The price a buyer pays per unit now: the lowest running sale price, else the price.
    pub(crate) fn unit_price(&self, product: usize) -> Result<Money, OpError> {
        let p = &self.catalog.products[product];
        Ok(self
            .active_discounts(product)?
            .into_iter()
            .map(|(pct, _)| p.price.percent_off(pct))
            .fold(p.price, Money::min))
    }

    /// The snapshot a prompt renders. See [`World::try_stream_state`]; this
    /// never fails: if SQLite itself fails it falls back to the catalog alone
    /// (first product on stage, no live sales).
    pub fn stream_state(&self) -> StreamState {
        self.try_stream_state()
            .unwrap_or_else(|_| self.static_state(&self.catalog.products[0], Vec::new()))
    }

    pub fn try_stream_state(&self) -> Result<StreamState, WorldError> {
        let stage = self.on_stage()?;
        let mut sales = Vec::new();
        for (i, p) in self.catalog.products.iter().enumerate() {
            for (pct, ends) in self.active_discounts(i).map_err(|e| WorldError::Invalid {
                origin: "the live state".into(),
                detail: e.to_string(),
            })? {
                sales.push(StateFlashSale {
                    product: p.id.clone(),
                    discount_pct: pct,
                    sale_price: p.price.percent_off(pct),
                    ends_at: ends.to_string(),
                });
            }
        }
        Ok(self.static_state(stage, sales))
    }

    fn static_state(&self, stage: &Product, flash_sales: Vec<StateFlashSale>) -> StreamState {
        let cat = &self.catalog;
        StreamState {
            stream_id: cat.stream.id.clone(),
            title: cat.stream.title.clone(),
            host: cat.stream.host.clone(),
            now: cat.stream.now.clone(),
            currency: cat.stream.currency.clone(),
            on_stage: OnStage {
                id: stage.id.clone(),
                title: stage.title.clone(),
                link: stage.link,
                price: stage.price,
            },
            products: cat
                .products
                .iter()
                .map(|p| StateProduct {
                    id: p.id.clone(),
                    title: p.title.clone(),
                    category: p.category,
                    price: p.price,
                    list_price: p.list_price,
                    link: p.link,
                })
                .collect(),
            coupons: cat
                .usable_coupons()
                .map(|c| StateCoupon {
                    id: c.id.clone(),
                    scope: c.scope.to_string(),
                    threshold: c.threshold,
                    amount: c.amount,
                    expires_at: c.expires_at.clone(),
                })
                .collect(),
            flash_sales,
        }
    }

    /// A readable multi-line overview, for `hat world show`.
    pub fn summary(&self) -> String {
        let cat = &self.catalog;
        let s = &cat.stream;
        let now = self.index.now;
        let mut out = String::new();
        let _ = writeln!(out, "Stream {} \"{}\" hosted by {}", s.id, s.title, s.host);
        let _ = writeln!(
            out,
            "  started {}, now {} ({} {})",
            s.started_at, s.now, s.currency, s.currency_symbol
        );
        if let Ok(p) = self.on_stage() {
            let _ = writeln!(out, "  on stage: {} {} (link {})", p.id, p.title, p.link);
        }
        let by_cat: Vec<String> = Category::ALL
            .iter()
            .filter_map(|c| {
                let n = cat.products.iter().filter(|p| p.category == *c).count();
                (n > 0).then(|| format!("{c} {n}"))
            })
            .collect();
        let _ = writeln!(
            out,
            "\nProducts ({}): {}",
            cat.products.len(),
            by_cat.join(", ")
        );
        for p in &cat.products {
            let sold_out = p.variants.iter().filter(|v| v.stock == 0).count();
            let _ =
                writeln!(
                out,
                "  {:<4} link {:<3} {:<28} {:<12} ¥{:<8} list ¥{:<8} {} variant{}, {} in stock{}",
                p.id,
                p.link,
                p.title,
                p.category.as_str(),
                p.price.to_string(),
                p.list_price.to_string(),
                p.variants.len(),
                if p.variants.len() == 1 { "" } else { "s" },
                p.total_stock(),
                if sold_out > 0 { format!(" ({sold_out} sold out)") } else { String::new() }
            );
        }
        let usable = cat.usable_coupons().count();
        let _ = writeln!(
            out,
            "\nCoupons ({}, {usable} usable now):",
            cat.coupons.len()
        );
        for c in &cat.coupons {
            let state = if c.remaining == 0 {
                "used up"
            } else if !c.usable_at(now) {
                "expired"
            } else {
                "usable"
            };
            let scope = match &c.scope {
                CouponScope::Store => "store-wide".to_string(),
                other => other.to_string(),
            };
            let spend = if c.threshold == Money::ZERO {
                "no minimum".to_string()
            } else {
                format!("on ¥{}+", c.threshold)
            };
            let _ = writeln!(
                out,
                "  {:<3} {:<20} ¥{} off {:<14} {:>4} left, expires {} ({state})",
                c.id, scope, c.amount, spend, c.remaining, c.expires_at
            );
        }
        let _ = writeln!(out, "\nFlash sales ({} scheduled):", cat.flash_sales.len());
        for f in &cat.flash_sales {
            let state = if f.active_at(now) {
                "running now"
            } else if Timestamp::parse(&f.starts_at).is_some_and(|t| t > now) {
                "upcoming"
            } else {
                "ended"
            };
            let (a, b) = (
                Timestamp::parse(&f.starts_at)
                    .map(|t| t.clock())
                    .unwrap_or_default(),
                Timestamp::parse(&f.ends_at)
                    .map(|t| t.clock())
                    .unwrap_or_default(),
            );
            let _ = writeln!(
                out,
                "  {} -{}% {a}-{b} ({state})",
                f.product, f.discount_pct
            );
        }
        if let Ok(live) = self.live_flash_sales() {
            for f in live {
                let _ = writeln!(
                    out,
                    "  {} -{}% until {} (started by operator)",
                    f.product, f.discount_pct, f.ends_at
                );
            }
        }
        let regions: Vec<String> = cat
            .regions
            .iter()
            .map(|r| {
                if r.remote {
                    format!("{} (remote)", r.name)
                } else {
                    r.name.clone()
                }
            })
            .collect();
        let _ = writeln!(
            out,
            "\nRegions ({}): {}",
            cat.regions.len(),
            regions.join(", ")
        );
        let store_faq = cat.faq.iter().filter(|f| f.product.is_none()).count();
        let _ = write!(
            out,
            "FAQ: {} entries ({store_faq} store-wide, {} per product)",
            cat.faq.len(),
            cat.faq.len() - store_faq
        );
        out
    }
}

fn remove_if_present(path: &Path) -> Result<(), WorldError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(WorldError::Io {
            action: "remove stale temporary file",
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
#[path = "world_tests.rs"]
mod tests;
