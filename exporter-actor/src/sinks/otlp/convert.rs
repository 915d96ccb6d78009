//! `HttpSpan` → OpenTelemetry `SpanData`, with the attribute names of the
//! stable HTTP semantic conventions.

use std::borrow::Cow;
use std::time::{Duration, UNIX_EPOCH};

use ipc_schema::{HttpSpan, SpanKind};
use opentelemetry::trace::{self, SpanContext, SpanId, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

/// The instrumentation scope of every ringtail span.
pub fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("ringtail").with_version(env!("CARGO_PKG_VERSION")).build()
}

/// `url.full` of a client request.
pub fn url_full(s: &HttpSpan) -> String {
    let host = s.server_address.as_deref().unwrap_or(&s.peer_address);
    let host = if host.contains(':') { format!("[{host}]") } else { host.to_owned() };
    let default_port = (s.scheme == "http" && s.server_port == 80) || (s.scheme == "https" && s.server_port == 443);
    let port = if default_port { String::new() } else { format!(":{}", s.server_port) };
    let query = s.query.as_deref().map(|q| format!("?{q}")).unwrap_or_default();
    format!("{}://{host}{port}{}{query}", s.scheme, s.path)
}

/// The span's attributes.
pub fn attributes(s: &HttpSpan) -> Vec<KeyValue> {
    let mut a = Vec::with_capacity(16);
    a.push(KeyValue::new("http.request.method", s.method.clone()));
    if let Some(m) = &s.method_original {
        a.push(KeyValue::new("http.request.method_original", m.clone()));
    }
    a.push(KeyValue::new("http.response.status_code", i64::from(s.status)));
    a.push(KeyValue::new("url.scheme", s.scheme.clone()));
    a.push(KeyValue::new("network.protocol.version", s.protocol_version.clone()));
    if let Some(ua) = &s.user_agent {
        a.push(KeyValue::new("user_agent.original", ua.clone()));
    }
    if s.error {
        a.push(KeyValue::new("error.type", s.status.to_string()));
    }
    match s.kind {
        SpanKind::Server => {
            a.push(KeyValue::new("url.path", s.path.clone()));
            if let Some(q) = &s.query {
                a.push(KeyValue::new("url.query", q.clone()));
            }
            if let Some(r) = &s.route {
                a.push(KeyValue::new("http.route", r.clone()));
            }
            if let Some(h) = &s.server_address {
                a.push(KeyValue::new("server.address", h.clone()));
            }
            a.push(KeyValue::new("server.port", i64::from(s.server_port)));
            a.push(KeyValue::new("client.address", s.client_address.clone()));
            a.push(KeyValue::new("client.port", i64::from(s.client_port)));
            a.push(KeyValue::new("network.peer.address", s.peer_address.clone()));
            a.push(KeyValue::new("network.peer.port", i64::from(s.peer_port)));
        }
        SpanKind::Client => {
            a.push(KeyValue::new("url.full", url_full(s)));
            a.push(KeyValue::new("url.path", s.path.clone()));
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
pub fn span_data(s: &HttpSpan, scope: &InstrumentationScope) -> SpanData {
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
        // A server span's parent came over the wire (traceparent).
        parent_span_is_remote: s.kind == SpanKind::Server && s.parent_span_id != 0,
        span_kind: match s.kind {
            SpanKind::Server => trace::SpanKind::Server,
            SpanKind::Client => trace::SpanKind::Client,
        },
        name: Cow::Owned(s.name.clone()),
        start_time: UNIX_EPOCH + Duration::from_nanos(s.start_unix_ns),
        end_time: UNIX_EPOCH + Duration::from_nanos(s.end_unix_ns),
        attributes: attributes(s),
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: if s.error { Status::error("") } else { Status::Unset },
        instrumentation_scope: scope.clone(),
    }
}
