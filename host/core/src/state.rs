//! The host's state in memory, and its one write path.
//!
//! [`State`] holds what every request reads: the directory (units, agents, bindings,
//! grants), the installed connectors and their outbound policies, the agents' image tools
//! and the platform tools, with the resolver's cache over them. Nothing else holds a copy.
//!
//! Every change is a [`StateChange`] and goes through [`State::write`]: the caller's
//! `decide` checks the request against the state as it will be once the writes decided
//! before it are applied ([`Working`]: the directory plus the batches not yet applied, so
//! a unit deleted a moment ago cannot be granted to), the change joins the batch forming
//! behind the commit in flight, and the batch is persisted in one store transaction
//! ([`StateStore::write_batch`]: one commit's WAL flush serves every write in it, one
//! savepoint each). Only then is it applied to memory, with the resolver cache dropped,
//! under the directory's write lock, and each caller answered: readers see the state
//! before a change or after it, never half of it nor a change that is not committed, and
//! memory never holds what the database refused.
//!
//! A batch holds at most [`MAX_BATCH`] writes, and a lone write is committed at once (a
//! batch forms only while another commits). A write the store refuses is answered with
//! its error alone; those decided after it (they may rest on it) decide again, on the
//! state without it. A change the working view does not model (a delete, a connector's)
//! closes its batch: nothing decides after it until it is applied.
//!
//! Nothing slow runs under the locks: the decision is a plain function (it cannot await a
//! guest call, a compilation or a fetch; those run before, and the decision re-checks
//! that what they were checked against still holds), and a reload ([`State::reload`])
//! reads the store, prepares connectors and builds the new directory before it takes the
//! commit slot, which it holds only to put them in place.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock, RwLockReadGuard};

use crate::audit::{Audit, AuditLog};
use crate::grants::{
    ancestry, upsert_grant, Directory, EffectiveToolResolver, ResolvedTools, ToolCatalog,
};
use crate::registry::{ConnectorRegistry, InstalledConnector};
use connector_model::audit::AuditEntry;
use connector_model::connector::ToolInfo;
use connector_model::error::{ErrorCode, HostError, HostResult};
use connector_model::provenance::GrantProvenance;
use connector_model::records::{
    AgentRecord, BindingRecord, ConnectorRecord, GrantRecord, ImageToolsRecord, Snapshot, Subject,
    UnitRecord,
};
use connector_runtime::OutboundPolicy;
use connector_store::{
    BatchedWrite, LoggedWrite, ReplicaCoordination, StateStore, StateWrite, StoreResult,
};

/// One change of the host's state, persisted with its batch ([`State::write`]).
pub(crate) enum StateChange {
    /// Nothing to write (e.g. installing the digest already installed): recorded as an
    /// unchanged success.
    Nothing,
    /// What the request was checked against changed before it was decided:
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
    /// The store's write of the change (`None`: nothing to write).
    fn as_write(&self) -> Option<StateWrite<'_>> {
        Some(match self {
            StateChange::Nothing | StateChange::CheckAgain => return None,
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
        })
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

/// The most writes one batch commits: bounds the transaction and how long the decisions
/// behind it wait.
pub(crate) const MAX_BATCH: usize = 64;

/// What a batch not yet applied changes, as [`Working`] reads it: the records it puts
/// (the last put of each key) and the whole grant list of each subject it grants to.
#[derive(Default)]
struct Pending {
    units: HashMap<String, UnitRecord>,
    agents: HashMap<String, AgentRecord>,
    /// By unit, then connector.
    bindings: HashMap<String, HashMap<String, BindingRecord>>,
    grants: HashMap<Subject, Vec<GrantRecord>>,
    /// It holds a change this view does not model (a delete, a connector's): nothing
    /// decides after it until it is applied.
    closed: bool,
}

impl Pending {
    /// Adds `change` as the batch's newest, with `granted`, the grant list it leaves its
    /// subject with ([`Working::granted`]), if it grants.
    fn record(&mut self, change: &StateChange, granted: Option<Vec<GrantRecord>>) {
        let grant = match change {
            StateChange::Nothing | StateChange::CheckAgain => None,
            StateChange::PutUnit(unit) => {
                self.units.insert(unit.id.clone(), unit.clone());
                None
            }
            StateChange::PutAgent(agent) => {
                self.agents.insert(agent.id.clone(), agent.clone());
                None
            }
            StateChange::PutBinding(binding, grant) => {
                self.bindings
                    .entry(binding.unit_id.clone())
                    .or_default()
                    .insert(binding.connector.clone(), binding.clone());
                Some(grant)
            }
            StateChange::PutGrant(grant) => Some(grant),
            // Nothing a decision reads.
            StateChange::PutImageTools(_) => None,
            StateChange::DeleteUnit(_)
            | StateChange::DeleteAgent(_)
            | StateChange::DeleteBinding { .. }
            | StateChange::DeleteGrant { .. }
            | StateChange::InstallConnector { .. }
            | StateChange::RemoveConnector(_) => {
                self.closed = true;
                None
            }
        };
        if let (Some(grant), Some(list)) = (grant, granted) {
            self.grants.insert(grant.subject.clone(), list);
        }
    }
}

/// The state a write's `decide` checks its request against: the directory with the
/// batches decided before it (committing, and forming behind that) as if applied.
/// Nothing here is visible to readers until its batch has committed.
pub(crate) struct Working<'a> {
    dir: &'a Directory,
    /// Newest first: the batch forming, then the one committing.
    pending: [&'a Pending; 2],
}

impl<'a> Working<'a> {
    /// Unit `id`, if it exists.
    pub(crate) fn unit(&self, id: &str) -> Option<&'a UnitRecord> {
        self.pending
            .iter()
            .find_map(|p| p.units.get(id))
            .or_else(|| self.dir.unit(id))
    }

