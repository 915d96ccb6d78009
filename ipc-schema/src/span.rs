//! Finished HTTP spans: published by `span-actor`, exported by `exporter-actor`.
//!
//! Spans are typed (not bags of attributes): encoding, decoding and turning
//! them into OTLP or Prometheus samples stays cheap, and the attribute names
//! of the OpenTelemetry HTTP semantic conventions live in one place, the
//! exporter's mapping. Their wire layout is [`crate::span_wire`].

use crate::span_wire;
use crate::wire::{Section, WireError};

/// OpenTelemetry span kind of an HTTP span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpanKind {
    Server,
    Client,
}

/// The OpenTelemetry resource of a traced service instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServiceResource {
    pub service_name: String,
    pub service_instance_id: String,
    pub host_name: String,
    pub pid: u32,
    pub executable_name: String,
    /// Extra attributes, e.g. from the process's `OTEL_RESOURCE_ATTRIBUTES`.
    pub extra: Vec<(String, String)>,
}

/// One HTTP request as a span (SERVER or CLIENT). `S` holds its strings:
/// owned (`String`, the default) where spans are made, borrowed (`&str`)
/// where they are read from a [`SpanBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSpan<S = String> {
    /// Index into [`SpanBatch::resources`].
    pub resource: u32,
    pub kind: SpanKind,
    pub trace_id: u128,
    pub span_id: u64,
    /// 0 = root span.
    pub parent_span_id: u64,
    /// W3C trace flags (bit 0 = sampled).
    pub trace_flags: u8,
    /// `{method} {route}` or `{method}`.
    pub name: S,
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    /// `http.request.method`: a known method or `_OTHER`.
    pub method: S,
    /// `http.request.method_original`, set when `method` is `_OTHER`.
    pub method_original: Option<S>,
    /// `http.route`, when a route is known.
    pub route: Option<S>,
    /// `url.path`.
    pub path: S,
    /// `url.query`, without the `?`.
    pub query: Option<S>,
    /// `url.scheme`.
    pub scheme: S,
    /// `http.response.status_code`.
    pub status: u16,
    /// Span status ERROR (5xx for servers, 4xx and 5xx for clients).
    pub error: bool,
    /// `server.address` (Host header or the server's IP).
    pub server_address: Option<S>,
    /// `server.port`.
    pub server_port: u16,
    /// `client.address` (server spans) / `network.peer.address`.
    pub client_address: S,
    /// `client.port`.
    pub client_port: u16,
    /// `network.peer.address` and `network.peer.port` of client spans.
    pub peer_address: S,
    pub peer_port: u16,
    /// `network.protocol.version`: "1.0" or "1.1".
    pub protocol_version: S,
    /// `user_agent.original`, when captured.
    pub user_agent: Option<S>,
    /// Export as a trace span (false for ignored routes in "traces" mode).
    pub export_trace: bool,
    /// Count in the request-duration histograms.
    pub export_metrics: bool,
    /// Attributes of other conventions the span also follows (gRPC's
    /// `rpc.*`), from a closed set of names chosen by the span-actor. An
    /// `error.type` here replaces the HTTP one.
    pub attributes: Vec<(S, Attr<S>)>,
}

/// The value of an attribute in [`HttpSpan::attributes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attr<S = String> {
    /// A string.
    Str(S),
    /// An integer.
    Int(i64),
}

/// A batch of spans and the resources they refer to. The spans are kept
/// in their wire layout ([`crate::span_wire`]): [`SpanBatch::push`]
/// appends, [`SpanBatch::read`] reads them back, borrowing their strings
/// from the batch and checking them (a batch off a socket is checked there,
/// not when decoded).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpanBatch {
    pub resources: Vec<ServiceResource>,
    pub(crate) spans: Section,
}

impl SpanBatch {
    /// A batch of these spans (where spans are made by hand: tests).
    pub fn of(resources: Vec<ServiceResource>, spans: &[HttpSpan]) -> SpanBatch {
        let mut b = SpanBatch { resources, ..SpanBatch::default() };
        spans.iter().for_each(|s| b.push(s));
        b
    }

    /// An empty batch whose span buffer holds `bytes` before it grows.
    pub fn with_capacity(bytes: usize) -> SpanBatch {
        SpanBatch { resources: Vec::new(), spans: Section { bytes: Vec::with_capacity(bytes), count: 0 } }
    }

    /// Appends a span (its `resource` should index [`SpanBatch::resources`]).
    pub fn push<S: AsRef<str>>(&mut self, s: &HttpSpan<S>) {
        span_wire::write_span(s, &mut self.spans.bytes);
        self.spans.count += 1;
    }

    /// The spans, in the order they were pushed, borrowing their strings
    /// from the batch; an error if a span is malformed, names a resource
    /// the batch does not have, or the spans are not the number declared.
    pub fn read(&self) -> Result<Vec<HttpSpan<&str>>, WireError> {
        span_wire::read_spans(&self.spans, self.resources.len())
    }

    /// How many spans (as declared, for a batch off a socket: what
    /// [`SpanBatch::read`] checks).
    pub fn len(&self) -> usize {
        self.spans.count
    }

    /// True when the batch has no span.
    pub fn is_empty(&self) -> bool {
        self.spans.count == 0
    }

