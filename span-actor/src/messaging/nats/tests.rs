//! NATS: conversations nats-py 2.16 had with nats-server 2.9
//! (`../testdata/nats_*.txt`: PUB and HPUB with a `traceparent` and a
//! secret header, a queue subscription receiving MSG and HMSG, a
//! request/reply, verbose and pedantic mode with an `-ERR`), then lost
//! and hostile bytes.

use super::*;
use crate::db::pieces::{encode, Piece};
use crate::messaging::testing::*;
use crate::messaging::MsgCounts;

fn run(file: &str) -> T {
    replayed(MsgSystem::Nats, file)
}

/// An op in one line: [`brief`], then queue group and body size.
fn line(op: &MsgOp) -> String {
    format!("{} g{} b{}", brief(op), or_dash(&op.consumer_group), or_dash(&op.body_size))
}

fn lines(t: &T) -> Vec<String> {
    t.ops.iter().map(line).collect()
}

// ---------------------------------------------------------------- real conversations

#[test]
fn publish_with_and_without_headers() {
    // PUB, HPUB (traceparent + a secret header), PUB with a reply subject:
    // all in one record, each ending at its send.
    let t = run("nats_publish.txt");
    assert_eq!(
        lines(&t),
        [
            "nats/send publish orders.created p- o- n- l0 e- q- c- 1070..1070 g- b16",
            "nats/send publish orders.created p- o- n- l1 e- q- c- 1070..1070 g- b16",
            "nats/send publish orders.created p- o- n- l0 e- q- c- 1070..1070 g- b16",
        ]
    );
    assert_eq!(t.counts, MsgCounts { control_packets: 6, ..MsgCounts::default() });
}

#[test]
fn queue_subscription_receives() {
    let t = run("nats_subscribe.txt");
    assert_eq!(
        lines(&t),
        [
            "nats/- subscribe orders.* p- o- n- l0 e- q- c- 1050..1050 gworkers b-",
            "nats/receive receive orders.created p- o- n- l0 e- q- c- 1060..1060 gworkers b16",
            "nats/receive receive orders.paid p- o- n- l1 e- q- c- 1060..1060 gworkers b16",
            "nats/- unsubscribe orders.* p- o- n- l0 e- q- c- 1080..1080 gworkers b-",
        ]
    );
    assert_eq!(t.ops[1].template.as_deref(), Some("orders.*"));
    assert_eq!(t.ops[1].destination.as_deref(), Some("orders.created"));
}

#[test]
fn request_reply_is_a_publish_then_a_receive() {
    let t = run("nats_request.txt");
    let names: Vec<_> = t.ops.iter().map(|o| (o.op_name, o.links.len())).collect();
    assert_eq!(names, [("subscribe", 0), ("subscribe", 0), ("publish", 1), ("receive", 1), ("publish", 1), ("receive", 1)]);
    assert_eq!(t.ops[1].template.as_deref(), Some("_INBOX.Wd5St2NVV0IOz76rglNQ62.*"));
}

#[test]
fn verbose_mode_pairs_ok_and_err() {
    // CONNECT verbose + pedantic: +OK for CONNECT; PUB → +OK; PUB to
    // "orders..bad" → -ERR 'Invalid Publish Subject' then its +OK.
    let t = run("nats_verbose.txt");
    assert_eq!(
        lines(&t),
        [
            "nats/send publish orders.created p- o- n- l0 e- q- c- 1080..1090 g- b16",
            "nats/send publish orders..bad p- o- n- l0 einvalid_publish_subject q- c- 1080..1090 g- b16",
        ]
    );
    assert_eq!((t.counts.unanswered, t.counts.unpaired_answers), (0, 0));
}

#[test]
fn detects_nats_by_connect_or_info() {
    let recs = capture(&testdata("nats_publish.txt"));
    assert!(is_info(&recs[0].1) && !recs[0].0);
    assert_eq!(crate::messaging::detect_server_first(&recs[0].1), Some(MsgSystem::Nats));
    assert!(is_connect(&recs[1].1));
    assert_eq!(crate::messaging::detect(&recs[1].1, 40000), Some(MsgSystem::Nats));
}

