#!/usr/bin/env python3
"""Durable signed GitHub deliveries against two or more `connector-host` binaries, in
alternating rounds, with where each one's server CPU and written bytes go.

    python3 bench/webhooks_ab.py [--rounds 3] [--seconds 8] [--conns 32] EXE [EXE ...]

Each round starts every binary in turn on a fresh data directory (the setup of
bench/table.py: units, agent, `acme` and `github` bound), sends bench/table.py's delivery
(`issues`, signed, a new delivery id each request) with `wrk -t2 -cCONNS` for 2 s to warm up
and SECONDS to measure, and reads from /proc and `/metrics` around the measured run:

- server CPU per delivery, in all and by thread (tokio's workers, SQLite's writer and
  checkpointer), from /proc/PID/task/*/stat;
- bytes the process wrote per delivery (`wchar` of /proc/PID/io: the SQLite log, the
  database file and any temporary file; the answers are a few hundred bytes);
- writes per commit (`connector_host_store_writes_total / _commits_total`).

It prints each run, then the medians per binary and the load average. Keep the binary of
the code before a change (copy target/release/connector-host aside) to compare.
"""

import argparse
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import urllib.request

import peers_table as pt


def thread_cpu(pid):
    """CPU seconds by thread kind (tokio's workers together) of process pid."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name, seconds = pt.stat_cpu(f"/proc/{pid}/task/{tid}/stat")
        except OSError:
            continue
        kind = "workers" if name.startswith("tokio") else name
        out[kind] = out.get(kind, 0) + seconds
    return out


def written(pid):
    with open(f"/proc/{pid}/io") as f:
        return next(int(line.split(":")[1]) for line in f if line.startswith("wchar:"))


def commits(base):
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    values = dict(line.split() for line in text.splitlines()
                  if line.startswith("connector_host_store_"))
    return (float(values["connector_host_store_commits_total"]),
            float(values["connector_host_store_writes_total"]))


def run_one(exe, seconds, conns):
    data = tempfile.mkdtemp(prefix="bench-webhooks-ab-")
    operator_token, webhook_secret = secrets.token_hex(16), secrets.token_hex(16)
    host = pt.start_host(exe, data, operator_token, webhook_secret)
    try:
        pt.host_setup(host.base, operator_token)
        target = pt.Target("webhooks", "GitHub webhooks", host.base,
                           pt.github_delivery(webhook_secret), "")
        target.request.send_once(host.base)
        pt.wrk(target, 2, conns, 2, "warm")
        pid = host.proc.pid
        cpu0, written0, (commits0, writes0) = thread_cpu(pid), written(pid), commits(host.base)
        r = pt.wrk(target, 2, conns, seconds, "run")
        cpu1, written1, (commits1, writes1) = thread_cpu(pid), written(pid), commits(host.base)
        n = max(r["requests"], 1)
        threads = {k: (cpu1[k] - cpu0.get(k, 0)) / n * 1e6 for k in cpu1}
        return {"rate": r["rate"], "p50": r["p50_us"] / 1000, "p99": r["p99_us"] / 1000,
                "failed": r["errors"] + r["unexpected"], "cpu": sum(threads.values()),
                "threads": threads, "kib": (written1 - written0) / n / 1024,
                "group": (writes1 - writes0) / max(commits1 - commits0, 1)}
    finally:
        host.stop()
        shutil.rmtree(data, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("exes", nargs="+")
    a = ap.parse_args()
    runs = {exe: [] for exe in a.exes}
    for round_no in range(1, a.rounds + 1):
        for exe in a.exes:
            load = pt.loadavg()
            r = run_one(exe, a.seconds, a.conns)
            runs[exe].append(r)
            threads = " ".join(f"{k} {v:.0f}" for k, v in sorted(r["threads"].items())
                               if v >= 0.5)
            print(f"round {round_no} {exe}: {r['rate']:,.0f}/s, p50 {r['p50']:.2f} ms, "
                  f"p99 {r['p99']:.2f} ms, failed {r['failed']:.0f}; server CPU "
                  f"{r['cpu']:.0f} µs/delivery ({threads}); written {r['kib']:.1f} "
                  f"KiB/delivery; {r['group']:.1f} writes/commit; load {load}", flush=True)
    print(f"# medians of {a.rounds} rounds, wrk -t2 -c{a.conns} -d{a.seconds}s; load average "
          f"at the end {pt.loadavg()}")
    for exe, rs in runs.items():
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        print(f"{exe}: {med('rate'):,.0f}/s, p50 {med('p50'):.2f} ms, p99 {med('p99'):.2f} ms, "
              f"server CPU {med('cpu'):.0f} µs/delivery, written {med('kib'):.1f} KiB/delivery")


if __name__ == "__main__":
    sys.exit(main())