    /// Agent `id`, if it exists.
    pub(crate) fn agent(&self, id: &str) -> Option<&'a AgentRecord> {
        self.pending
            .iter()
            .find_map(|p| p.agents.get(id))
            .or_else(|| self.dir.agent(id))
    }

    /// The binding of `connector` on `unit`, if bound.
    pub(crate) fn binding(&self, unit: &str, connector: &str) -> Option<&'a BindingRecord> {
        self.pending
            .iter()
            .find_map(|p| p.bindings.get(unit)?.get(connector))
            .or_else(|| self.dir.binding(unit, connector))
    }

    /// Every binding of `connector`.
    pub(crate) fn bindings_of_connector(&self, connector: &str) -> Vec<&'a BindingRecord> {
        let mut bindings: BTreeMap<&str, &'a BindingRecord> = self
            .dir
            .bindings_of_connector(connector)
            .map(|b| (b.unit_id.as_str(), b))
            .collect();
        // Oldest batch first, so the newest put of a binding wins.
        for pending in self.pending.iter().rev() {
            for b in pending.bindings.values().filter_map(|m| m.get(connector)) {
                bindings.insert(b.unit_id.as_str(), b);
            }
        }
        bindings.into_values().collect()
    }

    /// The grants made to `subject` (explicit and by bindings).
    pub(crate) fn grants_of(&self, subject: &Subject) -> &'a [GrantRecord] {
        self.pending
            .iter()
            .find_map(|p| p.grants.get(subject))
            .map_or_else(|| self.dir.grants_of(subject), Vec::as_slice)
    }

    /// Whether some unit has `id` as its parent.
    pub(crate) fn has_children(&self, id: &str) -> bool {
        let mut children = self.dir.child_count(id);
        let moved: std::collections::BTreeSet<&str> = self
            .pending
            .iter()
            .flat_map(|p| p.units.keys().map(String::as_str))
            .collect();
        for unit in moved {
            let was = self
                .dir
                .unit(unit)
                .is_some_and(|u| u.parent.as_deref() == Some(id));
            let is = self
                .unit(unit)
                .is_some_and(|u| u.parent.as_deref() == Some(id));
            match (was, is) {
                (false, true) => children += 1,
                (true, false) => children = children.saturating_sub(1),
                _ => {}
            }
        }
        children > 0
    }

    /// Whether making `parent` the parent of `unit` would close a cycle.
    pub(crate) fn would_cycle(&self, unit: &str, parent: &str) -> bool {
        ancestry(self.unit(parent), |p| self.unit(p)).any(|u| u.id == unit)
    }

    /// The grant list `change` leaves its subject with, if it grants.
    fn granted(&self, change: &StateChange) -> Option<Vec<GrantRecord>> {
        let grant = match change {
            StateChange::PutBinding(_, grant) | StateChange::PutGrant(grant) => grant,
            _ => return None,
        };
        let mut list = self.grants_of(&grant.subject).to_vec();
        upsert_grant(&mut list, grant.clone());
        Some(list)
    }
}

