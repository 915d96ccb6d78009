//! [`H2Table`]: every HTTP/2 connection followed, the kernel's records in,
//! [`Operation`]s out (one per finished stream).
//!
//! Bounded host-wide, whatever clients do, by a [`ConnTable`]: at most
//! [`H2_CONNS`] connections (a new one past it evicts the oldest, whose
//! open streams end as `Closed`), and at most the connection-state budget
//! (`pipeline.conn_state_mb`) of state in all (past it the connections
//! that hold the most are forgotten, their open streams dropped and
//! counted). A connection that ends, for any reason
//! (its close, a record whose frames cannot be read, eviction), goes
//! through [`H2Table::close`]: its open streams end, its counts are taken,
//! its streams become operations.

use ipc_schema::{RawH2, Role};
use runtime_kit::counters::{Counter, Drops, Gauge, Registry};
use rustc_hash::FxHashMap as HashMap;

use super::{grpc, record, Dir, DropReason, H2Conn, H2Stats, StreamDone, PROTOCOL_VERSION};
use crate::conn_table::{ConnTable, Held, Key, Slot};
use crate::http1::Upgrade;
use crate::operation::{Call, Conn, HttpExchange, Operation};

/// HTTP/2 connections followed at once; past it the oldest is closed (its
/// open streams end as `Closed`) and counted.
pub const H2_CONNS: usize = 16_384;
/// The `sub` of every HTTP/2 span's ids (its `seq` is the stream id): never
/// that of an HTTP/1 request on the same connection (an `Upgrade: h2c`).
pub const H2_SUB: u32 = u32::MAX;
/// `Upgrade: h2c` requests whose connection's first HTTP/2 record has not
/// come yet (it follows at once, in the same or the next batch). A head
/// comes from at most a capture's bytes (512): at most ~1 MiB in all.
const H2C_PENDING: usize = 1024;
/// One connection being followed, and who it belongs to.
struct Entry {
    /// Boxed: the table's slots stay small (a hash table holds up to
    /// 16/7 slots per entry).
    conn: Box<H2Conn>,
    role: Role,
    who: Conn,
    /// A server connection's client connection on this host (the kernel's
    /// same-host join), once a record named it.
    caller: Option<u64>,
}

impl Held for Entry {
    fn held_bytes(&self) -> usize {
        self.conn.state_bytes()
    }
}

/// What an entry costs besides its connection's state (its box counted
/// there): its slot in the table, and its place in the eviction order (a
/// deque that may hold twice as many as are live, and doubles as it
/// grows).
const ENTRY_OVERHEAD: usize =
    runtime_kit::memory::table_slot(std::mem::size_of::<(Key, Slot<Entry>)>()) + 4 * std::mem::size_of::<(Key, u64)>();

/// What is not traced of HTTP/2, counted.
struct Counters {
    /// By [`DropReason::ALL`] order.
    dropped: Vec<Drops>,
    header_blocks_truncated: Counter,
    hpack_errors: Counter,
    given_up: Counter,
    /// Of the connections given up, those at a frame on a stream the
    /// client never opened, and those at a request out of order (which
    /// way a connection's framing went wrong, unseen by the kernel).
    unopened_stream_frames: Counter,
    requests_out_of_order: Counter,
    malformed: Drops,
    evicted: Counter,
    /// Streams dropped with the connections forgotten to keep within
    /// the connection-state budget.
    state_full: Drops,
    /// The bytes all connections hold.
    state_bytes: Gauge,
    /// `Upgrade: h2c` requests whose HTTP/2 start never came.
    h2c_unfollowed: Drops,
}

impl Counters {
    fn add(&self, s: &H2Stats) {
        for (d, r) in self.dropped.iter().zip(DropReason::ALL) {
            d.add(s.dropped(r));
        }
        self.header_blocks_truncated.add(s.header_blocks_truncated);
        self.hpack_errors.add(s.hpack_errors);
        self.given_up.add(s.connections_given_up);
        self.unopened_stream_frames.add(s.unopened_stream_frames);
        self.requests_out_of_order.add(s.requests_out_of_order);
    }
}

