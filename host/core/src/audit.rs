//! The audit log as the host writes and reads it (CONTRACT §9).
//!
//! Two ways in, so that nothing acknowledged lacks its record:
//! - A state change carries an [`Audit`] through the one write path
//!   (`State::write`), which hands the sealed-to-be record to the store with the change:
//!   one transaction ([`connector_store::StateStore::write_audited`]).
//! - Everything else that leaves a record without changing the state (tool calls,
//!   webhook deliveries, token mints, refusals, a write that found nothing to change)
//!   goes through [`AuditLog::append`], which waits until its record is committed. The
//!   store commits the appends waiting at one moment together, one transaction for the
//!   group ([`connector_store::audit_groups`]): a caller that arrives while a group is
//!   committing joins the next one, so a burst of tool calls costs a few commits, not
//!   one each.
//!
//! Reading ([`AuditLog::records`]), checking the chain ([`AuditLog::verify`]) and
//! pruning ([`AuditLog::prune`]) go to the store directly.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::config::AuditSettings;
use connector_model::audit::{audit_time, Actor, AuditEntry, AuditRecord, ChainCheck};
use connector_model::error::{ErrorCode, HostError, HostResult};
use connector_store::{AuditQuery, AuditStore};

/// Checks `verify` makes of a chain that is pruned while it is read.
const VERIFY_ATTEMPTS: usize = 3;
/// Records read per page while verifying.
const VERIFY_PAGE: u32 = 1000;
/// The most records one pruning transaction deletes.
const PRUNE_BATCH: u32 = 5000;
/// How often old records are pruned.
pub(crate) const PRUNE_INTERVAL: Duration = Duration::from_secs(3600);

/// What a change will record about itself: who does it, what and on what, and details
/// that never hold a secret, a token, a result or a webhook body.
#[derive(Debug, Clone)]
pub(crate) struct Audit {
    pub(crate) actor: Actor,
    pub(crate) action: &'static str,
    pub(crate) target: String,
    pub(crate) details: Value,
}

impl Audit {
    pub(crate) fn new(actor: &Actor, action: &'static str, target: String) -> Audit {
        Audit {
            actor: actor.clone(),
            action,
            target,
            details: Value::Object(Default::default()),
        }
    }

    pub(crate) fn with_details(mut self, details: Value) -> Audit {
        self.details = details;
        self
    }

    /// The entry, made now, with `outcome` (`ok` or an error code) and the id of the
    /// trace being recorded, if any.
    pub(crate) fn entry(&self, outcome: &str) -> AuditEntry {
        self.clone().into_entry(outcome)
    }

    /// [`Self::entry`], moving the target and details into it instead of copying them.
    pub(crate) fn into_entry(self, outcome: &str) -> AuditEntry {
        let mut entry = AuditEntry::now(self.actor, self.action, self.target);
        entry.outcome = outcome.to_string();
        entry.details = self.details;
        entry.trace_id = connector_trace::current_trace_id();
        entry
    }
}

/// One page of records (`GET /audit`).
#[derive(Debug, Clone, Serialize)]
pub struct AuditPage {
    /// The records, oldest first.
    pub records: Vec<AuditRecord>,
    /// The seq to pass as `after` for the next page; `None` when this one was the last.
    pub next: Option<i64>,
}

/// What recomputing the chain found (`GET /audit/verify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditVerdict {
    /// Every kept record holds.
    pub ok: bool,
    /// How many records were checked.
    pub checked: u64,
    /// The first record whose hash or `prev` does not hold, or the record after a gap.
    pub first_broken: Option<i64>,
}

/// The host's way into the audit log (see the module docs).
pub(crate) struct AuditLog {
    store: Arc<dyn AuditStore>,
    settings: AuditSettings,
}

impl AuditLog {
    /// The audit log kept in `store`.
    pub(crate) fn new(store: Arc<dyn AuditStore>, settings: AuditSettings) -> Arc<AuditLog> {
        Arc::new(AuditLog { store, settings })
    }

    /// Whether tool-call records keep their arguments (`audit.record_arguments`).
    pub(crate) fn record_arguments(&self) -> bool {
        self.settings.record_arguments
    }

    /// Appends `entry` and waits until it is committed.
    pub(crate) async fn append(&self, entry: AuditEntry) -> HostResult<()> {
        let action = entry.action.clone();
        self.store.append_audit_entry(entry).await.map_err(|e| {
            tracing::warn!(%action, error = %e, "cannot append to the audit log");
            HostError::from(e)
        })
    }

    /// Records that `audit`'s change was refused with `error`. A record that cannot be
    /// written is logged; the caller answers with the refusal either way.
    pub(crate) async fn refused(&self, audit: &Audit, error: &HostError) {
        let _ = self.append(audit.entry(error.code.as_str())).await;
    }

    /// Records the refusal when `result` is one, and hands `result` back.
    pub(crate) async fn outcome_of<T>(
        &self,
        audit: &Audit,
        result: HostResult<T>,
    ) -> HostResult<T> {
        if let Err(error) = &result {
            self.refused(audit, error).await;
        }
        result
    }

    /// The records `query` asks for, with the cursor of the next page.
    pub(crate) async fn records(&self, query: AuditQuery) -> HostResult<AuditPage> {
        let limit = query.limit;
        let records = self.store.audit_records(&query).await?;
        let next = (records.len() as u64 == u64::from(limit))
            .then(|| records.last().map(|r| r.seq))
            .flatten();
        Ok(AuditPage { records, next })
    }

