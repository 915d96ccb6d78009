//! The span-actor's memory bounds, held by the process itself, allocator
//! included (issue 44): the real binary is fed raw batches over its IPC
//! socket as the loader feeds it, its span batches are acknowledged as the
//! exporter acknowledges them, and its resident memory is read from
//! `/proc` while an attacker's load runs and after it.
//!
//! - HTTP/2: 48 connections × 1,000 streams that never end, each holding
//!   the longest header values kept, against `pipeline.h2_state_mb`.
//! - Routes: 60 services × 500 distinct long routes, against the routes'
//!   16 MiB, then services that come and go.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ipc_schema::{endpoints, Body, Component, ConnHead, Envelope, ProcessInfo, Producer, RawBatch, RawEvent, RawH2, Role, SockAddr};
use ringtail_ipc::consumer::{Consumer, ConsumerOptions, Inbound};
use ringtail_ipc::{self as ipc, Access};
use runtime_kit::counters::Registry;

fn addr(ip: [u8; 4], port: u16) -> SockAddr {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&ip);
    SockAddr::from_bytes(false, b, port)
}

/// VmRSS and Pss of `pid`, in KiB.
fn memory_kb(pid: u32) -> (u64, u64) {
    let field = |text: &str, name: &str| -> u64 {
        text.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0)
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    (field(&status, "VmRSS:"), field(&rollup, "Pss:"))
}

