//! What the loader tells the span-actor about a traced process: names for
//! `service.name` and `process.executable.name`, and its container
//! (`container.id`, [`crate::container`]).
//!
//! Reading another user's `/proc/PID/exe` and `/proc/PID/environ` needs
//! CAP_SYS_PTRACE (and CAP_DAC_READ_SEARCH), which the loader holds only
//! while it starts. So the table is filled from two sources:
//! - at start, still privileged: every process in `/proc` ([`ProcTable::scan`]);
//! - after, from the kernel (`bpf/process.bpf.c`): an exec record carries
//!   the executable's name and the start of the new environment; a fork
//!   record makes the child inherit what is known of its parent.
//!
//! A process it has never heard of (a lost record) gets what world-readable
//! `/proc` files tell (argv[0], no environment), and is counted. A process
//! is named by (pid, start time), so a reused pid is never given the
//! previous process's name (the start scan knows start times to a clock
//! tick only; the kernel's records and events to the nanosecond). The table holds at most [`CAPACITY`] processes;
//! when full, entries of processes that have exited are dropped (their
//! pid is gone, or its `/proc/PID/stat` shows another start time).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ipc_schema::ProcessInfo;
use runtime_kit::counters::{Counter, Registry};

use crate::discovery::parse_stat;
use crate::kernel::{ExecEvent, ForkEvent};

/// Largest environment read from /proc at start, in bytes.
const MAX_ENVIRON: usize = 1 << 20;
/// Largest `/proc/PID/cgroup` read (a line per hierarchy: a few KiB at most).
const MAX_CGROUP_FILE: usize = 64 << 10;
/// Processes remembered (the size of the kernel's selection map).
pub const CAPACITY: usize = 16384;

/// What the table counts.
struct Counters {
    /// Processes named without a kernel record or a start-time scan.
    unknown: Counter,
    /// Exec records whose environment went on past what the kernel copies:
    /// variables beyond it are not seen.
    env_truncated: Counter,
    /// Exec records whose environment the kernel could not read.
    env_unreadable: Counter,
    /// Processes not remembered: the table was full of live processes.
    table_full: Counter,
}

/// What is known of one process.
struct Entry {
    info: ProcessInfo,
    /// The start time is the kernel's, to the nanosecond; otherwise /proc's,
    /// to a clock tick (the start scan), until an event confirms it.
    precise: bool,
}

/// Process metadata by pid, for the process with that pid and start time.
pub struct ProcTable {
    root: PathBuf,
    read_env: bool,
    ticks_per_sec: u64,
    known: HashMap<u32, Entry>,
    counters: Option<Counters>,
}

