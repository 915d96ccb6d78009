//! What reading other processes' files may cost, in all, per user and per
//! file, so that no user can make the privileged side read without bound.
//!
//! A process's executable and libraries are its user's to craft: section
//! headers can point tables of 64 MiB each at holes of a sparse file (40
//! such copies took the loader from 2.8 s to 35 s to start), or at real
//! bytes. So:
//! - every read of another process's file goes through [`Limited`]: a read
//!   of 4 KiB or more is refused where the file has a hole (a table in a
//!   hole is never a real one: `lseek(SEEK_DATA/SEEK_HOLE)` says so before
//!   a byte is read), and the job's bytes and time are counted down, the
//!   first read past either refused (the reader stops early). Its time is
//!   the CPU time of the thread reading (`CLOCK_THREAD_CPUTIME_ID`): what
//!   a crafted file can make the privileged side spend, and what a busy
//!   host does not take from an honest file's allowance (under a suite's
//!   load a qemu guest read a Go executable for over a second of wall
//!   time, and its process went untraced). A call that never returns
//!   spends no CPU: that is the job's deadline's (`crate::deadline`);
//! - the start scan ([`Shares`]) takes the processes round-robin by real
//!   uid, and gives each uid an equal share of the scan's total time and
//!   bytes ([`SCAN_TIME`], [`SCAN_BYTES`]): a uid whose share is spent has
//!   its other processes not inspected, and no uid's processes can spend
//!   another's share or push them back in the queue. A process's reads are
//!   charged to its real uid (a set-uid program run by a user is that
//!   user's).
//!
//! What is not inspected is counted by reason
//! (`ringtail_tls_files_refused_total{reason="budget"|"sparse"}`).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// The whole start scan's time.
pub const SCAN_TIME: Duration = Duration::from_secs(10);
/// The whole start scan's bytes read.
pub const SCAN_BYTES: u64 = 1 << 30;
/// Most bytes one process's files may take (a Go executable of 100 MiB
/// reads some 40 MiB: its `.gopclntab` and a little more).
pub const PROCESS_BYTES: u64 = 256 << 20;
/// Reads from this size up are checked for holes first.
pub const HOLE_CHECK: usize = 4096;

/// `d` stretched by a test harness's factor (`RINGTAIL_TEST_TIME_SCALE`, at
/// least 1): the kernel matrix's guests emulate their CPU (qemu TCG, some
/// 10 to 50 times slower than the host's, and slower still while the host
/// is busy), and every time bound here is in a real CPU's seconds: there,
/// an honest Go executable took more than a job's second. Only root, who
/// starts the loader, sets its environment.
pub fn scaled(d: Duration) -> Duration {
    let factor = std::env::var("RINGTAIL_TEST_TIME_SCALE").ok().and_then(|v| v.parse::<f64>().ok());
    d.mul_f64(factor.filter(|f| f.is_finite() && (1.0..=1000.0).contains(f)).unwrap_or(1.0))
}

/// Reading at an offset: a file, or a file within limits.
pub trait ReadAt {
    /// Fills `buf` from `offset` (`UnexpectedEof` past the end).
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl ReadAt for File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }
}

/// Why a [`Limited`] reader stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Its bytes were spent.
    Bytes,
    /// Its time was spent.
    Time,
    /// A read of [`HOLE_CHECK`] bytes or more fell in a hole.
    Hole,
}

/// What one job may still read, shared by every file it opens; made and
/// used on the job's thread (its time is that thread's CPU time).
#[derive(Debug)]
pub struct Allowance {
    bytes: Cell<u64>,
    /// The thread's CPU time when the allowance was made, and how much
    /// more it may spend.
    cpu_start: Duration,
    time: Duration,
    read: Cell<u64>,
    stop: Cell<Option<Stop>>,
}

/// The CPU time the calling thread has run.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::MAX;
    }
    Duration::new(u64::try_from(ts.tv_sec).unwrap_or(0), u32::try_from(ts.tv_nsec).unwrap_or(0))
}

