use std::collections::HashMap;
use std::time::Duration;

use ipc_schema::{Call, Component, HealthReport, HttpCall, MetricPoint, ServiceResource, Span, SpanBatch, SpanKind};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric, HistogramDataPoint, NumberDataPoint};
use opentelemetry_proto::tonic::trace::v1::span;
use prost::Message as _;
use ringtail_config::{OtlpEndpoint, OtlpProtocol, OtlpSettings};
use runtime_kit::counters::Registry;

use super::config::{parse_pairs, OtlpConfig};
use super::spans::{url_full, TraceEncoder};
use super::{metrics, reference};
use crate::batch::Spans;
use crate::meters::tests::{db_mut, db_span, http_mut, msg_mut, msg_span};
use crate::meters::Meters;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn file_only() {
    let s = OtlpSettings { endpoint: Some("http://collector:4317".parse().unwrap()), ..Default::default() };
    let c = OtlpConfig::resolve(&s, &env(&[])).unwrap();
    assert_eq!(c.traces_endpoint.as_ref().map(OtlpEndpoint::as_str), Some("http://collector:4317"));
    assert_eq!(c.metrics_endpoint.as_ref().map(OtlpEndpoint::as_str), Some("http://collector:4317"));
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
    assert_eq!(c.traces_endpoint.as_ref().map(OtlpEndpoint::as_str), Some("http://env:4318/v1/traces"));
    assert_eq!(c.metrics_endpoint.as_ref().map(OtlpEndpoint::as_str), Some("http://m:9/custom"));
    assert_eq!(c.headers.get("authorization").map(String::as_str), Some("Bearer abc"));
    assert_eq!(c.headers.get("x-tenant").map(String::as_str), Some("7"));
    assert_eq!(c.timeout, Duration::from_millis(2500));
    assert_eq!(c.metrics_interval, Duration::from_secs(1));
    assert_eq!(c.resource_attributes, vec![("deployment.environment".to_owned(), "prod".to_owned())]);
}

