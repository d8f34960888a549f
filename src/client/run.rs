//! `overdue run`: asks the guard whether to run (SPEC §13), runs the command
//! between a start ping and an exit-status ping, retries a recoverable
//! failure (SPEC §14), renews the lock meanwhile, and releases it once the
//! outcome is recorded.

use std::time::{Duration, Instant};

use regex::Regex;
use uuid::Uuid;

use super::attempts::Attempts;
use super::guard::{
    Acquire, Due, Guard, GuardOptions, IfUnreachable, Keeper, LockLost, Pick, Seat, Slot,
    Unanswered,
};
use super::process::{self, End, Outcome, EXIT_TIMED_OUT};
use super::{http, ping_url, send, Ping, PingKind, Retry};

/// How long a start ping may still take once the command is done.
const START_GRACE: Duration = Duration::from_secs(1);
/// Exit code for a guarded run that was not started because it is wrong: a
/// target that is neither a URL nor a UUID, or a server that refused the
/// guard's call (an unknown check, a bad request).
const EXIT_INVALID: i32 = 2;
/// The skip reason of a seat lost between taking it and starting the command.
const LOST_BEFORE_START: &str = "lost the lock before starting";
/// The variable that gives the command its lock token.
pub const TOKEN_ENV: &str = "OVERDUE_LOCK_TOKEN";
/// The variables that give the command its slot (RFC 3339 UTC) and the
/// slot's idempotency key (SPEC §14).
pub const SLOT_ENV: &str = "OVERDUE_SLOT";
pub const SLOT_KEY_ENV: &str = "OVERDUE_SLOT_KEY";
/// The variable that gives the command its attempt number, from 1.
pub const ATTEMPT_ENV: &str = "OVERDUE_ATTEMPT";
/// How hard a run without `--once` tries to learn its slot before the
/// command starts: once, briefly (the command is never held up long).
const SLOT_ASK: Retry = Retry {
    timeout: Duration::from_secs(2),
    retries: 0,
    total: Duration::from_secs(2),
};

/// Options of `overdue run`.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Ping URL or UUID.
    pub target: String,
    pub server: String,
    pub items_from: Option<Regex>,
    /// Bytes of output kept for the body.
    pub tail: usize,
    pub retry: Retry,
    pub guard: GuardOptions,
    /// Stop the command past this long.
    pub timeout: Option<Duration>,
    /// Between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// `--retries` and its options.
    pub attempts: Attempts,
}

/// A lock seat taken, and its renewal running.
#[derive(Debug)]
struct Held {
    seat: Seat,
    keeper: Keeper,
}

/// What the guard decided before the command.
#[derive(Debug)]
enum Admit {
    /// Run, holding a seat if any, once for each slot the server named
    /// (oldest first), or once without a slot.
    Run(Option<Held>, Vec<Slot>),
    /// Do not run; exit with this code.
    Skip(i32),
}

