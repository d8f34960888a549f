//! What a web browser may do (SPEC §5, "Browsers"): any page a user visits
//! can make the browser send requests to the API and the dashboard, to
//! loopback too, carrying whatever credential the browser holds there (a
//! session cookie, basic-auth credentials, or none at all where loopback
//! alone is write access). So:
//!
//! - a state-changing request (any method but GET, HEAD and OPTIONS) that a
//!   browser marks as sent by another site (`Sec-Fetch-Site: cross-site` or
//!   `same-site`), or whose `Origin` is not this server's own, is refused
//!   with `403` on the API and the dashboard;
//! - an API write with a body must say `Content-Type: application/json`
//!   (`415` otherwise): the types a page may send without asking first
//!   (text, forms) are never the API's (a v3 request with `X-Api-Key`
//!   excepted: no page can send that header without asking, see
//!   [`keyed_v3`]);
//! - with no API key at all, a `Host` that is not a loopback name or
//!   `base_url`'s host is refused ([`rebinding`], applied where the
//!   loopback rule grants access: `super::auth::scope_of`), since a page
//!   whose name was made to resolve to 127.0.0.1 (DNS rebinding) is, to
//!   the browser, the same origin as its own requests.
//!
//! Requests with neither `Origin` nor `Sec-Fetch-Site` (curl, client
//! libraries) pass the first rule; the `/ping` routes take none of these.
//!
//! CSRF tokens and label badge keys derive from [`PageKey`], a random secret
//! made once per installation and shared through the database.

use std::net::{IpAddr, Ipv6Addr};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hmac::{Hmac, Mac};
use reqwest::Url;
use serde_json::json;
use sha2::Sha256;

use super::AppState;

/// The name of [`PageKey`]'s secret in the database.
pub const SECRET_NAME: &str = "page_key";

/// The key CSRF tokens and label badge keys are derived with: a random
/// secret stored once per installation (the same on every replica and
/// across restarts), never anything from the configuration, which others
/// may know (the default `database_url` is the same everywhere).
#[derive(Clone)]
pub struct PageKey(Hmac<Sha256>);

impl std::fmt::Debug for PageKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PageKey(…)")
    }
}

impl PageKey {
    /// A key from a secret's text.
    pub fn new(secret: &str) -> PageKey {
        // Keyed once: each tag starts from a copy of the keyed state.
        PageKey(
            <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes())
                .expect("HMAC takes a key of any length"),
        )
    }

    /// A fresh random secret to offer the database (64 hex digits).
    pub fn random_secret() -> String {
        let bytes: [u8; 32] = rand::random();
        hex::encode(bytes)
    }

    /// 40 hex digits that name `parts` for `purpose`: the same for the same
    /// input under one key, unguessable without it. Each part is prefixed
    /// with its length, so no two lists of parts read the same.
    pub fn tag(&self, purpose: &str, parts: &[&str]) -> String {
        let mut m = self.0.clone();
        for part in std::iter::once(purpose).chain(parts.iter().copied()) {
            m.update(&(part.len() as u64).to_be_bytes());
            m.update(part.as_bytes());
        }
        hex::encode(&m.finalize().into_bytes()[..20])
    }
}

/// Which surface a request is on: the answer to a refusal takes its shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surface {
    /// `/api/v1`: `{"error": {"code", "message"}}`.
    V1,
    /// `/api/v3`: healthchecks' `{"error": "…"}`.
    V3,
    /// The dashboard's forms: plain text.
    Dashboard,
}

/// The media type API writes must carry.
pub const JSON: &str = "application/json";

/// `/api/v1`'s guard: cross-site writes, then the media type of a body.
pub async fn api_v1(State(state): State<AppState>, request: Request, next: Next) -> Response {
    guard(&state, Surface::V1, request, next).await
}

/// `/api/v3`'s guard, as [`api_v1`] with healthchecks' error shape.
pub async fn api_v3(State(state): State<AppState>, request: Request, next: Next) -> Response {
    guard(&state, Surface::V3, request, next).await
}

