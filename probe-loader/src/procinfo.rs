//! What the loader tells the span-actor about a traced process: names for
//! `service.name` and `process.executable.name`, read once per process.
//!
//! Reading another user's `/proc/PID/exe` and `/proc/PID/environ` needs
//! CAP_SYS_PTRACE, which only the loader may keep; the actors get the
//! result. A process is named by (pid, start time), so a reused pid is
//! never given the previous process's name.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ipc_schema::ProcessInfo;

use crate::discovery::parse_stat;

/// Largest environment read, in bytes.
const MAX_ENVIRON: usize = 1 << 20;
/// Processes remembered before the cache starts over.
const CAPACITY: usize = 8192;

/// Process metadata by (pid, start time).
pub struct ProcCache {
    root: PathBuf,
    read_env: bool,
    ticks_per_sec: u64,
    known: HashMap<(u32, u64), ProcessInfo>,
}

impl ProcCache {
    /// A cache over `root` (normally `/proc`).
    pub fn new(root: &Path, read_env: bool) -> Self {
        // SAFETY: sysconf has no memory-safety preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        ProcCache { root: root.to_owned(), read_env, ticks_per_sec: if ticks > 0 { ticks as u64 } else { 100 }, known: HashMap::new() }
    }

    /// Metadata for a process the kernel reported, reading /proc the first time.
    pub fn get(&mut self, pid: u32, proc_start_ns: u64, comm: &str) -> &ProcessInfo {
        if self.known.len() >= CAPACITY && !self.known.contains_key(&(pid, proc_start_ns)) {
            self.known.clear();
        }
        let (root, read_env, ticks) = (&self.root, self.read_env, self.ticks_per_sec);
        self.known.entry((pid, proc_start_ns)).or_insert_with(|| read_process(root, pid, proc_start_ns, comm, read_env, ticks))
    }
}

fn read_process(root: &Path, pid: u32, proc_start_ns: u64, comm: &str, read_env: bool, ticks: u64) -> ProcessInfo {
    let mut info = ProcessInfo {
        pid,
        proc_start_ns,
        comm: comm.to_owned(),
        exe_name: None,
        exe_path: None,
        env_service_name: None,
        env_resource_attributes: None,
    };
    let dir = root.join(pid.to_string());
    // Only trust /proc if it still shows the process the kernel saw.
    let same = std::fs::read_to_string(dir.join("stat")).ok().and_then(|s| {
        let (_, rest) = parse_stat(&s)?;
        let start_ticks: u64 = rest.get(19)?.parse().ok()?;
        let seen_ticks = proc_start_ns / (1_000_000_000 / ticks);
        Some(start_ticks.abs_diff(seen_ticks) <= 1)
    });
    if same != Some(true) {
        return info;
    }
    if let Ok(link) = std::fs::read_link(dir.join("exe")) {
        let path = link.to_string_lossy().trim_end_matches(" (deleted)").to_owned();
        info.exe_name = path.rsplit('/').next().map(str::to_owned).filter(|n| !n.is_empty());
        info.exe_path = Some(path);
    } else if let Ok(cmdline) = std::fs::read(dir.join("cmdline")) {
        // cmdline is world-readable: argv[0] when the exe link is not.
        let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
        let argv0 = String::from_utf8_lossy(argv0);
        let name = argv0.rsplit('/').next().unwrap_or_default().split_whitespace().next().unwrap_or_default();
        if !name.is_empty() {
            info.exe_name = Some(name.to_owned());
        }
    }
    if read_env {
        if let Ok(env) = read_bounded(&dir.join("environ"), MAX_ENVIRON) {
            for var in env.split(|b| *b == 0) {
                if let Some(v) = var.strip_prefix(b"OTEL_SERVICE_NAME=") {
                    info.env_service_name = Some(String::from_utf8_lossy(v).into_owned()).filter(|v| !v.is_empty());
                } else if let Some(v) = var.strip_prefix(b"OTEL_RESOURCE_ATTRIBUTES=") {
                    info.env_resource_attributes = Some(String::from_utf8_lossy(v).into_owned()).filter(|v| !v.is_empty());
                }
            }
        }
    }
    info
}

fn read_bounded(path: &Path, limit: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::fs::File::open(path)?.take(limit as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

/// This process's start time in CLOCK_BOOTTIME ns (as the kernel reports it), for tests.
#[cfg(test)]
fn own_start_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let (_, rest) = parse_stat(&stat).unwrap();
    // SAFETY: sysconf has no memory-safety preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    rest[19].parse::<u64>().unwrap() * (1_000_000_000 / ticks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_exe_and_environment() {
        // Our own environ is readable; a test-only variable shows it is parsed.
        let me = std::process::id();
        let mut cache = ProcCache::new(Path::new("/proc"), true);
        let info = cache.get(me, own_start_ns(), "x").clone();
        let exe = std::env::current_exe().unwrap();
        assert_eq!(info.exe_name.as_deref(), exe.file_name().and_then(|n| n.to_str()));
        assert_eq!(info.comm, "x");
    }

    #[test]
    fn reused_pid_is_not_trusted() {
        let me = std::process::id();
        let mut cache = ProcCache::new(Path::new("/proc"), true);
        let info = cache.get(me, own_start_ns() + 3_000_000_000, "old");
        assert_eq!(info.exe_name, None);
        assert_eq!(info.comm, "old");
    }

    #[test]
    fn environment_variables_are_found() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .env("OTEL_SERVICE_NAME", "checkout")
            .env("OTEL_RESOURCE_ATTRIBUTES", "team=payments")
            .spawn()
            .unwrap();
        let pid = child.id();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let (_, rest) = parse_stat(&stat).unwrap();
        // SAFETY: sysconf has no memory-safety preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        let start = rest[19].parse::<u64>().unwrap() * (1_000_000_000 / ticks);
        let mut cache = ProcCache::new(Path::new("/proc"), true);
        let info = cache.get(pid, start, "sleep").clone();
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(info.env_service_name.as_deref(), Some("checkout"));
        assert_eq!(info.env_resource_attributes.as_deref(), Some("team=payments"));
        assert_eq!(info.exe_name.as_deref(), Some("sleep"));
    }
}
