//! MCP sessions, their server→client streams, and the watcher that announces
//! `notifications/tools/list_changed`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use tokio::sync::mpsc;

use connector_model::ids::UnitId;

use super::jsonrpc;
use super::names::Naming;
use super::tools::fingerprint;
use super::Endpoint;
use connector_core::grants::ResolvedTools;
use connector_core::host::Host;
use connector_model::error::{HostError, HostResult};
use connector_model::records::Subject;

/// How often the watcher looks for idle sessions and sessions of deleted agents (tool
/// changes are announced when they happen, not on this tick).
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// A session without requests for this long, and with no open stream, is ended.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Sessions one agent may hold; opening one more ends its least recently used session.
pub const MAX_SESSIONS_PER_AGENT: usize = 256;
/// `subscriptions/listen` streams one agent may hold open at once (each holds a
/// connection): one more is refused until one closes.
pub const MAX_LISTENERS_PER_AGENT: usize = 64;
/// Events buffered for a stream whose client reads slowly.
const STREAM_BUFFER: usize = 16;

/// One event for a session's GET stream: its id and the JSON-RPC message.
pub type StreamEvent = (u64, Arc<str>);

/// One MCP session: an agent, the negotiated protocol revision, and at most one open
/// GET stream.
pub struct Session {
    /// Its `Mcp-Session-Id`.
    pub id: Arc<str>,
    /// The agent it acts for.
    pub agent: Arc<str>,
    /// Who opened the session (the agent, or the operator), as its tool calls are
    /// recorded in the audit log.
    pub actor: connector_model::audit::Actor,
    /// How the endpoint that opened the session names tools.
    pub naming: Naming,
    /// The negotiated protocol revision.
    pub version: &'static str,
    /// Milliseconds since the table's epoch of the last request.
    last_used: AtomicU64,
    /// The fingerprint of the tool list this session has last been told about.
    known_tools: AtomicU64,
    /// A `list_changed` that found no open stream; sent when one opens.
    pending: AtomicBool,
    next_event: AtomicU64,
    stream: Mutex<Option<mpsc::Sender<StreamEvent>>>,
    /// The fingerprint of the resources this session was last told about.
    known_resources: AtomicU64,
    /// Units whose inbox the client subscribed to (`resources/subscribe`), and the task
    /// that watches them.
    subscriptions: Mutex<(
        std::collections::BTreeSet<UnitId>,
        Option<tokio::task::AbortHandle>,
    )>,
    /// Resource URIs updated while no stream was open; sent when one opens.
    pending_updates: Mutex<std::collections::BTreeSet<String>>,
    /// A `resources/list_changed` that found no open stream.
    pending_resources: AtomicBool,
}

impl Session {
    /// Opens the session's GET stream, replacing (and so ending) an earlier one.
    pub fn open_stream(&self) -> mpsc::Receiver<StreamEvent> {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let mut slot = self.stream.lock();
        if self.pending.swap(false, Ordering::AcqRel) {
            let _ = tx.try_send(self.event(LIST_CHANGED.clone()));
        }
        if self.pending_resources.swap(false, Ordering::AcqRel) {
            let _ = tx.try_send(self.event(RESOURCES_CHANGED.clone()));
        }
        for uri in std::mem::take(&mut *self.pending_updates.lock()) {
            let _ = tx.try_send(self.event(updated(&uri)));
        }
        *slot = Some(tx);
        rx
    }

    /// Sends `message` on the open stream; `false` when there is none, or its buffer is
    /// full (the caller keeps what it needs to send it later).
    fn push(&self, message: Arc<str>) -> bool {
        let mut slot = self.stream.lock();
        if let Some(tx) = slot.as_ref() {
            match tx.try_send(self.event(message)) {
                Ok(()) => return true,
                Err(mpsc::error::TrySendError::Full(_)) => return false,
                Err(mpsc::error::TrySendError::Closed(_)) => *slot = None,
            }
        }
        false
    }

    /// `notifications/resources/updated` for `uri`, now or when a stream opens.
    fn announce_update(&self, uri: String) {
        let pending = self.pending_updates.lock();
        // Held while pushing, so `open_stream` cannot take the pending set in between.
        if !self.push(updated(&uri)) {
            let mut pending = pending;
            pending.insert(uri);
        }
    }

