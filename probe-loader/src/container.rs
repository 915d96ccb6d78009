//! A process's container: its id, read from the names of the cgroups it is
//! in, as container runtimes name them.
//!
//! | runtime (cgroup driver) | the process's cgroup |
//! |---|---|
//! | Docker (systemd) | `…/docker-<id>.scope` |
//! | Docker (cgroupfs, v1) | `/docker/<id>` |
//! | containerd / CRI (systemd), kubelet | `/kubepods.slice/…/cri-containerd-<id>.scope` |
//! | containerd / CRI (cgroupfs), kubelet | `/kubepods/<qos>/pod<uid>/<id>` |
//! | CRI-O | `…/crio-<id>.scope` (`crio-conmon-<id>.scope` is its monitor, not the container) |
//! | podman | `…/libpod-<id>.scope`, rootless on cgroup v2 `…/libpod-<id>.scope/container` (`libpod-conmon-…` is the monitor) |
//!
//! An id is 64 lowercase hexadecimal digits; a cgroup name carries one
//! when it is one, or is one of the runtimes' prefixes, the id and
//! `.scope`.
//!
//! **The rule: the outermost such name on the process's cgroup path gives
//! the id, and nothing below it is read.** The runtime makes that cgroup;
//! what is below it may be the container's own doing: a runtime may
//! delegate the subtree (cgroup namespaces, systemd's `Delegate=`, podman's
//! `container` below `libpod-<id>.scope`, Docker-in-Docker), and there the
//! container makes cgroups named as it likes, a runtime's shape included.
//! So a container that makes `docker-B.scope` inside its own
//! `docker-A.scope` (moving a process in) is still A, never B; a
//! runtime inside a container (Docker-in-Docker, a kind node) gives its
//! containers the outer container's id. A process outside any container
//! has none; nothing is guessed from other shapes. What the rule cannot
//! stop: a user who may make cgroups outside any container (a systemd user
//! session's delegated `user@UID.service`, as rootless podman does) can
//! name its own processes' cgroups as a runtime does (docs/security.md).
//!
//! Two sources, one rule: `/proc/PID/cgroup` (whole paths, every
//! hierarchy; the unified one first, then the memory controller's, then
//! the others) for the processes running at start, and for later ones the
//! path the kernel reported at exec (`bpf/process.bpf.c`, in the unified
//! hierarchy and in the memory controller's, which is where cgroup v1
//! hosts put containers: its depth, the names of its outermost 6 levels,
//! its parent's and its own — the whole path, to a depth of 8). When those
//! names carry an id, the process's whole path is read from
//! `/proc/PID/cgroup` if it is still there (same start time), and decides
//! ([`of_exec`]); a process gone by then is named by the kernel's path
//! ([`KernelPath`]). A path deeper than 8 has names missing between its
//! outer 6 and its last 2: an id among the outer 6 decides, and one only
//! below the gap gives none (a runtime-shaped name could be in the gap).

use std::io::Read;

/// Runtimes' prefixes of a container's cgroup name (`<prefix>-<id>.scope`).
const SCOPE_PREFIXES: [&str; 4] = ["docker", "cri-containerd", "crio", "libpod"];

/// Largest `/proc/PID/cgroup` read (a line per hierarchy: a few KiB at most).
const MAX_CGROUP_FILE: u64 = 64 << 10;

/// The container id one cgroup name carries, if any (an id's form is
/// `ipc_schema::k8s::is_container_id`'s: the Kubernetes metadata is
/// looked up by the same ids).
fn id_in_name(name: &str) -> Option<&str> {
    let is_id = ipc_schema::k8s::is_container_id;
    if is_id(name) {
        return Some(name);
    }
    let (prefix, rest) = name.strip_suffix(".scope")?.rsplit_once('-')?;
    (SCOPE_PREFIXES.contains(&prefix) && is_id(rest)).then_some(rest)
}

/// The container id of a cgroup path, given as its names from the
/// outermost down: the outermost name that carries one (see the rule).
pub fn id_in_path<'a>(outermost_first: impl IntoIterator<Item = &'a str>) -> Option<String> {
    outermost_first.into_iter().find_map(id_in_name).map(str::to_owned)
}

