#!/usr/bin/env python3
"""Every headline performance figure of the host, with its target and met/missed, in one run.

    python3 bench/table.py [--skip runtime,http,replicas,stdio,declarative,peers,scale]
                           [--rounds N] [--peer-rounds N] [--peer-seconds S] [--conns N] [--wassette PATH]
                           [--skip-peer rmcp,python,typescript,wassette,webhooks]

Runs, from the workspace root, on this machine, one after the other:

  runtime   cargo bench -p connector-host --bench runtime   (criterion medians)
  http      HTTP_LOAD_TABLE=1 cargo bench -p connector-host --bench http_load
  replicas  cargo bench -p integration-tests --bench replicas   (needs PostgreSQL's server
            binaries: initdb/postgres, as `.ci/run` installs them)
  stdio     MCP `tools/call` over stdio with `bench/mcp_stdio_bench.py` (a lean JSON-RPC
            client): `connector-host mcp --local`, the HTTP bridge, the Python floor server
            (`bench/floor_mcp_server.py`) and a do-nothing Rust stdio server (`loadgen`'s
            `stdio-floor`), interleaved, --rounds times (default 3), medians reported.
  declarative  cargo bench -p integration-tests --bench declarative   (a packed
            `stateless_http` call against a hand-written Rust connector doing the same
            request, and the packed component's size)
  peers     this host against the MCP servers a user would pick instead, side by side in
            one run, one outside load generator for all (`wrk -t2 -c32` with
            bench/peers/wrk_request.lua, every answer checked), --peer-rounds alternating
            rounds of --peer-seconds per server (bench/peers_table.py):
              this host's MCP endpoint (`tools/call` of acme.echo at 2026-07-28, stateless,
              agent token, fresh sandbox) against a native echo on the official Rust SDK
              (bench/peers/rmcp-echo, rmcp 3.11, stateless, JSON answers), the official
              Python SDK server (bench/peers/python_echo_server.py: MCPServer,
              stateless_http, json_response), the official TypeScript SDK 1.x server
              (bench/peers/ts_echo_server.mjs: server + transport per request) and wassette
              (over HTTP: Streamable HTTP through wrk where its source has it, else its
              HTTP+SSE transport, which wrk cannot time, through bench/peers/mcp-load, which
              then drives this host's MCP endpoint for that row too; over stdio: p50 against
              `connector-host mcp --local`; with bench/peers/wassette-echo, the echo tool in
              the component shape wassette runs); this host's HTTP tool-call API against
              its own /healthz; durable signed ~8 KiB GitHub deliveries; and, as diagnostic
              rows without a target ("info"), the HTTP API against the native rmcp echo and
              the MCP endpoint against /healthz. Rows: each ratio with both
              servers' calls/s, p50 and server CPU per call (from /proc: it moves far less
              with the machine's load than calls/s), the ratio round by round, the target
              and the verdict; under the table every
              server's own figures (per round, p50, p99, version). wassette is "not run"
              when its binary is absent.
            What it needs beyond the repository (wrk, the Python venv with `mcp`, Node and
            the TypeScript SDK under target/, the rmcp echo binary, mcp-load, the echo
            component, wassette built from source outside the repository) comes from one
            command:
              bench/peers/setup.sh [--wassette-src GIT_DIR] [--wassette-ref REF]
            (see its --help); a missing piece makes its rows "not run", with the command.

  scale     cargo bench -p integration-tests --bench scale   (issue 37's platform size:
            100,000 units 8 deep, 1,000,000 agents, 10,000 bindings, 500 connectors, written
            through the Rust API; SQLite: cold start, memory, the resolver unchanged and
            after a write, a bind on the root, 5,000 MCP subscriptions/listen streams and
            their list_changed fan-out; PostgreSQL, 3 replicas: catch-up after a foreign
            write with read-after-write, directory writes against SQLite's). Long (tens of
            minutes): leave it out with --skip scale; SCALE_* knobs shrink it (see the
            bench's docs).

The benches' own output streams to stderr as they run (they take minutes); the table goes to
stdout at the end. Every figure is this machine's, measured in this run: the machine's load
average is printed with it, since two cores shared with anything else measure that too. A
part that cannot run here is reported as not run, with why; the others still run.
"""

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import peers_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
RESULT = re.compile(r"^@result (\S+) (.*)$")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, env=None, parse=True):
    """Runs cmd from the workspace root, streaming its output to stderr; returns the
    `@result` lines it printed as {key: {field: float}}."""
    log(f"\n$ {' '.join(cmd)}")
    full_env = dict(os.environ, **(env or {}))
    proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace")
    results = {}
    try:
        for line in proc.stdout:
            sys.stderr.write(line)
            m = RESULT.match(line.strip())
            if parse and m:
                results[m.group(1)] = {k: float(v) for k, v in
                                       (kv.split("=", 1) for kv in m.group(2).split())}
    except BaseException:
        # Never leave a bench running beside the next measurement.
        proc.kill()
        proc.wait()
        raise
    if proc.wait() != 0:
        failed = RuntimeError(f"`{' '.join(cmd)}` exited with {proc.returncode}")
        failed.results = results  # what it printed before failing
        raise failed
    return results