    fn announce_resources_changed(&self) {
        if !self.push(RESOURCES_CHANGED.clone()) {
            self.pending_resources.store(true, Ordering::Release);
        }
    }

    /// The units whose inboxes the client subscribed to.
    pub fn subscribed_units(&self) -> Vec<UnitId> {
        self.subscriptions.lock().0.iter().cloned().collect()
    }

    /// Ends the stream and the subscriptions' watch.
    fn end(&self) {
        self.close_stream();
        if let Some(task) = self.subscriptions.lock().1.take() {
            task.abort();
        }
    }

    /// Ends the GET stream, if one is open.
    pub fn close_stream(&self) {
        self.stream.lock().take();
    }

    fn has_open_stream(&self) -> bool {
        self.stream
            .lock()
            .as_ref()
            .is_some_and(|tx| !tx.is_closed())
    }

    fn event(&self, message: Arc<str>) -> StreamEvent {
        (self.next_event.fetch_add(1, Ordering::Relaxed), message)
    }

    /// Sends `notifications/tools/list_changed` on the open stream, or keeps it pending
    /// until one opens. A full buffer already holds an unread `list_changed`, so nothing
    /// is lost by dropping this one.
    fn announce_list_changed(&self) {
        let mut slot = self.stream.lock();
        if let Some(tx) = slot.as_ref() {
            match tx.try_send(self.event(LIST_CHANGED.clone())) {
                Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => return,
                Err(mpsc::error::TrySendError::Closed(_)) => *slot = None,
            }
        }
        self.pending.store(true, Ordering::Release);
    }
}

static LIST_CHANGED: std::sync::LazyLock<Arc<str>> =
    std::sync::LazyLock::new(|| jsonrpc::notification("notifications/tools/list_changed").into());
static RESOURCES_CHANGED: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| {
    jsonrpc::notification("notifications/resources/list_changed").into()
});

/// `notifications/resources/updated` for `uri`.
fn updated(uri: &str) -> Arc<str> {
    serde_json::json!({
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": { "uri": uri },
    })
    .to_string()
    .into()
}

impl Sessions {
    /// Subscribes `session` to `unit`'s inbox (already checked to be one of its agent's
    /// units): from the moment this returns, every message stored for the unit is
    /// announced as `notifications/resources/updated`.
    pub async fn subscribe(&self, session: &Arc<Session>, unit: UnitId) -> HostResult<()> {
        let mut units = session.subscriptions.lock().0.clone();
        if !units.insert(unit) {
            return Ok(());
        }
        self.rewatch(session, units).await
    }

    /// Ends `session`'s subscription to `unit`'s inbox.
    pub async fn unsubscribe(&self, session: &Arc<Session>, unit: &str) -> HostResult<()> {
        let mut units = session.subscriptions.lock().0.clone();
        if !units.remove(unit) {
            return Ok(());
        }
        self.rewatch(session, units).await
    }

    /// Replaces the session's watch with one over `units`.
    async fn rewatch(
        &self,
        session: &Arc<Session>,
        units: std::collections::BTreeSet<UnitId>,
    ) -> HostResult<()> {
        let task = if units.is_empty() {
            None
        } else {
            let mut watch = self
                .host
                .watch_messages(units.iter().cloned().collect())
                .await?;
            let weak = Arc::downgrade(session);
            let host = self.host.clone();
            Some(
                tokio::spawn(async move {
                    loop {
                        let changed = watch.next().await;
                        let Some(session) = weak.upgrade() else {
                            return;
                        };
                        for unit in changed {
                            // An agent that left the unit hears no more of it.
                            let uri = super::resources::uri_of(&unit);
                            if super::resources::check(&host, &session.agent, &uri).is_ok() {
                                session.announce_update(uri);
                            }
                        }
                    }
                })
                .abort_handle(),
            )
        };
        let mut slot = session.subscriptions.lock();
        if let Some(old) = std::mem::replace(&mut slot.1, task) {
            old.abort();
        }
        slot.0 = units;
        Ok(())
    }
}

/// Per endpoint: its agent's last effective tool set and the fingerprint of what that
/// endpoint lists of it.
type Fingerprints = HashMap<Endpoint, (Arc<ResolvedTools>, u64)>;

