//! The capture backend: which hooks see socket I/O on this kernel.
//!
//! - `socket`: `tp_btf/sock_recv_length` and `sock_send_length` (Linux 6.3+),
//!   `bpf/sock.bpf.c`.
//! - `syscalls`: the `syscalls/sys_{enter,exit}_*` tracepoints of the
//!   socket-capable calls (Linux 5.8+ with BTF, tracefs), `bpf/syscalls.bpf.c`.
//!
//! Both feed the same connection state machine (`bpf/conn.h`); each is its
//! own eBPF object (build.rs), with the process hooks. `auto` takes `socket`
//! when the kernel's BTF has both socket tracepoints, decided by probing, not
//! by the version number.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use aya::Btf;
use aya_obj::btf::BtfKind;
use ringtail_config::Backend;

use crate::kernel::{SOCKET_OBJECT, SOCKET_PROPAGATE_OBJECT, SYSCALLS_LOOP_OBJECT, SYSCALLS_NOXCHG_OBJECT, SYSCALLS_OBJECT};

/// Propagation's programs (`probe.propagate`, bpf/propagate.bpf.c): the
/// sk_msg program that writes a traceparent, the sockops program that
/// claims traced processes' connections for it.
pub const PROPAGATION_PROGRAMS: [&str; 2] = ["prop_msg", "prop_sockops"];

/// A backend in use (what `auto` became).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chosen {
    Socket,
    Syscalls,
}

/// Where a program attaches.
#[derive(Debug, Clone, Copy)]
pub enum Hook {
    /// A BTF tracepoint (`tp_btf`), by name.
    Btf(&'static str),
    /// Tracefs tracepoints `syscalls/<name>`, one attachment each.
    Syscalls(&'static [&'static str]),
}

/// The socket-capable calls whose user buffers `bpf/io.h` can find
/// (sendfile moves no user memory, so it has nothing to read).
/// Three-argument calls, and the six-argument ones (bpf/syscalls.bpf.c).
const SYS_ENTER_3: &[&str] =
    &["sys_enter_read", "sys_enter_readv", "sys_enter_write", "sys_enter_writev", "sys_enter_recvmsg", "sys_enter_sendmsg"];
const SYS_ENTER_6: &[&str] = &["sys_enter_recvfrom", "sys_enter_sendto"];
const SYS_EXIT_RECV: &[&str] = &["sys_exit_read", "sys_exit_readv", "sys_exit_recvfrom", "sys_exit_recvmsg"];
const SYS_EXIT_SEND: &[&str] = &["sys_exit_write", "sys_exit_writev", "sys_exit_sendto", "sys_exit_sendmsg"];

/// Process hooks, shared by both objects: attached first, so the data
/// programs never see a half-set-up world.
const PROCESS: [(&str, Hook); 3] = [
    ("process_fork", Hook::Btf("sched_process_fork")),
    ("process_exit", Hook::Btf("sched_process_exit")),
    ("process_exec", Hook::Btf("sched_process_exec")),
];

const SOCKET_PROGRAMS: &[(&str, Hook)] = &[
    PROCESS[0],
    PROCESS[1],
    PROCESS[2],
    ("sock_state", Hook::Btf("inet_sock_set_state")),
    // the TLS connections' records, in their own table (bpf/sock_tls.bpf.c)
    ("tls_sock_state", Hook::Btf("inet_sock_set_state")),
    ("sock_recv", Hook::Btf("sock_recv_length")),
    ("sock_send", Hook::Btf("sock_send_length")),
];

const SYSCALLS_PROGRAMS: &[(&str, Hook)] = &[
    PROCESS[0],
    PROCESS[1],
    PROCESS[2],
    ("sock_state", Hook::Btf("inet_sock_set_state")),
    // exits before enters: an exit never waits for an enter that was missed
    ("sys_exit_recv", Hook::Syscalls(SYS_EXIT_RECV)),
    ("sys_exit_send", Hook::Syscalls(SYS_EXIT_SEND)),
    ("sys_enter_3", Hook::Syscalls(SYS_ENTER_3)),
    ("sys_enter_6", Hook::Syscalls(SYS_ENTER_6)),
];

