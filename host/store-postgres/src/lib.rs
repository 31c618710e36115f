//! A [`Store`] in PostgreSQL, shared by several host replicas.
//!
//! Why it is built this way:
//! - **A pool, short transactions.** Every trait method takes a connection from a
//!   `deadpool-postgres` pool and runs one transaction. A database that is down answers
//!   at once with [`StoreError::Unavailable`] (the API turns that into `503`); when it is
//!   back, broken connections are dropped at recycling and new ones are made, so the host
//!   recovers by itself.
//! - **Migrations under an advisory lock.** All pending migrations run in one transaction
//!   that first takes `pg_advisory_xact_lock`, so replicas starting at the same moment
//!   apply each migration once; a database with a newer schema than this host knows is
//!   refused.
//! - **A state version for the replicas' caches.** Every transaction that changes
//!   connectors, units, agents, bindings, grants or image tools also bumps the one row of
//!   `state_version` (which it holds locked from its first statement: state writes of all
//!   replicas take turns) and keeps its change in `state_changes` under the new version.
//!   Each replica keeps its working state in memory and asks
//!   [`ReplicaCoordination::changes_since`](connector_store::ReplicaCoordination::changes_since) before serving; versions it did not write itself mean
//!   another replica changed something, and it applies those changes
//!   ([`ReplicaCoordination::foreign_writes`](connector_store::ReplicaCoordination::foreign_writes)), or reloads when the log no longer reaches back
//!   to its version. Every state write's transaction has one shape (`state_tx`), and its
//!   statements go out together where they do not depend on each other's answers (the
//!   version's lock, the audit chain's lock and head, the change; then the audit records
//!   and the version bumps), so the lock every replica waits for is held for a few round
//!   trips, not one per statement.
//! - **State writes in batches.** The host sends the writes that queued up while its
//!   previous batch committed as one batch ([`StateStore::write_batch`](connector_store::StateStore::write_batch)): one transaction of
//!   that shape makes all their changes, keeps every version and change-log entry in one
//!   statement beside their audit records and commits once; only when one of them fails
//!   (a change, or the statement of the entries or of the records) is the batch written
//!   again, one savepoint each with its version, entry and record, to stop at the write
//!   that failed, commit those before it and not run those after it. A batch of one
//!   is a single write. The lock is held through one commit's WAL flush per batch, not
//!   per write, which is what bounds a replica's write rate.
//! - **Deliveries are claimed.** `insert_delivery` is one `INSERT … ON CONFLICT … WHERE`
//!   statement, so of two replicas receiving the same delivery exactly one stores it.
//!   Unfinished deliveries carry a claim (owner + expiry); sweeps take unclaimed or
//!   lapsed ones with `FOR UPDATE SKIP LOCKED`, so no two replicas work on the same one,
//!   and a replica killed mid-way leaves its work to the others once its claim lapses.
//! - **Inbox order is commit order.** Message cursors come from an identity column; the
//!   transactions that append messages serialise on an advisory lock, so a reader paging
//!   by cursor never skips a message that commits late with a smaller cursor. The lock
//!   is held across the commit's WAL flush, which makes those commits one at a time
//!   across all replicas (asynchronous commit would not, but a database crash could then
//!   hand out a cursor twice or show messages that vanish): one flush per turn of the
//!   lock is the webhook throughput ceiling on PostgreSQL. Routed deliveries are stored in
//!   groups ([`writer`]), so on that path one turn serves every delivery
//!   that arrived while the previous group was committing; a delivery finished later
//!   (`complete_delivery`: routing past the inline window, sweeps, retries) still takes a
//!   turn of its own.

#![deny(missing_docs)]

use std::collections::{BTreeSet, HashMap};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_postgres::error::SqlState;
use tokio_postgres::{IsolationLevel, NoTls, Row, Statement};

mod writer;

use connector_model::audit::{AuditAnchor, AuditEntry, AuditRecord};
use connector_model::provenance::GrantProvenance;
use connector_model::records::{
    rederive, BindingRecord, Claim, ConnectorRecord, DeliveryRecord, DeliveryStatus, GrantRecord,
    MessageRecord, Snapshot,
};
use connector_store::audit_groups::{AuditGroups, Submitted};
use connector_store::rows;
use connector_store::{
    encode_json, subject_parts, ClaimScope, CommitCounts, StateCheck, StoreError, StoreResult,
};
use connector_store::{
    AuditQuery, AuditStore, BatchedWrite, LoggedWrite, StateWrite, WriteRecords,
};
use connector_store::{DeliveryQueue, InboxStore, ReplicaCoordination, SecretStore, StateStore};
use connector_store::{CHANGES_KEPT, CHANGES_PRUNED_EVERY};
use writer::{RoutedJob, WriterShared};

/// How long a caller waits for a pooled connection, or for a new one to be made.
const POOL_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest any statement may run (unless `options` in the URL says otherwise).
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections per replica.
const POOL_SIZE: usize = 16;
/// Advisory lock keys (arbitrary constants, unique to this schema).
const MIGRATION_LOCK: i64 = 0x636f_6e6e_6d69_6772;
const INBOX_LOCK: i64 = 0x636f_6e6e_696e_6278;
/// Held from reading the audit chain's head to the commit: appends of all replicas take
/// turns, so seqs have no gaps and each record's `prev` is the record before it.
const AUDIT_LOCK: i64 = 0x636f_6e6e_6175_6474;

/// The schema, one entry per version (entry `i` is version `i + 1`). Append only.
const MIGRATIONS: &[&str] = &[
    // 1: the whole schema of SQLite's migrations 1-3, in PostgreSQL types. `ord` keeps
    // the order rows were first written (upserts keep their place), like SQLite's rowid.
    r#"
    CREATE TABLE connectors (
        ord          BIGINT GENERATED ALWAYS AS IDENTITY,
        slug         TEXT PRIMARY KEY,
        namespace    TEXT NOT NULL,
        digest       TEXT NOT NULL,
        component    BYTEA NOT NULL,
        bundled      BOOLEAN NOT NULL,
        installed_at TEXT NOT NULL
    );
    CREATE TABLE units (
        ord          BIGINT GENERATED ALWAYS AS IDENTITY,
        id           TEXT PRIMARY KEY,
        parent       TEXT,
        display_name TEXT,
        created_at   TEXT NOT NULL
    );
    CREATE TABLE agents (
        ord          BIGINT GENERATED ALWAYS AS IDENTITY,
        id           TEXT PRIMARY KEY,
        display_name TEXT,
        created_at   TEXT NOT NULL
    );
    CREATE TABLE agent_units (
        agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
        unit_id  TEXT NOT NULL,
        position INTEGER NOT NULL,
        PRIMARY KEY (agent_id, position)
    );
    CREATE INDEX agent_units_by_unit ON agent_units (unit_id);
    CREATE TABLE bindings (
        ord          BIGINT GENERATED ALWAYS AS IDENTITY,
        unit_id      TEXT NOT NULL REFERENCES units (id) ON DELETE CASCADE,
        connector    TEXT NOT NULL,
        config       TEXT NOT NULL,
        routing_keys TEXT NOT NULL,
        bound_at     TEXT NOT NULL,
        PRIMARY KEY (unit_id, connector)
    );
    CREATE INDEX bindings_by_connector ON bindings (connector);
    CREATE TABLE grants (
        ord          BIGINT GENERATED ALWAYS AS IDENTITY,
        subject_kind TEXT NOT NULL CHECK (subject_kind IN ('unit', 'agent')),
        subject_id   TEXT NOT NULL,
        tool         TEXT NOT NULL,
        namespace    TEXT NOT NULL,
        provenance   TEXT NOT NULL,
        created_at   TEXT NOT NULL,
        UNIQUE (subject_kind, subject_id, tool, provenance)
    );
    CREATE INDEX grants_by_provenance ON grants (provenance);
    CREATE TABLE image_tools (
        ord      BIGINT GENERATED ALWAYS AS IDENTITY,
        agent_id TEXT PRIMARY KEY REFERENCES agents (id) ON DELETE CASCADE,
        digest   TEXT NOT NULL,
        tools    TEXT NOT NULL
    );
    CREATE TABLE deliveries (
        ord           BIGINT GENERATED ALWAYS AS IDENTITY,
        connector     TEXT NOT NULL,
        delivery_id   TEXT NOT NULL,
        event         TEXT,
        headers       TEXT NOT NULL,
        body          BYTEA NOT NULL,
        received_unix BIGINT NOT NULL,
        received_at   TEXT NOT NULL,
        status        TEXT NOT NULL CHECK (status IN ('pending', 'done', 'failed')),
        attempts      INTEGER NOT NULL DEFAULT 0,
        error         TEXT,
        routed_to     TEXT NOT NULL DEFAULT '[]',
        claimed_by    TEXT,
        claim_until   BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (connector, delivery_id)
    );
    CREATE INDEX deliveries_unfinished ON deliveries (status, received_unix);
    CREATE TABLE messages (
        seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id          TEXT NOT NULL UNIQUE,
        unit_id     TEXT NOT NULL,
        connector   TEXT NOT NULL,
        kind        TEXT NOT NULL,
        delivery_id TEXT NOT NULL,
        thread_key  TEXT,
        payload     TEXT NOT NULL,
        received_at TEXT NOT NULL
    );
    CREATE INDEX messages_by_unit ON messages (unit_id, seq);
    CREATE TABLE state_version (
        id      BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (id),
        version BIGINT NOT NULL
    );
    INSERT INTO state_version (id, version) VALUES (TRUE, 0);
    CREATE TABLE host_secrets (
        name  TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    "#,
    // 2: agent token epochs (revocation).
    r#"
    ALTER TABLE agents ADD COLUMN token_epoch TEXT NOT NULL DEFAULT '';
    "#,
    // 3: a connector's validated description, so another replica serves it before it has
    // compiled the component.
    r#"
    ALTER TABLE connectors ADD COLUMN manifest TEXT;
    "#,
    // 4: the audit log, one hash chain for every replica, and where its kept part starts.
    r#"
    CREATE TABLE audit_log (
        seq        BIGINT PRIMARY KEY,
        at         TEXT NOT NULL,
        actor_kind TEXT NOT NULL,
        actor_id   TEXT,
        action     TEXT NOT NULL,
        target     TEXT NOT NULL,
        outcome    TEXT NOT NULL,
        details    TEXT NOT NULL,
        trace_id   TEXT,
        prev       TEXT NOT NULL,
        hash       TEXT NOT NULL
    );
    CREATE INDEX audit_log_by_target ON audit_log (target, seq);
    CREATE INDEX audit_log_by_at ON audit_log (at);
    CREATE TABLE audit_anchor (
        id   BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (id),
        seq  BIGINT NOT NULL,
        hash TEXT NOT NULL
    );
    INSERT INTO audit_anchor (id, seq, hash)
        VALUES (TRUE, 0, 'sha256:0000000000000000000000000000000000000000000000000000000000000000');
    CREATE TABLE audit_head (
        id   BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (id),
        seq  BIGINT NOT NULL,
        hash TEXT NOT NULL
    );
    INSERT INTO audit_head (id, seq, hash)
        VALUES (TRUE, 0, 'sha256:0000000000000000000000000000000000000000000000000000000000000000');
    "#,
    // 5: the change log: each state version's write, so another replica catches up by
    // applying what changed instead of reloading (see `foreign_writes`).
    r#"
    CREATE TABLE state_changes (
        version BIGINT PRIMARY KEY,
        change  TEXT NOT NULL
    );
    "#,
];

/// The delivery columns [`rows::delivery`] reads, then `ord` (insertion order).
static DELIVERY_COLUMNS: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("{}, ord", rows::DELIVERY_COLUMNS));

