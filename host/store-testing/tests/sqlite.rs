//! The conformance suite on SQLite.

use connector_store_testing::sqlite::SqliteFactory;

connector_store_testing::store_conformance_tests!(SqliteFactory::new());

/// The same cases with every write committed on the caller's thread, as a process
/// serving one client (`connector-host mcp --local`) writes.
mod writes_on_caller {
    use connector_store::sqlite::Writes;
    use connector_store_testing::sqlite::SqliteFactory;

    connector_store_testing::store_conformance_tests!(SqliteFactory::writing(Writes::OnCaller));
}

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

    /// Grants keep their provenance as the text earlier versions wrote (`explicit`,
    /// `connector:<slug>`): rows written before it was read as a type read back, and
    /// what is written now is that same text.
    #[tokio::test]
    async fn grant_provenance_keeps_its_stored_text() {
        let (_dir, path, store) = opened();
        populate_bound(&store).await;
        let raw = rusqlite::Connection::open(&path).expect("a second connection");
        raw.execute(EARLIER_GRANT_ROWS, [])
            .expect("rows as an earlier version wrote them");
        earlier_grants_read_back(&store).await;
        let stored: Vec<String> = raw
            .prepare("SELECT provenance FROM grants WHERE subject_id = 'team' ORDER BY rowid")
            .expect("select")
            .query_map([], |r| r.get(0))
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("text");
        assert_eq!(stored, ["connector:acme"]);
        raw.execute(
            "UPDATE grants SET provenance = 'platform' WHERE subject_id = 'root'",
            [],
        )
        .expect("update");
        let err = store
            .load()
            .await
            .expect_err("no grant is a platform grant");
        assert!(
            matches!(err, StoreError::Corrupt(ref m) if m.contains("provenance")),
            "{err:?}"
        );
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