/// The tracefs mount point the loader uses, and the older debugfs one.
const TRACEFS: &str = "/sys/kernel/tracing";
const TRACEFS_IN_DEBUGFS: &str = "/sys/kernel/debug/tracing";

/// Why no backend can be used.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(
        "probe.backend = \"socket\": this kernel has no sock_recv_length/sock_send_length tracepoints (Linux 6.3+); use \"auto\" or \"syscalls\""
    )]
    NoSocketTracepoints,
    #[error("probe.backend = {backend:?}: no syscall tracepoints in {tracefs} (CONFIG_FTRACE_SYSCALLS=y needed){}", if *.auto { " and no socket tracepoints (Linux 6.3+) either" } else { "" })]
    NoSyscallTracepoints { backend: &'static str, tracefs: String, auto: bool },
    #[error("cannot mount tracefs on {TRACEFS} (needed by the syscall tracepoints; CAP_SYS_ADMIN)")]
    MountTracefs {
        #[source]
        source: std::io::Error,
    },
}

impl Chosen {
    /// The name logged and exported (`probe.backend`'s spelling).
    pub fn name(self) -> &'static str {
        match self {
            Chosen::Socket => Backend::Socket.name(),
            Chosen::Syscalls => Backend::Syscalls.name(),
        }
    }

    /// The eBPF object for this kernel (`btf`, its BTF); with propagation's
    /// programs (`probe.propagate`, socket backend only) if `propagate`.
    /// (Call it while privileged: the syscall backend's depends on whether
    /// this kernel has atomic exchange, found by loading a program.)
    pub fn object(self, propagate: bool, btf: &Btf) -> &'static [u8] {
        let socket = self == Chosen::Socket;
        self.object_with(propagate, socket || has_atomic_exchange(), socket || has_bpf_loop(btf))
    }

    /// The eBPF object, with atomic exchange or without (the syscall
    /// backend's, for kernels before 5.12), with bpf_loop or without (the
    /// syscall backend's, for kernels before 5.17).
    fn object_with(self, propagate: bool, xchg: bool, bpf_loop: bool) -> &'static [u8] {
        match self {
            Chosen::Socket if propagate => SOCKET_PROPAGATE_OBJECT,
            Chosen::Socket => SOCKET_OBJECT,
            Chosen::Syscalls if xchg && bpf_loop => SYSCALLS_LOOP_OBJECT,
            Chosen::Syscalls if xchg => SYSCALLS_OBJECT,
            Chosen::Syscalls => SYSCALLS_NOXCHG_OBJECT,
        }
    }

    /// (program, hook) in attach order.
    pub fn programs(self) -> &'static [(&'static str, Hook)] {
        match self {
            Chosen::Socket => SOCKET_PROGRAMS,
            Chosen::Syscalls => SYSCALLS_PROGRAMS,
        }
    }

    /// Decides `configured` for this kernel. Choosing `syscalls` makes sure
    /// tracefs is mounted (so call this while still privileged).
    pub fn decide(configured: Backend, btf: &Btf) -> Result<Chosen, BackendError> {
        let socket = has_socket_tracepoints(btf);
        match configured {
            Backend::Socket if socket => Ok(Chosen::Socket),
            Backend::Socket => Err(BackendError::NoSocketTracepoints),
            Backend::Auto if socket => Ok(Chosen::Socket),
            Backend::Auto | Backend::Syscalls => {
                let tracefs = ensure_tracefs()?;
                if !has_syscall_tracepoints(&tracefs) {
                    return Err(BackendError::NoSyscallTracepoints {
                        backend: configured.name(),
                        tracefs: tracefs.display().to_string(),
                        auto: configured == Backend::Auto,
                    });
                }
                Ok(Chosen::Syscalls)
            }
        }
    }
}

/// Whether the kernel's BTF declares both socket tracepoints (what a
/// `tp_btf` program attaches by).
pub fn has_socket_tracepoints(btf: &Btf) -> bool {
    ["btf_trace_sock_recv_length", "btf_trace_sock_send_length"].iter().all(|name| btf.id_by_type_name_kind(name, BtfKind::Typedef).is_ok())
}

