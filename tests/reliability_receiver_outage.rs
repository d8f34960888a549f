//! Receiver outage (SPEC §6): a webhook receiver, and an SMTP server, that
//! are down for a while and then come back, on the same port. "Down" is a
//! [`TcpGate`] in front of the real receiver: first nothing listens
//! (connection refused), then it answers "try again later" (HTTP 503, SMTP
//! 421), then it relays again.
//! - An outage within the retry budget: every notification is delivered
//!   once after recovery (counted by its Idempotency-Key / Message-ID).
//! - An outage beyond it: every notification becomes a dead letter, the
//!   fallback receiver gets the aggregated "could not be delivered" notice
//!   once, and when the receiver is back the dead-letter sweep delivers each
//!   notification once.
//!
//! `OVERDUE_SOAK=1` fails more checks at once (see docs/reliability.md).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::gate::{Mode, Protocol, TcpGate};
use common::sinks::{SmtpOptions, SmtpSink, WebhookSink};
use common::{Backend, TestServer};
use serde_json::{json, Value};

/// Which kind of receiver is taken down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Webhook,
    Email,
}

/// The real receiver behind its gate.
struct Target {
    kind: Kind,
    hook: Option<WebhookSink>,
    smtp: Option<SmtpSink>,
    gate: TcpGate,
}

impl Target {
    /// Starts the receiver with its gate closed.
    async fn start(kind: Kind) -> Target {
        match kind {
            Kind::Webhook => {
                let hook = WebhookSink::start().await;
                let addr: SocketAddr = hook.url("").trim_start_matches("http://").parse().unwrap();
                let gate = TcpGate::start(addr, Protocol::Http, Mode::Closed).await;
                Target {
                    kind,
                    hook: Some(hook),
                    smtp: None,
                    gate,
                }
            }
            Kind::Email => {
                let smtp = SmtpSink::start(SmtpOptions::default());
                let addr: SocketAddr = format!("127.0.0.1:{}", smtp.port()).parse().unwrap();
                let gate = TcpGate::start(addr, Protocol::Smtp, Mode::Closed).await;
                Target {
                    kind,
                    hook: None,
                    smtp: Some(smtp),
                    gate,
                }
            }
        }
    }

    /// The receiver's config, named "target", pointed at the gate.
    fn toml(&self) -> String {
        match self.kind {
            Kind::Webhook => format!(
                "[[receivers]]\nname = \"target\"\ntype = \"webhook\"\nurl = \"{}\"\ntimeout = \"2s\"\n",
                self.gate.url("/hook")
            ),
            Kind::Email => format!(
                "[[receivers]]\nname = \"target\"\ntype = \"email\"\ntimeout = \"2s\"\n\
                 to = [\"oncall@example.com\"]\n\
                 smtp = {{ host = \"127.0.0.1\", port = {}, tls = \"none\", from = \"overdue@example.com\" }}\n",
                self.gate.port()
            ),
        }
    }

    /// The notification id of every delivery that reached the receiver, in
    /// arrival order (the Idempotency-Key header, or the id in Message-ID).
    fn deliveries(&self) -> Vec<String> {
        match self.kind {
            Kind::Webhook => self
                .hook
                .as_ref()
                .unwrap()
                .requests()
                .iter()
                .map(|r| {
                    r.header("idempotency-key")
                        .expect("Idempotency-Key")
                        .to_string()
                })
                .collect(),
            Kind::Email => self
                .smtp
                .as_ref()
                .unwrap()
                .messages()
                .iter()
                .map(|m| {
                    let id = m.header("message-id").expect("Message-ID");
                    id.trim_start_matches('<')
                        .trim_end_matches("@overdue>")
                        .to_string()
                })
                .collect(),
        }
    }

    /// What a refused connection's attempt error says.
    fn refused_error(&self) -> &'static str {
        match self.kind {
            Kind::Webhook => "cannot connect to",
            Kind::Email => "cannot connect to SMTP server",
        }
    }

    /// What a "try again later" attempt error says.
    fn rejected_error(&self) -> &'static str {
        match self.kind {
            Kind::Webhook => "HTTP 503",
            Kind::Email => "SMTP 421",
        }
    }
}

