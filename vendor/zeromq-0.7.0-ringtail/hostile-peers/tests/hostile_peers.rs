//! Hostile local peers against the vendored zeromq, on real Unix sockets.
//!
//! Each test attacks a socket owned by this process, then checks that the
//! process is still here (the stock crate aborts it), that its resident
//! memory stayed bounded (`/proc/self/statm`), that the attack was counted
//! (`SocketOptions::limit_hook`), and that a legitimate subscriber is still
//! served. Tests run one at a time: resident memory is per process.
//!
//! The uid tests start this test binary again as `nobody` (uid and gid 65534,
//! set by `std::os::unix::process::CommandExt::uid` before exec) in the role
//! of the hostile client or listener ([`child_process_role`]). They need root
//! and skip loudly without it.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use zeromq::{PeerCred, PubSocket, Socket, SocketOptions, SocketRecv, SocketSend, SubSocket, ZmqError, ZmqMessage};
use zeromq_hostile_peers::{garbage, rss_bytes, wait_until, zmtp, Recorder};

/// The message limit the sockets under attack are given.
const LIMIT: usize = 1 << 20;
/// Their per-peer send queue, in messages.
const QUEUE: usize = 64;
/// Their subscriptions per peer.
const SUBSCRIPTIONS: usize = 16;
/// Resident memory an attack may add: far below what any attack here would
/// cost without the limits (2^60 bytes, or hundreds of MiB).
const RSS_SLACK: u64 = 48 << 20;
const NOBODY: u32 = 65534;
const DEADLINE: Duration = Duration::from_secs(30);
const ROLE: &str = "ZMQ_HOSTILE_CHILD_ROLE";
const ROLE_PATH: &str = "ZMQ_HOSTILE_CHILD_PATH";
/// Set in the process a test that changes process-wide state runs alone in.
const ALONE: &str = "ZMQ_HOSTILE_ALONE";

/// Tests run one at a time: resident memory is per process.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Options as ringtail sets them, accepting only this process's uid.
fn options(recorder: &Recorder) -> SocketOptions {
    let me = euid();
    let mut o = SocketOptions::default();
    o.max_message_size(LIMIT)
        .send_queue_capacity(QUEUE)
        .subscription_limit(SUBSCRIPTIONS, 1024)
        .peer_filter(Arc::new(move |cred: &PeerCred| cred.uid == me))
        .limit_hook(recorder.hook());
    o
}

/// A private directory for the sockets of one test, open to everyone so that
/// the uid filter, not a file mode, is what refuses `nobody`.
struct Site(PathBuf);

impl Site {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("zmq-hostile-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test directory");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod the test directory");
        Site(dir)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn endpoint(path: &Path) -> String {
    format!("ipc://{}", path.display())
}

async fn bind_pub(site: &Site, recorder: &Recorder) -> (PubSocket, PathBuf) {
    let path = site.path("pub.sock");
    let mut socket = PubSocket::with_options(options(recorder));
    socket.bind(&endpoint(&path)).await.expect("bind the PUB socket");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).expect("chmod the socket");
    (socket, path)
}

/// A legitimate subscriber (same uid, same limits) connects and receives.
async fn assert_still_serves(publisher: &mut PubSocket, path: &Path) {
    let recorder = Recorder::default();
    let mut sub = SubSocket::with_options(options(&recorder));
    sub.connect(&endpoint(path)).await.expect("a legitimate subscriber connects");
    sub.subscribe("").await.expect("subscribe");
    let start = Instant::now();
    loop {
        assert!(start.elapsed() < DEADLINE, "the publisher no longer serves a legitimate subscriber");
        publisher.send(ZmqMessage::from("still here")).await.expect("send");
        if let Ok(Ok(message)) = tokio::time::timeout(Duration::from_millis(50), sub.recv()).await {
            assert_eq!(message.get(0).map(|b| b.as_ref()), Some(&b"still here"[..]));
            break;
        }
    }
    assert!(recorder.get().refused.is_empty(), "the legitimate publisher was refused: {:?}", recorder.get());
}

/// What a raw connection saw.
#[derive(Debug)]
struct Outcome {
    written: usize,
    read: usize,
    closed_by_peer: bool,
}

