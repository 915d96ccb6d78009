#!/usr/bin/env python3
"""What writing a traceparent costs (probe.propagate, issue 29).

    sudo python3 bench/propagation_cost.py [--bin-dir target/release] [--runs 2] [--duration 10]
        [--keep-alive auto|always|never]

A wrk client (keep-alive, `-t1 -c4`) against nginx (one worker, `return
200`, bench/nginx.conf) on loopback. ringtail traces wrk only (it is
started by a shell that ringtail selects by pid, so its connections are
claimed from the first), with `probe.propagate` off and on, alternated
(off, on, on, off, ...). Reports, per request wrk made: the in-kernel time
of ringtail's programs (kernel.bpf_stats_enabled=1: the run_time_ns delta
of every program the loader holds, and the sk_msg program's alone), and
wrk's own CPU (its rusage, user + system: the sk_msg program runs in wrk's
sends and is charged to it). nginx is not traced: only the client's side
changes. `--keep-alive` sets probe.propagate_keep_alive (left out of the
configuration when not given, for loaders that predate the setting): with
"always" every request wrk sends is framed and written in the kernel;
where FIONREAD reads 0 in a socket map "auto" writes each connection's
first request only, and the connections then leave the map.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from loader_proc import loader_pid, programs, wait_logged

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default="target/release")
    ap.add_argument("--runs", type=int, default=2, help="pairs of (off, on) runs")
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--keep-alive", choices=("auto", "always", "never"), help="probe.propagate_keep_alive")
    a = ap.parse_args()
    keep = f'propagate_keep_alive = "{a.keep_alive}"\n' if a.keep_alive else ""
    for tool in ("wrk", "nginx", "bpftool"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            raise SystemExit(f"{tool} is needed")
    subprocess.run(["sysctl", "-q", "kernel.bpf_stats_enabled=1"], check=True)
    work = tempfile.mkdtemp(prefix="ringtail-propcost-")
    os.chmod(work, 0o755)
    port = 18000 + os.getpid() % 1000
    conf = open(os.path.join(HERE, "nginx.conf")).read()
    conf = conf.replace("@PORT@", str(port)).replace("@DIR@", work).replace("@WORKERS@", "1")
    with open(os.path.join(work, "nginx.conf"), "w") as f:
        f.write(conf)
    nginx = subprocess.Popen([shutil.which("nginx") or "/usr/sbin/nginx", "-c", os.path.join(work, "nginx.conf")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    order = [v for _ in range(a.runs) for v in (("off", "on") if _ % 2 == 0 else ("on", "off"))]
    try:
        time.sleep(1)
        for i, variant in enumerate(order):
            # the shell ringtail selects; it runs wrk once told to
            sh = subprocess.Popen(["sh", "-c", f'read go; exec wrk -t1 -c4 -d{a.duration}s http://127.0.0.1:{port}/'],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            cfg = os.path.join(work, f"{variant}-{i}.toml")
            with open(cfg, "w") as f:
                f.write(f'[probe]\nbackend = "socket"\npin_dir = ""\npropagate = {"true" if variant == "on" else "false"}\n{keep}'
                        f'[discovery]\npids = [{sh.pid}]\n[pipeline]\nruntime_dir = "{work}/run-{i}"\n[log]\nlevel = "info"\n')
            log = os.path.join(work, f"{variant}-{i}.log")
            rt = subprocess.Popen([os.path.join(a.bin_dir, "ringtail"), "--config", cfg],
                                  stdout=subprocess.DEVNULL, stderr=open(log, "w"))
            wait_logged(log, "attached")
            pid = loader_pid(log)
            time.sleep(1)
            before = programs(pid, names=True)
            sh.stdin.write("go\n")
            sh.stdin.flush()
            # wrk is the shell's own process (exec): its CPU from its rusage
            out = sh.stdout.read()
            _, _, usage = os.wait4(sh.pid, 0)
            sh.returncode = 0
            after = programs(pid, names=True)
            rt.terminate()
            rt.wait(timeout=30)
            m = re.search(r"(\d+) requests in", out)
            if not m:
                raise SystemExit(f"wrk printed no count:\n{out}")
            n = int(m.group(1))
            delta = {k: (after[k][0] - before.get(k, (0, 0))[0], after[k][1] - before.get(k, (0, 0))[1]) for k in after}
            total_ns = sum(ns for ns, _ in delta.values())
            msg_ns, msg_runs = delta.get("prop_msg", (0, 0))
            per = {k: delta.get(k, (0, 0))[0] / n for k in ("prop_sockops", "sock_send", "sock_recv")}
            wrk_us = (usage.ru_utime + usage.ru_stime) * 1e6 / n
            rows.append((variant, n, total_ns / n, msg_ns / n, msg_runs, wrk_us, per))
            print(f"run {i + 1} propagate {variant:3}: {n} requests, in-kernel {total_ns / n:.0f} ns a request "
                  f"(sk_msg {msg_ns / n:.0f} ns, {msg_runs} runs), wrk {wrk_us:.2f} us CPU a request", flush=True)
            busy = sorted(((ns, runs, k) for k, (ns, runs) in delta.items() if runs), reverse=True)
            print("    " + ", ".join(f"{k} {ns / n:.0f} ns ({runs / n:.2f} runs)" for ns, runs, k in busy), flush=True)
    finally:
        nginx.terminate()
        nginx.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    print()
    print("| propagate | requests | in-kernel ns a request | `prop_msg` | `prop_sockops` | `sock_send` | `sock_recv` | wrk µs CPU a request |")
    print("|---|---|---|---|---|---|---|---|")
    for v, n, k, m, _, w, per in rows:
        print(f"| {v} | {n} | {k:.0f} | {m:.0f} | {per['prop_sockops']:.0f} | {per['sock_send']:.0f} | {per['sock_recv']:.0f} | {w:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