impl Allowance {
    /// `bytes`, and `time` of this thread's CPU from now.
    pub fn new(bytes: u64, time: Duration) -> Allowance {
        Allowance { bytes: Cell::new(bytes), cpu_start: thread_cpu(), time, read: Cell::new(0), stop: Cell::new(None) }
    }

    /// The CPU time this thread spent since the allowance was made.
    pub fn spent(&self) -> Duration {
        thread_cpu().saturating_sub(self.cpu_start)
    }

    /// Bytes read so far.
    pub fn read(&self) -> u64 {
        self.read.get()
    }

    /// Why a read was refused, if one was.
    pub fn stopped(&self) -> Option<Stop> {
        self.stop.get()
    }

    /// `file` read within this allowance.
    #[cfg(test)]
    pub fn over<'a>(&'a self, file: &'a File) -> Limited<'a> {
        Limited { file, allowance: self, on: None }
    }

    /// `file`, on `mount`, read within this allowance, each read a call
    /// into `mount` the gate knows of (`crate::deadline`).
    pub fn over_on<'a>(&'a self, file: &'a File, gate: &'a crate::deadline::Gate, mount: u64) -> Limited<'a> {
        Limited { file, allowance: self, on: Some((gate, mount)) }
    }

    fn refuse(&self, why: Stop) -> io::Error {
        self.stop.set(Some(why));
        let what = match why {
            Stop::Bytes => "the bytes allowed were read",
            Stop::Time => "the time allowed was spent",
            Stop::Hole => "a table in a hole of a sparse file",
        };
        io::Error::other(what)
    }
}

/// A file read within an [`Allowance`] (module doc).
pub struct Limited<'a> {
    file: &'a File,
    allowance: &'a Allowance,
    /// The gate each read is a call through, and the file's mount.
    on: Option<(&'a crate::deadline::Gate, u64)>,
}

impl ReadAt for Limited<'_> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let a = self.allowance;
        if let Some(why) = a.stop.get() {
            return Err(a.refuse(why));
        }
        if a.spent() >= a.time {
            return Err(a.refuse(Stop::Time));
        }
        let len = buf.len() as u64;
        if len > a.bytes.get() {
            return Err(a.refuse(Stop::Bytes));
        }
        let mut read = move || {
            if buf.len() >= HOLE_CHECK && !all_data(self.file, offset, len) {
                return Err(a.refuse(Stop::Hole));
            }
            a.bytes.set(a.bytes.get() - len);
            a.read.set(a.read.get() + len);
            FileExt::read_exact_at(self.file, buf, offset)
        };
        match self.on {
            Some((gate, mount)) => gate.call(mount, read).map_err(|hung| io::Error::other(hung.to_string()))?,
            None => read(),
        }
    }
}

/// Whether `[offset, offset + len)` of `file` holds no hole (what is past
/// its end is left to the read to find). Asked of the file's filesystem
/// without reading a byte.
fn all_data(file: &File, offset: u64, len: u64) -> bool {
    let (Ok(at), Some(end)) = (libc::off_t::try_from(offset), offset.checked_add(len)) else { return false };
    // SAFETY: lseek on a descriptor we own; pread does not use its position.
    let data = unsafe { libc::lseek(file.as_raw_fd(), at, libc::SEEK_DATA) };
    if data < 0 {
        // ENXIO: no data from `offset` on: a hole up to the end, or the end
        // itself (the read finds that). Anything else: the filesystem
        // cannot tell, and it reads as data.
        let enxio = io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO);
        return !(enxio && offset < file_size(file));
    }
    if data as u64 != offset {
        return false;
    }
    // SAFETY: as above.
    let hole = unsafe { libc::lseek(file.as_raw_fd(), at, libc::SEEK_HOLE) };
    hole < 0 || hole as u64 >= end || hole as u64 >= file_size(file)
}