#[test]
fn an_endpoints_user_information_is_used_never_shown() {
    let e = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://user:pa55word@env:4318"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]);
    let c = OtlpConfig::resolve(&OtlpSettings::default(), &e).unwrap();
    let traces = c.traces_endpoint.as_ref().unwrap();
    assert_eq!(traces.as_str(), "http://user:pa55word@env:4318/v1/traces", "sent as basic authentication");
    assert_eq!(traces.to_string(), "http://REDACTED@env:4318/v1/traces");
    assert!(!format!("{c:?}").contains("pa55word"));
    let bad = env(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://user:pa55word@env:1")]);
    let err = OtlpConfig::resolve(&OtlpSettings::default(), &bad).unwrap_err().to_string();
    assert!(err.contains("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") && !err.contains("pa55word"), "{err}");
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

fn span(kind: SpanKind) -> Span {
    Span {
        resource: 0,
        kind,
        trace_id: 0x0102030405060708090a0b0c0d0e0f10,
        span_id: 0x1112131415161718,
        parent_span_id: 0x2122232425262728,
        trace_flags: 1,
        name: "GET /users/{id}".into(),
        start_unix_ns: 1_000_000_000,
        end_unix_ns: 1_250_000_000,
        error: true,
        server_address: Some("api".into()),
        server_port: 8080,
        peer_address: "10.0.0.2".into(),
        peer_port: 8080,
        export_trace: true,
        export_metrics: true,
        attributes: Vec::new(),
        edge: None,
        links: Vec::new(),
        call: Call::Http(HttpCall {
            method: "GET".into(),
            method_original: None,
            route: Some("/users/{id}".into()),
            path: "/users/7".into(),
            query: Some("a=b".into()),
            scheme: "http".into(),
            status: 503,
            client_address: "10.0.0.1".into(),
            client_port: 5000,
            protocol_version: "1.1".into(),
            user_agent: Some("curl/8".into()),
        }),
    }
}

fn resource(name: &str, pid: u32, extra: &[(&str, &str)]) -> ServiceResource {
    ServiceResource {
        service_name: name.into(),
        service_instance_id: format!("host:{pid}"),
        host_name: "host".into(),
        pid,
        executable_name: if pid.is_multiple_of(2) { "python3.11".into() } else { name.into() },
        extra: extra.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    }
}

/// Every shape of span: both kinds, root and child (remote or local
/// parent), errors, unknown methods, no route, no Host, IPv6, default
/// ports, odd characters, spans that are not traced or not measured, and
/// a span naming a resource the batch does not have.
/// Resources and spans of every shape, one span naming a resource that is
/// not there (the sinks leave it out).
pub(super) fn varied() -> (Vec<ServiceResource>, Vec<Span>) {
    let resources = vec![
        resource("shop", 10, &[("team", "a"), ("service.name", "ignored")]),
        resource("idle", 11, &[]),
        resource("api", 12, &[("deployment.environment", "dev")]),
    ];
    let mut spans = Vec::new();
    for i in 0..40u32 {
        let kind = if i % 3 == 0 { SpanKind::Client } else { SpanKind::Server };
        let mut s = span(kind);
        s.resource = if i % 2 == 0 { 0 } else { 2 };
        s.trace_id = (u128::from(i) << 64) | 0xabc;
        s.span_id = u64::from(i) + 1;
        s.parent_span_id = if i % 4 == 0 { 0 } else { u64::from(i) * 1000 };
        s.trace_flags = (i % 2) as u8;
        s.start_unix_ns = 1_700_000_000_000_000_000 + u64::from(i) * 1_000_000;
        // Some durations fall exactly on bucket bounds (upper bounds are inclusive).
        s.end_unix_ns =
            s.start_unix_ns + if i % 4 == 1 { [5, 10, 25, 1000][(i / 4 % 4) as usize] * 1_000_000 } else { u64::from(i) * 3_000_000 + 17 };
        let status = [200, 404, 503, 201, 500][i as usize % 5];
        s.error = status >= 500 || (kind == SpanKind::Client && status >= 400);
        let h = http_mut(&mut s);
        h.status = status;
        h.route = (i % 5 != 1).then(|| format!("/r/{}", i % 3));
        h.query = (i % 2 == 0).then(|| format!("q={i}&x=é"));
        h.user_agent = (i % 3 != 2).then(|| "curl/8.5.0 \"quoted\"".into());
        if i % 7 == 0 {
            h.method = "_OTHER".into();
            h.method_original = Some("PURGE".into());
        }
        h.scheme = if i % 5 == 0 { "https".into() } else { "http".into() };
        h.protocol_version = if i % 8 == 0 { "1.0".into() } else { "1.1".into() };
        let name = format!("{} {}", h.method, h.route.as_deref().unwrap_or(""));
        s.server_address = match i % 4 {
            0 => None,
            1 => Some("::1".into()),
            _ => Some(format!("host{i}.example")),
        };
        s.server_port = [80, 443, 8080, 0][i as usize % 4];
        s.peer_address = if i % 6 == 0 { "fe80::1".into() } else { "10.1.2.3".into() };
        s.name = name;
        s.export_trace = i % 9 != 4;
        s.export_metrics = i % 10 != 3;
        spans.push(s);
    }
    // Database calls: PostgreSQL and Redis, failed or not, fields present
    // or not, extra attributes (one an `error.type` of its own).
    for i in 0..12u32 {
        let mut s = db_span(1 + u64::from(i) * 7, (i % 3 == 2).then_some("42601"));
        s.resource = if i % 2 == 0 { 0 } else { 2 };
        s.span_id = 1000 + u64::from(i);
        s.parent_span_id = if i % 4 == 0 { 0 } else { u64::from(i) };
        s.start_unix_ns = 1_700_000_000_000_000_000 + u64::from(i) * 1_000_000;
        s.end_unix_ns = s.start_unix_ns + [1, 5, 10, 50][i as usize % 4] * 1_000_000;
        s.server_address = (i % 5 != 4).then(|| "db.internal".into());
        s.server_port = if i % 6 == 5 { 0 } else { 5432 };
        let redis = i % 4 == 3;
        if let Some(c) = db_mut(&mut s) {
            if redis {
                c.system = "redis".into();
                c.namespace = Some("0".into());
                c.operation = Some("GET".into());
                c.collection = None;
                c.query_text = Some("GET ?".into());
                c.query_summary = None;
                c.returned_rows = None;
            }
            if i % 5 == 1 {
                c.namespace = None;
                c.query_text = None;
            }
        }
        if redis {
            s.name = "GET".into();
        }
        if i == 7 {
            s.attributes.push(("db.operation.batch.size".into(), ipc_schema::Value::Int(2)));
        }
        if i == 8 {
            s.attributes.push(("error.type".into(), ipc_schema::Value::Str("syntax_error".into())));
        }
        s.export_trace = i % 9 != 4;
        s.export_metrics = i % 10 != 3;
        spans.push(s);
    }
    // Messaging calls: sends, receives, a commit; counted or not, failed
    // or not, with no link, one or several; a temporary destination.
    for i in 0..9u32 {
        let op = [Some("send"), Some("receive"), None][i as usize % 3];
        let count = (i % 2 == 0).then_some(u64::from(i) + 1);
        let mut s = msg_span(1 + u64::from(i) * 3, op, count, (i % 4 == 3).then_some("UNKNOWN_TOPIC_OR_PARTITION"));
        s.resource = if i % 2 == 0 { 0 } else { 2 };
        s.span_id = 2000 + u64::from(i);
        s.parent_span_id = if i % 4 == 0 { 0 } else { u64::from(i) };
        s.start_unix_ns = 1_700_000_000_000_000_000 + u64::from(i) * 1_000_000;
        s.end_unix_ns = s.start_unix_ns + [1, 5, 10, 50][i as usize % 4] * 1_000_000;
        match i % 3 {
            0 => s.links.clear(),
            1 => s.links.extend((1..4).map(|j| ipc_schema::SpanLink { trace_id: u128::MAX - j, span_id: j as u64, trace_flags: 0 })),
            _ => {}
        }
        if i == 5 {
            let c = msg_mut(&mut s);
            c.destination = Some("_INBOX.7f".into());
            c.temporary = true;
            c.body_size = Some(12);
        }
        if i == 6 {
            let c = msg_mut(&mut s);
            c.template = Some("orders.{region}".into());
            c.routing_key = Some("eu.orders".into());
            c.delivery_tag = Some(9);
            c.subscription = Some("workers".into());
        }
        s.export_trace = i % 9 != 4;
        s.export_metrics = i % 10 != 3;
        spans.push(s);
    }
    let mut orphan = span(SpanKind::Server);
    orphan.resource = 7;
    spans.push(orphan);
    (resources, spans)
}

/// Spans as the sinks take them, without the read's checks (which refuse
/// a batch with a span of a missing resource).
pub(super) fn views<'a>(resources: &'a [ServiceResource], spans: &'a [Span]) -> Spans<'a> {
    Spans { resources, spans: spans.iter().map(Span::as_borrowed).collect() }
}

fn sorted(mut attrs: Vec<KeyValue>) -> Vec<KeyValue> {
    attrs.sort_by(|a, b| a.key.cmp(&b.key));
    attrs
}

#[test]
fn trace_request_decodes_to_what_the_sdk_path_sent() {
    let (resources, spans) = varied();
    let batch = views(&resources, &spans);
    let extra = vec![("deployment.environment".to_owned(), "prod".to_owned()), ("host.name".to_owned(), "ignored".to_owned())];
    let mut enc = TraceEncoder::new(extra.clone());
    let mut out = Vec::new();
    let n = enc.encode(&batch, &mut out);
    let want: Vec<_> = reference::trace_requests(&batch, &extra).into_iter().flat_map(|r| r.resource_spans).collect();
    assert_eq!(n, want.iter().flat_map(|r| &r.scope_spans).map(|s| s.spans.len()).sum::<usize>());
    assert_eq!(n, spans.iter().filter(|s| s.export_trace && s.resource < 3).count());
    let got = ExportTraceServiceRequest::decode(out.as_slice()).expect("valid protobuf");
    assert_eq!(got.resource_spans.len(), want.len());
    for (g, w) in got.resource_spans.iter().zip(&want) {
        let (gr, wr) = (g.resource.clone().expect("resource"), w.resource.clone().expect("resource"));
        // The SDK kept resource attributes in a hash map: order is not meaningful.
        assert_eq!(sorted(gr.attributes.clone()), sorted(wr.attributes.clone()));
        assert_eq!((gr.dropped_attributes_count, &gr.entity_refs), (wr.dropped_attributes_count, &wr.entity_refs));
        assert_eq!(g.schema_url, w.schema_url);
        assert_eq!(g.scope_spans.len(), 1);
        assert_eq!(g.scope_spans.len(), w.scope_spans.len());
        let (gs, ws) = (&g.scope_spans[0], &w.scope_spans[0]);
        assert_eq!(gs.scope, ws.scope);
        assert_eq!(gs.schema_url, ws.schema_url);
        assert_eq!(gs.spans.len(), ws.spans.len());
        for (a, b) in gs.spans.iter().zip(&ws.spans) {
            // Field by field, for a readable failure...
            assert_eq!(a.trace_id, b.trace_id);
            assert_eq!(a.span_id, b.span_id);
            assert_eq!(a.parent_span_id, b.parent_span_id);
            assert_eq!(a.trace_state, b.trace_state);
            assert_eq!(a.flags, b.flags, "{}", b.name);
            assert_eq!(a.name, b.name);
            assert_eq!(a.kind, b.kind);
            assert_eq!((a.start_time_unix_nano, a.end_time_unix_nano), (b.start_time_unix_nano, b.end_time_unix_nano));
            assert_eq!(a.attributes, b.attributes, "attributes of {}", b.name);
            assert_eq!(a.status, b.status);
            // ...then all of it.
            assert_eq!(a, b);
            assert_eq!(a.encode_to_vec(), b.encode_to_vec());
        }
    }
    // Byte for byte what prost writes, once the resource attributes are in
    // our order.
    let mut want = want;
    for (g, w) in got.resource_spans.iter().zip(want.iter_mut()) {
        let order: Vec<&str> = g.resource.as_ref().map(|r| r.attributes.iter().map(|kv| kv.key.as_str()).collect()).unwrap_or_default();
        if let Some(r) = w.resource.as_mut() {
            r.attributes.sort_by_key(|kv| order.iter().position(|k| *k == kv.key));
        }
    }
    assert_eq!(ExportTraceServiceRequest { resource_spans: want }.encode_to_vec(), out);
}

#[test]
fn span_fields() {
    let mut c = span(SpanKind::Client);
    c.parent_span_id = 0;
    c.error = false;
    c.trace_flags = 0;
    let b = SpanBatch::of(vec![resource("s", 1, &[])], &[span(SpanKind::Server), c]);
    let mut out = Vec::new();
    TraceEncoder::new(vec![]).encode(&Spans::of_own(&b), &mut out);
    let req = ExportTraceServiceRequest::decode(out.as_slice()).unwrap();
    let spans = &req.resource_spans[0].scope_spans[0].spans;
    let attr = |i: usize, k: &str| {
        spans[i].attributes.iter().find(|kv| kv.key == k).and_then(|kv| kv.value.clone()?.value).map(|v| match v {
            any_value::Value::StringValue(s) => s,
            any_value::Value::IntValue(i) => i.to_string(),
            other => format!("{other:?}"),
        })
    };
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
        assert_eq!(attr(0, k).as_deref(), Some(v), "{k}");
    }
    assert_eq!(attr(0, "url.full"), None);
    let s = &spans[0];
    assert_eq!(s.kind, span::SpanKind::Server as i32);
    assert_eq!(hex(&s.trace_id), "0102030405060708090a0b0c0d0e0f10");
    assert_eq!(hex(&s.span_id), "1112131415161718");
    assert_eq!(hex(&s.parent_span_id), "2122232425262728");
    assert_eq!(s.flags, 0x301, "sampled, remote parent");
    assert_eq!(s.status.as_ref().map(|st| st.code), Some(2));
    assert_eq!(s.end_time_unix_nano - s.start_time_unix_nano, 250_000_000);
    let c = &spans[1];
    assert_eq!(c.kind, span::SpanKind::Client as i32);
    assert!(c.parent_span_id.is_empty());
    assert_eq!(c.flags, 0x100);
    assert_eq!(c.status.as_ref().map(|st| st.code), Some(0));
    assert_eq!(attr(1, "url.full").as_deref(), Some("http://api:8080/users/7?a=b"));
    assert_eq!(attr(1, "http.route"), None);
    assert_eq!(attr(1, "client.address"), None);
    assert_eq!(attr(1, "network.peer.address").as_deref(), Some("10.0.0.2"));
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn client_urls() {
    let mut s = span(SpanKind::Client);
    let mut url = String::new();
    url_full(&s.as_borrowed(), &mut url);
    assert_eq!(url, "http://api:8080/users/7?a=b");
    s.server_port = 80;
    s.server_address = Some("::1".into());
    url_full(&s.as_borrowed(), &mut url);
    assert_eq!(url, "http://[::1]/users/7?a=b");
    s.server_address = None;
    http_mut(&mut s).scheme = "https".into();
    s.server_port = 443;
    http_mut(&mut s).query = None;
    url_full(&s.as_borrowed(), &mut url);
    assert_eq!(url, "https://10.0.0.2/users/7");
}

#[test]
fn encoder_buffers_are_reused_without_leftovers() {
    let (resources, spans) = varied();
    let batch = views(&resources, &spans);
    let mut enc = TraceEncoder::new(vec![]);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    enc.encode(&batch, &mut a);
    let small = SpanBatch::of(vec![resource("s", 1, &[])], &[span(SpanKind::Server)]);
    enc.encode(&Spans::of_own(&small), &mut b);
    enc.encode(&batch, &mut b);
    assert_eq!(a, b);
    let empty = SpanBatch::of(vec![resource("s", 1, &[])], &[]);
    assert_eq!(enc.encode(&Spans::of_own(&empty), &mut b), 0);
    assert!(b.is_empty());
}

fn points_by_attributes(points: &[HistogramDataPoint]) -> Vec<(Vec<KeyValue>, &HistogramDataPoint)> {
    let mut v: Vec<_> = points.iter().map(|p| (sorted(p.attributes.clone()), p)).collect();
    v.sort_by(|a, b| format!("{:?}", a.0).cmp(&format!("{:?}", b.0)));
    v
}

#[test]
fn metrics_request_decodes_to_what_the_sdk_path_sent() {
    let (resources, spans) = varied();
    let batch = views(&resources, &spans);
    let extra = vec![("deployment.environment".to_owned(), "prod".to_owned())];
    let registry = Registry::new(Component::ExporterActor, 1);
    // (the SDK path has no service graph: the_service_graph_and_span_metrics_are_obis_over_otlp)
    let off = crate::meters::Derived { service_graph: false, span_metrics: false };
    let mut m = Meters::new(extra.clone(), "host", &registry).derive(off);
    m.record_batch_at(&batch, 1_700_000_001_000_000_000);
    let requests = m.view().read(|m| metrics::encode(m, 1_700_000_002_000_000_000));
    let got: Vec<_> =
        requests.iter().flat_map(|r| ExportMetricsServiceRequest::decode(r.as_slice()).expect("valid protobuf").resource_metrics).collect();
    let want: Vec<_> = reference::metric_requests(&batch, &extra).into_iter().flat_map(|r| r.resource_metrics).collect();
    assert_eq!(got.len(), want.len());
    assert_eq!(got.len(), 2, "shop and api (idle has no spans)");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(sorted(g.resource.clone().unwrap().attributes), sorted(w.resource.clone().unwrap().attributes));
        assert_eq!(g.schema_url, w.schema_url);
        assert_eq!(g.scope_metrics.len(), 1);
        let (gs, ws) = (&g.scope_metrics[0], &w.scope_metrics[0]);
        assert_eq!(gs.scope, ws.scope);
        assert_eq!(gs.metrics.len(), ws.metrics.len());
        for (gm, wm) in gs.metrics.iter().zip(&ws.metrics) {
            assert_eq!((&gm.name, &gm.description, &gm.unit, &gm.metadata), (&wm.name, &wm.description, &wm.unit, &wm.metadata));
            if let (Some(metric::Data::Sum(gsum)), Some(metric::Data::Sum(wsum))) = (&gm.data, &wm.data) {
                // A messaging counter: an SDK u64 counter's integer points.
                assert_eq!((gsum.aggregation_temporality, gsum.is_monotonic), (wsum.aggregation_temporality, wsum.is_monotonic));
                let by_attrs = |ps: &[NumberDataPoint]| {
                    let mut v: Vec<_> =
                        ps.iter().map(|p| (format!("{:?}", sorted(p.attributes.clone())), p.value, p.start_time_unix_nano)).collect();
                    v.sort_by(|a, b| a.0.cmp(&b.0));
                    v
                };
                let (gp, wp) = (by_attrs(&gsum.data_points), by_attrs(&wsum.data_points));
                assert_eq!(
                    gp.iter().map(|p| (&p.0, p.1)).collect::<Vec<_>>(),
                    wp.iter().map(|p| (&p.0, p.1)).collect::<Vec<_>>(),
                    "{}",
                    gm.name
                );
                assert!(gp.iter().all(|p| p.2 == 1_700_000_001_000_000_000));
                continue;
            }
            let (Some(metric::Data::Histogram(gh)), Some(metric::Data::Histogram(wh))) = (&gm.data, &wm.data) else {
                panic!("histograms: {gm:?} {wm:?}")
            };
            assert_eq!(gh.aggregation_temporality, wh.aggregation_temporality);
            let (gp, wp) = (points_by_attributes(&gh.data_points), points_by_attributes(&wh.data_points));
            assert_eq!(gp.len(), wp.len(), "{}", gm.name);
            for ((ga, g), (wa, w)) in gp.iter().zip(&wp) {
                assert_eq!(ga, wa);
                assert_eq!((g.count, g.sum, g.min, g.max), (w.count, w.sum, w.min, w.max), "{ga:?}");
                assert_eq!(g.bucket_counts, w.bucket_counts, "{ga:?}");
                assert_eq!(g.explicit_bounds, w.explicit_bounds);
                assert_eq!((&g.exemplars, g.flags), (&w.exemplars, w.flags));
                assert_eq!(g.start_time_unix_nano, 1_700_000_001_000_000_000);
                assert_eq!(g.time_unix_nano, 1_700_000_002_000_000_000);
            }
        }
    }
}

#[test]
fn own_metrics_are_sums_and_gauges() {
    let registry = Registry::new(Component::ExporterActor, 1);
    let mut m = Meters::new(vec![], "host", &registry);
    m.update_health_at(
        HealthReport {
            component: Component::ProbeLoader,
            instance: 4,
            points: vec![
                MetricPoint::counter("ringtail_kernel_events_total", &[("component", "probe-loader")], 12),
                MetricPoint::gauge("ringtail_ring_fill", &[("component", "probe-loader"), ("a", "b")], 0.5),
            ],
        },
        5,
    );
    let requests = m.view().read(|m| metrics::encode(m, 9));
    assert_eq!(requests.len(), 1);
    let req = ExportMetricsServiceRequest::decode(requests[0].as_slice()).unwrap();
    let rm = &req.resource_metrics[0];
    let res = rm.resource.clone().unwrap().attributes;
    let get = |k: &str| res.iter().find(|kv| kv.key == k).and_then(|kv| kv.value.clone()?.value);
    assert_eq!(get("service.name"), Some(any_value::Value::StringValue("ringtail".into())));
    assert_eq!(get("telemetry.sdk.language"), Some(any_value::Value::StringValue("rust".into())));
    let ms = &rm.scope_metrics[0].metrics;
    assert_eq!(rm.scope_metrics[0].scope.as_ref().map(|s| s.name.as_str()), Some("ringtail"));
    assert_eq!(ms.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["ringtail_kernel_events", "ringtail_ring_fill"]);
    let Some(metric::Data::Sum(sum)) = &ms[0].data else { panic!("{:?}", ms[0]) };
    assert!(sum.is_monotonic);
    assert_eq!(sum.aggregation_temporality, 2);
    assert_eq!((sum.data_points[0].start_time_unix_nano, sum.data_points[0].time_unix_nano), (5, 9));
    assert_eq!(sum.data_points[0].value, Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsDouble(12.0)));
    let Some(metric::Data::Gauge(g)) = &ms[1].data else { panic!("{:?}", ms[1]) };
    assert_eq!(g.data_points[0].attributes.iter().map(|kv| kv.key.as_str()).collect::<Vec<_>>(), ["a", "component"]);
}

