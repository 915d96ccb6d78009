//! How many raw events one span-actor turns into spans per second, on one
//! core: decode a raw batch (msgpack), transform, assemble the span batch,
//! encode it (msgpack). That is the actor's whole per-event path; only the
//! socket reads and writes are left out.
//!
//! `cargo bench -p span-actor --bench transform` (figures go to BENCHMARKS.md).
//! `BENCH_PROTOCOL=h2` feeds HTTP/2 instead: gRPC unary calls, 16
//! connections of 16 calls a batch, each connection opened and closed
//! within its batch (the records a kernel would send: request HEADERS +
//! DATA read, response HEADERS + DATA + trailers written, HPACK by the
//! `hpack` crate). `BENCH_PROTOCOL=db` feeds database calls: 8 PostgreSQL
//! connections (a simple query answered by one row) and 8 Redis ones (GET
//! and SET), 16 calls each, opened and closed within their batch (a send
//! record and a receive record a call; the bench checks each made a
//! span). `BENCH_PROTOCOL=msg` feeds messaging calls from real recorded
//! bytes (`src/messaging/testdata/e2e_*.txt`: kafka-python against Tansu,
//! nats-py against nats-server): 4 Kafka producer connections of 16
//! Produce calls (acks=1, one record each), 4 Kafka consumer connections
//! of 16 Fetch calls (five records each, linked to those producers' spans
//! by offset), 4 NATS publisher connections of 16 publishes and 4 NATS
//! subscriber connections of a SUB and 16 messages, each connection with
//! its recorded set-up, opened and closed within its batch, a record a
//! syscall the client made (`BENCH_MSG=produce,fetch,publish,receive`
//! picks some of the four; the bench checks each call made a span).
//! `BENCH_SECS` sets the measured time (5 s);
//! `BENCH_PASSES=n` runs exactly one warm-up pass and `n` measured passes
//! over the 64 input batches instead (deterministic: for instruction
//! counts under callgrind, two runs of different `n`, the difference
//! divided by the difference in spans).

use std::time::{Duration, Instant};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use ipc_schema::{Body, Component, ConnHead, Envelope, Links, ProcessInfo, Producer, RawBatch, RawEvent, RawH2, RawStream, Role, SockAddr};
use ringtail_config::Settings;
use ringtail_ipc::protocol::InboundSeq;
use runtime_kit::counters::Registry;
use runtime_kit::profiling::cpu_time;
use span_actor::actors::publisher::assemble;
use span_actor::db::pieces as db_pieces;
use span_actor::ledger::Ledger;
use span_actor::transform::Transformer;

fn addr(port: u16) -> SockAddr {
    let mut ip = [0u8; 16];
    ip[..4].copy_from_slice(&[127, 0, 0, 1]);
    SockAddr::from_bytes(false, ip, port)
}

/// Four processes of one program `name`, pids from `first`.
fn processes(first: u32, name: &str) -> Vec<ProcessInfo> {
    (0..4)
        .map(|k| ProcessInfo {
            pid: first + k,
            proc_start_ns: 1,
            comm: name.into(),
            exe_name: Some(name.into()),
            exe_path: Some(format!("/usr/bin/{name}")),
            env_service_name: None,
            env_resource_attributes: None,
            container_id: None,
        })
        .collect()
}

/// A batch like a busy web server's: keep-alive connections, a handful of
/// routes with ids in them, curl-like heads.
fn raw_batch(n: usize, conn_base: u64) -> RawBatch {
    let paths = ["/", "/api/users/12345", "/api/orders/987/items", "/static/app.js", "/health", "/api/search?q=x&page=2"];
    let events: Vec<RawEvent> = (0..n)
        .map(|i| RawEvent {
            conn: ConnHead {
                role: Role::Server,
                pid: 1000 + (i % 4) as u32,
                tid: 1000,
                fd: 5,
                proc_start_ns: 1,
                conn_id: conn_base + (i / 16) as u64,
                local: addr(8080),
                peer: addr(40000 + (i % 1000) as u16),
                tls: false,
            },
            seq: (i % 16) as u32 + 1,
            parent: None,
            start_mono_ns: 1_000_000 + i as u64 * 1000,
            end_mono_ns: 1_200_000 + i as u64 * 1000,
            status: if i % 50 == 0 { 500 } else { 200 },
            request_len: 90,
            truncated: false,
            orphan: false,
            h2c: false,
            unlinked: false,
            propagated: None,
            kernel_ids: None,
            request: format!(
                "GET {} HTTP/1.1\r\nHost: shop.example:8080\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n",
                paths[i % paths.len()]
            )
            .into_bytes(),
        })
        .collect();
    let processes = processes(1000, "shop");
    RawBatch::of(1_700_000_000_000_000_000, 0, processes, &events, &[], &[])
}