fn file_size(file: &File) -> u64 {
    file.metadata().map(|m| m.len()).unwrap_or(u64::MAX)
}

/// A process's real uid, from its world-readable `/proc/PID/status`.
pub fn real_uid(proc: &Path, pid: u32) -> Option<u32> {
    use std::io::Read;
    let mut text = String::new();
    File::open(proc.join(pid.to_string()).join("status")).ok()?.take(16 << 10).read_to_string(&mut text).ok()?;
    text.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
}

/// What one uid spent of its share.
#[derive(Debug, Default, Clone, Copy)]
struct Spent {
    time: Duration,
    bytes: u64,
}

/// The start scan's budget and its shares by uid (module doc).
#[derive(Debug)]
pub struct Shares {
    time: Duration,
    bytes: u64,
    began: Instant,
    uids: usize,
    spent: BTreeMap<u32, Spent>,
}

impl Shares {
    /// `time` and `bytes` in all, shared equally by `uids` uids.
    pub fn new(time: Duration, bytes: u64, uids: usize) -> Shares {
        Shares { time, bytes, began: Instant::now(), uids: uids.max(1), spent: BTreeMap::new() }
    }

    /// What a job of `uid` may take now: None if its share or the whole
    /// budget is spent.
    pub fn allowance(&self, uid: u32, per_job: Duration) -> Option<(Duration, u64)> {
        let total_left = self.time.checked_sub(self.began.elapsed())?;
        let spent = self.spent.get(&uid).copied().unwrap_or_default();
        let share_time = self.time / self.uids as u32;
        let share_bytes = self.bytes / self.uids as u64;
        let time = share_time.checked_sub(spent.time)?.min(total_left).min(per_job);
        let bytes = share_bytes.checked_sub(spent.bytes)?.min(PROCESS_BYTES);
        (!time.is_zero() && bytes > 0).then_some((time, bytes))
    }

    /// Charges a job of `uid`.
    pub fn charge(&mut self, uid: u32, time: Duration, bytes: u64) {
        let s = self.spent.entry(uid).or_default();
        s.time += time;
        s.bytes += bytes;
    }
}

