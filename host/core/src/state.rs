//! The host's state in memory, and its one write path.
//!
//! [`State`] holds what every request reads: the directory (units, agents, bindings,
//! grants), the installed connectors and their outbound policies, the agents' image tools
//! and the platform tools, with the resolver's cache over them. Nothing else holds a copy.
//!
//! Every change is a [`StateChange`] and goes through [`State::write`]: under the write
//! lock the caller validates against the state as it is *now* (so a unit deleted a moment
//! ago cannot be granted to), the change is persisted in one store transaction, then
//! applied to memory and the resolver cache dropped under the directory's write lock —
//! readers see the state before a change or after it, never half of it, and memory never
//! holds what the database refused.
//!
//! Everyone's writes wait for the write lock, so nothing slow runs under it: the decision
//! is a plain function (it cannot await a guest call, a compilation or a fetch; those run
//! before, and the decision re-checks that what they were checked against still holds),
//! and a reload ([`State::reload`]) reads the store, prepares connectors and builds the
//! new directory before it takes the lock, which it holds only to put them in place.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{RwLock, RwLockReadGuard};

use crate::audit::{Audit, AuditLog};
use crate::grants::{Directory, EffectiveToolResolver, ResolvedTools, ToolCatalog};
use crate::registry::{ConnectorRegistry, InstalledConnector};
use connector_model::audit::AuditEntry;
use connector_model::connector::ToolInfo;
use connector_model::error::{HostError, HostResult};
use connector_model::provenance::GrantProvenance;
use connector_model::records::{
    AgentRecord, BindingRecord, ConnectorRecord, GrantRecord, ImageToolsRecord, Snapshot, Subject,
    UnitRecord,
};
use connector_runtime::OutboundPolicy;
use connector_store::{LoggedWrite, ReplicaCoordination, StateStore, StateWrite, StoreResult};

/// One change of the host's state, persisted as one store transaction.
pub(crate) enum StateChange {
    /// Nothing to write (e.g. installing the digest already installed): recorded as an
    /// unchanged success.
    Nothing,
    /// What the request was checked against changed before the write lock was taken:
    /// nothing is written or recorded, and the caller checks the request again (its
    /// final outcome is what the audit log records, once).
    CheckAgain,
    PutUnit(UnitRecord),
    /// A unit with its bindings, its grants and its place in agents' unit lists.
    DeleteUnit(String),
    PutAgent(AgentRecord),
    /// An agent with its grants and image tools.
    DeleteAgent(String),
    /// A binding and its `<namespace>.*` grant.
    PutBinding(BindingRecord, GrantRecord),
    /// A binding and exactly its grants.
    DeleteBinding {
        unit: String,
        connector: String,
    },
    PutGrant(GrantRecord),
    DeleteGrant {
        subject: Subject,
        tool: String,
        provenance: GrantProvenance,
    },
    PutImageTools(ImageToolsRecord),
    /// An install or rotation: the connector, its kept (re-keyed) bindings with re-derived
    /// grants, and the bindings it breaks removed.
    InstallConnector {
        record: ConnectorRecord,
        component: Arc<[u8]>,
        prepared: Arc<InstalledConnector>,
        policy: Arc<OutboundPolicy>,
        kept: Vec<(BindingRecord, GrantRecord)>,
        removed: Vec<String>,
    },
    /// A connector with every binding and grant of it.
    RemoveConnector(String),
}

impl StateChange {
    /// Writes the change and its audit record in one transaction.
    pub(crate) async fn persist(
        &self,
        store: &dyn StateStore,
        audit: &AuditEntry,
    ) -> StoreResult<()> {
        let write = match self {
            StateChange::Nothing | StateChange::CheckAgain => return Ok(()),
            StateChange::PutUnit(unit) => StateWrite::PutUnit(unit),
            StateChange::DeleteUnit(id) => StateWrite::DeleteUnit(id),
            StateChange::PutAgent(agent) => StateWrite::PutAgent(agent),
            StateChange::DeleteAgent(id) => StateWrite::DeleteAgent(id),
            StateChange::PutBinding(binding, grant) => StateWrite::PutBinding(binding, grant),
            StateChange::DeleteBinding { unit, connector } => {
                StateWrite::DeleteBinding { unit, connector }
            }
            StateChange::PutGrant(grant) => StateWrite::PutGrant(grant),
            StateChange::DeleteGrant {
                subject,
                tool,
                provenance,
            } => StateWrite::DeleteGrant {
                subject,
                tool,
                provenance,
            },
            StateChange::PutImageTools(record) => StateWrite::PutImageTools(record),
            StateChange::InstallConnector {
                record,
                component,
                kept,
                removed,
                ..
            } => StateWrite::RotateConnector {
                connector: record,
                component,
                kept,
                removed,
            },
            StateChange::RemoveConnector(slug) => StateWrite::DeleteConnector(slug),
        };
        store.write_audited(write, audit).await
    }

