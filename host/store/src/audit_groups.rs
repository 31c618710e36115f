//! Audit records appended one at a time and committed in groups
//! ([`AuditStore::append_audit_entry`](crate::AuditStore::append_audit_entry)).
//!
//! Why: a tool call, a webhook delivery or a credential use answers only once its record
//! is committed, and they come by the thousands a second. One transaction each would
//! cost a commit per call; handing each record through a task of its own to the store's
//! writer costs wake-ups per call. Instead the records wait in one open group, which the
//! store's writer takes when it is ready to commit: everything that arrived while the
//! previous group was committing goes into the next transaction, and every caller of the
//! group is woken together once it has committed.
//!
//! The protocol between callers and a store, all of it in [`AuditGroups::append`]:
//! - The record joins the open group. The record that opens a group gets a
//!   [`Submitted`], which the store hands to its writer; the writer takes the group's
//!   records ([`GroupRecords::take`]) once its transaction is ready to write them
//!   (closing the group: later records open the next one) and calls
//!   [`Submitted::finish`] once the transaction has committed or failed.
//! - Every caller waits until its group has committed (or failed).
//! - A [`Submitted`] dropped without being finished (a writer that stopped) fails its
//!   group, so no caller waits forever and no record is kept in memory for a group that
//!   will never be written.

use std::sync::{Arc, OnceLock};

use connector_model::audit::AuditEntry;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::{StoreError, StoreResult};

/// The records waiting for the store's next audit transaction.
#[derive(Default)]
pub struct AuditGroups {
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    group: Arc<AuditGroup>,
    entries: Vec<AuditEntry>,
}

/// One group's outcome, awaited by every caller whose record is in it.
#[derive(Default)]
pub struct AuditGroup {
    outcome: OnceLock<StoreResult<()>>,
    done: Notify,
}

/// What `AuditGroups::push` hands back.
struct Joined {
    /// The group the record is in.
    group: Arc<AuditGroup>,
    /// Set for the record that opened the group: the store must give it to its writer.
    submit: Option<Submitted>,
}

/// A group handed to the store's writer (see the module docs).
pub struct Submitted {
    groups: Arc<AuditGroups>,
    group: Arc<AuditGroup>,
}

impl AuditGroups {
    /// Adds `entry` to the open group.
    fn push(self: &Arc<Self>, entry: AuditEntry) -> Joined {
        let mut open = self.open.lock();
        let first = open.entries.is_empty();
        open.entries.push(entry);
        let group = Arc::clone(&open.group);
        drop(open);
        let submit = first.then(|| Submitted {
            groups: Arc::clone(self),
            group: Arc::clone(&group),
        });
        Joined { group, submit }
    }

    /// The whole protocol for one record: adds `entry` to the open group, gives a group
    /// it opened to `submit` (the store's way to its writer), and waits until the group
    /// has committed (or failed).
    pub async fn append(
        self: &Arc<Self>,
        entry: AuditEntry,
        submit: impl FnOnce(Submitted),
    ) -> StoreResult<()> {
        let joined = self.push(entry);
        if let Some(submitted) = joined.submit {
            submit(submitted);
        }
        joined.group.committed().await
    }

    /// The records of `group` if it is still the open one, closing it; nothing if it was
    /// taken already.
    fn take(&self, group: &Arc<AuditGroup>) -> Vec<AuditEntry> {
        let mut open = self.open.lock();
        if !Arc::ptr_eq(&open.group, group) {
            return Vec::new();
        }
        let taken = std::mem::take(&mut *open);
        taken.entries
    }
}

/// The way to a submitted group's records, for the writer's transaction.
pub struct GroupRecords {
    groups: Arc<AuditGroups>,
    group: Arc<AuditGroup>,
}

impl GroupRecords {
    /// Closes the group and hands over its records, oldest first (empty if they were
    /// taken already).
    pub fn take(self) -> Vec<AuditEntry> {
        self.groups.take(&self.group)
    }

    /// How many records the group holds while it is open (0 once taken).
    pub fn len(&self) -> usize {
        let open = self.groups.open.lock();
        match Arc::ptr_eq(&open.group, &self.group) {
            true => open.entries.len(),
            false => 0,
        }
    }

    /// Whether the group holds no record (it was taken).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Submitted {
    /// The group's records, to be taken when the transaction starts.
    pub fn records(&self) -> GroupRecords {
        GroupRecords {
            groups: Arc::clone(&self.groups),
            group: Arc::clone(&self.group),
        }
    }

