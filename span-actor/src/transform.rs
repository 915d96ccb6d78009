//! Raw request events → spans: the span-actor's whole judgement, as plain
//! code the actors call (and benchmarks and tests can call directly).
//!
//! Each protocol module turns its records into [`Operation`]s
//! ([`crate::http1`], [`crate::h2::table`], [`crate::stream_table`]);
//! [`Transformer::emit`] is the one path that makes spans and resources of
//! them, whatever their protocol: the resource, the parts the call's
//! conventions make of it ([`SpanParts`], by its family's module:
//! [`crate::semconv::Http::judge`], [`crate::db::judge`]), the ids, and
//! the trace (a `traceparent` it carried, the server span a client span
//! was made under, the client span on this host that called a server
//! span; held a while if that span has not come yet).

use std::collections::{HashSet, VecDeque};

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipc_schema::{RawBatch, Role, ServiceResource, SockAddr, Span, SpanKind, SpanLink, Text};
use ringtail_config::Settings;
use runtime_kit::counters::{Counter, Registry};

use crate::db;
use crate::graph::{Caller, Callers, Carried};
use crate::h2::grpc;
use crate::h2::table::{H2Table, H2_SUB};
use crate::http1::Http1;
use crate::ids::{self, TraceParent};
use crate::messaging::groups::Groups;
use crate::messaging::through::{Producer, Producers};
use crate::messaging::{Membership, MsgOp, MsgSystem, OffsetRange, OpType};
use crate::naming::{host_name, Naming};
use crate::operation::{Addrs, Call, Conn, Operation, SpanParts};
use crate::semconv;
use crate::stream_table::StreamTable;

/// Spans whose trace context is remembered for the spans that join them
/// (slots of a direct-mapped table; a power of two).
const CONTEXTS: usize = 16_384;
/// Spans held for the span they join, all together: beyond, a span goes
/// out at once in a trace of its own (counted).
const MAX_HELD: usize = 65_536;
/// Server spans remembered by the `traceparent` they carried in, for the
/// calls that forward it (slots of a direct-mapped table; a power of two).
const FORWARDED: usize = 4096;
/// A process whose calls waited this many times in a row for a server
/// request that forwarded their `traceparent`, and none came (its calls
/// carry their own: an application's SDK), has its calls' waits skipped.
const FORWARD_TRIES: u8 = 8;
/// Processes whose forwarding is remembered.
const FORWARD_PROCS: usize = 4096;
/// Kafka consumer spans waiting for the producers of their messages, all
/// together: beyond, a span goes out at once with the links known.
const MAX_LINK_WAITS: usize = 4096;
/// The `sub` of a [`CtxKey`] that names a `traceparent` a process received
/// (with the key's connection field a hash of it, its request field the
/// process): no operation has it (HTTP/1 subs count up from 0; HTTP/2's is
/// [`H2_SUB`]).
const FORWARD_SUB: u32 = u32::MAX - 1;

/// Which raw batch (loader instance, seq) a span came from.
pub type Origin = (u64, u64);

/// A finished span, its resource, and where it came from.
#[derive(Debug, Clone)]
pub struct Produced {
    pub resource: Arc<ServiceResource>,
    /// Boxed: a span is ~750 bytes, and a `Produced` is moved several times
    /// on its way to a batch (into the output, to the publisher, into its
    /// batch); unboxed, each move copied it (memmove was a quarter of the
    /// span-actor's profile, these copies part of it).
    pub span: Box<Span<Text>>,
    pub origin: Origin,
}

/// What one raw batch made: every span counted here must become safe
/// (exported, or dropped and counted) before the batch may be acknowledged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Made {
    /// Spans of this batch pushed to the output now.
    pub spans: usize,
    /// Client spans of this batch held for their parent (they reach the
    /// output later, from another batch's transform or [`Transformer::expire`]).
    pub held: usize,
}

impl Made {
    /// Everything this batch's acknowledgement waits for.
    pub fn total(&self) -> usize {
        self.spans + self.held
    }
}

/// What every operation of one raw batch shares: whose ids it derives,
/// where its spans go and how they are counted.
struct Batch<'a> {
    /// The capture epoch (or loader instance) ids derive from.
    inst: u64,
    origin: Origin,
    /// CLOCK_MONOTONIC → Unix ns.
    offset: i64,
    now: Instant,
    out: &'a mut Vec<Produced>,
    made: Made,
}

/// Names a span's trace context: (loader epoch, connection, request or
/// stream, `sub` (0, or an HTTP/2 stream's [`H2_SUB`]), the span is a
/// client's).
type CtxKey = (u64, u64, u32, u32, bool);

/// Whether spans of `sub` are named by others: an HTTP/1 capture's first
/// request, or an HTTP/2 stream.
fn named(sub: u32) -> bool {
    sub == 0 || sub == H2_SUB
}

