#!/usr/bin/env python3
"""A/B of the probe-loader's CPU per request: two builds (bin dirs) of ringtail
under the same nginx load (ab, keep-alive, closed loop), alternating.

    sudo python3 bench/wal_ab.py A_BIN_DIR B_BIN_DIR [--requests N] [--rounds R]

Prints, per round and build, the loader's CPU time (utime+stime from
/proc/PID/stat) divided by the requests nginx answered. Used for the cost of
the write-ahead consumer position (issue #14): A = before, B = after.
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def loader_pid(log):
    pid = None
    for line in open(log).read().splitlines():
        if 'component="probe-loader"' in line and 'event="ready"' in line and " pid=" in line:
            pid = int(line.split(" pid=")[1].split()[0])
    return pid


def run(bin_dir, port, requests, work, pinned):
    cfg = os.path.join(work, "ringtail.toml")
    pins = f"/sys/fs/bpf/ringtail-walab-{os.getpid()}"
    with open(cfg, "w") as f:
        f.write(f'[export]\nstdout = false\n[discovery]\nopen_ports = [{port}]\n[pipeline]\nruntime_dir = "{work}/run"\n')
        if pinned:  # B knows probe.pin_dir; A (before #14) does not
            f.write(f'[probe]\npin_dir = "{pins}"\n')
    log = os.path.join(work, "ringtail.log")
    p = subprocess.Popen([os.path.join(bin_dir, "ringtail"), "--config", cfg], stderr=open(log, "w"),
                         env={**os.environ, "RUST_LOG": "info"}, start_new_session=True)
    try:
        end = time.time() + 60
        pid = None
        while time.time() < end and pid is None:
            time.sleep(0.2)
            pid = loader_pid(log)
        if pid is None:
            sys.exit(f"ringtail did not get ready:\n{open(log).read()}")
        time.sleep(1)
        before = cpu_ticks(pid)
        out = subprocess.run(["ab", "-q", "-k", "-c", "4", "-n", str(requests), f"http://127.0.0.1:{port}/ok"],
                             capture_output=True, text=True).stdout
        time.sleep(1)  # the last flush and batch
        after = cpu_ticks(pid)
        done = int(next(l for l in out.splitlines() if l.startswith("Complete requests")).split()[-1])
        return (after - before) / TICK / done * 1e6
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=20)
        subprocess.run(["rm", "-rf", pins])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--requests", type=int, default=30000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="walab-") as www:
        conf = os.path.join(www, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""worker_processes 2; pid {www}/nginx.pid; error_log {www}/error.log warn;
events {{ worker_connections 1024; }}
http {{ access_log off; keepalive_requests 1000000;
  client_body_temp_path {www}/b; proxy_temp_path {www}/p; fastcgi_temp_path {www}/f; uwsgi_temp_path {www}/u; scgi_temp_path {www}/s;
  server {{ listen 127.0.0.1:{port}; location = /ok {{ return 200 "ok\\n"; }} }} }}
""")
        nginx = subprocess.Popen(["nginx", "-c", conf, "-p", www, "-g", "daemon off;"], start_new_session=True)
        try:
            assert wait_port(port)
            res = {"A": [], "B": []}
            for r in range(args.rounds):
                for name, d in (("A", args.a), ("B", args.b)):
                    with tempfile.TemporaryDirectory(prefix="walab-rt-") as work:
                        us = run(d, port, args.requests, work, name == "B")
                    res[name].append(us)
                    print(f"round {r + 1} {name} ({d}): loader {us:.2f} us CPU/request", flush=True)
            for name in res:
                v = sorted(res[name])
                print(f"{name}: median {v[len(v) // 2]:.2f} us/request over {len(v)} rounds ({', '.join(f'{x:.2f}' for x in res[name])})")
        finally:
            os.killpg(nginx.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
