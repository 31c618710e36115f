//! The default [`Store`]: one SQLite database file (`<data_dir>/host.db`).
//!
//! - One writing connection behind a mutex. Every write runs as one `BEGIN IMMEDIATE`
//!   transaction — or, when writes arrive together, as one savepoint each inside a shared
//!   one, committed at once ([`writer`]: group commit; a batch of state writes,
//!   [`StateStore::write_batch`](crate::StateStore::write_batch), is sent as one job
//!   each, together, and the writer stops it at its first failure) — so a failure
//!   anywhere in a write rolls that whole write back, and two
//!   handles (or processes) on the same file never interleave inside one method: the
//!   de-duplication check of [`DeliveryQueue::insert_delivery`](crate::DeliveryQueue::insert_delivery) and the row selection of
//!   [`DeliveryQueue::claim_deliveries`](crate::DeliveryQueue::claim_deliveries) are atomic with their writes.
//! - Reads (the audit log, inboxes, deliveries, components) run on [`READERS`] read-only
//!   connections of their own, each statement on the last committed state (WAL readers
//!   never wait for the writer, nor it for them): a long read — an operator's audit
//!   query, a verify — never holds up writes. An in-memory database has only the one
//!   connection, which reads share with the writer.
//! - WAL journal, `synchronous=NORMAL`, `foreign_keys=ON`, a busy timeout of
//!   [`BUSY_TIMEOUT`]. A database locked for longer than that is reported as
//!   [`StoreError::Unavailable`]. The log is copied back into the database file on a
//!   thread of its own ([`sqlite_checkpoint`]), not inside commits.
//! - The schema is versioned: [`MIGRATIONS`] are applied in order at open, one transaction
//!   each, and recorded in `schema_migrations(version, applied_at)`. A database that has a
//!   version this host does not know (it was written by a newer host) is refused with
//!   [`StoreError::Corrupt`] rather than silently misread.
//! - [`StateStore::load`](crate::StateStore::load) returns units, agents, bindings, grants, connectors and image tools in
//!   the order they were first written (upserts keep a row's place) and each agent's units
//!   in their given order.
//!
//! Referential rules enforced by the schema: a binding needs a stored unit, agent
//! memberships and image tools need a stored agent. A binding's connector, a unit's parent
//! and an agent's unit ids are not enforced here (the caller checks them); deleting a unit
//! leaves agents' memberships of it alone, like its children.
//!
//! # State version
//!
//! The one-row table `state_version` counts committed changes to connectors, units,
//! agents, bindings, grants and image tools: every call of a method that writes them
//! (`put_*`, `delete_*`, `rotate_connector`) adds 1 inside its own transaction — also a
//! delete that found nothing to delete, so the rule needs no per-method bookkeeping and
//! a spurious bump only costs other handles one no-op change. A rolled-back call adds
//! nothing.
//! Deliveries, messages and shared secrets never change it: they are not part of the
//! in-memory state a host keeps.
//!
//! Each version's write is kept in the change log (`state_changes`, in the same
//! transaction, the oldest pruned past [`CHANGES_KEPT`](crate::CHANGES_KEPT)), so
//! another handle catches up by applying what changed
//! ([`ReplicaCoordination::foreign_writes`](crate::ReplicaCoordination::foreign_writes)) instead of reloading everything: a
//! `connector-host mcp --local` beside `serve` follows it that way.
//!
//! [`ReplicaCoordination::changes_since`](crate::ReplicaCoordination::changes_since) tells a handle's own versions from other handles' by
//! remembering which versions its committed writes produced ([`OwnVersions`]). The record
//! is made under a lock held across the commit, so a concurrent check on the same handle
//! never sees a committed version that is not recorded yet, and it is dropped again if the
//! commit fails. Versions are consecutive integers, so "all of `(applied, current]` is
//! ours" is a count. Each check forgets the versions up to its `applied`, and the record is
//! capped; forgetting a version only ever makes it look foreign (one needless reload),
//! never the other way round.
//!
//! An SQLite host is a single process ([`ReplicaCoordination::is_shared`](crate::ReplicaCoordination::is_shared) is `false`), but nothing here
//! depends on that: two handles on one file behave as two replicas would.

mod audit;
mod checkpoint;
mod watch;
mod writer;

pub use watch::FileWatch;
pub use writer::Writes;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use rusqlite::{
    params, Connection, ErrorCode, OptionalExtension, Transaction, TransactionBehavior,
};

use crate::audit_groups::AuditGroups;
use crate::rows;
use crate::{
    encode_json, subject_parts, ClaimScope, CommitCounts, StateCheck, StoreError, StoreResult,
};
use crate::{BatchedWrite, LoggedWrite, StateWrite, WriteRecords};
use crate::{DeliveryQueue, InboxStore, ReplicaCoordination, SecretStore, StateStore};
use audit::append_audit;
use connector_model::audit::AuditEntry;
use connector_model::provenance::GrantProvenance;
use connector_model::records::{
    rederive, BindingRecord, Claim, ConnectorRecord, DeliveryRecord, DeliveryStatus, GrantRecord,
    MessageRecord, Snapshot,
};
use writer::Job;

