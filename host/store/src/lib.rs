//! Persistence of everything an operator sets up: the store traits every backend
//! implements, and SQLite ([`sqlite::SqliteStore`]), the backend of a single host.
//!
//! The host keeps its working state in memory (so the resolver and tool calls never wait
//! on a database) and writes every change through a [`Store`] first. A change that spans
//! several rows — a binding and its grant, an unbind and its revocations, a rotation and
//! the grants it re-derives — is one call here and one transaction in the database, so
//! after any crash either all of it exists or none of it does.
//!
//! PostgreSQL, which lets several replicas share one database, is its own crate
//! (`connector-store-postgres`), built on [`rows`]. Every backend passes the same
//! conformance suite (`connector-store-testing`), so they cannot drift apart.

#![deny(missing_docs)]

pub mod audit_groups;
pub mod rows;
pub mod sqlite;

use async_trait::async_trait;
use connector_model::audit::{AuditAnchor, AuditEntry, AuditRecord};
use connector_model::provenance::GrantProvenance;
use connector_model::records::{
    AgentRecord, BindingRecord, Claim, ConnectorRecord, DeliveryRecord, DeliveryStatus,
    GrantRecord, ImageToolsRecord, MessageRecord, Snapshot, Subject, UnitRecord,
};

/// Which unfinished deliveries [`DeliveryQueue::claim_deliveries`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimScope {
    /// Periodic sweep: pending deliveries that nobody holds (no claim, or a lapsed one).
    Sweep,
    /// A replica starting: as `Sweep`, plus failed deliveries nobody holds and every
    /// pending or failed delivery the same owner held in its previous life (whatever the
    /// claim's expiry; that process is gone).
    Startup,
}

/// What [`ReplicaCoordination::changes_since`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateCheck {
    /// The current state version.
    pub version: i64,
    /// Whether some version in `(applied, version]` was written by another store handle
    /// (another replica): the caller's in-memory state is stale and must catch up.
    pub foreign: bool,
}

/// How many state versions the change log keeps ([`ReplicaCoordination::foreign_writes`]):
/// a replica further behind than that reloads everything. At thousands of writes a second
/// this is tens of seconds of writes; a replica checks every fraction of a second.
pub const CHANGES_KEPT: i64 = 100_000;

/// The change log is pruned when a write produces a version that is a multiple of this
/// (in that write's transaction), by the versions that fell out of [`CHANGES_KEPT`].
pub const CHANGES_PRUNED_EVERY: i64 = 1_000;

/// One committed state write as the change log keeps it (one per state version, written
/// in the write's own transaction): what a replica that did not make it applies to its
/// memory instead of reloading everything. Each is the same change the writing replica
/// applied to its own memory, so replaying them in version order leads to the same state.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "write", rename_all = "snake_case")]
pub enum LoggedWrite {
    /// [`StateStore::put_unit`].
    PutUnit {
        /// The unit.
        unit: UnitRecord,
    },
    /// [`StateStore::delete_unit`].
    DeleteUnit {
        /// The unit's id.
        id: String,
    },
    /// [`StateStore::put_agent`].
    PutAgent {
        /// The agent.
        agent: AgentRecord,
    },
    /// [`StateStore::delete_agent`].
    DeleteAgent {
        /// The agent's id.
        id: String,
    },
    /// [`StateStore::put_binding`].
    PutBinding {
        /// The binding.
        binding: BindingRecord,
        /// Its grant.
        grant: GrantRecord,
    },
    /// [`StateStore::delete_binding`].
    DeleteBinding {
        /// The unit.
        unit: String,
        /// The connector's slug.
        connector: String,
    },
    /// [`StateStore::put_grant`].
    PutGrant {
        /// The grant.
        grant: GrantRecord,
    },
    /// [`StateStore::delete_grant`].
    DeleteGrant {
        /// Whose grant.
        subject: Subject,
        /// The tool or `<namespace>.*`.
        tool: String,
        /// The grant's provenance.
        provenance: GrantProvenance,
    },
    /// [`StateStore::put_image_tools`].
    PutImageTools {
        /// The agent's image tools.
        record: ImageToolsRecord,
    },
    /// A connector installed, rotated or removed. Only named: serving it takes its
    /// component, prepared from the stored bytes, so a replica reloads the state.
    Connector {
        /// The connector's slug.
        slug: String,
    },
}

