//! `ringtail check-kernel` (run as `ringtail-probe-loader check-kernel
//! [--config FILE]`): what this kernel offers ringtail, each part actually
//! probed (the real eBPF objects loaded and attached for a moment, maps
//! created), the capabilities this process has, and what ringtail will use
//! and cannot do here. Exit status 0 when ringtail can run, 1 when it cannot,
//! 2 for a bad command line or configuration.

use std::ffi::CStr;
use std::path::Path;

use aya::Btf;
use ringtail_config::{Backend, DiscoverySettings, Settings};

use crate::backend::{self, Chosen};
use crate::{privileges, probes};

/// One line of the report.
struct Line {
    what: &'static str,
    ok: bool,
    detail: String,
}

fn line(what: &'static str, ok: bool, detail: impl Into<String>) -> Line {
    Line { what, ok, detail: detail.into() }
}

/// The running kernel's release (`uname -r`).
fn kernel_release() -> String {
    // SAFETY: uname fills the zeroed struct it is given; its fields are then
    // NUL-terminated strings.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return "unknown".into();
        }
        CStr::from_ptr(u.release.as_ptr()).to_string_lossy().into_owned()
    }
}

/// Whether `path` is the root of a filesystem of type `magic`.
fn is_fs(path: &str, magic: i64) -> bool {
    let Ok(c) = std::ffi::CString::new(path) else { return false };
    // SAFETY: c is a valid NUL-terminated path; st is written by statfs.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == magic
    }
}

const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// The verifier's limit on instructions processed for one program (Linux
/// 5.2+; BPF_COMPLEXITY_LIMIT_INSNS).
const VERIFIER_LIMIT: u32 = 1_000_000;

