//! Issue 26, the root loader's files and names, attacked as the confirmed
//! scripts did, against a real ringtail:
//! - a local user (`nobody`, through `setpriv`) who makes `probe.pin_dir`
//!   first on a bpffs anyone may write, or plants a set-named symlink to a
//!   root-owned directory in a pin directory open to others, deletes none of
//!   root's files; the bpffs the loader mounts itself is root's alone;
//! - a process in its own user and mount namespace that makes its
//!   executable and its `libssl` FIFOs (bind mounts over their names) does
//!   not stop the loader from starting, and is counted;
//! - a mapped file whose name has a space does not make the TLS attacher
//!   open the file the name's first word names (a FIFO, or a root-only
//!   file);
//! - the actors' uid replacing `actors/raw-ack.sock` with a symlink to a
//!   root-only socket gets no byte written there.
//!
//! The load step's death with the loader is a unit test
//! (`probe-loader/src/step.rs`).

use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use ringtail_tests::*;

const WAIT: Duration = Duration::from_secs(60);
/// The local user who attacks.
const NOBODY: (u32, u32) = (65534, 65534);

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Runs `script` with `sh -c` as `uid:gid` (no supplementary groups), as a
/// local attacker would; panics unless it succeeds.
fn run_as((uid, gid): (u32, u32), script: &str) {
    let out = Command::new("setpriv")
        .args([&format!("--reuid={uid}"), &format!("--regid={gid}"), "--clear-groups", "sh", "-c", script])
        .output()
        .expect("run setpriv");
    assert!(out.status.success(), "as {uid}: {script}\n{}", String::from_utf8_lossy(&out.stderr));
}

/// `mode` on `path`.
fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

/// A bpffs mounted (as the kernel does without `mode=`: 1777) at a fresh
/// directory, unmounted on drop.
struct Bpffs {
    dir: TempDir,
}

impl Bpffs {
    fn mount(tag: &str) -> Bpffs {
        let dir = TempDir::new(tag);
        let st = Command::new("mount").args(["-t", "bpf", "bpf"]).arg(&dir.0).status().expect("run mount");
        assert!(st.success(), "mount -t bpf at {}", dir.0.display());
        let mode = std::fs::metadata(&dir.0).expect("stat the bpffs").mode() & 0o7777;
        assert_eq!(mode, 0o1777, "a bpffs mounted without mode= is open to all");
        Bpffs { dir }
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir.0).status();
    }
}

/// A root-owned 0700 directory with three files: what must survive.
fn victim() -> TempDir {
    let v = TempDir::new("victim");
    for f in ["a", "b", "c"] {
        std::fs::write(v.join(f), f).expect("write a victim file");
    }
    chmod(&v.0, 0o700);
    v
}