/// A span waiting for the context of the span it joins.
struct Held {
    resource: Arc<ServiceResource>,
    span: Box<Span<Text>>,
    origin: Origin,
    /// Its own context, for the spans that wait for it in turn.
    own: Option<CtxKey>,
    /// Its trace and parent if what it waits for never comes.
    fallback: (u128, u64),
}

struct Stats {
    spans: Counter,
    parent_timeouts: Counter,
    held_full: Counter,
    /// Messages a Kafka consumer got whose producer span is not known here.
    producer_unknown: Counter,
    /// Producer spans of a consumer's messages found, whose trace is not
    /// (not exported, forgotten, or still waiting when the consumer's
    /// wait ended).
    producer_untraced: Counter,
    /// Producer spans of a consumer's messages past a span's links.
    producers_past_max: Counter,
}

/// A Kafka consumer span waiting for the producer spans of its messages
/// (their answers may reach ringtail after its own; or they wait for
/// their own parent): resumed by [`Transformer::link_waits`].
struct LinkWait {
    p: Produced,
    /// The capture epoch its ids derive from.
    inst: u64,
    /// (connection, call, sub) and what its operation said of its trace.
    ids: (u64, u32, u32),
    links: OwnedLinks,
    /// The broker it fetched from, and the messages' offsets.
    broker: SockAddr,
    ranges: Vec<OffsetRange>,
    deadline: Instant,
}

/// What a Kafka op is to the transformer ([`Transformer::kafka`]).
enum Kafka {
    /// A membership note: no call, no span.
    Note,
    /// A poll: its messages' offsets, for their producers' spans.
    Fetched(Vec<OffsetRange>),
    /// Any other call.
    Call,
}

/// [`Links`], kept while its span waits.
struct OwnedLinks {
    parent: Option<(u64, u32)>,
    traceparent: Option<String>,
    propagated: Option<(u128, u64)>,
    kernel_ids: Option<(u128, u64, u64)>,
    unlinked: bool,
    pid: u32,
}

impl OwnedLinks {
    fn borrowed(&self) -> Links<'_> {
        Links {
            parent: self.parent,
            traceparent: self.traceparent.as_deref(),
            propagated: self.propagated,
            kernel_ids: self.kernel_ids,
            unlinked: self.unlinked,
            pid: self.pid,
        }
    }
}

/// Everything the span-actor remembers between batches.
pub struct Transformer {
    naming: Naming,
    parent_wait: Duration,
    contexts: Contexts,
    forwarded: Forwarded,
    /// Processes by how many times in a row a call of theirs waited in vain
    /// for a server request that forwarded its `traceparent`.
    forward_misses: HashMap<u32, u8>,
    /// Service-graph edges are put on server spans (`metrics.service_graph`).
    graph: bool,
    /// Client ends of recent calls, for server spans that come after them.
    callers: Callers,
    /// The ends of calls the carrier took on this host (`graph::Carried`).
    carried: Carried,
    /// Spans held, by the context they wait for, and when each wait ends.
    held: HashMap<CtxKey, Vec<Held>>,
    held_count: usize,
    /// (deadline, context waited for, times put off because that
    /// context's span was itself waiting)
    held_order: VecDeque<(Instant, CtxKey, u8)>,
    /// The contexts of held spans (what waits for them waits on).
    pending: HashSet<CtxKey>,
    /// Kafka producer spans by the messages they sent, and the consumer
    /// spans waiting for theirs (oldest first: their deadlines are in
    /// order).
    producers: Producers<CtxKey>,
    link_waits: VecDeque<LinkWait>,
    /// Kafka clients' consumer groups, for their polls.
    groups: Groups,
    stats: Stats,
    /// The protocol modules.
    http1: Http1,
    h2: H2Table,
    streams: StreamTable,
    /// The HTTP conventions as configured (routes, redaction).
    http_conventions: semconv::Http,
    /// Addresses as text, for every family's conventions.
    addrs: Addrs,
    /// Operations of the event or record being read.
    ops: Vec<Operation>,
}

/// What an operation says about the trace it belongs to.
struct Links<'a> {
    /// The kernel's link (Operation::parent).
    parent: Option<(u64, u32)>,
    traceparent: Option<&'a str>,
    propagated: Option<(u128, u64)>,
    /// The kernel's ids (Operation::kernel_ids).
    kernel_ids: Option<(u128, u64, u64)>,
    /// A call its thread made while serving, not linked by the kernel.
    unlinked: bool,
    pid: u32,
}

/// The key under which process `pid` received `traceparent` `tp`.
fn forward_key(inst: u64, pid: u32, tp: &TraceParent) -> CtxKey {
    let mixed = (tp.trace_id as u64) ^ ((tp.trace_id >> 64) as u64) ^ tp.span_id.rotate_left(32);
    (inst, mixed, pid, FORWARD_SUB, false)
}

