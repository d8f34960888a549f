//! `[webhooks] allow / deny`: which addresses HTTP receivers may reach, so that
//! whoever can write receivers cannot use overdue to probe the network behind it.
//!
//! Every address a target resolves to is checked (a name is refused when any
//! of its addresses is), by a DNS resolver plugged into the one HTTP client and,
//! for URLs that name an IP address (which skip DNS), before the request is sent.
//! Redirects are never followed, so no other hop is reached.

use std::error::Error;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;
use serde::Deserialize;

/// What `deny = ["private"]` stands for: loopback, private, link-local, and
/// the "this host" ranges (connecting to 0.0.0.0 reaches the local host).
pub const PRIVATE: &[&str] = &[
    "127.0.0.0/8",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "169.254.0.0/16",
    "100.64.0.0/10",
    "0.0.0.0/8",
    "::1/128",
    "::/128",
    "fc00::/7",
    "fe80::/10",
];

/// `[webhooks]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhooksInput {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
}

/// One entry of a list: the range, and the shorthand it came from, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    net: IpNet,
    from: Option<&'static str>,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.net)?;
        if let Some(from) = self.from {
            write!(f, " (from {from:?})")?;
        }
        Ok(())
    }
}

/// The validated `[webhooks]` lists. An address matching `allow` is allowed;
/// else one matching `deny` is refused; else it is allowed, unless only
/// `allow` is given (then the allow list is the whole of what may be reached).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetPolicy {
    allow: Vec<Rule>,
    deny: Vec<Rule>,
}

/// A target refused by the policy; its message names the address and the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied(pub String);

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for Denied {}

impl TargetPolicy {
    /// Validates both lists; each error names its entry (`deny[2]: …`).
    pub fn from_input(input: WebhooksInput) -> Result<TargetPolicy, Vec<String>> {
        let mut errors = Vec::new();
        let allow = rules("allow", &input.allow, &mut errors);
        let deny = rules("deny", &input.deny, &mut errors);
        if errors.is_empty() {
            Ok(TargetPolicy { allow, deny })
        } else {
            Err(errors)
        }
    }

    /// True when no list is set: every address may be reached.
    pub fn is_open(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// Whether `ip` may be reached; the refusal names the address and the rule.
    /// An IPv6 address that carries an IPv4 one ([`embedded_ipv4`]) reaches
    /// that IPv4 host, so it is judged as it; a `deny` range written for the
    /// IPv6 address itself refuses it too.
    pub fn check(&self, ip: IpAddr) -> Result<(), Denied> {
        let IpAddr::V6(v6) = ip else {
            return self.judge(ip);
        };
        let Some(v4) = embedded_ipv4(v6) else {
            return self.judge(ip);
        };
        if !self.allow.iter().any(|r| r.net.contains(&ip)) {
            if let Some(rule) = self.deny.iter().find(|r| r.net.contains(&ip)) {
                return Err(Denied(format!("{ip} is denied by [webhooks] deny {rule}")));
            }
        }
        self.judge(IpAddr::V4(v4))
            .map_err(|d| Denied(format!("{ip} carries the IPv4 address {v4}: {}", d.0)))
    }

    fn judge(&self, ip: IpAddr) -> Result<(), Denied> {
        if self.allow.iter().any(|r| r.net.contains(&ip)) {
            return Ok(());
        }
        if let Some(rule) = self.deny.iter().find(|r| r.net.contains(&ip)) {
            return Err(Denied(format!("{ip} is denied by [webhooks] deny {rule}")));
        }
        if !self.allow.is_empty() && self.deny.is_empty() {
            return Err(Denied(format!(
                "{ip} is not in [webhooks] allow (with only an allow list, nothing else may be reached)"
            )));
        }
        Ok(())
    }

    /// Checks a URL whose host is an IP address (those skip DNS); names are
    /// checked by [`GuardedResolver`] when they are resolved.
    pub fn check_url(&self, url: &Url) -> Result<(), Denied> {
        let host = url.host_str().unwrap_or("");
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        match host.parse::<IpAddr>() {
            Ok(ip) => self.check(ip),
            Err(_) => Ok(()),
        }
    }
}

/// The IPv4 address an IPv6 address stands for on the wire, if any:
/// IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d` (not `::` or
/// `::1`), NAT64 `64:ff9b::a.b.c.d` (RFC 6052), 6to4 `2002:AABB:CCDD::/48`
/// (bits 16..48) and Teredo `2001:0::/32` (the client, in the last 32 bits
/// inverted). A relay or the kernel turns packets to these into packets to
/// the IPv4 host, so `deny = ["private"]` must see that host.
pub fn embedded_ipv4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let last = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => Some(last(hi, lo)),
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => None,
        [0, 0, 0, 0, 0, 0, hi, lo] => Some(last(hi, lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(last(hi, lo)),
        [0x2002, hi, lo, ..] => Some(last(hi, lo)),
        [0x2001, 0, _, _, _, _, hi, lo] => Some(last(!hi, !lo)),
        _ => None,
    }
}

fn rules(key: &str, list: &[String], errors: &mut Vec<String>) -> Vec<Rule> {
    let mut out = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let entry = entry.trim();
        if entry == "private" {
            out.extend(PRIVATE.iter().map(|net| Rule {
                net: net.parse().expect("the private ranges are valid CIDR"),
                from: Some("private"),
            }));
            continue;
        }
        let net = entry
            .parse::<IpNet>()
            .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from));
        match net {
            Ok(net) => out.push(Rule { net, from: None }),
            Err(_) => errors.push(format!(
                "{key}[{i}]: {entry:?} is not an address, a CIDR range like \"10.0.0.0/8\", or \"private\""
            )),
        }
    }
    out
}

