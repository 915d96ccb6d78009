//! Raw request events → spans: the span-actor's whole judgement, as plain
//! code the actors call (and benchmarks and tests can call directly).

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipc_schema::{Attr, HttpSpan, RawBatch, RawEvent, RawH2, Role, ServiceResource, SockAddr, SpanKind};
use ringtail_config::Settings;
use runtime_kit::counters::{Counter, Drops, Gauge, Registry};

use crate::h2::{self, grpc, DropReason, H2Conn, H2Stats, StreamDone};
use crate::http::{self, parse_pipeline, split_host_port, RequestHead, Version};
use crate::ids;
use crate::naming::{host_name, Naming};
use crate::redact::Redactor;
use crate::routes::Router;
use crate::semconv;

/// Server requests whose trace context is remembered for their children
/// (slots of a direct-mapped table; a power of two).
const SERVER_CONTEXTS: usize = 16_384;
/// Connections with pipelined requests awaiting their responses.
const PIPELINES: usize = 16_384;
/// Addresses whose text form is remembered.
const IP_TEXTS: usize = 4096;
/// HTTP/2 connections followed at once; past it one is closed (its open
/// streams end as `Closed`) and counted.
pub const H2_CONNS: usize = 16_384;
/// The `sub` of every HTTP/2 span's ids (its `seq` is the stream id): never
/// that of an HTTP/1 request on the same connection (an `Upgrade: h2c`).
const H2_SUB: u32 = u32::MAX;
/// `Upgrade: h2c` requests whose connection's first HTTP/2 record has not
/// come yet (it follows at once, in the same or the next batch). A head
/// comes from at most a capture's bytes (512): at most ~1 MiB in all.
const H2C_PENDING: usize = 1024;
/// Pipelined request heads waiting for their responses, all connections
/// together (a head is ~250 bytes; one capture holds up to ~28 of them, so
/// [`PIPELINES`] alone would allow ~100 MiB to a client that pipelines on
/// thousands of connections to a server that closes after one answer).
const PIPELINED_HEADS: usize = 32_768;
/// What the HTTP/2 state budget is brought down to once exceeded (7/8 of
/// it), so that the connections to forget are chosen once in a while, not
/// at every record.
const H2_STATE_LOW_WATER: (usize, usize) = (7, 8);

/// Which raw batch (loader instance, seq) a span came from.
pub type Origin = (u64, u64);

