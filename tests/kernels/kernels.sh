#!/usr/bin/env bash
# The kernel matrix: Debian's own kernels, booted under qemu, running
# ringtail's binaries and end-to-end tests built on this host.
#
#   kernels.sh prepare                 fetch the kernels, build the initramfs (cached)
#   kernels.sh list                    the kernels of the matrix, one "<version> <vmlinuz>" a line
#   kernels.sh boot KVER SCRIPT        boot KVER, run SCRIPT (a host path) inside as root;
#                                      the console on stdout, the exit status the script's
#   kernels.sh matrix TESTBIN BIN_DIR  run the kernel-matrix tests (tests/tests/kernels.rs, in
#                                      the end-to-end executable TESTBIN) in every kernel (RINGTAIL_KERNELS="5.10
#                                      6.1": only those), two guests at a time; each guest's
#                                      console in $RINGTAIL_KERNEL_LOGS
#
# Why this shape (docs/kernels.md has the whole story):
# - The kernels are Debian's cloud images of each release's default series
#   (bullseye 5.10, bookworm 6.1, trixie 6.12): the metapackage
#   `linux-image-cloud-amd64` of each suite names the version, `apt-get
#   download` through a private package list fetches it, `dpkg-deb -x`
#   unpacks it. Nothing is installed on the host and /etc/apt is untouched.
#   What was fetched is kept in $RINGTAIL_KERNEL_CACHE (default
#   /var/cache/ringtail/kernels) and used again without the network;
#   RINGTAIL_KERNELS_REFRESH=1 looks the versions up again.
# - The guest shares the host's root filesystem read-only over virtiofs
#   (the cloud kernels have no 9p): the binaries, the test executables,
#   python3, nginx and curl are the host's own, so the guest runs exactly
#   what the host's suite ran. /tmp, /run and /var/tmp are tmpfs in it.
# - qemu runs under TCG (`-accel tcg`): /dev/kvm on the machines this
#   project runs on is a nested hypervisor that cannot boot stock kernels.
#   `boot` gives a guest two vCPUs (a host thread each, MTTCG); `matrix`
#   runs two guests of one vCPU each at once, which keeps both host CPUs
#   busy (a test in a guest is mostly one busy process at a time).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${RINGTAIL_KERNEL_CACHE:-/var/cache/ringtail/kernels}

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'kernels.sh: %s\n' "$*" >&2; exit 1; }

# suite:series, oldest first. The series is what README's kernel table names.
SUITES=(bullseye:5.10 bookworm:6.1 trixie:6.12)

# What the matrix runs in each series (tests/tests/kernels.rs, the
# `kernels::` module of the end-to-end executable): everything on the
# default backend everywhere, and the syscall backend too where the default
# is the socket one (6.3+).
matrix_tests() {
    local common="kernels::check_kernel_agrees_with_the_kernel_table kernels::every_exchange_on_the_default_backend"
    case "$1" in
        5.* | 6.[0-2]) echo "$common" ;;
        *) echo "$common kernels::every_exchange_on_the_syscall_backend" ;;
    esac
}

# The virtio and fuse modules the initramfs must load before it can mount
# the host root (6.12's cloud kernel has them built in), then the network
# card's (the pair's guests have one; every kernel builds it as a module).
MODULES=(virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci fuse virtiofs failover net_failover virtio_net)

apt_private() {
    apt-get -q -o Dir::Etc::sourcelist="$CACHE/apt/sources.list" -o Dir::Etc::sourceparts=- \
        -o Dir::State::Lists="$CACHE/apt/lists" -o Dir::Cache="$CACHE/apt/cache" "$@"
}

# The versioned package the suite's cloud metapackage depends on today.
resolve() {
    local suite=$1
    apt-cache -o Dir::Etc::sourcelist="$CACHE/apt/sources.list" -o Dir::Etc::sourceparts=- \
        -o Dir::State::Lists="$CACHE/apt/lists" -o Dir::Cache="$CACHE/apt/cache" \
        show "linux-image-cloud-amd64/$suite" 2>/dev/null |
        sed -n 's/^Depends: .*\(linux-image-[^ ,]*-cloud-amd64\) .*/\1/p' | head -n 1
}

