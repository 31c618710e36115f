//! The conformance suite's factory for SQLite: every handle on one database file in a
//! temporary directory.

use std::sync::Arc;

use async_trait::async_trait;
use connector_store::sqlite::{SqliteStore, Writes};
use connector_store::Store;

use crate::faults::{inject_sqlite, Fault};
use crate::StoreFactory;

/// Handles on one SQLite file in a temporary directory (removed when dropped).
pub struct SqliteFactory {
    dir: tempfile::TempDir,
    writes: Writes,
}

impl SqliteFactory {
    /// A factory with a new empty database.
    pub fn new() -> Self {
        Self::writing(Writes::Grouped)
    }

    /// A factory with a new empty database whose handles run their writes as `writes`
    /// says.
    pub fn writing(writes: Writes) -> Self {
        Self {
            dir: tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary directory: {e}")),
            writes,
        }
    }

    /// The database file.
    pub fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("host.db")
    }
}

impl Default for SqliteFactory {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl StoreFactory for SqliteFactory {
    async fn open(&self) -> Arc<dyn Store> {
        Arc::new(
            SqliteStore::open_with(&self.path(), self.writes)
                .unwrap_or_else(|e| panic!("opening {}: {e}", self.path().display())),
        )
    }

    async fn inject(&self, fault: Option<Fault>) {
        // The schema must exist before a trigger can name its tables.
        drop(self.open().await);
        inject_sqlite(&self.path(), fault)
            .unwrap_or_else(|e| panic!("injecting {fault:?} into {}: {e}", self.path().display()));
    }
}
