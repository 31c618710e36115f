//! The host's spans (CONTRACT §11): an HTTP request, an MCP message, a tool call, a
//! guest's instantiation, call and outbound requests, a webhook's receipt, routing and
//! inbox append.
//!
//! They are spans of this crate, not `tracing` spans: a `tracing` span handed to
//! OpenTelemetry goes through the subscriber's registry (a slot, a type map of extensions,
//! a per-layer filter check and an OpenTelemetry context on every entry and exit of every
//! poll), which cost a tool call more than the OpenTelemetry span itself. Here a span is
//! started directly by the [`Tracer`] registered for the process ([`set_tracer`];
//! [`export`] registers the OpenTelemetry one when the standard
//! `OTEL_EXPORTER_OTLP_*ENDPOINT` variable is set), and the current span is one
//! thread-local slot that an instrumented future fills while it is polled ([`InSpan`]).
//! With no tracer, [`span`] answers a span that records nothing, and each costs one check.
//! `tracing` stays the host's log API; log lines never carry these spans.
//!
//! This crate is the one place that knows how a span becomes part of a trace. The others
//! describe spans ([`span`]), take a W3C `traceparent` (an HTTP header, an MCP request's
//! `_meta`) as a span's parent ([`SpanBuilder::remote_parent`]), ask for the headers that
//! make a request's receiver a child of a span ([`Span::headers`], for guest outbound
//! requests), and for the current trace id ([`current_trace_id`], for audit records). A
//! crate that makes spans compiles no OpenTelemetry, and an embedder that exports by other
//! means can register its own [`Tracer`].

#![deny(missing_docs)]

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};

#[cfg(feature = "export")]
pub mod export;

/// The W3C Trace Context header (and `_meta` key) naming the parent span.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C Trace Context header (and `_meta` key) carrying vendor state.
pub const TRACESTATE: &str = "tracestate";

/// What a span does (OpenTelemetry's span kinds the host uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kind {
    /// Work inside the host.
    #[default]
    Internal,
    /// Serving a request a caller sent.
    Server,
    /// A request sent to another service.
    Client,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A text known at compile time (no copy).
    Static(&'static str),
    /// A text.
    Text(String),
    /// A whole number.
    Int(i64),
}

/// What can be an attribute's value; converted only when the span is recorded.
pub trait IntoValue {
    /// The value.
    fn into_value(self) -> Value;
}

impl IntoValue for &str {
    fn into_value(self) -> Value {
        Value::Text(self.to_owned())
    }
}

impl IntoValue for String {
    fn into_value(self) -> Value {
        Value::Text(self)
    }
}

impl IntoValue for Value {
    fn into_value(self) -> Value {
        self
    }
}

macro_rules! int_values {
    ($($t:ty),*) => {$(
        impl IntoValue for $t {
            fn into_value(self) -> Value {
                Value::Int(i64::try_from(self).unwrap_or(i64::MAX))
            }
        }
    )*};
}
int_values!(i64, u16, u32, u64, usize);