/// `pids` grouped by real uid and taken round-robin: one process of each
/// uid in turn (uids in ascending order, each uid's processes in the order
/// given), so that no uid's many processes push another's back.
pub fn round_robin(proc: &Path, pids: impl IntoIterator<Item = u32>) -> (Vec<(u32, u32)>, usize) {
    let mut by_uid: BTreeMap<u32, std::collections::VecDeque<u32>> = BTreeMap::new();
    for pid in pids {
        // A process gone meanwhile (no status) is charged to nobody's share.
        let uid = real_uid(proc, pid).unwrap_or(u32::MAX);
        by_uid.entry(uid).or_default().push_back(pid);
    }
    let uids = by_uid.len();
    let mut order = Vec::new();
    while !by_uid.is_empty() {
        by_uid.retain(|uid, pids| {
            if let Some(pid) = pids.pop_front() {
                order.push((*uid, pid));
            }
            !pids.is_empty()
        });
    }
    (order, uids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ringtail-budget-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    #[test]
    fn a_read_in_a_hole_is_refused_before_a_byte_is_read() {
        let dir = temp("hole");
        let path = dir.join("sparse");
        let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).expect("create");
        f.write_all_at(&[1u8; 8192], 0).expect("write");
        f.set_len(64 << 20).expect("extend with a hole");
        let a = Allowance::new(1 << 30, Duration::from_secs(10));
        let r = a.over(&f);
        let mut small = [0u8; 64];
        r.read_exact_at(&mut small, 0).expect("data");
        let mut page = vec![0u8; 4096];
        r.read_exact_at(&mut page, 4096).expect("data");
        // A table that lies in the hole, or runs into it.
        let mut table = vec![0u8; 1 << 20];
        assert!(r.read_exact_at(&mut table, 32 << 20).is_err());
        assert_eq!(a.stopped(), Some(Stop::Hole));
        assert_eq!(a.read(), 64 + 4096, "nothing read of the hole");
        let b = Allowance::new(1 << 30, Duration::from_secs(10));
        assert!(b.over(&f).read_exact_at(&mut table, 4096).is_err(), "a read that runs into the hole");
        assert_eq!(b.stopped(), Some(Stop::Hole));
        // A hole that runs to the end of the file (no data after it at all).
        let c = Allowance::new(1 << 30, Duration::from_secs(10));
        assert!(c.over(&f).read_exact_at(&mut table, (64 << 20) - (1 << 20)).is_err());
        assert_eq!(c.stopped(), Some(Stop::Hole));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bytes_and_time_are_counted_down_and_stop_the_reader() {
        let dir = temp("bytes");
        let path = dir.join("dense");
        std::fs::write(&path, vec![7u8; 1 << 20]).expect("write");
        let f = File::open(&path).expect("open");
        let a = Allowance::new(100_000, Duration::from_secs(10));
        let r = a.over(&f);
        let mut buf = vec![0u8; 65_536];
        r.read_exact_at(&mut buf, 0).expect("within");
        assert!(r.read_exact_at(&mut buf, 65_536).is_err());
        assert_eq!(a.stopped(), Some(Stop::Bytes));
        // Once stopped, every read is refused.
        assert!(r.read_exact_at(&mut [0u8; 1], 0).is_err());
        let late = Allowance::new(1 << 30, Duration::ZERO);
        assert!(late.over(&f).read_exact_at(&mut [0u8; 1], 0).is_err());
        assert_eq!(late.stopped(), Some(Stop::Time));
        // Time is the thread's CPU: waiting spends none of it, working does.
        let waits = Allowance::new(1 << 30, Duration::from_millis(50));
        std::thread::sleep(Duration::from_millis(120));
        waits.over(&f).read_exact_at(&mut [0u8; 1], 0).expect("a wait spends no CPU time");
        let works = Allowance::new(1 << 30, Duration::from_millis(50));
        let began = thread_cpu();
        let mut x = 0u64;
        while thread_cpu() - began < Duration::from_millis(60) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        assert!(works.over(&f).read_exact_at(&mut [0u8; 1], 0).is_err());
        assert_eq!(works.stopped(), Some(Stop::Time));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn each_uid_has_its_share_and_cannot_spend_another_s() {
        let mut s = Shares::new(Duration::from_secs(10), 1000, 2);
        let (t, b) = s.allowance(1000, Duration::from_secs(2)).expect("a share");
        assert_eq!((t, b), (Duration::from_secs(2), 500));
        // uid 1000 spends its whole share; uid 0's is intact.
        s.charge(1000, Duration::from_secs(5), 10);
        assert_eq!(s.allowance(1000, Duration::from_secs(2)), None);
        assert_eq!(s.allowance(0, Duration::from_secs(2)), Some((Duration::from_secs(2), 500)));
        s.charge(0, Duration::from_secs(1), 500);
        assert_eq!(s.allowance(0, Duration::from_secs(2)), None, "bytes spent");
    }

    #[test]
    fn processes_are_taken_one_uid_at_a_time() {
        let proc = temp("proc");
        for (pid, uid) in [(1, 1000), (2, 1000), (3, 1000), (4, 0), (5, 33)] {
            std::fs::create_dir_all(proc.join(pid.to_string())).expect("mkdir");
            std::fs::write(proc.join(pid.to_string()).join("status"), format!("Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"))
                .expect("write");
        }
        let (order, uids) = round_robin(&proc, [1, 2, 3, 4, 5]);
        assert_eq!(uids, 3);
        assert_eq!(order, vec![(0, 4), (33, 5), (1000, 1), (1000, 2), (1000, 3)]);
        let _ = std::fs::remove_dir_all(&proc);
    }
}
