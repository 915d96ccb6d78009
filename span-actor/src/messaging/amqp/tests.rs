//! AMQP 0-9-1: conversations pika 1.4 and amqp-tools 0.11 had with
//! RabbitMQ 3.10 (`../testdata/amqp_*.txt`: publishes with and without a
//! `traceparent` header, publisher confirms on a second channel, a 10 KB
//! body in three frames, basic.get, a consumer acking, nacking and
//! rejecting, a publish to a missing exchange), then lost and hostile
//! bytes.

use super::*;
use crate::db::pieces::{encode, Piece};
use crate::messaging::testing::*;
use crate::messaging::MsgCounts;

fn run(file: &str) -> T {
    replayed(MsgSystem::Rabbitmq, file)
}

/// An op in one line: [`brief`], then routing key, delivery tag, body
/// size.
fn line(op: &MsgOp) -> String {
    format!("{} k{} t{} b{}", brief(op), or_dash(&op.routing_key), or_dash(&op.delivery_tag), or_dash(&op.body_size))
}

fn lines(t: &T) -> Vec<String> {
    t.ops.iter().map(line).collect()
}

fn tp() -> crate::ids::TraceParent {
    crate::ids::parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").unwrap()
}

// ---------------------------------------------------------------- real conversations

#[test]
fn pika_publishes_with_and_without_confirms() {
    // Channel 1: three publishes (default exchange with a traceparent and
    // other headers, without headers, exchange "billing"), ending at their
    // last frame. Channel 2 in confirm mode: two publishes, each ended by
    // the broker's basic.ack; the second's 10 KB body in three frames.
    let t = run("amqp_pika_publish.txt");
    assert_eq!(
        lines(&t),
        [
            "rabbitmq/send publish  p- o- n- l1 e- q- c- 1150..1160 korders t- b16",
            "rabbitmq/send publish  p- o- n- l0 e- q- c- 1170..1180 korders t- b16",
            "rabbitmq/send publish billing p- o- n- l1 e- q- c- 1190..1200 kinvoice.created t- b16",
            "rabbitmq/send publish  p- o- n- l1 e- q- c- 1250..1280 korders t- b16",
            "rabbitmq/send publish  p- o- n- l0 e- q- c- 1290..1340 korders t- b10015",
        ]
    );
    // The default exchange is named "" (the conventions' rule), not absent.
    assert_eq!(t.ops[0].destination.as_deref(), Some(""));
    assert!(t.ops.iter().all(|o| o.links.is_empty() || o.links == [tp()]));
    assert_eq!(t.counts, MsgCounts { control_packets: 17, other_requests: 4, ..MsgCounts::default() });
}

#[test]
fn pika_get_consume_and_settle() {
    // basic.get → get-ok (then acked), a consumer with acks: four
    // deliveries in one record, each processed until its ack / nack /
    // reject; then get-empty.
    let t = run("amqp_pika_consume.txt");
    assert_eq!(
        lines(&t),
        [
            "rabbitmq/receive get  p- o- n- l1 e- q- c- 1120..1130 korders t1 b16",
            "rabbitmq/settle ack  p- o- n1 l0 e- q- c- 1140..1140 korders t1 b-",
            "rabbitmq/process deliver  p- o- n- l0 e- q- c- 1180..1190 korders t2 b16",
            "rabbitmq/settle ack  p- o- n1 l0 e- q- c- 1190..1190 korders t2 b-",
            "rabbitmq/process deliver billing p- o- n- l1 e- q- c- 1180..1200 kinvoice.created t3 b16",
            "rabbitmq/settle nack billing p- o- n1 l0 e- q- c- 1200..1200 kinvoice.created t3 b-",
            "rabbitmq/process deliver  p- o- n- l1 e- q- c- 1180..1210 korders t4 b16",
            "rabbitmq/settle reject  p- o- n1 l0 e- q- c- 1210..1210 korders t4 b-",
            "rabbitmq/process deliver  p- o- n- l0 e- q- c- 1180..1220 korders t5 b10015",
            "rabbitmq/settle ack  p- o- n1 l0 e- q- c- 1220..1220 korders t5 b-",
        ]
    );
    assert_eq!(t.counts.empty_gets, 1);
    assert_eq!((t.counts.unanswered, t.counts.bad_messages, t.counts.unpaired_answers), (0, 0, 0));
    // The consumer tag is not an attribute: nowhere in an op.
    assert!(t.ops.iter().all(|o| !format!("{o:?}").contains("ctag")));
}

