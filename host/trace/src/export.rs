//! Exporting the host's spans over OTLP/HTTP (protobuf), configured only by the standard
//! OpenTelemetry variables.
//!
//! [`Exporting::from_env`] answers `None` unless `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and `OTEL_SDK_DISABLED` is not `true`, nor
//! `OTEL_TRACES_EXPORTER` `none`). The exporter, its batch processor and the sampler read
//! the rest themselves: `OTEL_EXPORTER_OTLP_*HEADERS`, `*TIMEOUT`, `OTEL_BSP_*`,
//! `OTEL_TRACES_SAMPLER[_ARG]`, `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`.
//! The host's spans become SDK spans directly ([`crate::Tracer`]), with no `tracing`
//! layer between: the sampler, span limits and processors apply to them as to any.
//!
//! A collector that is down or slow never delays the host's work: spans go to the SDK's
//! batch processor, which exports from its own thread; the queue in front of it is
//! bounded (`OTEL_BSP_MAX_QUEUE_SIZE`, 2,048 by default) and a span that finds it full is
//! dropped and counted ([`crate::spans_dropped`], shown by `/metrics`). The SDK's
//! processor drops too when its queue is full, but keeps the count to itself, so the
//! queue is bounded here, one step before it, by the spans handed over and not yet
//! through an export.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanKind, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider, Span, SpanData,
    SpanExporter, SpanProcessor,
};
use opentelemetry_sdk::Resource;

use crate::{
    Kind, NewSpan, Recording, Value, SPANS_DROPPED, SPANS_NOT_DELIVERED, TRACEPARENT, TRACESTATE,
};

/// The queue's length when `OTEL_BSP_MAX_QUEUE_SIZE` is not set (the SDK's default).
const DEFAULT_QUEUE: usize = 2048;
/// How long shutting down waits for the last spans to be exported.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

/// Why export could not be set up from the variables; the message names the variable.
#[derive(Debug)]
pub struct SetupError(String);

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SetupError {}

/// Spans being exported: holds the tracer provider, whose batch processor runs on its own
/// thread. Dropping it exports what is queued (waiting at most a few seconds).
pub struct Exporting {
    provider: SdkTracerProvider,
}

impl Exporting {
    /// Export as the standard variables say, or `None` when they name no endpoint; when
    /// exporting, the host's spans go to OpenTelemetry from now on
    /// ([`crate::set_tracer`]).
    pub fn from_env() -> Result<Option<Exporting>, SetupError> {
        let exporting = Self::from_vars(|name| std::env::var(name).ok())?;
        if let Some(exporting) = &exporting {
            crate::set_tracer(exporting.tracer());
        }
        Ok(exporting)
    }

    /// The tracer that hands the host's spans to this export.
    fn tracer(&self) -> OtelTracer {
        OtelTracer(self.provider.tracer("connector-host"))
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Exporting>, SetupError> {
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        if set("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
            && set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
        {
            return Ok(None);
        }
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
            || set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none"))
        {
            return Ok(None);
        }
        for name in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(protocol) = set(name) {
                if protocol.trim() != "http/protobuf" {
                    return Err(SetupError(format!(
                        "{name}={protocol} is not supported: connector-host exports traces over \
                         OTLP/HTTP with protobuf; set it to http/protobuf or unset it"
                    )));
                }
                break;
            }
        }
        let queue = match set("OTEL_BSP_MAX_QUEUE_SIZE") {
            None => DEFAULT_QUEUE,
            Some(text) => match text.trim().parse::<usize>() {
                Ok(n) if n > 0 => n,
                _ => {
                    return Err(SetupError(format!(
                        "OTEL_BSP_MAX_QUEUE_SIZE={text} is not a positive whole number of spans"
                    )))
                }
            },
        };
        // The exporter's client (reqwest, built without a TLS provider of its own here)
        // takes the process default; another part of the process may have set it first.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .build()
            .map_err(|e| SetupError(format!("cannot set up the OTLP/HTTP trace exporter: {e}")))?;
        let in_flight = Arc::new(AtomicUsize::new(0));
        let batch = BatchSpanProcessor::builder(Counted {
            inner: exporter,
            in_flight: in_flight.clone(),
        })
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(queue)
                .build(),
        )
        .build();
        let named = set("OTEL_SERVICE_NAME").is_some()
            || set("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| a.contains("service.name="));
        let mut resource = Resource::builder();
        if !named {
            resource = resource.with_service_name("connector-host");
        }
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Bounded {
                inner: batch,
                in_flight,
                limit: queue,
            })
            .with_resource(resource.build())
            .build();
        Ok(Some(Exporting { provider }))
    }
}

