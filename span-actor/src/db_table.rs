//! [`DbTable`]: every database connection followed, the kernel's records
//! in (`RawH2` with `db`), [`Operation`]s out (one per database call).
//!
//! Bounded host-wide, whatever clients and servers send: at most
//! [`DB_CONNS`] connections (a new one past it evicts the oldest), and at
//! most `pipeline.h2_state_mb` of parser state in all (past it the
//! connections that hold the most are forgotten, their pending calls
//! counted `unanswered`; one that goes on is followed afresh, as one seen
//! mid-way). What the parsers could not follow is counted by reason
//! (`ringtail_dropped_events_total{reason="db_*"}`).

use std::collections::VecDeque;

use ipc_schema::{DbLinks, RawH2, Role};
use runtime_kit::counters::{Counter, Drops, Gauge, Registry};
use rustc_hash::FxHashMap as HashMap;

use crate::db::pieces::{self, Piece};
use crate::db::{detect, DbConn, DbCounts, DbOp};
use crate::operation::{Call, Conn, Operation};

/// Database connections followed at once; past it the oldest is forgotten.
pub const DB_CONNS: usize = 16_384;
/// A connection's latest sends whose links are kept, to give each call the
/// link of the send that carried it (a pipeline deeper than this in
/// flight links its oldest calls to nothing).
const SENDS_KEPT: usize = 64;
/// What the budget is brought down to once exceeded (7/8 of it).
const LOW_WATER: (usize, usize) = (7, 8);

/// A connection (epoch, connection number).
type Key = (u64, u64);

struct Entry {
    db: DbConn,
    who: Conn,
    /// Calls finished on it so far: the next one's `seq` (its span id).
    calls: u32,
    /// The latest sends' times and links, oldest first.
    sends: VecDeque<(u64, DbLinks)>,
    born: u64,
    /// What it holds, as last counted into [`DbTable::bytes`].
    bytes: usize,
}

/// What an entry costs besides its parser's buffers.
const ENTRY_OVERHEAD: usize = std::mem::size_of::<Key>() * 2 + std::mem::size_of::<Entry>() + SENDS_KEPT * 32 + 16;

struct Counters {
    /// By [`DbCounts::labelled`] order.
    reasons: Vec<Drops>,
    evicted: Counter,
    undetected: Drops,
    state_bytes: Gauge,
    connections: Gauge,
}

/// Every database connection followed.
pub struct DbTable {
    conns: HashMap<Key, Entry>,
    order: VecDeque<(Key, u64)>,
    born: u64,
    bytes: usize,
    budget: usize,
    counts: DbCounts,
    stats: Counters,
    ops: Vec<DbOp>,
}

impl DbTable {
    /// A table holding at most `budget` bytes of parser state.
    pub fn new(budget: usize, registry: &Registry) -> DbTable {
        DbTable {
            conns: HashMap::default(),
            order: VecDeque::new(),
            born: 0,
            bytes: 0,
            budget,
            counts: DbCounts::default(),
            stats: Counters {
                reasons: DbCounts::default().labelled().iter().map(|(r, _)| registry.drops("ringtail_dropped_events_total", r)).collect(),
                evicted: registry.counter("ringtail_db_connections_evicted_total", &[]),
                undetected: registry.drops("ringtail_dropped_events_total", "db_unknown_protocol"),
                state_bytes: registry.gauge("ringtail_db_state_bytes", &[]),
                connections: registry.gauge("ringtail_db_connections", &[]),
            },
            ops: Vec::new(),
        }
    }

    /// Connections followed.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Publishes the gauges and the counts taken since the last call (once
    /// a batch).
    pub fn publish(&mut self) {
        self.stats.state_bytes.set(self.bytes as f64);
        self.stats.connections.set(self.conns.len() as f64);
        let counts = std::mem::take(&mut self.counts);
        for (d, (_, n)) in self.stats.reasons.iter().zip(counts.labelled()) {
            if n != 0 {
                d.add(n);
            }
        }
    }

