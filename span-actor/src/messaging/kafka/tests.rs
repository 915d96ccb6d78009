//! Kafka: conversations kafka-python 3.0.12 had with the Tansu 0.6
//! broker (`../testdata/kafka_*.txt`: Produce v3/v6/v9, Fetch v5/v8/v12,
//! OffsetCommit v8, Metadata, group housekeeping), the end-to-end tests'
//! clients (kafka-python, confluent-kafka, aiokafka: `../testdata/e2e_*`),
//! librdkafka's and aiokafka's batches (`kafka_{confluent,aiokafka}_*`),
//! then what kafka-python could not make Tansu send (topic ids, errors,
//! `acks=0`) built by hand, then lost and hostile bytes.

use super::*;
use crate::messaging::testing::*;
use crate::messaging::MsgConn;

fn run(file: &str) -> T {
    replayed(MsgSystem::Kafka, file)
}

/// The traceparent kafka-python put in the records' headers.
const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

// ---------------------------------------------------------------- real conversations

#[test]
fn produce_v9_three_sends_with_traceparent_headers() {
    // ApiVersions v4, InitProducerId v4, then 3 × Produce v9 (flexible).
    let t = run("kafka_produce_v9.txt");
    assert_eq!(
        briefs(&t),
        [
            "kafka/send send orders p0 o0 n1 l1 e- q- crt-producer 1050..1060",
            "kafka/send send orders p0 o1 n1 l1 e- q- crt-producer 1070..1080",
            "kafka/send send orders p0 o2 n1 l1 e- q- crt-producer 1090..1100",
        ]
    );
    assert_eq!(t.ops[0].links[0], crate::ids::parse_traceparent(TP).unwrap());
    assert_eq!((t.ops[0].send_bytes, t.ops[0].recv_bytes), (237, 57));
    assert_eq!(t.counts, MsgCounts { other_requests: 2, ..MsgCounts::default() });
}

#[test]
fn produce_v9_gzip_batch_counted_from_its_header() {
    // Four records in one gzip batch: counted without decompressing; the
    // headers inside are not read (no link).
    let t = run("kafka_produce_v9_gzip.txt");
    assert_eq!(briefs(&t), ["kafka/send send orders p0 o3 n4 l0 e- q- crt-gzip 1050..1060"]);
}

#[test]
fn fetch_v12_one_poll_with_records_the_empty_ones_counted() {
    // ListOffsets v9, then Fetch v12 (flexible): the first answer carries
    // 7 records in 4 batches (3 plain with traceparent, 1 gzip of 4); six
    // long polls come back empty; a Metadata v12 in between.
    let t = run("kafka_fetch_v12.txt");
    assert_eq!(briefs(&t), ["kafka/receive poll orders p0 o0 n7 l3 e- q- crt-consumer 1050..1060"]);
    assert_eq!(t.counts, MsgCounts { other_requests: 3, empty_fetches: 6, ..MsgCounts::default() });
}

#[test]
fn older_versions_produce_v3_v6_fetch_v5_v8() {
    // kafka-python with api_version=(0, 11) and (2, 0).
    assert_eq!(
        briefs(&run("kafka_produce_v3.txt")),
        ["kafka/send send orders p0 o14 n1 l1 e- q- crt-old 1030..1040", "kafka/send send orders p0 o15 n1 l1 e- q- crt-old 1050..1060"]
    );
    assert_eq!(
        briefs(&run("kafka_produce_v6.txt")),
        ["kafka/send send orders p0 o16 n1 l1 e- q- crt-old 1030..1040", "kafka/send send orders p0 o17 n1 l1 e- q- crt-old 1050..1060"]
    );
    let t = run("kafka_fetch_v5.txt");
    assert_eq!(briefs(&t), ["kafka/receive poll orders p0 o0 n16 l8 e- q- crt-oldc 1050..1060"]);
    assert_eq!(t.counts.empty_fetches, 4);
    assert_eq!(briefs(&run("kafka_fetch_v8.txt")), ["kafka/receive poll orders p0 o0 n18 l10 e- q- crt-oldc 1050..1060"]);
}