class Table:
    def __init__(self):
        self.rows = []
        self.notes = []

    def add(self, figure, measured, target, met, command):
        self.rows.append((figure, measured, target, "met" if met else "MISSED", command))

    def info(self, figure, measured, command):
        """A diagnostic figure with no target of its own."""
        self.rows.append((figure, measured, "-", "info", command))

    def not_run(self, figure, target, why, command):
        self.rows.append((figure, f"not run: {why}", target, "-", command))

    def print(self):
        widths = [max(len(r[i]) for r in self.rows + [self.header()]) for i in range(5)]
        for i, row in enumerate([self.header()] + self.rows):
            print("| " + " | ".join(c.ljust(widths[j]) for j, c in enumerate(row)) + " |")
            if i == 0:
                print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        if self.notes:
            print()
            for note in self.notes:
                print(note)

    @staticmethod
    def header():
        return ("figure", "measured", "target", "verdict", "command")


def criterion_median_ns(group, function, since):
    path = os.path.join(TARGET, "criterion", group, function, "new", "estimates.json")
    if os.path.getmtime(path) < since:
        raise RuntimeError(f"{group}/{function} did not run (its estimates predate this run)")
    with open(path) as f:
        return json.load(f)["median"]["point_estimate"]


def runtime_rows(table):
    cmd = ["cargo", "bench", "-p", "connector-host", "--bench", "runtime", "--",
           "echo/acme_echo_fresh_instance|load/from_disk_cache"]
    since = time.time()
    run(cmd, parse=False)
    fresh = criterion_median_ns("echo", "acme_echo_fresh_instance", since) / 1000
    table.add("fresh-sandbox acme.echo in-process, median", f"{fresh:.2f} µs", "≤ 7 µs",
              fresh <= 7, "--bench runtime echo/acme_echo_fresh_instance")
    load = criterion_median_ns("load", "from_disk_cache", since) / 1e6
    hashing = criterion_median_ns("load", "from_disk_cache_hashing_the_bytes", since) / 1e6
    table.add("component load from the on-disk cache, median",
              f"{load:.3f} ms (hashing the bytes first: {hashing:.3f} ms)", "≤ 1 ms",
              load <= 1, "--bench runtime load/from_disk_cache")


def http_rows(table):
    r = run(["cargo", "bench", "-p", "connector-host", "--bench", "http_load"],
            env={"HTTP_LOAD_TABLE": "1"})
    echo, calls, hooks = r["http.echo"], r["http.tool_calls"], r["webhooks.sqlite"]
    ratio = calls["rate"] / max(echo["rate"], 1e-9)
    table.add("HTTP tool calls vs plain axum echo, 32 conns",
              f"{calls['rate']:,.0f}/s vs {echo['rate']:,.0f}/s = {ratio:.2f}×", "≥ 0.5×",
              ratio >= 0.5 and calls["errors"] == 0, "--bench http_load (2 vs 1)")
    p99 = hooks["p99_us"] / 1000
    table.add("durable signed 8 KiB webhooks, SQLite",
              f"{hooks['rate']:,.0f}/s, p99 {p99:.1f} ms", "≥ 8,000/s, p99 ≤ 20 ms",
              hooks["rate"] >= 8000 and p99 <= 20 and hooks["errors"] == 0,
              "--bench http_load (4)")