/// An HPACK integer with an `n`-bit prefix (`first` holds the other bits).
fn hpack_int(out: &mut Vec<u8>, first: u8, n: u8, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A literal header without indexing, new name, no Huffman.
fn hpack_literal(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(0x00);
    hpack_int(out, 0, 7, name.len());
    out.extend_from_slice(name.as_bytes());
    hpack_int(out, 0, 7, value.len());
    out.extend_from_slice(value.as_bytes());
}

/// The kernel's pieces of one frame, its payload whole.
fn frame(typ: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut v = vec![1, (n >> 16) as u8, (n >> 8) as u8, n as u8, typ, flags];
    v.extend_from_slice(&stream.to_be_bytes());
    for chunk in payload.chunks(u16::MAX as usize) {
        v.push(2);
        v.extend_from_slice(&(chunk.len() as u16).to_le_bytes());
        v.extend_from_slice(chunk);
    }
    v
}

/// A real span-actor with a fake loader before it and a fake exporter after.
struct Rig {
    dir: PathBuf,
    actor: Child,
    /// The fake loader's socket, in a task of its own.
    loader: tokio::sync::mpsc::Sender<Bytes>,
    seq: u64,
    _consumer: Consumer,
    health: tokio::sync::watch::Receiver<Vec<(String, f64)>>,
    /// The span-actor's acks to the loader: the highest seq received.
    received: tokio::sync::watch::Receiver<u64>,
    trigger: runtime_kit::shutdown::Trigger,
}

impl Rig {
    async fn start(tag: &str, config: &str) -> Rig {
        let dir = PathBuf::from(format!("/tmp/sa-mem-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(endpoints::actors_dir(&dir)).unwrap();
        let cfg = dir.join("ringtail.toml");
        std::fs::write(&cfg, format!("[pipeline]\nruntime_dir = \"{}\"\nbatch_timeout = \"10ms\"\n{config}", dir.display())).unwrap();
        let registry = Registry::new(Component::ProbeLoader, 1);
        let mut socket = ipc::bind_pub(&endpoints::raw_events(&dir), Access::private(), &registry).await.unwrap();
        let (loader, mut outbox) = tokio::sync::mpsc::channel::<Bytes>(4);
        tokio::spawn(async move {
            while let Some(bytes) = outbox.recv().await {
                ipc::send(&mut socket, "loader", bytes).await.unwrap();
            }
        });
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ringtail-span-actor"));
        cmd.arg("--config").arg(&cfg).stdout(Stdio::null()).stderr(std::fs::File::create(dir.join("stderr")).unwrap());
        cmd.env(runtime_kit::memory::ENV.0, runtime_kit::memory::ENV.1);
        let actor = cmd.spawn().unwrap();
        // The exporter's side: every span batch done at once.
        let (trigger, shutdown) = runtime_kit::shutdown::channel();
        // The loader's side of the acks: what the span-actor has received.
        let (acked, received) = tokio::sync::watch::channel(0u64);
        let mut acks = ipc::socket::subscribe_acks(endpoints::raw_acks(&dir), Access::private(), 64, &registry, shutdown.clone());
        tokio::spawn(async move {
            while let Some((_, ack)) = acks.recv().await {
                if ack.for_instance == LOADER_INSTANCE {
                    acked.send_modify(|r| *r = (*r).max(ack.received));
                }
            }
        });
        let exporter = Registry::new(Component::ExporterActor, 1);
        let (consumer, _task, mut rx) = Consumer::start(
            ConsumerOptions {
                path: endpoints::spans(&dir),
                acks: endpoints::span_acks(&dir),
                access: Access::private(),
                me: Producer { component: Component::ExporterActor, instance: 1 },
                producer: Component::SpanActor,
                capacity: 64,
                max_outstanding: 128,
                duplicates: exporter.counter("dups", &[]),
                duplicate_items: |_| 1,
            },
            &exporter,
            shutdown,
        )
        .await
        .unwrap();
        let (tx, health) = tokio::sync::watch::channel(Vec::new());
        let done = consumer.clone();
        tokio::spawn(async move {
            while let Some(inbound) = rx.recv().await {
                match inbound {
                    Inbound::Data { id, .. } => done.done(id),
                    Inbound::Transient(Body::Health(h)) if h.component == Component::SpanActor => {
                        let _ = tx.send(h.points.iter().map(|p| (p.name.clone(), p.value)).collect());
                    }
                    Inbound::Transient(_) => {}
                }
            }
        });
        Rig { dir, actor, loader, seq: 0, _consumer: consumer, health, received, trigger }
    }

    fn pid(&self) -> u32 {
        self.actor.id()
    }

    fn point(&self, name: &str) -> f64 {
        self.health.borrow().iter().filter(|(n, _)| n == name).map(|(_, v)| v).sum()
    }

    /// Sends one raw batch as the loader does, at most a few ahead of
    /// what the span-actor has received (the loader resends what a full
    /// queue dropped; this one does not).
    async fn send(&mut self, batch: RawBatch) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.seq > *self.received.borrow() + 2 && self.seq > 1 {
            assert!(Instant::now() < deadline, "the span-actor stopped receiving at {}:\n{}", *self.received.borrow(), self.log());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.seq += 1;
        let me = Producer { component: Component::ProbeLoader, instance: LOADER_INSTANCE };
        let bytes = Bytes::from(ipc_schema::encode(&Envelope::new(me, self.seq, Body::Raw(batch))).unwrap());
        self.loader.send(bytes).await.unwrap();
    }

    /// Waits until the span-actor reports every batch sent received, and
    /// `until` holds of its health.
    async fn settle(&self, until: impl Fn(&Rig) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            if self.point("ringtail_raw_batches_received_total") >= self.seq as f64 && until(self) {
                // A health report comes every second: one more, so it is after the last batch.
                tokio::time::sleep(Duration::from_millis(1200)).await;
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the span-actor did not take the {} batches: {:?}\n{}", self.seq, self.health.borrow(), self.log());
    }

    /// The gauges and counters that say what it holds, for the report.
    fn holding(&self) -> String {
        [
            "ringtail_h2_state_bytes",
            "ringtail_route_services",
            "ringtail_open_raw_batches",
            "ringtail_ipc_kept_batches",
            "ringtail_spans_created_total",
            "ringtail_spans_published_total",
            "ringtail_route_services_evicted_total",
            "ringtail_route_overflow_total",
        ]
        .iter()
        .map(|n| format!("{n}={}", self.point(n)))
        .collect::<Vec<_>>()
        .join(" ")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.trigger.fire();
        let _ = self.actor.kill();
        let _ = self.actor.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn process(pid: u32, service: Option<String>) -> ProcessInfo {
    ProcessInfo {
        pid,
        proc_start_ns: 1,
        comm: "srv".into(),
        exe_name: Some("srv".into()),
        exe_path: None,
        env_service_name: service,
        env_resource_attributes: None,
        container_id: None,
    }
}

const EPOCH_NS: i64 = 1_700_000_000_000_000_000;

/// The fake loader's instance, in its envelopes and the acks.
const LOADER_INSTANCE: u64 = 77;

/// A warm-up: a few requests through every path the loads take.
async fn warm_up(rig: &mut Rig) {
    let mut events = Vec::new();
    for i in 0..200u64 {
        events.push(http1_event(1, i, &format!("/warm/{i}"), 200));
    }
    // Again until the span-actor has subscribed (a PUB drops what no
    // subscriber takes; the same seq again is a duplicate).
    let batch = RawBatch::of(EPOCH_NS, 0, vec![process(1, None)], &events, &[], &[]);
    rig.send(batch.clone()).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while rig.point("ringtail_raw_batches_received_total") < 1.0 {
        assert!(Instant::now() < deadline, "the span-actor never took a batch:\n{}", rig.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
        rig.seq -= 1;
        rig.send(batch.clone()).await;
    }
    rig.settle(|_| true).await;
}

fn http1_event(pid: u32, conn: u64, path: &str, status: u16) -> RawEvent {
    RawEvent {
        conn: ConnHead {
            role: Role::Server,
            pid,
            tid: pid,
            fd: 3,
            proc_start_ns: 1,
            conn_id: conn,
            local: addr([127, 0, 0, 1], 8080),
            peer: addr([10, 0, 0, 1], 40000),
            tls: false,
        },
        seq: 1,
        parent: None,
        start_mono_ns: 1_000_000 + conn,
        end_mono_ns: 2_000_000 + conn,
        status,
        request_len: 0,
        truncated: false,
        orphan: false,
        h2c: false,
        unlinked: false,
        propagated: None,
        kernel_ids: None,
        request: format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes(),
    }
}

/// Peak memory of `pid` seen by a sampler until it is stopped.
struct Sampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: std::thread::JoinHandle<(u64, u64)>,
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut peak = (0, 0);
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                let (rss, pss) = memory_kb(pid);
                peak = (peak.0.max(rss), peak.1.max(pss));
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        });
        Sampler { stop, handle }
    }

    fn peak(self) -> (u64, u64) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.join().unwrap()
    }
}

/// `pid`'s memory once it is at most `rss_kb` resident, or has not gone
/// down for 3 s (at most 20 s): the collector returns freed memory each
/// second, later when the machine is busy.
async fn released(pid: u32, rss_kb: u64) -> (u64, u64) {
    // Not "until it stops going down": on a loaded machine the collector's
    // turns and the allocator's purge delay can leave it flat for seconds
    // before it drops (seen: a run that stopped early and failed).
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut low = memory_kb(pid);
    while low.0 > rss_kb && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = memory_kb(pid);
        if now.0 < low.0 {
            low = now;
        }
    }
    low
}

fn mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

/// One HTTP/2 server record of connection `conn` (the kernel's pieces
/// `pieces`).
fn h2_record(conn: u64, ns: u64, start: bool, close: bool, pieces: Vec<u8>) -> RawH2 {
    RawH2 {
        conn: ConnHead {
            role: Role::Server,
            pid: 2,
            tid: 2,
            fd: 5,
            proc_start_ns: 1,
            conn_id: conn,
            tls: false,
            local: addr([127, 0, 0, 1], 8443),
            peer: addr([10, 0, 0, 2], (50000 + conn % 10000) as u16),
        },
        mono_ns: ns,
        send: false,
        start,
        close,
        upgrade: false,
        caller: None,
        pieces,
    }
}

/// The h2 attack, twice: 48 connections of 1,000 streams that never end,
/// each holding long header values (a 2,000-byte path, 500-byte user
/// agent, content type and authority): ~168 MB of header values against
/// the 64 MiB `pipeline.h2_state_mb`; then the connections close (their
/// streams end, ~14,000 spans of 4 KB each go out). Resident memory stays
/// within the bound (+ [`FIXED_MB`]) while they are open, and what the
/// burst leaves behind once they closed is not more the second time
/// (freed memory reused, not leaked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_that_never_end_stay_within_h2_state_mb() {
    const CONNS: u64 = 48;
    const STREAMS: u32 = 1000;
    let budget_mb = 64u64;
    let mut rig = Rig::start("h2", &format!("h2_state_mb = {budget_mb}\n")).await;
    warm_up(&mut rig).await;
    let pid = rig.pid();
    let base = memory_kb(pid);
    let ua = "u".repeat(500);
    let ct = "c".repeat(500);
    let authority = "a".repeat(500);
    let mut closed_after: Vec<u64> = Vec::new();
    for round in 0..2u64 {
        let sampler = Sampler::start(pid);
        for c in 0..CONNS {
            let conn = 1000 * (round + 1) + c;
            let mut records = Vec::new();
            for s in 0..STREAMS {
                let id = 2 * s + 1;
                let mut block = Vec::new();
                hpack_literal(&mut block, ":method", "POST");
                hpack_literal(&mut block, ":scheme", "http");
                hpack_literal(&mut block, ":path", &format!("/c{conn}/s{id}/{}", "p".repeat(1980)));
                hpack_literal(&mut block, ":authority", &authority);
                hpack_literal(&mut block, "user-agent", &ua);
                hpack_literal(&mut block, "content-type", &ct);
                // HEADERS, END_HEADERS, no END_STREAM: the request goes on for ever.
                records.push(h2_record(conn, 1_000_000 + u64::from(s), s == 0, false, frame(1, 0x4, id, &block)));
            }
            for chunk in records.chunks(250) {
                rig.send(RawBatch::of(EPOCH_NS, 0, vec![process(2, None)], &[], chunk, &[])).await;
            }
        }
        rig.settle(|r| r.point("ringtail_h2_state_bytes") > 0.0).await;
        let peak = sampler.peak();
        let open = memory_kb(pid);
        let state = rig.point("ringtail_h2_state_bytes");
        eprintln!(
            "h2 round {round}: base RSS {:.1} MiB PSS {:.1} MiB; peak RSS +{:.1} MiB PSS +{:.1} MiB; open RSS +{:.1} MiB PSS +{:.1} MiB; state counted {:.1} MiB; {}",
            mb(base.0),
            mb(base.1),
            mb(peak.0.saturating_sub(base.0)),
            mb(peak.1.saturating_sub(base.1)),
            mb(open.0.saturating_sub(base.0)),
            mb(open.1.saturating_sub(base.1)),
            state / 1048576.0,
            rig.holding()
        );
        assert!(state <= (budget_mb << 20) as f64, "the state counted is over the budget: {state}");
        assert!(
            peak.0.saturating_sub(base.0) <= (budget_mb + FIXED_MB) * 1024,
            "the span-actor grew by {:.1} MiB (RSS) for HTTP/2 state bounded at {budget_mb} MiB (+{FIXED_MB} MiB fixed)",
            mb(peak.0 - base.0)
        );
        // The connections close: their streams end, their state goes.
        let closes: Vec<RawH2> = (0..CONNS).map(|c| h2_record(1000 * (round + 1) + c, 9_000_000, false, true, Vec::new())).collect();
        rig.send(RawBatch::of(EPOCH_NS, 0, vec![process(2, None)], &[], &closes, &[])).await;
        rig.settle(|r| r.point("ringtail_h2_state_bytes") == 0.0 && r.point("ringtail_ipc_kept_batches") == 0.0).await;
        // Collection turns (runtime_kit::memory::collector, each second):
        // until it is within the fixed overhead, and in the second round
        // within what the first left (+2 MiB, the check below): a first
        // reading below the fixed overhead is not yet all it gives back.
        let target = match closed_after.first() {
            Some(&first) => (first + 2 * 1024).min(FIXED_MB * 1024),
            None => FIXED_MB * 1024,
        };
        let closed = released(pid, base.0 + target).await;
        eprintln!(
            "h2 round {round}, closed: RSS +{:.1} MiB PSS +{:.1} MiB",
            mb(closed.0.saturating_sub(base.0)),
            mb(closed.1.saturating_sub(base.1))
        );
        closed_after.push(closed.0.saturating_sub(base.0));
    }
    // What the first burst left is reused by the second, not added to.
    assert!(
        closed_after[1] <= closed_after[0] + 2 * 1024,
        "the span-actor kept {:.1} MiB after the first round and {:.1} MiB after the second",
        mb(closed_after[0]),
        mb(closed_after[1])
    );
    assert!(
        closed_after[1] <= FIXED_MB * 1024,
        "the span-actor kept {:.1} MiB (RSS) once every HTTP/2 connection closed",
        mb(closed_after[1])
    );
}

