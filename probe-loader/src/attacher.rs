//! The TLS attacher: the one small privileged process that attaches the
//! TLS uprobes, at start and whenever a process starts (issue 45).
//!
//! The loader forks it and it execs itself (`ringtail-probe-loader
//! attach-tls`) before the loader drops its capabilities; the loader then
//! keeps none. In one line: **it can do nothing but attach ringtail's own,
//! already loaded TLS programs to regular files the kernel reported a
//! selected process running or mapping.**
//!
//! - **What it holds**: the capabilities attaching needs ([`caps`]:
//!   CAP_BPF, CAP_PERFMON; CAP_SYS_ADMIN for perf-event uprobes (before
//!   Linux 6.6) and `/proc/PID/map_files`, where `uprobe_multi` links
//!   need CAP_CHECKPOINT_RESTORE instead, for `map_files` alone;
//!   CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH to
//!   open another user's process's files), its bounding set holding those
//!   alone, `no_new_privs`, not dumpable; the pinned TLS programs, the
//!   kernel's report ring and the map of files reported (opened by path in
//!   the pin set, root's alone).
//! - **What it reads**: the kernel's reports alone (`bpf/tls_report.h`:
//!   an exec, an executable mapping of a libssl file, and with per-process
//!   links a selected process's fork, exit and new selection), then the
//!   files they name, through the process (`/proc/PID/exe`,
//!   `/proc/PID/map_files`), each opened as the start scan opens them
//!   (`tls`: a regular file on a filesystem no process serves, within a
//!   deadline and its user's budget). It reads nothing from the loader or
//!   any other process: its standard input is /dev/null, and its one
//!   channel with the loader is a pipe it writes its counts to.
//! - **What it does**: attaches the TLS programs to those files (`links`:
//!   a `uprobe_multi` link, in session mode where the kernel has it, only
//!   in the selected processes with per-process links; a perf event per
//!   function on older kernels), pins the file-wide links with the set,
//!   and forgets a process's links when it exits.
//! - **Its bounds**: the report ring (256 KiB: a full ring loses reports,
//!   counted `tls_report_ring_full`); reports that need files read wait in
//!   a queue per uid (a process's real uid), at most [`MAX_PER_UID`] each
//!   and [`MAX_PENDING`] in all (past it dropped, counted `budget`), and
//!   are taken round-robin between uids, each job within its deadline and
//!   its allowance (`crate::budget`: 1 s, 256 MiB), at most [`TURN`] of
//!   work between two reads of the ring: a user's many processes delay
//!   only that user's; [`MAX_PROCESSES`] processes with per-process links
//!   (past it, counted `processes_full`); [`MAX_CACHED`] files kept open
//!   for later processes.
//! - **Its life**: it dies with the loader (PR_SET_PDEATHSIG, and its
//!   parent checked after), and ends when the loader stops.
//!
//! The loader waits for the start scan ([`Reports::wait_scanned`], at most
//! [`SCAN_WAIT`]) before it says it is ready, then adds the attacher's
//! counts to its own at each heartbeat.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use aya::maps::{HashMap as BpfHashMap, MapData, RingBuf};
use aya::programs::uprobe::{UProbeAttachLocation, UProbeScope};
use aya::programs::{ProbeKind, UProbe};
use caps::Capability;
use ringtail_config::Settings;

use crate::kernel::contract::*;
use crate::kernel::TlsReport;
use crate::links::Kind;
use crate::pins;
use crate::tls::{self, Reason, Refused, Targets};

/// How long the loader waits for the start scan before it goes on.
pub const SCAN_WAIT: Duration = Duration::from_secs(30);
/// Most reports waiting (retries, or users over budget).
pub const MAX_PENDING: usize = 4096;
/// Most processes with per-process links.
pub const MAX_PROCESSES: usize = 16_384;
/// Most files kept open (and their offsets) for later processes'
/// per-process links.
pub const MAX_CACHED: usize = 4096;
/// Most reports waiting for one uid.
pub const MAX_PER_UID: usize = 1024;
/// Most work between two reads of the report ring.
pub const TURN: Duration = Duration::from_millis(200);

/// The file descriptor the attacher writes its counts to.
const REPORT_FD: i32 = 5;
/// A report the attacher queued itself: a process looked at again.
const RESCAN: u32 = 0x100;

/// What the attacher keeps of the loader's capabilities, by kind of link.
pub fn caps(kind: Kind) -> &'static [Capability] {
    use Capability::*;
    match kind {
        // perf_event_open of a uprobe takes CAP_SYS_ADMIN on Linux 6.18
        // (CAP_PERFMON alone before); map_files CAP_SYS_ADMIN too.
        Kind::Perf => &[CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH],
        // uprobe_multi links (6.6+) take CAP_BPF and CAP_PERFMON alone;
        // map_files CAP_CHECKPOINT_RESTORE (5.9+) as well as CAP_SYS_ADMIN:
        // no process keeps CAP_SYS_ADMIN after start.
        Kind::Multi | Kind::Session => &[CAP_BPF, CAP_PERFMON, CAP_CHECKPOINT_RESTORE, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH],
    }
}