/// Runs `command` as the guard allows, pinging start and then its outcome,
/// again for each retried attempt; returns the last attempt's exit code when
/// it was let finish (128+N when killed by signal N; 127 when it cannot be
/// found, 126 when it cannot be started), 124 when it timed out, 0 when it
/// was skipped, whatever happened to the pings.
pub async fn run(opts: &RunOptions, command: &[String]) -> i32 {
    let client = http(opts.retry.timeout);
    let guard = Guard {
        client: client.clone(),
        target: opts.target.clone(),
        server: opts.server.clone(),
        retry: opts.retry,
    };
    if let Err(e) = ping_url(&opts.target, &opts.server, &Ping::of(PingKind::Start)) {
        // A typo, not an outage: whatever --if-unreachable says.
        if opts.guard.guarded() {
            eprintln!("overdue run: {e}; not running the command");
            return EXIT_INVALID;
        }
        eprintln!("overdue run: {e}; running the command without pings");
        let outcome =
            process::run_command(spec(opts, command, None, None, 1), std::future::pending()).await;
        return exit_code_of(&outcome);
    }
    let (held, slots) = match admit(&guard, &opts.guard, &Uuid::new_v4().to_string()).await {
        Admit::Run(held, slots) => (held, slots),
        Admit::Skip(code) => return code,
    };
    // One run per slot, oldest first; the first that fails stops the pass
    // (a later invocation resumes there). No slot: one run without one.
    let mut code = 0;
    let runs: Vec<Option<&Slot>> = if slots.is_empty() {
        vec![None]
    } else {
        slots.iter().map(Some).collect()
    };
    let count = runs.len();
    for (i, slot) in runs.into_iter().enumerate() {
        if count > 1 {
            eprintln!(
                "overdue run: catching up slot {} of {count}: {}",
                i + 1,
                slot.map_or("-", |s| s.start.as_str())
            );
        }
        code = run_slot(opts, &client, command, &held, slot).await;
        if code != 0 {
            if i + 1 < count {
                eprintln!(
                    "overdue run: the slot failed; the {} later open slot(s) wait for the next invocation",
                    count - i - 1
                );
            }
            break;
        }
        if held.as_ref().is_some_and(|h| h.keeper.lost().is_some()) {
            eprintln!("overdue run: the lock was lost; not running the later slots");
            break;
        }
    }
    // The seat is held (and renewed) until the outcome is recorded, so that a
    // host taking it next sees this run's success.
    give_back(&guard, held).await;
    code
}

/// Runs the command for one slot, retrying as `--retries` says; the last
/// attempt's exit code.
async fn run_slot(
    opts: &RunOptions,
    client: &reqwest::Client,
    command: &[String],
    held: &Option<Held>,
    slot: Option<&Slot>,
) -> i32 {
    let rid = Uuid::new_v4();
    let total = opts.attempts.total();
    let mut attempt = 1;
    loop {
        let seat = held.as_ref().map(|h| &h.seat);
        let (outcome, elapsed) = one_attempt(
            opts,
            client,
            command,
            seat,
            slot,
            attempt,
            rid,
            lost_signal(opts, held),
        )
        .await;
        // Under `--lock-lost kill` a lock lost while the command ran stopped it
        // (and says so); one lost after it ended changed nothing.
        let lost = match (held, &opts.guard.lock) {
            (Some(h), Some(lock)) if lock.lost == LockLost::Warn => h.keeper.lost(),
            _ => None,
        };
        let mut finish = finish_ping(&outcome, elapsed, opts.timeout, lost.as_deref(), rid);
        finish.slot = slot.map(|s| s.start.clone());
        if !opts.attempts.retries_after(attempt, &outcome) {
            report(opts, client, &finish).await;
            return exit_code_of(&outcome);
        }
        // A failed attempt that will be retried: recorded, no status change.
        let wait = opts.attempts.wait(attempt, &mut rand::thread_rng());
        let note = format!(
            "attempt {attempt} of {total} failed, retrying in {:.3}s",
            wait.as_secs_f64()
        );
        eprintln!("overdue run: {note}");
        finish.retry = true;
        finish
            .body
            .extend_from_slice(format!("[overdue run: {note}]\n").as_bytes());
        report(opts, client, &finish).await;
        // The lock is held (and renewed) across the wait; one lost meanwhile
        // under `--lock-lost kill` ends the run as a failure.
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            why = lost_signal(opts, held) => {
                eprintln!("overdue run: {why} while waiting to retry; not retrying");
                let mut fail = Ping::of(PingKind::Fail);
                fail.rid = Some(rid);
                fail.slot = slot.map(|s| s.start.clone());
                fail.body = format!("[overdue run: {why} while waiting to retry attempt {}]\n", attempt + 1).into_bytes();
                report(opts, client, &fail).await;
                return exit_code_of(&outcome).max(1);
            }
        }
        attempt += 1;
    }
}

/// Resolves with the reason when the lock is lost under `--lock-lost kill`;
/// never otherwise.
fn lost_signal(
    opts: &RunOptions,
    held: &Option<Held>,
) -> impl std::future::Future<Output = String> + 'static {
    let lost = match (held, &opts.guard.lock) {
        (Some(h), Some(lock)) if lock.lost == LockLost::Kill => Some(h.keeper.when_lost()),
        _ => None,
    };
    async move {
        match lost {
            Some(lost) => lost.await,
            None => std::future::pending().await,
        }
    }
}

