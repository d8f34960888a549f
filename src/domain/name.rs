//! How a check is named where its uuid must not show. The uuid is a
//! capability (it pings, skips, locks, unlocks and snoozes), so read keys,
//! read-only viewers, `/metrics`, alert labels, message links, silences and
//! badges name a check by its slug or, without one, by its `unique_key`.

use sha1::{Digest, Sha1};
use uuid::Uuid;

/// healthchecks' `unique_key`: the SHA-1 of the first 16 hex digits of the
/// uuid, 40 lowercase hex digits. Stable, and the uuid cannot be got back from it.
pub fn unique_key(uuid: Uuid) -> String {
    let hex = uuid.simple().to_string();
    hex::encode(Sha1::digest(&hex.as_bytes()[..16]))
}

/// [`unique_key`] of a uuid as stored (text); `None` when it is not a uuid.
pub fn unique_key_of(uuid: &str) -> Option<String> {
    Uuid::parse_str(uuid).ok().map(unique_key)
}

/// Whether `s` is spelled like a unique key (40 hex digits).
pub fn looks_like_unique_key(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The name of a check for those who may not see its uuid: its slug, or
/// its unique key without one.
pub fn public_name(slug: Option<&str>, uuid: Uuid) -> String {
    match slug.filter(|s| !s.is_empty()) {
        Some(s) => s.to_string(),
        None => unique_key(uuid),
    }
}

/// [`public_name`] of a check whose uuid is stored as text. A uuid that does
/// not parse (never written by overdue) is named by the hash of its text, so
/// it still never shows.
pub fn public_name_of(slug: Option<&str>, uuid: &str) -> String {
    match slug.filter(|s| !s.is_empty()) {
        Some(s) => s.to_string(),
        None => unique_key_of(uuid).unwrap_or_else(|| hex::encode(Sha1::digest(uuid.as_bytes()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn unique_key_is_computed_as_healthchecks_does() {
        let u = Uuid::parse_str("5f4cc5e5-0c51-4f1e-a1fc-3d0d8c4d5ee0").unwrap();
        // As healthchecks computes it: sha1(code.hex[:16]).
        assert_eq!(
            unique_key(u),
            hex::encode(Sha1::digest(b"5f4cc5e50c514f1e"))
        );
        assert!(looks_like_unique_key(&unique_key(u)));
        assert_eq!(unique_key_of(&u.to_string()), Some(unique_key(u)));
        assert_eq!(unique_key_of("nope"), None);
    }

    #[test]
    fn the_slug_wins_and_an_empty_one_counts_as_none() {
        let u = Uuid::new_v4();
        assert_eq!(public_name(Some("backup"), u), "backup");
        assert_eq!(public_name(Some(""), u), unique_key(u));
        assert_eq!(public_name(None, u), unique_key(u));
        assert_eq!(public_name_of(None, &u.to_string()), unique_key(u));
        assert_eq!(public_name_of(Some("b"), "junk"), "b");
        assert!(looks_like_unique_key(&public_name_of(None, "junk")));
    }

    proptest! {
        /// No spelling of the uuid appears in the name shown for it.
        #[test]
        fn the_name_never_contains_the_uuid(bytes in any::<[u8; 16]>()) {
            let u = uuid::Builder::from_random_bytes(bytes).into_uuid();
            let name = public_name(None, u);
            let hyphenated = u.to_string();
            let simple = u.simple().to_string();
            prop_assert!(!name.contains(&hyphenated) && !name.contains(&simple));
            prop_assert!(!name.contains(&simple[..16]));
            prop_assert_eq!(name.len(), 40);
        }
    }
}
