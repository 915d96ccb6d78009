//! Issue 26, what a compromised actor (a process of the actors' uid) and
//! any local user could still do to ringtail's secrets, its root loader's
//! socket and its HTTP endpoints, attacked as the confirmed scripts did:
//!
//! - the exporter's OTLP secrets: the attacker (the actors' uid) kills the
//!   exporter and races its successor from the moment its pid exists
//!   (`PTRACE_SEIZE`, `/proc/PID/environ`, `/proc/PID/fd/4`,
//!   `pidfd_getfd`), under the supervisor and as systemd starts it;
//!
//! Every attacker is this test binary started again as another uid (a real
//! second process, [`role`]); a role is a no-op test unless its variable is
//! set. The tests need root and skip loudly without it.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use ringtail_tests::*;

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// The actors' user's uid and gid (`ringtail`, made by the harness).
fn actors_ids() -> (u32, u32) {
    ensure_actors_user();
    // SAFETY: getpwnam returns static storage or null; read at once.
    let pw = unsafe { libc::getpwnam(c"ringtail".as_ptr()) };
    assert!(!pw.is_null(), "the harness makes the actors' user ringtail");
    // SAFETY: non-null, as checked.
    unsafe { ((*pw).pw_uid, (*pw).pw_gid) }
}

/// Runs this binary's test `name` alone as `uid`:`gid` with `env`, and
/// returns what it printed and how it ended.
fn role(name: &str, env: &[(&str, String)], (uid, gid): (u32, u32)) -> Output {
    let mut cmd = Command::new(std::env::current_exe().expect("this test binary"));
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"]).uid(uid).gid(gid).current_dir("/");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap_or_else(|e| panic!("start {name} as {uid}: {e}"))
}

fn out_text(out: &Output) -> String {
    format!("{}\n{}{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

// ---------------------------------------------------------------------------
// Item 3: the exporter's secrets.

const RACE_PARENT: &str = "RT_ATTACK_RACE_PARENT";
const RACE_VICTIM: &str = "RT_ATTACK_RACE_VICTIM";
const RACE_SECRETS: &str = "RT_ATTACK_RACE_SECRETS";
const RACE_LAST_PID: &str = "RT_ATTACK_RACE_LAST_PID";
/// How long the racer keeps at one new process.
const RACE_FOR: Duration = Duration::from_secs(3);

fn last_pid() -> i32 {
    std::fs::read_to_string("/proc/sys/kernel/ns_last_pid").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

/// The parent of process `pid` (`PPid:` of its status); `None` for a
/// thread's id (its `Tgid:` is another), which reports its process's parent.
fn ppid_of(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name))?.trim().parse::<i32>().ok();
    (field("Tgid:")? == pid).then(|| field("PPid:"))?
}

fn read_limited(path: &str) -> Option<Vec<u8>> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut buf = vec![0u8; 1 << 16];
    let n = f.read(&mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// One process, raced: every way the actors' uid has to another process of
/// its uid, over and over until it is gone or [`RACE_FOR`] has passed.
/// Returns how the secret was got, if it was.
fn race(pid: i32, secrets: &[String]) -> Option<String> {
    let holds = |bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes);
        secrets.iter().find(|s| text.contains(s.as_str())).cloned()
    };
    let end = Instant::now() + RACE_FOR;
    while Instant::now() < end {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return None;
        }
        // A tracer attached now stays attached: it can then make the
        // process do anything (its registers are the tracer's to set).
        // SAFETY: ptrace with integer arguments; the result is checked.
        if unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0, 0) } == 0 {
            // SAFETY: as above; waitpid on a tracee is allowed to its tracer.
            unsafe {
                libc::ptrace(libc::PTRACE_INTERRUPT, pid, 0, 0);
                let mut status = 0;
                libc::waitpid(pid, &mut status, libc::__WALL);
            }
            let got = [format!("/proc/{pid}/environ"), format!("/proc/{pid}/fd/4")]
                .iter()
                .filter_map(|p| read_limited(p).and_then(|b| holds(&b)).map(|s| format!("{p} ({s})")))
                .collect::<Vec<_>>();
            // SAFETY: as above.
            unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0) };
            return Some(format!("PTRACE_SEIZE attached; read while stopped: {got:?}"));
        }
        for path in [format!("/proc/{pid}/environ"), format!("/proc/{pid}/fd/4")] {
            if let Some(secret) = read_limited(&path).and_then(|b| holds(&b)) {
                return Some(format!("{path} ({secret})"));
            }
        }
        // SAFETY: raw syscalls on integers; every result is checked.
        unsafe {
            let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
            if pidfd >= 0 {
                let fd = libc::syscall(libc::SYS_pidfd_getfd, pidfd, 4, 0) as i32;
                libc::close(pidfd);
                if fd >= 0 {
                    let got = read_limited(&format!("/proc/self/fd/{fd}"));
                    libc::close(fd);
                    return Some(format!("pidfd_getfd(4): {:?}", got.and_then(|b| holds(&b))));
                }
            }
        }
    }
    None
}