/// How long a statement waits for another connection's lock before giving up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The schema, one entry per version (entry `i` is version `i + 1`). Append only: never
/// edit or reorder an entry that has shipped.
const MIGRATIONS: &[&str] = &[
    // 1: initial schema.
    r#"
    CREATE TABLE connectors (
        slug         TEXT PRIMARY KEY NOT NULL,
        namespace    TEXT NOT NULL,
        digest       TEXT NOT NULL,
        component    BLOB NOT NULL,
        bundled      INTEGER NOT NULL CHECK (bundled IN (0, 1)),
        installed_at TEXT NOT NULL
    );

    CREATE TABLE units (
        id           TEXT PRIMARY KEY NOT NULL,
        parent       TEXT,
        display_name TEXT,
        created_at   TEXT NOT NULL
    );

    CREATE TABLE agents (
        id           TEXT PRIMARY KEY NOT NULL,
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
        unit_id      TEXT NOT NULL REFERENCES units (id) ON DELETE CASCADE,
        connector    TEXT NOT NULL,
        config       TEXT NOT NULL,
        routing_keys TEXT NOT NULL,
        bound_at     TEXT NOT NULL,
        PRIMARY KEY (unit_id, connector)
    );
    CREATE INDEX bindings_by_connector ON bindings (connector);

    CREATE TABLE grants (
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
        agent_id TEXT PRIMARY KEY NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
        digest   TEXT NOT NULL,
        tools    TEXT NOT NULL
    );
    "#,
    // 2: webhook deliveries and unit inboxes.
    r#"
    CREATE TABLE deliveries (
        connector     TEXT NOT NULL,
        delivery_id   TEXT NOT NULL,
        event         TEXT,
        headers       TEXT NOT NULL,
        body          BLOB NOT NULL,
        received_unix INTEGER NOT NULL,
        received_at   TEXT NOT NULL,
        status        TEXT NOT NULL CHECK (status IN ('pending', 'done', 'failed')),
        attempts      INTEGER NOT NULL DEFAULT 0,
        error         TEXT,
        routed_to     TEXT NOT NULL DEFAULT '[]',
        PRIMARY KEY (connector, delivery_id)
    );
    CREATE INDEX deliveries_unfinished ON deliveries (status, received_unix);

    CREATE TABLE messages (
        seq         INTEGER PRIMARY KEY AUTOINCREMENT,
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
    "#,
    // 3: replicas — delivery claims, the state version, shared secrets.
    r#"
    ALTER TABLE deliveries ADD COLUMN claimed_by TEXT;
    ALTER TABLE deliveries ADD COLUMN claim_until INTEGER NOT NULL DEFAULT 0;

    CREATE TABLE state_version (
        id      INTEGER PRIMARY KEY CHECK (id = 1),
        version INTEGER NOT NULL
    );
    INSERT INTO state_version (id, version) VALUES (1, 0);

    CREATE TABLE host_secrets (
        name  TEXT PRIMARY KEY NOT NULL,
        value TEXT NOT NULL
    );
    "#,
    // 4: agent token epochs (revocation).
    r#"
    ALTER TABLE agents ADD COLUMN token_epoch TEXT NOT NULL DEFAULT '';
    "#,
    // 5: a connector's validated description, so another host serves it before it has
    // compiled the component.
    r#"
    ALTER TABLE connectors ADD COLUMN manifest TEXT;
    "#,
    // 6: the audit log, one hash chain, and where its kept part starts.
    r#"
    CREATE TABLE audit_log (
        seq        INTEGER PRIMARY KEY NOT NULL,
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
        id   INTEGER PRIMARY KEY CHECK (id = 1),
        seq  INTEGER NOT NULL,
        hash TEXT NOT NULL
    );
    INSERT INTO audit_anchor (id, seq, hash)
        VALUES (1, 0, 'sha256:0000000000000000000000000000000000000000000000000000000000000000');

    CREATE TABLE audit_head (
        id   INTEGER PRIMARY KEY CHECK (id = 1),
        seq  INTEGER NOT NULL,
        hash TEXT NOT NULL
    );
    INSERT INTO audit_head (id, seq, hash)
        VALUES (1, 0, 'sha256:0000000000000000000000000000000000000000000000000000000000000000');
    "#,
    // 7: the change log: each state version's write, so another handle catches up by
    // applying what changed instead of reloading (see `foreign_writes`).
    r#"
    CREATE TABLE state_changes (
        version INTEGER PRIMARY KEY NOT NULL,
        change  TEXT NOT NULL
    );
    "#,
    // 8: the audit log's filters by target and by time read summaries of buckets of 256
    // records (`seq >> 8`) instead of an index entry per record (see `audit`); the
    // records already kept are summarised here.
    r#"
    CREATE TABLE audit_targets (
        target TEXT NOT NULL,
        bucket INTEGER NOT NULL,
        PRIMARY KEY (target, bucket)
    ) WITHOUT ROWID;
    CREATE INDEX audit_targets_by_bucket ON audit_targets (bucket);
    CREATE TABLE audit_times (
        bucket   INTEGER PRIMARY KEY NOT NULL,
        first_at TEXT NOT NULL,
        last_at  TEXT NOT NULL
    );
    INSERT INTO audit_targets (target, bucket)
        SELECT DISTINCT target, seq >> 8 FROM audit_log;
    INSERT INTO audit_times (bucket, first_at, last_at)
        SELECT seq >> 8, min(at), max(at) FROM audit_log GROUP BY seq >> 8;
    DROP INDEX audit_log_by_target;
    DROP INDEX audit_log_by_at;
    "#,
];

/// The newest schema version this host knows.
fn latest_version() -> i64 {
    // The list is tiny; the cast cannot truncate.
    MIGRATIONS.len() as i64
}

/// At most this many separate runs of own versions are remembered (see [`OwnVersions`]).
const OWN_VERSION_RUNS: usize = 1024;

/// The state versions this handle's committed writes produced, as runs of consecutive
/// versions (`start -> end`, both inclusive): a handle that is the only writer keeps one
/// run however many writes it makes.
#[derive(Debug, Default)]
pub(super) struct OwnVersions {
    runs: BTreeMap<i64, i64>,
    /// The newest version forgotten for the cap (not by `prune`): whether versions up to it
    /// were ours is no longer known.
    forgotten_through: i64,
}

impl OwnVersions {
    pub(super) fn insert(&mut self, version: i64) {
        let (mut start, mut end) = (version, version);
        if let Some((&s, &e)) = self.runs.range(..=version).next_back() {
            if e >= version {
                return;
            }
            if e + 1 == version {
                start = s;
            }
        }
        if let Some(next_end) = self.runs.remove(&(version + 1)) {
            end = next_end;
        }
        self.runs.insert(start, end);
        // Forgetting the oldest only makes those versions look foreign.
        while self.runs.len() > OWN_VERSION_RUNS {
            if let Some((_, end)) = self.runs.pop_first() {
                self.forgotten_through = self.forgotten_through.max(end);
            }
        }
    }

    /// Whether `version` is remembered as ours.
    fn contains(&self, version: i64) -> bool {
        self.runs
            .range(..=version)
            .next_back()
            .is_some_and(|(_, &end)| end >= version)
    }

    pub(super) fn remove(&mut self, version: i64) {
        let Some((&start, &end)) = self.runs.range(..=version).next_back() else {
            return;
        };
        if end < version {
            return;
        }
        self.runs.remove(&start);
        if start < version {
            self.runs.insert(start, version - 1);
        }
        if version < end {
            self.runs.insert(version + 1, end);
        }
    }

    /// Forgets every version `<= upto`.
    fn prune(&mut self, upto: i64) {
        while let Some((&start, &end)) = self.runs.first_key_value() {
            if start > upto {
                break;
            }
            self.runs.remove(&start);
            if end > upto {
                self.runs.insert(upto + 1, end);
                break;
            }
        }
    }

    /// How many remembered versions lie in `(after, upto]`.
    fn count_in(&self, after: i64, upto: i64) -> i64 {
        self.runs
            .range(..=upto)
            .map(|(&start, &end)| (end.min(upto) - start.max(after + 1) + 1).max(0))
            .sum()
    }
}

/// Read-only connections of a database file (see the module docs).
const READERS: usize = 2;

/// The state shared with the writer thread and the blocking read tasks.
pub(super) struct Inner {
    pub(super) conn: Mutex<Connection>,
    /// Connections for reads; empty for an in-memory database (reads use `conn`).
    readers: Vec<Mutex<Connection>>,
    /// Which reader a read waits for when all are busy (round robin).
    next_reader: AtomicUsize,
    /// Locked after `conn`, never before.
    pub(super) own_versions: Mutex<OwnVersions>,
    /// Commits of the writer and the writes they held ([`CommitCounts`]).
    pub(super) commits: AtomicU64,
    pub(super) writes: AtomicU64,
}

/// A [`Store`] in one SQLite database. Cheap to clone (clones share the connection).
#[derive(Clone)]
pub struct SqliteStore {
    pub(super) inner: Arc<Inner>,
    /// The way to the writer ([`sqlite_writer`]); its thread ends with the last clone.
    writer: writer::Writer,
    /// Audit records waiting for the writer
    /// ([`AuditStore::append_audit_entry`](crate::AuditStore::append_audit_entry)).
    audit_groups: Arc<AuditGroups>,
    path: Option<PathBuf>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating it and its parent directories if needed) the database at `path`
    /// and brings its schema up to date. A new file is created with mode 0600 on Unix.
    ///
    /// Blocking: call it at start-up, or from `spawn_blocking`.
    pub fn open(path: &Path) -> StoreResult<Self> {
        Self::open_with(path, Writes::Grouped)
    }

    /// As [`SqliteStore::open`], with its writes run as `writes` says (see
    /// [`Writes`]).
    pub fn open_with(path: &Path, writes: Writes) -> StoreResult<Self> {
        if let Some(parent) = path.parent() {
            if !parent.as_os_str().is_empty() {
                std::fs::create_dir_all(parent).map_err(|e| {
                    StoreError::Unavailable(format!(
                        "cannot create the database directory {}: {e}",
                        parent.display()
                    ))
                })?;
            }
        }
        create_private_file(path)?;
        let ctx = format!("opening the database {}", path.display());
        let conn = Connection::open(path).map_err(|e| map_err(&ctx, e))?;
        Self::init(conn, Some(path.to_path_buf()), writes)
    }

    /// A read-only connection to the database file at `path` (opened after the writer's,
    /// so the file is in WAL mode and migrated).
    fn open_reader(path: &Path) -> StoreResult<Connection> {
        let ctx = format!("opening a reader of the database {}", path.display());
        let conn = Connection::open(path).map_err(|e| map_err(&ctx, e))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| map_err(&ctx, e))?;
        conn.pragma_update(None, "query_only", "ON")
            .map_err(|e| map_err(&ctx, e))?;
        Ok(conn)
    }

    /// A fresh database that lives in memory only (tests, throw-away hosts).
    pub fn open_in_memory() -> StoreResult<Self> {
        let conn = Connection::open_in_memory()
            .map_err(|e| map_err("opening an in-memory database", e))?;
        Self::init(conn, None, Writes::Grouped)
    }

    /// The database file, `None` for an in-memory database.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn init(mut conn: Connection, path: Option<PathBuf>, writes: Writes) -> StoreResult<Self> {
        configure(&conn, path.is_some())?;
        migrate(&mut conn)?;
        let checkpoints = match &path {
            Some(path) => Some(checkpoint::Checkpoints::start(path, &conn)?),
            None => None,
        };
        let readers = match &path {
            Some(path) => (0..READERS)
                .map(|_| Self::open_reader(path).map(Mutex::new))
                .collect::<StoreResult<Vec<_>>>()?,
            None => Vec::new(),
        };
        let inner = Arc::new(Inner {
            conn: Mutex::new(conn),
            readers,
            next_reader: AtomicUsize::new(0),
            own_versions: Mutex::new(OwnVersions::default()),
            commits: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        });
        let writer = writer::Writer::start(Arc::clone(&inner), checkpoints, writes)?;
        Ok(Self {
            inner,
            writer,
            audit_groups: Arc::default(),
            path,
        })
    }

    /// Runs `f` in one immediate (write) transaction on a blocking thread; commits if it
    /// returns `Ok`, rolls back otherwise.
    async fn write<T, F>(&self, op: &'static str, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> StoreResult<T> + Send + 'static,
    {
        self.transaction(op, None, f).await
    }

    /// As [`SqliteStore::write`], for a change to the state: also bumps the state version
    /// in the same transaction, keeps the change-log entry of `records` under it and
    /// records the new version as this handle's own. With an audit entry in `records`,
    /// the record is appended to the audit log in the same transaction, after the change.
    async fn write_state<T, F>(
        &self,
        op: &'static str,
        records: WriteRecords<'_>,
        f: F,
    ) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> StoreResult<T> + Send + 'static,
    {
        let change = audited(op, records.audit.cloned(), f);
        self.transaction(op, Some(records.change), change).await
    }

    /// Hands `f` to the writer, which runs it in a transaction with the other writes
    /// waiting at that moment (on the caller's thread, alone: [`Writes::OnCaller`]), and
    /// answers once that transaction has committed (or failed). See [`sqlite_writer`].
    async fn transaction<T, F>(
        &self,
        op: &'static str,
        change: Option<String>,
        f: F,
    ) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> StoreResult<T> + Send + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let reply = move |out| {
            // The caller may be gone (it was dropped): nothing to do.
            let _ = reply.send(out);
        };
        self.send(op, Job::new(op, change, f, reply))?;
        writer_answer(op, answer).await?
    }

    /// Hands `job` (the write `op`) to the writer.
    fn send(&self, op: &'static str, job: Job) -> StoreResult<()> {
        self.writer
            .send(job)
            .map_err(|_| StoreError::Unavailable(format!("{op}: the database writer stopped")))
    }
}