/// Whether the kernel has the bpf_loop helper (Linux 5.17+): its BTF
/// declares the helper's function. (Every kernel with bpf_loop has atomic
/// exchange.)
pub fn has_bpf_loop(btf: &Btf) -> bool {
    btf.id_by_type_name_kind("bpf_loop", BtfKind::Func).is_ok()
}

/// Whether the kernel's BPF has atomic exchange (Linux 5.12+; without, the
/// syscall backend's object built without it is loaded: bpf/http1_conn.h's
/// HAVE_XCHG, build.rs's NO_XCHG), decided by loading a program that
/// uses one: an exchange on its stack, as a socket filter (any program type
/// will do). Older kernels refuse the instruction ("BPF_XADD uses reserved
/// fields"); so does a process that may not load programs, which is then
/// refused its real ones anyway.
pub fn has_atomic_exchange() -> bool {
    /// `struct bpf_insn`: opcode, registers (dst low nibble, src high), offset, immediate.
    const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
        let o = off.to_le_bytes();
        let i = imm.to_le_bytes();
        [code, dst | (src << 4), o[0], o[1], i[0], i[1], i[2], i[3]]
    }
    const MOV64_IMM: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
    const STX_DW: u8 = 0x7b; // BPF_STX | BPF_MEM | BPF_DW
    const ATOMIC_DW: u8 = 0xdb; // BPF_STX | BPF_ATOMIC | BPF_DW
    const XCHG: i32 = 0xe1; // BPF_XCHG (BPF_FETCH | 0xe0)
    const EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT
    let prog: [[u8; 8]; 6] = [
        insn(MOV64_IMM, 1, 0, 0, 0),
        insn(STX_DW, 10, 1, -8, 0), // *(u64 *)(r10 - 8) = r1
        insn(MOV64_IMM, 1, 0, 0, 1),
        insn(ATOMIC_DW, 10, 1, -8, XCHG), // r1 = xchg((u64 *)(r10 - 8), r1)
        insn(MOV64_IMM, 0, 0, 0, 0),
        insn(EXIT, 0, 0, 0, 0),
    ];
    let license = c"GPL";
    // `union bpf_attr` for BPF_PROG_LOAD: prog_type, insn_cnt, insns,
    // license; the rest (log, version, flags...) zero. 128 bytes cover
    // every field a kernel reads for this command.
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&1u32.to_ne_bytes()); // BPF_PROG_TYPE_SOCKET_FILTER
    attr[4..8].copy_from_slice(&(prog.len() as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&(prog.as_ptr() as u64).to_ne_bytes());
    attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
    const BPF_PROG_LOAD: libc::c_long = 5;
    // SAFETY: attr is a zeroed bpf_attr of the size passed, whose pointers
    // (the instructions, the license) outlive the call; the kernel only
    // reads them. A descriptor returned is closed at once.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_PROG_LOAD, attr.as_mut_ptr(), attr.len() as u32) };
    if fd < 0 {
        return false;
    }
    // SAFETY: fd is the descriptor just returned, owned here.
    unsafe { libc::close(fd as libc::c_int) };
    true
}

/// Whether every syscall tracepoint the backend attaches to exists.
pub fn has_syscall_tracepoints(tracefs: &Path) -> bool {
    SYS_ENTER_3
        .iter()
        .chain(SYS_ENTER_6)
        .chain(SYS_EXIT_RECV)
        .chain(SYS_EXIT_SEND)
        .all(|tp| tracefs.join("events/syscalls").join(tp).join("id").exists())
}

/// A mounted tracefs, if any (the places aya looks, in its order).
pub fn tracefs() -> Option<PathBuf> {
    [TRACEFS, TRACEFS_IN_DEBUGFS].into_iter().map(PathBuf::from).find(|p| p.join("events").is_dir())
}