/// Not a test by itself: the racer, as the actors' uid. Kills the victim
/// (if any), then watches every new pid (`ns_last_pid`) for a child of the
/// parent and races it. Prints `WON <how>` or `HELD <pid>`.
#[test]
fn racer_role() {
    let (Ok(parent), Ok(secrets)) = (std::env::var(RACE_PARENT), std::env::var(RACE_SECRETS)) else {
        return;
    };
    let parent: i32 = parent.parse().expect("parent pid");
    let secrets: Vec<String> = secrets.split(',').map(str::to_owned).collect();
    let mut seen: i32 = std::env::var(RACE_LAST_PID).ok().and_then(|v| v.parse().ok()).unwrap_or_else(last_pid);
    if let Some(victim) = std::env::var(RACE_VICTIM).ok().and_then(|v| v.parse::<i32>().ok()) {
        // SAFETY: kill has no memory-safety preconditions.
        assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0, "the actors' uid may kill the exporter");
    }
    println!("\nRACE WATCHING");
    let me = std::process::id() as i32;
    let end = Instant::now() + Duration::from_secs(90);
    while Instant::now() < end {
        let now = last_pid();
        for pid in (seen + 1)..=now {
            if pid != me && ppid_of(pid) == Some(parent) {
                match race(pid, &secrets) {
                    Some(how) => println!("\nRACE WON {pid}: {how}"),
                    None => println!("\nRACE HELD {pid}"),
                }
                return;
            }
        }
        seen = seen.max(now);
    }
    println!("\nRACE NO_SUCCESSOR");
}

fn secret(tag: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(7);
    format!("{tag}-{}-{nanos}", std::process::id())
}

/// Under the supervisor: five times, the actors' uid kills the exporter and
/// races its successor from the moment its pid exists. It must never get
/// the configuration's header (fd 4) nor `OTEL_EXPORTER_OTLP_HEADERS`
/// (environment), nor attach: the successor is exec'd as root and becomes
/// the actors' uid itself, so it is never a dumpable process of that uid.
#[test]
fn the_actors_uid_racing_a_restarted_exporter_gets_no_secret() {
    if !can_trace() {
        return;
    }
    let (in_config, in_env) = (secret("cfg"), secret("env"));
    let ringtail = Ringtail::start_with_env(
        &format!(
            "[export]\nstdout = false\n[export.otlp]\nendpoint = \"http://127.0.0.1:1\"\nprotocol = \"http/protobuf\"\nmetrics = false\n\
             headers = {{ authorization = \"Bearer {in_config}\" }}\n[discovery]\nopen_ports = [1]\n"
        ),
        &[("OTEL_EXPORTER_OTLP_HEADERS", &format!("x-tenant={in_env}"))],
    );
    let supervisor = ringtail.proc.pid();
    let mut results = Vec::new();
    for round in 0..5 {
        ringtail.wait_ready(Duration::from_secs(120));
        let victim = ringtail.pid("exporter-actor").expect("exporter pid");
        let out = role(
            "racer_role",
            &[
                (RACE_PARENT, supervisor.to_string()),
                (RACE_VICTIM, victim.to_string()),
                (RACE_SECRETS, format!("{in_config},{in_env}")),
                (RACE_LAST_PID, last_pid().to_string()),
            ],
            actors_ids(),
        );
        let text = out_text(&out);
        assert!(out.status.success(), "round {round}: the racer failed:\n{text}");
        let line = text.lines().filter_map(|l| l.strip_prefix("RACE ")).find(|l| *l != "WATCHING").unwrap_or("");
        assert!(line.starts_with("WON") || line.starts_with("HELD"), "round {round}: no successor raced:\n{text}\n{}", ringtail.log());
        results.push(line.to_owned());
    }
    eprintln!("{results:#?}");
    let won: Vec<&String> = results.iter().filter(|l| l.starts_with("WON")).collect();
    assert!(won.is_empty(), "the actors' uid got at the restarted exporter:\n{won:#?}");
}

/// A configuration for an exporter started alone, as its systemd unit
/// starts it: `run` is its runtime directory (the actors').
fn lone_exporter_config(dir: &TempDir) -> std::path::PathBuf {
    let (uid, gid) = actors_ids();
    let run = dir.join("run");
    std::fs::create_dir_all(run.join("actors")).expect("runtime dir");
    for d in [run.clone(), run.join("actors")] {
        std::os::unix::fs::chown(&d, Some(uid), Some(gid)).expect("chown the runtime dir");
    }
    let config = dir.join("ringtail.toml");
    std::fs::write(
        &config,
        format!(
            "[export]\nstdout = false\n[export.otlp]\nendpoint = \"http://127.0.0.1:1\"\nprotocol = \"http/protobuf\"\nmetrics = false\n\
             [pipeline]\nruntime_dir = \"{}\"\n",
            run.display()
        ),
    )
    .expect("write the configuration");
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).expect("chmod the configuration");
    config
}

