//! The SQLite store's checkpointer: copies the write-ahead log back into the database
//! file on a thread and connection of its own, so that commits do not wait for it.
//!
//! Why: by default SQLite checkpoints inside every commit that finds the log at 1,000
//! pages or more — copying it into the database file and syncing both, while every write
//! queued behind that commit (and every acknowledgement of its group) waits. With durable
//! webhooks at full load that was a third of the writer's time, and it capped deliveries
//! near 7,000/s with a p99 of 13 ms.
//!
//! What happens instead:
//! - The writer's connection has no automatic checkpoint. After each commit the writer
//!   learns how many frames the log holds (SQLite's WAL hook) and, from
//!   [`PASSIVE_FRAMES`] on, wakes this thread.
//! - This thread runs `PASSIVE` checkpoints only: they copy what they can without waiting
//!   for or blocking anyone (neither our writer nor any reader, in any process), while
//!   the writer keeps appending.
//! - SQLite rewinds the log when a write starts, finds all of it copied and no other
//!   connection reading through it. Under sustained writes that moment may never come,
//!   so at [`DRAIN_FRAMES`] the writer, before its next group, waits until the
//!   checkpointer has copied the rest (the checkpoint under way, if any, then one more):
//!   with nothing appended meanwhile it copies everything a reader does not pin, and the
//!   next write rewinds. The log thus holds about `DRAIN_FRAMES` pages plus one group. A
//!   reader that keeps an old snapshot open (a backup, a shell) pins the log and it grows
//!   until the reader lets go (as it would with SQLite's own checkpoints); the writer
//!   then waits only once more per further `DRAIN_FRAMES`, and says so once. (Another
//!   handle on the same file checkpoints too; whichever holds the checkpoint lock
//!   copies, the other skips that round.)
//!
//! Durability does not change: a commit is in the log (and survives the process) before
//! it is acknowledged, exactly as before; checkpoints only move committed pages. A
//! checkpoint that cannot finish is reported once (and its recovery once), not per
//! attempt; if this thread is gone the writer's connection gets SQLite's automatic
//! checkpoint back. The thread ends when the last handle of the store is dropped.

use std::cell::Cell;
use std::os::raw::c_int;
use std::path::Path;
use std::sync::mpsc;

use rusqlite::Connection;

use crate::{StoreError, StoreResult};

/// Log frames (pages) from which a commit wakes the checkpointer: SQLite's own
/// automatic checkpoint threshold.
pub(super) const PASSIVE_FRAMES: c_int = 1000;
/// Log frames at which the writer waits for the log to be copied (about 32 MiB of log
/// with 4 KiB pages).
pub(super) const DRAIN_FRAMES: c_int = 8192;
/// The log file is cut back to this size when it is rewound after growing past it.
const LOG_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

thread_local! {
    /// Frames in the log after the last commit made on this thread (set by
    /// [`record_frames`], which SQLite calls inside the commit). Every commit of the
    /// writer's connection is made on the writer thread, which reads it.
    static LOG_FRAMES: Cell<c_int> = const { Cell::new(0) };
}

/// SQLite's WAL hook for the writer's connection: notes the log's length. Installing it
/// also turns the connection's automatic checkpoint off (SQLite implements that with
/// the same hook).
fn record_frames(_: &rusqlite::hooks::Wal, frames: c_int) -> rusqlite::Result<()> {
    LOG_FRAMES.with(|f| f.set(frames));
    Ok(())
}

/// What the writer asks of the checkpointer.
enum Request {
    /// Copy what there is.
    Copy,
    /// Copy what there is and answer: the writer waits meanwhile.
    Drain(mpsc::SyncSender<()>),
}

/// The writer's side of the checkpointer.
pub(super) struct Checkpoints {
    requests: mpsc::SyncSender<Request>,
    /// The log length at which the writer next waits for a drain.
    drain_at: c_int,
    /// A drain did not let the log rewind (a reader pins it); said once.
    pinned: bool,
    /// The checkpointer is gone and SQLite checkpoints by itself again.
    gone: bool,
}

