#!/bin/bash
# Per-program in-kernel cost of HTTPS capture: nginx with `ssl` (one worker,
# self-signed certificate), or with SERVER=node Node's `https`
# (tests/fixtures/node/https.js), ringtail selecting its port, 10 s of
# `bench/goserver -mode blast -tls` at RATE req/s; prints, per ringtail
# program, runs and ns per request (bpf_stats, by program name), and the
# server's CPU per request (/proc/PID/stat). OFF=1: the same without
# ringtail (the server's CPU alone). PINS=1: ringtail pins its programs
# (a pin directory under /sys/fs/bpf: the TLS attacher runs, as in the
# shipped configuration; without, nothing is pinned and the files mapped
# at start are attached by the loader). UNSELECTED=1: ringtail selects
# another port, not the server's (a busy server it does not trace).
# COPY=1: nginx runs on copies of libssl and libcrypto in a directory of
# its own (LD_LIBRARY_PATH: what a container image brings), not the
# host's files.
#
#   sudo [SERVER=node] [OFF=1] [PINS=1] [UNSELECTED=1] [COPY=1] bench/tls_prog_stats.sh [RATE] [BIN_DIR]    (defaults: 5000, target/release)
#
# Run it under the e2e lock on a shared machine:
#   flock /tmp/ringtail-e2e.lock bench/tls_prog_stats.sh 5000
set -euo pipefail
RATE=${1:-5000}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=${2:-$REPO/target/release}
W=$(mktemp -d /tmp/rt-tlsstats-XXXXXX)
trap 'rm -rf "$W"; [ -n "${PIN_DIR:-}" ] && rm -rf "$PIN_DIR"' EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost -keyout "$W/key.pem" -out "$W/cert.pem" 2>/dev/null
cat > "$W/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $W/nginx.pid;
error_log $W/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path $W/body;
    proxy_temp_path $W/proxy;
    fastcgi_temp_path $W/fastcgi;
    uwsgi_temp_path $W/uwsgi;
    scgi_temp_path $W/scgi;
    server {
        listen 127.0.0.1:$PORT ssl;
        ssl_certificate $W/cert.pem;
        ssl_certificate_key $W/key.pem;
        location / { return 200 "ok\n"; }
    }
}
EOF
PIN_DIR=""
[ -n "${PINS:-}" ] && PIN_DIR="/sys/fs/bpf/ringtail-bench-$$"
SELECTED=$PORT
[ -n "${UNSELECTED:-}" ] && SELECTED=$((PORT == 65535 ? PORT - 1 : PORT + 1))
cat > "$W/rt.toml" <<EOF
[probe]
pin_dir = "$PIN_DIR"
[discovery]
open_ports = [$SELECTED]
[export]
stdout = false
[pipeline]
runtime_dir = "$W/run"
EOF
GO=${GO:-$REPO/.venv/bin/go}
(cd "$REPO/bench/goserver" && GOTOOLCHAIN=local GOPROXY=off CGO_ENABLED=0 "$GO" build -o "$W/goserver" main.go)
sysctl -qw kernel.bpf_stats_enabled=1
if [ "${SERVER:-nginx}" = node ]; then
    node "$REPO/tests/fixtures/node/https.js" server "$PORT" "$W/cert.pem" "$W/key.pem" & NG=$!
elif [ -n "${COPY:-}" ]; then
    mkdir "$W/lib"
    for f in libssl.so.3 libcrypto.so.3; do cp "$(ldconfig -p | awk -v f="$f" '$1 == f && /x86-64/ {print $NF; exit}')" "$W/lib/$f"; done
    LD_LIBRARY_PATH="$W/lib" nginx -c "$W/nginx.conf" -p "$W" & NG=$!
else
    nginx -c "$W/nginx.conf" -p "$W" & NG=$!
fi
for _ in $(seq 60); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.2; done
RT=
if [ -z "${OFF:-}" ]; then
    RUST_LOG=warn "$BIN/ringtail" --config "$W/rt.toml" > /dev/null 2> "$W/ringtail.log" & RT=$!
    for _ in $(seq 60); do grep -q "privileges dropped" "$W/ringtail.log" 2>/dev/null && break; sleep 0.5; done
fi
sleep 1
# the server's CPU ticks: nginx's worker (the master's child) or node itself
SRV=$(pgrep -P "$NG" | head -1 || true)
SRV=${SRV:-$NG}
ticks() { awk '{print $14 + $15}' "/proc/$SRV/stat"; }
T0=$(ticks)
snap() { bpftool -j prog show | python3 -c '
import json,sys
for p in json.load(sys.stdin):
    n=p.get("name","")
    if n.startswith(("tls_","sock_","process_","sys_")): print(p["id"], n, p.get("run_time_ns",0), p.get("run_cnt",0))'; }
snap > "$W/before.txt"
"$W/goserver" -mode blast -tls -addr "127.0.0.1:$PORT" -conns 20 -duration 10s -rate "$RATE" > "$W/blast.json"
snap > "$W/after.txt"
T1=$(ticks)
[ -n "$RT" ] && { kill "$RT"; wait "$RT" || true; }
kill "$NG"; wait "$NG" || true
python3 - "$W" "$((T1 - T0))" "$(getconf CLK_TCK)" <<'PY'
import json, sys
w = sys.argv[1]
before = {l.split()[0]: l.split() for l in open(f"{w}/before.txt")}
r = json.loads(open(f"{w}/blast.json").read().strip().splitlines()[-1])
n = r["requests"]
print(f"requests {n} in {r['seconds']:.1f} s, errors {r['errors']}")
print(f"server CPU µs/req {int(sys.argv[2]) / int(sys.argv[3]) * 1e6 / n:.1f}")
total = 0
for line in open(f"{w}/after.txt"):
    pid, name, t, c = line.split()
    t, c = int(t), int(c)
    if pid not in before:
        continue  # another ringtail's program, loaded meanwhile
    t -= int(before[pid][2])
    c -= int(before[pid][3])
    total += t
    if c:
        print(f"{name:20s} runs/req {c / n:5.2f}  ns/run {t / c:7.0f}  ns/req {t / n:7.0f}")
print(f"total in-kernel ns/req {total / n:.0f}")
PY