#[test]
fn librdkafka_and_aiokafka_batches_plain_and_compressed() {
    // capture/kafka_batches.py: four records lingered into one batch, each
    // with a traceparent, from confluent-kafka 2.16.1 (librdkafka 2.16.0:
    // Produce v10, its GetTelemetrySubscriptions beside it) and aiokafka
    // 0.14.0 (Produce v7); then the same compressed (zstd, gzip): counted
    // from the batch header, the headers inside not read.
    for (file, op) in [
        ("kafka_confluent_produce_v10_batch.txt", "kafka/send send orders p0 o1 n4 l4 e- q- crt-batch-none 1040..1060"),
        ("kafka_confluent_produce_v10_zstd.txt", "kafka/send send orders p0 o5 n4 l0 e- q- crt-batch-zstd 1030..1050"),
        ("kafka_aiokafka_produce_v7_batch.txt", "kafka/send send orders p0 o9 n4 l4 e- q- crt-batch-none 1030..1040"),
        ("kafka_aiokafka_produce_v7_gzip.txt", "kafka/send send orders p0 o13 n4 l0 e- q- crt-batch-gzip 1030..1040"),
    ] {
        let t = run(file);
        assert_eq!(briefs(&t), [op], "{file}");
        assert!(t.ops[0].links.iter().all(|l| *l == crate::ids::parse_traceparent(TP).unwrap()));
        // ApiVersions (and librdkafka's GetTelemetrySubscriptions).
        let other = if file.contains("confluent") { 2 } else { 1 };
        assert_eq!(t.counts, MsgCounts { other_requests: other, ..MsgCounts::default() }, "{file}");
    }
}

#[test]
fn housekeeping_is_paired_and_counted_not_an_op() {
    let t = run("kafka_metadata_v12_create_topics.txt");
    assert!(t.ops.is_empty());
    assert_eq!(t.counts, MsgCounts { other_requests: 3, ..MsgCounts::default() });
    // JoinGroup's second try was cut off by the client's close.
    let t = run("kafka_join_group_v7.txt");
    assert!(t.ops.is_empty());
    assert_eq!(t.counts, MsgCounts { other_requests: 4, unanswered: 1, ..MsgCounts::default() });
    let t = run("kafka_find_coordinator_v6.txt");
    assert!(t.ops.is_empty());
    assert_eq!(t.counts.bad_messages, 0);
}

#[test]
fn offset_commit_v8_is_a_settle_with_its_group() {
    // kafka-python's commit() of a manually assigned partition (generation
    // -1), with commit metadata that must not be kept; then OffsetFetch v8
    // (housekeeping).
    let t = run("kafka_offset_commit_v8.txt");
    assert_eq!(briefs(&t), ["kafka/settle commit orders p0 o0 n- l0 e- q- crt-commit 1030..1040"]);
    assert_eq!(t.ops[0].consumer_group.as_deref(), Some("billing"));
    assert_eq!(t.ops[0].op_type.map(|o| o.kind()), Some(crate::messaging::SpanKind::Client));
    assert_eq!(t.counts, MsgCounts { other_requests: 2, ..MsgCounts::default() });
    // The same commit refused.
    let recs = capture(&testdata("kafka_offset_commit_v8.txt"));
    let mut resp = recs[3].1.clone();
    assert_eq!(&resp[26..28], &[0, 0]);
    resp[27] = 25;
    let mut t = T::new(MsgSystem::Kafka);
    t.send(&recs[2].1);
    t.recv(&resp);
    assert_eq!(t.ops[0].error_type, Some("UNKNOWN_MEMBER_ID"));
}

#[test]
fn detects_kafka_by_its_first_request() {
    let first = capture(&testdata("kafka_produce_v9.txt")).remove(0).1;
    assert!(is_request_start(&first));
    assert_eq!(crate::messaging::detect(&first, 40000), Some(MsgSystem::Kafka));
    assert!(!is_request_start(b"GET / HTTP/1.1\r\n\r\n"));
    assert!(!is_request_start(&first[..first.len() - 1]));
}

// ---------------------------------------------------------------- built by hand

/// The captured v3 conversation's records.
fn v3() -> Vec<(bool, Vec<u8>)> {
    capture(&testdata("kafka_produce_v3.txt"))
}

