//! The fuzz targets' checks (`fuzz/checks.rs`) replayed over the
//! checked-in corpus (`fuzz/seeds/<target>/`: hand-written hostile inputs
//! and every input a fuzzing run found crashing, kept as regression tests),
//! deterministically and on stable: the suite runs what fuzzing runs,
//! without nightly. FUZZING.md says how to fuzz for real.

#[path = "../fuzz/checks.rs"]
mod checks;

use std::path::PathBuf;

fn seeds(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no seeds in {}", dir.display());
    files.into_iter().map(|p| (p.clone(), std::fs::read(&p).expect("a seed file"))).collect()
}

/// Each seed, then each of its prefixes (a capture can be cut anywhere).
fn replay(target: &str, check: fn(&[u8])) -> usize {
    let mut runs = 0;
    for (path, data) in seeds(target) {
        eprintln!("{}", path.display());
        check(&data);
        for cut in 0..data.len().min(512) {
            check(&data[..cut]);
        }
        runs += 1;
    }
    runs
}

#[test]
fn http1_seeds() {
    assert!(replay("http1", checks::http1) >= 10);
}

#[test]
fn route_redact_seeds() {
    assert!(replay("route_redact", checks::route_redact) >= 2);
}

#[test]
fn config_seeds() {
    assert!(replay("config", checks::config) >= 3);
}

#[test]
fn db_conn_seeds() {
    assert!(replay("db_conn", checks::db_conn) >= 6);
}

#[test]
fn db_secrets_seeds() {
    assert!(replay("db_secrets", checks::db_secrets) >= 8);
}

/// The planted-secret check over 20,000 inputs of a seeded generator (what
/// fuzzing explores, a deterministic sample of it on stable).
#[test]
fn db_secrets_seeded_inputs() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for n in 0..20_000u32 {
        let len = 4 + n as usize % 60;
        let data: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        checks::db_secrets(&data);
    }
}

#[test]
fn ipc_decode_seeds_and_real_messages() {
    assert!(replay("ipc_decode", checks::ipc_decode) >= 4);
    use ipc_schema::{encode, Ack, Body, Component, Envelope, HealthReport, MetricPoint, Producer};
    let me = Producer { component: Component::ProbeLoader, instance: 7 };
    let bodies = [
        Body::Ack(Ack { for_instance: 7, received: 3, upto: 2 }),
        Body::Health(HealthReport {
            component: Component::SpanActor,
            instance: 9,
            points: vec![MetricPoint::counter("x_total", &[("reason", "r")], 3)],
        }),
        Body::Raw(raw_batch()),
    ];
    for body in bodies {
        let bytes = encode(&Envelope::new(me, 1, body)).expect("encodes");
        checks::ipc_decode(&bytes);
        for cut in 0..bytes.len() {
            checks::ipc_decode(&bytes[..cut]);
        }
    }
    // The checked-in seeds of the busy messages are of this schema version
    // (RINGTAIL_WRITE_SEEDS=1 writes them again: the raw batch from
    // raw_batch(), the span batch from the spans the span-actor makes of it).
    let seeds = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/ipc_decode");
    if std::env::var_os("RINGTAIL_WRITE_SEEDS").is_some() {
        let bytes = encode(&Envelope::new(me, 1, Body::Raw(raw_batch()))).expect("encodes");
        std::fs::write(seeds.join("raw_batch"), bytes).expect("write the seed");
        let spans = Producer { component: Component::SpanActor, instance: 8 };
        let bytes = encode(&Envelope::new(spans, 1, Body::Spans(span_batch()))).expect("encodes");
        std::fs::write(seeds.join("span_batch"), bytes).expect("write the seed");
    }
    for seed in ["raw_batch", "span_batch"] {
        let path = seeds.join(seed);
        let bytes = std::fs::read(&path).expect("the seed is checked in");
        assert!(ipc_schema::decode(&bytes).is_ok(), "{} no longer decodes: write it again", path.display());
    }
}