#[test]
fn metric_requests_are_split_when_large() {
    let registry = Registry::new(Component::ExporterActor, 1);
    let mut m = Meters::new(vec![], "host", &registry);
    let resources: Vec<_> = (0..200).map(|i| resource(&format!("svc{i}"), i, &[])).collect();
    let spans: Vec<Span> = (0..200 * 40)
        .map(|i| {
            let mut s = span(SpanKind::Server);
            s.resource = (i % 200) as u32;
            http_mut(&mut s).route = Some(format!("/route/{}", i / 200));
            s
        })
        .collect();
    m.record_batch_at(&Spans::of_own(&SpanBatch::of(resources, &spans)), 1);
    let requests = m.view().read(|m| metrics::encode(m, 2));
    assert!(requests.len() > 1, "{}", requests.len());
    let mut points = 0;
    for r in &requests {
        assert!(r.len() < 2 * metrics::MAX_REQUEST);
        let req = ExportMetricsServiceRequest::decode(r.as_slice()).unwrap();
        for rm in req.resource_metrics {
            for m in &rm.scope_metrics[0].metrics {
                if let Some(metric::Data::Histogram(h)) = &m.data {
                    points += h.data_points.len();
                }
            }
        }
    }
    assert_eq!(points, 200 * 40);
}