/// The dashboard's guard: cross-site form posts.
pub async fn dashboard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    guard(&state, Surface::Dashboard, request, next).await
}

async fn guard(state: &AppState, surface: Surface, request: Request, next: Next) -> Response {
    if changes_state(request.method()) {
        if let Err(why) = same_origin(request.headers(), &state.config.base_url) {
            return refuse(surface, StatusCode::FORBIDDEN, "forbidden", &why);
        }
        if surface != Surface::Dashboard && !body_is_json(&request) && !keyed_v3(surface, &request)
        {
            let why = format!(
                "a request body to the API must be JSON: send it with \
                 Content-Type: {JSON} (found {})",
                match request.headers().get(header::CONTENT_TYPE) {
                    Some(v) => format!("{:?}", String::from_utf8_lossy(v.as_bytes())),
                    None => "none".to_string(),
                }
            );
            return refuse(
                surface,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                &why,
            );
        }
    }
    next.run(request).await
}

fn refuse(surface: Surface, status: StatusCode, code: &str, why: &str) -> Response {
    match surface {
        Surface::V1 => (
            status,
            Json(json!({ "error": { "code": code, "message": why } })),
        )
            .into_response(),
        Surface::V3 => (status, Json(json!({ "error": why }))).into_response(),
        Surface::Dashboard => (
            status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{why}\n"),
        )
            .into_response(),
    }
}

/// Anything but GET, HEAD and OPTIONS may change something.
fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// `Ok` unless the browser says the request comes from another site, or
/// from an origin that is not this server's: then why not.
fn same_origin(headers: &HeaderMap, base_url: &str) -> Result<(), String> {
    let fetch_site = headers
        .get("sec-fetch-site")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase());
    let origins: Vec<String> = headers
        .get_all(header::ORIGIN)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_string())
        .collect();
    match fetch_site.as_deref() {
        Some("cross-site") => {
            return Err(
                "cross-site request refused: the browser says another site sent it \
                 (Sec-Fetch-Site: cross-site); the API and the dashboard take writes only \
                 from their own pages or from clients that are not browsers"
                    .to_string(),
            )
        }
        // Another origin of the same site (a sibling subdomain): only its
        // Origin can make it ours.
        Some("same-site") if origins.is_empty() => {
            return Err(
                "cross-site request refused: the browser says another origin of this \
                 site sent it (Sec-Fetch-Site: same-site) and names no Origin"
                    .to_string(),
            )
        }
        _ => {}
    }
    let host = request_host(headers);
    for origin in &origins {
        // Our own pages send `Referrer-Policy: no-referrer`, under which a
        // browser writes `Origin: null` on their form posts; it then still
        // says, in a header no page can set, that the post is same-origin.
        // (A sandboxed frame's `null` comes with `cross-site`, refused above.)
        if origin == "null" && fetch_site.as_deref() == Some("same-origin") {
            continue;
        }
        if !is_own_origin(origin, base_url, host.as_deref()) {
            return Err(format!(
                "cross-site request refused: Origin {origin:?} is not this server's \
                 ({}, or a loopback address it was reached by); if browsers reach the \
                 server at that address, set base_url to it",
                origin_of(base_url).unwrap_or_else(|| base_url.to_string())
            ));
        }
    }
    Ok(())
}

/// `scheme://host[:port]` of a URL, the port left out when it is the
/// scheme's default (as browsers write `Origin`).
fn origin_of(url: &str) -> Option<String> {
    let u = Url::parse(url).ok()?;
    let origin = u.origin();
    origin.is_tuple().then(|| origin.ascii_serialization())
}

