//! What the spans of one HTTP tool call cost on their own, away from the server's other
//! work: the same four spans (`HTTP request` > `tool call` > `guest instantiate`,
//! `guest call`), their attributes and the audit record's trace id, in a loop on one
//! thread.
//!
//! ```text
//! cargo run --release -p connector-trace --features export --example span_cost
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_TRACES_SAMPLER=always_off \
//!     cargo run --release -p connector-trace --features export --example span_cost
//! python3 bench/otlp_sink.py 4318 &
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_BSP_MAX_QUEUE_SIZE=1000000 \
//!     cargo run --release -p connector-trace --features export --example span_cost
//! ```
//!
//! The three lines measure no tracer, spans that are started but not sampled, and spans
//! recorded and exported (the queue large enough that none is dropped). Compare with
//! `http_load`'s server CPU per call under the same variables: the difference between
//! the two is what the spans cost in the server beyond their own instructions.

use std::time::Instant;

use connector_trace::{span, InSpan, Span, Value};

const CALLS: u32 = 200_000;

fn main() {
    let _exporting = match connector_trace::export::Exporting::from_env() {
        Ok(exporting) => exporting,
        Err(e) => {
            eprintln!("span_cost: {e}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("span_cost: cannot start a runtime: {e}");
            std::process::exit(2);
        }
    };
    runtime.block_on(async {
        for round in 1..=3 {
            let started = Instant::now();
            for _ in 0..CALLS {
                one_call().await;
            }
            let per_call = started.elapsed().as_nanos() as f64 / f64::from(CALLS);
            println!("round {round}: {per_call:.0} ns per call (4 spans)");
        }
    });
}

/// The spans of one `POST /api/v1/agents/{id}/tool-calls`, as the host makes them.
async fn one_call() {
    let request = span("HTTP request")
        .named(|| "POST".to_string())
        .attr("http.request.method", "POST")
        .attr("url.path", "/api/v1/agents/a1/tool-calls")
        .start();
    async {
        Span::current().record("http.route", "/api/v1/agents/{agentId}/tool-calls");
        let call = span("tool call")
            .attr_with("agent", || "a1".to_string())
            .attr_with("tool", || "acme.echo".to_string())
            .start();
        async {
            async {}.in_span(span("guest instantiate").start()).await;
            async {}
                .in_span(
                    span("guest call")
                        .attr("export", Value::Static("call-tool"))
                        .start(),
                )
                .await;
            std::hint::black_box(connector_trace::current_trace_id());
        }
        .in_span(call)
        .await;
    }
    .in_span(request.clone())
    .await;
    request.record("http.response.status_code", 200u16);
}