/// One attempt: the start ping goes out while the command already runs;
/// returns how the command ended and how long it took.
#[allow(clippy::too_many_arguments)]
async fn one_attempt(
    opts: &RunOptions,
    client: &reqwest::Client,
    command: &[String],
    seat: Option<&Seat>,
    slot: Option<&Slot>,
    attempt: u32,
    rid: Uuid,
    stop: impl std::future::Future<Output = String>,
) -> (Outcome, Duration) {
    let start = Ping {
        rid: Some(rid),
        slot: slot.map(|s| s.start.clone()),
        ..Ping::of(PingKind::Start)
    };
    let start_task = ping_url(&opts.target, &opts.server, &start)
        .ok()
        .map(|url| {
            let client = client.clone();
            let retry = opts.retry;
            tokio::spawn(async move { send(&client, &url, &start, retry).await })
        });
    let began = Instant::now();
    let outcome = process::run_command(spec(opts, command, seat, slot, attempt), stop).await;
    let elapsed = began.elapsed();
    // The finish ping matters more: a start still pending when the command
    // is done gets one more second, then is abandoned (it is never sent
    // after the finish).
    if let Some(mut start_task) = start_task {
        match tokio::time::timeout(START_GRACE, &mut start_task).await {
            Ok(Ok(Ok(_))) => {}
            Ok(Ok(Err(e))) => eprintln!("overdue run: start ping failed: {e}"),
            Ok(Err(_)) => eprintln!("overdue run: start ping failed"),
            Err(_) => {
                start_task.abort();
                eprintln!(
                    "overdue run: start ping failed: no answer by the time the command ended"
                );
            }
        }
    }
    (outcome, elapsed)
}

/// Sends an attempt's outcome ping, saying on stderr when it cannot.
async fn report(opts: &RunOptions, client: &reqwest::Client, ping: &Ping) {
    match ping_url(&opts.target, &opts.server, ping) {
        Ok(url) => {
            if let Err(e) = send(client, &url, ping, opts.retry).await {
                eprintln!("overdue run: exit-status ping failed: {e}");
            }
        }
        Err(e) => eprintln!("overdue run: {e}"),
    }
}

/// Asks the server what the guard's flags require: the lock first, then
/// whether the slot is due while holding it (and renewing it already).
/// `nonce` is this invocation's key for taking the lock.
async fn admit(guard: &Guard, opts: &GuardOptions, nonce: &str) -> Admit {
    let mut held = None;
    if let Some(lock) = &opts.lock {
        match guard.acquire(lock, nonce).await {
            Ok(Acquire::Acquired(seat)) => {
                let keeper = Keeper::start(guard.clone(), lock.clone(), seat.clone());
                held = Some(Held { seat, keeper });
            }
            Ok(Acquire::Held(reason)) => {
                record_skip(guard, &reason).await;
                return Admit::Skip(0);
            }
            Err(Unanswered::Refused(e)) => {
                refused("take the lock", &e);
                return Admit::Skip(EXIT_INVALID);
            }
            Err(Unanswered::Unreachable(e)) => {
                // Under --once the slot may be done already: still ask.
                let how = if opts.once {
                    "going on without the lock"
                } else {
                    "running the command without the guard"
                };
                if !run_anyway(opts, "take the lock", &e, how) {
                    return Admit::Skip(0);
                }
            }
        }
    }
    let mut slots = Vec::new();
    // --catch-up each and --slot ask for their slots as --once does.
    let named = !matches!(opts.pick, Pick::Latest);
    if opts.once || named {
        match guard.due(&opts.pick).await {
            Ok(Due::Yes(s)) => slots = s,
            Ok(Due::No(reason)) => {
                record_skip(guard, &reason).await;
                give_back(guard, held).await;
                return Admit::Skip(0);
            }
            Err(Unanswered::Refused(e)) => {
                refused("say whether the slot is due", &e);
                give_back(guard, held).await;
                return Admit::Skip(EXIT_INVALID);
            }
            Err(Unanswered::Unreachable(e)) => {
                let how = if held.is_some() {
                    "running the command holding the lock"
                } else {
                    "running the command without the guard"
                };
                if !run_anyway(opts, "say whether the slot is due", &e, how) {
                    give_back(guard, held).await;
                    return Admit::Skip(0);
                }
            }
        }
    }
    // The seat may have been lost while `due` was asked (a renewal got 409):
    // the command must not start without it. As with a seat taken by
    // another host, that is a skip.
    if let Some(why) = held.as_ref().and_then(|h| h.keeper.lost()) {
        eprintln!("overdue run: {why} before the command started; not running it");
        record_skip(guard, LOST_BEFORE_START).await;
        give_back(guard, held).await;
        return Admit::Skip(0);
    }
    if !opts.once && !named {
        // Not asked yet: the slot this run is for, for the command's
        // idempotency key. Without an answer the command runs without it.
        match guard.current_slot(SLOT_ASK).await {
            Ok(s) => slots = s.into_iter().collect(),
            Err(Unanswered::Refused(e) | Unanswered::Unreachable(e)) => eprintln!(
                "overdue run: the server cannot name this run's slot ({e}); running the command without {SLOT_ENV}"
            ),
        }
    }
    Admit::Run(held, slots)
}

