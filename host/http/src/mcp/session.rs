//! MCP sessions, their server→client streams, and the watcher that announces
//! `notifications/tools/list_changed`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use tokio::sync::mpsc;

use super::jsonrpc;
use super::tools::fingerprint;
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
    pub id: Arc<str>,
    pub agent: Arc<str>,
    pub version: &'static str,
    /// Milliseconds since the table's epoch of the last request.
    last_used: AtomicU64,
    /// The fingerprint of the tool list this session has last been told about.
    known_tools: AtomicU64,
    /// A `list_changed` that found no open stream; sent when one opens.
    pending: AtomicBool,
    next_event: AtomicU64,
    stream: Mutex<Option<mpsc::Sender<StreamEvent>>>,
}

impl Session {
    /// Opens the session's GET stream, replacing (and so ending) an earlier one.
    pub fn open_stream(&self) -> mpsc::Receiver<StreamEvent> {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let mut slot = self.stream.lock();
        if self.pending.swap(false, Ordering::AcqRel) {
            let _ = tx.try_send(self.event(LIST_CHANGED.clone()));
        }
        *slot = Some(tx);
        rx
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

/// Per agent: its last effective tool set and that set's fingerprint.
type Fingerprints = HashMap<Arc<str>, (Arc<ResolvedTools>, u64)>;

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

impl Sessions {
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

    pub fn host(&self) -> &Host {
        &self.host
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The session `id` of `agent`, marked as used; `None` if there is no such session
    /// (or it belongs to another agent).
    pub fn get(&self, id: &str, agent: &str) -> Option<Arc<Session>> {
        let session = self.table.read().get(id).cloned()?;
        if &*session.agent != agent {
            return None;
        }
        session.last_used.store(self.now_ms(), Ordering::Relaxed);
        Some(session)
    }

    /// Opens a session for `agent` (which must exist) at protocol revision `version`.
    pub fn create(
        self: &Arc<Self>,
        agent: &str,
        version: &'static str,
    ) -> HostResult<Arc<Session>> {
        let known = self.fingerprint(agent)?;
        let session = Arc::new(Session {
            id: connector_core::auth::random_secret(18).into(),
            agent: agent.into(),
            version,
            last_used: AtomicU64::new(self.now_ms()),
            known_tools: AtomicU64::new(known),
            pending: AtomicBool::new(false),
            next_event: AtomicU64::new(1),
            stream: Mutex::new(None),
        });
        {
            let mut table = self.table.write();
            let mut mine: Vec<&Arc<Session>> =
                table.values().filter(|s| &*s.agent == agent).collect();
            if mine.len() >= MAX_SESSIONS_PER_AGENT {
                mine.sort_by_key(|s| (s.has_open_stream(), s.last_used.load(Ordering::Relaxed)));
                let evict = mine[0].id.clone();
                if let Some(old) = table.remove(&evict) {
                    old.close_stream();
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
        session.close_stream();
        Some(session)
    }

    /// The fingerprint of `agent`'s current tool list (computed only when its effective
    /// tool set is a new one).
    pub(super) fn fingerprint(&self, agent: &str) -> HostResult<u64> {
        let tools = self
            .host
            .effective_tools(&Subject::Agent(agent.to_string()))?;
        let mut cache = self.fingerprints.lock();
        if let Some((seen, print)) = cache.get(agent) {
            if Arc::ptr_eq(seen, &tools) {
                return Ok(*print);
            }
        }
        let print = fingerprint(&tools);
        cache.insert(agent.into(), (tools, print));
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
        let mut current: HashMap<Arc<str>, Result<u64, HostError>> = HashMap::new();
        let mut ended = Vec::new();
        for session in &sessions {
            let print = current
                .entry(session.agent.clone())
                .or_insert_with(|| self.fingerprint(&session.agent));
            match print {
                Ok(print) => {
                    if session.known_tools.swap(*print, Ordering::AcqRel) != *print {
                        session.announce_list_changed();
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
        self.fingerprints
            .lock()
            .retain(|agent, _| current.contains_key(agent) || listening.contains_key(agent));
    }
}