/// A write decided and waiting for its batch's fate.
struct Decided {
    change: StateChange,
    audit: AuditEntry,
    answer: tokio::sync::oneshot::Sender<Answer>,
}

/// What became of a decided write.
enum Answer {
    /// Committed and applied to memory.
    Committed,
    /// Not stored, for this reason.
    Failed(HostError),
    /// Not stored: a write decided before it failed, or another replica's writes were
    /// applied since it decided. Decide again on the state as it is now.
    DecideAgain,
}

/// The batches not yet applied: the one committing and the one forming behind it.
#[derive(Default)]
struct Batches {
    forming: Vec<Decided>,
    forming_view: Pending,
    committing_view: Pending,
    /// Whether a task commits batches now (it takes the forming one when the commit in
    /// flight ends, and stops when none formed).
    committer: bool,
}

impl Batches {
    /// Whether a write can decide now: the forming batch has room and neither batch
    /// holds a change that closes it.
    fn open(&self) -> bool {
        self.forming.len() < MAX_BATCH && !self.forming_view.closed && !self.committing_view.closed
    }

    /// Sends the forming batch's writes back to decide again (what they decided on
    /// changed under them); returns their answers to send.
    fn decide_again(&mut self) -> Vec<(tokio::sync::oneshot::Sender<Answer>, Answer)> {
        self.forming_view = Pending::default();
        self.forming
            .drain(..)
            .map(|d| (d.answer, Answer::DecideAgain))
            .collect()
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

/// How many times a reload prepares the stored state without the commit slot before it
/// holds the slot while preparing (local writes kept landing while it prepared).
const RELOAD_ATTEMPTS: u32 = 4;

/// An attempt at reading another replica's writes (see [`State::start_reading`]).
struct Reading<'a> {
    /// The commit slot, held from the start on the last attempt.
    held: Option<tokio::sync::MutexGuard<'a, ()>>,
    /// Local writes counted when the read began.
    writes_before: u64,
}

/// Everything the host serves from memory (see the module docs).
pub(crate) struct State {
    store: Arc<dyn StateStore>,
    /// Where a write that finds nothing to change leaves its record.
    audit: Arc<AuditLog>,
    /// The commit slot: one batch at a time is persisted and applied; a reload or a
    /// catch-up holds it to put another replica's state in place.
    writes: tokio::sync::Mutex<()>,
    /// The batches not yet applied (see [`Working`]).
    batches: Mutex<Batches>,
    /// Sent whenever a batch is taken to commit, applied or sent back: writes waiting
    /// for room in the forming batch look again.
    batch_changed: tokio::sync::watch::Sender<()>,
    /// Batches of local writes applied so far (counted under the commit slot): a reload
    /// prepared from a snapshot read before one of them must not replace it.
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
            batches: Mutex::new(Batches::default()),
            batch_changed: tokio::sync::watch::Sender::new(()),
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