impl LoggedWrite {
    /// The log entry of `write`.
    pub fn of(write: &StateWrite<'_>) -> Self {
        match *write {
            StateWrite::PutConnector(c, _) => LoggedWrite::Connector {
                slug: c.slug.clone(),
            },
            StateWrite::RotateConnector { connector, .. } => LoggedWrite::Connector {
                slug: connector.slug.clone(),
            },
            StateWrite::DeleteConnector(slug) => LoggedWrite::Connector { slug: slug.into() },
            StateWrite::PutUnit(unit) => LoggedWrite::PutUnit { unit: unit.clone() },
            StateWrite::DeleteUnit(id) => LoggedWrite::DeleteUnit { id: id.into() },
            StateWrite::PutAgent(agent) => LoggedWrite::PutAgent {
                agent: agent.clone(),
            },
            StateWrite::DeleteAgent(id) => LoggedWrite::DeleteAgent { id: id.into() },
            StateWrite::PutBinding(binding, grant) => LoggedWrite::PutBinding {
                binding: binding.clone(),
                grant: grant.clone(),
            },
            StateWrite::DeleteBinding { unit, connector } => LoggedWrite::DeleteBinding {
                unit: unit.into(),
                connector: connector.into(),
            },
            StateWrite::PutGrant(grant) => LoggedWrite::PutGrant {
                grant: grant.clone(),
            },
            StateWrite::DeleteGrant {
                subject,
                tool,
                provenance,
            } => LoggedWrite::DeleteGrant {
                subject: subject.clone(),
                tool: tool.into(),
                provenance: provenance.clone(),
            },
            StateWrite::PutImageTools(record) => LoggedWrite::PutImageTools {
                record: record.clone(),
            },
        }
    }
}

/// What a state write leaves beside the change, in its transaction: its audit record (if
/// any) and its change-log entry (JSON of a [`LoggedWrite`]).
#[derive(Debug)]
pub struct WriteRecords<'a> {
    /// Appended to the audit log.
    pub audit: Option<&'a AuditEntry>,
    /// Kept in the change log under the write's state version.
    pub change: String,
}

impl<'a> WriteRecords<'a> {
    /// The records of `write` with `audit`.
    pub fn of(write: &StateWrite<'_>, audit: Option<&'a AuditEntry>) -> StoreResult<Self> {
        Ok(Self {
            audit,
            change: encode_json("logging a state write", &LoggedWrite::of(write))?,
        })
    }
}

/// Whether the change log's entries `found` (versions with their JSON, oldest first) are
/// every version of `(applied, upto]`, and then the writes among them that `own` (versions
/// this handle wrote) does not name, oldest first. `None`: some version is missing (the
/// log was pruned past `applied`, or the database predates the log): reload.
pub fn foreign_entries(
    found: Vec<(i64, String)>,
    applied: i64,
    upto: i64,
    own: impl Fn(i64) -> bool,
) -> StoreResult<Option<Vec<LoggedWrite>>> {
    let expected = upto.saturating_sub(applied).max(0);
    if found.len() as i64 != expected
        || found
            .iter()
            .zip(applied.saturating_add(1)..)
            .any(|((v, _), want)| *v != want)
    {
        return Ok(None);
    }
    found
        .into_iter()
        .filter(|(v, _)| !own(*v))
        .map(|(v, text)| decode_json(&format!("change log entry {v}"), &text))
        .collect::<StoreResult<Vec<_>>>()
        .map(Some)
}

/// Why the store could not do what was asked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or answered with an error; retrying may help.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// Stored data cannot be read back (a migration is missing, a row is malformed).
    #[error("stored data is unreadable: {0}")]
    Corrupt(String),
    /// Another replica changed the shared state after this one last read it; the write
    /// was not applied (refresh and retry).
    #[error("another replica changed the shared state at the same moment: {0}")]
    Conflict(String),
    /// The database refused the write by a rule of its own (a trigger an operator or a
    /// test added); the same write fails the same way again.
    #[error("the database refused the write: {0}")]
    Refused(String),
}

