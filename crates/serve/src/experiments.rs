//! Live A/B experiments on real traffic: arms are harness versions of this server, each with
//! the server's own model or one of the models it was started with for arms (`hat serve
//! --arm-model NAME=MODEL`), viewers (or whole streams) are assigned by the stable hash of
//! `hat_ab::assign`, the reply a viewer gets comes from their arm's harness, and the platform
//! posts outcome events (item-page view, add to cart, purchase with its amount, a compliance
//! incident its moderation found) that are attributed to the arm that served the viewer; the
//! server itself counts the replies whose draft broke a rule and was caught by the hooks. Everything is kept in SQLite
//! (`<data_dir>/experiments.sqlite`) and reported with `hat_ab::stats` (Welch, bootstrap and
//! the always-valid interval that decides significance, so the console may be refreshed at
//! will).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use hat_ab::config::{check_levels, check_weight, valid_name};
use hat_ab::report::per_unit;
use hat_ab::stats::{compare, CompareConfig};
use hat_ab::Unit;

use crate::error::{Result, ServeError};
use crate::harnesses::{Harnesses, Version};

/// Most arms, most outcome events in one request.
pub const MAX_ARMS: usize = 16;
pub const MAX_OUTCOMES_PER_REQUEST: usize = 1000;
/// Largest purchase amount accepted.
pub const MAX_AMOUNT: f64 = 1e9;
/// Most viewers a running experiment remembers as exposed (a few MB); see [`Running`].
const EXPOSED_CACHE: usize = if cfg!(test) { 64 } else { 100_000 };

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArmDef {
    pub name: String,
    /// A harness version's hash, or a unique prefix of at least 8 characters.
    pub harness: String,
    /// A model the server was started with for arms (`--arm-model NAME=MODEL`); absent: the
    /// server's own model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default = "one")]
    pub weight: f64,
}

fn one() -> f64 {
    1.0
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentDef {
    pub name: String,
    #[serde(default)]
    pub seed: u64,
    #[serde(default = "viewer")]
    pub unit: Unit,
    #[serde(default = "alpha")]
    pub alpha: f64,
    #[serde(default = "mixture_sd")]
    pub mixture_sd: f64,
    pub arms: Vec<ArmDef>,
}

fn viewer() -> Unit {
    Unit::Viewer
}
fn alpha() -> f64 {
    0.05
}
fn mixture_sd() -> f64 {
    0.2
}

impl ExperimentDef {
    fn check(&self) -> Result<()> {
        let bad = |f: &str, m: String| Err(ServeError::bad(f, m));
        if !valid_name(&self.name) {
            return bad("name", "1 to 64 letters, digits, `-`, `_` or `.`".into());
        }
        if self.arms.len() < 2 || self.arms.len() > MAX_ARMS {
            return bad(
                "arms",
                format!("2 to {MAX_ARMS} arms, not {}", self.arms.len()),
            );
        }
        for (i, a) in self.arms.iter().enumerate() {
            if !valid_name(&a.name) || self.arms[..i].iter().any(|b| b.name == a.name) {
                return bad(
                    &format!("arms[{i}].name"),
                    "a unique name of 1 to 64 letters, digits, `-`, `_` or `.`".into(),
                );
            }
            check_weight(a.weight).map_err(|m| ServeError::bad(format!("arms[{i}].weight"), m))?;
        }
        check_levels(self.alpha, self.mixture_sd).map_err(|(f, m)| ServeError::bad(f, m))
    }
}

/// The running experiment with its arms' harness versions resolved.
pub struct Running {
    pub def: ExperimentDef,
    pub versions: Vec<Arc<Version>>,
    /// Each arm's model: 0 is the server's own, then the `--arm-model`s in order.
    pub models: Vec<usize>,
    /// (arm, viewer) pairs whose exposure is recorded, so repeat events skip the database.
    /// Keyed by arm too: with `unit = "stream"` a viewer can be served by two arms (on two
    /// streams), and the second must reach the database to be noticed. Only a cache: the
    /// table's `INSERT OR IGNORE` keeps the first exposure, so the set is emptied when it
    /// reaches [`EXPOSED_CACHE`] rather than grow with every viewer the experiment serves.
    exposed: Mutex<std::collections::HashSet<(usize, String)>>,
}

impl Running {
    /// The arm serving `viewer` on `stream`.
    pub fn arm_of(&self, viewer: &str, stream: &str) -> usize {
        let key = match self.def.unit {
            Unit::Viewer => viewer,
            Unit::Stream => stream,
        };
        let w: Vec<f64> = self.def.arms.iter().map(|a| a.weight).collect();
        hat_ab::assign::assign(key, self.def.seed, &w)
    }
}

/// What an outcome event says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeKind {
    PageView,
    AddToCart,
    Purchase,
    /// The platform's moderation flagged a reply this viewer got.
    Incident,
}