// ---------------------------------------------------------------- built by hand

#[test]
fn connect_credentials_are_never_read() {
    // Only "verbose" is looked at, at the top level; a password spelling
    // `"verbose":true` inside its string does not count.
    assert_eq!(connect_verbose(br#"{"pass":"x\",\"verbose\":true","verbose":false}"#), Some(false));
    assert_eq!(connect_verbose(br#"{"a":{"verbose":true},"verbose": true}"#), Some(true));
    assert_eq!(connect_verbose(br#"{"auth_token":"secret-user"}"#), None);
    assert_eq!(connect_verbose(b"{\"verbose"), None);
    let mut t = T::new(MsgSystem::Nats);
    t.send(br#"CONNECT {"user":"secret-user","pass":"hunter2","auth_token":"hunter2","nkey":"hunter2","sig":"hunter2","jwt":"hunter2","verbose":false}"#);
    t.send(b"\r\nPUB a 0\r\n\r\n");
    assert_eq!(t.ops.len(), 1);
    assert!(!format!("{:?}", t.c).contains("hunter2"));
    assert_no_secret(&t.ops);
}

#[test]
fn no_responders_status_and_errors_outside_verbose() {
    let mut t = T::new(MsgSystem::Nats);
    t.send(b"CONNECT {}\r\nSUB _INBOX.x.* 1\r\n");
    t.recv(b"HMSG _INBOX.x.y 1 16 16\r\nNATS/1.0 503\r\n\r\n\r\n");
    assert_eq!(t.ops[1].error_type, Some("no_responders"));
    t.recv(b"-ERR 'Permissions Violation for Publish to \"secret-key\"'\r\n");
    assert_eq!(t.counts.unpaired_answers, 1);
    assert_eq!(err_name(b" 'Permissions Violation for Publish to \"x\"'"), "permissions_violation");
    assert_eq!(err_name(b"'something new'"), "_OTHER");
    assert_no_secret(&t.ops);
}

#[test]
fn a_payload_in_a_lost_region_keeps_the_call() {
    let mut t = T::new(MsgSystem::Nats);
    let mut cmd = b"PUB big 100000\r\n".to_vec();
    cmd.extend(vec![b's'; 100_000]);
    cmd.extend(b"\r\n");
    t.rec(true, &captured(&cmd, 16_384, 256));
    t.send(b"PING\r\n");
    assert_eq!(lines(&t), ["nats/send publish big p- o- n- l0 e- q- c- 1010..1010 g- b100000"]);
    assert_eq!((t.counts.desync, t.counts.too_large), (0, 1));
}

#[test]
fn a_line_in_a_lost_region_waits_for_whole_commands() {
    let mut t = T::new(MsgSystem::Nats);
    let mut lost = Vec::new();
    encode(&mut lost, Piece::Lost(10));
    t.rec(false, &lost);
    assert_eq!(t.counts.desync, 1);
    // Mid-payload bytes: no boundary.
    t.recv(b"load\r\nMSG a 1 3\r\n");
    assert_eq!(t.counts.resync, 0);
    // Whole commands, exactly: a boundary.
    t.recv(b"PING\r\nMSG a 1 3\r\nabc\r\n");
    assert_eq!((t.counts.resync, t.ops.len()), (1, 1));
    // Unknown verbs, bad lengths, too long a line: desync.
    for bad in [&b"HELLO\r\n"[..], b"PUB a -1\r\n", b"PUB a 1 2 3 4\r\n", b"HPUB a 9 3\r\n", b"XYZ"] {
        let mut t = T::new(MsgSystem::Nats);
        t.send(bad);
        assert_eq!(t.counts.desync, 1, "{bad:?}");
    }
    let mut t = T::new(MsgSystem::Nats);
    t.send(b"P");
    t.send(&vec![b'x'; MAX_LINE + 10]);
    assert_eq!(t.counts.desync, 1);
}

#[test]
fn verbose_pending_and_subscriptions_are_bounded() {
    let mut t = T::new(MsgSystem::Nats);
    t.send(b"CONNECT {\"verbose\":true}\r\n");
    for i in 0..MAX_PENDING + 10 {
        t.send(format!("SUB s.{i} {i}\r\n").as_bytes());
    }
    assert_eq!(t.c.pending(), MAX_PENDING);
    assert_eq!(t.counts.too_many_pending, 10);
    assert!(t.c.held_bytes() < 1 << 20);
    t.c.close(&mut t.counts);
    assert_eq!(t.counts.unanswered, 10 + MAX_PENDING as u64);
}

#[test]
fn every_cut_of_every_capture_is_safe() {
    every_cut_is_safe(MsgSystem::Nats, &["nats_publish.txt", "nats_subscribe.txt", "nats_request.txt", "nats_verbose.txt"]);
}

#[test]
fn random_bytes_never_panic_and_stay_bounded() {
    let seeds: Vec<_> = [capture(&testdata("nats_request.txt")), capture(&testdata("nats_verbose.txt"))].concat();
    random_records(MsgSystem::Nats, 13, &seeds, 300, |_| ());
}

// ---------------------------------------------------------------- the end-to-end test's clients

/// `tests/fixtures/nats_client.py subscribe PORT 'orders.*' 4` and
/// `publish PORT orders.created 4` (nats-py 2.16.0, nats-server 2.9.10),
/// as tests/tests/messaging.rs traces them.
#[test]
fn e2e_clients_publish_and_wildcard_subscription() {
    let tp = crate::ids::parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").unwrap();
    // HPUB (traceparent), PUB, HPUB, PUB in one record, then the flush's
    // PING.
    let runs = replayed_run(MsgSystem::Nats, "e2e_nats_publish.txt");
    assert_eq!(runs.len(), 1);
    assert_eq!(
        lines(&runs[0]),
        [
            "nats/send publish orders.created p- o- n- l1 e- q- c- 1050..1050 g- b16",
            "nats/send publish orders.created p- o- n- l0 e- q- c- 1050..1050 g- b16",
            "nats/send publish orders.created p- o- n- l1 e- q- c- 1050..1050 g- b16",
            "nats/send publish orders.created p- o- n- l0 e- q- c- 1050..1050 g- b16",
        ]
    );
    assert_eq!(runs[0].ops[0].links, [tp]);
    assert_eq!(runs[0].counts, MsgCounts { control_packets: 6, ..MsgCounts::default() });
    // SUB with a wildcard, then the four messages (HMSG, MSG, HMSG, MSG)
    // in one record: named by the subscription's filter (the template),
    // their subject the destination. The close sends no UNSUB.
    let runs = replayed_run(MsgSystem::Nats, "e2e_nats_subscribe.txt");
    assert_eq!(runs.len(), 1);
    assert_eq!(
        lines(&runs[0]),
        [
            "nats/- subscribe orders.* p- o- n- l0 e- q- c- 1040..1040 g- b-",
            "nats/receive receive orders.created p- o- n- l1 e- q- c- 1060..1060 g- b16",
            "nats/receive receive orders.created p- o- n- l0 e- q- c- 1060..1060 g- b16",
            "nats/receive receive orders.created p- o- n- l1 e- q- c- 1060..1060 g- b16",
            "nats/receive receive orders.created p- o- n- l0 e- q- c- 1060..1060 g- b16",
        ]
    );
    assert_eq!((runs[0].ops[0].destination.as_deref(), runs[0].ops[0].template.as_deref()), (None, Some("orders.*")));
    let receives = &runs[0].ops[1..];
    assert!(receives.iter().all(|o| o.destination.as_deref() == Some("orders.created") && o.template.as_deref() == Some("orders.*")));
    assert_eq!(receives[0].links, [tp]);
    assert_eq!(runs[0].counts, MsgCounts { control_packets: 6, ..MsgCounts::default() });
}
