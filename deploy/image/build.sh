#!/usr/bin/env bash
# Builds ringtail's OCI image with buildah, from scratch: the release
# binaries, the C library they link (from this machine's Debian packages),
# the actors' user, an example configuration. No base image, no RUN step
# (so no container runtime is needed to build it: only buildah and root).
#
#   deploy/image/build.sh                                  # cargo build --release, then the image localhost/ringtail:VERSION
#   deploy/image/build.sh --push registry.example/ringtail:0.1.0
#   deploy/image/build.sh --bin-dir target/release --output oci-archive:/tmp/ringtail.tar
#
# Options:
#   --bin-dir DIR     take the binaries from DIR instead of building them
#                     (cargo build --release --workspace --bins)
#   --tag NAME        the local image name (default localhost/ringtail:VERSION)
#   --output DEST     commit to DEST instead of local storage, any buildah
#                     transport (oci-archive:FILE, oci:DIR, docker-archive:FILE)
#   --push REF        after committing, push to REF (docker://REF)
#   --uid N           uid and gid of the actors' user `ringtail` (default
#                     7464): the supervisor refuses to start if any other
#                     process on the node (hostPID) runs as it
#   --k8s-uid N       uid and gid of the k8s-actor's user `ringtail-k8s`
#                     (default 7465): the chart's k8sActorUid (the pod's
#                     fsGroup, which alone may read the service account
#                     token); the same rule
#   --storage DIR     buildah's storage root (default: the system's); the
#                     tests use a scratch one
#
# What the image holds, and why (docs/kubernetes.md, "The image"):
#   /usr/local/bin/ringtail*      the workspace's binaries; the eBPF objects
#                                 are embedded in the loader (include_bytes)
#   the libraries `ldd` lists     glibc (libc, libm, the dynamic loader) and
#                                 libgcc_s, copied from the Debian packages
#                                 installed here after checking each file
#                                 against dpkg's checksums
#   /etc/passwd, /etc/group       root, the actors' user `ringtail` and the
#                                 k8s-actor's `ringtail-k8s`
#   /etc/nsswitch.conf            passwd/group from files (built into glibc)
#   /etc/ringtail/ringtail.toml   a configuration for a pod (the chart mounts
#                                 its own over /etc/ringtail)
#   /run/ringtail, /tmp           mount points (emptyDir in the DaemonSet)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin_dir="" tag="" output="" push="" uid=7464 k8s_uid=7465 storage=()
while [ $# -gt 0 ]; do
    case "$1" in
        --bin-dir) bin_dir="$2"; shift 2 ;;
        --tag) tag="$2"; shift 2 ;;
        --output) output="$2"; shift 2 ;;
        --push) push="$2"; shift 2 ;;
        --uid) uid="$2"; shift 2 ;;
        --k8s-uid) k8s_uid="$2"; shift 2 ;;
        --storage) storage=(--root "$2/root" --runroot "$2/run" --storage-driver vfs); shift 2 ;;
        *) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done
say() { echo "build.sh: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (buildah stores images as root here)"
command -v buildah >/dev/null || die "buildah is missing: apt-get install buildah"
case "$uid" in ''|*[!0-9]*) die "--uid: a number, got $uid" ;; esac
[ "$uid" -gt 0 ] && [ "$uid" -lt 65534 ] || die "--uid: between 1 and 65533, got $uid"
case "$k8s_uid" in ''|*[!0-9]*) die "--k8s-uid: a number, got $k8s_uid" ;; esac
[ "$k8s_uid" -gt 0 ] && [ "$k8s_uid" -lt 65534 ] && [ "$k8s_uid" != "$uid" ] || die "--k8s-uid: between 1 and 65533 and not --uid's, got $k8s_uid"

version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -n1)"
[ -n "$version" ] || die "no version in $repo/Cargo.toml"
tag="${tag:-localhost/ringtail:$version}"

# The binaries: every [[bin]] of the workspace (so a new component is in)
# but the test harness's (tests/: servers the tests trace).
bins="$(cd "$repo" && cargo metadata --no-deps --format-version 1 | python3 -c '
import json, os, sys
m = json.load(sys.stdin)
tests = os.path.join(m["workspace_root"], "tests") + os.sep
print("\n".join(sorted(t["name"] for p in m["packages"] if not p["manifest_path"].startswith(tests)
                        for t in p["targets"] if "bin" in t["kind"])))')"
[ -n "$bins" ] || die "cargo metadata lists no binaries"
if [ -z "$bin_dir" ]; then
    say "cargo build --release --workspace --bins"
    (cd "$repo" && cargo build --release --workspace --bins)
    bin_dir="${CARGO_TARGET_DIR:-$repo/target}/release"