#[test]
fn acks_0_ends_at_its_send_and_waits_for_nothing() {
    let mut req = v3()[2].1.clone();
    // len, api, version, corr, client id "rt-old", null transactional id:
    // then acks.
    assert_eq!(&req[20..24], &[0xff, 0xff, 0xff, 0xff]);
    req[22..24].copy_from_slice(&0i16.to_be_bytes());
    let mut t = T::new(MsgSystem::Kafka);
    let ts = t.send(&req);
    assert_eq!(briefs(&t), [format!("kafka/send send orders p0 o- n1 l1 e- q- crt-old {ts}..{ts}")]);
    assert_eq!(t.c.pending(), 0);
}

#[test]
fn produce_error_is_its_kafka_name() {
    let rs = v3();
    let mut resp = rs[3].1.clone();
    // len, corr, topics: 1, "orders", partitions: 1, index 0, error.
    assert_eq!(&resp[28..30], &[0, 0]);
    resp[29] = 3;
    let mut t = T::new(MsgSystem::Kafka);
    t.send(&rs[2].1);
    t.recv(&resp);
    assert_eq!(t.ops[0].error_type, Some("UNKNOWN_TOPIC_OR_PARTITION"));
    assert_eq!(error_name(-1), Some("UNKNOWN_SERVER_ERROR"));
    assert_eq!(error_name(999), Some("_OTHER"));
    assert_eq!(error_name(0), None);
}

/// Flexible encoders for hand-built messages.
fn uv(out: &mut Vec<u8>, mut n: u64) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn cstr(out: &mut Vec<u8>, s: &[u8]) {
    uv(out, s.len() as u64 + 1);
    out.extend_from_slice(s);
}

fn frame(body: Vec<u8>) -> Vec<u8> {
    let mut v = (body.len() as i32).to_be_bytes().to_vec();
    v.extend(body);
    v
}

fn request(api: i16, version: i16, corr: i32, body: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(api.to_be_bytes());
    b.extend(version.to_be_bytes());
    b.extend(corr.to_be_bytes());
    b.extend(2i16.to_be_bytes());
    b.extend(b"me");
    b.push(0); // header tags
    b.extend(body);
    frame(b)
}

const ID: [u8; 16] = [0xab; 16];

/// A Metadata v12 answer naming topic [`ID`] "payments".
fn metadata_v12(corr: i32) -> Vec<u8> {
    let mut b = corr.to_be_bytes().to_vec();
    b.push(0); // header tags
    b.extend(0i32.to_be_bytes()); // throttle
    uv(&mut b, 2); // one broker
    b.extend(1i32.to_be_bytes());
    cstr(&mut b, b"localhost");
    b.extend(9092i32.to_be_bytes());
    b.push(0); // rack null
    b.push(0); // tags
    b.push(0); // cluster id null
    b.extend(1i32.to_be_bytes()); // controller
    uv(&mut b, 2); // one topic
    b.extend(0i16.to_be_bytes());
    cstr(&mut b, b"payments");
    b.extend(ID);
    b.push(0); // internal
    uv(&mut b, 2); // one partition
    b.extend([0, 0, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 0]);
    for _ in 0..3 {
        uv(&mut b, 2);
        b.extend(1i32.to_be_bytes());
    }
    b.push(0);
    b.extend(0i32.to_be_bytes()); // authorized operations
    b.push(0);
    b.push(0);
    frame(b)
}

/// A zigzag varint.
fn zz(out: &mut Vec<u8>, n: i64) {
    uv(out, ((n << 1) ^ (n >> 63)) as u64);
}

/// One uncompressed record batch of `n` records with a traceparent
/// header on each (and a secret one).
fn batch(base: i64, n: i32) -> Vec<u8> {
    let mut records = Vec::new();
    for i in 0..n {
        let mut r = vec![0u8, 0]; // attributes, ts delta
        zz(&mut r, i64::from(i)); // offset delta
                                  // key, value
        for f in [&b"secret-key"[..], b"secret-payload"] {
            zz(&mut r, f.len() as i64);
            r.extend(f);
        }
        zz(&mut r, 2); // headers
        for (k, v) in [(&b"traceparent"[..], TP.as_bytes()), (b"secret-hdr", b"secret-hval")] {
            zz(&mut r, k.len() as i64);
            r.extend(k);
            zz(&mut r, v.len() as i64);
            r.extend(v);
        }
        zz(&mut records, r.len() as i64);
        records.extend(r);
    }
    let mut b = base.to_be_bytes().to_vec();
    let len = 49 + records.len();
    b.extend((len as i32).to_be_bytes());
    b.extend(0i32.to_be_bytes()); // leader epoch
    b.push(2);
    b.extend([0; 4]); // crc
    b.extend(0i16.to_be_bytes()); // attributes: none
    b.extend((n - 1).to_be_bytes());
    b.extend([0; 8 + 8 + 8 + 2 + 4]);
    b.extend(n.to_be_bytes());
    b.extend(records);
    b
}

