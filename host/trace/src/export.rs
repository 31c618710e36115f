//! Exporting the host's spans over OTLP/HTTP (protobuf), configured only by the standard
//! OpenTelemetry variables.
//!
//! [`Exporting::from_env`] answers `None` unless `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and `OTEL_SDK_DISABLED` is not `true`, nor
//! `OTEL_TRACES_EXPORTER` `none`). The exporter, its batch processor and the sampler read
//! the rest themselves: `OTEL_EXPORTER_OTLP_*HEADERS`, `*TIMEOUT`, `OTEL_BSP_*`,
//! `OTEL_TRACES_SAMPLER[_ARG]`, `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`.
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
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::Context;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, Span, SpanData, SpanExporter,
    SpanProcessor,
};
use opentelemetry_sdk::Resource;
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::{Filtered, Targets};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::{Propagation, SPANS_DROPPED, SPANS_NOT_DELIVERED, TARGET, TRACEPARENT, TRACESTATE};

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

/// The `tracing` layer that turns the host's spans (target [`TARGET`]) into OpenTelemetry
/// spans; everything else (log lines, other crates' spans) passes it by.
pub type ExportLayer<S> = Filtered<
    tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::SdkTracer>,
    Targets,
    S,
>;

impl Exporting {
    /// Export as the standard variables say, or `None` when they name no endpoint.
    pub fn from_env() -> Result<Option<Exporting>, SetupError> {
        Self::from_vars(|name| std::env::var(name).ok())
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
        crate::set_propagation(W3cPropagation);
        Ok(Some(Exporting { provider }))
    }

    /// The layer to add to the subscriber.
    pub fn layer<S>(&self) -> ExportLayer<S>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        export_layer(self.provider.tracer("connector-host"))
    }
}

/// The layer that hands the host's spans to `tracer`, doing no per-span work the export
/// does not use: no code location, thread, level or target attributes, no busy/idle
/// timings, and no OpenTelemetry context made current on each entry of a span. The
/// host's spans find their parents through `tracing`'s current span (the layer looks it
/// up when a span starts) and nothing in the process reads OpenTelemetry's current
/// context, while activating it costs every entry of a span (every poll of a future
/// instrumented with one, several per call and span) a context clone and a thread-local
/// push and pop: a quarter of what the host's spans cost their tool call.
fn export_layer<S>(tracer: opentelemetry_sdk::trace::SdkTracer) -> ExportLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_level(false)
        .with_target(false)
        .with_context_activation(false)
        .with_filter(Targets::new().with_target(TARGET, SPAN_LEVEL))
}

/// The level of the host's spans (all are `info_span!`). The export layer takes its
/// target at this level and not below: a layer that asks for `TRACE` raises the process's
/// level ceiling to `TRACE`, and every `log::trace!` of a dependency (wasmtime logs on its
/// instantiation path) is then handed to the subscriber to be looked at and dropped, on
/// every tool call.
const SPAN_LEVEL: tracing::Level = tracing::Level::INFO;

impl Drop for Exporting {
    fn drop(&mut self) {
        let _ = self.provider.shutdown_with_timeout(SHUTDOWN_WAIT);
    }
}

/// W3C Trace Context through OpenTelemetry: what [`crate::adopt_parent`],
/// [`crate::headers_of`] and [`crate::current_trace_id`] answer while exporting.
struct W3cPropagation;

impl Propagation for W3cPropagation {
    fn adopt_parent(&self, span: &tracing::Span, traceparent: &str, tracestate: Option<&str>) {
        let parent = TraceContextPropagator::new().extract(&Carrier {
            traceparent,
            tracestate,
        });
        if parent.span().span_context().is_remote() {
            // Fails only when the span already started or is not exported.
            let _ = span.set_parent(parent);
        }
    }

    fn headers_of(&self, span: &tracing::Span) -> Vec<(&'static str, String)> {
        let context = span.context();
        if !context.span().span_context().is_valid() {
            return Vec::new();
        }
        let mut headers = Headers::default();
        TraceContextPropagator::new().inject_context(&context, &mut headers);
        headers.0
    }

