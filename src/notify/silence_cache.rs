//! Stored silences parsed once per change (issue #41): the API's list and
//! the dispatcher read the silences' versions (id, revision, `updated_at`),
//! then only the rows whose version changed since this replica parsed them
//! (another replica may have written them); a read never compiles every
//! regex again, and never reads every row's matchers again.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use super::silence::Silence;
use crate::domain::ping::UnixMs;
use crate::store::notify::{SilenceRecord, SilenceVersion};
use crate::store::{Store, StoreError};

/// A stored silence, parsed.
#[derive(Debug)]
pub struct StoredSilence {
    pub silence: Silence,
    /// The row's `matchers`: the JSON list of the matchers' texts (as
    /// [`Silence`]'s matchers print), valid JSON, shown as stored.
    pub matchers_json: String,
    pub created_at: UnixMs,
    pub revision: i64,
}

/// The parsed stored silences of this replica, shared by the API and the
/// dispatcher.
#[derive(Default)]
pub struct SilenceCache {
    parsed: Mutex<Parsed>,
}

/// By id: the version parsed, and what it parsed to (`None`: invalid).
type Parsed = HashMap<String, (Version, Option<Arc<StoredSilence>>)>;

/// A row's revision and `updated_at`.
type Version = (i64, UnixMs);

impl SilenceCache {
    /// Every stored silence, by `starts_at` then id: reads the versions,
    /// then the rows that changed. A row that is not valid is logged once
    /// and left out.
    pub async fn read(
        &self,
        store: &dyn Store,
        now: UnixMs,
    ) -> Result<Vec<Arc<StoredSilence>>, StoreError> {
        let versions = store.silence_versions().await?;
        let stale = self.stale(&versions);
        let rows = if stale.is_empty() {
            Vec::new()
        } else {
            store.silences_by_id(&stale).await?
        };
        Ok(self.update(&versions, rows, now))
    }

    /// The ids whose version is not the one parsed.
    fn stale(&self, versions: &[SilenceVersion]) -> Vec<String> {
        let parsed = self.lock();
        versions
            .iter()
            .filter(|v| {
                !matches!(parsed.get(&v.id), Some((seen, _)) if *seen == (v.revision, v.updated_at))
            })
            .map(|v| v.id.clone())
            .collect()
    }

    /// Parses `rows` (those [`Self::stale`] named, as just read; one
    /// written since is taken as read), forgets what `versions` no longer
    /// lists, and returns the silences in its order.
    fn update(
        &self,
        versions: &[SilenceVersion],
        rows: Vec<SilenceRecord>,
        now: UnixMs,
    ) -> Vec<Arc<StoredSilence>> {
        // Parsed outside the lock: compiling a silence's regexes takes a while.
        let fresh: Vec<(String, Version, Option<Arc<StoredSilence>>)> = rows
            .into_iter()
            .map(|rec| {
                let (id, version) = (rec.id.clone(), (rec.revision, rec.updated_at));
                (id, version, parse(rec, now).map(Arc::new))
            })
            .collect();
        let mut parsed = self.lock();
        for (id, version, silence) in fresh {
            parsed.insert(id, (version, silence));
        }
        if parsed.len() > versions.len() {
            let stored: HashSet<&str> = versions.iter().map(|v| v.id.as_str()).collect();
            parsed.retain(|id, _| stored.contains(id.as_str()));
        }
        versions
            .iter()
            .filter_map(|v| parsed.get(&v.id).and_then(|(_, s)| s.clone()))
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, Parsed> {
        // The map is whole after every statement: a panic elsewhere leaves it usable.
        self.parsed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn parse(rec: SilenceRecord, now: UnixMs) -> Option<StoredSilence> {
    // Parsing checked that `matchers` is a JSON list of strings.
    let parsed = super::silence_from_record(&rec, now).map(|silence| StoredSilence {
        silence,
        matchers_json: rec.matchers,
        created_at: rec.created_at,
        revision: rec.revision,
    });
    match parsed {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(silence = %rec.id, error = %e, "ignoring a stored silence that is not valid");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, matchers: &[&str], revision: i64) -> SilenceRecord {
        SilenceRecord {
            id: id.into(),
            matchers: serde_json::to_string(matchers).unwrap(),
            starts_at: 0,
            ends_at: 3_600_000,
            comment: String::new(),
            created_by: String::new(),
            created_at: 0,
            updated_at: 1,
            revision,
        }
    }

    fn revisions(rows: &[&SilenceRecord]) -> Vec<SilenceVersion> {
        rows.iter()
            .map(|r| SilenceVersion {
                id: r.id.clone(),
                revision: r.revision,
                updated_at: r.updated_at,
            })
            .collect()
    }

    #[test]
    fn a_row_is_parsed_once_per_revision() {
        let cache = SilenceCache::default();
        let a = record("a", &["team=~\"data|web\""], 1);
        let b = record("b", &["team=\"ops\""], 7);
        let revs = revisions(&[&a, &b]);
        assert_eq!(cache.stale(&revs), ["a", "b"]);
        let first = cache.update(&revs, vec![b.clone(), a.clone()], 0);
        let ids: Vec<&str> = first.iter().map(|s| s.silence.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"], "in the order of the revisions");
        assert_eq!(first[0].matchers_json, a.matchers);
        assert!(cache.stale(&revs).is_empty());
        let again = cache.update(&revs, Vec::new(), 0);
        assert!(Arc::ptr_eq(&first[0], &again[0]), "parsed again");

        // Another revision of a, even with the same updated_at.
        let a2 = record("a", &["team=~\"data\""], 2);
        let revs = revisions(&[&a2, &b]);
        assert_eq!(cache.stale(&revs), ["a"]);
        let changed = cache.update(&revs, vec![a2], 0);
        assert_eq!(changed[0].silence.matchers[0].value, "data");
        assert!(Arc::ptr_eq(&first[1], &changed[1]));

        // A server from before revisions changes updated_at, not the revision.
        let mut b2 = b.clone();
        b2.matchers = serde_json::to_string(&["team=\"db\""]).unwrap();
        b2.updated_at += 1;
        let revs = revisions(&[&a, &b2]);
        assert_eq!(cache.stale(&revs), ["a", "b"]);

        // An invalid row is left out, and not parsed again; deleted ones are forgotten.
        let bad = record("c", &["team=~\"(\""], 1);
        let revs = revisions(&[&b, &bad]);
        assert_eq!(cache.stale(&revs), ["c"]);
        assert_eq!(cache.update(&revs, vec![bad], 0).len(), 1);
        assert!(cache.stale(&revs).is_empty());
        assert_eq!(cache.lock().len(), 2);
        // A row deleted between the two reads is not listed.
        let gone = revisions(&[&record("d", &["x=\"1\""], 1)]);
        assert!(cache.update(&gone, Vec::new(), 0).is_empty());
        assert!(cache.lock().is_empty());
    }
}