/// A Fetch v13 answer: topic [`ID`], partition 2, `data` as records.
fn fetch_v13(corr: i32, data: &[u8], error: i16) -> Vec<u8> {
    let mut b = corr.to_be_bytes().to_vec();
    b.push(0);
    b.extend(0i32.to_be_bytes()); // throttle
    b.extend(0i16.to_be_bytes()); // error
    b.extend(7i32.to_be_bytes()); // session
    uv(&mut b, 2);
    b.extend(ID);
    uv(&mut b, 2);
    b.extend(2i32.to_be_bytes());
    b.extend(error.to_be_bytes());
    b.extend([0; 24]); // watermarks
    b.push(0); // aborted: null
    b.extend((-1i32).to_be_bytes()); // preferred replica
    uv(&mut b, data.len() as u64 + 1);
    b.extend(data);
    b.push(0);
    b.push(0);
    b.push(0);
    frame(b)
}

#[test]
fn fetch_v13_topic_ids_named_by_metadata_else_hex() {
    let mut t = T::new(MsgSystem::Kafka);
    t.send(&request(FETCH, 13, 1, &[0; 20]));
    let data = [batch(40, 2), batch(42, 1)].concat();
    t.recv(&fetch_v13(1, &data, 0));
    t.send(&request(METADATA, 12, 2, &[]));
    t.recv(&metadata_v12(2));
    t.send(&request(FETCH, 13, 3, &[0; 20]));
    t.recv(&fetch_v13(3, &batch(43, 1), 0));
    assert_eq!(
        briefs(&t),
        [
            "kafka/receive poll abababababababababababababababab p2 o40 n3 l3 e- q- cme 1010..1020",
            "kafka/receive poll payments p2 o43 n1 l1 e- q- cme 1050..1060",
        ]
    );
    assert_no_secret(&t.ops);
}

#[test]
fn fetch_partial_last_batch_is_not_counted_and_errors_are_ops() {
    let mut t = T::new(MsgSystem::Kafka);
    t.send(&request(FETCH, 13, 1, &[]));
    let mut data = batch(0, 2);
    data.extend(&batch(2, 5)[..70]); // the broker's cut at max_bytes
    t.recv(&fetch_v13(1, &data, 0));
    t.send(&request(FETCH, 13, 2, &[]));
    t.recv(&fetch_v13(2, &[], 1));
    assert_eq!(
        briefs(&t),
        [
            "kafka/receive poll abababababababababababababababab p2 o0 n2 l2 e- q- cme 1010..1020",
            "kafka/receive poll - p- o- n0 l0 eOFFSET_OUT_OF_RANGE q- cme 1030..1040",
        ]
    );
}

// ---------------------------------------------------------------- lost and hostile bytes

#[test]
fn record_values_in_a_lost_region_keep_the_call() {
    // A 200 KiB value: the kernel captures the head and the tail.
    let rs = v3();
    let req = rs[2].1.clone();
    let mut big = req.clone();
    let value_at = big.windows(14).position(|w| w == b"secret-payload").unwrap();
    big.splice(value_at..value_at, std::iter::repeat_n(b'v', 200_000));
    let fix = |b: &mut Vec<u8>, at: usize, by: i32| {
        let v = i32::from_be_bytes(b[at..at + 4].try_into().unwrap()) + by;
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    };
    // The frame, the records field and the batch's length grow (the
    // record's varint length is stale: its headers are not reached).
    fix(&mut big, 0, 200_000);
    let records_at = 4 + 2 + 2 + 4 + 2 + 6 + 2 + 2 + 4 + 4 + 2 + 6 + 4 + 4;
    fix(&mut big, records_at, 200_000);
    fix(&mut big, records_at + 4 + 8, 200_000);
    let mut t = T::new(MsgSystem::Kafka);
    t.rec(true, &captured(&big, 16_384, 256));
    t.recv(&rs[3].1);
    assert_eq!(briefs(&t), ["kafka/send send orders p0 o14 n1 l0 e- q- crt-old 1010..1020"]);
    assert_eq!(t.counts.desync, 0);
    assert!(t.c.held_bytes() < 200_000);
}