/// Server spans by the `traceparent` their request carried in (a
/// [`forward_key`]): their trace, span id and flags, for a call of the same
/// process that forwards it and comes after them. Direct-mapped as
/// [`Contexts`].
struct Forwarded {
    slots: Vec<(u64, u128, u64, u8)>,
}

impl Forwarded {
    fn new() -> Self {
        Forwarded { slots: vec![(0, 0, 0, 0); FORWARDED] }
    }

    fn slot(key: CtxKey) -> (usize, u64) {
        let fp = Contexts::fingerprint(key);
        ((fp >> (64 - FORWARDED.trailing_zeros())) as usize, fp)
    }

    fn insert(&mut self, key: CtxKey, trace: u128, span: u64, flags: u8) {
        let (slot, fp) = Self::slot(key);
        self.slots[slot] = (fp, trace, span, flags);
    }

    fn get(&self, key: CtxKey) -> Option<(u128, u64, u8)> {
        let (slot, fp) = Self::slot(key);
        let (f, trace, span, flags) = self.slots[slot];
        (f == fp).then_some((trace, span, flags))
    }
}

/// Trace contexts of recent spans, for the spans that join them and come
/// later (a client span that ends after its parent's response; a server
/// span whose caller on this host is reported after it): a direct-mapped
/// table keyed by a 64-bit hash of [`CtxKey`], so remembering one costs no
/// allocation, eviction bookkeeping or rehash (a newer span takes the slot
/// of an older one; its late joiners then wait `parent_wait`).
struct Contexts {
    /// (fingerprint, trace id, trace flags, span id)
    slots: Vec<(u64, u128, u8, u64)>,
}

impl Contexts {
    fn new() -> Self {
        Contexts { slots: vec![(0, 0, 0, 0); CONTEXTS] }
    }

    fn hash(key: CtxKey) -> (usize, u64) {
        let fp = Self::fingerprint(key);
        ((fp >> (64 - CONTEXTS.trailing_zeros())) as usize, fp)
    }

    /// A 64-bit hash of `key`, never 0 (which marks an empty slot).
    fn fingerprint(key: CtxKey) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut h = rustc_hash::FxBuildHasher.build_hasher();
        h.write_u64(key.0);
        h.write_u64(key.1);
        h.write_u32(key.2);
        h.write_u32(key.3);
        h.write_u8(u8::from(key.4));
        h.finish() | 1
    }

    /// Keeps the context of the span `key` names: its trace, flags and
    /// span id (what a span that joins it names as its parent: the kernel
    /// may have decided it, probe.carrier).
    fn insert(&mut self, key: CtxKey, trace: u128, flags: u8, span: u64) {
        let (slot, fp) = Self::hash(key);
        self.slots[slot] = (fp, trace, flags, span);
    }

    fn get(&self, key: CtxKey) -> Option<(u128, u8)> {
        self.get_span(key).map(|(trace, flags, _)| (trace, flags))
    }

    fn get_span(&self, key: CtxKey) -> Option<(u128, u8, u64)> {
        let (slot, fp) = Self::hash(key);
        let (f, trace, flags, span) = self.slots[slot];
        (f == fp).then_some((trace, flags, span))
    }
}

fn unix_ns(mono: u64, offset: i64) -> u64 {
    (mono as i64).saturating_add(offset).max(0) as u64
}

fn kind(role: Role) -> SpanKind {
    match role {
        Role::Server => SpanKind::Server,
        Role::Client => SpanKind::Client,
    }
}

impl Transformer {
    /// A transformer for these settings.
    pub fn new(settings: &Settings, registry: &Registry) -> Transformer {
        let rpc_mode = grpc::Mode::from_opt_in(std::env::var("OTEL_SEMCONV_STABILITY_OPT_IN").ok().as_deref(), grpc::Mode::Stable);
        Transformer {
            naming: Naming::new(&settings.services, host_name()).with_kubernetes(crate::k8s::Metadata::new(settings, registry)),
            parent_wait: settings.pipeline.parent_wait,
            contexts: Contexts::new(),
            forwarded: Forwarded::new(),
            forward_misses: HashMap::default(),
            graph: settings.metrics.service_graph,
            callers: Callers::default(),
            carried: Carried::default(),
            held: HashMap::default(),
            held_count: 0,
            held_order: VecDeque::new(),
            pending: HashSet::new(),
            producers: Producers::default(),
            link_waits: VecDeque::new(),
            groups: Groups::default(),
            stats: Stats {
                spans: registry.counter("ringtail_spans_created_total", &[]),
                parent_timeouts: registry.counter("ringtail_parent_wait_timeouts_total", &[]),
                held_full: registry.counter("ringtail_links_refused_total", &[("reason", "held_full")]),
                producer_unknown: registry.counter("ringtail_links_refused_total", &[("reason", "producer_unknown")]),
                producer_untraced: registry.counter("ringtail_links_refused_total", &[("reason", "producer_untraced")]),
                producers_past_max: registry.counter("ringtail_links_refused_total", &[("reason", "links_full")]),
            },
            http1: Http1::new(registry),
            h2: H2Table::new(settings.pipeline.conn_state_bytes(), rpc_mode, registry),
            streams: StreamTable::new(settings.pipeline.conn_state_bytes(), registry),
            http_conventions: semconv::Http::new(&settings.routes, &settings.redaction, registry),
            addrs: Addrs::default(),
            ops: Vec::new(),
        }
    }

