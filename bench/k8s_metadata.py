#!/usr/bin/env python3
"""The k8s-actor's cost: resident memory per 1,000 pods, CPU per pod event.

Runs the stand-in API server (tests/fixtures/kube_apiserver.py, the real
list/watch protocol), then the k8s-actor alone (as the tests do) against it:

1. with no pod (watching another node): resident memory once its (empty) snapshot is written;
2. with --pods pods of the node (2 containers, 4 labels, 2
   resource.opentelemetry.io annotations each, owned by ReplicaSets):
   resident memory once the snapshot holds the last pod, and the snapshot's
   size;
3. --events pods modified once each (a label changed: MODIFIED watch
   events): the actor's CPU time (utime + stime) for them, per event, once
   the snapshot holds the last change.

The pods are written into the stand-in's state file before it starts (its
own renderer, `render_pod`): adding them one request at a time costs the
stand-in (which saves its whole state on each change) minutes.

  python3 bench/k8s_metadata.py --bin $CARGO_TARGET_DIR/release/ringtail-k8s-actor --pods 1000 --events 200
"""

import argparse
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "ringtail-bench-token"
NODE = "node-1"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200, r.status


def cid(n):
    return f"{n + 0xbe0000:016x}" * 4


def pod(i, rev):
    return {
        "namespace": "bench",
        "name": f"app-{i // 10:03d}-7d9f8c6b5-p{i:04d}",
        "node": NODE,
        "owner": {"kind": "ReplicaSet", "name": f"app-{i // 10:03d}-7d9f8c6b5"},
        "labels": {
            "app.kubernetes.io/name": f"app-{i // 10:03d}",
            "app.kubernetes.io/version": "1.4.2",
            "pod-template-hash": "7d9f8c6b5",
            "rev": f"{rev}-{i:04d}",
        },
        "annotations": {
            "resource.opentelemetry.io/deployment.environment.name": "prod",
            "resource.opentelemetry.io/team": "payments",
        },
        "containers": [
            {"name": "app", "id": cid(2 * i), "image": f"registry.example/app-{i // 10:03d}:1.4.2"},
            {"name": "proxy", "id": cid(2 * i + 1), "image": "registry.example/proxy:2.0"},
        ],
    }


def status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    raise KeyError(key)


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for(pred, what, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.05)
    sys.exit(f"timed out waiting for {what}")


def idle(pid, quiet=1.0):
    """Until the process has used no CPU for `quiet` seconds."""
    last = cpu_s(pid)
    while True:
        time.sleep(quiet)
        now = cpu_s(pid)
        if now == last:
            return now
        last = now


def snapshot_has(path, needle):
    try:
        with open(path, "rb") as f:
            return needle in f.read()
    except FileNotFoundError:
        return False


def start_actor(binary, work, port, name, pods, node=NODE):
    run = os.path.join(work, name, "run")
    os.makedirs(os.path.join(run, "actors"))
    kubeconfig = os.path.join(work, "kubeconfig")
    cfg = os.path.join(work, name, "ringtail.toml")
    with open(cfg, "w") as f:
        f.write(
            f'[pipeline]\nruntime_dir = "{run}"\n[kubernetes]\nkubeconfig = "{kubeconfig}"\nnode_name = "{node}"\n'
            f"max_pods = {max(pods, 1)}\nwell_known_labels = true\n"
        )
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    env["RUST_LOG"] = "warn"
    err = open(os.path.join(work, name, "stderr"), "w")
    p = subprocess.Popen([binary, "--config", cfg], stdout=subprocess.DEVNULL, stderr=err, env=env)
    return p, os.path.join(run, "actors", "k8s", "pods.msgpack")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the ringtail-k8s-actor binary")
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--events", type=int, default=200)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="rt-k8sbench-")
    port = free_port()
    spec = importlib.util.spec_from_file_location("kube_apiserver", os.path.join(ROOT, "tests/fixtures/kube_apiserver.py"))
    fixture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixture)
    pods = {}
    for i in range(args.pods):
        d = pod(i, "a")
        pods[d["namespace"] + "/" + d["name"]] = fixture.render_pod(d, f"00000000-0000-4000-8000-{i:012d}", str(1001 + i), time.time())
    with open(os.path.join(work, "state.json"), "w") as f:
        json.dump({"rv": 1001 + args.pods, "pods": pods, "jobs": {}, "floor": 0}, f)
    api_log = open(os.path.join(work, "apiserver.log"), "w")
    api = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "tests/fixtures/kube_apiserver.py"), "--port", str(port), "--state",
         os.path.join(work, "state.json"), "--token", TOKEN],
        stdout=subprocess.DEVNULL, stderr=api_log)
    with open(os.path.join(work, "kubeconfig"), "w") as f:
        f.write(
            f"apiVersion: v1\nkind: Config\nclusters:\n- name: b\n  cluster:\n    server: http://127.0.0.1:{port}\n"
            f"users:\n- name: r\n  user:\n    token: {TOKEN}\ncontexts:\n- name: b\n  context:\n    cluster: b\n    user: r\n"
            "current-context: b\n")
    actors = []
    try:
        wait_for(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, "the stand-in")
        empty, empty_snap = start_actor(args.bin, work, port, "empty", 0, node="node-without-pods")
        actors.append(empty)
        wait_for(lambda: os.path.exists(empty_snap), "the empty snapshot")
        idle(empty.pid)
        rss_empty = status(empty.pid, "VmRSS:")
        empty.kill()

        full, snap = start_actor(args.bin, work, port, "full", args.pods)
        actors.append(full)
        last = pod(args.pods - 1, "a")["labels"]["rev"].encode()
        wait_for(lambda: snapshot_has(snap, last), "the snapshot with every pod")
        cpu0 = idle(full.pid)
        rss_full = status(full.pid, "VmRSS:")
        hwm_full = status(full.pid, "VmHWM:")
        size = os.path.getsize(snap)

        t0 = time.time()
        for i in range(args.events):
            post(port, "/_test/pod", pod(i, "b"))
        last = pod(args.events - 1, "b")["labels"]["rev"].encode()
        wait_for(lambda: snapshot_has(snap, last), "the snapshot with every change")
        cpu1 = idle(full.pid)
        events_s = time.time() - t0
        rss_after = status(full.pid, "VmRSS:")
        print(json.dumps({
            "pods": args.pods,
            "containers": 2 * args.pods,
            "rss_kb_no_pod": rss_empty,
            "rss_kb_with_pods": rss_full,
            "rss_hwm_kb_with_pods": hwm_full,
            "rss_kb_per_1000_pods": round((rss_full - rss_empty) * 1000 / args.pods),
            "rss_kb_after_events": rss_after,
            "snapshot_bytes": size,
            "cpu_ms_per_pod_event": round((cpu1 - cpu0) * 1000 / args.events, 3),
            "events": args.events,
            "events_wall_s": round(events_s, 2),
        }, indent=1))
    finally:
        for p in actors:
            p.kill()
            p.wait()
        api.kill()
        api.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
