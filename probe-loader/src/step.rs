//! The load step: the kernel's BTF parsed in a short-lived child.
//!
//! Loading the programs parses the kernel's BTF (tens of MB at its peak),
//! which a long-lived loader would carry as its high-water mark and as
//! allocator pages for the rest of its life. With pins (`probe.pin_dir`,
//! the default) the loader therefore forks before a fresh load: the child
//! loads, attaches and pins the programs, seeds the selection and attaches
//! the TLS uprobes, reports its peak and exits; the loader then opens the
//! pinned set as a restarted loader would, never parsing BTF itself.
//!
//! The child runs synchronous code only, on the one thread this process
//! has at start (the runtime is current-thread, its blocking pool unused
//! yet), and ends with `_exit`: nothing of the parent's runtime runs in it.
//! [`run`] checks that there is one thread (`/proc/self/task`): with more,
//! a lock another thread held at the fork would stay held in the child, so
//! it refuses ([`StepError::Threads`]) and the caller loads in-process.

use std::io;

/// What the child did, as its exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Loaded, attached, pinned and seeded: open the pinned set.
    Pinned,
    /// Loaded, but this kernel cannot pin the links (before Linux 5.15 with
    /// the syscall tracepoints): nothing outlived the child; load here.
    NotPinnable,
}

const EXIT_PINNED: i32 = 0;
const EXIT_NOT_PINNABLE: i32 = 3;
/// The child's error is in the log (it logs before it exits).
const EXIT_FAILED: i32 = 1;

/// Why the step gave no pinned set.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("cannot fork the load step")]
    Fork {
        #[source]
        source: io::Error,
    },
    #[error("cannot wait for the load step")]
    Wait {
        #[source]
        source: io::Error,
    },
    #[error("the load step failed (exit status {status}): its error is logged above")]
    Failed { status: i32 },
    #[error("the load step was killed by signal {signal}")]
    Killed { signal: i32 },
    #[error("the loader has {threads} threads: a fork is only safe with one")]
    Threads { threads: usize },
}

/// The threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

/// Runs `load` in a child process and waits for it. `load` must not touch
/// the async runtime; what it returns (or its error, logged) becomes the
/// child's exit status. Refused unless this process has one thread.
pub fn run<E: std::fmt::Display>(load: impl FnOnce() -> Result<Outcome, E>) -> Result<Outcome, StepError> {
    match threads() {
        1 => fork_and_wait(load),
        threads => Err(StepError::Threads { threads }),
    }
}

fn fork_and_wait<E: std::fmt::Display>(load: impl FnOnce() -> Result<Outcome, E>) -> Result<Outcome, StepError> {
    // SAFETY: `run` checked the process is single-threaded, so the child's
    // copy of every lock and allocator state is consistent; the child only
    // runs `load` and `_exit`s. (The tests call this with the test
    // harness's threads alive: their children do not allocate.)
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(StepError::Fork { source: io::Error::last_os_error() });
    }
    if pid == 0 {
        let code = match load() {
            Ok(Outcome::Pinned) => EXIT_PINNED,
            Ok(Outcome::NotPinnable) => EXIT_NOT_PINNABLE,
            Err(error) => {
                tracing::error!(event = "load_step_failed", %error, "load step failed");
                EXIT_FAILED
            }
        };
        tracing::info!(event = "load_step_done", peak_rss_kb = peak_rss_kb(), code, "load step done");
        // SAFETY: _exit ends this child without running anything of the parent's.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    loop {
        // SAFETY: status is a valid, writable int; pid is our child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(StepError::Wait { source: error });
        }
    }
    if libc::WIFSIGNALED(status) {
        return Err(StepError::Killed { signal: libc::WTERMSIG(status) });
    }
    match libc::WEXITSTATUS(status) {
        EXIT_PINNED => Ok(Outcome::Pinned),
        EXIT_NOT_PINNABLE => Ok(Outcome::NotPinnable),
        status => Err(StepError::Failed { status }),
    }
}

/// This process's peak resident memory (VmHWM), in KiB; 0 if unknown.
pub fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("VmHWM:").map(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())))
        .flatten()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The test harness runs other threads: these children must not
    // allocate or log (see `fork_and_wait`).

    #[test]
    fn the_child_outcome_comes_back() {
        assert_eq!(fork_and_wait(|| Ok::<_, &str>(Outcome::Pinned)).unwrap(), Outcome::Pinned);
        assert_eq!(fork_and_wait(|| Ok::<_, &str>(Outcome::NotPinnable)).unwrap(), Outcome::NotPinnable);
        assert!(matches!(fork_and_wait(|| Err::<Outcome, _>("no")), Err(StepError::Failed { status: EXIT_FAILED })));
    }

    #[test]
    fn a_process_with_threads_is_refused() {
        // The harness's main thread waits for this one: at least two.
        assert!(threads() >= 2);
        assert!(matches!(run(|| Ok::<_, &str>(Outcome::Pinned)), Err(StepError::Threads { .. })));
    }

    #[test]
    fn the_child_memory_is_not_the_parent_s() {
        // 64 MiB touched in the child (mapped directly: no allocator) leaves
        // the parent's peak as it was.
        let before = peak_rss_kb();
        assert!(before > 0);
        fork_and_wait(|| {
            let len = 64 << 20;
            // SAFETY: a fresh private anonymous mapping, written within its length.
            unsafe {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                if p == libc::MAP_FAILED {
                    return Err("mmap");
                }
                std::ptr::write_bytes(p.cast::<u8>(), 1, len);
            }
            Ok(Outcome::Pinned)
        })
        .unwrap();
        assert!(peak_rss_kb() < before + (32 << 10), "{} -> {}", before, peak_rss_kb());
    }
}