/// `f`, then `audit` (if any) appended to the audit log: a state write's job without the
/// version bump, which the writer adds.
fn audited<T, F>(
    op: &'static str,
    audit: Option<AuditEntry>,
    f: F,
) -> impl FnOnce(&Transaction<'_>) -> StoreResult<T> + Send + 'static
where
    F: FnOnce(&Transaction<'_>) -> StoreResult<T> + Send + 'static,
{
    move |tx| {
        let out = f(tx)?;
        if let Some(entry) = audit {
            append_audit(tx, op, vec![entry])?;
        }
        Ok(out)
    }
}

/// What the writer answered for the write `op`.
async fn writer_answer<T>(
    op: &'static str,
    answer: tokio::sync::oneshot::Receiver<T>,
) -> StoreResult<T> {
    answer
        .await
        .map_err(|_| StoreError::Unavailable(format!("{op}: the database writer did not answer")))
}

/// Stores delivery `d` (inside `tx`) with `claim`, unless the same (connector, delivery id)
/// was stored within `window_secs` before it: then writes nothing and returns `false`. An
/// older row of the same id is replaced. One step with the check, for every connection to
/// the file, since the caller's transaction is immediate.
fn store_unless_recent(
    tx: &Transaction<'_>,
    op: &'static str,
    d: &DeliveryRecord,
    window_secs: i64,
    claim: Option<&Claim>,
) -> StoreResult<bool> {
    let db = |e| map_err(op, e);
    // Cached statements: this runs once per delivery on the writer's hot path.
    let existing: Option<i64> = tx
        .prepare_cached(
            "SELECT received_unix FROM deliveries WHERE connector = ?1 AND delivery_id = ?2",
        )
        .and_then(|mut s| s.query_row([&d.connector, &d.delivery_id], |r| r.get(0)))
        .optional()
        .map_err(db)?;
    if existing.is_some_and(|t| t >= d.received_unix - window_secs) {
        return Ok(false);
    }
    let headers = encode_json(op, &d.headers)?;
    let routed = encode_json(op, &d.routed_to)?;
    let (owner, until) = claim.map_or((None, 0), |c| (Some(c.owner.as_str()), c.until_unix));
    tx.prepare_cached(
        "INSERT INTO deliveries (connector, delivery_id, event, headers, body, received_unix, received_at, status, attempts, error, routed_to, claimed_by, claim_until)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
         ON CONFLICT (connector, delivery_id) DO UPDATE SET
             event = excluded.event, headers = excluded.headers, body = excluded.body,
             received_unix = excluded.received_unix, received_at = excluded.received_at,
             status = excluded.status, attempts = excluded.attempts, error = excluded.error,
             routed_to = excluded.routed_to, claimed_by = excluded.claimed_by,
             claim_until = excluded.claim_until",
    )
    .and_then(|mut s| s.execute(params![d.connector, d.delivery_id, d.event, headers, d.body, d.received_unix, d.received_at, d.status.as_str(), d.attempts, d.error, routed, owner, until]))
    .map_err(db)?;
    Ok(true)
}

/// Appends `messages` to their units' inboxes (inside `tx`); returns them with their
/// cursors.
fn append_messages(
    tx: &Transaction<'_>,
    op: &'static str,
    messages: Vec<MessageRecord>,
) -> StoreResult<Vec<MessageRecord>> {
    let mut insert = tx
        .prepare_cached(
            "INSERT INTO messages (id, unit_id, connector, kind, delivery_id, thread_key, payload, received_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .map_err(|e| map_err(op, e))?;
    let mut stored = Vec::with_capacity(messages.len());
    for m in messages {
        let payload = encode_json(op, &m.payload)?;
        insert
            .execute(params![
                m.id,
                m.unit_id,
                m.connector,
                m.kind,
                m.delivery_id,
                m.thread_key,
                payload,
                m.received_at
            ])
            .map_err(|e| map_err(op, e))?;
        stored.push(MessageRecord {
            seq: tx.last_insert_rowid(),
            ..m
        });
    }
    Ok(stored)
}

/// Adds 1 to the state version (inside `tx`), keeps `change` (a [`LoggedWrite`]'s JSON)
/// under the new version in the change log, prunes the log every
/// [`CHANGES_PRUNED_EVERY`](crate::CHANGES_PRUNED_EVERY) versions, and returns the new
/// version.
pub(super) fn bump_state_version(tx: &Transaction<'_>, change: &str) -> rusqlite::Result<i64> {
    let version: i64 = tx.query_row(
        "UPDATE state_version SET version = version + 1 WHERE id = 1 RETURNING version",
        [],
        |r| r.get(0),
    )?;
    tx.prepare_cached("INSERT INTO state_changes (version, change) VALUES (?1, ?2)")?
        .execute(params![version, change])?;
    if version % crate::CHANGES_PRUNED_EVERY == 0 {
        prune_changes(tx, version - crate::CHANGES_KEPT)?;
    }
    Ok(version)
}

/// Deletes the change log's entries up to `upto` (inside `tx`); returns how many.
fn prune_changes(tx: &Connection, upto: i64) -> rusqlite::Result<usize> {
    tx.prepare_cached("DELETE FROM state_changes WHERE version <= ?1")?
        .execute([upto])
}

fn read_state_version(conn: &Connection) -> rusqlite::Result<i64> {
    // Cached: a tool server beside `serve` reads it before most messages.
    conn.prepare_cached("SELECT version FROM state_version WHERE id = 1")?
        .query_row([], |r| r.get(0))
}

/// Every row `sql` selects with `params`, decoded by `decode` (see [`rows`]).
fn select_all<T>(
    conn: &Connection,
    op: &str,
    sql: &str,
    params: impl rusqlite::Params,
    mut decode: impl FnMut(&rusqlite::Row<'_>) -> StoreResult<T>,
) -> StoreResult<Vec<T>> {
    let db = |e| map_err(op, e);
    let mut stmt = conn.prepare_cached(sql).map_err(db)?;
    let mut rows = stmt.query(params).map_err(db)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(db)? {
        out.push(decode(row)?);
    }
    Ok(out)
}

impl rows::StoredRow for rusqlite::Row<'_> {
    fn text(&self, i: usize) -> StoreResult<String> {
        self.get(i).map_err(malformed)
    }
    fn opt_text(&self, i: usize) -> StoreResult<Option<String>> {
        self.get(i).map_err(malformed)
    }
    fn int(&self, i: usize) -> StoreResult<i64> {
        self.get(i).map_err(malformed)
    }
    fn bytes(&self, i: usize) -> StoreResult<Vec<u8>> {
        self.get(i).map_err(malformed)
    }
    fn flag(&self, i: usize) -> StoreResult<bool> {
        self.get(i).map_err(malformed)
    }
}

fn malformed(e: rusqlite::Error) -> StoreError {
    StoreError::Corrupt(format!("a stored row is malformed: {e}"))
}

/// Upserts a connector and re-derives its `connector:<slug>` grants (inside `tx`).
fn write_connector(tx: &Transaction<'_>, c: &ConnectorRecord, component: &[u8]) -> StoreResult<()> {
    let db = |e| map_err("put_connector", e);
    let manifest = c
        .manifest
        .as_ref()
        .map(|m| encode_json("put_connector", m))
        .transpose()?;
    tx.execute(
        "INSERT INTO connectors (slug, namespace, digest, component, bundled, installed_at, manifest)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (slug) DO UPDATE SET
             namespace = excluded.namespace,
             digest = excluded.digest,
             component = excluded.component,
             bundled = excluded.bundled,
             installed_at = excluded.installed_at,
             manifest = excluded.manifest",
        params![
            c.slug,
            c.namespace,
            c.digest,
            component,
            c.bundled,
            c.installed_at,
            manifest,
        ],
    )
    .map_err(db)?;
    let provenance = GrantProvenance::connector_text(&c.slug);
    let held = {
        let mut stmt = tx
            .prepare_cached(
                "SELECT rowid, subject_kind, subject_id FROM grants
                 WHERE provenance = ?1 ORDER BY rowid",
            )
            .map_err(db)?;
        let rows = stmt
            .query_map([&provenance], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    (r.get::<_, String>(1)?, r.get::<_, String>(2)?),
                ))
            })
            .map_err(db)?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(db)?
    };
    let rederived = rederive(&c.namespace, held);
    for rowid in &rederived.dropped {
        tx.execute("DELETE FROM grants WHERE rowid = ?1", [rowid])
            .map_err(db)?;
    }
    tx.execute(
        "UPDATE grants SET tool = ?1, namespace = ?2 WHERE provenance = ?3",
        params![rederived.tool, rederived.namespace, provenance],
    )
    .map_err(db)?;
    Ok(())
}

