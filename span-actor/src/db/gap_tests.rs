//! Records the kernel's ring had no room for (its GAP pieces, the next
//! record of the connection that fit), connections found mid-way, and
//! memcached's `quit`: every call is an op or counted, none is paired with
//! another's answer.

use super::pieces::{encode, encode_gap, Gap, Piece};
use super::*;

/// A connection under test (the records whole, as short syscalls are).
struct C {
    c: DbConn,
    ops: Vec<DbOp>,
    counts: DbCounts,
    ts: u64,
}

impl C {
    fn new(s: System) -> C {
        C { c: DbConn::new(s), ops: Vec::new(), counts: DbCounts::default(), ts: 1000 }
    }

    /// One record of all of `b`, after which the kernel told `gap`.
    fn rec(&mut self, send: bool, b: &[u8], gap: Gap) -> u64 {
        let mut pieces = Vec::new();
        if !b.is_empty() {
            encode(&mut pieces, Piece::Bytes(b));
        }
        if !gap.is_empty() {
            encode_gap(&mut pieces, gap);
        }
        self.ts += 10;
        self.c.feed_ops(send, self.ts, false, &pieces, &mut self.ops, &mut self.counts);
        self.ts
    }

    fn send(&mut self, b: &[u8]) -> u64 {
        self.rec(true, b, Gap::default())
    }

    fn recv(&mut self, b: &[u8]) -> u64 {
        self.rec(false, b, Gap::default())
    }

    /// The calls that are neither an op nor counted as not traced would
    /// be `made - this`.
    fn accounted(&self) -> u64 {
        self.ops.len() as u64 + self.counts.calls_lost + self.counts.unanswered
    }
}

const RECV_LOST: fn(u32) -> Gap = |n| Gap { recv: n, send: 0 };
const SEND_LOST: fn(u32) -> Gap = |n| Gap { recv: 0, send: n };

fn mc_value(key: &str, n: usize) -> Vec<u8> {
    let mut v = format!("VALUE {key} 0 {n}\r\n").into_bytes();
    v.extend(std::iter::repeat_n(b'v', n));
    v.extend_from_slice(b"\r\nEND\r\n");
    v
}

/// memcslap's way: one call a syscall, each answered before the next.
/// The answer of `get a` is lost: the next send tells, `get a` is counted
/// lost and `get b` is paired with its own answer, not `get a`'s.
#[test]
fn memcached_a_lost_answer_counts_its_call_and_pairs_nothing_wrong() {
    let mut c = C::new(System::Memcached);
    c.send(b"get a\r\n");
    let answer = mc_value("a", 2441);
    // (that answer's record: lost in the kernel)
    let start = c.rec(true, b"get b\r\n", RECV_LOST(answer.len() as u32));
    assert_eq!(c.counts.calls_lost, 1, "get a");
    let end = c.recv(&mc_value("b", 10));
    assert_eq!(c.ops.len(), 1);
    assert_eq!((c.ops[0].start_ns, c.ops[0].end_ns, c.ops[0].call.returned_rows), (start, end, Some(1)));
    assert_eq!((c.counts.desync, c.counts.given_up, c.counts.unpaired_answers), (0, 0, 0));
    assert_eq!(c.accounted(), 2);
}

/// The send of `get a` is lost (the kernel counted that call): its answer
/// comes, telling the gap, and is read as nothing; the connection goes on
/// at the next command.
#[test]
fn memcached_a_lost_send_leaves_its_answer_unread_and_goes_on() {
    let mut c = C::new(System::Memcached);
    let set = b"set a 0 0 3\r\nabc\r\n";
    c.send(set);
    c.recv(b"STORED\r\n");
    c.rec(false, &mc_value("a", 3), SEND_LOST(7));
    assert_eq!((c.ops.len(), c.counts.calls_lost, c.counts.unpaired_answers, c.counts.given_up), (1, 0, 0, 0));
    c.send(b"get a\r\n");
    c.recv(&mc_value("a", 3));
    assert_eq!(c.ops.len(), 2);
    assert_eq!(c.ops[1].call.query_text.as_deref(), Some("get ?"));
}

/// A value's second write, after a gap, does not begin a command: it is
/// skipped, and so is the answer to its call, until a send that does.
#[test]
fn after_a_gap_only_a_send_that_begins_a_command_restarts() {
    let mut c = C::new(System::Memcached);
    c.send(b"set big 0 0 9000\r\n");
    c.rec(true, &[b'x'; 4000], SEND_LOST(5000));
    assert_eq!(c.counts.calls_lost, 1, "the set awaiting its answer");
    c.recv(b"STORED\r\n");
    c.send(b"delete big\r\n");
    c.recv(b"DELETED\r\n");
    assert_eq!(c.ops.len(), 1);
    assert_eq!(c.ops[0].call.operation.as_deref(), Some("delete"));
    assert_eq!((c.counts.desync, c.counts.unpaired_answers), (0, 0));
}

