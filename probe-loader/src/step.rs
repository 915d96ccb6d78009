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
//!
//! The child dies with the loader: `PR_SET_PDEATHSIG` (SIGKILL) as its
//! first act, then `getppid()` compared with the loader's pid, for a
//! loader that died before that (the child would then belong to init, and
//! exits at once). A killed loader leaves no child loading and pinning for
//! nobody. What the child counted (a few numbers) comes back through a
//! pipe with its exit.

use std::io::{self, Read, Write};
use std::os::fd::FromRawFd;

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
/// The loader was gone before the child could tie its life to it.
const EXIT_ORPHANED: i32 = 4;

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
    #[error("cannot make the pipe the load step reports through")]
    Pipe {
        #[source]
        source: io::Error,
    },
}

/// The threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

/// Runs `load` in a child process and waits for it. `load` must not touch
/// the async runtime; what it returns (or its error, logged) becomes the
/// child's exit status, and its `N` counts come back with it. Refused
/// unless this process has one thread.
pub fn run<const N: usize, E: std::fmt::Display>(
    load: impl FnOnce() -> Result<(Outcome, [u64; N]), E>,
) -> Result<(Outcome, [u64; N]), StepError> {
    match threads() {
        1 => fork_and_wait(load),
        threads => Err(StepError::Threads { threads }),
    }
}

/// Ties this (child) process's life to `parent`'s: SIGKILL when the thread
/// that forked it ends; false if `parent` is gone already (the child was
/// given to another process before the `prctl` took effect).
fn die_with_parent(parent: libc::pid_t) -> bool {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes integer arguments only.
    let set = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) } == 0;
    // SAFETY: getppid has no preconditions.
    set && unsafe { libc::getppid() } == parent
}

fn fork_and_wait<const N: usize, E: std::fmt::Display>(
    load: impl FnOnce() -> Result<(Outcome, [u64; N]), E>,
) -> Result<(Outcome, [u64; N]), StepError> {
    let mut ends = [0; 2];
    // SAFETY: pipe2 writes two descriptors into a two-int array.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(StepError::Pipe { source: io::Error::last_os_error() });
    }
    // SAFETY: pipe2 returned these two descriptors, owned by nobody else.
    let (reader, writer) = unsafe { (std::fs::File::from_raw_fd(ends[0]), std::fs::File::from_raw_fd(ends[1])) };
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: `run` checked the process is single-threaded, so the child's
    // copy of every lock and allocator state is consistent; the child only
    // runs `load` and `_exit`s. (The tests call this with the test
    // harness's threads alive: their children do not allocate.)
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(StepError::Fork { source: io::Error::last_os_error() });
    }
    if pid == 0 {
        if !die_with_parent(parent) {
            // SAFETY: _exit ends this child without running anything of the parent's.
            unsafe { libc::_exit(EXIT_ORPHANED) };
        }
        drop(reader);
        let (code, counts) = match load() {
            Ok((Outcome::Pinned, counts)) => (EXIT_PINNED, counts),
            Ok((Outcome::NotPinnable, counts)) => (EXIT_NOT_PINNABLE, counts),
            Err(error) => {
                tracing::error!(event = "load_step_failed", %error, "load step failed");
                (EXIT_FAILED, [0; N])
            }
        };
        let mut bytes = [0u8; 8];
        for c in counts {
            bytes.copy_from_slice(&c.to_le_bytes());
            // A short or failed write reads as a failed step in the parent.
            let _ = (&writer).write_all(&bytes);
        }
        // The outcome last: the parent has the whole report once it reads
        // this byte, whether or not this process can end at once (a thread
        // abandoned on a file that never answers keeps it from ending).
        let _ = (&writer).write_all(&[code as u8]);
        tracing::info!(event = "load_step_done", peak_rss_kb = peak_rss_kb(), code, "load step done");
        // SAFETY: _exit ends this child without running anything of the parent's.
        unsafe { libc::_exit(code) };
    }
    drop(writer);
    // The report first (the counts, then the outcome), then the exit.
    let mut counts = [0u64; N];
    let mut bytes = [0u8; 8];
    let mut whole = true;
    for c in &mut counts {
        if (&reader).read_exact(&mut bytes).is_err() {
            whole = false;
            break;
        }
        *c = u64::from_le_bytes(bytes);
    }
    let mut code = [0u8; 1];
    let reported = whole && (&reader).read_exact(&mut code).is_ok();
    if !reported {
        // No report: the child died or failed before it wrote one; its
        // status says how.
        let status = wait_blocking(pid)?;
        if libc::WIFSIGNALED(status) {
            return Err(StepError::Killed { signal: libc::WTERMSIG(status) });
        }
        return Err(StepError::Failed { status: libc::WEXITSTATUS(status) });
    }
    if !wait_within(pid, EXIT_GRACE) {
        // Reported, but not ending: a thread of it waits on a file that
        // does not answer. Its work is done (pinned): leave it, killed, to
        // end whenever that call returns.
        // SAFETY: kill of our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        tracing::warn!(
            event = "load_step_lingers",
            pid,
            "the load step reported but does not end (a file it read does not answer): left behind, killed"
        );
        STRAGGLERS.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
    }
    match i32::from(code[0]) {
        EXIT_PINNED => Ok((Outcome::Pinned, counts)),
        EXIT_NOT_PINNABLE => Ok((Outcome::NotPinnable, counts)),
        status => Err(StepError::Failed { status }),
    }
}

