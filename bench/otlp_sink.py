#!/usr/bin/env python3
"""A minimal OTLP/HTTP trace receiver for measuring what trace export costs the host.

    python3 bench/otlp_sink.py 4318 &
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 HTTP_LOAD_TABLE=1 \
        cargo bench -p connector-host --bench http_load

It takes every `POST /v1/traces` (protobuf), answers 200 with an empty
ExportTraceServiceResponse (zero bytes), and on exit (SIGINT/SIGTERM) prints how many
exports and bytes it took. It does not decode the spans: the integration test
`tests/all/traces.rs` does that with the official definitions.
"""

import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

taken = {"exports": 0, "bytes": 0}


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        taken["exports"] += 1
        taken["bytes"] += len(body)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 4318
    server = ThreadingHTTPServer(("127.0.0.1", port), Sink)

    def stop(*_):
        print(f"otlp_sink: {taken['exports']} exports, {taken['bytes']} bytes", flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()


if __name__ == "__main__":
    main()