/// The spans the span-actor makes of [`raw_batch`] (those held for their
/// parent included).
fn span_batch() -> ipc_schema::SpanBatch {
    use std::time::{Duration, Instant};
    let registry = runtime_kit::counters::Registry::new(ipc_schema::Component::SpanActor, 1);
    let mut t = span_actor::transform::Transformer::new(&ringtail_config::Settings::default(), &registry);
    let (mut out, now) = (Vec::new(), Instant::now());
    t.transform(7, 1, &raw_batch(), now, &mut out);
    t.expire(now + Duration::from_secs(3600), &mut out);
    assert!(!out.is_empty(), "the raw batch makes spans");
    span_actor::actors::publisher::assemble(out).0
}

/// A raw batch with an HTTP/1 event, an HTTP/2 record and a database
/// record.
fn raw_batch() -> ipc_schema::RawBatch {
    use ipc_schema::{ConnHead, Links, ProcessInfo, RawBatch, RawEvent, RawH2, RawStream, Role, SockAddr};
    let local = SockAddr::from_bytes(true, [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], 8000);
    let peer = SockAddr::from_bytes(false, [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 40_000);
    let ev = RawEvent {
        conn: ConnHead { role: Role::Server, pid: 10, tid: 11, fd: 3, proc_start_ns: 1, conn_id: 1, local, peer, tls: true },
        seq: 1,
        parent: Some((4, 2)),
        start_mono_ns: 1_000,
        end_mono_ns: 2_000,
        status: 200,
        request_len: 30,
        truncated: false,
        orphan: false,
        h2c: false,
        unlinked: false,
        propagated: None,
        kernel_ids: None,
        request: b"GET /x?token=1 HTTP/1.1\r\n\r\n".to_vec(),
    };
    let h2 = RawH2 {
        conn: ConnHead { role: Role::Client, pid: 10, tid: 12, fd: 4, proc_start_ns: 1, conn_id: 2, tls: false, local, peer },
        mono_ns: 3_000,
        send: true,
        start: true,
        close: false,
        upgrade: false,
        caller: None,
        pieces: vec![1, 0, 0, 4, 4, 0, 0, 0, 0, 0],
    };
    // a Redis PING sent while the thread served (conn 1, request 1)
    let db = RawStream {
        conn: ConnHead { conn_id: 5, ..h2.conn },
        mono_ns: 3_000,
        send: true,
        start: true,
        close: false,
        links: Links { parent: Some((1, 1)), unlinked: false },
        pieces: [&[2, 14, 0][..], b"*1\r\n$4\r\nPING\r\n"].concat(),
    };
    let process = ProcessInfo {
        pid: 10,
        proc_start_ns: 1,
        comm: "srv".into(),
        exe_name: None,
        exe_path: Some("/usr/bin/srv".into()),
        env_service_name: Some("shop".into()),
        env_resource_attributes: None,
        container_id: Some("3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a".into()),
    };
    // a client request with the traceparent the kernel wrote
    let propagated = RawEvent {
        conn: ConnHead { role: Role::Client, conn_id: 3, tls: false, ..ev.conn },
        parent: None,
        propagated: Some((0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c, 0xb7ad_6b71_6920_3331)),
        ..ev.clone()
    };
    RawBatch::of(1_700_000_000_000_000_000, 9, vec![process], &[ev, propagated], &[h2], &[db])
}

#[test]
fn kafka_conn_seeds() {
    assert!(replay("kafka_conn", checks::kafka_conn) >= 5);
}

#[test]
fn mqtt_conn_seeds() {
    assert!(replay("mqtt_conn", checks::mqtt_conn) >= 5);
}

#[test]
fn amqp_conn_seeds() {
    assert!(replay("amqp_conn", checks::amqp_conn) >= 5);
}

#[test]
fn nats_conn_seeds() {
    assert!(replay("nats_conn", checks::nats_conn) >= 5);
}
