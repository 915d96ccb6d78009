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
//! An id is 64 lowercase hexadecimal digits; the deepest cgroup name that
//! is one (alone, or between one of the runtimes' prefixes and `.scope`)
//! gives it, so a process in a cgroup its container made below its own
//! (podman's `container`) still has it. A process outside any container
//! has none; nothing is guessed from other shapes.
//!
//! Two sources, one rule: `/proc/PID/cgroup` (whole paths, every hierarchy)
//! for the processes running at start, and for later ones the names the
//! kernel copied at exec (`bpf/process.bpf.c`: the cgroup and its parent, in
//! the unified hierarchy and in the memory controller's, which is where
//! cgroup v1 hosts put containers).

/// Runtimes' prefixes of a container's cgroup name (`<prefix>-<id>.scope`).
const SCOPE_PREFIXES: [&str; 4] = ["docker", "cri-containerd", "crio", "libpod"];

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

/// The container id of a cgroup path's names, deepest first.
pub fn id_in_names<'a>(deepest_first: impl IntoIterator<Item = &'a str>) -> Option<String> {
    deepest_first.into_iter().find_map(id_in_name).map(str::to_owned)
}

/// The container id in the contents of `/proc/PID/cgroup`
/// (`hierarchy:controllers:path` lines; cgroup v2's is `0::path`).
pub fn id_in_proc_cgroup(text: &str) -> Option<String> {
    text.lines().filter_map(|l| l.splitn(3, ':').nth(2)).find_map(|path| id_in_names(path.rsplit('/')))
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

    /// The kernel's names (cgroup, then its parent) follow the same rule.
    #[test]
    fn names_from_the_kernel() {
        let scope = format!("cri-containerd-{ID}.scope");
        assert_eq!(id_in_names([scope.as_str(), "kubepods-burstable-pod0a1b.slice"]).as_deref(), Some(ID));
        let podman = format!("libpod-{ID}.scope");
        assert_eq!(id_in_names(["container", podman.as_str()]).as_deref(), Some(ID));
        assert_eq!(id_in_names([ID, "pod0a1b"]).as_deref(), Some(ID));
        assert_eq!(id_in_names(["session-1.scope", "user-0.slice"]), None);
        assert_eq!(id_in_names(["", ""]), None);
    }
}
