//! Asking an SQLite file, from any thread and in microseconds, whether its state moved.
//!
//! A process serving beside the one that writes the file (`connector-host mcp --local`
//! beside `serve`) must see every change committed before each message it answers.
//! The full check ([`ReplicaCoordination::changes_since`](crate::ReplicaCoordination::changes_since))
//! runs on the blocking pool, two thread hand-overs per message. [`FileWatch`] answers
//! the two questions that let it be skipped, on a read-only connection of its own, on
//! the caller's thread:
//! - has any connection (any process, this one's own writer included) committed since
//!   the watch last asked (`PRAGMA data_version`: no table is read);
//! - which state version the file holds now (one row). Commits that leave it where the
//!   caller's memory is (audit records, deliveries, inbox messages: most commits) need no
//!   catching up.

use std::path::Path;
use std::time::Duration;

use parking_lot::Mutex;
use rusqlite::{Connection, OpenFlags};

/// A read-only connection to one SQLite file (see the module docs).
pub struct FileWatch {
    conn: Mutex<Connection>,
}

impl FileWatch {
    /// Watches `file`, which must exist.
    pub fn open(file: &Path) -> rusqlite::Result<FileWatch> {
        let conn = Connection::open_with_flags(
            file,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        // A reader never waits on a writer in WAL mode; this only bounds the rare wait for
        // a WAL index being rebuilt.
        conn.busy_timeout(Duration::from_millis(100))?;
        Ok(FileWatch {
            conn: Mutex::new(conn),
        })
    }

    /// A number that differs from the one the last call returned whenever another
    /// connection committed in between (`PRAGMA data_version`); `None` when it cannot be
    /// read.
    pub fn commits(&self) -> Option<i64> {
        let conn = self.conn.lock();
        let mut statement = conn.prepare_cached("PRAGMA data_version").ok()?;
        statement.query_row([], |row| row.get(0)).ok()
    }

    /// The state version the file holds now (see the [state version](super#state-version));
    /// `None` when it cannot be read.
    pub fn state_version(&self) -> Option<i64> {
        super::read_state_version(&self.conn.lock()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::SqliteStore;
    use crate::StateStore;
    use connector_store_testing::fixtures::unit;

    #[tokio::test]
    async fn a_watch_sees_commits_and_tells_state_writes_from_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("host.db");
        let store = SqliteStore::open(&file).unwrap();
        let watch = FileWatch::open(&file).unwrap();
        let (commits, version) = (watch.commits().unwrap(), watch.state_version().unwrap());
        assert_eq!(
            watch.commits(),
            Some(commits),
            "nothing committed in between"
        );

        // An audit record is a commit that leaves the state version alone.
        let entry = connector_model::audit::AuditEntry::now(
            connector_model::audit::Actor::host(),
            "tool.call",
            "tool:acme.echo".into(),
        );
        crate::AuditStore::append_audit_entry(&store, entry)
            .await
            .unwrap();
        let after_record = watch.commits().unwrap();
        assert_ne!(after_record, commits, "the record's commit is seen");
        assert_eq!(watch.state_version(), Some(version));

        store.put_unit(&unit("u1", None)).await.unwrap();
        assert_ne!(
            watch.commits(),
            Some(after_record),
            "the unit's commit is seen"
        );
        assert_eq!(watch.state_version(), Some(version + 1));
    }
}
