//! The command `overdue run` wraps: its output passed through and kept for
//! the ping, a time limit, a stop on request (a lost lock), the signals
//! `overdue run` receives passed on, and a command that dies with it (its
//! whole process group, by a [`Watcher`]).
//!
//! Time here is tokio's monotonic clock only: a wall-clock step neither
//! shortens nor extends a run.

use std::future::Future;
use std::process::Stdio;
use std::time::Duration;

use regex::Regex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use super::watcher::Watcher;

/// Exit code of a run stopped by `--timeout` (as coreutils' `timeout`).
pub const EXIT_TIMED_OUT: i32 = 124;

/// The signals `overdue run` passes on to its command.
const FORWARDED: [libc::c_int; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Keeps the last `cap` bytes written to it.
#[derive(Debug)]
pub struct Tail {
    cap: usize,
    buf: std::collections::VecDeque<u8>,
}

impl Tail {
    /// An empty tail holding at most `cap` bytes.
    pub fn new(cap: usize) -> Tail {
        Tail {
            cap,
            buf: std::collections::VecDeque::with_capacity(cap.min(65_536)),
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        let bytes = &bytes[bytes.len().saturating_sub(self.cap)..];
        let overflow = (self.buf.len() + bytes.len()).saturating_sub(self.cap);
        self.buf.drain(..overflow);
        self.buf.extend(bytes);
    }

    /// What is kept.
    pub fn bytes(&self) -> Vec<u8> {
        self.buf.iter().copied().collect()
    }
}

/// The item count in a line, by `re`: its first capture group, else the
/// whole match; none past 2^63-1, which the server refuses.
pub fn items_in(re: &Regex, line: &str) -> Option<u64> {
    let caps = re.captures(line)?;
    let m = caps.get(1).or_else(|| caps.get(0))?;
    m.as_str()
        .trim()
        .parse()
        .ok()
        .filter(|n| i64::try_from(*n).is_ok())
}

/// The command and how to watch over it.
#[derive(Debug)]
pub struct Command<'a> {
    /// Program and arguments.
    pub argv: &'a [String],
    /// Variables added to the inherited environment.
    pub env: Vec<(String, String)>,
    pub items_from: Option<&'a Regex>,
    /// Bytes of output kept.
    pub tail: usize,
    /// Stop the command past this long.
    pub timeout: Option<Duration>,
    /// Between SIGTERM and SIGKILL when the command is stopped.
    pub kill_grace: Duration,
    /// Run it in a process group of its own, so that stops and passed-on
    /// signals reach what it started too (`sh -c "a; b"`). Not when stdin is
    /// a terminal ([`stdin_is_terminal`]): a command outside the terminal's
    /// foreground group is stopped when it reads from it.
    pub own_group: bool,
    /// With `own_group`, start a [`Watcher`] that kills the whole group if
    /// `overdue run` dies (the parent-death signal reaches only the command
    /// itself). It re-executes this binary: never from unit tests.
    pub watch_group: bool,
    /// Pass on the signals `overdue run` gets. Once on, tokio keeps the
    /// handlers for the life of the process.
    pub forward_signals: bool,
}

/// How the command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// It was let finish.
    Exited,
    /// `--timeout` stopped it; `killed` when SIGTERM was not enough.
    TimedOut { killed: bool },
    /// Stopped for this reason (a lost lock); `killed` as above.
    Stopped { reason: String, killed: bool },
}

/// What a run of the command leaves.
#[derive(Debug)]
pub struct Outcome {
    /// Its exit code: 128+N when a signal N ended it, 127 when it cannot be
    /// found, 126 when it cannot be started.
    pub code: i32,
    pub end: End,
    pub tail: Tail,
    pub items: Option<u64>,
}