/// A [`Store`] in one PostgreSQL database (see the module docs).
pub struct PostgresStore {
    pool: Pool,

    /// The group commit of routed deliveries ([`postgres_writer`]); the task ends with
    /// the store.
    routed: mpsc::UnboundedSender<RoutedJob>,
    writer: Arc<WriterShared>,
    /// Audit records waiting for their group's transaction
    /// ([`AuditStore::append_audit_entry`](connector_store::AuditStore::append_audit_entry)),
    /// and the task that commits the groups.
    audit_groups: Arc<AuditGroups>,
    audit: mpsc::UnboundedSender<Submitted>,
    /// State versions written through this handle and not yet reported by
    /// `changes_since` as applied.
    own_versions: Mutex<BTreeSet<i64>>,
    /// The state version the caller's in-memory state reflects (set by `load` and by a
    /// `changes_since` that found nothing foreign). A state write refuses to run on top
    /// of a foreign version newer than this: the caller validated it against stale state.
    seen: AtomicI64,
    /// Whether `refuse_stale` is in force ([`ReplicaCoordination::refuse_stale_writes`](connector_store::ReplicaCoordination::refuse_stale_writes)).
    guard_stale: AtomicBool,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password: it is never printed.
        f.debug_struct("PostgresStore").finish_non_exhaustive()
    }
}

/// A pooled connection.
type Conn = deadpool_postgres::Object;
/// A transaction on a pooled connection.
type Tx<'a> = deadpool_postgres::Transaction<'a>;

/// Begins a transaction at READ COMMITTED, whatever the server's or the role's default:
/// the audit chain and the inbox cursors are appended after taking their lock and then
/// reading the head, which must see what the lock's previous holder committed (at
/// REPEATABLE READ the snapshot is older than the lock, and two replicas would both
/// append after the same head).
async fn read_committed(
    conn: &mut deadpool_postgres::Object,
) -> Result<Tx<'_>, tokio_postgres::Error> {
    conn.build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::ReadCommitted)
        .start()
        .await
}

/// A connection from `pool`, for `op`.
async fn pooled(pool: &Pool, op: &str) -> StoreResult<Conn> {
    pool.get().await.map_err(|e| {
        StoreError::Unavailable(format!(
            "{op}: cannot get a database connection ({e}); check that PostgreSQL is running \
             and reachable"
        ))
    })
}

/// Appends the entries `take` gives to the audit chain, in a transaction of their own:
/// begins, waits for the audit lock, and only then calls `take` (an audit group closes
/// there, see [`spawn_audit_groups`]); returns the sealed records.
async fn append_audit_committed(
    pool: &Pool,
    take: impl FnOnce() -> Vec<AuditEntry>,
) -> StoreResult<Vec<AuditRecord>> {
    let ctx = "append_audit";
    let mut conn = pooled(pool, ctx).await?;
    let tx = read_committed(&mut conn)
        .await
        .map_err(|e| map_err(ctx, e))?;
    let head = lock_audit_head(&tx, ctx).await?;
    let entries = take();
    let sealed = match entries.is_empty() {
        true => Vec::new(),
        false => write_audit(&tx, ctx, head, entries).await?,
    };
    tx.commit().await.map_err(|e| map_err(ctx, e))?;
    Ok(sealed)
}

/// Starts the task that commits the audit groups of
/// [`AuditStore::append_audit_entry`](connector_store::AuditStore::append_audit_entry), each
/// in a transaction of its own ([`append_audit_committed`]). The task ends with the store.
///
/// A group's transaction starts as soon as the group opens, and takes its records only
/// once it holds the audit lock, that is once the group before it has committed: the
/// group still gathers every record that arrived meanwhile, while its `BEGIN`, its
/// connection and its lock request are already done. Only the lock's turn, the insert
/// and the commit are left between two commits. At most two transactions are under way:
/// a group opens only once the one before it has been taken.
fn spawn_audit_groups(pool: Pool) -> mpsc::UnboundedSender<Submitted> {
    let (send, mut receive) = mpsc::unbounded_channel::<Submitted>();
    tokio::spawn(async move {
        while let Some(submitted) = receive.recv().await {
            let pool = pool.clone();
            tokio::spawn(async move {
                let records = submitted.records();
                let outcome = append_audit_committed(&pool, || records.take()).await;
                submitted.finish(outcome.map(drop));
            });
        }
    });
    send
}

impl PostgresStore {
    /// Connects to the database named by `url` (`postgres://user:password@host:port/db`,
    /// or `postgresql://…`, with libpq-style options) and brings its schema up to date.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let mut config = tokio_postgres::Config::from_str(url).map_err(|e| {
            // The parser's message names the bad option, never the password.
            StoreError::Unavailable(format!("database_url is not a valid PostgreSQL URL: {e}"))
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(POOL_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("connector-host");
        }
        // A database that stops answering (a half-open connection, a partitioned network)
        // must fail requests, not hang them: dead peers are detected by keepalives and the
        // TCP user timeout, and no statement runs longer than STATEMENT_TIMEOUT.
        config
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(10))
            .keepalives_interval(Duration::from_secs(2))
            .keepalives_retries(3)
            .tcp_user_timeout(Duration::from_secs(10));
        if config.get_options().is_none() {
            config.options(format!(
                "-c statement_timeout={}",
                STATEMENT_TIMEOUT.as_millis()
            ));
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(POOL_TIMEOUT))
            .create_timeout(Some(POOL_TIMEOUT))
            .recycle_timeout(Some(POOL_TIMEOUT))
            .build()
            .map_err(|e| {
                StoreError::Unavailable(format!("cannot build the connection pool: {e}"))
            })?;
        let writer = Arc::new(WriterShared {
            pool: pool.clone(),
            commits: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        });
        let store = Self {
            audit: spawn_audit_groups(pool.clone()),
            audit_groups: Arc::default(),
            pool,
            routed: writer::spawn(Arc::clone(&writer)),
            writer,
            own_versions: Mutex::new(BTreeSet::new()),
            seen: AtomicI64::new(0),
            guard_stale: AtomicBool::new(false),
        };
        store.migrate().await?;
        Ok(store)
    }

    async fn conn(&self, op: &str) -> StoreResult<Conn> {
        pooled(&self.pool, op).await
    }

    async fn migrate(&self) -> StoreResult<()> {
        let ctx = "migrating the database schema";
        let db = |e| map_err(ctx, e);
        let mut conn = self.conn(ctx).await?;
        let tx = read_committed(&mut conn).await.map_err(db)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(db)?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version    BIGINT PRIMARY KEY,
                 applied_at TEXT NOT NULL
             )",
        )
        .await
        .map_err(db)?;
        let applied: BTreeSet<i64> = tx
            .query("SELECT version FROM schema_migrations", &[])
            .await
            .map_err(db)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let latest = MIGRATIONS.len() as i64;
        if let Some(&newest) = applied.last() {
            if newest > latest {
                return Err(StoreError::Corrupt(format!(
                    "the database has schema version {newest} but this connector-host only \
                     knows versions up to {latest}: the host is older than the database. Run a \
                     newer connector-host, or restore a backup taken before the upgrade"
                )));
            }
        }
        for (index, sql) in MIGRATIONS.iter().enumerate() {
            let version = index as i64 + 1;
            if applied.contains(&version) {
                continue;
            }
            tx.batch_execute(sql)
                .await
                .map_err(|e| map_err(&format!("applying schema migration {version}"), e))?;
            tx.execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
                &[&version, &connector_model::ids::now_rfc3339()],
            )
            .await
            .map_err(db)?;
            tracing::info!(version, "applied schema migration");
        }
        tx.commit().await.map_err(db)
    }

    /// Locks the state version for the rest of `tx` (state writes of all replicas take
    /// turns) and refuses to go on if another replica wrote a version the caller has not
    /// seen: the caller checked its rules (the unit exists, the connector is installed)
    /// against state that is no longer current.
    /// `lock` is [`VERSION_LOCK`], prepared before the pipeline it leads was started.
    async fn refuse_stale(&self, tx: &Tx<'_>, lock: &Statement, op: &str) -> StoreResult<()> {
        let row = tx.query_one(lock, &[]).await.map_err(|e| map_err(op, e))?;
        let current: i64 = col(&row, 0)?;
        let seen = self.seen.load(Ordering::SeqCst);
        if self.guard_stale.load(Ordering::SeqCst)
            && foreign_after(&self.own_versions.lock(), seen, current)
        {
            return Err(StoreError::Conflict(format!(
                "{op}: the state is at version {current}, this replica has seen {seen}"
            )));
        }
        Ok(())
    }

    /// Runs one state-writing transaction: the one shape of every state write, whatever
    /// `body` changes in it.
    ///
    /// Begins it at READ COMMITTED and sends together, in this order: the version lock
    /// (whose answer [`PostgresStore::refuse_stale`] checks), when `audited` the audit
    /// chain's lock and head (else they are taken at the finish, if the body staged
    /// records after all, or by a body that appends its records itself), and `body`'s
    /// first statements. If the body staged writes, their change-log entries still to
    /// keep are each kept under a new version, sent together with their audit records
    /// (appended after the head); the change log is pruned when a version is a multiple
    /// of [`CHANGES_PRUNED_EVERY`]; the transaction commits; and only then are the
    /// versions recorded as this handle's own (a version recorded early could belong to
    /// another replica if the commit failed, and would hide its change). A body that
    /// staged nothing is rolled back and answered as it is; so is one whose entries or
    /// records could not be kept, if it staged an answer for that
    /// ([`Staged::if_unlogged`]: a batch then writes its writes one savepoint each).
    /// `Err`: the transaction failed as a whole, and nothing of it is stored.
    async fn state_tx<T>(
        &self,
        op: &str,
        audited: bool,
        body: impl AsyncFnOnce(&Tx<'_>) -> StoreResult<Staged<T>>,
    ) -> StoreResult<T> {
        let db = |e| map_err(op, e);
        let mut conn = self.conn(op).await?;
        let tx = read_committed(&mut conn).await.map_err(db)?;
        // Prepared first, so that the server runs them first and in this order (see
        // `prepare_first`): every state write takes the version lock before anything
        // else, and the audit chain's lock and head before its body's statements (whose
        // errors are checked after theirs).
        let [version_lock, _, _] = prepare_first(&tx, &[VERSION_LOCK, ADVISORY_LOCK, AUDIT_HEAD])
            .await
            .map_err(db)?;
        let head = async {
            if audited {
                lock_audit_head(&tx, op).await.map(Some)
            } else {
                Ok(None)
            }
        };
        // The body does not wait for the stale check: a change made on stale state is
        // rolled back with the rest.
        let (fresh, head, staged) =
            futures::join!(self.refuse_stale(&tx, &version_lock, op), head, body(&tx));
        // Checked in the order sent: a failure's successors only say "aborted".
        fresh?;
        let head = head?;
        let Staged {
            answer,
            changes,
            mut versions,
            audit,
            if_unlogged,
        } = staged?;
        if changes.is_empty() && versions.is_empty() {
            // Dropped, the transaction rolls back.
            return Ok(answer);
        }
        let head = match head {
            Some(head) => Some(head),
            None if !audit.is_empty() => Some(lock_audit_head(&tx, op).await?),
            None => None,
        };
        // Prepared first, so that the bump goes out before the records (sealed meanwhile),
        // whose errors are checked after its.
        let [bump] = prepare_first(&tx, &[BUMP_VERSIONS]).await.map_err(db)?;
        let bumped = async {
            if changes.is_empty() {
                Ok(Vec::new())
            } else {
                bump_versions(&tx, &bump, op, &changes).await
            }
        };
        let appended = async {
            match head {
                Some(head) if !audit.is_empty() => {
                    write_audit(&tx, op, head, audit).await.map(drop)
                }
                _ => Ok(()),
            }
        };
        let (bumped, appended) = futures::join!(bumped, appended);
        // Checked in the order sent, as above.
        match (
            bumped.and_then(|bumped| appended.map(|()| bumped)),
            if_unlogged,
        ) {
            (Ok(bumped), _) => versions.extend(bumped),
            // Dropped, the transaction rolls back.
            (Err(_), Some(answer)) => return Ok(answer),
            (Err(e), None) => return Err(e),
        }
        let (oldest, newest) = (versions.iter().min(), versions.iter().max());
        if let (Some(&oldest), Some(&newest)) = (oldest, newest) {
            if (oldest..=newest).any(|v| v % CHANGES_PRUNED_EVERY == 0) {
                prune_changes(&tx, newest - CHANGES_KEPT, op).await?;
            }
        }
        tx.commit().await.map_err(db)?;
        self.own_versions.lock().extend(versions);
        Ok(answer)
    }
}

