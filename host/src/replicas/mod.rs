//! Several host replicas on one shared database.
//!
//! Each replica serves from memory (the directory, the resolver's cache, the registry)
//! so a tool call never waits on a query for its grants. On a shared store
//! ([`Store::is_shared`](crate::store::ReplicaCoordination::is_shared)) that memory can go stale when
//! another replica writes, so:
//!
//! - **Before serving a request** the replica asks the store whether the state version
//!   moved ([`ReplicaSync::refresh`]). Concurrent requests share one check: a request waits for
//!   a check that *started after it arrived*, so a bind committed through any replica
//!   before a request arrives here is always seen by that request, at the cost of at most
//!   one small query in flight per replica. A version written by this replica itself needs
//!   no reload; one written by another replica reloads the state (one consistent snapshot,
//!   under the write lock so it cannot interleave with a local write). If the database
//!   cannot be asked, the request fails with `503` rather than being served from state
//!   that may be stale.
//! - **A tool server beside `serve`** (`connector-host mcp --local`,
//!   `Role::ToolServer` of the start-up) does the same on any store,
//!   SQLite included: `serve` writes the file it reads, and two handles on one SQLite file
//!   behave as two replicas (the state version and its own-writes record live in the
//!   file and the handle), so a grant made through `serve` is seen by its next request.
//! - **In the background** the same check runs every [`BACKGROUND_REFRESH`], so open MCP
//!   sessions learn about a bind on another replica without a request of their own.
//! - **Webhook deliveries are claimed.** A replica stores a delivery with a claim that
//!   lapses after a lease; every replica sweeps for unclaimed or lapsed
//!   pending deliveries every [`SWEEP_INTERVAL`](crate::webhooks::SWEEP_INTERVAL) (with `SKIP LOCKED` in PostgreSQL), so
//!   the work of a replica that died is finished by the others and never by two at once.
//!   Messages stay exactly-once regardless: completing a delivery refuses to run twice.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::catalog::Catalog;
use crate::error::{ErrorCode, HostError, HostResult};
use crate::state::State;
use crate::store::Store;

/// How often a replica on a shared store checks for changes on its own.
pub const BACKGROUND_REFRESH: Duration = Duration::from_millis(200);
/// How long a request waits for the shared state check (a reload included) before it
/// is answered `503`.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Keeps this replica's in-memory state in step with the shared database.
pub(crate) struct ReplicaSync {
    store: Arc<dyn Store>,
    state: Arc<State>,
    catalog: Arc<Catalog>,
    /// Stable across restarts (kept in `<data_dir>/replica-id`): a restarted replica takes
    /// back its own claims at once instead of waiting for them to lapse.
    id: String,
    /// The state version the in-memory state reflects.
    applied: AtomicI64,
    /// Requests that asked for a check, in arrival order.
    arrivals: AtomicU64,
    /// Every request with a ticket up to this one has been covered by a finished check.
    checked_through: AtomicU64,
    /// Every request with a ticket up to this one was covered by a check that failed:
    /// it gets that failure at once instead of queueing for a check of its own.
    failed_through: AtomicU64,
    /// One check at a time.
    check: tokio::sync::Mutex<()>,
    /// Whether other processes write this database: the store is shared, or this
    /// process serves tools beside the one that writes it (`Role::ToolServer`).
    follow: bool,
}

impl ReplicaSync {
    /// Replica `id` whose memory reflects state version `applied`; `follow`: other
    /// processes write the database, so check for their changes.
    pub(crate) fn new(
        store: Arc<dyn Store>,
        state: Arc<State>,
        catalog: Arc<Catalog>,
        id: String,
        applied: i64,
        follow: bool,
    ) -> Self {
        Self {
            store,
            state,
            catalog,
            id,
            applied: AtomicI64::new(applied),
            arrivals: AtomicU64::new(0),
            checked_through: AtomicU64::new(0),
            failed_through: AtomicU64::new(0),
            check: tokio::sync::Mutex::new(()),
            follow,
        }
    }

    /// This replica's id (see `<data_dir>/replica-id`).
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Brings this replica's in-memory state up to date with the shared database: every
    /// change committed (through any replica) before this call started is visible after
    /// it returns. A no-op on a store only this process writes.
    pub(crate) async fn refresh(&self) -> HostResult<()> {
        if !self.follow {
            return Ok(());
        }
        let ticket = self.arrivals.fetch_add(1, Ordering::SeqCst) + 1;
        if self.checked_through.load(Ordering::SeqCst) >= ticket {
            return Ok(());
        }
        let _one_at_a_time = self.check.lock().await;
        if self.checked_through.load(Ordering::SeqCst) >= ticket {
            // A check that started after this request arrived has finished meanwhile.
            return Ok(());
        }
        if self.failed_through.load(Ordering::SeqCst) >= ticket {
            return Err(HostError::new(
                ErrorCode::StoreUnavailable,
                "the shared database did not answer; retry shortly",
            ));
        }
        let covers = self.arrivals.load(Ordering::SeqCst);
        let checked = match tokio::time::timeout(CHECK_TIMEOUT, self.check_and_reload()).await {
            Ok(result) => result,
            Err(_) => Err(HostError::new(
                ErrorCode::StoreUnavailable,
                format!(
                    "the shared database did not answer within {} s; retry shortly",
                    CHECK_TIMEOUT.as_secs()
                ),
            )),
        };
        match checked {
            Ok(()) => {
                self.checked_through.fetch_max(covers, Ordering::SeqCst);
                Ok(())
            }
            Err(e) => {
                self.failed_through.fetch_max(covers, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    async fn check_and_reload(&self) -> HostResult<()> {
        let applied = self.applied.load(Ordering::SeqCst);
        let check = self.store.changes_since(applied).await?;
        if check.foreign {
            self.reload().await?;
        } else {
            let _ = self.applied.compare_exchange(
                applied,
                check.version.max(applied),
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
        }
        Ok(())
    }

    /// Replaces the in-memory state with the database's.
    async fn reload(&self) -> HostResult<()> {
        let catalog = &self.catalog;
        let version = self
            .state
            .reload(|snapshot| async move { catalog.adopt(&snapshot).await })
            .await?;
        self.applied.store(version, Ordering::SeqCst);
        tracing::debug!(version, "reloaded state changed by another replica");
        Ok(())
    }

    /// On a shared store, checks for other replicas' changes every
    /// [`BACKGROUND_REFRESH`] (so open MCP sessions learn about them without a request of
    /// their own) until this is dropped.
    pub(crate) fn spawn_background_refresh(self: &Arc<Self>) {
        if !self.follow {
            return;
        }
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut failing = false;
            loop {
                tokio::time::sleep(BACKGROUND_REFRESH).await;
                let Some(this) = weak.upgrade() else { return };
                match this.refresh().await {
                    Ok(()) if failing => {
                        tracing::info!("the database answers again; state refreshed");
                        failing = false;
                    }
                    Ok(()) => {}
                    Err(e) if !failing => {
                        tracing::warn!(error = %e, "cannot check the shared state; requests get 503 until the database answers");
                        failing = true;
                    }
                    Err(_) => {}
                }
            }
        });
    }
}
