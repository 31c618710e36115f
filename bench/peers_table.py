"""The `peers` part of bench/table.py: this host against the MCP servers a user would pick
instead, measured side by side in one run with one outside load generator.

Servers, each started here on 127.0.0.1 and answering the same echo tool:

  host MCP      this host's `POST /mcp/agents/a1`: `tools/call` of `acme.echo` at 2026-07-28,
                stateless (`_meta`, `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`), an
                agent token, a fresh sandbox per call (release build, RUST_LOG=warn)
  host HTTP     this host's `POST /api/v1/agents/a1/tool-calls`, same call
  host healthz  this host's `GET /healthz`: the HTTP floor of this server
  webhooks      this host's `POST /api/v1/webhooks/github`: signed ~8 KiB `issues`
                deliveries, a new `X-GitHub-Delivery` each, stored durably (SQLite)
  rmcp          bench/peers/rmcp-echo: the official Rust SDK (`rmcp` 3.11),
                `StreamableHttpService` stateless with JSON answers, 2026-07-28
  python        bench/peers/python_echo_server.py: the official Python SDK (PyPI `mcp`),
                `MCPServer` with `stateless_http` and `json_response`, 2026-07-28
  typescript    bench/peers/ts_echo_server.mjs: the official TypeScript SDK 1.x, a server
                and transport per request, JSON answers; 2025-11-25 (1.x has no 2026-07-28)
  wassette      wassette built from source by bench/peers/setup.sh (outside the repository)
                with the echo component bench/peers/wassette-echo (wassette cannot run this
                host's connector components, and its tool names cannot hold dots: it names
                the function itself, e.g. `bench_echo_acme_echo`, read from `tools/list`).
                Over HTTP: sources that have `serve --streamable-http` are driven by wrk
                like the others (one session per connection, created first); older ones
                only serve the HTTP+SSE transport (`serve --http`/`--sse`, 2024-11-05: the
                call is POSTed, its answer arrives on an event stream), which wrk cannot
                time, so bench/peers/mcp-load drives both wassette and, for that row, this
                host's MCP endpoint (`host-load`), same workers, same clock. Over stdio
                (`serve --stdio`) beside `connector-host mcp --local`, with
                bench/mcp_stdio_bench.py

Every HTTP figure is `wrk -t2 -cCONNS -dSECONDS` with bench/peers/wrk_request.lua (every
answer checked for its status and its echoed text) or, for wassette's HTTP+SSE row,
bench/peers/mcp-load with as many workers and threads, the servers idle but for the one
measured, in alternating rounds; per server the median over rounds of calls/s and of p50,
and of the server process's own CPU per answer (user + system from /proc, all its threads),
which moves far less with the machine's load than calls/s do.
"""

import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import hashlib
import hmac
import urllib.error
import urllib.request

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
PEERS = os.path.join(BENCH, "peers")
LUA = os.path.join(PEERS, "wrk_request.lua")
MCP_LOAD = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")),
                        "peers", "release", "mcp-load")

STATELESS_VERSION = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": STATELESS_VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "bench-table", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}}
ECHO_ARGS = {"message": "hi"}
# What every good echo answer holds (the structured result, as each server writes it).
STRUCTURED = '"structuredContent":{"message":"hi"}'

ALL_PEERS = ("rmcp", "python", "typescript", "wassette", "webhooks")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class Unavailable(Exception):
    """A server that cannot be measured here, with why (the table says `not run: why`)."""


class Request:
    """One HTTP request as wrk_request.lua sends it, and what a good answer looks like."""

    def __init__(self, method, path, headers, body="", expect=None, status=200, picks=None):
        self.method, self.path, self.headers, self.body = method, path, headers, body
        self.expect, self.status, self.picks = expect, status, picks or []

    def file_text(self):
        lines = [f"{self.method} {self.path}"]
        lines += [f"{k}: {v}" for k, v in self.headers.items()]
        if self.expect:
            lines.append(f"@expect: {self.expect}")
        if self.status != 200:
            lines.append(f"@status: {self.status}")
        if self.picks:
            lines.append("@pick: " + " ".join(self.picks))
        return "\n".join(lines) + "\n\n" + self.body

    def send_once(self, base):
        """Sends it once with Python (placeholders filled in) and checks the answer."""
        headers = {k: v.replace("{seq}", secrets.token_hex(8)).replace(
            "{pick}", self.picks[0] if self.picks else "") for k, v in self.headers.items()}
        req = urllib.request.Request(base + self.path, method=self.method, headers=headers,
                                     data=self.body.encode() if self.body else None)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, text = r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode(errors="replace")
        if status != self.status or (self.expect and self.expect not in text):
            raise Unavailable(f"{self.method} {self.path} answered {status} {text[:300]!r}, "
                              f"expected {self.status} with {self.expect!r}")
        return text


