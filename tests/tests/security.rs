//! Issue 12, the local attack surface, against a real ringtail (supervisor,
//! root loader, actors as `actors.user`): the actors are non-dumpable, and a
//! stranger (another uid, a real second process) reaching a socket file —
//! its mode loosened on purpose so that the file permissions do not stop it
//! first — is closed by the `SO_PEERCRED` filter before it reads a byte,
//! while ringtail keeps every pid and stays ready.
//!
//! The stranger is this test binary started again with `Command::uid`
//! ([`stranger_role`]); the tests need root and skip loudly without it.
//!
//! The actors' own user, which passes that filter, can neither crash nor
//! swell any socket with huge, garbled or endless frames.
//!
//! Also: ringtail refuses to run the actors as a user another process runs
//! as (a real `sleep` of a throwaway uid) unless `actors.allow_shared_user`,
//! and the exporter's OTLP headers reach a real receiver without ever being
//! written under the runtime directory (they travel in a sealed memfd that
//! only the exporter gets).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ringtail_tests::*;
use zeromq_hostile_peers::{garbage, zmtp};

/// A uid that is neither root, nor ringtail's, nor nobody.
const STRANGER: u32 = 54321;
/// A throwaway uid that a `sleep` runs as and that the actors are then
/// configured to share.
const SHARED: u32 = 54322;
const ROLE_PATH: &str = "RINGTAIL_SECURITY_STRANGER_PATH";

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// `Uid:` of /proc/PID/status (real, effective, saved, fs).
fn uids(pid: u32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status.lines().find(|l| l.starts_with("Uid:")).expect("Uid line");
    line.split_whitespace().skip(1).map(|v| v.parse().unwrap()).collect()
}

