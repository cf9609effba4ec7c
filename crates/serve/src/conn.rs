//! Connections: the server's accept loop, with the limits a server reachable by anyone needs
//! and `axum::serve` leaves unset. A client that opens a connection and sends its headers a
//! byte a minute (or nothing: "slowloris"), or its body that way, held a task and a socket
//! for ever, and enough of them exhaust the process's file descriptors. Here:
//! - a request's headers must arrive within `header_timeout` of the connection being ready
//!   for them (which also closes idle keep-alive connections);
//! - a request's body must arrive within `body_timeout` of the handler starting to read it
//!   (408, see [`BodyDeadline`]);
//! - at most `max_connections` are open; past that the loop stops accepting until one closes
//!   (new clients wait in the kernel's backlog instead of costing memory here).
//!
//! Shutdown: the loop stops accepting, every open connection is asked to finish its request
//! in progress and close, and [`serve`] returns when all have; the caller bounds that wait.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::{watch, Semaphore};

/// Limits on what a client may hold open (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub max_connections: usize,
}

/// Serves `router` on `listener` until `closing` turns true, then waits for the open
/// connections to finish their requests in progress.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: Limits,
    mut closing: watch::Receiver<bool>,
) {
    let body_timeout = limits.body_timeout;
    let router = router.layer(axum::middleware::from_fn(move |req, next| {
        deadline(body_timeout, req, next)
    }));
    let slots = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let open = Arc::new(Semaphore::new(slots));
    let timer = TokioTimer::new();
    loop {
        if *closing.borrow() {
            break;
        }
        let permit = tokio::select! {
            p = open.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            r = closing.changed() => if r.is_err() { break } else { continue },
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // out of file descriptors, say: accepting again at once would spin
                    if !is_per_connection(&e) {
                        tracing::warn!(error = %e, "accepting a connection failed; retrying in 1 s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    continue;
                }
            },
            r = closing.changed() => if r.is_err() { break } else { continue },
        };
        let service = TowerToHyperService::new(router.clone());
        let timer = timer.clone();
        let mut closing = closing.clone();
        let header_timeout = limits.header_timeout;
        tokio::spawn(async move {
            // HTTP/1 only (what the API and SSE need): a version-sniffing builder first waits
            // for bytes with no deadline at all
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(timer)
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            let mut asked = false;
            loop {
                tokio::select! {
                    r = conn.as_mut() => {
                        if let Err(e) = r {
                            tracing::trace!(error = %e, "connection ended with an error");
                        }
                        break;
                    }
                    r = closing.changed(), if !asked => {
                        // a dropped sender: nobody can ask any more
                        asked = r.is_err();
                        if *closing.borrow() {
                            conn.as_mut().graceful_shutdown();
                            asked = true;
                        }
                    }
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    // every connection holds a permit until it has closed
    let _ = open.acquire_many(slots as u32).await;
}

/// Errors of one connection that was being accepted (the client gave up), not of the listener.
fn is_per_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset | Interrupted
    )
}

async fn deadline(limit: Duration, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let body = Body::new(BodyDeadline {
        inner: body,
        limit,
        sleep: None,
    });
    next.run(Request::from_parts(parts, body)).await
}

/// A request body that fails with [`SlowBody`] when it has not all arrived `limit` after the
/// handler first asked for it (not after the headers: a handler may queue first).
pub struct BodyDeadline {
    inner: Body,
    limit: Duration,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// The error of a body that arrived too slowly.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {} s", .0.as_secs())]
pub struct SlowBody(pub Duration);

impl HttpBody for BodyDeadline {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<http_body::Frame<Bytes>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        let limit = self.limit;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(SlowBody(limit))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Whether `e` (or what it wraps) is a [`SlowBody`].
pub fn is_slow_body(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if e.is::<SlowBody>() {
            return true;
        }
        cur = e.source();
    }
    false
}
