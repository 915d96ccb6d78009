#!/usr/bin/env bash
# In-kernel cost per request of each capture backend on each kernel of the
# kernel matrix (tests/kernels/) and on this host's own kernel: nginx (one
# worker) answering `ab -k` keep-alive requests, ringtail selecting its
# port, bpf_stats summed over ringtail's programs (run time and runs per
# request). Prints one line per kernel and backend:
#
#   kernel=6.12.117+deb13-cloud-amd64 backend=socket requests=4000 runs_per_req=5.00 ns_per_req=12345 emulated=yes
#
# Under the matrix's emulation (qemu TCG) a nanosecond is not the host's:
# compare backends within one kernel (the socket/syscalls ratio), never a
# guest's figure with the host's.
#
#   sudo bench/kernels.sh [BIN_DIR]      (default target/release, else target/debug)
#
# In-kernel time does not depend on the binaries' build (the programs are
# the same); the debug build only makes starts slower. Run it alone: it
# starts ringtail on this host too (RINGTAIL_HOST_LOCK=FILE: that part
# under `flock -o FILE`).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-}
if [ -z "$BIN" ]; then
    BIN=$REPO/target/release
    [ -x "$BIN/ringtail" ] || BIN=$REPO/target/debug
fi
BIN=$(realpath "$BIN")
[ -x "$BIN/ringtail" ] || { echo "no ringtail in $BIN (cargo build first)" >&2; exit 1; }
REQUESTS=${REQUESTS:-4000}

# The part that runs on each kernel (a guest's script, or here).
measure() {
    cat <<EOF
set -eu
BIN=$BIN REQUESTS=$REQUESTS EMULATED=\${EMULATED:-yes}
EOF
    cat <<'EOF'
W=$(mktemp -d /tmp/rt-kbench-XXXXXX)
PORT=18080
cat > "$W/nginx.conf" <<NGX
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
    server { listen 127.0.0.1:$PORT; location / { return 200 "ok\n"; } }
}
NGX
nginx -c "$W/nginx.conf" -p "$W" & NG=$!
sysctl -qw kernel.bpf_stats_enabled=1
# ids of the programs loaded now
ids() { bpftool prog show -j | python3 -c 'import json, sys; print(" ".join(str(p["id"]) for p in json.load(sys.stdin)))'; }
# ns and runs of the programs loaded since `ids` gave $1 (this ringtail's:
# another's pinned programs keep running and must not count), summed
stats() {
    bpftool prog show -j | python3 -c '
import json, sys
before = set(sys.argv[1].split())
progs = [p for p in json.load(sys.stdin) if str(p["id"]) not in before]
print(sum(p.get("run_time_ns", 0) for p in progs), sum(p.get("run_cnt", 0) for p in progs))' "$1"
}
backends=$("$BIN/ringtail" check-kernel 2>/dev/null | sed -n 's/^\(socket\|syscall\) tracepoints *ok.*/\1/p' | sed 's/syscall/syscalls/')
for b in $backends; do
    printf '[probe]\nbackend = "%s"\npin_dir = ""\n[discovery]\nopen_ports = [%s]\n[export]\nstdout = false\n[pipeline]\nruntime_dir = "%s/run-%s"\n' \
        "$b" "$PORT" "$W" "$b" >"$W/$b.toml"
    before=$(ids)
    "$BIN/ringtail" --config "$W/$b.toml" >"$W/$b.out" 2>"$W/$b.err" & RT=$!
    for _ in $(seq 1200); do grep -q 'component="probe-loader".*event="ready"' "$W/$b.err" && break; sleep 0.5; done
    ab -q -k -n 200 -c 4 "http://127.0.0.1:$PORT/" >/dev/null 2>&1   # warm-up
    set -- $(stats "$before")
    t0=$1 r0=$2
    ab -q -k -n "$REQUESTS" -c 4 "http://127.0.0.1:$PORT/" >"$W/ab.out" 2>&1
    set -- $(stats "$before")
    done_reqs=$(sed -n 's/^Complete requests: *//p' "$W/ab.out")
    python3 -c "import sys; t=$1-$t0; r=$2-$r0; n=$done_reqs
print(f'kernel=$(uname -r) backend=$b requests={n} runs_per_req={r/n:.2f} ns_per_req={t/n:.0f} emulated=$EMULATED')"
    kill "$RT"; wait "$RT" || true
done
kill "$NG"; wait "$NG" || true
rm -rf "$W"
EOF
}

KVM="$REPO/tests/kernels/kernels.sh"
"$KVM" prepare
script=$(mktemp /var/tmp/rt-kbench.XXXXXX.sh)
trap 'rm -f "$script"' EXIT
measure >"$script"
logs=${RINGTAIL_KERNEL_LOGS:-/var/cache/ringtail/kernels/logs}
mkdir -p "$logs"
"$KVM" list | while read -r kver _; do
    RINGTAIL_VM_SMP=2 "$KVM" boot "$kver" "$script" >"$logs/bench-$kver.log" 2>&1 || true
    # (the first line a guest prints follows the firmware's escape codes)
    grep -o 'kernel=[^ ]* backend=.*' "$logs/bench-$kver.log" || echo "kernel=$kver: the measurement failed (console: $logs/bench-$kver.log)" >&2
done
# The host: alone (RINGTAIL_HOST_LOCK names a lock file to take first on a
# shared machine, as the tests' helpers do).
if [ -n "${RINGTAIL_HOST_LOCK:-}" ]; then
    EMULATED=no flock -o "$RINGTAIL_HOST_LOCK" bash "$script" | grep '^kernel='
else
    EMULATED=no bash "$script" | grep '^kernel='
fi