#[test]
fn grpc_calls_are_exported_as_the_rpc_duration_metrics_of_their_mode() {
    use crate::meters::tests::grpc_span;
    let registry = Registry::new(Component::ExporterActor, 1);
    let mut m = Meters::new(vec![], "host", &registry);
    let spans = vec![
        grpc_span(SpanKind::Server, 5, true, false, "demo.Items/Get", 0),
        grpc_span(SpanKind::Server, 20, true, false, "demo.Items/Get", 0),
        grpc_span(SpanKind::Client, 5, false, true, "demo.Items/Get", 5),
    ];
    m.record_batch_at(&Spans::of_own(&SpanBatch::of(vec![resource("shop", 1, &[])], &spans)), 1);
    let requests = m.view().read(|m| metrics::encode(m, 2));
    let req = ExportMetricsServiceRequest::decode(requests[0].as_slice()).unwrap();
    let ms = &req.resource_metrics[0].scope_metrics[0].metrics;
    let summary: Vec<_> = ms.iter().map(|m| (m.name.as_str(), m.unit.as_str(), m.description.as_str())).collect();
    assert_eq!(
        summary,
        [
            ("rpc.server.call.duration", "s", "Measures the duration of an incoming Remote Procedure Call (RPC)."),
            ("rpc.client.duration", "ms", "Measures the duration of outbound RPC."),
        ],
        "gRPC calls are not also HTTP requests"
    );
    let point = |i: usize| {
        let Some(metric::Data::Histogram(h)) = &ms[i].data else { panic!("{:?}", ms[i]) };
        assert_eq!(h.aggregation_temporality, 2);
        assert_eq!(h.data_points.len(), 1);
        h.data_points[0].clone()
    };
    let str = |k: &str, v: &str| KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(any_value::Value::StringValue(v.into())) }),
        ..Default::default()
    };
    let int = |k: &str, v: i64| KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(any_value::Value::IntValue(v)) }),
        ..Default::default()
    };
    let server = point(0);
    assert_eq!(
        server.attributes,
        [str("rpc.method", "demo.Items/Get"), str("rpc.response.status_code", "OK"), str("rpc.system.name", "grpc")]
    );
    assert_eq!(server.count, 2);
    assert_eq!(server.explicit_bounds, ipc_schema::rpc::STABLE_BUCKETS);
    assert_eq!(server.bucket_counts.len(), server.explicit_bounds.len() + 1);
    assert_eq!((server.bucket_counts[0], server.bucket_counts[2]), (1, 1), "5 ms in the first bucket, 20 ms in (0.01, 0.025]");
    assert!((server.sum.unwrap() - 0.025).abs() < 1e-12);
    let client = point(1);
    assert_eq!(
        client.attributes,
        [
            int("rpc.grpc.status_code", 5),
            str("rpc.method", "Get"),
            str("rpc.service", "demo.Items"),
            str("rpc.system", "grpc"),
            str("server.address", "api"),
            int("server.port", 50051),
        ]
    );
    assert_eq!(client.explicit_bounds, ipc_schema::rpc::EXPERIMENTAL_BUCKETS);
    assert_eq!((client.sum, client.min, client.max), (Some(5.0), Some(5.0), Some(5.0)), "milliseconds");
    assert_eq!(client.bucket_counts[1], 1, "5 ms in (0, 5]");
}

