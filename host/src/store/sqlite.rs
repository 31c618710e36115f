//! The default [`Store`]: one SQLite database file (`<data_dir>/host.db`).
//!
//! - One writer connection behind a mutex; every trait method runs on
//!   [`tokio::task::spawn_blocking`] as one `BEGIN IMMEDIATE` transaction, so a failure
//!   (or an injected [`FailPoint`]) anywhere in it rolls the whole change back.
//! - WAL journal, `synchronous=NORMAL`, `foreign_keys=ON`, a busy timeout of
//!   [`BUSY_TIMEOUT`]. A database locked for longer than that is reported as
//!   [`StoreError::Unavailable`].
//! - The schema is versioned: [`MIGRATIONS`] are applied in order at open, one transaction
//!   each, and recorded in `schema_migrations(version, applied_at)`. A database that has a
//!   version this host does not know (it was written by a newer host) is refused with
//!   [`StoreError::Corrupt`] rather than silently misread.
//! - [`Store::load`] returns units, agents, bindings, grants, connectors and image tools in
//!   the order they were first written (upserts keep a row's place) and each agent's units
//!   in their given order.
//!
//! Referential rules enforced by the schema: a binding needs a stored unit, agent
//! memberships and image tools need a stored agent. A binding's connector, a unit's parent
//! and an agent's unit ids are not enforced here (the caller checks them); deleting a unit
//! leaves agents' memberships of it alone, like its children.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use rusqlite::{
    params, Connection, ErrorCode, OptionalExtension, Transaction, TransactionBehavior,
};
use serde_json::Value;

use super::{
    AgentRecord, BindingRecord, ConnectorRecord, DeliveryRecord, DeliveryStatus, FailPoint,
    GrantRecord, ImageToolsRecord, MessageRecord, Snapshot, Store, StoreError, StoreResult,
    Subject, UnitRecord,
};

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
];

/// The newest schema version this host knows.
fn latest_version() -> i64 {
    // The list is tiny; the cast cannot truncate.
    MIGRATIONS.len() as i64
}

/// The state shared with the blocking tasks.
struct Inner {
    conn: Mutex<Connection>,
    fail_point: Mutex<Option<FailPoint>>,
}

impl Inner {
    /// Fails (and disarms) if `point` is the armed fault.
    fn trip(&self, point: FailPoint) -> StoreResult<()> {
        let mut armed = self.fail_point.lock();
        if *armed == Some(point) {
            *armed = None;
            return Err(StoreError::Injected(point));
        }
        Ok(())
    }
}

/// A [`Store`] in one SQLite database. Cheap to clone (clones share the connection).
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
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
        let conn = Connection::open(path)
            .map_err(|e| map_err(&format!("opening the database {}", path.display()), e))?;
        Self::init(conn, Some(path.to_path_buf()))
    }

    /// A fresh database that lives in memory only (tests, throw-away hosts).
    pub fn open_in_memory() -> StoreResult<Self> {
        let conn = Connection::open_in_memory()
            .map_err(|e| map_err("opening an in-memory database", e))?;
        Self::init(conn, None)
    }

    /// The database file, `None` for an in-memory database.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn init(mut conn: Connection, path: Option<PathBuf>) -> StoreResult<Self> {
        configure(&conn, path.is_some())?;
        migrate(&mut conn)?;
        Ok(Self {
            inner: Arc::new(Inner {
                conn: Mutex::new(conn),
                fail_point: Mutex::new(None),
            }),
            path,
        })
    }

    /// Runs `f` in one immediate (write) transaction on a blocking thread; commits if it
    /// returns `Ok`, rolls back otherwise.
    async fn write<T, F>(&self, op: &'static str, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>, &Inner) -> StoreResult<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let mut conn = inner.conn.lock();
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| map_err(op, e))?;
            let out = f(&tx, &inner)?;
            tx.commit().map_err(|e| map_err(op, e))?;
            Ok(out)
        })
        .await
        .map_err(|e| {
            StoreError::Unavailable(format!("{op}: the database task did not finish: {e}"))
        })?
    }
}

const DELIVERY_COLUMNS: &str = "SELECT connector, delivery_id, event, headers, body, received_unix, received_at, status, attempts, error, routed_to FROM deliveries";

type DeliveryRow = (
    String,
    String,
    Option<String>,
    String,
    Vec<u8>,
    i64,
    String,
    String,
    u32,
    Option<String>,
    String,
);

fn read_delivery_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<DeliveryRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
        r.get(9)?,
        r.get(10)?,
    ))
}

fn decode_delivery(row: DeliveryRow) -> StoreResult<DeliveryRecord> {
    let (
        connector,
        delivery_id,
        event,
        headers,
        body,
        received_unix,
        received_at,
        status,
        attempts,
        error,
        routed_to,
    ) = row;
    let status = match status.as_str() {
        "pending" => DeliveryStatus::Pending,
        "done" => DeliveryStatus::Done,
        "failed" => DeliveryStatus::Failed,
        other => {
            return Err(StoreError::Corrupt(format!(
                "delivery {delivery_id} has unknown status `{other}`"
            )))
        }
    };
    Ok(DeliveryRecord {
        headers: decode_json("delivery headers", &headers)?,
        routed_to: decode_json("delivery routed_to", &routed_to)?,
        connector,
        delivery_id,
        event,
        body,
        received_unix,
        received_at,
        status,
        attempts,
        error,
    })
}

/// Upserts a connector and re-derives its `connector:<slug>` grants (inside `tx`).
fn write_connector(tx: &Transaction<'_>, inner: &Inner, c: &ConnectorRecord) -> StoreResult<()> {
    let db = |e| map_err("put_connector", e);
    tx.execute(
        "INSERT INTO connectors (slug, namespace, digest, component, bundled, installed_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (slug) DO UPDATE SET
             namespace = excluded.namespace,
             digest = excluded.digest,
             component = excluded.component,
             bundled = excluded.bundled,
             installed_at = excluded.installed_at",
        params![
            c.slug,
            c.namespace,
            c.digest,
            c.component,
            c.bundled,
            c.installed_at
        ],
    )
    .map_err(db)?;
    inner.trip(FailPoint::AfterConnectorWrite)?;
    // Several grants of one subject collapsing onto `<ns>.*` keep one row.
    tx.execute(
        "UPDATE OR REPLACE grants SET tool = ?1, namespace = ?2 WHERE provenance = ?3",
        params![
            format!("{}.*", c.namespace),
            c.namespace,
            connector_provenance(&c.slug)
        ],
    )
    .map_err(db)?;
    Ok(())
}

