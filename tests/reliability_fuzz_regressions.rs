//! Replays the fuzz corpus through the fuzz harness in an ordinary `cargo test`:
//! the seeds under `fuzz/corpus/<target>/` and every input that once crashed,
//! hung or drew a 5xx, kept under `fuzz/regressions/<target>/`. Each input runs
//! through the same `overdue::fuzzing` function its fuzz target calls.

mod common;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use overdue::fuzzing;

/// Far above what any input takes (milliseconds); only a hang reaches it.
const PER_INPUT: Duration = common::HANG_GUARD;

fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut files = Vec::new();
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a readable fuzz input").path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(
        !files.is_empty(),
        "no seeds for the {target} target under fuzz/corpus/{target}/"
    );
    files
}

/// Runs `run` on every input of `target`, each on its own thread with a
/// deadline, and fails naming every input that panicked or hung.
fn replay(target: &str, run: impl Fn(&[u8]) + Send + Sync + 'static) {
    let run = std::sync::Arc::new(run);
    let mut failed = Vec::new();
    let files = inputs(target);
    for path in &files {
        let data = std::fs::read(path).expect("a readable fuzz input");
        let (tx, rx) = mpsc::channel();
        let run = run.clone();
        std::thread::spawn(move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&data)));
            let _ = tx.send(outcome.is_ok());
        });
        match rx.recv_timeout(PER_INPUT) {
            Ok(true) => {}
            Ok(false) => failed.push(format!("{} panicked", path.display())),
            Err(_) => failed.push(format!(
                "{} did not finish in {PER_INPUT:?}",
                path.display()
            )),
        }
    }
    assert!(failed.is_empty(), "{target}: {failed:#?}");
    eprintln!("{target}: {} inputs replayed", files.len());
}

#[test]
fn cron() {
    replay("cron", fuzzing::cron);
}

#[test]
fn duration() {
    replay("duration", fuzzing::duration);
}

#[test]
fn active_hours() {
    replay("active_hours", fuzzing::active_hours);
}

#[test]
fn config() {
    replay("config", fuzzing::config_file);
}

#[test]
fn ping() {
    // One server per test, as one fuzzing process shares one.
    let server = std::sync::Arc::new(fuzzing::Server::start());
    let s = server.clone();
    replay("ping", move |data| fuzzing::ping_on(&s, data));
}

#[test]
fn api() {
    let server = std::sync::Arc::new(fuzzing::Server::start());
    let s = server.clone();
    replay("api", move |data| fuzzing::api_on(&s, data));
}
