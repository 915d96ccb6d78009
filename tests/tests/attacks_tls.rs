//! Issue 44, the files of other processes the privileged side reads for
//! HTTPS, attacked as a local user would, against a real ringtail:
//! - (item 1) programs run from FUSE mounts (`bindfs`, Debian's) whose
//!   server stops answering: one stopped (SIGSTOP: the kernel's requests
//!   wait unread), one that reads each request and never answers (a bindfs
//!   over a stopped bindfs: the requester's wait is then uninterruptible,
//!   even SIGKILL leaves it in D state). ringtail becomes ready, traces
//!   another process's clear text meanwhile, counts the files it refused,
//!   and has no thread waiting on them; released, nothing is left stuck.
//!
//! Root in the initial user namespace cannot reach a FUSE mount made in a
//! user namespace (the kernel answers EACCES before any request), nor one
//! another user made without `allow_other`: the attack needs
//! `user_allow_other` in /etc/fuse.conf (the test sets it, and makes
//! /dev/fuse 0666 as Debian's udev does) or a FUSE mount root made.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ringtail_tests::*;

/// The local user who attacks.
const NOBODY: (u32, u32) = (65534, 65534);

/// The host as the attack needs it, put back on drop: `user_allow_other`
/// in /etc/fuse.conf, /dev/fuse open to all (Debian's udev rule).
struct FuseHost {
    conf: Option<Vec<u8>>,
    dev_mode: u32,
}

impl FuseHost {
    fn set_up() -> FuseHost {
        let conf = std::fs::read("/etc/fuse.conf").ok();
        let mut text = conf.clone().unwrap_or_default();
        text.extend_from_slice(b"\nuser_allow_other\n");
        std::fs::write("/etc/fuse.conf", text).expect("write /etc/fuse.conf");
        let dev_mode = std::fs::metadata("/dev/fuse").expect("/dev/fuse").permissions().mode() & 0o7777;
        std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(0o666)).expect("chmod /dev/fuse");
        FuseHost { conf, dev_mode }
    }
}

impl Drop for FuseHost {
    fn drop(&mut self) {
        match &self.conf {
            Some(c) => {
                let _ = std::fs::write("/etc/fuse.conf", c);
            }
            None => {
                let _ = std::fs::remove_file("/etc/fuse.conf");
            }
        }
        let _ = std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(self.dev_mode));
    }
}

/// `setpriv` arguments that run a command as [`NOBODY`].
fn as_nobody() -> Vec<String> {
    let (uid, gid) = NOBODY;
    vec![format!("--reuid={uid}"), format!("--regid={gid}"), "--clear-groups".into()]
}

/// Whether `dir` is a mount point (this namespace's table lists it).
fn mounted(dir: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = dir.display().to_string();
    table.lines().any(|l| l.split(' ').nth(4) == Some(want.as_str()))
}

/// A bindfs of [`NOBODY`]'s, `allow_other`, in the foreground (its pid is
/// the server's); unmounted and ended on drop.
struct Bindfs {
    mnt: PathBuf,
    server: Proc,
}

impl Bindfs {
    fn mount(src: &Path, mnt: &Path) -> Bindfs {
        let mut cmd = Command::new("setpriv");
        cmd.args(as_nobody()).args(["bindfs", "-f", "-o", "allow_other"]).arg(src).arg(mnt).stdout(Stdio::null()).stderr(Stdio::null());
        let server = Proc::spawn("bindfs", &mut cmd);
        wait_until(Duration::from_secs(10), || mounted(mnt).then_some(()))
            .unwrap_or_else(|| panic!("bindfs did not mount {}", mnt.display()));
        Bindfs { mnt: mnt.to_owned(), server }
    }
}

impl Drop for Bindfs {
    fn drop(&mut self) {
        self.server.signal(libc::SIGCONT);
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
    }
}

/// A directory [`NOBODY`] owns, with a copy of python3 and of the host's
/// libssl in it.
fn stocked(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::copy("/usr/bin/python3", dir.join("py3")).expect("copy python3");
    let libssl = ["/usr/lib/x86_64-linux-gnu/libssl.so.3", "/lib/x86_64-linux-gnu/libssl.so.3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("the host's libssl.so.3");
    std::fs::copy(libssl, dir.join("libssl.so.3")).expect("copy libssl");
    chown_nobody(&dir);
    dir
}

fn chown_nobody(path: &Path) {
    let status = Command::new("chown").arg("-R").arg(format!("{}:{}", NOBODY.0, NOBODY.1)).arg(path).status().expect("chown");
    assert!(status.success());
}

/// A directory [`NOBODY`] owns.
fn empty_dir(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    chown_nobody(&dir);
    dir
}

/// Runs, as [`NOBODY`], the python3 in `dir` (a FUSE mount) with the libssl
/// in `dir` loaded; returns once it runs.
fn program_from(dir: &Path, marks: &Path, tag: &str) -> Proc {
    let started = marks.join(tag);
    let code = format!(
        "import ctypes, time; ctypes.CDLL('{lib}'); open('{started}', 'w').close(); time.sleep(600)",
        lib = dir.join("libssl.so.3").display(),
        started = started.display()
    );
    let mut cmd = Command::new("setpriv");
    cmd.args(as_nobody()).arg(dir.join("py3")).args(["-c", &code]).stdout(Stdio::null()).stderr(Stdio::null());
    let p = Proc::spawn("a program run from FUSE", &mut cmd);
    wait_until(Duration::from_secs(20), || started.exists().then_some(())).expect("the program from FUSE started");
    p
}

/// Threads of `pid` in uninterruptible sleep (D), with where they wait.
fn threads_in_d(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .flatten()
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            let state = stat.rsplit(')').next()?.split_whitespace().next()?.to_owned();
            let wchan = std::fs::read_to_string(t.path().join("wchan")).unwrap_or_default();
            (state == "D").then(|| format!("{pid}/{} {wchan}", t.file_name().to_string_lossy()))
        })
        .collect()
}

