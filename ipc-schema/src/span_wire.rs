//! The wire layout of a [`SpanBatch`]: written and read by hand.
//!
//! A span batch is the busiest message ringtail has (every request becomes
//! one span, encoded by the span-actor and decoded by the exporter), and
//! serde's generic msgpack path spent half of the exporter's instructions
//! on it: a marker dispatch and a visitor per field. A batch keeps its
//! spans in this layout from the moment they are pushed, the envelope
//! carries it as two msgpack `bin`s, and the exporter reads spans whose
//! strings borrow from it (no allocation a span):
//!
//! ```text
//! batch    = msgpack array [ bin(count(resources) resource* uint(spans))
//!                             bin(span*) ]
//! resource = str(service_name) str(service_instance_id) str(host_name)
//!            uint(pid) str(executable_name) count(extra) (str str)*
//! span     = uint(resource)
//!            u8(kind: 0 server, 1 client, 2 producer, 3 consumer)
//!            u128le(trace_id) u64le(span_id) u64le(parent_span_id)
//!            u8(trace_flags) str(name) u64le(start_unix_ns) u64le(end_unix_ns)
//!            u8(bit 0 error, 1 export_trace, 2 export_metrics, 3 links)
//!            opt(server_address) uint(server_port) str(peer_address)
//!            uint(peer_port) count(attributes) (str(key) attr)* edge call
//!            [links, when flag bit 3 is set]
//! links    = count(1 to 16) (u128le(trace_id) u64le(span_id) u8(trace_flags))*
//! attr     = u8(0) str | u8(1) int | u8(2) u8(0 false, 1 true)
//! edge     = u8(0) | u8(1) str(peer_service) u64le(peer_duration_ns)
//!            u8(peer_error: 0 or 1)
//! call     = u8(0) http | u8(1) http rpc | u8(2) db | u8(3) msg
//! http     = str(method) opt(method_original) opt(route) str(path)
//!            opt(query) str(scheme) uint(status) str(client_address)
//!            uint(client_port) str(protocol_version) opt(user_agent)
//! rpc      = u8(bit 0 stable, 1 experimental) str(system) str(method)
//!            (u8(0) | u8(1) str(service) str(method))
//!            (u8(0) | u8(1) int(code)) opt(status) opt(error_type)
//! db       = str(system) opt(namespace) opt(operation) opt(collection)
//!            opt(query_text) opt(query_summary) opt(status_code)
//!            opt(error_type) (u8(0) | u8(1) uint(rows))
//! msg      = str(system) opt(operation_type) str(operation_name)
//!            opt(destination) opt(template) opt(subscription)
//!            opt(partition) opt(consumer_group) opt(client_id)
//!            opt(routing_key) opt(error_type)
//!            (u8(0) | u8(1) int(kafka_offset))
//!            (u8(0) | u8(1) uint(message_count))
//!            (u8(0) | u8(1) uint(body_size))
//!            (u8(0) | u8(1) uint(delivery_tag))
//!            u8(bit 0 temporary, 1 anonymous)
//! int      = zigzag uint (an i64; a status code is range-checked as i32)
//! uint     = LEB128, at most 10 bytes, range-checked for its field
//! count    = uint, never more than the bytes left could hold
//! str      = uint(length) UTF-8 bytes
//! opt      = u8(0) | u8(1) str
//! ```
//!
//! A span without links writes neither a count nor anything else for
//! them: the spans of every call but messaging are what they were before
//! links were added, byte for byte.
//!
//! Reading treats the bytes as hostile: every length is checked against
//! what is left before anything is allocated, every integer against its
//! field's range, every string for UTF-8, every tag and flag byte against
//! the values it may take, a span's links against [`MAX_LINKS`] (and the
//! links flag against an empty list), every span's resource index
//! against the batch's resources, the spans against their declared number,
//! and trailing bytes are an error. Decoding a message reads its resources;
//! its spans are checked as [`SpanBatch::read`] reads them, once (checking
//! them at decode too cost the exporter a second parse, ~0.25 µs a span).
//! Field lists are destructured exhaustively on both sides: a field added
//! to [`Span`], a [`Call`] variant or [`ServiceResource`] does not compile
//! until it is here.

use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::span::{Call, DbCall, Edge, HttpCall, MsgCall, RpcCall, ServiceResource, Span, SpanBatch, SpanKind, SpanLink, Value, MAX_LINKS};
pub use crate::wire::WireError;
use crate::wire::{put_int, put_opt, put_some, put_str, put_uint, Reader, Section};

/// The fewest bytes a resource takes (three empty strings, a pid, an empty
/// name, no extras): bounds a declared count by the bytes left.
const MIN_RESOURCE: usize = 6;
/// The fewest bytes a span takes (fixed-width fields and one-byte
/// integers, counts, empty strings and absent options; the smallest call,
/// a database call's).
const MIN_SPAN: usize = 1 + 1 + 16 + 8 + 8 + 1 + 1 + 8 + 8 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + MIN_DB;
/// The fewest bytes a call takes: its tag and a database call's fields.
const MIN_DB: usize = 1 + 1 + 7 + 1;
const CALL_HTTP: u8 = 0;
const CALL_RPC: u8 = 1;
const CALL_DB: u8 = 2;
const CALL_MSG: u8 = 3;
/// A link's bytes: trace id, span id, flags.
const LINK: usize = 16 + 8 + 1;
const MSG_TEMPORARY: u8 = 1;
const MSG_ANONYMOUS: u8 = 2;
const RPC_STABLE: u8 = 1;
const RPC_EXPERIMENTAL: u8 = 2;
const FLAG_ERROR: u8 = 1;
const FLAG_EXPORT_TRACE: u8 = 2;
const FLAG_EXPORT_METRICS: u8 = 4;
const FLAG_LINKS: u8 = 8;