    /// One record of epoch `inst`: its connection is fed; the calls that
    /// finished become operations in `out`.
    pub fn record(&mut self, inst: u64, r: &RawH2<&[u8]>, out: &mut Vec<Operation>) {
        let key = (inst, r.conn_id);
        if r.close {
            self.end(key);
            return;
        }
        if !self.conns.contains_key(&key) && !self.open(key, r) {
            return;
        }
        let Some(e) = self.conns.get_mut(&key) else { return };
        if r.send {
            if e.sends.len() >= SENDS_KEPT {
                e.sends.pop_front();
            }
            e.sends.push_back((r.mono_ns, r.db.unwrap_or_default()));
        }
        e.db.feed(r.send, r.mono_ns, r.tls, r.pieces, &mut self.ops, &mut self.counts);
        for op in self.ops.drain(..) {
            e.calls = e.calls.wrapping_add(1);
            // the link of the send that carried the call
            let links = e.sends.iter().rev().find(|(ts, _)| *ts == op.start_ns).map(|(_, l)| *l).unwrap_or_default();
            out.push(Operation {
                role: Role::Client,
                conn: e.who,
                seq: e.calls,
                sub: 0,
                start_mono_ns: op.start_ns,
                end_mono_ns: op.end_ns,
                parent: links.parent,
                traceparent: None,
                propagated: None,
                unlinked: links.unlinked,
                call: Call::Db(op),
            });
        }
        self.recount(&key);
        self.shed();
    }

    /// Starts following connection `key` at record `r`: its protocol from
    /// its first bytes (or its port). Returns false when none is told.
    fn open(&mut self, key: Key, r: &RawH2<&[u8]>) -> bool {
        let first = pieces::pieces(r.pieces).find_map(|p| match p {
            Ok(Piece::Bytes(b)) => Some(b),
            _ => None,
        });
        let first = first.unwrap_or_default();
        let system = if r.send { detect(first, None, r.peer.port) } else { detect(&[], Some(first), r.peer.port) };
        let Some(system) = system else {
            self.stats.undetected.add(1);
            return false;
        };
        if self.conns.len() >= DB_CONNS {
            self.evict_oldest();
        }
        let who = Conn { id: r.conn_id, pid: r.pid, proc_start_ns: r.proc_start_ns, local: r.local, peer: r.peer, tls: r.tls };
        self.born += 1;
        self.conns.insert(key, Entry { db: DbConn::new(system), who, calls: 0, sends: VecDeque::new(), born: self.born, bytes: 0 });
        self.order.push_back((key, self.born));
        if self.order.len() > 2 * self.conns.len() + 64 {
            let conns = &self.conns;
            self.order.retain(|(k, born)| conns.get(k).is_some_and(|e| e.born == *born));
        }
        true
    }

    /// The connection ends (closed, evicted or shed): its pending calls
    /// are counted.
    fn end(&mut self, key: Key) -> bool {
        let Some(mut e) = self.conns.remove(&key) else { return false };
        self.bytes -= e.bytes;
        e.db.close(&mut self.counts);
        true
    }

    fn evict_oldest(&mut self) {
        while let Some((key, born)) = self.order.pop_front() {
            if self.conns.get(&key).is_some_and(|e| e.born == born) {
                self.stats.evicted.inc();
                self.end(key);
                return;
            }
        }
    }

    fn recount(&mut self, key: &Key) {
        if let Some(e) = self.conns.get_mut(key) {
            let now = e.db.held_bytes() + ENTRY_OVERHEAD;
            self.bytes = self.bytes - e.bytes + now;
            e.bytes = now;
        }
    }

    /// Over the budget: forgets the connections that hold the most until
    /// what is left is under 7/8 of it.
    fn shed(&mut self) {
        if self.bytes <= self.budget {
            return;
        }
        let target = self.budget / LOW_WATER.1 * LOW_WATER.0;
        let mut by_size: Vec<(usize, Key)> = self.conns.iter().map(|(k, e)| (e.bytes, *k)).collect();
        by_size.sort_unstable_by(|a, b| b.cmp(a));
        for (_, key) in by_size {
            if self.bytes <= target {
                break;
            }
            if self.end(key) {
                self.stats.evicted.inc();
            }
        }
    }
}