#[test]
fn a_header_in_a_lost_region_desyncs_until_a_plausible_request() {
    let rs = v3();
    let mut t = T::new(MsgSystem::Kafka);
    let mut lost = Vec::new();
    crate::db::pieces::encode(&mut lost, crate::db::pieces::Piece::Lost(100));
    t.rec(true, &lost);
    assert_eq!(t.counts.desync, 1);
    // A record that starts mid-request is not a boundary...
    t.send(&rs[2].1[7..]);
    assert_eq!(t.counts.resync, 0);
    // ...one that starts with a whole request is.
    t.send(&rs[2].1);
    assert_eq!(t.counts.resync, 1);
    t.recv(&rs[3].1);
    assert_eq!(t.ops.len(), 1);
}

#[test]
fn recv_resyncs_only_at_a_pending_correlation_id() {
    let rs = v3();
    let mut t = T::new(MsgSystem::Kafka);
    t.send(&rs[0].1); // ApiVersions #1
    t.send(&rs[2].1); // Produce #2
    t.send(&rs[4].1); // Produce #3
    let mut lost = Vec::new();
    crate::db::pieces::encode(&mut lost, crate::db::pieces::Piece::Lost(400));
    t.rec(false, &lost);
    assert_eq!(t.counts.desync, 1);
    // The tail of #2's answer: no boundary.
    t.recv(&rs[3].1[10..]);
    assert_eq!(t.counts.resync, 0);
    // #3's answer: a boundary; #1 and #2 unanswered.
    t.recv(&rs[5].1);
    assert_eq!(t.counts.resync, 1);
    assert_eq!(t.counts.unanswered, 2);
    assert_eq!(briefs(&t), ["kafka/send send orders p0 o15 n1 l1 e- q- crt-old 1030..1060"]);
}

#[test]
fn a_gap_forgets_the_pending_and_loses_both_places() {
    let rs = v3();
    let mut t = T::new(MsgSystem::Kafka);
    t.send(&rs[2].1);
    let mut rec = whole(&rs[3].1);
    crate::db::pieces::encode_gap(&mut rec, crate::db::pieces::Gap { recv: 0, send: 50 });
    t.rec(false, &rec);
    assert_eq!(t.counts.calls_lost, 1);
    assert!(t.ops.is_empty());
    t.send(&rs[4].1);
    t.recv(&rs[5].1);
    assert_eq!(t.ops.len(), 1);
    assert_eq!(t.counts.resync, 2);
}

#[test]
fn hostile_lengths_do_not_allocate_and_answers_unpaired_are_counted() {
    let mut t = T::new(MsgSystem::Kafka);
    // A 2 GiB request and a 2 GiB records field.
    let mut huge = (i32::MAX).to_be_bytes().to_vec();
    huge.extend(&v3()[2].1[4..]);
    t.send(&huge);
    for _ in 0..40 {
        t.send(&[0x55; 60_000]);
        assert!(t.c.held_bytes() < 300_000);
    }
    assert_eq!(t.counts.too_large, 1);
    let mut t = T::new(MsgSystem::Kafka);
    t.recv(&v3()[3].1);
    assert_eq!(t.counts.unpaired_answers, 1);
    // Negative lengths are not frames.
    t.send(&(-5i32).to_be_bytes());
    assert_eq!(t.counts.desync, 1);
}

#[test]
fn pending_requests_are_bounded() {
    let mut t = T::new(MsgSystem::Kafka);
    for i in 0..(MAX_PENDING as i32 + 44) {
        t.send(&request(18, 3, i, &[]));
    }
    assert_eq!(t.c.pending(), MAX_PENDING);
    assert_eq!((t.counts.too_many_pending, t.counts.unanswered), (44, 44));
}

