//! Finished spans: published by `span-actor`, exported by `exporter-actor`.
//!
//! Spans are typed (not bags of attributes): encoding, decoding and turning
//! them into OTLP or Prometheus samples stays cheap, and the attribute names
//! of the OpenTelemetry HTTP semantic conventions live in one place, the
//! exporter's mapping. Their wire layout is [`crate::span_wire`].

use crate::span_wire;
use crate::wire::{Section, WireError};

/// OpenTelemetry span kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpanKind {
    Server,
    Client,
    /// A messaging call that hands messages to a broker (`send`).
    Producer,
    /// A messaging call that takes messages from a broker (`receive`).
    Consumer,
}

/// The most links a span carries ([`Span::links`]): a batch's messages
/// each may carry a trace context, and a span of a large batch would
/// otherwise be unbounded. The span-actor keeps at most this many; more
/// are not written, and a batch declaring more is refused.
pub const MAX_LINKS: usize = 16;

/// An OpenTelemetry span link: the context of another span this one is
/// causally related to without being its child (a CONSUMER span's link to
/// the PRODUCER span that sent a message it received).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanLink {
    pub trace_id: u128,
    pub span_id: u64,
    /// W3C trace flags (bit 0 = sampled).
    pub trace_flags: u8,
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

/// One finished operation as a span (SERVER, CLIENT, PRODUCER or
/// CONSUMER), of any protocol:
/// what every span has (ids, kind, name, times, resource, the server and
/// the peer, status, the attributes the span-actor chose) and what the
/// operation was ([`Call`]), which decides the attributes and metrics of
/// its protocol's conventions. `S` holds its strings: owned (`String`, the
/// default) where spans are made, borrowed (`&str`) where they are read
/// from a [`SpanBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span<S = String> {
    /// Index into [`SpanBatch::resources`].
    pub resource: u32,
    pub kind: SpanKind,
    pub trace_id: u128,
    pub span_id: u64,
    /// 0 = root span.
    pub parent_span_id: u64,
    /// W3C trace flags (bit 0 = sampled).
    pub trace_flags: u8,
    /// The conventions' span name (`{method} {route}`, an RPC method, a
    /// query summary...).
    pub name: S,
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    /// Span status ERROR, by the conventions of its call.
    pub error: bool,
    /// `server.address` (an HTTP request's Host, a database's peer IP).
    pub server_address: Option<S>,
    /// `server.port`.
    pub server_port: u16,
    /// `network.peer.address` and `network.peer.port`.
    pub peer_address: S,
    pub peer_port: u16,
    /// Export as a trace span (false for ignored routes in "traces" mode).
    pub export_trace: bool,
    /// Count in the duration histograms.
    pub export_metrics: bool,
    /// Attributes of other conventions the span also follows (gRPC's
    /// `rpc.*`, an HTTP exchange that ended before its answer), from a
    /// closed set of names chosen by the span-actor. An `error.type` here
    /// replaces the call's own.
    pub attributes: Vec<(S, Value<S>)>,
    /// Set on a SERVER span that the span-actor joined to the CLIENT span
    /// on this host that called it: the other end of the service-graph
    /// edge, which the exporter counts from these values
    /// (`traces_service_graph_*`), never from a pairing of its own.
    pub edge: Option<Edge<S>>,
    /// Spans this one is linked to (at most [`MAX_LINKS`]): the producers
    /// of the messages a messaging call received. Empty for every other
    /// call.
    pub links: Vec<SpanLink>,
    /// What the operation was, by protocol family.
    pub call: Call<S>,
}

/// What a span's operation was: each family's own fields, which its
/// conventions turn into attributes and metrics. Every sink and meter
/// matches on it once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call<S = String> {
    /// An HTTP exchange (HTTP/1.x, or an HTTP/2 stream), measured in the
    /// HTTP request-duration histograms.
    Http(HttpCall<S>),
    /// A remote procedure call (gRPC) over an HTTP exchange: its HTTP
    /// attributes are exported, it is measured in the RPC duration
    /// histograms ([`crate::rpc::METRICS`]) instead of HTTP's.
    Rpc(HttpCall<S>, RpcCall<S>),
    /// A database call (a CLIENT span read from a database protocol):
    /// measured in `db.client.operation.duration` ([`crate::db`]).
    Db(DbCall<S>),
    /// A messaging call (a PRODUCER, CONSUMER or CLIENT span read from a
    /// broker protocol): measured in `messaging.client.operation.duration`
    /// and its messages counted ([`crate::messaging`]).
    Messaging(MsgCall<S>),
}