/// The container id in the contents of `/proc/PID/cgroup`
/// (`hierarchy:controllers:path` lines; cgroup v2's is `0::path`): each
/// path by the rule, the unified hierarchy's first, then the memory
/// controller's, then the others in the file's order.
pub fn id_in_proc_cgroup(text: &str) -> Option<String> {
    // (rank, path): the unified hierarchy 0, the memory controller 1, others 2.
    let mut paths: Vec<(u8, &str)> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let (hierarchy, controllers, path) = (f.next()?, f.next()?, f.next()?);
            let rank = if hierarchy == "0" && controllers.is_empty() {
                0
            } else if controllers.split(',').any(|c| c == "memory") {
                1
            } else {
                2
            };
            Some((rank, path))
        })
        .collect();
    // Stable: the file's order within a rank.
    paths.sort_by_key(|(rank, _)| *rank);
    paths.into_iter().find_map(|(_, path)| id_in_path(path.split('/')))
}

/// Levels of a path whose names the kernel reports from the root down
/// (`CGROUP_TOP` in `bpf/ringtail.h`).
const TOP: usize = crate::kernel::contract::CGROUP_TOP;
/// Levels the kernel walks up (`CGROUP_WALK`): a deeper path's outer
/// names are not reported.
const WALK: usize = crate::kernel::contract::CGROUP_WALK;

/// A cgroup path as the kernel reported it at exec: its depth, and
/// [`TOP`] + 2 names — its outermost [`TOP`] levels (level 1 first, ""
/// past its depth), then its parent's and its own.
#[derive(Debug, Clone, Copy)]
pub struct KernelPath<'a> {
    pub level: usize,
    pub names: &'a [String],
}

impl KernelPath<'_> {
    /// Its names from the outermost down, and how many of them come before
    /// names the kernel did not report (`None`: the whole path).
    fn outermost_first(&self) -> (Vec<&str>, Option<usize>) {
        let name = |i: usize| self.names.get(i).map_or("", String::as_str);
        let (parent, own) = (name(TOP), name(TOP + 1));
        match self.level {
            0 => (Vec::new(), None),
            // the walk stopped before the outer levels
            l if l > WALK => (vec![parent, own], Some(0)),
            l if l <= TOP => ((0..l).map(name).collect(), None),
            l => {
                let mut v: Vec<&str> = (0..TOP).map(name).collect();
                match l - TOP {
                    1 => v.push(own),
                    2 => v.extend([parent, own]),
                    _ => {
                        v.extend([parent, own]);
                        return (v, Some(TOP));
                    }
                }
                (v, None)
            }
        }
    }

    /// Its container id by the rule; none when the only id is below
    /// names the kernel did not report.
    fn id(&self) -> Option<String> {
        let (names, gap) = self.outermost_first();
        id_in_path(names[..gap.unwrap_or(names.len())].iter().copied())
    }
}

