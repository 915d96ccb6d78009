//! Issue 12, the local attack surface, against a real ringtail (supervisor,
//! root loader, actors as `actors.user`): the actors are non-dumpable, and a
//! stranger (another uid, a real second process) reaching a socket file —
//! its mode loosened on purpose so that the file permissions do not stop it
//! first — is closed by the `SO_PEERCRED` filter before it reads a byte,
//! while ringtail keeps every pid and stays ready.
//!
//! The stranger is this test binary started again with `Command::uid`
//! ([`stranger_role`]); the tests need root and skip loudly without it.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ringtail_tests::*;

/// A uid that is neither root, nor ringtail's, nor nobody.
const STRANGER: u32 = 54321;
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

/// Starts this binary as the stranger against `path`; true if the socket
/// closed the connection without sending a byte.
fn stranger_is_refused(path: &Path) -> bool {
    let status = Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "stranger_role", "--nocapture", "--test-threads=1"])
        .env(ROLE_PATH, path)
        .uid(STRANGER)
        .gid(STRANGER)
        .status()
        .expect("start the stranger");
    status.success()
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
    let mut sockets = Vec::new();
    for dir in [&run, &actors] {
        for entry in std::fs::read_dir(dir).expect("runtime dir") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "sock") {
                loosen(&path, 0o777);
                sockets.push(path);
            }
        }
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
    let mut hello = vec![0u8; 64];
    hello[0] = 0xff;
    hello[9] = 0x7f;
    hello[10] = 3;
    hello[12..16].copy_from_slice(b"NULL");
    // The server may already have closed: a failed write is fine.
    let _ = stream.write_all(&hello);
    let _ = stream.write_all(&[0x00, 0x01, 0x01]);
    stream.set_read_timeout(Some(Duration::from_secs(20))).expect("read timeout");
    let mut got = Vec::new();
    match stream.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("{path}: not closed within 20 s: {e}"),
    }
    assert!(got.is_empty(), "{path} sent {} bytes to a stranger", got.len());
}