impl<S> Call<S> {
    /// The HTTP exchange of an HTTP or RPC call.
    pub fn http(&self) -> Option<&HttpCall<S>> {
        match self {
            Call::Http(h) | Call::Rpc(h, _) => Some(h),
            Call::Db(_) | Call::Messaging(_) => None,
        }
    }

    /// The RPC decisions of an RPC call.
    pub fn rpc(&self) -> Option<&RpcCall<S>> {
        match self {
            Call::Rpc(_, r) => Some(r),
            _ => None,
        }
    }

    /// The database call of a database span.
    pub fn db(&self) -> Option<&DbCall<S>> {
        match self {
            Call::Db(d) => Some(d),
            _ => None,
        }
    }

    /// The messaging call of a messaging span.
    pub fn messaging(&self) -> Option<&MsgCall<S>> {
        match self {
            Call::Messaging(m) => Some(m),
            _ => None,
        }
    }
}

impl<S: AsRef<str>> Call<S> {
    /// The same call, with its strings in `T`.
    pub fn map_str<'a, T>(&'a self, f: impl Fn(&'a str) -> T) -> Call<T> {
        match self {
            Call::Http(h) => Call::Http(h.map_str(f)),
            Call::Rpc(h, r) => Call::Rpc(h.map_str(&f), r.map_str(&f)),
            Call::Db(d) => Call::Db(d.map_str(f)),
            Call::Messaging(m) => Call::Messaging(m.map_str(f)),
        }
    }
}

/// An HTTP request and its answer, under the HTTP semantic conventions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpCall<S = String> {
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
    /// `http.response.status_code` (0: no response).
    pub status: u16,
    /// `client.address` and `client.port` (of server spans).
    pub client_address: S,
    pub client_port: u16,
    /// `network.protocol.version`: "1.0", "1.1" or "2".
    pub protocol_version: S,
    /// `user_agent.original`, when captured.
    pub user_agent: Option<S>,
}

impl<S: AsRef<str>> HttpCall<S> {
    /// The same exchange, with its strings in `T`.
    pub fn map_str<'a, T>(&'a self, f: impl Fn(&'a str) -> T) -> HttpCall<T> {
        let o = |v: &'a Option<S>| v.as_ref().map(|v| f(v.as_ref()));
        HttpCall {
            method: f(self.method.as_ref()),
            method_original: o(&self.method_original),
            route: o(&self.route),
            path: f(self.path.as_ref()),
            query: o(&self.query),
            scheme: f(self.scheme.as_ref()),
            status: self.status,
            client_address: f(self.client_address.as_ref()),
            client_port: self.client_port,
            protocol_version: f(self.protocol_version.as_ref()),
            user_agent: o(&self.user_agent),
        }
    }
}

/// The other end of a call that ringtail knows for certain, carried on the
/// span that completes the call's service-graph edge: on a SERVER span, the
/// CLIENT span on this host that sent its request (the kernel named the
/// request at both ends: the span-actor joins them exactly). What the
/// edge's `client` label and `traces_service_graph_request_client_seconds`
/// take, and whether it failed at that end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge<S = String> {
    /// The other end's `service.name`.
    pub peer_service: S,
    /// The other end's span duration, in nanoseconds.
    pub peer_duration_ns: u64,
    /// The other end's span status is ERROR.
    pub peer_error: bool,
}

impl<S: AsRef<str>> Edge<S> {
    /// The same edge, with its string in `T`.
    pub fn map_str<'a, T>(&'a self, f: impl Fn(&'a str) -> T) -> Edge<T> {
        Edge { peer_service: f(self.peer_service.as_ref()), peer_duration_ns: self.peer_duration_ns, peer_error: self.peer_error }
    }
}

/// An attribute value: of a span's [`Span::attributes`], of a metric
/// series, of what every sink writes. `S` holds its string, as in
/// [`Span`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Value<S = String> {
    /// A string.
    Str(S),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
}

impl<S: AsRef<str>> Value<S> {
    /// The same value, borrowing its string.
    pub fn as_borrowed(&self) -> Value<&str> {
        match self {
            Value::Str(s) => Value::Str(s.as_ref()),
            Value::Int(i) => Value::Int(*i),
            Value::Bool(b) => Value::Bool(*b),
        }
    }

