//! Each caller's share of the host: how many guest calls one caller (an agent) may run
//! at once, the instance pool every call needs a slot of, the linear memory of all live
//! guests together, and turns on the CPU.
//!
//! Runs before a guest is instantiated ([`HostShare::admit`]), whenever a guest grows its
//! memory ([`MemoryBudget`]) and at the end of every CPU slice ([`CpuSlice`]).
//! Every wait here counts toward the call's deadline: a call that cannot start in time
//! fails instead of queueing past `call_timeout_ms`. Waiting for one of the caller's own
//! slots past the deadline is the caller's own overload (`connector_timeout`); waiting
//! for the host's pool or memory is the host's (`host_busy`).
//!
//! ## Memory
//!
//! The guests of one caller together hold at most a quarter of the memory budget (or
//! one guest's limit, if that is more), so one agent's guests cannot take memory every
//! other agent's calls need; a call refused for its caller's own share is the caller's
//! overload (`connector_timeout`), one refused for the whole budget the host's
//! (`host_busy`). Pages are not handed out first come, first served: a
//! growth that fits now is not held up by a larger one still waiting.
//!
//! ## CPU turns
//!
//! Guests are preempted only at epoch ticks (every few milliseconds), and tokio runs
//! whatever is runnable in turn: 64 looping guests of one agent would fill the run queue,
//! and another agent's call (and the socket it arrived on) would wait behind all of their
//! slices. So a guest that has used a whole slice goes on only while it holds one of
//! [`Turns`] (as many as the machine has cores): at the end of each slice it yields to
//! the scheduler, then passes its turn to the next waiting guest (round-robin across
//! callers, so a caller with one long call gets a turn as often as one with sixty) or
//! takes one; it gives its turn back when it finishes or waits for anything (I/O,
//! memory), and takes one again before it runs on. Only as many long-running guests as there are turns are runnable, so the run
//! queue stays short; short calls (most tool calls end well inside their first slice)
//! never wait for a turn at all.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::GuestError;
use super::limits::GuestLimits;

/// Who a guest call runs for: each caller has its own share of concurrent calls.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Caller {
    /// The host itself or its operator (describe, bind, runtime context): not limited
    /// beyond the pool.
    Host,
    /// An agent calling a tool.
    Agent(Arc<str>),
    /// Webhook deliveries of one connector (translate, accept).
    Webhooks(Arc<str>),
}

impl Caller {
    fn describe(&self) -> String {
        match self {
            Caller::Host => "the host".into(),
            Caller::Agent(id) => format!("agent `{id}`"),
            Caller::Webhooks(slug) => format!("webhook deliveries of `{slug}`"),
        }
    }
}

/// Bytes per WebAssembly page, the unit of the memory budget.
const PAGE: usize = 64 * 1024;
/// One caller's guests may hold at most this fraction of the memory budget (and at
/// least one guest's limit), so no agent can starve the others of memory.
const MEMORY_SHARES: usize = 4;

/// What one caller may use at once: its call slots and its part of the memory budget.
struct CallerShare {
    slots: Arc<Semaphore>,
    memory: Arc<MemoryPool>,
}

type CallerSlots = Arc<Mutex<HashMap<Caller, CallerShare>>>;

/// The host's guest capacity and how it is shared.
pub(crate) struct HostShare {
    per_caller: usize,
    /// Pages of the memory budget one caller's guests may hold together.
    per_caller_pages: usize,
    callers: CallerSlots,
    pool: Arc<Semaphore>,
    memory: Arc<MemoryPool>,
    turns: Arc<Turns>,
}

/// A call's admission: a slot of its caller and one of the pool, both released on drop.
pub(crate) struct Admitted {
    caller: Option<CallerSlot>,
    _pool: OwnedSemaphorePermit,
}

struct CallerSlot {
    permit: Option<OwnedSemaphorePermit>,
    caller: Caller,
    slots: Arc<Semaphore>,
    memory: Arc<MemoryPool>,
    callers: CallerSlots,
}

impl Drop for CallerSlot {
    fn drop(&mut self) {
        drop(self.permit.take());
        forget_if_unused(&self.callers, &self.caller, &self.slots);
    }
}

/// Drops `caller`'s entry once nobody holds or waits for its slots (the map and
/// `slots` are then the only references), so the map does not grow with every agent.
fn forget_if_unused(callers: &CallerSlots, caller: &Caller, slots: &Arc<Semaphore>) {
    let mut map = callers.lock().unwrap_or_else(|p| p.into_inner());
    if Arc::strong_count(slots) == 2 {
        map.remove(caller);
    }
}

