//! Every attribute key and metric name ringtail emits is one of the
//! OpenTelemetry semantic conventions' own, checked against the
//! conventions' registry as they ship it (the PyPI package
//! `opentelemetry-semantic-conventions`, pinned in `ringtail.sh`'s
//! `test_deps`, read by `tests/fixtures/semconv_registry.py`), or one of
//! ringtail's own keys listed in [`OWN`] and [`OWN_METRIC_LABELS`] below.
//!
//! A real ringtail exports to a real OTLP receiver (rotel) what real
//! programs did: HTTP/1.1 server and client spans (curl against hypercorn:
//! a query, an error status, an unknown method), HTTP/2 ones (curl's
//! `Upgrade: h2c`), gRPC calls that end OK and NOT_FOUND (grpcio at
//! both ends), and database calls (redis-cli against a redis-server of the
//! test's own, `probe.stream_ports`: a SET, a GET and a command the server
//! refuses), with a one-second metrics interval. Every key that reaches
//! the receiver is collected: span attributes, resource attributes (of
//! spans and of metrics), metric names, metric data-point attributes. Run
//! once with the stable conventions and once with
//! `OTEL_SEMCONV_STABILITY_OPT_IN=rpc/dup` in the span-actor's environment
//! (which adds the older RPC set). A key the conventions do not have (a
//! typo, a name of a draft that never shipped) fails the test with the
//! key, where it was seen, and the registry's version.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use ringtail_tests::*;

/// ringtail's own keys, which the conventions do not define, each with
/// why. This is the whole list: a key emitted that is neither here nor in
/// the registry fails the test. (README, "What you get", points here.)
const OWN: &[(&str, &str)] = &[
    // The OpenTelemetry metrics SDK specification's attribute of the
    // series past a cardinality limit ("Cardinality limits"): defined by
    // the SDK specification, not by the conventions' registry.
    ("otel.metric.overflow", "the overflow series of a histogram past its series limit (SDK specification)"),
];

/// Attribute keys of ringtail's own health metrics (the `ringtail_*`
/// names, Prometheus-style, see docs/telemetry.md): labels of
/// ringtail's counters, allowed on those metrics only.
const OWN_METRIC_LABELS: &[(&str, &str)] = &[
    ("component", "the ringtail process that counted it"),
    ("reason", "why something was dropped or refused"),
    ("socket", "which of ringtail's own sockets"),
    ("program", "which of ringtail's eBPF programs"),
    ("backend", "which capture backend runs"),
];

/// Metric names that are not the conventions' but Grafana Tempo's metrics
/// generator's, as OBI also emits them (over OTLP the histograms without
/// their unit's suffix), with the labels each carries: the service graph
/// and span metrics (docs/telemetry.md, "Service graph and span metrics").
/// Grafana's service graph and its span-metrics panels read exactly these
/// names and labels, so they are kept as those tools write them.
const OWN_METRICS: &[(&str, &[&str])] = &[
    ("traces_service_graph_request_total", &["client", "server", "connection_type"]),
    ("traces_service_graph_request_failed_total", &["client", "server", "connection_type"]),
    ("traces_service_graph_request_server", &["client", "server", "connection_type"]),
    ("traces_service_graph_request_client", &["client", "server", "connection_type"]),
    ("traces_span_metrics_calls_total", &["service", "span_name", "span_kind", "status_code"]),
    ("traces_span_metrics_duration", &["service", "span_name", "span_kind", "status_code"]),
];

/// The prefix of ringtail's own metric names (its health counters and
/// gauges) and of any attribute key of ringtail's own.
const OWN_METRIC_PREFIX: &str = "ringtail_";
const OWN_ATTRIBUTE_PREFIX: &str = "ringtail.";

const WAIT: Duration = Duration::from_secs(30);

/// The database keys a Redis call must have made (the error's
/// `db.response.status_code` among them), and its metric: the database
/// part of the run is not vacuous.
const DB_KEYS: &[&str] =
    &["db.system.name", "db.operation.name", "db.query.text", "db.query.summary", "db.namespace", "db.response.status_code"];
