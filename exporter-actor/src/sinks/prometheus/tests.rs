use std::collections::BTreeMap;

use ipc_schema::{Component, HealthReport, MetricPoint, ServiceResource, Span, SpanBatch};
use runtime_kit::counters::Registry;

use super::exposition;
use super::render::{render_health, sanitize};
use crate::batch::Spans;
use crate::meters::Meters;

fn res() -> ServiceResource {
    crate::meters::tests::res("shop")
}

/// A server span of `ms` milliseconds on route `/x`.
fn span(ms: u64, status: u16) -> Span {
    crate::meters::tests::span("/x", ms, status)
}

#[test]
fn histograms_follow_the_otel_prometheus_names() {
    let registry = Registry::new(Component::ExporterActor, 1);
    let mut m = Meters::new(vec![], "h", &registry);
    m.record(&res(), &span(3, 200)); // 0.003 s: first bucket
    m.record(&res(), &span(30, 200)); // 0.03 s
    m.record(&res(), &span(20_000, 500)); // beyond the last bound
    let mut ignored = span(1, 200);
    ignored.export_metrics = false;
    m.record(&res(), &ignored);
    let text = exposition(&m.view());
    assert!(text.contains("# TYPE http_server_request_duration_seconds histogram"), "{text}");
    let ok = "http_server_request_duration_seconds_bucket{service_name=\"shop\",service_instance_id=\"h:1\"";
    let line = |needle: &str| {
        text.lines().find(|l| l.starts_with(ok) && l.contains(needle)).unwrap_or_else(|| panic!("{needle} in\n{text}")).to_owned()
    };
    assert!(line("http_response_status_code=\"200\"").contains("http_route=\"/x\""));
    assert!(text.lines().any(|l| l.starts_with(ok) && l.contains("status_code=\"200\"") && l.contains("le=\"0.005\"} 1")), "{text}");
    assert!(text.lines().any(|l| l.starts_with(ok) && l.contains("status_code=\"200\"") && l.contains("le=\"+Inf\"} 2")), "{text}");
    assert!(text.lines().any(|l| l.contains("error_type=\"500\"") && l.contains("le=\"10\"} 0")), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("http_server_request_duration_seconds_count{")
            && l.contains("status_code=\"200\"")
            && l.ends_with(" 2")),
        "{text}"
    );
    assert!(!text.contains("url_path"), "url.path is unbounded and never a label");
}

#[test]
fn health_points_keep_their_names() {
    let mut reports = BTreeMap::new();
    reports.insert(
        Component::ProbeLoader,
        HealthReport {
            component: Component::ProbeLoader,
            instance: 1,
            points: vec![MetricPoint::counter(
                "ringtail_dropped_events_total",
                &[("component", "probe-loader"), ("reason", "ring_full")],
                3,
            )],
        },
    );
    let mut out = String::new();
    render_health(&reports, &mut out);
    assert!(out.contains("# TYPE ringtail_dropped_events_total counter"));
    assert!(out.contains("ringtail_dropped_events_total{component=\"probe-loader\",reason=\"ring_full\"} 3"), "{out}");
}

#[test]
fn names_are_sanitized() {
    assert_eq!(sanitize("http.server.request.duration"), "http_server_request_duration");
    assert_eq!(sanitize("9lives"), "_9lives");
}

