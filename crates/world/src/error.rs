//! The crate's two error types.
//!
//! [`WorldError`] is for the people and programs that build, load and save a
//! world; its messages name the file or table and say what to do.
//! [`OpError`] is what a canonical operation answers to a bad call: the model
//! reads its `Display` as the tool result, so it is one short sentence that
//! names the bad value and lists the valid ones.

use std::path::PathBuf;

/// Building, loading, saving or driving a [`World`](crate::World) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorldError {
    #[error("no world file at {path}; create one with `hat world gen --seed S --out FILE`")]
    NotFound { path: PathBuf },

    #[error("{path} is not a SQLite database; pass a .sqlite file written by World::save")]
    NotSqlite { path: PathBuf },

    #[error("{path} has no table `{table}`, so it is not a hat-world store; regenerate it and save it again")]
    MissingTable { path: PathBuf, table: &'static str },

    #[error("{origin} is inconsistent: {detail}; fix that row or regenerate the world")]
    Invalid { origin: String, detail: String },

    #[error("could not {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("SQLite failed while {context}: {source}")]
    Sqlite {
        context: String,
        #[source]
        source: rusqlite::Error,
    },

    #[error("an episode is open; call end_episode before saving, so the file never holds a half-run task")]
    EpisodeOpen,

    #[error("no episode is open; call begin_episode first")]
    NoEpisode,

    #[error(
        "path {path} is not valid UTF-8, which SQLite needs for VACUUM INTO; choose another path"
    )]
    NonUtf8Path { path: PathBuf },
}

impl WorldError {
    pub(crate) fn sql(context: impl Into<String>) -> impl FnOnce(rusqlite::Error) -> WorldError {
        let context = context.into();
        move |source| WorldError::Sqlite { context, source }
    }
}

/// A canonical operation was called with arguments it cannot answer.
///
/// The `Display` text is the model-facing tool result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpError {
    #[error("no product \"{given}\" in this stream; products are {known}")]
    UnknownProduct { given: String, known: String },

    #[error("{product} has no {dimension} \"{given}\"; {available}")]
    UnknownVariant {
        product: String,
        dimension: &'static str,
        given: String,
        available: String,
    },

    #[error("missing required argument \"{arg}\" for {op}")]
    MissingArgument { op: &'static str, arg: &'static str },

    #[error("{op} takes no argument \"{arg}\"; its arguments are {known}")]
    UnknownArgument {
        op: &'static str,
        arg: String,
        known: String,
    },

    #[error("argument \"{arg}\" must be {expected}, got {got}")]
    BadType {
        arg: &'static str,
        expected: &'static str,
        got: String,
    },

    #[error("argument \"{arg}\" is {value}: {reason}")]
    BadValue {
        arg: &'static str,
        value: String,
        reason: String,
    },

    #[error("no region \"{given}\"; regions are {known}")]
    UnknownRegion { given: String, known: String },

    #[error("no FAQ topic \"{topic}\"{context}; topics are {known}")]
    UnknownTopic {
        topic: String,
        context: String,
        known: String,
    },

    #[error("no coupon \"{given}\" in this stream; coupons are {known}")]
    UnknownCoupon { given: String, known: String },

    #[error("coupon {coupon} does not apply to {product}: {reason}")]
    CouponNotApplicable {
        coupon: String,
        product: String,
        reason: String,
    },

    #[error("the store could not answer ({0}); this is a bug in the world, not in the call")]
    Store(String),
}

impl From<rusqlite::Error> for OpError {
    fn from(e: rusqlite::Error) -> Self {
        OpError::Store(e.to_string())
    }
}

impl From<WorldError> for OpError {
    fn from(e: WorldError) -> Self {
        OpError::Store(e.to_string())
    }
}
