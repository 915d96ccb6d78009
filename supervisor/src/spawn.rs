//! Starting one component: its readiness pipe, its configuration (a sealed
//! memfd, see `handover`), and for unprivileged ones the drop to
//! `actors.user` with no capabilities and `no_new_privs`.
//!
//! An unprivileged component is exec'd as root, holding only what it needs
//! to switch users (CAP_SETUID, CAP_SETGID, CAP_SETPCAP: the bounding set
//! holds nothing else), and becomes `actors.user` itself, first thing in
//! `main` (`--run-as`, `runtime_kit::users::become_user`). Exec'd as the
//! actors' uid it would be dumpable, and so open to every process of that
//! uid (its environment with `OTEL_EXPORTER_OTLP_HEADERS`, its fd 4 with
//! the configuration's secrets, ptrace), until its `main` ran: a
//! compromised actor could kill the exporter and read its successor in
//! that window. A root process is out of the actors' reach, and the kernel
//! makes it non-dumpable in the same step that makes it the actors' uid.
//!
//! Everything the child does between fork and exec is a raw syscall on
//! values prepared beforehand (no allocation, no locks): that is all that
//! is safe in a forked child.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;

use crate::handover::{Handover, CONFIG_FD};

use runtime_kit::ready::READY_FD_ENV;
use runtime_kit::users::UserIds;

use ipc_schema::ComponentInfo;

/// The fd number the child finds its readiness pipe on.
const READY_FD: i32 = 3;
/// Highest capability number to drop from the bounding set.
const CAP_LAST: i32 = 63;
/// What an unprivileged component is exec'd with (linux/capability.h):
/// CAP_SETGID, CAP_SETUID, CAP_SETPCAP, to become `actors.user`.
const CAPS_TO_SWITCH: [i32; 3] = [6, 7, 8];
/// CAP_SYS_ADMIN: still in the bounding set means the drop failed.
const CAP_SYS_ADMIN: i32 = 21;

/// Who the unprivileged components become: the actors' user, and the
/// k8s-actor's own (when it runs): it alone may read the cluster
/// credentials, which the span-actor and exporter, parsing hostile bytes,
/// must not.
#[derive(Debug, Clone, Copy)]
pub struct Users {
    pub actors: UserIds,
    pub k8s: Option<UserIds>,
}

impl Users {
    /// The ids `component` runs as (the privileged one ignores them).
    pub fn of(&self, component: ipc_schema::Component) -> UserIds {
        match (component, self.k8s) {
            (ipc_schema::Component::K8sActor, Some(k8s)) => k8s,
            _ => self.actors,
        }
    }
}

/// A started child and the read end of its readiness pipe.
pub struct Spawned {
    pub child: tokio::process::Child,
    pub ready: OwnedFd,
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both fds are open and ours alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// An environment variable that carries OTLP headers: the standard ones
/// (`OTEL_EXPORTER_OTLP_HEADERS`, `…_TRACES_HEADERS`, `…_METRICS_HEADERS`)
/// and the overrides of `export.otlp.headers`.
fn is_secret_variable(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    (upper.starts_with("OTEL_EXPORTER_OTLP_") && upper.ends_with("HEADERS")) || upper.starts_with("RINGTAIL_EXPORT__OTLP__HEADERS")
}

/// Starts `c` from `bin_dir` with its configuration from `config` on
/// [`CONFIG_FD`].
pub fn spawn(c: &ComponentInfo, bin_dir: &Path, config: &Handover, actors: UserIds) -> std::io::Result<Spawned> {
    let (read, write) = pipe()?;
    let write_fd = write.as_raw_fd();
    let config_fd = config.for_component(c).raw();
    let parent = std::process::id() as i32;
    let unprivileged = !c.privileged;
    let mut cmd = std::process::Command::new(bin_dir.join(c.binary));
    cmd.arg("--config").arg(Handover::path()).env(READY_FD_ENV, READY_FD.to_string()).stdin(std::process::Stdio::null());
    if unprivileged {
        cmd.arg("--run-as").arg(actors.to_string());
    }
    if !c.secrets {
        // The OTLP headers are the exporter's alone, in the environment too.
        for (name, _) in std::env::vars_os() {
            if name.to_str().is_some_and(is_secret_variable) {
                cmd.env_remove(name);
            }
        }
    }
    if std::env::var_os(runtime_kit::memory::ENV.0).is_none() {
        cmd.env(runtime_kit::memory::ENV.0, runtime_kit::memory::ENV.1);
    }
    // SAFETY: the closure only makes async-signal-safe syscalls on plain
    // integers captured by copy.
    unsafe {
        cmd.pre_exec(move || {
            let check = |r: libc::c_int| if r == -1 { Err(std::io::Error::last_os_error()) } else { Ok(()) };
            // dup2 onto itself would keep close-on-exec: clear it then.
            for (from, to) in [(write_fd, READY_FD), (config_fd, CONFIG_FD)] {
                if from == to {
                    check(libc::fcntl(to, libc::F_SETFD, 0))?;
                } else {
                    check(libc::dup2(from, to))?;
                }
            }
            if unprivileged {
                // Exec'd as root with only what switching users takes; the
                // child drops these three and becomes actors.user itself.
                for cap in (0..=CAP_LAST).filter(|c| !CAPS_TO_SWITCH.contains(c)) {
                    libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
                }
                if libc::prctl(libc::PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0) != 0 {
                    return Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
                }
            }
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
            // Kept across exec (same credentials); the child sets it again
            // after its uid change, which clears it.
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0))?;
            if libc::getppid() != parent {
                libc::_exit(1); // the supervisor died before we got here
            }
            Ok(())
        });
    }
    let child = tokio::process::Command::from(cmd).kill_on_drop(false).spawn()?;
    drop(write);
    Ok(Spawned { child, ready: read })
}

/// Waits until the child writes to its readiness pipe; false if it closed
/// the pipe (exited) without doing so.
pub async fn wait_ready(fd: OwnedFd) -> bool {
    tokio::task::spawn_blocking(move || {
        let mut f = std::fs::File::from(fd);
        let mut buf = [0u8; 16];
        matches!(std::io::Read::read(&mut f, &mut buf), Ok(n) if n > 0)
    })
    .await
    .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    #[test]
    fn header_variables_are_secret() {
        for name in ["OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "RINGTAIL_EXPORT__OTLP__HEADERS__AUTHORIZATION"] {
            assert!(super::is_secret_variable(name), "{name}");
        }
        for name in ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "RINGTAIL_EXPORT__OTLP__TIMEOUT", "RINGTAIL_READY_FD"] {
            assert!(!super::is_secret_variable(name), "{name}");
        }
    }
}