impl From<StoreError> for connector_model::error::HostError {
    fn from(err: StoreError) -> Self {
        use connector_model::error::{ErrorCode, HostError};
        let told = match &err {
            StoreError::Unavailable(_) => {
                HostError::new(ErrorCode::StoreUnavailable, format!("{err}; retry shortly"))
            }
            StoreError::Conflict(_) => HostError::new(
                ErrorCode::StateChanged,
                format!("{err}; nothing was changed: retry the request"),
            ),
            other => HostError::internal(other.to_string()),
        };
        told.with_source(err)
    }
}

/// What store operations return.
pub type StoreResult<T> = Result<T, StoreError>;

/// A grant subject as its stored (kind, id) columns.
pub fn subject_parts(subject: &Subject) -> (&'static str, &str) {
    match subject {
        Subject::Unit(id) => ("unit", id),
        Subject::Agent(id) => ("agent", id),
    }
}

/// JSON text of a value the store keeps as text.
pub fn encode_json<T: serde::Serialize>(context: &str, value: &T) -> StoreResult<String> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::Unavailable(format!("{context}: cannot encode JSON: {e}")))
}

/// A value back from stored JSON text; malformed text is [`StoreError::Corrupt`].
pub fn decode_json<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> StoreResult<T> {
    serde_json::from_str(text).map_err(|e| {
        StoreError::Corrupt(format!(
            "{what} is not valid JSON of the expected shape: {e}"
        ))
    })
}