#[test]
fn publish_to_a_missing_exchange_is_not_found() {
    // Confirm mode: the publish waits, the broker's channel.close 404
    // ends it with NOT_FOUND. Without confirms (second channel) the
    // publish ended at its send: the later close cannot be tied to it.
    let t = run("amqp_pika_missing_exchange.txt");
    assert_eq!(
        lines(&t),
        [
            "rabbitmq/send publish no-such-exchange p- o- n- l0 eNOT_FOUND q- c- 1120..1150 kk t- b18",
            "rabbitmq/send publish no-such-exchange p- o- n- l0 e- q- c- 1190..1210 kk t- b18",
        ]
    );
    assert_eq!(t.counts.unanswered, 0);
}

#[test]
fn amqp_tools_publish_and_consume() {
    let t = run("amqp_tools_publish.txt");
    assert_eq!(lines(&t), ["rabbitmq/send publish  p- o- n- l1 e- q- c- 1100..1100 korders t- b18"]);
    assert_eq!(t.ops[0].links, [tp()]);
    let t = run("amqp_tools_consume.txt");
    assert_eq!(
        lines(&t),
        [
            "rabbitmq/process deliver  p- o- n- l1 e- q- c- 1120..1130 korders t1 b18",
            "rabbitmq/settle ack  p- o- n1 l0 e- q- c- 1130..1130 korders t1 b-",
        ]
    );
}

#[test]
fn detects_amqp_by_its_protocol_header() {
    let first = capture(&testdata("amqp_pika_publish.txt")).remove(0).1;
    assert!(is_protocol_header(&first));
    assert_eq!(crate::messaging::detect(&first, 40000), Some(MsgSystem::Rabbitmq));
    assert!(!is_protocol_header(b"AMQP\x00\x00\x09"));
}

// ---------------------------------------------------------------- built by hand

fn frame_of(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![kind];
    v.extend(channel.to_be_bytes());
    v.extend((payload.len() as u32).to_be_bytes());
    v.extend(payload);
    v.push(FRAME_END);
    v
}

fn method(channel: u16, class: u16, m: u16, args: &[u8]) -> Vec<u8> {
    let mut p = class.to_be_bytes().to_vec();
    p.extend(m.to_be_bytes());
    p.extend(args);
    frame_of(METHOD, channel, &p)
}

fn short(s: &[u8]) -> Vec<u8> {
    let mut v = vec![s.len() as u8];
    v.extend(s);
    v
}

fn publish(channel: u16, exchange: &[u8], key: &[u8]) -> Vec<u8> {
    method(channel, BASIC, PUBLISH, &[&[0, 0][..], &short(exchange), &short(key), &[0]].concat())
}

/// A content header with `headers` (a field table's bytes) and a body
/// size.
fn header(channel: u16, size: u64, table: Option<&[u8]>) -> Vec<u8> {
    let mut p = vec![0, 60, 0, 0];
    p.extend(size.to_be_bytes());
    match table {
        Some(t) => {
            p.extend((1u16 << 13).to_be_bytes());
            p.extend((t.len() as u32).to_be_bytes());
            p.extend(t);
        }
        None => p.extend([0, 0]),
    }
    frame_of(HEADER, channel, &p)
}

fn confirm_ack(channel: u16, tag: u64, multiple: bool) -> Vec<u8> {
    method(channel, BASIC, ACK, &[&tag.to_be_bytes()[..], &[u8::from(multiple)]].concat())
}

