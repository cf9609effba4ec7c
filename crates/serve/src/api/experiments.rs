//! Live A/B experiments over harness versions, and the platform's outcome events
//! (see [`crate::experiments`]).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::Value;

use crate::api::{body, parse, parse_value};
use crate::app::App;
use crate::error::Result;
use crate::experiments::{ExperimentDef, Outcome};

/// `GET /v1/experiments`: every experiment with its live report.
pub async fn list(State(app): State<Arc<App>>) -> Result<Json<Value>> {
    let ex = app.experiments.clone();
    let v = tokio::task::spawn_blocking(move || ex.list())
        .await
        .map_err(|e| crate::error::ServeError::internal("the experiments", e))??;
    Ok(Json(v))
}

/// `POST /v1/experiments`: start one (`{"name", "seed"?, "unit"?, "alpha"?, "arms": [{"name",
/// "harness", "weight"?}]}`; arms are harness versions this server has loaded).
pub async fn start(
    State(app): State<Arc<App>>,
    b: std::result::Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Value>)> {
    let def: ExperimentDef = parse(&body(b)?)?;
    let v = app.experiments.start(def, &app.harnesses)?;
    Ok((StatusCode::CREATED, Json(v)))
}

/// `POST /v1/experiments/{name}/stop`.
pub async fn stop(
    State(app): State<Arc<App>>,
    name: std::result::Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Json<Value>> {
    let name = crate::api::path_param(name, "name")?;
    app.experiments.stop(&name)?;
    Ok(Json(serde_json::json!({"stopped": name})))
}

/// `POST /v1/outcomes`: `{"viewer", "type": "page_view"|"add_to_cart"|"purchase",
/// "amount"?}` or `{"events": [...]}`, attributed to the arm that served each viewer.
pub async fn outcomes(
    State(app): State<Arc<App>>,
    b: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let mut v: Value = parse(&body(b)?)?;
    let events: Vec<Outcome> = match v.get_mut("events") {
        Some(list) => parse_value(list.take(), "events")?,
        None => vec![parse_value(v, "")?],
    };
    let ex = app.experiments.clone();
    let v = tokio::task::spawn_blocking(move || ex.outcomes(&events))
        .await
        .map_err(|e| crate::error::ServeError::internal("the outcomes", e))??;
    Ok(Json(v))
}