    /// The change another replica made and logged, as this one applies it (`None`: a
    /// connector's, whose component must be prepared: the state is reloaded instead).
    fn logged(write: LoggedWrite) -> Option<StateChange> {
        Some(match write {
            LoggedWrite::PutUnit { unit } => StateChange::PutUnit(unit),
            LoggedWrite::DeleteUnit { id } => StateChange::DeleteUnit(id),
            LoggedWrite::PutAgent { agent } => StateChange::PutAgent(agent),
            LoggedWrite::DeleteAgent { id } => StateChange::DeleteAgent(id),
            LoggedWrite::PutBinding { binding, grant } => StateChange::PutBinding(binding, grant),
            LoggedWrite::DeleteBinding { unit, connector } => {
                StateChange::DeleteBinding { unit, connector }
            }
            LoggedWrite::PutGrant { grant } => StateChange::PutGrant(grant),
            LoggedWrite::DeleteGrant {
                subject,
                tool,
                provenance,
            } => StateChange::DeleteGrant {
                subject,
                tool,
                provenance,
            },
            LoggedWrite::PutImageTools { record } => StateChange::PutImageTools(record),
            LoggedWrite::Connector { .. } => return None,
        })
    }

    /// Applies the persisted change to memory. The caller holds the directory's write lock
    /// and drops the resolver cache afterwards.
    fn apply(self, dir: &mut Directory, memory: &State) {
        match self {
            StateChange::Nothing | StateChange::CheckAgain => {}
            StateChange::PutUnit(unit) => dir.put_unit(unit),
            StateChange::DeleteUnit(id) => dir.remove_unit(&id),
            StateChange::PutAgent(agent) => dir.put_agent(agent),
            StateChange::DeleteAgent(id) => {
                dir.remove_agent(&id);
                memory.image_tools.write().remove(&id);
            }
            StateChange::PutBinding(binding, grant) => dir.put_binding(binding, grant),
            StateChange::DeleteBinding { unit, connector } => {
                dir.remove_binding(&unit, &connector);
            }
            StateChange::PutGrant(grant) => dir.put_grant(grant),
            StateChange::DeleteGrant {
                subject,
                tool,
                provenance,
            } => {
                dir.remove_grant(&subject, &tool, &provenance);
            }
            StateChange::PutImageTools(record) => {
                memory
                    .image_tools
                    .write()
                    .insert(record.agent_id.clone(), image_tool_infos(&record));
                dir.put_image_tools(record);
            }
            StateChange::InstallConnector {
                record,
                prepared,
                policy,
                kept,
                removed,
                ..
            } => {
                memory.registry.insert(prepared);
                memory.policies.write().insert(record.slug.clone(), policy);
                dir.rename_connector_namespace(&record.slug, &record.namespace);
                for unit in &removed {
                    dir.remove_binding(unit, &record.slug);
                }
                for (binding, grant) in kept {
                    dir.put_binding(binding, grant);
                }
            }
            StateChange::RemoveConnector(slug) => {
                dir.remove_connector(&slug);
                memory.registry.remove(&slug);
                memory.policies.write().remove(&slug);
            }
        }
    }
}

/// Outbound policies of installed connectors, by slug.
type Policies = RwLock<BTreeMap<String, Arc<OutboundPolicy>>>;
/// The tools of each agent's image, by agent id.
type ImageToolsByAgent = BTreeMap<String, Arc<[Arc<ToolInfo>]>>;
/// Image tools of agents, by agent id.
type ImageTools = RwLock<ImageToolsByAgent>;

/// Connectors ready to serve, with their outbound policies: what a reload or a start
/// puts in place.
pub(crate) type PreparedConnectors = Vec<(Arc<InstalledConnector>, Arc<OutboundPolicy>)>;

/// How many times a reload prepares the stored state without the write lock before it
/// holds the lock while preparing (local writes kept landing while it prepared).
const RELOAD_ATTEMPTS: u32 = 4;

