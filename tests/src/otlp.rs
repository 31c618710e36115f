//! An OTLP/HTTP trace receiver on 127.0.0.1 for tests: it decodes what it is sent with
//! the official protobuf definitions (`opentelemetry-proto`) and keeps every span.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;

/// One span as the receiver decoded it.
#[derive(Debug, Clone)]
pub struct Span {
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub name: String,
    pub attributes: HashMap<String, String>,
    /// The `service.name` of its resource.
    pub service: String,
    /// Whether its parent is in another process (the span's OTLP `flags`), when it says.
    pub parent_is_remote: Option<bool>,
}

/// What a span's OTLP `flags` say of its parent: bit 8 says whether bit 9 (the parent is
/// remote) is known.
fn parent_is_remote(flags: u32) -> Option<bool> {
    const HAS_IS_REMOTE: u32 = 1 << 8;
    const IS_REMOTE: u32 = 1 << 9;
    (flags & HAS_IS_REMOTE != 0).then_some(flags & IS_REMOTE != 0)
}

/// An OTLP/HTTP trace receiver: `POST /v1/traces` with `application/x-protobuf`.
pub struct Receiver {
    /// `http://127.0.0.1:<port>`: the value of `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub url: String,
    spans: Arc<Mutex<Vec<Span>>>,
    _task: tokio::task::JoinHandle<()>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

impl Receiver {
    /// A receiver on a free port of 127.0.0.1.
    pub async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::start_on(listener)
    }

    /// A receiver answering on `listener`.
    pub fn start_on(listener: tokio::net::TcpListener) -> Receiver {
        let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
        let kept = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let kept = kept.clone();
                async move {
                    let protobuf = headers.get("content-type").and_then(|v| v.to_str().ok())
                        == Some("application/x-protobuf");
                    if !protobuf {
                        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, Vec::new()).into_response();
                    }
                    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                        return (StatusCode::BAD_REQUEST, Vec::new()).into_response();
                    };
                    let mut kept = kept.lock().unwrap();
                    for resource_spans in request.resource_spans {
                        let service = resource_spans
                            .resource
                            .iter()
                            .flat_map(|r| r.attributes.iter())
                            .find(|a| a.key == "service.name")
                            .map(|a| text(a.value.as_ref()))
                            .unwrap_or_default();
                        for scope in resource_spans.scope_spans {
                            for span in scope.spans {
                                kept.push(Span {
                                    trace_id: hex(&span.trace_id),
                                    span_id: hex(&span.span_id),
                                    parent_span_id: hex(&span.parent_span_id),
                                    name: span.name.clone(),
                                    attributes: span
                                        .attributes
                                        .iter()
                                        .map(|a| (a.key.clone(), text(a.value.as_ref())))
                                        .collect(),
                                    service: service.clone(),
                                    parent_is_remote: parent_is_remote(span.flags),
                                });
                            }
                        }
                    }
                    (
                        StatusCode::OK,
                        [("content-type", "application/x-protobuf")],
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    )
                        .into_response()
                }
            }),
        );
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            url,
            spans,
            _task: task,
        }
    }

    /// The spans of `trace` received once every span named in `names` is among them
    /// (spans arrive in the order they end, a batch at a time: waiting for one is not
    /// waiting for the ones that end after it).
    pub async fn trace(&self, trace: &str, names: &[&str]) -> Vec<Span> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let spans: Vec<Span> = self
                .spans
                .lock()
                .unwrap()
                .iter()
                .filter(|s| s.trace_id == trace)
                .cloned()
                .collect();
            if names.iter().all(|n| spans.iter().any(|s| s.name == *n)) {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "not every span of {names:?} in trace {trace} after 20 s; its spans: {spans:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }
}