/// A pipeline of three Redis calls awaiting answers when records were
/// lost: all three counted, none paired with the answers that come after
/// the restart; an inline command (whose bytes a value could be) does not
/// restart, a RESP array does.
#[test]
fn redis_a_gap_counts_every_call_in_flight() {
    let resp = |args: &[&[u8]]| {
        let mut v = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            v.extend_from_slice(a);
            v.extend_from_slice(b"\r\n");
        }
        v
    };
    let mut c = C::new(System::Redis);
    c.send(&[resp(&[b"GET", b"a"]), resp(&[b"GET", b"b"]), resp(&[b"GET", b"c"])].concat());
    c.rec(false, b"$1\r\nb\r\n$1\r\nc\r\n", RECV_LOST(7));
    assert_eq!(c.counts.calls_lost, 3);
    c.send(b"PING\r\n");
    c.recv(b"+PONG\r\n");
    assert!(c.ops.is_empty(), "{:?}", c.ops);
    c.send(&resp(&[b"SET", b"k", b"v"]));
    c.recv(b"+OK\r\n");
    assert_eq!(c.ops.len(), 1);
    assert_eq!(c.ops[0].call.operation.as_deref(), Some("SET"));
    assert_eq!((c.counts.desync, c.counts.given_up), (0, 0));
}

/// PostgreSQL finds its place by its own rules: a lost answer's bytes are
/// LOST bytes on the receive side, and the ReadyForQuery that ends the
/// next answer ends the calls awaiting it (an op each, as after any
/// desync), counted nowhere as lost.
#[test]
fn postgres_reads_a_gap_as_lost_bytes() {
    let pg = |t: u8, body: &[u8]| {
        let mut v = vec![t];
        v.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        v.extend_from_slice(body);
        v
    };
    let mut c = C::new(System::Postgres);
    c.c.joined_midway();
    c.send(&pg(b'Q', b"SELECT 1\0"));
    // (its answer lost) the next query tells the gap
    c.rec(true, &pg(b'Q', b"SELECT 2\0"), RECV_LOST(40));
    c.recv(&[pg(b'T', &[0, 0]), pg(b'C', b"SELECT 1\0"), pg(b'Z', b"I")].concat());
    assert_eq!(c.counts.calls_lost, 0);
    assert_eq!(c.counts.desync, 1);
    assert_eq!(c.ops.len() as u64 + c.counts.unanswered, 2, "{:?} {:?}", c.ops, c.counts);
}

/// `quit` has no answer (memcached closes): no call awaits one, nothing is
/// counted unanswered at the close.
#[test]
fn memcached_quit_is_not_a_call_awaiting_an_answer() {
    let mut c = C::new(System::Memcached);
    c.send(b"get a\r\n");
    c.recv(b"END\r\n");
    c.send(b"quit\r\n");
    assert_eq!(c.c.pending(), 0);
    c.c.close(&mut c.counts);
    assert_eq!((c.ops.len(), c.counts.unanswered, c.counts.no_reply), (1, 0, 1));
}

/// A connection found mid-way (tracing began after it did, or it is
/// followed afresh) whose first record is an answer: read as nothing, not
/// a reason to give the connection up; its next command is a call.
#[test]
fn a_memcached_connection_found_mid_way_starts_at_its_next_command() {
    let mut c = C::new(System::Memcached);
    c.c.joined_midway();
    c.recv(&mc_value("a", 100));
    c.send(b"get b\r\n");
    c.recv(b"END\r\n");
    assert_eq!(c.ops.len(), 1);
    assert_eq!((c.counts.given_up, c.counts.desync, c.counts.unpaired_answers), (0, 0, 0));
    // A new connection (its first record is its first) does not wait.
    let mut fresh = C::new(System::Memcached);
    fresh.recv(&mc_value("a", 1));
    assert_eq!(fresh.counts.given_up, 1, "an answer before any request: the stream is not where it seems");
}

/// A gap piece that is not one gives the connection up (malformed).
#[test]
fn a_malformed_gap_gives_the_connection_up() {
    let mut c = C::new(System::Memcached);
    c.send(b"get a\r\n");
    let mut bad = Vec::new();
    encode(&mut bad, Piece::Bytes(b"END\r\n"));
    bad.extend_from_slice(&[pieces::GAP, 7, 1, 0, 0, 0]);
    c.c.feed_ops(false, 2000, false, &bad, &mut c.ops, &mut c.counts);
    assert_eq!((c.counts.malformed, c.counts.given_up, c.counts.unanswered), (1, 1, 1));
}
