//! The exporter's previous path, kept as the oracle of the tests: spans
//! converted to the OpenTelemetry SDK's `SpanData` and histograms recorded
//! in the SDK, both turned into OTLP messages by `opentelemetry-proto` (what
//! `opentelemetry-otlp` sent). The tests check that the bytes ringtail
//! writes itself decode to the same messages.

use std::borrow::Cow;
use std::sync::{Arc, Weak};
use std::time::{Duration, UNIX_EPOCH};

use ipc_schema::{Call, DbCall, HttpCall, MsgCall, ServiceResource, Span, SpanKind, Value};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::{self, Link, SpanContext, SpanId, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, ManualReader, Pipeline, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use opentelemetry_sdk::Resource;

use crate::batch::Spans;
use crate::meters::DURATION_BUCKETS;
use crate::resource::language;

/// The instrumentation scope of every ringtail span.
pub fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("ringtail").with_version(env!("CARGO_PKG_VERSION")).build()
}

/// `url.full` of a client request (exchange `h` of span `s`).
pub fn url_full(s: &Span, h: &HttpCall) -> String {
    let host = s.server_address.as_deref().unwrap_or(&s.peer_address);
    let host = if host.contains(':') { format!("[{host}]") } else { host.to_owned() };
    let default_port = (h.scheme == "http" && s.server_port == 80) || (h.scheme == "https" && s.server_port == 443);
    let port = if default_port { String::new() } else { format!(":{}", s.server_port) };
    let query = h.query.as_deref().map(|q| format!("?{q}")).unwrap_or_default();
    format!("{}://{host}{port}{}{query}", h.scheme, h.path)
}

/// A database span's attributes, as an SDK instrumentation following the
/// stable database conventions sets them.
pub fn db_attributes(s: &Span, c: &DbCall) -> Vec<KeyValue> {
    let mut a = vec![KeyValue::new("db.system.name", c.system.clone())];
    strs(
        &mut a,
        &[
            ("db.namespace", &c.namespace),
            ("db.operation.name", &c.operation),
            ("db.collection.name", &c.collection),
            ("db.query.text", &c.query_text),
            ("db.query.summary", &c.query_summary),
            ("db.response.status_code", &c.status_code),
        ],
    );
    if let Some(n) = c.returned_rows {
        a.push(KeyValue::new("db.response.returned_rows", n as i64));
    }
    error_and_ends(&mut a, s, c.error_type.as_ref());
    a
}

/// A messaging span's attributes, as an SDK instrumentation following the
/// messaging conventions sets them.
pub fn messaging_attributes(s: &Span, c: &MsgCall) -> Vec<KeyValue> {
    let mut a = vec![KeyValue::new("messaging.system", c.system.clone())];
    if let Some(v) = &c.operation_type {
        a.push(KeyValue::new("messaging.operation.type", v.clone()));
    }
    a.push(KeyValue::new("messaging.operation.name", c.operation_name.clone()));
    strs(&mut a, &[("messaging.destination.name", &c.destination), ("messaging.destination.template", &c.template)]);
    if c.temporary {
        a.push(KeyValue::new("messaging.destination.temporary", true));
    }
    if c.anonymous {
        a.push(KeyValue::new("messaging.destination.anonymous", true));
    }
    strs(
        &mut a,
        &[
            ("messaging.destination.subscription.name", &c.subscription),
            ("messaging.destination.partition.id", &c.partition),
            ("messaging.consumer.group.name", &c.consumer_group),
            ("messaging.client.id", &c.client_id),
            ("messaging.rabbitmq.destination.routing_key", &c.routing_key),
        ],
    );
    if let Some(n) = c.delivery_tag {
        a.push(KeyValue::new("messaging.rabbitmq.message.delivery_tag", i64::try_from(n).unwrap_or(i64::MAX)));
    }
    if let Some(n) = c.kafka_offset {
        a.push(KeyValue::new("messaging.kafka.offset", n));
    }
    if let Some(n) = c.message_count {
        a.push(KeyValue::new("messaging.batch.message_count", i64::try_from(n).unwrap_or(i64::MAX)));
    }
    if let Some(n) = c.body_size {
        a.push(KeyValue::new("messaging.message.body.size", i64::try_from(n).unwrap_or(i64::MAX)));
    }
    error_and_ends(&mut a, s, c.error_type.as_ref());
    a
}

