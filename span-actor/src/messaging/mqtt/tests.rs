//! MQTT: conversations paho-mqtt 2.2 had with mosquitto 2.0
//! (`../testdata/mqtt*.txt`: a publisher and a subscriber, 3.1.1 and 5,
//! QoS 0, 1 and 2, credentials and a secret user property sent), then
//! reason codes, aliases, lost and hostile bytes.

use super::*;
use crate::messaging::testing::*;
use crate::messaging::MsgCounts;

fn run(file: &str) -> T {
    replayed(MsgSystem::Mqtt, file)
}

// ---------------------------------------------------------------- real conversations

#[test]
fn v311_publisher_qos_0_1_2() {
    // CONNECT, CONNACK, PUBLISH q0, PUBLISH q1 / PUBACK, PUBLISH q2 /
    // PUBREC / PUBREL / PUBCOMP, DISCONNECT.
    let t = run("mqtt311_publisher.txt");
    assert_eq!(
        briefs(&t),
        [
            "mqtt/send publish sensors/k1/temp p- o- n- l0 e- q0 crt-pub-3 1030..1030",
            "mqtt/send publish sensors/k1/temp p- o- n- l0 e- q1 crt-pub-3 1040..1050",
            "mqtt/send publish sensors/k1/temp p- o- n- l0 e- q2 crt-pub-3 1060..1090",
        ]
    );
    assert_eq!(t.counts, MsgCounts { control_packets: 3, ..MsgCounts::default() });
}

#[test]
fn v311_subscriber_receives_and_acknowledges() {
    let t = run("mqtt311_subscriber.txt");
    assert_eq!(
        briefs(&t),
        [
            "mqtt/- subscribe sensors/+/temp p- o- n- l0 e- q- crt-sub-3 1030..1040",
            "mqtt/receive receive sensors/k1/temp p- o- n- l0 e- q0 crt-sub-3 1050..1050",
            "mqtt/receive receive sensors/k1/temp p- o- n- l0 e- q1 crt-sub-3 1060..1070",
            "mqtt/receive receive sensors/k1/temp p- o- n- l0 e- q2 crt-sub-3 1080..1110",
            "mqtt/- unsubscribe sensors/+/temp p- o- n- l0 e- q- crt-sub-3 1120..1130",
        ]
    );
    assert_eq!(t.ops[0].template.as_deref(), Some("sensors/+/temp"));
    assert_eq!(t.ops[0].destination, None);
}

#[test]
fn v5_traceparent_user_property_only() {
    let tp = crate::ids::parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").unwrap();
    let t = run("mqtt5_publisher.txt");
    assert_eq!(
        briefs(&t),
        [
            "mqtt/send publish sensors/k1/temp p- o- n- l1 e- q0 crt-pub-5 1030..1030",
            "mqtt/send publish sensors/k1/temp p- o- n- l1 e- q1 crt-pub-5 1040..1050",
            "mqtt/send publish sensors/k1/temp p- o- n- l1 e- q2 crt-pub-5 1060..1090",
        ]
    );
    assert!(t.ops.iter().all(|o| o.links == [tp]));
    let t = run("mqtt5_subscriber.txt");
    assert_eq!(
        briefs(&t),
        [
            "mqtt/- subscribe sensors/+/temp p- o- n- l0 e- q- crt-sub-5 1030..1040",
            "mqtt/receive receive sensors/k1/temp p- o- n- l1 e- q0 crt-sub-5 1050..1050",
            "mqtt/receive receive sensors/k1/temp p- o- n- l1 e- q1 crt-sub-5 1060..1070",
            "mqtt/receive receive sensors/k1/temp p- o- n- l1 e- q2 crt-sub-5 1080..1110",
            "mqtt/- unsubscribe sensors/+/temp p- o- n- l0 e- q- crt-sub-5 1120..1130",
        ]
    );
    assert_eq!(t.counts, MsgCounts { control_packets: 3, ..MsgCounts::default() });
}

#[test]
fn detects_mqtt_by_its_connect() {
    for f in ["mqtt311_publisher.txt", "mqtt5_subscriber.txt"] {
        let first = capture(&testdata(f)).remove(0).1;
        assert!(is_connect(&first));
        assert_eq!(crate::messaging::detect(&first, 40000), Some(MsgSystem::Mqtt));
    }
    assert!(!is_connect(b"\x10\x05\x00\x03abc"));
    assert_eq!(crate::messaging::detect(b"\x16\x03\x01", 8883), Some(MsgSystem::Mqtt));
}

// ---------------------------------------------------------------- built by hand

fn connect(level: u8) -> Vec<u8> {
    let mut v = vec![0x10, 0];
    v.extend(b"\x00\x04MQTT");
    v.extend([level, 0xc2, 0, 60]);
    if level == 5 {
        v.push(0);
    }
    v.extend(b"\x00\x02me\x00\x0bsecret-user\x00\x07hunter2");
    v[1] = (v.len() - 2) as u8;
    v
}

