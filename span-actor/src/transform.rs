//! Raw request events → spans: the span-actor's whole judgement, as plain
//! code the actors call (and benchmarks and tests can call directly).
//!
//! Each protocol module turns its events into [`Operation`]s
//! ([`crate::http1`], [`crate::h2::table`]); [`Transformer::emit`] is the
//! one path that makes spans and resources of them: the resource, the
//! route, the conventions' name and status, the ids, and the trace
//! (a `traceparent` it carried, the server span a client span was made
//! under, held a while if that span has not come yet).

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipc_schema::{HttpSpan, RawBatch, Role, ServiceResource, SpanKind, Value};
use ringtail_config::Settings;
use runtime_kit::counters::{Counter, Gauge, Registry};

use crate::h2::grpc;
use crate::h2::table::H2Table;
use crate::http::{self, split_host_port};
use crate::http1::Http1;
use crate::ids;
use crate::naming::{host_name, Naming};
use crate::operation::{Call, Operation};
use crate::redact::Redactor;
use crate::routes::Router;
use crate::semconv;

/// Server requests whose trace context is remembered for their children
/// (slots of a direct-mapped table; a power of two).
const SERVER_CONTEXTS: usize = 16_384;
/// Addresses whose text form is remembered.
const IP_TEXTS: usize = 4096;

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

impl Batch<'_> {
    /// Counted in `made`; the spans counter takes a batch's at its end
    /// (an atomic add a span was a tenth of this process's live profile).
    fn push(&mut self, p: Produced) {
        self.made.spans += 1;
        self.out.push(p);
    }
}

struct Held {
    resource: Arc<ServiceResource>,
    span: HttpSpan,
    origin: Origin,
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
    ip_texts: HashMap<(bool, u128), String>,
    stats: Stats,
    /// The protocol modules.
    http1: Http1,
    h2: H2Table,
    /// Operations of the event or record being read.
    ops: Vec<Operation>,
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
            router: Router::new(&settings.routes),
            redactor: Redactor::new(&settings.redaction),
            parent_wait: settings.pipeline.parent_wait,
            server_ctx: ServerContexts::new(),
            held: HashMap::default(),
            held_order: VecDeque::new(),
            ip_texts: HashMap::default(),
            stats: Stats {
                spans: registry.counter("ringtail_spans_created_total", &[]),
                ignored: registry.counter("ringtail_ignored_requests_total", &[]),
                overflow: registry.counter("ringtail_route_overflow_total", &[]),
                route_services_evicted: registry.counter("ringtail_route_services_evicted_total", &[]),
                route_services: registry.gauge("ringtail_route_services", &[]),
                parent_timeouts: registry.counter("ringtail_parent_wait_timeouts_total", &[]),
            },
            http1: Http1::new(registry),
            h2: H2Table::new(settings.pipeline.h2_state_mb.saturating_mul(1 << 20), rpc_mode, registry),
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

    /// Client spans waiting for their parent server span.
    pub fn held(&self) -> usize {
        self.held.values().map(Vec::len).sum()
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
            self.http1.event(epoch, &ev, &mut self.h2, &mut ops);
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
        self.ops = ops;
        self.h2.publish();
        self.stats.route_services_evicted.add(self.router.take_evicted());
        self.stats.route_services.set(self.router.services() as f64);
        self.stats.spans.add(b.made.spans as u64);
        b.made
    }

