//! `SpanBatch` → the bytes of an OTLP `ExportTraceServiceRequest`, with the
//! attribute names of the stable semantic conventions of each span's
//! [`Call`]: HTTP's for an HTTP exchange (and a gRPC call over one, whose
//! `rpc.*` attributes the span carries), the database ones for a
//! [`DbCall`], the messaging ones for a [`MsgCall`] (whose span also has
//! its kind, PRODUCER or CONSUMER, and its links).
//!
//! Written straight from ringtail's spans into reused buffers: the batch's
//! spans are grouped by resource once (a counting sort of their indices),
//! each group becomes one `ResourceSpans` with one `ScopeSpans`
//! (`ringtail`, the crate version), and every attribute is written from the
//! span's own strings, with no per-span allocation.

use std::fmt::Write as _;

use ipc_schema::{Call, DbCall, HttpCall, MsgCall, Span, SpanKind, SpanLink};

use super::wire::{self, key, kv, kv_known, len_field, Key, Out, Value, LEN, VARINT};
use crate::batch::Spans;
use crate::digits::decimal;
use crate::resource;

/// The instrumentation scope of every ringtail span and metric.
pub const SCOPE_NAME: &str = "ringtail";
/// The scope's version.
pub const SCOPE_VERSION: &str = env!("CARGO_PKG_VERSION");

// Field numbers (opentelemetry/proto/trace/v1/trace.proto and the
// collector's trace_service.proto).
const REQUEST_RESOURCE_SPANS: u32 = 1;
const RESOURCE_SPANS_RESOURCE: u32 = 1;
const RESOURCE_SPANS_SCOPE_SPANS: u32 = 2;
const SCOPE_SPANS_SCOPE: u32 = 1;
const SCOPE_SPANS_SPANS: u32 = 2;
const RESOURCE_ATTRIBUTES: u32 = 1;
const SPAN_TRACE_ID: u32 = 1;
const SPAN_SPAN_ID: u32 = 2;
const SPAN_PARENT_SPAN_ID: u32 = 4;
const SPAN_NAME: u32 = 5;
const SPAN_KIND: u32 = 6;
const SPAN_START: u32 = 7;
const SPAN_END: u32 = 8;
const SPAN_ATTRIBUTES: u32 = 9;
const SPAN_LINKS: u32 = 13;
const SPAN_STATUS: u32 = 15;
const SPAN_FLAGS: u32 = 16;
const STATUS_CODE: u32 = 3;
const LINK_TRACE_ID: u32 = 1;
const LINK_SPAN_ID: u32 = 2;
const LINK_FLAGS: u32 = 6;

/// `SPAN_KIND_SERVER`, `SPAN_KIND_CLIENT`, `SPAN_KIND_PRODUCER`,
/// `SPAN_KIND_CONSUMER`.
const KIND_SERVER: u64 = 2;
const KIND_CLIENT: u64 = 3;
const KIND_PRODUCER: u64 = 4;
const KIND_CONSUMER: u64 = 5;
/// `STATUS_CODE_ERROR`.
const STATUS_ERROR: u64 = 2;
/// `SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK`: whether the parent is remote is
/// known (it always is here).
const FLAG_HAS_IS_REMOTE: u32 = 0x100;
/// `SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK`.
const FLAG_IS_REMOTE: u32 = 0x200;

/// `url.full` of a client request, written into `out` (cleared first;
/// left empty for a span of no HTTP exchange).
pub fn url_full(s: &Span<&str>, out: &mut String) {
    out.clear();
    let Some(h) = s.call.http() else {
        return;
    };
    let host = s.server_address.unwrap_or(s.peer_address);
    let default_port = (h.scheme == "http" && s.server_port == 80) || (h.scheme == "https" && s.server_port == 443);
    out.push_str(h.scheme);
    out.push_str("://");
    if host.contains(':') {
        out.push('[');
        out.push_str(host);
        out.push(']');
    } else {
        out.push_str(host);
    }
    if !default_port {
        // Writing to a String cannot fail.
        let _ = write!(out, ":{}", s.server_port);
    }
    out.push_str(h.path);
    if let Some(q) = &h.query {
        out.push('?');
        out.push_str(q);
    }
}

/// The span's attributes, in the order they are exported: those of its
/// call's conventions. `url` is the client span's `url.full` (see
/// [`url_full`]; unused for a database call).
#[inline(always)]
pub fn attributes(s: &Span<&str>, url: &str, f: impl FnMut(&Key, Value<&str>)) {
    match &s.call {
        Call::Http(h) | Call::Rpc(h, _) => http_attributes(s, h, url, f),
        Call::Db(c) => db_attributes(s, c, f),
        Call::Messaging(c) => messaging_attributes(s, c, f),
    }
}