/// A span about to start, as a [`Tracer`] is handed it.
#[derive(Debug, Default)]
pub struct NewSpan {
    /// The span's name: a fixed one (`tool call`), or one made for it (`MCP tools/call`).
    pub name: std::borrow::Cow<'static, str>,
    /// Its kind.
    pub kind: Kind,
    /// Its attributes.
    pub attributes: Vec<(&'static str, Value)>,
    /// A caller's W3C `traceparent` (and `tracestate`) to take as the parent, in place of
    /// the current span.
    pub remote_parent: Option<(String, Option<String>)>,
}

/// A span being recorded, as a [`Tracer`] started it; it ends when dropped.
pub trait Recording: Send + 'static {
    /// Sets an attribute after the start (replacing one of the same key set so).
    fn set(&mut self, key: &'static str, value: Value);
    /// The `traceparent` (and non-empty `tracestate`) naming this span as a parent.
    fn headers(&self) -> Vec<(&'static str, String)>;
    /// The id (32 lowercase hex digits) of the trace this span belongs to.
    fn trace_id(&self) -> Option<String>;
    /// This recording, to be recognised as a parent by the tracer that started it.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// Starts spans: what the tracing system in use (OpenTelemetry, with [`export`]) does
/// with the host's spans.
pub trait Tracer: Send + Sync + 'static {
    /// Starts `span` as a child of `parent` (the current span, when there is one and the
    /// span names no remote parent, or a malformed one).
    fn start(&self, span: NewSpan, parent: Option<&dyn Recording>) -> Box<dyn Recording>;
}

static TRACER: OnceLock<Box<dyn Tracer>> = OnceLock::new();

/// Registers the tracer, once per process; `false` if one was registered before (it
/// stays).
pub fn set_tracer(tracer: impl Tracer) -> bool {
    TRACER.set(Box::new(tracer)).is_ok()
}

/// Whether spans are recorded in this process (a [`Tracer`] is registered): without one,
/// nothing that only serves tracing needs to run.
pub fn is_tracing() -> bool {
    TRACER.get().is_some()
}

/// Describes a span named `name`; [`SpanBuilder::start`] starts it. Without a tracer every
/// step does nothing.
pub fn span(name: &'static str) -> SpanBuilder {
    SpanBuilder {
        span: TRACER.get().map(|tracer| {
            (
                tracer.as_ref(),
                NewSpan {
                    name: name.into(),
                    ..NewSpan::default()
                },
            )
        }),
    }
}

/// A span being described (see [`span`]).
#[must_use = "a span is recorded only once started"]
pub struct SpanBuilder {
    span: Option<(&'static dyn Tracer, NewSpan)>,
}

impl SpanBuilder {
    /// Names the span by `name()` in place of its fixed name (called only when traced).
    pub fn named(mut self, name: impl FnOnce() -> String) -> Self {
        if let Some((_, span)) = &mut self.span {
            span.name = name().into();
        }
        self
    }

    /// Sets its kind.
    pub fn kind(mut self, kind: Kind) -> Self {
        if let Some((_, span)) = &mut self.span {
            span.kind = kind;
        }
        self
    }

    /// Adds an attribute.
    pub fn attr(mut self, key: &'static str, value: impl IntoValue) -> Self {
        if let Some((_, span)) = &mut self.span {
            span.attributes.push((key, value.into_value()));
        }
        self
    }

    /// Adds an attribute whose value is made only when the span is traced.
    pub fn attr_with<V: IntoValue>(mut self, key: &'static str, value: impl FnOnce() -> V) -> Self {
        if let Some((_, span)) = &mut self.span {
            span.attributes.push((key, value().into_value()));
        }
        self
    }

    /// Makes the span the child of the remote span that `traceparent` (W3C Trace Context
    /// format) names, with `tracestate` kept. A missing value leaves the current span as
    /// the parent; a malformed one is ignored as if missing.
    pub fn remote_parent(mut self, traceparent: Option<&str>, tracestate: Option<&str>) -> Self {
        if let (Some((_, span)), Some(traceparent)) = (&mut self.span, traceparent) {
            span.remote_parent = Some((traceparent.to_owned(), tracestate.map(str::to_owned)));
        }
        self
    }

    /// Starts the span, the child of the current one unless a remote parent was named.
    pub fn start(self) -> Span {
        let Some((tracer, span)) = self.span else {
            return Span(None);
        };
        let recording = with_current(|current| match current {
            Some(parent) => tracer.start(span, Some(&**parent.lock())),
            None => tracer.start(span, None),
        });
        Span(Some(Arc::new(Shared(Mutex::new(recording)))))
    }
}

/// A started span (or none, when nothing is traced). Clones are the same span; it ends
/// when the last clone is dropped.
#[derive(Clone, Default)]
pub struct Span(Option<Arc<Shared>>);

/// A recording, shared by a span's clones.
struct Shared(Mutex<Box<dyn Recording>>);

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Box<dyn Recording>> {
        // A panic while an attribute was set leaves a usable recording.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl std::fmt::Debug for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Some(_) => "Span(recording)",
            None => "Span(none)",
        })
    }
}

thread_local! {
    /// The span of the future (or block) running on this thread, if any.
    static CURRENT: Cell<Option<Arc<Shared>>> = const { Cell::new(None) };
}

