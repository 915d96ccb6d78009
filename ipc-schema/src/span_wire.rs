//! The wire layout of a [`SpanBatch`]: written and read by hand.
//!
//! A span batch is the busiest message ringtail has (every request becomes
//! one span, encoded by the span-actor and decoded by the exporter), and
//! serde's generic msgpack path spent half of the exporter's instructions
//! on it: a marker dispatch and a visitor per field. Inside the envelope the
//! batch is therefore one msgpack `bin` holding this layout:
//!
//! ```text
//! batch    = count(resources) resource* count(spans) span*
//! resource = str(service_name) str(service_instance_id) str(host_name)
//!            uint(pid) str(executable_name) count(extra) (str str)*
//! span     = uint(resource) u8(kind: 0 server, 1 client) u128le(trace_id)
//!            u64le(span_id) u64le(parent_span_id) u8(trace_flags) str(name)
//!            u64le(start_unix_ns) u64le(end_unix_ns) str(method)
//!            opt(method_original) opt(route) str(path) opt(query) str(scheme)
//!            uint(status) u8(bit 0 error, 1 export_trace, 2 export_metrics)
//!            opt(server_address) uint(server_port) str(client_address)
//!            uint(client_port) str(peer_address) uint(peer_port)
//!            str(protocol_version) opt(user_agent) count(attributes)
//!            (str(key) attr)*
//! attr     = u8(0) str | u8(1) zigzag-uint (an i64)
//! uint     = LEB128, at most 10 bytes, range-checked for its field
//! count    = uint, never more than the bytes left could hold
//! str      = uint(length) UTF-8 bytes
//! opt      = u8(0) | u8(1) str
//! ```
//!
//! Reading treats the bytes as hostile: every length is checked against
//! what is left before anything is allocated, every integer against its
//! field's range, every string for UTF-8, every span's resource index
//! against the batch's resources, and trailing bytes are an error. Field
//! lists are destructured exhaustively on both sides: a field added to
//! [`HttpSpan`] or [`ServiceResource`] does not compile until it is here.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::span::{Attr, HttpSpan, ServiceResource, SpanBatch, SpanKind};
pub use crate::wire::WireError;
use crate::wire::{put_opt, put_str, put_uint, Reader};

/// The fewest bytes a resource takes (three empty strings, a pid, an empty
/// name, no extras): bounds a declared count by the bytes left.
const MIN_RESOURCE: usize = 6;
/// The fewest bytes a span takes (fixed-width fields alone).
const MIN_SPAN: usize = 1 + 1 + 16 + 8 + 8 + 1 + 8 + 8 + 1 + 1;
const FLAG_ERROR: u8 = 1;
const FLAG_EXPORT_TRACE: u8 = 2;
const FLAG_EXPORT_METRICS: u8 = 4;

/// Appends `batch` in the wire layout to `out`.
pub fn write(batch: &SpanBatch, out: &mut Vec<u8>) {
    let SpanBatch { resources, spans } = batch;
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
    put_uint(out, spans.len() as u64);
    for s in spans {
        write_span(s, out);
    }
}

fn write_span(s: &HttpSpan, out: &mut Vec<u8>) {
    let HttpSpan {
        resource,
        kind,
        trace_id,
        span_id,
        parent_span_id,
        trace_flags,
        name,
        start_unix_ns,
        end_unix_ns,
        method,
        method_original,
        route,
        path,
        query,
        scheme,
        status,
        error,
        server_address,
        server_port,
        client_address,
        client_port,
        peer_address,
        peer_port,
        protocol_version,
        user_agent,
        export_trace,
        export_metrics,
        attributes,
    } = s;
    put_uint(out, u64::from(*resource));
    out.push(match kind {
        SpanKind::Server => 0,
        SpanKind::Client => 1,
    });
    out.extend_from_slice(&trace_id.to_le_bytes());
    out.extend_from_slice(&span_id.to_le_bytes());
    out.extend_from_slice(&parent_span_id.to_le_bytes());
    out.push(*trace_flags);
    put_str(out, name);
    out.extend_from_slice(&start_unix_ns.to_le_bytes());
    out.extend_from_slice(&end_unix_ns.to_le_bytes());
    put_str(out, method);
    put_opt(out, method_original.as_deref());
    put_opt(out, route.as_deref());
    put_str(out, path);
    put_opt(out, query.as_deref());
    put_str(out, scheme);
    put_uint(out, u64::from(*status));
    let flags =
        (u8::from(*error) * FLAG_ERROR) | (u8::from(*export_trace) * FLAG_EXPORT_TRACE) | (u8::from(*export_metrics) * FLAG_EXPORT_METRICS);
    out.push(flags);
    put_opt(out, server_address.as_deref());
    put_uint(out, u64::from(*server_port));
    put_str(out, client_address);
    put_uint(out, u64::from(*client_port));
    put_str(out, peer_address);
    put_uint(out, u64::from(*peer_port));
    put_str(out, protocol_version);
    put_opt(out, user_agent.as_deref());
    put_uint(out, attributes.len() as u64);
    for (k, v) in attributes {
        put_str(out, k);
        match v {
            Attr::Str(s) => {
                out.push(0);
                put_str(out, s);
            }
            Attr::Int(i) => {
                out.push(1);
                put_uint(out, ((i << 1) ^ (i >> 63)) as u64);
            }
        }
    }
}

