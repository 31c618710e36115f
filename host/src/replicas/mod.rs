//! Several host replicas on one shared database.
//!
//! Each replica serves from memory (the directory, the resolver's cache, the registry)
//! so a tool call never waits on a query for its grants. On a shared store
//! ([`Store::is_shared`](crate::store::ReplicaCoordination::is_shared)) that memory can go stale when
//! another replica writes, so:
//!
//! - **Before serving a request** the replica asks the store whether the state version
//!   moved ([`Host::refresh`]). Concurrent requests share one check: a request waits for
//!   a check that *started after it arrived*, so a bind committed through any replica
//!   before a request arrives here is always seen by that request, at the cost of at most
//!   one small query in flight per replica. A version written by this replica itself needs
//!   no reload; one written by another replica reloads the state (one consistent snapshot,
//!   under the write lock so it cannot interleave with a local write). If the database
//!   cannot be asked, the request fails with `503` rather than being served from state
//!   that may be stale.
//! - **In the background** the same check runs every [`BACKGROUND_REFRESH`], so open MCP
//!   sessions learn about a bind on another replica without a request of their own.
//! - **Webhook deliveries are claimed.** A replica stores a delivery with a claim that
//!   lapses after [`Host::delivery_lease`]; every replica sweeps for unclaimed or lapsed
//!   pending deliveries every [`SWEEP_INTERVAL`] (with `SKIP LOCKED` in PostgreSQL), so
//!   the work of a replica that died is finished by the others and never by two at once.
//!   Messages stay exactly-once regardless: completing a delivery refuses to run twice.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::error::{ErrorCode, HostError, HostResult};
use crate::grants::Directory;
use crate::host::{Host, Inner};
use crate::store::{Claim, ClaimScope, DeliveryRecord, Snapshot};

/// How often a replica on a shared store checks for changes on its own.
pub const BACKGROUND_REFRESH: Duration = Duration::from_millis(200);
/// How long a request waits for the shared state check (a reload included) before it
/// is answered `503`.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// How often every host looks for deliveries nobody is working on.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// How many deliveries one claim takes (and are then processed at once).
const CLAIM_BATCH: u32 = 8;

/// This replica's identity and how current its in-memory state is.
pub(crate) struct ReplicaState {
    /// Stable across restarts (kept in `<data_dir>/replica-id`): a restarted replica takes
    /// back its own claims at once instead of waiting for them to lapse.
    pub(crate) id: String,
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
}

impl ReplicaState {
    pub(crate) fn new(id: String, applied: i64) -> Self {
        Self {
            id,
            applied: AtomicI64::new(applied),
            arrivals: AtomicU64::new(0),
            checked_through: AtomicU64::new(0),
            failed_through: AtomicU64::new(0),
            check: tokio::sync::Mutex::new(()),
        }
    }
}

fn now_unix() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

impl Host {
    /// This replica's id (see `<data_dir>/replica-id`).
    pub fn replica_id(&self) -> &str {
        &self.inner.replica.id
    }

    /// How long a replica's claim on a webhook delivery lasts: long enough for a
    /// translation and its accept calls (each bounded by the call timeout), short enough
    /// that a dead replica's work is picked up soon.
    pub fn delivery_lease(&self) -> Duration {
        let call = self.inner.config.limits.call_timeout;
        (call * 2 + Duration::from_secs(1)).max(Duration::from_secs(2))
    }

    /// A claim for this replica starting now.
    pub(crate) fn new_claim(&self) -> Claim {
        let lease = i64::try_from(self.delivery_lease().as_secs()).unwrap_or(i64::MAX / 2);
        Claim {
            owner: self.inner.replica.id.clone(),
            until_unix: now_unix().saturating_add(lease),
        }
    }