#[test]
fn process_past_the_cap_gets_metrics_the_least_recent_goes() {
    use crate::meters::MAX_SERVICES;
    let registry = Registry::new(Component::ExporterActor, 1);
    let mut m = Meters::new(vec![], "h", &registry);
    let proc = |pid: u32| ServiceResource { pid, service_instance_id: format!("h:{pid}"), ..res() };
    let at = |m: &mut Meters, pid: u32, t: u64| {
        m.record_batch_at(&Spans::of_own(&SpanBatch::of(vec![proc(pid)], &[span(3, 200)])), t);
    };
    for pid in 1..=MAX_SERVICES as u32 {
        at(&mut m, pid, u64::from(pid));
    }
    let t = MAX_SERVICES as u64;
    at(&mut m, 1, t + 1); // pid 1 is used again: pid 2 is now the oldest
    at(&mut m, MAX_SERVICES as u32 + 1, t + 2);
    assert_eq!(m.view().read(|m| m.services().count()), MAX_SERVICES);
    let text = exposition(&m.view());
    let has = |pid: u32| text.contains(&format!("service_instance_id=\"h:{pid}\""));
    assert!(has(MAX_SERVICES as u32 + 1), "process 1,025 gets metrics");
    assert!(has(1) && has(3));
    assert!(!has(2), "the least recently used was evicted");
    let evicted: f64 =
        registry.report().points.iter().filter(|p| p.name == "ringtail_metric_services_evicted_total").map(|p| p.value).sum();
    assert_eq!(evicted, 1.0);
}

#[test]
fn rpc_histograms_are_named_with_their_units() {
    use crate::meters::tests::grpc_span;
    use ipc_schema::SpanKind;
    let registry = Registry::new(Component::ExporterActor, 1);
    let mut m = Meters::new(vec![], "h", &registry);
    for _ in 0..3 {
        m.record(&res(), &grpc_span(SpanKind::Server, 3, true, true, "demo.Items/Get", 0));
    }
    m.record(&res(), &grpc_span(SpanKind::Client, 30, true, false, "demo.Items/List", 0));
    let text = exposition(&m.view());
    assert!(!text.contains("http_server_request_duration"), "{text}");
    assert!(text.contains("# TYPE rpc_server_call_duration_seconds histogram"), "{text}");
    assert!(text.contains("# HELP rpc_server_duration_milliseconds Measures the duration of inbound RPC."), "{text}");
    let base = "service_name=\"shop\",service_instance_id=\"h:1\"";
    let lines = [
        format!("rpc_server_call_duration_seconds_count{{{base},rpc_method=\"demo.Items/Get\",rpc_response_status_code=\"OK\",rpc_system_name=\"grpc\"}} 3"),
        format!("rpc_server_call_duration_seconds_bucket{{{base},rpc_method=\"demo.Items/Get\",rpc_response_status_code=\"OK\",rpc_system_name=\"grpc\",le=\"0.005\"}} 3"),
        format!("rpc_server_duration_milliseconds_bucket{{{base},rpc_grpc_status_code=\"0\",rpc_method=\"Get\",rpc_service=\"demo.Items\",rpc_system=\"grpc\",le=\"0\"}} 0"),
        format!("rpc_server_duration_milliseconds_bucket{{{base},rpc_grpc_status_code=\"0\",rpc_method=\"Get\",rpc_service=\"demo.Items\",rpc_system=\"grpc\",le=\"5\"}} 3"),
        format!("rpc_server_duration_milliseconds_sum{{{base},rpc_grpc_status_code=\"0\",rpc_method=\"Get\",rpc_service=\"demo.Items\",rpc_system=\"grpc\"}} 9"),
        format!("rpc_client_call_duration_seconds_count{{{base},rpc_method=\"demo.Items/List\",rpc_response_status_code=\"OK\",rpc_system_name=\"grpc\",server_address=\"api\",server_port=\"50051\"}} 1"),
    ];
    for l in &lines {
        assert!(text.lines().any(|t| t == l), "{l} in\n{text}");
    }
    assert!(!text.contains("rpc_client_duration"), "the client span had only the stable set: {text}");
}