fn str_kv(k: &str, v: &str) -> KeyValue {
    KeyValue { key: k.into(), value: Some(AnyValue { value: Some(any_value::Value::StringValue(v.into())) }), ..Default::default() }
}

fn int_kv(k: &str, v: i64) -> KeyValue {
    KeyValue { key: k.into(), value: Some(AnyValue { value: Some(any_value::Value::IntValue(v)) }), ..Default::default() }
}

#[test]
fn messaging_spans_have_their_kind_attributes_and_links() {
    let mut consumer = msg_span(4, Some("receive"), Some(7), None);
    consumer.links.push(ipc_schema::SpanLink { trace_id: 1, span_id: 2, trace_flags: 0 });
    let spans = [msg_span(4, Some("send"), None, Some("NOT_LEADER_OR_FOLLOWER")), consumer, msg_span(4, None, None, None)];
    let b = SpanBatch::of(vec![resource("s", 1, &[])], &spans);
    let mut out = Vec::new();
    assert_eq!(TraceEncoder::new(vec![]).encode(&Spans::of_own(&b), &mut out), 3);
    let req = ExportTraceServiceRequest::decode(out.as_slice()).unwrap();
    let got = &req.resource_spans[0].scope_spans[0].spans;
    let kinds: Vec<_> = got.iter().map(|s| (s.name.as_str(), s.kind)).collect();
    assert_eq!(
        kinds,
        [("send orders", 4), ("poll orders", 5), ("commit orders", 3)],
        "SPAN_KIND_PRODUCER, SPAN_KIND_CONSUMER, SPAN_KIND_CLIENT"
    );
    assert_eq!((span::SpanKind::Producer as i32, span::SpanKind::Consumer as i32), (4, 5));
    let server = [
        str_kv("server.address", "10.0.0.9"),
        int_kv("server.port", 9092),
        str_kv("network.peer.address", "10.0.0.9"),
        int_kv("network.peer.port", 9092),
    ];
    let send: Vec<KeyValue> = [
        str_kv("messaging.system", "kafka"),
        str_kv("messaging.operation.type", "send"),
        str_kv("messaging.operation.name", "send"),
        str_kv("messaging.destination.name", "orders"),
        str_kv("messaging.destination.partition.id", "0"),
        str_kv("messaging.client.id", "rt-1"),
        int_kv("messaging.kafka.offset", 42),
        str_kv("error.type", "NOT_LEADER_OR_FOLLOWER"),
    ]
    .into_iter()
    .chain(server.iter().cloned())
    .collect();
    assert_eq!(got[0].attributes, send);
    let poll = &got[1].attributes;
    assert!(
        poll.contains(&str_kv("messaging.consumer.group.name", "billing")) && poll.contains(&int_kv("messaging.batch.message_count", 7))
    );
    assert!(!got[2].attributes.iter().any(|kv| kv.key == "messaging.operation.type"), "a commit of no type names none");
    for s in got {
        for kv in &s.attributes {
            let http = ["http.", "url.", "user_agent.", "client.", "network.protocol.", "db."].iter().any(|p| kv.key.starts_with(p));
            assert!(!http, "{} on a messaging span", kv.key);
            assert_ne!(kv.key, "messaging.kafka.message.key", "a record's key is never exported");
        }
    }
    // Links: the producers' contexts, remote, in order.
    let links: Vec<_> = got[1].links.iter().map(|l| (hex(&l.trace_id), hex(&l.span_id), l.flags, l.trace_state.as_str())).collect();
    assert_eq!(
        links,
        [(format!("{:032x}", 0xabc), format!("{:016x}", 0xdef), 0x301, ""), (format!("{:032x}", 1), format!("{:016x}", 2), 0x300, ""),],
        "trace flags, SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK and SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK"
    );
    assert_eq!((got[0].links.len(), got[0].dropped_links_count), (1, 0));
    // The SDK path writes the same (byte for byte, resources aside: see
    // trace_request_decodes_to_what_the_sdk_path_sent).
    let want = reference::trace_requests(&Spans::of_own(&b), &[]);
    assert_eq!(want[0].resource_spans[0].scope_spans[0].spans, *got);
}