/// `--if-unreachable` when the server gave no answer: whether to go on
/// (`how`, said on stderr, as the decision is).
fn run_anyway(opts: &GuardOptions, what: &str, error: &str, how: &str) -> bool {
    match opts.if_unreachable {
        IfUnreachable::Skip => {
            eprintln!(
                "overdue run: the server cannot {what} ({error}); not running the command (--if-unreachable skip)"
            );
            false
        }
        IfUnreachable::Run => {
            eprintln!(
                "overdue run: the server cannot {what} ({error}); {how} (--if-unreachable run)"
            );
            true
        }
    }
}

/// A refusal is the invocation's own mistake (a wrong URL, key or UUID): it
/// is said, and the command is not run, whatever `--if-unreachable` says.
fn refused(what: &str, error: &str) {
    eprintln!("overdue run: the server refused to {what}: {error}; not running the command");
}

async fn record_skip(guard: &Guard, reason: &str) {
    if let Err(e) = guard.skip(reason).await {
        eprintln!("overdue run: skip ping failed ({reason}): {e}");
    }
}

/// Stops renewing and releases the seat, unless the server took it back.
async fn give_back(guard: &Guard, held: Option<Held>) {
    let Some(Held { seat, keeper }) = held else {
        return;
    };
    if keeper.stop().await.is_none() {
        if let Err(e) = guard.release(seat.token).await {
            eprintln!("overdue run: cannot release the lock: {e}");
        }
    }
}

fn spec<'a>(
    opts: &'a RunOptions,
    command: &'a [String],
    seat: Option<&Seat>,
    slot: Option<&Slot>,
    attempt: u32,
) -> process::Command<'a> {
    let mut env = vec![(ATTEMPT_ENV.to_string(), attempt.to_string())];
    if let Some(s) = seat {
        env.push((TOKEN_ENV.to_string(), s.token.to_string()));
    }
    if let Some(s) = slot {
        env.push((SLOT_ENV.to_string(), s.start.clone()));
        env.push((SLOT_KEY_ENV.to_string(), s.key.clone()));
    }
    process::Command {
        argv: command,
        env,
        items_from: opts.items_from.as_ref(),
        tail: opts.tail,
        timeout: opts.timeout,
        kill_grace: opts.kill_grace,
        own_group: !process::stdin_is_terminal(),
        watch_group: true,
        forward_signals: true,
    }
}

/// `overdue run`'s exit code: the command's own when it was let finish.
fn exit_code_of(outcome: &Outcome) -> i32 {
    match outcome.end {
        End::Exited => outcome.code,
        End::TimedOut { .. } => EXIT_TIMED_OUT,
        // Never a success for a command stopped before its end.
        End::Stopped { .. } if outcome.code == 0 => 1,
        End::Stopped { .. } => outcome.code,
    }
}