/// The first part of a batch: its resources and how many spans follow.
fn write_resources(resources: &[ServiceResource], spans: usize, out: &mut Vec<u8>) {
    put_uint(out, resources.len() as u64);
    for r in resources {
        let ServiceResource { service_name, service_instance_id, host_name, pid, executable_name, extra } = r;
        put_str(out, service_name);
        put_str(out, service_instance_id);
        put_str(out, host_name);
        put_uint(out, u64::from(*pid));
        put_str(out, executable_name);
        put_uint(out, extra.len() as u64);
        for (k, v) in extra {
            put_str(out, k);
            put_str(out, v);
        }
    }
    put_uint(out, spans as u64);
}

/// Appends one span.
pub(crate) fn write_span<S: AsRef<str>>(s: &Span<S>, out: &mut Vec<u8>) {
    let Span {
        resource,
        kind,
        trace_id,
        span_id,
        parent_span_id,
        trace_flags,
        name,
        start_unix_ns,
        end_unix_ns,
        error,
        server_address,
        server_port,
        peer_address,
        peer_port,
        export_trace,
        export_metrics,
        attributes,
        edge,
        links,
        call,
    } = s;
    put_uint(out, u64::from(*resource));
    out.push(match kind {
        SpanKind::Server => 0,
        SpanKind::Client => 1,
        SpanKind::Producer => 2,
        SpanKind::Consumer => 3,
    });
    out.extend_from_slice(&trace_id.to_le_bytes());
    out.extend_from_slice(&span_id.to_le_bytes());
    out.extend_from_slice(&parent_span_id.to_le_bytes());
    out.push(*trace_flags);
    put_str(out, name.as_ref());
    out.extend_from_slice(&start_unix_ns.to_le_bytes());
    out.extend_from_slice(&end_unix_ns.to_le_bytes());
    let flags = (u8::from(*error) * FLAG_ERROR)
        | (u8::from(*export_trace) * FLAG_EXPORT_TRACE)
        | (u8::from(*export_metrics) * FLAG_EXPORT_METRICS)
        | (u8::from(!links.is_empty()) * FLAG_LINKS);
    out.push(flags);
    put_opt(out, server_address.as_ref().map(AsRef::as_ref));
    put_uint(out, u64::from(*server_port));
    put_str(out, peer_address.as_ref());
    put_uint(out, u64::from(*peer_port));
    put_uint(out, attributes.len() as u64);
    for (k, v) in attributes {
        put_str(out, k.as_ref());
        match v {
            Value::Str(s) => {
                out.push(0);
                put_str(out, s.as_ref());
            }
            Value::Int(i) => {
                out.push(1);
                put_int(out, *i);
            }
            Value::Bool(b) => {
                out.push(2);
                out.push(u8::from(*b));
            }
        }
    }
    match edge {
        None => out.push(0),
        Some(e) => write_edge(e, out),
    }
    match call {
        Call::Http(h) => {
            out.push(CALL_HTTP);
            write_http(h, out);
        }
        Call::Rpc(h, r) => {
            out.push(CALL_RPC);
            write_http(h, out);
            write_rpc(r, out);
        }
        Call::Db(d) => {
            out.push(CALL_DB);
            write_db(d, out);
        }
        Call::Messaging(m) => {
            out.push(CALL_MSG);
            write_msg(m, out);
        }
    }
    if !links.is_empty() {
        write_links(links, out);
    }
}

/// Out of line: few spans have links. At most [`MAX_LINKS`] are written
/// (the span-actor keeps no more; a reader refuses more).
#[inline(never)]
fn write_links(links: &[SpanLink], out: &mut Vec<u8>) {
    let links = &links[..links.len().min(MAX_LINKS)];
    put_uint(out, links.len() as u64);
    for SpanLink { trace_id, span_id, trace_flags } in links {
        out.extend_from_slice(&trace_id.to_le_bytes());
        out.extend_from_slice(&span_id.to_le_bytes());
        out.push(*trace_flags);
    }
}

/// A span's links, after its flags said it has some: one to
/// [`MAX_LINKS`].
fn read_links(rd: &mut Reader<'_>) -> Result<Vec<SpanLink>, WireError> {
    let n = rd.count("links", LINK)?;
    if n == 0 || n > MAX_LINKS {
        return Err(WireError::Range { field: "links" });
    }
    let mut links = Vec::with_capacity(n);
    for _ in 0..n {
        let trace_id = u128::from_le_bytes(rd.fixed("link trace_id")?);
        let span_id = rd.u64le("link span_id")?;
        let trace_flags = rd.u8("link trace_flags")?;
        links.push(SpanLink { trace_id, span_id, trace_flags });
    }
    Ok(links)
}