fi
for b in $bins; do [ -x "$bin_dir/$b" ] || die "$bin_dir/$b is missing (build the workspace, or give --bin-dir)"; done

rootfs="$(mktemp -d)"
trap 'rm -rf "$rootfs"' EXIT
mkdir -p "$rootfs"/{usr/local/bin,etc/ringtail,run/ringtail,tmp,proc,sys,dev}
chmod 1777 "$rootfs/tmp"
for b in $bins; do
    # The components execute-only, as systemd/install.sh installs them;
    # `ringtail`, the command users run, stays readable.
    mode=0711
    [ "$b" = ringtail ] && mode=0755
    install -m "$mode" "$bin_dir/$b" "$rootfs/usr/local/bin/$b"
done

# The shared libraries: what ldd says each binary loads, at the path it
# says (the dynamic loader at its PT_INTERP path). Each must be a file of
# an installed Debian package, unchanged (dpkg's md5sums).
libs="$(for b in $bins; do ldd "$bin_dir/$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)"
[ -n "$libs" ] || die "ldd found no shared library: are the binaries static? (then drop this step)"
for lib in $libs; do
    real="$(readlink -f "$lib")"
    # dpkg knows a file by one of these names (merged /usr or not)
    owner="" known=""
    for name in "${real#/usr}" "$real" "$lib"; do
        owner="$(dpkg -S "$name" 2>/dev/null | head -n1 | sed 's/: .*//')" && [ -n "$owner" ] && { known="$name"; break; }
    done
    [ -n "$owner" ] || die "$lib ($real) belongs to no Debian package"
    sum="$(awk -v f="${known#/}" '$2 == f {print $1}' "/var/lib/dpkg/info/$owner.md5sums" 2>/dev/null | head -n1)"
    [ -n "$sum" ] || die "$lib: no checksum for $known in dpkg's record of $owner"
    [ "$(md5sum <"$real" | cut -d' ' -f1)" = "$sum" ] || die "$lib differs from what package $owner installed"
    mkdir -p "$rootfs$(dirname "$lib")"
    cp "$real" "$rootfs$lib"
    chmod 0755 "$rootfs$lib"
    say "library $lib from $owner $(dpkg-query -W -f='${Version}' "$owner")"
done

cat >"$rootfs/etc/passwd" <<EOF
root:x:0:0:root:/:/nonexistent
ringtail:x:$uid:$uid:ringtail actors:/nonexistent:/nonexistent
ringtail-k8s:x:$k8s_uid:$k8s_uid:ringtail k8s-actor:/nonexistent:/nonexistent
EOF
cat >"$rootfs/etc/group" <<EOF
root:x:0:
ringtail:x:$uid:
ringtail-k8s:x:$k8s_uid:
EOF
printf 'passwd: files\ngroup: files\n' >"$rootfs/etc/nsswitch.conf"
install -m 0644 "$here/ringtail.toml" "$rootfs/etc/ringtail/ringtail.toml"
chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group" "$rootfs/etc/nsswitch.conf"

say "buildah from scratch"
ctr="$(buildah "${storage[@]}" from scratch)"
cleanup() { buildah "${storage[@]}" rm "$ctr" >/dev/null 2>&1 || true; rm -rf "$rootfs"; }
trap cleanup EXIT
buildah "${storage[@]}" copy --quiet "$ctr" "$rootfs/" / >/dev/null
buildah "${storage[@]}" config \
    --entrypoint '["/usr/local/bin/ringtail"]' \
    --cmd '["--config", "/etc/ringtail/ringtail.toml", "run"]' \
    --user 0:0 \
    --workingdir / \
    --env RINGTAIL_BIN_DIR=/usr/local/bin \
    --label org.opencontainers.image.title=ringtail \
    --label org.opencontainers.image.version="$version" \
    --label org.opencontainers.image.description="eBPF HTTP auto-instrumentation (OpenTelemetry)" \
    --label io.ringtail.actors-uid="$uid" \
    --label io.ringtail.k8s-actor-uid="$k8s_uid" \
    "$ctr"
dest="${output:-$tag}"
say "buildah commit $dest"
buildah "${storage[@]}" commit --quiet --rm --format oci "$ctr" "$dest" >/dev/null
trap 'rm -rf "$rootfs"' EXIT
if [ -n "$push" ]; then
    say "buildah push $push"
    buildah "${storage[@]}" push "$dest" "docker://$push"
fi
say "done: $dest (ringtail $version, actors' uid $uid)"