/// An attempt at reading another replica's writes (see [`State::start_reading`]).
struct Reading<'a> {
    /// The write lock, held from the start on the last attempt.
    held: Option<tokio::sync::MutexGuard<'a, ()>>,
    /// Local writes counted when the read began.
    writes_before: u64,
}

/// Everything the host serves from memory (see the module docs).
pub(crate) struct State {
    store: Arc<dyn StateStore>,
    /// Where a write that finds nothing to change leaves its record.
    audit: Arc<AuditLog>,
    /// One write at a time, from deciding to applying.
    writes: tokio::sync::Mutex<()>,
    /// Local writes applied so far (counted under the write lock): a reload prepared from
    /// a snapshot read before one of them must not replace it.
    local_writes: AtomicU64,
    directory: RwLock<Directory>,
    resolver: EffectiveToolResolver,
    registry: ConnectorRegistry,
    policies: Policies,
    image_tools: ImageTools,
    /// Sorted by name.
    platform_tools: RwLock<Arc<[Arc<ToolInfo>]>>,
}

impl State {
    /// The state `snapshot` stores, with no connectors installed yet (see
    /// [`State::install_stored`]). Its units, agents, bindings and grants are taken out of
    /// `snapshot` ([`Directory::from_snapshot`]).
    pub(crate) fn new(
        store: Arc<dyn StateStore>,
        audit: Arc<AuditLog>,
        registry: ConnectorRegistry,
        snapshot: &mut Snapshot,
    ) -> Self {
        let state = Self {
            store,
            audit,
            writes: tokio::sync::Mutex::new(()),
            local_writes: AtomicU64::new(0),
            directory: RwLock::new(Directory::from_snapshot(snapshot)),
            resolver: EffectiveToolResolver::default(),
            registry,
            policies: RwLock::new(BTreeMap::new()),
            image_tools: RwLock::new(BTreeMap::new()),
            platform_tools: RwLock::new(Arc::from(Vec::new())),
        };
        state.cache_image_tools(snapshot);
        state
    }

    /// The one write path: under the write lock, `decide` checks the request against the
    /// state as it is now and says what to change; the change is persisted in one store
    /// transaction, then applied to memory with the resolver cache dropped, under the
    /// directory's write lock. `decide` is not async: whatever takes time (a guest's
    /// `bind`, a compilation, a fetch) runs before, and `decide` checks that what it was
    /// checked against still holds.
    ///
    /// `audit` says what the change records: its record is written in the change's
    /// transaction (a change that turns out to be nothing still leaves one, marked
    /// `unchanged`). A refusal is the caller's to record: it may come before this.
    pub(crate) async fn write<T>(
        &self,
        audit: &Audit,
        decide: impl FnOnce() -> HostResult<(StateChange, T)>,
    ) -> HostResult<T> {
        let write = self.writes.lock().await;
        let (change, out) = decide()?;
        if matches!(change, StateChange::CheckAgain) {
            return Ok(out);
        }
        if matches!(change, StateChange::Nothing) {
            drop(write);
            let mut entry = audit.entry("ok");
            if let serde_json::Value::Object(details) = &mut entry.details {
                details.insert("unchanged".into(), serde_json::Value::Bool(true));
            }
            self.audit.append(entry).await?;
            return Ok(out);
        }
        change
            .persist(self.store.as_ref(), &audit.entry("ok"))
            .await?;
        self.local_writes.fetch_add(1, Ordering::SeqCst);
        let mut dir = self.directory.write();
        change.apply(&mut dir, self);
        self.resolver.invalidate();
        Ok(out)
    }