impl ProcTable {
    /// An empty table over `root` (normally `/proc`), counting into `registry` if given.
    pub fn new(root: &Path, read_env: bool, registry: Option<&Registry>) -> Self {
        // SAFETY: sysconf has no memory-safety preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let counters = registry.map(|r| Counters {
            unknown: r.counter("ringtail_process_info_unknown_total", &[]),
            env_truncated: r.counter("ringtail_process_env_truncated_total", &[]),
            env_unreadable: r.counter("ringtail_process_env_unreadable_total", &[]),
            table_full: r.counter("ringtail_process_table_full_total", &[]),
        });
        ProcTable {
            root: root.to_owned(),
            read_env,
            ticks_per_sec: if ticks > 0 { ticks as u64 } else { 100 },
            known: HashMap::new(),
            counters,
        }
    }

    /// Reads every process in `/proc` now: call it while still privileged,
    /// after the process hooks are attached (so no process falls between
    /// the scan and the first kernel record).
    pub fn scan(&mut self) -> usize {
        let Ok(dir) = std::fs::read_dir(&self.root) else { return 0 };
        let pids: Vec<u32> = dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
        let mut n = 0;
        for pid in pids {
            let Some(start) = self.start_ns(pid) else { continue };
            let info = read_process(&self.root, pid, start, "", self.read_env);
            if self.insert(info, false) {
                n += 1;
            }
        }
        n
    }

    /// A new process image, as the kernel saw it at exec.
    pub fn exec(&mut self, ev: &ExecEvent) {
        let mut info = empty(ev.h.tgid, ev.h.proc_start_ns, "");
        info.exe_name = ev.exe_name();
        // The path given to exec, when it names that file (not a symlink's
        // or a script's name, not relative).
        let path = ev.path();
        let same = info.exe_name.as_deref().is_some_and(|n| path.rsplit('/').next() == Some(n));
        info.exe_path = Some(path).filter(|p| same && p.starts_with('/'));
        info.container_id = ev.container_id();
        if let Some((env, truncated)) = ev.environment() {
            parse_environment(env, &mut info);
            if truncated {
                self.count(|c| &c.env_truncated);
            }
        } else if ev.environment_fault() {
            self.count(|c| &c.env_unreadable);
        }
        self.insert(info, true);
    }

    /// A new process: its parent's image until it execs.
    pub fn fork(&mut self, ev: &ForkEvent) {
        // Known already: the start scan read the child itself (the records
        // of the moments between attach and scan are read after it), which
        // beats a copy of what its parent has become since.
        if self.find(ev.h.tgid, ev.h.proc_start_ns).is_some() {
            return;
        }
        if let Some(parent) = self.find(ev.parent_tgid, ev.parent_start_ns) {
            let info = ProcessInfo { pid: ev.h.tgid, proc_start_ns: ev.h.proc_start_ns, comm: String::new(), ..parent.info.clone() };
            self.insert(info, true);
        }
    }

    /// The entry of the process `pid` started at `start` (kernel time), if known.
    fn find(&mut self, pid: u32, start: u64) -> Option<&mut Entry> {
        let tick = self.tick_ns();
        let e = self.known.get_mut(&pid)?;
        let same = if e.precise { e.info.proc_start_ns == start } else { e.info.proc_start_ns.abs_diff(start) <= tick };
        same.then_some(e)
    }

    /// Metadata for a process the kernel reported.
    pub fn get(&mut self, pid: u32, proc_start_ns: u64, comm: &str) -> ProcessInfo {
        if let Some(e) = self.find(pid, proc_start_ns) {
            // The kernel's start time from now on (the span-actor matches it).
            e.info.proc_start_ns = proc_start_ns;
            e.precise = true;
            if e.info.comm.is_empty() {
                comm.clone_into(&mut e.info.comm);
            }
            return e.info.clone();
        }
        // Not heard of: what /proc still lets us read (argv[0] at least).
        self.count(|c| &c.unknown);
        let info = if self.start_ns(pid).is_some_and(|s| s.abs_diff(proc_start_ns) <= self.tick_ns()) {
            read_process(&self.root, pid, proc_start_ns, comm, self.read_env)
        } else {
            empty(pid, proc_start_ns, comm)
        };
        self.insert(info.clone(), true);
        info
    }

    fn count(&self, which: impl Fn(&Counters) -> &Counter) {
        if let Some(c) = &self.counters {
            which(c).inc();
        }
    }

    fn tick_ns(&self) -> u64 {
        1_000_000_000 / self.ticks_per_sec
    }

    /// A process's start time (CLOCK_BOOTTIME ns, to a clock tick) from its
    /// world-readable `/proc/PID/stat`.
    fn start_ns(&self, pid: u32) -> Option<u64> {
        start_ticks(&self.root, pid)?.checked_mul(self.tick_ns())
    }

    /// Remembers `info` (replacing what was known of an earlier process
    /// with its pid); false if the table is full of live processes.
    fn insert(&mut self, info: ProcessInfo, precise: bool) -> bool {
        if self.known.len() >= CAPACITY && !self.known.contains_key(&info.pid) {
            let (root, tick) = (&self.root, self.tick_ns());
            self.known.retain(|pid, e| alive(root, *pid, e.info.proc_start_ns, tick));
            if self.known.len() >= CAPACITY {
                self.count(|c| &c.table_full);
                return false;
            }
        }
        self.known.insert(info.pid, Entry { info, precise });
        true
    }
}

/// False if process `pid` started at `start` is certainly gone: no such
/// pid (`kill(pid, 0)` says so whatever /proc shows: under systemd's
/// `ProtectProc=ptraceable` the loader no longer sees other users' /proc
/// entries), or a visible `/proc/PID/stat` with another start time.
fn alive(root: &Path, pid: u32, start: u64, tick: u64) -> bool {
    let Ok(id) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: kill with signal 0 sends nothing; it only checks the pid.
    if unsafe { libc::kill(id, 0) } != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    let Some(ticks) = start_ticks(root, pid) else { return true };
    ticks.checked_mul(tick).is_some_and(|s| s.abs_diff(start) <= tick)
}

/// A process's start time in clock ticks since boot, from its
/// world-readable `/proc/PID/stat`.
fn start_ticks(root: &Path, pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(root.join(pid.to_string()).join("stat")).ok()?;
    parse_stat(&stat)?.1.get(19)?.parse().ok()
}

fn empty(pid: u32, proc_start_ns: u64, comm: &str) -> ProcessInfo {
    ProcessInfo {
        pid,
        proc_start_ns,
        comm: comm.to_owned(),
        exe_name: None,
        exe_path: None,
        env_service_name: None,
        env_resource_attributes: None,
        container_id: None,
    }
}