/// Every HTTP/2 connection followed.
pub struct H2Table {
    conns: ConnTable<Entry>,
    /// `Upgrade: h2c` requests by connection, with their start, waiting for
    /// the connection's first HTTP/2 record (they become its stream 1).
    upgrades: HashMap<Key, Upgrade>,
    /// The RPC conventions to follow (`OTEL_SEMCONV_STABILITY_OPT_IN`).
    rpc_mode: grpc::Mode,
    stats: Counters,
    /// Streams finished by the record being read.
    done: Vec<StreamDone>,
}

impl H2Table {
    /// A table holding at most `budget` bytes of connection state.
    pub fn new(budget: usize, rpc_mode: grpc::Mode, registry: &Registry) -> H2Table {
        H2Table {
            conns: ConnTable::new(H2_CONNS, budget, ENTRY_OVERHEAD),
            upgrades: HashMap::default(),
            rpc_mode,
            stats: Counters {
                dropped: DropReason::ALL.iter().map(|r| registry.drops("ringtail_dropped_events_total", r.as_str())).collect(),
                header_blocks_truncated: registry.counter("ringtail_h2_header_blocks_truncated_total", &[]),
                hpack_errors: registry.counter("ringtail_h2_hpack_errors_total", &[]),
                given_up: registry.counter("ringtail_h2_connections_given_up_total", &[]),
                unopened_stream_frames: registry.counter("ringtail_h2_unopened_stream_frames_total", &[]),
                requests_out_of_order: registry.counter("ringtail_h2_requests_out_of_order_total", &[]),
                malformed: registry.drops("ringtail_dropped_events_total", "h2_malformed_record"),
                evicted: registry.counter("ringtail_h2_connections_evicted_total", &[]),
                state_full: registry.drops("ringtail_dropped_events_total", "h2_state_full"),
                state_bytes: registry.gauge("ringtail_h2_state_bytes", &[]),
                h2c_unfollowed: registry.drops("ringtail_dropped_events_total", "h2c_unfollowed"),
            },
            done: Vec::new(),
        }
    }

    /// Connections followed.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Bytes they hold, all together.
    pub fn state_bytes(&self) -> usize {
        self.conns.bytes()
    }

    /// [`H2Table::state_bytes`] counted afresh, connection by connection,
    /// stream by stream (for tests).
    pub fn state_bytes_recounted(&self) -> usize {
        self.conns.values().map(|e| e.conn.state_bytes_recounted() + ENTRY_OVERHEAD).sum()
    }

    /// Open streams, all connections together.
    pub fn open_streams(&self) -> usize {
        self.conns.values().map(|e| e.conn.open_streams()).sum()
    }

    /// Publishes the state gauge (once a batch).
    pub fn publish(&self) {
        self.stats.state_bytes.set(self.conns.bytes() as f64);
    }

    /// The `101` of an `Upgrade: h2c` ([`crate::http1::Http1::event`]
    /// hands it over): its request (an HTTP/1 request, which HTTP/2
    /// continues as stream 1) waits for its connection's first record.
    pub fn upgrade_request(&mut self, up: Upgrade) {
        if self.upgrades.len() >= H2C_PENDING {
            self.stats.h2c_unfollowed.add(self.upgrades.len() as u64);
            self.upgrades.clear();
        }
        if self.upgrades.insert(up.key, up).is_some() {
            self.stats.h2c_unfollowed.add(1);
        }
    }

    /// One record of loader instance (or epoch) `inst`: its connection is
    /// fed; the streams that ended become operations in `out`.
    pub fn record(&mut self, inst: u64, r: &RawH2<&[u8]>, out: &mut Vec<Operation>) {
        let key = (inst, r.conn.conn_id);
        if r.close {
            self.close(key, r.mono_ns, out);
            return;
        }
        let Ok(pieces) = record::pieces(r.pieces) else {
            // Its frame boundaries are unknown from here: give it up.
            self.stats.malformed.add(1);
            self.close(key, r.mono_ns, out);
            return;
        };
        if !self.conns.contains(&key) {
            // Bounded: the oldest connection goes (its open streams end now).
            if let Some((_, e)) = self.conns.make_room() {
                self.stats.evicted.inc();
                self.finish(e, Some(r.mono_ns), out);
            }
            self.open(key, r);
        }
        let Some(e) = self.conns.get_mut(&key) else { return };
        if r.caller.is_some() && e.role == Role::Server {
            e.caller = r.caller;
        }
        let dir = if r.send { Dir::Send } else { Dir::Recv };
        e.conn.feed(dir, r.mono_ns, &pieces, &mut self.done);
        let (role, who, caller) = (e.role, e.who, e.caller);
        self.stats.add(&e.conn.take_stats());
        self.operations(role, who, caller, out);
        self.conns.recount(&key);
        self.shed();
    }

