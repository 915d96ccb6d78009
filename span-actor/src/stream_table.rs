//! [`StreamTable`]: every byte-stream connection followed (a configured
//! port's: databases, brokers), the kernel's records in
//! ([`RawStream`]s), [`Operation`]s out (one per call).
//!
//! A protocol family plugs in as a [`Family`] in [`FAMILIES`]: how its
//! connections are told (their first bytes, else their server's port) and
//! the [`StreamConn`] that follows one (records' pieces in, operations ([`Calls`])
//! out, what it could not follow counted by reason). The table does the
//! rest once for all of them: bounded host-wide, whatever clients and
//! servers send, by a [`ConnTable`]: at most [`STREAM_CONNS`] connections
//! (a new one past it evicts the oldest), and at most the connection-state
//! budget (`pipeline.conn_state_mb`) of parser state in all (past it the
//! connections that hold the most are forgotten, their pending calls
//! counted; one that goes on is followed afresh, as one seen mid-way, its
//! calls numbered on from where it was, so that no span id repeats); each
//! call linked to the server request its send was made for; the counts
//! published (`ringtail_dropped_events_total{reason}`, each family's
//! labels).

use std::collections::VecDeque;

use ipc_schema::{Links, RawStream, Role};
use runtime_kit::counters::{Counter, Drops, Gauge, Registry};
use rustc_hash::FxHashMap as HashMap;

use crate::conn_table::{ConnTable, Held, Key, Slot};
use crate::db::pieces::{self, Piece};
use crate::operation::{Call, Conn, Operation};

/// Byte-stream connections followed at once; past it the oldest is
/// forgotten.
pub const STREAM_CONNS: usize = 16_384;
/// A connection's latest sends whose links are kept, to give each call the
/// link of the send that carried it (a pipeline deeper than this in
/// flight links its oldest calls to nothing).
const SENDS_KEPT: usize = 64;

/// One byte-stream protocol family: how its connections are told, and the
/// labels of what its connections count.
pub struct Family {
    /// A connection's state from its first bytes, if they are this
    /// family's: what the client sent first (`first_send`), or, where the
    /// server speaks first, what it received (`first_recv`).
    pub by_bytes: fn(first_send: &[u8], first_recv: Option<&[u8]>) -> Option<Followed>,
    /// A connection's state from its server's port, where its bytes said
    /// nothing (a TLS handshake, a connection found mid-way).
    pub by_port: fn(port: u16) -> Option<Followed>,
    /// The reasons its connections count under (a `reason` label each, of
    /// `ringtail_dropped_events_total`), in the order
    /// [`StreamConn::feed`]'s `counts` holds them.
    pub reasons: fn() -> Vec<&'static str>,
}

/// The families followed: on a new connection each is asked by its bytes,
/// in this order, then each by its port.
pub const FAMILIES: &[Family] = &[crate::db::FAMILY, crate::messaging::FAMILY];

/// A connection's state, as a family makes it.
pub type Followed = Box<dyn StreamConn>;

/// Where a connection's finished calls go: straight into the
/// transformer's operations (an operation is a few hundred bytes: no list
/// of the family's own in between), the table numbering and linking each
/// after the record ([`StreamTable::record`]).
pub struct Calls<'a> {
    out: &'a mut Vec<Operation>,
    who: Conn,
}

