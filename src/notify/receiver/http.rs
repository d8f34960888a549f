//! What the HTTP receivers share: URL and header validation, one POST, and
//! turning the answer into a [`SendError`] an operator can act on.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, LOCATION, RETRY_AFTER};
use reqwest::{StatusCode, Url};

use super::guard::denied_in;
use super::{error_chain, SendContext, SendError};
use crate::clock;

/// How much of an error response's body goes into the error message.
const BODY_SNIPPET: usize = 200;

/// Parses `url` as an absolute `http(s)://` URL with a host.
pub(super) fn parse_http_url(
    url: &str,
    field: &str,
    show: bool,
    errors: &mut Vec<String>,
) -> Option<Url> {
    // The URL may carry a credential (Slack's does): only echo it when allowed.
    let quoted = if show {
        format!(" {url:?}")
    } else {
        String::new()
    };
    match Url::parse(url.trim()) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => Some(u),
        Ok(_) => {
            errors.push(format!(
                "{field}: must be an http:// or https:// URL with a host{quoted}"
            ));
            None
        }
        Err(e) => {
            errors.push(format!("{field}: not a valid URL{quoted} ({e})"));
            None
        }
    }
}

/// A URL fit for logs and error messages: no user info, no query, and (for
/// URLs whose path is a credential) no path.
pub(super) fn shown_url(url: &Url, with_path: bool) -> String {
    let mut out = format!("{}://{}", url.scheme(), url.host_str().unwrap_or(""));
    if let Some(port) = url.port() {
        out.push_str(&format!(":{port}"));
    }
    if with_path {
        out.push_str(url.path());
        if url.query().is_some() {
            out.push_str("?…");
        }
    } else if url.path() != "/" || url.query().is_some() {
        out.push_str("/…");
    }
    out
}

/// Validates `headers = { … }` into a header map.
pub(super) fn parse_headers(
    headers: &BTreeMap<String, String>,
    errors: &mut Vec<String>,
) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let parsed_name = HeaderName::from_bytes(name.as_bytes());
        let parsed_value = HeaderValue::from_str(value);
        match (parsed_name, parsed_value) {
            (Ok(n), Ok(mut v)) => {
                // Values are often credentials: keep them out of Debug output.
                v.set_sensitive(true);
                map.insert(n, v);
            }
            (Err(_), _) => errors.push(format!("headers.{name}: not a valid header name")),
            (_, Err(_)) => errors.push(format!(
                "headers.{name}: the value must be visible ASCII without line breaks"
            )),
        }
    }
    map
}

/// Parses a `Retry-After` value: delay seconds or an HTTP date (a date in the
/// past means "now"). `None` for anything else.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// POSTs `body` and classifies the outcome. `shown` names the target in errors.
/// A target `[webhooks]` refuses is a permanent failure, sent nothing.
pub(super) async fn post(
    ctx: &SendContext,
    url: &Url,
    shown: &str,
    headers: HeaderMap,
    body: Vec<u8>,
) -> Result<(), SendError> {
    send(ctx, reqwest::Method::POST, url, shown, headers, body).await
}

/// [`post`] with another method (Matrix sends with PUT).
pub(super) async fn send(
    ctx: &SendContext,
    method: reqwest::Method,
    url: &Url,
    shown: &str,
    headers: HeaderMap,
    body: Vec<u8>,
) -> Result<(), SendError> {
    ctx.policy
        .check_url(url)
        .map_err(|d| SendError::Permanent(format!("cannot deliver to {shown}: {d}")))?;
    let response = ctx
        .http
        .request(method, url.clone())
        .headers(headers)
        .body(body)
        .send()
        .await
        .map_err(|e| request_error(e, shown))?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, clock::now().into()));
    let redirected_to = response
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| url.join(v).ok())
        .map(|u| shown_url(&u, true));
    let snippet = body_snippet(response).await;
    let mut message = format!("HTTP {status} from {shown}");
    if status.is_redirection() {
        message.push_str(" (redirects are not followed");
        if let Some(to) = redirected_to {
            message.push_str(&format!("; Location: {to}"));
        }
        message.push(')');
    }
    if !snippet.is_empty() {
        message.push_str(": ");
        message.push_str(&snippet);
    }
    if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        Err(SendError::Recoverable {
            message,
            retry_after,
        })
    } else {
        Err(SendError::Permanent(message))
    }
}

/// The start of an error response's body, as one line of text.
async fn body_snippet(mut response: reqwest::Response) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < BODY_SNIPPET {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            // The status already says what happened; a broken body adds nothing.
            Ok(None) | Err(_) => break,
        }
    }
    bytes.truncate(BODY_SNIPPET);
    let text = String::from_utf8_lossy(&bytes);
    // A cut in the middle of a UTF-8 sequence shows as one replacement char.
    let text: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    text.trim().to_string()
}

/// Describes a failed request without the URL reqwest would print (it may
/// carry credentials).
fn request_error(e: reqwest::Error, shown: &str) -> SendError {
    if let Some(d) = denied_in(&e) {
        return SendError::Permanent(format!("cannot deliver to {shown}: {d}"));
    }
    let timeout = e.is_timeout();
    let connect = e.is_connect();
    let builder = e.is_builder();
    let detail = error_chain(&e.without_url());
    if builder {
        SendError::Permanent(format!("cannot build the request to {shown}: {detail}"))
    } else if timeout {
        SendError::recoverable(format!("timed out waiting for {shown}: {detail}"))
    } else if connect {
        SendError::recoverable(format!("cannot connect to {shown}: {detail}"))
    } else {
        SendError::recoverable(format!("request to {shown} failed: {detail}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_seconds() {
        let now = SystemTime::now();
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
    }

    #[test]
    fn retry_after_http_date() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        // A date already past means: retry now.
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn retry_after_garbage() {
        let now = SystemTime::now();
        for v in ["", "soon", "-5", "1.5", "Wed, 99 Oct 2015 07:28:00 GMT"] {
            assert_eq!(parse_retry_after(v, now), None, "{v:?}");
        }
    }

    #[test]
    fn shown_url_hides_credentials() {
        let u = Url::parse("https://user:pw@hooks.example.com:8443/a/b?token=t").unwrap();
        assert_eq!(shown_url(&u, true), "https://hooks.example.com:8443/a/b?…");
        assert_eq!(shown_url(&u, false), "https://hooks.example.com:8443/…");
        let u = Url::parse("http://127.0.0.1:9000/hook").unwrap();
        assert_eq!(shown_url(&u, true), "http://127.0.0.1:9000/hook");
    }

    #[test]
    fn urls_must_be_http() {
        let mut errors = Vec::new();
        assert!(parse_http_url("http://x/", "url", true, &mut errors).is_some());
        assert!(parse_http_url("ftp://x/", "url", true, &mut errors).is_none());
        assert!(parse_http_url("not a url", "url", true, &mut errors).is_none());
        assert!(parse_http_url("https://secret/path", "url", false, &mut errors).is_some());
        assert!(parse_http_url("mailto:secret@x", "url", false, &mut errors).is_none());
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors.iter().all(|e| e.starts_with("url: ")));
        assert!(!errors[2].contains("secret"), "{}", errors[2]);
    }
}