#[test]
fn the_headers_table_is_read_safely_and_only_for_traceparent() {
    let tpv = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let mut table = Vec::new();
    // Nested tables, arrays, numbers, a secret before it.
    table.extend(short(b"secret-hdr"));
    table.push(b'S');
    table.extend(11u32.to_be_bytes());
    table.extend(b"secret-hval");
    table.extend(short(b"n"));
    table.extend([b'l', 0, 0, 0, 0, 0, 0, 0, 7]);
    table.extend(short(b"t"));
    table.push(b'F');
    table.extend(4u32.to_be_bytes());
    table.extend([9, 9, 9, 9]);
    table.extend(short(b"traceparent"));
    table.push(b'S');
    table.extend((tpv.len() as u32).to_be_bytes());
    table.extend(tpv);
    let mut t = T::new(MsgSystem::Rabbitmq);
    t.send(&[publish(1, b"x", b"k"), header(1, 0, Some(&table))].concat());
    assert_eq!(t.ops.len(), 1);
    assert_eq!(t.ops[0].links, [tp()]);
    assert_eq!(table_traceparent(&table), Some(&tpv[..]));
    // An unknown type stops the reading; a length past the table too.
    assert_eq!(table_traceparent(&[1, b'a', b'?', 0, 0]), None);
    assert_eq!(table_traceparent(&[1, b'a', b'S', 0xff, 0xff, 0xff, 0xff]), None);
    // A traceparent that is not one is not kept.
    assert_eq!(table_traceparent(b"\x0btraceparentS\x00\x00\x00\x03abc").and_then(crate::messaging::traceparent), None);
    assert_no_secret(&t.ops);
}

#[test]
fn confirms_multiple_nack_and_return() {
    let mut t = T::new(MsgSystem::Rabbitmq);
    t.send(&method(1, CONFIRM, SELECT, &[0]));
    for key in [&b"a"[..], b"b", b"c"] {
        t.send(&[publish(1, b"ex", key), header(1, 0, None)].concat());
    }
    assert_eq!(t.c.pending(), 3);
    // basic.return of "b" (312 NO_ROUTE), then ack multiple up to 2, nack 3.
    let ret = [&312u16.to_be_bytes()[..], &short(b"NO_ROUTE"), &short(b"ex"), &short(b"b")].concat();
    t.recv(&[method(1, BASIC, RETURN, &ret), header(1, 0, None)].concat());
    t.recv(&confirm_ack(1, 2, true));
    t.recv(&method(1, BASIC, NACK, &[&3u64.to_be_bytes()[..], &[0]].concat()));
    let errs: Vec<_> = t.ops.iter().map(|o| (o.routing_key.clone().unwrap(), o.error_type)).collect();
    assert_eq!(errs, [("a".into(), None), ("b".into(), Some("NO_ROUTE")), ("c".into(), Some("NACK"))]);
    assert_eq!(t.c.pending(), 0);
    t.recv(&confirm_ack(1, 9, false));
    assert_eq!(t.counts.unpaired_answers, 1);
}

#[test]
fn connection_close_with_an_error_ends_every_channel_s_calls() {
    let mut t = T::new(MsgSystem::Rabbitmq);
    for ch in [1, 2] {
        t.send(&method(ch, CONFIRM, SELECT, &[0]));
        t.send(&[publish(ch, b"", b"q"), header(ch, 0, None)].concat());
    }
    t.send(&method(3, BASIC, GET, &[&[0, 0][..], &short(b"q"), &[0]].concat()));
    let close = [&320u16.to_be_bytes()[..], &short(b"CONNECTION_FORCED"), &[0, 0, 0, 0]].concat();
    t.recv(&method(0, CONNECTION, CONNECTION_CLOSE, &close));
    assert_eq!(t.ops.len(), 3);
    assert!(t.ops.iter().all(|o| o.error_type == Some("CONNECTION_FORCED")));
    // A close the client asked for: what is pending is unanswered.
    t.send(&method(1, CONFIRM, SELECT, &[0]));
    t.send(&[publish(1, b"", b"q"), header(1, 0, None)].concat());
    t.send(&method(0, CONNECTION, CONNECTION_CLOSE, &[&200u16.to_be_bytes()[..], &short(b"bye"), &[0, 0, 0, 0]].concat()));
    t.recv(&method(0, CONNECTION, CONNECTION_CLOSE_OK, &[]));
    assert_eq!((t.ops.len(), t.counts.unanswered, t.c.pending()), (3, 1, 0));
}

#[test]
fn a_body_in_a_lost_region_keeps_the_call() {
    let mut t = T::new(MsgSystem::Rabbitmq);
    let body = frame_of(BODY, 1, &vec![b's'; 100_000]);
    let bytes = [publish(1, b"", b"q"), header(1, 100_000, None), body].concat();
    t.rec(true, &captured(&bytes, 16_384, 256));
    assert_eq!(lines(&t), ["rabbitmq/send publish  p- o- n- l0 e- q- c- 1010..1010 kq t- b100000"]);
    assert_eq!(t.ops[0].send_bytes, bytes.len() as u64);
    assert_eq!(t.counts.desync, 0);
}

