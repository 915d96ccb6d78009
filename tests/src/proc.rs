//! Processes and time: [`Proc`] (a child killed with its process group on
//! drop), [`TempDir`], [`free_port`], and the waits, stretched by
//! [`time_scale`] on a slow machine.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long a test lets spans arrive after the ones it waited for, so that
/// a span too many shows (and fails the exact counts).
pub const SETTLE: Duration = Duration::from_millis(1500);

/// The variable that stretches the tests' deadlines for a slow machine
/// (the kernel matrix's emulated CPU): a factor, 1 by default.
pub const TIME_SCALE: &str = "RINGTAIL_TEST_TIME_SCALE";

/// [`TIME_SCALE`]'s factor (at least 1).
pub fn time_scale() -> f64 {
    std::env::var(TIME_SCALE).ok().and_then(|v| v.parse::<f64>().ok()).filter(|f| f.is_finite() && *f >= 1.0).unwrap_or(1.0)
}

/// A port nobody listens on right now, and not one this process was given
/// before.
///
/// The kernel picks it (a bind to port 0); closed, it is free again, and
/// the kernel may hand the same one out to the next call: two servers of
/// one test then shared a port, the second's bind failed and its requests
/// reached the first. So the ports handed out are remembered, and one is
/// never handed out twice.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        // Bound to 0, the kernel picks a free one; closing it leaves it free.
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("bind an ephemeral port");
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// Polls `f` every 50 ms until it returns `Some`, or `timeout` passes.
pub fn wait_until<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The last `n` lines of `text` (with how many came before), for a
/// failure's message: CI shows only part of a failed run's output, so a
/// message leads with what differs and carries at most this much of a log.
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(n);
    let before = if from > 0 { format!("({from} lines before)\n") } else { String::new() };
    before + &lines[from..].join("\n")
}

/// Waits until something accepts TCP connections on `port`: `timeout`,
/// stretched by [`time_scale`] (a program's start is what a slow machine
/// slows most).
pub fn wait_port(port: u16, timeout: Duration) -> bool {
    wait_until(timeout.mul_f64(time_scale()), || TcpStream::connect(("127.0.0.1", port)).ok()).is_some()
}

/// A directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh directory under /tmp (short: unix socket paths must fit).
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = PathBuf::from(format!("/tmp/rt-{tag}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    /// A path inside.
    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("RINGTAIL_KEEP_TEST_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A child process killed (SIGKILL) and reaped on drop.
pub struct Proc {
    pub child: Child,
    pub name: String,
}

impl Proc {
    /// Spawns `cmd` in a process group of its own (so that whatever it
    /// forks, e.g. nginx workers, goes with it), naming it for messages.
    pub fn spawn(name: &str, cmd: &mut Command) -> Proc {
        use std::os::unix::process::CommandExt;
        let child = cmd.process_group(0).spawn().unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc { child, name: name.to_owned() }
    }

    /// Sends `sig` to the whole process group.
    pub fn signal_group(&self, sig: i32) {
        // SAFETY: kill has no memory-safety preconditions; the group id is
        // the child's pid (process_group(0)).
        unsafe { libc::kill(-(self.child.id() as i32), sig) };
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// SIGTERM, then SIGKILL after `grace`; returns whether it stopped in time.
    pub fn stop(&mut self, grace: Duration) -> bool {
        if let Ok(Some(_)) = self.child.try_wait() {
            return true;
        }
        self.signal(libc::SIGTERM);
        let stopped = wait_until(grace, || self.child.try_wait().ok().flatten()).is_some();
        if !stopped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        stopped
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.signal_group(libc::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time (user + system) of `pid` so far, its threads' and those of its
/// threads that ended.
pub fn cpu_of(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_else(|e| panic!("/proc/{pid}/stat: {e}"));
    let fields: Vec<&str> = stat.rsplit_once(')').expect("stat").1.split_whitespace().collect();
    // utime and stime are fields 14 and 15 (1-based), 12 and 13 after the comm.
    let ticks: u64 = fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / hz)
}