/// Whether a browser's `Origin` is this server's own: `base_url`'s, or the
/// address the request was sent to when that names loopback (a page served
/// by this server on loopback). A `Host` that names anything else could be
/// a rebound name, whose pages are the attacker's.
fn is_own_origin(origin: &str, base_url: &str, host: Option<&str>) -> bool {
    let Ok(url) = Url::parse(origin) else {
        // "null" (a sandboxed frame, a file) and anything unreadable.
        return false;
    };
    let given = url.origin();
    if !given.is_tuple() {
        return false;
    }
    if Url::parse(base_url).is_ok_and(|b| b.origin() == given) {
        return true;
    }
    let Some(host) = host.filter(|h| is_loopback_host(h)) else {
        return false;
    };
    // The address the browser sent the request to, in the origin's scheme.
    Url::parse(&format!("{}://{host}", url.scheme())).is_ok_and(|reached| reached.origin() == given)
}

/// A v3 request that carries healthchecks' `X-Api-Key` header: a page
/// cannot make a browser send that header to another site without asking
/// first (a CORS preflight, which this server never grants), so it is no
/// "simple" cross-origin request, whatever its body's type. healthchecks
/// reads the body as JSON whatever it is labelled, and its own examples
/// send it with `curl --data` (a form's type): those scripts keep working.
fn keyed_v3(surface: Surface, request: &Request) -> bool {
    surface == Surface::V3 && request.headers().contains_key("x-api-key")
}

/// Whether the request's body is empty or says it is JSON
/// (`application/json`, parameters such as `; charset=utf-8` allowed).
fn body_is_json(request: &Request) -> bool {
    use axum::body::HttpBody as _;
    if let Some(ct) = request.headers().get(header::CONTENT_TYPE) {
        let essence = ct
            .to_str()
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim();
        return essence.eq_ignore_ascii_case(JSON);
    }
    // No type: only an empty body (a pause, a delete) is fine. A browser
    // sends a body of no type without asking first, too.
    request.body().size_hint().exact() == Some(0)
}

/// The host a request was sent to, as its `Host` header names it (with the
/// port); `None` without one (browsers always send it).
pub fn request_host(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::HOST)
        .map(|h| String::from_utf8_lossy(h.as_bytes()).trim().to_string())
}