#[test]
fn messaging_calls_are_exported_as_the_messaging_duration_and_counters() {
    let registry = Registry::new(Component::ExporterActor, 1);
    let mut m = Meters::new(vec![], "host", &registry);
    let spans = [msg_span(4, Some("send"), Some(3), None), msg_span(4, Some("receive"), Some(7), None), msg_span(4, None, None, None)];
    m.record_batch_at(&Spans::of_own(&SpanBatch::of(vec![resource("s", 1, &[])], &spans)), 1_700_000_001_000_000_000);
    let requests = m.view().read(|m| metrics::encode(m, 1_700_000_002_000_000_000));
    let req = ExportMetricsServiceRequest::decode(requests[0].as_slice()).unwrap();
    let ms = &req.resource_metrics[0].scope_metrics[0].metrics;
    let got: Vec<_> = ms.iter().map(|m| (m.name.as_str(), m.unit.as_str())).collect();
    assert_eq!(
        got,
        [
            ("messaging.client.operation.duration", "s"),
            ("messaging.client.sent.messages", "{message}"),
            ("messaging.client.consumed.messages", "{message}")
        ]
    );
    let Some(metric::Data::Sum(sent)) = &ms[1].data else { panic!("a sum: {:?}", ms[1]) };
    assert!(sent.is_monotonic && sent.aggregation_temporality == 2, "cumulative");
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as N;
    assert_eq!(sent.data_points.iter().map(|p| p.value).collect::<Vec<_>>(), [Some(N::AsInt(3))]);
    let Some(metric::Data::Sum(consumed)) = &ms[2].data else { panic!("a sum: {:?}", ms[2]) };
    assert_eq!(consumed.data_points[0].value, Some(N::AsInt(7)));
    assert!(consumed.data_points[0].attributes.contains(&str_kv("messaging.consumer.group.name", "billing")));
    let Some(metric::Data::Histogram(d)) = &ms[0].data else { panic!("a histogram: {:?}", ms[0]) };
    assert_eq!(d.data_points.len(), 3, "send, poll, commit");
    assert_eq!(d.data_points[0].explicit_bounds, ipc_schema::messaging::duration::BUCKETS);
}

