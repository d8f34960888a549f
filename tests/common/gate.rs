//! A TCP front for a receiver that a test can take down and bring back on
//! the same port: closed (nothing listens, so connections are refused),
//! rejecting (it answers with the protocol's "try again later": HTTP 503 or
//! an SMTP 421 greeting) or open (connections are relayed to the receiver).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// What the receiver behind the gate speaks, for its "try again later".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http,
    Smtp,
}

/// What the gate does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Nothing listens on the port: connecting is refused.
    Closed,
    /// Every connection gets a temporary failure (HTTP 503, SMTP 421).
    Reject,
    /// Connections are relayed to the receiver.
    Open,
}

/// See the module documentation.
pub struct TcpGate {
    port: u16,
    target: SocketAddr,
    protocol: Protocol,
    /// Cancelled when the mode changes: stops the accept loop and cuts every
    /// connection of the old mode.
    generation: Mutex<CancellationToken>,
    mode: Mutex<Mode>,
    rejected: Arc<AtomicUsize>,
    relayed: Arc<AtomicUsize>,
}

impl TcpGate {
    /// A gate on a port of its own in front of `target`, in this mode.
    pub async fn start(target: SocketAddr, protocol: Protocol, mode: Mode) -> TcpGate {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind gate");
        let port = listener.local_addr().unwrap().port();
        let gate = TcpGate {
            port,
            target,
            protocol,
            generation: Mutex::new(CancellationToken::new()),
            mode: Mutex::new(Mode::Closed),
            rejected: Arc::new(AtomicUsize::new(0)),
            relayed: Arc::new(AtomicUsize::new(0)),
        };
        if mode != Mode::Closed {
            *gate.mode.lock().unwrap() = mode;
            gate.serve(listener, mode);
        }
        gate
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn mode(&self) -> Mode {
        *self.mode.lock().unwrap()
    }

    /// Connections answered with a temporary failure so far.
    pub fn rejected(&self) -> usize {
        self.rejected.load(Ordering::SeqCst)
    }

    /// Connections relayed to the receiver so far.
    pub fn relayed(&self) -> usize {
        self.relayed.load(Ordering::SeqCst)
    }

    /// Switches the mode; open connections of the old mode are cut, and the
    /// port is bound again (the same one) when it was closed.
    pub async fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
        let fresh = CancellationToken::new();
        let previous = std::mem::replace(&mut *self.generation.lock().unwrap(), fresh);
        previous.cancel();
        if mode == Mode::Closed {
            return;
        }
        // The old listener is dropped by its task; binding again can race
        // with that for a moment.
        let deadline = Instant::now() + super::HANG_GUARD;
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", self.port)).await {
                Ok(l) => break l,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => panic!("gate cannot bind 127.0.0.1:{} again: {e}", self.port),
            }
        };
        self.serve(listener, mode);
    }

    fn serve(&self, listener: TcpListener, mode: Mode) {
        let stop = self.generation.lock().unwrap().clone();
        let (target, protocol) = (self.target, self.protocol);
        let (rejected, relayed) = (self.rejected.clone(), self.relayed.clone());
        tokio::spawn(async move {
            loop {
                let (inbound, _) = tokio::select! {
                    _ = stop.cancelled() => break,
                    accepted = listener.accept() => match accepted {
                        Ok(a) => a,
                        Err(_) => continue,
                    },
                };
                let stop = stop.clone();
                let (rejected, relayed) = (rejected.clone(), relayed.clone());
                tokio::spawn(async move {
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = async {
                            if mode == Mode::Reject {
                                rejected.fetch_add(1, Ordering::SeqCst);
                                reject(inbound, protocol).await;
                            } else {
                                relayed.fetch_add(1, Ordering::SeqCst);
                                relay(inbound, target).await;
                            }
                        } => {}
                    }
                });
            }
            // Dropping the listener here closes the port.
        });
    }
}

impl Drop for TcpGate {
    fn drop(&mut self) {
        self.generation.lock().unwrap().cancel();
    }
}

async fn relay(mut inbound: TcpStream, target: SocketAddr) {
    if let Ok(mut outbound) = TcpStream::connect(target).await {
        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
    }
}

async fn reject(mut inbound: TcpStream, protocol: Protocol) {
    match protocol {
        Protocol::Smtp => {
            let _ = inbound
                .write_all(b"421 4.3.2 test gate: service not available, try again later\r\n")
                .await;
        }
        Protocol::Http => {
            // Read the request (headers and a Content-Length body) before
            // answering, so the client sees a response, not a reset.
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                if let Some(end) = find(&buf, b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + length {
                        break;
                    }
                }
                match inbound.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let body = "test gate: service unavailable";
            let response = format!(
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = inbound.write_all(response.as_bytes()).await;
        }
    }
    let _ = inbound.shutdown().await;
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