/// Runs `cmd` to its end: passes its output through, keeps the tail and the
/// item count, passes on the signals `overdue run` gets, and stops it (SIGTERM,
/// then SIGKILL after the grace) past its time limit or when `stop` gives a
/// reason.
pub async fn run_command(cmd: Command<'_>, stop: impl Future<Output = String>) -> Outcome {
    let mut tail = Tail::new(cmd.tail);
    let Some((program, args)) = cmd.argv.split_first() else {
        eprintln!("overdue run: no command given (overdue run URL -- CMD ARGS…)");
        return Outcome {
            code: 2,
            end: End::Exited,
            tail,
            items: None,
        };
    };
    // Registered before the command exists, so none is lost in between.
    let mut signals = if cmd.forward_signals {
        forward_signals()
    } else {
        tokio::sync::mpsc::unbounded_channel().1
    };
    let own_group = cmd.own_group;
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .envs(cmd.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if own_group {
        command.process_group(0);
    }
    dies_with_parent(&mut command);
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            let msg = format!("overdue run: cannot run {program:?}: {e}\n");
            eprint!("{msg}");
            tail.push(msg.as_bytes());
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Outcome {
                code,
                end: End::Exited,
                tail,
                items: None,
            };
        }
    };
    let pid = child
        .id()
        .and_then(|p| libc::pid_t::try_from(p).ok())
        .unwrap_or(0);
    // Where stops and passed-on signals go: the command's group, or the command.
    let target = if own_group { -pid } else { pid };
    let watcher = if own_group && cmd.watch_group {
        Watcher::start(pid)
    } else {
        None
    };

    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
    let pumps: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| tokio::spawn(pump(s, tokio::io::stdout(), tx.clone()))),
        child
            .stderr
            .take()
            .map(|s| tokio::spawn(pump(s, tokio::io::stderr(), tx.clone()))),
    ]
    .into_iter()
    .flatten()
    .collect();
    drop(tx);

    let deadline = cmd.timeout.map(|t| Instant::now() + t);
    let never = Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600);
    let mut stop = std::pin::pin!(stop);
    let mut stopping: Option<End> = None;
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    let mut status = None;
    let mut output_open = true;
    let mut lines = Lines::new(cmd.items_from);
    while status.is_none() || output_open {
        // A command killed while something it started still holds its output
        // open: that output is not waited for.
        if killed && status.is_some() {
            break;
        }
        // The process group lives as long as anything in it; the command's own
        // pid only until it is reaped.
        let reachable = status.is_none() || (own_group && output_open);
        tokio::select! {
            chunk = rx.recv(), if output_open => match chunk {
                Some(chunk) => {
                    tail.push(&chunk);
                    lines.push(&chunk);
                }
                None => output_open = false,
            },
            s = child.wait(), if status.is_none() => status = Some(s),
            Some(sig) = signals.recv() => {
                if reachable && (own_group || !from_terminal(sig)) {
                    send_signal(target, sig);
                }
            }
            _ = tokio::time::sleep_until(deadline.unwrap_or(never)),
                if deadline.is_some() && stopping.is_none() => {
                eprintln!(
                    "overdue run: the command timed out after {}; stopping it",
                    humantime::format_duration(cmd.timeout.unwrap_or_default())
                );
                stopping = Some(End::TimedOut { killed: false });
                if reachable {
                    send_signal(target, libc::SIGTERM);
                }
                kill_at = Some(Instant::now() + cmd.kill_grace);
            }
            reason = &mut stop, if stopping.is_none() => {
                eprintln!("overdue run: {reason}; stopping the command");
                stopping = Some(End::Stopped { reason, killed: false });
                if reachable {
                    send_signal(target, libc::SIGTERM);
                }
                kill_at = Some(Instant::now() + cmd.kill_grace);
            }
            _ = tokio::time::sleep_until(kill_at.unwrap_or(never)), if kill_at.is_some() && !killed => {
                killed = true;
                if reachable {
                    send_signal(target, libc::SIGKILL);
                }
            }
        }
    }
    for task in pumps {
        if output_open {
            task.abort();
        }
        let _ = task.await;
    }
    // The command ended (or was stopped and killed): `overdue run` lives on
    // to report it, and the group is no longer the watcher's business.
    if let Some(watcher) = watcher {
        watcher.stop().await;
    }
    let items = lines.finish();
    let code = match status {
        Some(Ok(status)) => exit_code(status),
        Some(Err(e)) => {
            eprintln!("overdue run: cannot wait for the command: {e}");
            1
        }
        None => 1,
    };
    let end = match stopping {
        None => End::Exited,
        Some(End::TimedOut { .. }) => End::TimedOut { killed },
        Some(End::Stopped { reason, .. }) => End::Stopped { reason, killed },
        Some(End::Exited) => End::Exited,
    };
    Outcome {
        code,
        end,
        tail,
        items,
    }
}

/// The last item count in the output, read line by line.
struct Lines<'a> {
    re: Option<&'a Regex>,
    partial: Vec<u8>,
    items: Option<u64>,
}

