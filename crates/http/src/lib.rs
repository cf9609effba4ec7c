//! The accept loop of hat's HTTP servers (`hat serve`, `hat env serve`), with the limits a
//! server reachable by anyone needs and `axum::serve` leaves unset. A client that opens a
//! connection and sends its headers a byte a minute (or nothing: "slowloris"), or its body
//! that way, held a task and a socket for ever, and enough of them exhaust the process's file
//! descriptors. Here:
//! - a request's headers must arrive within `header_timeout` of the connection being ready
//!   for them (which also closes idle keep-alive connections);
//! - a request's body must arrive within `body_timeout` of the handler starting to read it
//!   ([`BodyDeadline`]; `hat serve` answers 408);
//! - at most `max_connections` are open; past that the loop stops accepting until one closes
//!   (new clients wait in the kernel's backlog instead of costing memory here);
//! - a response the client stops reading is cut off once no byte of it could be written for
//!   `write_timeout` ([`StalledWrite`]): a client that opened an event stream, or asked for a
//!   large file, and never read held its connection, and 1,024 of them stopped the loop.
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

/// Limits on what a client may hold open (see the crate docs).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub max_connections: usize,
    pub write_timeout: Duration,
}

impl Default for Limits {
    /// 30 s for headers, 60 s for a body, 1,024 connections, 60 s without writing progress.
    fn default() -> Self {
        Limits {
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
            max_connections: 1024,
            write_timeout: Duration::from_secs(60),
        }
    }
}

/// [`serve`] until `shutdown` resolves.
pub async fn serve_until(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let (closing, watch) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = closing.send(true);
        // the loop and its connections hold receivers; keep the sender until they are done
        closing.closed().await;
    });
    serve(listener, router, limits, watch).await;
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
    // the shutdown takes them all back in one `acquire_many`, which counts in u32
    let slots = limits
        .max_connections
        .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
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
        let stream = StalledWrite::new(stream, limits.write_timeout);
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

/// A connection whose writes fail with `TimedOut` once none has made progress for `limit`
/// (the client stopped reading and the socket's buffer is full). Reads pass through.
pub struct StalledWrite<T> {
    inner: T,
    limit: Duration,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> StalledWrite<T> {
    pub fn new(inner: T, limit: Duration) -> Self {
        StalledWrite {
            inner,
            limit,
            stalled: None,
        }
    }

    /// Turns a pending write into an error once it has been pending for `limit`; any
    /// progress starts the clock again.
    fn watch<R>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<std::io::Result<R>>,
    ) -> Poll<std::io::Result<R>> {
        if r.is_ready() {
            self.stalled = None;
            return r;
        }
        let limit = self.limit;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the client read nothing for {} s", limit.as_secs_f64()),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for StalledWrite<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for StalledWrite<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, r)
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::{get, post};
    use std::io::{Read, Write};

    fn read_to_close(s: &mut std::net::TcpStream) -> String {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = Vec::new();
        match s.read_to_end(&mut buf) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("the server kept the connection open: {e}"),
        }
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// A server of `router` under `limits` on a free local port, until the sender is used.
    struct Running {
        rt: tokio::runtime::Runtime,
        addr: std::net::SocketAddr,
        stop: tokio::sync::oneshot::Sender<()>,
        server: tokio::task::JoinHandle<()>,
    }

    fn start(router: Router, limits: Limits) -> Running {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = rt.spawn(serve_until(listener, router, limits, async {
            let _ = stopped.await;
        }));
        Running {
            rt,
            addr,
            stop,
            server,
        }
    }

    impl Running {
        /// Stops the server and checks that its loop ends.
        fn shut_down(self) {
            self.stop.send(()).unwrap();
            self.rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(30), self.server)
                    .await
                    .expect("the loop ended after shutdown")
                    .unwrap()
            });
        }
    }

    /// A client that asks for a large response and never reads it is cut off once the writes
    /// stall, which gives its connection back: with room for one connection, the next client
    /// is answered.
    #[test]
    fn a_client_that_stops_reading_gives_its_connection_back() {
        let router = Router::new()
            .route("/", get(|| async { "hi" }))
            .route("/big", get(|| async { vec![b'x'; 64 << 20] }));
        let limits = Limits {
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            max_connections: 1,
            write_timeout: Duration::from_millis(300),
        };
        let server = start(router, limits);
        let mut hog = std::net::TcpStream::connect(server.addr).unwrap();
        hog.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut next = std::net::TcpStream::connect(server.addr).unwrap();
        next.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let text = read_to_close(&mut next);
        assert!(
            text.starts_with("HTTP/1.1 200") && text.ends_with("hi"),
            "{text}"
        );
        drop(hog);
        server.shut_down();
    }

    /// A silent client and a slow body are cut off, a request is answered, and the loop ends
    /// when shutdown comes.
    #[test]
    fn slow_clients_are_cut_off_and_shutdown_ends_the_loop() {
        let router = Router::new()
            .route("/", get(|| async { "hi" }))
            .route("/echo", post(|body: String| async move { body }));
        let limits = Limits {
            header_timeout: Duration::from_millis(200),
            body_timeout: Duration::from_millis(200),
            max_connections: 4,
            write_timeout: Duration::from_secs(30),
        };
        let server = start(router, limits);
        let addr = server.addr;
        let mut silent = std::net::TcpStream::connect(addr).unwrap();
        assert_eq!(read_to_close(&mut silent), "");
        let mut slow = std::net::TcpStream::connect(addr).unwrap();
        slow.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab")
            .unwrap();
        let text = read_to_close(&mut slow);
        assert!(text.contains("did not arrive within"), "{text}");
        let mut ok = std::net::TcpStream::connect(addr).unwrap();
        ok.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let text = read_to_close(&mut ok);
        assert!(
            text.starts_with("HTTP/1.1 200") && text.ends_with("hi"),
            "{text}"
        );
        server.shut_down();
    }
}
