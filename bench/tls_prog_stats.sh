#!/bin/bash
# per-program bpf_stats of ringtail's programs over a 10 s TLS load at $1 req/s
set -e
cd /tmp/tlssmoke
sysctl -qw kernel.bpf_stats_enabled=1
nginx -c /tmp/tlssmoke/nginx.conf -p /tmp/tlssmoke & NG=$!
sleep 1
RUST_LOG=warn /work/wt/tls/target/release/ringtail --config rt.toml > /dev/null 2> err.txt & RT=$!
sleep 6
snap() { bpftool -j prog show | python3 -c '
import json,sys
for p in json.load(sys.stdin):
    n=p.get("name","")
    if n.startswith(("tls_","sock_","process_")): print(p["id"], n, p.get("run_time_ns",0), p.get("run_cnt",0))'; }
snap > before.txt
./goserver -mode blast -tls -addr 127.0.0.1:18443 -conns 20 -duration 10s -rate $1 > blast.json
snap > after.txt
kill $RT; wait $RT || true; kill $NG; wait $NG || true
python3 - "$1" <<'PY'
import json,sys
b={l.split()[0]:l.split() for l in open("before.txt")}
r=json.loads(open("blast.json").read().strip().splitlines()[-1]); n=r["requests"]
print(f"requests {n} errors {r['errors']}")
tot=0
for l in open("after.txt"):
    i,name,t,c=l.split(); t=int(t); c=int(c)
    if i in b: t-=int(b[i][2]); c-=int(b[i][3])
    tot+=t
    if c: print(f"{name:20s} runs/req {c/n:5.2f}  ns/run {t/max(c,1):7.0f}  ns/req {t/n:7.0f}")
print(f"total in-kernel ns/req {tot/n:.0f}")
PY