impl OutcomeKind {
    fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::PageView => "page_view",
            OutcomeKind::AddToCart => "add_to_cart",
            OutcomeKind::Purchase => "purchase",
            OutcomeKind::Incident => "incident",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    pub viewer: String,
    #[serde(rename = "type")]
    pub kind: OutcomeKind,
    /// What a purchase paid.
    #[serde(default)]
    pub amount: Option<f64>,
}

pub struct Experiments {
    /// The writer: exposures and replies from the engine worker, outcomes, starts and stops.
    db: Mutex<Connection>,
    /// A read-only connection for reports and lists: their full scans read a WAL snapshot
    /// beside the writer instead of holding its lock, which stalled the engine worker's
    /// next exposure or reply (and so every stream) for as long as a console refresh took.
    reader: Mutex<Connection>,
    running: RwLock<Option<Arc<Running>>>,
    /// The names of the models arms may use; the first is the server's own.
    models: Vec<String>,
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn db_err(e: rusqlite::Error) -> ServeError {
    ServeError::internal("the experiments database", e)
}

impl Experiments {
    /// Opens (or creates) the store. An experiment left running by an earlier server is
    /// stopped when its arms' harness versions or models are not loaded in this one. `models`
    /// names the models arms may use, the server's own first.
    pub fn open(
        data_dir: &Path,
        harnesses: &Harnesses,
        models: Vec<String>,
    ) -> Result<Experiments> {
        let path = data_dir.join("experiments.sqlite");
        let db = Connection::open(&path)
            .map_err(|e| ServeError::internal(format!("opening {}", path.display()), e))?;
        // WAL with normal sync: exposures and replies are written from the engine worker's
        // thread, which must not wait for a full sync per reply.
        db.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;
             CREATE TABLE IF NOT EXISTS experiments (name TEXT PRIMARY KEY, def TEXT NOT NULL,
                started_at REAL NOT NULL, stopped_at REAL, note TEXT);
             CREATE TABLE IF NOT EXISTS exposures (experiment TEXT NOT NULL, viewer TEXT NOT NULL,
                stream TEXT NOT NULL, arm INTEGER NOT NULL, at REAL NOT NULL,
                PRIMARY KEY (experiment, viewer));
             CREATE TABLE IF NOT EXISTS replies (experiment TEXT NOT NULL, viewer TEXT NOT NULL,
                arm INTEGER NOT NULL, latency REAL NOT NULL, at REAL NOT NULL,
                caught INTEGER NOT NULL DEFAULT 0);
             CREATE TABLE IF NOT EXISTS outcomes (experiment TEXT NOT NULL, viewer TEXT NOT NULL,
                arm INTEGER NOT NULL, kind TEXT NOT NULL, amount REAL NOT NULL, at REAL NOT NULL);
             CREATE TABLE IF NOT EXISTS crossed (experiment TEXT NOT NULL, viewer TEXT NOT NULL,
                PRIMARY KEY (experiment, viewer));
             -- reports read one experiment's rows: without these every report scans the
             -- rows of every experiment ever run
             CREATE INDEX IF NOT EXISTS replies_by_experiment ON replies (experiment);
             CREATE INDEX IF NOT EXISTS outcomes_by_experiment ON outcomes (experiment);",
        )
        .map_err(db_err)?;
        // a store from before `caught` existed
        let has_caught: bool = db
            .prepare("SELECT 1 FROM pragma_table_info('replies') WHERE name = 'caught'")
            .and_then(|mut st| st.exists([]))
            .map_err(db_err)?;
        if !has_caught {
            db.execute_batch("ALTER TABLE replies ADD COLUMN caught INTEGER NOT NULL DEFAULT 0")
                .map_err(db_err)?;
        }
        // opened after the schema exists (a read-only connection cannot create it)
        let reader = Connection::open_with_flags(
            &path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| ServeError::internal(format!("opening {} to read", path.display()), e))?;
        let ex = Experiments {
            db: Mutex::new(db),
            reader: Mutex::new(reader),
            running: RwLock::new(None),
            models,
        };
        // Newest first: one experiment runs at a time, but a store written by a server that
        // let two starts race (or edited by hand) can hold several unstopped ones. The newest
        // is resumed; the others are stopped, so `stop` and the report agree on which runs.
        let left: Vec<(String, String)> = {
            let db = ex.db();
            let mut st = db
                .prepare(
                    "SELECT name, def FROM experiments WHERE stopped_at IS NULL
                     ORDER BY started_at DESC, rowid DESC",
                )
                .map_err(db_err)?;
            let rows = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(db_err)?;
            rows.collect::<std::result::Result<_, _>>()
                .map_err(db_err)?
        };
        if let Some((name, def)) = left.first() {
            let resolved = serde_json::from_str::<ExperimentDef>(def)
                .ok()
                .and_then(|d| ex.resolve(&d, harnesses).ok().map(|v| (d, v)));
            match resolved {
                Some((def, (versions, models))) => {
                    *ex.running.write().unwrap_or_else(|e| e.into_inner()) =
                        Some(Arc::new(Running {
                            def,
                            versions,
                            models,
                            exposed: Mutex::default(),
                        }))
                }
                None => ex.mark_stopped(
                    name,
                    "stopped at a restart: its arms' harness versions or models were not loaded",
                )?,
            }
        }
        for (older, _) in left.iter().skip(1) {
            let newest = &left[0].0;
            tracing::warn!(
                experiment = %older,
                resumed = %newest,
                "several experiments were left running; stopping all but the newest"
            );
            ex.mark_stopped(
                older,
                &format!(
                    "stopped at a restart: experiment `{newest}` was also left running and is                      newer; one experiment runs at a time"
                ),
            )?;
        }
        Ok(ex)
    }

    fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn reader(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.reader.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn running(&self) -> Option<Arc<Running>> {
        self.running
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Starts an experiment (one runs at a time).
    pub fn start(&self, mut def: ExperimentDef, harnesses: &Harnesses) -> Result<Value> {
        def.check()?;
        // The write lock is held from the check to the set: two concurrent starts both passed
        // the check before either set `running`, so both were recorded as running, the first
        // could never be stopped, and a restart resumed either.
        let mut running = self.running.write().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = running.as_ref() {
            return Err(ServeError::bad(
                "name",
                format!(
                    "experiment `{}` is running; stop it first (POST /v1/experiments/{}/stop)",
                    r.def.name, r.def.name
                ),
            ));
        }
        let (versions, models) = self.resolve(&def, harnesses)?;
        for (a, v) in def.arms.iter_mut().zip(&versions) {
            a.harness = v.hash().to_string();
        }
        let text = serde_json::to_string(&def).expect("definitions serialise");
        let inserted = self
            .db()
            .execute(
                "INSERT OR IGNORE INTO experiments (name, def, started_at) VALUES (?1, ?2, ?3)",
                params![def.name, text, now()],
            )
            .map_err(db_err)?;
        if inserted == 0 {
            return Err(ServeError::bad(
                "name",
                format!(
                    "an experiment named `{}` exists; choose another name",
                    def.name
                ),
            ));
        }
        let out = json!({"name": def.name, "arms": def.arms});
        *running = Some(Arc::new(Running {
            def,
            versions,
            models,
            exposed: Mutex::default(),
        }));
        Ok(out)
    }

    fn mark_stopped(&self, name: &str, note: &str) -> Result<()> {
        self.db()
            .execute(
                "UPDATE experiments SET stopped_at = ?2, note = ?3 WHERE name = ?1 AND stopped_at IS NULL",
                params![name, now(), note],
            )
            .map_err(db_err)?;
        Ok(())
    }

    /// Stops the running experiment `name`: new replies use the active harness again.
    pub fn stop(&self, name: &str) -> Result<()> {
        let mut g = self.running.write().unwrap_or_else(|e| e.into_inner());
        match g.as_ref() {
            Some(r) if r.def.name == name => {
                self.mark_stopped(name, "stopped by an operator")?;
                *g = None;
                Ok(())
            }
            _ => Err(ServeError::NotFound(format!(
                "no running experiment `{name}` (GET /v1/experiments lists them)"
            ))),
        }
    }

    /// Records that `viewer` on `stream` is served by `arm` (the first exposure counts). A
    /// viewer later served by another arm (with `unit = "stream"`, on a stream of the other
    /// arm) is recorded as crossed: the report leaves them out of every arm, since their
    /// outcomes cannot be told apart by arm.
    pub fn expose(&self, r: &Running, arm: usize, viewer: &str, stream: &str) {
        let key = (arm, viewer.to_string());
        let cached = r
            .exposed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&key);
        if cached {
            return;
        }
        let res: rusqlite::Result<()> = (|| {
            let db = self.db();
            let inserted = db.execute(
                "INSERT OR IGNORE INTO exposures (experiment, viewer, stream, arm, at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![r.def.name, viewer, stream, arm as i64, now()],
            )?;
            if inserted == 0 {
                let first: i64 = db.query_row(
                    "SELECT arm FROM exposures WHERE experiment = ?1 AND viewer = ?2",
                    params![r.def.name, viewer],
                    |row| row.get(0),
                )?;
                if first != arm as i64 {
                    db.execute(
                        "INSERT OR IGNORE INTO crossed (experiment, viewer) VALUES (?1, ?2)",
                        params![r.def.name, viewer],
                    )?;
                }
            }
            Ok(())
        })();
        match res {
            // Cached only once written: a viewer cached before a failed write was never
            // recorded, so their outcomes were refused until a restart.
            Ok(()) => {
                let mut set = r.exposed.lock().unwrap_or_else(|e| e.into_inner());
                if set.len() >= EXPOSED_CACHE {
                    set.clear();
                }
                set.insert(key);
            }
            Err(e) => tracing::error!(error = %e, "recording an exposure"),
        }
    }

    /// Records a reply: its latency, and whether the hooks caught a draft that broke a rule.
    pub fn reply(&self, experiment: &str, arm: usize, viewer: &str, latency: f64, caught: bool) {
        let res = self.db().execute(
            "INSERT INTO replies (experiment, viewer, arm, latency, at, caught) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![experiment, viewer, arm as i64, latency, now(), caught],
        );
        if let Err(e) = res {
            tracing::error!(error = %e, "recording a reply");
        }
    }

    /// Attributes outcome events to the arm that served each viewer. All or nothing: one
    /// event that cannot be attributed refuses the request.
    pub fn outcomes(&self, events: &[Outcome]) -> Result<Value> {
        let Some(r) = self.running() else {
            return Err(ServeError::bad(
                "events",
                "no experiment is running; outcomes are attributed to a running experiment",
            ));
        };
        if events.is_empty() || events.len() > MAX_OUTCOMES_PER_REQUEST {
            return Err(ServeError::bad(
                "events",
                format!("1 to {MAX_OUTCOMES_PER_REQUEST} events per request"),
            ));
        }
        let mut db = self.db();
        let tx = db.transaction().map_err(db_err)?;
        let mut by_arm: BTreeMap<String, usize> = BTreeMap::new();
        for (i, e) in events.iter().enumerate() {
            let amount = match (e.kind, e.amount) {
                (OutcomeKind::Purchase, Some(a))
                    if a.is_finite() && (0.0..=MAX_AMOUNT).contains(&a) =>
                {
                    a
                }
                (OutcomeKind::Purchase, _) => {
                    return Err(ServeError::bad(
                        format!("events[{i}].amount"),
                        format!("a purchase needs an amount from 0 to {MAX_AMOUNT}"),
                    ))
                }
                (_, None) => 0.0,
                (_, Some(_)) => {
                    return Err(ServeError::bad(
                        format!("events[{i}].amount"),
                        "only a purchase has an amount",
                    ))
                }
            };
            let arm: Option<i64> = tx
                .query_row(
                    "SELECT arm FROM exposures WHERE experiment = ?1 AND viewer = ?2",
                    params![r.def.name, e.viewer],
                    |row| row.get(0),
                )
                .optional()
                .map_err(db_err)?;
            let Some(arm) = arm else {
                return Err(ServeError::bad(
                    format!("events[{i}].viewer"),
                    format!(
                        "viewer `{}` has not been served by experiment `{}`; nothing was recorded",
                        hat_harness::text::truncate_chars(&e.viewer, 64),
                        r.def.name
                    ),
                ));
            };
            tx.execute(
                "INSERT INTO outcomes (experiment, viewer, arm, kind, amount, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![r.def.name, e.viewer, arm, e.kind.as_str(), amount, now()],
            )
            .map_err(db_err)?;
            *by_arm
                .entry(r.def.arms[arm as usize].name.clone())
                .or_default() += 1;
        }
        tx.commit().map_err(db_err)?;
        Ok(json!({"experiment": r.def.name, "recorded": events.len(), "by_arm": by_arm}))
    }

    /// Every experiment, newest first, each with its report.
    pub fn list(&self) -> Result<Value> {
        /// name, definition, started, stopped, note
        type Row = (String, String, f64, Option<f64>, Option<String>);
        let rows: Vec<Row> = {
            let db = self.reader();
            let mut st = db
                .prepare("SELECT name, def, started_at, stopped_at, note FROM experiments ORDER BY started_at DESC")
                .map_err(db_err)?;
            let it = st
                .query_map([], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })
                .map_err(db_err)?;
            it.collect::<std::result::Result<_, _>>().map_err(db_err)?
        };
        let running = self.running().map(|r| r.def.name.clone());
        let mut out = Vec::new();
        for (name, def, started, stopped, note) in rows {
            let Ok(def) = serde_json::from_str::<ExperimentDef>(&def) else {
                continue;
            };
            let report = self.report(&def)?;
            out.push(json!({
                "name": name, "definition": def, "started_at": started, "stopped_at": stopped,
                "note": note, "running": running.as_deref() == Some(name.as_str()), "report": report,
            }));
        }
        Ok(json!({"running": running, "models": self.models, "experiments": out}))
    }

