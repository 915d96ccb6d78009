//! `container.id` from the kernel: real servers and clients put into the
//! cgroups Docker, containerd/CRI (kubelet), CRI-O and podman make, on
//! cgroup v2 and the cgroup v1 memory hierarchy, before they exec (as a
//! runtime starts a container's first process). Every span of a process in
//! a container carries exactly its id, whichever way the loader learnt of
//! the process (the start scan's `/proc/PID/cgroup`, or the kernel's exec
//! record read after a short-lived client is gone); a host process in the
//! same test carries none; and a container that makes a runtime-shaped
//! cgroup inside its own (its delegated subtree) and moves a process in
//! still carries its own id, never the one it named, also when the
//! process is gone before its exec record is read (issue 44).
//!
//! (Real container runtimes cannot run on the machines this suite runs on:
//! podman's `crun` is refused `setrlimit(RLIMIT_NPROC)` without
//! CAP_SYS_RESOURCE. The kernel sees a container as its cgroup, which is
//! what these tests make.)

use std::process::Stdio;
use std::time::Duration;

use ringtail_tests::cgroups::{container_id, v1_memory_root, v2_root, Cgroup};
use ringtail_tests::*;

const WAIT: Duration = Duration::from_secs(30);

/// A runtime's cgroup for container `id` (relative to its hierarchy).
fn layouts(id: &dyn Fn(u32) -> String) -> Vec<(&'static str, bool, String, String)> {
    // (what, cgroup v1 memory?, relative path, the id it carries)
    let pod = "pod0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d";
    let pod_slice = "kubepods-burstable-pod0a1b2c3d_4e5f_6a7b_8c9d_0e1f2a3b4c5d.slice";
    vec![
        ("docker (systemd, v2)", false, format!("rt-test.slice/docker-{}.scope", id(1)), id(1)),
        (
            "containerd/CRI (kubelet, systemd, v2)",
            false,
            format!("kubepods.slice/kubepods-burstable.slice/{pod_slice}/cri-containerd-{}.scope", id(2)),
            id(2),
        ),
        ("CRI-O (v2)", false, format!("kubepods.slice/kubepods-besteffort.slice/crio-{}.scope", id(3)), id(3)),
        ("podman rootless (v2)", false, format!("rt-test.slice/libpod-{}.scope/container", id(4)), id(4)),
        ("docker (cgroupfs, v1)", true, format!("docker/{}", id(5)), id(5)),
        ("containerd/CRI (kubelet, cgroupfs, v1)", true, format!("kubepods/burstable/{pod}/{}", id(6)), id(6)),
    ]
}