/// Every session of one router, and the watcher.
pub struct Sessions {
    host: Host,
    epoch: Instant,
    table: RwLock<HashMap<Arc<str>, Arc<Session>>>,
    /// Per agent: the last effective tool set seen and its fingerprint (kept alive so
    /// its address cannot be reused by another set).
    fingerprints: Mutex<Fingerprints>,
    /// Open `subscriptions/listen` streams per agent.
    listeners: Mutex<HashMap<Arc<str>, usize>>,
    watcher: std::sync::Once,
}

/// One open `subscriptions/listen` stream, counted against its agent until dropped.
pub struct Listener {
    sessions: Weak<Sessions>,
    agent: Arc<str>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        let Some(sessions) = self.sessions.upgrade() else {
            return;
        };
        let mut listeners = sessions.listeners.lock();
        if let Some(n) = listeners.get_mut(&self.agent) {
            *n -= 1;
            if *n == 0 {
                listeners.remove(&self.agent);
            }
        }
    }
}

/// Logs the tools an endpoint leaves out of its listing: names two tools would share,
/// and flat names too long for a model API.
fn log_left_out(endpoint: &Endpoint, tools: &ResolvedTools) {
    let listing = endpoint.naming.listing(tools);
    for (name, ids) in &listing.collisions {
        tracing::warn!(
            agent = %endpoint.agent,
            name = %name,
            tools = %ids.join(", "),
            "MCP: these tools share one name under this endpoint's tool names, so none of them is listed or callable by it; call them on the canonical endpoint"
        );
    }
    for id in &listing.too_long {
        tracing::warn!(
            agent = %endpoint.agent,
            tool = %id,
            "MCP: this tool's flat name is longer than {} characters, so it is not listed with flat names",
            super::names::MAX_FLAT_NAME
        );
    }
}

impl Sessions {
    /// An empty table of sessions on `host`.
    pub fn new(host: Host) -> Self {
        Sessions {
            host,
            epoch: Instant::now(),
            table: RwLock::new(HashMap::new()),
            fingerprints: Mutex::new(HashMap::new()),
            listeners: Mutex::new(HashMap::new()),
            watcher: std::sync::Once::new(),
        }
    }