/// The host part of a `Host` value: without the port, brackets kept on an
/// IPv6 address.
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return match host.find(']') {
            Some(end) => &host[..=end],
            None => host,
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// Whether a `Host` value names loopback: `localhost`, a name under
/// `.localhost` (RFC 6761: never resolved by DNS), `127.0.0.0/8` or `[::1]`.
pub fn is_loopback_host(host: &str) -> bool {
    let name = host_name(host).to_ascii_lowercase();
    let name = name.strip_suffix('.').unwrap_or(&name);
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    if let Some(v6) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        return v6.parse::<Ipv6Addr>().is_ok_and(|ip| {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        });
    }
    name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// With no API key at all, whether a request's `Host` may be answered: a
/// loopback name or address, or `base_url`'s host (any port); a request
/// that names no host is not a browser's. `Err` says why not.
pub fn rebinding(headers: &HeaderMap, base_url: &str) -> Result<(), String> {
    let Some(host) = request_host(headers) else {
        return Ok(());
    };
    if is_loopback_host(&host) {
        return Ok(());
    }
    let base_host = Url::parse(base_url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_ascii_lowercase));
    let name = host_name(&host).to_ascii_lowercase();
    if base_host.is_some_and(|b| b == name.strip_suffix('.').unwrap_or(&name)) {
        return Ok(());
    }
    Err(format!(
        "no API keys are configured, and this request was sent to the host {:?}, which is \
         neither a loopback name (localhost, 127.0.0.1, [::1]) nor base_url's host: refused, \
         so that a web page cannot reach the server through DNS rebinding \
         (configure an API key to use it from elsewhere)",
        host_name(&host)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    const BASE: &str = "https://overdue.example.com";

    #[test]
    fn loopback_hosts() {
        for h in [
            "localhost",
            "localhost:8080",
            "LOCALHOST.",
            "app.localhost:3000",
            "127.0.0.1",
            "127.9.9.9:80",
            "[::1]",
            "[::1]:8080",
            "[::ffff:127.0.0.1]:8080",
        ] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in [
            "rebind.evil.example:8080",
            "localhost.evil.example",
            "10.0.0.1",
            "[::2]:80",
            "0x7f000001",
            "",
            "[::1",
        ] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    #[test]
    fn own_origins_are_base_urls_and_loopback_hosts() {
        assert!(is_own_origin(
            "https://overdue.example.com",
            BASE,
            Some("x")
        ));
        assert!(is_own_origin(
            "https://overdue.example.com:443",
            "https://overdue.example.com/",
            None
        ));
        assert!(is_own_origin(
            "http://127.0.0.1:8080",
            BASE,
            Some("127.0.0.1:8080")
        ));
        assert!(is_own_origin(
            "http://localhost",
            BASE,
            Some("localhost:80")
        ));
        // Another port, scheme or host than the one reached.
        assert!(!is_own_origin(
            "http://127.0.0.1:9999",
            BASE,
            Some("127.0.0.1:8080")
        ));
        assert!(!is_own_origin(
            "http://overdue.example.com",
            BASE,
            Some("overdue.example.com")
        ));
        // The rebinding page: its origin is the host it reached.
        assert!(!is_own_origin(
            "http://rebind.evil.example:8080",
            BASE,
            Some("rebind.evil.example:8080")
        ));
        assert!(!is_own_origin("null", BASE, Some("localhost")));
    }

    #[test]
    fn fetch_metadata_and_origin_decide() {
        let h = |p| same_origin(&headers(p), BASE);
        assert!(h(&[]).is_ok());
        assert!(h(&[("sec-fetch-site", "same-origin")]).is_ok());
        assert!(h(&[("sec-fetch-site", "none")]).is_ok());
        assert!(h(&[("sec-fetch-site", "cross-site")]).is_err());
        assert!(h(&[("sec-fetch-site", "same-site")]).is_err());
        assert!(h(&[
            ("sec-fetch-site", "same-site"),
            ("origin", "https://overdue.example.com")
        ])
        .is_ok());
        assert!(h(&[
            ("sec-fetch-site", "same-site"),
            ("origin", "https://wiki.example.com")
        ])
        .is_err());
        assert!(h(&[("origin", "http://evil.example")]).is_err());
        // Our pages' no-referrer policy makes browsers write `Origin: null`
        // on their own form posts, which they mark same-origin.
        assert!(h(&[("sec-fetch-site", "same-origin"), ("origin", "null")]).is_ok());
        assert!(h(&[("origin", "null")]).is_err());
        assert!(h(&[("sec-fetch-site", "cross-site"), ("origin", "null")]).is_err());
        assert!(h(&[("sec-fetch-site", "same-site"), ("origin", "null")]).is_err());
        assert!(h(&[
            ("host", "localhost:8080"),
            ("origin", "http://localhost:8080")
        ])
        .is_ok());
    }

    #[test]
    fn rebinding_refuses_hosts_other_than_loopback_and_base_url() {
        let r = |p| rebinding(&headers(p), BASE);
        assert!(r(&[]).is_ok());
        assert!(r(&[("host", "127.0.0.1:8080")]).is_ok());
        assert!(r(&[("host", "overdue.example.com:8443")]).is_ok());
        let e = r(&[("host", "rebind.evil.example:8080")]).unwrap_err();
        assert!(e.contains("DNS rebinding"), "{e}");
        assert!(e.contains("\"rebind.evil.example\""), "{e}");
    }

    #[test]
    fn tags_depend_on_the_key_purpose_and_parts() {
        let a = PageKey::new("a");
        let t = a.tag("csrf", &["x", "y"]);
        assert_eq!(t.len(), 40);
        assert_eq!(t, a.tag("csrf", &["x", "y"]));
        assert_ne!(t, PageKey::new("b").tag("csrf", &["x", "y"]));
        assert_ne!(t, a.tag("badge", &["x", "y"]));
        assert_ne!(t, a.tag("csrf", &["xy"]));
        assert_ne!(a.tag("csrf", &["x", "y"]), a.tag("csrf", &["x\0", "y"]));
    }
}
