//! The command's whole process group dies with `overdue run` (Linux).
//!
//! The parent-death signal only reaches `overdue run`'s direct child: a
//! script's foreground step (`pg_dump`, `rsync`, `sleep`) is a grandchild and
//! would run on without the lock. So while the command runs, a small watcher
//! (this binary again, as the hidden `overdue __watch-group PGID PARENT`)
//! takes a parent-death signal of its own and, once `overdue run` is gone,
//! kills the command's process group. When the command ended on its own,
//! `overdue run` kills the watcher first: what a command leaves behind on
//! purpose is not its business.

use std::process::Stdio;

/// The hidden subcommand that runs the watcher.
pub const SUBCOMMAND: &str = "__watch-group";

/// A running watcher of the command's process group.
#[derive(Debug)]
pub struct Watcher {
    child: tokio::process::Child,
}

impl Watcher {
    /// Starts watching the process group `pgid` on behalf of this process.
    /// `None`, said on stderr, when no watcher can be started.
    pub fn start(pgid: libc::pid_t) -> Option<Watcher> {
        if !cfg!(target_os = "linux") || pgid <= 1 {
            return None;
        }
        // /proc/self/exe, not the path: it still names this binary after an
        // upgrade replaced the file.
        let mut command = tokio::process::Command::new("/proc/self/exe");
        command
            .arg(SUBCOMMAND)
            .arg(pgid.to_string())
            .arg(std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            // Out of our group: a signal to the group `overdue run` is in
            // (kill -9 -PGID) must not take the watcher along with it.
            .process_group(0)
            // Any way out of `overdue run` but its death stops the watcher.
            .kill_on_drop(true);
        match command.spawn() {
            Ok(child) => Some(Watcher { child }),
            Err(e) => {
                eprintln!(
                    "overdue run: cannot start the watcher of the command's process group ({e}); \
                     what the command starts may outlive a killed overdue run"
                );
                None
            }
        }
    }

    /// Stops the watcher without letting it act: the command ended.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// The watcher itself: waits until `parent` is gone, then kills the process
/// group `pgid` and exits. Returns the exit code.
#[cfg(target_os = "linux")]
pub fn watch(pgid: libc::pid_t, parent: libc::pid_t) -> i32 {
    if pgid <= 1 || parent <= 1 {
        eprintln!("overdue {SUBCOMMAND}: PGID and PARENT must be process ids above 1");
        return 2;
    }
    // SAFETY: signal-mask, prctl, getppid, sigwait and killpg calls on this
    // (single-threaded) process, with a signal set that lives on the stack.
    unsafe {
        // Every signal is waited for rather than acted on: none may end the
        // watcher while the group still needs it, and each wakes it up to
        // look whether its parent is still there.
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGTERM as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        ) == -1
        {
            eprintln!(
                "overdue {SUBCOMMAND}: cannot set the parent-death signal: {}",
                std::io::Error::last_os_error()
            );
            return 1;
        }
        // Checked after the signal is set, so a parent that died in between
        // (and sent nothing) is seen here.
        while libc::getppid() == parent {
            let mut sig: libc::c_int = 0;
            libc::sigwait(&all, &mut sig);
        }
        libc::killpg(pgid, libc::SIGKILL);
    }
    0
}

/// Without a parent-death signal there is nothing to watch with.
#[cfg(not(target_os = "linux"))]
pub fn watch(_pgid: libc::pid_t, _parent: libc::pid_t) -> i32 {
    eprintln!("overdue {SUBCOMMAND}: only on Linux");
    2
}