/// An HTTP exchange's attributes (the stable HTTP conventions; a gRPC
/// call's `rpc.*` are among the span's own), in the order they are
/// exported.
#[inline(always)]
pub fn http_attributes(s: &Span<&str>, h: &HttpCall<&str>, url: &str, mut f: impl FnMut(&Key, Value<&str>)) {
    let mut digits = [0u8; 20];
    f(&key!("http.request.method"), Value::Str(h.method));
    if let Some(m) = &h.method_original {
        f(&key!("http.request.method_original"), Value::Str(m));
    }
    f(&key!("http.response.status_code"), Value::Int(i64::from(h.status)));
    f(&key!("url.scheme"), Value::Str(h.scheme));
    f(&key!("network.protocol.version"), Value::Str(h.protocol_version));
    if let Some(ua) = &h.user_agent {
        f(&key!("user_agent.original"), Value::Str(ua));
    }
    if s.error && !s.attributes.iter().any(|(k, _)| *k == "error.type") {
        f(&key!("error.type"), Value::Str(decimal(u64::from(h.status), &mut digits)));
    }
    match s.kind {
        SpanKind::Server => {
            f(&key!("url.path"), Value::Str(h.path));
            if let Some(q) = &h.query {
                f(&key!("url.query"), Value::Str(q));
            }
            if let Some(r) = &h.route {
                f(&key!("http.route"), Value::Str(r));
            }
            if let Some(a) = &s.server_address {
                f(&key!("server.address"), Value::Str(a));
            }
            f(&key!("server.port"), Value::Int(i64::from(s.server_port)));
            f(&key!("client.address"), Value::Str(h.client_address));
            f(&key!("client.port"), Value::Int(i64::from(h.client_port)));
            f(&key!("network.peer.address"), Value::Str(s.peer_address));
            f(&key!("network.peer.port"), Value::Int(i64::from(s.peer_port)));
        }
        SpanKind::Client | SpanKind::Producer | SpanKind::Consumer => {
            f(&key!("url.full"), Value::Str(url));
            f(&key!("url.path"), Value::Str(h.path));
            if let Some(a) = &s.server_address {
                f(&key!("server.address"), Value::Str(a));
            }
            f(&key!("server.port"), Value::Int(i64::from(s.server_port)));
            f(&key!("network.peer.address"), Value::Str(s.peer_address));
            f(&key!("network.peer.port"), Value::Int(i64::from(s.peer_port)));
        }
    }
}

/// A database call's attributes (the stable database conventions), in the
/// order they are exported, each only when the call has it. The server is
/// the one the client connected to, the peer the socket's other end.
#[inline]
pub fn db_attributes(s: &Span<&str>, c: &DbCall<&str>, mut f: impl FnMut(&Key, Value<&str>)) {
    f(&key!("db.system.name"), Value::Str(c.system));
    strs(
        &mut f,
        [
            (key!("db.namespace"), c.namespace),
            (key!("db.operation.name"), c.operation),
            (key!("db.collection.name"), c.collection),
            (key!("db.query.text"), c.query_text),
            (key!("db.query.summary"), c.query_summary),
            (key!("db.response.status_code"), c.status_code),
        ],
    );
    if let Some(n) = c.returned_rows {
        // An int attribute is an i64; no server returns 2^63 rows.
        f(&key!("db.response.returned_rows"), Value::Int(saturating(n)));
    }
    error_and_ends(s, c.error_type, f);
}

/// A messaging call's attributes (the messaging conventions), in the
/// order they are exported, each only when the call has it. Never a
/// message's key, payload or header: the call holds none.
#[inline]
pub fn messaging_attributes(s: &Span<&str>, c: &MsgCall<&str>, mut f: impl FnMut(&Key, Value<&str>)) {
    f(&key!("messaging.system"), Value::Str(c.system));
    if let Some(v) = c.operation_type {
        f(&key!("messaging.operation.type"), Value::Str(v));
    }
    f(&key!("messaging.operation.name"), Value::Str(c.operation_name));
    strs(&mut f, [(key!("messaging.destination.name"), c.destination), (key!("messaging.destination.template"), c.template)]);
    if c.temporary {
        f(&key!("messaging.destination.temporary"), Value::Bool(true));
    }
    if c.anonymous {
        f(&key!("messaging.destination.anonymous"), Value::Bool(true));
    }
    strs(
        &mut f,
        [
            (key!("messaging.destination.subscription.name"), c.subscription),
            (key!("messaging.destination.partition.id"), c.partition),
            (key!("messaging.consumer.group.name"), c.consumer_group),
            (key!("messaging.client.id"), c.client_id),
            (key!("messaging.rabbitmq.destination.routing_key"), c.routing_key),
        ],
    );
    if let Some(n) = c.delivery_tag {
        f(&key!("messaging.rabbitmq.message.delivery_tag"), Value::Int(saturating(n)));
    }
    if let Some(n) = c.kafka_offset {
        f(&key!("messaging.kafka.offset"), Value::Int(n));
    }
    if let Some(n) = c.message_count {
        f(&key!("messaging.batch.message_count"), Value::Int(saturating(n)));
    }
    if let Some(n) = c.body_size {
        f(&key!("messaging.message.body.size"), Value::Int(saturating(n)));
    }
    error_and_ends(s, c.error_type, f);
}