/// Every process below `pid` (its descendants), `pid` included.
fn tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut at = 0;
    while at < all.len() {
        let parent = all[at];
        for task in std::fs::read_dir(format!("/proc/{parent}/task")).into_iter().flatten().flatten() {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            all.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
        at += 1;
    }
    all
}

/// (item 1) FUSE servers that stop answering, each under a program they
/// serve: ringtail still starts in a normal time, traces another process
/// meanwhile, refuses (and counts) those programs' files without one call
/// into them; released, nothing of ringtail waits on them.
#[test]
fn fuse_servers_that_stop_answering_hold_neither_readiness_nor_capture() {
    if !can_trace() || !have("bindfs") || !have("setpriv") || !have("/usr/bin/python3") || !Path::new("/dev/fuse").exists() {
        return;
    }
    let _host = FuseHost::set_up();
    let d = TempDir::new("fuse");
    std::fs::set_permissions(&d.0, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let marks = empty_dir(&d.0, "marks");
    // Chain 1: a server that is stopped (requests wait unread).
    let stopped = Bindfs::mount(&stocked(&d.0, "src1"), &empty_dir(&d.0, "mnt1"));
    // Chain 2: a server over a stopped server: it reads each request and
    // waits on the one below, never answering.
    let below = Bindfs::mount(&stocked(&d.0, "src2"), &empty_dir(&d.0, "below2"));
    let reader = Bindfs::mount(&below.mnt, &empty_dir(&d.0, "mnt2"));
    let _one = program_from(&stopped.mnt, &marks, "one");
    let two = program_from(&reader.mnt, &marks, "two");
    stopped.server.signal(libc::SIGSTOP);
    below.server.signal(libc::SIGSTOP);
    // The cached attributes expire (1 s): from now on a stat asks the server.
    std::thread::sleep(Duration::from_millis(1500));
    // The attack holds: a root stat of the second program's executable
    // waits, and SIGKILL leaves it waiting (D), until the server answers.
    let mut probe = Command::new("stat")
        .arg("-L")
        .arg(format!("/proc/{}/exe", two.pid()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("stat");
    std::thread::sleep(Duration::from_millis(500));
    assert!(probe.try_wait().expect("try_wait").is_none(), "stat of a stopped FUSE server's file returned: no attack");
    let _ = probe.kill();
    let stuck = wait_until(Duration::from_secs(5), || (!threads_in_d(probe.id()).is_empty()).then_some(()));
    assert!(stuck.is_some(), "a killed stat of a file whose server read the request is not in D state");

    let web = TempDir::new("fuse-web");
    std::fs::write(web.join("index.html"), "ok\n").expect("index.html");
    let port = free_port();
    let _clear = python_http_server(port, &web.0);
    let prom = free_port();
    let began = Instant::now();
    let rt = Ringtail::spawn_with_env(
        &format!(
            "[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[export]\nstdout = true\n\
             [export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n"
        ),
        &[],
    );
    rt.wait_ready(Duration::from_secs(60).mul_f64(time_scale()));
    let ready_after = began.elapsed();
    eprintln!("ready after {ready_after:?}");
    http_get(port, "/while-fuse-hangs", &[]).expect("GET the clear-text server");
    let served = |s: &SpanLine| s.kind == "SERVER" && s.path == "/while-fuse-hangs";
    let spans = rt.spans_when(Duration::from_secs(30), SETTLE, |s| s.iter().any(served));
    assert_eq!(spans.iter().filter(|s| served(s)).count(), 1, "{spans:?}\ncounters:\n{}", rt.counters());
    // Both programs' executables and mapped libssl: refused, counted, logged.
    let refused = wait_until(Duration::from_secs(10), || {
        metric_value(prom, "ringtail_tls_files_refused_total", &[("reason", "served_by_a_process")]).filter(|v| *v >= 4.0)
    });
    assert!(refused.is_some(), "the FUSE files were not counted as refused:\n{}\nlog:\n{}", rt.counters(), last_lines(&rt.log(), 40));
    assert!(rt.log().lines().any(|l| l.contains("event=\"tls_file_refused\"") && l.contains("served_by_a_process") && l.contains("mnt2")));
    // No thread of ringtail waits on them, and no load step lingers.
    let ours = tree(rt.proc.pid());
    let waiting: Vec<String> = ours.iter().flat_map(|p| threads_in_d(*p)).collect();
    assert!(waiting.is_empty(), "ringtail threads wait on the FUSE servers: {waiting:?}");
    assert!(!rt.log().contains("load_step_lingers"), "{}", rt.log());

    // Released: the killed stat ends, the programs go, the mounts go.
    stopped.server.signal(libc::SIGCONT);
    below.server.signal(libc::SIGCONT);
    let ended = wait_until(Duration::from_secs(10), || probe.try_wait().ok().flatten());
    assert!(ended.is_some(), "the killed stat did not end once the server answered");
    let waiting: Vec<String> = tree(rt.proc.pid()).iter().flat_map(|p| threads_in_d(*p)).collect();
    assert!(waiting.is_empty(), "{waiting:?}");
}