    /// The same value, with its string in `T` (owned, boxed...).
    pub fn map_str<T>(&self, f: impl FnOnce(&str) -> T) -> Value<T> {
        match self {
            Value::Str(s) => Value::Str(f(s.as_ref())),
            Value::Int(i) => Value::Int(*i),
            Value::Bool(b) => Value::Bool(*b),
        }
    }
}

/// What the span-actor decided of a remote procedure call under the RPC
/// semantic conventions (the status rules, which methods are `_OTHER`),
/// carried as data to the exporter, which records the call in the RPC
/// duration histograms of each set it follows ([`crate::rpc::METRICS`])
/// with these values as their attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcCall<S = String> {
    /// Measured in the stable set's histograms (`rpc.*.call.duration`).
    pub stable: bool,
    /// Measured in the experimental set's histograms (`rpc.*.duration`).
    pub experimental: bool,
    /// `rpc.system.name` (stable) and `rpc.system` (experimental): `grpc`.
    pub system: S,
    /// The stable `rpc.method`: `package.Service/Method`, or `_OTHER` when
    /// the method is not recognised.
    pub method: S,
    /// The experimental `rpc.service` and `rpc.method` (`Method`); `None`
    /// when the method is not recognised (the metric names none).
    pub service_method: Option<(S, S)>,
    /// The status code (`grpc-status`, or what a gRPC library derives from
    /// a reset or an HTTP status): the experimental `rpc.grpc.status_code`.
    pub code: Option<i32>,
    /// Its name: the stable `rpc.response.status_code`.
    pub status: Option<S>,
    /// `error.type` when the call failed (stable set).
    pub error_type: Option<S>,
}

impl<S: AsRef<str>> RpcCall<S> {
    /// The same call, with its strings in `T`.
    pub fn map_str<'a, T>(&'a self, f: impl Fn(&'a str) -> T) -> RpcCall<T> {
        RpcCall {
            stable: self.stable,
            experimental: self.experimental,
            system: f(self.system.as_ref()),
            method: f(self.method.as_ref()),
            service_method: self.service_method.as_ref().map(|(s, m)| (f(s.as_ref()), f(m.as_ref()))),
            code: self.code,
            status: self.status.as_ref().map(|v| f(v.as_ref())),
            error_type: self.error_type.as_ref().map(|v| f(v.as_ref())),
        }
    }
}

/// A database call as the span-actor read it from the wire, under the
/// OpenTelemetry database conventions (stable set). Nothing here is a bound
/// parameter's value: `query_text` is sanitized (literals replaced by `?`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DbCall<S = String> {
    /// `db.system.name`: `postgresql`, `mysql`, `mariadb`, `redis`, `memcached`.
    pub system: S,
    /// `db.namespace`: the database (PostgreSQL, MySQL) or its index (Redis).
    pub namespace: Option<S>,
    /// `db.operation.name`: `SELECT`, `GET`, ...
    pub operation: Option<S>,
    /// `db.collection.name`, when the query names one table for certain.
    pub collection: Option<S>,
    /// `db.query.text`, sanitized and capped.
    pub query_text: Option<S>,
    /// `db.query.summary` (also the span's name when set).
    pub query_summary: Option<S>,
    /// `db.response.status_code`: SQLSTATE, MySQL error number, Redis error prefix.
    pub status_code: Option<S>,
    /// `error.type` when the call failed.
    pub error_type: Option<S>,
    /// `db.response.returned_rows`, when the server said.
    pub returned_rows: Option<u64>,
}

impl<S: AsRef<str>> DbCall<S> {
    /// The same call, with its strings in `T`.
    pub fn map_str<'a, T>(&'a self, f: impl Fn(&'a str) -> T) -> DbCall<T> {
        let o = |v: &'a Option<S>| v.as_ref().map(|v| f(v.as_ref()));
        DbCall {
            system: f(self.system.as_ref()),
            namespace: o(&self.namespace),
            operation: o(&self.operation),
            collection: o(&self.collection),
            query_text: o(&self.query_text),
            query_summary: o(&self.query_summary),
            status_code: o(&self.status_code),
            error_type: o(&self.error_type),
            returned_rows: self.returned_rows,
        }
    }
}