    /// HTTP/2 connections being followed.
    pub fn h2_connections(&self) -> usize {
        self.h2.connections()
    }

    /// Bytes the HTTP/2 connections being followed hold, all together.
    pub fn h2_state_bytes(&self) -> usize {
        self.h2.state_bytes()
    }

    /// [`Transformer::h2_state_bytes`] counted afresh, connection by
    /// connection, stream by stream (for tests).
    pub fn h2_state_bytes_recounted(&self) -> usize {
        self.h2.state_bytes_recounted()
    }

    /// Open HTTP/2 streams, all connections together.
    pub fn h2_open_streams(&self) -> usize {
        self.h2.open_streams()
    }

    /// Pipelined HTTP/1 request heads waiting for their responses.
    pub fn pipelined_heads(&self) -> usize {
        self.http1.pipelined_heads()
    }

    /// The naming of processes (the builder asks its Kubernetes metadata
    /// whether a batch should wait).
    pub fn naming_mut(&mut self) -> &mut Naming {
        &mut self.naming
    }

    /// Spans waiting for the span they join.
    pub fn held(&self) -> usize {
        self.held_count
    }

    /// Transforms one raw batch from loader `inst` (its seq `seq`), pushing
    /// spans to `out` (with any held spans of earlier batches whose parent
    /// came now), and says what this batch made.
    pub fn transform(&mut self, inst: u64, seq: u64, batch: &RawBatch, now: Instant, out: &mut Vec<Produced>) -> Made {
        // Ids derive from the capture epoch, not the loader instance that
        // happened to read the event (see `RawBatch::epoch`).
        let epoch = if batch.epoch != 0 { batch.epoch } else { inst };
        let mut b = Batch { inst: epoch, origin: (inst, seq), offset: batch.mono_to_unix_ns, now, out, made: Made::default() };
        for p in &batch.processes {
            self.naming.learn(p);
        }
        let mut ops = std::mem::take(&mut self.ops);
        for ev in batch.events() {
            if let Some(up) = self.http1.event(epoch, &ev, &mut ops) {
                self.h2.upgrade_request(up);
            }
            for op in ops.drain(..) {
                self.emit(&mut b, op);
            }
        }
        for r in batch.h2() {
            self.h2.record(epoch, &r, &mut ops);
            for op in ops.drain(..) {
                self.emit(&mut b, op);
            }
        }
        for r in batch.streams() {
            self.streams.record(epoch, &r, &mut ops);
            for op in ops.drain(..) {
                self.emit(&mut b, op);
            }
        }
        self.ops = ops;
        self.link_waits(now, b.out);
        self.h2.publish();
        self.streams.publish();
        self.http_conventions.publish();
        self.stats.spans.add(b.made.spans as u64);
        b.made
    }