#[test]
fn every_cut_of_every_capture_is_safe() {
    for f in [
        "kafka_produce_v9.txt",
        "kafka_fetch_v12.txt",
        "kafka_fetch_v8.txt",
        "kafka_produce_v3.txt",
        "kafka_confluent_produce_v10_batch.txt",
        "kafka_aiokafka_produce_v7_gzip.txt",
    ] {
        for (send, b) in capture(&testdata(f)) {
            for cut in 0..b.len() {
                let mut c = MsgConn::new(MsgSystem::Kafka);
                let (mut ops, mut counts) = (Vec::new(), MsgCounts::default());
                c.feed_ops(send, 1, false, &whole(&b[..cut]), &mut ops, &mut counts);
                c.feed_ops(send, 2, false, &captured(&b, cut, 3), &mut ops, &mut counts);
                c.close(&mut counts);
            }
        }
    }
}

#[test]
fn random_bytes_never_panic_and_stay_bounded() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let seeds: Vec<_> = capture(&testdata("kafka_fetch_v12.txt"));
    for _ in 0..300 {
        let mut t = T::new(MsgSystem::Kafka);
        for _ in 0..20 {
            let (send, mut b) = seeds[rng.random_range(0..seeds.len())].clone();
            for _ in 0..rng.random_range(0..4) {
                let i = rng.random_range(0..b.len());
                b[i] = rng.random();
            }
            if rng.random_bool(0.2) {
                t.rec(send, &captured(&b, rng.random_range(0..b.len()), 4));
            } else {
                t.rec(send, &whole(&b));
            }
        }
        assert!(t.c.pending() <= MAX_PENDING);
        for op in &t.ops {
            assert!(op.start_ns <= op.end_ns);
            assert!(op.destination.as_ref().is_none_or(|d| d.len() <= crate::messaging::MAX_NAME));
        }
    }
}

// ---------------------------------------------------------------- the end-to-end test's clients

/// `tests/fixtures/kafka_client.py produce PORT orders 5` and `consume
/// PORT orders 5 billing` (kafka-python 3.0.12, Tansu 0.6.0): every
/// connection of each run, as tests/tests/messaging.rs traces them.
#[test]
fn e2e_clients_producer_and_consumer_group() {
    // The producer: the admin's bootstrap and CreateTopics connections,
    // the producer's bootstrap, then its node connection: ApiVersions and
    // five Produce v9 (acks=1), each one record with a traceparent.
    let runs = replayed_run(MsgSystem::Kafka, "e2e_kafka_produce.txt");
    let ops: Vec<Vec<String>> = runs.iter().map(briefs).collect();
    assert_eq!(ops[..3], [Vec::<String>::new(), vec![], vec![]]);
    assert_eq!(
        ops[3],
        [
            "kafka/send send orders p0 o0 n1 l1 e- q- crt-producer 1030..1040",
            "kafka/send send orders p0 o1 n1 l1 e- q- crt-producer 1050..1060",
            "kafka/send send orders p0 o2 n1 l1 e- q- crt-producer 1070..1080",
            "kafka/send send orders p0 o3 n1 l1 e- q- crt-producer 1090..1100",
            "kafka/send send orders p0 o4 n1 l1 e- q- crt-producer 1110..1120",
        ]
    );
    let tp = crate::ids::parse_traceparent(TP).unwrap();
    assert!(runs[3].ops.iter().all(|o| o.links == [tp]));
    let other: Vec<u64> = runs.iter().map(|t| t.counts.other_requests).collect();
    assert_eq!(other, [2, 3, 2, 1]);
    assert!(runs.iter().all(|t| MsgCounts { other_requests: 0, ..t.counts } == MsgCounts::default()));

    // The consumer: bootstrap; the node connection (ApiVersions,
    // Metadata, ListOffsets, one Fetch v12 with the five records); the
    // group coordinator's (FindCoordinator, JoinGroup twice, SyncGroup,
    // OffsetFetch, one OffsetCommit of offset 5, LeaveGroup). The poll
    // carries no group: a Fetch does not name it.
    let runs = replayed_run(MsgSystem::Kafka, "e2e_kafka_consume.txt");
    let ops: Vec<Vec<String>> = runs.iter().map(briefs).collect();
    assert_eq!(
        ops,
        [
            vec![],
            vec!["kafka/receive poll orders p0 o0 n5 l5 e- q- crt-consumer 1110..1120".to_owned()],
            vec!["kafka/settle commit orders p0 o5 n- l0 e- q- crt-consumer 1110..1120".to_owned()],
        ]
    );
    assert!(runs[1].ops[0].links.iter().all(|l| *l == tp));
    assert_eq!((runs[1].ops[0].consumer_group.as_deref(), runs[2].ops[0].consumer_group.as_deref()), (None, Some("billing")));
    // The coordinator's connection says whose member the client is: its
    // JoinGroup (twice), SyncGroup and LeaveGroup, as notes (no call),
    // which name the poll's group (`messaging::groups`).
    let notes: Vec<_> = runs[2].notes.iter().map(|n| (n.membership, n.consumer_group.as_deref(), n.client_id.as_deref())).collect();
    let (member, left) = (Some(Membership::Member), Some(Membership::Left));
    let c = Some("rt-consumer");
    let b = Some("billing");
    assert_eq!(notes, [(member, b, c), (member, b, c), (member, b, c), (left, b, c)]);
    assert!(runs[0].notes.is_empty() && runs[1].notes.is_empty());
    let other: Vec<u64> = runs.iter().map(|t| t.counts.other_requests).collect();
    assert_eq!(other, [2, 5, 6]);
    assert!(runs.iter().all(|t| MsgCounts { other_requests: 0, ..t.counts } == MsgCounts::default()));
}

