//! Trace context for the host's spans (CONTRACT §11).
//!
//! The host's crates describe their work (an HTTP request, an MCP message, a tool call, a
//! guest's instantiation, call and outbound requests, a webhook's receipt, routing and
//! inbox append) as `tracing` spans whose target is [`TARGET`]. Whether those spans go
//! anywhere is decided once, by whoever sets up the `tracing` subscriber: the
//! `connector-host` binary adds the OTLP/HTTP layer of [`export`] only when the standard
//! `OTEL_EXPORTER_OTLP_*ENDPOINT` variable is set. Without it no layer wants the spans,
//! so each one costs a disabled-callsite check and nothing else, and the functions here
//! answer "no trace".
//!
//! This crate is the one place that knows how a span becomes part of a trace. The others
//! ask it to take a W3C `traceparent` (an HTTP header, an MCP request's `_meta`) as a
//! span's parent ([`adopt_parent`]), for the headers that make a request's receiver a
//! child of a span ([`headers_of`], for guest outbound requests), and for the current
//! trace id ([`current_trace_id`], for audit records). It answers through the
//! [`Propagation`] registered for the process ([`set_propagation`]; [`export`] registers
//! the OpenTelemetry one when it starts exporting); with none, every answer is "no
//! trace". So a crate that makes spans compiles no OpenTelemetry, and an embedder that
//! exports by other means can register its own.

#![deny(missing_docs)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use tracing::Span;

#[cfg(feature = "export")]
pub mod export;

/// The `tracing` target of every span meant for export. Log lines never use it, and the
/// log output leaves these spans out, so turning export on changes no log line.
pub const TARGET: &str = "connector_trace";

/// The W3C Trace Context header (and `_meta` key) naming the parent span.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C Trace Context header (and `_meta` key) carrying vendor state.
pub const TRACESTATE: &str = "tracestate";

/// How spans join traces: what the tracing system in use (OpenTelemetry, with
/// [`export`]) answers for the functions of this crate.
pub trait Propagation: Send + Sync + 'static {
    /// Makes `span` (not yet entered) the child of the remote span `traceparent` names;
    /// ignores a malformed value.
    fn adopt_parent(&self, span: &Span, traceparent: &str, tracestate: Option<&str>);
    /// The `traceparent` (and non-empty `tracestate`) naming `span` as a parent.
    fn headers_of(&self, span: &Span) -> Vec<(&'static str, String)>;
    /// The id (32 lowercase hex digits) of the trace `span` belongs to.
    fn trace_id_of(&self, span: &Span) -> Option<String>;
}

static PROPAGATION: OnceLock<Box<dyn Propagation>> = OnceLock::new();

/// Registers how spans join traces, once per process; `false` if one was registered
/// before (it stays).
pub fn set_propagation(propagation: impl Propagation) -> bool {
    PROPAGATION.set(Box::new(propagation)).is_ok()
}

/// Whether spans join traces in this process (a [`Propagation`] is registered): without
/// one, nothing that only serves tracing needs to run.
pub fn is_tracing() -> bool {
    PROPAGATION.get().is_some()
}

/// Makes `span` the child of the remote span that `traceparent` (W3C Trace Context
/// format) names, with `tracestate` kept. A missing or malformed value is ignored: the
/// span then starts a trace of its own. Call it right after creating `span`, before it
/// is entered or has children (its parent is fixed when it starts).
pub fn adopt_parent(span: &Span, traceparent: Option<&str>, tracestate: Option<&str>) {
    if let (Some(traceparent), Some(propagation)) = (traceparent, PROPAGATION.get()) {
        if !span.is_disabled() {
            propagation.adopt_parent(span, traceparent, tracestate);
        }
    }
}

/// The headers (`traceparent`, and `tracestate` when there is one) that make the
/// receiver of a request a child of `span`; empty when `span` is not traced.
pub fn headers_of(span: &Span) -> Vec<(&'static str, String)> {
    match PROPAGATION.get() {
        Some(propagation) if !span.is_disabled() => propagation.headers_of(span),
        _ => Vec::new(),
    }
}

/// The id (32 hex digits) of the trace the current span belongs to, if it is traced.
pub fn current_trace_id() -> Option<String> {
    let propagation = PROPAGATION.get()?;
    let span = Span::current();
    if span.is_disabled() {
        return None;
    }
    propagation.trace_id_of(&span)
}

static SPANS_DROPPED: AtomicU64 = AtomicU64::new(0);
static SPANS_NOT_DELIVERED: AtomicU64 = AtomicU64::new(0);

/// Spans dropped because the export queue was full (a collector down or slower than the
/// host): a span is dropped rather than delay the work it describes.
pub fn spans_dropped() -> u64 {
    SPANS_DROPPED.load(Ordering::Relaxed)
}

/// Spans sent to the collector that it did not take (refused, unreachable, too slow).
pub fn spans_not_delivered() -> u64 {
    SPANS_NOT_DELIVERED.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_traced_without_a_layer_that_exports() {
        let span = tracing::info_span!(target: TARGET, "work");
        adopt_parent(
            &span,
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            None,
        );
        assert!(headers_of(&span).is_empty());
        let _entered = span.enter();
        assert_eq!(current_trace_id(), None);
    }
}