#[test]
fn every_runtime_s_layout_gives_exactly_its_container_id() {
    if !can_trace() || !Rotel::available() || !have("curl") {
        return;
    }
    let Some(v2) = v2_root() else {
        skip("no cgroup v2 hierarchy is mounted");
        return;
    };
    let Some(v1) = v1_memory_root() else {
        skip("no cgroup v1 memory hierarchy is mounted (a cgroup v2 host: the v1 layouts cannot be made here)");
        return;
    };
    let base = std::process::id() * 16;
    let id = |n: u32| container_id(base + n);
    let www = TempDir::new("ctr-www");
    std::fs::write(www.join("index.html"), "hi\n").expect("write index.html");
    let dir = www.0.to_str().expect("a UTF-8 path").to_owned();
    let python_in = |cg: &Cgroup, port: u16| {
        let mut cmd = cg.command("python3");
        cmd.args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1", "--directory", &dir])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let p = Proc::spawn("python in a container", &mut cmd);
        assert!(wait_port(port, Duration::from_secs(10)), "python did not listen on {port}");
        p
    };

    // One container whose server runs before ringtail starts: named by the
    // start scan, from /proc/PID/cgroup.
    let early_cg = Cgroup::make(&v2, &format!("rt-test.slice/docker-{}.scope", id(9)));
    let early_port = free_port();
    let _early = python_in(&early_cg, early_port);

    let rotel = Rotel::start();
    let rt = Ringtail::start(&format!(
        "[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nexe_names = [\"^python3\", \"^curl$\"]\n\
         [export.otlp]\nendpoint = \"http://127.0.0.1:{}\"\nprotocol = \"grpc\"\n",
        rotel.grpc
    ));

    // Containers started after ringtail: named from the kernel's exec records.
    let mut servers = Vec::new();
    let mut expect: Vec<(u16, Option<String>, &str)> = vec![(early_port, Some(id(9)), "docker (v2), running before ringtail")];
    for (what, on_v1, relative, cid) in layouts(&id) {
        let cg = Cgroup::make(if on_v1 { &v1 } else { &v2 }, &relative);
        let port = free_port();
        let p = python_in(&cg, port);
        servers.push((p, cg));
        expect.push((port, Some(cid), what));
    }
    // The nested-delegation attack (issue 44): container A's cgroup is its
    // own to subdivide (a delegated subtree); it makes `docker-B.scope`
    // there, right below its own and two levels below, and moves a server
    // into each. Both are still A: the outermost runtime-shaped name
    // decides (the one two levels below from the process's whole path,
    // the kernel's record naming only the cgroup and its parent).
    let a = id(11);
    let deep_cg = Cgroup::make(&v2, &format!("rt-test.slice/docker-{a}.scope/delegated/docker-{}.scope", id(13)));
    let direct_cg = Cgroup::make(&v2, &format!("rt-test.slice/docker-{a}.scope/docker-{}.scope", id(12)));
    for (cg, what) in [(direct_cg, "B made right inside container A"), (deep_cg, "B made two levels inside container A")] {
        let port = free_port();
        let p = python_in(&cg, port);
        servers.push((p, cg));
        expect.push((port, Some(a.clone()), what));
    }
    // A process on the host: no container.
    let host_port = free_port();
    let _host = python_http_server(host_port, &www.0);
    expect.push((host_port, None, "a host process"));

    for (port, _, _) in &expect {
        let st =
            std::process::Command::new("curl").args(["-s", "-o", "/dev/null", &format!("http://127.0.0.1:{port}/index.html")]).status();
        assert!(st.is_ok_and(|s| s.success()), "curl to {port}");
    }
    // Short-lived clients inside containers, gone before their exec
    // records are read (the loader is stopped while they run: curl, a
    // literal name, is selected by the kernel at its exec): their client
    // spans carry their containers, named from the kernel's paths alone —
    // one in its runtime's cgroup, one in a docker-B.scope that container A
    // made three levels inside its own (still A: the kernel reports the
    // path's outer names, not only the cgroup and its parent).
    let client_cg = Cgroup::make(&v2, &format!("rt-test.slice/docker-{}.scope", id(10)));
    let nested_cg = Cgroup::make(&v2, &format!("rt-test.slice/docker-{a}.scope/delegated/more/docker-{}.scope", id(14)));
    let loader = rt.pid("probe-loader").expect("the loader's pid");
    // SAFETY: signals to a child of this test's ringtail.
    unsafe { libc::kill(loader as i32, libc::SIGSTOP) };
    let st = client_cg.command("curl").args(["-s", "-o", "/dev/null", &format!("http://127.0.0.1:{host_port}/from-a-container")]).status();
    let nested_st =
        nested_cg.command("curl").args(["-s", "-o", "/dev/null", &format!("http://127.0.0.1:{host_port}/from-a-nested-cgroup")]).status();
    // SAFETY: as above.
    unsafe { libc::kill(loader as i32, libc::SIGCONT) };
    assert!(st.is_ok_and(|s| s.success()), "curl in a container");
    assert!(nested_st.is_ok_and(|s| s.success()), "curl in a nested cgroup");

    let n = expect.len();
    let short_lived = ["/from-a-container", "/from-a-nested-cgroup"];
    let spans = wait_until(WAIT, || {
        let s = rotel.spans();
        (s.iter().filter(|s| s["kind"] == 2).count() >= n
            && short_lived.iter().all(|p| s.iter().any(|s| attr(s, "url.path").as_deref() == Some(*p))))
        .then_some(())
    });
    assert!(spans.is_some(), "spans never arrived: {:?}\n{}", rotel.spans().iter().map(key).collect::<Vec<_>>(), rt.log());
    std::thread::sleep(SETTLE);
    let spans = rotel.spans();
    for (port, cid, what) in &expect {
        let of_port: Vec<&Value> =
            spans.iter().filter(|s| s["kind"] == 2 && on_port(s, *port) && attr(s, "url.path").as_deref() == Some("/index.html")).collect();
        assert_eq!(of_port.len(), 1, "{what}: one server span on {port}");
        assert_eq!(res_attr(of_port[0], "container.id"), *cid, "{what}: {}", of_port[0]);
    }
    let clients: Vec<(Option<String>, Option<String>)> =
        spans.iter().filter(|s| s["kind"] == 3).map(|s| (attr(s, "url.path"), res_attr(s, "container.id"))).collect();
    assert!(clients.contains(&(Some("/from-a-container".into()), Some(id(10)))), "{clients:?}");
    assert!(clients.contains(&(Some("/from-a-nested-cgroup".into()), Some(a.clone()))), "{clients:?}");
    // the host's curls: no container
    assert_eq!(clients.iter().filter(|(p, c)| p.as_deref() == Some("/index.html") && c.is_none()).count(), n, "{clients:?}");
    drop(rt);
    drop(servers);
}
