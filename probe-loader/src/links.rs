//! How the TLS uprobes are attached on this kernel, decided at start.
//!
//! - [`Kind::Session`] (Linux 6.13+): one `uprobe_multi` link a file (a
//!   process, with per-process links) in session mode: one program on every
//!   OpenSSL function, told apart by the link's cookie, whose entry says
//!   whether the return runs (`bpf/tls_hooks.h`, `tls_session`): SSL_write
//!   and SSL_free take one trap, not two as a return probe would, and a
//!   process not selected takes none with per-process links.
//! - [`Kind::Multi`] (6.6–6.12): `uprobe_multi` links, an entry link and a
//!   return link a file (`tls_multi_enter`, `tls_multi_exit`); the pid
//!   filter too.
//! - [`Kind::Perf`] (before 6.6: Debian's 5.10 and 6.1): a perf event per
//!   function, the programs of before (`tls_read_enter`...), every process
//!   that maps the file trapping.
//!
//! Go's crypto/tls gets `go_tls_multi` on multi and session kernels (no
//! return probes in Go: its stacks move). Decided from the kernel's BTF
//! (`bpf_uprobe_multi_link_attach`, the `BPF_TRACE_UPROBE_SESSION` value),
//! never from the version number; `ringtail check-kernel` says which.
//!
//! aya 0.14 makes uprobes as perf events only, and loads a program with no
//! expected attach type, which a `uprobe_multi` link needs: the vendored
//! aya (`vendor/aya-0.14.0-ringtail`) adds `UProbe::load_with_attach_type`,
//! and the links are made here by `bpf(BPF_LINK_CREATE)`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

use aya::Btf;
use aya_obj::btf::BtfKind;

/// `enum bpf_attach_type` values aya 0.14's bindings may lack.
pub const BPF_TRACE_UPROBE_MULTI: u32 = 48;
pub const BPF_TRACE_UPROBE_SESSION: u32 = 57;
/// `link_create.uprobe_multi.flags`: the link is of return probes.
pub const BPF_F_UPROBE_MULTI_RETURN: u32 = 1;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_OBJ_PIN: libc::c_long = 6;

/// How TLS uprobes are attached (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Perf,
    Multi,
    Session,
}

impl Kind {
    /// What this kernel offers, from its BTF.
    pub fn of_kernel(btf: &Btf) -> Kind {
        let multi = btf.id_by_type_name_kind("bpf_uprobe_multi_link_attach", BtfKind::Func).is_ok();
        if !multi {
            return Kind::Perf;
        }
        if crate::kernel_btf::enum_has_value("bpf_attach_type", "BPF_TRACE_UPROBE_SESSION") {
            Kind::Session
        } else {
            Kind::Multi
        }
    }

    /// For logs and check-kernel.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Perf => "perf events",
            Kind::Multi => "uprobe_multi",
            Kind::Session => "uprobe sessions",
        }
    }

    /// Whether links may be made for one process only (the pid filter).
    pub fn per_process(self) -> bool {
        self != Kind::Perf
    }

    /// The TLS programs of this kind, with the attach type each is loaded
    /// with (None: a perf-event uprobe, loaded with none).
    pub fn programs(self) -> &'static [(&'static str, Option<u32>)] {
        match self {
            Kind::Perf => &[
                ("tls_call_exit", None),
                ("tls_read_enter", None),
                ("tls_read_ex_enter", None),
                ("tls_handshake_enter", None),
                ("tls_write_enter", None),
                ("tls_write_ex_enter", None),
                ("tls_free", None),
                ("go_tls_read_enter", None),
                ("go_tls_read_exit", None),
                ("go_tls_write_enter", None),
            ],
            Kind::Multi => &[
                ("tls_multi_enter", Some(BPF_TRACE_UPROBE_MULTI)),
                ("tls_multi_exit", Some(BPF_TRACE_UPROBE_MULTI)),
                ("go_tls_multi", Some(BPF_TRACE_UPROBE_MULTI)),
            ],
            Kind::Session => &[("tls_session", Some(BPF_TRACE_UPROBE_SESSION)), ("go_tls_multi", Some(BPF_TRACE_UPROBE_MULTI))],
        }
    }

    /// The kind whose programs are all pinned in `set` (a loader that
    /// reopens a set), if any.
    pub fn pinned_in(set: &Path) -> Option<Kind> {
        [Kind::Session, Kind::Multi, Kind::Perf]
            .into_iter()
            .find(|k| k.programs().iter().all(|(name, _)| crate::pins::prog(set, name).exists()))
    }
}

/// A `uprobe_multi` link of `prog` (loaded with `attach_type`) at `offsets`
/// (file offsets) of the file at `path`, each with its cookie, return
/// probes if `ret`, in process `pid` only (0: every process that maps the
/// file). The kernel resolves `path` (`/proc/self/fd/N`: the open file).
pub fn create(
    prog: BorrowedFd<'_>,
    attach_type: u32,
    path: &Path,
    offsets: &[u64],
    cookies: &[u64],
    ret: bool,
    pid: u32,
) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    if offsets.is_empty() || offsets.len() != cookies.len() {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    let path = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // union bpf_attr, link_create: prog_fd u32, target_fd u32, attach_type
    // u32, flags u32, then uprobe_multi: path u64, offsets u64,
    // ref_ctr_offsets u64, cookies u64, cnt u32, flags u32, pid u32.
    let mut attr = [0u64; 8];
    attr[0] = u64::from(prog.as_raw_fd() as u32);
    attr[1] = u64::from(attach_type);
    attr[2] = path.as_ptr() as u64;
    attr[3] = offsets.as_ptr() as u64;
    attr[5] = cookies.as_ptr() as u64;
    attr[6] = offsets.len() as u64 | u64::from(if ret { BPF_F_UPROBE_MULTI_RETURN } else { 0 }) << 32;
    attr[7] = u64::from(pid);
    // SAFETY: attr is a valid bpf_attr of the size passed; the path, the
    // offsets and the cookies outlive the call.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_LINK_CREATE, attr.as_ptr(), std::mem::size_of_val(&attr)) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Pins the link (or any BPF object) `fd` at `path` on the bpffs.
pub fn pin(fd: BorrowedFd<'_>, path: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // bpf_attr for BPF_OBJ_PIN: pathname u64, bpf_fd u32, file_flags u32.
    let mut attr = [0u64; 2];
    attr[0] = path.as_ptr() as u64;
    attr[1] = u64::from(fd.as_raw_fd() as u32);
    // SAFETY: attr is a valid bpf_attr of the size passed; the path outlives the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, BPF_OBJ_PIN, attr.as_ptr(), std::mem::size_of_val(&attr)) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
