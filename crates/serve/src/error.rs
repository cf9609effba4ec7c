//! The server's one error type, mapped once to an HTTP status and a JSON body
//! `{"error": {"message", "type", "field"}}` (the OpenAI error shape, so clients of
//! `/v1/chat/completions` read it too).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hat_harness::Problem;
use serde_json::json;

pub type Result<T, E = ServeError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// A request that does not parse or breaks a rule; `field` names where (`events[2].text`).
    #[error("{}{message}", field.as_deref().map(|f| format!("{f}: ")).unwrap_or_default())]
    BadRequest {
        field: Option<String>,
        message: String,
    },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    TooLarge(String),
    /// A body of a type the route does not take (a cross-site form post, say).
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("missing or wrong bearer token: send `Authorization: Bearer <key>`")]
    Unauthorized,
    /// A queue is full; the client should retry later.
    #[error("{0}")]
    Overloaded(String),
    /// A harness that fails the same checks as `hat harness check`; nothing was changed.
    #[error("the harness has {} problem(s); the active harness keeps serving", .0.len())]
    InvalidHarness(Vec<Problem>),
    /// The regression gate refused a harness; nothing was changed.
    #[error("the regression gate refused the harness; the active harness keeps serving:\n{0}")]
    GateFailed(String),
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("timed out after {0} s")]
    Timeout(u64),
    /// The client sent its request body too slowly ([`hat_http::BodyDeadline`]).
    #[error("{0}")]
    SlowBody(String),
    #[error("model: {0}")]
    Model(String),
    #[error("{context}: {message}")]
    Internal { context: String, message: String },
}

impl ServeError {
    pub fn bad(field: impl Into<String>, message: impl Into<String>) -> Self {
        ServeError::BadRequest {
            field: Some(field.into()),
            message: message.into(),
        }
    }

    pub fn internal(context: impl Into<String>, e: impl std::fmt::Display) -> Self {
        ServeError::Internal {
            context: context.into(),
            message: e.to_string(),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ServeError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ServeError::NotFound(_) => StatusCode::NOT_FOUND,
            ServeError::Conflict(_) => StatusCode::CONFLICT,
            ServeError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ServeError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ServeError::Unauthorized => StatusCode::UNAUTHORIZED,
            ServeError::Overloaded(_) => StatusCode::TOO_MANY_REQUESTS,
            ServeError::InvalidHarness(_) | ServeError::GateFailed(_) => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ServeError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            ServeError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ServeError::SlowBody(_) => StatusCode::REQUEST_TIMEOUT,
            ServeError::Model(_) => StatusCode::BAD_GATEWAY,
            ServeError::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            ServeError::BadRequest { .. } => "invalid_request_error",
            ServeError::NotFound(_) => "not_found",
            ServeError::Conflict(_) => "conflict",
            ServeError::TooLarge(_) => "payload_too_large",
            ServeError::UnsupportedMediaType(_) => "unsupported_media_type",
            ServeError::Unauthorized => "authentication_error",
            ServeError::Overloaded(_) => "rate_limit_error",
            ServeError::InvalidHarness(_) => "invalid_harness",
            ServeError::GateFailed(_) => "gate_failed",
            ServeError::ShuttingDown => "unavailable",
            ServeError::Timeout(_) => "timeout",
            ServeError::SlowBody(_) => "request_timeout",
            ServeError::Model(_) => "model_error",
            ServeError::Internal { .. } => "server_error",
        }
    }
}

impl IntoResponse for ServeError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut err = json!({"message": self.to_string(), "type": self.kind()});
        if let ServeError::BadRequest { field: Some(f), .. } = &self {
            err["field"] = json!(f);
        }
        if let ServeError::InvalidHarness(problems) = &self {
            err["problems"] = problems
                .iter()
                .map(|p| json!({"file": p.file, "line": p.line, "message": p.message}))
                .collect();
        }
        if status.is_server_error() {
            tracing::warn!(error = %self, "request failed");
        }
        (status, Json(json!({ "error": err }))).into_response()
    }
}