def replicas_rows(table):
    cmd = ["cargo", "bench", "-p", "integration-tests", "--bench", "replicas"]
    pg_target, ratio_target = "≥ 3,000/s", "≥ 0.8×"
    try:
        run(["cargo", "build", "--release", "-p", "connector-host"], parse=False)
        r = run(cmd)
    except RuntimeError as e:
        table.not_run("durable webhooks, PostgreSQL, 1 replica", pg_target, str(e), "--bench replicas")
        table.not_run("HTTP tool calls, PostgreSQL vs SQLite", ratio_target, str(e), "--bench replicas")
        return
    pg = r["replicas.postgresql_1_replica.durable_webhooks"]
    sq = r["replicas.sqlite_1_replica.durable_webhooks"]
    table.add("durable webhooks, PostgreSQL, 1 replica",
              f"{pg['rate']:,.0f}/s, p99 {pg['p99_us'] / 1000:.1f} ms "
              f"(SQLite {sq['rate']:,.0f}/s same run)",
              pg_target, pg["rate"] >= 3000 and pg["errors"] == 0, "--bench replicas")
    pgc = r["replicas.postgresql_1_replica.http_tool_calls"]
    sqc = r["replicas.sqlite_1_replica.http_tool_calls"]
    ratio = pgc["rate"] / max(sqc["rate"], 1e-9)
    table.add("HTTP tool calls, PostgreSQL vs SQLite",
              f"{pgc['rate']:,.0f}/s vs {sqc['rate']:,.0f}/s = {ratio:.2f}×", ratio_target,
              ratio >= 0.8, "--bench replicas")


def declarative_rows(table):
    r = run(["cargo", "bench", "-p", "integration-tests", "--bench", "declarative"])
    packed, native = r["declarative_packed"], r["declarative_native"]
    ratio = r["declarative_ratio"]
    table.add("packed stateless_http call vs hand-written Rust, p50",
              f"{packed['p50_us']:.0f} µs vs {native['p50_us']:.0f} µs = "
              f"{ratio['ratio']:.2f}×", "≤ 1.3×", ratio["ratio"] <= 1.3,
              "--bench declarative")
    size = ratio["size_bytes"]
    table.add("packed declarative component", f"{size / 1048576:.2f} MiB", "≤ 2 MiB",
              size <= 2 * 1048576, "--bench declarative")