/// Resolves names with the system resolver and refuses a name any of whose
/// addresses the policy denies (so a name cannot smuggle one bad address in
/// among good ones).
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    pub policy: Arc<TargetPolicy>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            for a in &addrs {
                policy
                    .check(a.ip())
                    .map_err(|d| Denied(format!("{} ({host} resolves to it)", d.0)))?;
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// The policy's refusal somewhere in an error's chain of causes, if any.
pub fn denied_in<'a>(e: &'a (dyn Error + 'static)) -> Option<&'a Denied> {
    let mut cur: Option<&'a (dyn Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(d) = err.downcast_ref::<Denied>() {
            return Some(d);
        }
        cur = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], deny: &[&str]) -> TargetPolicy {
        TargetPolicy::from_input(WebhooksInput {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: deny.iter().map(|s| s.to_string()).collect(),
        })
        .unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn open_by_default() {
        let p = TargetPolicy::default();
        assert!(p.is_open());
        assert!(p.check(ip("127.0.0.1")).is_ok());
    }

    #[test]
    fn deny_names_the_address_and_the_rule() {
        let p = policy(&[], &["127.0.0.0/8"]);
        assert_eq!(
            p.check(ip("127.0.0.1")).unwrap_err().0,
            "127.0.0.1 is denied by [webhooks] deny 127.0.0.0/8"
        );
        // An IPv4-mapped IPv6 address is the IPv4 address.
        assert!(p.check(ip("::ffff:127.0.0.2")).is_err());
        assert!(p.check(ip("192.0.2.1")).is_ok());
    }

    #[test]
    fn private_expands_to_local_ranges() {
        let p = policy(&[], &["private"]);
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.20.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "100.64.0.1",
        ] {
            let e = p.check(ip(bad)).unwrap_err().0;
            assert!(
                e.starts_with(&format!("{bad} is denied by [webhooks] deny ")),
                "{e}"
            );
            assert!(e.ends_with("(from \"private\")"), "{e}");
        }
        for good in ["192.0.2.1", "172.32.0.1", "2001:db8::1", "8.8.8.8"] {
            assert!(p.check(ip(good)).is_ok(), "{good}");
        }
    }

    #[test]
    fn ipv6_addresses_carrying_an_ipv4_one_are_judged_by_it() {
        let v6 = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        let v4 = |s: &str| Some(s.parse::<Ipv4Addr>().unwrap());
        for (addr, inside) in [
            ("::ffff:127.0.0.1", v4("127.0.0.1")),
            ("::127.0.0.1", v4("127.0.0.1")),
            ("::7f00:1", v4("127.0.0.1")),
            ("64:ff9b::7f00:1", v4("127.0.0.1")),
            ("64:ff9b::10.1.2.3", v4("10.1.2.3")),
            ("2002:7f00:1::", v4("127.0.0.1")),
            ("2002:a9fe:a9fe:1:2:3:4:5", v4("169.254.169.254")),
            ("2001:0:4136:e378:8000:63bf:80ff:fffe", v4("127.0.0.1")),
            ("::", None),
            ("::1", None),
            ("2001:db8::1", None),
            ("64:ff9b:1::7f00:1", None),
        ] {
            assert_eq!(embedded_ipv4(v6(addr)), inside, "{addr}");
        }

        let p = policy(&[], &["private"]);
        for bad in [
            "::ffff:127.0.0.1",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
            "2002:c0a8:101::1",
            "2001:0:4136:e378:8000:63bf:80ff:fffe",
        ] {
            let e = p.check(ip(bad)).unwrap_err().0;
            assert!(
                e.starts_with(&format!("{} carries the IPv4 address ", ip(bad))),
                "{e}"
            );
            assert!(e.contains("is denied by [webhooks] deny "), "{e}");
        }
        assert_eq!(
            p.check(ip("64:ff9b::7f00:1")).unwrap_err().0,
            "64:ff9b::7f00:1 carries the IPv4 address 127.0.0.1: 127.0.0.1 is denied by \
             [webhooks] deny 127.0.0.0/8 (from \"private\")"
        );
        // A public IPv4 address inside is reached as it would be.
        for good in ["64:ff9b::808:808", "2002:808:808::1", "::ffff:192.0.2.1"] {
            assert!(p.check(ip(good)).is_ok(), "{good}");
        }
        // The IPv4 address is what an allow list names.
        let only = policy(&["192.0.2.0/24"], &[]);
        assert!(only.check(ip("::ffff:192.0.2.7")).is_ok());
        assert!(only.check(ip("64:ff9b::c000:207")).is_ok());
        assert!(only.check(ip("64:ff9b::808:808")).is_err());
        // A deny range written for the IPv6 form still holds.
        let nat64 = policy(&[], &["64:ff9b::/96"]);
        assert!(nat64.check(ip("64:ff9b::808:808")).is_err());
        let allowed = policy(&["127.0.0.1/32"], &["private"]);
        assert!(allowed.check(ip("::ffff:127.0.0.1")).is_ok());
        assert!(allowed.check(ip("2002:7f00:2::")).is_err());
    }

    #[test]
    fn allow_wins_over_deny() {
        let p = policy(&["127.0.0.1/32"], &["private"]);
        assert!(p.check(ip("127.0.0.1")).is_ok());
        assert!(p.check(ip("127.0.0.2")).is_err());
        assert!(p.check(ip("192.0.2.1")).is_ok(), "neither list: allowed");
    }

    #[test]
    fn an_allow_list_alone_is_the_whole_list() {
        let p = policy(&["192.0.2.0/24"], &[]);
        assert!(p.check(ip("192.0.2.7")).is_ok());
        let e = p.check(ip("198.51.100.1")).unwrap_err().0;
        assert!(
            e.starts_with("198.51.100.1 is not in [webhooks] allow"),
            "{e}"
        );
    }

    #[test]
    fn literal_ip_urls_are_checked() {
        let p = policy(&[], &["127.0.0.0/8", "::1"]);
        let url = |s: &str| Url::parse(s).unwrap();
        assert!(p.check_url(&url("http://127.0.0.1:9/x")).is_err());
        assert!(p.check_url(&url("http://[::1]:9/x")).is_err());
        // Names are left to the resolver.
        assert!(p.check_url(&url("http://localhost:9/x")).is_ok());
    }

    #[test]
    fn bad_entries_are_named() {
        let e = TargetPolicy::from_input(WebhooksInput {
            allow: vec!["10.0.0.0/33".into()],
            deny: vec!["127.0.0.0/8".into(), "intranet".into()],
        })
        .unwrap_err();
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].starts_with("allow[0]: \"10.0.0.0/33\""), "{e:?}");
        assert!(e[1].starts_with("deny[1]: \"intranet\""), "{e:?}");
    }

    #[tokio::test]
    async fn the_resolver_refuses_a_name_with_a_denied_address() {
        let r = GuardedResolver {
            policy: Arc::new(policy(&[], &["127.0.0.0/8", "::1"])),
        };
        let e = match r.resolve("localhost".parse().unwrap()).await {
            Ok(_) => panic!("localhost resolved although loopback is denied"),
            Err(e) => e,
        };
        let d = denied_in(&*e).expect("a Denied error");
        assert!(d.0.contains("is denied by [webhooks] deny"), "{d}");
        assert!(d.0.contains("(localhost resolves to it)"), "{d}");
    }
}
