//! Containers as the kernel sees them: cgroups laid out as container
//! runtimes lay them out, with real processes moved into them before they
//! exec (what a runtime does), on this machine's cgroup v2 and, where it
//! has one, cgroup v1 memory hierarchy.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup` on a v2
/// host, `/sys/fs/cgroup/unified` on a hybrid one), if it is.
pub fn v2_root() -> Option<PathBuf> {
    mount_of(|fstype, _| fstype == "cgroup2")
}

/// Where the cgroup v1 memory controller's hierarchy is mounted, if it is.
pub fn v1_memory_root() -> Option<PathBuf> {
    mount_of(|fstype, options| fstype == "cgroup" && options.split(',').any(|o| o == "memory"))
}

fn mount_of(matches: impl Fn(&str, &str) -> bool) -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS…] - FSTYPE SOURCE SUPEROPTIONS
        let (head, tail) = l.split_once(" - ")?;
        let mount_point = head.split(' ').nth(4)?;
        let mut t = tail.split(' ');
        let fstype = t.next()?;
        let super_options = t.nth(1)?;
        matches(fstype, super_options).then(|| PathBuf::from(mount_point))
    })
}

/// A cgroup `relative` whose processes together get at most `percent` of
/// one CPU (a load tool paced by the CPU it may use): the v2 hierarchy's
/// `cpu.max` where its `cpu` controller is, else the v1 `cpu` controller's
/// CFS quota; `None` when neither is there.
pub fn cpu_limited(relative: &str, percent: u32) -> Option<Cgroup> {
    const PERIOD_US: u32 = 100_000;
    let quota = PERIOD_US / 100 * percent;
    if let Some(root) = v2_root() {
        let controllers = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
        if controllers.split_whitespace().any(|c| c == "cpu") {
            // (may fail where it is on already, or not ours to turn on)
            let _ = std::fs::write(root.join("cgroup.subtree_control"), "+cpu");
            let cg = Cgroup::make(&root, relative);
            if std::fs::write(cg.path.join("cpu.max"), format!("{quota} {PERIOD_US}")).is_ok() {
                return Some(cg);
            }
        }
    }
    let root = mount_of(|fstype, options| fstype == "cgroup" && options.split(',').any(|o| o == "cpu"))?;
    let cg = Cgroup::make(&root, relative);
    std::fs::write(cg.path.join("cpu.cfs_period_us"), PERIOD_US.to_string()).ok()?;
    std::fs::write(cg.path.join("cpu.cfs_quota_us"), quota.to_string()).ok()?;
    Some(cg)
}

/// A container id, 64 hexadecimal digits, different for each `n`.
pub fn container_id(n: u32) -> String {
    format!("{:016x}", u64::from(n) + 0x5eed_0000).repeat(4)
}

/// A cgroup made for a test (with its missing parents), removed on drop
/// once its processes are gone.
pub struct Cgroup {
    pub path: PathBuf,
    made: Vec<PathBuf>,
}

impl Cgroup {
    /// Makes `relative` (e.g. `kubepods/burstable/pod…/ID`) under `root`.
    pub fn make(root: &Path, relative: &str) -> Cgroup {
        let path = root.join(relative);
        let mut made = Vec::new();
        let mut at = root.to_owned();
        for part in Path::new(relative).components() {
            at.push(part);
            if !at.exists() {
                std::fs::create_dir(&at).unwrap_or_else(|e| panic!("mkdir {}: {e}", at.display()));
                made.push(at.clone());
            }
        }
        Cgroup { path, made }
    }

    /// `cmd`, moved into this cgroup before it execs (as a container
    /// runtime starts a container's first process).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let procs = self.path.join("cgroup.procs");
        let mut cmd = Command::new(program);
        // SAFETY: the closure runs in the child between fork and exec and
        // only makes raw write/open/close calls on data prepared before
        // the fork (async-signal-safe).
        let path = std::ffi::CString::new(procs.as_os_str().as_encoded_bytes()).expect("no NUL in a path");
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let written = libc::write(fd, b"0\n".as_ptr().cast(), 2);
                libc::close(fd);
                if written != 2 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Deepest first; a cgroup with a process left in it stays (and says so).
        for dir in self.made.iter().rev() {
            let gone = crate::wait_until(std::time::Duration::from_secs(5), || std::fs::remove_dir(dir).ok());
            if gone.is_none() {
                eprintln!("cgroup {} not removed: a process is still in it", dir.display());
            }
        }
    }
}