impl Drop for Exporting {
    fn drop(&mut self) {
        let _ = self.provider.shutdown_with_timeout(SHUTDOWN_WAIT);
    }
}

/// Starts the host's spans as OpenTelemetry spans, directly through the SDK's tracer
/// (its sampler, id generator, span limits and batch processor, all as the `OTEL_*`
/// variables set them).
struct OtelTracer(SdkTracer);

impl crate::Tracer for OtelTracer {
    fn start(&self, span: NewSpan, parent: Option<&dyn Recording>) -> Box<dyn Recording> {
        let remote = span
            .remote_parent
            .as_ref()
            .and_then(|(traceparent, tracestate)| {
                let context = TraceContextPropagator::new().extract(&Carrier {
                    traceparent,
                    tracestate: tracestate.as_deref(),
                });
                context.span().span_context().is_remote().then_some(context)
            });
        let parent = remote.unwrap_or_else(|| {
            match parent.and_then(|p| p.as_any().downcast_ref::<Recorded>()) {
                // Despite the method's name, the context holds the span context as it
                // is: its own `is_remote` (false for a span of this process) is what the
                // SDK records as the parent's.
                Some(parent) => {
                    Context::new().with_remote_span_context(parent.span.span_context().clone())
                }
                None => Context::new(),
            }
        });
        let builder = SpanBuilder::from_name(span.name)
            .with_kind(match span.kind {
                Kind::Internal => SpanKind::Internal,
                Kind::Server => SpanKind::Server,
                Kind::Client => SpanKind::Client,
            })
            .with_attributes(
                span.attributes
                    .into_iter()
                    .map(|(key, value)| KeyValue::new(key, otel_value(value))),
            );
        Box::new(Recorded {
            span: self.0.build_with_context(builder, &parent),
            later: Vec::new(),
        })
    }
}

fn otel_value(value: Value) -> opentelemetry::Value {
    match value {
        Value::Static(text) => text.into(),
        Value::Text(text) => text.into(),
        Value::Int(n) => n.into(),
    }
}

/// An SDK span, with the attributes set after its start; dropping it ends it (and hands
/// it to the batch processor).
struct Recorded {
    span: Span,
    /// Kept aside until the end, so that setting a key again replaces its value (the SDK
    /// span only appends).
    later: Vec<KeyValue>,
}

impl Drop for Recorded {
    fn drop(&mut self) {
        self.span.set_attributes(std::mem::take(&mut self.later));
    }
}

impl Recording for Recorded {
    fn set(&mut self, key: &'static str, value: Value) {
        let value = otel_value(value);
        match self.later.iter_mut().find(|kv| kv.key.as_str() == key) {
            Some(kept) => kept.value = value,
            None => self.later.push(KeyValue::new(key, value)),
        }
    }

    fn headers(&self) -> Vec<(&'static str, String)> {
        let span_context = self.span.span_context();
        if !span_context.is_valid() {
            return Vec::new();
        }
        let context = Context::new().with_remote_span_context(span_context.clone());
        let mut headers = Headers::default();
        TraceContextPropagator::new().inject_context(&context, &mut headers);
        headers.0
    }

