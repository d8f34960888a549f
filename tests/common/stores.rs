//! The store on its own, without a server: opened (and migrated) on a test
//! database as the server opens it, and the check specs tests create.

use std::sync::Arc;

use overdue::config::Config;
use overdue::domain::check::{Check, CheckInput, CheckSpec};
use overdue::store::{CheckSource, Store};

use super::{Backend, TestDb};

/// A fresh database on `backend` and the store opened on it.
pub async fn open(backend: Backend) -> (TestDb, Arc<dyn Store>) {
    let db = TestDb::new(backend).await;
    let store = open_on(&db).await;
    (db, store)
}

/// The store opened on `db`, as the server opens it with no other settings.
pub async fn open_on(db: &TestDb) -> Arc<dyn Store> {
    let config = Config::from_toml(&db.config_toml("")).unwrap();
    overdue::store::open(config.database()).await.unwrap()
}

/// The check spec this JSON (as the API takes it) describes.
pub fn spec(json: &str) -> CheckSpec {
    CheckSpec::from_input(serde_json::from_str::<CheckInput>(json).unwrap()).unwrap()
}

/// Creates the check this JSON describes through the API's door, at `now`.
pub async fn create_api_check(store: &Arc<dyn Store>, json: &str, now: i64) -> Check {
    store
        .create_check(&spec(json), CheckSource::Api, now)
        .await
        .unwrap()
}