    fn trace_id_of(&self, span: &tracing::Span) -> Option<String> {
        let context = span.context();
        let span_context = context.span().span_context().clone();
        span_context
            .is_valid()
            .then(|| span_context.trace_id().to_string())
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

    /// The export layer must not raise the process's level ceiling: with it, `log`
    /// records below INFO from dependencies would be looked at on every call.
    #[test]
    fn the_export_layer_asks_for_nothing_below_the_spans_level() {
        let exporting = Exporting::from_vars(vars(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://127.0.0.1:9",
        )]))
        .unwrap()
        .expect("an endpoint is named");
        let layer = exporting.layer::<tracing_subscriber::Registry>();
        assert_eq!(
            Layer::<tracing_subscriber::Registry>::max_level_hint(&layer),
            Some(tracing::level_filters::LevelFilter::INFO)
        );
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

    /// The export layer makes no OpenTelemetry context current when a span is entered:
    /// parents still come from `tracing`'s current span, whether a child starts at the
    /// first poll of its parent's future or after the parent has been left and entered
    /// again, and a caller's `traceparent` still parents the first span.
    #[test]
    fn spans_of_futures_polled_many_times_keep_their_parents() {
        use tracing::Instrument;
        use tracing_subscriber::layer::SubscriberExt;
        let kept = Kept::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(kept.clone())
            .build();
        let subscriber = tracing_subscriber::registry().with(export_layer(provider.tracer("test")));
        crate::set_propagation(W3cPropagation);
        let trace = "5bf92f3577b34da6a3ce929d0e0e4737";
        let mut seen_trace_id = None;
        tracing::subscriber::with_default(subscriber, || {
            let request = tracing::info_span!(target: TARGET, "request");
            crate::adopt_parent(
                &request,
                Some(&format!("00-{trace}-00f067aa0ba902b7-01")),
                None,
            );
            let call = async {
                Pending { turns: 2 }.await;
                async {
                    Pending { turns: 1 }
                        .instrument(tracing::info_span!(target: TARGET, "first"))
                        .await;
                    Pending { turns: 2 }.await;
                    Pending { turns: 1 }
                        .instrument(tracing::info_span!(target: TARGET, "later"))
                        .await;
                    seen_trace_id = crate::current_trace_id();
                }
                .instrument(tracing::info_span!(target: TARGET, "call"))
                .await;
            }
            .instrument(request);
            let mut call = std::pin::pin!(call);
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let mut polls = 0;
            while std::future::Future::poll(call.as_mut(), &mut cx).is_pending() {
                polls += 1;
                // Between polls no span is current, as between a worker's tasks.
                assert!(tracing::Span::current().is_none());
            }
            assert!(polls >= 6, "{polls} polls");
        });
        let spans = kept.0.lock().unwrap().clone();
        let named = |name: &str| {
            spans
                .iter()
                .find(|s| s.name == name)
                .unwrap_or_else(|| panic!("no span `{name}` among {spans:#?}"))
        };
        let (request, call) = (named("request"), named("call"));
        assert_eq!(request.span_context.trace_id().to_string(), trace);
        assert_eq!(request.parent_span_id.to_string(), "00f067aa0ba902b7");
        assert_eq!(call.parent_span_id, request.span_context.span_id());
        for child in ["first", "later"] {
            let child = named(child);
            assert_eq!(child.parent_span_id, call.span_context.span_id());
            assert_eq!(child.span_context.trace_id().to_string(), trace);
        }
        assert_eq!(seen_trace_id.as_deref(), Some(trace));
    }

    #[test]
    fn a_span_adopts_a_callers_traceparent_and_hands_on_its_own() {
        use tracing_subscriber::layer::SubscriberExt;
        let provider = SdkTracerProvider::builder().build();
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("test"))
            .with_filter(Targets::new().with_target(TARGET, tracing::Level::TRACE));
        let subscriber = tracing_subscriber::registry().with(layer);
        crate::set_propagation(W3cPropagation);
        tracing::subscriber::with_default(subscriber, || {
            let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
            let span = tracing::info_span!(target: TARGET, "work");
            crate::adopt_parent(
                &span,
                Some(&format!("00-{trace}-00f067aa0ba902b7-01")),
                Some("tests=1"),
            );
            let headers = crate::headers_of(&span);
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
            }

            // A malformed traceparent is ignored: the span starts a trace of its own.
            let own = tracing::info_span!(target: TARGET, "own");
            crate::adopt_parent(&own, Some("00-not-a-trace-01"), None);
            let _entered = own.enter();
            let id = crate::current_trace_id().expect("a trace of its own");
            assert_eq!(id.len(), 32);
            assert_ne!(id, trace);
        });
    }
}