impl<'a> Lines<'a> {
    fn new(re: Option<&'a Regex>) -> Lines<'a> {
        Lines {
            re,
            partial: Vec::new(),
            items: None,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        let Some(re) = self.re else { return };
        self.partial.extend_from_slice(chunk);
        while let Some(i) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=i).collect();
            if let Some(n) = items_in(re, &String::from_utf8_lossy(&line)) {
                self.items = Some(n);
            }
        }
        if self.partial.len() > 65_536 {
            self.partial.clear();
        }
    }

    fn finish(self) -> Option<u64> {
        let re = self.re?;
        items_in(re, &String::from_utf8_lossy(&self.partial)).or(self.items)
    }
}

/// SIGINT and SIGQUIT are the terminal's keys: when the command shares our
/// process group the terminal has already sent them to it too, and a second
/// copy would read as a second Ctrl-C.
fn from_terminal(sig: libc::c_int) -> bool {
    sig == libc::SIGINT || sig == libc::SIGQUIT
}

/// The forwarded signals as they arrive. A signal whose handler cannot be
/// installed keeps its default action (it ends `overdue run`, and with it the
/// command); that is said once.
fn forward_signals() -> tokio::sync::mpsc::UnboundedReceiver<libc::c_int> {
    use tokio::signal::unix::{signal, SignalKind};
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for sig in FORWARDED {
        match signal(SignalKind::from_raw(sig)) {
            Ok(mut stream) => {
                let tx = tx.clone();
                tokio::spawn(async move {
                    while stream.recv().await.is_some() {
                        if tx.send(sig).is_err() {
                            break;
                        }
                    }
                });
            }
            Err(e) => eprintln!("overdue run: cannot pass signal {sig} on: {e}"),
        }
    }
    rx
}

fn send_signal(target: libc::pid_t, sig: libc::c_int) {
    if target == 0 || target == -1 {
        // 0 and -1 would reach our own group or every process we may signal.
        return;
    }
    // SAFETY: kill(2) has no memory effects; a target already gone is ESRCH.
    unsafe {
        libc::kill(target, sig);
    }
}

/// Whether stdin is a terminal (an interactive run, not cron's).
pub fn stdin_is_terminal() -> bool {
    // SAFETY: isatty(3) only inspects the descriptor.
    unsafe { libc::isatty(libc::STDIN_FILENO) == 1 }
}

/// The command gets SIGKILL when `overdue run` dies, even by SIGKILL, so no
/// job runs on without its guard. Linux's parent-death signal follows the
/// thread that forked: `overdue run` spawns from the thread its
/// single-threaded runtime runs on, which lives as long as the process.
#[cfg(target_os = "linux")]
fn dies_with_parent(command: &mut tokio::process::Command) {
    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    // SAFETY: between fork and exec the closure calls only prctl(2) and
    // getppid(2), both async-signal-safe, and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            ) == -1
            {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before the signal was set: nobody would send it.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn dies_with_parent(_command: &mut tokio::process::Command) {}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    if let Some(code) = status.code() {
        return code;
    }
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = status.signal() {
        return 128 + sig;
    }
    1
}

/// The name of a stopping signal, for messages.
pub fn signal_name(killed: bool) -> &'static str {
    if killed {
        "SIGKILL"
    } else {
        "SIGTERM"
    }
}