/// A finished span, its resource, and where it came from.
#[derive(Debug, Clone)]
pub struct Produced {
    pub resource: Arc<ServiceResource>,
    pub span: HttpSpan,
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

struct Held {
    resource: Arc<ServiceResource>,
    span: HttpSpan,
    origin: Origin,
}

struct Pipe {
    heads: VecDeque<RequestHead>,
    seq: u32,
    next_sub: u32,
    last_end_mono: u64,
}

/// One HTTP/2 connection being followed, and who it belongs to.
struct H2Entry {
    conn: H2Conn,
    meta: H2Meta,
    /// What it holds ([`H2Conn::state_bytes`] and this entry), as last
    /// counted into [`Transformer::h2_bytes`].
    bytes: usize,
}

/// What an entry costs besides its connection's state: its key, meta data
/// and count in the table, and the table's slot overhead.
const H2_ENTRY_OVERHEAD: usize = std::mem::size_of::<(u64, u64)>() + std::mem::size_of::<H2Meta>() + std::mem::size_of::<usize>() + 16;

/// Who an HTTP/2 connection belongs to: what its spans need besides streams.
#[derive(Clone, Copy)]
struct H2Meta {
    role: Role,
    conn_id: u64,
    pid: u32,
    tid: u32,
    fd: i32,
    proc_start_ns: u64,
    local: SockAddr,
    peer: SockAddr,
    /// Over TLS (plaintext from the TLS hooks): `url.scheme` https unless
    /// the request's `:scheme` says otherwise.
    tls: bool,
}

/// What is not traced of HTTP/2, counted.
struct H2Counters {
    /// By [`DropReason::ALL`] order.
    dropped: Vec<Drops>,
    header_blocks_truncated: Counter,
    hpack_errors: Counter,
    given_up: Counter,
    malformed: Drops,
    evicted: Counter,
    /// Streams dropped with the connections forgotten to keep within
    /// `pipeline.h2_state_mb`.
    state_full: Drops,
    /// The bytes all connections hold.
    state_bytes: Gauge,
    /// `Upgrade: h2c` requests whose HTTP/2 start never came.
    h2c_unfollowed: Drops,
}

impl H2Counters {
    fn add(&self, s: &H2Stats) {
        for (d, r) in self.dropped.iter().zip(DropReason::ALL) {
            d.add(s.dropped(r));
        }
        self.header_blocks_truncated.add(s.header_blocks_truncated);
        self.hpack_errors.add(s.hpack_errors);
        self.given_up.add(s.connections_given_up);
    }
}

struct Stats {
    spans: Counter,
    ignored: Counter,
    overflow: Counter,
    /// Services whose routes were forgotten (`routes.max_services`,
    /// [`crate::routes::MAX_ROUTE_BYTES`]), and how many are remembered.
    route_services_evicted: Counter,
    route_services: Gauge,
    parent_timeouts: Counter,
    unparsable: Drops,
    orphan_unmatched: Drops,
    pipelined_unanswered: Drops,
}

/// Everything the span-actor remembers between batches.
pub struct Transformer {
    naming: Naming,
    router: Router,
    redactor: Redactor,
    parent_wait: Duration,
    server_ctx: ServerContexts,
    held: HashMap<(u64, u64, u32), Vec<Held>>,
    held_order: VecDeque<(Instant, (u64, u64, u32))>,
    pipes: HashMap<(u64, u64), Pipe>,
    /// Request heads waiting in `pipes`, all connections together.
    pipe_heads: usize,
    ip_texts: HashMap<(bool, u128), String>,
    stats: Stats,
    h2: HashMap<(u64, u64), H2Entry>,
    /// Bytes every followed HTTP/2 connection holds (the sum of their
    /// [`H2Entry::bytes`]), and the most they may (`pipeline.h2_state_mb`).
    h2_bytes: usize,
    h2_budget: usize,
    /// `Upgrade: h2c` requests by connection, with their start, waiting for
    /// the connection's first HTTP/2 record (they become its stream 1).
    h2c: HashMap<(u64, u64), (RequestHead, u64)>,
    h2_stats: H2Counters,
    /// The RPC conventions to follow (`OTEL_SEMCONV_STABILITY_OPT_IN`).
    rpc_mode: grpc::Mode,
}

/// Trace contexts of recent server requests, for client spans that end
/// after their parent's response: a direct-mapped table keyed by a 64-bit
/// hash of (loader, connection, request), so remembering one costs no
/// allocation, eviction bookkeeping or rehash (a newer request takes the
/// slot of an older one; its late children then wait `parent_wait`).
struct ServerContexts {
    slots: Vec<(u64, u128, u8)>,
}

impl ServerContexts {
    fn new() -> Self {
        ServerContexts { slots: vec![(0, 0, 0); SERVER_CONTEXTS] }
    }

    fn hash(key: (u64, u64, u32)) -> (usize, u64) {
        use std::hash::{BuildHasher, Hasher};
        let mut h = rustc_hash::FxBuildHasher.build_hasher();
        h.write_u64(key.0);
        h.write_u64(key.1);
        h.write_u32(key.2);
        // Never 0, which marks an empty slot.
        let fp = h.finish() | 1;
        ((fp >> (64 - SERVER_CONTEXTS.trailing_zeros())) as usize, fp)
    }

    fn insert(&mut self, key: (u64, u64, u32), trace: u128, flags: u8) {
        let (slot, fp) = Self::hash(key);
        self.slots[slot] = (fp, trace, flags);
    }