/// Upserts a binding and its grant (inside `tx`).
fn write_binding(tx: &Transaction<'_>, b: &BindingRecord, g: &GrantRecord) -> StoreResult<()> {
    let ctx = "put_binding";
    let db = |e| map_err(ctx, e);
    let config = encode_json(ctx, &b.config)?;
    let routing_keys = encode_json(ctx, &b.routing_keys)?;
    tx.execute(
        "INSERT INTO bindings (unit_id, connector, config, routing_keys, bound_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (unit_id, connector) DO UPDATE SET
             config = excluded.config,
             routing_keys = excluded.routing_keys,
             bound_at = excluded.bound_at",
        params![b.unit_id, b.connector, config, routing_keys, b.bound_at],
    )
    .map_err(db)?;
    upsert_grant(tx, g).map_err(db)?;
    Ok(())
}

/// Deletes a binding and the unit's grants it wrote (inside `tx`).
fn remove_binding(tx: &Transaction<'_>, unit_id: &str, connector: &str) -> StoreResult<bool> {
    let db = |e| map_err("delete_binding", e);
    let n = tx
        .execute(
            "DELETE FROM bindings WHERE unit_id = ?1 AND connector = ?2",
            [unit_id, connector],
        )
        .map_err(db)?;
    tx.execute(
        "DELETE FROM grants
         WHERE subject_kind = 'unit' AND subject_id = ?1 AND provenance = ?2",
        [unit_id, &GrantProvenance::connector_text(connector)],
    )
    .map_err(db)?;
    Ok(n > 0)
}

/// Creates `path` with mode 0600 if it does not exist yet (an existing file is left as is).
fn create_private_file(path: &Path) -> StoreResult<()> {
    if path.exists() {
        return Ok(());
    }
    let mut options = std::fs::OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path).map(drop).map_err(|e| {
        StoreError::Unavailable(format!(
            "cannot create the database file {}: {e}",
            path.display()
        ))
    })
}

fn configure(conn: &Connection, file: bool) -> StoreResult<()> {
    let ctx = "configuring the database";
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| map_err(ctx, e))?;
    if file {
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(|e| map_err(ctx, e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(journal_mode = %mode, "the database could not switch to WAL journaling");
        }
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(|e| map_err(ctx, e))?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(|e| map_err(ctx, e))?;
    // Each write of a group commit runs in a savepoint (see `writer`), which keeps the
    // pages it changes in a sub-journal to roll back to. SQLite spills that to a
    // temporary file past 64 KiB: under durable webhooks it wrote more bytes than the log
    // itself. It only ever serves to undo a savepoint (the log alone recovers from a
    // crash, and the file is deleted unsynced), so it stays in memory: at most the pages
    // one group changes.
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(|e| map_err(ctx, e))?;
    Ok(())
}

/// Applies every migration the database lacks, one transaction each.
fn migrate(conn: &mut Connection) -> StoreResult<()> {
    migrate_to(conn, MIGRATIONS.len())
}

/// Applies the first `upto` migrations the database lacks, one transaction each.
fn migrate_to(conn: &mut Connection, upto: usize) -> StoreResult<()> {
    let ctx = "migrating the database schema";
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version    INTEGER PRIMARY KEY,
             applied_at TEXT NOT NULL
         )",
    )
    .map_err(|e| map_err(ctx, e))?;
    let applied = applied_versions(conn).map_err(|e| map_err(ctx, e))?;
    refuse_newer(&applied)?;
    for (index, sql) in MIGRATIONS.iter().take(upto).enumerate() {
        let version = index as i64 + 1;
        if applied.contains(&version) {
            continue;
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| map_err(ctx, e))?;
        // Another process may have migrated between our read and this lock.
        let done: Option<i64> = tx
            .query_row(
                "SELECT version FROM schema_migrations WHERE version = ?1",
                [version],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| map_err(ctx, e))?;
        if done.is_some() {
            continue;
        }
        tx.execute_batch(sql)
            .map_err(|e| map_err(&format!("applying schema migration {version}"), e))?;
        tx.execute(
            "INSERT INTO schema_migrations (version, applied_at) VALUES (?1, ?2)",
            params![version, connector_model::ids::now_rfc3339()],
        )
        .map_err(|e| map_err(ctx, e))?;
        tx.commit().map_err(|e| map_err(ctx, e))?;
        tracing::debug!(version, "applied schema migration");
    }
    Ok(())
}

fn applied_versions(conn: &Connection) -> rusqlite::Result<BTreeSet<i64>> {
    let mut stmt = conn.prepare("SELECT version FROM schema_migrations")?;
    let rows = stmt.query_map([], |row| row.get::<_, i64>(0))?;
    rows.collect()
}

fn refuse_newer(applied: &BTreeSet<i64>) -> StoreResult<()> {
    let latest = latest_version();
    match applied.last() {
        Some(&newest) if newest > latest => Err(StoreError::Corrupt(format!(
            "the database has schema version {newest} but this connector-host only knows \
             versions up to {latest}: the host is older than the database. Run a newer \
             connector-host, or restore a backup taken before the upgrade"
        ))),
        _ => Ok(()),
    }
}

/// Maps a rusqlite error onto the store's error kinds, naming what was being done.
pub(super) fn map_err(context: &str, e: rusqlite::Error) -> StoreError {
    use rusqlite::Error as E;
    match &e {
        E::SqliteFailure(failure, _) => match failure.code {
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
                StoreError::Unavailable(format!(
                    "{context}: the database is locked by another connection and stayed locked \
                 past the {} s busy timeout ({e}); retry later",
                    BUSY_TIMEOUT.as_secs()
                ))
            }
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => {
                StoreError::Corrupt(format!("{context}: {e}"))
            }
            ErrorCode::SystemIoFailure
            | ErrorCode::CannotOpen
            | ErrorCode::DiskFull
            | ErrorCode::ReadOnly
            | ErrorCode::PermissionDenied => {
                StoreError::Unavailable(format!("{context}: the database file cannot be used: {e}"))
            }
            // RAISE in a trigger.
            ErrorCode::ConstraintViolation
                if failure.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_TRIGGER =>
            {
                StoreError::Refused(format!("{context}: {e}"))
            }
            ErrorCode::ConstraintViolation => StoreError::Unavailable(format!(
                "{context}: the database rejected the write ({e}); a referenced unit or agent \
                 must be stored first"
            )),
            _ => StoreError::Unavailable(format!("{context}: {e}")),
        },
        E::FromSqlConversionFailure(..)
        | E::InvalidColumnType(..)
        | E::IntegralValueOutOfRange(..)
        | E::Utf8Error(..) => {
            StoreError::Corrupt(format!("{context}: a stored row is malformed: {e}"))
        }
        _ => StoreError::Unavailable(format!("{context}: {e}")),
    }
}

/// Upserts a grant, keeping its place (rowid) and its original `created_at`.
fn upsert_grant(tx: &Transaction<'_>, grant: &GrantRecord) -> rusqlite::Result<()> {
    let (kind, id) = subject_parts(&grant.subject);
    tx.execute(
        "INSERT INTO grants (subject_kind, subject_id, tool, namespace, provenance, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (subject_kind, subject_id, tool, provenance)
         DO UPDATE SET namespace = excluded.namespace",
        params![
            kind,
            id,
            grant.tool,
            grant.namespace,
            grant.provenance.to_string(),
            grant.created_at
        ],
    )?;
    Ok(())
}