fn files_in(dir: &Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

fn ready(rt: &Ringtail) -> bool {
    !rt.events("probe-loader", "ready").is_empty()
}

#[test]
fn a_pin_dir_another_user_made_first_is_refused_and_nothing_is_deleted() {
    if !can_trace() || !have("setpriv") {
        return;
    }
    let bpffs = Bpffs::mount("bpffs-squat");
    let pins = bpffs.dir.join("pins");
    let victim = victim();
    // Where the bpffs is open to all, the user makes probe.pin_dir first and
    // plants a "pin set" that is a symlink to root's directory.
    run_as(NOBODY, &format!("mkdir {0} && ln -s {1} {0}/0123456789abcdef", pins.display(), victim.0.display()));
    let rt = Ringtail::spawn_with_env(
        &format!("[export]\nstdout = false\n[discovery]\nopen_ports = [1]\n[probe]\npin_dir = \"{}\"\n", pins.display()),
        &[],
    );
    let refusal = format!("{} (probe.pin_dir) belongs to uid {}, not root", pins.display(), NOBODY.0);
    let decided = wait_until(WAIT, || (rt.log().contains(&refusal) || files_in(&victim.0) < 3 || ready(&rt)).then_some(()));
    assert!(decided.is_some(), "the loader neither refused nor started:\n{}", rt.log());
    assert_eq!(files_in(&victim.0), 3, "root's files deleted through the user's symlink:\n{}", rt.log());
    assert!(rt.log().contains(&refusal), "no clear refusal naming the directory and its owner:\n{}", rt.log());
    assert!(!ready(&rt), "the loader started on a pin directory another user owns:\n{}", rt.log());
    assert!(std::fs::symlink_metadata(pins.join("0123456789abcdef")).is_ok_and(|m| m.file_type().is_symlink()));
}

#[test]
fn a_pin_dir_open_to_others_is_closed_and_a_planted_link_is_not_followed() {
    if !can_trace() || !have("setpriv") {
        return;
    }
    let bpffs = Bpffs::mount("bpffs-open");
    let pins = bpffs.dir.join("pins");
    std::fs::create_dir(&pins).expect("mkdir pins");
    chmod(&pins, 0o777);
    let victim = victim();
    let planted = pins.join("fedcba9876543210");
    run_as(NOBODY, &format!("ln -s {} {}", victim.0.display(), planted.display()));
    let rt = Ringtail::spawn_with_env(
        &format!("[export]\nstdout = false\n[discovery]\nopen_ports = [1]\n[probe]\npin_dir = \"{}\"\n", pins.display()),
        &[],
    );
    let decided = wait_until(WAIT, || (files_in(&victim.0) < 3 || ready(&rt)).then_some(()));
    assert_eq!(files_in(&victim.0), 3, "root's files deleted through the user's symlink:\n{}", rt.log());
    assert!(decided.is_some(), "the loader did not start:\n{}", rt.log());
    rt.wait_ready(WAIT);
    let meta = std::fs::symlink_metadata(&pins).expect("stat pins");
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o700), "probe.pin_dir is not closed to others");
    assert!(std::fs::symlink_metadata(&planted).is_ok_and(|m| m.file_type().is_symlink()), "the planted link is left alone");
    assert!(rt.log().contains("event=\"pins_foreign\""), "the planted link is not said:\n{}", rt.log());
    assert!(rt.log().contains("event=\"pin_dir_repaired\""), "the repair is not said:\n{}", rt.log());
}

/// Where no bpffs is mounted, the loader mounts one: root's, 0700 (the
/// kernel's default, 1777, would let any user make `probe.pin_dir` first).
/// Run in a mount namespace of its own with /sys/fs/bpf unmounted.
#[test]
fn the_bpffs_the_loader_mounts_is_root_s_alone() {
    if !can_trace() || !have("unshare") {
        return;
    }
    let rt = Ringtail::spawn_wrapped(
        "[export]\nstdout = false\n[discovery]\nopen_ports = [1]\n",
        &[],
        &["unshare", "--mount", "--propagation", "private", "sh", "-c", "umount -l /sys/fs/bpf && exec \"$0\" \"$@\""],
    );
    rt.wait_ready(WAIT);
    assert!(rt.log().contains("event=\"bpffs_mounted\""), "the loader did not mount the bpffs:\n{}", rt.log());
    let loader = rt.pid("probe-loader").expect("the loader's pid");
    let meta = std::fs::metadata(format!("/proc/{loader}/root/sys/fs/bpf")).expect("the loader's /sys/fs/bpf");
    // (a bpffs root is always sticky)
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o700), "the bpffs the loader mounted is open to others: {:o}", meta.mode());
}

/// A directory `nobody` may write in.
fn open_dir(tag: &str) -> TempDir {
    let d = TempDir::new(tag);
    chmod(&d.0, 0o777);
    d
}