/// Pages of linear memory that guests take as they grow and give back when they end.
///
/// Not first come, first served: a guest that needs many pages does not hold up one
/// that needs a few and fits now. Whoever waits tries again each time pages are given
/// back, until its deadline.
struct MemoryPool {
    pages: Arc<Semaphore>,
    total: usize,
    freed: tokio::sync::Notify,
    /// Growths waiting for pages (nobody is woken when none wait).
    waiting: std::sync::atomic::AtomicUsize,
}

impl MemoryPool {
    fn new(pages: usize) -> Arc<Self> {
        Arc::new(Self {
            pages: Arc::new(Semaphore::new(pages)),
            total: pages,
            freed: tokio::sync::Notify::new(),
            waiting: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// `n` pages, at once or once others give enough back; `Err(waited)` when they were
    /// not there by `deadline` (or can never be). `waited` notes that it had to wait.
    async fn take(
        self: &Arc<Self>,
        n: u32,
        deadline: tokio::time::Instant,
        waited: &mut bool,
    ) -> Option<Pages> {
        if let Ok(permit) = self.pages.clone().try_acquire_many_owned(n) {
            return Some(self.pages_of(permit));
        }
        if n as usize > self.total {
            return None;
        }
        *waited = true;
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let _waiting = scopeguard(|| {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
        });
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Ok(permit) = self.pages.clone().try_acquire_many_owned(n) {
                return Some(self.pages_of(permit));
            }
            // Outside tokio's cooperative budget: a guest that allocates in a loop must
            // not be parked here with memory to spare.
            let wait = tokio::time::timeout_at(deadline, freed);
            tokio::task::coop::unconstrained(wait).await.ok()?;
        }
    }

    fn pages_of(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> Pages {
        Pages {
            permit: Some(permit),
            pool: self.clone(),
        }
    }
}

/// Pages held of a [`MemoryPool`]; giving them back wakes whoever waits for pages.
struct Pages {
    permit: Option<OwnedSemaphorePermit>,
    pool: Arc<MemoryPool>,
}

impl Pages {
    fn merge(&mut self, mut other: Pages) {
        match (&mut self.permit, other.permit.take()) {
            (Some(mine), Some(theirs)) => mine.merge(theirs),
            (mine @ None, theirs) => *mine = theirs,
            (Some(_), None) => {}
        }
    }

    #[cfg(test)]
    fn count(&self) -> usize {
        self.permit.as_ref().map_or(0, |p| p.num_permits())
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        if self.permit.take().is_some() && self.pool.waiting.load(Ordering::Acquire) > 0 {
            self.pool.freed.notify_waiters();
        }
    }
}

/// Runs `f` when dropped.
fn scopeguard<F: FnOnce()>(f: F) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}

impl HostShare {
    pub(crate) fn new(limits: &GuestLimits) -> Self {
        let pages = (limits.total_memory_bytes / PAGE).max(1);
        Self {
            per_caller: limits.calls_per_caller() as usize,
            per_caller_pages: (pages / MEMORY_SHARES)
                .max(limits.instance_memory_bytes().div_ceil(PAGE))
                .min(pages),
            callers: Arc::default(),
            pool: Arc::new(Semaphore::new(
                limits.max_concurrent_instances.max(1) as usize
            )),
            memory: MemoryPool::new(pages),
            turns: Arc::new(Turns::new(
                std::thread::available_parallelism().map_or(2, |n| n.get()),
            )),
        }
    }

    /// The CPU slices of one call of `caller` (see [`CpuSlice`]).
    pub(crate) fn cpu_slice(&self, caller: &Caller) -> Arc<CpuSlice> {
        Arc::new(CpuSlice {
            turns: self.turns.clone(),
            caller: caller.clone(),
            holding: AtomicBool::new(false),
            yielding: AtomicBool::new(false),
            sliced: AtomicBool::new(false),
        })
    }

    /// Waits (until `deadline`) for a slot of `caller` and then one of the pool.
    pub(crate) async fn admit(
        &self,
        caller: &Caller,
        deadline: Instant,
    ) -> Result<Admitted, GuestError> {
        let started = Instant::now();
        let deadline = tokio::time::Instant::from_std(deadline);
        let caller_slot = match caller {
            Caller::Host => None,
            _ => {
                let (slots, memory) = {
                    let mut map = self.callers.lock().unwrap_or_else(|p| p.into_inner());
                    let share = map.entry(caller.clone()).or_insert_with(|| CallerShare {
                        slots: Arc::new(Semaphore::new(self.per_caller)),
                        memory: MemoryPool::new(self.per_caller_pages),
                    });
                    (share.slots.clone(), share.memory.clone())
                };
                match acquire_by(deadline, &slots).await {
                    Some(permit) => Some(CallerSlot {
                        permit: Some(permit),
                        caller: caller.clone(),
                        slots,
                        memory,
                        callers: self.callers.clone(),
                    }),
                    None => {
                        forget_if_unused(&self.callers, caller, &slots);
                        return Err(GuestError::Queued {
                            after_ms: started.elapsed().as_millis() as u64,
                            message: format!(
                                "{} already runs {} calls at once (limits.max_concurrent_calls_per_agent)",
                                caller.describe(),
                                self.per_caller
                            ),
                        });
                    }
                }
            }
        };
        match acquire_by(deadline, &self.pool).await {
            Some(pool) => Ok(Admitted {
                caller: caller_slot,
                _pool: pool,
            }),
            None => Err(GuestError::HostBusy {
                message: format!(
                    "every guest instance slot stayed busy for {} ms; retry shortly",
                    started.elapsed().as_millis()
                ),
            }),
        }
    }

    /// The memory budget an admitted call with `deadline` grows its guest's memory
    /// from: the host's, and its caller's part of it.
    pub(crate) fn memory_budget(&self, admitted: &Admitted, deadline: Instant) -> MemoryBudget {
        MemoryBudget {
            host: self.memory.clone(),
            caller: admitted
                .caller
                .as_ref()
                .map(|slot| (slot.caller.clone(), slot.memory.clone())),
            held: None,
            last: None,
            short: None,
            started: Instant::now(),
            deadline,
            waited: std::time::Duration::ZERO,
        }
    }

    /// Calls of `caller` running or admitted now (for tests and metrics).
    #[cfg(test)]
    fn running(&self, caller: &Caller) -> usize {
        let map = self.callers.lock().unwrap_or_else(|p| p.into_inner());
        map.get(caller)
            .map_or(0, |s| self.per_caller - s.slots.available_permits())
    }
}

/// A permit of `slots`, waiting for one until `deadline`. A free one is taken without
/// touching tokio's cooperative budget (a caller making many quick calls in a row is not
/// made to yield for it).
async fn acquire_by(
    deadline: tokio::time::Instant,
    slots: &Arc<Semaphore>,
) -> Option<OwnedSemaphorePermit> {
    if let Ok(permit) = slots.clone().try_acquire_owned() {
        return Some(permit);
    }
    tokio::time::timeout_at(deadline, slots.clone().acquire_owned())
        .await
        .ok()
        .and_then(Result::ok)
}

/// One guest's claim on the memory budget: growing its linear memory takes pages from
/// its caller's part and from the host's whole budget (waiting for other guests to give
/// some back until the call's deadline); everything is given back when the guest's store
/// is dropped.
pub(crate) struct MemoryBudget {
    host: Arc<MemoryPool>,
    caller: Option<(Caller, Arc<MemoryPool>)>,
    held: Option<Grant>,
    /// The pages of the latest growth, until the engine has done it (see `undo_last`).
    last: Option<Grant>,
    /// Which bound refused a growth (it stayed exhausted until the deadline).
    short: Option<Shortage>,
    started: Instant,
    deadline: Instant,
    /// Time spent waiting for pages.
    waited: std::time::Duration,
}

/// Pages of one growth: of the host's budget and of the caller's part.
struct Grant {
    host: Pages,
    caller: Option<Pages>,
}

impl Grant {
    fn merge(&mut self, other: Grant) {
        self.host.merge(other.host);
        match (&mut self.caller, other.caller) {
            (Some(mine), Some(theirs)) => mine.merge(theirs),
            (mine @ None, theirs) => *mine = theirs,
            (Some(_), None) => {}
        }
    }
}

/// The bound a growth found exhausted.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shortage {
    Host,
    Caller(Caller),
}

impl MemoryBudget {
    /// Takes what growing from `current` to `desired` bytes needs; `false` when the
    /// budget did not have it before the deadline.
    pub(crate) async fn grow(&mut self, current: usize, desired: usize) -> bool {
        let needed = desired.saturating_sub(current).div_ceil(PAGE);
        if needed == 0 {
            return true;
        }
        let Ok(needed) = u32::try_from(needed) else {
            self.short = Some(Shortage::Host);
            return false;
        };
        let deadline = tokio::time::Instant::from_std(self.deadline);
        // Only waits for the host's budget count as the host's; a wait for the caller's
        // own share is the caller's.
        let mut waited = false;
        let caller = match &self.caller {
            Some((who, pool)) => match pool.take(needed, deadline, &mut waited).await {
                Some(pages) => Some(pages),
                None => {
                    self.short = Some(Shortage::Caller(who.clone()));
                    return false;
                }
            },
            None => None,
        };
        let began = Instant::now();
        waited = false;
        let host = self.host.take(needed, deadline, &mut waited).await;
        if waited {
            self.waited += began.elapsed();
        }
        let Some(host) = host else {
            self.short = Some(Shortage::Host);
            return false;
        };
        if let Some(previous) = self.last.replace(Grant { host, caller }) {
            match &mut self.held {
                Some(held) => held.merge(previous),
                None => self.held = Some(previous),
            }
        }
        true
    }

