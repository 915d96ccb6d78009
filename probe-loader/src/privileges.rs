//! Capabilities: checked before the privileged work, all dropped after it.
//!
//! | capability          | needed for                                        | kept after start |
//! |---------------------|---------------------------------------------------|------------------|
//! | CAP_BPF             | creating maps, loading programs; on kernels that refuse every `bpf()` command without it (see [`map_access_needs_cap_bpf`]), using the maps | no (only where the kernel needs it for the maps) |
//! | CAP_PERFMON         | tracing programs, reading kernel memory           | no               |
//! | CAP_SYS_ADMIN       | older kernels' BPF checks (alternative to the two); handed to the TLS attacher | no |
//! | CAP_SYS_PTRACE      | `/proc/PID/{exe,environ,fd,maps,root}` of other users' processes (ptrace access check): the start scan; handed to the TLS attacher | no |
//! | CAP_DAC_READ_SEARCH | the same files' modes (0400/0500, owned by that user) | no           |
//! | CAP_NET_ADMIN       | `probe.propagate` only: creating its socket map, loading and attaching its sockops and sk_msg programs (Linux 6.7+ also takes CAP_SYS_ADMIN for it) | no |
//! | CAP_SETGID          | joining the actors' group                         | no               |
//! | CAP_SETPCAP         | dropping the bounding set                         | no               |
//!
//! The TLS uprobes are attached by the TLS attacher (`crate::attacher`), a
//! child the loader forks while it is privileged and which keeps, for
//! ringtail's life, what attaching needs (CAP_BPF, CAP_PERFMON,
//! CAP_SYS_ADMIN: on Linux 6.18 `perf_event_open` of a uprobe is refused
//! to CAP_BPF + CAP_PERFMON alone; CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH to
//! open other users' processes' files), reading nothing but the kernel's
//! reports. None is required here: without them the attacher attaches
//! less and says so.
//!
//! After start the loader holds no capability at all (or, on a kernel that
//! lets only CAP_BPF use BPF maps, CAP_BPF alone) (effective, permitted,
//! inheritable, ambient and bounding sets empty, `no_new_privs`): what it
//! still does works on file descriptors it already has (the maps, the ring
//! buffers, its sockets). Processes that start later are named from the
//! kernel's exec and fork records (`procinfo`), not from `/proc`, so nothing
//! it does needs CAP_SYS_PTRACE, which would let it open another process's
//! `/proc/PID/mem` for writing.
//!
//! It stays uid 0: it owns its socket files and the runtime directory
//! (root's, 0755: the actors must not replace what is in it), and reads the
//! pinned programs' statistics from bpffs files that are root's and 0600.
//! Without capabilities uid 0 is still the owner of root's files, which is
//! why the unit confines it (`ProtectSystem=strict`, only `/run/ringtail`
//! writable). Its supplementary group is the actors' group (to reach the
//! ack socket in their 0750 directory).

use caps::{CapSet, Capability, CapsHashSet};

/// Why privileges are missing or could not be dropped.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("probe-loader needs {missing} (effective capabilities: {have}); run it as root or grant them")]
    Missing { missing: String, have: String },
    #[error("cannot read capabilities")]
    Read {
        #[source]
        source: caps::errors::CapsError,
    },
    #[error("cannot drop capabilities")]
    Drop {
        #[source]
        source: caps::errors::CapsError,
    },
    #[error("cannot join the actors' group")]
    Groups {
        #[source]
        source: std::io::Error,
    },
    #[error("cannot set no_new_privs")]
    NoNewPrivs {
        #[source]
        source: std::io::Error,
    },
}

