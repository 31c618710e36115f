//! The store conformance suite (`connector-store-testing`) against PostgreSQL, through the
//! crates' public API as a platform embedding them would use (SQLite runs it in
//! `host/store-testing/tests/sqlite.rs`), and PostgreSQL's own cases.

use std::sync::Arc;

use async_trait::async_trait;
use connector_store::{ReplicaCoordination, StateStore, Store};
use connector_store_testing::StoreFactory;

mod postgres {
    use super::*;
    use connector_store_postgres::PostgresStore;
    use connector_store_testing::faults::{inject_postgres, Fault};
    use connector_store_testing::sqlite::SqliteFactory;
    use integration_tests::postgres::require_postgres;

    /// Every handle on one fresh database of the test cluster; `None` (the test is
    /// skipped with a notice) when no PostgreSQL server is installed outside CI.
    struct Factory {
        url: String,
    }

    #[async_trait]
    impl StoreFactory for Factory {
        async fn open(&self) -> Arc<dyn Store> {
            Arc::new(
                PostgresStore::connect(&self.url)
                    .await
                    .expect("the database opens"),
            )
        }

        async fn inject(&self, fault: Option<Fault>) {
            // The schema must exist before a trigger can name its tables.
            drop(self.open().await);
            inject_postgres(&self.url, fault)
                .await
                .unwrap_or_else(|e| panic!("injecting {fault:?}: {e}"));
        }
    }

    /// A factory on a fresh database; without PostgreSQL (and not under CI) the case runs
    /// on SQLite rather than not at all, and the skip notice says PostgreSQL was not
    /// tested.
    enum MaybeFactory {
        Postgres(Factory),
        Sqlite(SqliteFactory),
    }

    impl MaybeFactory {
        fn new() -> Self {
            match require_postgres() {
                Some(pg) => MaybeFactory::Postgres(Factory {
                    url: pg.fresh_database("conformance").expect("a fresh database"),
                }),
                None => MaybeFactory::Sqlite(SqliteFactory::new()),
            }
        }
    }

    #[async_trait]
    impl StoreFactory for MaybeFactory {
        async fn open(&self) -> Arc<dyn Store> {
            match self {
                MaybeFactory::Postgres(f) => f.open().await,
                MaybeFactory::Sqlite(f) => f.open().await,
            }
        }

        async fn inject(&self, fault: Option<Fault>) {
            match self {
                MaybeFactory::Postgres(f) => f.inject(fault).await,
                MaybeFactory::Sqlite(f) => f.inject(fault).await,
            }
        }
    }

    connector_store_testing::store_conformance_tests!(MaybeFactory::new());

