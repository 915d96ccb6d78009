#!/bin/bash
# In-kernel cost of probe.carrier: nginx (one worker, clear-text HTTP/1,
# keep-alive) and `bench/goserver -mode blast` at RATE req/s for 10 s, both
# traced (the client by this script's pid, the server by its port), so that
# every request carries the option from the client and is matched at the
# server. Prints, per ringtail program, runs and ns per request (bpf_stats)
# and the total; and ringtail's carrier counters (each option written takes
# 28 bytes of TCP header: 26, padded to 4). CARRIER=1: probe.carrier = true; without, the
# same with it off. Alternate the two in one sitting to compare:
#
#   for i in 1 2; do CARRIER= bench/carrier_cost.sh; CARRIER=1 bench/carrier_cost.sh; done   (as root; defaults: 5000, target/release)
set -euo pipefail
RATE=${1:-5000}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=${2:-$REPO/target/release}
W=$(mktemp -d /tmp/rt-carrier-XXXXXX)
chmod 755 "$W"  # (the actors, another user, make their directories under it)
trap '[ -n "${KEEP:-}" ] && cp "$W/ringtail.log" /tmp/carrier_rt.log; rm -rf "$W"' EXIT
free() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free)
PROM=$(free)
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
        listen 127.0.0.1:$PORT;
        location / { return 200 "ok\n"; }
    }
}
EOF
cat > "$W/rt.toml" <<EOF
[probe]
backend = "socket"
carrier = $([ -n "${CARRIER:-}" ] && echo true || echo false)
[discovery]
open_ports = [$PORT]
pids = [$$]
[export]
stdout = false
[export.prometheus]
listen = "127.0.0.1:$PROM"
[pipeline]
runtime_dir = "$W/run"
EOF
GO=${GO:-$REPO/.venv/bin/go}
(cd "$REPO/bench/goserver" && GOTOOLCHAIN=local GOPROXY=off CGO_ENABLED=0 "$GO" build -o "$W/goserver" main.go)
sysctl -qw kernel.bpf_stats_enabled=1
nginx -c "$W/nginx.conf" -p "$W" & NG=$!
for _ in $(seq 60); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.2; done
RUST_LOG=warn "$BIN/ringtail" --config "$W/rt.toml" > /dev/null 2> "$W/ringtail.log" & RT=$!
for _ in $(seq 60); do grep -q "privileges dropped" "$W/ringtail.log" 2>/dev/null && break; sleep 0.5; done
sleep 1
snap() { bpftool -j prog show | python3 -c '
import json,sys
for p in json.load(sys.stdin):
    n=p.get("name","")
    if n.startswith(("sock_","prop_","process_")): print(p["id"], n, p.get("run_time_ns",0), p.get("run_cnt",0))'; }
snap > "$W/before.txt"
"$W/goserver" -mode blast -addr "127.0.0.1:$PORT" -conns 20 -duration 10s -rate "$RATE" > "$W/blast.json"
snap > "$W/after.txt"
curl -s "http://127.0.0.1:$PROM/metrics" > "$W/metrics.txt" || true; grep '^ringtail_carrier' "$W/metrics.txt" > "$W/carrier.txt" || true; [ -n "${KEEP:-}" ] && cp "$W/metrics.txt" /tmp/carrier_metrics.txt
kill "$RT"; wait "$RT" || true
kill "$NG"; wait "$NG" || true
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
before = {l.split()[0]: l.split() for l in open(f"{w}/before.txt")}
r = json.loads(open(f"{w}/blast.json").read().strip().splitlines()[-1])
n = r["requests"]
print(f"requests {n} in {r['seconds']:.1f} s, errors {r['errors']}")
total = 0
for line in open(f"{w}/after.txt"):
    pid, name, t, c = line.split()
    t, c = int(t), int(c)
    if pid not in before:
        continue
    t -= int(before[pid][2])
    c -= int(before[pid][3])
    total += t
    if c:
        print(f"{name:20s} runs/req {c / n:5.2f}  ns/run {t / c:7.0f}  ns/req {t / n:7.0f}")
print(f"total in-kernel ns/req {total / n:.0f}")
for line in open(f"{w}/carrier.txt"):
    name, v = line.rsplit(None, 1)
    print(f"{name} {float(v):.0f} ({float(v) / n:.3f} a request)")
PY
