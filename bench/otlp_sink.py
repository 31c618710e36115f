#!/usr/bin/env python3
"""An OTLP/HTTP trace receiver for measuring what trace export costs the host.

    python3 bench/otlp_sink.py [--decode] [PORT] &
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 HTTP_LOAD_TABLE=1 \
        cargo bench -p connector-host --bench http_load

It takes every `POST /v1/traces` (protobuf), answers 200 with an empty
ExportTraceServiceResponse (zero bytes), and on exit (SIGINT/SIGTERM) prints how many
exports and bytes it took and the CPU time it spent.

By default it does not decode the spans: the receiver shares the benchmark's cores, and
what it spends is taken from the host being measured, so the throughput figure is the
host's own cost only with a receiver that does as little as possible. Checking what is
sent is the integration test's work (`tests/all/traces.rs`, with the official
definitions).

`--decode` decodes every export with the official Python definitions (`opentelemetry-proto`,
upb), as a real collector would, and prints per span name how many came, their encoded
bytes and their attributes: to see what a span costs on the wire, and what export costs
with a receiver that does a collector's work on the same cores. It needs the package:

    python3 -m venv target/otlp-venv && target/otlp-venv/bin/pip install opentelemetry-proto
    target/otlp-venv/bin/python bench/otlp_sink.py --decode 4318 &
"""

import argparse
import os
import signal
import sys
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

taken = {"exports": 0, "bytes": 0, "spans": 0}
# span name -> [count, encoded bytes, attribute keys of the first one]
by_name = defaultdict(lambda: [0, 0, None])


def decoder():
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    def decode(body):
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    if len(span.trace_id) != 16 or len(span.span_id) != 8:
                        raise ValueError(f"span {span.name!r} has malformed ids")
                    seen = by_name[span.name]
                    seen[0] += 1
                    seen[1] += span.ByteSize()
                    if seen[2] is None:
                        seen[2] = [
                            (a.key, a.value.WhichOneof("value")) for a in span.attributes
                        ]
                    taken["spans"] += 1

    return decode


def handler(decode):
    class Sink(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            status = 200
            if decode is not None:
                try:
                    decode(body)
                except Exception:  # a malformed export: the host's bug, said by the status
                    status = 400
            taken["exports"] += 1
            taken["bytes"] += len(body)
            self.send_response(status)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    return Sink


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", nargs="?", type=int, default=4318)
    parser.add_argument("--decode", action="store_true",
                        help="decode every export with opentelemetry-proto")
    args = parser.parse_args()
    decode = decoder() if args.decode else None
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(decode))

    def stop(*_):
        cpu = os.times()
        print(f"otlp_sink: {taken['exports']} exports, {taken['bytes']} bytes, "
              f"cpu {cpu.user + cpu.system:.2f} s", flush=True)
        if decode is not None:
            print(f"otlp_sink: {taken['spans']} spans", flush=True)
            for name, (count, size, attributes) in sorted(by_name.items()):
                print(f"  {name!r}: {count} spans, {size / max(count, 1):.0f} bytes each, "
                      f"attributes {attributes}", flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()


if __name__ == "__main__":
    main()