/// What the span-actor may hold besides a bound's own bytes while a load
/// runs (docs/security.md): the raw batches being read (their bytes and
/// decoded records), the IPC buffers, the shedding's overshoot (state is
/// shed down to 7/8 of the bound once over it), the allocator's partly used
/// pages, the fixed tables that fill as requests come. Measured 3-4.5 MiB.
const FIXED_MB: u64 = 8;

/// The routes attack: 60 services, each with 500 distinct routes of ~480
/// bytes (HTTP/1 requests answered 200), then 60 others: what the routes
/// keep once their spans are exported stays within their 16 MiB (+
/// [`FIXED_MB`]); it was +62 MiB resident (routes kept as text, each
/// pinning an allocator page shared with short-lived span strings, and
/// freed pages not returned while the process was idle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_of_many_services_stay_within_their_budget() {
    const SERVICES: u32 = 60;
    const ROUTES: u64 = 500;
    let mut rig = Rig::start("routes", "[routes]\nmax_cardinality = 500\n").await;
    warm_up(&mut rig).await;
    let pid = rig.pid();
    let base = memory_kb(pid);
    let sampler = Sampler::start(pid);
    for round in 0..2u32 {
        for svc in 0..SERVICES {
            let p = 100 + svc + round * SERVICES;
            let events: Vec<RawEvent> =
                (0..ROUTES).map(|r| http1_event(p, r, &format!("/s{svc}r{round}/route{r}/{}", "x".repeat(440)), 200)).collect();
            let name = format!("service-{svc}-{round}-{}", "n".repeat(40));
            rig.send(RawBatch::of(EPOCH_NS, 0, vec![process(p, Some(name))], &events, &[], &[])).await;
        }
    }
    // Every span exported (acknowledged): what stays is the routes'.
    rig.settle(|r| r.point("ringtail_ipc_kept_batches") == 0.0 && r.point("ringtail_open_raw_batches") == 0.0).await;
    let peak = sampler.peak();
    let after = released(pid, base.0 + FIXED_MB * 1024).await;
    eprintln!(
        "routes: base RSS {:.1} MiB PSS {:.1} MiB; peak RSS +{:.1} MiB PSS +{:.1} MiB; after RSS +{:.1} MiB PSS +{:.1} MiB",
        mb(base.0),
        mb(base.1),
        mb(peak.0.saturating_sub(base.0)),
        mb(peak.1.saturating_sub(base.1)),
        mb(after.0.saturating_sub(base.0)),
        mb(after.1.saturating_sub(base.1)),
    );
    eprintln!("{}", rig.holding());
    let bound_kb = (16 + FIXED_MB) * 1024;
    assert!(
        after.0.saturating_sub(base.0) <= bound_kb,
        "the span-actor kept {:.1} MiB (RSS) for routes bounded at 16 MiB (+{FIXED_MB} MiB fixed)",
        mb(after.0 - base.0)
    );
}