/// Connects to `path` as a raw client, writes `chunks` until they end or a
/// write fails, hangs up its sending side if `hang_up`, then reads until the
/// peer closes (or `DEADLINE`).
async fn raw_session(path: &Path, chunks: impl Iterator<Item = Vec<u8>> + Send + 'static, hang_up: bool) -> Outcome {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut stream = UnixStream::connect(&path).expect("connect the raw client");
        stream.set_write_timeout(Some(DEADLINE)).expect("write timeout");
        stream.set_read_timeout(Some(DEADLINE)).expect("read timeout");
        let start = Instant::now();
        let mut written = 0;
        let mut write_failed = false;
        for chunk in chunks {
            if stream.write_all(&chunk).is_err() {
                write_failed = true;
                break;
            }
            written += chunk.len();
            if start.elapsed() > DEADLINE {
                break;
            }
        }
        if hang_up && !write_failed {
            let _ = stream.shutdown(std::net::Shutdown::Write);
        }
        let mut read = 0;
        let mut buf = [0u8; 4096];
        let closed_by_peer = loop {
            match stream.read(&mut buf) {
                Ok(0) => break true,
                Ok(n) => read += n,
                Err(e) if e.kind() == ErrorKind::ConnectionReset => break true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => break false,
            }
        };
        Outcome { written, read, closed_by_peer }
    })
    .await
    .expect("the raw client thread")
}

fn handshake() -> Vec<u8> {
    let mut bytes = zmtp::greeting().to_vec();
    bytes.extend_from_slice(&zmtp::ready("SUB"));
    bytes
}