/// A message on the pipe: the counts so far, cumulative.
const MAGIC: u64 = 0x7274_6174_7473_6c73; // "rtattsls"
const FLAG_SCANNED: u64 = 1;
/// Words after the magic and the flags: the refusals, then [`Counts`].
const COUNTS: usize = 5;
const WORDS: usize = 2 + Refused::ARRAY + COUNTS;

/// What the attacher did, cumulative.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    /// Files given file-wide uprobes.
    files: u64,
    /// Per-process links made.
    processes: u64,
    /// Attaches the kernel refused.
    failed: u64,
    /// Kernel reports handled.
    reports: u64,
    /// Processes with per-process links not given them: the table is full.
    processes_full: u64,
}

/// Why the attacher could not be started.
#[derive(Debug, thiserror::Error)]
pub enum AttacherError {
    #[error("cannot make the attacher's pipe")]
    Pipe {
        #[source]
        source: std::io::Error,
    },
    #[error("cannot fork the attacher")]
    Fork {
        #[source]
        source: std::io::Error,
    },
    #[error("the loader has {threads} threads: a fork is only safe with one")]
    Threads { threads: usize },
}

/// The loader's end of the attacher's pipe.
pub struct Reports {
    file: File,
    pid: libc::pid_t,
    buf: Vec<u8>,
    last: Option<[u64; WORDS]>,
}

impl Reports {
    /// Reads what has come; true once the start scan is done.
    fn pump(&mut self) -> bool {
        let mut chunk = [0u8; 4096];
        loop {
            match self.file.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
        let whole = WORDS * 8;
        while self.buf.len() >= whole {
            let mut msg = [0u64; WORDS];
            for (i, w) in msg.iter_mut().enumerate() {
                *w = u64::from_le_bytes(self.buf[i * 8..i * 8 + 8].try_into().unwrap_or_default());
            }
            self.buf.drain(..whole);
            if msg[0] == MAGIC {
                self.last = Some(msg);
            }
        }
        self.last.is_some_and(|m| m[1] & FLAG_SCANNED != 0)
    }

    /// Waits for the start scan to be reported done, at most `deadline`.
    pub fn wait_scanned(&mut self, deadline: Duration) -> bool {
        let until = Instant::now() + deadline;
        loop {
            if self.pump() {
                return true;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let mut fds = [libc::pollfd { fd: self.file.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
            let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(1);
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) } < 0
                && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
            {
                return false;
            }
            if fds[0].revents & (libc::POLLHUP | libc::POLLERR) != 0 && fds[0].revents & libc::POLLIN == 0 {
                return false;
            }
        }
    }

    /// Sets the registry's counters to the attacher's last counts.
    pub fn read_into(&mut self, registry: &runtime_kit::counters::Registry) {
        self.pump();
        let Some(msg) = self.last else { return };
        let mut a = [0u64; Refused::ARRAY];
        a.copy_from_slice(&msg[2..2 + Refused::ARRAY]);
        let refused = Refused::from_array(a);
        for (reason, n) in Reason::LABELS.iter().zip(refused.files) {
            if n > 0 {
                registry.counter(Refused::METRIC, &[("reason", reason)]).set(n);
            }
        }
        for (reason, n) in crate::gobin::Refusal::REASONS.iter().zip(refused.go) {
            if n > 0 {
                registry.counter(Refused::GO_METRIC, &[("reason", reason)]).set(n);
            }
        }
        registry.counter(Refused::GO_ATTACHED, &[]).set(refused.go_attached);
        let c = &msg[2 + Refused::ARRAY..];
        registry.counter("ringtail_tls_files_attached_total", &[]).set(c[0]);
        registry.counter("ringtail_tls_processes_attached_total", &[]).set(c[1]);
        registry.counter("ringtail_tls_attach_failed_total", &[]).set(c[2]);
        registry.counter("ringtail_tls_reports_total", &[]).set(c[3]);
        if c[4] > 0 {
            registry.counter(Refused::METRIC, &[("reason", "processes_full")]).set(c[4]);
        }
    }

    /// The attacher's pid.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }
}

/// Ends the attacher `pid` (the loader stops): its per-process links go
/// with it; the file-wide ones are pinned with the set.
pub fn stop(pid: libc::pid_t) {
    // SAFETY: kill and waitpid of our own child (WNOHANG: never waits).
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        let mut status = 0;
        libc::waitpid(pid, &mut status, libc::WNOHANG);
    }
}

/// The threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

/// Forks and execs the attacher (`ringtail-probe-loader attach-tls`) with
/// the loader's configuration file, the pin set `set` and `kind`; the
/// loader's bounding set is narrowed in the child to [`caps`] before the
/// exec, so that the attacher holds those alone. Call it while the loader
/// is privileged and single-threaded.
pub fn spawn(config: Option<&Path>, set: &Path, kind: Kind) -> Result<Reports, AttacherError> {
    match threads() {
        1 => {}
        threads => return Err(AttacherError::Threads { threads }),
    }
    let mut ends = [0; 2];
    // SAFETY: pipe2 writes two descriptors into a two-int array.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(AttacherError::Pipe { source: std::io::Error::last_os_error() });
    }
    // SAFETY: pipe2 returned these two descriptors, owned by nobody else.
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    // Everything the child needs, made before the fork (it only execs).
    let exe = c"/proc/self/exe";
    let mut args: Vec<std::ffi::CString> = vec![c"ringtail-probe-loader".into(), c"attach-tls".into()];
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap_or_default();
    if let Some(config) = config {
        args.extend([c"--config".into(), c(config)]);
    }
    // SAFETY: getpid has no preconditions.
    let loader = unsafe { libc::getpid() };
    args.extend([
        c"--set".into(),
        c(set),
        c"--loader".into(),
        std::ffi::CString::new(loader.to_string()).unwrap_or_default(),
        c"--kind".into(),
        std::ffi::CString::new(kind_arg(kind)).unwrap_or_default(),
    ]);
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let keep: Vec<u32> = caps(kind).iter().map(|c| c.index() as u32).collect();
    // SAFETY: single-threaded (checked); the child only makes syscalls on
    // what was prepared above and execs or _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(AttacherError::Fork { source: std::io::Error::last_os_error() });
    }
    if pid == 0 {
        // SAFETY: syscalls on plain integers and the pointers prepared above.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
            if libc::getppid() != loader {
                libc::_exit(4);
            }
            // Its counts on fd 5; nothing to read on 0.
            if libc::dup2(writer.as_raw_fd(), REPORT_FD) < 0 {
                libc::_exit(5);
            }
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
            if null >= 0 {
                libc::dup2(null, 0);
            }
            // The bounding set: the attacher's capabilities alone (as root,
            // exec gives it its bounding set as permitted).
            for cap in 0..=63u32 {
                if !keep.contains(&cap) {
                    libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0);
                }
            }
            libc::execv(exe.as_ptr(), argv.as_ptr());
            libc::_exit(6);
        }
    }
    drop(writer);
    tracing::info!(event = "tls_attacher_started", pid, kind = kind.name(), "TLS attacher started");
    Ok(Reports { file: File::from(reader), pid, buf: Vec::new(), last: None })
}

