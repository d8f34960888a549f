//! The no-op baseline for `bench/ping.sh`: an axum server that answers every
//! `/ping/...` request with `200 OK` and does nothing else.
//!
//! The ping benchmark reports overdue's throughput as a ratio to this server,
//! measured on the same machine just before and just after, so the figure says
//! what storing a ping costs rather than how fast the machine is (SPEC §12).
//!
//! Usage: `cargo run --release --example noop -- [ADDR]` (default `127.0.0.1:0`).

use axum::routing::any;
use axum::Router;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".to_string());
    let app = Router::new().route("/ping/{*rest}", any(|| async { "OK" }));
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await
}
