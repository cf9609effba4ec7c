//! The HTTP API: every route declared here, in one place.
//!
//! | route | what |
//! | --- | --- |
//! | `GET /health` | liveness, model, active harness |
//! | `GET /metrics` | Prometheus text |
//! | `POST /v1/streams`, `GET /v1/streams` | create (from a seed, or an uploaded SQLite store), list |
//! | `GET /v1/streams/{id}` | a stream's state |
//! | `POST /v1/streams/{id}/events` | viewer events (`?wait=true` answers with the replies) |
//! | `GET /v1/streams/{id}/events` | the host's output over SSE (`?after=SEQ` or `Last-Event-ID` replays) |
//! | `GET /v1/harness`, `POST /v1/harness`, `POST /v1/harness/rollback` | versions, swap, roll back |
//! | `GET /v1/harness/files`, `POST /v1/harness/files` | a version's files as text; activate an edit |
//! | `POST /v1/harness/check` | validate an edit (and run the gate) without activating it |
//! | `GET /v1/experiments`, `POST /v1/experiments`, `POST /v1/experiments/{name}/stop` | live A/B experiments over harness versions, with their reports |
//! | `POST /v1/outcomes` | the platform's outcome events (page view, add to cart, purchase), attributed to the viewer's arm |
//! | `GET /v1/runs` | evaluation and training runs under `--runs` (the console's charts) |
//! | `GET /v1/models`, `POST /v1/chat/completions` | OpenAI-compatible |

pub mod experiments;
pub mod harness;
pub mod openai;
pub mod openai_tools;
pub mod ops;
pub mod streams;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde::de::DeserializeOwned;

use crate::app::App;
use crate::error::{Result, ServeError};

pub fn router(app: Arc<App>) -> Router {
    let upload = DefaultBodyLimit::max(crate::harnesses::MAX_ARCHIVE_BYTES);
    let v1 = Router::new()
        .route(
            "/streams",
            post(streams::create).layer(upload).get(streams::list),
        )
        .route("/streams/{id}", get(streams::show))
        .route(
            "/streams/{id}/events",
            post(streams::post_events).get(streams::sse),
        )
        .route(
            "/harness",
            get(harness::show).post(harness::upload).layer(upload),
        )
        .route("/harness/rollback", post(harness::rollback))
        .route(
            "/harness/files",
            get(harness::files).post(harness::save).layer(upload),
        )
        .route("/harness/check", post(harness::check).layer(upload))
        .route("/runs", get(ops::runs))
        .route(
            "/experiments",
            get(experiments::list).post(experiments::start),
        )
        .route("/experiments/{name}/stop", post(experiments::stop))
        .route("/outcomes", post(experiments::outcomes))
        .route("/models", get(openai::models))
        .route("/chat/completions", post(openai::chat))
        .route_layer(axum::middleware::from_fn_with_state(app.clone(), auth));
    Router::new()
        .route("/health", get(ops::health))
        .route("/metrics", get(ops::metrics))
        .nest("/v1", v1)
        .fallback(ops::not_found)
        .layer(DefaultBodyLimit::max(app.cfg.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            declared_length,
        ))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            content_type,
        ))
        .with_state(app)
}

/// Refuses a `POST` to the API whose body is not declared as one the route takes:
/// `application/json` everywhere, plus `application/zip` on `/v1/harness` and an SQLite
/// store (`application/vnd.sqlite3`, `application/octet-stream`) on `/v1/streams`. Every
/// one of these makes a browser ask the server first (a CORS preflight, which it does not
/// answer), so a page on another site cannot drive the API with a form or a `text/plain`
/// fetch, as it could while bodies were read whatever their declared type. Checked for
/// empty bodies too: an empty cross-site post would still stop an experiment.
async fn content_type(State(app): State<Arc<App>>, req: Request, next: Next) -> Result<Response> {
    let path = req.uri().path().to_string();
    if req.method() != axum::http::Method::POST || !path.starts_with("/v1/") {
        return Ok(next.run(req).await);
    }
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mime = declared
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let also: &[&str] = match path.as_str() {
        "/v1/harness" => &["application/zip"],
        "/v1/streams" => &["application/vnd.sqlite3", "application/octet-stream"],
        _ => &[],
    };
    if mime == "application/json" || also.contains(&mime.as_str()) {
        return Ok(next.run(req).await);
    }
    app.metrics.reject("content_type");
    let takes = std::iter::once("application/json")
        .chain(also.iter().copied())
        .collect::<Vec<_>>()
        .join(", ");
    Err(ServeError::UnsupportedMediaType(format!(
        "POST {path} takes a body of type {takes}, not `{}`; send the header \
         `Content-Type: application/json` (curl: -H 'content-type: application/json')",
        if declared.is_empty() {
            "(none)".to_string()
        } else {
            hat_harness::text::truncate_chars(&declared, 80)
        }
    )))
}

