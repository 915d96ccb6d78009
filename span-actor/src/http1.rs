//! HTTP/1.x, the protocol module: the kernel's request events in,
//! [`Operation`]s out.
//!
//! An event is one request and its response on a connection, with the
//! request's captured bytes ([`crate::http`] reads its head). What the
//! module remembers between events is pipelining: a capture that holds
//! several requests (a client that did not wait for answers) makes the
//! first an operation at once, and each later one an operation when its
//! response comes (an `orphan` event: a response with no request bytes of
//! its own), timed from the previous response's end. Bounded host-wide:
//! at most [`PIPELINES`] connections and [`PIPELINED_HEADS`] heads wait;
//! past either, what waited is counted and forgotten.
//!
//! An `Upgrade: h2c` request answered `101` is not an operation here: it
//! is stream 1 of the HTTP/2 connection that follows, so [`Http1::event`]
//! hands it back as an [`Upgrade`] for the HTTP/2 module
//! ([`crate::h2::table::H2Table::upgrade_request`]); this module knows
//! nothing of HTTP/2.

use std::collections::VecDeque;

use ipc_schema::{RawEvent, Role};
use runtime_kit::counters::{Drops, Registry};
use rustc_hash::FxHashMap as HashMap;

use crate::http::{parse_pipeline, parse_request, RequestHead};
use crate::operation::{Call, Conn, HttpExchange, Operation};

/// Connections with pipelined requests awaiting their responses.
pub const PIPELINES: usize = 16_384;
/// Pipelined request heads waiting for their responses, all connections
/// together (a head is ~250 bytes; one capture holds up to ~28 of them, so
/// [`PIPELINES`] alone would allow ~100 MiB to a client that pipelines on
/// thousands of connections to a server that closes after one answer).
pub const PIPELINED_HEADS: usize = 32_768;

/// An `Upgrade: h2c` request answered `101`: the HTTP/2 connection that
/// follows on connection `key` continues it as its stream 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upgrade {
    /// (loader instance or epoch, connection id).
    pub key: (u64, u64),
    pub head: RequestHead,
    /// When it began (CLOCK_MONOTONIC ns).
    pub start_ns: u64,
    /// A server's: the client connection on this host that sent it (the
    /// kernel's same-host join of the request), which is then the caller of
    /// every stream of the connection.
    pub caller: Option<u64>,
}

/// Requests of one connection waiting for their responses.
struct Pipe {
    heads: VecDeque<RequestHead>,
    /// The capture's request number: its later requests' ids derive from it.
    seq: u32,
    next_sub: u32,
    last_end_mono: u64,
}

/// What HTTP/1 remembers between events.
pub struct Http1 {
    pipes: HashMap<(u64, u64), Pipe>,
    /// Request heads waiting in `pipes`, all connections together.
    heads: usize,
    unparsable: Drops,
    orphan_unmatched: Drops,
    pipelined_unanswered: Drops,
}

impl Http1 {
    /// The module, its drops counted in `registry`.
    pub fn new(registry: &Registry) -> Http1 {
        Http1 {
            pipes: HashMap::default(),
            heads: 0,
            unparsable: registry.drops("ringtail_dropped_events_total", "unparsable_request"),
            orphan_unmatched: registry.drops("ringtail_dropped_events_total", "unmatched_response"),
            pipelined_unanswered: registry.drops("ringtail_dropped_events_total", "pipelined_unanswered"),
        }
    }

    /// Pipelined request heads waiting for their responses.
    pub fn pipelined_heads(&self) -> usize {
        self.heads
    }

    /// One event of loader instance (or epoch) `inst`: its operation (if
    /// any) to `out`; an `Upgrade: h2c` request, for the HTTP/2 module,
    /// returned.
    pub fn event(&mut self, inst: u64, ev: &RawEvent<&[u8]>, out: &mut Vec<Operation>) -> Option<Upgrade> {
        let key = (inst, ev.conn.conn_id);
        if ev.h2c {
            let Some(head) = parse_request(ev.request) else {
                self.unparsable.add(1);
                return None;
            };
            // a server's parent is its caller on this host (join.h)
            let caller = ev.parent.filter(|_| ev.conn.role == Role::Server).map(|(conn, _)| conn);
            return Some(Upgrade { key, head, start_ns: ev.start_mono_ns, caller });
        }
        if ev.orphan {
            self.pipelined_response(key, ev, out);
            return None;
        }
        let mut heads = parse_pipeline(ev.request);
        if heads.is_empty() {
            self.unparsable.add(1);
            return None;
        }
        let first = heads.remove(0);
        if !self.pipes.is_empty() {
            let left = self.pipes.remove(&key).map_or(0, |p| p.heads.len());
            self.heads -= left;
            self.pipelined_unanswered.add(left as u64);
        }
        if !heads.is_empty() && ev.conn.role == Role::Server {
            if self.pipes.len() >= PIPELINES || self.heads + heads.len() > PIPELINED_HEADS {
                // Bounded: what the forgotten connections still waited
                // for is counted, not silently lost.
                self.pipelined_unanswered.add(self.heads as u64);
                self.pipes.clear();
                self.heads = 0;
            }
            self.heads += heads.len();
            self.pipes.insert(key, Pipe { heads: heads.into(), seq: ev.seq, next_sub: 1, last_end_mono: ev.end_mono_ns });
        }
        out.push(operation(ev, first, ev.seq, 0, ev.start_mono_ns));
        None
    }

    /// The response to the next pipelined request of its connection.
    fn pipelined_response(&mut self, key: (u64, u64), ev: &RawEvent<&[u8]>, out: &mut Vec<Operation>) {
        let Some(pipe) = self.pipes.get_mut(&key) else {
            self.orphan_unmatched.add(1);
            return;
        };
        let Some(head) = pipe.heads.pop_front() else {
            self.orphan_unmatched.add(1);
            return;
        };
        self.heads -= 1;
        let (seq, sub, start) = (pipe.seq, pipe.next_sub, pipe.last_end_mono);
        pipe.next_sub += 1;
        pipe.last_end_mono = ev.end_mono_ns;
        if pipe.heads.is_empty() {
            self.pipes.remove(&key);
        }
        out.push(operation(ev, head, seq, sub, start));
    }
}

/// Request `head` of event `ev`, answered by its response, as an operation
/// (`seq`, `sub` its place; it started at `start`).
fn operation(ev: &RawEvent<&[u8]>, head: RequestHead, seq: u32, sub: u32, start: u64) -> Operation {
    let RequestHead { method, path, query, target_host, version, host, user_agent, traceparent, .. } = head;
    Operation {
        role: ev.conn.role,
        conn: Conn::of(&ev.conn),
        seq,
        sub,
        start_mono_ns: start,
        end_mono_ns: ev.end_mono_ns,
        parent: ev.parent,
        traceparent,
        // (written into the capture's first request only)
        propagated: if sub == 0 { ev.propagated } else { None },
        // (decided for the capture's first request only)
        kernel_ids: if sub == 0 { ev.kernel_ids } else { None },
        unlinked: ev.unlinked,
        call: Call::Http(HttpExchange {
            method,
            path,
            query,
            authority: target_host.or(host),
            scheme: None,
            version: version.as_str(),
            user_agent,
            status: Some(ev.status),
            rpc: None,
        }),
    }
}
