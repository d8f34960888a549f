//! The HTTP server: our own accept loop over hyper's HTTP/1 connections.
//!
//! `axum::serve` reads headers and bodies without a deadline, so a client
//! that trickles a request line (slowloris) or stops in the middle of a body
//! holds a connection and a task forever. Here every connection is bounded:
//!
//! - the request head must arrive within [`HEADER_READ_TIMEOUT`] (the same
//!   timer closes a keep-alive connection idle for that long);
//! - the head must fit in [`MAX_HEAD_SIZE`], else hyper answers 431 and
//!   closes the connection;
//! - once a handler starts reading a body, the whole body must arrive within
//!   [`BODY_READ_TIMEOUT`], else the answer is 408 and the connection closes;
//! - on shutdown the listener closes at once, requests in flight finish, and
//!   the wait for them is bounded by `shutdown_timeout`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

/// How long a client has to send a request head (request line and headers),
/// and how long a keep-alive connection may stay idle between requests.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client has to send a whole request body, counted from the
/// moment the server starts reading it.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(20);

/// The largest request head (request line plus headers); a larger one is
/// answered 431 and the connection closes. Also the cap of a connection's
/// read buffer. Both hyper settings are needed: the buffer cap alone lets
/// through a head that arrives in one read.
pub const MAX_HEAD_SIZE: usize = 64 * 1024;

/// Serves `app` on `listener` until `shutdown` fires, then stops accepting
/// and waits at most `drain` for the requests in flight.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: CancellationToken,
    drain: Duration,
) -> std::io::Result<()> {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEAD_SIZE)
        .max_header_size(MAX_HEAD_SIZE)
        .keep_alive(true);
    let graceful = GracefulShutdown::new();
    // Fired when the drain times out: the connections still open are closed.
    let abandon = CancellationToken::new();

    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            // The peer went away between SYN and accept: nothing to do.
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of
                // spinning on an error that will repeat at once.
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = service_fn(move |request| handle(app.clone(), peer, request));
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        let abandon = abandon.clone();
        tokio::spawn(async move {
            tokio::select! {
                ended = connection => if let Err(e) = ended {
                    tracing::debug!(peer = %peer, error = %e, "connection ended with an error");
                },
                _ = abandon.cancelled() => {}
            }
        });
    }
    // Closing the listener refuses new connections while the old ones drain.
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(drain) => {
            tracing::warn!(
                timeout = ?drain,
                "shutdown timed out; closing connections with requests still in flight"
            );
            abandon.cancel();
        }
    }
    Ok(())
}

/// One request: the router sees the peer address (for `ConnectInfo`) and a
/// body that gives up after [`BODY_READ_TIMEOUT`].
async fn handle(
    app: Router,
    peer: SocketAddr,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let stalled = Arc::new(AtomicBool::new(false));
    let mut request = request.map(|b| Body::new(TimedBody::new(b, stalled.clone())));
    request.extensions_mut().insert(ConnectInfo(peer));
    let response = app.oneshot(request).await?;
    if stalled.load(Ordering::Relaxed) {
        // Whatever the handler made of a cut-off body, the client must learn
        // that its body was not received.
        return Ok(body_timed_out());
    }
    Ok(response)
}

fn body_timed_out() -> Response<Body> {
    closing(
        StatusCode::REQUEST_TIMEOUT,
        format!(
            "request body timed out: the whole body must arrive within {}s\n",
            BODY_READ_TIMEOUT.as_secs()
        ),
    )
}

/// A plain-text answer after which the connection closes.
fn closing(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Errors of a single connection attempt, not of the listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// The body did not arrive within [`BODY_READ_TIMEOUT`].
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {}s", BODY_READ_TIMEOUT.as_secs())]
struct BodyTimedOut;

/// A request body with a deadline that starts at its first read.
struct TimedBody {
    inner: Incoming,
    deadline: Option<Pin<Box<Sleep>>>,
    stalled: Arc<AtomicBool>,
    done: bool,
}

impl TimedBody {
    fn new(inner: Incoming, stalled: Arc<AtomicBool>) -> Self {
        TimedBody {
            inner,
            deadline: None,
            stalled,
            done: false,
        }
    }
}

impl hyper::body::Body for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        let deadline = this
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(BODY_READ_TIMEOUT)));
        // The deadline first: a body that never stops arriving (the ping
        // path reads every body to its end) is cut at it too, not only one
        // that stalls.
        if deadline.as_mut().poll(cx).is_ready() {
            this.done = true;
            this.stalled.store(true, Ordering::Relaxed);
            return Poll::Ready(Some(Err(BodyTimedOut.into())));
        }
        Pin::new(&mut this.inner)
            .poll_frame(cx)
            .map(|frame| frame.map(|f| f.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