/// A kernel h2 record's pieces (see `span_actor::h2::record`): each frame
/// header, then its payload as one `MORE` piece.
fn pieces(frames: &[(u8, u8, u32, Vec<u8>, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (typ, flags, stream, payload, len) in frames {
        out.push(1);
        out.extend_from_slice(&len.to_be_bytes()[1..]);
        out.extend_from_slice(&[*typ, *flags]);
        out.extend_from_slice(&stream.to_be_bytes());
        if !payload.is_empty() {
            out.push(2);
            out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
            out.extend_from_slice(payload);
        }
    }
    out
}

/// A batch of HTTP/2 records: 16 server connections, each with 16 gRPC
/// unary calls (8 at a time), opened and closed within the batch.
fn h2_batch(conn_base: u64) -> RawBatch {
    let mut records = Vec::new();
    let mut t = 1_000_000u64;
    for c in 0..16u64 {
        let (mut req, mut resp) = (hpack::Encoder::new(), hpack::Encoder::new());
        let record = |send: bool, start: bool, close: bool, mono_ns: u64, pieces: Vec<u8>| RawH2 {
            conn: ConnHead {
                role: Role::Server,
                pid: 2000 + (c % 4) as u32,
                tid: 2000,
                fd: 7,
                proc_start_ns: 1,
                conn_id: conn_base + c,
                tls: false,
                local: addr(50051),
                peer: addr(40000 + c as u16),
            },
            mono_ns,
            send,
            start,
            close,
            upgrade: false,
            caller: None,
            pieces,
        };
        for group in 0..2u32 {
            let ids: Vec<u32> = (0..8).map(|i| 1 + 2 * (group * 8 + i)).collect();
            for (k, &id) in ids.iter().enumerate() {
                let tp = format!("00-{:032x}-{:016x}-01", u128::from(conn_base + c) << 16 | u128::from(id), 7 + k);
                let path = if k % 2 == 0 { "/helloworld.Greeter/SayHello" } else { "/shop.Orders/Get" };
                let h: Vec<(&[u8], &[u8])> = vec![
                    (b":method", b"POST"),
                    (b":scheme", b"http"),
                    (b":path", path.as_bytes()),
                    (b":authority", b"orders.internal:50051"),
                    (b"content-type", b"application/grpc"),
                    (b"te", b"trailers"),
                    (b"user-agent", b"grpc-python/1.85.3 grpc-c/50.0.0 (linux; chttp2)"),
                    (b"traceparent", tp.as_bytes()),
                ];
                let block = req.encode(h);
                let n = block.len() as u32;
                t += 1000;
                records.push(record(false, group == 0 && k == 0, false, t, pieces(&[(1, 4, id, block, n), (0, 1, id, Vec::new(), 12)])));
            }
            for &id in &ids {
                let h: Vec<(&[u8], &[u8])> = vec![(b":status", b"200"), (b"content-type", b"application/grpc")];
                let tr: Vec<(&[u8], &[u8])> = vec![(b"grpc-status", if id % 7 == 0 { b"5" } else { b"0" }), (b"grpc-message", b"")];
                let (hb, tb) = (resp.encode(h), resp.encode(tr));
                let (hn, tn) = (hb.len() as u32, tb.len() as u32);
                t += 1000;
                records.push(record(true, false, false, t, pieces(&[(1, 4, id, hb, hn), (0, 0, id, Vec::new(), 17), (1, 5, id, tb, tn)])));
            }
        }
        t += 1000;
        records.push(record(false, false, true, t, Vec::new()));
    }
    let processes = processes(2000, "orders");
    RawBatch::of(1_700_000_000_000_000_000, 0, processes, &[], &records, &[])
}

/// Calls in a [`db_batch`]: 16 connections of 16 calls.
const DB_CALLS: u64 = 16 * 16;

/// A PostgreSQL message.
fn pg(t: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![t];
    v.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// A Redis command.
fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

/// A batch of database records: 8 PostgreSQL and 8 Redis client
/// connections, 16 calls each, opened (PostgreSQL: its startup) and
/// closed within the batch. A database connection's bytes come as the
/// loader ships them: stream records (a send, a receive), which the
/// transformer hands to its database table.
fn db_batch(conn_base: u64) -> RawBatch {
    // a record's pieces: its bytes whole, one MORE piece
    let whole = |b: &[u8]| {
        let mut out = Vec::new();
        db_pieces::encode(&mut out, db_pieces::Piece::Bytes(b));
        out
    };
    let mut records = Vec::new();
    let mut t = 1_000_000u64;
    for c in 0..16u64 {
        let postgres = c < 8;
        let mut record = |send: bool, start: bool, close: bool, bytes: &[u8]| {
            t += 1000;
            RawStream {
                conn: ConnHead {
                    role: Role::Client,
                    pid: 3000 + (c % 4) as u32,
                    tid: 3000,
                    fd: 9,
                    proc_start_ns: 1,
                    conn_id: conn_base + c,
                    tls: false,
                    local: addr(41000 + c as u16),
                    peer: addr(if postgres { 5432 } else { 6379 }),
                },
                mono_ns: t,
                send,
                start,
                close,
                links: Links::default(),
                pieces: if close { Vec::new() } else { whole(bytes) },
            }
        };
        if postgres {
            let mut startup = 196_608u32.to_be_bytes().to_vec();
            startup.extend_from_slice(b"user\0shop\0database\0shop\0\0");
            let mut len = (startup.len() as u32 + 4).to_be_bytes().to_vec();
            len.extend(startup);
            records.push(record(true, true, false, &len));
            let hello = [pg(b'R', &0u32.to_be_bytes()), pg(b'Z', b"I")].concat();
            records.push(record(false, false, false, &hello));
        }
        for i in 0..16u64 {
            let (query, answer) = if postgres {
                let q = format!("SELECT id, name, email FROM users WHERE id = {}\0", 1000 + i);
                let mut desc = 3u16.to_be_bytes().to_vec();
                for col in ["id", "name", "email"] {
                    desc.extend_from_slice(col.as_bytes());
                    desc.extend_from_slice(&[0, 0, 0, 0x40, 0x01, 0, 1, 0, 0, 0, 25, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0]);
                }
                let mut row = 3u16.to_be_bytes().to_vec();
                for v in [&b"1000"[..], b"Alice", b"alice@example.com"] {
                    row.extend_from_slice(&(v.len() as u32).to_be_bytes());
                    row.extend_from_slice(v);
                }
                (pg(b'Q', q.as_bytes()), [pg(b'T', &desc), pg(b'D', &row), pg(b'C', b"SELECT 1\0"), pg(b'Z', b"I")].concat())
            } else if i % 2 == 0 {
                (resp(&[b"SET", format!("key:{i}").as_bytes(), b"value-of-sixteen"]), b"+OK\r\n".to_vec())
            } else {
                (resp(&[b"GET", format!("key:{}", i - 1).as_bytes()]), b"$16\r\nvalue-of-sixteen\r\n".to_vec())
            };
            let start = !postgres && i == 0;
            records.push(record(true, start, false, &query));
            records.push(record(false, false, false, &answer));
        }
        records.push(record(false, false, true, &[]));
    }
    let processes = processes(3000, "shop");
    RawBatch::of(1_700_000_000_000_000_000, 0, processes, &[], &[], &records)
}

/// The kinds of messaging connection a [`msg_batch`] may hold
/// (`BENCH_MSG`), each with the recorded run and connection it is made of.
const MSG_KINDS: [&str; 4] = ["produce", "fetch", "publish", "receive"];
/// Connections of each kind in a [`msg_batch`].
const MSG_CONNS: u64 = 4;

/// The records of connection `n` of a recorded client run (`N > hex` /
/// `N < hex` lines: what the client sent, what it received).
fn recorded(run: &str, n: &str) -> Vec<(bool, Vec<u8>)> {
    run.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            (f.next()? == n).then(|| {
                let send = f.next() == Some(">");
                let hex = f.next().expect("a hex chunk");
                let bytes = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex")).collect();
                (send, bytes)
            })
        })
        .collect()
}

/// One connection of `kind`: its records (the recorded set-up, then its
/// calls, each as recorded) and the spans they make.
fn msg_conn(kind: &str) -> (Vec<(bool, Vec<u8>)>, u64) {
    const PRODUCE: &str = include_str!("../src/messaging/testdata/e2e_kafka_produce.txt");
    const CONSUME: &str = include_str!("../src/messaging/testdata/e2e_kafka_consume.txt");
    const PUBLISH: &str = include_str!("../src/messaging/testdata/e2e_nats_publish.txt");
    const SUBSCRIBE: &str = include_str!("../src/messaging/testdata/e2e_nats_subscribe.txt");
    // A Kafka request's correlation id is bytes 8..12, its answer's 4..8:
    // the calls repeated are numbered on, as a client numbers them.
    let kafka = |mut recs: Vec<(bool, Vec<u8>)>, setup: usize| {
        let calls: Vec<_> = recs.split_off(setup).chunks(2).map(|c| (c[0].1.clone(), c[1].1.clone())).collect();
        let first = i32::from_be_bytes(calls[0].0[8..12].try_into().unwrap());
        for k in 0..16 {
            let (mut req, mut resp) = calls[k % calls.len()].clone();
            let id = (first + k as i32).to_be_bytes();
            req[8..12].copy_from_slice(&id);
            resp[4..8].copy_from_slice(&id);
            recs.extend([(true, req), (false, resp)]);
        }
        (recs, 16)
    };
    match kind {
        // the producer's node connection: ApiVersions, then five Produce v9
        "produce" => kafka(recorded(PRODUCE, "4"), 2),
        // the consumer's node connection: ApiVersions, FindCoordinator,
        // Metadata twice, ListOffsets, then a Fetch v12 of five records
        "fetch" => {
            let recs = recorded(CONSUME, "2");
            let setup = recs.len() - 2;
            kafka(recs, setup)
        }
        // INFO, CONNECT, PING, PONG; then a record of a PING and four
        // publishes (HPUB, PUB, HPUB, PUB), and its PONG
        "publish" => {
            let mut recs = recorded(PUBLISH, "1");
            let calls = recs.split_off(4);
            for _ in 0..4 {
                recs.extend(calls.iter().cloned());
            }
            (recs, 16)
        }
        // INFO, CONNECT, PONG, a PING and SUB, PONG; then a record of four
        // messages (HMSG, MSG, HMSG, MSG)
        "receive" => {
            let mut recs = recorded(SUBSCRIBE, "1");
            let msgs = recs.pop().expect("the messages");
            for _ in 0..4 {
                recs.push(msgs.clone());
            }
            (recs, 1 + 16)
        }
        _ => panic!("BENCH_MSG: {kind:?} is none of {MSG_KINDS:?}"),
    }
}

/// A batch of messaging records: [`MSG_CONNS`] client connections of each
/// of `kinds` (producers before consumers: a consumer's messages find their
/// producers' spans), opened and closed within the batch, the bytes of a
/// record whole (each is far below what the kernel copies of a syscall).
/// The spans it makes with them.
fn msg_batch(conn_base: u64, kinds: &[&str]) -> (RawBatch, u64) {
    let whole = |b: &[u8]| {
        let mut out = Vec::new();
        db_pieces::encode(&mut out, db_pieces::Piece::Bytes(b));
        out
    };
    let mut records = Vec::new();
    let mut spans = 0;
    let mut t = 1_000_000u64;
    for (j, kind) in kinds.iter().enumerate() {
        let (recs, n) = msg_conn(kind);
        let broker = if matches!(*kind, "produce" | "fetch") { 9092 } else { 4222 };
        for k in 0..MSG_CONNS {
            let c = j as u64 * MSG_CONNS + k;
            spans += n;
            let last = recs.len();
            for (i, (send, bytes)) in recs.iter().chain([&(false, Vec::new())]).enumerate() {
                t += 1000;
                let close = i == last;
                records.push(RawStream {
                    conn: ConnHead {
                        role: Role::Client,
                        pid: 4000 + (c % 4) as u32,
                        tid: 4000,
                        fd: 11,
                        proc_start_ns: 1,
                        conn_id: conn_base + c,
                        tls: false,
                        local: addr(42000 + c as u16),
                        peer: addr(broker),
                    },
                    mono_ns: t,
                    send: *send,
                    start: i == 0,
                    close,
                    links: Links::default(),
                    pieces: if close { Vec::new() } else { whole(bytes) },
                });
            }
        }
    }
    let processes = processes(4000, "orders");
    (RawBatch::of(1_700_000_000_000_000_000, 0, processes, &[], &[], &records), spans)
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
    let protocol = std::env::var("BENCH_PROTOCOL").unwrap_or_default();
    let (h2, db, msg) = (protocol == "h2", protocol == "db", protocol == "msg");
    let kinds_env = std::env::var("BENCH_MSG").unwrap_or_default();
    let kinds: Vec<&str> = if kinds_env.is_empty() { MSG_KINDS.to_vec() } else { kinds_env.split(',').collect() };
    // (the spans a messaging batch makes)
    let mut msg_spans = 0;
    let mut batch = |k: u64| match () {
        _ if h2 => h2_batch(k * 10_000),
        _ if db => db_batch(k * 10_000),
        _ if msg => {
            let (b, n) = msg_batch(k * 10_000, &kinds);
            msg_spans = n;
            b
        }
        _ => raw_batch(batch_len, k * 10_000),
    };
    let inputs: Vec<Vec<u8>> = (0..64).map(|k| ipc_schema::encode(&Envelope::new(loader, k + 1, Body::Raw(batch(k)))).unwrap()).collect();
    let me = Producer { component: Component::SpanActor, instance: 8 };

    let mut seq = 0u64;
    // Until `secs` have passed, or exactly `passes` passes over the inputs.
    let mut run = |secs: f64, passes: Option<u64>, t: &mut Transformer, (inbound, ledger): &mut (InboundSeq, Ledger)| {
        let start = Instant::now();
        let cpu0 = cpu_time();
        let (mut events, mut spans_made, mut batches) = (0u64, 0u64, 0u64);
        let mut bytes_out = 0usize;
        let mut pass = 0;
        while passes.map_or(start.elapsed() < Duration::from_secs_f64(secs), |n| pass < n) {
            pass += 1;
            for input in &inputs {
                seq += 1;
                batches += 1;
                let env = ipc_schema::decode(input).expect("decode");
                let Body::Raw(b) = env.body else { unreachable!() };
                let _ = inbound.receive(seq);
                let mut out = Vec::with_capacity(b.event_count());
                let made = t.transform(loader.instance, seq, &b, Instant::now(), &mut out);
                if ledger.made((loader.instance, seq), made.total()) {
                    inbound.done(seq);
                }
                events += (b.event_count() + b.h2_count()) as u64;
                spans_made += made.total() as u64;
                let (spans, comp) = assemble(out);
                for (origin, n) in comp {
                    if ledger.release(origin, n) {
                        inbound.done(origin.1);
                    }
                }
                bytes_out += ipc_schema::encode(&Envelope::new(me, seq, Body::Spans(spans))).expect("encode").len();
            }
        }
        (events, spans_made, batches, start.elapsed(), cpu_time() - cpu0, bytes_out)
    };
    let secs: f64 = std::env::var("BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let passes: Option<u64> = std::env::var("BENCH_PASSES").ok().and_then(|s| s.parse().ok());
    let (_, warm_spans, warm_batches, ..) = run(secs / 5.0, passes.map(|_| 1), &mut t, &mut ledger); // warm up
    let (events, spans, batches, wall, cpu, bytes) = run(secs, passes, &mut t, &mut ledger);
    if db {
        // Every call fed makes one span: a bench whose records the
        // database module stopped reading would measure nothing.
        assert_eq!(warm_spans, warm_batches * DB_CALLS, "database spans in the warm-up");
        assert_eq!(spans, batches * DB_CALLS, "database spans measured");
    }
    if msg {
        // Every call fed makes one span (a bench whose records a protocol
        // module stopped reading would measure nothing).
        assert_eq!(warm_spans, warm_batches * msg_spans, "messaging spans in the warm-up");
        assert_eq!(spans, batches * msg_spans, "messaging spans measured");
    }
    if h2 || db || msg {
        if h2 {
            println!("span-actor transform, HTTP/2 (gRPC unary), batches of 16 connections x 16 calls, one thread:");
        } else if msg {
            println!("span-actor transform, messaging calls, batches of {MSG_CONNS} connections of each of {kinds:?}, one thread:");
        } else {
            println!("span-actor transform, database calls, batches of 8 PostgreSQL + 8 Redis connections x 16 calls, one thread:");
        }
        println!("  spans/s (wall):       {:>12.0}", spans as f64 / wall.as_secs_f64());
        println!("  CPU per span:         {:>12.3} µs", cpu.as_secs_f64() * 1e6 / spans as f64);
        println!("  span bytes per span:  {:>12.1}", bytes as f64 / spans as f64);
        println!("  records measured:     {events:>12}");
        println!("  spans measured:       {spans:>12}");
        return;
    }
    println!("span-actor transform, batches of {batch_len} events, one thread:");
    println!("  events/s (wall):      {:>12.0}", events as f64 / wall.as_secs_f64());
    println!("  CPU per event:        {:>12.3} µs", cpu.as_secs_f64() * 1e6 / events as f64);
    println!("  events/s per CPU-s:   {:>12.0}", events as f64 / cpu.as_secs_f64());
    println!("  span bytes per event: {:>12.1}", bytes as f64 / events as f64);
    println!("  events measured:      {events:>12}");
}