    fn trace_id(&self) -> Option<String> {
        let span_context = self.span.span_context();
        span_context
            .is_valid()
            .then(|| span_context.trace_id().to_string())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A `traceparent`/`tracestate` pair read as a propagation carrier.
struct Carrier<'a> {
    traceparent: &'a str,
    tracestate: Option<&'a str>,
}

impl Extractor for Carrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            TRACEPARENT => Some(self.traceparent),
            TRACESTATE => self.tracestate,
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        let mut keys = vec![TRACEPARENT];
        if self.tracestate.is_some() {
            keys.push(TRACESTATE);
        }
        keys
    }
}

/// The headers a propagator writes.
#[derive(Default)]
struct Headers(Vec<(&'static str, String)>);

impl Injector for Headers {
    fn set(&mut self, key: &str, value: String) {
        let name = match key {
            TRACEPARENT => TRACEPARENT,
            TRACESTATE if !value.is_empty() => TRACESTATE,
            _ => return,
        };
        self.0.push((name, value));
    }
}

/// The batch processor behind a bound: at most `limit` spans handed over and not yet
/// through an export, so its own queue never fills and every drop is counted here.
#[derive(Debug)]
struct Bounded {
    inner: BatchSpanProcessor,
    in_flight: Arc<AtomicUsize>,
    limit: usize,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= self.limit {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            SPANS_DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The exporter, counting the spans of each batch off the bound once the batch's export
/// is over (taken or not).
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    in_flight: Arc<AtomicUsize>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let spans = batch.len();
        let export = self.inner.export(batch);
        let in_flight = self.in_flight.clone();
        async move {
            let result = export.await;
            if result.is_err() {
                SPANS_NOT_DELIVERED.fetch_add(spans as u64, Ordering::Relaxed);
            }
            in_flight.fetch_sub(spans, Ordering::AcqRel);
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn nothing_is_exported_without_an_endpoint_or_when_disabled() {
        assert!(Exporting::from_vars(vars(&[])).unwrap().is_none());
        assert!(Exporting::from_vars(vars(&[("OTEL_SERVICE_NAME", "x")]))
            .unwrap()
            .is_none());
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            let pairs: &'static [(&str, &str)] = match off.0 {
                "OTEL_SDK_DISABLED" => &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"),
                    ("OTEL_SDK_DISABLED", "true"),
                ],
                _ => &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"),
                    ("OTEL_TRACES_EXPORTER", "none"),
                ],
            };
            assert!(
                Exporting::from_vars(vars(pairs)).unwrap().is_none(),
                "{off:?}"
            );
        }
    }

    #[test]
    fn a_protocol_other_than_http_protobuf_or_a_bad_queue_is_refused_by_name() {
        let err = Exporting::from_vars(vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]))
        .err()
        .expect("grpc is refused");
        assert!(
            err.to_string().contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc"),
            "{err}"
        );
        let err = Exporting::from_vars(vars(&[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://127.0.0.1:9/v1/traces",
            ),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "lots"),
        ]))
        .err()
        .expect("a queue size that is not a number is refused");
        assert!(
            err.to_string().contains("OTEL_BSP_MAX_QUEUE_SIZE=lots"),
            "{err}"
        );
    }

    /// An exporter whose exports never end: a collector that accepts the connection and
    /// never answers.
    #[derive(Debug)]
    struct Stuck;

    impl SpanExporter for Stuck {
        fn export(
            &self,
            _batch: Vec<SpanData>,
        ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
            std::future::pending()
        }
    }

    #[test]
    fn spans_past_the_bound_are_dropped_counted_and_never_wait() {
        use opentelemetry::trace::{Span as _, Tracer as _};
        let limit = 4;
        let in_flight = Arc::new(AtomicUsize::new(0));
        let batch = BatchSpanProcessor::builder(Counted {
            inner: Stuck,
            in_flight: in_flight.clone(),
        })
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(limit)
                .with_max_export_batch_size(2)
                .build(),
        )
        .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Bounded {
                inner: batch,
                in_flight: in_flight.clone(),
                limit,
            })
            .build();
        let tracer = provider.tracer("test");
        let before = crate::spans_dropped();
        let started = std::time::Instant::now();
        for _ in 0..100 {
            tracer.start("work").end();
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "ending spans waited for the stuck collector: {:?}",
            started.elapsed()
        );
        assert_eq!(crate::spans_dropped() - before, 100 - limit as u64);
        assert_eq!(in_flight.load(Ordering::Acquire), limit);
        let _ = provider.shutdown_with_timeout(Duration::from_millis(50));
    }

    /// An exporter keeping every span it is handed.
    #[derive(Debug, Clone, Default)]
    struct Kept(Arc<std::sync::Mutex<Vec<SpanData>>>);

    impl SpanExporter for Kept {
        fn export(
            &self,
            batch: Vec<SpanData>,
        ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
            self.0.lock().unwrap().extend(batch);
            std::future::ready(Ok(()))
        }
    }

    /// The spans every test of this module records: the process has one tracer, so each
    /// test finds its own spans by its trace id.
    fn kept() -> &'static Kept {
        static KEPT: std::sync::OnceLock<Kept> = std::sync::OnceLock::new();
        KEPT.get_or_init(|| {
            let kept = Kept::default();
            let provider = SdkTracerProvider::builder()
                .with_simple_exporter(kept.clone())
                .build();
            crate::set_tracer(OtelTracer(provider.tracer("test")));
            kept
        })
    }

    /// The spans of trace `trace` ended so far.
    fn of_trace(trace: &str) -> Vec<SpanData> {
        kept()
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.span_context.trace_id().to_string() == trace)
            .cloned()
            .collect()
    }

    fn named<'s>(spans: &'s [SpanData], name: &str) -> &'s SpanData {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no span `{name}` among {spans:#?}"))
    }

    /// A future that is pending `turns` times before it is ready, as a guest call waiting
    /// for its turn or an HTTP handler waiting for a commit is.
    struct Pending {
        turns: u32,
    }

    impl std::future::Future for Pending {
        type Output = ();
        fn poll(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<()> {
            if self.turns == 0 {
                return std::task::Poll::Ready(());
            }
            self.turns -= 1;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    }

    /// A span's parent is the span current when it starts, whether a child starts at the
    /// first poll of its parent's future or after the parent has been left and entered
    /// again; between polls no span is current; a caller's `traceparent` parents the
    /// first span; attributes set after the start are kept.
    #[test]
    fn spans_of_futures_polled_many_times_keep_their_parents() {
        use crate::InSpan;
        kept();
        let trace = "5bf92f3577b34da6a3ce929d0e0e4737";
        let mut seen_trace_id = None;
        let request = crate::span("request")
            .kind(Kind::Server)
            .attr("url.path", "/x")
            .remote_parent(Some(&format!("00-{trace}-00f067aa0ba902b7-01")), None)
            .start();
        {
            let call = async {
                Pending { turns: 2 }.await;
                async {
                    Pending { turns: 1 }
                        .in_span(crate::span("first").start())
                        .await;
                    Pending { turns: 2 }.await;
                    Pending { turns: 1 }
                        .in_span(crate::span("later").start())
                        .await;
                    seen_trace_id = crate::current_trace_id();
                    crate::Span::current().record("outcome", "failed");
                    crate::Span::current().record("outcome", "ok");
                }
                .in_span(crate::span("call").start())
                .await;
            }
            .in_span(request);
            let mut call = std::pin::pin!(call);
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let mut polls = 0;
            while std::future::Future::poll(call.as_mut(), &mut cx).is_pending() {
                polls += 1;
                // Between polls no span is current, as between a worker's tasks.
                assert!(crate::Span::current().is_none());
            }
            assert!(polls >= 6, "{polls} polls");
        }
        let spans = of_trace(trace);
        assert_eq!(spans.len(), 4, "{spans:#?}");
        let (request, call) = (named(&spans, "request"), named(&spans, "call"));
        assert_eq!(request.parent_span_id.to_string(), "00f067aa0ba902b7");
        assert!(request.parent_span_is_remote);
        assert_eq!(request.span_kind, SpanKind::Server);
        assert_eq!(
            request.attributes,
            [KeyValue::new("url.path", "/x".to_string())]
        );
        assert_eq!(call.parent_span_id, request.span_context.span_id());
        assert_eq!(
            call.attributes,
            [KeyValue::new("outcome", "ok".to_string())]
        );
        for child in ["first", "later"] {
            let child = named(&spans, child);
            assert_eq!(child.parent_span_id, call.span_context.span_id());
        }
        assert_eq!(seen_trace_id.as_deref(), Some(trace));
    }

    #[test]
    fn a_span_adopts_a_callers_traceparent_and_hands_on_its_own() {
        kept();
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
        let span = crate::span("work")
            .remote_parent(
                Some(&format!("00-{trace}-00f067aa0ba902b7-01")),
                Some("tests=1"),
            )
            .start();
        let headers = span.headers();
        assert_eq!(headers.len(), 2, "{headers:?}");
        let (name, traceparent) = &headers[0];
        assert_eq!(*name, TRACEPARENT);
        let parts: Vec<&str> = traceparent.split('-').collect();
        assert_eq!((parts[0], parts[1], parts[3]), ("00", trace, "01"));
        assert_ne!(
            parts[2], "00f067aa0ba902b7",
            "the span's own id is handed on"
        );
        assert_eq!(headers[1], (TRACESTATE, "tests=1".to_string()));
        {
            let _entered = span.enter();
            assert_eq!(crate::current_trace_id().as_deref(), Some(trace));
            // A child of an entered span, sent on: the receiver sees the child.
            let child = crate::span("child").start();
            let sent = child.headers();
            assert_eq!(sent[1], (TRACESTATE, "tests=1".to_string()));
            assert!(sent[0].1.starts_with(&format!("00-{trace}-")), "{sent:?}");
        }
        assert!(crate::Span::current().is_none());

        // A malformed traceparent is ignored: the span starts a trace of its own.
        let own = crate::span("own")
            .remote_parent(Some("00-not-a-trace-01"), None)
            .start();
        let _entered = own.enter();
        let id = crate::current_trace_id().expect("a trace of its own");
        assert_eq!(id.len(), 32);
        assert_ne!(id, trace);
    }

    /// A future that panics while polled leaves no span current behind it.
    #[test]
    fn a_panicking_poll_restores_the_current_span() {
        use crate::InSpan;
        kept();
        let outer = crate::span("outer").start();
        let _entered = outer.enter();
        let outer_trace = crate::current_trace_id();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let failing = std::pin::pin!(async { panic!("deliberate") }.in_span(
                crate::span("failing")
                    .remote_parent(
                        Some("00-6bf92f3577b34da6a3ce929d0e0e4738-00f067aa0ba902b7-01"),
                        None,
                    )
                    .start()
            ));
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let _ = std::future::Future::poll(failing, &mut cx);
        }));
        assert!(panicked.is_err());
        assert_eq!(crate::current_trace_id(), outer_trace);
    }

    /// A span started where none is current is a root even inside a blocking section of
    /// another thread's span: the current span is per thread.
    #[test]
    fn the_current_span_is_the_threads_own() {
        kept();
        let outer = crate::span("outer").start();
        let _entered = outer.enter();
        let outer_trace = crate::current_trace_id().expect("traced");
        let other = std::thread::spawn(|| {
            assert!(crate::Span::current().is_none());
            let root = crate::span("root").start();
            let _entered = root.enter();
            crate::current_trace_id().expect("traced")
        })
        .join()
        .unwrap();
        assert_ne!(other, outer_trace);
    }
}