    /// Gives back the pages of the latest growth (the engine could not do it).
    pub(crate) fn undo_last(&mut self) {
        self.last = None;
    }

    /// Why the call failed for memory, if it did: a growth refused because the caller's
    /// own share stayed used up (the caller's overload: `connector_timeout`), or the
    /// host's budget did, or (`out_of_time`: the call ran out of time) it spent at least
    /// half its time waiting for the host's budget (both the host's bound:
    /// `host_busy`).
    pub(crate) fn shortage(&self, total_mib: usize, out_of_time: bool) -> Option<GuestError> {
        let mostly_waited =
            out_of_time && !self.waited.is_zero() && self.waited * 2 >= self.started.elapsed();
        match &self.short {
            Some(Shortage::Caller(who)) => Some(GuestError::Queued {
                after_ms: self.started.elapsed().as_millis() as u64,
                message: format!(
                    "the guests of {} together hold their share of guest memory (a quarter of limits.guest_memory_total_mib, {total_mib} MiB, or one guest's limits.memory_mib) until the call's deadline; retry when fewer of its calls run",
                    who.describe()
                ),
            }),
            Some(Shortage::Host) => Some(GuestError::HostBusy {
                message: format!(
                    "the memory of all guests stayed at limits.guest_memory_total_mib ({total_mib} MiB) until the call's deadline; retry shortly"
                ),
            }),
            None if mostly_waited => Some(GuestError::HostBusy {
                message: format!(
                    "the call spent {} ms of its time waiting for guest memory (limits.guest_memory_total_mib, {total_mib} MiB); retry shortly",
                    self.waited.as_millis()
                ),
            }),
            None => None,
        }
    }