/// What the body of a state write's transaction leaves to its finish
/// ([`PostgresStore::state_tx`]): with no change and no version, nothing (it rolls back).
struct Staged<T> {
    /// What the transaction answers, once it committed or rolled back.
    answer: T,
    /// Change-log entries ([`LoggedWrite`]s' JSON) of the changes made, in order: each
    /// is kept under a new version at the finish.
    changes: Vec<String>,
    /// Versions the body bumped itself, each with its change-log entry.
    versions: Vec<i64>,
    /// The records of the writes made, in order, appended after the chain's head.
    audit: Vec<AuditEntry>,
    /// What the transaction answers, rolled back, when `changes`' entries or `audit`'s
    /// records cannot be kept at the finish (`None`: it fails with that error).
    if_unlogged: Option<T>,
}

impl<T> Staged<T> {
    /// Nothing written: the transaction rolls back and answers `answer`.
    fn nothing(answer: T) -> Self {
        Self {
            answer,
            changes: Vec::new(),
            versions: Vec::new(),
            audit: Vec::new(),
            if_unlogged: None,
        }
    }
}

/// Keeps each of `changes` (a [`LoggedWrite`]'s JSON) under a new state version inside
/// `tx` with `bump` ([`BUMP_VERSIONS`], prepared); returns those versions.
async fn bump_versions(
    tx: &Tx<'_>,
    bump: &Statement,
    op: &str,
    changes: &[String],
) -> StoreResult<Vec<i64>> {
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&changes];
    tx.query(bump, &params)
        .await
        .map_err(|e| map_err(op, e))?
        .iter()
        .map(|row| col::<i64>(row, 0))
        .collect()
}

/// Upserts a unit.
const PUT_UNIT: &str = "INSERT INTO units (id, parent, display_name, created_at)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (id) DO UPDATE SET
         parent = excluded.parent,
         display_name = excluded.display_name,
         created_at = excluded.created_at";
/// Upserts an agent's row.
const PUT_AGENT: &str = "INSERT INTO agents (id, display_name, created_at, token_epoch)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (id) DO UPDATE SET
         display_name = excluded.display_name,
         created_at = excluded.created_at,
         token_epoch = excluded.token_epoch";
/// Drops an agent's memberships (before [`PUT_MEMBERSHIPS`]).
const DROP_MEMBERSHIPS: &str = "DELETE FROM agent_units WHERE agent_id = $1";
/// An agent's memberships, in order.
const PUT_MEMBERSHIPS: &str = "INSERT INTO agent_units (agent_id, unit_id, position)
     SELECT $1, unit, (position - 1)::integer
     FROM unnest($2::text[]) WITH ORDINALITY AS m (unit, position)";
/// Upserts a grant.
const UPSERT_GRANT: &str =
    "INSERT INTO grants (subject_kind, subject_id, tool, namespace, provenance, created_at)
     VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (subject_kind, subject_id, tool, provenance)
     DO UPDATE SET namespace = excluded.namespace";
/// The statements of the writes [`sent_at_once`] says are: prepared before a batch sends
/// them, so that each goes out on its future's first poll.
const SENT_AT_ONCE: [&str; 5] = [
    PUT_UNIT,
    PUT_AGENT,
    DROP_MEMBERSHIPS,
    PUT_MEMBERSHIPS,
    UPSERT_GRANT,
];

/// Whether `write`'s statements all go out on its first poll once [`SENT_AT_ONCE`] is
/// prepared (so that several such writes sent together run in order).
fn sent_at_once(write: &StateWrite<'_>) -> bool {
    matches!(
        write,
        StateWrite::PutUnit(_) | StateWrite::PutAgent(_) | StateWrite::PutGrant(_)
    )
}

/// Bumps the state version by as many versions as `$1` has changes and keeps each under
/// its own version, in order; returns the versions.
const BUMP_VERSIONS: &str = "WITH bumped AS (
         UPDATE state_version SET version = version + cardinality($1::text[])
         RETURNING version
     )
     INSERT INTO state_changes (version, change)
     SELECT bumped.version - cardinality($1::text[]) + c.ord, c.change
     FROM bumped, unnest($1::text[]) WITH ORDINALITY AS c (change, ord)
     RETURNING version";

/// Runs `sql` inside `tx` as a statement prepared once per connection.
async fn exec(
    tx: &Tx<'_>,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<u64, tokio_postgres::Error> {
    let stmt = tx.prepare_cached(sql).await?;
    tx.execute(&stmt, params).await
}

/// The first error of statements that were sent together (those after it only say that
/// the transaction is aborted), named by `op`.
fn first_failure<const N: usize>(
    op: &str,
    results: [Result<u64, tokio_postgres::Error>; N],
) -> StoreResult<()> {
    for result in results {
        result.map_err(|e| map_err(op, e))?;
    }
    Ok(())
}

/// Deletes the change log's entries up to `upto` inside `tx`; returns how many.
async fn prune_changes(tx: &Tx<'_>, upto: i64, op: &str) -> StoreResult<u64> {
    tx.execute("DELETE FROM state_changes WHERE version <= $1", &[&upto])
        .await
        .map_err(|e| map_err(op, e))
}

/// Maps a driver error onto the store's error kinds, naming what was being done.
pub(crate) fn map_err(context: &str, e: tokio_postgres::Error) -> StoreError {
    match e.code() {
        Some(code) if *code == SqlState::FOREIGN_KEY_VIOLATION => StoreError::Unavailable(format!(
            "{context}: the database rejected the write ({e}); a referenced unit or agent must \
             be stored first"
        )),
        Some(code) if code.code().starts_with("22") => {
            StoreError::Corrupt(format!("{context}: a value is malformed: {e}"))
        }
        // RAISE EXCEPTION in a trigger.
        Some(code) if *code == SqlState::RAISE_EXCEPTION => {
            let said = e
                .as_db_error()
                .map_or_else(|| e.to_string(), |db| db.message().to_string());
            StoreError::Refused(format!("{context}: {said}"))
        }
        _ if e.is_closed() => StoreError::Unavailable(format!(
            "{context}: the database connection was lost; retry when PostgreSQL is back"
        )),
        _ => match e.as_db_error() {
            // The server's own words ("the database system is shutting down", …).
            Some(db) => StoreError::Unavailable(format!(
                "{context}: PostgreSQL refused: {} ({})",
                db.message(),
                db.code().code()
            )),
            None => StoreError::Unavailable(format!("{context}: {e}")),
        },
    }
}