#[test]
fn a_bad_frame_end_or_header_in_a_lost_region_waits_for_whole_frames() {
    let mut t = T::new(MsgSystem::Rabbitmq);
    let mut bad = publish(1, b"", b"q");
    *bad.last_mut().unwrap() = 0;
    t.send(&bad);
    assert_eq!((t.counts.desync, t.ops.len()), (1, 0));
    // Mid-frame bytes: no boundary.
    t.send(&[0x00, 0x01]);
    assert_eq!(t.counts.resync, 0);
    // Whole frames, exactly: a boundary.
    t.send(&[publish(1, b"", b"q"), header(1, 0, None)].concat());
    assert_eq!((t.counts.resync, t.ops.len()), (1, 1));
    let mut lost = Vec::new();
    encode(&mut lost, Piece::Lost(10));
    t.rec(false, &lost);
    assert_eq!(t.counts.desync, 2);
    // An unknown frame type is a desync too.
    let mut t = T::new(MsgSystem::Rabbitmq);
    t.recv(&frame_of(7, 0, &[]));
    assert_eq!(t.counts.desync, 1);
}

#[test]
fn the_sasl_response_is_never_read() {
    // connection.start-ok: client properties, mechanism, the response
    // (credentials), locale: counted, nothing kept.
    let mut args = vec![0, 0, 0, 0];
    args.extend(short(b"PLAIN"));
    args.extend(20u32.to_be_bytes());
    args.extend(b"\x00secret-user\x00hunter2");
    args.extend(short(b"en_US"));
    let mut t = T::new(MsgSystem::Rabbitmq);
    t.send(PROTOCOL_HEADER);
    t.send(&method(0, CONNECTION, 11, &args));
    assert_eq!((t.ops.len(), t.counts.control_packets, t.counts.bad_messages), (0, 2, 0));
    assert!(!format!("{:?}", t.c).contains("hunter2"));
}

#[test]
fn pending_calls_and_channels_are_bounded() {
    let mut t = T::new(MsgSystem::Rabbitmq);
    t.send(&method(1, CONFIRM, SELECT, &[0]));
    for _ in 0..MAX_PENDING + 10 {
        t.send(&[publish(1, b"", b"q"), header(1, 0, None)].concat());
    }
    assert_eq!(t.c.pending(), MAX_PENDING);
    assert_eq!(t.counts.too_many_pending, 10);
    for ch in 0..(MAX_CHANNELS as u16 + 5) {
        t.send(&method(ch + 2, CHANNEL, CHANNEL_OPEN, &[0]));
    }
    assert_eq!(t.counts.too_many_channels, 6);
    t.c.close(&mut t.counts);
    assert_eq!(t.counts.unanswered, 10 + MAX_PENDING as u64);
}

#[test]
fn every_cut_of_every_capture_is_safe() {
    every_cut_is_safe(MsgSystem::Rabbitmq, &["amqp_pika_missing_exchange.txt", "amqp_tools_consume.txt", "amqp_tools_publish.txt"]);
}

#[test]
fn random_bytes_never_panic_and_stay_bounded() {
    let seeds: Vec<_> = capture(&testdata("amqp_pika_consume.txt"));
    random_records(MsgSystem::Rabbitmq, 12, &seeds, 300, |t| assert_no_secret(&t.ops));
}

// ---------------------------------------------------------------- the end-to-end test's clients