#[test]
fn offsets_name_each_message_on_both_sides_and_link_them() {
    use crate::messaging::through::{Producer, Producers};
    let r = |base, count| OffsetRange { topic: "orders".into(), partition: 0, base, count };
    let produced = replayed_run(MsgSystem::Kafka, "e2e_kafka_produce.txt");
    let sent: Vec<&[OffsetRange]> = produced[3].ops.iter().map(|o| &o.ranges[..]).collect();
    assert_eq!(sent, [[r(0, 1)], [r(1, 1)], [r(2, 1)], [r(3, 1)], [r(4, 1)]]);
    let consumed = replayed_run(MsgSystem::Kafka, "e2e_kafka_consume.txt");
    let poll = &consumed[1].ops[0];
    assert_eq!(poll.ranges, [r(0, 5)]);
    // (a commit names an offset, no message)
    assert!(consumed[2].ops[0].ranges.is_empty());
    let broker = ipc_schema::SockAddr { v6: false, ip: 0x7f00_0001 << 96, port: 9092 };
    let mut index = Producers::default();
    for (i, op) in produced[3].ops.iter().enumerate() {
        index.sent(broker, &op.ranges, Producer { key: i, span_id: 10 + i as u64 });
    }
    let found = index.find(broker, &poll.ranges);
    let mut keys: Vec<usize> = found.producers.iter().map(|p| p.key).collect();
    keys.sort_unstable();
    assert_eq!((keys, found.unknown, found.may_come), (vec![0, 1, 2, 3, 4], 0, false));

    // A fetch of batches 0-2 plain and 3-6 gzip: one range; a produce of
    // a gzip batch of four: four offsets.
    assert_eq!(run("kafka_fetch_v12.txt").ops[0].ranges, [r(0, 7)]);
    assert_eq!(run("kafka_produce_v9_gzip.txt").ops[0].ranges, [r(3, 4)]);
}

#[test]
fn offsets_unknown_without_an_answer_or_of_a_failed_write() {
    let rs = v3();
    // acks=0: no answer, no offset.
    let mut req = rs[2].1.clone();
    req[22..24].copy_from_slice(&0i16.to_be_bytes());
    let mut t = T::new(MsgSystem::Kafka);
    t.send(&req);
    assert!(t.ops[0].ranges.is_empty());
    // An error for the partition: no offset.
    let mut resp = rs[3].1.clone();
    resp[29] = 3;
    let mut t = T::new(MsgSystem::Kafka);
    t.send(&rs[2].1);
    t.recv(&resp);
    assert!(t.ops[0].ranges.is_empty());
    // Its answer: the offset.
    let mut t = T::new(MsgSystem::Kafka);
    t.send(&rs[2].1);
    t.recv(&rs[3].1);
    assert_eq!(t.ops[0].ranges, [OffsetRange { topic: "orders".into(), partition: 0, base: 14, count: 1 }]);
}