/// The operations `feed` makes of its calls on a connection of no one
/// (`tls` as given): how the families' parser tests and fuzz targets read
/// their calls (`DbConn::feed_ops`, `MsgConn::feed_ops`).
pub fn calls_of(tls: bool, feed: impl FnOnce(&mut Calls<'_>)) -> Vec<Operation> {
    let nowhere = ipc_schema::SockAddr { v6: false, ip: 0, port: 0 };
    let who = Conn { id: 0, pid: 0, proc_start_ns: 0, local: nowhere, peer: nowhere, tls };
    let mut out = Vec::new();
    feed(&mut Calls::new(&mut out, who));
    out
}

impl<'a> Calls<'a> {
    /// Calls of the client connection `who`, appended to `out`.
    pub fn new(out: &'a mut Vec<Operation>, who: Conn) -> Self {
        Calls { out, who }
    }

    /// A call finished: sent by the send record of `start_ns` (its link is
    /// that send's), completed by the record of `end_ns`.
    #[inline]
    pub fn push(&mut self, start_ns: u64, end_ns: u64, call: Call) {
        self.out.push(Operation {
            role: Role::Client,
            conn: self.who,
            seq: 0,
            sub: 0,
            start_mono_ns: start_ns,
            end_mono_ns: end_ns,
            parent: None,
            traceparent: None,
            propagated: None,
            kernel_ids: None,
            unlinked: false,
            call,
        });
    }
}

/// One connection of a family: its records in, its calls out. `counts`
/// is the family's, by [`Family::reasons`].
pub trait StreamConn: Send {
    /// One record: `send` (the client wrote) or not, the time its syscall
    /// completed, whether its bytes are TLS plaintext, and its pieces
    /// ([`pieces`] layout, hostile).
    fn feed(&mut self, send: bool, ts_ns: u64, tls: bool, pieces: &[u8], out: &mut Calls<'_>, counts: &mut [u64]);
    /// The connection's first record is not its first (traced mid-way,
    /// followed afresh, or that record was lost).
    fn joined_midway(&mut self, counts: &mut [u64]);
    /// The connection closed or is forgotten: what awaited an answer is
    /// counted.
    fn close(&mut self, counts: &mut [u64]);
    /// Approximate bytes held.
    fn held_bytes(&self) -> usize;
}

struct Entry {
    conn: Box<dyn StreamConn>,
    /// Its family, an index of [`FAMILIES`].
    family: usize,
    who: Conn,
    /// Calls finished on it so far: the next one's `seq` (its span id).
    calls: u32,
    /// The latest sends' times and links, oldest first.
    sends: VecDeque<(u64, Links)>,
}

impl Held for Entry {
    fn held_bytes(&self) -> usize {
        self.conn.held_bytes()
    }
}

/// What an entry costs besides its parser's buffers.
const ENTRY_OVERHEAD: usize = std::mem::size_of::<Key>() * 2 + std::mem::size_of::<Slot<Entry>>() + SENDS_KEPT * 32 + 16;

struct Counters {
    /// A family's reasons, by [`Family::reasons`].
    reasons: Vec<Vec<Drops>>,
    evicted: Counter,
    undetected: Drops,
    state_bytes: Gauge,
    connections: Gauge,
}

/// Every byte-stream connection followed.
pub struct StreamTable {
    conns: ConnTable<Entry>,
    /// Connections forgotten while open (evicted, shed): the calls they
    /// had made (and their `born`, which tells the entry of `gone_order`
    /// that is current), for one followed afresh to number its calls on (a
    /// call's `seq` is its span id: restarting at 1 would repeat the ids of
    /// its first calls). The latest [`STREAM_CONNS`] (`gone_order`, oldest
    /// first), well under 1 MiB; a close forgets one for good.
    gone: HashMap<Key, (u32, u64)>,
    gone_order: VecDeque<(Key, u64)>,
    /// Connections forgotten while open so far: tells a `gone` entry from
    /// an older one of the same key.
    forgotten: u64,
    /// A family's counts since they were last published.
    counts: Vec<Vec<u64>>,
    stats: Counters,
}

impl StreamTable {
    /// A table holding at most `budget` bytes of parser state.
    pub fn new(budget: usize, registry: &Registry) -> StreamTable {
        let reasons: Vec<Vec<Drops>> = FAMILIES
            .iter()
            .map(|f| (f.reasons)().into_iter().map(|r| registry.drops("ringtail_dropped_events_total", r)).collect())
            .collect();
        StreamTable {
            conns: ConnTable::new(STREAM_CONNS, budget, ENTRY_OVERHEAD),
            gone: HashMap::default(),
            gone_order: VecDeque::new(),
            forgotten: 0,
            counts: reasons.iter().map(|r| vec![0; r.len()]).collect(),
            stats: Counters {
                reasons,
                // (named for the databases, the first family: the names
                // the suite and dashboards know)
                evicted: registry.counter("ringtail_db_connections_evicted_total", &[]),
                undetected: registry.drops("ringtail_dropped_events_total", "db_unknown_protocol"),
                state_bytes: registry.gauge("ringtail_db_state_bytes", &[]),
                connections: registry.gauge("ringtail_db_connections", &[]),
            },
        }
    }

    /// Connections followed.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Publishes the gauges and the counts taken since the last call (once
    /// a batch).
    pub fn publish(&mut self) {
        self.stats.state_bytes.set(self.conns.bytes() as f64);
        self.stats.connections.set(self.conns.len() as f64);
        for (drops, counts) in self.stats.reasons.iter().zip(&mut self.counts) {
            for (d, n) in drops.iter().zip(counts.iter_mut()) {
                if *n != 0 {
                    d.add(std::mem::take(n));
                }
            }
        }
    }

    /// One record of epoch `inst`: its connection is fed; the calls that
    /// finished become operations in `out`.
    pub fn record(&mut self, inst: u64, r: &RawStream<&[u8]>, out: &mut Vec<Operation>) {
        let key = (inst, r.conn.conn_id);
        if r.close {
            self.end(key, false);
            self.gone.remove(&key);
            return;
        }
        if !self.conns.contains(&key) && !self.open(key, r) {
            return;
        }
        let Some(e) = self.conns.get_mut(&key) else { return };
        if r.send {
            if e.sends.len() >= SENDS_KEPT {
                e.sends.pop_front();
            }
            e.sends.push_back((r.mono_ns, r.links));
        }
        let first = out.len();
        e.conn.feed(r.send, r.mono_ns, r.conn.tls, r.pieces, &mut Calls::new(out, e.who), &mut self.counts[e.family]);
        for op in &mut out[first..] {
            e.calls = e.calls.wrapping_add(1);
            op.seq = e.calls;
            // the link of the send that carried the call
            let links = e.sends.iter().rev().find(|(ts, _)| *ts == op.start_mono_ns).map(|(_, l)| *l).unwrap_or_default();
            op.parent = links.parent;
            op.unlinked = links.unlinked;
        }
        self.conns.recount(&key);
        self.shed();
    }

    /// Over the budget: the connections that hold the most are forgotten
    /// ([`ConnTable::shed`]), as evicted ones are.
    fn shed(&mut self) {
        for (key, e) in self.conns.shed() {
            self.stats.evicted.inc();
            self.forget(key, e, true);
        }
    }

    /// Starts following connection `key` at record `r`: its family and
    /// protocol from its first bytes (or its port). Returns false when
    /// none is told.
    fn open(&mut self, key: Key, r: &RawStream<&[u8]>) -> bool {
        let first = pieces::pieces(r.pieces).find_map(|p| match p {
            Ok(Piece::Bytes(b)) => Some(b),
            _ => None,
        });
        let first = first.unwrap_or_default();
        let (send, recv) = if r.send { (first, None) } else { (&[][..], Some(first)) };
        let told = FAMILIES
            .iter()
            .enumerate()
            .find_map(|(i, f)| (f.by_bytes)(send, recv).map(|c| (i, c)))
            .or_else(|| FAMILIES.iter().enumerate().find_map(|(i, f)| (f.by_port)(r.conn.peer.port).map(|c| (i, c))));
        let Some((family, mut conn)) = told else {
            self.stats.undetected.add(1);
            return false;
        };
        if let Some((old, e)) = self.conns.make_room() {
            self.stats.evicted.inc();
            self.forget(old, e, true);
        }
        let calls = self.gone.remove(&key).map_or(0, |(calls, _)| calls);
        if !r.start {
            // its first record is not this one (traced mid-way, followed
            // afresh, or that record was lost)
            conn.joined_midway(&mut self.counts[family]);
        }
        self.conns.insert(key, Entry { conn, family, who: Conn::of(&r.conn), calls, sends: VecDeque::new() });
        true
    }

    /// The connection ends (closed, or forgotten while open: evicted or
    /// shed): its pending calls are counted; one forgotten while open
    /// leaves its number of calls behind.
    fn end(&mut self, key: Key, open: bool) -> bool {
        let Some(e) = self.conns.remove(&key) else { return false };
        self.forget(key, e, open);
        true
    }

    /// What [`StreamTable::end`] does once connection `key` is out of the
    /// table.
    fn forget(&mut self, key: Key, mut e: Entry, open: bool) {
        e.conn.close(&mut self.counts[e.family]);
        if open {
            self.forgotten += 1;
            let id = self.forgotten;
            self.gone.insert(key, (e.calls, id));
            self.gone_order.push_back((key, id));
            while self.gone_order.len() > STREAM_CONNS {
                let Some((old, id)) = self.gone_order.pop_front() else { break };
                if self.gone.get(&old).is_some_and(|(_, b)| *b == id) {
                    self.gone.remove(&old);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use ipc_schema::{ConnHead, SockAddr};

    use super::*;
    use crate::db::pieces::encode;

    fn v4(a: [u8; 4], port: u16) -> SockAddr {
        let mut ip = [0u8; 16];
        ip[..4].copy_from_slice(&a);
        SockAddr::from_bytes(false, ip, port)
    }

    struct Rig {
        t: StreamTable,
        registry: Registry,
        ts: u64,
        out: Vec<Operation>,
    }

    impl Rig {
        fn new(budget: usize) -> Rig {
            let registry = Registry::new(ipc_schema::Component::SpanActor, 1);
            Rig { t: StreamTable::new(budget, &registry), registry, ts: 0, out: Vec::new() }
        }

        /// One record of Redis connection `conn` (its bytes whole, or a
        /// close), then the table's invariants.
        fn rec(&mut self, conn: u64, send: bool, close: bool, bytes: &[u8]) -> usize {
            let mut pieces = Vec::new();
            if !close {
                encode(&mut pieces, Piece::Bytes(bytes));
            }
            self.ts += 10;
            let r = RawStream {
                conn: ConnHead {
                    role: Role::Client,
                    pid: 100,
                    tid: 100,
                    fd: 5,
                    proc_start_ns: 7,
                    conn_id: conn,
                    local: v4([127, 0, 0, 1], 40_000),
                    peer: v4([127, 0, 0, 1], 6379),
                    tls: false,
                },
                mono_ns: self.ts,
                send,
                start: false,
                close,
                links: Links::default(),
                pieces: &pieces[..],
            };
            let before = self.out.len();
            self.t.record(1, &r, &mut self.out);
            self.check();
            self.out.len() - before
        }

        fn send(&mut self, conn: u64, bytes: &[u8]) -> usize {
            self.rec(conn, true, false, bytes)
        }

        fn recv(&mut self, conn: u64, bytes: &[u8]) -> usize {
            self.rec(conn, false, false, bytes)
        }

        fn close(&mut self, conn: u64) {
            self.rec(conn, false, true, b"");
        }

        /// The count kept matches the connections, within the budget and
        /// the number bound.
        fn check(&self) {
            let t = &self.t;
            // (recounted while that is cheap)
            if t.conns.len() <= 1000 {
                let recount: usize = t.conns.values().map(|e| e.conn.held_bytes() + ENTRY_OVERHEAD).sum();
                assert_eq!(t.conns.bytes(), recount, "bytes counted");
            }
            assert!(t.conns.bytes() <= t.conns.budget(), "{} bytes held over a budget of {}", t.conns.bytes(), t.conns.budget());
            assert!(t.conns.len() <= STREAM_CONNS);
            assert!(t.gone.len() <= STREAM_CONNS && t.gone_order.len() <= STREAM_CONNS);
            // (pruned as connections open: closes leave entries behind)
            assert!(t.conns.order_len() <= 2 * STREAM_CONNS + 65, "order: {} for {} connections", t.conns.order_len(), t.conns.len());
        }

        /// Publishes, then reads a point.
        fn count(&mut self, name: &str, reason: Option<&str>) -> f64 {
            self.t.publish();
            self.registry
                .report()
                .points
                .iter()
                .filter(|p| p.name == name && reason.is_none_or(|r| p.labels.iter().any(|(k, v)| k == "reason" && v == r)))
                .map(|p| p.value)
                .sum()
        }
    }

    const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
    const PONG: &[u8] = b"+PONG\r\n";

    /// Past STREAM_CONNS connections the oldest is forgotten (counted, its
    /// pending call counted unanswered); the others go on.
    #[test]
    fn past_stream_conns_the_oldest_connection_is_evicted() {
        let mut rig = Rig::new(1 << 30);
        for conn in 0..=STREAM_CONNS as u64 {
            assert_eq!(rig.send(conn, PING), 0);
        }
        assert_eq!(rig.t.connections(), STREAM_CONNS);
        assert_eq!(rig.count("ringtail_db_connections_evicted_total", None), 1.0);
        assert_eq!(rig.count("ringtail_dropped_events_total", Some("db_unanswered")), 1.0);
        assert_eq!(rig.count("ringtail_db_connections", None), STREAM_CONNS as f64);
        // the second oldest and the newest are still followed
        assert_eq!(rig.recv(1, PONG), 1);
        assert_eq!(rig.recv(STREAM_CONNS as u64, PONG), 1);
        // the oldest is not: followed afresh, as one found mid-way, it
        // waits for a send that begins a command, and its answer (to the
        // call counted unanswered) is read as nothing (following it
        // evicts the next oldest, the second)
        assert_eq!(rig.recv(0, PONG), 0);
        assert_eq!(rig.count("ringtail_dropped_events_total", Some("db_unpaired_answers")), 0.0);
        assert_eq!(rig.send(0, PING), 0);
        assert_eq!(rig.recv(0, PONG), 1);
        assert_eq!(rig.count("ringtail_db_connections_evicted_total", None), 2.0);
        assert_eq!(rig.t.connections(), STREAM_CONNS);
        assert!(!rig.t.conns.contains(&(1, 1)));
    }

    /// A connection that grows its parser's state (a pipeline never
    /// answered) past the budget is shed, the largest first: what the
    /// table holds comes back under 7/8 of the budget, a small connection
    /// beside it goes on, and the hostile one starts afresh.
    #[test]
    fn a_connection_growing_past_the_budget_is_shed() {
        // (a Redis connection's 1024 pending calls, its bound, hold about
        // 220 KiB)
        const BUDGET: usize = 128 << 10;
        let mut rig = Rig::new(BUDGET);
        assert_eq!(rig.send(1, PING), 0);
        let pipeline = b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n".repeat(64);
        let mut sheds = 0;
        let mut peak = 0;
        for _ in 0..200 {
            rig.send(2, &pipeline);
            let held = rig.t.conns.get(&(1, 2)).map(|e| e.conn.held_bytes());
            peak = peak.max(rig.t.conns.bytes());
            if held.is_none() {
                sheds += 1;
                assert!(rig.t.conns.bytes() <= BUDGET / 8 * 7, "{} bytes after shedding", rig.t.conns.bytes());
            }
        }
        assert!(sheds >= 10, "shed {sheds} times: {peak} bytes at most");
        assert!(peak > BUDGET / 2, "the pipeline grew the state: {peak}");
        assert_eq!(rig.count("ringtail_db_connections_evicted_total", None), sheds as f64);
        assert!(rig.count("ringtail_dropped_events_total", Some("db_unanswered")) >= 64.0);
        // the small connection was never shed
        assert_eq!(rig.recv(1, PONG), 1);
    }

    /// A connection forgotten while open (evicted, shed) and followed
    /// afresh numbers its calls on from where it was: its calls' span ids
    /// (`seq`) never repeat.
    #[test]
    fn a_connection_followed_afresh_never_repeats_a_span_id() {
        let mut rig = Rig::new(1 << 30);
        let mut seqs = Vec::new();
        rig.send(0, PING);
        assert_eq!(rig.recv(0, PONG), 1);
        for conn in 1..=STREAM_CONNS as u64 {
            rig.send(conn, PING);
        }
        assert!(!rig.t.conns.contains(&(1, 0)), "evicted");
        rig.send(0, PING);
        assert_eq!(rig.recv(0, PONG), 1);
        // shed: connection 0 grows past a small budget
        rig.t.conns.set_budget(128 << 10);
        rig.t.shed();
        rig.send(0, PING);
        assert_eq!(rig.recv(0, PONG), 1);
        let pipeline = b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n".repeat(64);
        while rig.t.conns.contains(&(1, 0)) {
            rig.send(0, &pipeline);
        }
        rig.send(0, PING);
        assert_eq!(rig.recv(0, PONG), 1);
        for op in &rig.out {
            if op.conn.id == 0 {
                seqs.push(op.seq);
            }
        }
        assert_eq!(seqs, [1, 2, 3, 4], "the calls of connection 0");
        // a close forgets it for good
        rig.close(0);
        assert!(!rig.t.gone.contains_key(&(1, 0)));
    }

    /// A close frees the connection and its bytes, and counts its pending
    /// calls; a close of a connection never followed is nothing.
    #[test]
    fn close_frees() {
        let mut rig = Rig::new(64 << 20);
        for conn in 0..100 {
            rig.send(conn, &PING.repeat(3));
        }
        assert_eq!(rig.t.connections(), 100);
        assert!(rig.t.conns.bytes() >= 100 * ENTRY_OVERHEAD);
        for conn in 0..100 {
            rig.close(conn);
        }
        rig.close(1_000);
        assert_eq!((rig.t.connections(), rig.t.conns.bytes()), (0, 0));
        assert_eq!(rig.count("ringtail_dropped_events_total", Some("db_unanswered")), 300.0);
        assert_eq!(rig.count("ringtail_db_connections_evicted_total", None), 0.0);
        assert_eq!(rig.count("ringtail_db_state_bytes", None), 0.0);
        // Churn: connections opened and closed by the thousand leave
        // nothing behind (the order queue is pruned as it goes).
        for conn in 10_000..60_000 {
            rig.send(conn, PING);
            rig.close(conn);
        }
        assert_eq!((rig.t.connections(), rig.t.conns.bytes()), (0, 0));
        assert!(rig.t.conns.order_len() <= 66, "{}", rig.t.conns.order_len());
    }
}
