//! This machine: where the ringtail binaries, the test venv and the
//! fixtures are, and whether a test can run here (root, BTF, rotel, each
//! tool), a missing one skipped loudly or, under [`REQUIRE_ALL`], failed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::Rotel;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Where the ringtail binaries are (`RINGTAIL_BIN_DIR` or `target/debug`).
pub fn bin_dir() -> PathBuf {
    std::env::var_os("RINGTAIL_BIN_DIR").map(PathBuf::from).unwrap_or_else(|| {
        let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace().join("target"));
        target.join("debug")
    })
}

/// The virtualenv with the Python test tools (rotel).
pub fn venv() -> PathBuf {
    std::env::var_os("RINGTAIL_TEST_VENV").map(PathBuf::from).unwrap_or_else(|| workspace().join(".venv"))
}

/// The virtualenv's Python when it can import `modules` (`"grpc, h2"`);
/// otherwise says the test is skipped.
pub fn venv_python(modules: &str) -> Option<PathBuf> {
    let python = venv().join("bin/python");
    let ok = Command::new(&python).args(["-c", &format!("import {modules}")]).status().is_ok_and(|s| s.success());
    if !ok {
        skip(&format!("cannot import {modules} in the venv"));
        return None;
    }
    Some(python)
}

/// The variable that turns skips into failures.
pub const REQUIRE_ALL: &str = "RINGTAIL_REQUIRE_ALL";

/// True when every test must run ([`REQUIRE_ALL`] is `1`).
pub fn require_all() -> bool {
    std::env::var(REQUIRE_ALL).is_ok_and(|v| v == "1")
}

/// Prints why a test is skipped, or fails the test when [`require_all`].
/// Always use as `if !check { return }`.
pub fn skip(reason: &str) {
    if require_all() {
        panic!("{REQUIRE_ALL}=1 and this test would be skipped: {reason}");
    }
    eprintln!("SKIPPED: {reason}");
    println!("SKIPPED: {reason}");
}

/// Whether a test that traces and reads spans from the OTLP receiver can
/// run here with `tools` (commands, or paths of executables): eBPF, rotel
/// and every tool, each missing one said (a failure under
/// RINGTAIL_REQUIRE_ALL).
pub fn ready_to_trace(tools: &[&str]) -> bool {
    if !can_trace() {
        return false;
    }
    if !Rotel::available() {
        skip("the rotel OTLP receiver is not installed");
        return false;
    }
    tools.iter().all(|t| have(t))
}

/// True when eBPF tests can run here; otherwise says why and returns false.
pub fn can_trace() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip("needs root (CAP_BPF, CAP_PERFMON) to load eBPF programs");
        return false;
    }
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        skip("kernel has no BTF (/sys/kernel/btf/vmlinux)");
        return false;
    }
    if !bin_dir().join("ringtail").exists() {
        panic!("{} missing: run `cargo build --workspace` first", bin_dir().join("ringtail").display());
    }
    true
}

/// True if `cmd` is on PATH; otherwise says the test is skipped.
pub fn have(cmd: &str) -> bool {
    let ok = Command::new("sh").arg("-c").arg(format!("command -v {cmd}")).stdout(Stdio::null()).status().is_ok_and(|s| s.success());
    if !ok {
        skip(&format!("{cmd} is not installed (./ringtail.sh test installs it)"));
    }
    ok
}

/// A fixture file.
pub fn fixture(name: &str) -> PathBuf {
    workspace().join("tests/fixtures").join(name)
}