fn names(set: &CapsHashSet) -> String {
    let mut v: Vec<String> = set.iter().map(|c| c.to_string()).collect();
    v.sort();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// Fails with a precise message unless we may load tracing programs (and,
/// with `read_process_env`, read other users' /proc entries at start; with
/// `propagate`, load and attach network programs).
pub fn check(read_process_env: bool, propagate: bool) -> Result<(), PrivilegeError> {
    let have = caps::read(None, CapSet::Effective).map_err(|source| PrivilegeError::Read { source })?;
    let bpf_ok =
        have.contains(&Capability::CAP_SYS_ADMIN) || (have.contains(&Capability::CAP_BPF) && have.contains(&Capability::CAP_PERFMON));
    if !bpf_ok {
        return Err(PrivilegeError::Missing { missing: "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)".into(), have: names(&have) });
    }
    let net_ok = have.contains(&Capability::CAP_NET_ADMIN) || have.contains(&Capability::CAP_SYS_ADMIN);
    if propagate && !net_ok {
        return Err(PrivilegeError::Missing {
            missing: "CAP_NET_ADMIN (or, Linux 6.7+, CAP_SYS_ADMIN) for probe.propagate = true (set it to false to run without)".into(),
            have: names(&have),
        });
    }
    let proc_ok = have.contains(&Capability::CAP_SYS_PTRACE) && have.contains(&Capability::CAP_DAC_READ_SEARCH);
    if read_process_env && !proc_ok {
        return Err(PrivilegeError::Missing {
            missing: "CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH for probe.read_process_env = true (set it to false to run without)".into(),
            have: names(&have),
        });
    }
    Ok(())
}

/// Makes `gid` the only supplementary group (needs CAP_SETGID, so before
/// [`drop_all`]).
pub fn join_group(gid: u32) -> Result<(), PrivilegeError> {
    // SAFETY: setgroups reads one gid from a valid pointer.
    if unsafe { libc::setgroups(1, &gid) } != 0 {
        return Err(PrivilegeError::Groups { source: std::io::Error::last_os_error() });
    }
    Ok(())
}

/// Drops every capability but `keep` from all sets, the bounding set
/// included (`keep` stays effective and permitted), and sets
/// `no_new_privs`.
pub fn drop_all_but(keep: &[Capability]) -> Result<(), PrivilegeError> {
    let err = |source| PrivilegeError::Drop { source };
    // The bounding set first: dropping from it needs CAP_SETPCAP, which
    // goes away with the effective set below.
    let bounding = caps::read(None, CapSet::Bounding).map_err(err)?;
    for cap in bounding {
        if !keep.contains(&cap) {
            caps::drop(None, CapSet::Bounding, cap).map_err(err)?;
        }
    }
    let keep: CapsHashSet = keep.iter().copied().collect();
    caps::clear(None, CapSet::Ambient).map_err(err)?;
    caps::clear(None, CapSet::Inheritable).map_err(err)?;
    caps::set(None, CapSet::Effective, &keep).map_err(err)?;
    caps::set(None, CapSet::Permitted, &keep).map_err(err)?;
    // SAFETY: prctl(PR_SET_NO_NEW_PRIVS) takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(PrivilegeError::NoNewPrivs { source: std::io::Error::last_os_error() });
    }
    Ok(())
}

/// Whether this kernel refuses a process without capabilities the `bpf()`
/// commands on a map it already holds. Before Linux 6.5, with
/// `kernel.unprivileged_bpf_disabled` set (Debian's default), every `bpf()`
/// command wanted CAP_BPF, not only creating maps and loading programs:
/// Debian's 5.10 does so, its 6.1 no longer (a backport), so this is tried,
/// not read off the version. The loader then keeps CAP_BPF (and nothing
/// else) to update the selection and read its counters.
///
/// Tried on a thread of its own that clears its effective capabilities
/// (they are per thread): the process keeps its own.
pub fn map_access_needs_cap_bpf(map: std::os::fd::BorrowedFd<'_>) -> bool {
    use std::os::fd::AsRawFd;
    let fd = map.as_raw_fd();
    std::thread::scope(|s| {
        s.spawn(|| {
            if caps::clear(None, CapSet::Effective).is_err() {
                return true; // cannot tell: keep what makes the loader work
            }
            let key = u32::MAX;
            let mut value = [0u8; 64];
            // union bpf_attr for BPF_MAP_LOOKUP_ELEM: map_fd (u32, padded
            // to 8), key (u64 pointer), value (u64 pointer), flags.
            let mut attr = [0u64; 4];
            attr[0] = fd as u32 as u64;
            attr[1] = std::ptr::from_ref(&key) as u64;
            attr[2] = value.as_mut_ptr() as u64;
            // SAFETY: attr is a valid bpf_attr of the size passed; the key
            // and a value buffer larger than any of the maps' values outlive
            // the call.
            let rc = unsafe {
                libc::syscall(libc::SYS_bpf, 1 /* BPF_MAP_LOOKUP_ELEM */, attr.as_ptr(), std::mem::size_of_val(&attr))
            };
            rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
        })
        .join()
        .unwrap_or(true)
    })
}

/// The effective capabilities, for logs.
pub fn effective() -> String {
    caps::read(None, CapSet::Effective).map(|s| names(&s)).unwrap_or_else(|_| "unknown".into())
}