fn assert_rss_bounded(before: u64, what: &str) {
    let after = rss_bytes();
    let grown = after.saturating_sub(before);
    assert!(grown < RSS_SLACK, "{what}: resident memory grew by {} MiB", grown >> 20);
    eprintln!("{what}: resident memory grew by {} KiB", grown >> 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_declared_lengths_disconnect_without_allocating() {
    let _serial = SERIAL.lock().await;
    let site = Site::new("huge");
    let recorder = Recorder::default();
    let (mut publisher, path) = bind_pub(&site, &recorder).await;
    let cases: [(&str, Vec<u8>, [u8; 9]); 4] = [
        // The 73 bytes of issue 12: a greeting, then a command declaring 2^60 bytes.
        ("a handshake command declaring 2^60 bytes", zmtp::greeting().to_vec(), zmtp::long_header(true, 1 << 60)),
        ("a message declaring 2^60 bytes after the handshake", handshake(), zmtp::long_header(false, 1 << 60)),
        ("a message declaring u64::MAX bytes", handshake(), zmtp::long_header(false, u64::MAX)),
        ("a message one byte over the limit", handshake(), zmtp::long_header(false, LIMIT as u64 + 1)),
    ];
    for (count, (what, prefix, header)) in (1u64..).zip(cases) {
        let before = rss_bytes();
        let mut attack = prefix;
        attack.extend_from_slice(&header);
        let outcome = raw_session(&path, std::iter::once(attack), false).await;
        assert!(outcome.closed_by_peer, "{what}: the peer was not disconnected: {outcome:?}");
        wait_until(what, DEADLINE, || recorder.get().too_large == count).await;
        assert_rss_bounded(before, what);
    }
    assert_still_serves(&mut publisher, &path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_disconnects_before_or_after_a_valid_handshake() {
    let _serial = SERIAL.lock().await;
    let site = Site::new("garbage");
    let recorder = Recorder::default();
    let (mut publisher, path) = bind_pub(&site, &recorder).await;
    let before = rss_bytes();
    let outcome = raw_session(&path, std::iter::once(garbage(1, 4096)), false).await;
    assert!(outcome.closed_by_peer, "garbage instead of a greeting: not disconnected: {outcome:?}");
    assert_eq!(outcome.read, 64, "only the greeting was sent to a peer that sent garbage");
    let mut prefix = handshake();
    prefix.extend_from_slice(&zmtp::subscribe(b""));
    let chunks = std::iter::once(prefix).chain((2..18).map(|seed| garbage(seed, 64 * 1024)));
    let outcome = raw_session(&path, chunks, false).await;
    assert!(outcome.closed_by_peer, "garbage after a valid handshake: not disconnected: {outcome:?}");
    assert_rss_bounded(before, "garbage");
    assert_still_serves(&mut publisher, &path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_multipart_message_is_cut_at_the_limit() {
    let _serial = SERIAL.lock().await;
    let site = Site::new("multipart");
    let recorder = Recorder::default();
    let (mut publisher, path) = bind_pub(&site, &recorder).await;
    let before = rss_bytes();
    // 1-byte parts, each with MORE: 3 bytes on the wire, 33 counted.
    let parts = zmtp::frame(b"A", true).repeat(4096);
    let outcome = raw_session(&path, std::iter::once(handshake()).chain(std::iter::repeat(parts)), false).await;
    assert!(outcome.closed_by_peer, "an endless message: not disconnected: {outcome:?}");
    wait_until("the endless message counted", DEADLINE, || recorder.get().too_large == 1).await;
    assert!(outcome.written < 64 * LIMIT, "the peer wrote {} bytes before being cut", outcome.written);
    assert_rss_bounded(before, "endless multipart message");
    assert_still_serves(&mut publisher, &path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_subscriptions_and_small_messages_stay_bounded() {
    const SENT: usize = 200_000;
    let _serial = SERIAL.lock().await;
    let site = Site::new("subscriptions");
    let recorder = Recorder::default();
    let (mut publisher, path) = bind_pub(&site, &recorder).await;
    let before = rss_bytes();
    let stream = std::iter::once(handshake()).chain((0..SENT / 1000).map(|batch| {
        let mut chunk = Vec::new();
        for i in 0..1000u64 {
            chunk.extend_from_slice(&zmtp::subscribe(&(batch as u64 * 1000 + i).to_be_bytes()));
            chunk.extend_from_slice(&zmtp::frame(b"junk that is not a subscription", false));
        }
        chunk
    }));
    let outcome = raw_session(&path, stream, true).await;
    assert!(outcome.closed_by_peer, "the flood did not end: {outcome:?}");
    wait_until("every subscription beyond the bound refused", DEADLINE, || {
        recorder.get().subscriptions_refused == (SENT - SUBSCRIPTIONS) as u64
    })
    .await;
    // Each junk message reported (the caller counts it), none logged.
    wait_until("every junk message reported", DEADLINE, || recorder.get().unexpected == SENT as u64).await;
    assert_rss_bounded(before, "subscription flood");
    assert_still_serves(&mut publisher, &path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_leaves_the_publisher_bounded() {
    const SENT: u64 = 4000;
    const SIZE: usize = 64 * 1024;
    let _serial = SERIAL.lock().await;
    let site = Site::new("stalled");
    let recorder = Recorder::default();
    let (mut publisher, path) = bind_pub(&site, &recorder).await;
    let before = rss_bytes();
    let mut stalled = UnixStream::connect(&path).expect("connect the stalled subscriber");
    let mut hello = handshake();
    hello.extend_from_slice(&zmtp::subscribe(b""));
    stalled.write_all(&hello).expect("handshake");
    // It never reads. Publish until its queue is full: then it is subscribed.
    let payload = |i: u64| ZmqMessage::from(Bytes::from(vec![i as u8 | 1; SIZE]));
    let start = Instant::now();
    let mut i = 0;
    while recorder.get().send_queue_full == 0 {
        assert!(start.elapsed() < DEADLINE, "the stalled subscriber's queue never filled");
        publisher.send(payload(i)).await.expect("send");
        i += 1;
        tokio::task::yield_now().await;
    }
    let dropped_before = recorder.get().dropped();
    for i in 0..SENT {
        publisher.send(payload(i)).await.expect("send");
        tokio::task::yield_now().await;
    }
    wait_until("every message beyond the queue dropped and counted", DEADLINE, || recorder.get().dropped() >= dropped_before + SENT - 16)
        .await;
    eprintln!("dropped {} of {} messages of 64 KiB: {:?}", recorder.get().dropped(), i + SENT, recorder.get());
    assert_rss_bounded(before, "a subscriber that never reads");
    // One stalled subscriber does not stall the others.
    assert_still_serves(&mut publisher, &path).await;
    drop(stalled);
}

/// Many connections that never finish their greeting: beyond the cap they
/// are closed as soon as accepted (counted), the ones within it are closed
/// at the handshake deadline (counted), and the socket then serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_are_closed_and_slow_handshakes_cut() {
    const CAP: usize = 4;
    const CONNECTIONS: usize = 40;
    let _serial = SERIAL.lock().await;
    let site = Site::new("cap");
    let recorder = Recorder::default();
    let path = site.path("pub.sock");
    let mut o = options(&recorder);
    o.max_connections(CAP).handshake_timeout(Duration::from_millis(500));
    let mut publisher = PubSocket::with_options(o);
    publisher.bind(&endpoint(&path)).await.expect("bind the PUB socket");
    // Half a greeting each, then wait to be closed.
    let sessions: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let path = path.clone();
            tokio::spawn(async move { raw_session(&path, std::iter::once(zmtp::greeting()[..10].to_vec()), false).await })
        })
        .collect();
    for session in sessions {
        let outcome = session.await.expect("a raw client");
        assert!(outcome.closed_by_peer, "a connection was kept: {outcome:?}");
    }
    let r = recorder.get();
    eprintln!("{CONNECTIONS} half-greeted connections, cap {CAP}: {r:?}");
    assert!(r.handshake_timeouts >= 1, "no handshake was cut: {r:?}");
    assert_eq!(r.connections_refused + r.handshake_timeouts, CONNECTIONS as u64, "each closed once, for one reason: {r:?}");
    assert_still_serves(&mut publisher, &path).await;
}

/// Subscribers that never read, joining one after another while messages
/// flow: each stops at a different point of the stream, so the messages
/// their queues pin are all different. By count alone (64 messages of
/// 256 KiB each) eight of them would pin 128 MiB; the socket's byte budget
/// (8 MiB, shared) keeps it to a few, and what does not fit is counted.
/// A queue filled while fewer subscribers shared the budget keeps what it
/// holds, so the k-th to join pins up to 8/k MiB: 8 MiB × (1 + 1/2 + … +
/// 1/8) ≈ 22 MiB at most, plus a message in each writer (seen: 19–26 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_subscribers_joining_one_by_one_share_one_byte_budget() {
    const STALLED: usize = 8;
    const SIZE: usize = 256 * 1024;
    const BUDGET: usize = 8 << 20;
    let _serial = SERIAL.lock().await;
    let site = Site::new("budget");
    let recorder = Recorder::default();
    let path = site.path("pub.sock");
    let mut o = options(&recorder);
    o.send_queue_bytes(BUDGET);
    let mut publisher = PubSocket::with_options(o);
    publisher.bind(&endpoint(&path)).await.expect("bind the PUB socket");
    let before = rss_bytes();
    let mut stalled = Vec::new();
    let mut sent = 0u64;
    for _ in 0..STALLED {
        let mut s = UnixStream::connect(&path).expect("connect a stalled subscriber");
        let mut hello = handshake();
        hello.extend_from_slice(&zmtp::subscribe(b""));
        s.write_all(&hello).expect("handshake");
        stalled.push(s);
        // Until this one is full too, and a queue's worth more.
        let full = recorder.get().send_queue_full;
        let start = Instant::now();
        while recorder.get().send_queue_full < full + QUEUE as u64 {
            assert!(start.elapsed() < DEADLINE, "the subscribers' queues never filled");
            publisher.send(ZmqMessage::from(Bytes::from(vec![sent as u8 | 1; SIZE]))).await.expect("send");
            sent += 1;
            tokio::task::yield_now().await;
        }
    }
    let grown = rss_bytes().saturating_sub(before);
    eprintln!(
        "{STALLED} stalled subscribers, {sent} messages of 256 KiB: resident memory grew by {} MiB, {:?}",
        grown >> 20,
        recorder.get()
    );
    assert!(grown < 32 << 20, "stalled subscribers pinned {} MiB (budget {} MiB)", grown >> 20, BUDGET >> 20);
    drop(stalled);
    assert_still_serves(&mut publisher, &path).await;
}

/// Out of file descriptors, accept fails at once and the connection stays
/// in the backlog: the stock accept loop retried at once, at a full CPU.
/// Now each failure is counted and the listener pauses; once descriptors
/// are back, the socket serves again.
///
/// The descriptor limit is the whole process's: lowered here, it also failed
/// every test that built its runtime meanwhile (nine did so in CI, with more
/// test threads than this machine runs). So the test runs again in a process
/// of its own, started from here, and alone there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_out_of_descriptors_pauses_instead_of_spinning() {
    const NAME: &str = "a_listener_out_of_descriptors_pauses_instead_of_spinning";
    if std::env::var_os(ALONE).is_none() {
        let mut child = this_binary_running(NAME).env(ALONE, "1").spawn().expect("start this test binary for the test alone");
        let status = tokio::task::spawn_blocking(move || child.wait()).await.expect("join").expect("child status");
        assert!(status.success(), "out of descriptors, in a process of its own: {status}");
        return;
    }
    let _serial = SERIAL.lock().await;
    let site = Site::new("emfile");
    let recorder = Recorder::default();
    let (mut publisher, path) = bind_pub(&site, &recorder).await;
    // A connection waiting in the backlog, from another process.
    let mut client = Command::new("python3")
        .args(["-c", "import socket,sys,time; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); time.sleep(30)"])
        .arg(&path)
        .spawn()
        .expect("start a python client");
    let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: dup/close on fd 0, getrlimit/setrlimit on the structs given.
    unsafe {
        // The lowest free descriptor number: no new descriptor below the limit.
        let lowest = libc::dup(0);
        assert!(lowest >= 0, "dup");
        libc::close(lowest);
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut old), 0);
        let tight = libc::rlimit { rlim_cur: lowest as u64, rlim_max: old.rlim_max };
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &tight), 0);
    }
    let restore = || {
        // SAFETY: as above.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &old) };
    };
    let start = Instant::now();
    while recorder.get().accept_failed == 0 && start.elapsed() < DEADLINE {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let cpu = |who| {
        let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: ru is writable memory of the right size.
        unsafe { libc::getrusage(who, ru.as_mut_ptr()) };
        // SAFETY: getrusage filled it.
        let ru = unsafe { ru.assume_init() };
        Duration::from_micros(
            (ru.ru_utime.tv_sec * 1_000_000 + ru.ru_utime.tv_usec + ru.ru_stime.tv_sec * 1_000_000 + ru.ru_stime.tv_usec) as u64,
        )
    };
    let (cpu0, t0) = (cpu(libc::RUSAGE_SELF), Instant::now());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let share = (cpu(libc::RUSAGE_SELF) - cpu0).as_secs_f64() / t0.elapsed().as_secs_f64();
    let failed = recorder.get().accept_failed;
    restore();
    let _ = client.kill();
    let _ = client.wait();
    eprintln!("out of descriptors: {failed} failed accepts, {:.1}% of a CPU", share * 100.0);
    assert!(failed >= 1, "accept never failed (was the limit tight?)");
    assert!(failed <= 40, "{failed} failed accepts in ~1 s: not pausing");
    assert!(share < 0.2, "the process used {:.0}% of a CPU while out of descriptors", share * 100.0);
    assert_still_serves(&mut publisher, &path).await;
}

/// The file stays at `path` for `window` (checked every 10 ms), then a
/// subscriber is served through it.
async fn assert_file_stays(publisher: &mut PubSocket, path: &Path, window: Duration, what: &str) {
    let start = Instant::now();
    while start.elapsed() < window {
        assert!(path.exists(), "{what}: the new socket's file was removed after {:?}", start.elapsed());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_still_serves(publisher, path).await;
}

/// A socket bound again at the path of a socket that goes away (a restarted
/// ringtail consumer binding its ack socket) keeps its file. Stock 0.7.0
/// removed the path by name from the old socket's accept task whenever that
/// task next ran, which was usually after the new bind: the new socket could
/// no longer be reached (`ringtail-ipc`'s stream test then timed out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_bound_again_at_the_same_path_keeps_its_file() {
    let _serial = SERIAL.lock().await;
    let site = Site::new("rebind");
    let unlink_stale = |path: &Path| match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => panic!("unlink the stale socket file: {e}"),
    };
    for round in 0..5 {
        // The old socket is dropped, then the new one binds: the old file is
        // gone at once (no stale file left for anyone to connect to).
        let recorder = Recorder::default();
        let (old, path) = bind_pub(&site, &recorder).await;
        drop(old);
        assert!(!path.exists(), "round {round}: a dropped socket's file is removed when it is dropped");
        unlink_stale(&path);
        let (mut new, _) = bind_pub(&site, &recorder).await;
        assert_file_stays(&mut new, &path, Duration::from_millis(300), "dropped, then bound again").await;
        drop(new);

        // The new socket binds (over the stale file) while the old one is
        // still there; the old one goes after: it leaves the new file alone.
        let (old, path) = bind_pub(&site, &recorder).await;
        unlink_stale(&path);
        let (mut new, _) = bind_pub(&site, &recorder).await;
        drop(old);
        assert_file_stays(&mut new, &path, Duration::from_millis(300), "bound again, then the old one dropped").await;
        drop(new);
    }
}

/// This test binary, set to run test `name` alone in a process of its own.
fn this_binary_running(name: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("this test binary"));
    c.args(["--exact", name, "--nocapture", "--test-threads=1"]);
    c
}

