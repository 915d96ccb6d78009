//! zeromq PUB→SUB over ipc://, in one process: messages a second, and what a
//! subscriber that never reads costs the publisher.
//!
//! - `zmq-ipc-bench throughput SIZE COUNT`: publishes COUNT messages of SIZE
//!   bytes with at most 256 in flight beyond what the subscriber received
//!   (ringtail's replay window, its flow control), one shared payload as
//!   ringtail's replay buffer shares its `Bytes`; prints one line of figures.
//! - `zmq-ipc-bench stall COUNT`: publishes COUNT fresh 64 KiB messages while
//!   a raw subscriber never reads; prints how much resident memory grew.
//!
//! `run.py` builds it twice: against zeromq 0.7.0 from crates.io ("stock"),
//! and with `vendor/zeromq-0.7.0-ringtail` patched in and feature `patched`
//! ("patched"), which sets the limits ringtail sets.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Notify;
use zeromq::{PubSocket, Socket, SocketOptions, SocketRecv, SocketSend, SubSocket, ZmqMessage};

/// ringtail's replay window (`runtime_kit::ipc::replay::WINDOW`).
const WINDOW: u64 = 256;
const DEADLINE: Duration = Duration::from_secs(120);

const VARIANT: &str = if cfg!(feature = "patched") {
    "patched"
} else {
    "stock"
};

/// Messages dropped by the patched crate's limits (stock reports none).
static DROPPED: AtomicU64 = AtomicU64::new(0);

fn options() -> SocketOptions {
    let mut o = SocketOptions::default();
    // As runtime-kit's ipc::options().
    o.read_buffer(16 * 1024, 256 * 1024, 2);
    #[cfg(feature = "patched")]
    {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        o.max_message_size(32 << 20) // ipc-schema's MAX_MESSAGE_BYTES
            .send_queue_capacity(2 * WINDOW as usize)
            .peer_filter(Arc::new(move |cred: &zeromq::PeerCred| cred.uid == me))
            .limit_hook(Arc::new(|_event: &zeromq::LimitEvent| {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }));
    }
    o
}

fn socket_path(mode: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("zmq-ipc-bench-{}-{mode}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a socket directory");
    dir.join("pub.sock")
}

fn endpoint(path: &Path) -> String {
    format!("ipc://{}", path.display())
}

/// A SUB socket that has received at least one message from `publisher`.
async fn subscribed(publisher: &mut PubSocket, path: &Path) -> SubSocket {
    let mut sub = SubSocket::with_options(options());
    sub.connect(&endpoint(path)).await.expect("connect");
    sub.subscribe("").await.expect("subscribe");
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < DEADLINE,
            "the subscription never took effect"
        );
        publisher
            .send(ZmqMessage::from("probe"))
            .await
            .expect("send");
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(20), sub.recv()).await {
            return sub;
        }
    }
}

async fn throughput(size: usize, count: u64) {
    let path = socket_path("throughput");
    let mut publisher = PubSocket::with_options(options());
    publisher.bind(&endpoint(&path)).await.expect("bind");
    let mut sub = subscribed(&mut publisher, &path).await;
    let received = Arc::new(AtomicU64::new(0));
    let progress = Arc::new(Notify::new());
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    {
        let received = received.clone();
        let progress = progress.clone();
        tokio::spawn(async move {
            loop {
                let message = sub.recv().await.expect("receive");
                if message.get(0).map(Bytes::len) != Some(size) {
                    continue; // a late probe
                }
                let n = received.fetch_add(1, Ordering::Relaxed) + 1;
                progress.notify_one();
                if n == count {
                    let _ = done_tx.send(Instant::now());
                    return;
                }
            }
        });
    }
    let payload = Bytes::from(vec![0xa5u8; size]);
    let cpu_start = cpu_time();
    let start = Instant::now();
    for sent in 0..count {
        while sent - received.load(Ordering::Relaxed) >= WINDOW {
            progress.notified().await;
        }
        publisher
            .send(ZmqMessage::from(payload.clone()))
            .await
            .expect("send");
    }
    let end = tokio::time::timeout(DEADLINE, done_rx)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "only {} of {count} messages arrived",
                received.load(Ordering::Relaxed)
            )
        })
        .expect("the subscriber finished");
    let secs = (end - start).as_secs_f64();
    let cpu = (cpu_time() - cpu_start).as_secs_f64();
    println!(
        "variant={VARIANT} mode=throughput size={size} count={count} secs={secs:.3} msgs_per_s={:.0} mb_per_s={:.1} cpu_us_per_msg={:.2} dropped={}",
        count as f64 / secs,
        (count as f64 * size as f64) / secs / 1e6,
        cpu * 1e6 / count as f64,
        DROPPED.load(Ordering::Relaxed)
    );
    let _ = std::fs::remove_dir_all(path.parent().unwrap_or(&path));
}