    /// Replaces everything with what the store holds now (another replica wrote it) and
    /// returns the version put in place. The snapshot is read, `prepare` makes its
    /// connectors ready (reusing what it can, compiling what it must; it is handed what
    /// the previous attempt prepared) and the new directory is built, all without the
    /// write lock; the lock is held only to put them in place, in one step for readers.
    /// If a local write landed meanwhile (the snapshot may not hold it), the work is done
    /// again; after [`RELOAD_ATTEMPTS`] the lock is held throughout.
    pub(crate) async fn reload<Fut>(
        &self,
        prepare: impl Fn(Arc<Snapshot>, PreparedConnectors) -> Fut,
    ) -> HostResult<i64>
    where
        Fut: std::future::Future<Output = PreparedConnectors>,
    {
        let mut prepared = Vec::new();
        for attempt in 1..=RELOAD_ATTEMPTS {
            let reading = self.start_reading(attempt).await;
            let snapshot = Arc::new(self.store.load().await?);
            prepared = prepare(snapshot.clone(), prepared).await;
            // `prepare` is done with it: the directory takes what it holds, not a copy.
            let mut snapshot = Arc::try_unwrap(snapshot).unwrap_or_else(|shared| (*shared).clone());
            let directory = Directory::from_snapshot(&mut snapshot);
            let image_tools = image_tools_of(&snapshot);
            let Some(_write) = self.lock_to_apply(reading).await else {
                tracing::debug!(
                    attempt,
                    "a local write landed while reloading; reloading again"
                );
                continue;
            };
            let replaced = self.put_in_place(prepared, Some((directory, image_tools)));
            drop(_write);
            drop(replaced);
            return Ok(snapshot.version);
        }
        unreachable!("the last reload attempt holds the write lock throughout")
    }

    /// Applies the writes other replicas committed in `(applied, upto]`, as the store's
    /// change log has them, to memory that reflects version `applied` (and this replica's
    /// own writes after it): the same changes their replicas applied, in version order.
    /// `false`: the log cannot bring memory to `upto` (pruned past `applied`, or a
    /// connector changed), so the caller reloads instead.
    ///
    /// As in [`State::reload`], the log is read without the write lock and applied under
    /// it, all at once for readers (one hold of the directory's write lock), and read
    /// again if a local write landed meanwhile: a write of this replica never falls between
    /// two foreign ones. (The store refuses a local write on top of a foreign version this
    /// memory has not applied, so the foreign writes read are always the newest.)
    pub(crate) async fn catch_up(
        &self,
        store: &dyn ReplicaCoordination,
        applied: i64,
        upto: i64,
    ) -> HostResult<bool> {
        for attempt in 1..=RELOAD_ATTEMPTS {
            let reading = self.start_reading(attempt).await;
            let Some(writes) = store.foreign_writes(applied, upto).await? else {
                return Ok(false);
            };
            let Some(changes) = writes
                .into_iter()
                .map(StateChange::logged)
                .collect::<Option<Vec<_>>>()
            else {
                return Ok(false);
            };
            let Some(_write) = self.lock_to_apply(reading).await else {
                tracing::debug!(
                    attempt,
                    "a local write landed while reading the change log; reading it again"
                );
                continue;
            };
            let mut dir = self.directory.write();
            for change in changes {
                change.apply(&mut dir, self);
            }
            self.resolver.invalidate();
            return Ok(true);
        }
        unreachable!("the last catch-up attempt holds the write lock throughout")
    }