    /// The host the sessions act on.
    pub fn host(&self) -> &Host {
        &self.host
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The session `id` opened on `endpoint`, marked as used; `None` if there is no such
    /// session (or another endpoint opened it).
    pub fn get(&self, id: &str, endpoint: &Endpoint) -> Option<Arc<Session>> {
        let session = self.table.read().get(id).cloned()?;
        if session.agent != endpoint.agent || session.naming != endpoint.naming {
            return None;
        }
        session.last_used.store(self.now_ms(), Ordering::Relaxed);
        Some(session)
    }

    /// Opens a session on `endpoint` (whose agent must exist) at protocol revision
    /// `version`.
    pub fn create(
        self: &Arc<Self>,
        endpoint: &Endpoint,
        version: &'static str,
        actor: connector_model::audit::Actor,
    ) -> HostResult<Arc<Session>> {
        let known = self.fingerprint(endpoint)?;
        let agent = &*endpoint.agent;
        let session = Arc::new(Session {
            id: connector_core::auth::random_secret(18).into(),
            agent: endpoint.agent.clone(),
            actor,
            naming: endpoint.naming.clone(),
            version,
            last_used: AtomicU64::new(self.now_ms()),
            known_tools: AtomicU64::new(known),
            pending: AtomicBool::new(false),
            next_event: AtomicU64::new(1),
            stream: Mutex::new(None),
            known_resources: AtomicU64::new(
                super::resources::fingerprint(&self.host, agent).unwrap_or(0),
            ),
            subscriptions: Mutex::new(Default::default()),
            pending_updates: Mutex::new(Default::default()),
            pending_resources: AtomicBool::new(false),
        });
        {
            let mut table = self.table.write();
            let mut mine: Vec<&Arc<Session>> =
                table.values().filter(|s| &*s.agent == agent).collect();
            if mine.len() >= MAX_SESSIONS_PER_AGENT {
                mine.sort_by_key(|s| (s.has_open_stream(), s.last_used.load(Ordering::Relaxed)));
                let evict = mine[0].id.clone();
                if let Some(old) = table.remove(&evict) {
                    old.end();
                }
            }
            table.insert(session.id.clone(), session.clone());
        }
        self.start_watcher();
        Ok(session)
    }

    /// Counts a new `subscriptions/listen` stream of `agent`; `None` when it already
    /// holds [`MAX_LISTENERS_PER_AGENT`].
    pub fn listen(self: &Arc<Self>, agent: &str) -> Option<Listener> {
        let mut listeners = self.listeners.lock();
        let open = listeners.entry(agent.into()).or_insert(0);
        if *open >= MAX_LISTENERS_PER_AGENT {
            return None;
        }
        *open += 1;
        Some(Listener {
            sessions: Arc::downgrade(self),
            agent: agent.into(),
        })
    }

    /// Ends a session (its stream closes).
    pub fn remove(&self, id: &str) -> Option<Arc<Session>> {
        let session = self.table.write().remove(id)?;
        session.end();
        Some(session)
    }

    /// The fingerprint of the tool list `endpoint` shows now (computed only when its
    /// agent's effective tool set is a new one; names that collide under the endpoint's
    /// naming are logged then).
    pub(super) fn fingerprint(&self, endpoint: &Endpoint) -> HostResult<u64> {
        let tools = self
            .host
            .effective_tools(&Subject::Agent(endpoint.agent.to_string()))?;
        let mut cache = self.fingerprints.lock();
        if let Some((seen, print)) = cache.get(endpoint) {
            if Arc::ptr_eq(seen, &tools) {
                return Ok(*print);
            }
        }
        if !endpoint.naming.is_canonical() {
            log_left_out(endpoint, &tools);
        }
        let print = fingerprint(&tools, &endpoint.naming);
        cache.insert(endpoint.clone(), (tools, print));
        Ok(print)
    }

    fn start_watcher(self: &Arc<Self>) {
        self.watcher.call_once(|| {
            let weak: Weak<Sessions> = Arc::downgrade(self);
            let mut changes = self.host.watch_tools();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(SWEEP_INTERVAL);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    // A change is announced as it happens; the tick ends idle sessions
                    // and those of deleted agents.
                    tokio::select! {
                        _ = tick.tick() => {}
                        changed = changes.changed() => {
                            if changed.is_err() {
                                break;
                            }
                        }
                    }
                    let Some(sessions) = weak.upgrade() else {
                        break;
                    };
                    sessions.sweep();
                }
            });
        });
    }

    /// One watcher round: announce changed tool lists, end idle sessions and sessions
    /// of agents that no longer exist.
    pub fn sweep(&self) {
        let sessions: Vec<Arc<Session>> = self.table.read().values().cloned().collect();
        let now = self.now_ms();
        let idle = IDLE_TIMEOUT.as_millis() as u64;
        let mut current: HashMap<Endpoint, Result<u64, HostError>> = HashMap::new();
        let mut resources: HashMap<Arc<str>, Option<u64>> = HashMap::new();
        let mut ended = Vec::new();
        for session in &sessions {
            let endpoint = Endpoint {
                agent: session.agent.clone(),
                naming: session.naming.clone(),
            };
            let print = current
                .entry(endpoint)
                .or_insert_with_key(|endpoint| self.fingerprint(endpoint));
            match print {
                Ok(print) => {
                    if session.known_tools.swap(*print, Ordering::AcqRel) != *print {
                        session.announce_list_changed();
                    }
                    let units = resources.entry(session.agent.clone()).or_insert_with(|| {
                        super::resources::fingerprint(&self.host, &session.agent)
                    });
                    if let Some(units) = units {
                        if session.known_resources.swap(*units, Ordering::AcqRel) != *units {
                            session.announce_resources_changed();
                        }
                    }
                    let last = session.last_used.load(Ordering::Relaxed);
                    if now.saturating_sub(last) > idle && !session.has_open_stream() {
                        ended.push(session.id.clone());
                    }
                }
                // The agent is gone (or its id is invalid): nothing left to serve.
                Err(_) => ended.push(session.id.clone()),
            }
        }
        for id in ended {
            self.remove(&id);
        }
        // Fingerprints of agents with sessions or open listeners stay cached.
        let listening = self.listeners.lock();
        self.fingerprints.lock().retain(|endpoint, _| {
            current.contains_key(endpoint) || listening.contains_key(&endpoint.agent)
        });
    }
}