/// Takes `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` from NUL-separated
/// `NAME=value` strings. A last string without its NUL was cut: not used.
pub fn parse_environment(env: &[u8], info: &mut ProcessInfo) {
    let complete = match env.iter().rposition(|b| *b == 0) {
        Some(end) => &env[..end],
        None => return,
    };
    for var in complete.split(|b| *b == 0) {
        if let Some(v) = var.strip_prefix(b"OTEL_SERVICE_NAME=") {
            info.env_service_name = Some(String::from_utf8_lossy(v).into_owned()).filter(|v| !v.is_empty());
        } else if let Some(v) = var.strip_prefix(b"OTEL_RESOURCE_ATTRIBUTES=") {
            info.env_resource_attributes = Some(String::from_utf8_lossy(v).into_owned()).filter(|v| !v.is_empty());
        }
    }
}

/// What `/proc` tells of a process (all of it while privileged; after, what
/// world-readable files do).
fn read_process(root: &Path, pid: u32, proc_start_ns: u64, comm: &str, read_env: bool) -> ProcessInfo {
    let mut info = empty(pid, proc_start_ns, comm);
    let dir = root.join(pid.to_string());
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
    // World-readable: what the process's cgroups are (its container).
    if let Ok(cgroups) = read_bounded(&dir.join("cgroup"), MAX_CGROUP_FILE) {
        info.container_id = crate::container::id_in_proc_cgroup(&String::from_utf8_lossy(&cgroups));
    }
    if read_env {
        if let Ok(mut env) = read_bounded(&dir.join("environ"), MAX_ENVIRON) {
            // /proc gives the last string without its NUL.
            env.push(0);
            parse_environment(&env, &mut info);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn start_of(pid: u32) -> u64 {
        ProcTable::new(Path::new("/proc"), false, None).start_ns(pid).unwrap()
    }

    #[test]
    fn the_scan_reads_own_exe() {
        let me = std::process::id();
        let mut table = ProcTable::new(Path::new("/proc"), true, None);
        assert!(table.scan() > 0);
        let info = table.get(me, start_of(me), "x");
        let exe = std::env::current_exe().unwrap();
        assert_eq!(info.exe_name.as_deref(), exe.file_name().and_then(|n| n.to_str()));
        assert_eq!(info.comm, "x");
    }

    #[test]
    fn reused_pid_is_not_trusted() {
        let me = std::process::id();
        let mut table = ProcTable::new(Path::new("/proc"), true, None);
        let info = table.get(me, start_of(me) + 3_000_000_000, "old");
        assert_eq!(info.exe_name, None);
        assert_eq!(info.comm, "old");
    }

    #[test]
    fn environment_variables_are_found_by_the_scan() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .env("OTEL_SERVICE_NAME", "checkout")
            .env("OTEL_RESOURCE_ATTRIBUTES", "team=payments")
            .spawn()
            .unwrap();
        let pid = child.id();
        // Until exec has happened /proc shows the parent's image; exec sets
        // the new exe before the new environment's place in memory, which
        // reads as empty meanwhile.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let execd = || {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|l| l.ends_with("sleep"));
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            exe && env.windows(18).any(|w| w == b"OTEL_SERVICE_NAME=")
        };
        while !execd() {
            assert!(std::time::Instant::now() < deadline, "sleep never exec'd");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut table = ProcTable::new(Path::new("/proc"), true, None);
        table.scan();
        let info = table.get(pid, start_of(pid), "sleep");
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(info.env_service_name.as_deref(), Some("checkout"));
        assert_eq!(info.env_resource_attributes.as_deref(), Some("team=payments"));
        assert_eq!(info.exe_name.as_deref(), Some("sleep"));
    }

    #[test]
    fn a_cut_variable_is_not_read() {
        let mut info = empty(1, 1, "x");
        parse_environment(b"A=1\0OTEL_SERVICE_NAME=checkout\0OTEL_RESOURCE_ATTRIBUTES=team=pay", &mut info);
        assert_eq!(info.env_service_name.as_deref(), Some("checkout"));
        assert_eq!(info.env_resource_attributes, None, "a value cut by the kernel's copy is not used");
        let mut info = empty(1, 1, "x");
        parse_environment(b"OTEL_SERVICE_NAME=check", &mut info);
        assert_eq!(info.env_service_name, None);
    }

    /// An exec record as the kernel writes it: `env` copied, of `total` bytes.
    fn exec_record(pid: u32, start: u64, path: &str, exe: &str, env: &[u8], total: u64) -> Box<ExecEvent> {
        use crate::kernel::contract::{ENV_LEN, EXECF_ENV, EXECF_ENV_TRUNCATED, PROC_EXEC};
        let bytes = vec![0u8; std::mem::size_of::<ExecEvent>()];
        let crate::kernel::ProcRecord::Exec(mut ev) = crate::kernel::ProcRecord::parse(&{
            let mut b = bytes;
            b[4] = PROC_EXEC;
            b
        })
        .unwrap() else {
            panic!("not an exec record")
        };
        ev.h.tgid = pid;
        ev.h.proc_start_ns = start;
        ev.h.flags = EXECF_ENV | if total > ENV_LEN as u64 { EXECF_ENV_TRUNCATED } else { 0 };
        ev.path[..path.len()].copy_from_slice(path.as_bytes());
        ev.exe[..exe.len()].copy_from_slice(exe.as_bytes());
        ev.env[..env.len()].copy_from_slice(env);
        ev.env_len = env.len() as u32;
        ev.env_total = total;
        ev
    }

    #[test]
    fn an_exec_record_names_the_process_and_a_cut_environment_is_counted() {
        use ipc_schema::Component;
        let registry = Registry::new(Component::ProbeLoader, 1);
        let mut table = ProcTable::new(Path::new("/nonexistent"), true, Some(&registry));
        let env = b"PATH=/bin\0OTEL_SERVICE_NAME=late-svc\0OTEL_RESOURCE_ATTRIBUTES=a=b\0";
        table.exec(&exec_record(7, 70, "/usr/bin/python3", "python3.11", env, env.len() as u64));
        let info = table.get(7, 70, "python3");
        assert_eq!(info.exe_name.as_deref(), Some("python3.11"));
        assert_eq!(info.exe_path, None, "the path given to exec names a symlink, not the file");
        assert_eq!(info.env_service_name.as_deref(), Some("late-svc"));
        assert_eq!(info.env_resource_attributes.as_deref(), Some("a=b"));
        assert_eq!(registry.counter("ringtail_process_env_truncated_total", &[]).get(), 0);
        // A later exec of the same process replaces it; a cut one is counted.
        let cut = b"OTEL_SERVICE_NAME=next\0OTEL_RESOURCE_ATTRIB";
        table.exec(&exec_record(7, 70, "/usr/bin/nginx", "nginx", cut, 20_000));
        let info = table.get(7, 70, "nginx");
        assert_eq!((info.exe_name.as_deref(), info.exe_path.as_deref()), (Some("nginx"), Some("/usr/bin/nginx")));
        assert_eq!(info.env_service_name.as_deref(), Some("next"));
        assert_eq!(info.env_resource_attributes, None);
        assert_eq!(registry.counter("ringtail_process_env_truncated_total", &[]).get(), 1);
        // Another process with that pid (another start time) is not given its name.
        assert_eq!(table.get(7, 71, "x").exe_name, None);
        assert_eq!(registry.counter("ringtail_process_info_unknown_total", &[]).get(), 1);
    }

    #[test]
    fn a_forked_child_inherits_what_is_known_of_its_parent() {
        use crate::kernel::ProcHead;
        let mut table = ProcTable::new(Path::new("/nonexistent"), true, None);
        let mut parent = empty(10, 100, "srv");
        parent.env_service_name = Some("svc".into());
        parent.exe_name = Some("srv".into());
        table.insert(parent, true);
        let h = ProcHead { tgid: 11, kind: 0, flags: 0, _pad: 0, proc_start_ns: 200 };
        table.fork(&ForkEvent { h, parent_tgid: 10, _pad: 0, parent_start_ns: 100 });
        let child = table.get(11, 200, "worker");
        assert_eq!(child.env_service_name.as_deref(), Some("svc"));
        assert_eq!(child.exe_name.as_deref(), Some("srv"));
        assert_eq!(child.comm, "worker");
        // A child the start scan read is not overwritten by its parent's names.
        let mut scanned = empty(13, 300, "");
        scanned.exe_name = Some("own".into());
        table.insert(scanned, false);
        table.fork(&ForkEvent { h: ProcHead { tgid: 13, proc_start_ns: 300, ..h }, parent_tgid: 10, _pad: 0, parent_start_ns: 100 });
        assert_eq!(table.get(13, 300, "x").exe_name.as_deref(), Some("own"));
        // A fork of an unknown parent teaches nothing.
        table.fork(&ForkEvent { h: ProcHead { tgid: 12, ..h }, parent_tgid: 10, _pad: 0, parent_start_ns: 999 });
        assert_eq!(table.get(12, 200, "x").env_service_name, None);
    }
}