/// Reads a batch written by [`write`]; the whole of `bytes` must be it.
pub fn read(bytes: &[u8]) -> Result<SpanBatch, WireError> {
    let mut rd = Reader::new(bytes);
    let n = rd.count("resources", MIN_RESOURCE)?;
    let mut resources = Vec::with_capacity(n);
    for _ in 0..n {
        resources.push(rd.resource()?);
    }
    let n = rd.count("spans", MIN_SPAN)?;
    let mut spans = Vec::with_capacity(n);
    for index in 0..n {
        let s = rd.span()?;
        if s.resource as usize >= resources.len() {
            return Err(WireError::Resource { index, resource: s.resource, resources: resources.len() });
        }
        spans.push(s);
    }
    rd.end()?;
    Ok(SpanBatch { resources, spans })
}

impl Reader<'_> {
    fn resource(&mut self) -> Result<ServiceResource, WireError> {
        let service_name = self.str("service_name")?;
        let service_instance_id = self.str("service_instance_id")?;
        let host_name = self.str("host_name")?;
        let pid = self.int("pid")?;
        let executable_name = self.str("executable_name")?;
        let n = self.count("extra", 2)?;
        let mut extra = Vec::with_capacity(n);
        for _ in 0..n {
            extra.push((self.str("extra")?, self.str("extra")?));
        }
        Ok(ServiceResource { service_name, service_instance_id, host_name, pid, executable_name, extra })
    }

    fn span(&mut self) -> Result<HttpSpan, WireError> {
        let resource = self.int("resource")?;
        let kind = match self.u8("kind")? {
            0 => SpanKind::Server,
            1 => SpanKind::Client,
            _ => return Err(WireError::Range { field: "kind" }),
        };
        let trace_id = u128::from_le_bytes(self.fixed("trace_id")?);
        let span_id = self.u64le("span_id")?;
        let parent_span_id = self.u64le("parent_span_id")?;
        let trace_flags = self.u8("trace_flags")?;
        let name = self.str("name")?;
        let start_unix_ns = self.u64le("start_unix_ns")?;
        let end_unix_ns = self.u64le("end_unix_ns")?;
        let method = self.str("method")?;
        let method_original = self.opt("method_original")?;
        let route = self.opt("route")?;
        let path = self.str("path")?;
        let query = self.opt("query")?;
        let scheme = self.str("scheme")?;
        let status = self.int("status")?;
        let flags = self.u8("flags")?;
        if flags & !(FLAG_ERROR | FLAG_EXPORT_TRACE | FLAG_EXPORT_METRICS) != 0 {
            return Err(WireError::Range { field: "flags" });
        }
        let server_address = self.opt("server_address")?;
        let server_port = self.int("server_port")?;
        let client_address = self.str("client_address")?;
        let client_port = self.int("client_port")?;
        let peer_address = self.str("peer_address")?;
        let peer_port = self.int("peer_port")?;
        let protocol_version = self.str("protocol_version")?;
        let user_agent = self.opt("user_agent")?;
        let n = self.count("attributes", 3)?;
        let mut attributes = Vec::with_capacity(n);
        for _ in 0..n {
            let key = self.str("attribute key")?;
            let value = match self.u8("attribute value")? {
                0 => Attr::Str(self.str("attribute value")?),
                1 => {
                    let z = self.uint("attribute value")?;
                    Attr::Int(((z >> 1) as i64) ^ -((z & 1) as i64))
                }
                _ => return Err(WireError::Range { field: "attribute value" }),
            };
            attributes.push((key, value));
        }
        Ok(HttpSpan {
            resource,
            kind,
            trace_id,
            span_id,
            parent_span_id,
            trace_flags,
            name,
            start_unix_ns,
            end_unix_ns,
            method,
            method_original,
            route,
            path,
            query,
            scheme,
            status,
            error: flags & FLAG_ERROR != 0,
            server_address,
            server_port,
            client_address,
            client_port,
            peer_address,
            peer_port,
            protocol_version,
            user_agent,
            export_trace: flags & FLAG_EXPORT_TRACE != 0,
            export_metrics: flags & FLAG_EXPORT_METRICS != 0,
            attributes,
        })
    }
}

