//! Running ringtail as a service: least privilege (read from /proc),
//! independent restarts after `kill -9`, throttling, the supervisor's death,
//! configuration checks, profiling endpoints, lifecycle logs.

use std::collections::HashSet;
use std::net::TcpListener;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringtail_tests::*;

const CAP_SYS_PTRACE: u64 = 1 << 19;
const CAP_DAC_READ_SEARCH: u64 = 1 << 2;

fn status(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default()
}

fn field<'a>(status: &'a str, name: &str) -> &'a str {
    status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim).unwrap_or_else(|| panic!("{name} missing"))
}

fn base_config(port: u16) -> String {
    format!("[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nopen_ports = [{port}]\n")
}

/// Loopback-or-not of every listening TCP socket a process holds.
fn listening_addrs(pid: u32) -> Vec<String> {
    let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter_map(|l| l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut out = Vec::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in std::fs::read_to_string(file).unwrap_or_default().lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 && f[3] == "0A" && inodes.contains(f[9]) {
                out.push(f[1].to_owned());
            }
        }
    }
    out
}

fn is_loopback(hex_addr: &str) -> bool {
    let ip = hex_addr.split(':').next().unwrap_or_default();
    match ip.len() {
        8 => ip.ends_with("7F"),                                                    // 127.x.x.x, little-endian
        32 => ip == "00000000000000000000000001000000" || ip.ends_with("0100007F"), // ::1, ::ffff:127.0.0.1
        _ => false,
    }
}

#[test]
fn actors_are_unprivileged_and_the_loader_keeps_no_capability() {
    if !can_trace() {
        return;
    }
    let port = free_port();
    let prom = free_port();
    let rt = Ringtail::start(&format!("{}[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n", base_config(port)));
    for c in ["span-actor", "exporter-actor"] {
        let st = status(rt.pid(c).unwrap());
        for uid in field(&st, "Uid:").split_whitespace() {
            assert_ne!(uid, "0", "{c} runs as root:\n{st}");
        }
        for g in field(&st, "Gid:").split_whitespace() {
            assert_ne!(g, "0", "{c} has gid 0");
        }
        assert_eq!(field(&st, "CapEff:"), "0000000000000000", "{c}");
        assert_eq!(field(&st, "CapPrm:"), "0000000000000000", "{c}");
        assert_eq!(field(&st, "CapBnd:"), "0000000000000000", "{c}");
        assert_eq!(field(&st, "CapAmb:"), "0000000000000000", "{c}");
        assert_eq!(field(&st, "NoNewPrivs:"), "1", "{c}");
    }
    let loader = status(rt.pid("probe-loader").unwrap());
    let eff = u64::from_str_radix(field(&loader, "CapEff:"), 16).unwrap();
    assert_eq!(eff & (CAP_SYS_PTRACE | CAP_DAC_READ_SEARCH), 0, "the loader keeps a capability that reaches other processes: {eff:x}");
    assert_eq!(eff, 0, "the loader keeps no capability after start: {eff:x}");
    assert_eq!(u64::from_str_radix(field(&loader, "CapPrm:"), 16).unwrap(), 0, "permitted set too");
    assert_eq!(u64::from_str_radix(field(&loader, "CapBnd:"), 16).unwrap(), 0, "bounding set too");
    assert_eq!(field(&loader, "NoNewPrivs:"), "1");

    // Socket files: nobody else may connect, only root may bind raw events.
    let run = rt.dir.join("run");
    let meta = std::fs::metadata(run.join("raw.sock")).unwrap();
    assert_eq!(meta.uid(), 0);
    assert_eq!(meta.permissions().mode() & 0o777, 0o660, "raw.sock");
    let actors = std::fs::metadata(run.join("actors")).unwrap();
    assert_eq!(actors.permissions().mode() & 0o777, 0o750);
    assert_ne!(actors.uid(), 0);
    for e in std::fs::read_dir(run.join("actors")).unwrap().flatten() {
        let m = e.metadata().unwrap().permissions().mode();
        assert_eq!(m & 0o007, 0, "{:?} is open to others: {m:o}", e.path());
    }
    assert_eq!(std::fs::metadata(run).unwrap().permissions().mode() & 0o022, 0, "runtime dir not writable by others");

    // Nothing listens beyond loopback.
    for c in ["probe-loader", "span-actor", "exporter-actor"] {
        for a in listening_addrs(rt.pid(c).unwrap()) {
            assert!(is_loopback(&a), "{c} listens on {a}");
        }
    }
    assert!(!listening_addrs(rt.pid("exporter-actor").unwrap()).is_empty(), "the Prometheus endpoint is there");
    // Lifecycle logs.
    let log = rt.log();
    for ev in ["started", "ready", "dropped_privileges", "attached"] {
        assert!(log.contains(&format!("event=\"{ev}\"")), "no {ev} line:\n{log}");
    }
}