/// The ping that reports the outcome: the exit status of a command let
/// finish, a failure for one that was stopped; the tail of the output and a
/// line saying what happened as the body.
fn finish_ping(
    outcome: &Outcome,
    elapsed: Duration,
    timeout: Option<Duration>,
    lost: Option<&str>,
    rid: Uuid,
) -> Ping {
    let code = outcome.code;
    let took = format!("exit status {code} after {:.3}s", elapsed.as_secs_f64());
    let (kind, note) = match &outcome.end {
        End::Exited => {
            let mut note = took;
            if let Some(lost) = lost {
                note.push_str(&format!("; {lost}, let finish (--lock-lost warn)"));
            }
            (PingKind::Exit(u8::try_from(code).unwrap_or(1)), note)
        }
        End::TimedOut { killed } => (
            PingKind::Fail,
            format!(
                "timed out after {}, stopped with {}; {took}",
                humantime::format_duration(timeout.unwrap_or_default()),
                process::signal_name(*killed)
            ),
        ),
        End::Stopped { reason, killed } => (
            PingKind::Fail,
            format!(
                "{reason}, stopped with {}; {took}",
                process::signal_name(*killed)
            ),
        ),
    };
    let mut body = outcome.tail.bytes();
    body.extend_from_slice(format!("\n[overdue run: {note}]\n").as_bytes());
    Ping {
        items: outcome.items,
        rid: Some(rid),
        body,
        ..Ping::of(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Tail;

    fn outcome(code: i32, end: End) -> Outcome {
        Outcome {
            code,
            end,
            tail: Tail::new(100),
            items: Some(3),
        }
    }

    fn body(p: &Ping) -> String {
        String::from_utf8_lossy(&p.body).into_owned()
    }

    #[test]
    fn a_command_let_finish_keeps_its_exit_code() {
        for code in [0, 1, 7, 143] {
            assert_eq!(exit_code_of(&outcome(code, End::Exited)), code);
        }
        let o = outcome(7, End::Exited);
        let p = finish_ping(&o, Duration::from_millis(1500), None, None, Uuid::nil());
        assert_eq!(p.kind, PingKind::Exit(7));
        assert_eq!(p.items, Some(3));
        assert_eq!(body(&p), "\n[overdue run: exit status 7 after 1.500s]\n");
    }

    #[test]
    fn a_timeout_is_a_failure_and_124() {
        let o = outcome(137, End::TimedOut { killed: true });
        assert_eq!(exit_code_of(&o), EXIT_TIMED_OUT);
        let p = finish_ping(
            &o,
            Duration::from_secs(100),
            Some(Duration::from_secs(90)),
            None,
            Uuid::nil(),
        );
        assert_eq!(p.kind, PingKind::Fail);
        assert!(
            body(&p).contains("timed out after 1m 30s, stopped with SIGKILL; exit status 137"),
            "{}",
            body(&p)
        );
    }

    #[test]
    fn a_lost_lock_is_a_failure_and_never_exit_0() {
        let stopped = |code| {
            outcome(
                code,
                End::Stopped {
                    reason: "lost the lock (409 Conflict: gone)".into(),
                    killed: false,
                },
            )
        };
        assert_eq!(exit_code_of(&stopped(0)), 1);
        assert_eq!(exit_code_of(&stopped(143)), 143);
        let p = finish_ping(
            &stopped(143),
            Duration::from_secs(1),
            None,
            None,
            Uuid::nil(),
        );
        assert_eq!(p.kind, PingKind::Fail);
        assert!(
            body(&p).contains("lost the lock (409 Conflict: gone), stopped with SIGTERM"),
            "{}",
            body(&p)
        );
        // --lock-lost warn: the exit status is reported, with the loss.
        let o = outcome(0, End::Exited);
        let p = finish_ping(
            &o,
            Duration::from_secs(1),
            None,
            Some("lost the lock (409)"),
            Uuid::nil(),
        );
        assert_eq!(p.kind, PingKind::Exit(0));
        assert!(
            body(&p).contains("lost the lock (409), let finish (--lock-lost warn)"),
            "{}",
            body(&p)
        );
    }
}