/// A mounted tracefs: the one there is, or a new mount on
/// /sys/kernel/tracing (systems that do not mount it at boot).
pub fn ensure_tracefs() -> Result<PathBuf, BackendError> {
    if let Some(p) = tracefs() {
        return Ok(p);
    }
    let c = |s: &str| CString::new(s).expect("no NUL in a constant");
    let (source, target, fstype) = (c("tracefs"), c(TRACEFS), c("tracefs"));
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    // SAFETY: every pointer is a valid NUL-terminated string that outlives
    // the call; data may be NULL.
    let rc = unsafe { libc::mount(source.as_ptr(), target.as_ptr(), fstype.as_ptr(), flags, std::ptr::null()) };
    if rc != 0 {
        return Err(BackendError::MountTracefs { source: std::io::Error::last_os_error() });
    }
    tracing::info!(event = "mounted_tracefs", path = TRACEFS, "mounted tracefs for the syscall tracepoints");
    Ok(PathBuf::from(TRACEFS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// This kernel (6.18 here; the kernel matrix runs this on 5.10, where
    /// it must say no, through the loader's check-kernel) has exchange.
    #[test]
    fn atomic_exchange_is_found_on_a_kernel_that_has_it() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: needs root (loads a program)");
            return;
        }
        assert!(has_atomic_exchange());
    }

    /// Each backend's list names exactly the programs of its object: none
    /// missing at attach time, none compiled and silently never attached.
    #[test]
    fn each_backend_attaches_every_program_of_its_object() {
        for (backend, propagate, xchg, bpf_loop) in [
            (Chosen::Socket, false, true, true),
            (Chosen::Socket, true, true, true),
            (Chosen::Syscalls, false, true, true),
            (Chosen::Syscalls, false, true, false),
            (Chosen::Syscalls, false, false, false),
        ] {
            let object = aya_obj::Object::parse(backend.object_with(propagate, xchg, bpf_loop)).expect("parse the eBPF object");
            let in_object: BTreeSet<&str> = object.programs.keys().map(String::as_str).collect();
            let extra: &[&str] = if propagate { &PROPAGATION_PROGRAMS } else { &[] };
            // The TLS programs of every kind of link, and the mmap hook.
            let tls = [crate::links::Kind::Perf, crate::links::Kind::Multi, crate::links::Kind::Session]
                .into_iter()
                .flat_map(|k| k.programs().iter().map(|(name, _)| *name))
                .chain(["tls_mmap"]);
            let listed: BTreeSet<&str> = backend.programs().iter().map(|(name, _)| *name).chain(tls).chain(extra.iter().copied()).collect();
            assert_eq!(in_object, listed, "{} propagate={propagate}", backend.name());
        }
    }

    /// The object for kernels before 5.12 holds no atomic instruction but
    /// a plain add (BPF_XADD, immediate 0): their verifier refuses any other
    /// ("BPF_STX uses reserved fields") before it looks at what is reached.
    /// The other syscall object does have exchanges (what it is for).
    #[test]
    fn the_object_for_old_kernels_has_no_atomic_but_add() {
        let atomics = |bytes: &[u8]| -> Vec<i32> {
            let object = aya_obj::Object::parse(bytes).expect("parse the eBPF object");
            object
                .functions
                .values()
                .flat_map(|f| f.instructions.iter())
                .filter(|i| i.code & 0x07 == 0x03 && i.code & 0xe0 == 0xc0) // BPF_STX | BPF_ATOMIC
                .map(|i| i.imm)
                .collect()
        };
        let old = atomics(SYSCALLS_NOXCHG_OBJECT);
        assert!(old.iter().all(|imm| *imm == 0), "{old:x?}");
        assert!(atomics(SYSCALLS_OBJECT).contains(&0xe1), "BPF_XCHG expected");
    }

    #[test]
    fn the_syscall_backend_hooks_each_socket_call_on_enter_and_exit() {
        let mut enters = BTreeSet::new();
        let mut exits = BTreeSet::new();
        for (_, hook) in Chosen::Syscalls.programs() {
            if let Hook::Syscalls(tps) = hook {
                for tp in *tps {
                    let (set, call) = match tp.strip_prefix("sys_enter_") {
                        Some(call) => (&mut enters, call),
                        None => (&mut exits, tp.strip_prefix("sys_exit_").expect("sys_enter_ or sys_exit_")),
                    };
                    assert!(set.insert(call), "{tp} attached twice");
                }
            }
        }
        let calls: BTreeSet<&str> = ["read", "readv", "recvfrom", "recvmsg", "write", "writev", "sendto", "sendmsg"].into();
        assert_eq!(enters, calls);
        assert_eq!(exits, calls);
    }
}