#[test]
fn each_component_restarts_alone_and_spans_keep_arriving() {
    if !can_trace() {
        return;
    }
    let port = free_port();
    let rt = Ringtail::start(&base_config(port));
    let _srv = server("rust server", port, &bin_dir().join("rust_http_server"), &[&port.to_string()]);
    // Requests flow all along.
    let stop = Arc::new(AtomicBool::new(false));
    let n = Arc::new(AtomicU32::new(0));
    let load = {
        let (stop, n) = (stop.clone(), n.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let i = n.fetch_add(1, Ordering::Relaxed);
                let _ = http_get(port, &format!("/flow/{i}"), &[]);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let seen =
        |from: u32| rt.spans().iter().any(|s| s.path.strip_prefix("/flow/").and_then(|i| i.parse::<u32>().ok()).is_some_and(|i| i >= from));
    assert!(wait_until(Duration::from_secs(10), || seen(0).then_some(())).is_some(), "spans flow before any kill");
    for victim in ["probe-loader", "span-actor", "exporter-actor"] {
        let others: Vec<(&str, u32)> = ["probe-loader", "span-actor", "exporter-actor"]
            .into_iter()
            .filter(|c| *c != victim)
            .map(|c| (c, rt.pid(c).unwrap()))
            .collect();
        let old = rt.pid(victim).unwrap();
        let readies = rt.events(victim, "ready").len();
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(old as i32, libc::SIGKILL) };
        let killed = Instant::now();
        let back = wait_until(Duration::from_secs(5), || (rt.events(victim, "ready").len() > readies).then(|| killed.elapsed()));
        let back = back.unwrap_or_else(|| panic!("{victim} not back:\n{}", rt.log()));
        eprintln!("{victim}: back and ready {back:?} after kill -9");
        assert!(back < Duration::from_secs(2), "{victim} took {back:?}");
        assert_ne!(rt.pid(victim), Some(old));
        for (c, pid) in &others {
            assert_eq!(rt.pid(c), Some(*pid), "{c} was restarted too");
        }
        let mark = n.load(Ordering::Relaxed) + 5;
        assert!(
            wait_until(Duration::from_secs(15), || seen(mark).then_some(())).is_some(),
            "no spans after killing {victim}:\n{}",
            rt.log()
        );
    }
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
}

#[test]
fn a_component_failing_at_start_is_throttled_not_looped() {
    if !can_trace() {
        return;
    }
    // The exporter cannot bind its Prometheus address (not this host's:
    // EADDRNOTAVAIL; a port someone holds is retried, not fatal): it dies
    // before ready.
    ensure_actors_user();
    let dir = TempDir::new("throttle");
    std::fs::write(
        dir.join("c.toml"),
        format!(
            "[export.prometheus]\nlisten = \"192.0.2.1:9400\"\nallow_remote = true\n[discovery]\nopen_ports = [1]\n[pipeline]\nruntime_dir = \"{}\"\n[probe]\npin_dir = \"{}\"\n",
            dir.join("run").display(),
            test_pin_dir().display()
        ),
    )
    .unwrap();
    let err = std::fs::File::create(dir.join("stderr")).unwrap();
    let mut p = Proc::spawn(
        "ringtail",
        Command::new(bin_dir().join("ringtail")).arg("--config").arg(dir.join("c.toml")).env("RUST_LOG", "info").stderr(err),
    );
    // The supervisor's back-off (supervise::restart_delay, unit-tested
    // there): 1 s, 2 s, 4 s… after deaths before ready. Three of them, each
    // at least its delay after the one before: throttled, not a hot loop.
    let throttled_lines = || {
        let log = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
        log.lines()
            .filter(|l| l.contains("component=\"exporter-actor\"") && l.contains("event=\"throttled\""))
            .map(str::to_owned)
            .collect::<Vec<String>>()
    };
    let throttled = wait_until(Duration::from_secs(30), || Some(throttled_lines()).filter(|t| t.len() >= 3));
    let log = std::fs::read_to_string(dir.join("stderr")).unwrap();
    let throttled = throttled.unwrap_or_else(|| panic!("three throttled restarts expected:\n{log}"));
    for (line, delay) in throttled.iter().zip(["1s", "2s", "4s"]) {
        assert!(line.contains(&format!("restart_in={delay} ")), "back-off {delay}: {line}");
    }
    // "2026-12-02T05:44:40.123456Z …": seconds of the day, to the microsecond
    let at = |line: &str| -> f64 {
        let t = line.get(11..26).unwrap_or_else(|| panic!("a timestamp: {line}"));
        let (h, rest) = t.split_at(2);
        let (m, sec) = rest[1..].split_at(2);
        h.parse::<f64>().unwrap() * 3600.0 + m.parse::<f64>().unwrap() * 60.0 + sec[1..].parse::<f64>().unwrap()
    };
    // (gaps of seconds: across midnight, modulo a day)
    let gap = |a: &str, b: &str| (at(b) - at(a)).rem_euclid(86_400.0);
    assert!(gap(&throttled[0], &throttled[1]) >= 1.0, "waited 1 s: {throttled:?}");
    assert!(gap(&throttled[1], &throttled[2]) >= 2.0, "waited 2 s: {throttled:?}");
    for c in ["probe-loader", "span-actor"] {
        assert_eq!(
            log.lines().filter(|l| l.contains(&format!("component=\"{c}\"")) && l.contains("event=\"started\"")).count(),
            1,
            "{c} left alone"
        );
    }
    assert!(p.stop(Duration::from_secs(10)));
}

#[test]
fn children_exit_when_the_supervisor_dies() {
    if !can_trace() {
        return;
    }
    let rt = Ringtail::start(&base_config(1));
    let pids: Vec<u32> = ["probe-loader", "span-actor", "exporter-actor"].iter().map(|c| rt.pid(c).unwrap()).collect();
    rt.proc.signal(libc::SIGKILL);
    let gone =
        wait_until(Duration::from_secs(5), || pids.iter().all(|p| !std::path::Path::new(&format!("/proc/{p}")).exists()).then_some(()));
    assert!(gone.is_some(), "components outlived the supervisor");
}

#[test]
fn check_config_names_key_rule_and_value() {
    let bin = bin_dir().join("ringtail");
    let dir = TempDir::new("cfg");
    let run = |body: &str, env: &[(&str, &str)]| {
        std::fs::write(dir.join("c.toml"), body).unwrap();
        let mut c = Command::new(&bin);
        c.arg("check-config").arg("--config").arg(dir.join("c.toml")).env_remove("RUST_BACKTRACE");
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, out, _) = run("[probe]\nwakeup_len = 7\n", &[("RINGTAIL_DISCOVERY__OPEN_PORTS", "81,82")]);
    assert!(ok);
    assert!(out.contains("wakeup_len = 7") && out.contains("open_ports = [81, 82]"), "effective config printed:\n{out}");
    for (body, env, needles) in [
        ("[probe]\nwakeup_len = 7\nbogus = 1\n", vec![], vec!["bogus"]),
        ("[export.otlp]\nprotocol = \"udp\"\n", vec![], vec!["export.otlp.protocol", "grpc or http/protobuf", "udp"]),
        ("[probe]\nflush_interval = \"1h\"\n", vec![], vec!["probe.flush_interval", "between 1ms and 10s", "1h"]),
        ("", vec![("RINGTAIL_PIPELINE__BATCH_LENGTH", "0")], vec!["pipeline.batch_length", "1..=65536", "0"]),
        ("", vec![("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")], vec!["OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"]),
        ("[routes]\npatterns = [\"users/{id}\"]\n", vec![], vec!["routes.patterns[0]", "must start with '/'"]),
    ] {
        let (ok, _, err) = run(body, &env);
        assert!(!ok, "{body} {env:?} accepted");
        for n in needles {
            assert!(err.contains(n), "{body} {env:?}: {n:?} not in:\n{err}");
        }
    }
}

#[test]
fn check_kernel_reports_both_backends_and_fails_without_privileges() {
    if !can_trace() {
        return;
    }
    let bin = bin_dir().join("ringtail");
    let dir = TempDir::new("ck");
    let run = |body: &str, prefix: &[&str]| {
        std::fs::write(dir.join("c.toml"), body).unwrap();
        // readable by the unprivileged run too
        std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(dir.join("c.toml"), std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut c = if prefix.is_empty() {
            Command::new(&bin)
        } else {
            let mut c = Command::new(prefix[0]);
            c.args(&prefix[1..]).arg(&bin);
            c
        };
        let out = c.arg("check-kernel").arg("--config").arg(dir.join("c.toml")).env("RINGTAIL_BIN_DIR", bin_dir()).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    // This kernel (6.3+) has both: each is loaded and attached for real.
    let (code, out) = run("", &[]);
    assert_eq!(code, Some(0), "{out}");
    for needle in [
        "kernel ",
        "BTF                  ok",
        "tracefs              ok",
        "ring buffer          ok",
        "socket tracepoints   ok",
        "syscall tracepoints  ok",
        "task storage         ok",
        "capabilities         ok",
        "ringtail will use: probe.backend = \"auto\" -> socket",
    ] {
        assert!(out.contains(needle), "{needle:?} not in:\n{out}");
    }
    let (code, out) = run("[probe]\nbackend = \"syscalls\"\n", &[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("ringtail will use: probe.backend = \"syscalls\" -> syscalls"), "{out}");
    assert!(out.contains("probe.max_connections = 16384"), "what the syscall backend cannot do is said:\n{out}");
    // Unprivileged: nothing loads, the capabilities are missing, exit 1.
    let (code, out) = run("", &["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("capabilities         no") && out.contains("ringtail cannot run here"), "{out}");
}

#[test]
fn every_process_serves_cpu_profiles() {
    if !can_trace() {
        return;
    }
    let base = loop {
        let p = free_port();
        if p < 65000 && (1..4).all(|k| TcpListener::bind(("127.0.0.1", p + k)).is_ok()) {
            break p;
        }
    };
    let rt = Ringtail::start(&format!("{}[profile]\nport = {base}\n", base_config(1)));
    for (k, who) in ["probe-loader", "span-actor", "exporter-actor", "supervisor"].iter().enumerate() {
        let port = base + k as u16;
        assert!(wait_port(port, Duration::from_secs(5)), "{who} profiling port {port}");
        let r = http_get_within(port, "/debug/pprof/profile?seconds=1", &[], PROFILE_TIME).unwrap();
        assert_eq!(r.status, 200, "{who}: {}", r.head);
        assert!(r.head.to_ascii_lowercase().contains("application/octet-stream"), "{who}");
        assert!(!r.body.is_empty(), "{who}: empty profile");
        let svg = http_get_within(port, "/debug/pprof/flamegraph?seconds=1", &[], PROFILE_TIME).unwrap();
        assert!(String::from_utf8_lossy(&svg.body).contains("<svg"), "{who}: flamegraph");
    }
    drop(rt);
}
