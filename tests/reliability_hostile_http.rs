//! Hostile HTTP input (SPEC §12 "bad input"): oversized bodies and headers,
//! slow clients, invalid UTF-8, path traversal, bad `items`, unknown methods.
//! Never a 5xx, never a wedged connection, memory bounded.
//!
//! Requests are written raw over TCP wherever an HTTP client would normalise
//! the input away (dot segments, raw bytes, stalled bodies). The HTTP layer
//! does not depend on the database, so these run on SQLite only.

mod common;

use std::time::{Duration, Instant};

use common::{
    client, write_config, Backend, ChildServer, TestDb, TestServer, HANG_GUARD, PING_KEY,
};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What a raw request got back.
#[derive(Debug)]
struct Reply {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Reply {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn addr(base: &str) -> String {
    base.trim_start_matches("http://").to_string()
}

/// Sends `request` (which should say `Connection: close`) and reads the
/// answer to the end. The request is written while the answer is read, so a
/// server that answers before reading everything is seen doing so.
async fn raw(base: &str, request: Vec<u8>) -> Reply {
    let stream = TcpStream::connect(addr(base)).await.expect("connect");
    let (mut rd, mut wr) = stream.into_split();
    let writer = tokio::spawn(async move {
        // The server may close early (413, 431): a failed write is expected.
        let _ = wr.write_all(&request).await;
        wr
    });
    let mut buf = Vec::new();
    let read = tokio::time::timeout(common::HANG_GUARD, async {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match rd.read(&mut chunk).await {
                Ok(0) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(_) if !buf.is_empty() => break,
                Err(e) => panic!("read failed before any answer: {e}"),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no complete answer within 60 s: {buf:?}");
    writer.abort();
    parse(&buf)
}

fn parse(buf: &[u8]) -> Reply {
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(buf)));
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    let mut body = buf[end + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Reply { status, head, body }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&b[..i]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.extend_from_slice(&b[i + 2..i + 2 + size]);
        b = &b[i + 2 + size + 2..];
    }
    out
}

/// `METHOD target` with no body, closing after the answer.
fn request(method: &str, target: &[u8]) -> Vec<u8> {
    let mut r = format!("{method} ").into_bytes();
    r.extend_from_slice(target);
    r.extend_from_slice(b" HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    r
}

/// A request with a body of exactly the declared length.
fn with_body(method: &str, target: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "{method} {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

fn assert_no_5xx(what: &str, r: &Reply) {
    assert!(
        (200..500).contains(&r.status),
        "{what}: got {} {:?}",
        r.status,
        r.text()
    );
}

async fn server(extra: &str) -> TestServer {
    TestServer::start(Backend::Sqlite, &format!("ping_body_limit = 100\n{extra}")).await
}

async fn new_check(s: &TestServer, slug: &str) -> String {
    let c = s
        .create_check(json!({"slug": slug, "interval": "1h"}))
        .await;
    c["uuid"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_ping_bodies_keep_the_first_bytes() {
    let s = server("").await;
    let uuid = new_check(&s, "big-body").await;
    // Just above the limit, and far above it (more than the server drains).
    for (i, size) in [101usize, 64 * 1024, 5 << 20].into_iter().enumerate() {
        let body: Vec<u8> = (0..size).map(|k| b'a' + (k % 26) as u8).collect();
        let r = raw(
            &s.base,
            with_body("POST", &format!("/ping/{uuid}"), "text/plain", &body),
        )
        .await;
        assert_eq!((r.status, r.text().as_str()), (200, "OK"), "{size} bytes");
        assert!(r.head.to_ascii_lowercase().contains("ping-body-limit: 100"));
        let got = s
            .client
            .get(s.url(&format!("/api/v1/checks/{uuid}/pings/{}/body", i + 1)))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(
            &got[..],
            &body[..100],
            "{size} bytes: the first 100 are kept"
        );
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_api_bodies_are_413_naming_the_limit() {
    let s = server("").await;
    let mut big = br#"{"slug": "x", "description": ""#.to_vec();
    big.extend(std::iter::repeat_n(b'a', 3 << 20));
    big.extend_from_slice(br#""}"#);
    for path in ["/api/v1/checks", "/api/v1/checks/x", "/api/v3/checks/"] {
        let method = if path == "/api/v1/checks/x" {
            "PUT"
        } else {
            "POST"
        };
        let r = raw(&s.base, with_body(method, path, "application/json", &big)).await;
        assert_eq!(r.status, 413, "{method} {path}: {}", r.text());
        let v: Value = serde_json::from_slice(&r.body)
            .unwrap_or_else(|_| panic!("{path}: a JSON error, got {:?}", r.text()));
        let message = if path.starts_with("/api/v3") {
            v["error"].as_str().unwrap_or_default().to_string()
        } else {
            assert_eq!(v["error"]["code"], "payload_too_large", "{v}");
            v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        assert!(message.contains("2097152"), "{path}: {message}");
    }
    // Nothing was created, and the server still answers.
    let checks = s.get_json("/api/v1/checks").await;
    assert_eq!(checks["checks"].as_array().unwrap().len(), 0, "{checks}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_headers_get_431_and_the_server_keeps_serving() {
    let s = server("").await;
    let big = format!(
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    let r = raw(&s.base, big.into_bytes()).await;
    assert_eq!(r.status, 431, "{}", r.head);

    let mut many = String::from("GET /healthz HTTP/1.1\r\nHost: localhost\r\n");
    for i in 0..200 {
        many.push_str(&format!("X-H{i}: v\r\n"));
    }
    many.push_str("Connection: close\r\n\r\n");
    let r = raw(&s.base, many.into_bytes()).await;
    assert_eq!(r.status, 431, "{}", r.head);

    // A long URL alone (above the head buffer) is refused the same way.
    let url = format!("/ping/{}", "a".repeat(100 * 1024));
    let r = raw(&s.base, request("GET", url.as_bytes())).await;
    assert!(r.status == 431 || r.status == 414, "{}", r.head);

    let r = raw(&s.base, request("GET", b"/healthz")).await;
    assert_eq!((r.status, r.text().as_str()), (200, "ok"));
    s.stop().await;
}

/// Opens a connection that sends half a request line, then one byte a
/// second; returns whether the server closed it (false: the client gave up
/// at the hang guard) and after how long.
async fn slow_client(base: String) -> (bool, Duration) {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr(&base)).await.expect("connect");
    stream.write_all(b"GET /heal").await.expect("first bytes");
    let mut buf = [0u8; 1024];
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    loop {
        tokio::select! {
            read = stream.read(&mut buf) => match read {
                Ok(n) if n > 0 => continue, // whatever it says, wait for the close
                _ => return (true, started.elapsed()),
            },
            _ = tick.tick() => {
                if stream.write_all(b"t").await.is_err() {
                    return (true, started.elapsed());
                }
                if started.elapsed() > HANG_GUARD {
                    return (false, started.elapsed());
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_clients_are_cut_off_and_pings_still_pass() {
    let s = server("").await;
    let uuid = new_check(&s, "under-siege").await;
    let slow: Vec<_> = (0..200)
        .map(|_| tokio::spawn(slow_client(s.base.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    // While they hold their connections, pings are answered normally.
    for _ in 0..20 {
        let (status, body) = s.ping(&format!("/ping/{uuid}")).await;
        assert_eq!((status, body.as_str()), (200, "OK"));
    }
    let mut kept = 0;
    let mut longest = Duration::ZERO;
    for t in slow {
        let (cut, after) = t.await.unwrap();
        kept += usize::from(!cut);
        longest = longest.max(after);
    }
    eprintln!("the slowest slow client was cut off after {longest:?}");
    // The server cuts them (its header read timeout is 10 s); a server
    // without the timeout would keep them until the clients give up.
    assert_eq!(kept, 0, "slow clients kept open until the hang guard");
    assert_eq!(s.pings(&uuid).await.len(), 20);
    s.stop().await;
}

/// Sends the head and part of a body, then stalls; returns the answer.
async fn stalled_body(base: &str, head: &str, part: &[u8]) -> (Reply, Duration) {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr(base)).await.expect("connect");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(part).await.unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(common::HANG_GUARD * 2, stream.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "hang guard: no answer to a stalled body");
    (parse(&buf), started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_gets_408_and_is_not_recorded() {
    let s = server("").await;
    let uuid = new_check(&s, "stalled").await;
    let ping_head =
        format!("POST /ping/{uuid} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 50\r\n\r\n");
    let api_head = "POST /api/v1/checks HTTP/1.1\r\nHost: localhost\r\n\
                    Content-Type: application/json\r\nContent-Length: 500\r\n\r\n";
    let (ping, api) = tokio::join!(
        stalled_body(&s.base, &ping_head, b"only ten b"),
        stalled_body(&s.base, api_head, br#"{"slug": "half"#),
    );
    for (what, (r, took)) in [("ping", ping), ("api", api)] {
        assert_eq!(r.status, 408, "{what}: {} {:?}", r.head, r.text());
        assert!(r.text().contains("20s"), "{what}: {:?}", r.text());
        eprintln!("{what}: 408 after {took:?}");
        assert!(
            took >= Duration::from_secs(19),
            "{what}: answered after {took:?}"
        );
    }
    assert!(
        s.pings(&uuid).await.is_empty(),
        "a cut-off ping is not stored"
    );
    let checks = s.get_json("/api/v1/checks").await;
    assert_eq!(checks["checks"].as_array().unwrap().len(), 1, "{checks}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_refuses_new_connections_finishes_requests_in_flight_and_is_bounded() {
    let s = server("shutdown_timeout = \"3s\"").await;
    let uuid = new_check(&s, "in-flight").await;
    let base = s.base.clone();
    // A ping whose body is half sent when shutdown starts.
    let mut in_flight = TcpStream::connect(addr(&base)).await.unwrap();
    let head = format!(
        "POST /ping/{uuid} HTTP/1.1\r\nHost: l\r\nConnection: close\r\nContent-Length: 10\r\n\r\n"
    );
    in_flight.write_all(head.as_bytes()).await.unwrap();
    in_flight.write_all(b"hello").await.unwrap();
    // A request that will never finish its body (the body timeout is 20 s,
    // longer than the 10 s the harness waits for the server to stop).
    let mut stuck = TcpStream::connect(addr(&base)).await.unwrap();
    stuck
        .write_all(
            b"POST /api/v1/checks HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
              Content-Length: 99\r\n\r\n{",
        )
        .await
        .unwrap();
    // A full request round trip on a third connection: by then the server's
    // tasks for the two connections above have read their heads (they were
    // readable first) and sit in their handlers, reading the bodies.
    assert_eq!(s.ping(&format!("/ping/{uuid}/log")).await.0, 200);

    let stopping = tokio::spawn(s.stop());
    let refused = async {
        loop {
            if TcpStream::connect(addr(&base)).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(HANG_GUARD, refused)
        .await
        .expect("hang guard: new connections were still accepted after shutdown started");

    in_flight.write_all(b"world").await.unwrap();
    let mut answer = Vec::new();
    in_flight.read_to_end(&mut answer).await.unwrap();
    let r = parse(&answer);
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, "OK"),
        "the request in flight finished"
    );

    stopping.await.expect("the server stopped");
    // The stuck connection was cut when the drain ended (shutdown_timeout,
    // 3 s): no answer at all. Had the drain waited for it, its body timeout
    // (20 s) would have answered 408 first.
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(HANG_GUARD, stuck.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "hang guard: the stuck connection was never closed"
    );
    assert!(
        rest.is_empty(),
        "the stuck connection was answered, not cut: {:?}",
        String::from_utf8_lossy(&rest)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_in_path_query_and_body() {
    let s = server("").await;
    let uuid = new_check(&s, "bytes").await;
    let p = |rest: &str| format!("/ping/{uuid}{rest}").into_bytes();
    let mut raw_byte_path = b"/ping/".to_vec();
    raw_byte_path.extend_from_slice(&[0xff, 0xfe]);
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"/ping/%FF%FE".to_vec(), 400, "Invalid UTF-8"),
        (
            format!("/ping/{PING_KEY}/%C3%28").into_bytes(),
            400,
            "Invalid UTF-8",
        ),
        (p("/%FF"), 400, "Invalid UTF-8"),
        (p("?items=%FF"), 400, "items must be a non-negative integer"),
        (p("?rid=%FF%FE"), 400, "invalid uuid format"),
        (p("?%FF=%FE"), 200, "OK"),
        (b"/api/v1/checks/%FF".to_vec(), 400, "Invalid UTF-8"),
        (b"/api/v1/checks/x/pings?limit=%FF".to_vec(), 400, "limit"),
        (b"/api/v1/checks?status=%FF".to_vec(), 400, "status"),
        (b"/api/v3/checks/%FF".to_vec(), 400, "Invalid UTF-8"),
    ];
    for (target, status, needle) in cases {
        let shown = String::from_utf8_lossy(&target).into_owned();
        let r = raw(&s.base, request("GET", &target)).await;
        assert_eq!(r.status, status, "{shown}: {:?}", r.text());
        assert!(r.text().contains(needle), "{shown}: {:?}", r.text());
        if target.starts_with(b"/api/") {
            let v: Value = serde_json::from_slice(&r.body)
                .unwrap_or_else(|_| panic!("{shown}: a JSON error, got {:?}", r.text()));
            assert!(v["error"].is_object() || v["error"].is_string(), "{v}");
        }
    }
    // Raw non-ASCII bytes in the request target: refused by the parser, not a 5xx.
    let r = raw(&s.base, request("GET", &raw_byte_path)).await;
    assert_no_5xx("raw bytes in the path", &r);
    assert_ne!(r.status, 200);

    // A ping body that is not UTF-8 is stored as bytes.
    let body = [0xff, 0xfe, b'o', b'k', 0x80];
    let r = raw(
        &s.base,
        with_body("POST", &format!("/ping/{uuid}"), "text/plain", &body),
    )
    .await;
    assert_eq!(r.status, 200, "{:?}", r.text());
    let n = s.pings(&uuid).await[0]["n"].as_i64().unwrap();
    let got = s
        .client
        .get(s.url(&format!("/api/v1/checks/{uuid}/pings/{n}/body")))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&got[..], &body[..]);

    // An API body that is not UTF-8 is a JSON error saying so (v3 in
    // healthchecks' words).
    for (path, needle) in [
        ("/api/v1/checks", "invalid JSON body"),
        ("/api/v3/checks/", "could not parse request body"),
    ] {
        let r = raw(&s.base, with_body("POST", path, "application/json", &body)).await;
        assert_eq!(r.status, 400, "{path}: {:?}", r.text());
        let v: Value = serde_json::from_slice(&r.body).expect("a JSON error");
        assert!(v.to_string().contains(needle), "{path}: {v}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_traversal_in_slugs_is_not_found() {
    let s = server("").await;
    new_check(&s, "x").await;
    let targets = [
        format!("/ping/{PING_KEY}/../x"),
        format!("/ping/{PING_KEY}/./x"),
        format!("/ping/{PING_KEY}/%2e%2e/x"),
        format!("/ping/{PING_KEY}/%2E%2E%2Fx"),
        format!("/ping/{PING_KEY}/..%2f..%2fetc%2fpasswd"),
        format!("/ping/{PING_KEY}/a%2fb"),
        format!("/ping/{PING_KEY}/x%00"),
        format!("/ping/{PING_KEY}/x%00/fail"),
        format!("/ping/{PING_KEY}/%00"),
        format!("/ping/{PING_KEY}/..\\x"),
        format!("/ping/{PING_KEY}/x/..%2f..%2f"),
        "/ping/../../etc/passwd".to_string(),
    ];
    for t in &targets {
        for q in ["", "?create=1"] {
            let target = format!("{t}{q}");
            let r = raw(&s.base, request("GET", target.as_bytes())).await;
            assert_no_5xx(&target, &r);
            assert!(
                r.status == 404 || r.status == 400,
                "{target}: {} {:?}",
                r.status,
                r.text()
            );
        }
    }
    // Raw NUL and control bytes never reach a handler.
    let r = raw(
        &s.base,
        request("GET", format!("/ping/{PING_KEY}/x\0").as_bytes()),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.head);
    // Nothing was created by ?create=1, and the real check saw no ping.
    let checks = s.get_json("/api/v1/checks").await;
    let list = checks["checks"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{checks}");
    assert_eq!(list[0]["last_ping"], Value::Null, "{checks}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_that_are_not_in_0_to_2_63_minus_1_are_400_naming_items() {
    let s = server("").await;
    let uuid = new_check(&s, "counted").await;
    for bad in [
        "-1",
        "-0",
        "1.5",
        "1.0",
        "1e9",
        "abc",
        "",
        "%2B1",
        "0x10",
        "1_000",
        "9223372036854775808",
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999999999999999999999",
        "%E2%88%9E",
        "1%00",
    ] {
        let r = raw(
            &s.base,
            request("GET", format!("/ping/{uuid}?items={bad}").as_bytes()),
        )
        .await;
        assert_eq!(r.status, 400, "items={bad}: {:?}", r.text());
        assert!(r.text().contains("items"), "items={bad}: {:?}", r.text());
    }
    // The extremes of what is stored (a signed 64-bit integer) are accepted.
    for good in ["0", "9223372036854775807"] {
        let r = raw(
            &s.base,
            request("GET", format!("/ping/{uuid}?items={good}").as_bytes()),
        )
        .await;
        assert_eq!((r.status, r.text().as_str()), (200, "OK"), "items={good}");
    }
    assert_eq!(s.pings(&uuid).await.len(), 2);
    let check = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    assert!(check["last_items"].is_u64(), "{check}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_methods_are_405_or_accepted_by_pings() {
    let s = server("").await;
    let uuid = new_check(&s, "methods").await;
    for (method, target) in [
        ("FOO", "/healthz"),
        ("DELETE", "/healthz"),
        ("PATCH", "/api/v1/checks"),
        ("PROPFIND", "/api/v1/checks"),
        ("TRACE", "/api/v1/status"),
        ("PUT", "/api/v3/status/"),
        ("BREW", "/metrics"),
    ] {
        let r = raw(&s.base, request(method, target.as_bytes())).await;
        assert_eq!(r.status, 405, "{method} {target}: {:?}", r.text());
        if target.starts_with("/api/") {
            let v: Value = serde_json::from_slice(&r.body)
                .unwrap_or_else(|_| panic!("{method} {target}: a JSON error, got {:?}", r.text()));
            assert!(v.to_string().contains("method not allowed"), "{v}");
        }
        assert!(
            r.head.to_ascii_lowercase().contains("allow:"),
            "{method} {target}: {}",
            r.head
        );
    }
    // Pings accept any method (healthchecks does), recorded as sent.
    let r = raw(
        &s.base,
        request("PROPFIND", format!("/ping/{uuid}").as_bytes()),
    )
    .await;
    assert_eq!((r.status, r.text().as_str()), (200, "OK"));
    assert_eq!(s.pings(&uuid).await[0]["method"], "PROPFIND");
    // Not a method at all: refused by the parser.
    for line in ["G\u{7f}T", "GET\x01"] {
        let r = raw(&s.base, request(line, b"/healthz")).await;
        assert_eq!(r.status, 400, "{line:?}: {}", r.head);
    }
    // CONNECT with an authority target is not served as a route.
    let r = raw(&s.base, request("CONNECT", b"localhost:80")).await;
    eprintln!("CONNECT localhost:80: {} {:?}", r.status, r.text());
    assert_no_5xx("CONNECT", &r);
    s.stop().await;
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// One of four oversized requests, by `i`.
fn hostile(i: usize, uuid: &str) -> Vec<u8> {
    match i % 4 {
        // A ping body of 1 MiB (the limit is 10,000 bytes).
        0 => with_body(
            "POST",
            &format!("/ping/{uuid}"),
            "text/plain",
            &vec![b'p'; 1 << 20],
        ),
        // An API body above the 2 MiB limit.
        1 => with_body(
            "POST",
            "/api/v1/checks",
            "application/json",
            &vec![b' '; (2 << 20) + 1024],
        ),
        // A 100 KiB header.
        2 => format!(
            "GET /healthz HTTP/1.1\r\nHost: l\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
            "h".repeat(100 * 1024)
        )
        .into_bytes(),
        // A huge declared body, of which 64 KiB arrive before the client leaves.
        _ => {
            let mut r = format!(
                "POST /ping/{uuid} HTTP/1.1\r\nHost: l\r\nContent-Length: 1073741824\r\n\r\n"
            )
            .into_bytes();
            r.extend(std::iter::repeat_n(b'z', 64 * 1024));
            r
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stays_bounded_under_2000_oversized_requests() {
    let db = TestDb::new(Backend::Sqlite).await;
    let config = write_config(db.dir.path(), &db.config_toml(""));
    let server = ChildServer::spawn(&config);
    let pid = server.child.id();
    let http = client();
    let c: Value = http
        .post(format!("{}/api/v1/checks", server.base))
        .json(&json!({"slug": "flooded", "interval": "1h"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let uuid = c["uuid"].as_str().unwrap().to_string();
    // Warm up (the allocator's first arenas, the pools), then measure.
    for i in 0..40 {
        send_hostile(&server.base, i, &uuid).await;
    }
    let before = rss_kib(pid);
    let workers: Vec<_> = (0..8)
        .map(|w| {
            let (base, uuid) = (server.base.clone(), uuid.clone());
            tokio::spawn(async move {
                for i in (w..2000).step_by(8) {
                    send_hostile(&base, i, &uuid).await;
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let after = rss_kib(pid);
    let grown = after.saturating_sub(before);
    eprintln!("RSS before {before} KiB, after {after} KiB, grown {grown} KiB");
    assert!(grown < 64 * 1024, "RSS grew by {grown} KiB");
    // Still serving.
    common::get_200(&http, &format!("{}/healthz", server.base)).await;
    assert!(!server.log().contains("panicked"), "{}", server.log());
}

async fn send_hostile(base: &str, i: usize, uuid: &str) {
    let request = hostile(i, uuid);
    if i % 4 == 3 {
        // Leaves mid-body: no answer is expected, only no harm.
        let mut s = TcpStream::connect(addr(base)).await.unwrap();
        let _ = s.write_all(&request).await;
        return;
    }
    let r = raw(base, request).await;
    let expected = [200, 413, 431][i % 4];
    assert_eq!(r.status, expected, "request kind {}: {:?}", i % 4, r.text());
}
