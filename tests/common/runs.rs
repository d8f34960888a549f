//! Real `overdue run` processes of the built binary: started in a
//! directory of the test's, their exit code and stderr collected under the
//! hang guard.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::HANG_GUARD;

/// `overdue run FLAGS URL -- sh -c SCRIPT` in `dir`, started now.
pub fn start_run(flags: &[&str], url: &str, script: &str, dir: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_overdue"))
        .arg("run")
        .args(flags)
        .arg(url)
        .arg("--")
        .args(["sh", "-c", script])
        .current_dir(dir)
        .env_remove("OVERDUE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn overdue run")
}

/// Waits for a run; its exit code and what it wrote to stderr.
fn finish(child: Child) -> (i32, String) {
    let out = child.wait_with_output().expect("wait for overdue run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits for every run, in order: each one's exit code and stderr.
pub async fn finish_all(children: Vec<Child>) -> Vec<(i32, String)> {
    tokio::time::timeout(
        HANG_GUARD,
        tokio::task::spawn_blocking(move || children.into_iter().map(finish).collect()),
    )
    .await
    .expect("hang guard: overdue run did not end")
    .unwrap()
}

/// One `overdue run`, to its end: its exit code and stderr.
pub async fn run(flags: &[&str], url: &str, script: &str, dir: &Path) -> (i32, String) {
    finish_all(vec![start_run(flags, url, script, dir)])
        .await
        .remove(0)
}

/// The lines of a file a command wrote (none when it does not exist).
pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}