/// Calls `f` with the current span, taken out of the slot for the call (no reference
/// count changes) and put back after it, also when `f` panics.
fn with_current<T>(f: impl FnOnce(Option<&Arc<Shared>>) -> T) -> T {
    struct PutBack(Option<Arc<Shared>>);
    impl Drop for PutBack {
        fn drop(&mut self) {
            let current = self.0.take();
            CURRENT.with(|slot| slot.set(current));
        }
    }
    let current = PutBack(CURRENT.with(Cell::take));
    f(current.0.as_ref())
}

impl Span {
    /// The span of the future (or block) running now; none outside any.
    pub fn current() -> Span {
        with_current(|current| Span(current.cloned()))
    }

    /// Whether the span records nothing (no tracer).
    pub fn is_none(&self) -> bool {
        self.0.is_none()
    }

    /// Sets an attribute (a value known after the span started: a status, an outcome).
    pub fn record(&self, key: &'static str, value: impl IntoValue) {
        if let Some(shared) = &self.0 {
            shared.lock().set(key, value.into_value());
        }
    }

    /// The headers (`traceparent`, and `tracestate` when there is one) that make the
    /// receiver of a request a child of this span; empty when it is not traced.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        match &self.0 {
            Some(shared) => shared.lock().headers(),
            None => Vec::new(),
        }
    }

    /// Makes this span current until the guard is dropped (for synchronous work; a
    /// future uses [`InSpan::in_span`]).
    pub fn enter(&self) -> Entered {
        Entered {
            previous: self
                .0
                .as_ref()
                .map(|shared| CURRENT.with(|slot| slot.replace(Some(shared.clone())))),
        }
    }
}

/// The current span set by [`Span::enter`]; dropping it restores the one before.
#[must_use = "the span is current only while the guard lives"]
pub struct Entered {
    previous: Option<Option<Arc<Shared>>>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        if let Some(previous) = self.previous.take() {
            CURRENT.with(|slot| slot.set(previous));
        }
    }
}

/// The id (32 hex digits) of the trace the current span belongs to, if it is traced.
pub fn current_trace_id() -> Option<String> {
    with_current(|current| current.and_then(|shared| shared.lock().trace_id()))
}

/// Runs a future inside a span: the span is current while the future is polled.
pub trait InSpan: Future + Sized {
    /// This future, with `span` current while it is polled.
    fn in_span(self, span: Span) -> Spanned<Self> {
        Spanned {
            span: span.0,
            future: self,
        }
    }
}

impl<F: Future> InSpan for F {}

pin_project_lite::pin_project! {
    /// A future with its span (see [`InSpan::in_span`]).
    pub struct Spanned<F> {
        span: Option<Arc<Shared>>,
        #[pin]
        future: F,
    }
}

impl<F: Future> Future for Spanned<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        if this.span.is_none() {
            return this.future.poll(cx);
        }
        // The span moves into the thread's slot for the poll and back after it (also when
        // the poll panics): no reference count changes, one swap each way.
        let previous = CURRENT.with(|slot| slot.replace(this.span.take()));
        let restore = Restore {
            span: this.span,
            previous,
        };
        let answer = this.future.poll(cx);
        drop(restore);
        answer
    }
}

/// Puts a polled future's span back and the slot's previous span in the slot.
struct Restore<'a> {
    span: &'a mut Option<Arc<Shared>>,
    previous: Option<Arc<Shared>>,
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        *self.span = CURRENT.with(|slot| slot.replace(self.previous.take()));
    }
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

    /// What [`span`] answers without a tracer (with the `export` feature, this test binary
    /// may have one registered by another test).
    #[test]
    fn nothing_is_traced_without_a_tracer() {
        let span = SpanBuilder { span: None }
            .attr("key", "value")
            .remote_parent(
                Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
                None,
            )
            .start();
        assert!(span.is_none());
        assert!(span.headers().is_empty());
        let _entered = span.enter();
        assert_eq!(current_trace_id(), None);
        assert!(Span::current().is_none());
        span.record("key", 1u16);
        let inside = std::pin::pin!(async { Span::current().is_none() }.in_span(span.clone()));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert_eq!(inside.poll(&mut cx), Poll::Ready(true));
    }
}
