//! The operator console: one page, served by `hat serve` at [`ROOT`], for the people who run
//! the streams.
//!
//! - **Live**: pick or create a stream, post a viewer's comment (or let a simulated audience
//!   comment), and watch the event log as it happens: events accepted, merged, folded or
//!   dropped by triage, each model turn (tool calls as written), tool results, hook decisions,
//!   and the reply with its harness version and latency breakdown.
//! - **Harness**: the active version's files in an editor, checked as you type by the
//!   server (`POST /v1/harness/check`: the same checks as `hat harness check`, problems with
//!   file and line), a diff against the active version, the regression gate, activation, and
//!   roll back to any earlier version.
//! - **Metrics**: reply-latency percentiles over time and the latency histogram, queue depth
//!   and prefix-cache hits, read from `/metrics`.
//!
//! Every asset is embedded in the binary (no CDN, works offline); the page talks to the
//! server's HTTP API like any client, sending the bearer token the operator types when the
//! server asks for one (kept in the tab's session storage, never shown). Routes are
//! declared here, in one place.

use axum::http::header;
use axum::response::{IntoResponse, Redirect};
use axum::routing::get;
use axum::Router;

/// Where the console lives.
pub const ROOT: &str = "/console";

const INDEX: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const STYLE: &str = include_str!("../assets/style.css");

/// The console's routes; merge them into the server's router. They serve static assets
/// only (no data, no secrets), so they need no token.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            ROOT,
            get(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route("/console/", get(|| async { Redirect::permanent(ROOT) }))
        .route(
            "/console/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/console/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
}

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            // the page only ever talks to its own server
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:",
            ),
            (header::X_FRAME_OPTIONS, "DENY"),
        ],
        body,
    )
}