/// Runs this binary's test `role` as `uid`:`gid`, with `var` naming
/// `path`; true if the role's assertions held (it must have run: a name the
/// harness does not know runs no test, and that is no success).
fn role_succeeds(role: &str, var: &str, path: &Path, (uid, gid): (u32, u32)) -> bool {
    let out = Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", test_path(module_path!(), role).as_str(), "--nocapture", "--test-threads=1"])
        .env(var, path)
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap_or_else(|e| panic!("start {role} as {uid}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("running 1 test"), "the role {role} did not run:\n{stdout}");
    out.status.success()
}

/// Starts this binary as the stranger against `path`; true if the socket
/// closed the connection without sending a byte.
fn stranger_is_refused(path: &Path) -> bool {
    role_succeeds("stranger_role", ROLE_PATH, path, (STRANGER, STRANGER))
}

fn loosen(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

#[test]
fn actors_are_non_dumpable_and_strangers_are_closed_before_a_byte() {
    if euid() != 0 {
        skip("needs root: ringtail's loader, and a stranger of another uid");
        return;
    }
    let ringtail = Ringtail::start("[export]\nstdout = false\n[discovery]\nopen_ports = [1]\n");
    let names = ["probe-loader", "span-actor", "exporter-actor"];
    let pids: Vec<u32> = names.iter().map(|c| ringtail.pid(c).unwrap_or_else(|| panic!("{c} pid"))).collect();

    for (name, pid) in names.iter().zip(&pids).skip(1) {
        let ids = uids(*pid);
        assert!(ids.iter().all(|u| *u != 0), "{name} runs as root: {ids:?}");
        // A non-dumpable process's /proc/PID files belong to root (the
        // directory itself may keep its cached owner).
        let owner = std::fs::metadata(format!("/proc/{pid}/environ")).expect("/proc/PID/environ").uid();
        assert_eq!(owner, 0, "{name} (uid {}) is dumpable: /proc/{pid}/environ belongs to {owner}", ids[1]);
    }

    let run: PathBuf = ringtail.dir.join("run");
    let actors = run.join("actors");
    // Open the directories and files to everyone: only the peer filter is left.
    loosen(&run, 0o777);
    loosen(&actors, 0o777);
    let sockets = socket_files(&run);
    for path in &sockets {
        loosen(path, 0o777);
    }
    assert!(sockets.len() >= 4, "raw, raw-ack, spans and span-ack sockets: {sockets:?}");
    for path in &sockets {
        assert!(stranger_is_refused(path), "a stranger (uid {STRANGER}) was served by {}", path.display());
    }

    // Still the same processes, still ready.
    let after: Vec<u32> = names.iter().map(|c| ringtail.pid(c).unwrap_or(0)).collect();
    assert_eq!(after, pids, "a component restarted:\n{}", ringtail.log());
    for pid in &pids {
        assert!(Path::new(&format!("/proc/{pid}")).exists(), "{pid} is gone:\n{}", ringtail.log());
    }
}

/// Not a test by itself: what this binary does when started as the stranger
/// (a no-op otherwise). Connects, sends a ZMTP greeting and a SUBSCRIBE to
/// everything, and expects the socket to close having sent nothing.
#[test]
fn stranger_role() {
    let Ok(path) = std::env::var(ROLE_PATH) else {
        return;
    };
    assert_eq!(euid(), STRANGER);
    let mut stream = UnixStream::connect(&path).expect("the stranger reaches the socket file");
    // The server may already have closed: a failed write is fine.
    let _ = stream.write_all(&zmtp::greeting());
    let _ = stream.write_all(&zmtp::subscribe(b""));
    stream.set_read_timeout(Some(Duration::from_secs(20))).expect("read timeout");
    let mut got = Vec::new();
    match stream.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("{path}: not closed within 20 s: {e}"),
    }
    assert!(got.is_empty(), "{path} sent {} bytes to a stranger", got.len());
}

const WAIT: Duration = Duration::from_secs(30);
/// Resident memory no ringtail process may reach after the hostile peers.
const MAX_RSS_KB: u64 = 256 * 1024;
const PEER_PATH: &str = "RINGTAIL_SECURITY_PEER_PATH";

/// The actors' user's uid and gid (`ringtail`, made by the harness).
fn actors_ids() -> (u32, u32) {
    // SAFETY: getpwnam returns static storage or null; read at once.
    let pw = unsafe { libc::getpwnam(c"ringtail".as_ptr()) };
    assert!(!pw.is_null(), "the harness makes the actors' user ringtail");
    // SAFETY: non-null, as checked.
    unsafe { ((*pw).pw_uid, (*pw).pw_gid) }
}

/// The socket files ringtail bound under `run` and `run/actors`.
fn socket_files(run: &Path) -> Vec<PathBuf> {
    let mut sockets = Vec::new();
    for dir in [run.to_owned(), run.join("actors")] {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("entry").path();
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket()) {
                sockets.push(path);
            }
        }
    }
    sockets
}

/// The actors' user passes every socket's credential check, so only the
/// wire limits stand between it and ringtail: against every socket ringtail
/// binds it declares a 2^60-byte frame, sends garbage after a valid
/// handshake, and streams an endless message. Each time ringtail closes the
/// connection; afterwards every process has its pid, bounded memory, the
/// peer is counted, and requests still become spans.
#[test]
fn the_actors_user_can_neither_crash_nor_swell_a_socket() {
    if euid() != 0 || !can_trace() {
        skip("needs root: ringtail's loader, and a peer as the actors' user");
        return;
    }
    let web = TempDir::new("security-web");
    std::fs::write(web.join("index.html"), "ok\n").expect("index.html");
    let port = free_port();
    let _server = python_http_server(port, &web.0);
    let prom = free_port();
    let ringtail = Ringtail::start(&format!(
        "[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n\
         [discovery]\nopen_ports = [{port}]\n"
    ));
    let names = ["probe-loader", "span-actor", "exporter-actor"];
    let pids: Vec<u32> = names.iter().map(|c| ringtail.pid(c).unwrap_or_else(|| panic!("{c} pid"))).collect();
    let sockets = socket_files(&ringtail.dir.join("run"));
    assert_eq!(sockets.len(), 4, "raw, raw-ack, spans and span-ack sockets: {sockets:?}");

    for path in &sockets {
        assert!(role_succeeds("hostile_peer_role", PEER_PATH, path, actors_ids()), "the hostile peer against {} failed", path.display());
    }

    // Counted: the 2^60 frame and the endless message, per socket.
    for path in &sockets {
        let label = path.file_name().and_then(|n| n.to_str()).expect("socket name");
        let labels = [("socket", label), ("reason", "message_too_large")];
        let counted = wait_until(WAIT, || metric_value(prom, "ringtail_ipc_refused_peers_total", &labels).filter(|v| *v >= 2.0));
        assert!(
            counted.is_some(),
            "{label}: peers cut for message size not counted: {:?}",
            metric_value(prom, "ringtail_ipc_refused_peers_total", &labels)
        );
    }
    // Still the same processes, memory bounded, and still tracing.
    let after: Vec<u32> = names.iter().map(|c| ringtail.pid(c).unwrap_or(0)).collect();
    assert_eq!(after, pids, "a component restarted:\n{}", ringtail.log());
    for (name, pid) in names.iter().zip(&pids) {
        let rss = resident_kb(*pid);
        eprintln!("{name}: VmRSS {rss} kB");
        assert!(rss < MAX_RSS_KB, "{name} resident {rss} kB after the hostile peers");
    }
    http_get(port, "/after-the-peers", &[]).expect("GET after the peers");
    let spans = ringtail.spans_when(WAIT, SETTLE, |s| s.iter().any(|s| s.path == "/after-the-peers"));
    assert_eq!(spans.iter().filter(|s| s.path == "/after-the-peers").count(), 1, "{spans:?}");
}