fn kind_arg(kind: Kind) -> &'static str {
    match kind {
        Kind::Perf => "perf",
        Kind::Multi => "multi",
        Kind::Session => "session",
    }
}

/// The attacher's arguments.
struct Args {
    config: Option<PathBuf>,
    set: PathBuf,
    loader: libc::pid_t,
    kind: Kind,
}

fn args() -> Option<Args> {
    let mut it = std::env::args_os().skip(2);
    let (mut config, mut set, mut loader, mut kind) = (None, None, None, None);
    while let Some(a) = it.next() {
        let v = it.next()?;
        match a.to_str()? {
            "--config" => config = Some(PathBuf::from(v)),
            "--set" => set = Some(PathBuf::from(v)),
            "--loader" => loader = v.to_str()?.parse().ok(),
            "--kind" => {
                kind = match v.to_str()? {
                    "perf" => Some(Kind::Perf),
                    "multi" => Some(Kind::Multi),
                    "session" => Some(Kind::Session),
                    _ => None,
                }
            }
            _ => return None,
        }
    }
    Some(Args { config, set: set?, loader: loader?, kind: kind? })
}

/// `ringtail-probe-loader attach-tls`: the attacher's life (module doc).
pub fn main() -> i32 {
    let Some(args) = args() else {
        eprintln!("ringtail-probe-loader attach-tls: bad arguments (it is started by the loader)");
        return 2;
    };
    // Dies with the loader; never a process its user could ptrace or dump.
    // SAFETY: prctl and getppid on plain integers.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
        if libc::getppid() != args.loader {
            return 4;
        }
    }
    let _ = runtime_kit::component::non_dumpable();
    let settings = match Settings::load(args.config.as_deref()) {
        Ok(s) => s,
        Err(error) => {
            eprintln!("ringtail-probe-loader attach-tls: {error}");
            return 2;
        }
    };
    runtime_kit::logging::init(&settings.log.level);
    runtime_kit::component::exit_on_panic();
    // What it was given of what it keeps (a unit may grant less: without
    // CAP_SYS_ADMIN a mapped file is found by its name, not map_files).
    let permitted = caps::read(None, caps::CapSet::Permitted).unwrap_or_default();
    let keep: Vec<Capability> = caps(args.kind).iter().copied().filter(|c| permitted.contains(c)).collect();
    let missing: Vec<String> = caps(args.kind).iter().filter(|c| !permitted.contains(c)).map(|c| c.to_string()).collect();
    if !missing.is_empty() {
        tracing::warn!(event = "tls_attacher_caps", missing = %missing.join(", "), "the TLS attacher runs without some of the capabilities it uses");
    }
    if let Err(error) = crate::privileges::drop_all_but(&keep) {
        tracing::error!(event = "tls_attacher_failed", %error, "cannot narrow the attacher's privileges");
        return 1;
    }
    tracing::info!(event = "tls_attacher", kind = args.kind.name(), kept = %crate::privileges::effective(), "TLS attacher running");
    // SAFETY: fd 5 is the pipe the loader made for this process.
    let pipe = unsafe { File::from_raw_fd(REPORT_FD) };
    let mut a = match Attacher::open(args, settings, pipe) {
        Ok(a) => a,
        Err(error) => {
            tracing::error!(event = "tls_attacher_failed", %error, "TLS attacher cannot start: no TLS uprobes after start");
            return 1;
        }
    };
    a.start_scan();
    a.run()
}