    /// Recomputes the kept chain from its anchor. A prune while the chain is read is not
    /// a break: the check starts from the anchor as it is once the first page is read,
    /// and starts again when a prune went past that page. A chain pruned under three
    /// checks in a row is not judged at all (`409 state_changed`, check again): a break
    /// is only ever reported on a chain that held still while it was read.
    pub(crate) async fn verify(&self) -> HostResult<AuditVerdict> {
        for _ in 0..VERIFY_ATTEMPTS {
            let (verdict, anchor) = self.verify_once().await?;
            if verdict.ok || self.store.audit_anchor().await?.seq == anchor {
                return Ok(verdict);
            }
        }
        Err(HostError::new(
            ErrorCode::StateChanged,
            format!(
                "the audit log was pruned while it was being checked, {VERIFY_ATTEMPTS} times in a row; check it again once pruning is done"
            ),
        ))
    }

    /// One check of the kept chain; the verdict and the seq of the anchor it started
    /// from.
    async fn verify_once(&self) -> HostResult<(AuditVerdict, i64)> {
        // The head first: records appended while the check reads are past it.
        let head = self.store.audit_head().await?;
        let seen = self.store.audit_anchor().await?;
        let mut page = self.page_after(seen.seq).await?;
        // The anchor again, now that the first page is read: a prune since `seen` deleted
        // what the page holds up to the anchor it left, so the check starts there.
        let anchor = self.store.audit_anchor().await?;
        let mut check = ChainCheck::from(&anchor);
        loop {
            let full = page.len() as u32 == VERIFY_PAGE;
            let after = page
                .last()
                .map_or(anchor.seq, |last| last.seq.max(anchor.seq));
            for record in page.iter().filter(|r| r.seq > anchor.seq) {
                check.next(record);
            }
            if !full {
                break;
            }
            page = self.page_after(after).await?;
        }
        check.ends_at(&head);
        // Records deleted before the anchor's seq are not read from `after = anchor.seq`;
        // a record with a smaller seq than the anchor's would be one put back by hand.
        let verdict = AuditVerdict {
            ok: check.first_broken().is_none(),
            checked: check.checked(),
            first_broken: check.first_broken(),
        };
        Ok((verdict, anchor.seq))
    }

    /// Up to [`VERIFY_PAGE`] records after `after`, oldest first.
    async fn page_after(&self, after: i64) -> HostResult<Vec<AuditRecord>> {
        Ok(self
            .store
            .audit_records(&AuditQuery {
                after,
                limit: VERIFY_PAGE,
                ..AuditQuery::default()
            })
            .await?)
    }

    /// Deletes the records older than `audit.retention_days` (the chain's anchor moves
    /// to the last one deleted); returns how many.
    /// Deleted in batches of [`PRUNE_BATCH`], each its own transaction, so appends go on
    /// between them.
    pub(crate) async fn prune(&self) -> HostResult<u64> {
        let cutoff = time::OffsetDateTime::now_utc()
            - time::Duration::days(i64::from(self.settings.retention_days));
        let cutoff = audit_time(cutoff);
        let mut pruned = 0;
        loop {
            let n = self.store.prune_audit(&cutoff, PRUNE_BATCH).await?;
            pruned += n;
            if n < u64::from(PRUNE_BATCH) {
                return Ok(pruned);
            }
        }
    }

    /// Prunes now and then every [`PRUNE_INTERVAL`], while the log is in use.
    pub(crate) fn spawn_pruning(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(this) = weak.upgrade() else { return };
                match this.prune().await {
                    Ok(0) => {}
                    Ok(n) => {
                        tracing::info!(records = n, "pruned audit records past their retention")
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot prune the audit log"),
                }
                drop(this);
                tokio::time::sleep(PRUNE_INTERVAL).await;
            }
        });
    }
}

/// An `RFC 3339` time from a query, as an audit time (`since`, `until`).
pub fn parse_audit_time(name: &str, text: &str) -> HostResult<String> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map(audit_time)
        .map_err(|_| {
            HostError::invalid_request(format!(
                "`{name}` must be an RFC 3339 time such as 2026-01-31T12:00:00Z, not `{text}`"
            ))
        })
}

/// The credentials guests use (CONTRACT §9: every installation token minted and secret
/// read): one record each, its actor the caller the guest ran for, committed before the
/// guest gets the credential (the runtime refuses it otherwise). Names and installation
/// ids only, never a value.
#[async_trait::async_trait]
impl connector_runtime::CredentialLog for AuditLog {
    async fn record(
        &self,
        connector: &str,
        caller: &connector_runtime::Caller,
        used: connector_runtime::CredentialUse,
    ) -> Result<(), HostError> {
        use connector_model::audit::target;
        use connector_model::ids::truncate;
        use connector_runtime::{Caller, CredentialUse};
        let actor = match caller {
            Caller::Agent(id) => Actor::agent(id),
            Caller::Webhooks(slug) => Actor::webhook(slug),
            Caller::Host => Actor::host(),
        };
        let target = target::connector(&truncate(connector, 128));
        let (action, outcome, details) = match used {
            CredentialUse::Secret { name, granted } => (
                "secret.read",
                if granted { "ok" } else { "forbidden" },
                serde_json::json!({"name": truncate(&name, 128)}),
            ),
            CredentialUse::InstallationToken {
                installation_id,
                refused,
            } => (
                "installation_token.mint",
                refused.unwrap_or("ok"),
                serde_json::json!({"installationId": installation_id}),
            ),
        };
        let audit = Audit::new(&actor, action, target).with_details(details);
        // Not `append`, which logs the failure: the runtime logs it once, with what it
        // means (the credential is refused).
        self.store
            .append_audit_entry(audit.entry(outcome))
            .await
            .map_err(HostError::from)
    }
}
