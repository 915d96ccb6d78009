# The body of a kernel-matrix guest's script (tests/kernels/kernels.sh
# `matrix` puts the RT_* assignments in front of it): runs the tests named
# in RT_TESTS from the kernel-matrix test executable RT_TESTBIN inside the
# guest, as root, against the host's binaries in RT_BIN_DIR. Everything
# goes to the console, which the host keeps; the exit status is the tests'.
set -eu
echo "guest: Linux $(uname -r), $(nproc) CPUs, $(sed -n 's/MemTotal: *//p' /proc/meminfo)"
export RINGTAIL_REQUIRE_ALL=1 RINGTAIL_BIN_DIR="$RT_BIN_DIR" RINGTAIL_TEST_TIME_SCALE="$RT_SCALE" RUST_BACKTRACE=1
# A host directory under /var/tmp (the matrix's own) must be seen here at
# its path, as a checkout there must: init keeps it over the guest's tmpfs.
[ -f "$RT_KEPT/kept" ] || { echo "guest: the host's $RT_KEPT is hidden by the guest's tmpfs: a checkout under /tmp, /run or /var/tmp could not run" >&2; exit 1; }
# The guest's root is the host's, read-only: work where tmpfs is.
cd /tmp
# (word splitting of RT_TESTS is wanted: one argument per test name)
# shellcheck disable=SC2086
# (--include-ignored: the pair's tests, ignored on the host, named here)
"$RT_TESTBIN" --exact $RT_TESTS --include-ignored --test-threads=1 --nocapture