impl Checkpoints {
    /// Starts the checkpointer of the database file at `path` and hands the automatic
    /// checkpoints of `writer` (the connection all writes commit on) over to it.
    pub(super) fn start(path: &Path, writer: &Connection) -> StoreResult<Checkpoints> {
        let conn = Connection::open(path).map_err(|e| {
            StoreError::Unavailable(format!(
                "cannot open the database {} for checkpoints: {e}",
                path.display()
            ))
        })?;
        // Never wait for a lock: a checkpoint that cannot run now runs after the next
        // commit, and the writer may be waiting for this one.
        conn.busy_timeout(std::time::Duration::ZERO).map_err(|e| {
            StoreError::Unavailable(format!("configuring the checkpoint connection: {e}"))
        })?;
        // One pending request is enough: the thread copies everything there is.
        let (requests, received) = mpsc::sync_channel::<Request>(1);
        std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || {
                let mut failing = false;
                while let Ok(request) = received.recv() {
                    checkpoint(&conn, &mut failing);
                    if let Request::Drain(done) = request {
                        let _ = done.send(());
                    }
                }
            })
            .map_err(|e| {
                StoreError::Unavailable(format!("cannot start the database checkpointer: {e}"))
            })?;
        writer
            .pragma_update(None, "journal_size_limit", LOG_SIZE_LIMIT)
            .map_err(|e| {
                StoreError::Unavailable(format!("configuring the write-ahead log: {e}"))
            })?;
        writer.wal_hook(Some(record_frames));
        Ok(Checkpoints {
            requests,
            drain_at: DRAIN_FRAMES,
            pinned: false,
            gone: false,
        })
    }

    /// Called by the writer thread after each group, holding neither the connection nor
    /// a transaction: from [`PASSIVE_FRAMES`] in the log wakes the checkpointer, at
    /// `drain_at` waits for it. `writer` is the writer's connection, locked only if the
    /// checkpointer is gone.
    pub(super) fn after_commit(&mut self, writer: &parking_lot::Mutex<Connection>) {
        let frames = LOG_FRAMES.with(|f| f.replace(0));
        if frames == 0 || self.gone {
            return; // nothing committed (or SQLite checkpoints by itself again)
        }
        if frames < DRAIN_FRAMES {
            // The log was rewound.
            if self.pinned {
                tracing::info!("the database's write-ahead log is rewound again");
                self.pinned = false;
            }
            self.drain_at = DRAIN_FRAMES;
        }
        let sent = if frames >= self.drain_at {
            if frames >= DRAIN_FRAMES.saturating_mul(2) && !self.pinned {
                tracing::warn!(
                    log_frames = frames,
                    "the database's write-ahead log was not rewound after it was copied: likely a reader keeps an old snapshot open (a backup or a shell?); it grows until that reader lets go"
                );
                self.pinned = true;
            }
            self.drain_at = frames.saturating_add(DRAIN_FRAMES);
            let (done, drained) = mpsc::sync_channel(1);
            self.requests
                .send(Request::Drain(done))
                .map(|()| {
                    let _ = drained.recv();
                })
                .is_ok()
        } else if frames >= PASSIVE_FRAMES {
            // Full: a request is pending already, and it covers this commit too.
            !matches!(
                self.requests.try_send(Request::Copy),
                Err(mpsc::TrySendError::Disconnected(_))
            )
        } else {
            true
        };
        if !sent {
            self.gone = true;
            let restored = writer
                .lock()
                .pragma_update(None, "wal_autocheckpoint", PASSIVE_FRAMES);
            tracing::error!(
                restored = restored.is_ok(),
                "the database checkpointer stopped; SQLite checkpoints inside commits again"
            );
        }
    }
}