def scale_rows(table):
    """Issue 37's scale targets on a platform-sized directory (tests/benches/scale.rs)."""
    cmd = ["cargo", "bench", "-p", "integration-tests", "--bench", "scale"]
    where = "--bench scale"
    try:
        r = run(cmd)
        failed = None
    except RuntimeError as e:
        r, failed = getattr(e, "results", {}), str(e)

    def row(key, figure, target, measure):
        if key not in r:
            table.not_run(figure, target, failed or f"{key} was not printed", where)
            return
        measured, met = measure(r[key])
        table.add(figure, measured, target, met, where)

    shape = "100k units 8 deep, 1M agents, 10k bindings, 500 connectors"
    row("scale.cold_start", f"scale, SQLite ({shape}): cold start, open + a deep agent's tools",
        "≤ 2 s", lambda v: (f"{v['secs']:.2f} s (open {v['open_secs']:.2f} s)", v["secs"] <= 2))
    row("scale.memory", "scale, SQLite: resident memory after the cold start", "≤ 1 GiB",
        lambda v: (f"{v['rss_mib']:,.0f} MiB (peak {v['peak_mib']:,.0f} MiB"
                   + (f"; anonymous {v['anon_mib']:,.0f}, files {v['file_mib']:,.0f} MiB"
                      if "anon_mib" in v else "") + ")",
                   v["rss_mib"] <= 1024))
    row("scale.tools_unchanged", "scale: a deep agent's effective tools, unchanged, p50",
        "≤ 5 µs", lambda v: (f"{v['p50_us']:.2f} µs", v["p50_us"] <= 5))
    row("scale.tools_after_write", "scale: a deep agent's effective tools after a write, p50",
        "≤ 1 ms", lambda v: (f"{v['p50_us'] / 1000:.3f} ms (max {v['max_us'] / 1000:.2f} ms)",
                             v["p50_us"] <= 1000))
    row("scale.bind_root_visible", "scale: bind on the root (100k descendants) until visible, p50",
        "≤ 10 ms", lambda v: (f"{v['p50_ms']:.2f} ms (max {v['max_ms']:.2f} ms)",
                              v["p50_ms"] <= 10))
    streams = r.get("scale.listen_streams")
    if streams and streams["rss_after_mib"] <= streams["rss_before_mib"]:
        # Memory freed after the load outweighed the streams': no figure for them.
        table.not_run("scale: open MCP subscriptions/listen streams, server memory each",
                      "≤ 32 KiB (5,000 streams)",
                      f"the server's RSS fell while {streams['streams']:,.0f} streams opened "
                      f"({streams['rss_before_mib']:,.0f} → {streams['rss_after_mib']:,.0f} MiB)",
                      where)
    else:
        row("scale.listen_streams",
            "scale: open MCP subscriptions/listen streams, server memory each",
            "≤ 32 KiB (5,000 streams)",
            lambda v: (f"{v['kib_per_stream']:.1f} KiB × {v['streams']:,.0f}",
                       v["kib_per_stream"] <= 32 and v["streams"] >= 5000))
    row("scale.listen_fanout", "scale: tools/list_changed fan-out to every open stream",
        "≤ 200 ms (5,000 streams)",
        lambda v: (f"{v['all_ms']:.0f} ms to {v['streams']:,.0f}",
                   v["all_ms"] <= 200 and v["streams"] >= 5000))
    row("scale.postgres_catch_up",
        "scale, PostgreSQL 3 replicas: next read on another replica after one write, p50",
        "≤ 20 ms, read-after-write",
        lambda v: (f"{v['p50_ms']:.2f} ms (max {v['max_ms']:.1f} ms, "
                   f"{v['reloads']:.0f} full reloads in {v['rounds']:.0f} rounds; "
                   f"{v['units']:,.0f} units, {v['agents']:,.0f} agents)",
                   v["p50_ms"] <= 20 and v["read_after_write"] == 1))
    row("scale.postgres_vs_sqlite_writes", "scale: directory writes, PostgreSQL vs SQLite",
        "≥ 0.5×", lambda v: (f"{v['postgres']:,.0f}/s vs {v['sqlite']:,.0f}/s = "
                             f"{v['ratio']:.2f}×", v["ratio"] >= 0.5))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(base, token, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read()
        return json.loads(text) if text else None


def stdio_p50(bench, tool, args, server, n):
    try:
        out = subprocess.run([sys.executable, bench, "--tool", tool, "--args", args, "--n",
                              str(n), "--"] + server, capture_output=True, text=True,
                             errors="replace", timeout=600)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"{' '.join(server[:3])}: no answer within {e.timeout} s") from e
    m = re.search(r"p50_us=(\d+)", out.stdout)
    if out.returncode != 0 or not m:
        raise RuntimeError(f"{' '.join(server[:3])}: {out.stdout}{out.stderr}".strip())
    log(f"  {out.stdout.strip()}")
    return float(m.group(1))


