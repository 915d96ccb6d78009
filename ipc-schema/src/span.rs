//! Finished HTTP spans: published by `span-actor`, exported by `exporter-actor`.
//!
//! Spans are typed (not bags of attributes): encoding, decoding and turning
//! them into OTLP or Prometheus samples stays cheap, and the attribute names
//! of the OpenTelemetry HTTP semantic conventions live in one place, the
//! exporter's mapping. Their wire layout is [`crate::span_wire`].

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

/// One HTTP request as a span (SERVER or CLIENT).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSpan {
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
    pub name: String,
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    /// `http.request.method`: a known method or `_OTHER`.
    pub method: String,
    /// `http.request.method_original`, set when `method` is `_OTHER`.
    pub method_original: Option<String>,
    /// `http.route`, when a route is known.
    pub route: Option<String>,
    /// `url.path`.
    pub path: String,
    /// `url.query`, without the `?`.
    pub query: Option<String>,
    /// `url.scheme`.
    pub scheme: String,
    /// `http.response.status_code`.
    pub status: u16,
    /// Span status ERROR (5xx for servers, 4xx and 5xx for clients).
    pub error: bool,
    /// `server.address` (Host header or the server's IP).
    pub server_address: Option<String>,
    /// `server.port`.
    pub server_port: u16,
    /// `client.address` (server spans) / `network.peer.address`.
    pub client_address: String,
    /// `client.port`.
    pub client_port: u16,
    /// `network.peer.address` and `network.peer.port` of client spans.
    pub peer_address: String,
    pub peer_port: u16,
    /// `network.protocol.version`: "1.0" or "1.1".
    pub protocol_version: String,
    /// `user_agent.original`, when captured.
    pub user_agent: Option<String>,
    /// Export as a trace span (false for ignored routes in "traces" mode).
    pub export_trace: bool,
    /// Count in the request-duration histograms.
    pub export_metrics: bool,
    /// Attributes of other conventions the span also follows (gRPC's
    /// `rpc.*`), from a closed set of names chosen by the span-actor. An
    /// `error.type` here replaces the HTTP one.
    pub attributes: Vec<(String, Attr)>,
}

/// The value of an attribute in [`HttpSpan::attributes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attr {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
}

/// A batch of spans and the resources they refer to. On the wire: the
/// hand-written layout of [`crate::span_wire`] (its serde impls).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpanBatch {
    pub resources: Vec<ServiceResource>,
    pub spans: Vec<HttpSpan>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode, encode, Body, Component, Envelope, Producer};

    #[test]
    fn span_batch_round_trips() {
        let batch = SpanBatch {
            resources: vec![ServiceResource {
                service_name: "python3".into(),
                service_instance_id: "host:42".into(),
                host_name: "host".into(),
                pid: 42,
                executable_name: "python3.11".into(),
                extra: vec![("team".into(), "a".into())],
            }],
            spans: vec![HttpSpan {
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
                attributes: Vec::new(),
            }],
        };
        let env = Envelope::new(Producer { component: Component::SpanActor, instance: 2 }, 3, Body::Spans(batch));
        assert_eq!(decode(&encode(&env).unwrap()).unwrap(), env);
    }
}