/// How many checks fail at once (each in a group of its own: one
/// notification each).
fn checks() -> usize {
    if std::env::var_os("OVERDUE_SOAK").is_some_and(|v| !v.is_empty() && v != "0") {
        20
    } else {
        3
    }
}

/// Creates `n` checks in teams of their own and fails them all.
async fn fail_checks(server: &TestServer, n: usize) {
    for i in 0..n {
        let c = server
            .create_check(json!({"slug": format!("job-{i}"), "interval": "1h", "labels": {"team": format!("t{i}")}}))
            .await;
        let (status, _) = server
            .ping(&format!("/ping/{}/fail", c["uuid"].as_str().unwrap()))
            .await;
        assert_eq!(status, 200);
    }
}

/// The notifications to receiver "target".
async fn to_target(server: &TestServer) -> Vec<Value> {
    let v = server
        .get_json("/api/v1/notifications?receiver=target&limit=1000")
        .await;
    v["notifications"].as_array().unwrap().clone()
}

/// Polls the notifications to "target" until `pred` holds.
async fn until(server: &TestServer, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let list = to_target(server).await;
        if pred(&list) {
            return list;
        }
        assert!(
            start.elapsed() < common::HANG_GUARD,
            "timed out waiting until {what}: {list:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// True when a notification has an attempt whose error contains `text`.
fn has_error(n: &Value, text: &str) -> bool {
    n["attempt_log"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["error"].as_str().is_some_and(|e| e.contains(text)))
}

fn outcomes(n: &Value) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for a in n["attempt_log"].as_array().unwrap() {
        *m.entry(a["outcome"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    m
}

/// Asserts that the receiver got each of `ids` exactly once, and nothing else.
fn assert_each_once(target: &Target, ids: &BTreeSet<String>) {
    let got = target.deliveries();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for id in &got {
        *counts.entry(id.as_str()).or_default() += 1;
    }
    let expected: BTreeMap<&str, usize> = ids.iter().map(|id| (id.as_str(), 1)).collect();
    assert_eq!(counts, expected, "deliveries by key at the receiver");
}

async fn within_retry_budget(backend: Backend, kind: Kind) {
    let target = Target::start(kind).await;
    let n = checks();
    let toml = format!(
        "{}\n[route]\nreceiver = \"target\"\ngroup_by = [\"team\"]\ngroup_wait = \"100ms\"\n\
         group_interval = \"1h\"\n\n[notifications]\nmax_attempts = 30\nretry_base = \"100ms\"\n\
         retry_max = \"500ms\"\n",
        target.toml()
    );
    let server = TestServer::start(backend, &toml).await;
    fail_checks(&server, n).await;

    // Down: connections refused, until every notification has met that.
    let refused = target.refused_error();
    until(&server, "every notification was refused", |l| {
        l.len() == n && l.iter().all(|x| has_error(x, refused))
    })
    .await;
    // Still down: it answers "try again later", until every one has met that.
    target.gate.set(Mode::Reject).await;
    let rejected = target.rejected_error();
    until(&server, "every notification was rejected", |l| {
        l.iter().all(|x| has_error(x, rejected))
    })
    .await;
    assert!(
        target.deliveries().is_empty(),
        "nothing got through the outage"
    );
    // Back: every notification is delivered, once.
    target.gate.set(Mode::Open).await;
    let list = until(&server, "every notification was delivered", |l| {
        l.iter().all(|x| x["state"] == "delivered")
    })
    .await;
    let ids: BTreeSet<String> = list
        .iter()
        .map(|x| x["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), n);
    // Late duplicates would arrive within a few retry periods.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_each_once(&target, &ids);
    let mut attempts = Vec::new();
    for x in &to_target(&server).await {
        assert_eq!(x["state"], "delivered", "{x:#}");
        let o = outcomes(x);
        assert_eq!(o.get("delivered"), Some(&1), "{x:#}");
        assert!(o.get("retry").is_some_and(|r| *r >= 2), "{x:#}");
        assert_eq!(o.get("dead"), None, "{x:#}");
        attempts.push(x["attempts"].as_i64().unwrap());
    }
    let summary = format!(
        "receiver outage within the retry budget ({kind:?}, {backend:?}): {n} notifications, \
         attempts each {attempts:?} (refused, then {} rejected connections, then delivered); \
         each delivered exactly once",
        target.gate.rejected()
    );
    println!("{summary}");
    server.stop().await;
}

async fn beyond_retry_budget(backend: Backend, kind: Kind) {
    let target = Target::start(kind).await;
    let fallback = WebhookSink::start().await;
    let n = checks();
    let toml = format!(
        "fallback_receiver = \"fallback\"\n\n{}\n[[receivers]]\nname = \"fallback\"\n\
         type = \"webhook\"\nurl = \"{}\"\n\n[route]\nreceiver = \"target\"\n\
         group_by = [\"team\"]\ngroup_wait = \"100ms\"\ngroup_interval = \"1h\"\n\n\
         [notifications]\nmax_attempts = 2\nretry_base = \"100ms\"\nsweep_interval = \"2s\"\n",
        target.toml(),
        fallback.url("/fallback")
    );
    let server = TestServer::start(backend, &toml).await;
    fail_checks(&server, n).await;

    // The outage outlasts the retries: every notification is a dead letter.
    let refused = target.refused_error();
    let dead = until(&server, "every notification is dead", |l| {
        l.len() == n && l.iter().all(|x| x["state"] == "dead")
    })
    .await;
    let ids: BTreeSet<String> = dead
        .iter()
        .map(|x| x["id"].as_str().unwrap().to_string())
        .collect();
    for x in &dead {
        assert_eq!(x["attempts"], 2, "{x:#}");
        assert!(x["last_error"].as_str().unwrap().contains(refused), "{x:#}");
    }
    // The fallback receiver is told, once per dead letter.
    let reported = |notices: &[common::sinks::Request]| -> Vec<String> {
        notices
            .iter()
            .flat_map(|r| {
                let body = r.json();
                assert_eq!(
                    body["groupLabels"]["alertname"], "OverdueUndelivered",
                    "{body}"
                );
                let listed = body["alerts"].as_array().unwrap().len();
                assert_eq!(
                    body["commonAnnotations"]["summary"],
                    format!("{listed} notifications could not be delivered"),
                    "{body}"
                );
                body["alerts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| {
                        let url = a["annotations"]["link"].as_str().unwrap();
                        url.rsplit('/').next().unwrap().to_string()
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let start = Instant::now();
    loop {
        let got: BTreeSet<String> = reported(&fallback.requests()).into_iter().collect();
        if got == ids {
            break;
        }
        assert!(
            start.elapsed() < common::HANG_GUARD,
            "the fallback was told about {got:?}, not {ids:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        target.deliveries().is_empty(),
        "nothing got through the outage"
    );

    // Back: the sweep delivers every dead letter, once.
    target.gate.set(Mode::Open).await;
    until(&server, "every dead letter was delivered", |l| {
        l.iter().all(|x| x["state"] == "delivered")
    })
    .await;
    // Another sweep passes: nothing is sent twice, nobody is told twice.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_each_once(&target, &ids);
    let mut told = reported(&fallback.requests());
    told.sort();
    assert_eq!(
        told,
        ids.iter().cloned().collect::<Vec<_>>(),
        "each dead letter reported once"
    );
    let summary = format!(
        "receiver outage beyond the retry budget ({kind:?}, {backend:?}): {n} notifications \
         dead after 2 attempts; {} notice(s) to the fallback listing all {n}; after recovery \
         the sweep delivered each exactly once",
        fallback.requests().len()
    );
    println!("{summary}");
    server.stop().await;
}

both_backends!(webhook_outage_within_retry_budget, |backend| async move {
    within_retry_budget(backend, Kind::Webhook).await
});

both_backends!(
    smtp_outage_within_retry_budget,
    needs = [aiosmtpd],
    |backend| async move { within_retry_budget(backend, Kind::Email).await }
);

both_backends!(webhook_outage_beyond_retry_budget, |backend| async move {
    beyond_retry_budget(backend, Kind::Webhook).await
});

both_backends!(
    smtp_outage_beyond_retry_budget,
    needs = [aiosmtpd],
    |backend| async move { beyond_retry_budget(backend, Kind::Email).await }
);
