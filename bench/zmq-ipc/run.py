#!/usr/bin/env python3
"""IPC throughput of zeromq PUB->SUB over ipc://: stock 0.7.0 against the
vendored patch (vendor/zeromq-0.7.0-ringtail), same machine, same run.

Builds src/main.rs twice (release): against zeromq 0.7.0 from crates.io
("stock"), and with the vendored crate patched in and feature `patched`
("patched", which sets ringtail's limits). Then runs both alternately, the
order flipping every repeat, so that load from anything else on the machine
falls on both; prints the median and range of each. Benchmarks are not
tests: this passes or fails nothing.

    python3 bench/zmq-ipc/run.py              # 10 repeats, ~2 min
    python3 bench/zmq-ipc/run.py --repeats 3 --no-build
"""

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VENDORED = ROOT / "vendor" / "zeromq-0.7.0-ringtail" / "zeromq"
TARGET = Path(os.environ.get("ZMQ_IPC_BENCH_TARGET", ROOT / "target" / "zmq-ipc-bench"))
CASES = [("throughput", "65536", "20000"), ("throughput", "1024", "200000")]


def build():
    env = dict(os.environ, CARGO_TARGET_DIR=str(TARGET))
    cargo = ["cargo", "build", "--release", "--manifest-path", str(HERE / "Cargo.toml")]
    builds = {
        "stock": [],
        "patched": ["--features", "patched", "--config", f'patch.crates-io.zeromq.path="{VENDORED}"'],
    }
    for variant, extra in builds.items():
        subprocess.run(cargo + extra, env=env, check=True)
        binary = TARGET / "release" / "zmq-ipc-bench"
        (TARGET / variant).write_bytes(binary.read_bytes())
        (TARGET / variant).chmod(0o755)


def run(variant, *args):
    out = subprocess.run([str(TARGET / variant), *args], check=True, capture_output=True, text=True, timeout=300).stdout
    line = out.strip().splitlines()[-1]
    return dict(field.split("=", 1) for field in line.split())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--no-build", action="store_true")
    parser.add_argument("--stall-count", default="4000", help="64 KiB messages published to a subscriber that never reads")
    opts = parser.parse_args()
    if not opts.no_build:
        build()
    results = {}
    for repeat in range(opts.repeats):
        order = ["stock", "patched"] if repeat % 2 == 0 else ["patched", "stock"]
        for case in CASES:
            for variant in order:
                r = run(variant, *case)
                results.setdefault((case, variant), []).append(r)
                print(" ".join(f"{k}={v}" for k, v in r.items()), file=sys.stderr)
    print(f"zeromq PUB->SUB over ipc://, one process, window 256, {opts.repeats} alternated repeats (median [min-max])")
    print(f"{'size':>7} {'count':>7} {'variant':>8}  {'messages/s':<26}{'MB/s':<22}{'CPU us/message':<22}{'patched/stock (msgs/s, CPU)'}")
    for case in CASES:
        medians = {}
        for variant in ["stock", "patched"]:
            rs = results[(case, variant)]
            msgs = [float(r["msgs_per_s"]) for r in rs]
            mbs = [float(r["mb_per_s"]) for r in rs]
            cpu = [float(r["cpu_us_per_msg"]) for r in rs]
            medians[variant] = (statistics.median(msgs), statistics.median(cpu))
            ratio = ""
            if variant == "patched":
                ratio = f"{medians['patched'][0] / medians['stock'][0]:.2f}, {medians['patched'][1] / medians['stock'][1]:.2f}"
            print(
                f"{case[1]:>7} {case[2]:>7} {variant:>8}  "
                + f"{statistics.median(msgs):.0f} [{min(msgs):.0f}-{max(msgs):.0f}]".ljust(26)
                + f"{statistics.median(mbs):.1f} [{min(mbs):.0f}-{max(mbs):.0f}]".ljust(22)
                + f"{statistics.median(cpu):.2f} [{min(cpu):.2f}-{max(cpu):.2f}]".ljust(22)
                + ratio
            )
    print(f"a subscriber that never reads, {opts.stall_count} fresh 64 KiB messages published:")
    for variant in ["stock", "patched"]:
        r = run(variant, "stall", opts.stall_count)
        print(f"  {variant:>8}: publisher resident memory +{r['rss_growth_mib']} MiB, {r['dropped']} drops reported by limit_hook")


if __name__ == "__main__":
    main()
