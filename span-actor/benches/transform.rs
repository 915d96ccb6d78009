//! How many raw events one span-actor turns into spans per second, on one
//! core: decode a raw batch (msgpack), transform, assemble the span batch,
//! encode it (msgpack). That is the actor's whole per-event path; only the
//! socket reads and writes are left out.
//!
//! `cargo bench -p span-actor --bench transform` (figures go to BENCHMARKS.md).

use std::time::{Duration, Instant};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use ipc_schema::{Body, Component, Envelope, ProcessInfo, Producer, RawBatch, RawEvent, Role, SockAddr};
use ringtail_config::Settings;
use ringtail_ipc::protocol::InboundSeq;
use runtime_kit::counters::Registry;
use runtime_kit::profiling::cpu_time;
use span_actor::actors::publisher::assemble;
use span_actor::ledger::Ledger;
use span_actor::transform::Transformer;

fn addr(port: u16) -> SockAddr {
    let mut ip = [0u8; 16];
    ip[..4].copy_from_slice(&[127, 0, 0, 1]);
    SockAddr::from_bytes(false, ip, port)
}

/// A batch like a busy web server's: keep-alive connections, a handful of
/// routes with ids in them, curl-like heads.
fn raw_batch(n: usize, conn_base: u64) -> RawBatch {
    let paths = ["/", "/api/users/12345", "/api/orders/987/items", "/static/app.js", "/health", "/api/search?q=x&page=2"];
    let events: Vec<RawEvent> = (0..n)
        .map(|i| RawEvent {
            role: Role::Server,
            pid: 1000 + (i % 4) as u32,
            tid: 1000,
            fd: 5,
            proc_start_ns: 1,
            conn_id: conn_base + (i / 16) as u64,
            seq: (i % 16) as u32 + 1,
            parent: None,
            start_mono_ns: 1_000_000 + i as u64 * 1000,
            end_mono_ns: 1_200_000 + i as u64 * 1000,
            status: if i % 50 == 0 { 500 } else { 200 },
            local: addr(8080),
            peer: addr(40000 + (i % 1000) as u16),
            request_len: 90,
            truncated: false,
            orphan: false,
            tls: false,
            h2c: false,
            request: format!(
                "GET {} HTTP/1.1\r\nHost: shop.example:8080\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n",
                paths[i % paths.len()]
            )
            .into_bytes(),
        })
        .collect();
    let processes = (0..4)
        .map(|k| ProcessInfo {
            pid: 1000 + k,
            proc_start_ns: 1,
            comm: "shop".into(),
            exe_name: Some("shop".into()),
            exe_path: Some("/usr/bin/shop".into()),
            env_service_name: None,
            env_resource_attributes: None,
            container_id: None,
        })
        .collect();
    RawBatch::of(1_700_000_000_000_000_000, 0, processes, &events, &[])
}

fn main() {
    let settings = Settings::default();
    let batch_len = settings.pipeline.batch_length;
    let registry = Registry::new(Component::SpanActor, 1);
    let mut t = Transformer::new(&settings, &registry);
    // The raw consumer's dedup and acks, and the publisher's ledger.
    let mut ledger = (InboundSeq::default(), Ledger::default());
    let loader = Producer { component: Component::ProbeLoader, instance: 7 };
    ledger.0.observe(loader, 1);
    // Pre-encoded input, as it arrives off the socket.
    let inputs: Vec<Vec<u8>> =
        (0..64).map(|k| ipc_schema::encode(&Envelope::new(loader, k + 1, Body::Raw(raw_batch(batch_len, k * 10_000)))).unwrap()).collect();
    let me = Producer { component: Component::SpanActor, instance: 8 };

    let run = |secs: f64, t: &mut Transformer, (inbound, ledger): &mut (InboundSeq, Ledger)| {
        let start = Instant::now();
        let cpu0 = cpu_time();
        let mut events = 0u64;
        let mut seq = 0u64;
        let mut bytes_out = 0usize;
        while start.elapsed() < Duration::from_secs_f64(secs) {
            for input in &inputs {
                seq += 1;
                let env = ipc_schema::decode(input).expect("decode");
                let Body::Raw(b) = env.body else { unreachable!() };
                let _ = inbound.receive(seq);
                let mut out = Vec::with_capacity(b.event_count());
                let made = t.transform(loader.instance, seq, &b, Instant::now(), &mut out);
                if ledger.made((loader.instance, seq), made.total()) {
                    inbound.done(seq);
                }
                events += b.event_count() as u64;
                let (spans, comp) = assemble(out);
                for (origin, n) in comp {
                    if ledger.release(origin, n) {
                        inbound.done(origin.1);
                    }
                }
                bytes_out += ipc_schema::encode(&Envelope::new(me, seq, Body::Spans(spans))).expect("encode").len();
            }
        }
        (events, start.elapsed(), cpu_time() - cpu0, bytes_out)
    };
    // BENCH_SECS shortens the run (e.g. under callgrind).
    let secs: f64 = std::env::var("BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(5.0);
    run(secs / 5.0, &mut t, &mut ledger); // warm up
    let (events, wall, cpu, bytes) = run(secs, &mut t, &mut ledger);
    println!("span-actor transform, batches of {batch_len} events, one thread:");
    println!("  events/s (wall):      {:>12.0}", events as f64 / wall.as_secs_f64());
    println!("  CPU per event:        {:>12.3} µs", cpu.as_secs_f64() * 1e6 / events as f64);
    println!("  events/s per CPU-s:   {:>12.0}", events as f64 / cpu.as_secs_f64());
    println!("  span bytes per event: {:>12.1}", bytes as f64 / events as f64);
    println!("  events measured:      {events:>12}");
}
