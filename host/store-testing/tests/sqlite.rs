//! The conformance suite on SQLite.

use connector_store_testing::sqlite::SqliteFactory;

connector_store_testing::store_conformance_tests!(SqliteFactory::new());