/// Out of line, as [`write_db`].
#[inline(never)]
fn write_msg<S: AsRef<str>>(m: &MsgCall<S>, out: &mut Vec<u8>) {
    let MsgCall {
        system,
        operation_type,
        operation_name,
        destination,
        template,
        subscription,
        partition,
        consumer_group,
        client_id,
        routing_key,
        error_type,
        kafka_offset,
        message_count,
        body_size,
        delivery_tag,
        temporary,
        anonymous,
    } = m;
    put_str(out, system.as_ref());
    put_opt(out, operation_type.as_ref().map(AsRef::as_ref));
    put_str(out, operation_name.as_ref());
    for v in [destination, template, subscription, partition, consumer_group, client_id, routing_key, error_type] {
        put_opt(out, v.as_ref().map(AsRef::as_ref));
    }
    put_some(out, *kafka_offset, put_int);
    for v in [message_count, body_size, delivery_tag] {
        put_some(out, *v, put_uint);
    }
    out.push((u8::from(*temporary) * MSG_TEMPORARY) | (u8::from(*anonymous) * MSG_ANONYMOUS));
}

fn read_msg<'a>(rd: &mut Reader<'a>) -> Result<MsgCall<&'a str>, WireError> {
    // Fields are read in the order written, the flags last.
    let mut m = MsgCall {
        system: rd.str_ref("msg system")?,
        operation_type: rd.opt_ref("msg operation_type")?,
        operation_name: rd.str_ref("msg operation_name")?,
        destination: rd.opt_ref("msg destination")?,
        template: rd.opt_ref("msg template")?,
        subscription: rd.opt_ref("msg subscription")?,
        partition: rd.opt_ref("msg partition")?,
        consumer_group: rd.opt_ref("msg consumer_group")?,
        client_id: rd.opt_ref("msg client_id")?,
        routing_key: rd.opt_ref("msg routing_key")?,
        error_type: rd.opt_ref("msg error_type")?,
        kafka_offset: rd.some("msg kafka_offset", |rd| rd.int64("msg kafka_offset"))?,
        message_count: rd.some("msg message_count", |rd| rd.uint("msg message_count"))?,
        body_size: rd.some("msg body_size", |rd| rd.uint("msg body_size"))?,
        delivery_tag: rd.some("msg delivery_tag", |rd| rd.uint("msg delivery_tag"))?,
        temporary: false,
        anonymous: false,
    };
    let flags = rd.u8("msg flags")?;
    if flags & !(MSG_TEMPORARY | MSG_ANONYMOUS) != 0 {
        return Err(WireError::Range { field: "msg flags" });
    }
    m.temporary = flags & MSG_TEMPORARY != 0;
    m.anonymous = flags & MSG_ANONYMOUS != 0;
    Ok(m)
}

/// An HTTP exchange's fields: inlined, most spans are one.
#[inline(always)]
fn write_http<S: AsRef<str>>(h: &HttpCall<S>, out: &mut Vec<u8>) {
    let HttpCall { method, method_original, route, path, query, scheme, status, client_address, client_port, protocol_version, user_agent } =
        h;
    put_str(out, method.as_ref());
    put_opt(out, method_original.as_ref().map(AsRef::as_ref));
    put_opt(out, route.as_ref().map(AsRef::as_ref));
    put_str(out, path.as_ref());
    put_opt(out, query.as_ref().map(AsRef::as_ref));
    put_str(out, scheme.as_ref());
    put_uint(out, u64::from(*status));
    put_str(out, client_address.as_ref());
    put_uint(out, u64::from(*client_port));
    put_str(out, protocol_version.as_ref());
    put_opt(out, user_agent.as_ref().map(AsRef::as_ref));
}

fn read_http<'a>(rd: &mut Reader<'a>) -> Result<HttpCall<&'a str>, WireError> {
    Ok(HttpCall {
        method: rd.str_ref("method")?,
        method_original: rd.opt_ref("method_original")?,
        route: rd.opt_ref("route")?,
        path: rd.str_ref("path")?,
        query: rd.opt_ref("query")?,
        scheme: rd.str_ref("scheme")?,
        status: rd.int("status")?,
        client_address: rd.str_ref("client_address")?,
        client_port: rd.int("client_port")?,
        protocol_version: rd.str_ref("protocol_version")?,
        user_agent: rd.opt_ref("user_agent")?,
    })
}

/// The call a span's tag names.
fn read_call<'a>(rd: &mut Reader<'a>) -> Result<Call<&'a str>, WireError> {
    Ok(match rd.u8("call")? {
        CALL_HTTP => Call::Http(read_http(rd)?),
        CALL_RPC => {
            let http = read_http(rd)?;
            Call::Rpc(http, read_rpc(rd)?)
        }
        CALL_DB => Call::Db(read_db(rd)?),
        CALL_MSG => Call::Messaging(read_msg(rd)?),
        _ => return Err(WireError::Range { field: "call" }),
    })
}

/// Out of line: few spans complete an edge.
#[inline(never)]
fn write_edge<S: AsRef<str>>(edge: &Edge<S>, out: &mut Vec<u8>) {
    let Edge { peer_service, peer_duration_ns, peer_error } = edge;
    out.push(1);
    put_str(out, peer_service.as_ref());
    out.extend_from_slice(&peer_duration_ns.to_le_bytes());
    out.push(u8::from(*peer_error));
}

fn read_edge<'a>(rd: &mut Reader<'a>) -> Result<Option<Edge<&'a str>>, WireError> {
    match rd.u8("edge")? {
        0 => return Ok(None),
        1 => {}
        _ => return Err(WireError::Range { field: "edge" }),
    }
    let peer_service = rd.str_ref("edge peer_service")?;
    let peer_duration_ns = rd.u64le("edge peer_duration_ns")?;
    let peer_error = match rd.u8("edge peer_error")? {
        0 => false,
        1 => true,
        _ => return Err(WireError::Range { field: "edge peer_error" }),
    };
    Ok(Some(Edge { peer_service, peer_duration_ns, peer_error }))
}