/// Each of `pairs` whose string the call has, in their order.
#[inline(always)]
fn strs<'a, const N: usize>(f: &mut impl FnMut(&Key, Value<&'a str>), pairs: [(Key, Option<&'a str>); N]) {
    for (k, v) in pairs {
        if let Some(v) = v {
            f(&k, Value::Str(v));
        }
    }
}

/// An int attribute is an i64: a count, a size or a tag past 2^63 is
/// exported as `i64::MAX`.
#[inline(always)]
fn saturating(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The last attributes of a database or messaging call: its `error_type`
/// (as for HTTP, an `error.type` among the span's attributes replaces it),
/// then the server the client connected to and the socket's other end,
/// each only when known.
#[inline(always)]
fn error_and_ends(s: &Span<&str>, error_type: Option<&str>, mut f: impl FnMut(&Key, Value<&str>)) {
    if let Some(e) = error_type.filter(|_| !s.attributes.iter().any(|(k, _)| *k == "error.type")) {
        f(&key!("error.type"), Value::Str(e));
    }
    if let Some(h) = s.server_address {
        f(&key!("server.address"), Value::Str(h));
    }
    if s.server_port != 0 {
        f(&key!("server.port"), Value::Int(i64::from(s.server_port)));
    }
    if !s.peer_address.is_empty() {
        f(&key!("network.peer.address"), Value::Str(s.peer_address));
    }
    if s.peer_port != 0 {
        f(&key!("network.peer.port"), Value::Int(i64::from(s.peer_port)));
    }
}

/// A span's `Link`s: each a context the span-actor read off the wire (a
/// message's `traceparent`): remote, its trace state not kept.
#[inline(never)]
fn links(o: &mut Vec<u8>, links: &[SpanLink]) {
    for l in links {
        o.key(SPAN_LINKS, LEN);
        wire::length_prefixed(o, |o| {
            wire::bytes(o, LINK_TRACE_ID, &l.trace_id.to_be_bytes());
            wire::bytes(o, LINK_SPAN_ID, &l.span_id.to_be_bytes());
            wire::fixed32(o, LINK_FLAGS, u32::from(l.trace_flags) | FLAG_HAS_IS_REMOTE | FLAG_IS_REMOTE);
        });
    }
}

/// One `Span` message body (without its key and length).
fn span(o: &mut Vec<u8>, s: &Span<&str>, url: &str) {
    wire::bytes(o, SPAN_TRACE_ID, &s.trace_id.to_be_bytes());
    wire::bytes(o, SPAN_SPAN_ID, &s.span_id.to_be_bytes());
    if s.parent_span_id != 0 {
        wire::bytes(o, SPAN_PARENT_SPAN_ID, &s.parent_span_id.to_be_bytes());
    }
    wire::opt_bytes(o, SPAN_NAME, s.name.as_bytes());
    let kind = match s.kind {
        SpanKind::Server => KIND_SERVER,
        SpanKind::Client => KIND_CLIENT,
        SpanKind::Producer => KIND_PRODUCER,
        SpanKind::Consumer => KIND_CONSUMER,
    };
    wire::uint(o, SPAN_KIND, kind);
    wire::fixed64(o, SPAN_START, s.start_unix_ns);
    wire::fixed64(o, SPAN_END, s.end_unix_ns);
    attributes(s, url, |k, v| kv_known(o, SPAN_ATTRIBUTES, k, v));
    for (k, v) in &s.attributes {
        kv(o, SPAN_ATTRIBUTES, k, *v);
    }
    if !s.links.is_empty() {
        links(o, &s.links);
    }
    // The status is always present: unset, or ERROR with no message.
    o.key(SPAN_STATUS, LEN);
    if s.error {
        o.varint(2);
        o.key(STATUS_CODE, VARINT);
        o.varint(STATUS_ERROR);
    } else {
        o.varint(0);
    }
    // A server span's parent came over the wire (traceparent).
    let remote = s.kind == SpanKind::Server && s.parent_span_id != 0;
    let flags = u32::from(s.trace_flags) | FLAG_HAS_IS_REMOTE | if remote { FLAG_IS_REMOTE } else { 0 };
    wire::fixed32(o, SPAN_FLAGS, flags);
}

/// Builds trace requests, keeping its buffers from one batch to the next.
#[derive(Debug, Default)]
pub struct TraceEncoder {
    /// Attributes added to every resource (ringtail's `OTEL_RESOURCE_ATTRIBUTES`).
    extra: Vec<(String, String)>,
    /// Span indices grouped by resource.
    order: Vec<u32>,
    /// Where each resource's group starts in `order` (one more entry than
    /// resources), then the fill cursor.
    starts: Vec<u32>,
    cursor: Vec<u32>,
    /// One group's encoded spans.
    spans: Vec<u8>,
    /// One group's encoded resource.
    resource: Vec<u8>,
    /// The encoded `scope` field of every `ScopeSpans`.
    scope: Vec<u8>,
    /// `url.full` of the span being written.
    url: String,
}

impl TraceEncoder {
    /// An encoder whose resources get `extra` attributes.
    pub fn new(extra: Vec<(String, String)>) -> TraceEncoder {
        let mut scope = Vec::new();
        wire::scope(&mut scope, SCOPE_SPANS_SCOPE, SCOPE_NAME, SCOPE_VERSION);
        TraceEncoder { extra, scope, ..TraceEncoder::default() }
    }

    /// Writes the request for the spans of `batch` marked for tracing into
    /// `out` (cleared first); returns how many spans it holds (spans that
    /// name no resource of the batch are left out).
    pub fn encode(&mut self, batch: &Spans<'_>, out: &mut Vec<u8>) -> usize {
        out.clear();
        let n_res = batch.resources.len();
        let wanted = |s: &Span<&str>| s.export_trace && (s.resource as usize) < n_res;
        // Counting sort of span indices by resource: O(spans + resources).
        self.starts.clear();
        self.starts.resize(n_res + 1, 0);
        for s in batch.spans.iter().filter(|s| wanted(s)) {
            self.starts[s.resource as usize + 1] += 1;
        }
        for i in 0..n_res {
            self.starts[i + 1] += self.starts[i];
        }
        let total = self.starts[n_res] as usize;
        self.order.clear();
        self.order.resize(total, 0);
        self.cursor.clear();
        self.cursor.extend_from_slice(&self.starts[..n_res]);
        for (i, s) in batch.spans.iter().enumerate().filter(|(_, s)| wanted(s)) {
            let c = &mut self.cursor[s.resource as usize];
            self.order[*c as usize] = i as u32;
            *c += 1;
        }
        for (r, res) in batch.resources.iter().enumerate() {
            let (from, to) = (self.starts[r] as usize, self.starts[r + 1] as usize);
            if from == to {
                continue;
            }
            self.spans.clear();
            for &i in &self.order[from..to] {
                let s = &batch.spans[i as usize];
                if s.kind == SpanKind::Client {
                    url_full(s, &mut self.url);
                } else {
                    self.url.clear();
                }
                self.spans.key(SCOPE_SPANS_SPANS, LEN);
                wire::length_prefixed(&mut self.spans, |o| span(o, s, &self.url));
            }
            self.resource.clear();
            for (k, v) in resource::service(res, &self.extra) {
                kv(&mut self.resource, RESOURCE_ATTRIBUTES, k, v);
            }
            let scope_spans = self.scope.len() + self.spans.len();
            let resource_spans =
                len_field(RESOURCE_SPANS_RESOURCE, self.resource.len()) + len_field(RESOURCE_SPANS_SCOPE_SPANS, scope_spans);
            out.reserve(len_field(REQUEST_RESOURCE_SPANS, resource_spans));
            out.key(REQUEST_RESOURCE_SPANS, LEN);
            out.varint(resource_spans as u64);
            wire::bytes(out, RESOURCE_SPANS_RESOURCE, &self.resource);
            out.key(RESOURCE_SPANS_SCOPE_SPANS, LEN);
            out.varint(scope_spans as u64);
            out.extend_from_slice(&self.scope);
            out.extend_from_slice(&self.spans);
        }
        total
    }
}