/// Refuses a body whose declared length is over the route's limit before reading any of it
/// (bodies without a length are cut off by the body limit as they stream in).
async fn declared_length(
    State(app): State<Arc<App>>,
    req: Request,
    next: Next,
) -> Result<Response> {
    let limit = match req.uri().path() {
        "/v1/harness" | "/v1/streams" | "/v1/harness/files" | "/v1/harness/check" => {
            crate::harnesses::MAX_ARCHIVE_BYTES
        }
        _ => app.cfg.max_body_bytes,
    };
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(n) = declared.filter(|&n| n > limit as u64) {
        app.metrics.reject("too_large");
        return Err(ServeError::TooLarge(format!(
            "the request body is too large: {n} bytes declared, at most {limit}"
        )));
    }
    Ok(next.run(req).await)
}

async fn auth(State(app): State<Arc<App>>, req: Request, next: Next) -> Result<Response> {
    if let Some(key) = &app.cfg.api_key {
        let ok = req
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|k| constant_time_eq(k.as_bytes(), key.as_bytes()));
        if !ok {
            app.metrics.reject("unauthorized");
            return Err(ServeError::Unauthorized);
        }
    }
    Ok(next.run(req).await)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A body read as bytes, with the limit's rejection as a JSON error.
pub fn body(b: std::result::Result<Bytes, BytesRejection>) -> Result<Bytes> {
    b.map_err(|e| match e {
        BytesRejection::FailedToBufferBody(f) if hat_http::is_slow_body(&f) => {
            ServeError::SlowBody(format!(
                "{}; send it faster, or raise `hat serve --body-timeout-s`",
                f.body_text()
            ))
        }
        BytesRejection::FailedToBufferBody(_) => {
            ServeError::TooLarge(format!("the request body is too large or broken: {e}"))
        }
        other => ServeError::bad("body", other.to_string()),
    })
}

/// Parses a JSON body; an error names the field (`events[2].text`) and what was wrong.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    if bytes.is_empty() {
        return Err(ServeError::bad("body", "empty; send a JSON object"));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        use serde_json::error::Category;
        if matches!(
            inner.classify(),
            Category::Syntax | Category::Eof | Category::Io
        ) {
            return ServeError::bad("body", format!("not valid JSON: {inner}"));
        }
        let field = if path == "." || path == "?" {
            "body".to_string()
        } else {
            path
        };
        ServeError::bad(field, inner.to_string())
    })
}

/// A query string read into `T`. axum's own `Query` answers a bad parameter (`?wait=yes`)
/// with a plain-text 400; this one answers with the server's JSON error naming the
/// parameter.
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> axum::extract::FromRequestParts<S> for Query<T> {
    type Rejection = ServeError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self> {
        let q = parts.uri.query().unwrap_or_default();
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(q.as_bytes()));
        serde_path_to_error::deserialize(de)
            .map(Query)
            .map_err(|e| {
                let path = e.path().to_string();
                let field = if path == "." || path == "?" {
                    "query".to_string()
                } else {
                    path
                };
                ServeError::bad(field, format!("{} (in the query string)", e.into_inner()))
            })
    }
}

/// A path parameter (`{id}`, `{name}`) as text, or the server's JSON error naming it
/// (axum's own rejection, for one that is not UTF-8, is plain text).
pub fn path_param(
    p: std::result::Result<axum::extract::Path<String>, axum::extract::rejection::PathRejection>,
    field: &str,
) -> Result<String> {
    p.map(|axum::extract::Path(v)| v)
        .map_err(|e| ServeError::bad(field, e.body_text()))
}

/// Parses a JSON value already read (for bodies of more than one shape).
pub fn parse_value<T: DeserializeOwned>(v: serde_json::Value, prefix: &str) -> Result<T> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let field = match (prefix.is_empty(), path == ".") {
            (true, true) => "body".to_string(),
            (true, false) => path,
            (false, true) => prefix.to_string(),
            (false, false) => format!("{prefix}.{path}"),
        };
        ServeError::bad(field, inner.to_string())
    })
}