/// Each of `pairs` whose string the call has, in their order.
fn strs(a: &mut Vec<KeyValue>, pairs: &[(&'static str, &Option<String>)]) {
    for (k, v) in pairs {
        if let Some(v) = v {
            a.push(KeyValue::new(*k, v.clone()));
        }
    }
}

/// The last attributes of a database or messaging call: its `error_type`
/// unless the span has an `error.type`, then the server and the peer,
/// each only when known.
fn error_and_ends(a: &mut Vec<KeyValue>, s: &Span, error_type: Option<&String>) {
    if let Some(e) = error_type.filter(|_| !s.attributes.iter().any(|(k, _)| k == "error.type")) {
        a.push(KeyValue::new("error.type", e.clone()));
    }
    if let Some(h) = &s.server_address {
        a.push(KeyValue::new("server.address", h.clone()));
    }
    if s.server_port != 0 {
        a.push(KeyValue::new("server.port", i64::from(s.server_port)));
    }
    if !s.peer_address.is_empty() {
        a.push(KeyValue::new("network.peer.address", s.peer_address.clone()));
    }
    if s.peer_port != 0 {
        a.push(KeyValue::new("network.peer.port", i64::from(s.peer_port)));
    }
}

/// The span's attributes: those of its call's conventions.
pub fn attributes(s: &Span) -> Vec<KeyValue> {
    match &s.call {
        Call::Http(h) | Call::Rpc(h, _) => http_attributes(s, h),
        Call::Db(c) => db_attributes(s, c),
        Call::Messaging(c) => messaging_attributes(s, c),
    }
}

/// An HTTP exchange's attributes.
pub fn http_attributes(s: &Span, h: &HttpCall) -> Vec<KeyValue> {
    let mut a = Vec::with_capacity(16);
    a.push(KeyValue::new("http.request.method", h.method.clone()));
    if let Some(m) = &h.method_original {
        a.push(KeyValue::new("http.request.method_original", m.clone()));
    }
    a.push(KeyValue::new("http.response.status_code", i64::from(h.status)));
    a.push(KeyValue::new("url.scheme", h.scheme.clone()));
    a.push(KeyValue::new("network.protocol.version", h.protocol_version.clone()));
    if let Some(ua) = &h.user_agent {
        a.push(KeyValue::new("user_agent.original", ua.clone()));
    }
    if s.error {
        a.push(KeyValue::new("error.type", h.status.to_string()));
    }
    match s.kind {
        SpanKind::Server => {
            a.push(KeyValue::new("url.path", h.path.clone()));
            if let Some(q) = &h.query {
                a.push(KeyValue::new("url.query", q.clone()));
            }
            if let Some(r) = &h.route {
                a.push(KeyValue::new("http.route", r.clone()));
            }
            if let Some(h) = &s.server_address {
                a.push(KeyValue::new("server.address", h.clone()));
            }
            a.push(KeyValue::new("server.port", i64::from(s.server_port)));
            a.push(KeyValue::new("client.address", h.client_address.clone()));
            a.push(KeyValue::new("client.port", i64::from(h.client_port)));
            a.push(KeyValue::new("network.peer.address", s.peer_address.clone()));
            a.push(KeyValue::new("network.peer.port", i64::from(s.peer_port)));
        }
        SpanKind::Client | SpanKind::Producer | SpanKind::Consumer => {
            a.push(KeyValue::new("url.full", url_full(s, h)));
            a.push(KeyValue::new("url.path", h.path.clone()));
            if let Some(h) = &s.server_address {
                a.push(KeyValue::new("server.address", h.clone()));
            }
            a.push(KeyValue::new("server.port", i64::from(s.server_port)));
            a.push(KeyValue::new("network.peer.address", s.peer_address.clone()));
            a.push(KeyValue::new("network.peer.port", i64::from(s.peer_port)));
        }
    }
    a
}

/// The SDK's form of the span.
pub fn span_data(s: &Span, scope: &InstrumentationScope) -> SpanData {
    let ctx = SpanContext::new(
        TraceId::from_bytes(s.trace_id.to_be_bytes()),
        SpanId::from_bytes(s.span_id.to_be_bytes()),
        TraceFlags::new(s.trace_flags),
        false,
        TraceState::NONE,
    );
    SpanData {
        span_context: ctx,
        parent_span_id: SpanId::from_bytes(s.parent_span_id.to_be_bytes()),
        parent_span_is_remote: s.kind == SpanKind::Server && s.parent_span_id != 0,
        span_kind: match s.kind {
            SpanKind::Server => trace::SpanKind::Server,
            SpanKind::Client => trace::SpanKind::Client,
            SpanKind::Producer => trace::SpanKind::Producer,
            SpanKind::Consumer => trace::SpanKind::Consumer,
        },
        name: Cow::Owned(s.name.clone()),
        start_time: UNIX_EPOCH + Duration::from_nanos(s.start_unix_ns),
        end_time: UNIX_EPOCH + Duration::from_nanos(s.end_unix_ns),
        attributes: attributes(s)
            .into_iter()
            .chain(s.attributes.iter().map(|(k, v)| match v {
                Value::Str(v) => KeyValue::new(k.clone(), v.clone()),
                Value::Int(v) => KeyValue::new(k.clone(), *v),
                Value::Bool(v) => KeyValue::new(k.clone(), *v),
            }))
            .collect(),
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: {
            // A link's context came over the wire (a message's traceparent).
            let mut links = SpanLinks::default();
            links.links = s
                .links
                .iter()
                .map(|l| {
                    let ctx = SpanContext::new(
                        TraceId::from_bytes(l.trace_id.to_be_bytes()),
                        SpanId::from_bytes(l.span_id.to_be_bytes()),
                        TraceFlags::new(l.trace_flags),
                        true,
                        TraceState::NONE,
                    );
                    Link::with_context(ctx)
                })
                .collect();
            links
        },
        status: if s.error { Status::error("") } else { Status::Unset },
        instrumentation_scope: scope.clone(),
    }
}

/// The resource of a traced service, as the SDK held it.
pub fn service(res: &ServiceResource, extra: &[(String, String)]) -> Resource {
    let mut attrs = vec![
        KeyValue::new("service.name", res.service_name.clone()),
        KeyValue::new("service.instance.id", res.service_instance_id.clone()),
        KeyValue::new("host.name", res.host_name.clone()),
        KeyValue::new("process.pid", i64::from(res.pid)),
        KeyValue::new("process.executable.name", res.executable_name.clone()),
        KeyValue::new("telemetry.sdk.name", "ringtail"),
        KeyValue::new("telemetry.sdk.version", env!("CARGO_PKG_VERSION")),
        KeyValue::new("telemetry.sdk.language", language(&res.executable_name)),
    ];
    let fixed: Vec<String> = attrs.iter().map(|kv| kv.key.as_str().to_owned()).collect();
    for (k, v) in res.extra.iter().chain(extra) {
        if !fixed.contains(k) && !attrs.iter().any(|kv| kv.key.as_str() == k) {
            attrs.push(KeyValue::new(k.clone(), v.clone()));
        }
    }
    Resource::builder_empty().with_attributes(attrs).build()
}

/// What opentelemetry-otlp sent for `batch`: one request per service
/// resource (in the order of the batch's resources), its spans in batch order.
pub fn trace_requests(batch: &Spans<'_>, extra: &[(String, String)]) -> Vec<ExportTraceServiceRequest> {
    let scope = scope();
    let mut groups: Vec<Vec<SpanData>> = vec![Vec::new(); batch.resources.len()];
    for s in batch.spans.iter().map(|s| s.to_owned_span()).filter(|s| s.export_trace) {
        if let Some(g) = groups.get_mut(s.resource as usize) {
            g.push(span_data(&s, &scope));
        }
    }
    groups
        .into_iter()
        .enumerate()
        .filter(|(_, g)| !g.is_empty())
        .map(|(i, g)| {
            let res = ResourceAttributesWithSchema::from(&service(&batch.resources[i], extra));
            ExportTraceServiceRequest { resource_spans: group_spans_by_resource_and_scope(g, &res) }
        })
        .collect()
}

/// A manual reader shared by the provider and the test.
#[derive(Debug, Clone)]
struct SharedReader(Arc<ManualReader>);

impl MetricReader for SharedReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline)
    }
    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