/// The host's libssl.
fn host_libssl() -> PathBuf {
    ["/usr/lib/x86_64-linux-gnu/libssl.so.3", "/lib/x86_64-linux-gnu/libssl.so.3"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("the host's libssl.so.3")
}

/// (b) As the systemd unit runs it (no CAP_SYS_ADMIN nor
/// CAP_CHECKPOINT_RESTORE, so a mapped file is found by its name): a process of `nobody` in its own user and mount
/// namespace bind-mounts FIFOs over its executable's and its libssl's
/// names. The loader still starts in a normal time, counts the FIFO it
/// refused, and traces the other processes.
#[test]
fn fifos_over_a_process_s_own_files_do_not_freeze_the_loader() {
    if !can_trace() || !have("setpriv") || !have("unshare") || !have("/usr/bin/python3") {
        return;
    }
    let d = open_dir("fifo-ns");
    let bound = d.join("bound");
    // In its namespaces the process runs python (with libssl mapped), then
    // binds a FIFO over its executable's name and one over its libssl's.
    let inner = d.join("inner.sh");
    std::fs::write(
        &inner,
        format!(
            "/usr/bin/python3 -c 'import ssl, time; open(\"{d}/started\", \"w\").close(); time.sleep(600)' &\n\
             child=$!\n\
             while [ ! -e {d}/started ]; do sleep 0.05; done\n\
             mount --bind {d}/fifo-exe \"$(readlink /proc/$child/exe)\" || exit 1\n\
             mount --bind {d}/fifo-lib \"$(grep -m1 -o '/[^ ]*libssl[.]so[^ ]*' /proc/$child/maps)\" || exit 1\n\
             touch {bound}\n\
             wait\n",
            d = d.0.display(),
            bound = bound.display()
        ),
    )
    .expect("write the namespace's script");
    let script = format!("mkfifo {d}/fifo-exe {d}/fifo-lib && exec unshare -Urm sh {inner}", d = d.0.display(), inner = inner.display());
    let (uid, gid) = NOBODY;
    let _attacker = Proc::spawn(
        "a process in its own namespaces",
        Command::new("setpriv")
            .args([&format!("--reuid={uid}"), &format!("--regid={gid}"), "--clear-groups", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_until(Duration::from_secs(20), || bound.exists().then_some(())).expect("the FIFOs were bound over the process's files");
    let web = TempDir::new("fifo-web");
    std::fs::write(web.join("index.html"), "ok\n").expect("index.html");
    let port = free_port();
    let _server = python_http_server(port, &web.0);
    let prom = free_port();
    let rt = Ringtail::spawn_wrapped(
        &format!(
            "[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[export]\nstdout = true\n\
             [export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n[discovery]\nexe_names = [\"^python3\"]\nopen_ports = [{port}]\n"
        ),
        &[],
        // No CAP_SYS_ADMIN nor CAP_CHECKPOINT_RESTORE: /proc/PID/map_files is closed.
        &["setpriv", "--bounding-set=-sys_admin,-checkpoint_restore", "--inh-caps=-sys_admin,-checkpoint_restore"],
    );
    // A normal start (the attack held it until the FIFO was opened).
    rt.wait_ready(WAIT);
    let refused = |_: ()| metric_value(prom, "ringtail_tls_files_refused_total", &[("reason", "not_regular")]).filter(|v| *v >= 1.0);
    let counted = wait_until(Duration::from_secs(30), || refused(()));
    assert!(counted.is_some(), "the FIFO was not counted; log:\n{}", rt.log());
    assert!(
        rt.log().lines().any(|l| l.contains("event=\"tls_file_refused\"") && l.contains("libssl") && l.contains("kind=\"FIFO\"")),
        "the FIFO was not logged:\n{}",
        rt.log()
    );
    http_get(port, "/traced", &[]).expect("GET the other server");
    let spans = rt.spans_when(Duration::from_secs(30), Duration::from_millis(500), |s| s.iter().any(|s| s.path == "/traced"));
    assert_eq!(spans.iter().filter(|s| s.path == "/traced").count(), 1, "{spans:?}");
}

/// A TLS server run as `nobody` that maps each file named after its port,
/// certificate and key.
const PY_MAPPING_TLS_SERVER: &str = r#"
import http.server, mmap, ssl, sys
port, cert, key = sys.argv[1:4]
keep = []
for name in sys.argv[4:]:
    f = open(name, "rb")
    keep.append((f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)))
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
srv = http.server.HTTPServer(("127.0.0.1", int(port)), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
"#;

/// Watches `path` for opens (inotify); [`Opens::count`] reads what came.
struct Opens(std::fs::File);

impl Opens {
    fn watch(path: &Path) -> Opens {
        use std::os::fd::FromRawFd;
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: inotify_init1 takes flags only.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(fd >= 0, "inotify_init1");
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("a C path");
        // SAFETY: fd is ours; c a valid C string.
        assert!(unsafe { libc::inotify_add_watch(fd, c.as_ptr(), libc::IN_OPEN | libc::IN_ACCESS) } >= 0, "inotify_add_watch");
        // SAFETY: fd is a descriptor just made, owned by nobody else.
        Opens(unsafe { std::fs::File::from_raw_fd(fd) })
    }

    /// Events since the watch began.
    fn count(&mut self) -> usize {
        let mut buf = [0u8; 4096];
        let mut n = 0;
        while let Ok(len) = self.0.read(&mut buf) {
            if len == 0 {
                break;
            }
            let mut at = 0;
            while at + 16 <= len {
                let name_len = u32::from_ne_bytes(buf[at + 12..at + 16].try_into().expect("4 bytes")) as usize;
                at += 16 + name_len;
                n += 1;
            }
        }
        n
    }
}

/// (c) A TLS server of `nobody`, started after ringtail, maps files whose
/// names have a space ("…/libssl.so.3 x"); what the first word names is a
/// FIFO in one directory and a symlink to a root-only file in another. The
/// TLS attacher attaches the server's real libssl and never opens either.
#[test]
fn a_mapped_name_with_a_space_does_not_lead_the_loader_elsewhere() {
    if !can_trace() || !have("setpriv") || !have("curl") || !have("openssl") || !have("/usr/bin/python3") {
        return;
    }
    let d = open_dir("spaces");
    let lib = d.join("lib-a");
    std::fs::create_dir_all(&lib).expect("mkdir lib-a");
    std::fs::copy(host_libssl(), lib.join("libssl.so.3")).expect("copy libssl");
    for sub in ["f", "m"] {
        std::fs::create_dir_all(d.join(sub)).expect("mkdir");
        chmod(&d.join(sub), 0o777);
        std::fs::copy(host_libssl(), d.join(sub).join(format!("libssl.so.3 {sub}"))).expect("copy libssl");
    }
    // Root's secret: a root-only file in a root-only directory.
    let secret_dir = TempDir::new("secret");
    let secret = secret_dir.join("libssl.so.3");
    std::fs::copy(host_libssl(), &secret).expect("copy libssl");
    chmod(&secret, 0o600);
    chmod(&secret_dir.0, 0o700);
    run_as(NOBODY, &format!("mkfifo {}/f/libssl.so.3 && ln -s {} {}/m/libssl.so.3", d.0.display(), secret.display(), d.0.display()));
    let cert_dir = TempDir::new("spaces-cert");
    let (cert, key) = ringtail_tests::tls::certificate(&cert_dir.0);
    // (the server runs as nobody)
    chmod(Path::new(&key), 0o644);
    let script = d.join("server.py");
    std::fs::write(&script, PY_MAPPING_TLS_SERVER).expect("write server.py");
    let mut opens = Opens::watch(&secret);

    let rt = Ringtail::start(
        "[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[export]\nstdout = true\n\
         [discovery]\nexe_names = [\"^python3\"]\n",
    );
    let port = free_port();
    let (uid, gid) = NOBODY;
    let _server = Proc::spawn(
        "a TLS server of nobody",
        Command::new("setpriv")
            .args([&format!("--reuid={uid}"), &format!("--regid={gid}"), "--clear-groups", "/usr/bin/python3"])
            .arg(&script)
            .args([port.to_string(), cert, key])
            .arg(d.join("f/libssl.so.3 f"))
            .arg(d.join("m/libssl.so.3 m"))
            .env("LD_LIBRARY_PATH", &lib)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    assert!(wait_port(port, Duration::from_secs(15)), "the TLS server did not listen on {port}");
    let curl = |path: &str| {
        let st =
            Command::new("curl").args(["-sk", "-o", "/dev/null"]).arg(format!("https://127.0.0.1:{port}{path}")).status().expect("curl");
        assert!(st.success(), "curl {path}");
    };
    curl("/first");
    // Its own libssl is attached when it is first used...
    let copy = lib.join("libssl.so.3").display().to_string();
    wait_until(WAIT, || rt.log().lines().any(|l| l.contains("event=\"tls_attached\"") && l.contains(&copy)).then_some(()))
        .unwrap_or_else(|| panic!("{copy} was not attached; log:\n{}", rt.log()));
    // ...and the loader goes on: it did not block on the FIFO.
    curl("/after");
    let spans = rt.spans_when(Duration::from_secs(30), Duration::from_millis(500), |s| s.iter().any(|s| s.path == "/after"));
    assert_eq!(spans.iter().filter(|s| s.path == "/after").count(), 1, "{spans:?}");
    assert_eq!(opens.count(), 0, "the loader opened the root-only file a mapped name's first word leads to:\n{}", rt.log());
    assert!(
        !rt.log()
            .lines()
            .any(|l| l.contains("event=\"tls_attached\"") && (l.contains("/m/libssl.so.3\"") || l.contains("/f/libssl.so.3\""))),
        "the loader attached to what a name's first word leads to:\n{}",
        rt.log()
    );
}

/// (d) The actors' uid replaces `actors/raw-ack.sock` (in its own
/// directory) with a symlink to a root-only socket and stops the span-actor,
/// so that the loader connects again: the loader refuses the symlink and
/// writes nothing there.
#[test]
fn the_loader_does_not_follow_a_symlink_at_the_ack_socket() {
    if euid() != 0 || !can_trace() || !have("setpriv") {
        return;
    }
    let secret_dir = TempDir::new("rootsock");
    let secret = secret_dir.join("s.sock");
    let listener = UnixListener::bind(&secret).expect("bind the root-only socket");
    chmod(&secret, 0o600);
    chmod(&secret_dir.0, 0o700);
    listener.set_nonblocking(true).expect("nonblocking");
    let rt = Ringtail::start("[export]\nstdout = false\n[discovery]\nopen_ports = [1]\n");
    let loader = rt.pid("probe-loader").expect("the loader's pid");
    let span_actor = rt.pid("span-actor").expect("the span-actor's pid");
    let ack = rt.dir.join("run/actors/raw-ack.sock");
    assert!(ack.exists(), "no {}", ack.display());
    // SAFETY: getpwnam returns static storage or null; read at once.
    let actors = unsafe {
        let pw = libc::getpwnam(c"ringtail".as_ptr());
        assert!(!pw.is_null(), "the harness makes the actors' user");
        ((*pw).pw_uid, (*pw).pw_gid)
    };
    run_as(actors, &format!("ln -sfn {} {} && kill -STOP {span_actor}", secret.display(), ack.display()));
    let accepted = || {
        listener.accept().ok().map(|(mut conn, _)| {
            let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
            let mut got = Vec::new();
            let _ = (&mut conn).take(4096).read_to_end(&mut got);
            got
        })
    };
    let mut wrote = None;
    let refused = wait_until(WAIT, || {
        if let Some(bytes) = accepted() {
            wrote = Some(bytes);
            return Some(false);
        }
        rt.log().contains("event=\"ipc_socket_file_refused\"").then_some(true)
    });
    // SAFETY: kill of a pid read from the supervisor's log.
    unsafe { libc::kill(span_actor as i32, libc::SIGCONT) };
    assert!(wrote.is_none(), "the loader connected to root's socket through the symlink and wrote {:?}", wrote);
    assert_eq!(refused, Some(true), "the loader neither refused nor reconnected:\n{}", rt.log());
    assert!(accepted().is_none(), "a connection reached root's socket");
    assert_eq!(rt.pid("probe-loader"), Some(loader), "the loader restarted:\n{}", rt.log());
}
