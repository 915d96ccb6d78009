//! Across protocols: detection, records the kernel mangled, TLS, the
//! counters' labels.

use super::testing::*;
use super::*;
use crate::operation::{Addrs, Conn, SpanParts};
use ipc_schema::{SpanLink, Text};

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
        t.c.feed_ops(*send, t.ts, true, &whole(b), &mut t.ops, &mut t.counts);
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
        ranges_dropped: 1,
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

// ---------------------------------------------------------------- judge

/// A client's connection to a broker at 10.0.0.9:`port`.
fn conn(port: u16) -> Conn {
    let v4 = |a: [u8; 4], port| ipc_schema::SockAddr::from_bytes(false, [a[0], a[1], a[2], a[3], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], port);
    Conn { id: 1, pid: 2, proc_start_ns: 3, local: v4([10, 0, 0, 1], 40000), peer: v4([10, 0, 0, 9], port), tls: false }
}

/// The ops of a testdata conversation.
fn ops(system: MsgSystem, file: &str) -> Vec<MsgOp> {
    let mut t = T::new(system);
    t.replay(&testdata(file));
    t.ops
}

/// The span parts of each op, in one line: kind, name, links, then the
/// call's fields that are set.
fn judged(system: MsgSystem, file: &str, port: u16) -> Vec<SpanParts> {
    let mut addrs = Addrs::default();
    ops(system, file).into_iter().map(|op| judge(op, &conn(port), &mut addrs)).collect()
}

fn msg(p: &SpanParts) -> &ipc_schema::MsgCall<Text> {
    p.call.messaging().expect("a messaging call")
}

#[test]
fn judge_kafka_sends_are_producer_spans_linked_to_their_records() {
    let parts = judged(MsgSystem::Kafka, "kafka_produce_v9.txt", 9092);
    assert_eq!(parts.len(), 3);
    let p = &parts[1];
    assert_eq!((p.kind, &*p.name, p.error), (Some(SpanKind::Producer), "send orders", false));
    assert_eq!((p.server_address.as_deref(), p.server_port, &*p.peer_address), (Some("10.0.0.9"), 9092, "10.0.0.9"));
    let tp = crate::ids::parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").unwrap();
    assert_eq!(p.links, [SpanLink { trace_id: tp.trace_id, span_id: tp.span_id, trace_flags: 1 }]);
    let c = msg(p);
    assert_eq!((&*c.system, c.operation_type.as_deref(), &*c.operation_name), ("kafka", Some("send"), "send"));
    assert_eq!(
        (c.destination.as_deref(), c.partition.as_deref(), c.kafka_offset, c.message_count),
        (Some("orders"), Some("0"), Some(1), Some(1))
    );
    assert_eq!((c.client_id.as_deref(), c.error_type.as_deref(), c.consumer_group.as_deref()), (Some("rt-producer"), None, None));
    assert!(p.attributes.is_empty() && p.export_trace && p.export_metrics);
}

#[test]
fn judge_kafka_fetches_and_commits() {
    let poll = judged(MsgSystem::Kafka, "kafka_fetch_v12.txt", 9092);
    assert_eq!(poll.len(), 1);
    assert_eq!((poll[0].kind, &*poll[0].name, poll[0].links.len()), (Some(SpanKind::Consumer), "poll orders", 3));
    assert_eq!((msg(&poll[0]).operation_type.as_deref(), msg(&poll[0]).message_count), (Some("receive"), Some(7)));
    let commit = judged(MsgSystem::Kafka, "kafka_offset_commit_v8.txt", 9092);
    assert!(!commit.is_empty());
    let c = &commit[0];
    assert_eq!(c.kind, Some(SpanKind::Client), "settle is a CLIENT span");
    assert_eq!(msg(c).operation_type.as_deref(), Some("settle"));
    assert!(msg(c).consumer_group.is_some());
}