    /// The one write path: `decide` checks the request against the state as the writes
    /// decided before it leave it ([`Working`]) and says what to change; the change is
    /// persisted with its batch ([`StateStore::write_batch`]), then applied to memory with
    /// the resolver cache dropped, under the directory's write lock, and only then is this
    /// call answered. `decide` is not async: whatever takes time (a guest's `bind`, a
    /// compilation, a fetch) runs before, and `decide` checks that what it was checked
    /// against still holds. It may run more than once: when a write decided before it is
    /// refused by the store, or another replica's writes are applied meanwhile, it decides
    /// again on the state as it is then.
    ///
    /// `audit` says what the change records: its record is written in the change's
    /// transaction (a change that turns out to be nothing still leaves one, marked
    /// `unchanged`). A refusal is the caller's to record: it may come before this.
    pub(crate) async fn write<T>(
        self: &Arc<Self>,
        audit: &Audit,
        mut decide: impl FnMut(&Working<'_>) -> HostResult<(StateChange, T)>,
    ) -> HostResult<T> {
        let mut changed = self.batch_changed.subscribe();
        loop {
            changed.borrow_and_update();
            let decided = 'decided: {
                let mut batches = self.batches.lock();
                if !batches.open() {
                    break 'decided None;
                }
                let dir = self.directory.read();
                let working = Working {
                    dir: &dir,
                    pending: [&batches.forming_view, &batches.committing_view],
                };
                let (change, out) = decide(&working)?;
                match change {
                    StateChange::CheckAgain => return Ok(out),
                    StateChange::Nothing => Some((None, out)),
                    change => {
                        let granted = working.granted(&change);
                        drop(dir);
                        batches.forming_view.record(&change, granted);
                        let (answer, answered) = tokio::sync::oneshot::channel();
                        batches.forming.push(Decided {
                            change,
                            audit: audit.entry("ok"),
                            answer,
                        });
                        if !batches.committer {
                            batches.committer = true;
                            tokio::spawn(self.clone().commit_batches());
                        }
                        Some((Some(answered), out))
                    }
                }
            };
            let Some((answer, out)) = decided else {
                // No room in the forming batch, or it waits for a change that closes it.
                // The sender lives in `self`: an error is unreachable.
                let _ = changed.changed().await;
                continue;
            };
            let Some(answer) = answer else {
                let mut entry = audit.entry("ok");
                if let serde_json::Value::Object(details) = &mut entry.details {
                    details.insert("unchanged".into(), serde_json::Value::Bool(true));
                }
                self.audit.append(entry).await?;
                return Ok(out);
            };
            match answer.await {
                Ok(Answer::Committed) => return Ok(out),
                Ok(Answer::Failed(e)) => return Err(e),
                Ok(Answer::DecideAgain) => continue,
                Err(_) => {
                    return Err(HostError::new(
                        ErrorCode::StoreUnavailable,
                        "the host stopped before this change was stored; retry",
                    ))
                }
            }
        }
    }