    /// PostgreSQL only: replicas starting at the same moment apply each migration once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_first_starts_migrate_once() {
        let Some(pg) = require_postgres() else { return };
        let url = pg.fresh_database("migrate_once").expect("a fresh database");
        let opens = (0..8).map(|_| PostgresStore::connect(&url));
        for result in futures::future::join_all(opens).await {
            result.expect("every concurrent first start succeeds");
        }
        let db = url.rsplit('/').next().expect("database name");
        let rows = pg
            .psql(
                db,
                "SELECT count(*), count(DISTINCT version) FROM schema_migrations",
            )
            .expect("psql");
        let (all, distinct) = rows.trim().split_once('|').expect("two columns");
        assert_eq!(all, distinct, "a migration was recorded twice: {rows}");
        assert_ne!(all, "0", "no migration recorded");
    }

    /// PostgreSQL only: grants keep their provenance as the text earlier versions wrote
    /// (`explicit`, `connector:<slug>`): such rows read back, and what is written now is
    /// that same text.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn grant_provenance_keeps_its_stored_text() {
        use connector_store_testing::fixtures::{
            earlier_grants_read_back, populate_bound, EARLIER_GRANT_ROWS,
        };
        let Some(pg) = require_postgres() else { return };
        let url = pg.fresh_database("provenance").expect("a fresh database");
        let db = url.rsplit('/').next().expect("database name");
        let store = PostgresStore::connect(&url)
            .await
            .expect("the database opens");
        populate_bound(&store).await;
        pg.psql(db, EARLIER_GRANT_ROWS)
            .expect("rows as an earlier version wrote them");
        earlier_grants_read_back(&store).await;
        let stored = pg
            .psql(
                db,
                "SELECT provenance FROM grants WHERE subject_id = 'team' ORDER BY ord",
            )
            .expect("psql");
        assert_eq!(stored.trim(), "connector:acme");
    }

    /// PostgreSQL only: with stale writes refused, a write on top of another handle's
    /// unseen change is refused and writes nothing; once a reload is applied it goes
    /// through (loading alone is not enough).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_racing_another_replicas_is_refused_until_reloaded() {
        use connector_model::records::UnitRecord;
        use connector_store::StoreError;
        let Some(pg) = require_postgres() else { return };
        let url = pg.fresh_database("stale").expect("a fresh database");
        let unit = |id: &str| UnitRecord {
            id: id.into(),
            parent: None,
            display_name: None,
            created_at: "2026-01-01T00:00:00Z".into(),
        };
        let a = PostgresStore::connect(&url).await.expect("a");
        let b = PostgresStore::connect(&url).await.expect("b");
        a.refuse_stale_writes();
        b.refuse_stale_writes();
        a.applied(a.load().await.expect("load a").version);
        b.applied(b.load().await.expect("load b").version);
        a.put_unit(&unit("from-a")).await.expect("a is current");
        a.put_unit(&unit("again-a"))
            .await
            .expect("a handle's own writes count as seen");
        let err = b
            .put_unit(&unit("from-b"))
            .await
            .expect_err("b has not seen a's writes");
        assert!(matches!(err, StoreError::Conflict(_)), "{err}");
        let snap = b.load().await.expect("reload");
        assert!(
            !snap.units.iter().any(|u| u.id == "from-b"),
            "written anyway"
        );
        b.put_unit(&unit("from-b"))
            .await
            .expect_err("a snapshot loaded but not applied does not count as seen");
        b.applied(snap.version);
        b.put_unit(&unit("from-b")).await.expect("current again");

        // `a` learns of b's write through changes_since (foreign), reloads, writes.
        let applied = snap.version - 1;
        let err = a.put_unit(&unit("late")).await.expect_err("b wrote since");
        assert!(matches!(err, StoreError::Conflict(_)), "{err}");
        assert!(a.changes_since(applied).await.expect("check").foreign);
        let snap = a.load().await.expect("reload a");
        assert!(!a.changes_since(snap.version).await.expect("check").foreign);
        a.applied(snap.version);
        a.put_unit(&unit("late")).await.expect("current again");
    }

    /// PostgreSQL only: the audit chain and the inboxes are appended correctly whatever
    /// isolation level the database makes the default (here REPEATABLE READ, whose
    /// snapshot would predate the lock an append waits for): replicas appending at once
    /// all succeed and form one chain.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn appends_hold_under_a_stricter_default_isolation() {
        use connector_model::audit::{Actor, AuditEntry};
        use connector_store::AuditStore;
        let Some(pg) = require_postgres() else { return };
        let url = pg.fresh_database("isolation").expect("a fresh database");
        let db = url.rsplit('/').next().expect("database name");
        pg.psql(
            db,
            &format!("ALTER DATABASE {db} SET default_transaction_isolation = 'repeatable read'"),
        )
        .expect("psql");
        let handles: Vec<PostgresStore> =
            futures::future::join_all((0..4).map(|_| PostgresStore::connect(&url)))
                .await
                .into_iter()
                .map(|s| s.expect("a handle"))
                .collect();
        let appends = handles.iter().enumerate().flat_map(|(h, store)| {
            (0..10).map(move |i| {
                let mut entry =
                    AuditEntry::now(Actor::operator(), "unit.put", format!("unit:h{h}-{i}"));
                entry.details = serde_json::json!({"i": i});
                store.append_audit(vec![entry])
            })
        });
        for result in futures::future::join_all(appends).await {
            result.expect("every concurrent append succeeds");
        }
        assert_eq!(checked_chain(&handles[0]).await, (40, None));
    }

    /// How many records the chain of `store` holds (up to 1,000), and the first that
    /// does not check.
    async fn checked_chain(store: &PostgresStore) -> (usize, Option<i64>) {
        use connector_model::audit::ChainCheck;
        use connector_store::{AuditQuery, AuditStore};
        let records = store
            .audit_records(&AuditQuery {
                limit: 1000,
                ..AuditQuery::default()
            })
            .await
            .expect("records");
        let mut check = ChainCheck::from(&store.audit_anchor().await.expect("anchor"));
        records.iter().for_each(|r| check.next(r));
        (check.checked() as usize, check.first_broken())
    }

    /// PostgreSQL only: replicas that start at the same moment on one fresh database all
    /// write the same rows (the bundled connectors) with their records, on connections
    /// that have prepared nothing yet. Every write goes through: one that PostgreSQL
    /// aborts to break a deadlock between them, or for a serialization failure, runs
    /// again instead of failing the start.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn replicas_starting_together_write_the_same_rows_without_failing() {
        use connector_model::audit::{Actor, AuditEntry};
        use connector_store::{AuditStore, StateWrite};
        use connector_store_testing::fixtures::{connector, COMPONENT};
        let Some(pg) = require_postgres() else { return };
        const ROUNDS: usize = 12;
        const REPLICAS: usize = 4;
        let mut written = 0;
        for round in 0..ROUNDS {
            let url = pg
                .fresh_database(&format!("together{round}"))
                .expect("a fresh database");
            let handles: Vec<PostgresStore> =
                futures::future::join_all((0..REPLICAS).map(|_| PostgresStore::connect(&url)))
                    .await
                    .into_iter()
                    .map(|s| s.expect("a handle"))
                    .collect();
            // A start records something before its first state write (so its
            // connection has the audit statements prepared, not the state write's).
            for store in &handles {
                store
                    .append_audit(vec![AuditEntry::now(
                        Actor::host(),
                        "unit.put",
                        "unit:start".to_string(),
                    )])
                    .await
                    .expect("a first record");
            }
            let starts = handles.iter().map(|store| async move {
                for slug in ["acme", "github", "arxiv"] {
                    let record = connector(slug, slug, "sha256:1");
                    let entry = AuditEntry::now(
                        Actor::host(),
                        "connector.install",
                        format!("connector:{slug}"),
                    );
                    store
                        .write(StateWrite::PutConnector(&record, COMPONENT), Some(&entry))
                        .await?;
                }
                Ok::<_, connector_store::StoreError>(())
            });
            for (replica, result) in futures::future::join_all(starts)
                .await
                .into_iter()
                .enumerate()
            {
                if let Err(e) = result {
                    panic!("round {round}: replica {replica}'s start failed: {e}");
                }
            }
            let (checked, first_broken) = checked_chain(&handles[0]).await;
            assert_eq!(
                (checked, first_broken),
                (REPLICAS * 4, None),
                "round {round}"
            );
            written += checked;
        }
        assert_eq!(written, ROUNDS * REPLICAS * 4);
    }

    /// PostgreSQL only: inbox cursors are given in commit order, so a reader that follows
    /// a unit's cursor while replicas append to it concurrently sees every message (a
    /// cursor given before its append took the inbox lock could commit after a later
    /// one, and the reader, already past it, would never see it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_reader_following_the_cursor_misses_nothing_of_concurrent_appends() {
        use connector_store::{DeliveryQueue, InboxStore, StateStore};
        use connector_store_testing::fixtures::{delivery, message, unit};
        use std::collections::BTreeSet;
        use std::sync::atomic::{AtomicBool, Ordering};
        let Some(pg) = require_postgres() else { return };
        let url = pg.fresh_database("cursor_order").expect("a fresh database");
        const WRITERS: usize = 4;
        const EACH: usize = 60;
        let handles: Vec<PostgresStore> =
            futures::future::join_all((0..WRITERS + 1).map(|_| PostgresStore::connect(&url)))
                .await
                .into_iter()
                .map(|s| s.expect("a handle"))
                .collect();
        handles[0].put_unit(&unit("u", None)).await.expect("unit");
        let (reader, writers) = handles.split_last().expect("handles");
        let done = AtomicBool::new(false);
        let read = async {
            let (mut seen, mut after) = (BTreeSet::new(), 0);
            loop {
                let finished = done.load(Ordering::SeqCst);
                let page = reader.messages("u", after, 1000).await.expect("read");
                after = page.last().map_or(after, |m| m.seq);
                seen.extend(page.into_iter().map(|m| m.id));
                if finished {
                    return seen;
                }
            }
        };
        let write = async {
            let appends = writers.iter().enumerate().map(|(w, store)| async move {
                for i in 0..EACH {
                    let id = format!("w{w}-{i}");
                    store
                        .insert_routed_delivery(
                            &delivery(&id, 0),
                            &[message(&id, "u", &id)],
                            &["u".to_string()],
                            3600,
                            None,
                        )
                        .await
                        .expect("append")
                        .expect("not a duplicate");
                }
            });
            futures::future::join_all(appends).await;
            done.store(true, Ordering::SeqCst);
        };
        let (seen, ()) = futures::join!(read, write);
        let all = reader.messages("u", 0, 1000).await.expect("all");
        assert_eq!(all.len(), WRITERS * EACH);
        let missed: Vec<_> = all.iter().filter(|m| !seen.contains(&m.id)).collect();
        assert!(
            missed.is_empty(),
            "the reader following the cursor never saw {} of {} messages, e.g. cursor {}",
            missed.len(),
            all.len(),
            missed[0].seq
        );
    }

    /// PostgreSQL only: a database written by a newer host is refused, not misread.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_database_from_a_newer_host_is_refused() {
        let Some(pg) = require_postgres() else { return };
        let url = pg.fresh_database("newer").expect("a fresh database");
        PostgresStore::connect(&url).await.expect("first open");
        let db = url.rsplit('/').next().expect("database name");
        pg.psql(
            db,
            "INSERT INTO schema_migrations (version, applied_at) VALUES (999, 'later')",
        )
        .expect("psql");
        let err = PostgresStore::connect(&url)
            .await
            .expect_err("a newer schema is refused");
        assert!(err.to_string().contains("999"), "{err}");
    }

    /// PostgreSQL only: a database that is down is `Unavailable` at once, and the same
    /// handle works again when it is back (no restart of the host).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_handle_outlives_a_database_restart() {
        let Some(mut pg) = integration_tests::postgres::require_own_postgres() else {
            return;
        };
        let url = pg.create_database("outlive").expect("database");
        let store = PostgresStore::connect(&url).await.expect("open");
        store.load().await.expect("load");
        pg.stop().expect("stop");
        let started = std::time::Instant::now();
        let err = store.load().await.expect_err("down");
        assert!(
            matches!(err, connector_store::StoreError::Unavailable(_)),
            "{err}"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "failing took {:?}",
            started.elapsed()
        );
        pg.start_again().expect("start");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            match store.load().await {
                Ok(_) => break,
                Err(e) if std::time::Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => panic!("the handle did not recover: {e}"),
            }
        }
    }

    /// What an operation cost the database, read off the wire ([`PgRelay`]).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Cost {
        /// Round trips.
        flights: usize,
        /// Statements run.
        statements: usize,
        /// Round trips from the one that takes the state version's lock to the commit:
        /// how long every replica's state writes wait for this one.
        under_lock: usize,
    }

    impl Cost {
        fn of(flights: &[integration_tests::pg_relay::Flight]) -> Self {
            let has = |flight: &Vec<String>, sql: &str| flight.iter().any(|s| s.contains(sql));
            let locked = flights
                .iter()
                .position(|f| has(f, "FROM state_version FOR UPDATE"));
            let ended = flights.iter().rposition(|f| has(f, "COMMIT"));
            Self {
                flights: flights.len(),
                statements: flights.iter().map(Vec::len).sum(),
                under_lock: match (locked, ended) {
                    (Some(locked), Some(ended)) if ended >= locked => ended - locked + 1,
                    _ => 0,
                },
            }
        }

        /// The least of each, over `costs` (a hiccup of the test's threads longer than
        /// the relay's latency still splits a flight in two: the least is what the code
        /// asks for).
        fn least(costs: &[Cost]) -> Self {
            let least = |field: fn(&Cost) -> usize| costs.iter().map(field).min().unwrap_or(0);
            Self {
                flights: least(|c| c.flights),
                statements: least(|c| c.statements),
                under_lock: least(|c| c.under_lock),
            }
        }
    }

    /// PostgreSQL only: a batch of one write costs the database what the write alone
    /// costs: as many statements and round trips, and as many round trips under the
    /// state version's lock, which every replica's state writes wait for. A batch of
    /// several writes that go out together takes no more round trips either.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_takes_the_round_trips_of_one_write() {
        use connector_model::audit::{Actor, AuditEntry};
        use connector_store::{BatchedWrite, StateWrite};
        use connector_store_testing::fixtures::unit;
        use integration_tests::pg_relay::PgRelay;
        let Some(pg) = require_postgres() else { return };
        let url = pg.fresh_database("round_trips").expect("a fresh database");
        // Answers held back as a network would (a hiccup of the test's threads shorter
        // than that splits no pipeline into two flights).
        let latency = std::time::Duration::from_millis(5);
        let relay = PgRelay::start(pg.port(), latency).await.expect("a relay");
        let store = PostgresStore::connect(&relay.url(&url))
            .await
            .expect("the database opens");
        let units = [unit("a", None), unit("b", None), unit("c", None)];
        let record = AuditEntry::now(Actor::operator(), "unit.put", "unit:a".to_string());
        let write = StateWrite::PutUnit(&units[0]);
        let alone = async || {
            store.write(write, Some(&record)).await.expect("written");
        };
        let batched = async || {
            let outcomes = store.write_batch(&[(write, &record)]).await;
            assert!(
                matches!(outcomes.as_slice(), [BatchedWrite::Committed]),
                "{outcomes:?}"
            );
        };
        let three: Vec<_> = units
            .iter()
            .map(|u| (StateWrite::PutUnit(u), &record))
            .collect();
        let batched_three = async || {
            let outcomes = store.write_batch(&three).await;
            assert!(
                outcomes
                    .iter()
                    .all(|o| matches!(o, BatchedWrite::Committed)),
                "{outcomes:?}"
            );
        };
        // Each once first: the connection is made and its statements are prepared.
        alone().await;
        batched().await;
        batched_three().await;
        let mut costs: [Vec<Cost>; 3] = Default::default();
        for _ in 0..5 {
            let mark = relay.mark();
            alone().await;
            costs[0].push(Cost::of(&relay.since(mark)));
            let mark = relay.mark();
            batched().await;
            costs[1].push(Cost::of(&relay.since(mark)));
            let mark = relay.mark();
            batched_three().await;
            costs[2].push(Cost::of(&relay.since(mark)));
        }
        let [alone, batched, three] = costs.map(|c| Cost::least(&c));
        assert!(
            alone.under_lock > 0,
            "the relay saw no state write: {alone:?}"
        );
        assert!(
            batched.flights <= alone.flights
                && batched.statements <= alone.statements
                && batched.under_lock <= alone.under_lock,
            "a batch of one write costs {batched:?}, the write alone {alone:?}"
        );
        assert!(
            three.flights <= alone.flights && three.under_lock <= alone.under_lock,
            "a batch of three writes costs {three:?}, one write alone {alone:?}"
        );
    }
}