/// Upserts a binding and its grant (inside `tx`).
fn write_binding(
    tx: &Transaction<'_>,
    inner: &Inner,
    b: &BindingRecord,
    g: &GrantRecord,
) -> StoreResult<()> {
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
    inner.trip(FailPoint::AfterBindingWrite)?;
    upsert_grant(tx, g).map_err(db)?;
    Ok(())
}

/// Deletes a binding and the unit's grants it wrote (inside `tx`).
fn remove_binding(
    tx: &Transaction<'_>,
    inner: &Inner,
    unit_id: &str,
    connector: &str,
) -> StoreResult<bool> {
    let db = |e| map_err("delete_binding", e);
    let n = tx
        .execute(
            "DELETE FROM bindings WHERE unit_id = ?1 AND connector = ?2",
            [unit_id, connector],
        )
        .map_err(db)?;
    inner.trip(FailPoint::AfterBindingDelete)?;
    tx.execute(
        "DELETE FROM grants
         WHERE subject_kind = 'unit' AND subject_id = ?1 AND provenance = ?2",
        [unit_id, &connector_provenance(connector)],
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
    Ok(())
}

/// Applies every migration the database lacks, one transaction each.
fn migrate(conn: &mut Connection) -> StoreResult<()> {
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
    for (index, sql) in MIGRATIONS.iter().enumerate() {
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
            params![version, now_rfc3339()],
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

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Maps a rusqlite error onto the store's error kinds, naming what was being done.
fn map_err(context: &str, e: rusqlite::Error) -> StoreError {
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

fn subject_parts(subject: &Subject) -> (&'static str, &str) {
    match subject {
        Subject::Unit(id) => ("unit", id),
        Subject::Agent(id) => ("agent", id),
    }
}

fn connector_provenance(slug: &str) -> String {
    format!("connector:{slug}")
}

fn encode_json<T: serde::Serialize>(context: &str, value: &T) -> StoreResult<String> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::Unavailable(format!("{context}: cannot encode JSON: {e}")))
}

fn decode_json<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> StoreResult<T> {
    serde_json::from_str(text).map_err(|e| {
        StoreError::Corrupt(format!(
            "{what} is not valid JSON of the expected shape: {e}"
        ))
    })
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
            grant.provenance,
            grant.created_at
        ],
    )?;
    Ok(())
}

fn load_snapshot(tx: &Transaction<'_>) -> StoreResult<Snapshot> {
    let ctx = "loading the stored state";
    let db = |e| map_err(ctx, e);

    let mut stmt = tx
        .prepare(
            "SELECT slug, namespace, digest, component, bundled, installed_at
             FROM connectors ORDER BY rowid",
        )
        .map_err(db)?;
    let connectors = stmt
        .query_map([], |row| {
            Ok(ConnectorRecord {
                slug: row.get(0)?,
                namespace: row.get(1)?,
                digest: row.get(2)?,
                component: row.get(3)?,
                bundled: row.get(4)?,
                installed_at: row.get(5)?,
            })
        })
        .map_err(db)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db)?;

    let mut stmt = tx
        .prepare("SELECT id, parent, display_name, created_at FROM units ORDER BY rowid")
        .map_err(db)?;
    let units = stmt
        .query_map([], |row| {
            Ok(UnitRecord {
                id: row.get(0)?,
                parent: row.get(1)?,
                display_name: row.get(2)?,
                created_at: row.get(3)?,
            })
        })
        .map_err(db)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db)?;

    let mut memberships: HashMap<String, Vec<String>> = HashMap::new();
    let mut stmt = tx
        .prepare("SELECT agent_id, unit_id FROM agent_units ORDER BY agent_id, position")
        .map_err(db)?;
    let rows = stmt
        .query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
        })
        .map_err(db)?;
    for row in rows {
        let (agent, unit) = row.map_err(db)?;
        memberships.entry(agent).or_default().push(unit);
    }
    let mut stmt = tx
        .prepare("SELECT id, display_name, created_at FROM agents ORDER BY rowid")
        .map_err(db)?;
    let agents = stmt
        .query_map([], |row| {
            Ok(AgentRecord {
                id: row.get(0)?,
                units: Vec::new(),
                display_name: row.get(1)?,
                created_at: row.get(2)?,
            })
        })
        .map_err(db)?
        .map(|row| {
            row.map(|mut agent| {
                agent.units = memberships.remove(&agent.id).unwrap_or_default();
                agent
            })
        })
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db)?;

    let mut stmt = tx
        .prepare(
            "SELECT unit_id, connector, config, routing_keys, bound_at
             FROM bindings ORDER BY rowid",
        )
        .map_err(db)?;
    let raw_bindings = stmt
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
                row.get::<_, String>(4)?,
            ))
        })
        .map_err(db)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db)?;
    let mut bindings = Vec::with_capacity(raw_bindings.len());
    for (unit_id, connector, config, routing_keys, bound_at) in raw_bindings {
        let what = format!("the binding of {connector} to unit {unit_id}");
        let config: Value = decode_json(&format!("the config of {what}"), &config)?;
        let routing_keys: Vec<String> =
            decode_json(&format!("the routing keys of {what}"), &routing_keys)?;
        bindings.push(BindingRecord {
            unit_id,
            connector,
            config,
            routing_keys,
            bound_at,
        });
    }

    let mut stmt = tx
        .prepare(
            "SELECT subject_kind, subject_id, tool, namespace, provenance, created_at
             FROM grants ORDER BY rowid",
        )
        .map_err(db)?;
    let raw_grants = stmt
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
                row.get::<_, String>(4)?,
                row.get::<_, String>(5)?,
            ))
        })
        .map_err(db)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db)?;
    let mut grants = Vec::with_capacity(raw_grants.len());
    for (kind, id, tool, namespace, provenance, created_at) in raw_grants {
        let subject = match kind.as_str() {
            "unit" => Subject::Unit(id),
            "agent" => Subject::Agent(id),
            other => {
                return Err(StoreError::Corrupt(format!(
                    "a grant of {tool} has the unknown subject kind {other:?}"
                )))
            }
        };
        grants.push(GrantRecord {
            subject,
            tool,
            namespace,
            provenance,
            created_at,
        });
    }

    let mut stmt = tx
        .prepare("SELECT agent_id, digest, tools FROM image_tools ORDER BY rowid")
        .map_err(db)?;
    let raw_images = stmt
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
            ))
        })
        .map_err(db)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db)?;
    let mut image_tools = Vec::with_capacity(raw_images.len());
    for (agent_id, digest, tools) in raw_images {
        let tools: Value = decode_json(&format!("the image tools of agent {agent_id}"), &tools)?;
        image_tools.push(ImageToolsRecord {
            agent_id,
            digest,
            tools,
        });
    }

    Ok(Snapshot {
        connectors,
        units,
        agents,
        bindings,
        grants,
        image_tools,
    })
}