class Server:
    """A process serving one or more measured targets."""

    def __init__(self, name, cmd, port, env=None, cwd=ROOT):
        self.name, self.cmd, self.port = name, cmd, port
        self.base = f"http://127.0.0.1:{port}"
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".log",
                                               delete=False)
        log(f"[peers] starting {name}: {' '.join(cmd)}")
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=dict(os.environ, **(env or {})),
                                     stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT)

    def wait_listening(self, seconds=120):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise Unavailable(f"{self.name} exited with {self.proc.returncode}: "
                                  f"{self.output()}")
            if port_in_use(self.port):
                return
            time.sleep(0.1)
        raise Unavailable(f"{self.name} did not listen on {self.port} within {seconds} s")

    def output(self):
        try:
            with open(self.log.name, errors="replace") as f:
                return f.read()[-600:].strip()
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)


class Target:
    """One measured row: a server's base URL and the request wrk repeats, or (load) the
    arguments of bench/peers/mcp-load for a server wrk cannot drive."""

    def __init__(self, key, label, base, request, version, load=None):
        self.key, self.label, self.base, self.request, self.version = (key, label, base,
                                                                       request, version)
        self.load = load
        self.runs = []

    def median(self, field):
        return statistics.median(r[field] for r in self.runs)


def mcp_load(target, threads, conns, seconds):
    """One bench/peers/mcp-load run against target (same shape of result as wrk's)."""
    cmd = [MCP_LOAD] + target.load + ["--base", target.base, "--conns", str(conns),
                                      "--threads", str(threads), "--seconds", str(seconds)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
    line = next((l for l in out.stdout.splitlines() if l.startswith("@load ")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"mcp-load against {target.label}: {out.stdout}{out.stderr}".strip())
    if out.stderr.strip():
        log(f"  mcp-load: {out.stderr.strip()[:600]}")
    r = {k: float(v) for k, v in (kv.split("=", 1) for kv in line.split()[1:])}
    r["rate"] = r["requests"] / max(r["duration_us"] / 1e6, 1e-9)
    return r


def wrk(target, threads, conns, seconds, run_id):
    """One wrk run against target (or mcp-load, for a target that has load arguments);
    returns {rate, p50_us, p99_us, errors, unexpected}."""
    if target.load is not None:
        return mcp_load(target, threads, conns, seconds)
    with tempfile.NamedTemporaryFile("w", prefix="bench-wrk-", suffix=".txt",
                                     delete=False) as f:
        f.write(target.request.file_text())
    try:
        cmd = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "--timeout", "10s",
               "-s", LUA, target.base]
        out = subprocess.run(cmd, env=dict(os.environ, WRK_REQUEST=f.name, WRK_RUN=run_id),
                             capture_output=True, text=True, timeout=seconds + 60)
    finally:
        os.unlink(f.name)
    line = next((l for l in out.stdout.splitlines() if l.startswith("@wrk ")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"wrk against {target.label}: {out.stdout}{out.stderr}".strip())
    r = {k: float(v) for k, v in (kv.split("=", 1) for kv in line.split()[1:])}
    r["rate"] = r["requests"] / max(r["duration_us"] / 1e6, 1e-9)
    return r


def stat_cpu(path):
    """(name, CPU seconds: user + system) of a /proc `stat` file: a process's (all its
    threads) or one thread's (/proc/PID/task/TID/stat)."""
    with open(path) as f:
        stat = f.read()
    fields = stat.rsplit(")", 1)[1].split()
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    return name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """The CPU time (user + system, all threads) process pid has used so far."""
    return stat_cpu(f"/proc/{pid}/stat")[1]


def loadavg():
    """The machine's load averages (1, 5, 15 minutes), as text."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def version_of_python_mcp(python):
    out = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('mcp'))"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "?"


def rmcp_version():
    try:
        with open(os.path.join(PEERS, "rmcp-echo", "Cargo.lock")) as f:
            lock = f.read()
        i = lock.index('name = "rmcp"\nversion = "')
        return lock[i:].split('"')[3]
    except (OSError, ValueError, IndexError):
        return "?"


def github_delivery_body():
    """A real `issues.opened` delivery (connectors/github/fixtures) cut to about 8 KiB."""
    with open(os.path.join(ROOT, "connectors", "github", "fixtures", "issues.opened.json")) as f:
        event = json.load(f)
    event["issue"]["body"] = ""
    base = len(json.dumps(event, separators=(",", ":")))
    event["issue"]["body"] = "x" * max(0, 8192 - base)
    return json.dumps(event, separators=(",", ":"))


def github_delivery(webhook_secret):
    """A signed `issues` delivery to `POST /api/v1/webhooks/github`, a new id each request."""
    body = github_delivery_body()
    sig = hmac.new(webhook_secret.encode(), body.encode(), hashlib.sha256).hexdigest()
    return Request("POST", "/api/v1/webhooks/github", {
        "Content-Type": "application/json",
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": "{seq}",
        "X-Hub-Signature-256": f"sha256={sig}"}, body, expect='"accepted"', status=202)


# ----- the servers ------------------------------------------------------------------------

def start_host(exe, data, operator_token, webhook_secret):
    port = free_port()
    server = Server("connector-host", [exe, "serve", "--listen", f"127.0.0.1:{port}",
                                       "--data-dir", data], port,
                    env={"CONNECTOR_HOST_OPERATOR_TOKEN": operator_token,
                         "CONNECTOR_HOST_GITHUB_WEBHOOK_SECRET": webhook_secret,
                         "RUST_LOG": "warn"})
    server.wait_listening()
    return server


def host_setup(base, operator_token):
    def api(method, path, body=None):
        req = urllib.request.Request(base + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {operator_token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read()
            return json.loads(text) if text else None

    api("PUT", "/api/v1/units/u1", {})
    api("PUT", "/api/v1/agents/a1", {"units": ["u1"]})
    api("PUT", "/api/v1/units/u1/connectors/acme", {"config": {}})
    api("PUT", "/api/v1/units/u1/connectors/github", {"config": {"repo": "octo-org/hello-world"}})
    return api("POST", "/api/v1/agents/a1/tokens", {})["token"]


def stateless_call(path, tool, extra_headers=None):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": tool, "arguments": ECHO_ARGS, "_meta": META}},
                      separators=(",", ":"))
    headers = {"Content-Type": "application/json",
               "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": STATELESS_VERSION, "Mcp-Method": "tools/call",
               "Mcp-Name": tool}
    headers.update(extra_headers or {})
    return Request("POST", path, headers, body, expect=STRUCTURED)


def wassette_sessions(base, n):
    """Opens n sessions on wassette's Streamable HTTP endpoint (2025-03-26 lifecycle)."""
    sessions, version = [], None
    for _ in range(n):
        init = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": {"name": "bench-table", "version": "0"}}})
        req = urllib.request.Request(base + "/mcp", method="POST", data=init.encode(), headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
        with urllib.request.urlopen(req, timeout=30) as r:
            session = r.headers.get("mcp-session-id")
            text = r.read().decode(errors="replace")
        if not session:
            raise Unavailable(f"wassette's initialize answered without a session: {text[:300]}")
        if version is None:
            for line in text.splitlines():
                data = line[5:].strip() if line.startswith("data:") else line
                try:
                    version = json.loads(data)["result"]["protocolVersion"]
                    break
                except (ValueError, KeyError, TypeError):
                    continue
        note = urllib.request.Request(base + "/mcp", method="POST", data=json.dumps(
            {"jsonrpc": "2.0", "method": "notifications/initialized"}).encode(), headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "Mcp-Session-Id": session})
        with urllib.request.urlopen(note, timeout=30) as r:
            r.read()
        sessions.append(session)
    return sessions, version or "2025-03-26"


def wassette_binary(path):
    if not path:
        return None, "no wassette binary (build it with bench/peers/setup.sh, or give --wassette)"
    if not os.access(path, os.X_OK):
        return None, f"{path} is absent (build it with bench/peers/setup.sh, or give --wassette)"
    return path, None


def wassette_source(path):
    try:
        with open(path + ".source") as f:
            commit, date = f.read().split()[:2]
            return f"{commit[:10]} ({date})"
    except (OSError, ValueError):
        return os.path.basename(path)


# What wassette's answer to the echo call holds: the component's result as JSON text inside
# the tool result's text content (escaped once more in the JSON-RPC answer).
WASSETTE_EXPECT = '\\"message\\":\\"hi\\"'


def wassette_tool(binary, plugins, data):
    """The name wassette gives the echo component's function (its naming changed between
    versions), from `tools/list` over stdio."""
    env = dict(os.environ, RUST_LOG="warn", XDG_CONFIG_HOME=data, XDG_DATA_HOME=data)
    p = subprocess.Popen([binary, "serve", "--stdio", "--plugin-dir", plugins], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    try:
        msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2024-11-05", "capabilities": {},
                    "clientInfo": {"name": "bench-table", "version": "0"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}]
        for m in msgs:
            p.stdin.write(json.dumps(m) + "\n")
            p.stdin.flush()
        deadline = time.time() + 60
        while time.time() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            try:
                answer = json.loads(line)
            except ValueError:
                continue
            if answer.get("id") == 2:
                names = [t["name"] for t in answer.get("result", {}).get("tools", [])]
                echo = [n for n in names if n.endswith("echo")]
                if not echo:
                    raise Unavailable(f"wassette lists no echo tool, only {names}")
                return echo[0]
        raise Unavailable("wassette --stdio did not answer tools/list")
    finally:
        p.kill()
        p.wait()


def wassette_help(path):
    out = subprocess.run([path, "serve", "--help"], capture_output=True, text=True, timeout=30)
    return out.stdout + out.stderr


def stdio_p50(cmd, tool, n):
    bench = os.path.join(BENCH, "mcp_stdio_bench.py")
    out = subprocess.run([sys.executable, bench, "--tool", tool, "--args", json.dumps(ECHO_ARGS),
                          "--n", str(n), "--"] + cmd, capture_output=True, text=True,
                         errors="replace", timeout=900)
    for part in out.stdout.split():
        if part.startswith("p50_us="):
            log(f"  {out.stdout.strip()}")
            return float(part.split("=", 1)[1])
    raise RuntimeError(f"{' '.join(cmd[:3])}: {out.stdout}{out.stderr}".strip())


# ----- the rows ---------------------------------------------------------------------------

def fmt_rate(r):
    return f"{r / 1000:.1f}k/s" if r >= 10000 else f"{r:,.0f}/s"


def fmt_ms(us):
    return f"{us / 1000:.2f} ms"


def peers_rows(table, opts, target_dir, run):
    """Adds the peers rows to table. opts: rounds, seconds, conns, threads, wassette (path
    or None), stdio_n, skip (a set of ALL_PEERS names); run: bench/table.py's runner of
    build commands."""
    rounds = f"{opts.rounds} round{'s' if opts.rounds != 1 else ''}"
    command = f"bench/table.py peers ({rounds} of wrk -t{opts.threads} " \
              f"-c{opts.conns} -d{opts.seconds}s)"
    rows = {  # key: (figure, target)
        "rmcp": ("this host's MCP vs native rmcp echo (official Rust SDK), calls/s", "≥ 1.5×"),
        "python": ("this host's MCP vs the official Python SDK server, calls/s", "≥ 25×"),
        "typescript": ("this host's MCP vs the official TypeScript SDK 1.x server, calls/s",
                       "≥ 15×"),
        "wassette": ("this host's MCP vs wassette over HTTP, calls/s", "≥ 2×"),
        "wassette-stdio": ("MCP stdio p50: `mcp --local` vs wassette --stdio", "≤ 0.7×"),
        "http": ("this host's HTTP tool-call API vs its own /healthz (outside wrk)", "≥ 0.33×"),
        "http-rmcp": ("this host's HTTP tool-call API vs the native rmcp echo, calls/s", "-"),
        "mcp-healthz": ("this host's MCP endpoint vs its own /healthz, calls/s", "-"),
        "webhooks": ("durable signed ~8 KiB GitHub deliveries through wrk (new id each)",
                     "≥ 8,000/s, p99 ≤ 20 ms"),
    }

    def not_run_all(why, keys=None):
        for key in keys or rows:
            if key in opts.skip or (key == "wassette-stdio" and "wassette" in opts.skip) or \
                    rows[key][1] == "-":
                continue
            table.not_run(rows[key][0], rows[key][1], why, command)

    if shutil.which("wrk") is None:
        not_run_all("wrk missing (run bench/peers/setup.sh)")
        return

    run(["cargo", "build", "--release", "-p", "connector-host", "-p", "loadgen",
         "--bin", "connector-host", "--bin", "stdio-floor"], parse=False)
    peers_target = os.path.join(target_dir, "peers")
    if "rmcp" not in opts.skip:
        run(["cargo", "build", "--release", "--locked", "--manifest-path",
             os.path.join(PEERS, "rmcp-echo", "Cargo.toml"), "--target-dir", peers_target],
            parse=False)
    if "wassette" not in opts.skip:
        run(["cargo", "build", "--release", "--locked", "--target", "wasm32-wasip2",
             "--manifest-path", os.path.join(PEERS, "wassette-echo", "Cargo.toml"),
             "--target-dir", peers_target], parse=False)

    exe = os.path.join(target_dir, "release", "connector-host")
    servers, targets, unavailable = [], {}, {}
    data = tempfile.mkdtemp(prefix="bench-peers-")
    operator_token, webhook_secret = secrets.token_hex(16), secrets.token_hex(16)
    try:
        # ----- this host -------------------------------------------------------------------
        host = start_host(exe, data, operator_token, webhook_secret)
        servers.append(host)
        agent_token = host_setup(host.base, operator_token)
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True).stdout.strip()
        bearer = {"Authorization": f"Bearer {agent_token}"}
        targets["host"] = Target("host", "this host, MCP 2026-07-28 stateless", host.base,
                                 stateless_call("/mcp/agents/a1", "acme.echo", bearer), rev)
        targets["http"] = Target("http", "this host, HTTP tool-call API", host.base, Request(
            "POST", "/api/v1/agents/a1/tool-calls", dict({"Content-Type": "application/json"},
                                                         **bearer),
            json.dumps({"tool": "acme.echo", "arguments": ECHO_ARGS}, separators=(",", ":")),
            expect='{"result":{"message":"hi"}}'), rev)
        targets["healthz"] = Target("healthz", "this host, GET /healthz", host.base,
                                    Request("GET", "/healthz", {}, expect='"ok"'), rev)
        if "webhooks" not in opts.skip:
            targets["webhooks"] = Target("webhooks", "this host, GitHub webhooks", host.base,
                                         github_delivery(webhook_secret), rev)

        # ----- the peers -------------------------------------------------------------------
        def start(key, make):
            if key in opts.skip:
                return
            try:
                make()
            except (Unavailable, OSError, subprocess.SubprocessError) as e:
                unavailable[key] = str(e)
                log(f"[peers] {key}: not run: {e}")

        def rmcp():
            binary = os.path.join(peers_target, "release", "rmcp-echo")
            port = free_port()
            s = Server("rmcp-echo", [binary, "--listen", f"127.0.0.1:{port}"], port)
            servers.append(s)
            s.wait_listening()
            targets["rmcp"] = Target("rmcp", "rmcp echo, 2026-07-28 stateless JSON", s.base,
                                     stateless_call("/mcp", "acme.echo"),
                                     f"rmcp {rmcp_version()}")

        def python():
            venv_python = os.path.join(target_dir, "mcp-venv", "bin", "python")
            if not os.access(venv_python, os.X_OK):
                raise Unavailable(f"{venv_python} missing (run bench/peers/setup.sh)")
            port = free_port()
            s = Server("python-sdk", [venv_python, os.path.join(PEERS, "python_echo_server.py"),
                                      "--port", str(port)], port)
            servers.append(s)
            s.wait_listening()
            targets["python"] = Target("python", "Python SDK MCPServer, 2026-07-28 stateless "
                                       "JSON", s.base, stateless_call("/mcp", "acme.echo"),
                                       f"mcp {version_of_python_mcp(venv_python)}")

        def typescript():
            node = os.path.join(target_dir, "node", "bin", "node")
            node = node if os.access(node, os.X_OK) else shutil.which("node")
            modules = os.path.join(target_dir, "mcp-node", "node_modules")
            pkg = os.path.join(modules, "@modelcontextprotocol", "sdk", "package.json")
            if not node or not os.path.exists(pkg):
                raise Unavailable("Node or @modelcontextprotocol/sdk missing (run "
                                  "bench/peers/setup.sh)")
            with open(pkg) as f:
                version = json.load(f)["version"]
            port = free_port()
            s = Server("ts-sdk", [node, os.path.join(PEERS, "ts_echo_server.mjs"), "--port",
                                  str(port)], port, env={"NODE_PATH": modules})
            servers.append(s)
            s.wait_listening()
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                               "params": {"name": "acme.echo", "arguments": ECHO_ARGS}},
                              separators=(",", ":"))
            targets["typescript"] = Target("typescript", "TypeScript SDK 1.x, 2025-11-25 "
                                           "stateless JSON", s.base, Request(
                                               "POST", "/mcp", {
                                                   "Content-Type": "application/json",
                                                   "Accept": "application/json, text/event-stream",
                                                   "MCP-Protocol-Version": "2025-11-25"},
                                               body, expect=STRUCTURED),
                                           f"@modelcontextprotocol/sdk {version}")

        def wassette():
            binary, why = wassette_binary(opts.wassette)
            if why:
                raise Unavailable(why)
            usage = wassette_help(binary)
            # Newer sources serve Streamable HTTP (`--streamable-http`, sessions); older ones
            # only the HTTP+SSE transport (`--http`, or `--sse`), which wrk cannot drive.
            transport = ("--streamable-http" if "--streamable-http" in usage else
                         "--sse" if "--sse" in usage else "--http" if "--http" in usage else None)
            if transport is None:
                raise Unavailable(f"{binary} serve has no HTTP transport: {usage[:300]}")
            if port_in_use(9001):
                raise Unavailable("127.0.0.1:9001, wassette's fixed address, is taken")
            plugins = tempfile.mkdtemp(prefix="bench-wassette-", dir=data)
            shutil.copy(os.path.join(peers_target, "wasm32-wasip2", "release",
                                     "wassette_echo.wasm"), plugins)
            s = Server("wassette", [binary, "serve", transport, "--plugin-dir", plugins], 9001,
                       env={"RUST_LOG": "warn", "XDG_CONFIG_HOME": data,
                            "XDG_DATA_HOME": data})
            servers.append(s)
            s.wait_listening()
            version = f"wassette {wassette_source(binary)}"
            if transport != "--streamable-http":
                # HTTP+SSE: both sides through mcp-load, the host by plain POSTs.
                if not os.access(MCP_LOAD, os.X_OK):
                    raise Unavailable(f"{MCP_LOAD} missing (run bench/peers/setup.sh)")
                tool = wassette_tool(binary, plugins, data)
                targets["wassette"] = Target(
                    "wassette", f"wassette, HTTP+SSE (2024-11-05 sessions), `{tool}`", s.base,
                    None, version, load=["sse", "--tool", tool, "--args",
                                         json.dumps(ECHO_ARGS), "--expect", WASSETTE_EXPECT])
                h = targets["host"].request
                load = ["post", "--path", h.path, "--body", h.body, "--expect", h.expect]
                for k, v in h.headers.items():
                    load += ["--header", f"{k}: {v}"]
                targets["host-load"] = Target("host-load", "this host, MCP 2026-07-28 "
                                              "stateless, through mcp-load", host.base, h,
                                              targets["host"].version, load=load)
                return
            sessions, proto = wassette_sessions(s.base, opts.conns)
            tool = wassette_tool(binary, plugins, data)
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                               "params": {"name": tool, "arguments": ECHO_ARGS}},
                              separators=(",", ":"))
            targets["wassette"] = Target("wassette", f"wassette, Streamable HTTP ({proto} "
                                         f"sessions, SSE answers), `{tool}`", s.base, Request(
                                             "POST", "/mcp", {
                                                 "Content-Type": "application/json",
                                                 "Accept": "application/json, text/event-stream",
                                                 "MCP-Protocol-Version": proto,
                                                 "Mcp-Session-Id": "{pick}"}, body,
                                             expect=WASSETTE_EXPECT, picks=sessions), version)

        start("rmcp", rmcp)
        start("python", python)
        start("typescript", typescript)
        start("wassette", wassette)

        # Each answers once, correctly, before any load.
        for key, t in list(targets.items()):
            try:
                if t.load is None:
                    t.request.send_once(t.base)
                    continue
                r = mcp_load(t, 1, 1, 1)
                if r["requests"] == 0 or r["errors"] or r["unexpected"]:
                    raise Unavailable(f"{t.label}: a 1 s check through mcp-load gave {r}")
            except (Unavailable, OSError, RuntimeError, subprocess.SubprocessError) as e:
                unavailable[key] = str(e)
                del targets[key]
                log(f"[peers] {key}: not run: {e}")
        if "host" not in targets:
            not_run_all(f"this host's MCP endpoint: {unavailable.get('host')}")
            return

        order = list(targets)
        pid_of = {s.base: s.proc.pid for s in servers}
        log(f"\n[peers] warm-up, 2 s each: {', '.join(order)}")
        for key in order:
            wrk(targets[key], opts.threads, opts.conns, 2, f"warm-{key}-{secrets.token_hex(4)}")
        for i in range(opts.rounds):
            # Alternating rounds: each round starts one server further along.
            turn = order[i % len(order):] + order[:i % len(order)]
            log(f"\n[peers] round {i + 1} of {opts.rounds}: {', '.join(turn)}")
            for key in turn:
                t = targets[key]
                pid = pid_of.get(t.base)
                before = cpu_seconds(pid) if pid else None
                r = wrk(t, opts.threads, opts.conns, opts.seconds,
                        f"r{i}-{key}-{secrets.token_hex(4)}")
                # The server's own CPU per answer: unlike calls/s, it hardly moves with what
                # else the machine runs.
                if before is not None:
                    r["cpu_us"] = (cpu_seconds(pid) - before) / max(r["requests"], 1) * 1e6
                t.runs.append(r)
                cpu = f"  server CPU {r['cpu_us']:.1f} µs/call" if "cpu_us" in r else ""
                log(f"  {t.label:<48} {r['rate']:>10,.0f}/s  p50 {fmt_ms(r['p50_us'])}  "
                    f"p99 {fmt_ms(r['p99_us'])}{cpu}  errors {r['errors']:.0f}  "
                    f"unexpected {r['unexpected']:.0f}")

        # ----- stdio: connector-host mcp --local vs wassette --stdio -------------------------
        stdio = {}
        if "wassette" not in opts.skip:
            binary, why = wassette_binary(opts.wassette)
            if why:
                unavailable["wassette-stdio"] = why
            else:
                plugins = tempfile.mkdtemp(prefix="bench-wassette-stdio-", dir=data)
                shutil.copy(os.path.join(peers_target, "wasm32-wasip2", "release",
                                         "wassette_echo.wasm"), plugins)
                cmds = {"local": (["env", "RUST_LOG=warn", exe, "mcp", "--agent", "a1",
                                   "--local", "--data-dir", data], "acme.echo"),
                        "wassette": (["env", "RUST_LOG=warn", f"XDG_CONFIG_HOME={data}",
                                      f"XDG_DATA_HOME={data}", binary, "serve", "--stdio",
                                      "--plugin-dir", plugins], None)}
                stdio = {k: [] for k in cmds}
                try:
                    cmds["wassette"] = (cmds["wassette"][0],
                                        wassette_tool(binary, plugins, data))
                    for i in range(opts.rounds):
                        log(f"\n[peers] stdio round {i + 1} of {opts.rounds}")
                        for k, (cmd, tool) in cmds.items():
                            stdio[k].append(stdio_p50(cmd, tool, opts.stdio_n))
                except (Unavailable, RuntimeError, OSError, subprocess.SubprocessError) as e:
                    unavailable["wassette-stdio"] = str(e)
                    stdio = {}
    finally:
        for s in reversed(servers):
            s.stop()
        shutil.rmtree(data, ignore_errors=True)

    # ----- the table ------------------------------------------------------------------------
    def summary(t):
        cpu = f", {t.median('cpu_us'):.0f} µs CPU" if all("cpu_us" in r for r in t.runs) \
            else ""
        return f"{fmt_rate(t.median('rate'))}, p50 {fmt_ms(t.median('p50_us'))}{cpu}"

    def bad(t):
        return sum(r["errors"] + r["unexpected"] for r in t.runs)

    def per_round(a, b):
        """a's calls/s over b's, round by round: how far one round's ratio is from another's
        says how much the machine's load moved while they ran."""
        if len(a.runs) < 2:
            return ""
        return "; per round " + ", ".join(f"{x['rate'] / max(y['rate'], 1e-9):.2f}"
                                          for x, y in zip(a.runs, b.runs))

    host_t = targets["host"]
    for key in ("rmcp", "python", "typescript", "wassette"):
        if key in opts.skip:
            continue
        figure, target = rows[key]
        if key not in targets:
            table.not_run(figure, target, unavailable.get(key, "not started"), command)
            continue
        peer = targets[key]
        # A peer driven by mcp-load is compared with this host driven by mcp-load.
        ours = targets.get("host-load") if peer.load is not None else host_t
        if ours is None:
            table.not_run(figure, target, unavailable.get("host-load", "not started"), command)
            continue
        ratio = ours.median("rate") / max(peer.median("rate"), 1e-9)
        goal = {"rmcp": 1.5, "python": 25, "typescript": 15, "wassette": 2}[key]
        table.add(figure, f"{summary(ours)} vs {summary(peer)} = {ratio:.2f}×"
                  f"{per_round(ours, peer)} ({peer.version}; {peer.label}"
                  f"{'; both through mcp-load' if peer.load is not None else ''})", target,
                  ratio >= goal and bad(ours) == 0 and bad(peer) == 0, command)
    if "wassette" not in opts.skip:
        figure, target = rows["wassette-stdio"]
        if stdio:
            local, other = statistics.median(stdio["local"]), statistics.median(stdio["wassette"])
            ratio = local / max(other, 1e-9)
            table.add(figure, f"{local:.0f} µs vs {other:.0f} µs = {ratio:.2f}× (medians of "
                      f"{opts.rounds} × {opts.stdio_n} calls, mcp_stdio_bench.py)", target,
                      ratio <= 0.7, command)
        else:
            table.not_run(figure, target, unavailable.get("wassette-stdio", "not run"), command)
    figure, target = rows["http"]
    if "http" in targets and "healthz" in targets:
        h, z = targets["http"], targets["healthz"]
        ratio = h.median("rate") / max(z.median("rate"), 1e-9)
        table.add(figure, f"{summary(h)} vs {summary(z)} = {ratio:.2f}×{per_round(h, z)}",
                  target, ratio >= 0.33 and bad(h) == 0 and bad(z) == 0, command)
    else:
        table.not_run(figure, target, unavailable.get("http") or unavailable.get("healthz"),
                      command)
    # Diagnostic rows, no target: the HTTP API beside the native echo, the MCP endpoint
    # beside this server's floor.
    for key, (a, b) in (("http-rmcp", ("http", "rmcp")), ("mcp-healthz", ("host", "healthz"))):
        if a in targets and b in targets:
            x, y = targets[a], targets[b]
            failed = bad(x) + bad(y)
            table.info(rows[key][0], f"{summary(x)} vs {summary(y)} = "
                       f"{x.median('rate') / max(y.median('rate'), 1e-9):.2f}×{per_round(x, y)}"
                       f"{f'; {failed:.0f} failed answers' if failed else ''}", command)

    if "webhooks" not in opts.skip:
        figure, target = rows["webhooks"]
        if "webhooks" in targets:
            w = targets["webhooks"]
            rate, p99 = w.median("rate"), w.median("p99_us") / 1000
            table.add(figure, f"{rate:,.0f}/s, p50 {fmt_ms(w.median('p50_us'))}, p99 "
                      f"{p99:.1f} ms", target, rate >= 8000 and p99 <= 20 and bad(w) == 0,
                      command)
        else:
            table.not_run(figure, target, unavailable.get("webhooks", "not started"), command)

    # Every server's own figures, under the table.
    table.notes.append(f"peers: wrk -t{opts.threads} -c{opts.conns} -d{opts.seconds}s, "
                       f"{rounds}, alternating; calls/s per round, median p50/p99, the "
                       f"server process's CPU (user + system, /proc) per answer per round")
    for t in targets.values():
        per_round = ", ".join(f"{r['rate']:,.0f}" for r in t.runs)
        cpu = ""
        if all("cpu_us" in r for r in t.runs):
            cpu = "; server CPU per call " + ", ".join(f"{r['cpu_us']:.1f}" for r in t.runs) + " µs"
        table.notes.append(
            f"  {t.label} [{t.version}]: {per_round} /s; p50 {fmt_ms(t.median('p50_us'))}, "
            f"p99 {fmt_ms(t.median('p99_us'))}{cpu}; failed answers {bad(t):.0f}")
    for k, v in stdio.items():
        table.notes.append(f"  stdio {k}: p50 per round " + ", ".join(f"{x:.0f} µs" for x in v))