/// Out of line, as [`write_rpc`]: most spans are not database calls.
#[inline(never)]
fn write_db<S: AsRef<str>>(db: &DbCall<S>, out: &mut Vec<u8>) {
    let DbCall { system, namespace, operation, collection, query_text, query_summary, status_code, error_type, returned_rows } = db;
    put_str(out, system.as_ref());
    for v in [namespace, operation, collection, query_text, query_summary, status_code, error_type] {
        put_opt(out, v.as_ref().map(AsRef::as_ref));
    }
    put_some(out, *returned_rows, put_uint);
}

fn read_db<'a>(rd: &mut Reader<'a>) -> Result<DbCall<&'a str>, WireError> {
    Ok(DbCall {
        system: rd.str_ref("db system")?,
        namespace: rd.opt_ref("db namespace")?,
        operation: rd.opt_ref("db operation")?,
        collection: rd.opt_ref("db collection")?,
        query_text: rd.opt_ref("db query_text")?,
        query_summary: rd.opt_ref("db query_summary")?,
        status_code: rd.opt_ref("db status_code")?,
        error_type: rd.opt_ref("db error_type")?,
        returned_rows: rd.some("db rows", |rd| rd.int("db rows"))?,
    })
}

/// Out of line: most spans are not RPC calls, and [`write_span`] stays
/// small enough for its writes to be inlined.
#[inline(never)]
fn write_rpc<S: AsRef<str>>(rpc: &RpcCall<S>, out: &mut Vec<u8>) {
    let RpcCall { stable, experimental, system, method, service_method, code, status, error_type } = rpc;
    out.push((u8::from(*stable) * RPC_STABLE) | (u8::from(*experimental) * RPC_EXPERIMENTAL));
    put_str(out, system.as_ref());
    put_str(out, method.as_ref());
    put_some(out, service_method.as_ref(), |out, (service, method)| {
        put_str(out, service.as_ref());
        put_str(out, method.as_ref());
    });
    put_some(out, code.map(i64::from), put_int);
    put_opt(out, status.as_ref().map(AsRef::as_ref));
    put_opt(out, error_type.as_ref().map(AsRef::as_ref));
}

fn read_rpc<'a>(rd: &mut Reader<'a>) -> Result<RpcCall<&'a str>, WireError> {
    let sets = rd.u8("rpc sets")?;
    if sets & !(RPC_STABLE | RPC_EXPERIMENTAL) != 0 {
        return Err(WireError::Range { field: "rpc sets" });
    }
    let system = rd.str_ref("rpc system")?;
    let method = rd.str_ref("rpc method")?;
    let service_method = rd.some("rpc service", |rd| Ok((rd.str_ref("rpc service")?, rd.str_ref("rpc service method")?)))?;
    let code = rd.some("rpc code", |rd| i32::try_from(rd.int64("rpc code")?).map_err(|_| WireError::Range { field: "rpc code" }))?;
    let status = rd.opt_ref("rpc status")?;
    let error_type = rd.opt_ref("rpc error_type")?;
    Ok(RpcCall {
        stable: sets & RPC_STABLE != 0,
        experimental: sets & RPC_EXPERIMENTAL != 0,
        system,
        method,
        service_method,
        code,
        status,
        error_type,
    })
}

/// The first part of a batch: its resources and the number of spans it
/// declares.
fn read_resources(bytes: &[u8]) -> Result<(Vec<ServiceResource>, u64), WireError> {
    let mut rd = Reader::new(bytes);
    let n = rd.count("resources", MIN_RESOURCE)?;
    let mut resources = Vec::with_capacity(n);
    for _ in 0..n {
        let service_name = rd.str("service_name")?;
        let service_instance_id = rd.str("service_instance_id")?;
        let host_name = rd.str("host_name")?;
        let pid = rd.int("pid")?;
        let executable_name = rd.str("executable_name")?;
        let n = rd.count("extra", 2)?;
        let mut extra = Vec::with_capacity(n);
        for _ in 0..n {
            extra.push((rd.str("extra")?, rd.str("extra")?));
        }
        resources.push(ServiceResource { service_name, service_instance_id, host_name, pid, executable_name, extra });
    }
    let spans = rd.uint("spans")?;
    rd.end()?;
    Ok((resources, spans))
}

/// Reads every span of `section`, checking each (see the module doc), and
/// that there are as many as declared and nothing after them.
pub(crate) fn read_spans(section: &Section, resources: usize) -> Result<Vec<Span<&str>>, WireError> {
    let mut rd = Reader::new(&section.bytes);
    let mut spans = Vec::with_capacity(section.count);
    for index in 0..section.count {
        let s = read_span(&mut rd)?;
        if s.resource as usize >= resources {
            return Err(WireError::Resource { index, resource: s.resource, resources });
        }
        spans.push(s);
    }
    rd.end()?;
    Ok(spans)
}