    fn get(&self, key: (u64, u64, u32)) -> Option<(u128, u8)> {
        let (slot, fp) = Self::hash(key);
        let (f, trace, flags) = self.slots[slot];
        (f == fp).then_some((trace, flags))
    }
}

fn unix_ns(mono: u64, offset: i64) -> u64 {
    (mono as i64).saturating_add(offset).max(0) as u64
}

impl Transformer {
    /// A transformer for these settings.
    pub fn new(settings: &Settings, registry: &Registry) -> Transformer {
        Transformer {
            naming: Naming::new(&settings.services, host_name()).with_kubernetes(crate::k8s::Metadata::new(settings, registry)),
            router: Router::new(&settings.routes),
            redactor: Redactor::new(&settings.redaction),
            parent_wait: settings.pipeline.parent_wait,
            server_ctx: ServerContexts::new(),
            held: HashMap::default(),
            held_order: VecDeque::new(),
            pipes: HashMap::default(),
            pipe_heads: 0,
            ip_texts: HashMap::default(),
            stats: Stats {
                spans: registry.counter("ringtail_spans_created_total", &[]),
                ignored: registry.counter("ringtail_ignored_requests_total", &[]),
                overflow: registry.counter("ringtail_route_overflow_total", &[]),
                route_services_evicted: registry.counter("ringtail_route_services_evicted_total", &[]),
                route_services: registry.gauge("ringtail_route_services", &[]),
                parent_timeouts: registry.counter("ringtail_parent_wait_timeouts_total", &[]),
                unparsable: registry.drops("ringtail_dropped_events_total", "unparsable_request"),
                orphan_unmatched: registry.drops("ringtail_dropped_events_total", "unmatched_response"),
                pipelined_unanswered: registry.drops("ringtail_dropped_events_total", "pipelined_unanswered"),
            },
            h2: HashMap::default(),
            h2_bytes: 0,
            h2_budget: settings.pipeline.h2_state_mb.saturating_mul(1 << 20),
            h2_stats: H2Counters {
                dropped: DropReason::ALL.iter().map(|r| registry.drops("ringtail_dropped_events_total", r.as_str())).collect(),
                header_blocks_truncated: registry.counter("ringtail_h2_header_blocks_truncated_total", &[]),
                hpack_errors: registry.counter("ringtail_h2_hpack_errors_total", &[]),
                given_up: registry.counter("ringtail_h2_connections_given_up_total", &[]),
                malformed: registry.drops("ringtail_dropped_events_total", "h2_malformed_record"),
                evicted: registry.counter("ringtail_h2_connections_evicted_total", &[]),
                state_full: registry.drops("ringtail_dropped_events_total", "h2_state_full"),
                state_bytes: registry.gauge("ringtail_h2_state_bytes", &[]),
                h2c_unfollowed: registry.drops("ringtail_dropped_events_total", "h2c_unfollowed"),
            },
            h2c: HashMap::default(),
            rpc_mode: grpc::Mode::from_opt_in(std::env::var("OTEL_SEMCONV_STABILITY_OPT_IN").ok().as_deref(), grpc::Mode::Stable),
        }
    }

    /// HTTP/2 connections being followed.
    pub fn h2_connections(&self) -> usize {
        self.h2.len()
    }

    /// Bytes the HTTP/2 connections being followed hold, all together.
    pub fn h2_state_bytes(&self) -> usize {
        self.h2_bytes
    }

    /// [`Transformer::h2_state_bytes`] counted afresh, connection by
    /// connection, stream by stream (for tests).
    pub fn h2_state_bytes_recounted(&self) -> usize {
        self.h2.values().map(|e| e.conn.state_bytes_recounted() + H2_ENTRY_OVERHEAD).sum()
    }

    /// Open HTTP/2 streams, all connections together.
    pub fn h2_open_streams(&self) -> usize {
        self.h2.values().map(|e| e.conn.open_streams()).sum()
    }

    /// Pipelined HTTP/1 request heads waiting for their responses.
    pub fn pipelined_heads(&self) -> usize {
        self.pipe_heads
    }

    /// Takes connection `key` out of the table (and its bytes out of the count).
    fn h2_remove(&mut self, key: &(u64, u64)) -> Option<H2Entry> {
        let e = self.h2.remove(key)?;
        self.h2_bytes -= e.bytes;
        Some(e)
    }

    /// Counts again what connection `key` holds, after it changed.
    fn h2_recount(&mut self, key: &(u64, u64)) {
        if let Some(e) = self.h2.get_mut(key) {
            let now = e.conn.state_bytes() + H2_ENTRY_OVERHEAD;
            self.h2_bytes = self.h2_bytes - e.bytes + now;
            e.bytes = now;
        }
    }