#[async_trait]
impl Store for SqliteStore {
    async fn load(&self) -> StoreResult<Snapshot> {
        // A write transaction too: it gives one consistent view, and the single connection
        // is serialised anyway.
        self.write("load", |tx, _| load_snapshot(tx)).await
    }

    async fn put_connector(&self, connector: &ConnectorRecord) -> StoreResult<()> {
        let c = connector.clone();
        self.write("put_connector", move |tx, inner| {
            write_connector(tx, inner, &c)
        })
        .await
    }

    async fn delete_connector(&self, slug: &str) -> StoreResult<bool> {
        let slug = slug.to_owned();
        self.write("delete_connector", move |tx, _| {
            let db = |e| map_err("delete_connector", e);
            tx.execute("DELETE FROM bindings WHERE connector = ?1", [&slug])
                .map_err(db)?;
            tx.execute(
                "DELETE FROM grants WHERE provenance = ?1",
                [connector_provenance(&slug)],
            )
            .map_err(db)?;
            let n = tx
                .execute("DELETE FROM connectors WHERE slug = ?1", [&slug])
                .map_err(db)?;
            Ok(n > 0)
        })
        .await
    }

    async fn put_unit(&self, unit: &UnitRecord) -> StoreResult<()> {
        let u = unit.clone();
        self.write("put_unit", move |tx, _| {
            tx.execute(
                "INSERT INTO units (id, parent, display_name, created_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (id) DO UPDATE SET
                     parent = excluded.parent,
                     display_name = excluded.display_name,
                     created_at = excluded.created_at",
                params![u.id, u.parent, u.display_name, u.created_at],
            )
            .map_err(|e| map_err("put_unit", e))?;
            Ok(())
        })
        .await
    }

