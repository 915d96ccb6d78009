//! The exporter against real receivers: OTLP over gRPC and HTTP/protobuf
//! (rotel), a real Prometheus scraping `/metrics`, and a receiver outage.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ringtail_tests::*;

fn rust_server(port: u16) -> Proc {
    server("rust server", port, &bin_dir().join("rust_http_server"), &[&port.to_string()])
}

fn config(port: u16, otlp: &str) -> String {
    format!(
        "[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nopen_ports = [{port}]\n[export]\nstdout = false\n{otlp}"
    )
}

/// The `http.server.request.duration` points rotel received last, by route.
fn duration_counts(rotel: &Rotel, service: &str) -> BTreeMap<String, u64> {
    let mut latest: BTreeMap<String, u64> = BTreeMap::new();
    for m in rotel.metrics() {
        if m["name"] != "http.server.request.duration" || res_attr(&m, "service.name").as_deref() != Some(service) {
            continue;
        }
        for p in m["points"].as_array().into_iter().flatten() {
            let route = p["attributes"]["http.route"].as_str().unwrap_or("").to_owned();
            let count = p["count"].as_u64().unwrap_or(0);
            // cumulative: the latest export has the largest count
            let e = latest.entry(route).or_default();
            *e = (*e).max(count);
        }
    }
    latest
}

fn traces_and_metrics_reach_rotel(protocol: &str) {
    if !can_trace() || !Rotel::available() {
        return;
    }
    let rotel = Rotel::start();
    let port = free_port();
    let (endpoint, proto) = match protocol {
        "grpc" => (format!("http://127.0.0.1:{}", rotel.grpc), "grpc"),
        _ => (format!("http://127.0.0.1:{}", rotel.http), "http/protobuf"),
    };
    let rt = Ringtail::start(&config(
        port,
        &format!("[export.otlp]\nendpoint = \"{endpoint}\"\nprotocol = \"{proto}\"\nmetrics_interval = \"1s\"\n"),
    ));
    let _srv = rust_server(port);
    for i in 0..5 {
        assert_eq!(http_get(port, &format!("/items/{}", 100 + i), &[]).unwrap().status, 200);
    }
    assert_eq!(http_get(port, "/status/503", &[]).unwrap().status, 503);
    let spans = wait_until(Duration::from_secs(30), || {
        let s: Vec<Value> = rotel.spans().into_iter().filter(|s| attr(s, "server.port") == Some(port.to_string())).collect();
        (s.len() >= 6).then_some(s)
    })
    .unwrap_or_else(|| panic!("spans over {protocol}: {:?}\n{}", rotel.spans(), rt.log()));
    assert_eq!(spans.len(), 6);
    for s in &spans {
        assert_eq!(s["scope"], "ringtail");
        assert_eq!(res_attr(s, "service.name").as_deref(), Some("rust_http_server"));
        assert_eq!(res_attr(s, "telemetry.sdk.name").as_deref(), Some("ringtail"));
        assert!(res_attr(s, "host.name").is_some() && res_attr(s, "service.instance.id").is_some());
    }
    let err = spans.iter().find(|s| attr(s, "url.path").as_deref() == Some("/status/503")).unwrap();
    assert!(
        err["status"].as_str().unwrap_or_default().contains('2')
            || err["status"].as_str().unwrap_or_default().to_lowercase().contains("error"),
        "{err}"
    );
    // Histograms, by route (the heuristic route collapses the ids).
    let counts = wait_until(Duration::from_secs(20), || {
        let c = duration_counts(&rotel, "rust_http_server");
        (c.get("/items/*") == Some(&5)).then_some(c)
    })
    .unwrap_or_else(|| panic!("metrics over {protocol}: {:#?}", rotel.metrics().iter().map(|m| m["name"].clone()).collect::<Vec<_>>()));
    assert_eq!(counts.get("/status/*"), Some(&1), "{counts:?}");
    // ringtail's own metrics travel too (as a monotonic sum, `_total` dropped).
    let own = wait_until(Duration::from_secs(10), || {
        rotel
            .metrics()
            .into_iter()
            .find(|m| m["name"] == "ringtail_kernel_events" && res_attr(m, "service.name").as_deref() == Some("ringtail"))
    });
    assert!(
        own.is_some(),
        "self metrics: {:?}",
        rotel.metrics().iter().map(|m| m["name"].to_string()).collect::<std::collections::BTreeSet<_>>()
    );
}

#[test]
fn otlp_grpc_traces_and_metrics() {
    traces_and_metrics_reach_rotel("grpc");
}

#[test]
fn otlp_http_protobuf_traces_and_metrics() {
    traces_and_metrics_reach_rotel("http");
}

#[test]
fn otel_environment_variables_override_the_file() {
    if !can_trace() || !Rotel::available() {
        return;
    }
    let rotel = Rotel::start();
    let port = free_port();
    let dead = free_port();
    let rt = Ringtail::start_with_env(
        &config(port, &format!("[export.otlp]\nendpoint = \"http://127.0.0.1:{dead}\"\nprotocol = \"grpc\"\n")),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &format!("http://127.0.0.1:{}", rotel.http)),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci,team=obs"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "1000"),
        ],
    );
    let _srv = rust_server(port);
    assert_eq!(http_get(port, "/env", &[]).unwrap().status, 200);
    let span = wait_until(Duration::from_secs(30), || rotel.spans().into_iter().find(|s| attr(s, "url.path").as_deref() == Some("/env")))
        .unwrap_or_else(|| panic!("no span via the environment's endpoint:\n{}", rt.log()));
    assert_eq!(res_attr(&span, "deployment.environment").as_deref(), Some("ci"));
    assert_eq!(res_attr(&span, "team").as_deref(), Some("obs"));
}