/// `text` as PostgreSQL can store it: `text` columns cannot hold NUL characters (SQLite
/// can), so guest- or user-supplied free text has them replaced with U+FFFD rather than
/// failing the write (ids never contain one: they are validated before they get here).
fn pg_text(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        std::borrow::Cow::Owned(text.replace('\0', "\u{fffd}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// [`pg_text`] of an optional text.
fn pg_opt_text(text: &Option<String>) -> Option<std::borrow::Cow<'_, str>> {
    text.as_deref().map(pg_text)
}

/// Appends `messages` to their units' inboxes inside `tx`, taking the inbox lock (held to
/// the commit: cursor order is commit order); returns them with their cursors.
/// Whether `error` only says that an earlier statement of its transaction failed.
fn aborted_by_earlier(error: &tokio_postgres::Error) -> bool {
    error.code() == Some(&SqlState::IN_FAILED_SQL_TRANSACTION)
}

/// Both results of two pipelined statements, or the error that caused the failure: of two
/// failures, the one that does not merely say "the transaction is aborted" (whichever
/// answer arrived first).
fn first_cause<A, B>(
    a: Result<A, tokio_postgres::Error>,
    b: Result<B, tokio_postgres::Error>,
) -> Result<(A, B), tokio_postgres::Error> {
    match (a, b) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        (Err(a), Err(b)) if aborted_by_earlier(&a) => Err(b),
        (Err(e), _) | (_, Err(e)) => Err(e),
    }
}

/// What errors of a batch of state writes say was being done.
const BATCH: &str = "writing a batch of state changes";
/// Takes the version lock of a state write ([`PostgresStore::refuse_stale`]).
const VERSION_LOCK: &str = "SELECT version FROM state_version FOR UPDATE";
/// Takes the transaction-scoped advisory lock `$1` (held to the commit).
const ADVISORY_LOCK: &str = "SELECT pg_advisory_xact_lock($1)";
/// Reads the audit chain's head (what the next record follows).
const AUDIT_HEAD: &str = "SELECT seq, hash FROM audit_head";

/// `sql`'s statements, prepared (once per connection) before a pipeline that runs them
/// starts. A pipeline's statements reach the server in the order their futures send
/// them, and one still being prepared sends its execution a round trip later: a lock
/// meant to lead would run after the statements it was to guard (and two transactions
/// taking the same locks in different orders deadlock). Prepared first, each one's
/// execution goes out on its future's first poll, in the pipeline's order.
async fn prepare_first<const N: usize>(
    tx: &Tx<'_>,
    sql: &[&str; N],
) -> Result<[Statement; N], tokio_postgres::Error> {
    let prepared = futures::future::try_join_all(sql.iter().map(|s| tx.prepare_cached(s))).await?;
    prepared
        .try_into()
        .map_err(|_| unreachable!("try_join_all returns one statement per query"))
}

/// Appends `entries` to the audit chain inside `tx`, taking the audit lock (held to the
/// commit: one chain, appended in turn by every replica); returns the sealed records.
pub(crate) async fn append_audit(
    tx: &Tx<'_>,
    ctx: &str,
    entries: Vec<AuditEntry>,
) -> StoreResult<Vec<AuditRecord>> {
    if entries.is_empty() {
        return Ok(Vec::new());
    }
    let head = lock_audit_head(tx, ctx).await?;
    write_audit(tx, ctx, head, entries).await
}

/// Takes the audit lock inside `tx` (held to the commit) and reads the chain's head after
/// it; both statements go out together.
async fn lock_audit_head(tx: &Tx<'_>, ctx: &str) -> StoreResult<AuditAnchor> {
    let db = |e| map_err(ctx, e);
    let [lock, head] = prepare_first(tx, &[ADVISORY_LOCK, AUDIT_HEAD])
        .await
        .map_err(db)?;
    let (locked, head) =
        futures::join!(tx.execute(&lock, &[&AUDIT_LOCK]), tx.query_one(&head, &[]));
    match first_cause(locked, head) {
        Ok((_, row)) => Ok(AuditAnchor {
            seq: col(&row, 0)?,
            hash: col(&row, 1)?,
        }),
        Err(e) => Err(db(e)),
    }
}

/// Appends audit records (`$1` their seqs, then their columns in order).
const AUDIT_INSERT: &str =
    "INSERT INTO audit_log (seq, at, actor_kind, actor_id, action, target, outcome, details,
         trace_id, prev, hash)
     SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[],
         $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[])";
/// Moves the audit chain's head to the last record appended.
const AUDIT_MOVE_HEAD: &str = "UPDATE audit_head SET seq = $1, hash = $2";

/// Appends `entries` after `head` inside `tx`, which holds the audit lock since reading
/// `head` ([`lock_audit_head`]); returns the sealed records. Both statements go out on
/// the first poll when [`AUDIT_INSERT`] and [`AUDIT_MOVE_HEAD`] are prepared.
async fn write_audit(
    tx: &Tx<'_>,
    ctx: &str,
    head: AuditAnchor,
    entries: Vec<AuditEntry>,
) -> StoreResult<Vec<AuditRecord>> {
    let db = |e| map_err(ctx, e);
    let (mut seq, mut prev) = (head.seq, head.hash);
    let mut sealed = Vec::with_capacity(entries.len());
    let mut columns: [Vec<String>; 8] = Default::default();
    let mut seqs: Vec<i64> = Vec::with_capacity(entries.len());
    let mut actor_ids: Vec<Option<String>> = Vec::with_capacity(entries.len());
    let mut trace_ids: Vec<Option<String>> = Vec::with_capacity(entries.len());
    for entry in entries {
        seq += 1;
        let record = AuditRecord::seal(entry, seq, prev);
        seqs.push(record.seq);
        columns[0].push(record.at.clone());
        columns[1].push(record.actor.kind.as_str().to_string());
        actor_ids.push(record.actor.id.clone());
        columns[2].push(record.action.clone());
        columns[3].push(record.target.clone());
        columns[4].push(record.outcome.clone());
        columns[5].push(encode_json(ctx, &record.details)?);
        trace_ids.push(record.trace_id.clone());
        columns[6].push(record.prev.clone());
        columns[7].push(record.hash.clone());
        prev = record.hash.clone();
        sealed.push(record);
    }
    let insert = tx.prepare_cached(AUDIT_INSERT).await.map_err(db)?;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 11] = [
        &seqs,
        &columns[0],
        &columns[1],
        &actor_ids,
        &columns[2],
        &columns[3],
        &columns[4],
        &columns[5],
        &trace_ids,
        &columns[6],
        &columns[7],
    ];
    let inserted = tx.execute(&insert, &params);
    let moved = async {
        let stmt = tx.prepare_cached(AUDIT_MOVE_HEAD).await?;
        tx.execute(&stmt, &[&seq, &prev]).await
    };
    // Sent together; of two failures the first is reported.
    match futures::join!(inserted, moved) {
        (Ok(_), Ok(_)) => Ok(sealed),
        (Err(e), _) | (_, Err(e)) => Err(db(e)),
    }
}

pub(crate) async fn append_messages(
    tx: &Tx<'_>,
    ctx: &str,
    messages: &[MessageRecord],
) -> StoreResult<Vec<MessageRecord>> {
    let db = |e| map_err(ctx, e);
    let mut stored = Vec::with_capacity(messages.len());
    if !messages.is_empty() {
        let mut columns: [Vec<String>; 6] = Default::default();
        let mut thread_keys: Vec<Option<String>> = Vec::with_capacity(messages.len());
        for m in messages {
            columns[0].push(m.id.clone());
            columns[1].push(m.unit_id.clone());
            columns[2].push(m.connector.clone());
            columns[3].push(pg_text(&m.kind).into_owned());
            columns[4].push(m.delivery_id.clone());
            columns[5].push(encode_json(ctx, &m.payload)?);
            thread_keys.push(pg_opt_text(&m.thread_key).map(|t| t.into_owned()));
        }
        let received: Vec<&str> = messages.iter().map(|m| m.received_at.as_str()).collect();
        let insert = tx
            .prepare_cached(
                "INSERT INTO messages (id, unit_id, connector, kind, delivery_id,
                     thread_key, payload, received_at)
                 SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[],
                     $5::text[], $6::text[], $7::text[], $8::text[])
                 RETURNING id, seq",
            )
            .await
            .map_err(db)?;
        // The inbox lock is held from here to the commit; the two statements go out
        // together (pipelined), so holding it costs one round trip and the commit. The
        // lock is prepared first so that the server runs it before the insert (whose
        // identity column gives the cursors: taken before the lock, they could commit out
        // of order, and a reader past a later cursor would never see an earlier one).
        let [lock] = prepare_first(tx, &[ADVISORY_LOCK]).await.map_err(db)?;
        let lock = tx.execute(&lock, &[&INBOX_LOCK]);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
            &columns[0],
            &columns[1],
            &columns[2],
            &columns[3],
            &columns[4],
            &thread_keys,
            &columns[5],
            &received,
        ];
        let rows = tx.query(&insert, &params);
        // Of two pipelined statements, the one that fails second answers "transaction
        // aborted": report the one that failed first, whichever answer arrives first.
        let (locked, rows) = futures::join!(lock, rows);
        let (_, rows) = first_cause(locked, rows).map_err(db)?;
        let mut seqs = HashMap::with_capacity(rows.len());
        for row in &rows {
            seqs.insert(col::<String>(row, 0)?, col::<i64>(row, 1)?);
        }
        for m in messages {
            let seq = seqs
                .get(&m.id)
                .copied()
                .ok_or_else(|| StoreError::Corrupt(format!("message {} was not stored", m.id)))?;
            stored.push(MessageRecord { seq, ..m.clone() });
        }
    }
    Ok(stored)
}

/// Whether some version in `(after, upto]` is not one of `own` (another handle wrote it).
fn foreign_after(own: &BTreeSet<i64>, after: i64, upto: i64) -> bool {
    upto > after && own.range(after.saturating_add(1)..=upto).count() as i64 != upto - after
}

/// Reads column `i` of `row`, reporting a type mismatch as corrupt data.
fn col<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, i: usize) -> StoreResult<T> {
    row.try_get(i)
        .map_err(|e| StoreError::Corrupt(format!("a stored row is malformed: {e}")))
}

