//! Across protocols: detection, records the kernel mangled, TLS, the
//! counters' labels.

use super::testing::*;
use super::*;

#[test]
fn detect_by_bytes_then_port() {
    assert_eq!(detect(b"", 9092), Some(MsgSystem::Kafka));
    assert_eq!(detect(b"", 1883), Some(MsgSystem::Mqtt));
    assert_eq!(detect(b"", 5672), Some(MsgSystem::Rabbitmq));
    assert_eq!(detect(b"", 4222), Some(MsgSystem::Nats));
    assert_eq!(detect(b"AMQP\x00\x00\x09\x01", 40000), Some(MsgSystem::Rabbitmq));
    assert_eq!(detect(b"CONNECT {\"verbose\":false}\r\n", 40000), Some(MsgSystem::Nats));
    assert_eq!(detect_server_first(b"INFO {\"server_id\":\"x\"}\r\n"), Some(MsgSystem::Nats));
    assert_eq!(detect_server_first(b"INFO"), None);
    assert_eq!([MsgSystem::Rabbitmq.name(), MsgSystem::Nats.name()], ["rabbitmq", "nats"]);
    assert_eq!(detect(b"GET / HTTP/1.1\r\n\r\n", 8080), None);
}

#[test]
fn malformed_records_give_the_connection_up() {
    let mut t = T::new(MsgSystem::Kafka);
    let req = capture(&testdata("kafka_produce_v3.txt")).remove(2).1;
    t.send(&req);
    t.rec(false, &[9, 9, 9]);
    assert_eq!((t.counts.malformed, t.counts.given_up, t.counts.unanswered), (1, 1, 1));
    t.send(&req);
    assert_eq!(t.c.pending(), 0);
}

#[test]
fn tls_connections_read_only_plaintext_records() {
    let mut t = T::new(MsgSystem::Mqtt);
    t.send(&[0x16, 0x03, 0x01, 0x00, 0x05, 1, 0, 0, 0]);
    t.recv(&[0x16, 0x03, 0x03, 0x00, 0x05, 2, 0, 0, 0]);
    assert_eq!(t.counts.ciphertext_records, 2);
    let recs = capture(&testdata("mqtt311_publisher.txt"));
    for (send, b) in &recs {
        t.ts += 10;
        t.c.feed(*send, t.ts, true, &whole(b), &mut t.ops, &mut t.counts);
    }
    assert_eq!(t.ops.len(), 3);
}

#[test]
fn joined_midway_waits_for_a_boundary() {
    let recs = capture(&testdata("mqtt5_publisher.txt"));
    let mut t = T::new(MsgSystem::Mqtt);
    t.c.joined_midway(&mut t.counts);
    // From the QoS 1 PUBLISH on: no CONNECT seen, so no level: no
    // properties read (no link), but the flows pair.
    for (send, b) in &recs[3..] {
        t.rec(*send, &whole(b));
    }
    let names: Vec<_> = t.ops.iter().map(|o| (o.qos, o.links.len(), o.client_id.clone())).collect();
    assert_eq!(names, [(Some(1), 0, None), (Some(2), 0, None)]);
    assert_eq!(t.counts.resync, 2);
}

#[test]
fn labels_cover_every_count_once() {
    let mut all = MsgCounts::default();
    let one = MsgCounts {
        malformed: 1,
        desync: 1,
        resync: 1,
        unanswered: 1,
        unpaired_answers: 1,
        too_many_pending: 1,
        too_large: 1,
        bad_messages: 1,
        other_requests: 1,
        empty_fetches: 1,
        unsupported_versions: 1,
        control_packets: 1,
        empty_gets: 1,
        too_many_channels: 1,
        names_cut: 1,
        links_dropped: 1,
        ciphertext_records: 1,
        given_up: 1,
        calls_lost: 1,
    };
    all.add(&one);
    all.add(&one);
    let labels = all.labelled();
    assert!(labels.iter().all(|(l, v)| *v == 2 && l.starts_with("msg_")));
    let mut names: Vec<_> = labels.iter().map(|(l, _)| *l).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), labels.len());
}

#[test]
fn names_are_bounded_and_kinds_follow_the_conventions() {
    let mut c = MsgCounts::default();
    assert_eq!(name(&[b'a'; 400], &mut c).len(), MAX_NAME);
    assert_eq!(c.names_cut, 1);
    assert_eq!(OpType::Send.kind(), SpanKind::Producer);
    assert_eq!(OpType::Receive.kind(), SpanKind::Consumer);
    assert_eq!(OpType::Process.kind(), SpanKind::Consumer);
    assert_eq!(OpType::Process.name(), "process");
    assert_eq!(OpType::Settle.kind(), SpanKind::Client);
    assert_eq!([OpType::Send.name(), OpType::Receive.name(), OpType::Settle.name()], ["send", "receive", "settle"]);
    assert!(traceparent(b"00-00000000000000000000000000000000-b7ad6b7169203331-01").is_none());
}