    /// The one path from an operation to its span, for every protocol:
    /// the resource, the parts its call's conventions make of it (one arm a
    /// family, each in its family's module), the ids and times every span
    /// has, then its trace.
    fn emit(&mut self, b: &mut Batch<'_>, op: Operation) {
        let Operation { role, conn, seq, sub, start_mono_ns, end_mono_ns, parent, traceparent, propagated, kernel_ids, unlinked, call } =
            op;
        let kind = kind(role);
        let served = (kind == SpanKind::Server).then_some(conn.local.port);
        let own = named(sub).then_some((b.inst, conn.id, seq, sub, kind == SpanKind::Client));
        let Some(resource) = self.naming.selected_resource(conn.pid, conn.proc_start_ns, served) else {
            self.forget(b, own, role, traceparent.as_deref(), conn.pid);
            return;
        };
        // (a Kafka consumer's messages, for their producers' spans)
        let mut fetched = None;
        let parts = match call {
            Call::Http(http) => self.http_conventions.judge(kind, &conn, &resource.service_name, http, &mut self.addrs),
            Call::Db(op) => Some(db::judge(op, &conn, &mut self.addrs)),
            Call::Messaging(mut op) => {
                if op.system == MsgSystem::Kafka {
                    match self.kafka(&mut op, &conn, own.map(|key| (key, role))) {
                        Kafka::Note => {
                            self.forget(b, own, role, traceparent.as_deref(), conn.pid);
                            return;
                        }
                        Kafka::Fetched(ranges) => fetched = Some(ranges),
                        Kafka::Call => {}
                    }
                }
                Some(crate::messaging::judge(*op, &conn, &mut self.addrs))
            }
        };
        let Some(SpanParts {
            kind: decided,
            name,
            error,
            server_address,
            server_port,
            peer_address,
            export_trace,
            export_metrics,
            attributes,
            links: span_links,
            call,
        }) = parts
        else {
            self.forget(b, own, role, traceparent.as_deref(), conn.pid);
            return;
        };
        let start_unix_ns = unix_ns(start_mono_ns, b.offset);
        let span = Box::new(Span {
            resource: 0,
            kind: decided.unwrap_or(kind),
            trace_id: 0,
            span_id: ids::span_id(b.inst, conn.id, seq, sub, role),
            parent_span_id: 0,
            trace_flags: 1,
            name,
            start_unix_ns,
            end_unix_ns: unix_ns(end_mono_ns, b.offset).max(start_unix_ns),
            error,
            server_address,
            server_port,
            peer_address,
            peer_port: conn.peer.port,
            export_trace,
            export_metrics,
            attributes,
            edge: None,
            links: span_links,
            call,
        });
        let p = Produced { resource, span, origin: b.origin };
        if let Some(ranges) = fetched {
            let links = OwnedLinks { parent, traceparent, propagated, kernel_ids, unlinked, pid: conn.pid };
            let mut w = LinkWait {
                p,
                inst: b.inst,
                ids: (conn.id, seq, sub),
                links,
                broker: conn.peer,
                ranges,
                deadline: b.now + self.parent_wait,
            };
            if !self.link_producers(&mut w, false) {
                if self.held_count < MAX_HELD && self.link_waits.len() < MAX_LINK_WAITS {
                    b.made.held += 1;
                    self.held_count += 1;
                    self.link_waits.push_back(w);
                    return;
                }
                self.stats.held_full.inc();
                self.link_producers(&mut w, true);
            }
            let LinkWait { p, ids, links, .. } = w;
            self.trace(b, p, ids, links.borrowed());
            return;
        }
        let links = Links { parent, traceparent: traceparent.as_deref(), propagated, kernel_ids, unlinked, pid: conn.pid };
        self.trace(b, p, (conn.id, seq, sub), links);
    }