    /// Brings this replica's in-memory state up to date with the shared database: every
    /// change committed (through any replica) before this call started is visible after
    /// it returns. A no-op on a store only this process writes.
    pub async fn refresh(&self) -> HostResult<()> {
        if !self.inner.store.is_shared() {
            return Ok(());
        }
        let replica = &self.inner.replica;
        let ticket = replica.arrivals.fetch_add(1, Ordering::SeqCst) + 1;
        if replica.checked_through.load(Ordering::SeqCst) >= ticket {
            return Ok(());
        }
        let _one_at_a_time = replica.check.lock().await;
        if replica.checked_through.load(Ordering::SeqCst) >= ticket {
            // A check that started after this request arrived has finished meanwhile.
            return Ok(());
        }
        if replica.failed_through.load(Ordering::SeqCst) >= ticket {
            return Err(HostError::new(
                ErrorCode::StoreUnavailable,
                "the shared database did not answer; retry shortly",
            ));
        }
        let covers = replica.arrivals.load(Ordering::SeqCst);
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
                replica.checked_through.fetch_max(covers, Ordering::SeqCst);
                Ok(())
            }
            Err(e) => {
                replica.failed_through.fetch_max(covers, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    async fn check_and_reload(&self) -> HostResult<()> {
        let replica = &self.inner.replica;
        let applied = replica.applied.load(Ordering::SeqCst);
        let check = self.inner.store.changes_since(applied).await?;
        if check.foreign {
            self.reload().await?;
        } else {
            let _ = replica.applied.compare_exchange(
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
        let _write = self.inner.writes.lock().await;
        let snapshot = self.inner.store.load().await?;
        self.adopt_stored(&snapshot).await;
        *self.inner.directory.write() = Directory::from_snapshot(&snapshot);
        self.inner.resolver.invalidate();
        self.inner
            .replica
            .applied
            .store(snapshot.version, Ordering::SeqCst);
        tracing::debug!(
            version = snapshot.version,
            "reloaded state changed by another replica"
        );
        Ok(())
    }

    /// Makes the registry and the image-tool cache what `snapshot` stores: connectors
    /// whose digest changed are prepared (a compiled one comes from the cache), removed
    /// ones dropped. Used at start-up (empty registry) and on every reload.
    pub(crate) async fn adopt_stored(&self, snapshot: &Snapshot) {
        let registry = &self.inner.registry;
        for record in &snapshot.connectors {
            let current = registry.get(&record.slug);
            if current.is_some_and(|c| c.info().digest == record.digest) {
                continue;
            }
            match registry.prepare(&record.component).await {
                Ok(prepared) => {
                    self.remember_policy(prepared.info());
                    registry.insert(prepared);
                }
                Err(e) => {
                    tracing::error!(slug = %record.slug, error = %e, "a stored connector does not load on this host; it stays stored but is not available here")
                }
            }
        }
        for installed in registry.list() {
            if !snapshot
                .connectors
                .iter()
                .any(|c| c.slug == installed.slug())
            {
                registry.remove(installed.slug());
            }
        }
        self.inner.image_tools.write().clear();
        for record in &snapshot.image_tools {
            self.cache_image_tools(record);
        }
    }

    /// Claims and finishes deliveries nobody is working on; returns how many it claimed.
    pub async fn sweep_deliveries(&self) -> HostResult<usize> {
        let batch = self.claim_batch(ClaimScope::Sweep).await?;
        let n = batch.len();
        if n > 0 {
            let host = self.clone();
            tokio::spawn(async move { host.process_claimed(batch).await });
        }
        Ok(n)
    }

    /// Claims one batch of deliveries per `scope` — no more than are processed at once,
    /// so no claim lapses while its delivery waits its turn — with the state refreshed,
    /// so they are routed with the bindings in force now, not as of the last request
    /// this replica happened to serve.
    pub(crate) async fn claim_batch(&self, scope: ClaimScope) -> HostResult<Vec<DeliveryRecord>> {
        let claimed = self
            .inner
            .store
            .claim_deliveries(&self.new_claim(), now_unix(), scope, CLAIM_BATCH)
            .await?;
        if !claimed.is_empty() {
            self.refresh().await?;
        }
        Ok(claimed)
    }

    /// Finishes a claimed batch, all of it at once (a slow delivery does not hold up the
    /// others).
    pub(crate) async fn process_claimed(&self, batch: Vec<DeliveryRecord>) {
        futures::future::join_all(batch.into_iter().map(|record| async move {
            let _ = self.process_delivery(record).await;
        }))
        .await;
    }

    /// Starts the background refresh (shared stores) and the delivery sweep. They stop
    /// when the last handle of this host is dropped.
    pub(crate) fn start_background(&self) {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        if self.inner.store.is_shared() {
            let weak = weak.clone();
            tokio::spawn(async move {
                let mut failing = false;
                loop {
                    tokio::time::sleep(BACKGROUND_REFRESH).await;
                    let Some(inner) = weak.upgrade() else { return };
                    let host = Host { inner };
                    match host.refresh().await {
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
        tokio::spawn(async move {
            let mut failing = false;
            loop {
                tokio::time::sleep(SWEEP_INTERVAL).await;
                let Some(inner) = weak.upgrade() else { return };
                let host = Host { inner };
                match host.sweep_deliveries().await {
                    Ok(n) => {
                        if n > 0 {
                            tracing::info!(
                                deliveries = n,
                                "finishing webhook deliveries nobody was working on"
                            );
                        }
                        failing = false;
                    }
                    Err(e) if !failing => {
                        tracing::warn!(error = %e, "cannot sweep stored webhook deliveries");
                        failing = true;
                    }
                    Err(_) => {}
                }
            }
        });
    }
}