fn load_snapshot(tx: &Transaction<'_>) -> StoreResult<Snapshot> {
    let op = "loading the stored state";
    let table =
        |columns: &str, table: &str| format!("SELECT {columns} FROM {table} ORDER BY rowid");
    let mut memberships = rows::Memberships::default();
    let sql = format!(
        "SELECT {} FROM agent_units ORDER BY agent_id, position",
        rows::MEMBERSHIP_COLUMNS
    );
    for row in select_all(tx, op, &sql, [], |r| rows::membership(r))? {
        memberships.push(row);
    }
    Ok(Snapshot {
        connectors: select_all(
            tx,
            op,
            &table(rows::CONNECTOR_COLUMNS, "connectors"),
            [],
            |r| rows::connector(r),
        )?,
        units: select_all(tx, op, &table(rows::UNIT_COLUMNS, "units"), [], |r| {
            rows::unit(r)
        })?,
        agents: select_all(tx, op, &rows::agents_sql("id"), [], |r| {
            rows::agent(r, &mut memberships)
        })?,
        bindings: select_all(tx, op, &table(rows::BINDING_COLUMNS, "bindings"), [], |r| {
            rows::binding(r)
        })?,
        grants: select_all(tx, op, &table(rows::GRANT_COLUMNS, "grants"), [], |r| {
            rows::grant(r)
        })?,
        image_tools: select_all(
            tx,
            op,
            &table(rows::IMAGE_TOOLS_COLUMNS, "image_tools"),
            [],
            |r| rows::image_tools(r),
        )?,
        version: read_state_version(tx).map_err(|e| map_err(op, e))?,
    })
}

#[async_trait]
impl StateStore for SqliteStore {
    async fn load(&self) -> StoreResult<Snapshot> {
        // A write transaction too: it gives one consistent view (the version included), and
        // the single connection is serialised anyway.
        self.write("load", load_snapshot).await
    }

    async fn component(&self, slug: &str, digest: &str) -> StoreResult<Option<Vec<u8>>> {
        let op = "reading a connector's component";
        let (slug, digest) = (slug.to_owned(), digest.to_owned());
        self.read(op, move |conn| {
            conn.query_row(
                "SELECT component FROM connectors WHERE slug = ?1 AND digest = ?2",
                [&slug, &digest],
                |r| r.get::<_, Vec<u8>>(0),
            )
            .optional()
            .map_err(|e| map_err(op, e))
        })
        .await
    }

    async fn write(&self, write: StateWrite<'_>, audit: Option<&AuditEntry>) -> StoreResult<bool> {
        let op = write.op();
        let records = WriteRecords::of(&write, audit)?;
        self.write_state(op, records, change_job(write)).await
    }

    /// Each write is a job of its own for the writer, sent together so that they share
    /// its group commits. The writer stops the batch at the first of them that ends not
    /// ok ([`writer::Batch`]) and answers the ones after it as not run.
    async fn write_batch(&self, writes: &[(StateWrite<'_>, &AuditEntry)]) -> Vec<BatchedWrite> {
        let batch = Arc::new(writer::Batch::default());
        let mut answers = Vec::with_capacity(writes.len());
        for (write, audit) in writes {
            let op = write.op();
            let sent = WriteRecords::of(write, Some(audit)).and_then(|records| {
                let change = audited(op, records.audit.cloned(), change_job(*write));
                let (reply, answer) = tokio::sync::oneshot::channel();
                let reply = move |out| {
                    let _ = reply.send(out);
                };
                let job = Job::batched(op, Some(records.change), Some(&batch), change, reply);
                self.send(op, job).map(|()| answer)
            });
            let failed = sent.is_err();
            answers.push((op, sent));
            if failed {
                break;
            }
        }
        let mut outcomes = Vec::with_capacity(writes.len());
        for (op, sent) in answers {
            let answered = match sent {
                Ok(answer) => writer_answer(op, answer).await,
                Err(e) => Err(e),
            };
            outcomes.push(match answered {
                Ok(Some(Ok(_))) => BatchedWrite::Committed,
                Ok(None) => BatchedWrite::NotRun,
                Ok(Some(Err(e))) | Err(e) => BatchedWrite::Failed(e),
            });
        }
        outcomes.resize(writes.len(), BatchedWrite::NotRun);
        outcomes
    }
}

/// A change to the state as one job for the writer thread (owned, so it can be sent
/// there): the statements of `write`, without the version bump and the records that
/// [`SqliteStore::write_state`] adds. `false`: a delete found nothing to delete.
type ChangeJob = Box<dyn FnOnce(&Transaction<'_>) -> StoreResult<bool> + Send>;

/// See [`ChangeJob`].
fn change_job(write: StateWrite<'_>) -> ChangeJob {
    let op = write.op();
    let db = move |e| map_err(op, e);
    match write {
        StateWrite::PutConnector(connector, component) => {
            let (c, component) = (connector.clone(), component.to_vec());
            Box::new(move |tx| write_connector(tx, &c, &component).map(|()| true))
        }
        StateWrite::DeleteConnector(slug) => {
            let slug = slug.to_owned();
            Box::new(move |tx| {
                tx.execute("DELETE FROM bindings WHERE connector = ?1", [&slug])
                    .map_err(db)?;
                tx.execute(
                    "DELETE FROM grants WHERE provenance = ?1",
                    [GrantProvenance::connector_text(&slug)],
                )
                .map_err(db)?;
                let n = tx
                    .execute("DELETE FROM connectors WHERE slug = ?1", [&slug])
                    .map_err(db)?;
                Ok(n > 0)
            })
        }
        StateWrite::RotateConnector {
            connector,
            component,
            kept,
            removed,
        } => {
            let c = connector.clone();
            let component = component.to_vec();
            let kept = kept.to_vec();
            let removed = removed.to_vec();
            Box::new(move |tx| {
                write_connector(tx, &c, &component)?;
                for unit in &removed {
                    remove_binding(tx, unit, &c.slug)?;
                }
                for (b, g) in &kept {
                    write_binding(tx, b, g)?;
                }
                Ok(true)
            })
        }
        StateWrite::PutUnit(unit) => {
            let u = unit.clone();
            Box::new(move |tx| {
                tx.execute(
                    "INSERT INTO units (id, parent, display_name, created_at) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (id) DO UPDATE SET
                         parent = excluded.parent,
                         display_name = excluded.display_name,
                         created_at = excluded.created_at",
                    params![u.id, u.parent, u.display_name, u.created_at],
                )
                .map_err(db)?;
                Ok(true)
            })
        }
        StateWrite::DeleteUnit(id) => {
            let id = id.to_owned();
            Box::new(move |tx| {
                tx.execute("DELETE FROM bindings WHERE unit_id = ?1", [&id])
                    .map_err(db)?;
                tx.execute("DELETE FROM agent_units WHERE unit_id = ?1", [&id])
                    .map_err(db)?;
                tx.execute(
                    "DELETE FROM grants WHERE subject_kind = 'unit' AND subject_id = ?1",
                    [&id],
                )
                .map_err(db)?;
                let n = tx
                    .execute("DELETE FROM units WHERE id = ?1", [&id])
                    .map_err(db)?;
                Ok(n > 0)
            })
        }
        StateWrite::PutAgent(agent) => {
            let a = agent.clone();
            Box::new(move |tx| {
                tx.execute(
                    "INSERT INTO agents (id, display_name, created_at, token_epoch)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (id) DO UPDATE SET
                         display_name = excluded.display_name,
                         created_at = excluded.created_at,
                         token_epoch = excluded.token_epoch",
                    params![a.id, a.display_name, a.created_at, a.token_epoch],
                )
                .map_err(db)?;
                tx.execute("DELETE FROM agent_units WHERE agent_id = ?1", [&a.id])
                    .map_err(db)?;
                let mut stmt = tx
                    .prepare(
                        "INSERT INTO agent_units (agent_id, unit_id, position) VALUES (?1, ?2, ?3)",
                    )
                    .map_err(db)?;
                for (position, unit) in a.units.iter().enumerate() {
                    stmt.execute(params![a.id, unit, position as i64])
                        .map_err(db)?;
                }
                Ok(true)
            })
        }
        StateWrite::DeleteAgent(id) => {
            let id = id.to_owned();
            Box::new(move |tx| {
                tx.execute("DELETE FROM agent_units WHERE agent_id = ?1", [&id])
                    .map_err(db)?;
                tx.execute("DELETE FROM image_tools WHERE agent_id = ?1", [&id])
                    .map_err(db)?;
                tx.execute(
                    "DELETE FROM grants WHERE subject_kind = 'agent' AND subject_id = ?1",
                    [&id],
                )
                .map_err(db)?;
                let n = tx
                    .execute("DELETE FROM agents WHERE id = ?1", [&id])
                    .map_err(db)?;
                Ok(n > 0)
            })
        }
        StateWrite::PutBinding(binding, grant) => {
            let (b, g) = (binding.clone(), grant.clone());
            Box::new(move |tx| write_binding(tx, &b, &g).map(|()| true))
        }
        StateWrite::DeleteBinding { unit, connector } => {
            let (unit, connector) = (unit.to_owned(), connector.to_owned());
            Box::new(move |tx| remove_binding(tx, &unit, &connector))
        }
        StateWrite::PutGrant(grant) => {
            let g = grant.clone();
            Box::new(move |tx| upsert_grant(tx, &g).map(|_| true).map_err(db))
        }
        StateWrite::DeleteGrant {
            subject,
            tool,
            provenance,
        } => {
            let subject = subject.clone();
            let tool = tool.to_owned();
            let provenance = provenance.to_string();
            Box::new(move |tx| {
                let (kind, id) = subject_parts(&subject);
                let n = tx
                    .execute(
                        "DELETE FROM grants
                         WHERE subject_kind = ?1 AND subject_id = ?2 AND tool = ?3 AND provenance = ?4",
                        params![kind, id, tool, provenance],
                    )
                    .map_err(db)?;
                Ok(n > 0)
            })
        }
        StateWrite::PutImageTools(record) => {
            let r = record.clone();
            Box::new(move |tx| {
                let tools = encode_json(op, &r.tools)?;
                tx.execute(
                    "INSERT INTO image_tools (agent_id, digest, tools) VALUES (?1, ?2, ?3)
                     ON CONFLICT (agent_id) DO UPDATE SET
                         digest = excluded.digest,
                         tools = excluded.tools",
                    params![r.agent_id, r.digest, tools],
                )
                .map_err(db)?;
                Ok(true)
            })
        }
    }
}

/// The state's reads off the writer.
impl SqliteStore {
    /// Runs the read `read` on a free reader (or the one whose turn it is, when all are
    /// busy), off the async threads (`op` names it in errors).
    async fn read<T: Send + 'static>(
        &self,
        op: &'static str,
        read: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let readers = &inner.readers;
            if readers.is_empty() {
                return read(&inner.conn.lock());
            }
            let free = readers.iter().find_map(|r| r.try_lock());
            let conn = free.unwrap_or_else(|| {
                let turn = inner.next_reader.fetch_add(1, Ordering::Relaxed);
                readers[turn % readers.len()].lock()
            });
            read(&conn)
        })
        .await
        .map_err(|e| {
            StoreError::Unavailable(format!("{op}: the database task did not finish: {e}"))
        })?
    }
}