#[test]
fn database_spans_have_the_database_attributes_and_none_of_http() {
    let b = SpanBatch::of(vec![resource("s", 1, &[])], &[db_span(4, None), db_span(4, Some("42601"))]);
    let mut out = Vec::new();
    assert_eq!(TraceEncoder::new(vec![]).encode(&Spans::of_own(&b), &mut out), 2);
    let req = ExportTraceServiceRequest::decode(out.as_slice()).unwrap();
    let spans = &req.resource_spans[0].scope_spans[0].spans;
    let common = [
        str_kv("db.system.name", "postgresql"),
        str_kv("db.namespace", "shop"),
        str_kv("db.operation.name", "SELECT"),
        str_kv("db.collection.name", "users"),
        str_kv("db.query.text", "SELECT * FROM users WHERE id = $1"),
        str_kv("db.query.summary", "SELECT users"),
    ];
    let server = [
        str_kv("server.address", "db.internal"),
        int_kv("server.port", 5432),
        str_kv("network.peer.address", "10.0.0.5"),
        int_kv("network.peer.port", 5432),
    ];
    let ok: Vec<KeyValue> = common.iter().cloned().chain([int_kv("db.response.returned_rows", 1)]).chain(server.iter().cloned()).collect();
    assert_eq!(spans[0].attributes, ok);
    let failed: Vec<KeyValue> = common
        .iter()
        .cloned()
        .chain([str_kv("db.response.status_code", "42601"), str_kv("error.type", "42601")])
        .chain(server.iter().cloned())
        .collect();
    assert_eq!(spans[1].attributes, failed);
    for s in spans {
        assert_eq!(s.name, "SELECT users");
        assert_eq!(s.kind, span::SpanKind::Client as i32);
        for kv in &s.attributes {
            let http = ["http.", "url.", "user_agent.", "client.", "network.protocol."].iter().any(|p| kv.key.starts_with(p));
            assert!(!http, "{} on a database span", kv.key);
        }
    }
    assert_eq!(spans[0].status.as_ref().map(|st| (st.code, st.message.as_str())), Some((0, "")));
    assert_eq!(spans[1].status.as_ref().map(|st| (st.code, st.message.as_str())), Some((2, "")), "ERROR, no message");
    // The SDK path writes the same.
    let want = reference::trace_requests(&Spans::of_own(&b), &[]);
    assert_eq!(want[0].resource_spans[0].scope_spans[0].spans, *spans);
}