/// How long a step that reported may take to end before it is left behind.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Steps that reported but did not end, to reap when they do ([`reap`]).
static STRAGGLERS: std::sync::Mutex<Vec<libc::pid_t>> = std::sync::Mutex::new(Vec::new());

/// Reaps the steps left behind that have ended since (call it now and
/// then: a child that ended stays a zombie until its parent waits for it).
pub fn reap() {
    STRAGGLERS.lock().unwrap_or_else(|e| e.into_inner()).retain(|&pid| {
        let mut status = 0;
        // SAFETY: waitpid of our own child, WNOHANG.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) == 0 }
    });
}

/// Waits for child `pid` to end; its status.
fn wait_blocking(pid: libc::pid_t) -> Result<i32, StepError> {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid, writable int; pid is our child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Ok(status);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(StepError::Wait { source: error });
        }
    }
}

/// Whether child `pid` ended (and was reaped) within `grace`.
fn wait_within(pid: libc::pid_t, grace: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + grace;
    loop {
        let mut status = 0;
        // SAFETY: waitpid of our own child, WNOHANG.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid || (r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD)) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
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
    fn the_child_outcome_and_counts_come_back() {
        assert_eq!(fork_and_wait(|| Ok::<_, &str>((Outcome::Pinned, [3, u64::MAX]))).unwrap(), (Outcome::Pinned, [3, u64::MAX]));
        assert_eq!(fork_and_wait(|| Ok::<_, &str>((Outcome::NotPinnable, []))).unwrap(), (Outcome::NotPinnable, []));
        assert!(matches!(fork_and_wait(|| Err::<(Outcome, [u64; 1]), _>("no")), Err(StepError::Failed { status: EXIT_FAILED })));
    }

    #[test]
    fn a_process_with_threads_is_refused() {
        // The harness's main thread waits for this one: at least two.
        assert!(threads() >= 2);
        assert!(matches!(run(|| Ok::<_, &str>((Outcome::Pinned, []))), Err(StepError::Threads { .. })));
    }

    /// Whether process `pid` is gone (or a zombie nobody reaped yet).
    fn dead(pid: libc::pid_t) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |stat| stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with(['Z', 'X'])))
    }

    /// A loader (here a forked stand-in) killed while its load step runs
    /// takes the step with it: the step's child does not go on loading and
    /// pinning for nobody.
    #[test]
    fn the_load_step_dies_with_its_loader() {
        let mut ends = [0; 2];
        // SAFETY: pipe writes two descriptors into a two-int array.
        assert_eq!(unsafe { libc::pipe(ends.as_mut_ptr()) }, 0);
        let (rd, wr) = (ends[0], ends[1]);
        // SAFETY: the child (the stand-in loader) only forks its step and
        // waits (no allocation); the step writes its pid and pauses.
        let loader = unsafe { libc::fork() };
        assert!(loader >= 0);
        if loader == 0 {
            let _ = fork_and_wait(|| {
                // SAFETY: getpid, write and pause on plain integers and a stack buffer.
                unsafe {
                    let me = libc::getpid().to_le_bytes();
                    libc::write(wr, me.as_ptr().cast(), me.len());
                    loop {
                        libc::pause();
                    }
                }
                #[allow(unreachable_code)]
                Ok::<_, &str>((Outcome::Pinned, []))
            });
            // SAFETY: ends the stand-in without running the harness's code.
            unsafe { libc::_exit(0) };
        }
        let mut pid = [0u8; 4];
        // SAFETY: reads at most 4 bytes into a 4-byte buffer.
        assert_eq!(unsafe { libc::read(rd, pid.as_mut_ptr().cast(), 4) }, 4, "the step never started");
        let step = libc::pid_t::from_le_bytes(pid);
        // SAFETY: kill and waitpid of our own child.
        unsafe {
            libc::kill(loader, libc::SIGKILL);
            libc::waitpid(loader, std::ptr::null_mut(), 0);
            libc::close(rd);
            libc::close(wr);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !dead(step) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let gone = dead(step);
        if !gone {
            // SAFETY: kill of the step this test made, so that it does not outlive the test.
            unsafe { libc::kill(step, libc::SIGKILL) };
        }
        assert!(gone, "the load step {step} outlived its killed loader {loader}");
    }

    #[test]
    fn a_step_whose_loader_is_already_gone_knows_it() {
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() };
        // In a child (the death signal stays with it): our real parent
        // passes, anyone else reads as a loader gone before the prctl.
        // SAFETY: the child calls prctl/getppid and _exits (no allocation).
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            // SAFETY: as above.
            unsafe {
                let me = libc::getppid();
                let ok = die_with_parent(me) && !die_with_parent(me + 1) && !die_with_parent(1);
                libc::_exit(if ok { 0 } else { 1 });
            }
        }
        let mut status = 0;
        // SAFETY: waitpid of our own child into a valid int.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "status {status}; parent {parent}");
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
            Ok((Outcome::Pinned, []))
        })
        .unwrap();
        assert!(peak_rss_kb() < before + (32 << 10), "{} -> {}", before, peak_rss_kb());
    }
}
