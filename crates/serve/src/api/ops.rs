//! Health, metrics, and the answer to unknown routes.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, Uri};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Value};

use crate::app::App;
use crate::error::ServeError;
use crate::runs::Runs;

pub async fn health(State(app): State<Arc<App>>) -> Json<Value> {
    let active = app.harnesses.active();
    let streams = app.streams.read().unwrap_or_else(|e| e.into_inner()).len();
    Json(json!({
        "status": "ok",
        "model": app.cfg.model_name,
        "harness": active.hash(),
        "streams": streams,
    }))
}

pub async fn metrics(State(app): State<Arc<App>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        app.metrics.render(),
    )
}

pub async fn not_found(uri: Uri) -> ServeError {
    ServeError::NotFound(format!(
        "no route {}; see GET /health, /metrics, /v1/streams, /v1/harness, /v1/models, /v1/chat/completions",
        hat_harness::text::viewer_text(uri.path(), 200)
    ))
}

/// `GET /v1/runs`: the evaluation and training runs under the server's `--runs` folder.
pub async fn runs(State(app): State<Arc<App>>) -> crate::error::Result<Json<Runs>> {
    let Some(dir) = app.cfg.runs_dir.clone() else {
        return Ok(Json(Runs::default()));
    };
    let runs = tokio::task::spawn_blocking(move || crate::runs::scan(&dir))
        .await
        .map_err(|e| ServeError::internal("reading the runs", e))?;
    Ok(Json(runs))
}
