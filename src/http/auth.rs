//! API keys (SPEC §5): `Authorization: Bearer` or `X-Api-Key`, kept as SHA-256
//! hashes and compared in constant time. With no key configured at all, the
//! API answers loopback clients only, and only for loopback names or
//! `base_url`'s host (DNS rebinding, see `super::browser`).

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use ipnet::IpNet;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::AppError;
use super::AppState;
use crate::config::{ApiKey, Scope};
use crate::store::StoreError;

/// A caller allowed to read, and whether it may also write: only a writer
/// sees a check's uuid and ping URL (a capability), everyone else its slug
/// or unique key.
pub struct ReadAccess {
    pub writer: bool,
}

/// A caller allowed to write.
pub struct WriteAccess;

impl FromRequestParts<AppState> for ReadAccess {
    type Rejection = AppError;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        require(parts, state, Scope::Read)
            .await
            .map(|scope| ReadAccess {
                writer: scope >= Scope::Write,
            })
    }
}

impl FromRequestParts<AppState> for WriteAccess {
    type Rejection = AppError;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        require(parts, state, Scope::Write)
            .await
            .map(|_| WriteAccess)
    }
}

/// Why a request was refused.
#[derive(Debug)]
pub enum Denied {
    /// Keys exist and the request carries none.
    Missing,
    /// The request carries a key that is not one of ours.
    Wrong,
    /// No key exists at all and the client is not on loopback.
    LoopbackOnly,
    /// No key exists at all and the request names a host that is neither
    /// loopback nor `base_url`'s: why.
    Rebinding(String),
    /// The key has read scope and the request writes.
    ReadOnly,
    /// The stored keys could not be read.
    Unavailable(StoreError),
}

/// The answer to a refused request.
fn refused(d: Denied) -> AppError {
    match d {
        Denied::Missing => AppError::Unauthorized("missing API key".to_string()),
        Denied::Wrong => AppError::Unauthorized("wrong API key".to_string()),
        Denied::LoopbackOnly => AppError::Forbidden(
            "no API keys are configured, so the API only answers requests from loopback"
                .to_string(),
        ),
        Denied::Rebinding(why) => AppError::Forbidden(why),
        Denied::ReadOnly => AppError::Forbidden(
            "this API key has read scope; this request needs a write key".to_string(),
        ),
        Denied::Unavailable(e) => e.into(),
    }
}

async fn require(parts: &Parts, state: &AppState, needed: Scope) -> Result<Scope, AppError> {
    let scope = scope_of(parts, state).await.map_err(refused)?;
    if scope < needed {
        return Err(refused(Denied::ReadOnly));
    }
    Ok(scope)
}

/// The scope of the caller: the scope of its key (from the config file or
/// created through the API), or write for a loopback client while no key
/// exists at all (when the request names a loopback host or `base_url`'s:
/// a browser's page could otherwise reach it by DNS rebinding).
pub async fn scope_of(parts: &Parts, state: &AppState) -> Result<Scope, Denied> {
    let config = state.live.config();
    let presented = presented_key(&parts.headers);
    // A config key answers without a database read.
    if let Some(scope) = presented.and_then(|k| match_key(&config.api_keys, k)) {
        return Ok(scope);
    }
    if presented.is_none() && !config.api_keys.is_empty() {
        return Err(Denied::Missing);
    }
    let stored = state
        .store
        .list_api_keys()
        .await
        .map_err(Denied::Unavailable)?;
    if config.api_keys.is_empty() && stored.is_empty() {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0);
        let client = peer.map(|p| client_ip(p, &parts.headers, &state.config.trusted_proxies));
        return match client {
            Some(ip) if ip.is_loopback() => {
                super::browser::rebinding(&parts.headers, &state.config.base_url)
                    .map_err(Denied::Rebinding)?;
                Ok(Scope::Write)
            }
            _ => Err(Denied::LoopbackOnly),
        };
    }
    let presented = presented.ok_or(Denied::Missing)?;
    let stored: Vec<ApiKey> = stored.iter().filter_map(stored_key).collect();
    match_key(&stored, presented).ok_or(Denied::Wrong)
}

