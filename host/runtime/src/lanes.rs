//! Where the blocking part of a component load runs.
//!
//! A load someone waits for (an install, a call into a connector not loaded yet) runs at
//! once on tokio's blocking threads. A load ahead of first use (a start putting hundreds of
//! stored connectors in place from their descriptions, a replica catching up) runs on one
//! thread of its own at a lower scheduling priority, one load at a time: hundreds of them
//! at once took every core from the threads serving requests for a second or more after a
//! start (a bind on a directory of 100k units took up to 0.6 s instead of under 1 ms).

use std::sync::mpsc;

use crate::LoadError;

/// Where a load's blocking work (reading the compiled-component cache, linking,
/// compiling) runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadLane {
    /// On tokio's blocking threads, at once: something is waiting for it.
    Waited,
    /// On the runtime's one thread for loads ahead of first use, after the loads queued
    /// before it, at a lower priority than the threads serving requests.
    Ahead,
}

/// How much lower than the process's the ahead thread's priority is (a nice increment:
/// at +10 a busy thread gets about a tenth of a core another thread wants).
const AHEAD_NICE_INCREMENT: i32 = 10;

type Job = Box<dyn FnOnce() + Send>;

/// Runs the blocking work of loads on their lane. The ahead thread ends when the runtime
/// is dropped (after the loads already queued).
pub(crate) struct LoadThreads {
    ahead: mpsc::Sender<Job>,
}

impl LoadThreads {
    pub(crate) fn start() -> std::io::Result<Self> {
        let (jobs, queued) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("component-load-ahead".into())
            .spawn(move || {
                lower_this_threads_priority();
                while let Ok(job) = queued.recv() {
                    // A load that panics fails alone (its caller hears so); the next runs.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            })?;
        Ok(Self { ahead: jobs })
    }

    /// Runs `work` on `lane` and waits for its result.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        lane: LoadLane,
        work: impl FnOnce() -> Result<T, LoadError> + Send + 'static,
    ) -> Result<T, LoadError> {
        let stopped = |why: &dyn std::fmt::Display| {
            LoadError::NotAComponent(format!(
                "loading the component stopped unexpectedly ({why}); try installing it again"
            ))
        };
        match lane {
            LoadLane::Waited => tokio::task::spawn_blocking(work)
                .await
                .unwrap_or_else(|e| Err(stopped(&e))),
            LoadLane::Ahead => {
                let (done, result) = tokio::sync::oneshot::channel();
                let job: Job = Box::new(move || {
                    let _ = done.send(work());
                });
                if let Err(mpsc::SendError(job)) = self.ahead.send(job) {
                    // The thread is gone (it never is while the runtime lives): load now.
                    tokio::task::spawn_blocking(job);
                }
                result
                    .await
                    .unwrap_or_else(|_| Err(stopped(&"the load panicked")))
            }
        }
    }
}

/// Lowers the calling thread's scheduling priority by [`AHEAD_NICE_INCREMENT`] (on Linux
/// the nice value is per thread). Where it cannot, the thread runs at the process's.
fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{getpriority_process, setpriority_process};
        let me = Some(rustix::thread::gettid());
        let lowered = getpriority_process(me)
            .and_then(|now| setpriority_process(me, (now + AHEAD_NICE_INCREMENT).min(19)));
        if let Err(e) = lowered {
            tracing::debug!(error = %e, "could not lower the priority of the load-ahead thread");
        }
    }
}