/// A messaging call as the span-actor read it from a broker connection,
/// under the OpenTelemetry messaging conventions (each field names its
/// key, checked against the semantic-conventions registry). Nothing here
/// is a message's payload, key (`messaging.kafka.message.key` is never
/// exported), header value or property: only names the conventions ask
/// for (bounded by the span-actor) and numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MsgCall<S = String> {
    /// `messaging.system`: `kafka`, `rabbitmq`, `nats`, `mqtt`
    /// ([`crate::messaging::system`]).
    pub system: S,
    /// `messaging.operation.type`: `send`, `receive`, `settle`...
    /// ([`crate::messaging::op_type`]); `None` for a call that is none of
    /// the conventions' types (an MQTT SUBSCRIBE).
    pub operation_type: Option<S>,
    /// `messaging.operation.name`: the system's own word for the call
    /// (`send`, `poll`, `commit`, `publish`, `ack`...), never from the wire.
    pub operation_name: S,
    /// `messaging.destination.name`: the topic, queue, exchange or subject.
    pub destination: Option<S>,
    /// `messaging.destination.template`: its low-cardinality form (an MQTT
    /// topic filter with wildcards).
    pub template: Option<S>,
    /// `messaging.destination.subscription.name` (a NATS queue group, a
    /// RabbitMQ consumer's queue subscription).
    pub subscription: Option<S>,
    /// `messaging.destination.partition.id` (a string in the conventions:
    /// a Kafka partition in decimal).
    pub partition: Option<S>,
    /// `messaging.consumer.group.name`.
    pub consumer_group: Option<S>,
    /// `messaging.client.id`.
    pub client_id: Option<S>,
    /// `messaging.rabbitmq.destination.routing_key`.
    pub routing_key: Option<S>,
    /// `error.type` when the call failed (Kafka's error name, an MQTT
    /// reason code, an AMQP reply code's name...).
    pub error_type: Option<S>,
    /// `messaging.kafka.offset`.
    pub kafka_offset: Option<i64>,
    /// `messaging.batch.message_count`: messages in the call, when known
    /// (also what `messaging.client.sent.messages` and
    /// `messaging.client.consumed.messages` count; one when unknown).
    pub message_count: Option<u64>,
    /// `messaging.message.body.size`, in bytes, of a call of one message.
    pub body_size: Option<u64>,
    /// `messaging.rabbitmq.message.delivery_tag`.
    pub delivery_tag: Option<u64>,
    /// `messaging.destination.temporary`: the destination may be gone once
    /// its messages are processed (a reply queue, a NATS inbox). Its name
    /// is then no metric attribute (one series a request).
    pub temporary: bool,
    /// `messaging.destination.anonymous`: the destination has no name of
    /// the application's (a server-named queue). No metric attribute
    /// either.
    pub anonymous: bool,
}

impl<S: AsRef<str>> MsgCall<S> {
    /// The same call, with its strings in `T`.
    pub fn map_str<'a, T>(&'a self, f: impl Fn(&'a str) -> T) -> MsgCall<T> {
        let o = |v: &'a Option<S>| v.as_ref().map(|v| f(v.as_ref()));
        MsgCall {
            system: f(self.system.as_ref()),
            operation_type: o(&self.operation_type),
            operation_name: f(self.operation_name.as_ref()),
            destination: o(&self.destination),
            template: o(&self.template),
            subscription: o(&self.subscription),
            partition: o(&self.partition),
            consumer_group: o(&self.consumer_group),
            client_id: o(&self.client_id),
            routing_key: o(&self.routing_key),
            error_type: o(&self.error_type),
            kafka_offset: self.kafka_offset,
            message_count: self.message_count,
            body_size: self.body_size,
            delivery_tag: self.delivery_tag,
            temporary: self.temporary,
            anonymous: self.anonymous,
        }
    }
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
    pub fn of(resources: Vec<ServiceResource>, spans: &[Span]) -> SpanBatch {
        let mut b = SpanBatch { resources, ..SpanBatch::default() };
        spans.iter().for_each(|s| b.push(s));
        b
    }

    /// An empty batch whose span buffer holds `bytes` before it grows.
    pub fn with_capacity(bytes: usize) -> SpanBatch {
        SpanBatch { resources: Vec::new(), spans: Section { bytes: Vec::with_capacity(bytes), count: 0 } }
    }

    /// Appends a span (its `resource` should index [`SpanBatch::resources`]).
    pub fn push<S: AsRef<str>>(&mut self, s: &Span<S>) {
        span_wire::write_span(s, &mut self.spans.bytes);
        self.spans.count += 1;
    }