/// The histogram attributes the SDK path recorded for exchange `h` of a
/// span.
fn histogram_attributes(s: &Span, h: &HttpCall) -> Vec<KeyValue> {
    let mut attrs = Vec::with_capacity(7);
    attrs.push(KeyValue::new("http.request.method", h.method.clone()));
    attrs.push(KeyValue::new("http.response.status_code", i64::from(h.status)));
    attrs.push(KeyValue::new("network.protocol.version", h.protocol_version.clone()));
    attrs.push(KeyValue::new("url.scheme", h.scheme.clone()));
    if s.error {
        attrs.push(KeyValue::new("error.type", h.status.to_string()));
    }
    match s.kind {
        SpanKind::Server => {
            if let Some(r) = &h.route {
                attrs.push(KeyValue::new("http.route", r.clone()));
            }
        }
        SpanKind::Client | SpanKind::Producer | SpanKind::Consumer => {
            if let Some(a) = &s.server_address {
                attrs.push(KeyValue::new("server.address", a.clone()));
            }
            attrs.push(KeyValue::new("server.port", i64::from(s.server_port)));
        }
    }
    attrs
}

/// The attributes the SDK path records a database call with.
fn db_histogram_attributes(s: &Span, c: &DbCall) -> Vec<KeyValue> {
    let mut attrs = vec![KeyValue::new("db.system.name", c.system.clone())];
    for (k, v) in [
        ("db.namespace", &c.namespace),
        ("db.operation.name", &c.operation),
        ("db.collection.name", &c.collection),
        ("db.query.summary", &c.query_summary),
        ("db.response.status_code", &c.status_code),
        ("error.type", &c.error_type),
        ("server.address", &s.server_address),
    ] {
        if let Some(v) = v {
            attrs.push(KeyValue::new(k, v.clone()));
        }
    }
    if s.server_port != 0 {
        attrs.push(KeyValue::new("server.port", i64::from(s.server_port)));
    }
    attrs
}

