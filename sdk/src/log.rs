//! Logging through the host.
//!
//! A guest has no log files and its stderr is not a structured channel; these functions
//! hand one line to the host's log, which tags it with the connector and the current call.
//! Outside a component (native unit tests) the line goes to stderr instead.

/// Severity of a log line, most verbose first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that the connector handled.
    Warn,
    /// Something failed.
    Error,
}

/// Writes `message` to the host's log at `level`.
pub fn log(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    {
        use crate::bindings::spring::connector::host::{self, LogLevel};
        let level = match level {
            Level::Trace => LogLevel::Trace,
            Level::Debug => LogLevel::Debug,
            Level::Info => LogLevel::Info,
            Level::Warn => LogLevel::Warn,
            Level::Error => LogLevel::Error,
        };
        host::log(level, message);
    }
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[{level:?}] {message}");
}

/// Logs at [`Level::Trace`].
pub fn trace(message: impl AsRef<str>) {
    log(Level::Trace, message.as_ref());
}

/// Logs at [`Level::Debug`].
pub fn debug(message: impl AsRef<str>) {
    log(Level::Debug, message.as_ref());
}

/// Logs at [`Level::Info`].
pub fn info(message: impl AsRef<str>) {
    log(Level::Info, message.as_ref());
}

/// Logs at [`Level::Warn`].
pub fn warn(message: impl AsRef<str>) {
    log(Level::Warn, message.as_ref());
}

/// Logs at [`Level::Error`].
pub fn error(message: impl AsRef<str>) {
    log(Level::Error, message.as_ref());
}
