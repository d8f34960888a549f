//! Counts the wall-clock steps the clock finds and stores the backward ones
//! (SPEC §12, §6.2): every step in `overdue_clock_steps_total{direction}`,
//! every backward one in the database, so that a restart continues the
//! slewed timeline where it was. The clock logs each step itself, once.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock;
use crate::domain::timeline::{Direction, Slew};
use crate::metrics::Metrics;
use crate::store::Store;

/// How soon a slew that could not be stored is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// Runs until `stop` fires, starting with the steps found after the first
/// `seen` (the clock's cursor when this server began).
pub async fn run(
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    mut seen: usize,
    stop: CancellationToken,
) {
    let mut unsaved: Vec<Slew> = Vec::new();
    loop {
        let stepped = clock::stepped();
        tokio::pin!(stepped);
        // Registered before reading, so a step found meanwhile still wakes it.
        stepped.as_mut().enable();
        let (steps, next) = clock::steps_after(seen);
        seen = next;
        for step in steps {
            metrics.clock_step(step.direction);
            if step.direction == Direction::Backward {
                unsaved.push(Slew {
                    at: step.at,
                    wall: step.wall,
                });
            }
        }
        while let Some(slew) = unsaved.first().copied() {
            match store.record_slew(slew).await {
                Ok(()) => {
                    unsaved.remove(0);
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "cannot record a wall-clock step; will retry");
                    break;
                }
            }
        }
        let retry = async {
            if unsaved.is_empty() {
                std::future::pending::<()>().await;
            } else {
                tokio::time::sleep(RETRY).await;
            }
        };
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = &mut stepped => {}
            _ = retry => {}
        }
    }
}