/// Starts `exporter` as systemd's unit does (`User=ringtail`, the
/// secret in its environment from `EnvironmentFile=`) while the racer (the
/// actors' uid) watches for it; returns the racer's verdict and whether
/// the exporter warned that it was exposed at exec.
fn race_lone_exporter(exporter: &Path, config: &Path, dir: &TempDir, secret: &str, round: usize) -> (String, bool) {
    let ids = actors_ids();
    let mut racer = Command::new(std::env::current_exe().expect("this test binary"));
    racer
        .args(["--exact", "racer_role", "--nocapture", "--test-threads=1"])
        .uid(ids.0)
        .gid(ids.1)
        .current_dir("/")
        .env(RACE_PARENT, std::process::id().to_string())
        .env(RACE_SECRETS, secret)
        .env(RACE_LAST_PID, last_pid().to_string())
        .stdout(std::process::Stdio::piped());
    let mut racer = racer.spawn().expect("start the racer");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(racer.stdout.take().expect("racer stdout")));
    let watching = lines.by_ref().map_while(Result::ok).any(|l| l == "RACE WATCHING");
    assert!(watching, "the racer did not start");
    let log = dir.join(&format!("exporter-{round}.log"));
    let mut cmd = Command::new(exporter);
    cmd.arg("--config")
        .arg(config)
        .uid(ids.0)
        .gid(ids.1)
        .current_dir("/")
        .env_clear()
        .env("OTEL_EXPORTER_OTLP_HEADERS", format!("authorization=Bearer%20{secret}"))
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("exporter log"));
    let mut exporter = Proc::spawn("exporter-actor as its unit starts it", &mut cmd);
    let verdict = lines.map_while(Result::ok).find_map(|l| l.strip_prefix("RACE ").map(str::to_owned)).unwrap_or_default();
    let _ = racer.wait();
    // The warning, if any, comes before it reports ready.
    let warned = wait_until(Duration::from_secs(20), || std::fs::read_to_string(&log).ok().filter(|l| l.contains("event=\"ready\"")))
        .unwrap_or_else(|| panic!("the exporter did not get ready:\n{}", std::fs::read_to_string(&log).unwrap_or_default()))
        .contains("dumpable_at_exec");
    exporter.stop(Duration::from_secs(5));
    (verdict, warned)
}

/// Under systemd there is no supervisor: the unit execs the exporter as
/// `ringtail` with `OTEL_EXPORTER_OTLP_HEADERS` from `otel.env` in its
/// environment. `install.sh` installs it execute-only (0711): the kernel
/// then makes the process non-dumpable at exec (its user cannot read the
/// file), so the actors' uid racing it from the moment its pid exists
/// never reads its environment nor attaches. The same binary readable by
/// its user (0755) is won by the same racer, and warns at start.
#[test]
fn an_execute_only_exporter_exec_d_as_its_user_is_never_readable() {
    if euid() != 0 {
        skip("needs root: the exporter started as the actors' user, a racer of that uid");
        return;
    }
    let built = bin_dir().join("ringtail-exporter-actor");
    assert!(built.exists(), "{} missing: cargo build --workspace --bins", built.display());
    let dir = TempDir::new("lone-exporter");
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).expect("chmod the test dir");
    let config = lone_exporter_config(&dir);
    let secret = secret("otel-env");
    let copy = |mode: u32| {
        let exporter = dir.join(&format!("ringtail-exporter-actor-{mode:o}"));
        std::fs::copy(&built, &exporter).expect("copy the exporter");
        std::fs::set_permissions(&exporter, std::fs::Permissions::from_mode(mode)).expect("chmod the exporter");
        exporter
    };
    let execute_only = copy(0o711);
    for round in 0..5 {
        let (verdict, warned) = race_lone_exporter(&execute_only, &config, &dir, &secret, round);
        assert!(verdict.starts_with("HELD"), "round {round}: the actors' uid got at an execute-only exporter: {verdict}");
        assert!(!warned, "round {round}: an execute-only exporter warned that it was exposed at exec");
    }
    // The control: the same racer wins against the same binary readable by
    // its user (within ten starts: it wins about half of them), and that
    // exporter says it was exposed.
    let readable = copy(0o755);
    let mut verdicts = Vec::new();
    for round in 0..10 {
        let (verdict, warned) = race_lone_exporter(&readable, &config, &dir, &secret, 100 + round);
        assert!(warned, "round {round}: a readable exporter did not warn that it was exposed at exec");
        assert!(verdict.starts_with("WON") || verdict.starts_with("HELD"), "round {round}: no exporter raced: {verdict:?}");
        let won = verdict.starts_with("WON");
        verdicts.push(verdict);
        if won {
            break;
        }
    }
    assert!(verdicts.last().is_some_and(|v| v.starts_with("WON")), "the racer never won against a readable exporter: {verdicts:#?}");
}