    /// Answers every caller of the group with `outcome`.
    pub fn finish(self, outcome: StoreResult<()>) {
        self.end(outcome);
    }

    fn end(&self, outcome: StoreResult<()>) {
        // Records never taken (the transaction did not get to them) are not written:
        // their callers are told so rather than answered with the transaction's outcome.
        let left = self.groups.take(&self.group);
        let outcome = match outcome {
            Ok(()) if !left.is_empty() => Err(StoreError::Unavailable(
                "the database writer did not get to these audit records".into(),
            )),
            outcome => outcome,
        };
        if self.group.outcome.set(outcome).is_ok() {
            self.group.done.notify_waiters();
        }
    }
}

impl Drop for Submitted {
    fn drop(&mut self) {
        // A finished group keeps its outcome; only an abandoned one gets this.
        self.end(Err(StoreError::Unavailable(
            "the database writer stopped before committing these audit records".into(),
        )));
    }
}

impl AuditGroup {
    /// Waits until the group's transaction has committed (or failed).
    pub async fn committed(&self) -> StoreResult<()> {
        let notified = self.done.notified();
        tokio::pin!(notified);
        // Registered before the outcome is checked, so a finish in between still wakes it.
        notified.as_mut().enable();
        if let Some(outcome) = self.outcome.get() {
            return outcome.clone();
        }
        notified.await;
        self.outcome.get().cloned().unwrap_or_else(|| {
            Err(StoreError::Unavailable(
                "the audit records' group was woken without an outcome".into(),
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use connector_model::audit::{target, Actor};

    fn entry(tool: &str) -> AuditEntry {
        AuditEntry::now(Actor::agent("ada"), "tool.call", target::tool(tool))
    }

    fn tools(entries: &[AuditEntry]) -> Vec<&str> {
        entries.iter().map(|e| e.target.as_str()).collect()
    }

    #[tokio::test]
    async fn records_join_the_open_group_until_the_writer_takes_it() {
        let groups = Arc::new(AuditGroups::default());
        let first = groups.push(entry("a.one"));
        let second = groups.push(entry("a.two"));
        assert!(Arc::ptr_eq(&first.group, &second.group));
        assert!(second.submit.is_none(), "a group is submitted once");
        let submitted = first.submit.expect("the first record submits its group");
        let records = submitted.records();
        assert_eq!(tools(&records.take()), ["tool:a.one", "tool:a.two"]);

        // Taken: the next record opens (and submits) the next group.
        let third = groups.push(entry("a.three"));
        assert!(!Arc::ptr_eq(&first.group, &third.group));
        let next = third.submit.expect("a new group");
        assert!(
            submitted.records().take().is_empty(),
            "a taken group hands nothing over twice"
        );

        submitted.finish(Ok(()));
        assert!(first.group.committed().await.is_ok());
        assert!(second.group.committed().await.is_ok());
        // The next group is still open: its caller waits.
        let waiting = tokio::spawn(async move { third.group.committed().await });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        assert_eq!(tools(&next.records().take()), ["tool:a.three"]);
        next.finish(Err(StoreError::Unavailable("disk full".into())));
        let outcome = waiting.await.expect("the waiting task");
        assert!(outcome.is_err_and(|e| e.to_string().contains("disk full")));
    }

    #[tokio::test]
    async fn a_group_its_writer_dropped_fails_its_callers_and_is_closed() {
        let groups = Arc::new(AuditGroups::default());
        let joined = groups.push(entry("a.one"));
        let waiting = {
            let group = Arc::clone(&joined.group);
            tokio::spawn(async move { group.committed().await })
        };
        drop(joined.submit);
        let outcome = waiting.await.expect("the waiting task");
        assert!(
            outcome.is_err_and(|e| e.to_string().contains("stopped")),
            "an abandoned group fails"
        );
        // Its record is not kept for a group that will never be written.
        let next = groups.push(entry("a.two"));
        let submitted = next.submit.expect("a new group");
        assert_eq!(tools(&submitted.records().take()), ["tool:a.two"]);
    }

    #[tokio::test]
    async fn records_the_writer_never_took_are_not_reported_committed() {
        let groups = Arc::new(AuditGroups::default());
        let joined = groups.push(entry("a.one"));
        let submitted = joined.submit.expect("submitted");
        // A transaction that "committed" without taking the records did not write them.
        submitted.finish(Ok(()));
        assert!(joined.group.committed().await.is_err());
    }
}