/// A PostgreSQL row as the shared decoders ([`rows`]) read it.
struct Pg<'a>(&'a Row);

impl rows::StoredRow for Pg<'_> {
    fn text(&self, i: usize) -> StoreResult<String> {
        col(self.0, i)
    }
    fn opt_text(&self, i: usize) -> StoreResult<Option<String>> {
        col(self.0, i)
    }
    fn int(&self, i: usize) -> StoreResult<i64> {
        // `attempts` is an INTEGER column; the rest are BIGINT.
        if self.0.columns().get(i).map(|c| c.type_()) == Some(&tokio_postgres::types::Type::INT4) {
            return col::<i32>(self.0, i).map(i64::from);
        }
        col(self.0, i)
    }
    fn bytes(&self, i: usize) -> StoreResult<Vec<u8>> {
        col(self.0, i)
    }
    fn flag(&self, i: usize) -> StoreResult<bool> {
        col(self.0, i)
    }
}

async fn upsert_grant(tx: &Tx<'_>, grant: &GrantRecord) -> Result<(), tokio_postgres::Error> {
    let (kind, id) = subject_parts(&grant.subject);
    let stmt = tx.prepare_cached(UPSERT_GRANT).await?;
    tx.execute(
        &stmt,
        &[
            &kind,
            &id,
            &grant.tool,
            &grant.namespace,
            &grant.provenance.to_string(),
            &grant.created_at,
        ],
    )
    .await?;
    Ok(())
}

impl PostgresStore {
    /// Upserts a connector and re-derives its `connector:<slug>` grants (inside `tx`).
    async fn write_connector(
        &self,
        tx: &Tx<'_>,
        c: &ConnectorRecord,
        component: &[u8],
    ) -> StoreResult<()> {
        let db = |e| map_err("put_connector", e);
        let manifest = c
            .manifest
            .as_ref()
            .map(|m| encode_json("put_connector", m))
            .transpose()?;
        tx.execute(
            "INSERT INTO connectors (slug, namespace, digest, component, bundled, installed_at, manifest)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (slug) DO UPDATE SET
                 namespace = excluded.namespace,
                 digest = excluded.digest,
                 component = excluded.component,
                 bundled = excluded.bundled,
                 installed_at = excluded.installed_at,
                 manifest = excluded.manifest",
            &[
                &c.slug,
                &c.namespace,
                &c.digest,
                &component,
                &c.bundled,
                &c.installed_at,
                &manifest,
            ],
        )
        .await
        .map_err(db)?;
        let provenance = GrantProvenance::connector_text(&c.slug);
        let held = tx
            .query(
                "SELECT ord, subject_kind, subject_id FROM grants
                 WHERE provenance = $1 ORDER BY ord",
                &[&provenance],
            )
            .await
            .map_err(db)?;
        let held = held
            .iter()
            .map(|r| {
                let key = r.try_get::<_, i64>(0)?;
                let subject = (r.try_get::<_, String>(1)?, r.try_get::<_, String>(2)?);
                Ok((key, subject))
            })
            .collect::<Result<Vec<_>, tokio_postgres::Error>>()
            .map_err(db)?;
        let rederived = rederive(&c.namespace, held);
        if !rederived.dropped.is_empty() {
            tx.execute(
                "DELETE FROM grants WHERE ord = ANY($1)",
                &[&rederived.dropped],
            )
            .await
            .map_err(db)?;
        }
        tx.execute(
            "UPDATE grants SET tool = $1, namespace = $2 WHERE provenance = $3",
            &[&rederived.tool, &rederived.namespace, &provenance],
        )
        .await
        .map_err(db)?;
        Ok(())
    }

    /// Upserts a binding and its grant (inside `tx`).
    async fn write_binding(
        &self,
        tx: &Tx<'_>,
        b: &BindingRecord,
        g: &GrantRecord,
    ) -> StoreResult<()> {
        let ctx = "put_binding";
        let db = |e| map_err(ctx, e);
        let config = encode_json(ctx, &b.config)?;
        let routing_keys = encode_json(ctx, &b.routing_keys)?;
        let stmt = tx
            .prepare_cached(
                "INSERT INTO bindings (unit_id, connector, config, routing_keys, bound_at)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (unit_id, connector) DO UPDATE SET
                     config = excluded.config,
                     routing_keys = excluded.routing_keys,
                     bound_at = excluded.bound_at",
            )
            .await
            .map_err(db)?;
        tx.execute(
            &stmt,
            &[
                &b.unit_id,
                &b.connector,
                &config,
                &routing_keys,
                &b.bound_at,
            ],
        )
        .await
        .map_err(db)?;
        upsert_grant(tx, g).await.map_err(db)?;
        Ok(())
    }

    /// Deletes a binding and the unit's grants it wrote (inside `tx`).
    async fn remove_binding(
        &self,
        tx: &Tx<'_>,
        unit_id: &str,
        connector: &str,
    ) -> StoreResult<bool> {
        let db = |e| map_err("delete_binding", e);
        let stmt = tx
            .prepare_cached("DELETE FROM bindings WHERE unit_id = $1 AND connector = $2")
            .await
            .map_err(db)?;
        let n = tx
            .execute(&stmt, &[&unit_id, &connector])
            .await
            .map_err(db)?;
        let stmt = tx
            .prepare_cached(
                "DELETE FROM grants
                 WHERE subject_kind = 'unit' AND subject_id = $1 AND provenance = $2",
            )
            .await
            .map_err(db)?;
        let provenance = GrantProvenance::connector_text(connector);
        tx.execute(&stmt, &[&unit_id, &provenance])
            .await
            .map_err(db)?;
        Ok(n > 0)
    }
}

async fn load_snapshot(tx: &Tx<'_>) -> StoreResult<Snapshot> {
    let ctx = "loading the stored state";
    let db = |e| map_err(ctx, e);
    let version: i64 = col(
        &tx.query_one("SELECT version FROM state_version", &[])
            .await
            .map_err(db)?,
        0,
    )?;

    let table = |columns: &str, table: &str| format!("SELECT {columns} FROM {table} ORDER BY ord");
    let select = |sql: String| async move { tx.query(&sql, &[]).await.map_err(db) };
    let mut memberships = rows::Memberships::default();
    // Bytewise, whatever the database's collation (the order `Memberships` looks up by).
    let sql = format!(
        "SELECT {} FROM agent_units ORDER BY agent_id COLLATE \"C\", position",
        rows::MEMBERSHIP_COLUMNS
    );
    for row in select(sql).await? {
        memberships.push(rows::membership(&Pg(&row))?);
    }
    let connectors = select(table(rows::CONNECTOR_COLUMNS, "connectors")).await?;
    let units = select(table(rows::UNIT_COLUMNS, "units")).await?;
    let agents = select(rows::agents_sql("id COLLATE \"C\"")).await?;
    let bindings = select(table(rows::BINDING_COLUMNS, "bindings")).await?;
    let grants = select(table(rows::GRANT_COLUMNS, "grants")).await?;
    let image_tools = select(table(rows::IMAGE_TOOLS_COLUMNS, "image_tools")).await?;
    Ok(Snapshot {
        connectors: connectors
            .iter()
            .map(|r| rows::connector(&Pg(r)))
            .collect::<StoreResult<_>>()?,
        units: units
            .iter()
            .map(|r| rows::unit(&Pg(r)))
            .collect::<StoreResult<_>>()?,
        agents: agents
            .iter()
            .map(|r| rows::agent(&Pg(r), &mut memberships))
            .collect::<StoreResult<_>>()?,
        bindings: bindings
            .iter()
            .map(|r| rows::binding(&Pg(r)))
            .collect::<StoreResult<_>>()?,
        grants: grants
            .iter()
            .map(|r| rows::grant(&Pg(r)))
            .collect::<StoreResult<_>>()?,
        image_tools: image_tools
            .iter()
            .map(|r| rows::image_tools(&Pg(r)))
            .collect::<StoreResult<_>>()?,
        version,
    })
}

#[async_trait]
impl StateStore for PostgresStore {
    async fn load(&self) -> StoreResult<Snapshot> {
        let ctx = "loading the stored state";
        let mut conn = self.conn(ctx).await?;
        // One consistent view of every table and the version it reflects.
        let tx = conn
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(|e| map_err(ctx, e))?;
        let snapshot = load_snapshot(&tx).await?;
        tx.commit().await.map_err(|e| map_err(ctx, e))?;
        Ok(snapshot)
    }

    async fn component(&self, slug: &str, digest: &str) -> StoreResult<Option<Vec<u8>>> {
        let ctx = "reading a connector's component";
        let conn = self.conn(ctx).await?;
        let row = conn
            .query_opt(
                "SELECT component FROM connectors WHERE slug = $1 AND digest = $2",
                &[&slug, &digest],
            )
            .await
            .map_err(|e| map_err(ctx, e))?;
        row.map(|r| col::<Vec<u8>>(&r, 0)).transpose()
    }

    async fn write(&self, write: StateWrite<'_>, audit: Option<&AuditEntry>) -> StoreResult<bool> {
        let op = write.op();
        let change = WriteRecords::of(&write, audit)?.change;
        self.state_tx(op, audit.is_some(), async |tx| {
            Ok(Staged {
                answer: self.change(tx, write).await?,
                changes: vec![change],
                versions: Vec::new(),
                audit: audit.into_iter().cloned().collect(),
                if_unlogged: None,
            })
        })
        .await
    }

