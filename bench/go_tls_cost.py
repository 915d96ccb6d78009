#!/usr/bin/env python3
"""What Go crypto/tls capture costs: a Go HTTPS server (net/http over
crypto/tls, tests/fixtures/go/tls_server.go, HTTP/1.1 only) answering
`GET /ok` on keep-alive connections, loaded by `bench/goserver -mode blast
-tls` at fixed rates; ringtail off and on alternated (off, on, off, on, …)
against the same server process.

    sudo python3 bench/go_tls_cost.py [--rates 2000,5000] [--duration 10] [--repeat 2]
                                      [--bin-dir DIR] [--bin-dir-b DIR] [--out FILE.json]

With --bin-dir-b, each pair is a triple: off, on (--bin-dir), on (the
other build, "on-b"), so that two builds are compared in one sitting.

ringtail selects the server only (`discovery.exe_names = ["^tls_server$"]`):
its uprobes (go_tls_read_enter, go_tls_read_exit, go_tls_write_enter) are
attached to the server's file when ringtail starts (the server runs
already) and gone when it stops. The load generator is another Go file:
no uprobe, no trap. OTLP export is off, `export.stdout = false`: the
exporter only decodes, de-duplicates and keeps its histograms.

Per point: the server's CPU a request (its CPU clock), each ringtail
process's CPU a request (from just before the load to its end + 0.6 s),
runs and in-kernel ns a request of each program (bpf_stats: the socket
hooks count every process's sends and receives, the load generator's too),
spans received by the exporter a request. Reuses bench/run.py's `measure`.
Run it alone, under the machine's eBPF lock (`flock -o /work/ebpf.lock …`).
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import run
from run import REPO, COMPONENTS, Child, Fail, say

PROGRAMS = ("go_tls_read_enter", "go_tls_read_exit", "go_tls_write_enter", "go_tls_multi")


class GoTlsServer(run.Server):
    """tls_server PORT CERT KEY h1, built into the work directory under its
    own name (the name ringtail selects)."""

    kind = "go-tls"

    def __init__(self, tools, work):
        go = tools.go()
        if not go:
            raise Fail("no Go toolchain (GO=…, .venv/bin/go or go on PATH)")
        exe = work / "tls_server"
        env = dict(os.environ, GOTOOLCHAIN="local", GOPROXY="off", GOFLAGS="", CGO_ENABLED="0")
        r = subprocess.run([go, "build", "-o", str(exe), str(REPO / "tests/fixtures/go/tls_server.go")], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise Fail(f"go build tls_server.go failed:\n{r.stderr}")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                        "-keyout", str(work / "key.pem"), "-out", str(work / "cert.pem")], check=True, capture_output=True)
        self.port = run.free_port()
        self.child = Child("tls_server", [str(exe), str(self.port), str(work / "cert.pem"), str(work / "key.pem"), "h1"], work)
        if not run.wait_port(self.port, 10):
            raise Fail(f"tls_server did not listen on {self.port}: {self.child.err_tail()}")


def row(rec):
    reqs = max(rec["requests"], 1)
    out = f"{rec['target_rps']:>6} {'on ' if rec['ringtail'] else 'off'} {rec['achieved_rps']:8.0f} {rec['server_us_per_req']:7.1f}"
    if not rec["ringtail"]:
        return out
    us = rec["ringtail_us_per_req"]
    out += f" | rt {rec['ringtail_total_us_per_req']:5.2f} µs (" + " ".join(f"{run.SHORT[c]} {us[c] or 0:.2f}" for c in COMPONENTS) + ")"
    out += f" | kernel {rec['kernel_ns_per_req']:6.0f} ns, {rec['kernel_runs_per_req']:.2f} runs | spans/req {rec['spans_per_req']:.4f}"
    for name, p in sorted(rec["bpf"].items()):
        if p["run_cnt"]:
            out += f"\n        {name:22s} runs/req {p['run_cnt'] / reqs:5.2f}  ns/run {p['run_time_ns'] / p['run_cnt']:7.0f}  ns/req {p['run_time_ns'] / reqs:7.0f}"
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="2000,5000")
    p.add_argument("--duration", type=int, default=10, help="seconds a point")
    p.add_argument("--repeat", type=int, default=2, help="off/on pairs a rate")
    p.add_argument("--conns", type=int, default=20)
    p.add_argument("--bin-dir")
    p.add_argument("--bin-dir-b", help="another build, measured beside --bin-dir's")
    p.add_argument("--out", default=str(run.BENCH / "results" / f"{datetime.date.today()}-go-tls.json"))
    args = p.parse_args()
    if os.geteuid() != 0:
        raise Fail("run as root (ringtail loads eBPF)")
    work = Path(run.tempfile.mkdtemp(prefix="rt-gotls-"))
    work.chmod(0o755)
    tools = run.Tools(args, work)
    tools.check_ringtail()
    variants = [("off", None), ("on", tools)]
    if args.bin_dir_b:
        tools_b = run.Tools(types.SimpleNamespace(**{**vars(args), "bin_dir": args.bin_dir_b}), work)
        tools_b.check_ringtail()
        variants.append(("on-b", tools_b))
    run.TLS = True  # blast -tls
    stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    old = stats.read_text().strip()
    stats.write_text("1")
    ctx = types.SimpleNamespace(tools=tools, work=work, rotel=None, tail_s=0.6, drain_timeout=15.0)
    settings = {"discovery.exe_names": ["^tls_server$"]}
    records = []
    try:
        server = GoTlsServer(tools, work)
        tools.goserver()  # built before the first point
        for rate in [int(r) for r in args.rates.split(",")]:
            for i in range(args.repeat):
                for variant, build in variants:
                    load = lambda: run.blast_load(tools, work, server.port, args.conns, rate, args.duration, f"{rate}-{i}-{variant}")
                    ctx.tools = build or tools
                    rec = run.measure(ctx, server, variant, settings if build else None, load)
                    ctx.tools = tools
                    records.append(rec)
                    print(row(rec), flush=True)
        server.stop()
    finally:
        Child.stop_all()
        stats.write_text(old)
        run.shutil.rmtree(work, ignore_errors=True)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    Path(args.out).parent.mkdir(exist_ok=True)
    Path(args.out).write_text(json.dumps({"command": " ".join(sys.argv), "commit": commit, "records": records}, indent=1, default=str))
    # Means a rate: off → on.
    print("\nrate  build achieved(on)  server µs/req off → on (Δ)  ringtail µs/req  in-kernel ns/req  spans/req")
    for rate in sorted({r["target_rps"] for r in records}):
        off = [r for r in records if r["target_rps"] == rate and not r["ringtail"]]
        so = run.mean([r["server_us_per_req"] for r in off])
        for variant, _ in variants[1:]:
            on = [r for r in records if r["target_rps"] == rate and r["variant"] == variant]
            sn = run.mean([r["server_us_per_req"] for r in on])
            print(f"{rate:5} {variant:5} {run.mean([r['achieved_rps'] for r in on]):9.0f}  {so:7.1f} → {sn:7.1f} ({sn - so:+.1f})"
                  f"  {run.mean([r['ringtail_total_us_per_req'] for r in on]):8.2f}  {run.mean([r['kernel_ns_per_req'] for r in on]):10.0f}"
                  f"  {run.mean([r['spans_per_req'] for r in on]):.4f}")
            for name in PROGRAMS:
                runs = [r["bpf"].get(name, {}).get("run_cnt", 0) / max(r["requests"], 1) for r in on]
                ns = [r["bpf"].get(name, {}).get("run_time_ns", 0) / max(r["requests"], 1) for r in on]
                if any(runs):
                    print(f"      {name:22s} runs/req {run.mean(runs):5.2f}  ns/req {run.mean(ns):7.0f}")
    say(f"records in {args.out}")


if __name__ == "__main__":
    try:
        main()
    except Fail as e:
        say(f"cannot measure: {e}")
        sys.exit(2)