    /// Bytes this guest holds of the host's budget and of its caller's part.
    #[cfg(test)]
    fn held_bytes(&self) -> (usize, usize) {
        let grants = [&self.held, &self.last];
        let grants = grants.iter().filter_map(|g| g.as_ref());
        let host = grants.clone().map(|g| g.host.count() * PAGE).sum();
        let caller = grants
            .filter_map(|g| g.caller.as_ref())
            .map(|p| p.count() * PAGE)
            .sum();
        (host, caller)
    }
}

/// The CPU turns guests take: a fixed number, handed round-robin across callers.
pub(crate) struct Turns {
    state: Mutex<TurnState>,
}

struct TurnState {
    free: usize,
    /// Callers with waiting guests, in the order they get the next turns.
    order: VecDeque<Caller>,
    waiting: HashMap<Caller, VecDeque<Arc<Ticket>>>,
}

/// A guest's place in the queue for a turn.
struct Ticket {
    granted: AtomicBool,
    /// The turn came from a guest whose CPU slice ended (not one that finished or
    /// waits for I/O).
    after_slice: AtomicBool,
    waker: Mutex<Waker>,
}

/// How a guest came to hold a turn.
#[derive(Debug, PartialEq, Eq)]
enum Taken {
    /// A free one, at once.
    Free,
    /// Handed over while it waited; `after_slice`: by a guest whose slice ended.
    Handed { after_slice: bool },
    /// None yet: it waits (its waker is called when one is handed to it).
    Waiting,
}

impl Turns {
    fn new(turns: usize) -> Self {
        Self {
            state: Mutex::new(TurnState {
                free: turns.max(1),
                order: VecDeque::new(),
                waiting: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TurnState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a turn for `caller`: the one handed to `ticket`, a free one, or none (then
    /// `ticket` is queued, or its waker updated).
    fn take(&self, caller: &Caller, ticket: &mut Option<Arc<Ticket>>, waker: &Waker) -> Taken {
        let mut state = self.lock();
        if let Some(t) = ticket {
            if t.granted.load(Ordering::Acquire) {
                let after_slice = t.after_slice.load(Ordering::Acquire);
                *ticket = None;
                return Taken::Handed { after_slice };
            }
            let mut w = t.waker.lock().unwrap_or_else(|p| p.into_inner());
            if !w.will_wake(waker) {
                *w = waker.clone();
            }
            return Taken::Waiting;
        }
        if state.free > 0 {
            state.free -= 1;
            return Taken::Free;
        }
        *ticket = Some(state.enqueue(caller, waker));
        Taken::Waiting
    }

    /// Takes a free turn, if there is one (then nobody waits for one).
    fn take_free(&self) -> bool {
        let mut state = self.lock();
        if state.free > 0 {
            state.free -= 1;
            return true;
        }
        false
    }

    /// Gives a turn back: to the next waiting guest, else to the free ones.
    fn give_back(&self) {
        self.lock().hand_over(false);
    }

    /// At the end of a slice: when another guest waits, hands the turn to it and queues
    /// `caller`'s guest behind (`true`); otherwise the guest keeps its turn (`false`).
    fn pass_on(&self, caller: &Caller, ticket: &mut Option<Arc<Ticket>>, waker: &Waker) -> bool {
        let mut state = self.lock();
        if state.order.is_empty() {
            return false;
        }
        state.hand_over(true);
        *ticket = Some(state.enqueue(caller, waker));
        true
    }

    /// A waiting guest went away: out of the queue, and a turn already handed to it goes
    /// to the next.
    fn cancel(&self, caller: &Caller, ticket: &Arc<Ticket>) {
        let mut state = self.lock();
        if ticket.granted.load(Ordering::Acquire) {
            let after_slice = ticket.after_slice.load(Ordering::Acquire);
            state.hand_over(after_slice);
            return;
        }
        if let Some(queue) = state.waiting.get_mut(caller) {
            queue.retain(|t| !Arc::ptr_eq(t, ticket));
            if queue.is_empty() {
                state.waiting.remove(caller);
                state.order.retain(|c| c != caller);
            }
        }
    }
}

impl TurnState {
    fn enqueue(&mut self, caller: &Caller, waker: &Waker) -> Arc<Ticket> {
        let ticket = Arc::new(Ticket {
            granted: AtomicBool::new(false),
            after_slice: AtomicBool::new(false),
            waker: Mutex::new(waker.clone()),
        });
        let queue = self.waiting.entry(caller.clone()).or_default();
        if queue.is_empty() {
            self.order.push_back(caller.clone());
        }
        queue.push_back(ticket.clone());
        ticket
    }

    fn hand_over(&mut self, after_slice: bool) {
        let Some(caller) = self.order.pop_front() else {
            self.free += 1;
            return;
        };
        let Some(queue) = self.waiting.get_mut(&caller) else {
            self.free += 1;
            return;
        };
        let next = queue.pop_front();
        if queue.is_empty() {
            self.waiting.remove(&caller);
        } else {
            self.order.push_back(caller);
        }
        match next {
            Some(ticket) => {
                ticket.after_slice.store(after_slice, Ordering::Release);
                ticket.granted.store(true, Ordering::Release);
                ticket
                    .waker
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .wake_by_ref();
            }
            None => self.free += 1,
        }
    }
}

/// The CPU turn of one guest call: none while the call is short; from the end of its
/// first slice on, it needs one to go on, and gives it back when it finishes or waits
/// for anything. Shared by the epoch callback ([`Self::end_of_slice`]) and the guest's
/// future ([`OnTurn`]); a turn still held is given back when the call is dropped.
pub(crate) struct CpuSlice {
    turns: Arc<Turns>,
    caller: Caller,
    holding: AtomicBool,
    /// The guest is parked in [`Self::end_of_slice`].
    yielding: AtomicBool,
    /// A slice of this call has ended: it is a long call, and runs only on a turn.
    sliced: AtomicBool,
}

impl CpuSlice {
    /// What the guest waits on when its slice ends (called from the epoch callback): a
    /// guest without a turn takes a free one and goes on; otherwise it yields to the
    /// scheduler (sockets, timers, other tasks), then passes its turn to the next waiting
    /// guest or takes one, waiting round-robin with the other callers.
    pub(crate) fn end_of_slice(self: &Arc<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        self.yielding.store(true, Ordering::Release);
        self.sliced.store(true, Ordering::Release);
        let me = self.clone();
        Box::pin(async move {
            // A free turn (nobody waits): go on at once, as if no slice had ended.
            if !me.holding.load(Ordering::Acquire) && me.turns.take_free() {
                me.holding.store(true, Ordering::Release);
                me.yielding.store(false, Ordering::Release);
                return;
            }
            tokio::task::yield_now().await;
            let mut queued = Queued {
                turns: me.turns.clone(),
                caller: me.caller.clone(),
                ticket: None,
            };
            let handed = std::future::poll_fn(|cx| {
                if queued.ticket.is_none() && me.holding.load(Ordering::Acquire) {
                    if !me.turns.pass_on(&me.caller, &mut queued.ticket, cx.waker()) {
                        return Poll::Ready(None);
                    }
                    me.holding.store(false, Ordering::Release);
                    return Poll::Pending;
                }
                match me.turns.take(&me.caller, &mut queued.ticket, cx.waker()) {
                    Taken::Free => Poll::Ready(Some(false)),
                    Taken::Handed { after_slice } => Poll::Ready(Some(after_slice)),
                    Taken::Waiting => Poll::Pending,
                }
            })
            .await;
            if let Some(after_slice) = handed {
                me.holding.store(true, Ordering::Release);
                if after_slice {
                    // Slices back to back: let the scheduler run sockets and timers first.
                    tokio::task::yield_now().await;
                }
            }
            me.yielding.store(false, Ordering::Release);
        })
    }

    /// Whether the guest must take a turn before it runs again: a long call (a slice of
    /// it ended) resuming after a wait for something else. Without this, a guest could
    /// dodge the queue by waiting briefly (a timer, a socket) just before each slice
    /// ends, and run its next slice without a turn.
    fn needs_turn(&self) -> bool {
        self.sliced.load(Ordering::Acquire)
            && !self.holding.load(Ordering::Acquire)
            && !self.yielding.load(Ordering::Acquire)
    }

    /// After a poll of the guest: one that finished, or waits for something other than
    /// its turn, gives its turn back.
    fn after_poll(&self, finished: bool) {
        if (finished || !self.yielding.load(Ordering::Acquire))
            && self.holding.swap(false, Ordering::AcqRel)
        {
            self.turns.give_back();
        }
    }
}

impl Drop for CpuSlice {
    fn drop(&mut self) {
        if *self.holding.get_mut() {
            self.turns.give_back();
        }
    }
}

/// A place in the queue for a turn, given up when dropped before the turn came.
struct Queued {
    turns: Arc<Turns>,
    caller: Caller,
    ticket: Option<Arc<Ticket>>,
}

impl Drop for Queued {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.turns.cancel(&self.caller, &ticket);
        }
    }
}

pin_project_lite::pin_project! {
    /// A guest call whose CPU turn (if it holds one) is given back whenever it stops
    /// running for anything but the end of a slice, and which, once it is a long call,
    /// resumes only on a turn.
    pub(crate) struct OnTurn<F> {
        #[pin]
        guest: F,
        slice: Arc<CpuSlice>,
        queued: Option<Queued>,
    }
}

impl<F> OnTurn<F> {
    pub(crate) fn new(slice: Arc<CpuSlice>, guest: F) -> Self {
        Self {
            guest,
            slice,
            queued: None,
        }
    }
}

impl<F: Future> Future for OnTurn<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        if this.slice.needs_turn() {
            let slice = &**this.slice;
            let queued = this.queued.get_or_insert_with(|| Queued {
                turns: slice.turns.clone(),
                caller: slice.caller.clone(),
                ticket: None,
            });
            match slice
                .turns
                .take(&slice.caller, &mut queued.ticket, cx.waker())
            {
                Taken::Free | Taken::Handed { .. } => {
                    slice.holding.store(true, Ordering::Release);
                    *this.queued = None;
                }
                Taken::Waiting => return Poll::Pending,
            }
        }
        let result = this.guest.poll(cx);
        this.slice.after_poll(result.is_ready());
        result
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn share(per_caller: u32, pool: u32, memory_mib: usize) -> HostShare {
        HostShare::new(&GuestLimits {
            max_concurrent_instances: pool,
            calls_per_agent: Some(per_caller),
            memory_bytes: memory_mib * 1024 * 1024,
            total_memory_bytes: memory_mib * 1024 * 1024,
            ..GuestLimits::default()
        })
    }

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    #[tokio::test]
    async fn a_caller_past_its_share_waits_and_times_out_while_others_run() {
        let share = share(2, 8, 64);
        let ada = Caller::Agent("ada".into());
        let bob = Caller::Agent("bob".into());
        let _a1 = share.admit(&ada, soon(1000)).await.expect("first");
        let _a2 = share.admit(&ada, soon(1000)).await.expect("second");
        assert_eq!(share.running(&ada), 2);
        let started = Instant::now();
        let third = share.admit(&ada, soon(100)).await;
        assert!(
            matches!(third, Err(GuestError::Queued { .. })),
            "{:?}",
            third.err()
        );
        assert!(started.elapsed() >= Duration::from_millis(90));
        // Another agent is not held up: held, it would wait out its 1 s deadline (the
        // bound is half of that, not a speed, so a loaded machine does not fail it).
        let started = Instant::now();
        let _b = share.admit(&bob, soon(1000)).await.expect("bob runs");
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "bob waited {:?}",
            started.elapsed()
        );
        // The host's own calls are not limited per caller.
        let mut host_calls = Vec::new();
        for _ in 0..4 {
            host_calls.push(share.admit(&Caller::Host, soon(100)).await.expect("host"));
        }
    }

    #[tokio::test]
    async fn a_released_slot_goes_to_the_waiting_call_and_unused_callers_are_forgotten() {
        let share = share(1, 8, 64);
        let ada = Caller::Agent("ada".into());
        let first = share.admit(&ada, soon(1000)).await.expect("first");
        let waiting = {
            let ada = ada.clone();
            let share = &share;
            async move { share.admit(&ada, soon(1000)).await }
        };
        let (second, ()) = tokio::join!(waiting, async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(first);
        });
        let second = second.expect("the waiting call is admitted");
        drop(second);
        assert!(share.callers.lock().unwrap().is_empty());
    }