    async fn write_batch(&self, writes: &[(StateWrite<'_>, &AuditEntry)]) -> Vec<BatchedWrite> {
        match self.batch_tx(writes).await {
            Ok(outcomes) => outcomes,
            Err(e) => writes
                .iter()
                .map(|_| BatchedWrite::Failed(e.clone()))
                .collect(),
        }
    }
}

impl PostgresStore {
    /// One of the audit chain's two points (`sql` reads its seq and hash).
    async fn chain_point(&self, sql: &str, ctx: &str) -> StoreResult<AuditAnchor> {
        let conn = self.conn(ctx).await?;
        let row = conn
            .query_one(sql, &[])
            .await
            .map_err(|e| map_err(ctx, e))?;
        Ok(AuditAnchor {
            seq: col(&row, 0)?,
            hash: col(&row, 1)?,
        })
    }

    /// [`StateStore::write_batch`]: one write alone as [`StateStore::write`] writes it;
    /// more all at once ([`PostgresStore::batch_at_once`]), or, when a write of them
    /// failed there (its change, change-log entry or record), one savepoint each
    /// ([`PostgresStore::batch_one_by_one`]), which stops at that write. `Err`: the
    /// transaction failed as a whole (nothing of the batch is stored).
    async fn batch_tx(
        &self,
        writes: &[(StateWrite<'_>, &AuditEntry)],
    ) -> StoreResult<Vec<BatchedWrite>> {
        match writes {
            [] => Ok(Vec::new()),
            [(write, audit)] => {
                self.write(*write, Some(audit)).await?;
                Ok(vec![BatchedWrite::Committed])
            }
            _ if self.batch_at_once(writes).await? => {
                Ok(vec![BatchedWrite::Committed; writes.len()])
            }
            _ => self.batch_one_by_one(writes).await,
        }
    }

    /// The whole batch in one transaction with no savepoint: the changes, those
    /// [`sent_at_once`] together in one pipeline (the first of them with the locks), then
    /// every version bump and change-log entry in one statement sent with the audit
    /// records, and one commit. A handful of round trips per batch, whatever its size.
    /// `false`: a write failed (its change, or the statement keeping every entry or the
    /// one appending every record), and the transaction was rolled back (the batch is
    /// then written one savepoint each, to find which).
    async fn batch_at_once(&self, writes: &[(StateWrite<'_>, &AuditEntry)]) -> StoreResult<bool> {
        let Ok(changes) = writes
            .iter()
            .map(|(write, _)| WriteRecords::of(write, None).map(|r| r.change))
            .collect::<StoreResult<Vec<String>>>()
        else {
            return Ok(false);
        };
        self.state_tx(BATCH, true, async |tx| {
            prepare_first(tx, &SENT_AT_ONCE)
                .await
                .map_err(|e| map_err(BATCH, e))?;
            let mut rest = writes;
            while let Some(((first, _), _)) = rest.split_first() {
                // A run of writes sent at once goes out together (at most 30: `join_all`
                // polls that many in order); any other write alone.
                let run = if sent_at_once(first) {
                    rest.iter()
                        .take(30)
                        .take_while(|(w, _)| sent_at_once(w))
                        .count()
                } else {
                    1
                };
                let (now, later) = rest.split_at(run);
                rest = later;
                let done =
                    futures::future::join_all(now.iter().map(|(w, _)| self.change(tx, *w))).await;
                if done.iter().any(Result::is_err) {
                    return Ok(Staged::nothing(false));
                }
            }
            Ok(Staged {
                answer: true,
                changes,
                versions: Vec::new(),
                audit: writes.iter().map(|(_, audit)| (*audit).clone()).collect(),
                // One write's entry or record failed the statement of them all.
                if_unlogged: Some(false),
            })
        })
        .await
    }

    /// The batch in one transaction, each write in its own savepoint with its version
    /// bump, change-log entry and audit record (appended after the record of the write
    /// before it), up to the first that fails, which is rolled back alone; one commit.
    /// The body takes the audit chain's lock and head itself (after the version lock), as
    /// it appends the records.
    async fn batch_one_by_one(
        &self,
        writes: &[(StateWrite<'_>, &AuditEntry)],
    ) -> StoreResult<Vec<BatchedWrite>> {
        self.state_tx(BATCH, false, async |tx| {
            let mut head = lock_audit_head(tx, BATCH).await?;
            let mut outcomes = Vec::with_capacity(writes.len());
            let mut versions = Vec::new();
            for (write, audit) in writes {
                match self.savepointed_write(tx, *write, audit, &head).await? {
                    Ok((bumped, moved)) => {
                        versions.extend(bumped);
                        head = moved;
                        outcomes.push(BatchedWrite::Committed);
                    }
                    Err(e) => {
                        outcomes.push(BatchedWrite::Failed(e));
                        break;
                    }
                }
            }
            outcomes.resize(writes.len(), BatchedWrite::NotRun);
            Ok(Staged {
                answer: outcomes,
                changes: Vec::new(),
                versions,
                audit: Vec::new(),
                if_unlogged: None,
            })
        })
        .await
    }

    /// One write of a batch inside `tx`, in a savepoint of its own: the change, then its
    /// version bump and change-log entry beside its audit record, appended after `head`;
    /// returns its version and the chain's new head. `Ok(Err(_))`: the write failed and
    /// `tx` is back at the savepoint (it goes on, `head` still the head); `Err`: `tx`
    /// cannot go on.
    async fn savepointed_write(
        &self,
        tx: &Tx<'_>,
        write: StateWrite<'_>,
        audit: &AuditEntry,
        head: &AuditAnchor,
    ) -> StoreResult<StoreResult<(Vec<i64>, AuditAnchor)>> {
        let op = write.op();
        let db = |e| map_err(op, e);
        let change = match WriteRecords::of(&write, None) {
            Ok(records) => records.change,
            Err(e) => return Ok(Err(e)),
        };
        let (opened, changed) = futures::join!(
            tx.batch_execute("SAVEPOINT batched"),
            self.change(tx, write)
        );
        opened.map_err(db)?;
        let failed = match changed {
            // Sent together: a failed bump or record makes the release fail too (the
            // transaction is aborted up to the savepoint), and the rollback below
            // restores it.
            Ok(_) => {
                // Prepared first, so that the bump and the record go out before the
                // release, in this order.
                let [bump, _, _] =
                    prepare_first(tx, &[BUMP_VERSIONS, AUDIT_INSERT, AUDIT_MOVE_HEAD])
                        .await
                        .map_err(db)?;
                let (bumped, appended, released) = futures::join!(
                    bump_versions(tx, &bump, op, std::slice::from_ref(&change)),
                    write_audit(tx, op, head.clone(), vec![audit.clone()]),
                    tx.batch_execute("RELEASE SAVEPOINT batched")
                );
                // Checked in the order sent.
                match bumped.and_then(|versions| appended.map(|records| (versions, records))) {
                    Ok((versions, records)) => {
                        released.map_err(db)?;
                        let moved = records.last().map_or_else(
                            || head.clone(),
                            |last| AuditAnchor {
                                seq: last.seq,
                                hash: last.hash.clone(),
                            },
                        );
                        return Ok(Ok((versions, moved)));
                    }
                    Err(e) => e,
                }
            }
            Err(e) => e,
        };
        tx.batch_execute("ROLLBACK TO SAVEPOINT batched; RELEASE SAVEPOINT batched")
            .await
            .map_err(db)?;
        Ok(Err(failed))
    }

    /// Makes `write`'s change inside `tx`: no version bump and no records (see
    /// [`PostgresStore::state_tx`]). `false`: a delete found nothing to
    /// delete.
    async fn change(&self, tx: &Tx<'_>, write: StateWrite<'_>) -> StoreResult<bool> {
        let op = write.op();
        let db = |e| map_err(op, e);
        match write {
            StateWrite::PutConnector(connector, component) => {
                self.write_connector(tx, connector, component).await?;
                Ok(true)
            }
            StateWrite::DeleteConnector(slug) => {
                tx.execute("DELETE FROM bindings WHERE connector = $1", &[&slug])
                    .await
                    .map_err(db)?;
                tx.execute(
                    "DELETE FROM grants WHERE provenance = $1",
                    &[&GrantProvenance::connector_text(slug)],
                )
                .await
                .map_err(db)?;
                let n = tx
                    .execute("DELETE FROM connectors WHERE slug = $1", &[&slug])
                    .await
                    .map_err(db)?;
                Ok(n > 0)
            }
            StateWrite::RotateConnector {
                connector,
                component,
                kept,
                removed,
            } => {
                self.write_connector(tx, connector, component).await?;
                for unit in removed {
                    self.remove_binding(tx, unit, &connector.slug).await?;
                }
                for (b, g) in kept {
                    self.write_binding(tx, b, g).await?;
                }
                Ok(true)
            }
            StateWrite::PutUnit(unit) => {
                exec(
                    tx,
                    PUT_UNIT,
                    &[
                        &unit.id,
                        &unit.parent,
                        &pg_opt_text(&unit.display_name),
                        &unit.created_at,
                    ],
                )
                .await
                .map_err(db)?;
                Ok(true)
            }
            StateWrite::DeleteUnit(id) => {
                tx.execute("DELETE FROM bindings WHERE unit_id = $1", &[&id])
                    .await
                    .map_err(db)?;
                tx.execute("DELETE FROM agent_units WHERE unit_id = $1", &[&id])
                    .await
                    .map_err(db)?;
                tx.execute(
                    "DELETE FROM grants WHERE subject_kind = 'unit' AND subject_id = $1",
                    &[&id],
                )
                .await
                .map_err(db)?;
                let n = tx
                    .execute("DELETE FROM units WHERE id = $1", &[&id])
                    .await
                    .map_err(db)?;
                Ok(n > 0)
            }
            StateWrite::PutAgent(agent) => {
                let units: Vec<&str> = agent.units.iter().map(String::as_str).collect();
                let display_name = pg_opt_text(&agent.display_name);
                let row: [&(dyn tokio_postgres::types::ToSql + Sync); 4] = [
                    &agent.id,
                    &display_name,
                    &agent.created_at,
                    &agent.token_epoch,
                ];
                let id: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&agent.id];
                let members: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&agent.id, &units];
                // In this order, sent together.
                let (agent_row, dropped, memberships) = futures::join!(
                    exec(tx, PUT_AGENT, &row),
                    exec(tx, DROP_MEMBERSHIPS, &id),
                    exec(tx, PUT_MEMBERSHIPS, &members),
                );
                first_failure(op, [agent_row, dropped, memberships])?;
                Ok(true)
            }
            StateWrite::DeleteAgent(id) => {
                tx.execute("DELETE FROM agent_units WHERE agent_id = $1", &[&id])
                    .await
                    .map_err(db)?;
                tx.execute("DELETE FROM image_tools WHERE agent_id = $1", &[&id])
                    .await
                    .map_err(db)?;
                tx.execute(
                    "DELETE FROM grants WHERE subject_kind = 'agent' AND subject_id = $1",
                    &[&id],
                )
                .await
                .map_err(db)?;
                let n = tx
                    .execute("DELETE FROM agents WHERE id = $1", &[&id])
                    .await
                    .map_err(db)?;
                Ok(n > 0)
            }
            StateWrite::PutBinding(binding, grant) => {
                self.write_binding(tx, binding, grant).await?;
                Ok(true)
            }
            StateWrite::DeleteBinding { unit, connector } => {
                self.remove_binding(tx, unit, connector).await
            }
            StateWrite::PutGrant(grant) => {
                upsert_grant(tx, grant).await.map_err(db)?;
                Ok(true)
            }
            StateWrite::DeleteGrant {
                subject,
                tool,
                provenance,
            } => {
                let (kind, id) = subject_parts(subject);
                let n = tx
                    .execute(
                        "DELETE FROM grants WHERE subject_kind = $1 AND subject_id = $2
                         AND tool = $3 AND provenance = $4",
                        &[&kind, &id, &tool, &provenance.to_string()],
                    )
                    .await
                    .map_err(db)?;
                Ok(n > 0)
            }
            StateWrite::PutImageTools(record) => {
                let tools = encode_json(op, &record.tools)?;
                tx.execute(
                    "INSERT INTO image_tools (agent_id, digest, tools) VALUES ($1, $2, $3)
                     ON CONFLICT (agent_id) DO UPDATE SET
                         digest = excluded.digest,
                         tools = excluded.tools",
                    &[&record.agent_id, &record.digest, &tools],
                )
                .await
                .map_err(db)?;
                Ok(true)
            }
        }
    }
}

#[async_trait]
impl AuditStore for PostgresStore {
    async fn append_audit(&self, entries: Vec<AuditEntry>) -> StoreResult<Vec<AuditRecord>> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        append_audit_committed(&self.pool, || entries).await
    }

    async fn append_audit_entry(&self, entry: AuditEntry) -> StoreResult<()> {
        // A task that stopped drops the group's `Submitted`, which answers the group with
        // the error.
        self.audit_groups
            .append(entry, |submitted| drop(self.audit.send(submitted)))
            .await
    }

    async fn audit_records(&self, query: &AuditQuery) -> StoreResult<Vec<AuditRecord>> {
        let ctx = "reading the audit log";
        let conn = self.conn(ctx).await?;
        let sql = format!(
            "SELECT {} FROM audit_log
             WHERE seq > $1
               AND ($2::text IS NULL OR action = $2)
               AND ($3::text IS NULL OR actor_kind = $3)
               AND ($4::text IS NULL OR actor_id = $4)
               AND ($5::text IS NULL OR target = $5)
               AND ($6::text IS NULL OR at >= $6)
               AND ($7::text IS NULL OR at < $7)
             ORDER BY seq LIMIT $8",
            rows::AUDIT_COLUMNS
        );
        let limit = i64::from(query.limit);
        let found = conn
            .query(
                &sql,
                &[
                    &query.after,
                    &query.action,
                    &query.actor_kind,
                    &query.actor_id,
                    &query.target,
                    &query.since,
                    &query.until,
                    &limit,
                ],
            )
            .await
            .map_err(|e| map_err(ctx, e))?;
        found.iter().map(|r| rows::audit_record(&Pg(r))).collect()
    }

    async fn audit_anchor(&self) -> StoreResult<AuditAnchor> {
        self.chain_point(
            "SELECT seq, hash FROM audit_anchor",
            "reading the audit anchor",
        )
        .await
    }

    async fn audit_head(&self) -> StoreResult<AuditAnchor> {
        self.chain_point(AUDIT_HEAD, "reading the audit head").await
    }

    async fn prune_audit(&self, before: &str, max: u32) -> StoreResult<u64> {
        let ctx = "prune_audit";
        let db = |e| map_err(ctx, e);
        let mut conn = self.conn(ctx).await?;
        let tx = read_committed(&mut conn).await.map_err(db)?;
        // Appends and prunes take turns: the head read by an append is never pruned away
        // under it.
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&AUDIT_LOCK])
            .await
            .map_err(db)?;
        let last = tx
            .query_opt(
                "SELECT seq, hash FROM
                     (SELECT seq, hash, at FROM audit_log ORDER BY seq LIMIT $2) oldest
                 WHERE at < $1 AND seq < (SELECT MAX(seq) FROM audit_log)
                 ORDER BY seq DESC LIMIT 1",
                &[&before, &i64::from(max)],
            )
            .await
            .map_err(db)?;
        let Some(last) = last else {
            return Ok(0);
        };
        let (seq, hash): (i64, String) = (col(&last, 0)?, col(&last, 1)?);
        let n = tx
            .execute("DELETE FROM audit_log WHERE seq <= $1", &[&seq])
            .await
            .map_err(db)?;
        tx.execute(
            "UPDATE audit_anchor SET seq = $1, hash = $2",
            &[&seq, &hash],
        )
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(n)
    }
}

#[async_trait]
impl DeliveryQueue for PostgresStore {
    async fn insert_delivery(
        &self,
        delivery: &DeliveryRecord,
        dedup_window_secs: i64,
        claim: &Claim,
        audit: Option<&AuditEntry>,
    ) -> StoreResult<bool> {
        let ctx = "insert_delivery";
        let db = |e| map_err(ctx, e);
        let d = delivery;
        let headers = encode_json(ctx, &d.headers)?;
        let routed = encode_json(ctx, &d.routed_to)?;
        let attempts = i32::try_from(d.attempts).unwrap_or(i32::MAX);
        let window_start = d.received_unix.saturating_sub(dedup_window_secs);
        let mut conn = self.conn(ctx).await?;
        let tx = read_committed(&mut conn).await.map_err(db)?;
        // One statement: of two replicas inserting the same id at once, the second waits
        // for the first's row and then finds it inside the window (no row returned).
        let stmt = tx
            .prepare_cached(
                "INSERT INTO deliveries (connector, delivery_id, event, headers, body,
                     received_unix, received_at, status, attempts, error, routed_to,
                     claimed_by, claim_until)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                 ON CONFLICT (connector, delivery_id) DO UPDATE SET
                     event = excluded.event, headers = excluded.headers, body = excluded.body,
                     received_unix = excluded.received_unix, received_at = excluded.received_at,
                     status = excluded.status, attempts = excluded.attempts,
                     error = excluded.error, routed_to = excluded.routed_to,
                     claimed_by = excluded.claimed_by, claim_until = excluded.claim_until
                 WHERE deliveries.received_unix < $14
                 RETURNING 1",
            )
            .await
            .map_err(db)?;
        let rows = tx
            .query(
                &stmt,
                &[
                    &d.connector,
                    &d.delivery_id,
                    &d.event,
                    &headers,
                    &d.body,
                    &d.received_unix,
                    &d.received_at,
                    &d.status.as_str(),
                    &attempts,
                    &d.error,
                    &routed,
                    &claim.owner,
                    &claim.until_unix,
                    &window_start,
                ],
            )
            .await
            .map_err(db)?;
        let stored = !rows.is_empty();
        if stored {
            append_audit(&tx, ctx, audit.into_iter().cloned().collect()).await?;
        }
        tx.commit().await.map_err(db)?;
        Ok(stored)
    }

    async fn insert_routed_delivery(
        &self,
        delivery: &DeliveryRecord,
        messages: &[MessageRecord],
        routed_to: &[String],
        dedup_window_secs: i64,
        audit: Option<&AuditEntry>,
    ) -> StoreResult<Option<Vec<MessageRecord>>> {
        let ctx = "insert_routed_delivery";
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = RoutedJob {
            delivery: delivery.clone(),
            messages: messages.to_vec(),
            routed_to: routed_to.to_vec(),
            window_secs: dedup_window_secs,
            audit: audit.cloned(),
            reply,
        };
        self.routed
            .send(job)
            .map_err(|_| StoreError::Unavailable(format!("{ctx}: the database writer stopped")))?;
        answer.await.map_err(|_| {
            StoreError::Unavailable(format!("{ctx}: the database writer did not answer"))
        })?
    }

    async fn claim_deliveries(
        &self,
        claim: &Claim,
        now_unix: i64,
        scope: ClaimScope,
        limit: u32,
    ) -> StoreResult<Vec<DeliveryRecord>> {
        let ctx = "claim_deliveries";
        let db = |e| map_err(ctx, e);
        let filter = match scope {
            ClaimScope::Sweep => "status = 'pending' AND (claimed_by IS NULL OR claim_until < $3)",
            ClaimScope::Startup => {
                "status IN ('pending', 'failed')
                 AND (claimed_by IS NULL OR claim_until < $3 OR claimed_by = $1)"
            }
        };
        let sql = format!(
            "UPDATE deliveries d SET claimed_by = $1, claim_until = $2
             FROM (SELECT connector, delivery_id FROM deliveries WHERE {filter}
                   ORDER BY received_unix, ord LIMIT $4 FOR UPDATE SKIP LOCKED) c
             WHERE d.connector = c.connector AND d.delivery_id = c.delivery_id
             RETURNING {}",
            DELIVERY_COLUMNS
                .split(", ")
                .map(|c| format!("d.{c}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let conn = self.conn(ctx).await?;
        let stmt = conn.prepare_cached(&sql).await.map_err(db)?;
        let limit = i64::from(limit);
        let rows = conn
            .query(&stmt, &[&claim.owner, &claim.until_unix, &now_unix, &limit])
            .await
            .map_err(db)?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let ord: i64 = col(row, 13)?;
            out.push((ord, rows::delivery(&Pg(row))?));
        }
        out.sort_by_key(|(ord, d)| (d.received_unix, *ord));
        Ok(out.into_iter().map(|(_, d)| d).collect())
    }

    async fn complete_delivery(
        &self,
        connector: &str,
        delivery_id: &str,
        messages: &[MessageRecord],
        routed_to: &[String],
        audit: Option<&AuditEntry>,
    ) -> StoreResult<Option<Vec<MessageRecord>>> {
        let ctx = "complete_delivery";
        let db = |e| map_err(ctx, e);
        let routed = encode_json(ctx, &routed_to)?;
        let mut conn = self.conn(ctx).await?;
        let tx = read_committed(&mut conn).await.map_err(db)?;
        // Marking it done takes the row lock: two replicas completing the same delivery
        // take turns, and the second finds it done and writes nothing.
        let marked = tx
            .query_opt(
                "UPDATE deliveries SET status = 'done', error = NULL, attempts = attempts + 1,
                     routed_to = $3, claimed_by = NULL, claim_until = 0
                 WHERE connector = $1 AND delivery_id = $2 AND status <> 'done'
                 RETURNING 1",
                &[&connector, &delivery_id, &routed],
            )
            .await
            .map_err(db)?;
        if marked.is_none() {
            let done = tx
                .query_opt(
                    "SELECT 1 FROM deliveries WHERE connector = $1 AND delivery_id = $2",
                    &[&connector, &delivery_id],
                )
                .await
                .map_err(db)?;
            if done.is_some() {
                return Ok(None);
            }
        }
        let stored = append_messages(&tx, ctx, messages).await?;
        append_audit(&tx, ctx, audit.into_iter().cloned().collect()).await?;
        tx.commit().await.map_err(db)?;
        Ok(Some(stored))
    }

    async fn fail_delivery(
        &self,
        connector: &str,
        delivery_id: &str,
        error: &str,
    ) -> StoreResult<()> {
        let conn = self.conn("fail_delivery").await?;
        conn.execute(
            "UPDATE deliveries SET status = 'failed', error = $3, attempts = attempts + 1,
                 claimed_by = NULL, claim_until = 0
             WHERE connector = $1 AND delivery_id = $2 AND status <> 'done'",
            &[&connector, &delivery_id, &pg_text(error)],
        )
        .await
        .map_err(|e| map_err("fail_delivery", e))?;
        Ok(())
    }

    async fn delivery(
        &self,
        connector: &str,
        delivery_id: &str,
    ) -> StoreResult<Option<DeliveryRecord>> {
        let conn = self.conn("delivery").await?;
        let row = conn
            .query_opt(
                &format!(
                    "SELECT {} FROM deliveries
                     WHERE connector = $1 AND delivery_id = $2",
                    *DELIVERY_COLUMNS
                ),
                &[&connector, &delivery_id],
            )
            .await
            .map_err(|e| map_err("delivery", e))?;
        row.as_ref().map(|r| rows::delivery(&Pg(r))).transpose()
    }

    async fn unfinished_deliveries(&self) -> StoreResult<Vec<DeliveryRecord>> {
        let conn = self.conn("unfinished_deliveries").await?;
        let rows = conn
            .query(
                &format!(
                    "SELECT {} FROM deliveries WHERE status <> 'done'
                     ORDER BY received_unix, ord",
                    *DELIVERY_COLUMNS
                ),
                &[],
            )
            .await
            .map_err(|e| map_err("unfinished_deliveries", e))?;
        rows.iter().map(|r| rows::delivery(&Pg(r))).collect()
    }

    async fn prune_deliveries(&self, before_unix: i64) -> StoreResult<u64> {
        let conn = self.conn("prune_deliveries").await?;
        conn.execute(
            "DELETE FROM deliveries WHERE status = 'done' AND received_unix < $1",
            &[&before_unix],
        )
        .await
        .map_err(|e| map_err("prune_deliveries", e))
    }

    fn commit_counts(&self) -> CommitCounts {
        CommitCounts {
            commits: self.writer.commits.load(Ordering::Relaxed),
            writes: self.writer.writes.load(Ordering::Relaxed),
        }
    }

    async fn deliveries_of(&self, connector: &str, limit: u32) -> StoreResult<Vec<DeliveryRecord>> {
        let conn = self.conn("deliveries_of").await?;
        // The body is left out: an operator's list never holds megabytes of payloads.
        let rows = conn
            .query(
                &format!(
                    "SELECT {} FROM deliveries WHERE connector = $1
                     ORDER BY received_unix DESC, ord DESC LIMIT $2",
                    DELIVERY_COLUMNS.replace(" body,", " ''::bytea AS body,")
                ),
                &[&connector, &i64::from(limit)],
            )
            .await
            .map_err(|e| map_err("deliveries_of", e))?;
        rows.iter().map(|r| rows::delivery(&Pg(r))).collect()
    }

    async fn deliveries_with_status(
        &self,
        connector: &str,
        status: DeliveryStatus,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> StoreResult<Vec<DeliveryRecord>> {
        let db = |e| map_err("deliveries_with_status", e);
        let conn = self.conn("deliveries_with_status").await?;
        let columns = DELIVERY_COLUMNS.replace(" body,", " ''::bytea AS body,");
        let (status, limit) = (status.as_str(), i64::from(limit));
        let found = match after {
            None => {
                conn.query(
                    &format!(
                        "SELECT {columns} FROM deliveries WHERE connector = $1 AND status = $2
                         ORDER BY received_unix DESC, delivery_id DESC LIMIT $3"
                    ),
                    &[&connector, &status, &limit],
                )
                .await
            }
            Some((at, id)) => {
                conn.query(
                    &format!(
                        "SELECT {columns} FROM deliveries WHERE connector = $1 AND status = $2
                           AND (received_unix, delivery_id) < ($3, $4)
                         ORDER BY received_unix DESC, delivery_id DESC LIMIT $5"
                    ),
                    &[&connector, &status, &at, &id, &limit],
                )
                .await
            }
        }
        .map_err(db)?;
        found.iter().map(|r| rows::delivery(&Pg(r))).collect()
    }
}

#[async_trait]
impl InboxStore for PostgresStore {
    async fn messages(
        &self,
        unit_id: &str,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<MessageRecord>> {
        let db = |e| map_err("messages", e);
        let conn = self.conn("messages").await?;
        let sql = format!(
            "SELECT {} FROM messages WHERE unit_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            rows::MESSAGE_COLUMNS
        );
        let stmt = conn.prepare_cached(&sql).await.map_err(db)?;
        let found = conn
            .query(&stmt, &[&unit_id, &after, &i64::from(limit)])
            .await
            .map_err(db)?;
        found.iter().map(|r| rows::message(&Pg(r))).collect()
    }

    async fn messages_newest_first(
        &self,
        unit_id: &str,
        before: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<MessageRecord>> {
        let db = |e| map_err("messages_newest_first", e);
        let conn = self.conn("messages_newest_first").await?;
        // The (unit_id, seq) index read backwards from `before`.
        let sql = format!(
            "SELECT {} FROM messages WHERE unit_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3",
            rows::MESSAGE_COLUMNS
        );
        let stmt = conn.prepare_cached(&sql).await.map_err(db)?;
        let found = conn
            .query(
                &stmt,
                &[&unit_id, &before.unwrap_or(i64::MAX), &i64::from(limit)],
            )
            .await
            .map_err(db)?;
        found.iter().map(|r| rows::message(&Pg(r))).collect()
    }

    async fn last_message_cursor(&self, unit_id: &str) -> StoreResult<i64> {
        let db = |e| map_err("last_message_cursor", e);
        let conn = self.conn("last_message_cursor").await?;
        let stmt = conn
            .prepare_cached("SELECT COALESCE(MAX(seq), 0)::BIGINT FROM messages WHERE unit_id = $1")
            .await
            .map_err(db)?;
        let row = conn.query_one(&stmt, &[&unit_id]).await.map_err(db)?;
        row.try_get::<_, i64>(0).map_err(db)
    }
}

#[async_trait]
impl SecretStore for PostgresStore {
    async fn shared_secret(&self, name: &str, candidate: &str) -> StoreResult<String> {
        let ctx = "shared_secret";
        let db = |e| map_err(ctx, e);
        let conn = self.conn(ctx).await?;
        conn.execute(
            "INSERT INTO host_secrets (name, value) VALUES ($1, $2)
             ON CONFLICT (name) DO NOTHING",
            &[&name, &candidate],
        )
        .await
        .map_err(db)?;
        let row = conn
            .query_one("SELECT value FROM host_secrets WHERE name = $1", &[&name])
            .await
            .map_err(db)?;
        col(&row, 0)
    }
}

#[async_trait]
impl ReplicaCoordination for PostgresStore {
    async fn changes_since(&self, applied: i64) -> StoreResult<StateCheck> {
        let ctx = "checking the state version";
        let conn = self.conn(ctx).await?;
        let stmt = conn
            .prepare_cached("SELECT version FROM state_version")
            .await
            .map_err(|e| map_err(ctx, e))?;
        let version: i64 = col(
            &conn
                .query_one(&stmt, &[])
                .await
                .map_err(|e| map_err(ctx, e))?,
            0,
        )?;
        let mut own = self.own_versions.lock();
        let foreign = foreign_after(&own, applied, version);
        if !foreign {
            self.seen.fetch_max(version, Ordering::SeqCst);
        }
        // Versions at or below what the caller has applied are settled.
        *own = own.split_off(&applied.min(version).saturating_add(1));
        Ok(StateCheck { version, foreign })
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn refuse_stale_writes(&self) {
        self.guard_stale.store(true, Ordering::SeqCst);
    }

    fn applied(&self, version: i64) {
        self.seen.fetch_max(version, Ordering::SeqCst);
    }

    async fn foreign_writes(
        &self,
        applied: i64,
        upto: i64,
    ) -> StoreResult<Option<Vec<LoggedWrite>>> {
        let ctx = "reading the change log";
        let conn = self.conn(ctx).await?;
        let stmt = conn
            .prepare_cached(
                "SELECT version, change FROM state_changes
                 WHERE version > $1 AND version <= $2 ORDER BY version",
            )
            .await
            .map_err(|e| map_err(ctx, e))?;
        let found = conn
            .query(&stmt, &[&applied, &upto])
            .await
            .map_err(|e| map_err(ctx, e))?
            .iter()
            .map(|r| Ok((col(r, 0)?, col(r, 1)?)))
            .collect::<StoreResult<Vec<(i64, String)>>>()?;
        let own = self.own_versions.lock();
        connector_store::foreign_entries(found, applied, upto, |v| own.contains(&v))
    }

    async fn prune_changes(&self, upto: i64) -> StoreResult<u64> {
        let ctx = "pruning the change log";
        let mut conn = self.conn(ctx).await?;
        let tx = read_committed(&mut conn)
            .await
            .map_err(|e| map_err(ctx, e))?;
        let n = prune_changes(&tx, upto, ctx).await?;
        tx.commit().await.map_err(|e| map_err(ctx, e))?;
        Ok(n)
    }
}