/// One passive checkpoint; `failing` remembers whether the last one failed, so that
/// is said once (and its recovery once).
fn checkpoint(conn: &Connection, failing: &mut bool) {
    let outcome = conn
        .prepare_cached("PRAGMA wal_checkpoint(PASSIVE)")
        .and_then(|mut stmt| stmt.query_row([], |row| row.get::<_, i64>(0)));
    match outcome {
        Ok(0) if *failing => {
            tracing::info!("the database's write-ahead log is copied again");
            *failing = false;
        }
        Ok(0) => {}
        // Another connection holds the checkpoint lock (it copies meanwhile), or the
        // log's index was being written: this round is skipped, the next one runs.
        Ok(_) => tracing::debug!(
            "a database checkpoint was skipped: another connection is checkpointing"
        ),
        Err(e) if !*failing => {
            tracing::warn!(error = %e, "could not copy the database's write-ahead log; trying again after the next commit");
            *failing = true;
        }
        Err(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::SqliteStore;
    use crate::DeliveryQueue;
    use connector_store_testing::fixtures::{claim, delivery};

    /// Bytes of one log frame: a page and its 24-byte header.
    const FRAME_BYTES: u64 = 4096 + 24;
    const BODY_BYTES: usize = 64 * 1024;
    const WRITERS: usize = 8;

    /// Writes deliveries `from..to` of `BODY_BYTES` each from `WRITERS` tasks at once, so
    /// the writer commits groups back to back; every write must succeed. Returns the
    /// longest a single write took.
    async fn write(store: &SqliteStore, from: usize, to: usize) -> std::time::Duration {
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| {
                let store = store.clone();
                tokio::spawn(async move {
                    let c = claim("me", i64::MAX / 2);
                    let mut longest = std::time::Duration::ZERO;
                    for i in (from + w..to).step_by(WRITERS) {
                        let mut d = delivery(&format!("d{i}"), 100);
                        d.body = vec![b'x'; BODY_BYTES];
                        let started = std::time::Instant::now();
                        let inserted = store.insert_delivery(&d, 60, &c, None).await;
                        longest = longest.max(started.elapsed());
                        assert_eq!(inserted.ok(), Some(true), "delivery d{i}");
                    }
                    longest
                })
            })
            .collect();
        let mut longest = std::time::Duration::ZERO;
        for t in tasks {
            longest = longest.max(t.await.expect("a writer task"));
        }
        longest
    }

    /// Deliveries that fill `frames` log frames.
    fn deliveries(frames: c_int) -> usize {
        frames as usize * 4096 / BODY_BYTES
    }

    /// (frames in the log, frames copied) as a connection of the test sees them, asked
    /// again while the checkpointer holds the checkpoint lock (the answer is then -1).
    async fn log_of(conn: &Connection) -> (i64, i64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let (busy, log, copied): (i64, i64, i64) = conn
                .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .expect("a checkpoint");
            if busy == 0 {
                return (log, copied);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the checkpoint lock stays taken"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Sustained writes, groups back to back, three times the drain bound: commits leave
    /// checkpoints to the checkpointer (the writer's connection has no automatic one),
    /// the log is copied into the database file on the side and stays bounded, and every
    /// write is there. (Without any checkpoint the log would hold all of it: ~100 MiB.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_log_stays_bounded_under_sustained_writes() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("host.db");
        let store = SqliteStore::open(&path).expect("a file store");
        let automatic: i64 = store
            .inner
            .conn
            .lock()
            .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
            .expect("the automatic checkpoint setting");
        assert_eq!(automatic, 0, "commits must not checkpoint by themselves");

        let total = deliveries(3 * DRAIN_FRAMES);
        write(&store, 0, total).await;
        let log = std::fs::metadata(dir.path().join("host.db-wal"))
            .expect("the write-ahead log")
            .len();
        let written = (total * BODY_BYTES) as u64;
        // One group of the writers' deliveries may pass the bound before the writer
        // waits.
        let group = (WRITERS * BODY_BYTES) as u64 / 4096 + 64;
        assert!(
            log <= (DRAIN_FRAMES as u64 + group) * FRAME_BYTES,
            "the log grew to {log} bytes for {written} bytes written"
        );
        let database = std::fs::metadata(&path).expect("the database").len();
        assert!(
            database >= written / 2,
            "only {database} of {written} bytes reached the database file"
        );
        for i in [0, total / 2, total - 1] {
            let d = store
                .delivery("acme", &format!("d{i}"))
                .await
                .expect("read")
                .unwrap_or_else(|| panic!("delivery d{i} is stored"));
            assert_eq!(d.body.len(), BODY_BYTES);
        }
    }

    /// A reader that keeps an old snapshot open (a backup, a shell in another process)
    /// never makes a write fail or wait on it; once it lets go the log is rewound again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reader_pinning_the_log_never_blocks_writes() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("host.db");
        let store = SqliteStore::open(&path).expect("a file store");
        write(&store, 0, 16).await;
        let reader = Connection::open(&path).expect("a reader");
        let probe = Connection::open(&path).expect("a connection to look at the log");
        reader
            .execute_batch("BEGIN; SELECT count(*) FROM deliveries;")
            .expect("an open read transaction");

        let pinned = deliveries(2 * DRAIN_FRAMES);
        let longest = write(&store, 16, 16 + pinned).await;
        let (log, _) = log_of(&probe).await;
        assert!(
            log >= i64::from(2 * DRAIN_FRAMES) - 64,
            "the reader pins the log: {log} frames"
        );
        // No write waited on the reader (one that did would wait for SQLite's 5 s busy
        // timeout, and then fail).
        assert!(
            longest < std::time::Duration::from_millis(2500),
            "a write took {longest:?}"
        );

        reader.execute_batch("COMMIT").expect("the reader lets go");
        let more = deliveries(2 * DRAIN_FRAMES);
        write(&store, 16 + pinned, 16 + pinned + more).await;
        let (log, _) = log_of(&probe).await;
        let group = (WRITERS * BODY_BYTES / 4096 + 64) as i64;
        assert!(
            log <= i64::from(DRAIN_FRAMES) + group,
            "the log was not rewound after the reader let go: {log} frames"
        );
    }
}