/// A bound on a batch's encoded size, for the buffer it is written into.
fn size_hint(batch: &SpanBatch) -> usize {
    64 + 96 * batch.resources.len() + 200 * batch.spans.len()
}

impl Serialize for SpanBatch {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut buf = Vec::with_capacity(size_hint(self));
        write(self, &mut buf);
        serializer.serialize_bytes(&buf)
    }
}

struct BatchVisitor;

impl<'de> Visitor<'de> for BatchVisitor {
    type Value = SpanBatch;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a span batch's bytes")
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<SpanBatch, E> {
        read(v).map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for SpanBatch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SpanBatch, D::Error> {
        deserializer.deserialize_bytes(BatchVisitor)
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

    fn span(resource: u32) -> HttpSpan {
        HttpSpan {
            resource,
            kind: SpanKind::Server,
            trace_id: u128::MAX - 1,
            span_id: u64::MAX,
            parent_span_id: 1,
            trace_flags: 0xff,
            name: "GET /a/{id}".into(),
            start_unix_ns: 1_700_000_000_000_000_000,
            end_unix_ns: u64::MAX,
            method: "GET".into(),
            method_original: None,
            route: Some("/a/{id}".into()),
            path: "/a/€".into(),
            query: Some(String::new()),
            scheme: "https".into(),
            status: u16::MAX,
            error: true,
            server_address: None,
            server_port: u16::MAX,
            client_address: "::1".into(),
            client_port: 0,
            peer_address: String::new(),
            peer_port: 443,
            protocol_version: "1.1".into(),
            user_agent: Some("x".repeat(300)),
            export_trace: false,
            export_metrics: true,
            attributes: vec![
                ("rpc.method".into(), Attr::Str("pkg.Svc/Get".into())),
                ("min".into(), Attr::Int(i64::MIN)),
                ("max".into(), Attr::Int(i64::MAX)),
                ("neg".into(), Attr::Int(-1)),
            ],
        }
    }

    fn batch() -> SpanBatch {
        SpanBatch { resources: vec![resource("a"), resource("b")], spans: vec![span(0), span(1), span(1)] }
    }

    fn bytes(b: &SpanBatch) -> Vec<u8> {
        let mut out = Vec::new();
        write(b, &mut out);
        out
    }

    #[test]
    fn round_trips_every_field_at_its_extremes() {
        let b = batch();
        assert_eq!(read(&bytes(&b)).unwrap(), b);
        let empty = SpanBatch::default();
        assert_eq!(read(&bytes(&empty)).unwrap(), empty);
    }

    #[test]
    fn every_truncation_is_refused() {
        let b = bytes(&batch());
        for n in 0..b.len() {
            assert!(read(&b[..n]).is_err(), "a batch cut at {n} of {} bytes was accepted", b.len());
        }
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut b = bytes(&batch());
        b.push(0);
        assert_eq!(read(&b), Err(WireError::Trailing { left: 1 }));
    }

    #[test]
    fn a_span_of_a_missing_resource_is_refused() {
        let b = SpanBatch { resources: vec![resource("a")], spans: vec![span(1)] };
        assert_eq!(read(&bytes(&b)), Err(WireError::Resource { index: 0, resource: 1, resources: 1 }));
    }

    #[test]
    fn a_huge_count_allocates_nothing() {
        // 2^63 resources declared in 10 bytes: refused before any allocation
        let mut b = Vec::new();
        put_uint(&mut b, 1 << 63);
        assert_eq!(read(&b), Err(WireError::Count { field: "resources" }));
        let mut b = vec![0];
        put_uint(&mut b, u64::from(u32::MAX));
        assert_eq!(read(&b), Err(WireError::Count { field: "spans" }));
    }

    #[test]
    fn out_of_range_values_are_refused() {
        // an eleven-byte integer
        assert_eq!(read(&[0xff; 11]), Err(WireError::Range { field: "resources" }));
        // a port above u16::MAX: found where the encodings of port 0 and
        // port 1 differ, then replaced by the three bytes of 65,536
        let at_port = |port| {
            let mut s = span(0);
            s.server_port = port;
            bytes(&SpanBatch { resources: vec![resource("a")], spans: vec![s] })
        };
        let (zero, one) = (at_port(0), at_port(1));
        let at = zero.iter().zip(&one).position(|(a, b)| a != b).unwrap();
        let mut b = zero;
        b.splice(at..=at, [0x80, 0x80, 0x04]);
        assert_eq!(read(&b), Err(WireError::Range { field: "server_port" }));
    }

    #[test]
    fn invalid_utf8_is_refused() {
        let mut b = bytes(&SpanBatch { resources: vec![resource("\u{7f}")], spans: vec![] });
        let at = b.iter().position(|&c| c == 0x7f).unwrap();
        b[at] = 0xff;
        assert_eq!(read(&b), Err(WireError::Utf8 { field: "service_name" }));
    }
}