/// Copies a child's stream to ours and hands each chunk on for the tail.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    tx: tokio::sync::mpsc::Sender<Vec<u8>>,
) {
    let mut buf = vec![0u8; 8192];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let _ = to.write_all(&buf[..n]).await;
                let _ = to.flush().await;
                let _ = tx.send(buf[..n].to_vec()).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    fn command(argv: &[String]) -> Command<'_> {
        Command {
            argv,
            env: Vec::new(),
            items_from: None,
            tail: 1000,
            timeout: None,
            kill_grace: Duration::from_secs(10),
            own_group: true,
            watch_group: false,
            forward_signals: false,
        }
    }

    #[test]
    fn tail_keeps_the_last_bytes() {
        let mut t = Tail::new(5);
        t.push(b"abc");
        t.push(b"defg");
        assert_eq!(t.bytes(), b"cdefg");
        t.push(b"0123456789");
        assert_eq!(t.bytes(), b"56789");
    }

    #[test]
    fn items_from_a_capture_group_or_the_match() {
        let re = Regex::new(r"found (\d+) new items").unwrap();
        assert_eq!(items_in(&re, "found 12 new items\n"), Some(12));
        assert_eq!(items_in(&re, "nothing"), None);
        let re = Regex::new(r"\d+").unwrap();
        assert_eq!(items_in(&re, "x 7 y"), Some(7));
        // The server stores counts as signed 64-bit integers.
        assert_eq!(
            items_in(&re, "9223372036854775807"),
            Some(9_223_372_036_854_775_807)
        );
        assert_eq!(items_in(&re, "9223372036854775808"), None);
    }

    #[test]
    fn items_come_from_the_last_matching_line_even_without_a_newline() {
        let re = Regex::new(r"got (\d+)").unwrap();
        let mut lines = Lines::new(Some(&re));
        lines.push(b"got 1\ngo");
        lines.push(b"t 2\nnothing\ngot 3");
        assert_eq!(lines.finish(), Some(3));
        let mut lines = Lines::new(Some(&re));
        lines.push(b"got 4\nnothing");
        assert_eq!(lines.finish(), Some(4));
    }

    #[tokio::test]
    async fn a_command_let_finish_keeps_its_code_and_env() {
        let a = argv("echo \"token=$OVERDUE_LOCK_TOKEN\"; exit 7");
        let mut c = command(&a);
        c.env = vec![("OVERDUE_LOCK_TOKEN".into(), "42".into())];
        c.timeout = Some(Duration::from_secs(30));
        let o = run_command(c, std::future::pending()).await;
        assert_eq!((o.code, o.end), (7, End::Exited));
        assert_eq!(o.tail.bytes(), b"token=42\n");
    }

    #[tokio::test]
    async fn past_the_timeout_sigterm_then_sigkill_after_the_grace() {
        // Traps SIGTERM and goes on: only SIGKILL ends it.
        let a = argv("trap 'echo got TERM' TERM; echo ready; while :; do sleep 0.05; done");
        let mut c = command(&a);
        c.timeout = Some(Duration::from_millis(300));
        c.kill_grace = Duration::from_millis(500);
        let began = std::time::Instant::now();
        let o = run_command(c, std::future::pending()).await;
        let took = began.elapsed();
        assert_eq!(o.end, End::TimedOut { killed: true });
        assert_eq!(o.code, 128 + libc::SIGKILL);
        assert!(
            String::from_utf8_lossy(&o.tail.bytes()).contains("got TERM"),
            "SIGTERM first: {:?}",
            String::from_utf8_lossy(&o.tail.bytes())
        );
        assert!(
            took >= Duration::from_millis(800),
            "the grace was given: {took:?}"
        );
    }

    #[tokio::test]
    async fn a_command_that_obeys_sigterm_is_not_killed() {
        let a = argv("sleep 30");
        let mut c = command(&a);
        c.timeout = Some(Duration::from_millis(200));
        let o = run_command(c, std::future::pending()).await;
        assert_eq!(o.end, End::TimedOut { killed: false });
        assert_eq!(o.code, 128 + libc::SIGTERM);
    }

    #[tokio::test]
    async fn a_stop_request_stops_it_with_its_reason() {
        let a = argv("sleep 30");
        let c = command(&a);
        let stop = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            "lost the lock (409)".to_string()
        };
        let o = run_command(c, stop).await;
        assert_eq!(
            o.end,
            End::Stopped {
                reason: "lost the lock (409)".into(),
                killed: false
            }
        );
        assert_eq!(o.code, 128 + libc::SIGTERM);
    }

    #[tokio::test]
    async fn a_stop_reaches_what_the_command_started() {
        // The shell waits on a background sleep that keeps the output open:
        // SIGTERM to the shell alone would leave it running (and the run
        // waiting for its output).
        let a = argv("sleep 30 & wait");
        let mut c = command(&a);
        c.timeout = Some(Duration::from_millis(200));
        let began = std::time::Instant::now();
        let o = run_command(c, std::future::pending()).await;
        assert_eq!(o.end, End::TimedOut { killed: false });
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "{:?}",
            began.elapsed()
        );
    }

    #[tokio::test]
    async fn a_missing_program_is_127() {
        let a = vec!["/nonexistent/overdue-test-program".to_string()];
        let o = run_command(command(&a), std::future::pending()).await;
        assert_eq!(o.code, 127);
        assert!(String::from_utf8_lossy(&o.tail.bytes()).contains("cannot run"));
    }
}