/// The attributes the SDK path records a messaging call with, in the
/// duration histogram (`duration`) or a message counter (`consumer`: the
/// consumed one).
fn messaging_metric_attributes(s: &Span, c: &MsgCall, duration: bool, consumer: bool) -> Vec<KeyValue> {
    let mut attrs =
        vec![KeyValue::new("messaging.system", c.system.clone()), KeyValue::new("messaging.operation.name", c.operation_name.clone())];
    let named = !c.temporary && !c.anonymous;
    for (k, v, wanted) in [
        ("messaging.operation.type", &c.operation_type, duration),
        ("messaging.destination.name", &c.destination, named),
        ("messaging.destination.template", &c.template, true),
        ("messaging.destination.partition.id", &c.partition, true),
        ("messaging.destination.subscription.name", &c.subscription, consumer || duration),
        ("messaging.consumer.group.name", &c.consumer_group, consumer || duration),
        ("error.type", &c.error_type, true),
        ("server.address", &s.server_address, true),
    ] {
        if let (Some(v), true) = (v, wanted) {
            attrs.push(KeyValue::new(k, v.clone()));
        }
    }
    if s.server_port != 0 {
        attrs.push(KeyValue::new("server.port", i64::from(s.server_port)));
    }
    attrs
}

/// What opentelemetry-otlp sent as metrics for the spans of `batch` that
/// count in the metrics: one request per service (batch order).
pub fn metric_requests(batch: &Spans<'_>, extra: &[(String, String)]) -> Vec<ExportMetricsServiceRequest> {
    let mut out = Vec::new();
    for (i, res) in batch.resources.iter().enumerate() {
        let reader = SharedReader(Arc::new(ManualReader::builder().with_temporality(Temporality::Cumulative).build()));
        let provider = SdkMeterProvider::builder().with_resource(service(res, extra)).with_reader(reader.clone()).build();
        let meter = provider.meter("ringtail");
        let hist = |name: &'static str, what: &'static str| {
            meter.f64_histogram(name).with_unit("s").with_description(what).with_boundaries(DURATION_BUCKETS.to_vec()).build()
        };
        let server = hist("http.server.request.duration", "Duration of HTTP server requests.");
        let client = hist("http.client.request.duration", "Duration of HTTP client requests.");
        let db = meter
            .f64_histogram(ipc_schema::db::NAME)
            .with_unit(ipc_schema::db::UNIT)
            .with_description(ipc_schema::db::DESCRIPTION)
            .with_boundaries(ipc_schema::db::BUCKETS.to_vec())
            .build();
        let msg_duration = meter
            .f64_histogram(ipc_schema::messaging::duration::NAME)
            .with_unit(ipc_schema::messaging::duration::UNIT)
            .with_description(ipc_schema::messaging::duration::DESCRIPTION)
            .with_boundaries(ipc_schema::messaging::duration::BUCKETS.to_vec())
            .build();
        let counter = |name: &'static str, unit: &'static str, what: &'static str| {
            meter.u64_counter(name).with_unit(unit).with_description(what).build()
        };
        use ipc_schema::messaging::{consumed, sent};
        let sent_messages = counter(sent::NAME, sent::UNIT, sent::DESCRIPTION);
        let consumed_messages = counter(consumed::NAME, consumed::UNIT, consumed::DESCRIPTION);
        let mut any = false;
        for s in batch.spans.iter().map(|s| s.to_owned_span()).filter(|s| s.export_metrics && s.resource as usize == i) {
            let s = &s;
            let seconds = s.end_unix_ns.saturating_sub(s.start_unix_ns) as f64 / 1e9;
            // (the SDK path knew no RPC: a gRPC call went to HTTP's)
            match (&s.call, s.kind) {
                (Call::Db(c), _) => db.record(seconds, &db_histogram_attributes(s, c)),
                (Call::Messaging(c), _) => {
                    msg_duration.record(seconds, &messaging_metric_attributes(s, c, true, false));
                    let n = c.message_count.unwrap_or(1);
                    match c.operation_type.as_deref() {
                        Some("send") => sent_messages.add(n, &messaging_metric_attributes(s, c, false, false)),
                        Some("receive") => consumed_messages.add(n, &messaging_metric_attributes(s, c, false, true)),
                        _ => {}
                    }
                }
                (Call::Http(h) | Call::Rpc(h, _), SpanKind::Server) => server.record(seconds, &histogram_attributes(s, h)),
                (Call::Http(h) | Call::Rpc(h, _), _) => client.record(seconds, &histogram_attributes(s, h)),
            }
            any = true;
        }
        if !any {
            continue;
        }
        let mut rm = ResourceMetrics::default();
        if reader.collect(&mut rm).is_ok() {
            out.push(ExportMetricsServiceRequest::from(&rm));
        }
    }
    out
}
