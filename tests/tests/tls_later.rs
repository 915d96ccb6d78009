//! Issue 45: HTTPS for every process, whenever it starts, with the loader
//! keeping no capability (the TLS attacher, `probe-loader/src/attacher.rs`,
//! attaches when the kernel reports an exec or a libssl mapping):
//! - in the default configuration (every process selected), a Python
//!   HTTPS server and a curl client started after ringtail, each with a
//!   fresh copy of the host's libssl (a file ringtail never saw: what every
//!   container image brings), give exactly their spans, and no TLS
//!   connection was made before its file was attached;
//! - a container-like process (its own mount namespace, a libssl of its
//!   own mounted over the standard path) is attached through the file it
//!   maps, by device and inode;
//! - with a subset selected (per-process links where the kernel has
//!   `uprobe_multi`), nginx started after ringtail, master and the workers it
//!   forks, is traced, while the uprobes do not run at all in a busy TLS
//!   server beside it that is not selected (bpf_stats).
//!
//! The Go programs started after ringtail are in `go_tls.rs`
//! (`go_https_started_after_ringtail_by_default`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use ringtail_tests::*;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

/// The host's libssl.
fn host_libssl() -> PathBuf {
    ["/usr/lib/x86_64-linux-gnu/libssl.so.3", "/lib/x86_64-linux-gnu/libssl.so.3"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("the host's libssl.so.3")
}

/// A fresh copy of the host's libssl in `dir/name/libssl.so.3`: its directory.
fn fresh_libssl(dir: &Path, name: &str) -> PathBuf {
    let lib = dir.join(name);
    std::fs::create_dir_all(&lib).expect("mkdir");
    std::fs::copy(host_libssl(), lib.join("libssl.so.3")).expect("copy libssl");
    lib
}

/// ringtail with `discovery` (empty: every process), exporting to `rotel`
/// and its counters on `prom`.
fn ringtail(rotel: &Rotel, prom: u16, discovery: &str) -> Ringtail {
    Ringtail::start(&format!(
        "[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\n{discovery}\n\
         [export]\nstdout = true\n[export.otlp]\nendpoint = \"http://127.0.0.1:{}\"\nprotocol = \"grpc\"\n\
         [export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n",
        rotel.grpc
    ))
}

/// The Python HTTPS server of `PY_TLS_SERVER` on a free port, with `env`.
fn python_server(dir: &Path, wrapper: &[&str], env: &[(&str, &Path)]) -> (Proc, u16) {
    let (cert, key) = certificate(dir);
    let script = dir.join("server.py");
    std::fs::write(&script, PY_TLS_SERVER).expect("write server.py");
    let port = free_port();
    let mut cmd = match wrapper.split_first() {
        Some((p, args)) => {
            let mut c = Command::new(p);
            c.args(args).arg("python3");
            c
        }
        None => Command::new("python3"),
    };
    cmd.arg(&script).args([port.to_string(), cert, key]).stdout(Stdio::null()).stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let p = Proc::spawn("a python https server", &mut cmd);
    assert!(wait_port(port, Duration::from_secs(20)), "the server did not listen on {port}");
    (p, port)
}

/// Waits until the attacher logged attaching `file` (a path's end).
fn wait_attached(rt: &Ringtail, file: &str) {
    wait_until(WAIT, || rt.log().lines().any(|l| l.contains("event=\"tls_attached\"") && l.contains(file)).then_some(()))
        .unwrap_or_else(|| panic!("{file} was not attached; log:\n{}", last_lines(&rt.log(), 60)));
}

/// A TLS connection made before its file was attached, counted.
fn early(prom: u16) -> f64 {
    metric_value(prom, "ringtail_tls_connections_before_attach_total", &[]).unwrap_or(0.0)
}

/// A server on `port` that answers `/slow` after 500 ms: a curl that asks
/// it first gives the attacher time to attach the libssl it mapped at exec.
const PY_SLOW: &str = r#"
import http.server, sys, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(0.5)
        self.send_response(204)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#;

/// Default configuration: a Python HTTPS server and a curl client, both
/// started after ringtail, each with a libssl copy of its own.
#[test]
fn python_and_curl_with_fresh_libssl_copies_started_after_ringtail() {
    if !ready_to_trace(&["python3", "curl", "openssl"]) {
        return;
    }
    let rotel = Rotel::start();
    let prom = free_port();
    let rt = ringtail(&rotel, prom, "");
    let dir = TempDir::new("fresh-libssl");
    let server_lib = fresh_libssl(&dir.0, "server-lib");
    let client_lib = fresh_libssl(&dir.0, "client-lib");
    let (_server, port) = python_server(&dir.0, &[], &[("LD_LIBRARY_PATH", &server_lib)]);
    // Attached when it mapped its copy, before it listened.
    wait_attached(&rt, "server-lib/libssl.so.3");
    let slow = dir.join("slow.py");
    std::fs::write(&slow, PY_SLOW).expect("write slow.py");
    let slow_port = free_port();
    let _slow = Proc::spawn("a slow server", Command::new("python3").arg(&slow).arg(slow_port.to_string()).stdout(Stdio::null()));
    assert!(wait_port(slow_port, Duration::from_secs(10)));
    let urls: Vec<String> = ["/one", "/two", "/three"].iter().map(|p| format!("https://127.0.0.1:{port}{p}")).collect();
    let st = Command::new("curl")
        .args(["-sk", "-o", "/dev/null"])
        .arg(format!("http://127.0.0.1:{slow_port}/slow"))
        .args(urls.iter().flat_map(|u| ["-o", "/dev/null", u.as_str()]))
        .env("LD_LIBRARY_PATH", &client_lib)
        .status()
        .expect("run curl");
    assert!(st.success());
    wait_attached(&rt, "client-lib/libssl.so.3");
    let ours = |s: &Value| attr(s, "server.port").as_deref() == Some(port.to_string().as_str());
    let spans = expect_spans(
        &rotel,
        &rt,
        (WAIT, SETTLE),
        ours,
        &[
            (k("server", "https", "GET", "/one", 200), 1),
            (k("server", "https", "GET", "/two", 200), 1),
            (k("server", "https", "GET", "/three", 200), 1),
            (k("client", "https", "GET", "/one", 200), 1),
            (k("client", "https", "GET", "/two", 200), 1),
            (k("client", "https", "GET", "/three", 200), 1),
        ],
    );
    assert_eq!(spans.len(), 6);
    assert_eq!(early(prom), 0.0, "a TLS connection before its file was attached:\n{}", rt.counters());
}

/// A container-like process: its own mount namespace (`unshare -m`), where
/// a libssl of its own (on another filesystem) is mounted over the
/// standard path. The attacher opens the file the process maps (not the
/// name, which is the host's own libssl in the host's namespace) and
/// attaches to it: every request is a span.
#[test]
fn a_process_in_its_own_mount_namespace_with_its_own_libssl() {
    if !ready_to_trace(&["python3", "curl", "openssl", "unshare"]) {
        return;
    }
    let rotel = Rotel::start();
    let prom = free_port();
    let rt = ringtail(&rotel, prom, "");
    let dir = TempDir::new("ns-libssl");
    let own = fresh_libssl(&dir.0, "own");
    let host = host_libssl();
    let script = dir.join("in-ns.sh");
    std::fs::write(&script, format!("mount --bind {}/libssl.so.3 {} && exec \"$@\"\n", own.display(), host.display())).expect("script");
    let (_server, port) = python_server(&dir.0, &["unshare", "-m", "--propagation", "private", "sh", script.to_str().expect("utf-8")], &[]);
    wait_attached(&rt, &format!("{}\"", host.display()));
    let st = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-o", "/dev/null"])
        .args([format!("https://127.0.0.1:{port}/in-ns/a"), format!("https://127.0.0.1:{port}/in-ns/b")])
        .status()
        .expect("run curl");
    assert!(st.success());
    let ours = |s: &Value| s["kind"] == 2 && attr(s, "server.port").as_deref() == Some(port.to_string().as_str());
    expect_spans(
        &rotel,
        &rt,
        (WAIT, SETTLE),
        ours,
        &[(k("server", "https", "GET", "/in-ns/a", 200), 1), (k("server", "https", "GET", "/in-ns/b", 200), 1)],
    );
}

/// Run counts of every program named `name`, summed (bpf_stats).
fn runs(name: &str) -> u64 {
    let out = Command::new("bpftool").args(["-j", "prog", "list"]).output().expect("bpftool");
    let progs: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
    progs.iter().filter(|p| p["name"] == name).filter_map(|p| p["run_cnt"].as_u64()).sum()
}

/// Turns `kernel.bpf_stats_enabled` on, and back as it was on drop.
struct BpfStats(String);

impl BpfStats {
    fn on() -> BpfStats {
        let was = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap_or_else(|_| "0".into());
        std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "1").expect("enable bpf_stats");
        BpfStats(was.trim().to_owned())
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", &self.0);
    }
}