    /// Commits batches, one at a time under the commit slot, until none has formed.
    async fn commit_batches(self: Arc<Self>) {
        /// Ends the committer's turn if its task ends half-way (the runtime stopped, or a
        /// panic): the writes formed behind it decide again and the next write starts a
        /// committer, instead of waiting for one that is gone.
        struct Turn<'a> {
            state: &'a State,
            ended: bool,
        }
        impl Drop for Turn<'_> {
            fn drop(&mut self) {
                if !self.ended {
                    let answers = {
                        let mut batches = self.state.batches.lock();
                        batches.committer = false;
                        batches.committing_view = Pending::default();
                        batches.decide_again()
                    };
                    self.state.answer(answers);
                }
            }
        }
        let mut turn = Turn {
            state: &self,
            ended: false,
        };
        loop {
            let slot = self.writes.lock().await;
            let batch = {
                let mut batches = self.batches.lock();
                if batches.forming.is_empty() {
                    batches.committer = false;
                    turn.ended = true;
                    return;
                }
                batches.committing_view = std::mem::take(&mut batches.forming_view);
                std::mem::take(&mut batches.forming)
            };
            self.wake_waiting_writes();
            self.commit(batch).await;
            drop(slot);
        }
    }

    /// Persists `batch` in one store transaction, applies what committed to memory and
    /// answers its writes. When any of them is not stored, the forming batch (decided on
    /// top of it) decides again.
    async fn commit(&self, batch: Vec<Decided>) {
        let writes: Vec<(StateWrite<'_>, &AuditEntry)> = batch
            .iter()
            .filter_map(|d| Some((d.change.as_write()?, &d.audit)))
            .collect();
        let outcomes = self.store.write_batch(&writes).await;
        drop(writes);
        let mut outcomes = outcomes.into_iter();
        let mut answers = Vec::with_capacity(batch.len());
        let mut batches = self.batches.lock();
        let all_stored = {
            let mut dir = self.directory.write();
            let mut applied = 0usize;
            for decided in batch {
                let answer = match outcomes.next().unwrap_or(BatchedWrite::NotRun) {
                    BatchedWrite::Committed => {
                        decided.change.apply(&mut dir, self);
                        applied += 1;
                        Answer::Committed
                    }
                    BatchedWrite::Failed(e) => Answer::Failed(e.into()),
                    BatchedWrite::NotRun => Answer::DecideAgain,
                };
                answers.push((decided.answer, answer));
            }
            if applied > 0 {
                self.local_writes.fetch_add(1, Ordering::SeqCst);
                self.resolver.invalidate();
            }
            applied == answers.len()
        };
        batches.committing_view = Pending::default();
        if !all_stored {
            answers.extend(batches.decide_again());
        }
        drop(batches);
        self.answer(answers);
    }

    /// After another replica's writes were put in place (under the commit slot): the
    /// forming batch was decided without them, so its writes decide again.
    fn forming_decides_again(&self) {
        let answers = self.batches.lock().decide_again();
        self.answer(answers);
    }

    /// Writes waiting for room in the forming batch look again.
    fn wake_waiting_writes(&self) {
        self.batch_changed.send_replace(());
    }

    /// Wakes the writes waiting for room, then sends each answer (a caller that went
    /// away no longer needs its answer).
    fn answer(&self, answers: Vec<(tokio::sync::oneshot::Sender<Answer>, Answer)>) {
        self.wake_waiting_writes();
        for (to, answer) in answers {
            let _ = to.send(answer);
        }
    }

    /// Replaces everything with what the store holds now (another replica wrote it) and
    /// returns the version put in place. The snapshot is read, `prepare` makes its
    /// connectors ready (reusing what it can, compiling what it must; it is handed what
    /// the previous attempt prepared) and the new directory is built, all without the
    /// commit slot; the slot is held only to put them in place, in one step for readers.
    /// If a local write landed meanwhile (the snapshot may not hold it), the work is done
    /// again; after [`RELOAD_ATTEMPTS`] the slot is held throughout. Writes decided but not
    /// yet committed decide again on what was put in place.
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
            self.forming_decides_again();
            drop(_write);
            drop(replaced);
            return Ok(snapshot.version);
        }
        unreachable!("the last reload attempt holds the commit slot throughout")
    }

    /// Applies the writes other replicas committed in `(applied, upto]`, as the store's
    /// change log has them, to memory that reflects version `applied` (and this replica's
    /// own writes after it): the same changes their replicas applied, in version order.
    /// `false`: the log cannot bring memory to `upto` (pruned past `applied`, or a
    /// connector changed), so the caller reloads instead.
    ///
    /// As in [`State::reload`], the log is read without the commit slot and applied under
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
            drop(dir);
            self.forming_decides_again();
            return Ok(true);
        }
        unreachable!("the last catch-up attempt holds the commit slot throughout")
    }

    /// Starts attempt `attempt` of reading what another replica wrote (without the commit
    /// slot, except on the last attempt, which holds it throughout): notes how many
    /// batches of local writes came before the read.
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

    /// The commit slot to apply what `reading` read, or `None` when a local write landed
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

    /// Holds the commit slot (tests that need a batch in progress).
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

    async fn put_unit(state: &Arc<State>, id: &str) {
        state
            .write(&test_audit(), |_| {
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
        let mut change = Some(change);
        let refused = state
            .write(&test_audit(), |_| {
                let change = change
                    .take()
                    .expect("decided once: nothing else is written");
                Ok((change, ()))
            })
            .await;
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
        // Every write names its unit after the first name no unit has when it decides:
        // only if each decision sees the writes decided before it (committed or still in
        // a batch) do all twenty names differ.
        let writes = (0..20).map(|_| {
            let state = state.clone();
            tokio::spawn(async move {
                state
                    .write(&test_audit(), |dir| {
                        let n = (0..).find(|n| dir.unit(&format!("u{n}")).is_none());
                        let n = n.expect("a free name");
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

    /// Waits until `count` writes wait in the forming batch (the commit slot is held).
    async fn until_forming(state: &State, count: usize) {
        for _ in 0..1_000 {
            if state.batches.lock().forming.len() >= count {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        panic!("{count} writes did not form a batch");
    }

    fn stored_units(snapshot: &Snapshot) -> Vec<String> {
        let mut units: Vec<String> = snapshot.units.iter().map(|u| u.id.clone()).collect();
        units.sort();
        units
    }

    fn served_units(state: &State) -> Vec<String> {
        let mut units: Vec<String> = state.directory().units().map(|u| u.id.clone()).collect();
        units.sort();
        units
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_refused_beside_others_is_answered_alone_and_they_commit_together() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (state, store) = state(&dir);
        let slot = state.hold_writes().await;
        let writes: Vec<_> = (0..5)
            .map(|i| {
                let state = state.clone();
                tokio::spawn(async move {
                    state
                        .write(&test_audit(), |_| {
                            if i == 2 {
                                return Err(HostError::not_found("refused by its decision"));
                            }
                            Ok((StateChange::PutUnit(unit(&format!("u{i}"), None)), ()))
                        })
                        .await
                })
            })
            .collect();
        until_forming(&state, 4).await;
        assert!(
            served_units(&state).is_empty(),
            "a change is visible before its batch committed"
        );
        drop(slot);
        for (i, w) in futures::future::join_all(writes)
            .await
            .into_iter()
            .enumerate()
        {
            let answer = w.expect("the task");
            assert_eq!(answer.is_err(), i == 2, "write {i}: {answer:?}");
        }
        let expected = vec!["u0", "u1", "u3", "u4"];
        assert_eq!(served_units(&state), expected);
        assert_eq!(stored_units(&store.load().await.expect("load")), expected);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_the_store_refuses_in_a_batch_fails_alone_and_those_after_it_decide_again() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (state, store) = state(&dir);
        put_unit(&state, "u").await;
        inject_sqlite(&dir.path().join("host.db"), Some(Fault::AfterBindingWrite))
            .expect("the fault");
        let slot = state.hold_writes().await;
        let decisions = Arc::new(AtomicU64::new(0));
        let mut writes = Vec::new();
        // In this order in the batch: a unit, a binding the store refuses, and a unit
        // decided on the first (its parent) after the binding.
        writes.push(tokio::spawn({
            let state = state.clone();
            async move {
                state
                    .write(&test_audit(), |_| {
                        Ok((StateChange::PutUnit(unit("a", None)), ()))
                    })
                    .await
            }
        }));
        until_forming(&state, 1).await;
        writes.push(tokio::spawn({
            let state = state.clone();
            async move {
                state
                    .write(&test_audit(), |_| {
                        let change = StateChange::PutBinding(
                            binding("u", "acme", serde_json::json!({})),
                            connector_grant("u", "acme", "acme"),
                        );
                        Ok((change, ()))
                    })
                    .await
            }
        }));
        until_forming(&state, 2).await;
        writes.push(tokio::spawn({
            let (state, decisions) = (state.clone(), decisions.clone());
            async move {
                state
                    .write(&test_audit(), |dir| {
                        decisions.fetch_add(1, Ordering::SeqCst);
                        if dir.unit("a").is_none() {
                            return Err(HostError::not_found("no parent"));
                        }
                        Ok((StateChange::PutUnit(unit("b", Some("a"))), ()))
                    })
                    .await
            }
        }));
        until_forming(&state, 3).await;
        drop(slot);
        let answers: Vec<_> = futures::future::join_all(writes)
            .await
            .into_iter()
            .map(|w| w.expect("the task"))
            .collect();
        assert!(answers[0].is_ok(), "{:?}", answers[0]);
        assert!(answers[1].is_err(), "the refused binding was answered Ok");
        assert!(answers[2].is_ok(), "{:?}", answers[2]);
        assert_eq!(
            decisions.load(Ordering::SeqCst),
            2,
            "the write after the refused one decided again"
        );
        let stored = store.load().await.expect("load");
        assert_eq!(stored_units(&stored), vec!["a", "b", "u"]);
        assert_eq!(served_units(&state), vec!["a", "b", "u"]);
        assert!(stored.bindings.is_empty() && stored.grants.is_empty());
        let dir = state.directory();
        assert!(dir.binding("u", "acme").is_none());
        assert!(dir.grants_of(&Subject::Unit("u".into())).is_empty());
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
            let mut change = Some(change);
            state
                .write(&test_audit(), |_| {
                    Ok((change.take().expect("decided once"), ()))
                })
                .await
                .expect("write");
        }
        let subject = Subject::Agent("a".into());
        let tools = state.effective_tools(&subject).expect("the agent's tools");
        assert!(tools.get("img.run").is_some());
        state
            .write(&test_audit(), |_| {
                Ok((StateChange::DeleteAgent("a".into()), ()))
            })
            .await
            .expect("delete");
        assert!(state.effective_tools(&subject).is_err());
        put_unit(&state, "u").await;
        state
            .write(&test_audit(), |_| {
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