    #[test]
    fn turns_go_round_robin_across_callers_and_cancelled_turns_pass_on() {
        let turns = Turns::new(1);
        let waker = Waker::noop();
        let (ada, bob) = (Caller::Agent("ada".into()), Caller::Agent("bob".into()));
        let mut a1 = None;
        assert_eq!(turns.take(&ada, &mut a1, waker), Taken::Free);
        let (mut a2, mut a3, mut b1) = (None, None, None);
        assert_eq!(turns.take(&ada, &mut a2, waker), Taken::Waiting);
        assert_eq!(turns.take(&ada, &mut a3, waker), Taken::Waiting);
        assert_eq!(turns.take(&bob, &mut b1, waker), Taken::Waiting);
        // ada's first call ends its slice: ada queued first, so a2 runs.
        let mut a1_again = None;
        assert!(turns.pass_on(&ada, &mut a1_again, waker));
        assert_eq!(
            turns.take(&ada, &mut a2, waker),
            Taken::Handed { after_slice: true }
        );
        // a2's slice ends: bob's turn comes before ada's other calls.
        let mut a2_again = None;
        assert!(turns.pass_on(&ada, &mut a2_again, waker));
        assert_eq!(turns.take(&ada, &mut a3, waker), Taken::Waiting);
        assert_eq!(
            turns.take(&bob, &mut b1, waker),
            Taken::Handed { after_slice: true }
        );
        // bob finishes; the turn goes to ada's next call (a3), which is cancelled: it
        // passes on to a1, then a2.
        turns.give_back();
        let a3 = a3.expect("queued");
        assert!(a3.granted.load(Ordering::Acquire));
        turns.cancel(&ada, &a3);
        assert_eq!(
            turns.take(&ada, &mut a1_again, waker),
            Taken::Handed { after_slice: false }
        );
        turns.give_back();
        assert_eq!(
            turns.take(&ada, &mut a2_again, waker),
            Taken::Handed { after_slice: false }
        );
        turns.give_back();
        // Nobody waits: the turn is free again, and nobody is left in the queue.
        assert!(turns.take_free());
        let state = turns.lock();
        assert!(state.order.is_empty() && state.waiting.is_empty());
    }