    /// Puts span `p` (of operation `(conn, seq, sub)`) in its trace and out:
    /// a server span continues the `traceparent` it carried, or joins the
    /// client span on this host that called it, or starts a trace; a client
    /// span joins the server span it was made under, or, made while its
    /// thread served several, the server span of its process whose request
    /// carried in the `traceparent` it carries out (a proxy forwarding it:
    /// W3C's parent id names the caller's span, one a call). A span whose
    /// context has not come yet waits for it, a while; each span's context
    /// is remembered for the spans that join it.
    fn trace(&mut self, b: &mut Batch<'_>, mut p: Produced, (conn, seq, sub): (u64, u32, u32), links: Links<'_>) {
        let Links { parent, traceparent, propagated, kernel_ids, unlinked, pid } = links;
        let inst = b.inst;
        // (a server span's, by the traceparent it carried in)
        let mut forward = None;
        let span = &mut p.span;
        // A broker's client's PRODUCER or CONSUMER span is a call out like
        // a CLIENT's: the child of the request its thread served.
        let kind = match span.kind {
            SpanKind::Producer | SpanKind::Consumer => SpanKind::Client,
            k => k,
        };
        let client = kind == SpanKind::Client;
        let own = named(sub).then_some((inst, conn, seq, sub, client));
        let own_trace = ids::trace_id(inst, conn, seq, sub);
        // What this span joins: its context, its parent's span id, and its
        // trace if that context never comes.
        let join = match (kind, parent) {
            // the kernel decided them (probe.carrier), and may have carried
            // them to the next host: they are final
            _ if kernel_ids.is_some() => {
                if let Some((trace_id, span_id, parent_span_id)) = kernel_ids {
                    (span.trace_id, span.span_id, span.parent_span_id) = (trace_id, span_id, parent_span_id);
                }
                if self.graph {
                    // (a call on this host: its two ends are not joined)
                    self.carried.meet(&p.resource, span);
                }
                if kind == SpanKind::Server {
                    // (the calls of its process that forward its traceparent)
                    forward = traceparent.and_then(ids::parse_traceparent).map(|tp| forward_key(inst, pid, &tp));
                }
                None
            }
            // the traceparent the kernel wrote into the request names it
            (SpanKind::Client, _) if propagated.is_some() => {
                if let Some((trace_id, span_id)) = propagated {
                    (span.trace_id, span.span_id) = (trace_id, span_id);
                }
                None
            }
            (SpanKind::Server, _) if traceparent.is_some() => match traceparent.and_then(ids::parse_traceparent) {
                Some(tp) => {
                    span.trace_id = tp.trace_id;
                    span.parent_span_id = tp.span_id;
                    span.trace_flags = tp.flags;
                    forward = Some(forward_key(inst, pid, &tp));
                    None
                }
                None => {
                    span.trace_id = own_trace;
                    None
                }
            },
            // (the caller's request: an HTTP/1 capture's first, or the
            // HTTP/2 stream of the same id)
            (SpanKind::Server, Some((cconn, cseq))) if named(sub) => {
                Some(((inst, cconn, cseq, sub, true), ids::span_id(inst, cconn, cseq, sub, Role::Client), (own_trace, 0)))
            }
            (SpanKind::Client, Some((pconn, pseq))) => {
                let pkey = (inst, pconn, pseq, 0, false);
                let fallback = ids::trace_id(inst, pconn, pseq, 0);
                Some((pkey, ids::span_id(inst, pconn, pseq, 0, Role::Server), (fallback, ids::span_id(inst, pconn, pseq, 0, Role::Server))))
            }
            (SpanKind::Client, None) if unlinked => {
                span.trace_id = own_trace;
                match traceparent.and_then(ids::parse_traceparent) {
                    Some(tp) => {
                        let key = forward_key(inst, pid, &tp);
                        if let Some((trace, parent_span, flags)) = self.forwarded.get(key) {
                            if trace != 0 {
                                (span.trace_id, span.parent_span_id, span.trace_flags) = (trace, parent_span, flags);
                            } // (else that span is not exported)
                            None
                        } else if self.forward_misses.get(&pid).is_some_and(|&n| n >= FORWARD_TRIES) {
                            None
                        } else {
                            // (its parent span id comes with that span: Transformer::adopt)
                            return self.hold(b, p, own, key, (own_trace, 0));
                        }
                    }
                    None => None,
                }
            }
            _ => {
                span.trace_id = own_trace;
                None
            }
        };
        let Some((key, parent_span_id, fallback)) = join else {
            let (trace, span_id, flags) = (p.span.trace_id, p.span.span_id, p.span.trace_flags);
            self.publish(b.out, p, own, true, &mut b.made);
            if let Some(key) = forward {
                self.adopt(key, (trace, span_id, flags), b.out, &mut b.made);
            }
            return;
        };
        span.parent_span_id = parent_span_id;
        let known = self.contexts.get_span(key).filter(|_| !self.pending.contains(&key));
        if let Some((trace, flags, parent)) = known.filter(|&(trace, _, _)| trace != 0) {
            span.trace_id = trace;
            span.trace_flags = flags;
            span.parent_span_id = parent;
            if self.graph {
                // (a server span after its caller: the caller's end was kept)
                span.edge = self.callers.get(Contexts::fingerprint(key)).and_then(|c| c.edge(span));
            }
            self.publish(b.out, p, own, true, &mut b.made);
        } else if known.is_some() {
            // the span it joins is not exported (Transformer::forget)
            (span.trace_id, span.parent_span_id) = fallback;
            self.publish(b.out, p, own, true, &mut b.made);
        } else {
            // The span it joins (which may carry the caller's trace id)
            // comes later, or is itself waiting: wait for it, a while.
            self.hold(b, p, own, key, fallback);
        }
    }

    /// What the transformer keeps of Kafka op `op` of `conn` (its span's
    /// context, if others name it, and role: `own`): a membership note's group, a commit's
    /// (both for the client's polls: [`Groups`]); a send's messages' offsets
    /// ([`Producers`]); a poll's group, and its messages' offsets, taken
    /// for [`Transformer::link_producers`].
    fn kafka(&mut self, op: &mut MsgOp, conn: &Conn, own: Option<(CtxKey, Role)>) -> Kafka {
        let (proc, client) = ((conn.pid, conn.proc_start_ns), op.client_id.as_deref().unwrap_or_default());
        match (op.membership, op.op_type, op.consumer_group.as_deref()) {
            (Some(m), _, Some(group)) => self.groups.note(proc, client, group, m),
            (None, Some(OpType::Settle), Some(group)) => self.groups.note(proc, client, group, Membership::Member),
            (None, Some(OpType::Receive), None) => op.consumer_group = self.groups.of(proc, client).map(str::to_owned),
            _ => {}
        }
        if op.membership.is_some() {
            return Kafka::Note;
        }
        match (op.op_type, own) {
            (Some(OpType::Send), Some((key, role))) if !op.ranges.is_empty() => {
                let (inst, conn_id, seq, sub, _) = key;
                self.producers.sent(conn.peer, &op.ranges, Producer { key, span_id: ids::span_id(inst, conn_id, seq, sub, role) });
                Kafka::Call
            }
            (Some(OpType::Receive), _) if !op.ranges.is_empty() => Kafka::Fetched(std::mem::take(&mut op.ranges)),
            _ => Kafka::Call,
        }
    }