#[async_trait]
impl DeliveryQueue for SqliteStore {
    async fn insert_delivery(
        &self,
        delivery: &DeliveryRecord,
        dedup_window_secs: i64,
        claim: &Claim,
        audit: Option<&AuditEntry>,
    ) -> StoreResult<bool> {
        let op = "insert_delivery";
        let d = delivery.clone();
        let claim = claim.clone();
        let audit = audit.cloned();
        // The immediate transaction makes the check and the insert one step for every
        // connection to the file.
        self.write(op, move |tx| {
            let stored = store_unless_recent(tx, op, &d, dedup_window_secs, Some(&claim))?;
            if stored {
                append_audit(tx, op, audit.into_iter().collect())?;
            }
            Ok(stored)
        })
        .await
    }

    async fn insert_routed_delivery(
        &self,
        delivery: &DeliveryRecord,
        messages: &[MessageRecord],
        routed_to: &[String],
        dedup_window_secs: i64,
        audit: Option<&AuditEntry>,
    ) -> StoreResult<Option<Vec<MessageRecord>>> {
        let op = "insert_routed_delivery";
        let d = DeliveryRecord {
            status: DeliveryStatus::Done,
            attempts: 1,
            error: None,
            routed_to: routed_to.to_vec(),
            claimed_by: None,
            claim_until: 0,
            ..delivery.clone()
        };
        let messages = messages.to_vec();
        let audit = audit.cloned();
        self.write(op, move |tx| {
            if !store_unless_recent(tx, op, &d, dedup_window_secs, None)? {
                return Ok(None);
            }
            let stored = append_messages(tx, op, messages)?;
            append_audit(tx, op, audit.into_iter().collect())?;
            Ok(Some(stored))
        })
        .await
    }

    async fn claim_deliveries(
        &self,
        claim: &Claim,
        now_unix: i64,
        scope: ClaimScope,
        limit: u32,
    ) -> StoreResult<Vec<DeliveryRecord>> {
        let claim = claim.clone();
        // One immediate transaction: no other connection can claim between the selection
        // and the update, so concurrent sweeps take turns and never share a row. A claim
        // still holds during its `until` second; it has lapsed once `now` is past it.
        self.write("claim_deliveries", move |tx| {
            let db = |e| map_err("claim_deliveries", e);
            let filter = match scope {
                ClaimScope::Sweep => {
                    "status = 'pending' AND (claimed_by IS NULL OR claim_until < ?1)"
                }
                ClaimScope::Startup => {
                    "status IN ('pending', 'failed')
                     AND (claimed_by IS NULL OR claim_until < ?1 OR claimed_by = ?2)"
                }
            };
            let sql = format!(
                "SELECT {} FROM deliveries WHERE {filter} ORDER BY received_unix, rowid LIMIT ?3",
                rows::DELIVERY_COLUMNS
            );
            let found = select_all(
                tx,
                "claim_deliveries",
                &sql,
                params![now_unix, claim.owner, limit],
                |r| rows::delivery(r),
            )?;
            let mut update = tx
                .prepare_cached(
                    "UPDATE deliveries SET claimed_by = ?1, claim_until = ?2
                     WHERE connector = ?3 AND delivery_id = ?4",
                )
                .map_err(db)?;
            let mut claimed = Vec::with_capacity(found.len());
            for mut delivery in found {
                update
                    .execute(params![
                        claim.owner,
                        claim.until_unix,
                        delivery.connector,
                        delivery.delivery_id
                    ])
                    .map_err(db)?;
                delivery.claimed_by = Some(claim.owner.clone());
                delivery.claim_until = claim.until_unix;
                claimed.push(delivery);
            }
            Ok(claimed)
        })
        .await
    }

    async fn complete_delivery(
        &self,
        connector: &str,
        delivery_id: &str,
        messages: &[MessageRecord],
        routed_to: &[String],
        audit: Option<&AuditEntry>,
    ) -> StoreResult<Option<Vec<MessageRecord>>> {
        let connector = connector.to_owned();
        let delivery_id = delivery_id.to_owned();
        let messages = messages.to_vec();
        let audit = audit.cloned();
        let routed = encode_json("complete_delivery", &routed_to)?;
        self.write("complete_delivery", move |tx| {
            let db = |e| map_err("complete_delivery", e);
            let status: Option<String> = tx
                .query_row(
                    "SELECT status FROM deliveries WHERE connector = ?1 AND delivery_id = ?2",
                    [&connector, &delivery_id],
                    |r| r.get(0),
                )
                .optional()
                .map_err(db)?;
            if status.as_deref() == Some("done") {
                return Ok(None);
            }
            let stored = append_messages(tx, "complete_delivery", messages)?;
            tx.execute(
                "UPDATE deliveries SET status = 'done', error = NULL, attempts = attempts + 1, routed_to = ?3,
                     claimed_by = NULL, claim_until = 0
                 WHERE connector = ?1 AND delivery_id = ?2",
                params![connector, delivery_id, routed],
            )
            .map_err(db)?;
            append_audit(tx, "complete_delivery", audit.into_iter().collect())?;
            Ok(Some(stored))
        })
        .await
    }

    async fn fail_delivery(
        &self,
        connector: &str,
        delivery_id: &str,
        error: &str,
    ) -> StoreResult<()> {
        let (connector, delivery_id, error) = (
            connector.to_owned(),
            delivery_id.to_owned(),
            error.to_owned(),
        );
        self.write("fail_delivery", move |tx| {
            tx.execute(
                "UPDATE deliveries SET status = 'failed', error = ?3, attempts = attempts + 1,
                     claimed_by = NULL, claim_until = 0
                 WHERE connector = ?1 AND delivery_id = ?2 AND status != 'done'",
                params![connector, delivery_id, error],
            )
            .map_err(|e| map_err("fail_delivery", e))?;
            Ok(())
        })
        .await
    }

