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
}

impl Default for GuestLimits {
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_millis(10_000),
            memory_bytes: 64 * 1024 * 1024,
            max_output_bytes: 4 * 1024 * 1024,
            max_concurrent_instances: 256,
        }
    }
}