/// Creates (and closes) a BPF ring buffer map: whether the kernel has them.
fn ring_buffer_works() -> Result<(), std::io::Error> {
    // union bpf_attr for BPF_MAP_CREATE: map_type, key_size, value_size,
    // max_entries (then zeros).
    let mut attr = [0u32; 32];
    attr[0] = 27; // BPF_MAP_TYPE_RINGBUF
    attr[3] = 4096;
    // SAFETY: attr is a zero-padded bpf_attr of the size passed.
    let fd = unsafe {
        libc::syscall(libc::SYS_bpf, 0 /* BPF_MAP_CREATE */, attr.as_ptr(), std::mem::size_of_val(&attr))
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is ours and open.
    unsafe { libc::close(fd as i32) };
    Ok(())
}

/// A small hash map, to try what the kernel lets a process do with a map
/// it holds (None when none can be created).
fn small_map() -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // union bpf_attr for BPF_MAP_CREATE: map_type, key_size, value_size,
    // max_entries (then zeros).
    let mut attr = [0u32; 32];
    attr[0] = 1; // BPF_MAP_TYPE_HASH
    attr[1] = 4;
    attr[2] = 1;
    attr[3] = 1;
    // SAFETY: attr is a zero-padded bpf_attr of the size passed.
    let fd = unsafe {
        libc::syscall(libc::SYS_bpf, 0 /* BPF_MAP_CREATE */, attr.as_ptr(), std::mem::size_of_val(&attr))
    };
    // SAFETY: a non-negative return is a new fd that nothing else owns.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// Loads and attaches `backend`'s programs (selecting only this process,
/// which the programs never trace), then detaches them; what the verifier
/// said of each.
fn try_backend(btf: &Btf, backend: Chosen, settings: &Settings) -> Result<Vec<probes::ProgramStats>, String> {
    let discovery = DiscoverySettings { pids: vec![std::process::id()], ..DiscoverySettings::default() };
    let mut probe = settings.probe.clone();
    probe.ring_buffer_mb = 1;
    probes::Probes::attach_fresh(btf, backend, &probe, &discovery, &settings.tls, 1, None)
        .and_then(|(mut probes, _rings)| probes.attach_tls(&settings.tls, Vec::new()).map(|_| probes.program_stats()))
        .map_err(|e| {
            let mut s = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(inner) = src {
                s.push_str(": ");
                s.push_str(&inner.to_string());
                src = inner.source();
            }
            // the whole verifier log to stderr; its end (the reason) in the report
            eprintln!("{}: {s}", backend.name());
            let lines: Vec<&str> = s.lines().collect();
            let first = lines.first().copied().unwrap_or_default();
            let last = lines.iter().rev().take(2).rev().copied().collect::<Vec<_>>().join(" | ");
            if lines.len() > 1 {
                format!("{first} ... {last}")
            } else {
                first.to_owned()
            }
        })
}

fn config_path() -> Result<Option<std::path::PathBuf>, String> {
    let mut args = std::env::args_os().skip(2);
    let mut config = None;
    while let Some(a) = args.next() {
        if a == "--config" {
            config = Some(args.next().ok_or("--config needs a file")?.into());
        } else {
            return Err(format!("unknown argument {a:?} (usage: check-kernel [--config FILE])"));
        }
    }
    Ok(config)
}

/// Runs the checks and prints the report; returns the exit status.
pub fn main() -> i32 {
    let settings = match config_path().and_then(|c| Settings::load(c.as_deref()).map_err(|e| e.to_string())) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("check-kernel: {e}");
            return 2;
        }
    };
    let mut lines = Vec::new();
    let mut cannot = Vec::new();
    lines.push(line("kernel", true, kernel_release()));
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;

    let caps = privileges::check(settings.probe.read_process_env, settings.probe.propagate || settings.probe.carrier);
    lines.push(line(
        "capabilities",
        caps.is_ok(),
        match &caps {
            Ok(()) => "enough to load the probes".to_owned(),
            Err(e) => format!("{e} (effective: {})", privileges::effective()),
        },
    ));

    let btf = Btf::from_sys_fs();
    lines.push(line(
        "BTF",
        btf.is_ok(),
        match &btf {
            Ok(_) => "/sys/kernel/btf/vmlinux".to_owned(),
            Err(e) => format!("/sys/kernel/btf/vmlinux: {e} (CONFIG_DEBUG_INFO_BTF=y needed)"),
        },
    ));
    let bpffs = is_fs("/sys/fs/bpf", BPF_FS_MAGIC);
    lines.push(line("bpffs", bpffs, if bpffs { "/sys/fs/bpf" } else { "not mounted on /sys/fs/bpf (not needed today)" }));

    let tracefs = match backend::tracefs() {
        Some(p) => Ok(format!("{}", p.display())),
        None if root => {
            backend::ensure_tracefs().map(|p| format!("{} (mounted now, as the loader would)", p.display())).map_err(|e| e.to_string())
        }
        None => Err("not mounted (the loader mounts it when it needs it; run as root to check)".to_owned()),
    };
    lines.push(line("tracefs", tracefs.is_ok(), tracefs.clone().unwrap_or_else(|e| e)));

    let ring = ring_buffer_works();
    lines.push(line(
        "ring buffer",
        ring.is_ok(),
        match &ring {
            Ok(()) => "BPF_MAP_TYPE_RINGBUF created".to_owned(),
            Err(e) => format!("cannot create one: {e} (Linux 5.8+)"),
        },
    ));

    let xchg = backend::has_atomic_exchange();
    lines.push(line(
        "atomic exchange",
        xchg,
        if xchg {
            "BPF_XCHG loads: a client's answer read before its send is reported is settled at once"
        } else {
            "refused (Linux 5.12+): a client's answer read while its request is reported may wait for its next send"
        },
    ));
    if !xchg {
        cannot.push("settle every early answer of a client that reads on another thread at once (Linux 5.12+)".to_owned());
    }
    if let Ok(btf) = &btf {
        let bpf_loop = backend::has_bpf_loop(btf);
        lines.push(line(
            "bpf_loop",
            bpf_loop,
            if bpf_loop {
                "in the kernel's BTF: an HTTP/2 call's frames are walked in up to 16 records (some 6,500 frames), on either backend"
            } else {
                "not in the kernel's BTF (Linux 5.17+): the syscall backend walks at most 32 to 60 HTTP/2 frames a call, and gives up a connection that sends more at once"
            },
        ));
        if !bpf_loop {
            cannot.push("follow an HTTP/2 connection that moves more than 32 to 60 frames in one call (Linux 5.17+)".to_owned());
        }
    }

    // What the loader keeps once started (besides tls.attach_later's).
    if let Some(map) = small_map() {
        use std::os::fd::AsFd;
        let need = privileges::map_access_needs_cap_bpf(map.as_fd());
        lines.push(line(
            "after start",
            true,
            if need {
                "the loader keeps CAP_BPF: this kernel lets only CAP_BPF use BPF maps (kernel.unprivileged_bpf_disabled, Linux < 6.5)"
            } else {
                "the loader keeps no capability"
            },
        ));
    }

    let mut usable = Vec::new();
    let mut verified: Vec<(Chosen, Vec<probes::ProgramStats>)> = Vec::new();
    // the socket object's variant with propagation's programs
    let mut propagation_stats: Vec<probes::ProgramStats> = Vec::new();
    if let Ok(btf) = &btf {
        let socket_tp = backend::has_socket_tracepoints(btf);
        let socket =
            if socket_tp { try_backend(btf, Chosen::Socket, &settings) } else { Err("not in the kernel's BTF (Linux 6.3+)".into()) };
        lines.push(line(
            "socket tracepoints",
            socket.is_ok(),
            match &socket {
                Ok(_) => "sock_recv_length/sock_send_length: socket backend loaded and attached".to_owned(),
                Err(e) => e.clone(),
            },
        ));
        lines.push(line(
            "task storage",
            socket.is_ok(),
            if socket.is_ok() { "created (socket backend)".to_owned() } else { "not probed (only the socket backend uses it)".to_owned() },
        ));
        // probe.propagate: the socket object's variant with its programs,
        // the sockops one attached to the cgroup v2 root for a moment
        let propagation = match &socket {
            Ok(_) => {
                let mut with = settings.clone();
                with.probe.propagate = true;
                try_backend(btf, Chosen::Socket, &with)
            }
            Err(_) => Err("needs the socket backend (Linux 6.3+)".to_owned()),
        };
        lines.push(line(
            "propagation",
            propagation.is_ok(),
            match &propagation {
                Ok(_) => {
                    "sockops on the cgroup v2 root, sk_msg on its socket map: loaded and attached (probe.propagate can be on)".to_owned()
                }
                Err(e) => e.clone(),
            },
        ));
        if let Ok(stats) = &propagation {
            propagation_stats = stats.clone();
        }
        if propagation.is_err() {
            cannot.push("write a traceparent into traced clients' HTTP/1 requests (probe.propagate)".to_owned());
        } else {
            // What a socket in the map sees of FIONREAD (sockmap.rs): where
            // it reads 0, "auto" writes each connection's first request only.
            let fionread = crate::sockmap::fionread_in_socket_map();
            lines.push(line(
                "socket map FIONREAD",
                fionread == Ok(crate::sockmap::Fionread::Right),
                match &fionread {
                    Ok(crate::sockmap::Fionread::Right) => {
                        "right for a socket in a socket map: probe.propagate_keep_alive = \"auto\" writes every request a connection keeps alive".to_owned()
                    }
                    Ok(crate::sockmap::Fionread::ReadsZero) => "reads 0 for a socket in a socket map (kernel commit 929e30f93125): probe.propagate_keep_alive = \"auto\" takes each connection out of the map within its first request's send".to_owned(),
                    Err(e) => format!("not tried: {e}"),
                },
            ));
            if fionread != Ok(crate::sockmap::Fionread::Right) {
                cannot.push("write a traceparent into the later requests of a kept-alive connection without changing what FIONREAD says to its client (probe.propagate_keep_alive = \"auto\": first requests only; \"always\" takes the FIONREAD change)".to_owned());
            }
            lines.push(line(
                "blocking sockets",
                true,
                "never put in the socket map (a recv waiting in tcp_bpf_recvmsg returns EAGAIN when a signal, a FIN's ack or room to write wakes it, on every kernel): their requests are not written (blocking_socket)",
            ));
        }
        // probe.carrier: the same object with the carrier's paths, the
        // sockops program alone attached for a moment
        let carrier = match &socket {
            Ok(_) => {
                let mut with = settings.clone();
                (with.probe.propagate, with.probe.carrier) = (false, true);
                try_backend(btf, Chosen::Socket, &with)
            }
            Err(_) => Err("needs the socket backend (Linux 6.3+)".to_owned()),
        };
        lines.push(line(
            "carrier",
            carrier.is_ok(),
            match &carrier {
                Ok(_) => {
                    "sockops on the cgroup v2 root with the TCP header option callbacks: loaded and attached (probe.carrier can be on)"
                        .to_owned()
                }
                Err(e) => e.clone(),
            },
        ));
        if carrier.is_err() {
            cannot.push("carry a request's trace context to the next host in a TCP header option (probe.carrier)".to_owned());
        }
        let sys_tp = tracefs.is_ok() && backend::tracefs().is_some_and(|p| backend::has_syscall_tracepoints(&p));
        let syscalls = if sys_tp {
            try_backend(btf, Chosen::Syscalls, &settings)
        } else {
            Err("syscalls/sys_enter_* not found in tracefs (CONFIG_FTRACE_SYSCALLS=y)".into())
        };
        lines.push(line(
            "syscall tracepoints",
            syscalls.is_ok(),
            match &syscalls {
                Ok(_) => "syscalls/sys_{enter,exit}_{read,write,...}: syscall backend loaded and attached".to_owned(),
                Err(e) => e.clone(),
            },
        ));
        for (backend, result) in [(Chosen::Socket, socket), (Chosen::Syscalls, syscalls)] {
            if let Ok(stats) = result {
                usable.push(backend);
                verified.push((backend, stats));
            }
        }
    }
    let uprobe = Path::new("/sys/bus/event_source/devices/uprobe/type").exists();
    lines.push(line("uprobes", uprobe, if uprobe { "uprobe PMU present (not attached)" } else { "no uprobe PMU (CONFIG_UPROBE_EVENTS)" }));
    if !uprobe {
        cannot.push("uprobe hooks (library-level capture such as TLS) cannot attach".to_owned());
    }
    if let Ok(btf) = &btf {
        // How the TLS attacher attaches (links.rs): decided from the BTF.
        let kind = crate::links::Kind::of_kernel(btf);
        let detail = match kind {
            crate::links::Kind::Session => {
                "uprobe sessions (6.13+): one link a file, a return probe only when its entry asks; per-process links"
            }
            crate::links::Kind::Multi => "uprobe_multi (6.6+): two links a file (entries, returns); per-process links; no sessions (6.13+)",
            crate::links::Kind::Perf => "perf events (before 6.6): one a function; every process mapping a file traps",
        };
        lines.push(line("tls links", true, detail));
    }

    let configured = settings.probe.backend;
    let chosen = match configured {
        Backend::Socket => usable.iter().copied().find(|b| *b == Chosen::Socket),
        Backend::Syscalls => usable.iter().copied().find(|b| *b == Chosen::Syscalls),
        Backend::Auto => usable.first().copied(),
    };
    // Probes outlive a loader restart only where every attachment is a BPF
    // link: tp_btf ones always are; a tracefs tracepoint's is from Linux
    // 5.15 on (before, a perf event ioctl attaches it and makes no link).
    let pinnable = match chosen {
        Some(Chosen::Socket) => Some(true),
        Some(Chosen::Syscalls) => Some(aya::features().bpf_perf_link()),
        None => None,
    };
    if let Some(p) = pinnable {
        lines.push(line(
            "pins",
            p,
            if p {
                "every attachment is a BPF link: the probes can be pinned and outlive a loader restart"
            } else {
                "tracepoint attachments are not BPF links before Linux 5.15: nothing is pinned (pins_unsupported)"
            },
        ));
        if !p && settings.probe.pins() {
            cannot.push("keep capturing while the loader restarts: the probes cannot be pinned on this kernel".to_owned());
        }
    }
    match chosen {
        Some(Chosen::Syscalls) => {
            cannot.push(format!(
                "the syscall backend tracks at most probe.max_connections = {} connections at once (beyond it, new ones are counted, not traced)",
                settings.probe.max_connections
            ));
            cannot.push(
                "the syscall backend's programs run on every read/write of traced processes (files and pipes leave early)".to_owned(),
            );
        }
        Some(Chosen::Socket) | None => {}
    }
    cannot
        .push("sendfile/splice/io_uring move no user memory: those bytes are not read (status lines sent that way are missed)".to_owned());

    for l in &lines {
        println!("{:<20} {:<4} {}", l.what, if l.ok { "ok" } else { "no" }, l.detail);
    }
    // The verifier's work per program: what is left of its budget on this
    // kernel (a program over it is refused).
    for (backend, stats) in &verified {
        for st in stats {
            let insns = st.verified_insns.map_or_else(|| "unknown (Linux 5.16+ reports it)".to_owned(), |n| n.to_string());
            println!("{:<20} {:<4} {} {} {insns} of {VERIFIER_LIMIT} instructions", "verifier", "ok", backend.name(), st.name);
        }
    }
    for st in &propagation_stats {
        let insns = st.verified_insns.map_or_else(|| "unknown (Linux 5.16+ reports it)".to_owned(), |n| n.to_string());
        println!("{:<20} {:<4} socket+propagate {} {insns} of {VERIFIER_LIMIT} instructions", "verifier", "ok", st.name);
    }
    println!();
    match chosen {
        Some(b) => println!("ringtail will use: probe.backend = {:?} -> {}", configured.name(), b.name()),
        None => println!(
            "ringtail cannot run here: probe.backend = {:?} has no usable backend{}",
            configured.name(),
            if usable.is_empty() { "" } else { " (another backend would work)" }
        ),
    }
    for c in &cannot {
        println!("cannot: {c}");
    }
    if chosen.is_some() && caps.is_ok() {
        0
    } else {
        1
    }
}
