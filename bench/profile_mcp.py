#!/usr/bin/env python3
"""Where a stateless MCP `tools/call` spends this host's CPU, against `GET /healthz` (the HTTP
floor of the same server), measured from outside with wrk and perf.

    python3 bench/profile_mcp.py [--seconds 8] [--freq 499] [--out target/profile-mcp]
                                 [--targets healthz,mcp,http]

Needs the release binary (`cargo build --release -p connector-host`), wrk and perf (Debian
`wrk`, `linux-perf`; bench/peers/setup.sh installs them). For each target it runs the server
under `wrk -t2 -c32` twice:

  1. without perf: the server's CPU time (utime + stime from /proc) over wrk's requests:
     the server CPU µs one request costs;
  2. with `perf record -e cpu-clock -F FREQ --call-graph dwarf` on the server process: where
     that time goes, by symbol (self time), grouped into buckets (kernel, HTTP server,
     MCP/JSON, auth, dispatch and grants, schema checks, sandbox, allocator, tokio, ...).

It prints, per bucket, the share of samples and the µs per request that share is (share x
CPU per request), for each target side by side, then the difference MCP - healthz. Inclusive
figures of a few anchor frames (the sandbox's instantiate and call, the schema check, the
MCP handler) come from `perf report --children`. The perf data stays under --out for
`perf report -i FILE` by hand. The buckets are a regular expression per symbol below: a
symbol matching none is `other`.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import secrets

import peers_table as pt

BUCKETS = [  # (bucket, regular expression on the symbol), first match wins
    ("kernel", r"^\[k\]"),
    ("sandbox: wasmtime and the guest", r"wasmtime|cranelift|wasm\[|wasm-function|"
     r"connector_runtime|wit_bindgen|<wasm|component::func|fiber|mprotect|madvise|"
     r"memory_image|InstancePre|instantiate"),
    ("schema checks (jsonschema)", r"jsonschema|referencing|fancy_regex|regex"),
    ("JSON (serde_json)", r"serde_json|serde::|ryu|itoa"),
    ("MCP handler", r"connector_host::mcp"),
    ("auth (agent token)", r"connector_host::auth|hmac|sha2|subtle|jsonwebtoken|base64"),
    ("dispatch, grants, state", r"connector_host::(dispatch|grants|state|directory|catalog|"
     r"host|capabilities)|connector_model"),
    ("HTTP server (hyper, axum, our edge)", r"hyper|axum|tower|http::|httparse|"
     r"connector_host::(server|http|api)|h1::"),
    ("allocator", r"mi_|mimalloc|_mi_|malloc|free|realloc|memcpy|memmove|memset"),
    ("tokio", r"tokio|parking_lot|futures|std::sync|std::thread"),
]

ANCHORS = [  # (label, substring of a frame, inclusive)
    ("the MCP stateless handler", "connector_host::mcp::stateless::serve"),
    ("the tool call (dispatch and sandbox)", "connector_host::dispatch"),
    ("sandbox instantiate", "instantiate"),
    ("schema checks", "jsonschema"),
]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(data, children):
    cmd = ["perf", "report", "-i", data, "--stdio", "--sort", "sym", "-g", "none",
           "--percent-limit", "0", "--children" if children else "--no-children"]
    out = subprocess.run(cmd, capture_output=True, text=True, errors="replace").stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"^\s+([\d.]+)%\s+(?:([\d.]+)%\s+)?\[(.)\]\s+(.*)$", line)
        if m:
            rows.append((float(m.group(1)), f"[{m.group(3)}] {m.group(4).strip()}"))
    return rows


def bucket_of(symbol):
    if symbol.startswith("[k]"):
        return "kernel"
    name = symbol[4:]
    for bucket, pattern in BUCKETS[1:]:
        if re.search(pattern, name):
            return bucket
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--freq", type=int, default=499)
    ap.add_argument("--out", default=os.path.join(pt.ROOT, "target", "profile-mcp"))
    ap.add_argument("--targets", default="healthz,mcp")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    exe = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(pt.ROOT, "target")),
                       "release", "connector-host")
    data = tempfile.mkdtemp(prefix="bench-profile-")
    token = secrets.token_hex(16)
    host = pt.start_host(exe, data, token, secrets.token_hex(16))
    try:
        agent = pt.host_setup(host.base, token)
        bearer = {"Authorization": f"Bearer {agent}"}
        requests = {
            "healthz": pt.Request("GET", "/healthz", {}, expect='"ok"'),
            "mcp": pt.stateless_call("/mcp/agents/a1", "acme.echo", bearer),
            "http": pt.Request("POST", "/api/v1/agents/a1/tool-calls",
                               dict({"Content-Type": "application/json"}, **bearer),
                               '{"tool":"acme.echo","arguments":{"message":"hi"}}',
                               expect='{"result":{"message":"hi"}}'),
        }
        results = {}
        for name in a.targets.split(","):
            t = pt.Target(name, name, host.base, requests[name], "")
            t.request.send_once(host.base)
            pt.wrk(t, 2, 32, 2, f"warm-{name}")
            before = cpu_seconds(host.proc.pid)
            r = pt.wrk(t, 2, 32, a.seconds, f"cpu-{name}")
            cpu = cpu_seconds(host.proc.pid) - before
            per_request = cpu / max(r["requests"], 1) * 1e6
            log(f"[profile] {name}: {r['rate']:,.0f}/s, p50 {r['p50_us'] / 1000:.2f} ms, "
                f"server CPU {per_request:.1f} µs per request ({cpu:.2f} s over "
                f"{r['requests']:.0f} requests); failed answers {r['errors'] + r['unexpected']:.0f}")
            perf_data = os.path.join(a.out, f"perf-{name}.data")
            wrk = subprocess.Popen(["wrk", "-t2", "-c32", f"-d{a.seconds + 3}s", "-s", pt.LUA,
                                    host.base],
                                   env=dict(os.environ, WRK_REQUEST=write_request(t.request),
                                            WRK_RUN=f"perf-{name}"),
                                   stdout=subprocess.DEVNULL)
            time.sleep(1.5)
            subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(a.freq),
                            "--call-graph", "dwarf,16384", "-p", str(host.proc.pid), "-o",
                            perf_data, "--", "sleep", str(a.seconds)], check=True,
                           stdout=subprocess.DEVNULL)
            wrk.wait()
            results[name] = (per_request, r, report(perf_data, False),
                             report(perf_data, True))
    finally:
        host.stop()

    names = list(results)
    print(f"\n# bench/profile_mcp.py: server CPU per request, by bucket (self time), "
          f"wrk -t2 -c32 -d{a.seconds}s; perf cpu-clock {a.freq} Hz, dwarf call graphs")
    header = "| bucket | " + " | ".join(f"{n} % | {n} µs" for n in names)
    if len(names) == 2:
        header += f" | {names[1]} - {names[0]} µs"
    print(header + " |")
    print("|---" * (1 + 2 * len(names) + (1 if len(names) == 2 else 0)) + "|")
    per_bucket = {}
    for n in names:
        per_request, _, flat, _ = results[n]
        total = sum(p for p, _ in flat) or 1
        sums = {}
        for p, sym in flat:
            sums[bucket_of(sym)] = sums.get(bucket_of(sym), 0) + p
        per_bucket[n] = {b: (s / total * 100, s / total * per_request) for b, s in sums.items()}
    order = [b for b, _ in BUCKETS] + ["other"]
    for b in order:
        cells = []
        for n in names:
            pct, us = per_bucket[n].get(b, (0, 0))
            cells += [f"{pct:.1f}", f"{us:.1f}"]
        if len(names) == 2:
            cells.append(f"{per_bucket[names[1]].get(b, (0, 0))[1] - per_bucket[names[0]].get(b, (0, 0))[1]:+.1f}")
        print(f"| {b} | " + " | ".join(cells) + " |")
    cells = []
    for n in names:
        cells += ["100", f"{results[n][0]:.1f}"]
    if len(names) == 2:
        cells.append(f"{results[names[1]][0] - results[names[0]][0]:+.1f}")
    print("| total | " + " | ".join(cells) + " |")

    for n in names:
        per_request, r, flat, children = results[n]
        total = sum(p for p, _ in flat) or 1
        print(f"\n## {n}: {r['rate']:,.0f}/s, server CPU {per_request:.1f} µs per request; "
              f"top symbols (self)")
        for p, sym in sorted(flat, reverse=True)[:25]:
            print(f"  {p / total * 100:5.1f}%  {p / total * per_request:5.2f} µs  "
                  f"{bucket_of(sym):<36} {sym[:110]}")
        print(f"  inclusive (perf report --children):")
        for label, needle in ANCHORS:
            best = max((p for p, sym in children if needle in sym), default=0.0)
            print(f"  {best:5.1f}%  {best / 100 * per_request:5.2f} µs  {label} ({needle})")


def write_request(request):
    f = tempfile.NamedTemporaryFile("w", prefix="bench-profile-", suffix=".txt", delete=False)
    f.write(request.file_text())
    f.close()
    return f.name


if __name__ == "__main__":
    main()
