//! The conformance suite on SQLite.

use connector_store_testing::sqlite::SqliteFactory;

connector_store_testing::store_conformance_tests!(SqliteFactory::new());

/// SQLite's own rows, checked through a second connection on the file (as an operator's
/// `sqlite3` would see them), never through the store's.
mod rows {
    use connector_store::sqlite::SqliteStore;
    use connector_store::{StateStore, StoreError};
    use connector_store_testing::fixtures::*;

    fn opened() -> (tempfile::TempDir, std::path::PathBuf, SqliteStore) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("host.db");
        let store = SqliteStore::open(&path).expect("store");
        (dir, path, store)
    }

    #[tokio::test]
    async fn delete_agent_leaves_no_membership_rows() {
        let (_dir, path, store) = opened();
        populate_bound(&store).await;
        store
            .put_agent(&agent("bot", &["team", "root"]))
            .await
            .expect("agent");
        let memberships = |path: &std::path::Path| -> i64 {
            rusqlite::Connection::open(path)
                .expect("a second connection")
                .query_row(
                    "SELECT COUNT(*) FROM agent_units WHERE agent_id = 'bot'",
                    [],
                    |r| r.get(0),
                )
                .expect("count")
        };
        assert_eq!(memberships(&path), 2, "the agent's memberships are rows");
        assert!(store.delete_agent("bot").await.expect("delete"));
        assert_eq!(memberships(&path), 0);
    }

    #[tokio::test]
    async fn malformed_stored_json_is_reported_as_corrupt() {
        let (_dir, path, store) = opened();
        populate_bound(&store).await;
        rusqlite::Connection::open(&path)
            .expect("a second connection")
            .execute("UPDATE bindings SET config = '{not json'", [])
            .expect("update");
        let err = store.load().await.expect_err("corrupt");
        assert!(
            matches!(err, StoreError::Corrupt(ref m) if m.contains("acme") && m.contains("team")),
            "{err:?}"
        );
    }
}