    #[test]
    fn a_long_call_resuming_from_a_wait_runs_only_on_a_turn() {
        let share = share(8, 8, 64);
        let ada = Caller::Agent("ada".into());
        let bob = Caller::Agent("bob".into());
        // ada's long call holds the only turns.
        let mut held = 0;
        while share.turns.take_free() {
            held += 1;
        }
        assert!(held > 0);
        // bob's call had a slice end, then waited for I/O (no turn held) and is woken.
        let slice = share.cpu_slice(&bob);
        slice.sliced.store(true, Ordering::Release);
        let polls = std::sync::atomic::AtomicUsize::new(0);
        let guest = std::future::poll_fn(|_| {
            polls.fetch_add(1, Ordering::Relaxed);
            Poll::Ready(())
        });
        let mut call = std::pin::pin!(OnTurn::new(slice.clone(), guest));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(call.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            polls.load(Ordering::Relaxed),
            0,
            "the guest ran without a turn"
        );
        // ada's call ends a slice: the turn goes to bob's.
        let mut ada_ticket = None;
        assert!(share.turns.pass_on(&ada, &mut ada_ticket, Waker::noop()));
        assert!(call.as_mut().poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::Relaxed), 1);
        // Finished: the turn went on to ada's waiting call.
        let ada_ticket = ada_ticket.expect("queued");
        assert!(ada_ticket.granted.load(Ordering::Acquire));
        // A short call (no slice ended) never waits for a turn.
        let short = share.cpu_slice(&bob);
        let mut call = std::pin::pin!(OnTurn::new(short, std::future::ready(())));
        assert!(call.as_mut().poll(&mut cx).is_ready());
    }