/// The operator's state: connectors, units, agents, bindings, grants and image tools.
///
/// Every method is one transaction. Methods that "upsert" replace the row with the same
/// key. Deleting something that does not exist is not an error (returns `false` where a
/// result is reported).
#[async_trait]
pub trait StateStore: Send + Sync + 'static {
    /// Everything but the connectors' component bytes, as one consistent view.
    async fn load(&self) -> StoreResult<Snapshot>;
    /// The component bytes of connector `slug`, if it is stored with digest `digest`
    /// (`None`: no such connector, or another digest by now).
    async fn component(&self, slug: &str, digest: &str) -> StoreResult<Option<Vec<u8>>>;
    /// Writes `write` in one transaction, with `audit` appended to the audit log in the
    /// same transaction when given (the change and its record exist together or not at
    /// all). `false`: a delete found nothing to delete (a put is always `true`). The
    /// methods below name each write.
    async fn write(&self, write: StateWrite<'_>, audit: Option<&AuditEntry>) -> StoreResult<bool>;

    /// Upserts a connector with its component's bytes. In the same transaction its grants
    /// (provenance `connector:<slug>`) follow the record's namespace by the one rule,
    /// [`connector_model::records::rederive`]: each subject keeps its first grant of the
    /// connector, now of `<namespace>.*`, and no other, so a rotation that changes the
    /// namespace never leaves stale grants.
    async fn put_connector(
        &self,
        connector: &ConnectorRecord,
        component: &[u8],
    ) -> StoreResult<()> {
        self.write(StateWrite::PutConnector(connector, component), None)
            .await
            .map(drop)
    }
    /// Deletes a connector, every binding of it and every grant with provenance
    /// `connector:<slug>`, in one transaction.
    async fn delete_connector(&self, slug: &str) -> StoreResult<bool> {
        self.write(StateWrite::DeleteConnector(slug), None).await
    }
    /// A rotation in one transaction: upserts the connector (re-deriving its grants as
    /// `put_connector` does), deletes the bindings of `removed` units (with their grants)
    /// and upserts the `kept` bindings with their grants (new routing keys).
    async fn rotate_connector(
        &self,
        connector: &ConnectorRecord,
        component: &[u8],
        kept: &[(BindingRecord, GrantRecord)],
        removed: &[String],
    ) -> StoreResult<()> {
        let write = StateWrite::RotateConnector {
            connector,
            component,
            kept,
            removed,
        };
        self.write(write, None).await.map(drop)
    }
    /// Upserts a unit.
    async fn put_unit(&self, unit: &UnitRecord) -> StoreResult<()> {
        self.write(StateWrite::PutUnit(unit), None).await.map(drop)
    }
    /// Deletes a unit with its bindings, every grant whose subject is the unit and its
    /// place in every agent's unit list, in one transaction. Children are the caller's
    /// concern (it refuses to delete a parent).
    async fn delete_unit(&self, id: &str) -> StoreResult<bool> {
        self.write(StateWrite::DeleteUnit(id), None).await
    }
    /// Upserts an agent with its unit memberships (order kept).
    async fn put_agent(&self, agent: &AgentRecord) -> StoreResult<()> {
        self.write(StateWrite::PutAgent(agent), None)
            .await
            .map(drop)
    }
    /// Deletes an agent with its explicit grants and image tools.
    async fn delete_agent(&self, id: &str) -> StoreResult<bool> {
        self.write(StateWrite::DeleteAgent(id), None).await
    }
    /// Upserts a binding and its grant in one transaction (the grant is keyed by
    /// subject + tool + provenance, so re-binding does not duplicate it).
    async fn put_binding(&self, binding: &BindingRecord, grant: &GrantRecord) -> StoreResult<()> {
        self.write(StateWrite::PutBinding(binding, grant), None)
            .await
            .map(drop)
    }
    /// Deletes a binding and the unit's grants with provenance `connector:<slug>` in one
    /// transaction; `false` if there was no such binding.
    async fn delete_binding(&self, unit_id: &str, connector: &str) -> StoreResult<bool> {
        let write = StateWrite::DeleteBinding {
            unit: unit_id,
            connector,
        };
        self.write(write, None).await
    }
    /// Upserts a grant (keyed by subject + tool + provenance).
    async fn put_grant(&self, grant: &GrantRecord) -> StoreResult<()> {
        self.write(StateWrite::PutGrant(grant), None)
            .await
            .map(drop)
    }
    /// Deletes the grants of `subject` for `tool` with provenance `provenance`.
    async fn delete_grant(
        &self,
        subject: &Subject,
        tool: &str,
        provenance: &GrantProvenance,
    ) -> StoreResult<bool> {
        let write = StateWrite::DeleteGrant {
            subject,
            tool,
            provenance,
        };
        self.write(write, None).await
    }
    /// Upserts the image tools of an agent.
    async fn put_image_tools(&self, record: &ImageToolsRecord) -> StoreResult<()> {
        self.write(StateWrite::PutImageTools(record), None)
            .await
            .map(drop)
    }
    /// Writes `write` exactly as its own method does and appends `audit` to the audit
    /// log in the same transaction: the change and its record exist together or not at
    /// all.
    async fn write_audited(&self, write: StateWrite<'_>, audit: &AuditEntry) -> StoreResult<()> {
        self.write(write, Some(audit)).await.map(drop)
    }
    /// Writes `writes` in order, each exactly as [`StateStore::write_audited`] does (its
    /// own state version, change-log entry and audit record), in as few transactions as
    /// the store can: one commit's fixed cost (a WAL flush) is shared by the batch. Each
    /// write is all or nothing on its own (a savepoint each); the first that fails stops
    /// the batch, and those after it are not run (they may have been decided on top of
    /// it). The answer has one outcome per write, in order: a write is
    /// [`BatchedWrite::Committed`] only once the transaction holding it has committed.
    async fn write_batch(&self, writes: &[(StateWrite<'_>, &AuditEntry)]) -> Vec<BatchedWrite> {
        let mut outcomes = Vec::with_capacity(writes.len());
        for (write, audit) in writes {
            let outcome = match outcomes.last() {
                Some(BatchedWrite::Failed(_) | BatchedWrite::NotRun) => BatchedWrite::NotRun,
                _ => match self.write_audited(*write, audit).await {
                    Ok(()) => BatchedWrite::Committed,
                    Err(e) => BatchedWrite::Failed(e),
                },
            };
            outcomes.push(outcome);
        }
        outcomes
    }
}

/// What became of one write of [`StateStore::write_batch`].
#[derive(Debug, Clone)]
pub enum BatchedWrite {
    /// Committed, with its audit record and change-log entry.
    Committed,
    /// Not stored: it failed, or the transaction holding it did not commit.
    Failed(StoreError),
    /// Not run: an earlier write of the batch failed first.
    NotRun,
}

/// One of [`StateStore`]'s writes, named as a value (for [`StateStore::write_audited`]).
#[derive(Debug, Clone, Copy)]
pub enum StateWrite<'a> {
    /// [`StateStore::put_connector`].
    PutConnector(&'a ConnectorRecord, &'a [u8]),
    /// [`StateStore::delete_connector`].
    DeleteConnector(&'a str),
    /// [`StateStore::rotate_connector`].
    RotateConnector {
        /// The connector.
        connector: &'a ConnectorRecord,
        /// Its component's bytes.
        component: &'a [u8],
        /// Bindings kept, with their re-derived grants.
        kept: &'a [(BindingRecord, GrantRecord)],
        /// Units whose binding is removed.
        removed: &'a [String],
    },
    /// [`StateStore::put_unit`].
    PutUnit(&'a UnitRecord),
    /// [`StateStore::delete_unit`].
    DeleteUnit(&'a str),
    /// [`StateStore::put_agent`].
    PutAgent(&'a AgentRecord),
    /// [`StateStore::delete_agent`].
    DeleteAgent(&'a str),
    /// [`StateStore::put_binding`].
    PutBinding(&'a BindingRecord, &'a GrantRecord),
    /// [`StateStore::delete_binding`].
    DeleteBinding {
        /// The unit.
        unit: &'a str,
        /// The connector's slug.
        connector: &'a str,
    },
    /// [`StateStore::put_grant`].
    PutGrant(&'a GrantRecord),
    /// [`StateStore::delete_grant`].
    DeleteGrant {
        /// Whose grant.
        subject: &'a Subject,
        /// The tool or `<namespace>.*`.
        tool: &'a str,
        /// The grant's provenance.
        provenance: &'a GrantProvenance,
    },
    /// [`StateStore::put_image_tools`].
    PutImageTools(&'a ImageToolsRecord),
}

impl StateWrite<'_> {
    /// The write's name, as errors about it say.
    pub fn op(&self) -> &'static str {
        match self {
            StateWrite::PutConnector(..) => "put_connector",
            StateWrite::DeleteConnector(_) => "delete_connector",
            StateWrite::RotateConnector { .. } => "rotate_connector",
            StateWrite::PutUnit(_) => "put_unit",
            StateWrite::DeleteUnit(_) => "delete_unit",
            StateWrite::PutAgent(_) => "put_agent",
            StateWrite::DeleteAgent(_) => "delete_agent",
            StateWrite::PutBinding(..) => "put_binding",
            StateWrite::DeleteBinding { .. } => "delete_binding",
            StateWrite::PutGrant(_) => "put_grant",
            StateWrite::DeleteGrant { .. } => "delete_grant",
            StateWrite::PutImageTools(_) => "put_image_tools",
        }
    }
}

/// Which records [`AuditStore::audit_records`] returns: those after `after` that match
/// every filter given, oldest first, at most `limit`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// Records with a greater seq.
    pub after: i64,
    /// At most this many.
    pub limit: u32,
    /// Exactly this action.
    pub action: Option<String>,
    /// Exactly this actor kind (`operator`, `agent`, ...).
    pub actor_kind: Option<String>,
    /// Exactly this actor id.
    pub actor_id: Option<String>,
    /// Exactly this target.
    pub target: Option<String>,
    /// At or after this time (an audit time, see `connector_model::audit::audit_time`).
    pub since: Option<String>,
    /// Before this time (likewise).
    pub until: Option<String>,
}

/// The audit log: one hash chain per database, appended to by every store handle
/// (replica) in one order.
#[async_trait]
pub trait AuditStore: Send + Sync + 'static {
    /// Appends `entries`, in order, to the chain in one transaction (each gets the next
    /// seq and the hash of the record before it); returns the sealed records.
    async fn append_audit(&self, entries: Vec<AuditEntry>) -> StoreResult<Vec<AuditRecord>>;
    /// Appends `entry` with the other records appended at the same moment, in one
    /// transaction for all of them ([`audit_groups`]), and answers once it is committed.
    async fn append_audit_entry(&self, entry: AuditEntry) -> StoreResult<()>;
    /// The records `query` asks for.
    async fn audit_records(&self, query: &AuditQuery) -> StoreResult<Vec<AuditRecord>>;
    /// Where the kept chain starts (moved by [`AuditStore::prune_audit`]).
    async fn audit_anchor(&self) -> StoreResult<AuditAnchor>;
    /// The chain's head: the seq and hash of the last record appended (what the next
    /// append follows), kept apart from the records and moved by every append, so that
    /// removing the newest records is found and their seqs are never given again.
    async fn audit_head(&self) -> StoreResult<AuditAnchor>;
    /// Of the `max` oldest records, deletes those up to the last one dated before
    /// `before` (an audit time), and moves the anchor to the last one deleted, in one
    /// transaction; returns how many were deleted (fewer than `max`: nothing older is
    /// left). The newest record is never deleted: it carries the chain's head. Bounded
    /// by `max` so that no prune holds the database's writer for long.
    async fn prune_audit(&self, before: &str, max: u32) -> StoreResult<u64>;
}

/// Verified webhook deliveries: stored before they are acknowledged, claimed by one
/// replica at a time, completed (with their messages) exactly once.
#[async_trait]
pub trait DeliveryQueue: Send + Sync + 'static {
    /// Stores a verified delivery, held by `claim`, unless the same (connector, delivery
    /// id) was stored within the last `dedup_window_secs` (then returns `false`: a
    /// duplicate). An older row with the same id is replaced. Atomic across processes:
    /// of two concurrent inserts of the same id exactly one returns `true`. With `audit`,
    /// its record is appended to the audit log in the same transaction (not for a
    /// duplicate).
    async fn insert_delivery(
        &self,
        delivery: &DeliveryRecord,
        dedup_window_secs: i64,
        claim: &Claim,
        audit: Option<&AuditEntry>,
    ) -> StoreResult<bool>;
    /// Stores a delivery that was routed before it was stored, already finished: in one
    /// transaction, the delivery (status `done`, attempts 1, `routed_to`, no claim) and
    /// `messages` appended to their units' inboxes — unless the same (connector, delivery
    /// id) was stored within the last `dedup_window_secs`: then nothing is written and
    /// `None` is returned (a duplicate). Returns the stored messages (with their cursors).
    /// Atomic across processes, as [`DeliveryQueue::insert_delivery`] is. With `audit`,
    /// its record is appended to the audit log in the same transaction (and, like the
    /// rest, not for a duplicate).
    async fn insert_routed_delivery(
        &self,
        delivery: &DeliveryRecord,
        messages: &[MessageRecord],
        routed_to: &[String],
        dedup_window_secs: i64,
        audit: Option<&AuditEntry>,
    ) -> StoreResult<Option<Vec<MessageRecord>>>;
    /// Claims up to `limit` unfinished deliveries (oldest first) for `claim.owner` until
    /// `claim.until_unix`, per `scope`, and returns them with the new claim. `now_unix`
    /// decides which claims have lapsed. Rows another transaction is claiming at the same
    /// moment are skipped, never waited for, so concurrent sweeps never take the same row.
    async fn claim_deliveries(
        &self,
        claim: &Claim,
        now_unix: i64,
        scope: ClaimScope,
        limit: u32,
    ) -> StoreResult<Vec<DeliveryRecord>>;
    /// In one transaction: appends `messages` to their units' inboxes and marks the
    /// delivery done. If it is already done, nothing is written and `None` is returned, so
    /// a delivery's messages are stored at most once. Returns the stored messages (with
    /// their cursors). With `audit`, its record is appended to the audit log in the same
    /// transaction (and, like the rest, not when the delivery was already done).
    async fn complete_delivery(
        &self,
        connector: &str,
        delivery_id: &str,
        messages: &[MessageRecord],
        routed_to: &[String],
        audit: Option<&AuditEntry>,
    ) -> StoreResult<Option<Vec<MessageRecord>>>;
    /// Marks a delivery failed with `error` (it stays stored for a retry) and releases
    /// its claim.
    async fn fail_delivery(
        &self,
        connector: &str,
        delivery_id: &str,
        error: &str,
    ) -> StoreResult<()>;
    /// One delivery.
    async fn delivery(
        &self,
        connector: &str,
        delivery_id: &str,
    ) -> StoreResult<Option<DeliveryRecord>>;
    /// Deliveries that are pending or failed, oldest first.
    async fn unfinished_deliveries(&self) -> StoreResult<Vec<DeliveryRecord>>;
    /// Deletes finished deliveries received before `before_unix` (their bodies; the
    /// messages stay); returns how many.
    async fn prune_deliveries(&self, before_unix: i64) -> StoreResult<u64>;
    /// How many commits this handle's writes took and how many writes they held (a
    /// store that commits writes in groups has more writes than commits). For
    /// `/metrics`; zero where the store does not count.
    fn commit_counts(&self) -> CommitCounts {
        CommitCounts::default()
    }
    /// The deliveries stored for `connector`, newest first, at most `limit`, for the
    /// operator to look at: bodies are left out (an empty `body`), whatever their size.
    async fn deliveries_of(&self, connector: &str, limit: u32) -> StoreResult<Vec<DeliveryRecord>>;
    /// The deliveries stored for `connector` with `status`, newest first (by received
    /// time, then delivery id, descending), at most `limit`, bodies left out as in
    /// [`DeliveryQueue::deliveries_of`]. `after` is the `(received_unix, delivery_id)` of
    /// the last delivery of the previous page: this page holds the ones after it in that
    /// order. However many deliveries of other statuses there are, none is skipped.
    async fn deliveries_with_status(
        &self,
        connector: &str,
        status: DeliveryStatus,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> StoreResult<Vec<DeliveryRecord>>;
}

/// Commits and the writes they held, since the store handle was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitCounts {
    /// Transactions committed.
    pub commits: u64,
    /// Writes those transactions held.
    pub writes: u64,
}

/// Units' inboxes, read by cursor (messages are appended by
/// [`DeliveryQueue::insert_routed_delivery`] or [`DeliveryQueue::complete_delivery`], in the
/// transaction that finishes their delivery).
#[async_trait]
pub trait InboxStore: Send + Sync + 'static {
    /// A unit's messages with cursor greater than `after`, oldest first, at most `limit`.
    async fn messages(
        &self,
        unit_id: &str,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<MessageRecord>>;

    /// A unit's messages with cursor less than `before` (every one when `None`), newest
    /// first, at most `limit`: an inbox's newest page, and the pages before it, read
    /// from the unit's index without the older messages.
    async fn messages_newest_first(
        &self,
        unit_id: &str,
        before: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<MessageRecord>>;

    /// The cursor of a unit's newest message, `0` when it has none: where a watcher that
    /// only wants messages from now on starts.
    async fn last_message_cursor(&self, unit_id: &str) -> StoreResult<i64> {
        let mut after = 0;
        loop {
            let page = self.messages(unit_id, after, 500).await?;
            match page.last() {
                Some(m) if page.len() == 500 => after = m.seq,
                Some(m) => return Ok(m.seq),
                None => return Ok(after),
            }
        }
    }
}

/// Secrets the replicas of one database share (agent-token key, operator-token digest).
#[async_trait]
pub trait SecretStore: Send + Sync + 'static {
    /// The secret stored under `name`; if there is none yet, stores `candidate` and returns
    /// it. Concurrent callers with different candidates all get the same (first) value.
    /// Replicas use it to share keys (e.g. the agent-token key).
    async fn shared_secret(&self, name: &str, candidate: &str) -> StoreResult<String>;
}

/// How a host learns that another replica changed the shared state.
#[async_trait]
pub trait ReplicaCoordination: Send + Sync + 'static {
    /// The current state version — a number that grows with every committed change to
    /// connectors, units, agents, bindings, grants or image tools (deliveries and
    /// messages do not count) — and whether another store handle wrote any version after
    /// `applied`. Versions written through this handle are never `foreign`.
    async fn changes_since(&self, applied: i64) -> StoreResult<StateCheck>;
    /// Whether other processes may write the same database (replicas). A host on a shared
    /// store checks [`ReplicaCoordination::changes_since`] before serving a request.
    fn is_shared(&self) -> bool {
        false
    }
    /// From now on, state writes through this handle refuse (with
    /// [`StoreError::Conflict`], nothing written) to run on top of a version another
    /// handle wrote that this one has not seen: applied (see
    /// [`ReplicaCoordination::applied`]) or found to be its own by `changes_since`. A
    /// host serving from memory turns it on: it checked its rules (the unit exists, the
    /// connector is installed) against that memory. A no-op where no other process writes.
    fn refuse_stale_writes(&self) {}
    /// The caller's memory now reflects the state at `version` (a snapshot it loaded and
    /// put in place, or the foreign writes up to it applied). Loading alone does not count:
    /// a snapshot read and then discarded (a local write landed meanwhile) must not let
    /// later writes pass as current.
    fn applied(&self, _version: i64) {}
    /// The writes other store handles committed with versions in `(applied, upto]`
    /// (`upto` a version [`ReplicaCoordination::changes_since`] returned), oldest first, as
    /// the change log keeps them: applied in that order to memory that reflects `applied`
    /// and this handle's own writes after it, they bring it to `upto`. `None` when the log
    /// does not hold every version of that range (pruned past `applied`, written before
    /// the log existed) or this handle no longer knows which of them were its own: then
    /// the caller reloads everything.
    async fn foreign_writes(
        &self,
        _applied: i64,
        _upto: i64,
    ) -> StoreResult<Option<Vec<LoggedWrite>>> {
        Ok(None)
    }
    /// Forgets the change log's entries up to and including version `upto`; returns how
    /// many. Writes prune it on their own (see [`CHANGES_KEPT`]).
    async fn prune_changes(&self, _upto: i64) -> StoreResult<u64> {
        Ok(0)
    }
}

/// Everything a host persists, by concern. A host holds one `Arc<dyn Store>` and hands
/// each of its parts only the concern it needs (`&dyn StateStore`, `&dyn DeliveryQueue`,
/// ...).
pub trait Store:
    StateStore + DeliveryQueue + InboxStore + SecretStore + ReplicaCoordination + AuditStore
{
}
impl<
        T: StateStore + DeliveryQueue + InboxStore + SecretStore + ReplicaCoordination + AuditStore,
    > Store for T
{
}

/// Opens the store named by a `database_url` (CONTRACT §2).
///
/// Understood: `sqlite://<path>` and `sqlite:<path>` (a relative path is relative to the
/// working directory; `sqlite:///abs/host.db` is absolute), and `sqlite::memory:` /
/// `sqlite://:memory:` for a throw-away in-memory database. Anything else is refused with
/// [`StoreError::Unavailable`]; the message names only the scheme, never the whole URL
/// (a URL may carry credentials). Blocking: call it at start-up.
pub fn open_store(url: &str) -> StoreResult<std::sync::Arc<dyn Store>> {
    open_store_with(url, sqlite::Writes::Grouped)
}

/// As [`open_store`], with a database file's writes run as `writes` says (an in-memory
/// database's always go to a writer thread).
pub fn open_store_with(
    url: &str,
    writes: sqlite::Writes,
) -> StoreResult<std::sync::Arc<dyn Store>> {
    let Some(rest) = url.strip_prefix("sqlite:") else {
        let scheme = url.split_once(':').map_or("(none)", |(scheme, _)| scheme);
        return Err(StoreError::Unavailable(format!(
            "unsupported database_url scheme `{scheme}`: use sqlite://<path> or postgres://user@host/db"
        )));
    };
    let path = rest.strip_prefix("//").unwrap_or(rest);
    if path.is_empty() {
        return Err(StoreError::Unavailable(
            "database_url `sqlite://` names no file: use sqlite://<path>".into(),
        ));
    }
    if path.contains('?') {
        return Err(StoreError::Unavailable(
            "database_url options (`?...`) are not supported: use sqlite://<path>".into(),
        ));
    }
    let store = if path == ":memory:" {
        sqlite::SqliteStore::open_in_memory()?
    } else {
        sqlite::SqliteStore::open_with(std::path::Path::new(path), writes)?
    };
    Ok(std::sync::Arc::new(store))
}