    /// Over `pipeline.h2_state_mb`: forgets the connections that hold the
    /// most until what is left is under 7/8 of it. A flood of never-ended
    /// streams sits in a few big connections and goes first; the small ones
    /// of ordinary clients stay. A forgotten connection's open streams are
    /// dropped (no span: they did not end) and counted; if it goes on, it
    /// is followed afresh from its next record, as one seen mid-way.
    fn h2_shed(&mut self) {
        if self.h2_bytes <= self.h2_budget {
            return;
        }
        let target = self.h2_budget / H2_STATE_LOW_WATER.1 * H2_STATE_LOW_WATER.0;
        let mut by_size: Vec<(usize, (u64, u64))> = self.h2.iter().map(|(k, e)| (e.bytes, *k)).collect();
        by_size.sort_unstable_by(|a, b| b.cmp(a));
        for (_, key) in by_size {
            if self.h2_bytes <= target {
                break;
            }
            if let Some(mut e) = self.h2_remove(&key) {
                self.h2_stats.add(&e.conn.take_stats());
                self.h2_stats.state_full.add(e.conn.open_streams() as u64);
                self.h2_stats.evicted.inc();
            }
        }
    }

    /// One HTTP/2 record: feed its connection, make spans of the streams
    /// that ended.
    #[allow(clippy::too_many_arguments)]
    fn h2_record(
        &mut self,
        inst: u64,
        origin: Origin,
        r: &RawH2<&[u8]>,
        offset: i64,
        now: Instant,
        out: &mut Vec<Produced>,
        made: &mut Made,
    ) {
        let key = (inst, r.conn_id);
        let mut done = Vec::new();
        if r.close {
            if let Some(mut e) = self.h2_remove(&key) {
                e.conn.close(r.mono_ns, &mut done);
                self.h2_stats.add(&e.conn.take_stats());
                self.h2_spans(inst, origin, &e.meta, done, offset, now, out, made);
            }
            return;
        }
        let pieces = match h2::record::pieces(r.pieces) {
            Ok(p) => p,
            Err(_) => {
                // Its frame boundaries are unknown from here: give it up.
                self.h2_stats.malformed.add(1);
                if let Some(mut e) = self.h2_remove(&key) {
                    e.conn.close(r.mono_ns, &mut done);
                    self.h2_stats.add(&e.conn.take_stats());
                    self.h2_spans(inst, origin, &e.meta, done, offset, now, out, made);
                }
                return;
            }
        };
        if !self.h2.contains_key(&key) {
            if self.h2.len() >= H2_CONNS {
                // Bounded: one connection goes (its open streams end now).
                if let Some(k) = self.h2.keys().next().copied() {
                    if let Some(mut e) = self.h2_remove(&k) {
                        self.h2_stats.evicted.inc();
                        let mut gone = Vec::new();
                        e.conn.close(r.mono_ns, &mut gone);
                        self.h2_stats.add(&e.conn.take_stats());
                        self.h2_spans(inst, origin, &e.meta, gone, offset, now, out, made);
                    }
                }
            }
            let role = match r.role {
                Role::Server => h2::Role::Server,
                Role::Client => h2::Role::Client,
            };
            // Without its start (the span-actor restarted, or the table
            // evicted it) the HPACK tables' past is unknown.
            let mut conn = H2Conn::new(role, !r.start);
            if let Some((head, start)) = r.upgrade.then(|| self.h2c.remove(&key)).flatten() {
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
            let meta = H2Meta {
                role: r.role,
                conn_id: r.conn_id,
                pid: r.pid,
                tid: r.tid,
                fd: r.fd,
                proc_start_ns: r.proc_start_ns,
                local: r.local,
                peer: r.peer,
                tls: r.tls,
            };
            self.h2.insert(key, H2Entry { conn, meta, bytes: 0 });
        }
        let Some(e) = self.h2.get_mut(&key) else { return };
        let dir = if r.send { h2::Dir::Send } else { h2::Dir::Recv };
        e.meta.tid = r.tid;
        e.conn.feed(dir, r.mono_ns, &pieces, &mut done);
        let stats = e.conn.take_stats();
        let meta = e.meta;
        self.h2_stats.add(&stats);
        self.h2_recount(&key);
        self.h2_shed();
        self.h2_spans(inst, origin, &meta, done, offset, now, out, made);
    }

    /// Spans of finished HTTP/2 streams: the HTTP/1 span code with an
    /// HTTP/2 head, then the gRPC conventions on top.
    #[allow(clippy::too_many_arguments)]
    fn h2_spans(
        &mut self,
        inst: u64,
        origin: Origin,
        e: &H2Meta,
        done: Vec<StreamDone>,
        offset: i64,
        now: Instant,
        out: &mut Vec<Produced>,
        made: &mut Made,
    ) {
        for d in done {
            let ev = RawEvent {
                role: e.role,
                pid: e.pid,
                tid: e.tid,
                fd: e.fd,
                proc_start_ns: e.proc_start_ns,
                conn_id: e.conn_id,
                seq: d.stream_id,
                parent: None,
                start_mono_ns: d.start_ns,
                end_mono_ns: d.end_ns,
                status: d.status.unwrap_or(0),
                local: e.local,
                peer: e.peer,
                request_len: 0,
                truncated: false,
                orphan: false,
                tls: e.tls,
                h2c: false,
                request: &[][..],
            };
            let head = RequestHead {
                method: d.method.clone(),
                path: d.path.clone(),
                query: d.query.clone(),
                target_host: None,
                target_userinfo: false,
                version: Version::Http2,
                host: d.authority.clone(),
                user_agent: d.user_agent.clone(),
                traceparent: d.traceparent.clone(),
                complete: true,
                len: None,
            };
            let before = out.len();
            self.emit(inst, origin, &ev, &head, H2_SUB, d.start_ns, d.end_ns, offset, now, out, made);
            let Some(p) = out.get_mut(before) else { continue };
            let span = &mut p.span;
            if let Some(sc) = &d.scheme {
                span.scheme = sc.clone();
            }
            if d.status.is_none() {
                // reset, refused or closed before a response
                span.error = true;
                span.attributes.push(("error.type".to_owned(), Attr::Str("_OTHER".to_owned())));
            }
            if let Some(o) = grpc::outcome(&d) {
                span.name = grpc::span_name(&o).into_owned();
                span.error = o.is_error;
                span.attributes = grpc::span_attributes(self.rpc_mode, &o)
                    .into_iter()
                    .filter(|(k, _)| *k != "network.protocol.version")
                    .map(|(k, v)| {
                        let v = match v {
                            grpc::Value::Str(s) => Attr::Str(s.into_owned()),
                            grpc::Value::Int(i) => Attr::Int(i),
                        };
                        (k.to_owned(), v)
                    })
                    .collect();
            }
        }
    }

    /// The naming of processes (the builder asks its Kubernetes metadata
    /// whether a batch should wait).
    pub fn naming_mut(&mut self) -> &mut Naming {
        &mut self.naming
    }

    /// Client spans waiting for their parent server span.
    pub fn held(&self) -> usize {
        self.held.values().map(Vec::len).sum()
    }

    /// Transforms one raw batch from loader `inst` (its seq `seq`), pushing
    /// spans to `out` (with any held spans of earlier batches whose parent
    /// came now), and says what this batch made.
    pub fn transform(&mut self, inst: u64, seq: u64, batch: &RawBatch, now: Instant, out: &mut Vec<Produced>) -> Made {
        let origin = (inst, seq);
        // Ids derive from the capture epoch, not the loader instance that
        // happened to read the event (see `RawBatch::epoch`).
        let inst = if batch.epoch != 0 { batch.epoch } else { inst };
        let mut made = Made::default();
        for p in &batch.processes {
            self.naming.learn(p);
        }
        let offset = batch.mono_to_unix_ns;
        for ev in batch.events() {
            let ev = &ev;
            if ev.h2c {
                self.h2c_request(inst, ev);
                continue;
            }
            if ev.orphan {
                self.pipelined_response(inst, origin, ev, offset, now, out, &mut made);
                continue;
            }
            let mut heads = parse_pipeline(ev.request);
            if heads.is_empty() {
                self.stats.unparsable.add(1);
                continue;
            }
            let first = heads.remove(0);
            let key = (inst, ev.conn_id);
            if !self.pipes.is_empty() {
                let left = self.pipes.remove(&key).map_or(0, |p| p.heads.len());
                self.pipe_heads -= left;
                self.stats.pipelined_unanswered.add(left as u64);
            }
            if !heads.is_empty() && ev.role == Role::Server {
                if self.pipes.len() >= PIPELINES || self.pipe_heads + heads.len() > PIPELINED_HEADS {
                    // Bounded: what the forgotten connections still waited
                    // for is counted, not silently lost.
                    self.stats.pipelined_unanswered.add(self.pipe_heads as u64);
                    self.pipes.clear();
                    self.pipe_heads = 0;
                }
                self.pipe_heads += heads.len();
                self.pipes.insert(key, Pipe { heads: heads.into(), seq: ev.seq, next_sub: 1, last_end_mono: ev.end_mono_ns });
            }
            self.emit(inst, origin, ev, &first, 0, ev.start_mono_ns, ev.end_mono_ns, offset, now, out, &mut made);
        }
        for r in batch.h2() {
            self.h2_record(inst, origin, &r, offset, now, out, &mut made);
        }
        self.h2_stats.state_bytes.set(self.h2_bytes as f64);
        self.stats.route_services_evicted.add(self.router.take_evicted());
        self.stats.route_services.set(self.router.services() as f64);
        self.stats.spans.add(made.spans as u64);
        made
    }

    /// The `101` of an `Upgrade: h2c`: its request waits for the
    /// connection's first HTTP/2 record, whose stream 1 it is.
    fn h2c_request(&mut self, inst: u64, ev: &RawEvent<&[u8]>) {
        let Some(head) = http::parse_request(ev.request) else {
            self.stats.unparsable.add(1);
            return;
        };
        if self.h2c.len() >= H2C_PENDING {
            self.h2_stats.h2c_unfollowed.add(self.h2c.len() as u64);
            self.h2c.clear();
        }
        if self.h2c.insert((inst, ev.conn_id), (head, ev.start_mono_ns)).is_some() {
            self.h2_stats.h2c_unfollowed.add(1);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn pipelined_response(
        &mut self,
        inst: u64,
        origin: Origin,
        ev: &RawEvent<&[u8]>,
        offset: i64,
        now: Instant,
        out: &mut Vec<Produced>,
        made: &mut Made,
    ) {
        let key = (inst, ev.conn_id);
        let Some(pipe) = self.pipes.get_mut(&key) else {
            self.stats.orphan_unmatched.add(1);
            return;
        };
        let Some(head) = pipe.heads.pop_front() else {
            self.stats.orphan_unmatched.add(1);
            return;
        };
        self.pipe_heads -= 1;
        let (sub, start) = (pipe.next_sub, pipe.last_end_mono);
        pipe.next_sub += 1;
        pipe.last_end_mono = ev.end_mono_ns;
        let mut ev = ev.clone();
        ev.seq = pipe.seq;
        if pipe.heads.is_empty() {
            self.pipes.remove(&key);
        }
        self.emit(inst, origin, &ev, &head, sub, start, ev.end_mono_ns, offset, now, out, made);
    }

    #[allow(clippy::too_many_arguments)]
    fn emit(
        &mut self,
        inst: u64,
        origin: Origin,
        ev: &RawEvent<&[u8]>,
        head: &RequestHead,
        sub: u32,
        start_mono: u64,
        end_mono: u64,
        offset: i64,
        now: Instant,
        out: &mut Vec<Produced>,
        made: &mut Made,
    ) {
        let kind = match ev.role {
            Role::Server => SpanKind::Server,
            Role::Client => SpanKind::Client,
        };
        let served = (kind == SpanKind::Server).then_some(ev.local.port);
        let Some(resource) = self.naming.selected_resource(ev.pid, ev.proc_start_ns, served) else { return };
        let (route, export_trace, export_metrics) = if kind == SpanKind::Server {
            let Some(routed) = self.router.route(&resource.service_name, &head.path, ev.status) else {
                self.stats.ignored.inc();
                return;
            };
            if routed.overflowed {
                self.stats.overflow.inc();
            }
            (routed.route, routed.export_trace, routed.export_metrics)
        } else {
            (None, true, true) // http.route is a server attribute
        };
        let (method, method_original) = semconv::method(&head.method);
        let host_header = head.target_host.as_deref().or(head.host.as_deref());
        let (host, host_port) = host_header.map(split_host_port).map_or((None, None), |(h, p)| (Some(h.to_owned()), p));
        let peer_ip = self.ip_text(&ev.peer);
        let local_ip = self.ip_text(&ev.local);
        let (server_address, server_port, client_address, client_port) = match kind {
            SpanKind::Server => (host, host_port.unwrap_or(ev.local.port), peer_ip.clone(), ev.peer.port),
            SpanKind::Client => (host.or_else(|| Some(peer_ip.clone())), host_port.unwrap_or(ev.peer.port), local_ip, ev.local.port),
        };
        let start_unix_ns = unix_ns(start_mono, offset);
        let mut span = HttpSpan {
            resource: 0,
            kind,
            trace_id: 0,
            span_id: ids::span_id(inst, ev.conn_id, ev.seq, sub, ev.role),
            parent_span_id: 0,
            trace_flags: 1,
            name: semconv::span_name(&method, route.as_deref()),
            start_unix_ns,
            end_unix_ns: unix_ns(end_mono, offset).max(start_unix_ns),
            method,
            method_original,
            route,
            path: head.path.clone(),
            query: self.redactor.query(head.query.as_deref()),
            scheme: if ev.tls { "https" } else { "http" }.to_owned(),
            status: ev.status,
            error: semconv::is_error(kind, ev.status),
            server_address,
            server_port,
            client_address,
            client_port,
            peer_address: peer_ip,
            peer_port: ev.peer.port,
            protocol_version: head.version.as_str().to_owned(),
            user_agent: head.user_agent.clone(),
            export_trace,
            export_metrics,
            attributes: Vec::new(),
        };
        match kind {
            SpanKind::Server => {
                match head.traceparent.as_deref().and_then(http::parse_traceparent) {
                    Some(tp) => {
                        span.trace_id = tp.trace_id;
                        span.parent_span_id = tp.span_id;
                        span.trace_flags = tp.flags;
                    }
                    None => span.trace_id = ids::trace_id(inst, ev.conn_id, ev.seq, sub),
                }
                let key = (inst, ev.conn_id, ev.seq);
                if sub == 0 {
                    self.server_ctx.insert(key, span.trace_id, span.trace_flags);
                }
                let (trace, flags) = (span.trace_id, span.trace_flags);
                self.push(Produced { resource, span, origin }, out, made);
                if sub == 0 && !self.held.is_empty() {
                    for h in self.held.remove(&key).unwrap_or_default() {
                        let mut s = h.span;
                        s.trace_id = trace;
                        s.trace_flags = flags;
                        self.stats.spans.inc();
                        out.push(Produced { resource: h.resource, span: s, origin: h.origin });
                    }
                }
            }
            SpanKind::Client => match ev.parent {
                Some((pconn, pseq)) => {
                    span.parent_span_id = ids::span_id(inst, pconn, pseq, 0, Role::Server);
                    let key = (inst, pconn, pseq);
                    if let Some((trace, flags)) = self.server_ctx.get(key) {
                        span.trace_id = trace;
                        span.trace_flags = flags;
                        self.push(Produced { resource, span, origin }, out, made);
                    } else {
                        // The server span (which may carry the caller's
                        // trace id) comes later: wait for it, a while.
                        made.held += 1;
                        self.held.entry(key).or_default().push(Held { resource, span, origin });
                        self.held_order.push_back((now + self.parent_wait, key));
                    }
                }
                None => {
                    span.trace_id = ids::trace_id(inst, ev.conn_id, ev.seq, sub);
                    self.push(Produced { resource, span, origin }, out, made);
                }
            },
        }
    }

    /// An address as text, formatted once per address (the same few peers
    /// send most requests; formatting is costly).
    fn ip_text(&mut self, a: &ipc_schema::SockAddr) -> String {
        if let Some(s) = self.ip_texts.get(&(a.v6, a.ip)) {
            return s.clone();
        }
        let s = a.ip_addr().to_string();
        if self.ip_texts.len() >= IP_TEXTS {
            self.ip_texts.clear();
        }
        self.ip_texts.insert((a.v6, a.ip), s.clone());
        s
    }

    /// Counted in `made`; the spans counter takes a batch's at its end
    /// (an atomic add a span was a tenth of this process's live profile).
    fn push(&mut self, p: Produced, out: &mut Vec<Produced>, made: &mut Made) {
        made.spans += 1;
        out.push(p);
    }

    /// When the earliest held client span is due, if any.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.held_order.front().map(|(deadline, _)| *deadline)
    }

    /// Sends client spans whose parent did not show up within
    /// `parent_wait`, with the trace id that parent would have had without
    /// an incoming `traceparent`.
    pub fn expire(&mut self, now: Instant, out: &mut Vec<Produced>) {
        while self.held_order.front().is_some_and(|(deadline, _)| *deadline <= now) {
            let Some((_, key)) = self.held_order.pop_front() else { break };
            for h in self.held.remove(&key).unwrap_or_default() {
                self.stats.parent_timeouts.inc();
                let mut s = h.span;
                s.trace_id = ids::trace_id(key.0, key.1, key.2, 0);
                self.stats.spans.inc();
                out.push(Produced { resource: h.resource, span: s, origin: h.origin });
            }
        }
    }
}

#[cfg(test)]
mod tests;