    /// Per-unit metrics of every arm, and every arm against the control (the first).
    fn report(&self, def: &ExperimentDef) -> Result<Value> {
        #[derive(Default, Clone)]
        struct Viewer {
            stream: String,
            views: f64,
            cart: bool,
            bought: bool,
            gmv: f64,
            latency: (f64, usize),
            incidents: f64,
            caught: f64,
        }
        /// The exposed viewer a row (`viewer`, `arm`, ...) is about; rows of viewers never
        /// exposed are ignored.
        fn exposed<'a>(
            viewers: &'a mut [BTreeMap<String, Viewer>],
            r: &rusqlite::Row<'_>,
        ) -> rusqlite::Result<Option<&'a mut Viewer>> {
            let (v, a): (String, i64) = (r.get(0)?, r.get(1)?);
            Ok(usize::try_from(a)
                .ok()
                .and_then(|a| viewers.get_mut(a))
                .and_then(|m| m.get_mut(&v)))
        }
        let n_arms = def.arms.len();
        let mut viewers: Vec<BTreeMap<String, Viewer>> = vec![BTreeMap::new(); n_arms];
        let mut crossed = std::collections::BTreeSet::<String>::new();
        {
            let mut db = self.reader();
            // one snapshot for the four scans: rows written between them would count a viewer's
            // outcome without its exposure
            let db = db.transaction().map_err(db_err)?;
            each_row(
                &db,
                "SELECT viewer FROM crossed WHERE experiment = ?1",
                &def.name,
                |r| {
                    crossed.insert(r.get(0)?);
                    Ok(())
                },
            )?;
            each_row(
                &db,
                "SELECT viewer, stream, arm FROM exposures WHERE experiment = ?1",
                &def.name,
                |r| {
                    let viewer: String = r.get(0)?;
                    // served by two arms: neither arm's numbers may include them
                    if crossed.contains(&viewer) {
                        return Ok(());
                    }
                    if let Some(m) = viewers.get_mut(r.get::<_, i64>(2)? as usize) {
                        let stream = r.get(1)?;
                        m.insert(
                            viewer,
                            Viewer {
                                stream,
                                ..Viewer::default()
                            },
                        );
                    }
                    Ok(())
                },
            )?;
            each_row(
                &db,
                "SELECT viewer, arm, kind, amount FROM outcomes WHERE experiment = ?1",
                &def.name,
                |r| {
                    if let Some(x) = exposed(&mut viewers, r)? {
                        match r.get::<_, String>(2)?.as_str() {
                            "page_view" => x.views += 1.0,
                            "add_to_cart" => x.cart = true,
                            "incident" => x.incidents += 1.0,
                            _ => {
                                x.bought = true;
                                x.gmv += r.get::<_, f64>(3)?;
                            }
                        }
                    }
                    Ok(())
                },
            )?;
            each_row(
                &db,
                "SELECT viewer, arm, latency, caught FROM replies WHERE experiment = ?1",
                &def.name,
                |r| {
                    if let Some(x) = exposed(&mut viewers, r)? {
                        x.latency.0 += r.get::<_, f64>(2)?;
                        x.latency.1 += 1;
                        x.caught += f64::from(r.get::<_, bool>(3)? as u8);
                    }
                    Ok(())
                },
            )?;
        }
        type Metric = (&'static str, fn(&Viewer) -> Option<f64>);
        let metrics: [Metric; 7] = [
            ("gmv", |v| Some(v.gmv)),
            ("item_page_views", |v| Some(v.views)),
            ("add_to_cart", |v| Some(f64::from(v.cart as u8))),
            ("conversion", |v| Some(f64::from(v.bought as u8))),
            ("latency_s", |v| {
                (v.latency.1 > 0).then(|| v.latency.0 / v.latency.1 as f64)
            }),
            ("compliance_incidents", |v| Some(v.incidents)),
            ("caught_by_hooks", |v| Some(v.caught)),
        ];
        let units = |arm: &BTreeMap<String, Viewer>, f: fn(&Viewer) -> Option<f64>| {
            per_unit(
                def.unit,
                arm.values()
                    .filter_map(|v| f(v).map(|x| (v.stream.as_str(), x))),
            )
        };
        let arms: Vec<Value> = def
            .arms
            .iter()
            .zip(&viewers)
            .map(|(a, v)| {
                let model = a.model.as_deref().unwrap_or(&self.models[0]);
                json!({"name": a.name, "harness": a.harness, "model": model, "viewers": v.len()})
            })
            .collect();
        let mut rows = Vec::new();
        for (m, (name, f)) in metrics.iter().enumerate() {
            let values: Vec<Vec<f64>> = viewers.iter().map(|a| units(a, *f)).collect();
            let comparisons: Vec<Value> = (1..n_arms)
                .map(|b| {
                    let cfg = CompareConfig {
                        alpha: def.alpha,
                        mixture_sd: def.mixture_sd,
                        seed: def.seed ^ ((m as u64) << 32) ^ b as u64,
                    };
                    json!({"arm": def.arms[b].name, "comparison": compare(&values[0], &values[b], &cfg)})
                })
                .collect();
            rows.push(json!({"metric": name, "comparisons": comparisons}));
        }
        Ok(
            json!({"control": def.arms[0].name, "unit": def.unit, "alpha": def.alpha, "arms": arms,
                   "crossed_viewers": crossed.len(), "metrics": rows}),
        )
    }
}