    #[tokio::test]
    async fn a_full_pool_is_host_busy() {
        let share = share(8, 2, 64);
        let ada = Caller::Agent("ada".into());
        let bob = Caller::Agent("bob".into());
        let _a = share.admit(&ada, soon(1000)).await.expect("a");
        let _b = share.admit(&bob, soon(1000)).await.expect("b");
        let third = share.admit(&Caller::Host, soon(50)).await;
        assert!(matches!(third, Err(GuestError::HostBusy { .. })));
    }

    const MIB: usize = 1024 * 1024;

    /// A call of `caller` admitted now, and its memory budget until `deadline_ms`.
    async fn guest(
        share: &HostShare,
        caller: &Caller,
        deadline_ms: u64,
    ) -> (Admitted, MemoryBudget) {
        let admitted = share
            .admit(caller, soon(deadline_ms))
            .await
            .expect("admitted");
        let budget = share.memory_budget(&admitted, soon(deadline_ms));
        (admitted, budget)
    }

    #[tokio::test]
    async fn memory_past_the_budget_waits_for_release_then_starves() {
        let share = share(8, 16, 4);
        let host = Caller::Host;
        let (_a1, mut first) = guest(&share, &host, 1000).await;
        assert!(first.grow(0, 3 * MIB).await);
        assert_eq!(first.held_bytes().0, 3 * MIB);
        let (_a2, mut second) = guest(&share, &host, 100).await;
        assert!(!second.grow(0, 2 * MIB).await, "1 MiB is left");
        let why = second.shortage(4, false).expect("host_busy");
        assert!(
            matches!(&why, GuestError::HostBusy { message } if message.contains("all guests")),
            "{why:?}"
        );
        // A growth the engine then refuses gives its pages back.
        let (_a5, mut fifth) = guest(&share, &host, 1000).await;
        assert!(fifth.grow(0, MIB).await);
        fifth.undo_last();
        assert_eq!(fifth.held_bytes().0, 0);
        assert!(fifth.shortage(4, true).is_none(), "it never waited");
        // Released memory is granted to a waiting guest.
        let (_a3, mut third) = guest(&share, &host, 1000).await;
        let (grown, ()) = tokio::join!(third.grow(0, 2 * MIB), async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(first);
        });
        assert!(grown);
        assert!(third.waited > Duration::ZERO, "it waited");
        assert!(
            third.shortage(4, false).is_none(),
            "a wait that ended in time is no failure"
        );
        assert!(third.grow(2 * MIB, 2 * MIB).await, "no growth, no pages");
        let (_a4, mut fourth) = guest(&share, &host, 1000).await;
        assert!(fourth.grow(0, 64 * 1024).await);
        assert!(fourth.waited.is_zero(), "memory to spare is taken at once");
    }

    #[tokio::test]
    async fn one_caller_holds_at_most_its_share_of_memory() {
        // 8 MiB in all, 1 MiB per guest: one caller's guests hold at most 2 MiB.
        let share = HostShare::new(&GuestLimits {
            max_concurrent_instances: 16,
            calls_per_agent: Some(8),
            memory_bytes: MIB,
            total_memory_bytes: 8 * MIB,
            ..GuestLimits::default()
        });
        let ada = Caller::Agent("ada".into());
        let bob = Caller::Agent("bob".into());
        let (_a1, mut a1) = guest(&share, &ada, 1000).await;
        let (_a2, mut a2) = guest(&share, &ada, 1000).await;
        assert!(a1.grow(0, MIB).await && a2.grow(0, MIB).await);
        assert_eq!(a1.held_bytes(), (MIB, MIB));
        let (_a3, mut a3) = guest(&share, &ada, 100).await;
        assert!(!a3.grow(0, 64 * 1024).await, "ada's share is used up");
        let why = a3.shortage(8, false).expect("the caller's overload");
        assert!(
            matches!(&why, GuestError::Queued { message, .. } if message.contains("agent `ada`")),
            "{why:?}"
        );
        // The host has memory to spare for another agent, at once: held behind ada, bob
        // would wait out his 1 s deadline (the bound is half of it).
        let started = Instant::now();
        let (_b1, mut b1) = guest(&share, &bob, 1000).await;
        assert!(b1.grow(0, MIB).await);
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "bob waited {:?}",
            started.elapsed()
        );
        // The host's own calls are not held to a caller's share.
        let (_h, mut host) = guest(&share, &Caller::Host, 1000).await;
        assert!(host.grow(0, 3 * MIB).await);
        assert_eq!(host.held_bytes(), (3 * MIB, 0));
    }

    #[tokio::test]
    async fn a_small_growth_that_fits_is_not_held_up_by_a_large_one_waiting() {
        let share = share(8, 16, 4);
        let host = Caller::Host;
        let (_h1, mut half1) = guest(&share, &host, 2000).await;
        let (_h2, mut half2) = guest(&share, &host, 2000).await;
        assert!(half1.grow(0, 2 * MIB).await && half2.grow(0, 2 * MIB).await);
        let (_l, mut large) = guest(&share, &host, 2000).await;
        let (_s, mut small) = guest(&share, &host, 2000).await;
        let large_wait = large.grow(0, 3 * MIB);
        let small_wait = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            small.grow(0, MIB).await
        };
        let released = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(half1);
            Instant::now()
        };
        let started = Instant::now();
        let (small_grown, released_at) = tokio::select! {
            (grown, at) = async { tokio::join!(small_wait, released) } => (grown, at),
            _ = large_wait => panic!("3 MiB were never free"),
        };
        assert!(small_grown);
        // Held behind the large growth (which 2 MiB never satisfy), the small one would
        // wait out its 2 s deadline; the bound is half of that.
        assert!(
            released_at.elapsed() < Duration::from_millis(1000),
            "the small growth waited {:?} after memory was released",
            started.elapsed()
        );
    }
}
