//! Live harness updates: show the versions, swap in a new one (a server-side folder or an
//! uploaded zip), roll back, and watch the `--harness` folder.

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::api::{body, parse};
use crate::app::App;
use crate::error::{Result, ServeError};
use crate::harnesses::{fingerprint, load_dir, unpack_zip, Version};

pub async fn show(State(app): State<Arc<App>>) -> Json<Value> {
    let (versions, rejected) = app.harnesses.list();
    let active = app.harnesses.active();
    Json(json!({
        "active": active.hash(),
        "versions": versions,
        "last_rejected": rejected,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathRequest {
    /// A harness folder on the server.
    path: PathBuf,
}

/// Runs the regression gate (when the server has one) on a loaded version.
async fn gated(app: &App, loaded: Result<Version>) -> Result<Version> {
    let v = loaded?;
    let Some(gate) = app.cfg.gate.clone() else {
        return Ok(v);
    };
    let active = app.harnesses.active();
    if active.hash() == v.hash() {
        return Ok(v);
    }
    let (Some(new), Some(old)) = (v.harness.root.clone(), active.harness.root.clone()) else {
        return Ok(v);
    };
    let verdict = tokio::task::spawn_blocking(move || gate.0.check(&new, &old))
        .await
        .map_err(|e| ServeError::internal("the regression gate", e))?;
    match verdict {
        Ok(report) => {
            tracing::info!(%report, "gate passed");
            Ok(v)
        }
        Err(report) => Err(ServeError::GateFailed(report)),
    }
}

/// Checks a loaded version and makes it active, or records why not.
fn activate(app: &App, loaded: Result<Version>, source: &str) -> Result<Json<Value>> {
    match loaded {
        Ok(v) => {
            let hash = v.hash().to_string();
            let summary = v.harness.summary();
            let changed = app.harnesses.activate(v);
            app.metrics.set_harness(&hash);
            tracing::info!(harness = %hash, %source, changed, "harness activated");
            Ok(Json(
                json!({"active": hash, "changed": changed, "summary": summary}),
            ))
        }
        Err(ServeError::InvalidHarness(problems)) => {
            app.harnesses.reject(source.to_string(), &problems);
            tracing::warn!(%source, problems = problems.len(), "harness rejected");
            Err(ServeError::InvalidHarness(problems))
        }
        Err(ServeError::GateFailed(report)) => {
            app.harnesses.reject(
                source.to_string(),
                &[hat_harness::Problem::new("(gate)", None, report.clone())],
            );
            tracing::warn!(%source, "harness refused by the gate");
            Err(ServeError::GateFailed(report))
        }
        Err(e) => Err(e),
    }
}

/// Without an API key, an uploaded harness may not run programs: whoever can reach the API
/// would run code on the server. Command hooks then come from folders on the server
/// (`{"path"}`), which only its operators can write.
fn no_commands_in_uploads(v: Version) -> Result<Version> {
    let commands: Vec<&str> = v
        .harness
        .hooks
        .iter()
        .filter(|h| matches!(h.action, hat_harness::hooks::Action::Command { .. }))
        .map(|h| h.id.as_str())
        .collect();
    if commands.is_empty() {
        return Ok(v);
    }
    Err(ServeError::bad(
        "archive",
        format!(
            "this server has no API key, so uploaded harnesses cannot run command hooks ({}); \
             start hat serve with --server-api-key-env so only operators can upload, or put \
             the harness in a folder on the server and activate it with {{\"path\": ...}}",
            commands.join(", ")
        ),
    ))
}

/// `POST /v1/harness`: `{"path": DIR}` for a folder on the server, or a zip archive of the
/// folder as the body (`Content-Type: application/zip`). Validated like `hat harness
/// check`; an invalid harness changes nothing (422 with its problems).
pub async fn upload(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    b: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let b = body(b)?;
    let ctype = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let zip = ctype.starts_with("application/zip") || b.starts_with(b"PK\x03\x04");
    let root = app.cfg.data_dir.join("harnesses");
    let trusted = app.cfg.api_key.is_some();
    let (loaded, source) = if zip {
        let (loaded, source) =
            tokio::task::spawn_blocking(move || match unpack_zip(&b, &root, trusted) {
                Ok((dir, source)) => {
                    let loaded = load_dir(&dir, source.clone()).and_then(|v| {
                        if trusted {
                            Ok(v)
                        } else {
                            no_commands_in_uploads(v)
                        }
                    });
                    if loaded.is_err() {
                        // a refused upload leaves nothing behind on the server's disk
                        let _ = std::fs::remove_dir_all(&dir);
                    }
                    (loaded, source)
                }
                Err(e) => (Err(e), "upload".to_string()),
            })
            .await
            .map_err(|e| ServeError::internal("loading the harness", e))?;
        (loaded, source)
    } else {
        let r: PathRequest = parse(&b)?;
        let allowed = std::iter::once(&app.cfg.data_dir)
            .chain(&app.cfg.harness_roots)
            .filter_map(|d| d.canonicalize().ok())
            .collect::<Vec<_>>();
        // One answer for a missing folder and a forbidden one: a client learns nothing about
        // folders outside the allowed ones.
        let inside = r
            .path
            .canonicalize()
            .ok()
            .filter(|p| p.is_dir() && allowed.iter().any(|a| p.starts_with(a)));
        let Some(path) = inside else {
            return Err(ServeError::bad(
                "path",
                format!(
                    "{} is not a harness folder this server may load: harnesses are activated \
                     from folders under its --data-dir or beside its --harness; upload others \
                     as a zip archive",
                    r.path.display()
                ),
            ));
        };
        let r = PathRequest { path };
        let source = r.path.display().to_string();
        let s = source.clone();
        let loaded = tokio::task::spawn_blocking(move || load_dir(&r.path, s))
            .await
            .map_err(|e| ServeError::internal("loading the harness", e))?;
        (loaded, source)
    };
    let loaded = gated(&app, loaded).await;
    activate(&app, loaded, &source)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RollbackRequest {
    /// A version's hash, or a unique prefix of at least 8 characters.
    hash: String,
}

/// `POST /v1/harness/rollback {"hash": ...}`: makes an earlier version active again.
pub async fn rollback(
    State(app): State<Arc<App>>,
    b: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let r: RollbackRequest = parse(&body(b)?)?;
    let v = app.harnesses.rollback(&r.hash)?;
    app.metrics.set_harness(v.hash());
    tracing::info!(harness = %v.hash(), "rolled back");
    Ok(Json(
        json!({"active": v.hash(), "summary": v.harness.summary()}),
    ))
}

/// Watches a harness folder: when its files change and then hold still for one interval,
/// the folder is loaded and, if valid and different, swapped in.
pub async fn watch(app: Arc<App>, dir: PathBuf) {
    let every = app.cfg.watch_interval;
    let fp = |d: PathBuf| async move {
        tokio::task::spawn_blocking(move || fingerprint(&d))
            .await
            .unwrap_or(0)
    };
    let mut seen = fp(dir.clone()).await;
    loop {
        tokio::time::sleep(every).await;
        if app.stop.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let now = fp(dir.clone()).await;
        if now == seen {
            continue;
        }
        // wait until an editor has finished writing
        tokio::time::sleep(every).await;
        let settled = fp(dir.clone()).await;
        if settled != now {
            continue;
        }
        seen = settled;
        let source = dir.display().to_string();
        let d = dir.clone();
        let s = source.clone();
        let loaded = match tokio::task::spawn_blocking(move || load_dir(&d, s)).await {
            Ok(l) => l,
            Err(_) => continue,
        };
        if let Ok(v) = &loaded {
            if v.hash() == app.harnesses.active().hash() {
                continue;
            }
        }
        let loaded = gated(&app, loaded).await;
        let _ = activate(&app, loaded, &source);
    }
}
