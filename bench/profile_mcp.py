#!/usr/bin/env python3
"""Where a stateless MCP `tools/call` (or a durable signed webhook delivery) spends this host's
CPU, against `GET /healthz` (the HTTP floor of the same server), measured from outside with
wrk and perf.

    python3 bench/profile_mcp.py [--seconds 8] [--freq 499] [--out target/profile-mcp]
                                 [--targets healthz,mcp,http,webhooks]

`webhooks` is bench/table.py's GitHub delivery (`issues`, signed, a new delivery id each
request, one binding): docs/profile-webhooks.md.

Needs the release binary (`cargo build --release -p connector-host`), wrk and perf (Debian
`wrk`, `linux-perf`; bench/peers/setup.sh installs them). For each target it runs the server
under `wrk -t2 -c32` twice:

  1. without perf: the server's CPU time (utime + stime from /proc) over wrk's requests:
     the server CPU µs one request costs;
  2. with `perf record -e cpu-clock -F FREQ --call-graph dwarf` on the server process: where
     that time goes. The release build has no debug info, but its symbols and unwind tables
     (.eh_frame) are enough for perf to walk the stacks.

Each sample is given to a component by walking its stack from the innermost frame outwards:
the first frame that belongs to a component (COMPONENTS below, a regular expression per
component over the symbol) decides. So a `memcpy` or an allocation made by serde_json counts
as JSON, one made by the MCP layer counts as MCP, and generic std/core frames go to whoever
called them. A sample inside the kernel counts as the sandbox's when the sandbox is on its
user stack (its memory reset: madvise, page faults), as the store's when SQLite is (its log,
checkpoint and sync writes), else as network and scheduling; one whose innermost frame has
no symbol is JIT-compiled guest code.

It prints, per component, the share of samples and the µs per request that share is (share x
CPU per request) for each target side by side, then the difference MCP - healthz; then each
target's top symbols by self time, and the allocator's self time (malloc, free, memcpy,
memset: spread over every component above) and each thread's part (tokio's workers,
SQLite's writer and checkpointer). The perf data stays under --out for
`perf report -i FILE` by hand.
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

COMPONENTS = [  # (component, regular expression on a frame's symbol), first match wins
    ("sandbox: wasmtime and the guest", r"wasmtime|cranelift|wasm\[|wasm-function|"
     r"connector_runtime|wit_bindgen|wasi|fiber"),
    ("schema checks (jsonschema)", r"jsonschema|referencing"),
    ("JSON (serde_json)", r"serde_json|serde::|serde_core"),
    ("auth and signatures (agent token, webhook HMAC)",
     r"connector_(core|http)::auth|connector_core::webhooks::verify|jsonwebtoken|hmac|sha2|"
     r"subtle"),
    ("MCP layer (connector_http::mcp, connector_mcp_protocol)",
     r"connector_http::mcp|connector_mcp_protocol"),
    ("audit log and store (SQLite)", r"connector_core::audit|connector_store|rusqlite|sqlite3"),
    ("spans (tracing, connector_trace)", r"tracing|connector_trace"),
    ("webhook path (receive, route, reading budget)", r"connector_core::webhooks"),
    ("tool call path (dispatch, grants, registry, outputs)",
     r"connector_core::(dispatch|grants|state|directory|catalog|registry|host|capabilities|"
     r"replicas|listing)|connector_model"),
    ("HTTP server (hyper, axum, tower, our edge)", r"hyper|axum|tower|httparse|h1::|"
     r"connector_http::|connector_core::config|^http::"),
    ("tokio runtime and I/O (tokio, mio)", r"tokio|mio::"),
]
KERNEL_SANDBOX = "sandbox, in the kernel (memory reset: madvise, page faults)"
KERNEL_STORE = "store, in the kernel (log and checkpoint writes, syncs)"
STORE = r"connector_store|rusqlite|sqlite3"
KERNEL = "kernel: network and scheduling"
JIT = "sandbox: JIT-compiled guest code and trampolines (no symbols)"
UNATTRIBUTED = "unattributed (no component on the stack)"
ALLOCATOR = r"^(_?mi_|mi_|malloc|free|realloc|calloc|__mem(cpy|move|set)|__rust_(alloc|dealloc|realloc))"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def top_symbols(data):
    """(self share %, symbol) from `perf report`, highest first."""
    cmd = ["perf", "report", "-i", data, "--stdio", "--sort", "sym", "-g", "none",
           "--percent-limit", "0", "--no-children"]
    out = subprocess.run(cmd, capture_output=True, text=True, errors="replace").stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"^\s+([\d.]+)%\s+\[(.)\]\s+(.*)$", line)
        if m:
            rows.append((float(m.group(1)), f"[{m.group(2)}] {m.group(3).strip()}"))
    return sorted(rows, reverse=True)


def stacks(data):
    """Every sample as (thread name, [(symbol, dso)] innermost frame first)."""
    out = subprocess.run(["perf", "script", "--no-inline", "-i", data, "-F", "comm,ip,sym,dso"],
                         capture_output=True, text=True, errors="replace").stdout
    thread, stack = None, []
    for line in out.splitlines():
        if not line.strip():
            if stack:
                yield thread, stack
            thread, stack = None, []
            continue
        m = re.match(r"^[0-9a-f]+\s+(.*)\s+\(([^()]*)\)$", line.strip())
        if m:
            stack.append((m.group(1), m.group(2)))
        elif thread is None and not line[0].isspace():
            thread = line.strip()
    if stack:
        yield thread, stack


def thread_kind(name):
    """A thread's name without its number (tokio's workers, SQLite's writer...)."""
    return re.sub(r"[-_]?\d+$", "", name or "?")