/// A ZMTP 3.0 greeting (NULL mechanism, as client) and a READY as a SUB.
fn zmtp_handshake() -> Vec<u8> {
    let mut bytes = zmtp::greeting().to_vec();
    bytes.extend_from_slice(&zmtp::ready("SUB"));
    bytes
}

/// Writes `chunks` to `path` until they end or a write fails, then reads
/// until the peer closes: true if it closed within 20 s.
fn closed_after(path: &str, chunks: impl Iterator<Item = Vec<u8>>) -> bool {
    let mut stream = UnixStream::connect(path).expect("the actors' user reaches the socket file");
    stream.set_write_timeout(Some(Duration::from_secs(20))).expect("write timeout");
    stream.set_read_timeout(Some(Duration::from_secs(20))).expect("read timeout");
    for chunk in chunks {
        if stream.write_all(&chunk).is_err() {
            break;
        }
    }
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return true,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

/// Not a test by itself: what this binary does when started as the actors'
/// user against one socket (a no-op otherwise).
#[test]
fn hostile_peer_role() {
    let Ok(path) = std::env::var(PEER_PATH) else {
        return;
    };
    assert_eq!(euid(), actors_ids().0, "the hostile peer runs as the actors' user");
    let mut huge = zmtp_handshake();
    huge.extend_from_slice(&zmtp::long_header(false, 1 << 60));
    assert!(closed_after(&path, std::iter::once(huge)), "{path}: a frame declaring 2^60 bytes was not refused");
    let garbled = std::iter::once(zmtp_handshake()).chain((1..17).map(|seed| garbage(seed, 64 * 1024)));
    assert!(closed_after(&path, garbled), "{path}: garbage after a handshake was not refused");
    // An endless message: 1-byte parts with MORE, 3 bytes each on the wire,
    // written for as long as the socket takes them (at most 64 MiB).
    let parts = zmtp::frame(b"A", true).repeat(64 * 1024);
    let endless = std::iter::once(zmtp_handshake()).chain(std::iter::repeat_n(parts, 341));
    assert!(closed_after(&path, endless), "{path}: an endless message was not cut");
}

#[test]
fn a_user_other_processes_run_as_is_refused_unless_allowed() {
    if euid() != 0 || !can_trace() {
        skip("needs root: a process of another uid, and ringtail's loader");
        return;
    }
    let mut sleep = Command::new("sleep");
    sleep.arg("300").uid(SHARED).gid(SHARED).current_dir("/");
    let other = Proc::spawn("sleep as the would-be actors' user", &mut sleep);
    let config = format!("[export]\nstdout = false\n[discovery]\nopen_ports = [1]\n[actors]\nuser = \"{SHARED}\"\n");

    let mut refused = Ringtail::spawn_with_env(&config, &[]);
    let status = wait_until(Duration::from_secs(60), || refused.proc.child.try_wait().ok().flatten())
        .unwrap_or_else(|| panic!("ringtail started the actors as a shared user:\n{}", refused.log()));
    let log = refused.log();
    assert!(!status.success(), "{status}\n{log}");
    for needle in [
        "actors.user: must be a user no other process runs as",
        "actors.allow_shared_user = true",
        &format!("(got \"{SHARED}\", uid {SHARED}, which also runs pid {} (sleep))", other.pid()),
    ] {
        assert!(log.contains(needle), "{needle:?} not in:\n{log}");
    }
    assert!(refused.events("span-actor", "started").is_empty(), "an actor started:\n{log}");
    drop(refused);

    let allowed = Ringtail::start(&format!("{config}allow_shared_user = true\n"));
    for c in ["span-actor", "exporter-actor"] {
        let pid = allowed.pid(c).unwrap_or_else(|| panic!("{c} pid"));
        assert_eq!(uids(pid), [SHARED; 4], "{c} runs as actors.user");
    }
    let warned = allowed.log().lines().any(|l| l.contains("event=\"shared_user\"") && l.contains(&other.pid().to_string()));
    assert!(warned, "no shared_user warning naming pid {}:\n{}", other.pid(), allowed.log());
}

/// Every path under `dir` (not following symlinks), `dir` included.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_owned());
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("entry").path();
        if std::fs::symlink_metadata(&path).expect("lstat").is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// A one-thread OTLP/HTTP receiver that answers every request with an empty
/// 200 and sends each request head (lowercased) to the channel.
fn header_receiver() -> (u16, std::sync::mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
    let port = listener.local_addr().expect("its address").port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
            // Requests on one keep-alive connection, one after another.
            let mut buf = Vec::new();
            let mut chunk = [0u8; 65536];
            loop {
                let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                    match conn.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    continue;
                };
                let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                let len: usize =
                    head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
                while buf.len() < end + 4 + len {
                    match conn.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                buf.drain(..end + 4 + len);
                if tx.send(head).is_err() {
                    return;
                }
                let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                if conn.write_all(ok).is_err() {
                    break;
                }
            }
        }
    });
    (port, rx)
}