    /// Starts attempt `attempt` of reading what another replica wrote (without the write
    /// lock, except on the last attempt, which holds it throughout): notes how many local
    /// writes came before the read.
    async fn start_reading(&self, attempt: u32) -> Reading<'_> {
        let held = if attempt == RELOAD_ATTEMPTS {
            Some(self.writes.lock().await)
        } else {
            None
        };
        Reading {
            held,
            writes_before: self.local_writes.load(Ordering::SeqCst),
        }
    }

    /// The write lock to apply what `reading` read, or `None` when a local write landed
    /// since it started (the read may not hold it: read again).
    async fn lock_to_apply<'a>(
        &'a self,
        reading: Reading<'a>,
    ) -> Option<tokio::sync::MutexGuard<'a, ()>> {
        let write = match reading.held {
            Some(held) => held,
            None => self.writes.lock().await,
        };
        (self.local_writes.load(Ordering::SeqCst) == reading.writes_before).then_some(write)
    }

    /// Puts `connectors` in place of the installed ones, and with `served` the directory
    /// and image tools too, in one step for readers (under the directory's write lock).
    /// Returns the directory it replaced, to be dropped after the locks are released.
    fn put_in_place(
        &self,
        connectors: PreparedConnectors,
        served: Option<(Directory, ImageToolsByAgent)>,
    ) -> Option<Directory> {
        let policies: BTreeMap<String, Arc<OutboundPolicy>> = connectors
            .iter()
            .map(|(c, policy)| (c.info().slug.to_string(), policy.clone()))
            .collect();
        let mut dir = self.directory.write();
        self.registry
            .replace_all(connectors.into_iter().map(|(c, _)| c));
        *self.policies.write() = policies;
        let replaced = served.map(|(directory, image_tools)| {
            *self.image_tools.write() = image_tools;
            std::mem::replace(&mut *dir, directory)
        });
        self.resolver.invalidate();
        replaced
    }

    fn cache_image_tools(&self, snapshot: &Snapshot) {
        *self.image_tools.write() = image_tools_of(snapshot);
    }

    /// Installs the connectors found in the store at start-up, outside the write path:
    /// they are already persisted.
    pub(crate) fn install_stored(&self, connectors: PreparedConnectors) {
        self.put_in_place(connectors, None);
    }

    /// The stored bytes of connector `slug` at `digest` (`None`: replaced meanwhile).
    pub(crate) async fn stored_component(
        &self,
        slug: &str,
        digest: &str,
    ) -> StoreResult<Option<Vec<u8>>> {
        self.store.component(slug, digest).await
    }

    /// Holds the write lock (tests that need a write in progress).
    #[cfg(test)]
    pub(crate) async fn hold_writes(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.writes.lock().await
    }

    /// Reads the directory (units, agents, bindings, grants).
    pub(crate) fn directory(&self) -> RwLockReadGuard<'_, Directory> {
        self.directory.read()
    }

    /// The installed connectors.
    pub(crate) fn registry(&self) -> &ConnectorRegistry {
        &self.registry
    }

    /// The outbound policy of connector `slug` (deny-all when it is not installed).
    pub(crate) fn policy(&self, slug: &str) -> Arc<OutboundPolicy> {
        self.policies
            .read()
            .get(slug)
            .cloned()
            .unwrap_or_else(|| Arc::new(OutboundPolicy::deny_all()))
    }

    /// The platform tools every subject gets, sorted by name.
    pub(crate) fn platform_tools(&self) -> Arc<[Arc<ToolInfo>]> {
        self.platform_tools.read().clone()
    }

    /// Replaces the platform tools (`tools` sorted by name).
    pub(crate) fn set_platform_tools(&self, tools: Arc<[Arc<ToolInfo>]>) {
        let _dir = self.directory.write();
        *self.platform_tools.write() = tools;
        self.resolver.invalidate();
    }

    /// See [`EffectiveToolResolver::watch`].
    pub(crate) fn watch_tools(&self) -> tokio::sync::watch::Receiver<u64> {
        self.resolver.watch()
    }

    /// The effective tools of `subject` (`None` when it does not exist), with `dir` read.
    pub(crate) fn resolve(&self, dir: &Directory, subject: &Subject) -> Option<Arc<ResolvedTools>> {
        if let Some(hit) = self.resolver.cached(subject) {
            return Some(hit);
        }
        let connectors = self.registry.namespaces();
        let platform = self.platform_tools();
        let catalog = ToolCatalog {
            connectors: &connectors,
            platform: &platform,
        };
        let image = match subject {
            Subject::Agent(a) => self.image_tools.read().get(a).cloned(),
            Subject::Unit(_) => None,
        };
        self.resolver.resolve(dir, &catalog, image, subject)
    }

    /// The effective tools of a unit or agent (its id checked already).
    pub(crate) fn effective_tools(&self, subject: &Subject) -> HostResult<Arc<ResolvedTools>> {
        let (kind, id) = match subject {
            Subject::Unit(id) => ("unit", id),
            Subject::Agent(id) => ("agent", id),
        };
        let dir = self.directory();
        self.resolve(&dir, subject)
            .ok_or_else(|| HostError::not_found(format!("{kind} `{id}` does not exist")))
    }
}

/// The image tools of every agent `snapshot` holds.
fn image_tools_of(snapshot: &Snapshot) -> ImageToolsByAgent {
    snapshot
        .image_tools
        .iter()
        .map(|record| (record.agent_id.clone(), image_tool_infos(record)))
        .collect()
}

/// The tools an image record declares, as the resolver takes them.
pub(crate) fn image_tool_infos(record: &ImageToolsRecord) -> Arc<[Arc<ToolInfo>]> {
    let tools: Vec<Arc<ToolInfo>> = record
        .tools
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            Some(Arc::new(ToolInfo {
                name: t.get("name")?.as_str()?.to_string(),
                description: t
                    .get("description")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                input_schema: t
                    .get("inputSchema")
                    .cloned()
                    .unwrap_or_else(|| serde_json::json!({"type": "object"})),
                annotations: Default::default(),
                output_schema: None,
            }))
        })
        .collect();
    Arc::from(tools)
}

