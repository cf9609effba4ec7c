//! Live harness updates: show the versions, swap in a new one (a server-side folder or an
//! uploaded zip), roll back, and watch the `--harness` folder.

use std::collections::BTreeMap;
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
use crate::edit::{read_text_files, write_text_files};
use crate::error::{Result, ServeError};
use crate::harnesses::{fingerprint, load_dir, unpack_zip, Held, Version};

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
async fn gated(app: &App, loaded: Result<Version>, wait: Wait) -> Result<Version> {
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
    let slot = match wait {
        Wait::Queue => app.gate_slot.clone().acquire_owned().await.ok(),
        Wait::Refuse => Some(app.gate_slot.clone().try_acquire_owned().map_err(|_| {
            ServeError::Overloaded(
                "a regression gate run is already under way (a whole evaluation); retry when \
                 it has answered"
                    .into(),
            )
        })?),
    };
    // The run holds its own claim on the new folder and the gate's slot: a client that
    // leaves does not stop the blocking run, and must not delete the folder under it.
    let dir = new.clone();
    let hold = tokio::task::spawn_blocking({
        let h = app.harnesses.clone();
        move || h.hold(|| Ok((dir, String::new(), false)))
    })
    .await
    .map_err(|e| ServeError::internal("the regression gate", e))??;
    let verdict = tokio::task::spawn_blocking(move || {
        let verdict = gate.0.check(&new, &old);
        drop((hold, slot));
        verdict
    })
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

/// Whether a gate run waits for one under way (the folder watcher) or is refused (a request).
#[derive(Clone, Copy)]
enum Wait {
    Queue,
    Refuse,
}

/// Checks a loaded version and makes it active, or records why not.
async fn activate(app: &Arc<App>, loaded: Result<Version>, source: &str) -> Result<Json<Value>> {
    match loaded {
        Ok(v) => {
            let hash = v.hash().to_string();
            let summary = v.harness.summary();
            // the history is saved with an fsync: off the runtime's few threads
            let a = app.clone();
            let changed = tokio::task::spawn_blocking(move || a.harnesses.activate(v))
                .await
                .map_err(|e| ServeError::internal("activating the harness", e))?;
            // the version live now: another activation may have finished in between
            app.metrics.set_harness(app.harnesses.active().hash());
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

/// Without an API key, a harness written by a client may not bring a prompt template of its
/// own (it may keep the active version's unchanged): the template is rendered as soon as the
/// harness is checked, and a few dozen string concatenations in one can exhaust the server's
/// memory (fuel bounds a template's instructions, not the bytes they build).
fn no_new_template(files: &BTreeMap<String, String>, active: &Version) -> Result<()> {
    let Some(spec) = hat_harness::files::parse(files).0 else {
        return Ok(()); // the load that follows reports what is wrong
    };
    // compared as the reader keeps files (line ends normalised), as the active one was read
    let theirs = spec.template.as_deref().map(hat_harness::files::normalize);
    match theirs {
        Some(t) if active.harness.spec.template.as_deref() != Some(t.as_str()) => {
            Err(ServeError::bad(
                "template",
                "this server has no API key, so a harness from a client cannot bring a prompt \
                 template of its own ([prompt] template); start hat serve with \
                 --server-api-key-env so only operators can change it, use a built-in layout \
                 ([prompt] format), or put the harness in a folder on the server",
            ))
        }
        _ => Ok(()),
    }
}

/// A harness folder that cannot be read as one: its problems (422) when it breaks the
/// reader's limits, an internal error when the disk fails.
pub(crate) fn harness_error(e: hat_harness::HarnessError) -> ServeError {
    match e {
        hat_harness::HarnessError::Invalid(problems) => ServeError::InvalidHarness(problems),
        e => ServeError::internal("reading the harness", e),
    }
}

/// A harness whose command hooks can all start ([`hat_harness::Harness::unrunnable_hooks`]):
/// one that cannot would let every reply through under `on_error = "allow"`.
fn runnable(v: Version) -> Result<Version> {
    let problems = v.harness.unrunnable_hooks();
    if problems.is_empty() {
        Ok(v)
    } else {
        Err(ServeError::InvalidHarness(problems))
    }
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
    let (loaded, source, held) = if zip {
        let history = app.harnesses.clone();
        let (loaded, source, held) = tokio::task::spawn_blocking(move || {
            match history.hold(|| unpack_zip(&b, &root, trusted)) {
                Ok((held, source)) => {
                    let vetted = if trusted {
                        Ok(())
                    } else {
                        hat_harness::files::read_dir(held.dir())
                            .map_err(harness_error)
                            .and_then(|(files, _)| no_new_template(&files, &history.active()))
                    };
                    let loaded = vetted
                        .and_then(|()| load_dir(held.dir(), source.clone()))
                        .and_then(|v| {
                            if trusted {
                                runnable(v)
                            } else {
                                no_commands_in_uploads(v)
                            }
                        });
                    (loaded, source, Some(held))
                }
                Err(e) => (Err(e), "upload".to_string(), None),
            }
        })
        .await
        .map_err(|e| ServeError::internal("loading the harness", e))?;
        (loaded, source, held)
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
        // Uploads and edits are written under <data_dir>/harnesses before they are checked:
        // without an API key, such a folder is held to the uploads' rule (a version the
        // history already holds was checked when it went in), so a concurrent `{"path"}`
        // cannot activate an upload's command hook while its own request still checks it.
        let written_by_clients = !trusted
            && root
                .canonicalize()
                .is_ok_and(|uploads| path.starts_with(uploads));
        let source = path.display().to_string();
        let s = source.clone();
        let history = app.harnesses.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            // a folder a version of the history runs from was checked when it went in
            if written_by_clients && !history.uses_dir(&path) {
                let (files, _) = hat_harness::files::read_dir(&path).map_err(harness_error)?;
                no_new_template(&files, &history.active())?;
            }
            load_dir(&path, s).and_then(|v| {
                if written_by_clients && !history.knows(v.hash()) {
                    no_commands_in_uploads(v)
                } else {
                    runnable(v)
                }
            })
        })
        .await
        .map_err(|e| ServeError::internal("loading the harness", e))?;
        (loaded, source, None)
    };
    let loaded = gated(&app, loaded, Wait::Refuse).await;
    let answer = activate(&app, loaded, &source).await;
    // held until activated: a refused upload leaves nothing behind on the server's disk
    release(held).await;
    answer
}

/// Lets go of a hold off the async runtime: the last hold on a folder may remove it (files
/// on disk, and a look at every version's folder).
async fn release(held: Option<Held>) {
    if let Some(h) = held {
        let _ = tokio::task::spawn_blocking(move || drop(h)).await;
    }
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
    let a = app.clone();
    let v = tokio::task::spawn_blocking(move || a.harnesses.rollback(&r.hash))
        .await
        .map_err(|e| ServeError::internal("rolling back", e))??;
    app.metrics.set_harness(app.harnesses.active().hash());
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
        let loaded = gated(&app, loaded, Wait::Queue).await;
        let _ = activate(&app, loaded, &source).await;
    }
}

#[derive(Deserialize)]
pub struct FilesQuery {
    /// A version's hash or a unique prefix (default: the active version).
    hash: Option<String>,
}

/// `GET /v1/harness/files[?hash=H]`: a version's files as text, for the console's editor.
pub async fn files(
    State(app): State<Arc<App>>,
    crate::api::Query(q): crate::api::Query<FilesQuery>,
) -> Result<Json<Value>> {
    let v = match &q.hash {
        Some(h) => app.harnesses.find(h)?,
        None => app.harnesses.active(),
    };
    let Some(root) = v.harness.root.clone() else {
        return Err(ServeError::NotFound(format!(
            "harness version {} has no folder on this server to read",
            v.harness.short_hash()
        )));
    };
    let (files, executable, binary) = tokio::task::spawn_blocking(move || read_text_files(&root))
        .await
        .map_err(|e| ServeError::internal("reading the harness", e))??;
    Ok(Json(json!({
        "hash": v.hash(),
        "source": v.source,
        "active": app.harnesses.active().hash() == v.hash(),
        "files": files,
        "executable": executable,
        "binary": binary,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditRequest {
    /// Relative path -> contents: the whole harness folder.
    files: BTreeMap<String, String>,
    /// Paths that keep an executable bit (command hooks' scripts; API-key servers only).
    #[serde(default)]
    executable: Vec<String>,
    /// `check` only: also run the regression gate (when the server has one).
    #[serde(default)]
    gate: bool,
}

/// Writes an edit under the data folder and loads it (the same checks as `hat harness
/// check`). Returns the version and the hold on its folder: the folder stays while the hold
/// lives, and goes with it unless a version in the history runs from it ([`Held`]).
///
/// Without an API key an edit may keep the command hooks the active version has, never add
/// or change one: every command hook's argv must be one of the active version's, the files
/// those argvs name must be byte-identical, and executable bits come from the active
/// version's identical files, not from the request.
async fn load_edit(app: &App, r: &EditRequest) -> Result<(Version, Held)> {
    let root = app.cfg.data_dir.join("harnesses");
    let trusted = app.cfg.api_key.is_some();
    let active = app.harnesses.active();
    let history = app.harnesses.clone();
    let (files, requested_exec) = (r.files.clone(), r.executable.clone());
    tokio::task::spawn_blocking(move || {
        let before = match &active.harness.root {
            Some(dir) => read_text_files(dir)?,
            None => Default::default(),
        };
        let exec: Vec<String> = if trusted {
            requested_exec
        } else {
            before
                .1
                .iter()
                .filter(|p| files.get(*p).is_some_and(|t| before.0.get(*p) == Some(t)))
                .cloned()
                .collect()
        };
        // refused before anything is written
        if !trusted {
            no_new_template(&files, &active)?;
        }
        let (held, source) = history.hold(|| write_text_files(&files, &exec, &root))?;
        let loaded = load_dir(held.dir(), source).and_then(|v| {
            if trusted {
                Ok(v)
            } else {
                same_commands(v, &active, &files, &before.0)
            }
        });
        loaded.map(|v| (v, held))
    })
    .await
    .map_err(|e| ServeError::internal("loading the harness", e))?
}

/// An untrusted edit's command hooks must be the active version's, with the same scripts.
fn same_commands(
    v: Version,
    active: &Version,
    files: &BTreeMap<String, String>,
    before: &BTreeMap<String, String>,
) -> Result<Version> {
    // the program, its arguments and the variables it receives must all be the active ones
    let argv_of = |h: &hat_harness::hooks::Hook| match &h.action {
        hat_harness::hooks::Action::Command { argv, env, .. } => Some((argv.clone(), env.clone())),
        _ => None,
    };
    let known: Vec<(Vec<String>, Vec<String>)> =
        active.harness.hooks.iter().filter_map(argv_of).collect();
    for h in &v.harness.hooks {
        let Some((argv, env)) = argv_of(h) else {
            continue;
        };
        let same_argv = known.contains(&(argv.clone(), env));
        let same_files = argv.iter().all(|a| {
            let rel = a.trim_start_matches("./");
            files.get(rel) == before.get(rel)
        });
        if !(same_argv && same_files) {
            return Err(ServeError::bad(
                "files",
                format!(
                    "this server has no API key, so an edit may keep the command hooks the \
                     active harness has but not add or change one (hook `{}`); start hat serve \
                     with --server-api-key-env so only operators can edit, or change the \
                     harness folder on the server",
                    h.id
                ),
            ));
        }
    }
    Ok(v)
}

/// `POST /v1/harness/check {"files": {...}, "gate"?: bool}`: validates an edited harness
/// without activating it: 200 with its hash and summary (and the gate's report when asked),
/// or 422 with every problem (file, line, message). Nothing live changes either way.
pub async fn check(
    State(app): State<Arc<App>>,
    b: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let r: EditRequest = parse(&body(b)?)?;
    let (v, held) = load_edit(&app, &r).await?;
    let hash = v.hash().to_string();
    let summary = v.harness.summary();
    let verdict = if r.gate && app.cfg.gate.is_some() {
        Some(gated(&app, Ok(v), Wait::Refuse).await)
    } else {
        None
    };
    // only checked: the folder goes with the hold, unless a live version runs from it
    release(Some(held)).await;
    let gate = match verdict {
        Some(Ok(_)) => json!({"passed": true}),
        Some(Err(ServeError::GateFailed(report))) => json!({"passed": false, "report": report}),
        Some(Err(e)) => return Err(e),
        None => Value::Null,
    };
    Ok(Json(
        json!({"ok": true, "hash": hash, "summary": summary, "gate": gate}),
    ))
}

/// `POST /v1/harness/files {"files": {...}, "executable"?: [...]}`: activates an edited
/// harness (validated, then gated when the server has a gate), like an uploaded archive.
pub async fn save(
    State(app): State<Arc<App>>,
    b: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let r: EditRequest = parse(&body(b)?)?;
    let (loaded, held) = match load_edit(&app, &r).await {
        Ok((v, held)) => (Ok(v), Some(held)),
        Err(e) => (Err(e), None),
    };
    let source = loaded
        .as_ref()
        .map(|v| v.source.clone())
        .unwrap_or_else(|_| "console edit".to_string());
    let loaded = gated(&app, loaded, Wait::Refuse).await;
    let answer = activate(&app, loaded, &source).await;
    // a refused edit's new folder goes with the hold; an activated one is live and stays
    release(held).await;
    answer
}
