#!/bin/sh
# Installs ringtail as systemd units: the four binaries in /usr/local/bin,
# the units in /etc/systemd/system, the `ringtail` user (sysusers.d), and the
# example configuration in /etc/ringtail unless one is there already.
#
# It starts nothing and enables nothing: installing and running are two
# decisions, and the configuration is worth a look in between. At the end it
# prints the command that starts ringtail.
#
#   cargo build --release --workspace && sudo systemd/install.sh
#   systemd/install.sh --root /tmp/stage --bin-dir target/debug   # a staging tree (packages, tests)
#
# With --root nothing outside that directory is touched: the user goes into
# its etc/passwd, and systemd is not asked to reload.
set -eu

usage() {
	cat <<'EOF'
usage: install.sh [--bin-dir DIR] [--root DIR]
  --bin-dir DIR  where the built binaries are (default: target/release of this repository)
  --root DIR     install below DIR instead of / (no systemctl daemon-reload)
EOF
}

here=$(cd "$(dirname "$0")" && pwd)
bin_dir=$here/../target/release
root=
while [ $# -gt 0 ]; do
	case $1 in
	--bin-dir) [ $# -ge 2 ] || { usage >&2; exit 2; }; bin_dir=$2; shift 2 ;;
	--root) [ $# -ge 2 ] || { usage >&2; exit 2; }; root=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "install.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
	esac
done

binaries="ringtail ringtail-probe-loader ringtail-span-actor ringtail-exporter-actor"
units="ringtail.target ringtail-probe-loader.service ringtail-span-actor.service ringtail-exporter-actor.service"

if [ -z "$root" ] && [ "$(id -u)" != 0 ]; then
	echo "install.sh: run it as root (it writes /usr/local/bin, /etc/systemd/system and /etc/ringtail), or stage with --root DIR" >&2
	exit 1
fi
# Check everything before writing anything: no half-installed ringtail.
for b in $binaries; do
	if [ ! -x "$bin_dir/$b" ]; then
		echo "install.sh: $bin_dir/$b is missing: build first (cargo build --release --workspace) or pass --bin-dir" >&2
		exit 1
	fi
done

say() { printf '  %s\n' "$*"; }

# install(1) replaces files atomically enough for binaries that may be running:
# it unlinks first, so a running ringtail keeps its old inode.
# The components are execute-only (0711): a process exec'd from a file its
# user cannot read is non-dumpable from its exec (the kernel's would_dump),
# so the exporter, which systemd execs as ringtail with otel.env's secrets in
# its environment, is never readable by another process of that user, not
# even before its main() runs (docs/systemd.md, "Secrets").
install -d -m 0755 "$root/usr/local/bin"
for b in $binaries; do
	mode=0711
	[ "$b" = ringtail ] && mode=0755
	install -m "$mode" "$bin_dir/$b" "$root/usr/local/bin/$b"
	say "/usr/local/bin/$b ($mode)"
done

install -d -m 0755 "$root/etc/systemd/system"
for u in $units; do
	install -m 0644 "$here/$u" "$root/etc/systemd/system/$u"
	say "/etc/systemd/system/$u"
done

install -d -m 0755 "$root/usr/local/share/doc/ringtail"
install -m 0644 "$here/../docs/systemd.md" "$root/usr/local/share/doc/ringtail/systemd.md"
say "/usr/local/share/doc/ringtail/systemd.md"

install -d -m 0755 "$root/etc/sysusers.d"
install -m 0644 "$here/sysusers.d/ringtail.conf" "$root/etc/sysusers.d/ringtail.conf"
say "/etc/sysusers.d/ringtail.conf"
if [ -n "$root" ]; then
	systemd-sysusers --root="$root" "$root/etc/sysusers.d/ringtail.conf"
	gid=$(awk -F: '$1 == "ringtail" { print $3 }' "$root/etc/group")
else
	systemd-sysusers /etc/sysusers.d/ringtail.conf
	gid=$(getent group ringtail | cut -d: -f3)
fi
if [ -z "$gid" ]; then
	echo "install.sh: systemd-sysusers did not create the group ringtail" >&2
	exit 1
fi
say "user and group ringtail (gid $gid)"
# Staging as an ordinary user cannot give files away; a package build fixes
# ownership later.
owner="-o 0 -g $gid"
[ "$(id -u)" = 0 ] || owner=

# /etc/ringtail: root:ringtail 0750, so that the actors may read the
# configuration (0640) but not otel.env (root, 0600), which only systemd reads.
install -d -m 0750 $owner "$root/etc/ringtail"
if [ -e "$root/etc/ringtail/ringtail.toml" ]; then
	say "/etc/ringtail/ringtail.toml exists: kept (the example is $here/ringtail.toml)"
else
	install -m 0640 $owner "$here/ringtail.toml" "$root/etc/ringtail/ringtail.toml"
	say "/etc/ringtail/ringtail.toml (example)"
fi

if [ -n "$root" ]; then
	say "staged below $root; systemd was not told"
elif [ -d /run/systemd/system ]; then
	systemctl daemon-reload
	say "systemctl daemon-reload"
else
	say "systemd is not running here: no daemon-reload"
fi

cat <<'EOF'

Nothing was started. Review /etc/ringtail/ringtail.toml (OTLP secrets go in
/etc/ringtail/otel.env, root, 0600), check it, then start ringtail at boot and now:

  ringtail check-config --config /etc/ringtail/ringtail.toml
  systemctl enable --now ringtail.target
EOF