#[cfg(test)]
mod tests {
    use super::*;
    use connector_runtime::{ConnectorRuntime, RuntimeOptions};
    use connector_store::sqlite::SqliteStore;
    use connector_store_testing::faults::{inject_sqlite, Fault};
    use connector_store_testing::fixtures::*;

    /// A state on a fresh database file (kept in `dir`).
    fn state(dir: &tempfile::TempDir) -> (Arc<State>, Arc<SqliteStore>) {
        let store = Arc::new(SqliteStore::open(&dir.path().join("host.db")).expect("a database"));
        let runtime = Arc::new(ConnectorRuntime::new(RuntimeOptions::default()).expect("runtime"));
        let state = State::new(
            store.clone(),
            AuditLog::new(store.clone(), Default::default()),
            ConnectorRegistry::new(runtime),
            &mut Snapshot::default(),
        );
        (Arc::new(state), store)
    }

    fn test_audit() -> Audit {
        Audit::new(
            &connector_model::audit::Actor::host(),
            "test.write",
            "unit:u".into(),
        )
    }

    async fn put_unit(state: &State, id: &str) {
        state
            .write(&test_audit(), || {
                Ok((StateChange::PutUnit(unit(id, None)), ()))
            })
            .await
            .expect("put a unit");
    }

    #[tokio::test]
    async fn a_write_the_store_refuses_changes_nothing_in_memory() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (state, store) = state(&dir);
        put_unit(&state, "u").await;
        inject_sqlite(&dir.path().join("host.db"), Some(Fault::AfterBindingWrite))
            .expect("the fault");
        let change = StateChange::PutBinding(
            binding("u", "acme", serde_json::json!({})),
            connector_grant("u", "acme", "acme"),
        );
        let refused = state.write(&test_audit(), || Ok((change, ()))).await;
        assert!(refused.is_err());
        {
            let dir = state.directory();
            assert!(dir.binding("u", "acme").is_none());
            assert!(dir.grants_of(&Subject::Unit("u".into())).is_empty());
        }
        // Nor in the store.
        let stored = store.load().await.expect("load");
        assert!(stored.bindings.is_empty() && stored.grants.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_write_decides_on_the_state_left_by_the_one_before() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (state, _) = state(&dir);
        // Every write names its unit after how many units exist when it decides: only
        // if decisions are serialised with the writes do all twenty names differ.
        let writes = (0..20).map(|_| {
            let state = state.clone();
            tokio::spawn(async move {
                state
                    .write(&test_audit(), || {
                        let n = state.directory().units().count();
                        Ok((StateChange::PutUnit(unit(&format!("u{n}"), None)), ()))
                    })
                    .await
            })
        });
        for w in futures::future::join_all(writes).await {
            w.expect("the task").expect("the write");
        }
        assert_eq!(state.directory().units().count(), 20);
    }

    #[tokio::test]
    async fn deleting_an_agent_drops_its_image_tools_from_resolution() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (state, _) = state(&dir);
        put_unit(&state, "u").await;
        let changes = [
            StateChange::PutAgent(agent("a", &["u"])),
            StateChange::PutImageTools(ImageToolsRecord {
                agent_id: "a".into(),
                digest: "sha256:00".into(),
                tools: serde_json::json!([{"name": "img.run", "description": "", "inputSchema": {"type": "object"}}]),
            }),
        ];
        for change in changes {
            state
                .write(&test_audit(), || Ok((change, ())))
                .await
                .expect("write");
        }
        let subject = Subject::Agent("a".into());
        let tools = state.effective_tools(&subject).expect("the agent's tools");
        assert!(tools.get("img.run").is_some());
        state
            .write(&test_audit(), || {
                Ok((StateChange::DeleteAgent("a".into()), ()))
            })
            .await
            .expect("delete");
        assert!(state.effective_tools(&subject).is_err());
        put_unit(&state, "u").await;
        state
            .write(&test_audit(), || {
                Ok((StateChange::PutAgent(agent("a", &["u"])), ()))
            })
            .await
            .expect("put again");
        let tools = state.effective_tools(&subject).expect("the agent's tools");
        assert!(
            tools.get("img.run").is_none(),
            "stale image tools: {tools:?}"
        );
    }
}