/// A subset selected (nginx by name): nginx's master and workers, on the
/// host's libssl (links of the file's own, made at start), are traced; a
/// busy TLS server that is not selected, on a libssl copy of its own,
/// runs none of the TLS programs: its file is never attached (on a kernel
/// with `uprobe_multi`, a file found in a selected process gets links for
/// that process alone). nginx's requests are exact spans. (On kernels
/// without uprobe_multi the count is not asserted.)
#[test]
fn nginx_and_its_workers_traced_and_no_tls_program_in_a_process_not_selected() {
    if !ready_to_trace(&["nginx", "curl", "openssl", "python3", "bpftool"]) {
        return;
    }
    let rotel = Rotel::start();
    let prom = free_port();
    let rt = ringtail(&rotel, prom, "exe_names = [\"^nginx$\"]");
    let kind = rt.log().lines().find(|l| l.contains("event=\"tls_attacher_started\"")).map(str::to_owned).unwrap_or_default();
    let per_process = !kind.contains("perf events");
    let dir = TempDir::new("pid-links");
    let (cert, key) = certificate(&dir.0);
    let (tls, plain) = (free_port(), free_port());
    let extra = format!(
        "}}\n    server {{\n        listen 127.0.0.1:{tls} ssl;\n        ssl_certificate {cert};\n        ssl_certificate_key {key};\n\
         location = /ok {{ return 200 \"ok\\n\"; }}\n"
    );
    let _nginx = nginx_with(plain, &dir.0, 2, "", &extra);
    assert!(wait_port(tls, Duration::from_secs(10)));
    // The unselected server: a libssl copy of its own.
    let other_dir = TempDir::new("pid-links-other");
    let other_lib = fresh_libssl(&other_dir.0, "server-lib");
    let (_other, other_port) = python_server(&other_dir.0, &[], &[("LD_LIBRARY_PATH", other_lib.as_path())]);
    let stats = BpfStats::on();
    let programs = ["tls_session", "tls_multi_enter", "tls_multi_exit", "tls_read_enter", "tls_call_exit", "tls_write_enter"];
    let before: u64 = programs.iter().map(|p| runs(p)).sum();
    let other_urls: Vec<String> = (0..20).map(|i| format!("https://127.0.0.1:{other_port}/other/{i}")).collect();
    let st = Command::new("curl")
        .arg("-sk")
        .args(other_urls.iter().flat_map(|u| ["-o", "/dev/null", u.as_str()]))
        .env("LD_LIBRARY_PATH", fresh_libssl(&other_dir.0, "curl-lib"))
        .status()
        .expect("curl");
    assert!(st.success());
    let after: u64 = programs.iter().map(|p| runs(p)).sum();
    if per_process {
        assert_eq!(after - before, 0, "TLS programs ran in processes not selected (20 requests to an unselected server)");
    }
    drop(stats);
    let urls: Vec<String> = (0..4).map(|_| format!("https://127.0.0.1:{tls}/ok")).collect();
    let st = Command::new("curl").arg("-sk").args(urls.iter().flat_map(|u| ["-o", "/dev/null", u.as_str()])).status().expect("curl");
    assert!(st.success());
    let ours = |s: &Value| s["kind"] == 2 && attr(s, "server.port").as_deref() == Some(tls.to_string().as_str());
    expect_spans(&rotel, &rt, (WAIT, SETTLE), ours, &[(k("server", "https", "GET", "/ok", 200), 4)]);
}