prepare() {
    for t in qemu-system-x86_64 busybox cpio dpkg-deb; do
        command -v "$t" >/dev/null || die "$t is missing (apt-get install qemu-system-x86 busybox-static cpio)"
    done
    [ -x /usr/lib/qemu/virtiofsd ] || die "/usr/lib/qemu/virtiofsd is missing (Debian's qemu-system-common)"
    mkdir -p "$CACHE/apt/lists/partial" "$CACHE/apt/cache/archives/partial" "$CACHE/debs" "$CACHE/k"
    local suite series pkg need=0
    for s in "${SUITES[@]}"; do
        series=${s#*:}
        if [ ! -f "$CACHE/k/$series.version" ] || [ -n "${RINGTAIL_KERNELS_REFRESH:-}" ]; then need=1; fi
    done
    if [ "$need" = 1 ]; then
        for s in "${SUITES[@]}"; do
            printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian %s main\n' "${s%%:*}"
        done >"$CACHE/apt/sources.list"
        say "kernels: reading the package lists of ${SUITES[*]}"
        apt_private update >/dev/null
        for s in "${SUITES[@]}"; do
            suite=${s%%:*} series=${s#*:}
            pkg=$(resolve "$suite")
            [ -n "$pkg" ] || die "no linux-image-cloud-amd64 in $suite"
            local kver=${pkg#linux-image-}
            case "$kver" in "$series".*) ;; *) die "$suite's cloud kernel is $kver, not the $series series" ;; esac
            if [ ! -f "$CACHE/k/$kver/boot/vmlinuz-$kver" ]; then
                say "kernels: apt-get download $pkg"
                rm -f "$CACHE/debs/${pkg}"_*.deb
                (cd "$CACHE/debs" && apt_private download "$pkg" >/dev/null 2>&1) || die "apt-get download $pkg failed"
                rm -rf "$CACHE/k/$kver.tmp"
                dpkg-deb -x "$CACHE/debs/${pkg}"_*.deb "$CACHE/k/$kver.tmp"
                rm -rf "$CACHE/k/$kver" && mv "$CACHE/k/$kver.tmp" "$CACHE/k/$kver"
                rm -f "$CACHE/debs/${pkg}"_*.deb
            fi
            echo "$kver" >"$CACHE/k/$series.version"
        done
    fi
    # The initramfs: busybox, the modules each kernel needs, our init. Built
    # again when init changes or a kernel was added.
    local stamp
    stamp=$( (cat "$HERE/init" "$CACHE"/k/*.version /bin/busybox && echo "${MODULES[*]}") | sha256sum | cut -c1-16)
    if [ ! -f "$CACHE/initrd-$stamp.gz" ]; then
        say "kernels: building the initramfs"
        local root="$CACHE/initramfs.tmp"
        rm -rf "$root"
        mkdir -p "$root"/{bin,dev,proc,sys,newroot,lib/modules}
        cp /bin/busybox "$root/bin/"
        for a in sh mount insmod sed cp mkdir chroot ip poweroff sleep env uname hostname; do ln -s busybox "$root/bin/$a"; done
        for s in "${SUITES[@]}"; do
            local kver f
            kver=$(cat "$CACHE/k/${s#*:}.version")
            for m in "${MODULES[@]}"; do
                # (trixie's are under usr/ and xz-compressed: busybox's
                # insmod wants them plain)
                f=$(find "$CACHE/k/$kver/lib/modules/$kver" "$CACHE/k/$kver/usr/lib/modules/$kver" \
                    \( -name "$m.ko" -o -name "$m.ko.xz" \) 2>/dev/null | head -n 1 || true)
                case "$f" in
                "") ;;
                *.xz) mkdir -p "$root/lib/modules/$kver" && xz -dc "$f" >"$root/lib/modules/$kver/$m.ko" ;;
                *) install -D -m644 "$f" "$root/lib/modules/$kver/$m.ko" ;;
                esac
            done
        done
        install -m755 "$HERE/init" "$root/init"
        (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$CACHE/initrd-$stamp.gz.tmp"
        mv "$CACHE/initrd-$stamp.gz.tmp" "$CACHE/initrd-$stamp.gz"
        find "$CACHE" -maxdepth 1 -name 'initrd-*.gz' ! -name "initrd-$stamp.gz" -delete
        rm -rf "$root"
    fi
    ln -sfn "initrd-$stamp.gz" "$CACHE/initrd.gz"
}

list() {
    for s in "${SUITES[@]}"; do
        local kver
        kver=$(cat "$CACHE/k/${s#*:}.version" 2>/dev/null) || die "run kernels.sh prepare first"
        echo "$kver $CACHE/k/$kver/boot/vmlinuz-$kver"
    done
}

# boot KVER SCRIPT: the guest's console goes to stdout; the exit status is
# the script's (255 if the guest never said, e.g. a kernel panic or the
# timeout, RINGTAIL_VM_TIMEOUT seconds, default 1800).
boot() {
    local kver=$1 script=$2
    local vmlinuz="$CACHE/k/$kver/boot/vmlinuz-$kver"
    [ -f "$vmlinuz" ] || die "no kernel $kver in $CACHE (kernels.sh prepare)"
    [ -f "$CACHE/initrd.gz" ] || die "no initramfs (kernels.sh prepare)"
    script=$(realpath "$script")
    local work sock log vpid
    work=$(mktemp -d /var/tmp/rt-vm.XXXXXX)
    sock="$work/vfs.sock"
    log="$work/console.log"
    mkdir "$work/root"
    # virtiofsd in a mount namespace of its own serves a read-only,
    # non-recursive bind of / (the guest mounts its own /proc, /sys, /dev).
    unshare -m sh -c "mount --bind / '$work/root' && mount -o remount,bind,ro '$work/root' && \
        exec /usr/lib/qemu/virtiofsd --socket-path='$sock' -o source='$work/root' -o cache=always -o log_level=err" &
    vpid=$!
    local i
    for i in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
    [ -S "$sock" ] || { kill "$vpid" 2>/dev/null; die "virtiofsd did not start"; }
    local smp=${RINGTAIL_VM_SMP:-2} mem=${RINGTAIL_VM_MEMORY_MB:-3072}
    [ "$(nproc)" -ge "$smp" ] || smp=1
    # Host directories the guest must see at their own paths, even under
    # the tmpfs it puts on /tmp, /run and /var/tmp (init: rt.keep=).
    local keep=${RT_KEEP:-}
    local rc=0
    # no_timer_check: under TCG on a busy host, the kernel's boot check
    # that the 8254 timer ticks through the IO-APIC can miss its ticks (the
    # guest's vCPU starved for those milliseconds), and the guest panics
    # before init ("IO-APIC + timer doesn't work!": seen once with 5.10,
    # the end-to-end tests running beside it). The check is for broken
    # hardware; virtual machines are booted without it.
    timeout "${RINGTAIL_VM_TIMEOUT:-1800}" qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp "$smp" -m "$mem" \
        -nographic -no-reboot ${RT_NIC:--nic none} \
        -object memory-backend-memfd,id=mem,size="${mem}M",share=on -numa node,memdev=mem \
        -chardev socket,id=vfs,path="$sock" -device vhost-user-fs-pci,chardev=vfs,tag=hostroot \
        -kernel "$vmlinuz" -initrd "$CACHE/initrd.gz" \
        -append "console=ttyS0 quiet panic=-1 no_timer_check rt.script=$script${keep:+ rt.keep=$keep}${RT_IP:+ rt.ip=$RT_IP rt.host=$RT_HOST} ${RINGTAIL_VM_APPEND:-}" </dev/null | tee "$log" || rc=$?
    kill "$vpid" 2>/dev/null || true
    wait "$vpid" 2>/dev/null || true
    local grc
    grc=$(sed -n 's/.*RT_GUEST_RC=\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    rm -rf "$work"
    [ "$rc" = 0 ] || echo "kernels.sh: qemu exited with $rc" >&2
    return "${grc:-255}"
}

# matrix TESTBIN BIN_DIR: every kernel, two guests at a time (the host's
# two CPUs: one emulated vCPU each), then a summary; fails if any kernel's
# tests failed or did not finish.
matrix() {
    local testbin bindir
    testbin=$(realpath "$1") bindir=$(realpath "$2")
    [ -x "$testbin" ] || die "no test executable $testbin"
    # The checkout, the test executable and the binaries, seen by the guest
    # at their own paths (a checkout under /tmp, /run or /var/tmp would be
    # hidden by the guest's tmpfs there: init keeps these visible). The
    # kernel command line is split at spaces, the list at colons.
    local workspace p
    workspace=$(realpath "$HERE/../..")
    for p in "$workspace" "$testbin" "$bindir"; do
        case "$p" in
        *[[:space:]:]*) die "the kernel matrix cannot run from $p: a path with a space or a colon cannot be passed to the guest (clone elsewhere)" ;;
        esac
        # The guest sees the host's root filesystem alone (boot: a
        # non-recursive bind of /), not what is mounted on it.
        [ "$(findmnt -n -o TARGET --target "$p")" = / ] ||
            die "the kernel matrix cannot run from $p: it is on $(findmnt -n -o TARGET --target "$p"), a separate mount the guests do not see (clone onto the root filesystem)"
    done
    local work
    work=$(mktemp -d /var/tmp/rt-matrix.XXXXXX)
    # The matrix's own directory is under /var/tmp: each guest checks that it
    # sees it (guest.sh), which is what a checkout there needs.
    echo kept >"$work/kept"
    export RT_KEEP="$workspace:$(dirname "$testbin"):$bindir:$work"
    local logs=${RINGTAIL_KERNEL_LOGS:-$CACHE/logs}
    mkdir -p "$logs"
    local -a names=()
    local i series kver running=0
    # guest NAME KVER TESTS [SELF PEER PORT PEER_PORT]: writes NAME's script
    # and boots it in the background (NAME's status and time in
    # $work/NAME.rc, its console in $logs/NAME.log); with SELF, a network
    # card on the pair's network (below) at 10.77.0.SELF, the peer at
    # 10.77.0.PEER.
    guest() {
        local name=$1 kver=$2 tests=$3 self=${4:-} peer=${5:-} port=${6:-} peer_port=${7:-}
        {
            printf 'RT_TESTBIN=%q
RT_BIN_DIR=%q
RT_SCALE=%q
RT_TESTS=%q
RT_KEPT=%q
' \
                "$testbin" "$bindir" "${RINGTAIL_VM_TIME_SCALE:-8}" "$tests" "$work"
            [ -z "$self" ] || printf 'export RINGTAIL_PAIR_SELF=10.77.0.%s RINGTAIL_PAIR_PEER=10.77.0.%s\n' "$self" "$peer"
            cat "$HERE/guest.sh"
        } >"$work/$name.sh"
        if [ "$name" = "$kver" ]; then say "kernel $kver: booting ($tests)"; else say "$name ($kver): booting ($tests)"; fi
        (
            start=$(date +%s)
            rc=0
            if [ -n "$self" ]; then
                export RT_IP="10.77.0.$self/24" RT_HOST="rt-$name"
                export RT_NIC="-netdev dgram,id=pair,local.type=inet,local.host=127.0.0.1,local.port=$port,remote.type=inet,remote.host=127.0.0.1,remote.port=$peer_port -device virtio-net-pci,netdev=pair,mac=52:54:00:77:00:0$self"
            fi
            RINGTAIL_VM_SMP=1 boot "$kver" "$work/$name.sh" >"$logs/$name.log" 2>&1 || rc=$?
            echo "$rc $(($(date +%s) - start))" >"$work/$name.rc"
        ) &
        names+=("$name")
    }
    # a free slot of RINGTAIL_VM_PARALLEL for `need` guests
    slots() {
        while [ "$running" -gt $((${RINGTAIL_VM_PARALLEL:-2} - $1)) ]; do
            wait -n || true
            running=$((running - 1))
        done
        running=$((running + $1))
    }
    # newest first: the 6.3+ kernels run one test more
    for ((i = ${#SUITES[@]} - 1; i >= 0; i--)); do
        series=${SUITES[i]#*:}
        # RINGTAIL_KERNELS="5.10 6.1 pair": only these (a developer's rerun)
        case " ${RINGTAIL_KERNELS:-$series} " in *" $series "*) ;; *) continue ;; esac
        kver=$(cat "$CACHE/k/$series.version")
        slots 1
        guest "$kver" "$kver" "$(matrix_tests "$series")"
    done
    # The pair: two hosts, each a guest of the newest kernel with its own
    # ringtail, on one virtual network (qemu's `-netdev dgram`: each guest's
    # frames go to the other's UDP port on the host's loopback, and nowhere
    # else). Both start at once (the caller waits for the callee).
    case " ${RINGTAIL_KERNELS:-pair} " in
    *" pair "*)
        kver=$(cat "$CACHE/k/${SUITES[${#SUITES[@]} - 1]#*:}.version")
        local udp
        udp=$(python3 -c 'import socket
s = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
        slots 2
        guest pair-callee "$kver" kernels::across_hosts_callee 2 1 "${udp% *}" "${udp#* }"
        guest pair-caller "$kver" kernels::across_hosts_caller 1 2 "${udp#* }" "${udp% *}"
        ;;
    esac
    wait
    local failed=0 rc secs name
    for name in "${names[@]}"; do
        read -r rc secs <"$work/$name.rc" || rc=255
        local label=$name
        case "$name" in pair-*) ;; *) label="kernel $name" ;; esac
        if [ "$rc" = 0 ]; then
            say "$label: passed in ${secs}s ($(grep -o 'test result: ok\. [0-9]* passed' "$logs/$name.log" | tail -n 1))"
        else
            failed=1
            say "$label: FAILED (status $rc, ${secs:-?}s); its console, $logs/$name.log, ends:"
            tail -n 60 "$logs/$name.log" >&2
        fi
    done
    rm -rf "$work"
    return "$failed"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    prepare) prepare ;;
    list) list ;;
    boot) [ $# = 2 ] || die "usage: kernels.sh boot KVER SCRIPT"; boot "$@" ;;
    matrix) [ $# = 2 ] || die "usage: kernels.sh matrix TESTBIN BIN_DIR"; prepare; matrix "$@" ;;
    *) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