def stdio_rows(table, bench_dir, rounds):
    figure, target = "MCP stdio tools/call p50 vs the Python floor server", "≤ 1.0×"
    command = "mcp_stdio_bench.py, mcp --local vs floor_mcp_server.py"
    bench = os.path.join(bench_dir, "mcp_stdio_bench.py")
    floor = os.path.join(bench_dir, "floor_mcp_server.py")
    run(["cargo", "build", "--release", "-p", "connector-host", "-p", "loadgen",
         "--bin", "connector-host", "--bin", "stdio-floor"], parse=False)
    exe = os.path.join(TARGET, "release", "connector-host")
    rust_floor = os.path.join(TARGET, "release", "stdio-floor")
    data = tempfile.mkdtemp(prefix="bench-table-")
    token = "bench-table-operator-token"
    port = free_port()
    env = dict(os.environ, CONNECTOR_HOST_OPERATOR_TOKEN=token, RUST_LOG="warn")
    base = f"http://127.0.0.1:{port}"
    serve = None
    try:
        serve = subprocess.Popen([exe, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir",
                                  data], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        for _ in range(300):
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        api(base, token, "PUT", "/api/v1/units/u1", {})
        api(base, token, "PUT", "/api/v1/agents/a1", {"units": ["u1"]})
        api(base, token, "PUT", "/api/v1/units/u1/connectors/acme", {"config": {}})
        agent_token = api(base, token, "POST", "/api/v1/agents/a1/tokens", {})["token"]
        servers = {
            "local": ("acme.echo", [exe, "mcp", "--agent", "a1", "--local", "--data-dir", data]),
            "bridge": ("acme.echo", [exe, "mcp", "--agent", "a1", "--url", base, "--token", agent_token]),
            "python floor": ("echo", [sys.executable, floor]),
            "rust do-nothing": ("echo", [rust_floor]),
        }
        p50s = {name: [] for name in servers}
        for i in range(rounds):
            log(f"\n[stdio] round {i + 1} of {rounds}")
            for name, (tool, server) in servers.items():
                p50s[name].append(stdio_p50(bench, tool, '{"message":"hi"}', server, 2000))
    except (RuntimeError, OSError, KeyError) as e:
        table.not_run(figure, target, str(e), command)
        return
    finally:
        if serve is not None:
            serve.terminate()
            try:
                serve.wait(timeout=30)
            except subprocess.TimeoutExpired:
                serve.kill()
                serve.wait()
        shutil.rmtree(data, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in p50s.items()}
    ratio = med["local"] / med["python floor"]
    table.add(figure,
              f"local {med['local']:.0f} µs vs floor {med['python floor']:.0f} µs = {ratio:.2f}× "
              f"(bridge {med['bridge']:.0f} µs, Rust do-nothing {med['rust do-nothing']:.0f} µs; "
              f"medians of {rounds})", target, ratio <= 1.0, command)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip", default="", help="comma-separated parts to leave out: "
                    "runtime, http, replicas, stdio, declarative, peers, scale")
    ap.add_argument("--rounds", type=int, default=3, help="stdio rounds (default 3)")
    ap.add_argument("--peer-rounds", type=int, default=3,
                    help="peers: alternating rounds (default 3)")
    ap.add_argument("--peer-seconds", type=int, default=5,
                    help="peers: seconds of wrk per server and round (default 5)")
    ap.add_argument("--conns", type=int, default=32,
                    help="peers: wrk connections (default 32; threads: 2)")
    ap.add_argument("--stdio-calls", type=int, default=2000,
                    help="peers: stdio calls per server and round (default 2000)")
    ap.add_argument("--skip-peer", default="", help="peers: comma-separated servers to "
                    f"leave out: {', '.join(peers_table.ALL_PEERS)}")
    default_wassette = os.environ.get("WASSETTE") or os.path.join(
        os.environ.get("PEER_BUILDS", os.path.join(os.path.dirname(ROOT), "peer-builds")),
        "bin", "wassette")
    ap.add_argument("--wassette", default=default_wassette,
                    help="peers: the wassette binary (default $WASSETTE, else "
                    "$PEER_BUILDS/bin/wassette as bench/peers/setup.sh builds it: "
                    f"{default_wassette})")
    a = ap.parse_args()
    skip = {s.strip() for s in a.skip.split(",") if s.strip()}
    unknown = skip - {"runtime", "http", "replicas", "stdio", "declarative", "peers", "scale"}
    if unknown:
        ap.error(f"unknown part(s) to skip: {', '.join(sorted(unknown))}")
    skip_peer = {s.strip() for s in a.skip_peer.split(",") if s.strip()}
    if skip_peer - set(peers_table.ALL_PEERS):
        ap.error(f"unknown peer(s): {', '.join(sorted(skip_peer - set(peers_table.ALL_PEERS)))}")
    if min(a.rounds, a.peer_rounds, a.peer_seconds, a.conns, a.stdio_calls) < 1:
        ap.error("--rounds, --peer-rounds, --peer-seconds, --conns and --stdio-calls must be >= 1")
    peer_opts = argparse.Namespace(rounds=a.peer_rounds, seconds=a.peer_seconds,
                                   conns=a.conns, threads=2, wassette=a.wassette,
                                   stdio_n=a.stdio_calls, skip=skip_peer)
    started, load_before = time.time(), peers_table.loadavg()
    table = Table()
    parts = [("runtime", runtime_rows), ("http", http_rows), ("replicas", replicas_rows),
             ("stdio", lambda t: stdio_rows(t, os.path.join(ROOT, "bench"), a.rounds)),
             ("declarative", declarative_rows),
             ("peers", lambda t: peers_table.peers_rows(t, peer_opts, TARGET, run)),
             ("scale", scale_rows)]
    for name, part in parts:
        if name in skip:
            continue
        try:
            part(table)
        except (RuntimeError, OSError, KeyError, ValueError, subprocess.SubprocessError) as e:
            table.not_run(name, "-", f"{type(e).__name__}: {e}", name)
    print(f"\n# bench/table.py: {time.time() - started:.0f} s; load average {load_before} at "
          f"start, {peers_table.loadavg()} at the end; {os.cpu_count()} cores")
    table.print()


if __name__ == "__main__":
    main()
