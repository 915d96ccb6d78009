#!/usr/bin/env python3
"""What ringtail costs a process doing file I/O it does not trace (issue 16).

    sudo python3 bench/dd_cost.py [--bin-dir target/release] [--runs 5] [--untraced]

Runs `dd if=/dev/zero of=<tmp> bs=512 count=200000` (200,000 reads of
/dev/zero and 200,000 writes to a file: 400,000 syscalls the syscall backend's
programs see) without ringtail, then under ringtail with `probe.backend =
"socket"` and `"syscalls"`, alternating, `--runs` times each. ringtail traces
every process (no discovery keys), so dd is a traced process whose fds are not
sockets: the worst case for the syscall backend. With `--untraced`, ringtail
traces only executables named `nginx` (`discovery.exe_names`): dd is a process
it does not trace. Prints dd's wall time and,
with kernel.bpf_stats_enabled=1, the in-kernel time of ringtail's programs
per dd syscall (their run_time_ns delta over the dd run / 400,000).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from loader_proc import loader_pid, programs, wait_logged

COUNT = 200_000


def bpf_ns(pid):
    """Sum of run_time_ns and run_cnt over the eBPF programs `pid` holds."""
    stats = programs(pid).values()
    return sum(ns for ns, _ in stats), sum(cnt for _, cnt in stats)


def dd(target):
    t = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=512", f"count={COUNT}"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default="target/release")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--untraced", action="store_true", help="trace only nginx: dd is not traced")
    a = ap.parse_args()
    subprocess.run(["sysctl", "-q", "kernel.bpf_stats_enabled=1"], check=True)
    work = tempfile.mkdtemp(prefix="ringtail-ddcost-")
    os.chmod(work, 0o755)
    target = os.path.join(work, "x")
    results = {"off": [], "socket": [], "syscalls": []}
    kernel = {"socket": [], "syscalls": []}
    try:
        for run in range(a.runs):
            for variant in ("off", "socket", "syscalls"):
                proc = None
                if variant != "off":
                    cfg = os.path.join(work, f"{variant}.toml")
                    with open(cfg, "w") as f:
                        f.write(f'[probe]\nbackend = "{variant}"\n[pipeline]\nruntime_dir = "{work}/run-{variant}"\n'
                                '[log]\nlevel = "info"\n'
                                + ('[discovery]\nexe_names = ["nginx"]\n' if a.untraced else ""))
                    log = os.path.join(work, f"{variant}-{run}.log")
                    proc = subprocess.Popen([os.path.join(a.bin_dir, "ringtail"), "--config", cfg],
                                            stdout=subprocess.DEVNULL, stderr=open(log, "w"))
                    wait_logged(log, "attached")
                    pid = loader_pid(log)
                    time.sleep(0.5)
                    before = bpf_ns(pid)
                wall = dd(target)
                if proc:
                    after = bpf_ns(pid)
                    kernel[variant].append((after[0] - before[0]) / (2 * COUNT))
                    proc.terminate()
                    proc.wait(timeout=20)
                results[variant].append(wall)
                print(f"run {run + 1} {variant:9} dd {wall:.3f} s"
                      + (f", ringtail in-kernel {kernel[variant][-1]:.1f} ns per dd syscall" if proc else ""), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    mean = lambda xs: sum(xs) / len(xs)
    off = mean(results["off"])
    print()
    print("| ringtail | dd wall s (mean of %d) | vs off | in-kernel ns per dd syscall |" % a.runs)
    print("|---|---|---|---|")
    for v in ("off", "socket", "syscalls"):
        k = f"{mean(kernel[v]):.1f}" if v in kernel else "–"
        print(f"| {v} | {mean(results[v]):.3f} (min {min(results[v]):.3f}) | {mean(results[v]) / off:.3f}x | {k} |")


if __name__ == "__main__":
    sys.exit(main())