fn spawn_as_nobody(role: &str, path: &Path) -> Child {
    this_binary_running("child_process_role")
        .env(ROLE, role)
        .env(ROLE_PATH, path)
        .uid(NOBODY)
        .gid(NOBODY)
        .spawn()
        .expect("start this test binary as nobody")
}

async fn wait_success(mut child: Child, what: &str) {
    wait_until(what, DEADLINE, || child.try_wait().expect("wait for the child").is_some()).await;
    let status = child.wait().expect("child status");
    assert!(status.success(), "{what}: the child (as nobody) failed: {status}");
}

fn nobody(child: &Child) -> Option<PeerCred> {
    Some(PeerCred { pid: i32::try_from(child.id()).ok(), uid: NOBODY, gid: NOBODY })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_uid_is_closed_before_any_byte_is_read() {
    if euid() != 0 {
        ringtail_tests::skip("needs root to start a peer as nobody (uid 65534)");
        return;
    }
    let _serial = SERIAL.lock().await;
    let site = Site::new("refused");
    let recorder = Recorder::default();
    let (mut publisher, path) = bind_pub(&site, &recorder).await;
    let child = spawn_as_nobody("client", &path);
    let expected = nobody(&child);
    wait_success(child, "a client as nobody was closed before any byte").await;
    wait_until("the refusal counted", DEADLINE, || !recorder.get().refused.is_empty()).await;
    assert_eq!(recorder.get().refused, vec![expected]);
    assert_still_serves(&mut publisher, &path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_refuses_a_listener_of_another_uid() {
    if euid() != 0 {
        ringtail_tests::skip("needs root to start a listener as nobody (uid 65534)");
        return;
    }
    let _serial = SERIAL.lock().await;
    let site = Site::new("impostor");
    let path = site.path("impostor.sock");
    let child = spawn_as_nobody("listener", &path);
    let expected = nobody(&child);
    wait_until("the impostor's socket", DEADLINE, || path.exists()).await;
    let recorder = Recorder::default();
    let mut sub = SubSocket::with_options(options(&recorder));
    match sub.connect(&endpoint(&path)).await {
        Err(ZmqError::Network(e)) if e.kind() == ErrorKind::PermissionDenied => {}
        other => panic!("connecting to a listener owned by nobody: {other:?}"),
    }
    drop(sub);
    assert_eq!(recorder.get().refused, vec![expected]);
    wait_success(child, "the impostor read nothing").await;
}

/// Not a test by itself: what this binary does when started as `nobody` by
/// the uid tests (a no-op otherwise).
#[test]
fn child_process_role() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let path = PathBuf::from(std::env::var(ROLE_PATH).expect("the socket path"));
    assert_eq!(euid(), NOBODY, "the child runs as nobody");
    let mut stream = match role.as_str() {
        "client" => {
            let mut stream = UnixStream::connect(&path).expect("nobody may reach the socket file");
            // The server may already have closed: a failed write is fine.
            let _ = stream.write_all(&handshake());
            stream
        }
        "listener" => {
            let listener = UnixListener::bind(&path).expect("bind as nobody");
            listener.set_nonblocking(true).expect("nonblocking accept");
            let start = Instant::now();
            loop {
                match listener.accept() {
                    Ok((stream, _)) => break stream,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        assert!(start.elapsed() < DEADLINE, "nobody connected");
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            }
        }
        other => panic!("unknown role {other}"),
    };
    stream.set_nonblocking(false).expect("blocking reads");
    stream.set_read_timeout(Some(DEADLINE)).expect("read timeout");
    let mut got = Vec::new();
    match stream.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("{role}: no close within {DEADLINE:?}: {e}"),
    }
    assert!(got.is_empty(), "{role}: the refusing side sent {} bytes", got.len());
}