#[test]
fn database_calls_are_exported_as_db_client_operation_duration() {
    let registry = Registry::new(Component::ExporterActor, 1);
    let mut m = Meters::new(vec![], "host", &registry);
    let mut http_client = span(SpanKind::Client);
    http_client.error = false;
    http_mut(&mut http_client).status = 200;
    let spans = vec![db_span(3, None), db_span(30, None), db_span(2, Some("42601")), http_client];
    m.record_batch_at(&Spans::of_own(&SpanBatch::of(vec![resource("shop", 1, &[])], &spans)), 1);
    let requests = m.view().read(|m| metrics::encode(m, 2));
    let req = ExportMetricsServiceRequest::decode(requests[0].as_slice()).unwrap();
    let ms = &req.resource_metrics[0].scope_metrics[0].metrics;
    let summary: Vec<_> = ms.iter().map(|m| (m.name.as_str(), m.unit.as_str(), m.description.as_str())).collect();
    assert_eq!(
        summary,
        [
            ("http.client.request.duration", "s", "Duration of HTTP client requests."),
            ("db.client.operation.duration", "s", "Duration of database client operations."),
        ]
    );
    let Some(metric::Data::Histogram(http)) = &ms[0].data else { panic!("{:?}", ms[0]) };
    assert_eq!(http.data_points.iter().map(|p| p.count).sum::<u64>(), 1, "database calls are not HTTP requests");
    let Some(metric::Data::Histogram(h)) = &ms[1].data else { panic!("{:?}", ms[1]) };
    assert_eq!(h.aggregation_temporality, 2);
    let points = points_by_attributes(&h.data_points);
    assert_eq!(points.len(), 2, "{points:?}");
    let attrs = |extra: &[KeyValue]| {
        let mut v = vec![
            str_kv("db.collection.name", "users"),
            str_kv("db.namespace", "shop"),
            str_kv("db.operation.name", "SELECT"),
            str_kv("db.query.summary", "SELECT users"),
            str_kv("db.system.name", "postgresql"),
            str_kv("server.address", "db.internal"),
            int_kv("server.port", 5432),
        ];
        v.extend_from_slice(extra);
        sorted(v)
    };
    let ok = points.iter().find(|(a, _)| *a == attrs(&[])).map(|(_, p)| *p).expect("the OK series");
    assert_eq!(ok.attributes, attrs(&[]), "written sorted by key");
    assert_eq!((ok.count, ok.sum, ok.min, ok.max), (2, Some(0.033), Some(0.003), Some(0.03)));
    assert_eq!(ok.explicit_bounds, ipc_schema::db::BUCKETS);
    assert_eq!(ok.bucket_counts, [0, 1, 0, 1, 0, 0, 0, 0, 0, 0], "3 ms in (0.001, 0.005], 30 ms in (0.01, 0.05]");
    let failed = attrs(&[str_kv("db.response.status_code", "42601"), str_kv("error.type", "42601")]);
    let err = points.iter().find(|(a, _)| *a == failed).map(|(_, p)| *p).expect("the failed series");
    assert_eq!(err.count, 1);
    assert!(!h.data_points.iter().flat_map(|p| &p.attributes).any(|kv| kv.key == "db.query.text"), "one series a statement");
}

/// The service graph and span metrics go on ringtail's own resource, named
/// as OBI names them over OTLP: the counters with `_total`, the histograms
/// without their unit (`s`), OBI's buckets; labels Tempo's.
#[test]
fn the_service_graph_and_span_metrics_are_obis_over_otlp() {
    let registry = Registry::new(Component::ExporterActor, 1);
    let mut m = Meters::new(vec![], "host", &registry).derive(crate::meters::Derived { service_graph: true, span_metrics: true });
    let mut served = crate::meters::tests::span("/b", 30, 503);
    served.edge = Some(ipc_schema::Edge { peer_service: "front".into(), peer_duration_ns: 40_000_000, peer_error: false });
    let ok = crate::meters::tests::span("/b", 3, 200);
    m.record_batch_at(&Spans::of_own(&SpanBatch::of(vec![resource("back", 1, &[])], &[served, ok])), 5);
    let requests = m.view().read(|m| metrics::encode(m, 9));
    let req = ExportMetricsServiceRequest::decode(requests[0].as_slice()).unwrap();
    let own = req
        .resource_metrics
        .iter()
        .find(|rm| rm.resource.as_ref().is_some_and(|r| r.attributes.contains(&str_kv("service.name", "ringtail"))))
        .expect("ringtail's own resource");
    let ms = &own.scope_metrics[0].metrics;
    let names: Vec<_> = ms.iter().map(|m| (m.name.as_str(), m.unit.as_str())).collect();
    assert_eq!(
        names,
        [
            ("traces_service_graph_request_total", ""),
            ("traces_service_graph_request_failed_total", ""),
            ("traces_service_graph_request_server", "s"),
            ("traces_service_graph_request_client", "s"),
            ("traces_span_metrics_calls_total", ""),
            ("traces_span_metrics_duration", "s"),
        ]
    );
    let edge = vec![str_kv("client", "front"), str_kv("server", "back"), str_kv("connection_type", "")];
    let value = |i: usize| {
        let Some(metric::Data::Sum(sum)) = &ms[i].data else { panic!("{:?}", ms[i]) };
        assert!(sum.is_monotonic && sum.aggregation_temporality == 2);
        assert_eq!(sum.data_points.len(), 1);
        assert_eq!(sum.data_points[0].attributes, edge);
        assert_eq!((sum.data_points[0].start_time_unix_nano, sum.data_points[0].time_unix_nano), (5, 9));
        sum.data_points[0].value
    };
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsDouble;
    assert_eq!((value(0), value(1)), (Some(AsDouble(1.0)), Some(AsDouble(1.0))), "one call, failed at the server");
    let hist = |i: usize| {
        let Some(metric::Data::Histogram(h)) = &ms[i].data else { panic!("{:?}", ms[i]) };
        h.data_points.clone()
    };
    let (server, client) = (hist(2), hist(3));
    assert_eq!((server[0].count, server[0].sum, client[0].sum), (1, Some(0.03), Some(0.04)));
    assert_eq!(server[0].attributes, edge);
    assert_eq!(server[0].explicit_bounds, crate::meters::graph::BUCKETS);
    let Some(metric::Data::Sum(calls)) = &ms[4].data else { panic!("{:?}", ms[4]) };
    let mut by: Vec<(Vec<KeyValue>, f64)> = calls
        .data_points
        .iter()
        .map(|p| {
            let Some(AsDouble(v)) = p.value else { panic!("{p:?}") };
            (p.attributes.clone(), v)
        })
        .collect();
    by.sort_by(|a, b| format!("{:?}", a.0).cmp(&format!("{:?}", b.0)));
    let labels = |status: &str| {
        vec![
            str_kv("service", "back"),
            str_kv("span_name", "GET /b"),
            str_kv("span_kind", "SPAN_KIND_SERVER"),
            str_kv("status_code", status),
        ]
    };
    assert_eq!(by, [(labels("STATUS_CODE_ERROR"), 1.0), (labels("STATUS_CODE_UNSET"), 1.0)]);
    assert_eq!(hist(5).iter().map(|p| p.count).sum::<u64>(), 2);
}
