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
//! memory). Only as many long-running guests as there are turns are runnable, so the run
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

type CallerSlots = Arc<Mutex<HashMap<Caller, Arc<Semaphore>>>>;

/// The host's guest capacity and how it is shared.
pub(crate) struct HostShare {
    per_caller: usize,
    callers: CallerSlots,
    pool: Arc<Semaphore>,
    memory: Arc<Semaphore>,
    turns: Arc<Turns>,
}

/// A call's admission: a slot of its caller and one of the pool, both released on drop.
pub(crate) struct Admitted {
    _caller: Option<CallerSlot>,
    _pool: OwnedSemaphorePermit,
}

struct CallerSlot {
    permit: Option<OwnedSemaphorePermit>,
    caller: Caller,
    slots: Arc<Semaphore>,
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

impl HostShare {
    pub(crate) fn new(limits: &GuestLimits) -> Self {
        let pages = (limits.total_memory_bytes / PAGE).max(1);
        Self {
            per_caller: limits.calls_per_caller() as usize,
            callers: Arc::default(),
            pool: Arc::new(Semaphore::new(
                limits.max_concurrent_instances.max(1) as usize
            )),
            memory: Arc::new(Semaphore::new(pages)),
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
                let slots = {
                    let mut map = self.callers.lock().unwrap_or_else(|p| p.into_inner());
                    map.entry(caller.clone())
                        .or_insert_with(|| Arc::new(Semaphore::new(self.per_caller)))
                        .clone()
                };
                match acquire_by(deadline, &slots).await {
                    Some(permit) => Some(CallerSlot {
                        permit: Some(permit),
                        caller: caller.clone(),
                        slots,
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
                _caller: caller_slot,
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

    /// The memory budget a call with `deadline` grows its guest's memory from.
    pub(crate) fn memory_budget(&self, deadline: Instant) -> MemoryBudget {
        MemoryBudget {
            pages: self.memory.clone(),
            held: None,
            last: None,
            denied: false,
            deadline,
            held_up: false,
        }
    }

    /// Calls of `caller` running or admitted now (for tests and metrics).
    #[cfg(test)]
    fn running(&self, caller: &Caller) -> usize {
        let map = self.callers.lock().unwrap_or_else(|p| p.into_inner());
        map.get(caller)
            .map_or(0, |s| self.per_caller - s.available_permits())
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

/// One guest's claim on the host-wide memory budget: growing its linear memory takes
/// pages from the budget (waiting for other guests to finish until the call's deadline);
/// everything is returned when the guest's store is dropped.
pub(crate) struct MemoryBudget {
    pages: Arc<Semaphore>,
    held: Option<OwnedSemaphorePermit>,
    /// The pages of the latest growth, until the engine has done it (see `undo_last`).
    last: Option<OwnedSemaphorePermit>,
    /// A growth was refused because the budget stayed exhausted until the deadline.
    denied: bool,
    deadline: Instant,
    /// A growth had to wait for the budget (or failed for it).
    held_up: bool,
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
            self.denied = true;
            return false;
        };
        let granted = match self.pages.clone().try_acquire_many_owned(needed) {
            Ok(permit) => Some(permit),
            Err(_) => {
                self.held_up = true;
                let deadline = tokio::time::Instant::from_std(self.deadline);
                // Outside tokio's cooperative budget: a guest that allocates in a loop
                // must not be parked here with memory to spare.
                let wait = tokio::time::timeout_at(
                    deadline,
                    self.pages.clone().acquire_many_owned(needed),
                );
                tokio::task::coop::unconstrained(wait)
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
        };
        match granted {
            Some(permit) => {
                if let Some(previous) = self.last.replace(permit) {
                    match &mut self.held {
                        Some(held) => held.merge(previous),
                        None => self.held = Some(previous),
                    }
                }
                true
            }
            None => {
                self.denied = true;
                false
            }
        }
    }

    /// Gives back the pages of the latest growth (the engine could not do it).
    pub(crate) fn undo_last(&mut self) {
        self.last = None;
    }

    /// Whether a growth was refused for want of budget.
    pub(crate) fn denied(&self) -> bool {
        self.denied
    }

    /// Whether the guest had to wait for the budget during its call (a call out of time
    /// after that is the host's bound, `host_busy`, not the guest's).
    pub(crate) fn held_up(&self) -> bool {
        self.held_up
    }

    /// Bytes this guest holds of the budget.
    #[cfg(test)]
    fn held_bytes(&self) -> usize {
        [&self.held, &self.last]
            .iter()
            .filter_map(|p| p.as_ref())
            .map(|p| p.num_permits() * PAGE)
            .sum()
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
}

impl CpuSlice {
    /// What the guest waits on when its slice ends (called from the epoch callback): a
    /// guest without a turn takes a free one and goes on; otherwise it yields to the
    /// scheduler (sockets, timers, other tasks), then passes its turn to the next waiting
    /// guest or takes one, waiting round-robin with the other callers.
    pub(crate) fn end_of_slice(self: &Arc<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        self.yielding.store(true, Ordering::Release);
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
    /// running for anything but the end of a slice.
    pub(crate) struct OnTurn<F> {
        #[pin]
        guest: F,
        slice: Arc<CpuSlice>,
    }
}

impl<F> OnTurn<F> {
    pub(crate) fn new(slice: Arc<CpuSlice>, guest: F) -> Self {
        Self { guest, slice }
    }
}

impl<F: Future> Future for OnTurn<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
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
        // Another agent is not held up.
        let started = Instant::now();
        let _b = share.admit(&bob, soon(1000)).await.expect("bob runs");
        assert!(started.elapsed() < Duration::from_millis(50));
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

    #[tokio::test]
    async fn memory_past_the_budget_waits_for_release_then_starves() {
        let share = share(8, 8, 4);
        let mut first = share.memory_budget(soon(1000));
        assert!(first.grow(0, 3 * 1024 * 1024).await);
        assert_eq!(first.held_bytes(), 3 * 1024 * 1024);
        let mut second = share.memory_budget(soon(100));
        assert!(!second.grow(0, 2 * 1024 * 1024).await, "1 MiB is left");
        assert!(second.held_up() && second.denied());
        // A growth the engine then refuses gives its pages back.
        let mut fifth = share.memory_budget(soon(1000));
        assert!(fifth.grow(0, 1024 * 1024).await);
        fifth.undo_last();
        assert_eq!(fifth.held_bytes(), 0);
        assert!(!fifth.denied());
        // Released memory is granted to a waiting guest.
        let mut third = share.memory_budget(soon(1000));
        let (grown, ()) = tokio::join!(third.grow(0, 2 * 1024 * 1024), async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(first);
        });
        assert!(grown);
        assert!(third.held_up(), "it waited");
        assert!(
            third.grow(2 * 1024 * 1024, 2 * 1024 * 1024).await,
            "no growth, no pages"
        );
        let mut fourth = share.memory_budget(soon(1000));
        assert!(fourth.grow(0, 64 * 1024).await);
        assert!(!fourth.held_up(), "memory to spare is taken at once");
    }
}
