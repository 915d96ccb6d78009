use std::collections::HashMap;
use std::time::Duration;

use ipc_schema::{HttpSpan, SpanKind};
use opentelemetry::trace::SpanKind as OtelKind;
use ringtail_config::{OtlpProtocol, OtlpSettings};

use super::config::{parse_pairs, OtlpConfig};
use super::convert::{attributes, span_data, url_full};

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn file_only() {
    let s = OtlpSettings { endpoint: Some("http://collector:4317".parse().unwrap()), ..Default::default() };
    let c = OtlpConfig::resolve(&s, &env(&[])).unwrap();
    assert_eq!(c.traces_endpoint.as_deref(), Some("http://collector:4317"));
    assert_eq!(c.metrics_endpoint.as_deref(), Some("http://collector:4317"));
    assert_eq!(c.protocol, OtlpProtocol::Grpc);
    // nothing configured: OTLP is off
    let c = OtlpConfig::resolve(&OtlpSettings::default(), &env(&[])).unwrap();
    assert_eq!((c.traces_endpoint, c.metrics_endpoint), (None, None));
}

#[test]
fn environment_overrides_the_file() {
    let s = OtlpSettings { endpoint: Some("http://file:4317".parse().unwrap()), ..Default::default() };
    let c = OtlpConfig::resolve(
        &s,
        &env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318/"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:9/custom"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20abc,x-tenant=7"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "1000"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod"),
        ]),
    )
    .unwrap();
    assert_eq!(c.protocol, OtlpProtocol::HttpProtobuf);
    assert_eq!(c.traces_endpoint.as_deref(), Some("http://env:4318/v1/traces"));
    assert_eq!(c.metrics_endpoint.as_deref(), Some("http://m:9/custom"));
    assert_eq!(c.headers.get("authorization").map(String::as_str), Some("Bearer abc"));
    assert_eq!(c.headers.get("x-tenant").map(String::as_str), Some("7"));
    assert_eq!(c.timeout, Duration::from_millis(2500));
    assert_eq!(c.metrics_interval, Duration::from_secs(1));
    assert_eq!(c.resource_attributes, vec![("deployment.environment".to_owned(), "prod".to_owned())]);
}

#[test]
fn signals_can_be_turned_off() {
    let s = OtlpSettings { endpoint: Some("http://c:4317".parse().unwrap()), metrics: false, ..Default::default() };
    let c = OtlpConfig::resolve(&s, &env(&[])).unwrap();
    assert!(c.traces_endpoint.is_some() && c.metrics_endpoint.is_none());
}

#[test]
fn bad_environment_is_named() {
    for (var, val) in [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "0"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://x"),
    ] {
        let err = OtlpConfig::resolve(&OtlpSettings::default(), &env(&[(var, val)])).unwrap_err().to_string();
        assert!(err.contains(var) && err.contains(val), "{err}");
    }
}

#[test]
fn pairs() {
    assert_eq!(
        parse_pairs("a=1,b=x%2Cy, c = 3 ,junk"),
        vec![("a".into(), "1".into()), ("b".into(), "x,y".into()), ("c".into(), "3".into())]
    );
}

fn span(kind: SpanKind) -> HttpSpan {
    HttpSpan {
        resource: 0,
        kind,
        trace_id: 0x0102030405060708090a0b0c0d0e0f10,
        span_id: 0x1112131415161718,
        parent_span_id: 0x2122232425262728,
        trace_flags: 1,
        name: "GET /users/{id}".into(),
        start_unix_ns: 1_000_000_000,
        end_unix_ns: 1_250_000_000,
        method: "GET".into(),
        method_original: None,
        route: Some("/users/{id}".into()),
        path: "/users/7".into(),
        query: Some("a=b".into()),
        scheme: "http".into(),
        status: 503,
        error: true,
        server_address: Some("api".into()),
        server_port: 8080,
        client_address: "10.0.0.1".into(),
        client_port: 5000,
        peer_address: "10.0.0.2".into(),
        peer_port: 8080,
        protocol_version: "1.1".into(),
        user_agent: Some("curl/8".into()),
        export_trace: true,
        export_metrics: true,
    }
}

fn attr(s: &HttpSpan, key: &str) -> Option<String> {
    attributes(s).into_iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.to_string())
}

#[test]
fn server_attributes() {
    let s = span(SpanKind::Server);
    for (k, v) in [
        ("http.request.method", "GET"),
        ("http.response.status_code", "503"),
        ("url.path", "/users/7"),
        ("url.query", "a=b"),
        ("url.scheme", "http"),
        ("http.route", "/users/{id}"),
        ("server.address", "api"),
        ("server.port", "8080"),
        ("client.address", "10.0.0.1"),
        ("client.port", "5000"),
        ("network.protocol.version", "1.1"),
        ("user_agent.original", "curl/8"),
        ("error.type", "503"),
    ] {
        assert_eq!(attr(&s, k).as_deref(), Some(v), "{k}");
    }
    assert_eq!(attr(&s, "url.full"), None);
    let d = span_data(&s, &super::convert::scope());
    assert_eq!(d.span_kind, OtelKind::Server);
    assert_eq!(d.span_context.trace_id().to_string(), "0102030405060708090a0b0c0d0e0f10");
    assert_eq!(d.span_context.span_id().to_string(), "1112131415161718");
    assert_eq!(d.parent_span_id.to_string(), "2122232425262728");
    assert!(d.parent_span_is_remote);
    assert!(matches!(d.status, opentelemetry::trace::Status::Error { .. }));
    assert_eq!(d.end_time.duration_since(d.start_time).unwrap(), Duration::from_millis(250));
}

#[test]
fn client_attributes() {
    let mut s = span(SpanKind::Client);
    s.route = None;
    assert_eq!(attr(&s, "url.full").as_deref(), Some("http://api:8080/users/7?a=b"));
    assert_eq!(attr(&s, "http.route"), None);
    assert_eq!(attr(&s, "client.address"), None);
    assert_eq!(attr(&s, "network.peer.address").as_deref(), Some("10.0.0.2"));
    s.server_port = 80;
    s.server_address = Some("::1".into());
    assert_eq!(url_full(&s), "http://[::1]/users/7?a=b");
}