#[test]
fn otlp_headers_reach_the_receiver_and_no_file_in_the_runtime_dir() {
    if !can_trace() {
        return;
    }
    let secret = format!(
        "s3cr3t-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(7)
    );
    let (port, heads) = header_receiver();
    let env_secret = format!("env-{secret}");
    let ringtail = Ringtail::start_with_env(
        &format!(
            "[export]\nstdout = false\n[export.otlp]\nendpoint = \"http://127.0.0.1:{port}\"\nprotocol = \"http/protobuf\"\n\
             metrics_interval = \"200ms\"\nheaders = {{ authorization = \"Bearer {secret}\" }}\n[discovery]\nopen_ports = [1]\n"
        ),
        &[("OTEL_EXPORTER_OTLP_HEADERS", &format!("x-tenant={env_secret}"))],
    );

    // The exporter sends it (its own metrics, pushed every 200 ms).
    let want = format!("authorization: bearer {}", secret.to_lowercase());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    let sent = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match heads.recv_timeout(left) {
            Ok(head) if head.lines().any(|l| l.trim() == want) => {
                let tenant = format!("x-tenant: {}", env_secret.to_lowercase());
                assert!(head.lines().any(|l| l.trim() == tenant), "OTEL_EXPORTER_OTLP_HEADERS not sent: {head}");
                break true;
            }
            Ok(head) => seen.push(head),
            Err(_) => break false,
        }
    };
    assert!(sent, "no request with the configured header; heads: {seen:?}\n{}", ringtail.log());

    // Nothing under the runtime directory holds it, nothing there is open
    // to others, and the old effective-config file is gone.
    let run = ringtail.dir.join("run");
    let mut paths = Vec::new();
    walk(&run, &mut paths);
    assert!(!run.join("ringtail.toml").exists(), "the effective configuration is still written to {}", run.display());
    for path in &paths {
        let meta = std::fs::symlink_metadata(path).expect("lstat");
        let mode = meta.permissions().mode() & 0o777;
        if meta.is_dir() {
            assert_eq!(mode & 0o002, 0, "{} is writable by others: {mode:o}", path.display());
            continue;
        }
        assert_eq!(mode & 0o007, 0, "{} is open to others: {mode:o}", path.display());
        if meta.file_type().is_file() {
            let bytes = std::fs::read(path).expect("read");
            assert!(!String::from_utf8_lossy(&bytes).contains(&secret), "{} holds the secret", path.display());
        } else {
            assert!(meta.file_type().is_socket(), "{}: only sockets and directories belong there", path.display());
        }
    }

    // What each component was handed on fd 4: only the exporter's has it.
    for c in ["probe-loader", "span-actor", "exporter-actor"] {
        let pid = ringtail.pid(c).unwrap_or_else(|| panic!("{c} pid"));
        let fd = format!("/proc/{pid}/fd/4");
        let target = std::fs::read_link(&fd).unwrap_or_else(|e| panic!("{fd}: {e}"));
        assert!(target.to_string_lossy().starts_with("/memfd:ringtail"), "{c}'s configuration is {}", target.display());
        let text = std::fs::read_to_string(&fd).expect("read the memfd as root");
        assert_eq!(text.contains(&secret), c == "exporter-actor", "{c}: secret in its configuration:\n{text}");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
        assert!(!String::from_utf8_lossy(&cmdline).contains(&secret), "{c}'s command line");
        let environ = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).expect("environ")).into_owned();
        assert_eq!(environ.contains(&env_secret), c == "exporter-actor", "{c}: OTEL_EXPORTER_OTLP_HEADERS in its environment");
    }
    // Not even the actors' own user reads the exporter's (non-dumpable).
    let exporter = ringtail.pid("exporter-actor").expect("exporter pid");
    let actor_uid = uids(exporter)[0];
    let out = Command::new("cat")
        .arg(format!("/proc/{exporter}/fd/4"))
        .uid(actor_uid)
        .gid(actor_uid)
        .output()
        .expect("run cat as the actors' user");
    assert!(
        !out.status.success() && !String::from_utf8_lossy(&out.stdout).contains(&secret),
        "the actors' user read the exporter's configuration"
    );
}

