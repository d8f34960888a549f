//! Stored silences parsed once per change (issue #41): the API's list and
//! the dispatcher read the silences' ids and revisions, then only the rows
//! whose revision changed since this replica parsed them (another replica
//! may have written them); a read never compiles every regex again, and
//! never reads every row's matchers again.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use super::silence::Silence;
use crate::domain::ping::UnixMs;
use crate::store::notify::SilenceRecord;
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

/// By id: the revision parsed, and what it parsed to (`None`: invalid).
type Parsed = HashMap<String, (i64, Option<Arc<StoredSilence>>)>;

impl SilenceCache {
    /// Every stored silence, by `starts_at` then id: reads the revisions,
    /// then the rows that changed. A row that is not valid is logged once
    /// and left out.
    pub async fn read(
        &self,
        store: &dyn Store,
        now: UnixMs,
    ) -> Result<Vec<Arc<StoredSilence>>, StoreError> {
        let revisions = store.silence_revisions().await?;
        let stale = self.stale(&revisions);
        let rows = if stale.is_empty() {
            Vec::new()
        } else {
            store.silences_by_id(&stale).await?
        };
        Ok(self.update(&revisions, rows, now))
    }

    /// The ids whose revision is not the one parsed.
    fn stale(&self, revisions: &[(String, i64)]) -> Vec<String> {
        let parsed = self.lock();
        revisions
            .iter()
            .filter(|(id, rev)| !matches!(parsed.get(id), Some((seen, _)) if seen == rev))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Parses `rows` (those [`Self::stale`] named, as just read; one
    /// written since is taken as read), forgets what `revisions` no longer
    /// lists, and returns the silences in its order.
    fn update(
        &self,
        revisions: &[(String, i64)],
        rows: Vec<SilenceRecord>,
        now: UnixMs,
    ) -> Vec<Arc<StoredSilence>> {
        // Parsed outside the lock: compiling a silence's regexes takes a while.
        let fresh: Vec<(String, i64, Option<Arc<StoredSilence>>)> = rows
            .into_iter()
            .map(|rec| {
                let (id, revision) = (rec.id.clone(), rec.revision);
                (id, revision, parse(rec, now).map(Arc::new))
            })
            .collect();
        let mut parsed = self.lock();
        for (id, revision, silence) in fresh {
            parsed.insert(id, (revision, silence));
        }
        if parsed.len() > revisions.len() {
            let stored: HashSet<&str> = revisions.iter().map(|(id, _)| id.as_str()).collect();
            parsed.retain(|id, _| stored.contains(id.as_str()));
        }
        revisions
            .iter()
            .filter_map(|(id, _)| parsed.get(id).and_then(|(_, s)| s.clone()))
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

    fn revisions(rows: &[&SilenceRecord]) -> Vec<(String, i64)> {
        rows.iter().map(|r| (r.id.clone(), r.revision)).collect()
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