#[test]
fn database_calls_are_db_client_operation_duration_seconds() {
    use crate::meters::tests::db_span;
    let registry = Registry::new(Component::ExporterActor, 1);
    let mut m = Meters::new(vec![], "h", &registry);
    m.record(&res(), &db_span(3, None));
    m.record(&res(), &db_span(30, None));
    m.record(&res(), &db_span(2, Some("42601")));
    let text = exposition(&m.view());
    assert!(!text.contains("http_client_request_duration"), "a database call is not an HTTP request: {text}");
    assert!(text.contains("# HELP db_client_operation_duration_seconds Duration of database client operations."), "{text}");
    assert!(text.contains("# TYPE db_client_operation_duration_seconds histogram"), "{text}");
    let base = "service_name=\"shop\",service_instance_id=\"h:1\",db_collection_name=\"users\",db_namespace=\"shop\",db_operation_name=\"SELECT\",db_query_summary=\"SELECT users\"";
    let server = "server_address=\"db.internal\",server_port=\"5432\"";
    let lines = [
        format!("db_client_operation_duration_seconds_bucket{{{base},db_system_name=\"postgresql\",{server},le=\"0.001\"}} 0"),
        format!("db_client_operation_duration_seconds_bucket{{{base},db_system_name=\"postgresql\",{server},le=\"0.005\"}} 1"),
        format!("db_client_operation_duration_seconds_bucket{{{base},db_system_name=\"postgresql\",{server},le=\"0.05\"}} 2"),
        format!("db_client_operation_duration_seconds_bucket{{{base},db_system_name=\"postgresql\",{server},le=\"+Inf\"}} 2"),
        format!("db_client_operation_duration_seconds_sum{{{base},db_system_name=\"postgresql\",{server}}} 0.033"),
        format!("db_client_operation_duration_seconds_count{{{base},db_system_name=\"postgresql\",{server}}} 2"),
        format!("db_client_operation_duration_seconds_count{{{base},db_response_status_code=\"42601\",db_system_name=\"postgresql\",error_type=\"42601\",{server}}} 1"),
    ];
    for l in &lines {
        assert!(text.lines().any(|t| t == l), "{l} in\n{text}");
    }
    assert_eq!(text.lines().filter(|l| l.starts_with("db_client_operation_duration_seconds_count")).count(), 2, "{text}");
    assert!(!text.contains("db_query_text"), "{text}");
}

#[test]
fn messaging_calls_are_a_duration_histogram_and_total_counters() {
    use crate::meters::tests::msg_span;
    let registry = Registry::new(Component::ExporterActor, 1);
    let mut m = Meters::new(vec![], "h", &registry);
    m.record(&res(), &msg_span(3, Some("send"), Some(4), None));
    m.record(&res(), &msg_span(30, Some("send"), None, None));
    m.record(&res(), &msg_span(2, Some("receive"), Some(7), None));
    let text = exposition(&m.view());
    assert!(!text.contains("http_client_request_duration"), "a messaging call is not an HTTP request: {text}");
    for l in [
        "# HELP messaging_client_operation_duration_seconds Duration of messaging operation initiated by a producer or consumer client.",
        "# TYPE messaging_client_operation_duration_seconds histogram",
        "# HELP messaging_client_sent_messages_total Number of messages producer attempted to send to the broker.",
        "# TYPE messaging_client_sent_messages_total counter",
        "# TYPE messaging_client_consumed_messages_total counter",
    ] {
        assert!(text.lines().any(|t| t == l), "{l} in\n{text}");
    }
    let base = "service_name=\"shop\",service_instance_id=\"h:1\"";
    let dest = "messaging_destination_name=\"orders\",messaging_destination_partition_id=\"0\"";
    let server = "messaging_system=\"kafka\",server_address=\"10.0.0.9\",server_port=\"9092\"";
    let lines = [
        format!("messaging_client_operation_duration_seconds_bucket{{{base},{dest},messaging_operation_name=\"send\",messaging_operation_type=\"send\",{server},le=\"0.005\"}} 1"),
        format!("messaging_client_operation_duration_seconds_count{{{base},{dest},messaging_operation_name=\"send\",messaging_operation_type=\"send\",{server}}} 2"),
        format!("messaging_client_sent_messages_total{{{base},{dest},messaging_operation_name=\"send\",{server}}} 5"),
        format!("messaging_client_consumed_messages_total{{{base},messaging_consumer_group_name=\"billing\",{dest},messaging_operation_name=\"poll\",{server}}} 7"),
    ];
    for l in &lines {
        assert!(text.lines().any(|t| t == l), "{l} in\n{text}");
    }
    assert!(!text.contains("messaging_client_id") && !text.contains("messaging_kafka"), "{text}");
}

