#!/usr/bin/env python3
"""What naming processes from the kernel costs at exec and fork (issue 12).

    sudo python3 bench/exec_cost.py [--bin-dir target/debug] [--execs 2000] [--backend socket]

The loader no longer keeps CAP_SYS_PTRACE to read /proc/PID/{exe,environ}:
its process hooks report every exec (the executable's name and, with
`probe.read_process_env = true`, the first ENV_LEN bytes of the new
environment) and every fork. This starts ringtail with bpf_stats on, runs
`--execs` times `/bin/true` from a shell loop (one fork and one exec each),
with the environment as it is and padded to 16 KiB (the kernel copies 8 KiB
and flags the rest), with `read_process_env` on and off, and prints the
in-kernel time per run of `process_exec` and `process_fork` (run_time_ns
delta / run_cnt delta, from the loader's program fds), and what was lost:
exec or fork records the kernel could not write (the ring full) and
processes named without a record (Prometheus, `export.prometheus`).
"""

import argparse
import os
import socket
import urllib.request
import shutil
import subprocess
import sys
import tempfile
import time

from loader_proc import loader_pid, programs, wait_logged


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lost(port):
    """Records the kernel could not write, and processes named without one."""
    time.sleep(2.5)  # the loader refreshes kernel counters every second
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        for key in ('reason="exec_ring_full"', 'reason="fork_ring_full"', "ringtail_process_info_unknown_total"):
            if key in line and not line.startswith("#"):
                out[key] = out.get(key, 0) + float(line.rsplit(" ", 1)[1])
    return out


def execs(n, env):
    t = time.perf_counter()
    subprocess.run(["sh", "-c", f"i=0; while [ $i -lt {n} ]; do /bin/true; i=$((i+1)); done"], env=env, check=True)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default="target/debug")
    ap.add_argument("--execs", type=int, default=2000)
    ap.add_argument("--backend", default="auto")
    a = ap.parse_args()
    subprocess.run(["sysctl", "-q", "kernel.bpf_stats_enabled=1"], check=True)
    work = tempfile.mkdtemp(prefix="ringtail-execcost-")
    os.chmod(work, 0o755)
    plain = dict(os.environ)
    padded = dict(plain, RINGTAIL_BENCH_PAD="x" * 16384)
    rows = []
    try:
        for read_env in ("true", "false"):
            cfg = os.path.join(work, f"{read_env}.toml")
            prom = free_port()
            with open(cfg, "w") as f:
                f.write(f'[probe]\nbackend = "{a.backend}"\nread_process_env = {read_env}\npin_dir = ""\n'
                        f'[pipeline]\nruntime_dir = "{work}/run-{read_env}"\n[log]\nlevel = "info"\n'
                        f'[export.prometheus]\nlisten = "127.0.0.1:{prom}"\n')
            log = os.path.join(work, f"{read_env}.log")
            proc = subprocess.Popen([os.path.join(a.bin_dir, "ringtail"), "--config", cfg],
                                    stdout=subprocess.DEVNULL, stderr=open(log, "w"))
            try:
                wait_logged(log, "dropped_privileges")
                pid = loader_pid(log)
                for name, env in (("as is", plain), ("16 KiB", padded)):
                    size = sum(len(k) + len(v) + 2 for k, v in env.items())
                    before = programs(pid, names=True)
                    wall = execs(a.execs, env)
                    after = programs(pid, names=True)
                    per = {}
                    for prog in ("process_exec", "process_fork"):
                        dns = after[prog][0] - before[prog][0]
                        dcnt = after[prog][1] - before[prog][1]
                        per[prog] = (dns / dcnt if dcnt else 0.0, dcnt)
                    rows.append((read_env, name, size, wall, per))
                    print(f"read_process_env={read_env} env {name} ({size} B): {a.execs} execs in {wall:.2f} s; "
                          f"process_exec {per['process_exec'][0]:.0f} ns x {per['process_exec'][1]}, "
                          f"process_fork {per['process_fork'][0]:.0f} ns x {per['process_fork'][1]}", flush=True)
                print(f"read_process_env={read_env}: lost or unnamed so far {lost(prom)}", flush=True)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print("| read_process_env | environment | process_exec ns/run | process_fork ns/run | wall per fork+exec |")
    print("|---|---|---|---|---|")
    for read_env, name, size, wall, per in rows:
        print(f"| {read_env} | {name} ({size} B) | {per['process_exec'][0]:.0f} | {per['process_fork'][0]:.0f} | {wall / a.execs * 1e6:.0f} µs |")


if __name__ == "__main__":
    sys.exit(main())