    /// The one path from an operation to its span: resource, route, the
    /// conventions' name, status and attributes, then its trace.
    fn emit(&mut self, b: &mut Batch<'_>, op: Operation) {
        let Operation { role, conn, seq, sub, start_mono_ns, end_mono_ns, parent, traceparent, call } = op;
        let Call::Http(http) = call;
        let kind = kind(role);
        let status = http.status.unwrap_or(0);
        let served = (kind == SpanKind::Server).then_some(conn.local.port);
        let Some(resource) = self.naming.selected_resource(conn.pid, conn.proc_start_ns, served) else { return };
        let (route, export_trace, export_metrics) = if kind == SpanKind::Server {
            let Some(routed) = self.router.route(&resource.service_name, &http.path, status) else {
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
        let (method, method_original) = semconv::method(&http.method);
        let (host, host_port) = http.authority.as_deref().map(split_host_port).map_or((None, None), |(h, p)| (Some(h.to_owned()), p));
        let peer_ip = self.ip_text(&conn.peer);
        let local_ip = self.ip_text(&conn.local);
        let (server_address, server_port, client_address, client_port) = match kind {
            SpanKind::Server => (host, host_port.unwrap_or(conn.local.port), peer_ip.clone(), conn.peer.port),
            SpanKind::Client => (host.or_else(|| Some(peer_ip.clone())), host_port.unwrap_or(conn.peer.port), local_ip, conn.local.port),
        };
        let start_unix_ns = unix_ns(start_mono_ns, b.offset);
        let mut span = HttpSpan {
            resource: 0,
            kind,
            trace_id: 0,
            span_id: ids::span_id(b.inst, conn.id, seq, sub, role),
            parent_span_id: 0,
            trace_flags: 1,
            name: semconv::span_name(&method, route.as_deref()),
            start_unix_ns,
            end_unix_ns: unix_ns(end_mono_ns, b.offset).max(start_unix_ns),
            method,
            method_original,
            route,
            path: http.path,
            query: self.redactor.query(http.query.as_deref()),
            scheme: http.scheme.unwrap_or_else(|| if conn.tls { "https" } else { "http" }.to_owned()),
            status,
            error: semconv::is_error(kind, status),
            server_address,
            server_port,
            client_address,
            client_port,
            peer_address: peer_ip,
            peer_port: conn.peer.port,
            protocol_version: http.version.to_owned(),
            user_agent: http.user_agent,
            export_trace,
            export_metrics,
            attributes: Vec::new(),
            rpc: None,
        };
        if http.status.is_none() {
            // reset, refused or closed before a response
            span.error = true;
            span.attributes.push(("error.type".to_owned(), Value::Str("_OTHER".to_owned())));
        }
        if let Some(rpc) = http.rpc {
            span.name = rpc.name;
            span.error = rpc.error;
            span.attributes = rpc.attributes;
            span.rpc = Some(rpc.call);
        }
        self.trace(b, Produced { resource, span, origin: b.origin }, (conn.id, seq, sub), parent, traceparent.as_deref());
    }

    /// Puts span `p` (of operation `(conn, seq, sub)`) in its trace and out:
    /// a server span continues the `traceparent` it carried or starts a
    /// trace, and is remembered for its children; a client span joins the
    /// server span it was made under, waiting for it a while if it has not
    /// come yet.
    fn trace(
        &mut self,
        b: &mut Batch<'_>,
        mut p: Produced,
        (conn, seq, sub): (u64, u32, u32),
        parent: Option<(u64, u32)>,
        traceparent: Option<&str>,
    ) {
        let inst = b.inst;
        let span = &mut p.span;
        match span.kind {
            SpanKind::Server => {
                match traceparent.and_then(http::parse_traceparent) {
                    Some(tp) => {
                        span.trace_id = tp.trace_id;
                        span.parent_span_id = tp.span_id;
                        span.trace_flags = tp.flags;
                    }
                    None => span.trace_id = ids::trace_id(inst, conn, seq, sub),
                }
                let key = (inst, conn, seq);
                if sub == 0 {
                    self.server_ctx.insert(key, span.trace_id, span.trace_flags);
                }
                let (trace, flags) = (span.trace_id, span.trace_flags);
                b.push(p);
                if sub == 0 && !self.held.is_empty() {
                    for h in self.held.remove(&key).unwrap_or_default() {
                        let mut s = h.span;
                        s.trace_id = trace;
                        s.trace_flags = flags;
                        self.stats.spans.inc();
                        b.out.push(Produced { resource: h.resource, span: s, origin: h.origin });
                    }
                }
            }
            SpanKind::Client => match parent {
                Some((pconn, pseq)) => {
                    span.parent_span_id = ids::span_id(inst, pconn, pseq, 0, Role::Server);
                    let key = (inst, pconn, pseq);
                    if let Some((trace, flags)) = self.server_ctx.get(key) {
                        span.trace_id = trace;
                        span.trace_flags = flags;
                        b.push(p);
                    } else {
                        // The server span (which may carry the caller's
                        // trace id) comes later: wait for it, a while.
                        b.made.held += 1;
                        self.held.entry(key).or_default().push(Held { resource: p.resource, span: p.span, origin: p.origin });
                        self.held_order.push_back((b.now + self.parent_wait, key));
                    }
                }
                None => {
                    span.trace_id = ids::trace_id(inst, conn, seq, sub);
                    b.push(p);
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