/// The programs, opened from the pin set.
enum Programs {
    Perf(Vec<(&'static str, UProbe)>),
    Multi { enter: Box<UProbe>, exit: Box<UProbe>, go: Box<UProbe> },
    Session { session: Box<UProbe>, go: Box<UProbe> },
}

/// A process's per-process links: (file, its links), each file once.
type ProcessLinks = Vec<((u64, u64), Vec<OwnedFd>)>;

/// A report waiting: a retry (the mapping not visible yet), or its user
/// over budget.
struct Pending {
    due: Instant,
    report: TlsReport,
    tries: u8,
}

/// The attacher's state.
struct Attacher {
    settings: Settings,
    kind: Kind,
    set: PathBuf,
    /// Per-process links (the pid filter): a subset selected on a kernel
    /// that has them.
    per_process: bool,
    programs: Programs,
    reports: RingBuf<MapData>,
    reported: BpfHashMap<MapData, [u8; 24], u8>,
    discovery: crate::discovery::Discovery,
    overseer: crate::deadline::Overseer,
    looked: tls::Looked,
    /// Files looked into, open, with where their uprobes go (per-process
    /// links: for the next process that maps them).
    cache: HashMap<(u64, u64), Rc<tls::Target>>,
    /// Files with file-wide links (by this attacher, or pinned before it).
    file_links: BTreeSet<(u64, u64)>,
    /// Per-process links, by pid: (file, links).
    pid_links: HashMap<u32, ProcessLinks>,
    /// Processes known selected (per-process links).
    selected: HashSet<u32>,
    /// Go executables attached (counted once each).
    go_files: BTreeSet<(u64, u64)>,
    /// Reports waiting to be worked on, by uid (round-robin).
    queues: BTreeMap<u32, VecDeque<Pending>>,
    /// The uid served last.
    last_uid: u32,
    refused: Refused,
    counts: Counts,
    scanned: bool,
    pipe: File,
    sent: Option<[u64; WORDS]>,
}

#[derive(Debug, thiserror::Error)]
enum OpenError {
    #[error("cannot open pinned program {name}")]
    Program {
        name: &'static str,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("cannot open pinned map {name}: {why}")]
    Map { name: &'static str, why: String },
}

impl Attacher {
    fn open(args: Args, settings: Settings, pipe: File) -> Result<Attacher, OpenError> {
        let set = args.set;
        let prog = |name: &'static str, kind: ProbeKind| {
            UProbe::from_pin(pins::prog(&set, name), kind).map_err(|source| OpenError::Program { name, source })
        };
        let programs = match args.kind {
            Kind::Perf => {
                let mut v = Vec::new();
                for &(name, _) in Kind::Perf.programs() {
                    let kind = if name == "tls_call_exit" { ProbeKind::Return } else { ProbeKind::Entry };
                    v.push((name, prog(name, kind)?));
                }
                Programs::Perf(v)
            }
            Kind::Multi => Programs::Multi {
                enter: Box::new(prog("tls_multi_enter", ProbeKind::Entry)?),
                exit: Box::new(prog("tls_multi_exit", ProbeKind::Return)?),
                go: Box::new(prog("go_tls_multi", ProbeKind::Entry)?),
            },
            Kind::Session => Programs::Session {
                session: Box::new(prog("tls_session", ProbeKind::Entry)?),
                go: Box::new(prog("go_tls_multi", ProbeKind::Entry)?),
            },
        };
        let map = |name: &'static str| MapData::from_pin(pins::map(&set, name)).map_err(|e| OpenError::Map { name, why: e.to_string() });
        let reports = RingBuf::try_from(aya::maps::Map::RingBuf(map("tls_reports")?))
            .map_err(|e| OpenError::Map { name: "tls_reports", why: e.to_string() })?;
        let reported = BpfHashMap::try_from(aya::maps::Map::LruHashMap(map("tls_reported")?))
            .map_err(|e| OpenError::Map { name: "tls_reported", why: e.to_string() })?;
        let per_process = args.kind.per_process() && !settings.discovery.selects_all();
        let file_links = pinned_files(&set);
        Ok(Attacher {
            discovery: crate::discovery::Discovery::new(&settings.discovery),
            settings,
            kind: args.kind,
            set,
            per_process,
            programs,
            reports,
            reported,
            overseer: crate::deadline::Overseer::new(),
            looked: tls::Looked::default(),
            cache: HashMap::new(),
            file_links,
            pid_links: HashMap::new(),
            selected: HashSet::new(),
            go_files: BTreeSet::new(),
            queues: BTreeMap::new(),
            last_uid: 0,
            refused: Refused::default(),
            counts: Counts::default(),
            scanned: false,
            pipe,
            sent: None,
        })
    }

    /// The processes running now, as the start scan of before: the host's
    /// libssl files (file-wide links), then each selected process's files.
    fn start_scan(&mut self) {
        let began = Instant::now();
        let proc = Path::new("/proc");
        let (host, unusable) = tls::find(&self.settings.tls.libraries, Path::new("/"), proc, [], &self.looked, &mut self.overseer);
        for e in unusable {
            tracing::warn!(event = "tls_library_unusable", error = %e, "tls.libraries: a file cannot be used");
        }
        // The host's libssl files get links of their own (every process
        // that maps them traps; the programs leave at once in one not
        // selected), even where links could be per process: a process the
        // kernel selects at its exec (a literal `exe_names`) is then traced
        // from its first TLS call. Per-process links made at its exec
        // raced it: curl's handshake, or an HTTP/2 preface, went by before
        // the attacher had read the exec's report.
        self.take(0, host);
        let pids: Vec<u32> = if self.settings.discovery.selects_all() {
            tls::all_pids(proc)
        } else {
            self.discovery.scan(proc).into_iter().map(|(pid, _)| pid).collect()
        };
        if self.per_process {
            self.selected.extend(pids.iter().copied());
        }
        let mut found = Vec::new();
        let mut refused = Refused::default();
        tls::scan_processes(proc, pids, &self.looked, &mut self.overseer, &mut refused, |pid, t| found.push((pid, t)));
        self.refused.add(&refused);
        for (pid, t) in found {
            self.take(pid, t);
        }
        self.scanned = true;
        tracing::info!(
            event = "tls_scanned",
            files = self.file_links.len(),
            processes = self.pid_links.len(),
            took_ms = began.elapsed().as_millis() as u64,
            "TLS attacher: the processes running at start are attached"
        );
        self.send(true);
    }

    /// Attaches what a job found for process `pid` (0: the host's files).
    fn take(&mut self, pid: u32, t: Targets) {
        self.refused.add(&t.refused);
        for target in t.files {
            let target = Rc::new(target);
            if self.per_process {
                if self.cache.len() >= MAX_CACHED {
                    // Start again, but for the files every process has
                    // links of already (the host's).
                    let everyone = &self.file_links;
                    self.cache.retain(|id, _| everyone.contains(id));
                    let mut looked = self.looked.lock().unwrap_or_else(|e| e.into_inner());
                    looked.clear();
                    looked.extend(everyone.iter().copied());
                }
                self.cache.insert(target.id, target.clone());
            }
            self.attach(&target, pid);
        }
        for id in t.known {
            if let Some(target) = self.cache.get(&id).cloned() {
                self.attach(&target, pid);
            }
        }
    }

    /// Attaches `target` for process `pid` (per-process links), or for
    /// every process (file-wide: once a file).
    fn attach(&mut self, target: &tls::Target, pid: u32) {
        let per_process = self.per_process && pid != 0;
        if self.file_links.contains(&target.id) {
            return; // every process's already (the host's files)
        }
        if per_process && self.pid_links.get(&pid).is_some_and(|l| l.iter().any(|(id, _)| *id == target.id)) {
            return;
        }
        if per_process && !self.pid_links.contains_key(&pid) && self.pid_links.len() >= MAX_PROCESSES {
            self.counts.processes_full += 1;
            return;
        }
        let made = match self.links(target, if per_process { pid } else { 0 }) {
            Ok(Some(links)) => links,
            Ok(None) => return, // not OpenSSL
            Err(error) => {
                self.counts.failed += 1;
                tracing::warn!(event = "tls_attach_failed", path = ?target.path, pid, %error, "TLS uprobes not attached");
                return;
            }
        };
        if per_process {
            self.counts.processes += 1;
            self.pid_links.entry(pid).or_default().push((target.id, made));
            tracing::info!(event = "tls_attached", path = ?target.path, pid, kind = self.kind.name(), "TLS uprobes attached for a process");
        } else {
            self.counts.files += 1;
            self.file_links.insert(target.id);
            // Pinned: the links outlive this process, with the set.
            drop(made);
            tracing::info!(event = "tls_attached", path = ?target.path, kind = self.kind.name(), "TLS uprobes attached");
        }
        if let Some(go) = &target.go {
            // Counted by executable (a binary several processes run, once).
            if self.go_files.insert(target.id) {
                self.refused.go_attached += 1;
                tracing::info!(
                    event = "go_tls_attached",
                    path = ?target.path,
                    go = %go.version,
                    stripped = !go.symbols,
                    returns = go.read_returns.len(),
                    lazy = go.lazy.is_some() && !matches!(self.programs, Programs::Perf(_)),
                    "Go TLS uprobes attached"
                );
            }
        }
    }

    /// The links of `target` (`pid` 0: file-wide, pinned); None if it is
    /// not OpenSSL (nor Go).
    fn links(&mut self, target: &tls::Target, pid: u32) -> Result<Option<Vec<OwnedFd>>, String> {
        let through = runtime_kit::files::fd_path(target.file.as_fd());
        let mut made = Vec::new();
        if let Some(go) = &target.go {
            let (offsets, cookies) = go_probes(go);
            match &mut self.programs {
                Programs::Perf(progs) => {
                    let mut at: Vec<(&'static str, u64)> = go.read_returns.iter().map(|&o| (tls::GO_READ_EXIT, o)).collect();
                    at.push((tls::GO_READ_ENTER, go.read));
                    at.push((tls::GO_WRITE_ENTER, go.write));
                    for (i, (name, offset)) in at.into_iter().enumerate() {
                        perf_attach(progs, name, offset, &through, &self.set, target.id, i)?;
                    }
                    return Ok(Some(made));
                }
                Programs::Multi { go: prog, .. } | Programs::Session { go: prog, .. } => {
                    let fd = prog.fd().map_err(|e| e.to_string())?.as_fd();
                    made.push(
                        crate::links::create(fd, crate::links::BPF_TRACE_UPROBE_MULTI, &through, &offsets, &cookies, false, pid)
                            .map_err(|e| e.to_string())?,
                    );
                }
            }
        } else {
            // OpenSSL: each function once, with its cookie.
            let mut fns: Vec<(&'static str, u64, u64)> = Vec::new();
            for (up, offset) in tls::PROGRAMS.iter().zip(&target.offsets) {
                if let Some(o) = offset {
                    if !fns.iter().any(|(s, _, _)| *s == up.symbol) {
                        fns.push((up.symbol, *o, cookie_of(up.symbol)));
                    }
                }
            }
            let required = tls::PROGRAMS.iter().zip(&target.offsets).all(|(up, o)| !up.required || o.is_some());
            if !required {
                return Ok(None);
            }
            match &mut self.programs {
                Programs::Perf(progs) => {
                    for (i, (up, offset)) in tls::PROGRAMS.iter().zip(&target.offsets).enumerate() {
                        if let Some(offset) = offset {
                            perf_attach(progs, up.program, *offset, &through, &self.set, target.id, i)?;
                        }
                    }
                    return Ok(Some(made));
                }
                Programs::Session { session, .. } => {
                    let (offsets, cookies): (Vec<u64>, Vec<u64>) = fns.iter().map(|(_, o, c)| (*o, *c)).unzip();
                    let fd = session.fd().map_err(|e| e.to_string())?.as_fd();
                    made.push(
                        crate::links::create(fd, crate::links::BPF_TRACE_UPROBE_SESSION, &through, &offsets, &cookies, false, pid)
                            .map_err(|e| e.to_string())?,
                    );
                }
                Programs::Multi { enter, exit, .. } => {
                    let (offsets, cookies): (Vec<u64>, Vec<u64>) = fns.iter().map(|(_, o, c)| (*o, *c)).unzip();
                    let fd = enter.fd().map_err(|e| e.to_string())?.as_fd();
                    made.push(
                        crate::links::create(fd, crate::links::BPF_TRACE_UPROBE_MULTI, &through, &offsets, &cookies, false, pid)
                            .map_err(|e| e.to_string())?,
                    );
                    let returning: Vec<&(&str, u64, u64)> =
                        fns.iter().filter(|(s, _, _)| matches!(*s, "SSL_read" | "SSL_read_ex" | "SSL_do_handshake")).collect();
                    let (offsets, cookies): (Vec<u64>, Vec<u64>) = returning.iter().map(|(_, o, c)| (*o, *c)).unzip();
                    let fd = exit.fd().map_err(|e| e.to_string())?.as_fd();
                    made.push(
                        crate::links::create(fd, crate::links::BPF_TRACE_UPROBE_MULTI, &through, &offsets, &cookies, true, pid)
                            .map_err(|e| e.to_string())?,
                    );
                }
            }
        }
        if pid == 0 {
            for (i, link) in made.iter().enumerate() {
                crate::links::pin(link.as_fd(), &pins::link_tls(&self.set, target.id, i)).map_err(|e| format!("pin: {e}"))?;
            }
        }
        Ok(Some(made))
    }

    /// Reads reports until the loader goes; the exit status.
    fn run(&mut self) -> i32 {
        let ring = self.reports.as_raw_fd();
        loop {
            let now = Instant::now();
            let wait = self
                .queues
                .values()
                .flat_map(|q| q.iter().map(|p| p.due.saturating_duration_since(now)))
                .min()
                .unwrap_or(Duration::from_secs(1));
            let mut fds = [libc::pollfd { fd: ring, events: libc::POLLIN, revents: 0 }];
            let ms = i32::try_from(wait.as_millis()).unwrap_or(1000).clamp(0, 1000);
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
            self.read_reports();
            self.work();
            self.send(false);
        }
    }

    /// Reads the reports the ring holds ([`Attacher::arrive`] each).
    fn read_reports(&mut self) {
        let mut got = Vec::new();
        while let Some(item) = self.reports.next() {
            match TlsReport::parse(&item) {
                Some(r) => got.push(r),
                None => tracing::debug!("a short TLS report"),
            }
        }
        for r in got {
            self.counts.reports += 1;
            self.arrive(r);
        }
    }

    /// A report from the kernel: what needs no file read is done now (a
    /// fork, an exit, the host's files given to a process at its exec);
    /// what does is queued for its process's uid.
    fn arrive(&mut self, r: TlsReport) {
        let pid = r.tgid;
        match r.kind {
            TLSR_FORK if self.per_process => {
                self.selected.insert(pid);
                let parent: Vec<(u64, u64)> =
                    self.pid_links.get(&r.parent_tgid).map(|l| l.iter().map(|(id, _)| *id).collect()).unwrap_or_default();
                for id in parent {
                    if let Some(target) = self.cache.get(&id).cloned() {
                        self.attach(&target, pid);
                    }
                }
                // And what its parent maps that was not attached yet (the
                // parent's own report may still wait: nginx forks its
                // workers just after it listens): the child's maps, from
                // what is cached.
                self.queue(TlsReport { kind: TLSR_SELECT, flags: r.flags | RESCAN, ..r }, 2, Duration::ZERO);
            }
            TLSR_EXIT => {
                self.selected.remove(&pid);
                self.pid_links.remove(&pid);
            }
            TLSR_EXEC | TLSR_MAP | TLSR_SELECT => {
                let selected = self.settings.discovery.selects_all()
                    || r.selected()
                    || r.kind == TLSR_SELECT
                    || self.selected.contains(&pid)
                    || (r.kind == TLSR_EXEC && self.discovery.by_exe() && self.discovery.exe_matches(&r.path()));
                if !selected {
                    return;
                }
                if self.per_process {
                    self.selected.insert(pid);
                }
                self.queue(r, 0, Duration::ZERO);
            }
            _ => {}
        }
    }

    /// Queues `report` for its process's uid, to be worked on `after` from
    /// now; counted dropped past the bounds.
    fn queue(&mut self, report: TlsReport, tries: u8, after: Duration) {
        let Some(uid) = crate::budget::real_uid(Path::new("/proc"), report.tgid) else {
            self.forget(&report);
            return; // gone
        };
        let total: usize = self.queues.values().map(VecDeque::len).sum();
        let q = self.queues.entry(uid).or_default();
        if q.len() >= MAX_PER_UID || total >= MAX_PENDING {
            self.refused.files[Reason::Budget as usize] += 1;
            return;
        }
        q.push_back(Pending { due: Instant::now() + after, report, tries });
    }

    /// Works on the reports that are due, one of each uid in turn, for at
    /// most [`TURN`].
    fn work(&mut self) {
        let began = Instant::now();
        while began.elapsed() < TURN {
            let now = Instant::now();
            // The next uid after the last one served that has a report due.
            let due = |q: &VecDeque<Pending>| q.iter().any(|p| p.due <= now);
            let next = self
                .queues
                .range(self.last_uid.saturating_add(1)..)
                .chain(self.queues.range(..=self.last_uid))
                .find(|(_, q)| due(q))
                .map(|(uid, _)| *uid);
            let Some(uid) = next else { break };
            self.last_uid = uid;
            let Some(q) = self.queues.get_mut(&uid) else { break };
            let Some(at) = q.iter().position(|p| p.due <= now) else { continue };
            let Some(p) = q.remove(at) else { continue };
            if q.is_empty() {
                self.queues.remove(&uid);
            }
            self.inspect(p.report, p.tries);
        }
    }

    /// Looks at process `r.tgid`'s files and attaches what is new; a
    /// mapping not visible yet is tried again, and a process selected here
    /// (by a name the kernel has no literal for) looked at again.
    fn inspect(&mut self, r: TlsReport, tries: u8) {
        let pid = r.tgid;
        let limits = (tls::job_time(), crate::budget::PROCESS_BYTES);
        let mut found = Targets::default();
        // While the job reads, the kernel's reports are read and what needs
        // no file read done (a process's exec is not held up by another's
        // files).
        let mut overseer = std::mem::take(&mut self.overseer);
        let looked = self.looked.clone();
        tls::of_process_meanwhile(&mut overseer, Path::new("/proc"), pid, &looked, &mut found, limits, || self.read_reports());
        self.overseer = overseer;
        let wanted = (r.kind == TLSR_MAP).then_some((u64::from(r.dev_major), u64::from(r.dev_minor), r.ino));
        let seen = |id: &(u64, u64)| {
            wanted.is_some_and(|(ma, mi, ino)| libc::major(id.0) as u64 == ma && libc::minor(id.0) as u64 == mi && id.1 == ino)
        };
        let has_it = found.files.iter().any(|t| seen(&t.id)) || found.known.iter().any(seen);
        self.take(pid, found);
        if wanted.is_some() && !has_it {
            if tries < 3 && Path::new(&format!("/proc/{pid}")).exists() {
                // The mapping is made just after the call the kernel saw.
                self.queue(r, tries + 1, Duration::from_millis([5, 50, 500][usize::from(tries)]));
            } else {
                self.forget(&r);
            }
        }
        // Selected here, the process is not selected in the kernel yet:
        // the libssl it maps in its first moments is not reported.
        let ours = r.kind == TLSR_EXEC || (r.kind == TLSR_SELECT && r.flags & RESCAN != 0);
        if self.per_process && !r.selected() && ours && tries < 3 {
            let again = TlsReport { kind: TLSR_SELECT, flags: r.flags | RESCAN, ..r };
            self.queue(again, tries + 1, Duration::from_millis([20, 200, 2000][usize::from(tries)]));
        }
    }

    /// Lets the kernel report this file again (the process went before it
    /// could be looked at).
    fn forget(&mut self, r: &TlsReport) {
        if r.kind != TLSR_MAP && r.kind != TLSR_EXEC {
            return;
        }
        let tgid = if self.per_process { r.tgid } else { 0 };
        let mut key = [0u8; 24];
        key[0..4].copy_from_slice(&r.dev_major.to_ne_bytes());
        key[4..8].copy_from_slice(&r.dev_minor.to_ne_bytes());
        key[8..16].copy_from_slice(&r.ino.to_ne_bytes());
        key[16..20].copy_from_slice(&tgid.to_ne_bytes());
        let _ = self.reported.remove(&key);
    }

    /// Writes the counts to the loader when they changed (never blocks:
    /// the pipe is non-blocking, and a count not sent is sent next time).
    fn send(&mut self, scanned_now: bool) {
        let mut msg = [0u64; WORDS];
        msg[0] = MAGIC;
        msg[1] = if self.scanned || scanned_now { FLAG_SCANNED } else { 0 };
        msg[2..2 + Refused::ARRAY].copy_from_slice(&self.refused.to_array());
        let c = &mut msg[2 + Refused::ARRAY..];
        c[0] = self.counts.files;
        c[1] = self.counts.processes;
        c[2] = self.counts.failed;
        c[3] = self.counts.reports;
        c[4] = self.counts.processes_full;
        if self.sent == Some(msg) {
            return;
        }
        let mut bytes = Vec::with_capacity(WORDS * 8);
        for w in msg {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        if self.pipe.write_all(&bytes).is_ok() {
            self.sent = Some(msg);
        }
    }
}

/// The cookie of an OpenSSL function (TLSF_*).
fn cookie_of(symbol: &str) -> u64 {
    match symbol {
        "SSL_read" => TLSF_READ,
        "SSL_read_ex" => TLSF_READ_EX,
        "SSL_do_handshake" => TLSF_HANDSHAKE,
        "SSL_write" => TLSF_WRITE,
        "SSL_write_ex" => TLSF_WRITE_EX,
        _ => TLSF_FREE,
    }
}

/// Where a Go executable's `uprobe_multi` link goes, and each place's
/// cookie (`bpf/go_tls.h`): the lazy path's four probes (Read's, Write's
/// and Close's entries, Read's close_notify call; `tls.Conn.input`'s offset in
/// the cookie's high half) where the release allows it, else Read's entry
/// and returns and Write's entry.
fn go_probes(go: &crate::gobin::GoTls) -> (Vec<u64>, Vec<u64>) {
    if let Some(lazy) = go.lazy {
        let input = lazy.input << 32;
        return (
            vec![go.read, go.write, lazy.alert, lazy.close],
            vec![GOF_LAZY_READ | input, GOF_LAZY_WRITE | input, GOF_LAZY_ALERT | input, GOF_LAZY_CLOSE | input],
        );
    }
    let mut offsets = vec![go.read, go.write];
    let mut cookies = vec![GOF_READ, GOF_WRITE];
    for r in &go.read_returns {
        offsets.push(*r);
        cookies.push(GOF_READ_RET);
    }
    (offsets, cookies)
}

/// A perf-event uprobe of program `name` at `offset` of the file at
/// `through`, its link pinned in `set` (older kernels: file-wide).
fn perf_attach(
    progs: &mut [(&'static str, UProbe)],
    name: &'static str,
    offset: u64,
    through: &Path,
    set: &Path,
    id: (u64, u64),
    i: usize,
) -> Result<(), String> {
    let prog = &mut progs.iter_mut().find(|(n, _)| *n == name).ok_or_else(|| format!("no program {name}"))?.1;
    let link = prog.attach(UProbeAttachLocation::AbsoluteOffset(offset), through, UProbeScope::AllProcesses).map_err(|e| e.to_string())?;
    let link = prog.take_link(link).map_err(|e| e.to_string())?;
    let link = aya::programs::links::FdLink::try_from(link).map_err(|e| e.to_string())?;
    link.pin(pins::link_tls(set, id, i)).map_err(|e| e.to_string())?;
    Ok(())
}

/// The files (device, inode) whose file-wide links are pinned in `set`.
fn pinned_files(set: &Path) -> BTreeSet<(u64, u64)> {
    let Ok(entries) = std::fs::read_dir(set) else { return BTreeSet::new() };
    entries.flatten().filter_map(|e| pins::tls_file_of(&e.file_name().into_string().ok()?)).collect()
}