    /// Links Kafka consumer span `w` to the producer spans of its
    /// messages, if every one that may be traced here is (or, `last`,
    /// to those that are, the rest counted); whether it did (else it
    /// should wait).
    fn link_producers(&mut self, w: &mut LinkWait, last: bool) -> bool {
        let found = self.producers.find(w.broker, &w.ranges);
        let mut wait = found.may_come;
        let mut links = Vec::with_capacity(found.producers.len());
        let mut untraced = 0;
        for pr in &found.producers {
            if self.pending.contains(&pr.key) {
                // (it waits for its own parent)
                wait = true;
                untraced += 1;
                continue;
            }
            match self.contexts.get(pr.key) {
                Some((trace, flags)) if trace != 0 => links.push(SpanLink { trace_id: trace, span_id: pr.span_id, trace_flags: flags }),
                _ => untraced += 1,
            }
        }
        if wait && !last {
            return false;
        }
        self.stats.producer_unknown.add(found.unknown);
        self.stats.producer_untraced.add(untraced);
        let mut past_max = found.past_max;
        let span_links = &mut w.p.span.links;
        for l in links {
            if span_links.contains(&l) {
                continue;
            }
            if span_links.len() < ipc_schema::MAX_LINKS {
                span_links.push(l);
            } else {
                past_max += 1;
            }
        }
        self.stats.producers_past_max.add(past_max);
        true
    }

    /// Puts the Kafka consumer spans whose producers have come (or whose
    /// wait is over, `now`) in their trace and out.
    fn link_waits(&mut self, now: Instant, out: &mut Vec<Produced>) {
        if self.link_waits.is_empty() {
            return;
        }
        let mut waits = std::mem::take(&mut self.link_waits);
        let mut released = 0;
        for mut w in waits.drain(..) {
            let last = w.deadline <= now;
            if !self.link_producers(&mut w, last) {
                self.link_waits.push_back(w);
                continue;
            }
            self.held_count -= 1;
            let LinkWait { p, inst, ids, links, .. } = w;
            let mut b = Batch { inst, origin: p.origin, offset: 0, now, out, made: Made::default() };
            self.trace(&mut b, p, ids, links.borrowed());
            // (counted by the batch it came in as held: what is held again
            // is counted when released)
            released += b.made.spans;
        }
        self.stats.spans.add(released as u64);
        // (no allocation next time)
        if self.link_waits.is_empty() {
            self.link_waits = waits;
        }
    }

    /// Holds span `p` (its own context `own`) until the span of context
    /// `key` comes, or `parent_wait` is over (then `fallback`, its trace
    /// and parent); beyond MAX_HELD it goes out at once with `fallback`.
    fn hold(&mut self, b: &mut Batch<'_>, mut p: Produced, own: Option<CtxKey>, key: CtxKey, fallback: (u128, u64)) {
        if self.held_count >= MAX_HELD {
            self.stats.held_full.inc();
            (p.span.trace_id, p.span.parent_span_id) = fallback;
            self.publish(b.out, p, own, true, &mut b.made);
            return;
        }
        b.made.held += 1;
        self.held_count += 1;
        if let Some(o) = own {
            self.pending.insert(o);
        }
        self.held.entry(key).or_default().push(Held { resource: p.resource, span: p.span, origin: p.origin, own, fallback });
        self.held_order.push_back((b.now + self.parent_wait, key, 0));
    }

    /// Notes that calls of process `pid` held for the request that forwarded
    /// their `traceparent` found it (`found`: the count of vain waits starts
    /// again), or waited in vain ([`FORWARD_TRIES`]).
    fn note_forwarding(&mut self, pid: u32, found: bool) {
        if self.forward_misses.len() >= FORWARD_PROCS {
            self.forward_misses.clear();
        }
        let misses = self.forward_misses.entry(pid).or_default();
        *misses = if found { 0 } else { misses.saturating_add(1) };
    }

    /// A server span (`trace`, `span` id, `flags`) whose request carried in
    /// the `traceparent` that [`forward_key`] `key` names: the calls of its
    /// process that forward it, held for it, are its children; those that
    /// come later find it.
    fn adopt(&mut self, key: CtxKey, (trace, span, flags): (u128, u64, u8), out: &mut Vec<Produced>, made: &mut Made) {
        self.forwarded.insert(key, trace, span, flags);
        let Some(waiting) = self.held.remove(&key) else { return };
        self.note_forwarding(key.2, true);
        for h in waiting {
            self.held_count -= 1;
            let mut s = h.span;
            (s.trace_id, s.parent_span_id, s.trace_flags) = (trace, span, flags);
            self.publish(out, Produced { resource: h.resource, span: s, origin: h.origin }, h.own, false, made);
        }
    }

    /// An operation that makes no span (its process is not selected, its
    /// route ignored): the spans that join it do not wait for it, and
    /// those waiting go out with their fallback trace.
    fn forget(&mut self, b: &mut Batch<'_>, own: Option<CtxKey>, role: Role, traceparent: Option<&str>, pid: u32) {
        if role == Role::Server {
            // (nor do the calls that forward its traceparent)
            if let Some(tp) = traceparent.and_then(ids::parse_traceparent) {
                let key = forward_key(b.inst, pid, &tp);
                self.forwarded.insert(key, 0, 0, 0);
                self.release_fallback(key, b.out, &mut b.made);
            }
        }
        let Some(key) = own else { return };
        self.contexts.insert(key, 0, 0, 0);
        self.release_fallback(key, b.out, &mut b.made);
    }