/// The container id of a process the kernel reported at exec: `paths` are
/// the kernel's (the unified hierarchy's, then the memory controller's).
/// Names with no id give none. Otherwise the process's whole path decides
/// while it runs (its `/proc/PID/cgroup`, read if `/proc/PID/stat` still
/// shows the start time `start_ns`), else the kernel's paths, by the rule.
pub fn of_exec(paths: &[KernelPath<'_>], pid: u32, start_ns: u64) -> Option<String> {
    if !paths.iter().flat_map(|p| p.names).any(|n| id_in_name(n).is_some()) {
        return None;
    }
    match live_cgroups(pid, start_ns) {
        Some(text) => id_in_proc_cgroup(&text),
        None => paths.iter().find_map(KernelPath::id),
    }
}

/// `/proc/PID/cgroup` of process `pid` if it is the one started at
/// `start_ns` (`CLOCK_BOOTTIME`, as `/proc/PID/stat`'s start time, to a
/// clock tick), before and after the read.
fn live_cgroups(pid: u32, start_ns: u64) -> Option<String> {
    let dir = std::path::PathBuf::from(format!("/proc/{pid}"));
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok().filter(|h| *h > 0)?;
    let same = || {
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        let ticks: u64 = crate::discovery::parse_stat(&stat)?.1.get(19)?.parse().ok()?;
        let want = start_ns / (1_000_000_000 / hz);
        (ticks.abs_diff(want) <= 1).then_some(())
    };
    same()?;
    let mut text = String::new();
    std::fs::File::open(dir.join("cgroup")).ok()?.take(MAX_CGROUP_FILE).read_to_string(&mut text).ok()?;
    same()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a";

    /// `/proc/PID/cgroup` as each runtime and cgroup version leaves it
    /// (recorded shapes; the id replaced by ID).
    #[test]
    fn each_runtime_s_layout_gives_the_id() {
        let cases = [
            // cgroup v2
            format!("0::/system.slice/docker-{ID}.scope\n"),
            format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_4e5f_6a7b_8c9d_0e1f2a3b4c5d.slice/cri-containerd-{ID}.scope\n"),
            format!("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0a1b.slice/crio-{ID}.scope\n"),
            format!("0::/machine.slice/libpod-{ID}.scope\n"),
            format!("0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container\n"),
            format!("0::/kubepods/burstable/pod0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d/{ID}\n"),
            // cgroup v1 (the unified line says nothing: hybrid hosts)
            format!("12:memory:/docker/{ID}\n11:cpu,cpuacct:/docker/{ID}\n1:name=systemd:/docker/{ID}\n0::/\n"),
            format!("11:memory:/kubepods/burstable/pod0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d/{ID}\n0::/\n"),
            format!("4:pids:/kubepods.slice/kubepods-pod0a1b.slice/cri-containerd-{ID}.scope\n0::/\n"),
        ];
        for text in &cases {
            assert_eq!(id_in_proc_cgroup(text).as_deref(), Some(ID), "{text}");
        }
    }

    #[test]
    fn processes_outside_containers_and_monitors_have_none() {
        let cases = [
            "0::/user.slice/user-0.slice/session-1.scope\n".to_owned(),
            "0::/system.slice/nginx.service\n".to_owned(),
            "12:memory:/\n0::/\n".to_owned(),
            format!("0::/machine.slice/libpod-conmon-{ID}.scope\n"),
            format!("0::/kubepods.slice/kubepods-pod0a1b.slice/crio-conmon-{ID}.scope\n"),
            // not a container id: one digit short, upper case, another prefix
            format!("0::/docker/{}\n", &ID[1..]),
            format!("0::/docker/{}\n", ID.to_uppercase()),
            format!("0::/system.slice/evil-{ID}.scope\n"),
            String::new(),
        ];
        for text in &cases {
            assert_eq!(id_in_proc_cgroup(text), None, "{text}");
        }
    }

    /// What the kernel reports of a whole path (`/a/b/c`): its depth and
    /// its names (`cgroup_path` in bpf/process.bpf.c).
    fn reported(path: &str) -> (usize, Vec<String>) {
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        let l = parts.len();
        let mut names = vec![String::new(); TOP + 2];
        for (i, p) in parts.iter().take(TOP).enumerate() {
            names[i] = (*p).to_owned();
        }
        if l >= 2 {
            names[TOP] = parts[l - 2].to_owned();
        }
        if l >= 1 {
            names[TOP + 1] = parts[l - 1].to_owned();
        }
        (l, names)
    }

    /// The container id of a process gone before its exec record is read.
    fn of_gone(path: &str) -> Option<String> {
        let (level, names) = reported(path);
        of_exec(&[KernelPath { level, names: &names }], u32::MAX, 0)
    }

    /// The kernel's path follows the same rule, at every depth it reports
    /// whole; below names it did not report, an id is not taken.
    #[test]
    fn paths_from_the_kernel() {
        let scope = format!("cri-containerd-{ID}.scope");
        assert_eq!(
            of_gone(&format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b.slice/{scope}")).as_deref(),
            Some(ID)
        );
        assert_eq!(
            of_gone(&format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container")).as_deref(),
            Some(ID)
        );
        assert_eq!(of_gone(&format!("/kubepods/burstable/pod0a1b/{ID}")).as_deref(), Some(ID));
        assert_eq!(of_gone("/user.slice/user-0.slice/session-1.scope"), None);
        assert_eq!(of_gone("/"), None);
        let (a, b) = (format!("docker-{ID}.scope"), format!("docker-{OTHER}.scope"));
        // A container's own docker-B.scope inside its docker-A.scope, right
        // inside, two levels down, five (a whole path of 8) and seven (a
        // path of 10: the outer 6 names, a gap, the parent's and its own).
        for below in ["", "x/", "x/y/z/w/", "x/y/z/w/v/u/"] {
            assert_eq!(of_gone(&format!("/system.slice/{a}/{below}{b}")).as_deref(), Some(ID), "{below}");
        }
        // An id only below the gap: none (what the gap holds is not known).
        assert_eq!(of_gone(&format!("/a/b/c/d/e/f/g/h/{b}")), None);
        // ... but up to a depth of 8 the path is whole.
        assert_eq!(of_gone(&format!("/a/b/c/d/e/f/g/{b}")).as_deref(), Some(OTHER));
        assert_eq!(of_gone(&format!("/a/b/c/d/e/f/{b}/container")).as_deref(), Some(OTHER));
        // Deeper than the kernel walks: its outer names are not there.
        let deep: String = (0..WALK).map(|i| format!("/l{i}")).collect();
        assert_eq!(of_gone(&format!("{deep}/{b}")), None);
    }

    const OTHER: &str = "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0";

    /// A container that makes cgroups named as a runtime names them below
    /// its own (it may: the subtree is delegated to it) is still itself:
    /// the outermost runtime-shaped name decides, nothing below it.
    #[test]
    fn below_a_container_s_cgroup_nothing_is_read() {
        let cases = [
            format!("0::/system.slice/docker-{ID}.scope/docker-{OTHER}.scope\n"),
            format!("0::/system.slice/docker-{ID}.scope/init.scope/system.slice/docker-{OTHER}.scope\n"),
            format!("0::/kubepods.slice/kubepods-pod0a1b.slice/cri-containerd-{ID}.scope/kubepods.slice/cri-containerd-{OTHER}.scope\n"),
            format!("0::/machine.slice/libpod-{ID}.scope/container/libpod-{OTHER}.scope\n"),
            format!("0::/docker/{ID}/docker/{OTHER}\n"),
            format!("0::/kubepods/burstable/pod0a1b/{ID}/{OTHER}\n"),
            // hierarchies: the unified one first
            format!("4:memory:/docker/{OTHER}\n0::/system.slice/docker-{ID}.scope\n"),
            // a cgroup namespace: the path seen from another namespace
            format!("0::/../../system.slice/docker-{ID}.scope/x/docker-{OTHER}.scope\n"),
        ];
        for text in &cases {
            assert_eq!(id_in_proc_cgroup(text).as_deref(), Some(ID), "{text}");
        }
    }

    /// A process the kernel named with an id and that still runs: its
    /// whole path decides (this test process's own, in no container).
    #[test]
    fn a_running_process_s_whole_path_decides() {
        let me = std::process::id();
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let ticks: u64 = crate::discovery::parse_stat(&stat).unwrap().1[19].parse().unwrap();
        // SAFETY: sysconf has no memory-safety preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        let start_ns = ticks * (1_000_000_000 / hz);
        let own = id_in_proc_cgroup(&std::fs::read_to_string("/proc/self/cgroup").unwrap());
        let (level, names) = reported(&format!("/x/docker-{OTHER}.scope"));
        let paths = [KernelPath { level, names: &names }];
        assert_eq!(of_exec(&paths, me, start_ns), own, "this process's path, not the kernel's");
        // Another start time: not this process (a reused pid): the kernel's.
        assert_eq!(of_exec(&paths, me, start_ns + 10_000_000_000).as_deref(), Some(OTHER));
    }
}
