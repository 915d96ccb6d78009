//! [`Ringtail`]: the `ringtail` supervisor with a test configuration, its
//! logs and standard output captured; its pinned probes (a directory per
//! start), the actors' users, and the stdout exporter's span lines
//! ([`span_lines`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::{bin_dir, last_lines, scrape, time_scale, wait_until, Proc, TempDir};

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