const DB_METRIC: &str = "db.client.operation.duration";

/// A redis-server of the test's own on `port`, keeping nothing on disk.
fn redis_server(port: u16, dir: &TempDir) -> Proc {
    let p = Proc::spawn(
        "redis-server",
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", &dir.0.display().to_string()]),
    );
    assert!(wait_port(port, Duration::from_secs(10)), "redis-server did not listen on {port}");
    p
}

/// The registry: (version, attribute names, template prefixes, metric names).
struct Registry {
    version: String,
    attributes: BTreeSet<String>,
    templates: Vec<String>,
    metrics: BTreeSet<String>,
}

impl Registry {
    fn load() -> Option<Registry> {
        let python = venv().join("bin/python");
        let out = Command::new(&python).arg(fixture("semconv_registry.py")).output().ok()?;
        if !out.status.success() {
            skip(&format!(
                "the conventions' registry is not readable with {} (./ringtail.sh test installs opentelemetry-semantic-conventions): {}",
                python.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
            return None;
        }
        let v: Value = serde_json::from_slice(&out.stdout).expect("the registry as JSON");
        let list = |k: &str| v[k].as_array().expect(k).iter().map(|s| s.as_str().expect("a name").to_owned()).collect::<Vec<_>>();
        let r = Registry {
            version: v["version"].as_str().unwrap_or_default().to_owned(),
            attributes: list("attributes").into_iter().collect(),
            templates: list("templates"),
            metrics: list("metrics").into_iter().collect(),
        };
        // A registry read wrongly would let anything through.
        assert!(
            r.attributes.contains("http.request.method") && r.metrics.contains("http.server.request.duration"),
            "registry: {}",
            r.version
        );
        Some(r)
    }

    fn has_attribute(&self, key: &str) -> bool {
        self.attributes.contains(key)
            || self.templates.iter().any(|t| key.strip_prefix(t.as_str()).is_some_and(|rest| rest.starts_with('.')))
            || key.starts_with(OWN_ATTRIBUTE_PREFIX)
            || OWN.iter().any(|(k, _)| *k == key)
    }
}

fn keys_of(v: &Value) -> impl Iterator<Item = String> + '_ {
    v.as_object().into_iter().flat_map(|m| m.keys().cloned())
}

/// Every key the receiver got, each with one place it was seen.
fn collect(rotel: &Rotel) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut attributes = BTreeMap::new();
    let mut metrics = BTreeMap::new();
    for s in rotel.spans() {
        for k in keys_of(&s["attributes"]) {
            attributes.entry(k).or_insert_with(|| format!("span attribute ({:?})", s["name"]));
        }
        for k in keys_of(&s["resource"]) {
            attributes.entry(k).or_insert_with(|| "span resource".to_owned());
        }
    }
    for m in rotel.metrics() {
        let name = m["name"].as_str().unwrap_or_default().to_owned();
        for k in keys_of(&m["resource"]) {
            attributes.entry(k).or_insert_with(|| format!("metric resource ({name})"));
        }
        let own = name.starts_with(OWN_METRIC_PREFIX);
        let tempo = OWN_METRICS.iter().find(|(n, _)| *n == name).map_or(&[][..], |(_, labels)| *labels);
        for p in m["points"].as_array().into_iter().flatten() {
            for k in keys_of(&p["attributes"]) {
                if (own && OWN_METRIC_LABELS.iter().any(|(l, _)| *l == k)) || tempo.contains(&k.as_str()) {
                    continue;
                }
                attributes.entry(k).or_insert_with(|| format!("metric data point ({name})"));
            }
        }
        metrics.entry(name).or_insert_with(|| "metric".to_owned());
    }
    (attributes, metrics)
}