    async fn delete_unit(&self, id: &str) -> StoreResult<bool> {
        let id = id.to_owned();
        self.write("delete_unit", move |tx, _| {
            let db = |e| map_err("delete_unit", e);
            tx.execute("DELETE FROM bindings WHERE unit_id = ?1", [&id])
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
        .await
    }

    async fn put_agent(&self, agent: &AgentRecord) -> StoreResult<()> {
        let a = agent.clone();
        self.write("put_agent", move |tx, _| {
            let db = |e| map_err("put_agent", e);
            tx.execute(
                "INSERT INTO agents (id, display_name, created_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (id) DO UPDATE SET
                     display_name = excluded.display_name,
                     created_at = excluded.created_at",
                params![a.id, a.display_name, a.created_at],
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
            Ok(())
        })
        .await
    }

    async fn delete_agent(&self, id: &str) -> StoreResult<bool> {
        let id = id.to_owned();
        self.write("delete_agent", move |tx, _| {
            let db = |e| map_err("delete_agent", e);
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
        .await
    }

    async fn put_binding(&self, binding: &BindingRecord, grant: &GrantRecord) -> StoreResult<()> {
        let b = binding.clone();
        let g = grant.clone();
        self.write("put_binding", move |tx, inner| {
            write_binding(tx, inner, &b, &g)
        })
        .await
    }

    async fn delete_binding(&self, unit_id: &str, connector: &str) -> StoreResult<bool> {
        let unit_id = unit_id.to_owned();
        let connector = connector.to_owned();
        self.write("delete_binding", move |tx, inner| {
            remove_binding(tx, inner, &unit_id, &connector)
        })
        .await
    }

    async fn rotate_connector(
        &self,
        connector: &ConnectorRecord,
        kept: &[(BindingRecord, GrantRecord)],
        removed: &[String],
    ) -> StoreResult<()> {
        let c = connector.clone();
        let kept = kept.to_vec();
        let removed = removed.to_vec();
        self.write("rotate_connector", move |tx, inner| {
            write_connector(tx, inner, &c)?;
            for unit in &removed {
                remove_binding(tx, inner, unit, &c.slug)?;
            }
            for (b, g) in &kept {
                write_binding(tx, inner, b, g)?;
            }
            Ok(())
        })
        .await
    }

    async fn put_grant(&self, grant: &GrantRecord) -> StoreResult<()> {
        let g = grant.clone();
        self.write("put_grant", move |tx, _| {
            upsert_grant(tx, &g).map_err(|e| map_err("put_grant", e))
        })
        .await
    }

    async fn delete_grant(
        &self,
        subject: &Subject,
        tool: &str,
        provenance: &str,
    ) -> StoreResult<bool> {
        let subject = subject.clone();
        let tool = tool.to_owned();
        let provenance = provenance.to_owned();
        self.write("delete_grant", move |tx, _| {
            let (kind, id) = subject_parts(&subject);
            let n = tx
                .execute(
                    "DELETE FROM grants
                     WHERE subject_kind = ?1 AND subject_id = ?2 AND tool = ?3 AND provenance = ?4",
                    params![kind, id, tool, provenance],
                )
                .map_err(|e| map_err("delete_grant", e))?;
            Ok(n > 0)
        })
        .await
    }

    async fn put_image_tools(&self, record: &ImageToolsRecord) -> StoreResult<()> {
        let r = record.clone();
        self.write("put_image_tools", move |tx, _| {
            let tools = encode_json("put_image_tools", &r.tools)?;
            tx.execute(
                "INSERT INTO image_tools (agent_id, digest, tools) VALUES (?1, ?2, ?3)
                 ON CONFLICT (agent_id) DO UPDATE SET
                     digest = excluded.digest,
                     tools = excluded.tools",
                params![r.agent_id, r.digest, tools],
            )
            .map_err(|e| map_err("put_image_tools", e))?;
            Ok(())
        })
        .await
    }

    async fn insert_delivery(
        &self,
        delivery: &DeliveryRecord,
        dedup_window_secs: i64,
    ) -> StoreResult<bool> {
        let d = delivery.clone();
        self.write("insert_delivery", move |tx, _| {
            let db = |e| map_err("insert_delivery", e);
            let existing: Option<i64> = tx
                .query_row(
                    "SELECT received_unix FROM deliveries WHERE connector = ?1 AND delivery_id = ?2",
                    [&d.connector, &d.delivery_id],
                    |r| r.get(0),
                )
                .optional()
                .map_err(db)?;
            if existing.is_some_and(|t| t >= d.received_unix - dedup_window_secs) {
                return Ok(false);
            }
            let headers = encode_json("insert_delivery", &d.headers)?;
            let routed = encode_json("insert_delivery", &d.routed_to)?;
            tx.execute(
                "INSERT INTO deliveries (connector, delivery_id, event, headers, body, received_unix, received_at, status, attempts, error, routed_to)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                 ON CONFLICT (connector, delivery_id) DO UPDATE SET
                     event = excluded.event, headers = excluded.headers, body = excluded.body,
                     received_unix = excluded.received_unix, received_at = excluded.received_at,
                     status = excluded.status, attempts = excluded.attempts, error = excluded.error,
                     routed_to = excluded.routed_to",
                params![d.connector, d.delivery_id, d.event, headers, d.body, d.received_unix, d.received_at, d.status.as_str(), d.attempts, d.error, routed],
            )
            .map_err(db)?;
            Ok(true)
        })
        .await
    }

    async fn complete_delivery(
        &self,
        connector: &str,
        delivery_id: &str,
        messages: &[MessageRecord],
        routed_to: &[String],
    ) -> StoreResult<Option<Vec<MessageRecord>>> {
        let connector = connector.to_owned();
        let delivery_id = delivery_id.to_owned();
        let messages = messages.to_vec();
        let routed = encode_json("complete_delivery", &routed_to)?;
        self.write("complete_delivery", move |tx, inner| {
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
            let mut stored = Vec::with_capacity(messages.len());
            {
                let mut insert = tx
                    .prepare_cached(
                        "INSERT INTO messages (id, unit_id, connector, kind, delivery_id, thread_key, payload, received_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    )
                    .map_err(db)?;
                for m in messages {
                    let payload = encode_json("complete_delivery", &m.payload)?;
                    insert
                        .execute(params![m.id, m.unit_id, m.connector, m.kind, m.delivery_id, m.thread_key, payload, m.received_at])
                        .map_err(db)?;
                    stored.push(MessageRecord { seq: tx.last_insert_rowid(), ..m });
                }
            }
            inner.trip(FailPoint::AfterMessagesWrite)?;
            tx.execute(
                "UPDATE deliveries SET status = 'done', error = NULL, attempts = attempts + 1, routed_to = ?3
                 WHERE connector = ?1 AND delivery_id = ?2",
                params![connector, delivery_id, routed],
            )
            .map_err(db)?;
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
        self.write("fail_delivery", move |tx, _| {
            tx.execute(
                "UPDATE deliveries SET status = 'failed', error = ?3, attempts = attempts + 1
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
        self.write("delivery", move |tx, _| {
            let mut stmt = tx
                .prepare_cached(&format!(
                    "{DELIVERY_COLUMNS} WHERE connector = ?1 AND delivery_id = ?2"
                ))
                .map_err(|e| map_err("delivery", e))?;
            let mut rows = stmt
                .query_map([&connector, &delivery_id], read_delivery_row)
                .map_err(|e| map_err("delivery", e))?;
            match rows.next() {
                Some(row) => Ok(Some(decode_delivery(
                    row.map_err(|e| map_err("delivery", e))?,
                )?)),
                None => Ok(None),
            }
        })
        .await
    }

    async fn unfinished_deliveries(&self) -> StoreResult<Vec<DeliveryRecord>> {
        self.write("unfinished_deliveries", move |tx, _| {
            let mut stmt = tx
                .prepare_cached(&format!(
                    "{DELIVERY_COLUMNS} WHERE status != 'done' ORDER BY received_unix, rowid"
                ))
                .map_err(|e| map_err("unfinished_deliveries", e))?;
            let rows = stmt
                .query_map([], read_delivery_row)
                .map_err(|e| map_err("unfinished_deliveries", e))?;
            let mut out = Vec::new();
            for row in rows {
                out.push(decode_delivery(
                    row.map_err(|e| map_err("unfinished_deliveries", e))?,
                )?);
            }
            Ok(out)
        })
        .await
    }

    async fn messages(
        &self,
        unit_id: &str,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<MessageRecord>> {
        let unit_id = unit_id.to_owned();
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let conn = inner.conn.lock();
            let db = |e| map_err("messages", e);
            let mut stmt = conn
                .prepare_cached(
                    "SELECT seq, id, unit_id, connector, kind, delivery_id, thread_key, payload, received_at
                     FROM messages WHERE unit_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                )
                .map_err(db)?;
            let rows = stmt
                .query_map(params![unit_id, after, limit], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, String>(5)?,
                        r.get::<_, Option<String>>(6)?,
                        r.get::<_, String>(7)?,
                        r.get::<_, String>(8)?,
                    ))
                })
                .map_err(db)?;
            let mut out = Vec::new();
            for row in rows {
                let (seq, id, unit_id, connector, kind, delivery_id, thread_key, payload, received_at) = row.map_err(db)?;
                out.push(MessageRecord {
                    seq,
                    id,
                    unit_id,
                    connector,
                    kind,
                    delivery_id,
                    thread_key,
                    payload: decode_json("message payload", &payload)?,
                    received_at,
                });
            }
            Ok(out)
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("messages: the database task did not finish: {e}")))?
    }

    async fn prune_deliveries(&self, before_unix: i64) -> StoreResult<u64> {
        self.write("prune_deliveries", move |tx, _| {
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

    fn set_fail_point(&self, point: Option<FailPoint>) {
        *self.inner.fail_point.lock() = point;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn connector(slug: &str, namespace: &str, digest: &str) -> ConnectorRecord {
        ConnectorRecord {
            slug: slug.into(),
            namespace: namespace.into(),
            digest: digest.into(),
            component: vec![0, 97, 115, 109, 1, 2, 3],
            bundled: false,
            installed_at: "2025-01-01T00:00:00Z".into(),
        }
    }

    fn unit(id: &str, parent: Option<&str>) -> UnitRecord {
        UnitRecord {
            id: id.into(),
            parent: parent.map(Into::into),
            display_name: Some(format!("Unit {id}")),
            created_at: "2025-01-02T00:00:00Z".into(),
        }
    }

    fn agent(id: &str, units: &[&str]) -> AgentRecord {
        AgentRecord {
            id: id.into(),
            units: units.iter().map(|u| u.to_string()).collect(),
            display_name: None,
            created_at: "2025-01-03T00:00:00Z".into(),
        }
    }

    fn binding(unit_id: &str, connector: &str, config: Value) -> BindingRecord {
        BindingRecord {
            unit_id: unit_id.into(),
            connector: connector.into(),
            config,
            routing_keys: vec![format!("{connector}:{unit_id}")],
            bound_at: "2025-01-04T00:00:00Z".into(),
        }
    }

    fn connector_grant(unit_id: &str, slug: &str, namespace: &str) -> GrantRecord {
        GrantRecord {
            subject: Subject::Unit(unit_id.into()),
            tool: format!("{namespace}.*"),
            namespace: namespace.into(),
            provenance: format!("connector:{slug}"),
            created_at: "2025-01-04T00:00:00Z".into(),
        }
    }

    fn explicit_grant(subject: Subject, tool: &str) -> GrantRecord {
        GrantRecord {
            subject,
            tool: tool.into(),
            namespace: tool.split('.').next().unwrap_or_default().into(),
            provenance: "explicit".into(),
            created_at: "2025-01-05T00:00:00Z".into(),
        }
    }

    /// A store with connector `acme` (namespace `acme`), units `root` and `team`
    /// (child of root), `team` bound to `acme`.
    async fn bound_store() -> SqliteStore {
        let store = SqliteStore::open_in_memory().unwrap();
        store
            .put_connector(&connector("acme", "acme", "sha256:aa"))
            .await
            .unwrap();
        store.put_unit(&unit("root", None)).await.unwrap();
        store.put_unit(&unit("team", Some("root"))).await.unwrap();
        store
            .put_binding(
                &binding("team", "acme", json!({"k": 1})),
                &connector_grant("team", "acme", "acme"),
            )
            .await
            .unwrap();
        store
    }

    #[tokio::test]
    async fn every_record_type_round_trips() {
        let store = SqliteStore::open_in_memory().unwrap();
        let mut gh = connector("github", "github", "sha256:01");
        gh.bundled = true;
        let acme = connector("acme", "acme", "sha256:02");
        let root = unit("root", None);
        let mut team = unit("team", Some("root"));
        team.display_name = None;
        let mut bot = agent("bot", &["team", "root"]);
        bot.display_name = Some("Bot".into());
        let b = BindingRecord {
            unit_id: "team".into(),
            connector: "github".into(),
            config: json!({"repo": "o/r", "installationId": 7, "labels": ["a", "b"], "nested": {"x": null}}),
            routing_keys: vec!["repo:o/r".into(), "installation:7".into()],
            bound_at: "2025-02-01T00:00:00Z".into(),
        };
        let g = connector_grant("team", "github", "github");
        let agent_grant = explicit_grant(Subject::Agent("bot".into()), "acme.echo");
        let unit_grant = GrantRecord {
            tool: "acme.*".into(),
            ..explicit_grant(Subject::Unit("root".into()), "acme.x")
        };
        let image = ImageToolsRecord {
            agent_id: "bot".into(),
            digest: "sha256:ff".into(),
            tools: json!([{"name": "img.run", "description": "d", "inputSchema": {"type": "object"}}]),
        };

        store.put_connector(&gh).await.unwrap();
        store.put_connector(&acme).await.unwrap();
        store.put_unit(&root).await.unwrap();
        store.put_unit(&team).await.unwrap();
        store.put_agent(&bot).await.unwrap();
        store.put_binding(&b, &g).await.unwrap();
        store.put_grant(&agent_grant).await.unwrap();
        store.put_grant(&unit_grant).await.unwrap();
        store.put_image_tools(&image).await.unwrap();

        let expected = Snapshot {
            connectors: vec![gh, acme],
            units: vec![root, team],
            agents: vec![bot],
            bindings: vec![b],
            grants: vec![g, agent_grant, unit_grant],
            image_tools: vec![image],
        };
        assert_eq!(store.load().await.unwrap(), expected);
    }

    #[tokio::test]
    async fn empty_database_loads_empty_snapshot() {
        let store = SqliteStore::open_in_memory().unwrap();
        assert_eq!(store.load().await.unwrap(), Snapshot::default());
    }

    #[tokio::test]
    async fn load_keeps_insertion_order_and_agent_unit_order() {
        let store = SqliteStore::open_in_memory().unwrap();
        for id in ["b", "a", "c"] {
            store.put_unit(&unit(id, None)).await.unwrap();
        }
        // An upsert keeps the row's place.
        let mut a = unit("a", None);
        a.display_name = Some("renamed".into());
        store.put_unit(&a).await.unwrap();
        // Deleting and adding puts the new row last.
        store.delete_unit("b").await.unwrap();
        store.put_unit(&unit("b", None)).await.unwrap();

        store
            .put_agent(&agent("z", &["c", "a", "b"]))
            .await
            .unwrap();
        store.put_agent(&agent("y", &["b"])).await.unwrap();
        for (u, c) in [("c", "zeta"), ("a", "alpha"), ("c", "alpha")] {
            store
                .put_binding(&binding(u, c, json!({})), &connector_grant(u, c, c))
                .await
                .unwrap();
        }

        let snap = store.load().await.unwrap();
        let ids: Vec<_> = snap.units.iter().map(|u| u.id.as_str()).collect();
        assert_eq!(ids, ["a", "c", "b"]);
        assert_eq!(snap.units[0].display_name.as_deref(), Some("renamed"));
        let agents: Vec<_> = snap
            .agents
            .iter()
            .map(|a| (a.id.as_str(), a.units.clone()))
            .collect();
        assert_eq!(
            agents,
            [
                ("z", vec!["c".to_string(), "a".into(), "b".into()]),
                ("y", vec!["b".to_string()])
            ]
        );
        let bindings: Vec<_> = snap
            .bindings
            .iter()
            .map(|b| (b.unit_id.as_str(), b.connector.as_str()))
            .collect();
        assert_eq!(bindings, [("c", "zeta"), ("a", "alpha"), ("c", "alpha")]);
        let grants: Vec<_> = snap
            .grants
            .iter()
            .map(|g| (g.subject.clone(), g.tool.as_str()))
            .collect();
        assert_eq!(
            grants,
            [
                (Subject::Unit("c".into()), "zeta.*"),
                (Subject::Unit("a".into()), "alpha.*"),
                (Subject::Unit("c".into()), "alpha.*"),
            ]
        );
    }

    #[tokio::test]
    async fn upserts_replace_rows_without_duplicating() {
        let store = bound_store().await;

        // Connector: same slug, new digest and bytes.
        let mut rotated = connector("acme", "acme", "sha256:bb");
        rotated.component = vec![9, 9];
        store.put_connector(&rotated).await.unwrap();

        // Unit: new parent and name.
        let mut team = unit("team", None);
        team.display_name = Some("Team 2".into());
        store.put_unit(&team).await.unwrap();

        // Agent: memberships replaced, fewer than before.
        store
            .put_agent(&agent("bot", &["root", "team"]))
            .await
            .unwrap();
        let mut bot = agent("bot", &["team"]);
        bot.display_name = Some("Bot".into());
        store.put_agent(&bot).await.unwrap();

        // Binding: config replaced; the grant is not duplicated and keeps its created_at.
        let rebound = BindingRecord {
            routing_keys: vec![],
            bound_at: "2025-03-01T00:00:00Z".into(),
            ..binding("team", "acme", json!({"k": 2}))
        };
        let mut regrant = connector_grant("team", "acme", "acme");
        regrant.created_at = "2025-03-01T00:00:00Z".into();
        store.put_binding(&rebound, &regrant).await.unwrap();

        // Grant: same key twice.
        let g = explicit_grant(Subject::Agent("bot".into()), "acme.echo");
        store.put_grant(&g).await.unwrap();
        store.put_grant(&g).await.unwrap();

        // Image tools: replaced.
        let mut image = ImageToolsRecord {
            agent_id: "bot".into(),
            digest: "sha256:01".into(),
            tools: json!([]),
        };
        store.put_image_tools(&image).await.unwrap();
        image.digest = "sha256:02".into();
        image.tools = json!([{"name": "img.x"}]);
        store.put_image_tools(&image).await.unwrap();

        let snap = store.load().await.unwrap();
        assert_eq!(snap.connectors, vec![rotated]);
        assert_eq!(snap.units, vec![unit("root", None), team]);
        assert_eq!(snap.agents, vec![bot]);
        assert_eq!(snap.bindings, vec![rebound]);
        assert_eq!(
            snap.grants,
            vec![connector_grant("team", "acme", "acme"), g]
        );
        assert_eq!(snap.image_tools, vec![image]);
    }

    #[tokio::test]
    async fn put_binding_fault_leaves_neither_binding_nor_grant() {
        let store = SqliteStore::open_in_memory().unwrap();
        store
            .put_connector(&connector("acme", "acme", "sha256:aa"))
            .await
            .unwrap();
        store.put_unit(&unit("team", None)).await.unwrap();
        let b = binding("team", "acme", json!({"k": 1}));
        let g = connector_grant("team", "acme", "acme");

        store.set_fail_point(Some(FailPoint::AfterBindingWrite));
        let err = store.put_binding(&b, &g).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Injected(FailPoint::AfterBindingWrite)),
            "{err:?}"
        );
        let snap = store.load().await.unwrap();
        assert!(snap.bindings.is_empty(), "{:?}", snap.bindings);
        assert!(snap.grants.is_empty(), "{:?}", snap.grants);

        // The fault was one-shot: the retry succeeds and writes both.
        store.put_binding(&b, &g).await.unwrap();
        let snap = store.load().await.unwrap();
        assert_eq!(snap.bindings, vec![b.clone()]);
        assert_eq!(snap.grants, vec![g.clone()]);

        // A failed re-bind keeps the old config.
        store.set_fail_point(Some(FailPoint::AfterBindingWrite));
        let changed = binding("team", "acme", json!({"k": 2}));
        assert!(store.put_binding(&changed, &g).await.is_err());
        let snap = store.load().await.unwrap();
        assert_eq!(snap.bindings, vec![b]);
        assert_eq!(snap.grants, vec![g]);
    }

    #[tokio::test]
    async fn delete_binding_fault_keeps_binding_and_grant() {
        let store = bound_store().await;
        let before = store.load().await.unwrap();

        store.set_fail_point(Some(FailPoint::AfterBindingDelete));
        let err = store.delete_binding("team", "acme").await.unwrap_err();
        assert!(
            matches!(err, StoreError::Injected(FailPoint::AfterBindingDelete)),
            "{err:?}"
        );
        assert_eq!(store.load().await.unwrap(), before);

        assert!(store.delete_binding("team", "acme").await.unwrap());
        let snap = store.load().await.unwrap();
        assert!(snap.bindings.is_empty());
        assert!(snap.grants.is_empty());
        assert!(!store.delete_binding("team", "acme").await.unwrap());
    }

    #[tokio::test]
    async fn put_connector_fault_keeps_old_connector_and_grants() {
        let store = bound_store().await;
        let before = store.load().await.unwrap();

        store.set_fail_point(Some(FailPoint::AfterConnectorWrite));
        let err = store
            .put_connector(&connector("acme", "acme2", "sha256:bb"))
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Injected(FailPoint::AfterConnectorWrite)),
            "{err:?}"
        );
        assert_eq!(store.load().await.unwrap(), before);

        store
            .put_connector(&connector("acme", "acme2", "sha256:bb"))
            .await
            .unwrap();
        let snap = store.load().await.unwrap();
        assert_eq!(
            snap.connectors,
            vec![connector("acme", "acme2", "sha256:bb")]
        );
        assert_eq!(snap.grants, vec![connector_grant("team", "acme", "acme2")]);
    }

    #[tokio::test]
    async fn fail_point_fires_only_at_its_own_step_and_can_be_disarmed() {
        let store = SqliteStore::open_in_memory().unwrap();
        store.put_unit(&unit("team", None)).await.unwrap();
        store.set_fail_point(Some(FailPoint::AfterBindingDelete));
        // Other steps pass while it stays armed.
        store
            .put_connector(&connector("acme", "acme", "sha256:aa"))
            .await
            .unwrap();
        store
            .put_binding(
                &binding("team", "acme", json!({})),
                &connector_grant("team", "acme", "acme"),
            )
            .await
            .unwrap();
        assert!(matches!(
            store.delete_binding("team", "acme").await,
            Err(StoreError::Injected(FailPoint::AfterBindingDelete))
        ));

        store.set_fail_point(Some(FailPoint::AfterBindingDelete));
        store.set_fail_point(None);
        assert!(store.delete_binding("team", "acme").await.unwrap());
    }

    #[tokio::test]
    async fn rotation_rederives_only_that_connectors_grants() {
        let store = bound_store().await;
        store
            .put_connector(&connector("other", "other", "sha256:cc"))
            .await
            .unwrap();
        store
            .put_binding(
                &binding("root", "acme", json!({})),
                &connector_grant("root", "acme", "acme"),
            )
            .await
            .unwrap();
        store
            .put_binding(
                &binding("root", "other", json!({})),
                &connector_grant("root", "other", "other"),
            )
            .await
            .unwrap();
        let explicit = explicit_grant(Subject::Unit("team".into()), "acme.echo");
        store.put_grant(&explicit).await.unwrap();
        // A stale specific-tool grant of the same provenance collapses onto `<ns>.*`.
        let stale = GrantRecord {
            tool: "acme.echo".into(),
            ..connector_grant("team", "acme", "acme")
        };
        store.put_grant(&stale).await.unwrap();

        store
            .put_connector(&connector("acme", "newns", "sha256:dd"))
            .await
            .unwrap();

        let snap = store.load().await.unwrap();
        let mut grants: Vec<_> = snap
            .grants
            .iter()
            .map(|g| {
                (
                    g.subject.clone(),
                    g.tool.clone(),
                    g.namespace.clone(),
                    g.provenance.clone(),
                )
            })
            .collect();
        grants.sort();
        let s = |x: &str| x.to_string();
        assert_eq!(
            grants,
            vec![
                (
                    Subject::Unit(s("root")),
                    s("newns.*"),
                    s("newns"),
                    s("connector:acme")
                ),
                (
                    Subject::Unit(s("root")),
                    s("other.*"),
                    s("other"),
                    s("connector:other")
                ),
                (
                    Subject::Unit(s("team")),
                    s("acme.echo"),
                    s("acme"),
                    s("explicit")
                ),
                (
                    Subject::Unit(s("team")),
                    s("newns.*"),
                    s("newns"),
                    s("connector:acme")
                ),
            ]
        );
        // Bindings stay through a rotation.
        assert_eq!(snap.bindings.len(), 3);
    }

    #[tokio::test]
    async fn delete_connector_removes_its_bindings_and_grants_only() {
        let store = bound_store().await;
        store
            .put_connector(&connector("other", "other", "sha256:cc"))
            .await
            .unwrap();
        store
            .put_binding(
                &binding("root", "acme", json!({})),
                &connector_grant("root", "acme", "acme"),
            )
            .await
            .unwrap();
        let other_binding = binding("team", "other", json!({}));
        let other_grant = connector_grant("team", "other", "other");
        store
            .put_binding(&other_binding, &other_grant)
            .await
            .unwrap();
        let explicit = explicit_grant(Subject::Unit("team".into()), "acme.echo");
        store.put_grant(&explicit).await.unwrap();

        assert!(store.delete_connector("acme").await.unwrap());
        let snap = store.load().await.unwrap();
        assert_eq!(
            snap.connectors,
            vec![connector("other", "other", "sha256:cc")]
        );
        assert_eq!(snap.bindings, vec![other_binding]);
        assert_eq!(snap.grants, vec![other_grant, explicit]);
        assert_eq!(snap.units.len(), 2);

        assert!(!store.delete_connector("acme").await.unwrap());
    }

    #[tokio::test]
    async fn delete_unit_removes_its_bindings_and_grants_only() {
        let store = bound_store().await;
        let root_binding = binding("root", "acme", json!({}));
        let root_grant = connector_grant("root", "acme", "acme");
        store.put_binding(&root_binding, &root_grant).await.unwrap();
        store
            .put_grant(&explicit_grant(Subject::Unit("team".into()), "acme.echo"))
            .await
            .unwrap();
        store.put_agent(&agent("team", &["team"])).await.unwrap();
        // Same id, but an agent: untouched by deleting the unit.
        let agent_grant = explicit_grant(Subject::Agent("team".into()), "acme.echo");
        store.put_grant(&agent_grant).await.unwrap();

        assert!(store.delete_unit("team").await.unwrap());
        let snap = store.load().await.unwrap();
        assert_eq!(snap.units, vec![unit("root", None)]);
        assert_eq!(snap.bindings, vec![root_binding]);
        assert_eq!(snap.grants, vec![root_grant, agent_grant]);
        assert_eq!(snap.connectors.len(), 1);
        // Memberships are the caller's concern, like children.
        assert_eq!(snap.agents, vec![agent("team", &["team"])]);

        assert!(!store.delete_unit("team").await.unwrap());
    }

    #[tokio::test]
    async fn delete_agent_removes_memberships_grants_and_image_tools() {
        let store = bound_store().await;
        store
            .put_agent(&agent("bot", &["team", "root"]))
            .await
            .unwrap();
        store.put_agent(&agent("other", &["team"])).await.unwrap();
        store
            .put_grant(&explicit_grant(Subject::Agent("bot".into()), "acme.echo"))
            .await
            .unwrap();
        let other_grant = explicit_grant(Subject::Agent("other".into()), "acme.echo");
        store.put_grant(&other_grant).await.unwrap();
        // A unit with the agent's id keeps its grants.
        store.put_unit(&unit("bot", None)).await.unwrap();
        let unit_grant = explicit_grant(Subject::Unit("bot".into()), "acme.echo");
        store.put_grant(&unit_grant).await.unwrap();
        for id in ["bot", "other"] {
            store
                .put_image_tools(&ImageToolsRecord {
                    agent_id: id.into(),
                    digest: "sha256:ee".into(),
                    tools: json!([]),
                })
                .await
                .unwrap();
        }

        assert!(store.delete_agent("bot").await.unwrap());
        let snap = store.load().await.unwrap();
        assert_eq!(snap.agents, vec![agent("other", &["team"])]);
        assert_eq!(
            snap.grants,
            vec![
                connector_grant("team", "acme", "acme"),
                other_grant,
                unit_grant
            ]
        );
        let images: Vec<_> = snap
            .image_tools
            .iter()
            .map(|i| i.agent_id.as_str())
            .collect();
        assert_eq!(images, ["other"]);
        let memberships: i64 = store
            .inner
            .conn
            .lock()
            .query_row(
                "SELECT COUNT(*) FROM agent_units WHERE agent_id = 'bot'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(memberships, 0);

        assert!(!store.delete_agent("bot").await.unwrap());
    }

    #[tokio::test]
    async fn delete_grant_matches_subject_tool_and_provenance() {
        let store = bound_store().await;
        let explicit = explicit_grant(Subject::Unit("team".into()), "acme.*");
        store.put_grant(&explicit).await.unwrap();

        assert!(!store
            .delete_grant(&Subject::Agent("team".into()), "acme.*", "explicit")
            .await
            .unwrap());
        assert!(store
            .delete_grant(&Subject::Unit("team".into()), "acme.*", "explicit")
            .await
            .unwrap());
        let snap = store.load().await.unwrap();
        // The binding's grant (same subject and tool, other provenance) stays.
        assert_eq!(snap.grants, vec![connector_grant("team", "acme", "acme")]);
        assert!(!store
            .delete_grant(&Subject::Unit("team".into()), "acme.*", "explicit")
            .await
            .unwrap());
    }

    #[tokio::test]
    async fn binding_of_a_missing_unit_is_refused_and_leaves_nothing() {
        let store = SqliteStore::open_in_memory().unwrap();
        let err = store
            .put_binding(
                &binding("ghost", "acme", json!({})),
                &connector_grant("ghost", "acme", "acme"),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Unavailable(ref m) if m.contains("put_binding")),
            "{err:?}"
        );
        assert_eq!(store.load().await.unwrap(), Snapshot::default());
    }

    #[tokio::test]
    async fn malformed_stored_json_is_reported_as_corrupt() {
        let store = bound_store().await;
        store
            .inner
            .conn
            .lock()
            .execute("UPDATE bindings SET config = '{not json'", [])
            .unwrap();
        let err = store.load().await.unwrap_err();
        assert!(
            matches!(err, StoreError::Corrupt(ref m) if m.contains("acme") && m.contains("team")),
            "{err:?}"
        );
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

    #[tokio::test]
    async fn concurrent_writes_all_land() {
        let store = SqliteStore::open_in_memory().unwrap();
        let tasks: Vec<_> = (0..32)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move { store.put_unit(&unit(&format!("u{i}"), None)).await })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        assert_eq!(store.load().await.unwrap().units.len(), 32);
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
            .put_connector(&connector("acme", "acme", "sha256:aa"))
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
        let store = crate::store::open_store(&url).unwrap();
        store.put_unit(&unit("a", None)).await.unwrap();
        drop(store);
        assert!(path.exists());
        let again = crate::store::open_store(&format!("sqlite:{}", path.display())).unwrap();
        assert_eq!(again.load().await.unwrap().units, vec![unit("a", None)]);

        for memory in ["sqlite::memory:", "sqlite://:memory:"] {
            let store = crate::store::open_store(memory).unwrap();
            assert_eq!(store.load().await.unwrap(), Snapshot::default());
        }

        for bad in [
            "postgres://user:hunter2@db/host",
            "sqlite://",
            "sqlite://x.db?mode=ro",
            "host.db",
        ] {
            match crate::store::open_store(bad) {
                Err(StoreError::Unavailable(m)) => assert!(!m.contains("hunter2"), "{m}"),
                Err(other) => panic!("{bad}: {other:?}"),
                Ok(_) => panic!("{bad} was accepted"),
            }
        }
    }
}