/// Issue 44: root's runtime directory below a directory another user owns
/// (who could rename it away and put theirs in its place) is refused at
/// start, saying which directory and why; nothing is made below it.
#[test]
fn a_runtime_dir_below_another_user_s_directory_is_refused_at_start() {
    if euid() != 0 {
        skip("needs root: a directory of another uid, and ringtail's supervisor");
        return;
    }
    let dir = TempDir::new("rtdir");
    let theirs = dir.join("theirs");
    std::fs::create_dir(&theirs).expect("mkdir");
    std::os::unix::fs::chown(&theirs, Some(STRANGER), Some(STRANGER)).expect("chown");
    let run = theirs.join("run");
    let config = format!("[export]\nstdout = false\n[discovery]\nopen_ports = [1]\n[pipeline]\nruntime_dir = \"{}\"\n", run.display());
    let mut refused = Ringtail::spawn_with_env(&config, &[]);
    let status = wait_until(Duration::from_secs(60), || refused.proc.child.try_wait().ok().flatten())
        .unwrap_or_else(|| panic!("ringtail started with its runtime directory below uid {STRANGER}'s:\n{}", refused.log()));
    let log = refused.log();
    assert!(!status.success(), "{status}\n{log}");
    for needle in [
        format!("pipeline.runtime_dir {}", run.display()),
        format!("{}: every directory above it must be root's and writable by no one else", run.display()),
        format!("{} belongs to uid {STRANGER}, not root", theirs.display()),
    ] {
        assert!(log.contains(&needle), "{needle:?} not in:\n{log}");
    }
    assert!(!run.exists(), "the runtime directory was made below the other user's directory");
    assert!(refused.events("probe-loader", "started").is_empty(), "the loader started:\n{log}");
}