fn every_key_is_in_the_registry(opt_in: Option<&str>) {
    if !can_trace() {
        return;
    }
    for tool in ["curl", "redis-server", "redis-cli"] {
        if !have(tool) {
            skip(&format!("{tool} is not installed"));
            return;
        }
    }
    if !Rotel::available() {
        skip("the rotel OTLP receiver is not installed");
        return;
    }
    let Some(python) = venv_python("grpc, hypercorn") else { return };
    let Some(registry) = Registry::load() else { return };
    let rotel = Rotel::start();
    let (web, rpc) = (free_port(), free_port());
    let _web = server("hypercorn", web, &python, &[fixture("h2c_server.py").to_str().unwrap(), &web.to_string()]);
    let grpc_script = fixture("grpc_h2.py");
    let _rpc = server("grpc server", rpc, &python, &[grpc_script.to_str().unwrap(), "server", &rpc.to_string()]);
    let (db, db_dir) = (free_port(), TempDir::new("redis"));
    let _db = redis_server(db, &db_dir);
    let env: Vec<(&str, &str)> = opt_in.map(|v| ("OTEL_SEMCONV_STABILITY_OPT_IN", v)).into_iter().collect();
    // The socket backend: the only one that follows grpcio's writes (see h2.rs).
    let rt = Ringtail::start_with_env(
        &format!(
            "[probe]\nbackend = \"socket\"\nflush_interval = \"20ms\"\nstream_ports = [{db}]\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nopen_ports = [{web}, {rpc}]\nexe_names = [\"^curl$\", \"^python\", \"^redis-cli$\"]\n[metrics]\nspan_metrics = true\n[export]\nstdout = true\n[export.otlp]\nendpoint = \"http://127.0.0.1:{}\"\nprotocol = \"grpc\"\nmetrics_interval = \"1s\"\n",
            rotel.grpc
        ),
        &env,
    );
    let url = format!("http://127.0.0.1:{web}");
    // HTTP/1.1: a query, an error status, a method the conventions call _OTHER.
    for args in [vec!["--http1.1", "-o", "/dev/null"], vec!["--http1.1", "-o", "/dev/null", "-X", "PURGE"]] {
        let target = if args.contains(&"PURGE") { format!("{url}/cache") } else { format!("{url}/items/7?x=1") };
        let st = Command::new("curl").arg("-s").args(&args).arg(&target).status().unwrap();
        assert!(st.success());
    }
    assert!(Command::new("curl").args(["-s", "--http1.1", "-o", "/dev/null", &format!("{url}/status/503")]).status().unwrap().success());
    // HTTP/2 (Upgrade: h2c), a 200 and a 404.
    let out = Command::new("curl")
        .args([
            "-s",
            "--http2",
            "-w",
            "%{http_version}\\n",
            "-o",
            "/dev/null",
            &format!("{url}/up"),
            "-o",
            "/dev/null",
            &format!("{url}/status/404"),
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().collect::<Vec<_>>(), ["2", "2"]);
    // gRPC: OK, NOT_FOUND, a server stream and two concurrent calls.
    let out = Command::new(&python).arg(&grpc_script).args(["client", &rpc.to_string(), "2"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Redis: a SET, a GET, and an LPUSH on a string, refused (WRONGTYPE).
    for (args, answer) in [(&["SET", "k", "v"][..], "OK"), (&["GET", "k"], "v"), (&["LPUSH", "k", "x"], "WRONGTYPE")] {
        let out = Command::new("redis-cli").args(["-h", "127.0.0.1", "-p", &db.to_string()]).args(args).output().unwrap();
        assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains(answer), "redis-cli: {out:?}");
    }

    // Every kind of span: 5 HTTP exchanges and 5 gRPC calls (both ends),
    // 3 Redis commands.
    let spans = wait_until(WAIT, || {
        let s = rotel.spans();
        let web_spans = s.iter().filter(|s| on_port(s, web)).count();
        let rpc_spans = s.iter().filter(|s| on_port(s, rpc)).count();
        let db_spans = s.iter().filter(|s| attr(s, "db.system.name").as_deref() == Some("redis")).count();
        (web_spans >= 10 && rpc_spans >= 10 && db_spans >= 3).then_some(s)
    })
    .unwrap_or_else(|| panic!("spans: {:?}\nstdout:\n{}", rotel.spans().iter().map(key).collect::<Vec<_>>(), rt.stdout()));
    for version in ["1.1", "2"] {
        assert!(spans.iter().any(|s| on_port(s, web) && attr(s, "network.protocol.version").as_deref() == Some(version)), "HTTP/{version}");
    }
    // ... and every metric they make, with ringtail's own.
    let mut want = vec![
        "http.server.request.duration",
        "http.client.request.duration",
        "rpc.server.call.duration",
        "rpc.client.call.duration",
        DB_METRIC,
    ];
    if opt_in == Some("rpc/dup") {
        want.extend(["rpc.server.duration", "rpc.client.duration"]);
    }
    // The service graph (curl → hypercorn and grpcio → grpcio on this host,
    // redis-cli's calls) and span metrics: Tempo's names, checked against
    // OWN_METRICS.
    let tempo = ["traces_service_graph_request_total", "traces_service_graph_request_server", "traces_span_metrics_calls_total"];
    // Each histogram has measured all 5 of its exchanges (3 database
    // calls: `count(DB_METRIC) >= 3`; each client is a process, a
    // resource, of its own; counts are cumulative: a resource's largest
    // is its latest), so every series (the error ones too) has been
    // exported.
    let count = |name: &str| {
        let mut latest: BTreeMap<String, u64> = BTreeMap::new();
        for m in rotel.metrics().iter().filter(|m| m["name"] == name) {
            let n = m["points"].as_array().into_iter().flatten().filter_map(|p| p["count"].as_u64()).sum::<u64>();
            let e = latest.entry(m["resource"].to_string()).or_default();
            *e = (*e).max(n);
        }
        latest.values().sum::<u64>()
    };
    let own = || rotel.metrics().iter().any(|m| m["name"].as_str().is_some_and(|n| n.starts_with(OWN_METRIC_PREFIX)));
    let least = |w: &str| if w == DB_METRIC { 3 } else { 5 };
    let seen = |n: &str| rotel.metrics().iter().any(|m| m["name"] == n);
    let done = wait_until(WAIT, || (want.iter().all(|w| count(w) >= least(w)) && own() && tempo.iter().all(|t| seen(t))).then_some(()));
    assert!(
        done.is_some(),
        "metrics: want 5 of each of {want:?} (3 of {DB_METRIC}), got {:?}",
        want.iter().map(|w| count(w)).collect::<Vec<_>>()
    );

    let (attributes, metrics) = collect(&rotel);
    let unknown: Vec<String> = attributes
        .iter()
        .filter(|(k, _)| !registry.has_attribute(k))
        .map(|(k, at)| format!("attribute {k:?} in a {at}"))
        .chain(
            metrics
                .keys()
                .filter(|m| !m.starts_with(OWN_METRIC_PREFIX) && !registry.metrics.contains(*m) && !OWN_METRICS.iter().any(|(n, _)| n == m))
                .map(|m| format!("metric name {m:?}")),
        )
        .collect();
    assert!(
        unknown.is_empty(),
        "not in the semantic conventions' registry (opentelemetry-semantic-conventions {}) nor ringtail's own list:\n  {}\n(keys seen: {:?})",
        registry.version,
        unknown.join("\n  "),
        attributes.keys().collect::<Vec<_>>()
    );
    // Not vacuous: the keys of every kind of span were seen.
    let seen =
        ["http.request.method", "http.request.method_original", "url.query", "error.type", "rpc.method", "client.address", "url.full"];
    for k in seen.iter().chain(DB_KEYS) {
        assert!(attributes.contains_key(*k), "{k} was never seen: {:?}", attributes.keys().collect::<Vec<_>>());
    }
    for m in want.iter().chain(&tempo) {
        assert!(metrics.contains_key(*m), "metric {m} was never seen: {:?}", metrics.keys().collect::<Vec<_>>());
    }
    println!(
        "{} attribute keys and {} metric names, all in the registry {} or ringtail's own",
        attributes.len(),
        metrics.len(),
        registry.version
    );
}

#[test]
fn stable_conventions() {
    every_key_is_in_the_registry(None);
}

#[test]
fn rpc_dup_conventions() {
    every_key_is_in_the_registry(Some("rpc/dup"));
}