#[test]
fn prometheus_scrapes_the_histograms_and_health() {
    if !can_trace() || !have("prometheus") {
        return;
    }
    let port = free_port();
    let metrics = free_port();
    let rt = Ringtail::start(&config(port, &format!("[export.prometheus]\nlisten = \"127.0.0.1:{metrics}\"\n")));
    let _srv = rust_server(port);
    for i in 0..7 {
        assert_eq!(http_get(port, &format!("/users/{i}"), &[]).unwrap().status, 200);
    }
    let dir = TempDir::new("prom");
    std::fs::write(
        dir.join("prometheus.yml"),
        format!("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: ringtail\n    static_configs:\n      - targets: ['127.0.0.1:{metrics}']\n"),
    )
    .unwrap();
    let web = free_port();
    let _prom = Proc::spawn(
        "prometheus",
        Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    assert!(wait_port(web, Duration::from_secs(30)), "prometheus did not start");
    let query = |q: &str| -> Option<f64> {
        let enc: String = q
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() || b"_.-".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect();
        let r = http_get(web, &format!("/api/v1/query?query={enc}"), &[]).ok()?;
        let v: Value = serde_json::from_slice(&r.body).ok()?;
        v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    };
    let q = r#"sum(http_server_request_duration_seconds_count{http_route="/users/*",service_name="rust_http_server"})"#;
    let got = wait_until(Duration::from_secs(30), || query(q).filter(|v| *v == 7.0));
    assert_eq!(got, Some(7.0), "PromQL {q}: {:?}\n/metrics:\n{}", query(q), scrape(metrics));
    let q2 = r#"sum(http_server_request_duration_seconds_bucket{http_route="/users/*",le="+Inf"})"#;
    assert_eq!(query(q2), Some(7.0));
    let events = wait_until(Duration::from_secs(10), || query("ringtail_kernel_events_total").filter(|v| *v >= 7.0));
    assert!(events.is_some(), "health metrics scraped");
    assert!(query(r#"ringtail_dropped_events_total{reason="ring_full"}"#).is_some());
    drop(rt);
}

#[test]
fn receiver_outage_keeps_what_fits_counts_the_rest_and_survives() {
    if !can_trace() || !Rotel::available() {
        return;
    }
    let mut rotel = Rotel::start();
    let port = free_port();
    let prom = free_port();
    let queue = 40;
    let rt = Ringtail::start(&config(
        port,
        &format!(
            "queue_size = {queue}\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n[export.otlp]\nendpoint = \"http://127.0.0.1:{}\"\nmetrics = false\n[export.otlp.retry]\ninitial_backoff = \"200ms\"\nmax_backoff = \"2s\"\nmax_elapsed = \"120s\"\n",
            rotel.grpc
        ),
    ));
    let _srv = rust_server(port);
    let exporter = rt.pid("exporter-actor").unwrap();
    assert_eq!(http_get(port, "/before", &[]).unwrap().status, 200);
    wait_until(Duration::from_secs(20), || rotel.spans().iter().any(|s| attr(s, "url.path").as_deref() == Some("/before")).then_some(()))
        .expect("first span delivered");

    rotel.kill();
    let down = Instant::now();
    let mut sent = 0;
    // 30 s of outage with traffic: far more spans than the queue holds.
    while down.elapsed() < Duration::from_secs(30) {
        for _ in 0..10 {
            assert_eq!(http_get(port, &format!("/during/{sent}"), &[]).unwrap().status, 200);
            sent += 1;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let rss_kb = std::fs::read_to_string(format!("/proc/{exporter}/status")).unwrap();
    rotel.restart();
    let during = |r: &Rotel| {
        let mut ids: Vec<String> = r.spans().iter().filter_map(|s| attr(s, "url.path")).filter(|p| p.starts_with("/during/")).collect();
        ids.sort();
        ids.dedup();
        ids.len()
    };
    let dropped = || metric(&scrape(prom), "ringtail_dropped_spans_total", &[("reason", "queue_full")]) as usize;
    // Everything is accounted for: delivered after the outage, or dropped and counted.
    let settled = wait_until(Duration::from_secs(60), || (during(&rotel) + dropped() >= sent).then_some(()));
    assert!(settled.is_some(), "sent {sent}, delivered {}, dropped {}", during(&rotel), dropped());
    let (delivered, dropped_n) = (during(&rotel), dropped());
    eprintln!("outage: sent {sent}, delivered {delivered}, dropped (queue_full) {dropped_n}");
    assert_eq!(delivered + dropped_n, sent, "no span unaccounted for");
    assert!(delivered >= queue / 2, "what fitted the queue arrived: {delivered}");
    assert!(dropped_n > 0, "the queue did overflow");
    assert_eq!(rt.pid("exporter-actor"), Some(exporter), "the exporter never died");
    let hwm: u64 =
        rss_kb.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0);
    assert!(hwm < 200_000, "exporter memory stayed bounded: {hwm} kB");
    // After the outage, new spans flow normally.
    assert_eq!(http_get(port, "/after", &[]).unwrap().status, 200);
    wait_until(Duration::from_secs(20), || rotel.spans().iter().any(|s| attr(s, "url.path").as_deref() == Some("/after")).then_some(()))
        .expect("spans flow after the outage");
}