/// Reads one span, borrowing its strings.
pub(crate) fn read_span<'a>(rd: &mut Reader<'a>) -> Result<Span<&'a str>, WireError> {
    let resource = rd.int("resource")?;
    let kind = match rd.u8("kind")? {
        0 => SpanKind::Server,
        1 => SpanKind::Client,
        2 => SpanKind::Producer,
        3 => SpanKind::Consumer,
        _ => return Err(WireError::Range { field: "kind" }),
    };
    let trace_id = u128::from_le_bytes(rd.fixed("trace_id")?);
    let span_id = rd.u64le("span_id")?;
    let parent_span_id = rd.u64le("parent_span_id")?;
    let trace_flags = rd.u8("trace_flags")?;
    let name = rd.str_ref("name")?;
    let start_unix_ns = rd.u64le("start_unix_ns")?;
    let end_unix_ns = rd.u64le("end_unix_ns")?;
    let flags = rd.u8("flags")?;
    if flags & !(FLAG_ERROR | FLAG_EXPORT_TRACE | FLAG_EXPORT_METRICS | FLAG_LINKS) != 0 {
        return Err(WireError::Range { field: "flags" });
    }
    let server_address = rd.opt_ref("server_address")?;
    let server_port = rd.int("server_port")?;
    let peer_address = rd.str_ref("peer_address")?;
    let peer_port = rd.int("peer_port")?;
    let n = rd.count("attributes", 3)?;
    let mut attributes = Vec::with_capacity(n);
    for _ in 0..n {
        let key = rd.str_ref("attribute key")?;
        let value = match rd.u8("attribute value")? {
            0 => Value::Str(rd.str_ref("attribute value")?),
            1 => Value::Int(rd.int64("attribute value")?),
            2 => match rd.u8("attribute value")? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                _ => return Err(WireError::Range { field: "attribute value" }),
            },
            _ => return Err(WireError::Range { field: "attribute value" }),
        };
        attributes.push((key, value));
    }
    let edge = read_edge(rd)?;
    let call = read_call(rd)?;
    let links = if flags & FLAG_LINKS != 0 { read_links(rd)? } else { Vec::new() };
    Ok(Span {
        resource,
        kind,
        trace_id,
        span_id,
        parent_span_id,
        trace_flags,
        name,
        start_unix_ns,
        end_unix_ns,
        error: flags & FLAG_ERROR != 0,
        server_address,
        server_port,
        peer_address,
        peer_port,
        export_trace: flags & FLAG_EXPORT_TRACE != 0,
        export_metrics: flags & FLAG_EXPORT_METRICS != 0,
        attributes,
        edge,
        links,
        call,
    })
}

/// A batch from its two parts' bytes: the resources read, the spans kept
/// for [`SpanBatch::read`] (their declared number bounded by their bytes).
fn read(resources: &[u8], spans: Vec<u8>) -> Result<SpanBatch, WireError> {
    let (resources, declared) = read_resources(resources)?;
    let count = usize::try_from(declared).ok().filter(|n| *n <= spans.len() / MIN_SPAN).ok_or(WireError::Count { field: "spans" })?;
    Ok(SpanBatch { resources, spans: Section { bytes: spans, count } })
}

impl Serialize for SpanBatch {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut resources = Vec::with_capacity(16 + 128 * self.resources.len());
        write_resources(&self.resources, self.spans.count, &mut resources);
        let mut t = serializer.serialize_tuple(2)?;
        t.serialize_element(serde_bytes::Bytes::new(&resources))?;
        t.serialize_element(serde_bytes::Bytes::new(&self.spans.bytes))?;
        t.end()
    }
}

struct BatchVisitor;