/// Runs `sql` (one parameter: the experiment's name) and hands each row to `f`.
fn each_row(
    db: &Connection,
    sql: &str,
    name: &str,
    mut f: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<()>,
) -> Result<()> {
    let mut st = db.prepare(sql).map_err(db_err)?;
    let mut rows = st.query([name]).map_err(db_err)?;
    while let Some(r) = rows.next().map_err(db_err)? {
        f(r).map_err(db_err)?;
    }
    Ok(())
}

impl Experiments {
    /// The names of the models arms may use, the server's own first.
    pub fn models(&self) -> &[String] {
        &self.models
    }

    /// The arms' harness versions, from this server's history, and their models' indices.
    fn resolve(
        &self,
        def: &ExperimentDef,
        harnesses: &Harnesses,
    ) -> Result<(Vec<Arc<Version>>, Vec<usize>)> {
        let mut versions = Vec::new();
        let mut models = Vec::new();
        for (i, a) in def.arms.iter().enumerate() {
            versions.push(harnesses.find(&a.harness).map_err(|e| {
                ServeError::bad(
                    format!("arms[{i}].harness"),
                    format!(
                        "{e}; an arm's harness must be a version this server has loaded (GET /v1/harness lists them)"
                    ),
                )
            })?);
            let m = match a.model.as_deref() {
                None => 0,
                Some(name) => self.models.iter().position(|m| m == name).ok_or_else(|| {
                    ServeError::bad(
                        format!("arms[{i}].model"),
                        format!(
                            "no model `{}` in this server (it has: {}); start it with \
                             `--arm-model NAME=MODEL` for each model an arm should use",
                            hat_harness::text::truncate_chars(name, 64),
                            self.models.join(", ")
                        ),
                    )
                })?,
            };
            models.push(m);
        }
        Ok((versions, models))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn harnesses() -> Harnesses {
        let h = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream");
        Harnesses::new(crate::harnesses::load_dir(&h, "test".into()).unwrap())
    }

    fn def(name: &str, harness: &str, unit: Unit) -> ExperimentDef {
        let arm = |n: &str| ArmDef {
            name: n.into(),
            harness: harness.into(),
            model: None,
            weight: 1.0,
        };
        ExperimentDef {
            name: name.into(),
            seed: 1,
            unit,
            alpha: 0.05,
            mixture_sd: 0.2,
            arms: vec![arm("a"), arm("b")],
        }
    }

    /// Review finding: two concurrent starts with different names both passed the "one runs
    /// at a time" check; the first could then never be stopped. The test holds the database
    /// while the starts begin, which widens the window the old code raced in (a start that
    /// checked, then waited for the database); the outcome asserted does not depend on how
    /// the threads interleave.
    #[test]
    fn of_many_concurrent_starts_exactly_one_runs() {
        let dir = tempfile::tempdir().unwrap();
        let h = harnesses();
        let hash = h.active().hash().to_string();
        let ex = Experiments::open(dir.path(), &h, vec!["hat".into()]).unwrap();
        let n = 8;
        for round in 0..20 {
            let gate = std::sync::Barrier::new(n + 1);
            let started: Vec<String> = std::thread::scope(|s| {
                let db = ex.db();
                let hs: Vec<_> = (0..n)
                    .map(|i| {
                        let (ex, h, gate, hash) = (&ex, &h, &gate, &hash);
                        s.spawn(move || {
                            let name = format!("exp-{round}-{i}");
                            gate.wait();
                            ex.start(def(&name, hash, Unit::Viewer), h)
                                .ok()
                                .map(|_| name)
                        })
                    })
                    .collect();
                gate.wait();
                for _ in 0..100 {
                    std::thread::yield_now();
                }
                drop(db);
                hs.into_iter().filter_map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(started.len(), 1, "round {round}, started: {started:?}");
            let unstopped: i64 = ex
                .db()
                .query_row(
                    "SELECT COUNT(*) FROM experiments WHERE stopped_at IS NULL",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(unstopped, 1, "round {round}");
            assert_eq!(ex.running().unwrap().def.name, started[0]);
            ex.stop(&started[0]).unwrap();
            assert!(ex.running().is_none());
        }
    }

    /// A store in `dir` running experiment `e` (two arms of the active harness, by viewer).
    fn running_e(dir: &Path) -> (Experiments, Arc<Running>) {
        let h = harnesses();
        let hash = h.active().hash().to_string();
        let ex = Experiments::open(dir, &h, vec!["hat".into()]).unwrap();
        ex.start(def("e", &hash, Unit::Viewer), &h).unwrap();
        let r = ex.running().unwrap();
        (ex, r)
    }

    /// Review finding: a report (the console refreshes it) scanned every table under the
    /// writer's lock, so the engine worker's next exposure or reply waited for it. The report
    /// now reads on its own connection: it completes while the writer is held (here by the
    /// test, as a long write would), and sees what was committed before.
    #[test]
    fn a_report_reads_beside_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let (ex, r) = running_e(dir.path());
        ex.expose(&r, 0, "ann", "s1");
        ex.reply("e", 0, "ann", 1.5, false);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            // held inside the scope: a failing assertion releases it, so the scope can join
            let writer = ex.db();
            s.spawn(|| {
                let _ = tx.send(ex.list());
            });
            // a failure is a report that waits for the writer: given up after a minute
            let list = rx
                .recv_timeout(std::time::Duration::from_secs(60))
                .expect("the report waited for the writer's lock")
                .unwrap();
            drop(writer);
            let report = &list["experiments"][0]["report"];
            assert!(report.to_string().contains("1.5"), "{report}");
        });
    }

    fn exposures(ex: &Experiments, name: &str) -> i64 {
        ex.db()
            .query_row(
                "SELECT COUNT(*) FROM exposures WHERE experiment = ?1",
                [name],
                |r| r.get(0),
            )
            .unwrap()
    }

    /// Review finding: a viewer went into the exposed set before the database write; when the
    /// write failed, later events skipped it, so the viewer was never recorded and their
    /// outcomes were refused until a restart. The set also grew with every viewer.
    #[test]
    fn an_exposure_whose_write_failed_is_written_at_the_next_event_and_the_cache_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let (ex, r) = running_e(dir.path());
        // the write fails: the table is gone
        ex.db()
            .execute_batch("ALTER TABLE exposures RENAME TO exposures_away")
            .unwrap();
        ex.expose(&r, 0, "lily", "s1");
        ex.db()
            .execute_batch("ALTER TABLE exposures_away RENAME TO exposures")
            .unwrap();
        assert_eq!(exposures(&ex, "e"), 0);
        ex.expose(&r, 0, "lily", "s1");
        assert_eq!(
            exposures(&ex, "e"),
            1,
            "the next event records the exposure"
        );
        let out = ex
            .outcomes(&[Outcome {
                viewer: "lily".into(),
                kind: OutcomeKind::PageView,
                amount: None,
            }])
            .unwrap();
        assert_eq!(out["recorded"], 1);

        for i in 0..3 * EXPOSED_CACHE {
            ex.expose(&r, 1, &format!("v{i}"), "s1");
        }
        let cached = r.exposed.lock().unwrap().len();
        assert!(cached <= EXPOSED_CACHE, "{cached} viewers cached");
        assert_eq!(exposures(&ex, "e"), 1 + 3 * EXPOSED_CACHE as i64);
        // a viewer who fell out of the cache keeps their first exposure
        ex.expose(&r, 1, "lily", "s2");
        let arm: i64 = ex
            .db()
            .query_row("SELECT arm FROM exposures WHERE viewer = 'lily'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(arm, 0);
    }

    /// Review finding: with `unit = "stream"` a viewer served on streams of both arms had
    /// every outcome attributed to the first arm, and the other arm's replies dropped. Such a
    /// viewer is now left out of both arms and counted as crossed.
    #[test]
    fn a_viewer_served_by_two_arms_counts_in_neither() {
        let dir = tempfile::tempdir().unwrap();
        let h = harnesses();
        let hash = h.active().hash().to_string();
        let ex = Experiments::open(dir.path(), &h, vec!["hat".into()]).unwrap();
        ex.start(def("by-stream", &hash, Unit::Stream), &h).unwrap();
        let r = ex.running().unwrap();
        let stream_of = |arm: usize| {
            (0..)
                .map(|i| format!("s{i}"))
                .find(|s| r.arm_of("anyone", s) == arm)
                .unwrap()
        };
        let (s0, s1) = (stream_of(0), stream_of(1));
        for (viewer, stream) in [("lily", &s0), ("max", &s0), ("zoe", &s1), ("lily", &s1)] {
            let arm = r.arm_of(viewer, stream);
            ex.expose(&r, arm, viewer, stream);
            ex.reply("by-stream", arm, viewer, 1.0, false);
        }
        let purchase = |viewer: &str| Outcome {
            viewer: viewer.into(),
            kind: OutcomeKind::Purchase,
            amount: Some(100.0),
        };
        ex.outcomes(&[purchase("lily"), purchase("zoe")]).unwrap();
        let list = ex.list().unwrap();
        let report = &list["experiments"][0]["report"];
        assert_eq!(report["crossed_viewers"], 1, "{report}");
        assert_eq!(report["arms"][0]["viewers"], 1, "{report}");
        assert_eq!(report["arms"][1]["viewers"], 1, "{report}");
        let gmv = report["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["metric"] == "gmv")
            .unwrap()["comparisons"][0]["comparison"]
            .clone();
        assert_eq!(
            (gmv["mean_a"].as_f64(), gmv["mean_b"].as_f64()),
            (Some(0.0), Some(100.0))
        );
    }

    /// A store with two unstopped experiments (written before the start race was fixed)
    /// opens with the newest running and the other stopped, with a note saying why.
    #[test]
    fn a_store_with_two_running_experiments_resumes_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let h = harnesses();
        let hash = h.active().hash().to_string();
        {
            let ex = Experiments::open(dir.path(), &h, vec!["hat".into()]).unwrap();
            ex.start(def("older", &hash, Unit::Viewer), &h).unwrap();
            let text = serde_json::to_string(&def("newer", &hash, Unit::Viewer)).unwrap();
            ex.db()
                .execute(
                    "INSERT INTO experiments (name, def, started_at) VALUES ('newer', ?1, ?2)",
                    params![text, now() + 10.0],
                )
                .unwrap();
        }
        let ex = Experiments::open(dir.path(), &h, vec!["hat".into()]).unwrap();
        assert_eq!(ex.running().unwrap().def.name, "newer");
        let (stopped, note): (Option<f64>, Option<String>) = ex
            .db()
            .query_row(
                "SELECT stopped_at, note FROM experiments WHERE name = 'older'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert!(stopped.is_some());
        assert!(note.unwrap().contains("`newer`"));
        ex.stop("newer").unwrap();
    }
}
