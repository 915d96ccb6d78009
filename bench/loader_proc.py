"""A running ringtail's probe-loader, seen from outside: its pid and the
in-kernel statistics of the eBPF programs it holds (for the bench scripts
that start ringtail themselves: dd_cost.py, exec_cost.py).

The statistics need `sysctl kernel.bpf_stats_enabled=1`."""

import json
import os
import re
import subprocess
import time


def programs(pid, names=False):
    """{key: (run_time_ns, run_cnt)} of the eBPF programs `pid` holds a
    descriptor of; key is the program id, or its name with `names` (one
    `bpftool prog show` a program)."""
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            text = open(f"/proc/{pid}/fdinfo/{fd}").read()
        except OSError:
            continue
        kv = dict((k.strip(), v.strip()) for k, v in (line.split(":", 1) for line in text.splitlines() if ":" in line))
        if "run_time_ns" not in kv or "prog_id" not in kv:
            continue
        key = kv["prog_id"]
        if names:
            info = json.loads(subprocess.run(["bpftool", "-j", "prog", "show", "id", key],
                                             check=True, capture_output=True, text=True).stdout)
            key = info.get("name", key)
        out[key] = (int(kv["run_time_ns"]), int(kv["run_cnt"]))
    return out


def loader_pid(log, seconds=30):
    """The pid of the probe-loader that the supervisor writing `log` started
    last (its `event="started"` line; the loader's command line names no
    file of ours: its configuration comes in a memfd)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lines = [l for l in open(log).read().splitlines()
                 if 'component="probe-loader"' in l and 'event="started"' in l] if os.path.exists(log) else []
        m = re.search(r" pid=(\d+)", lines[-1]) if lines else None
        if m and os.path.exists(f"/proc/{m.group(1)}"):
            return int(m.group(1))
        time.sleep(0.1)
    raise SystemExit(f"no probe-loader started in {log}")


def wait_logged(log, event, seconds=60):
    """Waits until ringtail's log file `log` holds `event="EVENT"`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.path.exists(log) and f'event="{event}"' in open(log).read():
            return
        time.sleep(0.1)
    raise SystemExit(f'ringtail did not log event="{event}": {open(log).read()[-2000:] if os.path.exists(log) else "(no log)"}')