def component_of(stack):
    if stack and "kernel" in stack[0][1]:
        user = [sym for sym, dso in stack if "kernel" not in dso]
        if any(re.search(COMPONENTS[0][1], s) for s in user):
            return KERNEL_SANDBOX
        if any(re.search(STORE, s) for s in user):
            return KERNEL_STORE
        return KERNEL
    if stack and stack[0][0] == "[unknown]":
        # Code perf has no symbol for: in this process, the guest's machine code (Cranelift
        # writes it to anonymous memory; healthz, which runs no guest, has none of it).
        return JIT
    for sym, _ in stack:
        for component, pattern in COMPONENTS:
            if re.search(pattern, sym):
                return component
    return UNATTRIBUTED


def attribute(data):
    """({component: share %}, allocator self share %, samples, {thread kind: share %})."""
    counts, threads, alloc, total = {}, {}, 0, 0
    for thread, stack in stacks(data):
        total += 1
        c = component_of(stack)
        counts[c] = counts.get(c, 0) + 1
        t = thread_kind(thread)
        threads[t] = threads.get(t, 0) + 1
        if re.search(ALLOCATOR, stack[0][0]):
            alloc += 1
    total = max(total, 1)
    return ({c: n / total * 100 for c, n in counts.items()}, alloc / total * 100, total,
            {t: n / total * 100 for t, n in threads.items()})


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
    token, webhook_secret = secrets.token_hex(16), secrets.token_hex(16)
    host = pt.start_host(exe, data, token, webhook_secret)
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
            "webhooks": pt.github_delivery(webhook_secret),
        }
        results = {}
        for name in a.targets.split(","):
            t = pt.Target(name, name, host.base, requests[name], "")
            t.request.send_once(host.base)
            pt.wrk(t, 2, 32, 2, f"warm-{name}")
            before = pt.cpu_seconds(host.proc.pid)
            r = pt.wrk(t, 2, 32, a.seconds, f"cpu-{name}")
            cpu = pt.cpu_seconds(host.proc.pid) - before
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
            results[name] = (per_request, r, attribute(perf_data), top_symbols(perf_data))
    finally:
        host.stop()

    names = list(results)
    print(f"\n# bench/profile_mcp.py: server CPU per request by component, wrk -t2 -c32 "
          f"-d{a.seconds}s; perf cpu-clock {a.freq} Hz, dwarf call graphs; load average "
          f"{pt.loadavg()}")
    header = "| component | " + " | ".join(f"{n} % | {n} µs" for n in names)
    if len(names) == 2:
        header += f" | {names[1]} - {names[0]} µs"
    print(header + " |")
    print("|---" * (1 + 2 * len(names) + (1 if len(names) == 2 else 0)) + "|")
    order = [c for c, _ in COMPONENTS] + [JIT, KERNEL_SANDBOX, KERNEL_STORE, KERNEL,
                                           UNATTRIBUTED]
    us = {n: {c: results[n][2][0].get(c, 0) / 100 * results[n][0] for c in order}
          for n in names}
    for c in order:
        cells = []
        for n in names:
            cells += [f"{results[n][2][0].get(c, 0):.1f}", f"{us[n][c]:.1f}"]
        if len(names) == 2:
            cells.append(f"{us[names[1]][c] - us[names[0]][c]:+.1f}")
        print(f"| {c} | " + " | ".join(cells) + " |")
    cells = []
    for n in names:
        cells += ["100", f"{results[n][0]:.1f}"]
    if len(names) == 2:
        cells.append(f"{results[names[1]][0] - results[names[0]][0]:+.1f}")
    print("| total | " + " | ".join(cells) + " |")
    for n in names:
        per_request, r, (_, alloc, samples, threads), top = results[n]
        print(f"\n## {n}: {r['rate']:,.0f}/s, p50 {r['p50_us'] / 1000:.2f} ms, server CPU "
              f"{per_request:.1f} µs per request; {samples} samples; allocator and memcpy "
              f"self time {alloc:.1f}% = {alloc / 100 * per_request:.1f} µs (inside the "
              f"components above); by thread: " + ", ".join(
                  f"{t} {p / 100 * per_request:.1f} µs"
                  for t, p in sorted(threads.items(), key=lambda kv: -kv[1]))
              + "; top symbols (self):")
        for p, sym in top[:20]:
            print(f"  {p:5.1f}%  {p / 100 * per_request:5.2f} µs  {sym[:120]}")


def write_request(request):
    f = tempfile.NamedTemporaryFile("w", prefix="bench-profile-", suffix=".txt", delete=False)
    f.write(request.file_text())
    f.close()
    return f.name


if __name__ == "__main__":
    main()