/// The service graph and span metrics under Tempo's and OBI's Prometheus
/// names, with their own labels only (no `service_name`), the overflow
/// series as the others'.
#[test]
fn the_service_graph_and_span_metrics_have_tempos_names_and_labels() {
    let registry = Registry::new(Component::ExporterActor, 1);
    let mut m = Meters::new(vec![], "h", &registry).derive(crate::meters::Derived { service_graph: true, span_metrics: true });
    let mut served = span(3, 200);
    served.edge = Some(ipc_schema::Edge { peer_service: "front".into(), peer_duration_ns: 7_000_000, peer_error: true });
    let db = crate::meters::tests::db_span(20, None);
    m.record_batch_at(&Spans::of_own(&SpanBatch::of(vec![res()], &[served.clone(), served, db])), 1);
    let text = exposition(&m.view());
    let edge = "client=\"front\",server=\"shop\",connection_type=\"\"";
    let db_edge = "client=\"shop\",server=\"db.internal\",connection_type=\"database\"";
    for want in [
        "# TYPE traces_service_graph_request_total counter".to_owned(),
        format!("traces_service_graph_request_total{{{edge}}} 2"),
        format!("traces_service_graph_request_failed_total{{{edge}}} 2"),
        format!("traces_service_graph_request_total{{{db_edge}}} 1"),
        format!("traces_service_graph_request_failed_total{{{db_edge}}} 0"),
        "# TYPE traces_service_graph_request_server_seconds histogram".to_owned(),
        format!("traces_service_graph_request_server_seconds_bucket{{{edge},le=\"0.005\"}} 2"),
        format!("traces_service_graph_request_client_seconds_bucket{{{edge},le=\"0.005\"}} 0"),
        format!("traces_service_graph_request_client_seconds_bucket{{{edge},le=\"0.01\"}} 2"),
        format!("traces_service_graph_request_client_seconds_count{{{edge}}} 2"),
        format!("traces_service_graph_request_server_seconds_sum{{{db_edge}}} 0.02"),
        "traces_span_metrics_calls_total{service=\"shop\",span_name=\"GET /x\",span_kind=\"SPAN_KIND_SERVER\",status_code=\"STATUS_CODE_UNSET\"} 2".to_owned(),
        "traces_span_metrics_calls_total{service=\"shop\",span_name=\"SELECT users\",span_kind=\"SPAN_KIND_CLIENT\",status_code=\"STATUS_CODE_UNSET\"} 1".to_owned(),
        "# TYPE traces_span_metrics_duration_seconds histogram".to_owned(),
        "traces_span_metrics_duration_seconds_count{service=\"shop\",span_name=\"GET /x\",span_kind=\"SPAN_KIND_SERVER\",status_code=\"STATUS_CODE_UNSET\"} 2".to_owned(),
    ] {
        assert!(text.lines().any(|l| l == want), "{want}\nnot in\n{text}");
    }
    assert!(!text.lines().any(|l| l.starts_with("traces_") && l.contains("service_name=")), "{text}");
    // Off: none of them.
    let mut off = Meters::new(vec![], "h", &registry).derive(crate::meters::Derived { service_graph: false, span_metrics: false });
    let mut served = span(3, 200);
    served.edge = Some(ipc_schema::Edge { peer_service: "front".into(), peer_duration_ns: 7_000_000, peer_error: true });
    off.record(&res(), &served);
    assert!(!exposition(&off.view()).contains("traces_"), "{}", exposition(&off.view()));
}