impl<'de> Visitor<'de> for BatchVisitor {
    type Value = SpanBatch;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a span batch")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SpanBatch, A::Error> {
        let resources: serde_bytes::ByteBuf = seq.next_element()?.ok_or_else(|| de::Error::missing_field("resources"))?;
        let spans: serde_bytes::ByteBuf = seq.next_element()?.ok_or_else(|| de::Error::missing_field("spans"))?;
        read(&resources, spans.into_vec()).map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for SpanBatch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SpanBatch, D::Error> {
        deserializer.deserialize_tuple(2, BatchVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(name: &str) -> ServiceResource {
        ServiceResource {
            service_name: name.into(),
            service_instance_id: "host:1".into(),
            host_name: "host".into(),
            pid: u32::MAX,
            executable_name: "exe".into(),
            extra: vec![("k".into(), "v".into()), ("ü".into(), String::new())],
        }
    }

    /// A gRPC call's span (HTTP and RPC fields), with an edge.
    fn span(resource: u32) -> Span {
        Span {
            resource,
            kind: SpanKind::Server,
            trace_id: u128::MAX - 1,
            span_id: u64::MAX,
            parent_span_id: 1,
            trace_flags: 0xff,
            name: "GET /a/{id}".into(),
            start_unix_ns: 1_700_000_000_000_000_000,
            end_unix_ns: u64::MAX,
            error: true,
            server_address: None,
            server_port: u16::MAX,
            peer_address: String::new(),
            peer_port: 443,
            export_trace: false,
            export_metrics: true,
            attributes: vec![
                ("rpc.method".into(), Value::Str("pkg.Svc/Get".into())),
                ("min".into(), Value::Int(i64::MIN)),
                ("max".into(), Value::Int(i64::MAX)),
                ("neg".into(), Value::Int(-1)),
                ("t".into(), Value::Bool(true)),
                ("f".into(), Value::Bool(false)),
            ],
            edge: Some(Edge { peer_service: "front-€".into(), peer_duration_ns: u64::MAX, peer_error: true }),
            links: Vec::new(),
            call: Call::Rpc(
                http(),
                RpcCall {
                    stable: true,
                    experimental: true,
                    system: "grpc".into(),
                    method: "pkg.Svc/Get".into(),
                    service_method: Some(("pkg.Svc".into(), "Get".into())),
                    code: Some(i32::MIN),
                    status: Some("NOT_FOUND".into()),
                    error_type: None,
                },
            ),
        }
    }

    fn http() -> HttpCall {
        HttpCall {
            method: "GET".into(),
            method_original: None,
            route: Some("/a/{id}".into()),
            path: "/a/€".into(),
            query: Some(String::new()),
            scheme: "https".into(),
            status: u16::MAX,
            client_address: "::1".into(),
            client_port: 0,
            protocol_version: "1.1".into(),
            user_agent: Some("x".repeat(300)),
        }
    }

    fn db() -> DbCall {
        DbCall {
            system: "postgresql".into(),
            namespace: Some("shop".into()),
            operation: Some("SELECT".into()),
            collection: None,
            query_text: Some("SELECT * FROM t WHERE id = ?".into()),
            query_summary: Some("SELECT t".into()),
            status_code: None,
            error_type: Some("42601".into()),
            returned_rows: Some(u64::MAX),
        }
    }

    /// A Kafka fetch's call, every field at an extreme.
    fn msg() -> MsgCall {
        MsgCall {
            system: "kafka".into(),
            operation_type: Some("receive".into()),
            operation_name: "poll".into(),
            destination: Some("orders-€".into()),
            template: Some("orders/+".into()),
            subscription: Some("workers".into()),
            partition: Some("2147483647".into()),
            consumer_group: Some("billing".into()),
            client_id: Some(String::new()),
            routing_key: Some("a.b".into()),
            error_type: Some("UNKNOWN_TOPIC_OR_PARTITION".into()),
            kafka_offset: Some(i64::MIN),
            message_count: Some(u64::MAX),
            body_size: Some(0),
            delivery_tag: Some(u64::MAX),
            temporary: true,
            anonymous: true,
        }
    }

    /// A CONSUMER span of a messaging call, with `links` links.
    fn consumer(links: usize) -> Span {
        let links = (0..links)
            .map(|i| SpanLink { trace_id: u128::MAX - i as u128, span_id: u64::MAX - i as u64, trace_flags: 0xff - i as u8 })
            .collect();
        Span { kind: SpanKind::Consumer, edge: None, attributes: Vec::new(), links, call: Call::Messaging(msg()), ..span(0) }
    }

    fn batch() -> SpanBatch {
        SpanBatch::of(vec![resource("a"), resource("b")], &[span(0), span(1), span(1)])
    }

    fn res_bytes(r: &[ServiceResource], spans: usize) -> Vec<u8> {
        let mut out = Vec::new();
        write_resources(r, spans, &mut out);
        out
    }

    /// Decoded, then read.
    fn read_all(resources: &[u8], spans: Vec<u8>) -> Result<Vec<Span>, WireError> {
        let b = read(resources, spans)?;
        Ok(b.read()?.iter().map(|s| s.to_owned_span()).collect())
    }

    fn span_bytes(s: &Span) -> Vec<u8> {
        let mut out = Vec::new();
        write_span(s, &mut out);
        out
    }

    #[test]
    fn round_trips_every_field_at_its_extremes() {
        let b = batch();
        let got = read(&res_bytes(&b.resources, 3), b.spans.bytes.clone()).unwrap();
        assert_eq!(got, b);
        assert_eq!(read_all(&res_bytes(&b.resources, 3), b.spans.bytes.clone()).unwrap(), vec![span(0), span(1), span(1)]);
        // each call of its own: HTTP alone, a database call
        let others = [Span { call: Call::Http(http()), ..span(0) }, Span { kind: SpanKind::Client, call: Call::Db(db()), ..span(1) }];
        let b = SpanBatch::of(vec![resource("a"), resource("b")], &others);
        assert_eq!(read_all(&res_bytes(&b.resources, 2), b.spans.bytes.clone()).unwrap(), others);
        // messaging calls: a PRODUCER with no optional field and no link,
        // CONSUMERs with links, as many as may be
        let bare = MsgCall { system: "nats".into(), operation_name: "publish".into(), ..MsgCall::default() };
        let msgs = [
            Span { kind: SpanKind::Producer, call: Call::Messaging(bare), ..span(0) },
            consumer(1),
            Span { resource: 1, ..consumer(MAX_LINKS) },
        ];
        let b = SpanBatch::of(vec![resource("a"), resource("b")], &msgs);
        assert_eq!(read_all(&res_bytes(&b.resources, 3), b.spans.bytes.clone()).unwrap(), msgs);
        let empty = SpanBatch::default();
        assert_eq!(read(&res_bytes(&[], 0), Vec::new()).unwrap(), empty);
        assert_eq!(empty.read().unwrap(), vec![]);
    }

    #[test]
    fn every_truncation_is_refused() {
        let b = batch();
        let res = res_bytes(&b.resources, 3);
        for n in 0..res.len() {
            assert!(read(&res[..n], Vec::new()).is_err(), "resources cut at {n} of {} were accepted", res.len());
        }
        let spans = &b.spans.bytes;
        for n in 0..spans.len() {
            assert!(read_all(&res, spans[..n].to_vec()).is_err(), "spans cut at {n} of {} were accepted", spans.len());
        }
        // fewer spans declared than there are: the rest is trailing
        assert_eq!(read_all(&res_bytes(&b.resources, 2), spans.clone()), Err(WireError::Trailing { left: spans.len() / 3 }));
    }

    #[test]
    fn the_smallest_span_is_min_span_bytes() {
        let s = Span::<&str> {
            resource: 0,
            kind: SpanKind::Server,
            trace_id: 0,
            span_id: 0,
            parent_span_id: 0,
            trace_flags: 0,
            name: "",
            start_unix_ns: 0,
            end_unix_ns: 0,
            error: false,
            server_address: None,
            server_port: 0,
            peer_address: "",
            peer_port: 0,
            export_trace: false,
            export_metrics: false,
            attributes: Vec::new(),
            edge: None,
            links: Vec::new(),
            call: Call::Db(DbCall {
                system: "",
                namespace: None,
                operation: None,
                collection: None,
                query_text: None,
                query_summary: None,
                status_code: None,
                error_type: None,
                returned_rows: None,
            }),
        };
        let mut out = Vec::new();
        write_span(&s, &mut out);
        assert_eq!(out.len(), MIN_SPAN);
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut res = res_bytes(&[resource("a")], 0);
        res.push(0);
        assert_eq!(read(&res, Vec::new()), Err(WireError::Trailing { left: 1 }));
    }

    #[test]
    fn a_span_of_a_missing_resource_is_refused() {
        let mut spans = span_bytes(&span(0));
        spans.extend(span_bytes(&span(1)));
        assert_eq!(read_all(&res_bytes(&[resource("a")], 2), spans), Err(WireError::Resource { index: 1, resource: 1, resources: 1 }));
    }

    #[test]
    fn a_huge_count_allocates_nothing() {
        // 2^63 resources declared in 10 bytes: refused before any allocation
        let mut b = Vec::new();
        put_uint(&mut b, 1 << 63);
        assert_eq!(read(&b, Vec::new()), Err(WireError::Count { field: "resources" }));
        // as many attributes as a u32 holds, in a span of a few bytes
        let mut s = span(0);
        s.attributes.clear();
        s.edge = None;
        let none = DbCall {
            system: String::new(),
            namespace: None,
            operation: None,
            collection: None,
            query_text: None,
            query_summary: None,
            status_code: None,
            error_type: None,
            returned_rows: None,
        };
        s.call = Call::Db(none);
        let mut bytes = span_bytes(&s);
        // the count (0), the edge's tag (none), the smallest call
        bytes.truncate(bytes.len() - 1 - 1 - MIN_DB);
        put_uint(&mut bytes, u64::from(u32::MAX));
        assert_eq!(read_all(&res_bytes(&[resource("a")], 1), bytes), Err(WireError::Count { field: "attributes" }));
        // more spans declared than their bytes can hold: refused at decode
        let one = span_bytes(&span(0));
        assert_eq!(read(&res_bytes(&[resource("a")], 1 << 40), one.clone()), Err(WireError::Count { field: "spans" }));
        assert_eq!(read_all(&res_bytes(&[resource("a")], 2), one), Err(WireError::Truncated { field: "resource" }));
    }

    #[test]
    fn out_of_range_values_are_refused() {
        // an eleven-byte integer
        assert_eq!(read(&[0xff; 11], Vec::new()), Err(WireError::Range { field: "resources" }));
        // a port above u16::MAX: found where the encodings of port 0 and
        // port 1 differ, then replaced by the three bytes of 65,536
        let at_port = |port| {
            let mut s = span(0);
            s.server_port = port;
            span_bytes(&s)
        };
        let (zero, one) = (at_port(0), at_port(1));
        let at = zero.iter().zip(&one).position(|(a, b)| a != b).unwrap();
        let mut b = zero;
        b.splice(at..=at, [0x80, 0x80, 0x04]);
        assert_eq!(read_all(&res_bytes(&[resource("a")], 1), b), Err(WireError::Range { field: "server_port" }));
    }

    #[test]
    fn a_status_code_out_of_i32_range_is_refused() {
        let mut s = span(0);
        if let Call::Rpc(_, r) = &mut s.call {
            r.code = Some(7);
        }
        let mut b = span_bytes(&s);
        // code 7 is zigzag 14, right before the status: made i32::MAX + 1.
        let at = b.iter().rposition(|&c| c == 14).unwrap();
        let mut big = Vec::new();
        put_int(&mut big, i64::from(i32::MAX) + 1);
        b.splice(at..=at, big);
        assert_eq!(read_all(&res_bytes(&[resource("a")], 1), b), Err(WireError::Range { field: "rpc code" }));
        // an unknown set bit: the first byte of the RPC part, which stands
        // where the same span of an HTTP call alone ends
        let mut bad = span_bytes(&span(0));
        bad[span_bytes(&Span { call: Call::Http(http()), ..span(0) }).len()] |= 8;
        assert_eq!(read_all(&res_bytes(&[resource("a")], 1), bad), Err(WireError::Range { field: "rpc sets" }));
    }

    #[test]
    fn an_edge_with_a_bad_tag_or_flag_is_refused() {
        let with = span_bytes(&span(0));
        let without = span_bytes(&Span { edge: None, ..span(0) });
        // the edge's tag is where the two first differ, the call follows it
        let tag = with.iter().zip(&without).position(|(a, b)| a != b).unwrap();
        let call = without.len() - tag - 1;
        // the edge's error flag is its last byte: only 0 and 1
        let mut bad = with.clone();
        bad[with.len() - call - 1] = 2;
        assert_eq!(read_all(&res_bytes(&[resource("a")], 1), bad), Err(WireError::Range { field: "edge peer_error" }));
        // the tag of an absent edge: only 0 and 1
        let mut bad = without.clone();
        bad[tag] = 2;
        assert_eq!(read_all(&res_bytes(&[resource("a")], 1), bad), Err(WireError::Range { field: "edge" }));
        // the call's tag: only 0, 1, 2 and 3
        let mut bad = without;
        bad[tag + 1] = 4;
        assert_eq!(read_all(&res_bytes(&[resource("a")], 1), bad), Err(WireError::Range { field: "call" }));
    }

    #[test]
    fn invalid_utf8_is_refused() {
        let mut b = res_bytes(&[resource("\u{7f}")], 0);
        let at = b.iter().position(|&c| c == 0x7f).unwrap();
        b[at] = 0xff;
        assert_eq!(read(&b, Vec::new()), Err(WireError::Utf8 { field: "service_name" }));
        let mut s = span(0);
        s.call = Call::Http(HttpCall { path: "\u{7f}".into(), ..http() });
        let mut b = span_bytes(&s);
        let at = b.iter().position(|&c| c == 0x7f).unwrap();
        b[at] = 0xff;
        assert_eq!(read_all(&res_bytes(&[resource("a")], 1), b), Err(WireError::Utf8 { field: "path" }));
    }

    #[test]
    fn every_truncation_of_a_messaging_span_with_links_is_refused() {
        let spans = [consumer(3), Span { kind: SpanKind::Producer, ..consumer(0) }];
        let b = SpanBatch::of(vec![resource("a")], &spans);
        let res = res_bytes(&b.resources, 2);
        assert_eq!(read_all(&res, b.spans.bytes.clone()).unwrap(), spans);
        for n in 0..b.spans.bytes.len() {
            assert!(read_all(&res, b.spans.bytes[..n].to_vec()).is_err(), "spans cut at {n} of {} were accepted", b.spans.bytes.len());
        }
    }

    #[test]
    fn a_span_without_links_is_written_as_before_links_were() {
        // Links add the flag and their count and bytes after the call,
        // nothing else: a span without links is what it always was.
        let with = span_bytes(&Span { links: consumer(2).links, ..span(0) });
        let without = span_bytes(&span(0));
        assert_eq!(with.len(), without.len() + 1 + 2 * LINK);
        let flags = with.iter().zip(&without).position(|(a, b)| a != b).unwrap();
        assert_eq!(with[flags], without[flags] | FLAG_LINKS);
        assert_eq!(with[flags + 1..without.len()], without[flags + 1..]);
        // (the flags byte: after the name and the two times)
        assert_eq!(without[flags], FLAG_ERROR | FLAG_EXPORT_METRICS);
    }

    #[test]
    fn bad_links_are_refused() {
        let res = res_bytes(&[resource("a")], 1);
        let one = span_bytes(&consumer(1));
        let count = one.len() - 1 - LINK;
        assert_eq!(one[count], 1);
        // the flag with no link, more links than a span may have
        for n in [0, MAX_LINKS as u8 + 1] {
            let mut bad = one.clone();
            bad[count] = n;
            bad.extend(std::iter::repeat_n(7, LINK * usize::from(n)));
            assert_eq!(read_all(&res, bad), Err(WireError::Range { field: "links" }), "{n} links");
        }
        // more links than the bytes left could hold: refused before allocating
        let mut bad = one[..count].to_vec();
        put_uint(&mut bad, u64::from(u32::MAX));
        assert_eq!(read_all(&res, bad), Err(WireError::Count { field: "links" }));
        // a span that has none but says it has: the flag with no count
        let none = span_bytes(&consumer(0));
        let with = span_bytes(&consumer(1));
        let flags = with.iter().zip(&none).position(|(a, b)| a != b).unwrap();
        let mut bad = none.clone();
        bad[flags] |= FLAG_LINKS;
        assert_eq!(read_all(&res, bad), Err(WireError::Truncated { field: "links" }));
        // an unknown flag bit
        let mut bad = none;
        bad[flags] |= 16;
        assert_eq!(read_all(&res, bad), Err(WireError::Range { field: "flags" }));
    }

    #[test]
    fn bad_messaging_tags_and_kinds_are_refused() {
        let res = res_bytes(&[resource("a")], 1);
        let good = span_bytes(&consumer(0));
        // the kind: after the resource index (one byte here), 0 to 3
        assert_eq!(good[1], 3);
        let mut bad = good.clone();
        bad[1] = 4;
        assert_eq!(read_all(&res, bad), Err(WireError::Range { field: "kind" }));
        // the call's last byte: its flags, bits 0 and 1 only
        let mut bad = good.clone();
        *bad.last_mut().unwrap() |= 4;
        assert_eq!(read_all(&res, bad), Err(WireError::Range { field: "msg flags" }));
        // an optional number's tag: 0 or 1 (the delivery tag's, the last:
        // before its ten bytes and the flags)
        let mut bad = good.clone();
        let at = good.len() - 1 - 10 - 1;
        assert_eq!(bad[at], 1);
        bad[at] = 2;
        assert_eq!(read_all(&res, bad), Err(WireError::Range { field: "msg delivery_tag" }));
        // an optional string's tag (kafka_offset's is after error_type's)
        let none = span_bytes(&Span { call: Call::Messaging(MsgCall { kafka_offset: None, ..msg() }), ..consumer(0) });
        let at = good.iter().zip(&none).position(|(a, b)| a != b).unwrap();
        let mut bad = none;
        bad[at] = 9;
        assert_eq!(read_all(&res, bad), Err(WireError::Range { field: "msg kafka_offset" }));
    }
}