#[test]
fn judge_mqtt_names_by_template_then_topic() {
    let parts = judged(MsgSystem::Mqtt, "mqtt311_subscriber.txt", 1883);
    let named: Vec<_> = parts.iter().map(|p| (p.kind, &*p.name, msg(p).operation_type.as_deref())).collect();
    assert_eq!(
        named,
        [
            (Some(SpanKind::Client), "subscribe sensors/+/temp", None),
            (Some(SpanKind::Consumer), "receive sensors/k1/temp", Some("receive")),
            (Some(SpanKind::Consumer), "receive sensors/k1/temp", Some("receive")),
            (Some(SpanKind::Consumer), "receive sensors/k1/temp", Some("receive")),
            (Some(SpanKind::Client), "unsubscribe sensors/+/temp", None),
        ]
    );
    assert_eq!((&*msg(&parts[0]).system, msg(&parts[0]).template.as_deref()), ("mqtt", Some("sensors/+/temp")));
    // a PUBLISH is one message: no batch count
    assert!(parts.iter().all(|p| msg(p).message_count.is_none() && msg(p).kafka_offset.is_none()));
    let published = judged(MsgSystem::Mqtt, "mqtt5_publisher.txt", 1883);
    assert!(published.iter().all(|p| p.kind == Some(SpanKind::Producer) && p.links.len() == 1), "{published:?}");
}

/// A NATS request: its publish is named by its subject; its reply comes
/// on the client's inbox (`_INBOX.{id}.{n}`, one a request), a temporary
/// destination: the span is named by its operation alone and the inbox
/// is in no metric (the exporter's meters leave it out).
#[test]
fn judge_nats_inboxes_are_temporary_and_name_no_span() {
    let parts = judged(MsgSystem::Nats, "nats_request.txt", 4222);
    let named: Vec<_> = parts.iter().map(|p| (&*p.name, msg(p).temporary)).collect();
    assert_eq!(named[1], ("subscribe", true), "the client's inbox subscription");
    assert!(named.iter().any(|(n, t)| n.starts_with("publish ") && !n.contains("_INBOX") && !*t), "{named:?}");
    for p in &parts {
        let c = msg(p);
        let inbox = [&c.destination, &c.template].into_iter().flatten().any(|d| d.starts_with("_INBOX."));
        assert_eq!(c.temporary, inbox, "{named:?}");
        assert!(!p.name.contains("_INBOX"), "{named:?}");
    }
}

#[test]
fn judge_names_a_call_of_no_destination_by_its_broker() {
    let mut op = MsgOp::new(MsgSystem::Kafka, Some(OpType::Receive), "poll", 5);
    op.error_type = Some("UNKNOWN_TOPIC_OR_PARTITION");
    let p = judge(op.clone(), &conn(9092), &mut Addrs::default());
    assert_eq!((&*p.name, p.error), ("poll 10.0.0.9:9092", true));
    let mut v6 = conn(9092);
    v6.peer = ipc_schema::SockAddr { v6: true, ip: 1, port: 9093 };
    assert_eq!(&*judge(op, &v6, &mut Addrs::default()).name, "poll [::1]:9093");
}

#[test]
fn judge_names_the_default_exchange_by_its_broker() {
    // pika's publishes to the default exchange (named "" by the RabbitMQ
    // conventions) and to "billing": the empty name is the attribute, not
    // the span name's destination (it made `publish `, a trailing space).
    let parts = judged(MsgSystem::Rabbitmq, "amqp_pika_publish.txt", 5672);
    let named: Vec<_> = parts.iter().map(|p| (&*p.name, msg(p).destination.as_deref())).collect();
    assert_eq!(
        named,
        [
            ("publish 10.0.0.9:5672", Some("")),
            ("publish 10.0.0.9:5672", Some("")),
            ("publish billing", Some("billing")),
            ("publish 10.0.0.9:5672", Some("")),
            ("publish 10.0.0.9:5672", Some("")),
        ]
    );
}

#[test]
fn judge_keeps_no_payload_key_or_header_value() {
    // The captured clients sent record keys, payloads, other headers, MQTT
    // credentials and user properties ([`SECRETS`]): none is in a span.
    for (system, file) in [
        (MsgSystem::Kafka, "kafka_produce_v9.txt"),
        (MsgSystem::Kafka, "kafka_fetch_v12.txt"),
        (MsgSystem::Mqtt, "mqtt5_publisher.txt"),
        (MsgSystem::Mqtt, "mqtt5_subscriber.txt"),
        (MsgSystem::Mqtt, "mqtt311_publisher.txt"),
    ] {
        let parts = judged(system, file, 9092);
        assert!(!parts.is_empty(), "{file}");
        for p in parts {
            let text = format!("{:?}", (&p.name, &p.attributes, &p.call));
            for secret in SECRETS {
                assert!(!text.contains(secret), "{secret} in a span of {file}: {text}");
            }
        }
    }
}