/// A stored key as the matcher compares it.
fn stored_key(r: &crate::store::keys::ApiKeyRecord) -> Option<ApiKey> {
    let sha256: [u8; 32] = hex::decode(&r.sha256).ok()?.try_into().ok()?;
    let scope = match r.scope.as_str() {
        "read" => Scope::Read,
        "write" => Scope::Write,
        _ => return None,
    };
    Some(ApiKey {
        name: r.name.clone(),
        scope,
        sha256,
    })
}

/// The key a request carries, from `X-Api-Key` or `Authorization: Bearer`.
pub fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(v.trim());
    }
    let auth = headers.get("authorization")?.to_str().ok()?;
    let (scheme, token) = auth.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// The scope of the key, comparing against every configured key in constant time.
pub fn match_key(keys: &[ApiKey], presented: &str) -> Option<Scope> {
    let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
    let mut found = None;
    for k in keys {
        // No early exit: the time taken does not depend on which key matched.
        if bool::from(k.sha256.ct_eq(&digest)) {
            found = Some(k.scope);
        }
    }
    found
}

/// The client's address: the peer, or, when the peer is a trusted proxy, the
/// rightmost `X-Forwarded-For` entry that is not itself a trusted proxy.
pub fn client_ip(peer: SocketAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let peer_ip = canonical(peer.ip());
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !is_trusted(&peer_ip) {
        return peer_ip;
    }
    let mut hops: Vec<IpAddr> = Vec::new();
    for value in headers.get_all("x-forwarded-for") {
        let Ok(value) = value.to_str() else {
            return peer_ip;
        };
        for part in value.split(',') {
            match part.trim().parse::<IpAddr>() {
                Ok(ip) => hops.push(canonical(ip)),
                // A hop we cannot read ends what we can trust.
                Err(_) => hops.clear(),
            }
        }
    }
    for ip in hops.iter().rev() {
        if !is_trusted(ip) {
            return *ip;
        }
    }
    hops.first().copied().unwrap_or(peer_ip)
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn key(name: &str, scope: Scope, secret: &str) -> ApiKey {
        ApiKey {
            name: name.to_string(),
            scope,
            sha256: Sha256::digest(secret.as_bytes()).into(),
        }
    }

    #[test]
    fn keys_match_by_hash_with_their_scope() {
        let keys = [
            key("r", Scope::Read, "read-key-0123456789"),
            key("w", Scope::Write, "write-key-0123456789"),
        ];
        assert_eq!(match_key(&keys, "read-key-0123456789"), Some(Scope::Read));
        assert_eq!(match_key(&keys, "write-key-0123456789"), Some(Scope::Write));
        assert_eq!(match_key(&keys, "write-key-012345678"), None);
    }

    #[test]
    fn keys_come_from_either_header() {
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("Bearer abc"));
        assert_eq!(presented_key(&h), Some("abc"));
        h.insert("x-api-key", HeaderValue::from_static("xyz"));
        assert_eq!(presented_key(&h), Some("xyz"));
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("Basic abc"));
        assert_eq!(presented_key(&h), None);
    }

    #[test]
    fn forwarded_for_is_trusted_only_from_trusted_proxies() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_static("1.1.1.1, 203.0.113.7, 10.0.0.5"),
        );
        let proxy: SocketAddr = "10.0.0.1:1234".parse().unwrap();
        let stranger: SocketAddr = "198.51.100.1:1234".parse().unwrap();
        assert_eq!(
            client_ip(proxy, &h, &trusted),
            "203.0.113.7".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            client_ip(stranger, &h, &trusted),
            "198.51.100.1".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            client_ip(proxy, &HeaderMap::new(), &trusted),
            "10.0.0.1".parse::<IpAddr>().unwrap()
        );
    }
}