    async fn delivery(
        &self,
        connector: &str,
        delivery_id: &str,
    ) -> StoreResult<Option<DeliveryRecord>> {
        let (connector, delivery_id) = (connector.to_owned(), delivery_id.to_owned());
        self.read("delivery", move |conn| {
            let sql = format!(
                "SELECT {} FROM deliveries WHERE connector = ?1 AND delivery_id = ?2",
                rows::DELIVERY_COLUMNS
            );
            let found = select_all(conn, "delivery", &sql, [&connector, &delivery_id], |r| {
                rows::delivery(r)
            })?;
            Ok(found.into_iter().next())
        })
        .await
    }

    async fn unfinished_deliveries(&self) -> StoreResult<Vec<DeliveryRecord>> {
        self.read("unfinished_deliveries", move |conn| {
            let sql = format!(
                "SELECT {} FROM deliveries WHERE status != 'done' ORDER BY received_unix, rowid",
                rows::DELIVERY_COLUMNS
            );
            select_all(conn, "unfinished_deliveries", &sql, [], |r| {
                rows::delivery(r)
            })
        })
        .await
    }

    async fn prune_deliveries(&self, before_unix: i64) -> StoreResult<u64> {
        self.write("prune_deliveries", move |tx| {
            let n = tx
                .execute(
                    "DELETE FROM deliveries WHERE status = 'done' AND received_unix < ?1",
                    [before_unix],
                )
                .map_err(|e| map_err("prune_deliveries", e))?;
            Ok(n as u64)
        })
        .await
    }

    fn commit_counts(&self) -> CommitCounts {
        CommitCounts {
            commits: self.inner.commits.load(Ordering::Relaxed),
            writes: self.inner.writes.load(Ordering::Relaxed),
        }
    }

    async fn deliveries_of(&self, connector: &str, limit: u32) -> StoreResult<Vec<DeliveryRecord>> {
        let connector = connector.to_owned();
        self.read("deliveries_of", move |conn| {
            // The body is left out: an operator's list never holds megabytes of payloads.
            let sql = format!(
                "SELECT {} FROM deliveries WHERE connector = ?1
                 ORDER BY received_unix DESC, rowid DESC LIMIT ?2",
                rows::DELIVERY_COLUMNS.replace(" body,", " X'' AS body,")
            );
            select_all(
                conn,
                "deliveries_of",
                &sql,
                params![connector, i64::from(limit)],
                |r| rows::delivery(r),
            )
        })
        .await
    }

    async fn deliveries_with_status(
        &self,
        connector: &str,
        status: DeliveryStatus,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> StoreResult<Vec<DeliveryRecord>> {
        let connector = connector.to_owned();
        let after = after.map(|(at, id)| (at, id.to_owned()));
        self.read("deliveries_with_status", move |conn| {
            let columns = rows::DELIVERY_COLUMNS.replace(" body,", " X'' AS body,");
            let limit = i64::from(limit);
            match &after {
                None => select_all(
                    conn,
                    "deliveries_with_status",
                    &format!(
                        "SELECT {columns} FROM deliveries WHERE connector = ?1 AND status = ?2
                         ORDER BY received_unix DESC, delivery_id DESC LIMIT ?3"
                    ),
                    params![connector, status.as_str(), limit],
                    |r| rows::delivery(r),
                ),
                Some((at, id)) => select_all(
                    conn,
                    "deliveries_with_status",
                    &format!(
                        "SELECT {columns} FROM deliveries WHERE connector = ?1 AND status = ?2
                           AND (received_unix < ?3 OR (received_unix = ?3 AND delivery_id < ?4))
                         ORDER BY received_unix DESC, delivery_id DESC LIMIT ?5"
                    ),
                    params![connector, status.as_str(), at, id, limit],
                    |r| rows::delivery(r),
                ),
            }
        })
        .await
    }
}

#[async_trait]
impl InboxStore for SqliteStore {
    async fn messages(
        &self,
        unit_id: &str,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<MessageRecord>> {
        let unit_id = unit_id.to_owned();
        self.read("messages", move |conn| {
            let sql = format!(
                "SELECT {} FROM messages WHERE unit_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                rows::MESSAGE_COLUMNS
            );
            select_all(
                conn,
                "messages",
                &sql,
                params![unit_id, after, limit],
                |r| rows::message(r),
            )
        })
        .await
    }

    async fn messages_newest_first(
        &self,
        unit_id: &str,
        before: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<MessageRecord>> {
        let unit_id = unit_id.to_owned();
        self.read("messages_newest_first", move |conn| {
            // `messages_by_unit (unit_id, seq)` read backwards from `before`.
            let sql = format!(
                "SELECT {} FROM messages WHERE unit_id = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3",
                rows::MESSAGE_COLUMNS
            );
            select_all(
                conn,
                "messages_newest_first",
                &sql,
                params![unit_id, before.unwrap_or(i64::MAX), limit],
                |r| rows::message(r),
            )
        })
        .await
    }

    async fn last_message_cursor(&self, unit_id: &str) -> StoreResult<i64> {
        let unit_id = unit_id.to_owned();
        self.read("last_message_cursor", move |conn| {
            conn.prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM messages WHERE unit_id = ?1")
                .and_then(|mut s| s.query_row(params![unit_id], |r| r.get::<_, i64>(0)))
                .map_err(|e| map_err("last_message_cursor", e))
        })
        .await
    }
}

#[async_trait]
impl SecretStore for SqliteStore {
    async fn shared_secret(&self, name: &str, candidate: &str) -> StoreResult<String> {
        let (name, candidate) = (name.to_owned(), candidate.to_owned());
        self.write("shared_secret", move |tx| {
            let db = |e| map_err("shared_secret", e);
            tx.execute(
                "INSERT OR IGNORE INTO host_secrets (name, value) VALUES (?1, ?2)",
                [&name, &candidate],
            )
            .map_err(db)?;
            tx.query_row(
                "SELECT value FROM host_secrets WHERE name = ?1",
                [&name],
                |r| r.get(0),
            )
            .map_err(db)
        })
        .await
    }
}

#[async_trait]
impl ReplicaCoordination for SqliteStore {
    async fn changes_since(&self, applied: i64) -> StoreResult<StateCheck> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let conn = inner.conn.lock();
            let version = read_state_version(&conn).map_err(|e| map_err("changes_since", e))?;
            let mut own = inner.own_versions.lock();
            own.prune(applied);
            // Every version in (applied, version] was produced by exactly one committed
            // write; all of them are ours iff we remember that many.
            let foreign = version > applied && own.count_in(applied, version) < version - applied;
            Ok(StateCheck { version, foreign })
        })
        .await
        .map_err(|e| {
            StoreError::Unavailable(format!(
                "changes_since: the database task did not finish: {e}"
            ))
        })?
    }

    async fn foreign_writes(
        &self,
        applied: i64,
        upto: i64,
    ) -> StoreResult<Option<Vec<LoggedWrite>>> {
        let op = "reading the change log";
        let found = self
            .read(op, move |conn| {
                select_all(
                    conn,
                    op,
                    "SELECT version, change FROM state_changes
                     WHERE version > ?1 AND version <= ?2 ORDER BY version",
                    [applied, upto],
                    |r| {
                        let db = |e| map_err(op, e);
                        Ok((r.get(0).map_err(db)?, r.get(1).map_err(db)?))
                    },
                )
            })
            .await?;
        let own = self.inner.own_versions.lock();
        if applied < own.forgotten_through {
            return Ok(None);
        }
        crate::foreign_entries(found, applied, upto, |v| own.contains(v))
    }