    /// Sends the spans waiting for `key`'s context with their fallback
    /// trace and parent (and then those that waited for theirs); how many.
    fn release_fallback(&mut self, key: CtxKey, out: &mut Vec<Produced>, made: &mut Made) -> usize {
        let held = self.held.remove(&key).unwrap_or_default();
        let n = held.len();
        for h in held {
            self.held_count -= 1;
            let mut s = h.span;
            (s.trace_id, s.parent_span_id) = h.fallback;
            self.publish(out, Produced { resource: h.resource, span: s, origin: h.origin }, h.own, false, made);
        }
        n
    }

    /// Sends span `p` (its trace decided) out, remembers its context under
    /// `own`, and sends the spans that waited for that context, and those
    /// that waited for theirs. `fresh`: `p` is of the batch being
    /// transformed (counted in `made`); released spans were counted held.
    fn publish(&mut self, out: &mut Vec<Produced>, p: Produced, own: Option<CtxKey>, fresh: bool, made: &mut Made) {
        let (trace, flags, span_id) = (p.span.trace_id, p.span.trace_flags, p.span.span_id);
        if fresh {
            made.spans += 1;
        } else {
            self.stats.spans.inc();
        }
        // (the client end of a call, for its server span: waiting below, or to come)
        let caller = if self.graph && own.is_some() { Caller::of(&p.resource, &p.span) } else { None };
        out.push(p);
        let Some(key) = own else { return };
        self.contexts.insert(key, trace, flags, span_id);
        if let Some(c) = &caller {
            self.callers.insert(Contexts::fingerprint(key), c.clone());
        }
        // (nothing held: nothing waits, and no held span is pending)
        if self.held.is_empty() {
            return;
        }
        self.pending.remove(&key);
        let Some(waiting) = self.held.remove(&key) else { return };
        // Each released span with the client end of the span it waited for
        // (a server span waiting for its caller completes the edge).
        // (and its span id: theirs waited for it, their parent)
        let mut todo: Vec<(Held, u128, u8, Option<Caller>, u64)> =
            waiting.into_iter().map(|h| (h, trace, flags, caller.clone(), span_id)).collect();
        while let Some((h, trace, flags, from, parent)) = todo.pop() {
            self.held_count -= 1;
            let mut s = h.span;
            s.trace_id = trace;
            s.trace_flags = flags;
            s.parent_span_id = parent;
            if let Some(c) = &from {
                s.edge = c.edge(&s);
            }
            let caller = if self.graph && h.own.is_some() { Caller::of(&h.resource, &s) } else { None };
            let s_id = s.span_id;
            self.stats.spans.inc();
            out.push(Produced { resource: h.resource, span: s, origin: h.origin });
            if let Some(key) = h.own {
                self.contexts.insert(key, trace, flags, s_id);
                if let Some(c) = &caller {
                    self.callers.insert(Contexts::fingerprint(key), c.clone());
                }
                self.pending.remove(&key);
                todo.extend(self.held.remove(&key).unwrap_or_default().into_iter().map(|h| (h, trace, flags, caller.clone(), s_id)));
            }
        }
    }

    /// When the earliest held client span is due, if any.
    pub fn next_expiry(&self) -> Option<Instant> {
        let held = self.held_order.front().map(|(deadline, ..)| *deadline);
        let linking = self.link_waits.front().map(|w| w.deadline);
        held.into_iter().chain(linking).min()
    }

    /// Sends spans whose context did not show up within `parent_wait`:
    /// a client span with the trace id its parent would have had without
    /// an incoming `traceparent`, a server span in a trace of its own (and
    /// then the spans that waited for those). A span waiting for a span
    /// that is itself waiting goes with it (at the latest three waits on).
    pub fn expire(&mut self, now: Instant, out: &mut Vec<Produced>) {
        let mut made = Made::default();
        while self.held_order.front().is_some_and(|(deadline, ..)| *deadline <= now) {
            let Some((_, key, put_off)) = self.held_order.pop_front() else { break };
            if self.pending.contains(&key) && put_off < 2 {
                // (bounded: spans that wait for each other, which no real
                // exchange makes, go out after three waits)
                self.held_order.push_back((now + self.parent_wait, key, put_off + 1));
                continue;
            }
            let n = self.release_fallback(key, out, &mut made);
            self.stats.parent_timeouts.add(n as u64);
            if key.3 == FORWARD_SUB && n > 0 {
                // (its process's calls carry their own traceparent, or its
                // server spans are not exported)
                self.note_forwarding(key.2, false);
            }
        }
        // (a consumer span's producer may have been among those)
        self.link_waits(now, out);
    }
}

#[cfg(test)]
mod tests;