/// A Kafka client fixture's recorded run against Tansu
/// (`e2e_{client}_produce.txt`, `e2e_{client}_consume.txt`), as
/// tests/tests/messaging.rs traces it: the producer's connections (the
/// admin's bootstrap and CreateTopics ones, its own bootstrap, then its
/// node's: five sends of one record each with the traceparent, their
/// times `sends`), their other requests `other`; the consumer's
/// (bootstrap; the node's: one poll of the five records at `poll`; the
/// group coordinator's: one commit of offset 5 in group `billing` at
/// `commit`), their other requests and empty fetches `counted`; nothing
/// else counted.
fn client_run(client: &str, sends: [(u64, u64); 5], other: [u64; 4], poll: (u64, u64), commit: (u64, u64), counted: [(u64, u64); 3]) {
    let runs = replayed_run(MsgSystem::Kafka, &format!("e2e_{client}_produce.txt"));
    let ops: Vec<Vec<String>> = runs.iter().map(briefs).collect();
    assert_eq!(ops[..3], [Vec::<String>::new(), vec![], vec![]]);
    let want: Vec<String> =
        sends.iter().enumerate().map(|(i, (a, b))| format!("kafka/send send orders p0 o{i} n1 l1 e- q- crt-producer {a}..{b}")).collect();
    assert_eq!(ops[3], want);
    let tp = crate::ids::parse_traceparent(TP).unwrap();
    assert!(runs[3].ops.iter().all(|o| o.links == [tp]));
    let got: Vec<u64> = runs.iter().map(|t| t.counts.other_requests).collect();
    assert_eq!(got, other);
    assert!(runs.iter().all(|t| MsgCounts { other_requests: 0, ..t.counts } == MsgCounts::default()));

    let runs = replayed_run(MsgSystem::Kafka, &format!("e2e_{client}_consume.txt"));
    let ops: Vec<Vec<String>> = runs.iter().map(briefs).collect();
    assert_eq!(
        ops,
        [
            vec![],
            vec![format!("kafka/receive poll orders p0 o0 n5 l5 e- q- crt-consumer {}..{}", poll.0, poll.1)],
            vec![format!("kafka/settle commit orders p0 o5 n- l0 e- q- crt-consumer {}..{}", commit.0, commit.1)],
        ]
    );
    assert!(runs[1].ops[0].links.iter().all(|l| *l == tp));
    assert_eq!(runs[2].ops[0].consumer_group.as_deref(), Some("billing"));
    // (the coordinator's JoinGroup and SyncGroup name the poll's group)
    assert!(runs[2].notes.iter().any(|n| n.membership == Some(Membership::Member) && n.consumer_group.as_deref() == Some("billing")));
    let got: Vec<(u64, u64)> = runs.iter().map(|t| (t.counts.other_requests, t.counts.empty_fetches)).collect();
    assert_eq!(got, counted);
    assert!(runs.iter().all(|t| MsgCounts { other_requests: 0, empty_fetches: 0, ..t.counts } == MsgCounts::default()));
}

/// confluent-kafka 2.16.1 (its wheel's librdkafka 2.16.0): ApiVersions v3,
/// Produce v10, Fetch v16 naming its topic by id (named by the Metadata
/// v12 before it on the connection), OffsetCommit v9, and
/// GetTelemetrySubscriptions (API 71) beside them; the producer's node
/// connection has one between its first two sends; the consumer's node
/// connection FindCoordinator twice, ListOffsets, one empty long poll, the
/// coordinator's JoinGroup twice, SyncGroup, Heartbeat, OffsetFetch,
/// LeaveGroup.
#[test]
fn e2e_clients_confluent_kafka_producer_and_consumer_group() {
    let sends = [(1030, 1050), (1070, 1080), (1090, 1100), (1110, 1120), (1130, 1140)];
    client_run("confluent_kafka", sends, [2, 4, 2, 2], (1120, 1130), (1170, 1180), [(3, 0), (7, 1), (9, 0)]);
}

/// aiokafka 0.14.0: ApiVersions v0, Metadata v5, CreateTopics v3, Produce
/// v7, ListOffsets v3, Fetch v11 (and one empty long poll), JoinGroup
/// twice, SyncGroup, OffsetFetch, OffsetCommit v3.
#[test]
fn e2e_clients_aiokafka_producer_and_consumer_group() {
    let sends = [(1030, 1040), (1050, 1060), (1070, 1080), (1090, 1100), (1110, 1120)];
    client_run("aiokafka", sends, [2, 2, 2, 1], (1080, 1090), (1110, 1120), [(2, 0), (4, 1), (5, 0)]);
}