fn publish(qos: u8, id: u16, topic: &[u8], props: &[u8]) -> Vec<u8> {
    let mut body = (topic.len() as u16).to_be_bytes().to_vec();
    body.extend(topic);
    if qos > 0 {
        body.extend(id.to_be_bytes());
    }
    body.extend(props);
    body.extend(b"secret-payload");
    let mut v = vec![0x30 | (qos << 1), body.len() as u8];
    v.extend(body);
    v
}

#[test]
fn v5_reason_codes_are_the_error_type() {
    let mut t = T::new(MsgSystem::Mqtt);
    t.send(&connect(5));
    t.recv(&[0x20, 3, 0, 0, 0]);
    t.send(&publish(1, 7, b"a/b", &[0]));
    // PUBACK 7: 0x87 not authorized, no properties.
    t.recv(&[0x40, 3, 0, 7, 0x87]);
    // QoS 2 refused at PUBREC: the flow ends there.
    t.send(&publish(2, 8, b"a/b", &[0]));
    t.recv(&[0x50, 3, 0, 8, 0x97]);
    // SUBSCRIBE refused (v5 SUBACK: properties, then reasons).
    t.send(&[0x82, 9, 0, 9, 0, 0, 3, b'x', b'/', b'#', 1]);
    t.recv(&[0x90, 4, 0, 9, 0, 0x8f]);
    assert_eq!(
        briefs(&t),
        [
            "mqtt/send publish a/b p- o- n- l0 e135 q1 cme 1030..1040",
            "mqtt/send publish a/b p- o- n- l0 e151 q2 cme 1050..1060",
            "mqtt/- subscribe x/# p- o- n- l0 e143 q- cme 1070..1080",
        ]
    );
    assert_eq!(t.c.pending(), 0);
    assert_no_secret(&t.ops);
}

#[test]
fn v311_suback_failure_and_unpaired_acks() {
    let mut t = T::new(MsgSystem::Mqtt);
    t.send(&connect(4));
    t.send(&[0x82, 8, 0, 1, 0, 3, b'a', b'/', b'b', 0]);
    t.recv(&[0x90, 3, 0, 1, 0x80]);
    t.recv(&[0x40, 2, 0, 99]);
    assert_eq!(briefs(&t), ["mqtt/- subscribe a/b p- o- n- l0 e128 q- cme 1020..1030"]);
    assert_eq!(t.counts.unpaired_answers, 1);
}

#[test]
fn v5_topic_aliases_name_later_publishes() {
    let mut t = T::new(MsgSystem::Mqtt);
    t.send(&connect(5));
    // Alias 3 set with the topic, then used with an empty topic.
    t.send(&publish(0, 0, b"plant/7", &[3, 0x23, 0, 3]));
    t.send(&publish(0, 0, b"", &[3, 0x23, 0, 3]));
    t.send(&publish(0, 0, b"", &[3, 0x23, 0, 4]));
    let dests: Vec<_> = t.ops.iter().map(|o| o.destination.clone()).collect();
    assert_eq!(dests, [Some("plant/7".to_owned()), Some("plant/7".to_owned()), None]);
}

// ---------------------------------------------------------------- lost and hostile bytes