    /// The bytes the spans take.
    pub fn span_bytes(&self) -> usize {
        self.spans.bytes.len()
    }
}

impl<S: AsRef<str>> HttpSpan<S> {
    /// The same span, borrowing its strings from this one.
    pub fn as_borrowed(&self) -> HttpSpan<&str> {
        fn o<S: AsRef<str>>(v: &Option<S>) -> Option<&str> {
            v.as_ref().map(AsRef::as_ref)
        }
        HttpSpan {
            resource: self.resource,
            kind: self.kind,
            trace_id: self.trace_id,
            span_id: self.span_id,
            parent_span_id: self.parent_span_id,
            trace_flags: self.trace_flags,
            name: self.name.as_ref(),
            start_unix_ns: self.start_unix_ns,
            end_unix_ns: self.end_unix_ns,
            method: self.method.as_ref(),
            method_original: o(&self.method_original),
            route: o(&self.route),
            path: self.path.as_ref(),
            query: o(&self.query),
            scheme: self.scheme.as_ref(),
            status: self.status,
            error: self.error,
            server_address: o(&self.server_address),
            server_port: self.server_port,
            client_address: self.client_address.as_ref(),
            client_port: self.client_port,
            peer_address: self.peer_address.as_ref(),
            peer_port: self.peer_port,
            protocol_version: self.protocol_version.as_ref(),
            user_agent: o(&self.user_agent),
            export_trace: self.export_trace,
            export_metrics: self.export_metrics,
            attributes: self
                .attributes
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        Attr::Str(t) => Attr::Str(t.as_ref()),
                        Attr::Int(i) => Attr::Int(*i),
                    };
                    (k.as_ref(), v)
                })
                .collect(),
        }
    }

    /// The same span, owning its strings.
    pub fn to_owned_span(&self) -> HttpSpan {
        let b = self.as_borrowed();
        let o = |v: &str| v.to_owned();
        let oo = |v: Option<&str>| v.map(str::to_owned);
        HttpSpan {
            resource: b.resource,
            kind: b.kind,
            trace_id: b.trace_id,
            span_id: b.span_id,
            parent_span_id: b.parent_span_id,
            trace_flags: b.trace_flags,
            name: o(b.name),
            start_unix_ns: b.start_unix_ns,
            end_unix_ns: b.end_unix_ns,
            method: o(b.method),
            method_original: oo(b.method_original),
            route: oo(b.route),
            path: o(b.path),
            query: oo(b.query),
            scheme: o(b.scheme),
            status: b.status,
            error: b.error,
            server_address: oo(b.server_address),
            server_port: b.server_port,
            client_address: o(b.client_address),
            client_port: b.client_port,
            peer_address: o(b.peer_address),
            peer_port: b.peer_port,
            protocol_version: o(b.protocol_version),
            user_agent: oo(b.user_agent),
            export_trace: b.export_trace,
            export_metrics: b.export_metrics,
            attributes: b
                .attributes
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        Attr::Str(t) => Attr::Str(o(t)),
                        Attr::Int(i) => Attr::Int(*i),
                    };
                    (o(k), v)
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode, encode, Body, Component, Envelope, Producer};

    #[test]
    fn span_batch_round_trips() {
        let batch = SpanBatch::of(
            vec![ServiceResource {
                service_name: "python3".into(),
                service_instance_id: "host:42".into(),
                host_name: "host".into(),
                pid: 42,
                executable_name: "python3.11".into(),
                extra: vec![("team".into(), "a".into())],
            }],
            &[HttpSpan {
                resource: 0,
                kind: SpanKind::Client,
                trace_id: u128::MAX - 5,
                span_id: 77,
                parent_span_id: 0,
                trace_flags: 1,
                name: "GET /users/{id}".into(),
                start_unix_ns: 1,
                end_unix_ns: 2,
                method: "_OTHER".into(),
                method_original: Some("PURGE".into()),
                route: Some("/users/{id}".into()),
                path: "/users/12".into(),
                query: Some("a=1".into()),
                scheme: "http".into(),
                status: 503,
                error: true,
                server_address: Some("example".into()),
                server_port: 80,
                client_address: "::1".into(),
                client_port: 5000,
                peer_address: "::1".into(),
                peer_port: 80,
                protocol_version: "1.1".into(),
                user_agent: Some("curl/8".into()),
                export_trace: true,
                export_metrics: false,
                attributes: vec![("rpc.system".into(), Attr::Str("grpc".into()))],
            }],
        );
        let env = Envelope::new(Producer { component: Component::SpanActor, instance: 2 }, 3, Body::Spans(batch.clone()));
        let back = decode(&encode(&env).unwrap()).unwrap();
        assert_eq!(back, env);
        let Body::Spans(got) = back.body else { panic!("not a span batch") };
        assert_eq!(got.len(), 1);
        let spans = got.read().expect("reads");
        let span = spans[0].clone();
        assert_eq!((span.method, span.method_original, span.path), ("_OTHER", Some("PURGE"), "/users/12"));
        assert_eq!(span.attributes, vec![("rpc.system", Attr::Str("grpc"))]);
        assert_eq!(span.to_owned_span().as_borrowed(), span);
    }
}
