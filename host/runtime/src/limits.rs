//! Bounds every guest call is held to.
//!
//! Guests are hostile: a connector may loop forever, allocate without end or answer with
//! gigabytes. These limits are enforced by the engine (epoch deadline, linear-memory
//! limiter) and by the host after the call (output size), so a misbehaving guest costs at
//! most one call's budget and never the host.

use std::time::Duration;

/// Per-call resource bounds of a guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestLimits {
    /// Wall-clock bound of one guest call, including outbound HTTP it waits on.
    pub call_timeout: Duration,
    /// Bound of a guest instance's linear memory, in bytes.
    pub memory_bytes: usize,
    /// Largest result (tool output, manifest, webhook messages) accepted from a guest.
    pub max_output_bytes: usize,
    /// How many guest instances may run at once; further calls wait for a slot.
    pub max_concurrent_instances: u32,
    /// How many guest calls one caller (an agent) may run at once; further calls wait,
    /// and the wait counts toward `call_timeout`. `None`: a quarter of
    /// `max_concurrent_instances`.
    pub calls_per_agent: Option<u32>,
    /// Linear memory of all live guest instances together; a guest growing past it waits
    /// for memory to be released until its deadline, then fails `host_busy`.
    pub total_memory_bytes: usize,
    /// The largest linear-memory bound any one connector is given instead of
    /// `memory_bytes` (`Sandbox::memory_bytes`; an interpreter may need more); 0 when
    /// none is. Instance slots are sized for it.
    pub largest_connector_memory_bytes: usize,
}

impl GuestLimits {
    /// The largest linear memory one instance may reach under any connector's bound.
    pub fn instance_memory_bytes(&self) -> usize {
        self.memory_bytes.max(self.largest_connector_memory_bytes)
    }

    /// The per-caller concurrency in force.
    pub fn calls_per_caller(&self) -> u32 {
        let pool = self.max_concurrent_instances.max(1);
        self.calls_per_agent.unwrap_or(pool / 4).clamp(1, pool)
    }
}

impl Default for GuestLimits {
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_millis(10_000),
            memory_bytes: 64 * 1024 * 1024,
            max_output_bytes: 4 * 1024 * 1024,
            max_concurrent_instances: 256,
            calls_per_agent: None,
            total_memory_bytes: 2048 * 1024 * 1024,
            largest_connector_memory_bytes: 0,
        }
    }
}