#[test]
fn a_payload_in_a_lost_region_keeps_the_call() {
    let mut t = T::new(MsgSystem::Mqtt);
    t.send(&connect(4));
    // 300 KB payload, QoS 1: remaining length in 3 bytes.
    let payload = vec![b'p'; 300_000];
    let mut body = b"\x00\x03big\x00\x05".to_vec();
    body.extend(&payload);
    let mut p = vec![0x32];
    let mut n = body.len();
    while n > 0x7f {
        p.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    p.push(n as u8);
    p.extend(body);
    t.rec(true, &captured(&p, 16_384, 256));
    t.recv(&[0x40, 2, 0, 5]);
    assert_eq!(briefs(&t), ["mqtt/send publish big p- o- n- l0 e- q1 cme 1020..1030"]);
    assert_eq!(t.ops[0].send_bytes, p.len() as u64);
    assert_eq!((t.counts.desync, t.counts.too_large), (0, 1));
}

#[test]
fn a_header_in_a_lost_region_waits_for_a_record_of_whole_packets() {
    let mut t = T::new(MsgSystem::Mqtt);
    t.send(&connect(4));
    t.send(&publish(1, 1, b"a", &[]));
    let mut lost = Vec::new();
    crate::db::pieces::encode(&mut lost, crate::db::pieces::Piece::Lost(10));
    t.rec(false, &lost);
    assert_eq!(t.counts.desync, 1);
    // Mid-packet bytes: no boundary (0x40 0x02 then one byte short).
    t.recv(&[0x00, 0x40, 0x02, 0x00]);
    assert_eq!(t.counts.resync, 0);
    // Two whole packets, exactly: a boundary.
    t.recv(&[0xd0, 0x00, 0x40, 0x02, 0x00, 0x01]);
    assert_eq!(t.counts.resync, 1);
    assert_eq!(t.ops.len(), 1);
    // A remaining length of 5 bytes, a reserved type, a QoS of 3: desync.
    for bad in [&[0x30, 0xff, 0xff, 0xff, 0xff, 0x01][..], &[0x00, 0x00], &[0x36, 0x00], &[0x62, 0x02, 0, 1], &[0x61, 0x02, 0, 1]] {
        let mut t = T::new(MsgSystem::Mqtt);
        t.send(bad);
        assert_eq!(t.counts.desync, u64::from(bad != [0x62, 0x02, 0, 1]), "{bad:?}");
    }
}

#[test]
fn pending_flows_are_bounded_and_counted_at_close() {
    let mut t = T::new(MsgSystem::Mqtt);
    t.send(&connect(4));
    for i in 0..(MAX_PENDING as u16 + 10) {
        t.send(&publish(1, i + 1, b"a", &[]));
    }
    assert_eq!(t.c.pending(), MAX_PENDING);
    assert_eq!(t.counts.too_many_pending, 10);
    t.c.close(&mut t.counts);
    assert_eq!(t.counts.unanswered, 10 + MAX_PENDING as u64);
}

#[test]
fn every_cut_of_every_capture_is_safe() {
    every_cut_is_safe(MsgSystem::Mqtt, &["mqtt311_publisher.txt", "mqtt311_subscriber.txt", "mqtt5_publisher.txt", "mqtt5_subscriber.txt"]);
}

#[test]
fn random_bytes_never_panic_and_stay_bounded() {
    let seeds: Vec<_> = capture(&testdata("mqtt5_subscriber.txt"));
    random_records(MsgSystem::Mqtt, 11, &seeds, 500, |_| ());
}

#[test]
fn a_dup_resend_is_the_same_call() {
    let mut t = T::new(MsgSystem::Mqtt);
    t.send(&connect(4));
    let p = publish(1, 4, b"a", &[]);
    t.send(&p);
    let mut dup = p.clone();
    dup[0] |= 8;
    t.send(&dup);
    t.recv(&[0x40, 2, 0, 4]);
    assert_eq!(t.ops.len(), 1);
    assert_eq!(t.counts.unanswered, 0);
}

// ---------------------------------------------------------------- the end-to-end test's clients

/// `tests/fixtures/mqtt_client.py subscribe PORT L sensors/+/temp 3`, then
/// `publish PORT L sensors/k1/temp 3` (paho-mqtt 2.2.0, mosquitto 2.0.11),
/// at level 3 (3.1.1) and 5, as tests/tests/messaging.rs traces them:
/// connection 1 the subscriber, 2 the publisher.
#[test]
fn e2e_clients_paho_v311_and_v5_qos_0_1_2() {
    let tp = crate::ids::parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").unwrap();
    for (file, level, links) in [("e2e_paho_mqtt311.txt", 3, 0), ("e2e_paho_mqtt5.txt", 5, 1)] {
        let runs = replayed_run(MsgSystem::Mqtt, file);
        assert_eq!(runs.len(), 2, "{file}");
        // The subscriber: SUBSCRIBE/SUBACK, the three messages at the QoS
        // they were published with (QoS 1: until its PUBACK; QoS 2: until
        // its PUBCOMP), UNSUBSCRIBE/UNSUBACK.
        assert_eq!(
            briefs(&runs[0]),
            [
                format!("mqtt/- subscribe sensors/+/temp p- o- n- l0 e- q- crt-sub-{level} 1030..1040"),
                format!("mqtt/receive receive sensors/k1/temp p- o- n- l{links} e- q0 crt-sub-{level} 1050..1050"),
                format!("mqtt/receive receive sensors/k1/temp p- o- n- l{links} e- q1 crt-sub-{level} 1060..1070"),
                format!("mqtt/receive receive sensors/k1/temp p- o- n- l{links} e- q2 crt-sub-{level} 1080..1110"),
                format!("mqtt/- unsubscribe sensors/+/temp p- o- n- l0 e- q- crt-sub-{level} 1120..1130"),
            ],
            "{file}"
        );
        // The publisher: QoS 0 ends at its send, 1 at its PUBACK, 2 at
        // its PUBCOMP.
        assert_eq!(
            briefs(&runs[1]),
            [
                format!("mqtt/send publish sensors/k1/temp p- o- n- l{links} e- q0 crt-pub-{level} 1030..1030"),
                format!("mqtt/send publish sensors/k1/temp p- o- n- l{links} e- q1 crt-pub-{level} 1040..1050"),
                format!("mqtt/send publish sensors/k1/temp p- o- n- l{links} e- q2 crt-pub-{level} 1060..1090"),
            ],
            "{file}"
        );
        for t in &runs {
            assert!(t.ops.iter().all(|o| o.links.iter().all(|l| *l == tp)), "{file}");
            // CONNECT, CONNACK, DISCONNECT.
            assert_eq!(t.counts, MsgCounts { control_packets: 3, ..MsgCounts::default() }, "{file}");
        }
    }
}