/// CPU time (user + system) of this process so far: under load from other
/// processes, CPU per message varies less than wall-clock rates.
fn cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a complete rusage into the pointer it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .expect("statm");
    pages * 4096
}

/// The bytes a SUB sends: greeting, READY, and a subscription to everything.
fn raw_subscriber_hello() -> Vec<u8> {
    let mut bytes = vec![0u8; 64];
    bytes[0] = 0xff;
    bytes[9] = 0x7f;
    bytes[10] = 3;
    bytes[12..16].copy_from_slice(b"NULL");
    let mut ready = vec![5];
    ready.extend_from_slice(b"READY");
    ready.push(11);
    ready.extend_from_slice(b"Socket-Type");
    ready.extend_from_slice(&3u32.to_be_bytes());
    ready.extend_from_slice(b"SUB");
    bytes.extend_from_slice(&[0x04, ready.len() as u8]);
    bytes.extend_from_slice(&ready);
    bytes.extend_from_slice(&[0x00, 0x01, 0x01]);
    bytes
}

async fn stall(count: u64) {
    const SIZE: usize = 64 * 1024;
    let path = socket_path("stall");
    let mut publisher = PubSocket::with_options(options());
    publisher.bind(&endpoint(&path)).await.expect("bind");
    // The stalled subscriber reads until its first "probe", then never again.
    let mut raw = UnixStream::connect(&path).expect("connect the raw subscriber");
    raw.write_all(&raw_subscriber_hello()).expect("handshake");
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !seen.windows(5).any(|w| w == b"probe") {
            let n = raw.read(&mut buf).expect("read");
            assert!(n > 0, "the publisher closed the raw subscriber");
            seen.extend_from_slice(&buf[..n]);
        }
        raw
    });
    let start = Instant::now();
    while !reader.is_finished() {
        assert!(
            start.elapsed() < DEADLINE,
            "the raw subscriber never got a probe"
        );
        publisher
            .send(ZmqMessage::from("probe"))
            .await
            .expect("send");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _raw = reader.join().expect("the raw subscriber");
    let mut fast = subscribed(&mut publisher, &path).await;
    let before = rss_bytes();
    let dropped_before = DROPPED.load(Ordering::Relaxed);
    for i in 0..count {
        publisher
            .send(ZmqMessage::from(Bytes::from(vec![i as u8 | 1; SIZE])))
            .await
            .expect("send");
        tokio::task::yield_now().await;
    }
    // Fan-out is in order: once a reading subscriber has the marker, every
    // message before it was queued or dropped for the stalled one.
    let start = Instant::now();
    'marker: loop {
        assert!(start.elapsed() < DEADLINE, "the marker never arrived");
        publisher
            .send(ZmqMessage::from("marker"))
            .await
            .expect("send");
        while let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(20), fast.recv()).await {
            if m.get(0).map(|b| b.as_ref()) == Some(&b"marker"[..]) {
                break 'marker;
            }
        }
    }
    let grown = rss_bytes().saturating_sub(before);
    println!(
        "variant={VARIANT} mode=stall size={SIZE} count={count} rss_growth_mib={:.1} dropped={}",
        grown as f64 / (1 << 20) as f64,
        DROPPED.load(Ordering::Relaxed) - dropped_before
    );
    let _ = std::fs::remove_dir_all(path.parent().unwrap_or(&path));
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: zmq-ipc-bench throughput SIZE COUNT | stall COUNT";
    let number = |i: usize| -> u64 { args.get(i).and_then(|a| a.parse().ok()).expect(usage) };
    match args.get(1).map(String::as_str) {
        Some("throughput") => throughput(number(2) as usize, number(3)).await,
        Some("stall") => stall(number(2)).await,
        _ => panic!("{usage}"),
    }
}