    async fn prune_changes(&self, upto: i64) -> StoreResult<u64> {
        self.write("prune_changes", move |tx| {
            prune_changes(tx, upto)
                .map(|n| n as u64)
                .map_err(|e| map_err("prune_changes", e))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use connector_store_testing::fixtures::*;

    use serde_json::json;

    #[test]
    fn own_versions_keep_runs_and_count_within_a_range() {
        let mut own = OwnVersions::default();
        for v in [3, 4, 5, 7, 9, 8, 1] {
            own.insert(v);
        }
        own.insert(4);
        assert_eq!(
            own.runs.iter().map(|(s, e)| (*s, *e)).collect::<Vec<_>>(),
            [(1, 1), (3, 5), (7, 9)]
        );
        assert_eq!(own.count_in(0, 9), 7);
        assert_eq!(own.count_in(2, 5), 3);
        assert_eq!(own.count_in(4, 8), 3);
        assert_eq!(own.count_in(9, 20), 0);

        own.remove(8);
        assert_eq!(own.count_in(6, 9), 2);
        own.remove(6);
        own.insert(6);
        own.insert(8);
        assert_eq!(
            own.runs.iter().map(|(s, e)| (*s, *e)).collect::<Vec<_>>(),
            [(1, 1), (3, 9)]
        );

        own.prune(4);
        assert_eq!(
            own.runs.iter().map(|(s, e)| (*s, *e)).collect::<Vec<_>>(),
            [(5, 9)]
        );
        own.prune(100);
        assert!(own.runs.is_empty());
    }

    #[test]
    fn own_versions_forget_the_oldest_runs_past_the_cap() {
        let mut own = OwnVersions::default();
        // Every other version: one run each.
        for i in 0..(OWN_VERSION_RUNS as i64 + 10) {
            own.insert(2 * i);
        }
        assert_eq!(own.runs.len(), OWN_VERSION_RUNS);
        // The oldest are forgotten (they would look foreign), the newest kept.
        assert_eq!(own.count_in(-1, 18), 0);
        assert_eq!(own.count_in(-1, 20), 1);
        assert!(!own.contains(18) && own.contains(20) && !own.contains(21));
        assert_eq!(own.forgotten_through, 18);
    }

    /// A handle that forgot whether versions were its own cannot tell which of them to
    /// replay: it answers "reload" for a range starting before them.
    #[tokio::test]
    async fn a_handle_that_forgot_its_own_versions_reads_no_change_log_before_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.db");
        let (ours, theirs) = (
            SqliteStore::open(&path).unwrap(),
            SqliteStore::open(&path).unwrap(),
        );
        ours.put_unit(&unit("u1", None)).await.unwrap();
        theirs.put_unit(&unit("u2", None)).await.unwrap();
        assert_eq!(
            ours.foreign_writes(0, 2).await.unwrap().map(|w| w.len()),
            Some(1)
        );
        ours.inner.own_versions.lock().forgotten_through = 1;
        assert_eq!(ours.foreign_writes(0, 2).await.unwrap(), None);
        assert_eq!(
            ours.foreign_writes(1, 2).await.unwrap().map(|w| w.len()),
            Some(1)
        );
    }

    #[tokio::test]
    async fn a_single_writer_remembers_one_run() {
        let store = SqliteStore::open_in_memory().unwrap();
        for i in 0..50 {
            store.put_unit(&unit(&format!("u{i}"), None)).await.unwrap();
        }
        assert_eq!(store.inner.own_versions.lock().runs.len(), 1);
        let check = store.changes_since(0).await.unwrap();
        assert_eq!(
            check,
            StateCheck {
                version: 50,
                foreign: false
            }
        );
        // A check forgets what it has covered.
        store.changes_since(40).await.unwrap();
        assert_eq!(store.inner.own_versions.lock().count_in(0, 50), 10);
        store.changes_since(50).await.unwrap();
        assert!(store.inner.own_versions.lock().runs.is_empty());
    }

    #[tokio::test]
    async fn the_writer_keeps_savepoint_journals_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("host.db")).unwrap();
        // 2 = MEMORY: the sub-journal of a group's savepoints never spills to a file.
        let temp_store: i64 = store
            .inner
            .conn
            .lock()
            .pragma_query_value(None, "temp_store", |r| r.get(0))
            .unwrap();
        assert_eq!(temp_store, 2);
    }

    #[tokio::test]
    async fn a_locked_database_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.db");
        let store = SqliteStore::open(&path).unwrap();
        store
            .inner
            .conn
            .lock()
            .busy_timeout(Duration::from_millis(50))
            .unwrap();
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();

        let err = store.put_unit(&unit("a", None)).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Unavailable(ref m) if m.contains("locked")),
            "{err:?}"
        );

        other.execute_batch("ROLLBACK").unwrap();
        store.put_unit(&unit("a", None)).await.unwrap();
    }

    fn migration_rows(path: &Path) -> Vec<(i64, String)> {
        let conn = Connection::open(path).unwrap();
        let mut stmt = conn
            .prepare("SELECT version, applied_at FROM schema_migrations ORDER BY version")
            .unwrap();
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
        rows.collect::<rusqlite::Result<_>>().unwrap()
    }

    #[tokio::test]
    async fn reopening_a_file_keeps_data_and_does_not_reapply_migrations() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested").join("deeper").join("host.db");

        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.path(), Some(path.as_path()));
        store
            .put_connector(&connector("acme", "acme", "sha256:aa"), COMPONENT)
            .await
            .unwrap();
        store.put_unit(&unit("team", None)).await.unwrap();
        store
            .put_binding(
                &binding("team", "acme", json!({"k": 1})),
                &connector_grant("team", "acme", "acme"),
            )
            .await
            .unwrap();
        store.put_agent(&agent("bot", &["team"])).await.unwrap();
        let before = store.load().await.unwrap();
        let journal: String = store
            .inner
            .conn
            .lock()
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(journal.to_ascii_lowercase(), "wal");
        drop(store);

        let migrations = migration_rows(&path);
        assert_eq!(
            migrations.iter().map(|(v, _)| *v).collect::<Vec<_>>(),
            (1..=latest_version()).collect::<Vec<_>>()
        );

        let reopened = SqliteStore::open(&path).unwrap();
        assert_eq!(reopened.load().await.unwrap(), before);
        drop(reopened);
        // Same rows, same applied_at: nothing was applied again.
        assert_eq!(migration_rows(&path), migrations);

        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
        }
    }

    #[tokio::test]
    async fn a_schema_2_database_gains_claims_the_version_and_secrets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL);
                 INSERT INTO schema_migrations VALUES (1, '2025-01-01T00:00:00Z'), (2, '2025-01-01T00:00:00Z');",
            )
            .unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            conn.execute_batch(MIGRATIONS[1]).unwrap();
            conn.execute_batch(
                "INSERT INTO units (id, created_at) VALUES ('team', '2025-01-02T00:00:00Z');
                 INSERT INTO deliveries (connector, delivery_id, headers, body, received_unix, received_at, status)
                 VALUES ('acme', 'old', '[]', x'7b7d', 5, '2025-01-06T00:00:00Z', 'pending');",
            )
            .unwrap();
        }

        let store = SqliteStore::open(&path).unwrap();
        let old = store.delivery("acme", "old").await.unwrap().unwrap();
        assert_eq!((old.claimed_by, old.claim_until), (None, 0));
        // Never claimed, so anyone's sweep takes it.
        let taken = store
            .claim_deliveries(
                &Claim {
                    owner: "a".into(),
                    until_unix: 100,
                },
                10,
                ClaimScope::Sweep,
                10,
            )
            .await
            .unwrap();
        assert_eq!(taken.len(), 1);
        let snap = store.load().await.unwrap();
        assert_eq!((snap.units.len(), snap.version), (1, 0));
        assert_eq!(store.shared_secret("k", "v").await.unwrap(), "v");
        drop(store);
        assert_eq!(
            migration_rows(&path)
                .iter()
                .map(|(v, _)| *v)
                .collect::<Vec<_>>(),
            (1..=latest_version()).collect::<Vec<_>>()
        );
    }

    #[tokio::test]
    async fn a_database_from_a_newer_host_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.db");
        drop(SqliteStore::open(&path).unwrap());
        let future = latest_version() + 1;
        Connection::open(&path)
            .unwrap()
            .execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES (?1, '2030-01-01T00:00:00Z')",
                [future],
            )
            .unwrap();

        let err = SqliteStore::open(&path).unwrap_err();
        match err {
            StoreError::Corrupt(message) => {
                assert!(message.contains("older than the database"), "{message}");
                assert!(message.contains(&future.to_string()), "{message}");
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_file_that_is_not_a_database_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.db");
        std::fs::write(
            &path,
            b"this is certainly not an SQLite database file, not at all....",
        )
        .unwrap();
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    }

    #[tokio::test]
    async fn open_store_understands_sqlite_urls() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data").join("host.db");
        let url = format!("sqlite://{}", path.display());
        let store = crate::open_store(&url).unwrap();
        store.put_unit(&unit("a", None)).await.unwrap();
        drop(store);
        assert!(path.exists());
        let again = crate::open_store(&format!("sqlite:{}", path.display())).unwrap();
        assert_eq!(again.load().await.unwrap().units, vec![unit("a", None)]);

        for memory in ["sqlite::memory:", "sqlite://:memory:"] {
            let store = crate::open_store(memory).unwrap();
            assert_eq!(store.load().await.unwrap(), Snapshot::default());
        }

        for bad in [
            "postgres://user:hunter2@db/host",
            "sqlite://",
            "sqlite://x.db?mode=ro",
            "host.db",
        ] {
            match crate::open_store(bad) {
                Err(StoreError::Unavailable(m)) => assert!(!m.contains("hunter2"), "{m}"),
                Err(other) => panic!("{bad}: {other:?}"),
                Ok(_) => panic!("{bad} was accepted"),
            }
        }
    }
}
