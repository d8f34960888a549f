//! Signed acknowledge links (SPEC §6.2): a token that names one incident,
//! signed with a key every replica shares, so the link in a message works
//! without an API key (like a badge) and cannot be altered to name another
//! incident. The token binds the incident's id, its check's uuid and the
//! instant it opened, so an id reused after a deletion names nothing; it
//! expires when the incident resolves (the handler checks that).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::domain::ping::UnixMs;

/// The name of the shared secret in the database.
pub const SECRET_NAME: &str = "ack_links";

/// Bytes of the MAC kept in a token (128 bits).
const MAC_LEN: usize = 16;

/// The key acknowledge links are signed with.
#[derive(Clone)]
pub struct LinkKey(Vec<u8>);

impl std::fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkKey(…)")
    }
}

/// What a token is made from: the incident as it is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Incident<'a> {
    pub id: i64,
    pub check_uuid: &'a str,
    pub opened_at: UnixMs,
}

impl LinkKey {
    /// A key from a secret's text.
    pub fn new(secret: &str) -> LinkKey {
        LinkKey(secret.as_bytes().to_vec())
    }

    /// A fresh random secret to offer the database (64 hex digits).
    pub fn random_secret() -> String {
        let bytes: [u8; 32] = rand::random();
        hex::encode(bytes)
    }

    fn mac(&self, i: Incident<'_>) -> [u8; MAC_LEN] {
        let mut m =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        m.update(format!("overdue-ack:v1:{}:{}:{}", i.id, i.check_uuid, i.opened_at).as_bytes());
        let full = m.finalize().into_bytes();
        let mut out = [0u8; MAC_LEN];
        out.copy_from_slice(&full[..MAC_LEN]);
        out
    }

    /// The token of an incident: `<id>.<mac>`.
    pub fn token(&self, i: Incident<'_>) -> String {
        format!("{}.{}", i.id, URL_SAFE_NO_PAD.encode(self.mac(i)))
    }

    /// True when `token` is this incident's, compared in constant time.
    pub fn verify(&self, token: &str, i: Incident<'_>) -> bool {
        let Some((id, mac)) = token.split_once('.') else {
            return false;
        };
        if id != i.id.to_string() {
            return false;
        }
        let Ok(given) = URL_SAFE_NO_PAD.decode(mac) else {
            return false;
        };
        given.len() == MAC_LEN && bool::from(given.ct_eq(&self.mac(i)))
    }
}

/// The incident id a token names, before it is verified; `None` when the
/// token is not of the form `<id>.<mac>`.
pub fn token_incident(token: &str) -> Option<i64> {
    let (id, mac) = token.split_once('.')?;
    if mac.is_empty() || mac.len() > 64 || id.starts_with('+') {
        return None;
    }
    id.parse::<i64>().ok().filter(|id| *id > 0)
}

/// The acknowledge link of an incident.
pub fn link(base_url: &str, key: &LinkKey, i: Incident<'_>) -> String {
    format!("{base_url}/ack/{}", key.token(i))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const I: Incident<'static> = Incident {
        id: 42,
        check_uuid: "5f0c6b8e-0000-4000-8000-000000000001",
        opened_at: 1_700_000_000_000,
    };

    #[test]
    fn a_token_verifies_for_its_incident_only() {
        let k = LinkKey::new("a shared secret of some length");
        let t = k.token(I);
        assert!(t.starts_with("42."), "{t}");
        assert_eq!(token_incident(&t), Some(42));
        assert!(k.verify(&t, I));
        // Another incident, check or opening instant: refused.
        assert!(!k.verify(&t, Incident { id: 43, ..I }));
        assert!(!k.verify(
            &t,
            Incident {
                opened_at: I.opened_at + 1,
                ..I
            }
        ));
        assert!(!k.verify(
            &t,
            Incident {
                check_uuid: "5f0c6b8e-0000-4000-8000-000000000002",
                ..I
            }
        ));
        // Another key: refused.
        assert!(!LinkKey::new("another secret entirely").verify(&t, I));
    }

    #[test]
    fn malformed_tokens_name_nothing() {
        for t in [
            "", "42", "42.", ".abc", "x.abc", "-1.abc", "+4.abc", "0.abc",
        ] {
            assert_eq!(token_incident(t), None, "{t:?}");
        }
        let k = LinkKey::new("k");
        assert!(!k.verify("42.!!!", I));
        assert!(!k.verify("42.AAAA", I));
    }

    #[test]
    fn random_secrets_differ() {
        let (a, b) = (LinkKey::random_secret(), LinkKey::random_secret());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }

    proptest! {
        /// Changing any one character of a token makes it fail.
        #[test]
        fn any_altered_character_is_refused(pos in 0usize..40, c in proptest::char::range('-', 'z')) {
            let k = LinkKey::new("proptest secret");
            let t = k.token(I);
            let mut chars: Vec<char> = t.chars().collect();
            let pos = pos % chars.len();
            prop_assume!(chars[pos] != c);
            chars[pos] = c;
            let altered: String = chars.into_iter().collect();
            prop_assert!(!k.verify(&altered, I));
        }
    }
}