    /// The spans, in the order they were pushed, borrowing their strings
    /// from the batch; an error if a span is malformed, names a resource
    /// the batch does not have, or the spans are not the number declared.
    pub fn read(&self) -> Result<Vec<Span<&str>>, WireError> {
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

impl<S: AsRef<str>> Span<S> {
    /// The same span, with its strings in `T`.
    pub fn map_str<'a, T>(&'a self, f: impl Fn(&'a str) -> T) -> Span<T> {
        Span {
            resource: self.resource,
            kind: self.kind,
            trace_id: self.trace_id,
            span_id: self.span_id,
            parent_span_id: self.parent_span_id,
            trace_flags: self.trace_flags,
            name: f(self.name.as_ref()),
            start_unix_ns: self.start_unix_ns,
            end_unix_ns: self.end_unix_ns,
            error: self.error,
            server_address: self.server_address.as_ref().map(|v| f(v.as_ref())),
            server_port: self.server_port,
            peer_address: f(self.peer_address.as_ref()),
            peer_port: self.peer_port,
            export_trace: self.export_trace,
            export_metrics: self.export_metrics,
            attributes: self
                .attributes
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::Str(s) => Value::Str(f(s.as_ref())),
                        Value::Int(i) => Value::Int(*i),
                        Value::Bool(b) => Value::Bool(*b),
                    };
                    (f(k.as_ref()), v)
                })
                .collect(),
            edge: self.edge.as_ref().map(|e| e.map_str(&f)),
            links: self.links.clone(),
            call: self.call.map_str(&f),
        }
    }

    /// The same span, borrowing its strings from this one.
    pub fn as_borrowed(&self) -> Span<&str> {
        self.map_str(|v| v)
    }

    /// The same span, owning its strings.
    pub fn to_owned_span(&self) -> Span {
        self.map_str(str::to_owned)
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
            &[Span {
                resource: 0,
                kind: SpanKind::Client,
                trace_id: u128::MAX - 5,
                span_id: 77,
                parent_span_id: 0,
                trace_flags: 1,
                name: "GET /users/{id}".into(),
                start_unix_ns: 1,
                end_unix_ns: 2,
                error: true,
                server_address: Some("example".into()),
                server_port: 80,
                peer_address: "::1".into(),
                peer_port: 80,
                export_trace: true,
                export_metrics: false,
                attributes: vec![("rpc.system".into(), Value::Str("grpc".into())), ("x".into(), Value::Bool(true))],
                edge: Some(Edge { peer_service: "front".into(), peer_duration_ns: 7, peer_error: true }),
                links: vec![SpanLink { trace_id: 9, span_id: 8, trace_flags: 1 }],
                call: Call::Rpc(
                    HttpCall {
                        method: "_OTHER".into(),
                        method_original: Some("PURGE".into()),
                        route: Some("/users/{id}".into()),
                        path: "/users/12".into(),
                        query: Some("a=1".into()),
                        scheme: "http".into(),
                        status: 503,
                        client_address: "::1".into(),
                        client_port: 5000,
                        protocol_version: "1.1".into(),
                        user_agent: Some("curl/8".into()),
                    },
                    RpcCall {
                        stable: true,
                        experimental: false,
                        system: "grpc".into(),
                        method: "_OTHER".into(),
                        service_method: None,
                        code: Some(12),
                        status: Some("UNIMPLEMENTED".into()),
                        error_type: Some("UNIMPLEMENTED".into()),
                    },
                ),
            }],
        );
        let env = Envelope::new(Producer { component: Component::SpanActor, instance: 2 }, 3, Body::Spans(batch.clone()));
        let back = decode(&encode(&env).unwrap()).unwrap();
        assert_eq!(back, env);
        let Body::Spans(got) = back.body else { panic!("not a span batch") };
        assert_eq!(got.len(), 1);
        let spans = got.read().expect("reads");
        let span = spans[0].clone();
        let http = span.call.http().expect("an HTTP exchange");
        assert_eq!((http.method, http.method_original, http.path), ("_OTHER", Some("PURGE"), "/users/12"));
        assert_eq!(span.attributes, vec![("rpc.system", Value::Str("grpc")), ("x", Value::Bool(true))]);
        assert_eq!(span.call.rpc().map(|r| (r.method, r.code, r.status)), Some(("_OTHER", Some(12), Some("UNIMPLEMENTED"))));
        assert_eq!(span.edge, Some(Edge { peer_service: "front", peer_duration_ns: 7, peer_error: true }));
        assert_eq!(span.links, vec![SpanLink { trace_id: 9, span_id: 8, trace_flags: 1 }]);
        assert_eq!(span.to_owned_span().as_borrowed(), span);
    }
}