    /// Starts following connection `key` at record `r`.
    fn open(&mut self, key: Key, r: &RawH2<&[u8]>) {
        // Without its start (the span-actor restarted, or the table
        // evicted it) the HPACK tables' past is unknown.
        let mut conn = H2Conn::new(r.conn.role, !r.start);
        let mut caller = None;
        if let Some(Upgrade { head, start_ns: start, caller: c, .. }) = r.upgrade.then(|| self.upgrades.remove(&key)).flatten() {
            caller = c;
            let target = match &head.query {
                Some(q) => format!("{}?{q}", head.path),
                None => head.path.clone(),
            };
            let mut headers: Vec<(&[u8], &[u8])> = Vec::new();
            for (name, value) in [("host", &head.host), ("user-agent", &head.user_agent), ("traceparent", &head.traceparent)] {
                if let Some(v) = value {
                    headers.push((name.as_bytes(), v.as_bytes()));
                }
            }
            conn.seed_upgrade(start, head.method.as_bytes(), target.as_bytes(), &headers);
        }
        let who = Conn::of(&r.conn);
        self.conns.insert(key, Entry { conn: Box::new(conn), role: r.conn.role, who, caller });
    }

    /// The connection closed (or can no longer be read) at `ts`: out of
    /// the table, then [`H2Table::finish`]ed.
    fn close(&mut self, key: Key, ts: u64, out: &mut Vec<Operation>) {
        if let Some(e) = self.conns.remove(&key) {
            self.finish(e, Some(ts), out);
        }
    }

    /// A connection out of the table ends: its counts taken, and its open
    /// streams either ended at `ts` as `Closed` (operations in `out`: it
    /// closed, could no longer be read, or was evicted) or, without a `ts`
    /// (shed to keep within the budget), dropped and counted.
    fn finish(&mut self, mut e: Entry, ts: Option<u64>, out: &mut Vec<Operation>) {
        match ts {
            Some(ts) => e.conn.close(ts, &mut self.done),
            None => self.stats.state_full.add(e.conn.open_streams() as u64),
        }
        self.stats.add(&e.conn.take_stats());
        self.operations(e.role, e.who, e.caller, out);
    }

    /// Over the connection-state budget: the connections that hold the
    /// most are forgotten ([`ConnTable::shed`]). A flood of never-ended
    /// streams sits in a few big connections and goes first; the small ones
    /// of ordinary clients stay. A forgotten connection's open streams are
    /// dropped (no span: they did not end) and counted; if it goes on, it
    /// is followed afresh from its next record, as one seen mid-way.
    fn shed(&mut self) {
        let mut none = Vec::new();
        for (_, e) in self.conns.shed() {
            self.finish(e, None, &mut none);
            self.stats.evicted.inc();
        }
    }

    /// The streams finished on a connection of `role`, `who`'s: operations
    /// (a server's joined to the stream of the same id on `caller`, the
    /// client connection on this host that opened it).
    fn operations(&mut self, role: Role, who: Conn, caller: Option<u64>, out: &mut Vec<Operation>) {
        for d in self.done.drain(..) {
            let mut op = operation(role, who, d, self.rpc_mode);
            op.parent = caller.map(|c| (c, op.seq));
            out.push(op);
        }
    }
}

/// A finished stream as an operation: an HTTP call with version "2" (and
/// the gRPC conventions' view when it is a gRPC call).
pub fn operation(role: Role, conn: Conn, d: StreamDone, rpc_mode: grpc::Mode) -> Operation {
    let rpc = grpc::describe(rpc_mode, &d);
    Operation {
        role,
        conn,
        seq: d.stream_id,
        sub: H2_SUB,
        start_mono_ns: d.start_ns,
        end_mono_ns: d.end_ns,
        parent: None,
        traceparent: d.traceparent,
        propagated: None,
        kernel_ids: None,
        unlinked: false,
        call: Call::Http(HttpExchange {
            method: d.method,
            path: d.path,
            query: d.query,
            authority: d.authority,
            scheme: d.scheme,
            version: PROTOCOL_VERSION,
            user_agent: d.user_agent,
            status: d.status,
            rpc: rpc.map(Box::new),
        }),
    }
}