/// `tests/fixtures/amqp_client.py publish PORT 4` and `consume PORT 4`
/// (pika 1.4.4, RabbitMQ 3.10.8), as tests/tests/messaging.rs traces them.
#[test]
fn e2e_clients_publish_with_confirms_then_consume_and_ack() {
    // One channel: queue, exchange and binding declared, confirm mode,
    // then four publishes alternating the default exchange and "billing",
    // each ended by the broker's basic.ack; the fourth's frames came in
    // three records.
    let runs = replayed_run(MsgSystem::Rabbitmq, "e2e_amqp_publish.txt");
    assert_eq!(runs.len(), 1);
    assert_eq!(
        lines(&runs[0]),
        [
            "rabbitmq/send publish  p- o- n- l1 e- q- c- 1170..1180 korders t- b16",
            "rabbitmq/send publish billing p- o- n- l1 e- q- c- 1190..1200 kinvoice.created t- b16",
            "rabbitmq/send publish  p- o- n- l1 e- q- c- 1210..1220 korders t- b16",
            "rabbitmq/send publish billing p- o- n- l1 e- q- c- 1230..1260 kinvoice.created t- b16",
        ]
    );
    assert!(runs[0].ops.iter().all(|o| o.links == [tp()]));
    assert_eq!(runs[0].counts, MsgCounts { control_packets: 13, other_requests: 4, ..MsgCounts::default() });

    // basic.qos, basic.consume; the four deliveries in one record, each
    // processed until its ack; basic.cancel.
    let runs = replayed_run(MsgSystem::Rabbitmq, "e2e_amqp_consume.txt");
    assert_eq!(runs.len(), 1);
    assert_eq!(
        lines(&runs[0]),
        [
            "rabbitmq/process deliver  p- o- n- l1 e- q- c- 1140..1150 korders t1 b16",
            "rabbitmq/settle ack  p- o- n1 l0 e- q- c- 1150..1150 korders t1 b-",
            "rabbitmq/process deliver billing p- o- n- l1 e- q- c- 1140..1160 kinvoice.created t2 b16",
            "rabbitmq/settle ack billing p- o- n1 l0 e- q- c- 1160..1160 kinvoice.created t2 b-",
            "rabbitmq/process deliver  p- o- n- l1 e- q- c- 1140..1170 korders t3 b16",
            "rabbitmq/settle ack  p- o- n1 l0 e- q- c- 1170..1170 korders t3 b-",
            "rabbitmq/process deliver billing p- o- n- l1 e- q- c- 1140..1180 kinvoice.created t4 b16",
            "rabbitmq/settle ack billing p- o- n1 l0 e- q- c- 1180..1180 kinvoice.created t4 b-",
        ]
    );
    assert_eq!(runs[0].counts, MsgCounts { control_packets: 13, other_requests: 4, ..MsgCounts::default() });
}

/// amqp-tools 0.11.0 (librabbitmq) against RabbitMQ 3.10.8, as
/// tests/tests/messaging.rs runs them, one process a connection:
/// `amqp-declare-queue -q orders`; three `amqp-publish -r orders -b
/// secret-payload-<i> -H "traceparent: ..." -H "secret-hdr: secret-hval"`;
/// `amqp-get -q orders` (a basic.get without acknowledgement);
/// `amqp-consume -q orders -c 2 cat` (acks each delivery after `cat`).
#[test]
fn e2e_clients_amqp_tools_publish_get_and_consume() {
    let runs = replayed_run(MsgSystem::Rabbitmq, "e2e_amqp_tools.txt");
    let all: Vec<Vec<String>> = runs.iter().map(lines).collect();
    let publish = ["rabbitmq/send publish  p- o- n- l1 e- q- c- 1090..1090 korders t- b16".to_owned()];
    assert_eq!(
        all,
        [
            vec![],
            publish.to_vec(),
            publish.to_vec(),
            publish.to_vec(),
            vec!["rabbitmq/receive get  p- o- n- l1 e- q- c- 1090..1100 korders t1 b16".to_owned()],
            vec![
                "rabbitmq/process deliver  p- o- n- l1 e- q- c- 1120..1130 korders t1 b16".to_owned(),
                "rabbitmq/settle ack  p- o- n1 l0 e- q- c- 1130..1130 korders t1 b-".to_owned(),
                "rabbitmq/process deliver  p- o- n- l1 e- q- c- 1120..1140 korders t2 b16".to_owned(),
                "rabbitmq/settle ack  p- o- n1 l0 e- q- c- 1140..1140 korders t2 b-".to_owned(),
            ],
        ]
    );
    assert!(runs.iter().flat_map(|t| &t.ops).all(|o| o.links == [tp()] || o.op_name == "ack"));
    // queue.declare; basic.qos and basic.consume: paired, no op.
    let other: Vec<u64> = runs.iter().map(|t| t.counts.other_requests).collect();
    assert_eq!(other, [1, 0, 0, 0, 0, 2]);
    for t in &runs {
        assert_eq!(MsgCounts { other_requests: 0, ..t.counts }, MsgCounts { control_packets: 13, ..MsgCounts::default() });
    }
}
