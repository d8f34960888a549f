//! The one place tests bound time: the hang guard, waiting for something
//! that must happen, and holding a scenario (an outage, a partition) for a
//! while. `tests/module_graph.rs` refuses an upper bound on time anywhere
//! else in tests/: a test asserts order, exactly-once and the instants the
//! server recorded, and how fast things happen is measured by the scripts in
//! bench/ (BENCHMARKS.md).

use std::future::Future;
use std::time::{Duration, Instant};

/// How long a test waits for something that must happen before it calls it
/// a hang. A hang guard, never a service level.
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// How often [`eventually`] and [`hold`] look again.
const POLL: Duration = Duration::from_millis(50);

/// Polls `probe` until it gives a value; fails naming `what` after the hang
/// guard.
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(start.elapsed() < HANG_GUARD, "hang guard: {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// Keeps a scenario going for at least `d` (a database down, a partition
/// cut), calling `each` between naps: a lower bound on time, never a window
/// in which something must not happen (wait for a positive event for that).
pub async fn hold<F, Fut>(d: Duration, mut each: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let start = Instant::now();
    while start.elapsed() < d {
        each().await;
        tokio::time::sleep(POLL).await;
    }
}
