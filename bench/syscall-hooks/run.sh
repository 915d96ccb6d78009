#!/bin/sh
# The floor of raw vs per-syscall tracepoints on untraced file I/O
# (bench/syscall-hooks/README.md). As root; needs clang, libbpf, bpftool.
set -e
here=$(cd "$(dirname "$0")" && pwd)
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing
bpftool btf dump file /sys/kernel/btf/vmlinux format c > "$w/vmlinux.h"
clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -I"$w" -c "$here/floor.bpf.c" -o "$w/floor.bpf.o"
cc "$here/floor.c" -o "$w/floor" -lbpf
sysctl -q kernel.bpf_stats_enabled=1
# the programs of the one loaded now (a closed one's may linger a moment)
stats() { bpftool prog show | grep -E "name ${mode}_(enter|exit)[a-z_]* " | grep -o "run_time_ns [0-9]*" | awk '{s += $2} END {print s + 0}'; }
dd_s() { /usr/bin/time -f %e dd if=/dev/zero of="$w/x" bs=512 count=200000 2>&1 >/dev/null | tail -1; }
for run in 1 2 3; do
  for mode in off raw tp; do
    if [ $mode = off ]; then
      echo "run $run off: dd $(dd_s) s"
      continue
    fi
    mkfifo "$w/in"
    rm -f "$w/out"
    "$w/floor" "$w/floor.bpf.o" $mode < "$w/in" > "$w/out" &
    pid=$!
    exec 3>"$w/in"
    until grep -qs attached "$w/out"; do sleep 0.1; done
    before=$(stats)
    t=$(dd_s)
    after=$(stats)
    echo "run $run $mode: dd $t s, in-kernel $(( (after - before) / 400000 )) ns per dd syscall"
    exec 3>&-
    wait $pid
    rm "$w/in"
  done
done
