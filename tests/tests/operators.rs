//! What operators look at, end to end: the service graph and span metrics
//! of a real two-service exchange, counted exactly at a real OTLP receiver
//! and on `/metrics`; ringtail's alert rules and Grafana dashboard
//! (`deploy/`) checked by promtool, loaded into a real Prometheus that
//! scrapes a real ringtail (what should fire fires, what should not does
//! not), and every metric name they use one a real ringtail exports.
//!
//! # Layout
//! - `promql_names`: the metric names a PromQL expression reads.
//! - `Prometheus`: Debian's `prometheus`, on loopback, scraping ringtail.
//! - the tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use ringtail_tests::kube::StandIn;
use ringtail_tests::*;

/// Requests the client makes, and how many of them fail (500).
const N: usize = 40;
const FAILING: usize = 10;
const WAIT: Duration = Duration::from_secs(30);

fn deploy(p: &str) -> PathBuf {
    workspace().join("deploy").join(p)
}

/// PromQL's words that are not metric names: aggregations, operators,
/// modifiers.
const NOT_NAMES: &[&str] = &[
    "sum",
    "avg",
    "min",
    "max",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
];

/// The metric names a PromQL expression reads: identifiers that are not
/// a function's (followed by `(`), a keyword, a label of a matcher
/// (`{…}`), a range (`[…]`), a string, or in a `by`/`without`/`on`/
/// `ignoring`/`group_left`/`group_right` list.
fn promql_names(expr: &str) -> BTreeSet<String> {
    // Matchers, ranges and strings go first.
    let mut flat = String::new();
    let mut depth_brace = 0;
    let mut depth_bracket = 0;
    let mut in_string = false;
    for c in expr.chars() {
        match c {
            '"' if depth_brace == 0 => in_string = !in_string,
            _ if in_string => {}
            '{' => depth_brace += 1,
            '}' => depth_brace -= 1,
            '[' => depth_bracket += 1,
            ']' => depth_bracket -= 1,
            _ if depth_brace > 0 || depth_bracket > 0 => {}
            c => flat.push(c),
        }
    }
    let chars: Vec<char> = flat.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_digit() || c == '.' {
            // a number (0.95, 1e9): skip its letters too
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            continue;
        }
        if !(c.is_ascii_alphabetic() || c == '_' || c == ':') {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let next = chars[i..].iter().find(|c| !c.is_whitespace()).copied();
        if matches!(word.as_str(), "by" | "without" | "on" | "ignoring" | "group_left" | "group_right") && next == Some('(') {
            // skip the label list
            while i < chars.len() && chars[i] != ')' {
                i += 1;
            }
            continue;
        }
        if next == Some('(') || NOT_NAMES.contains(&word.to_ascii_lowercase().as_str()) {
            continue;
        }
        names.insert(word);
    }
    names
}

#[test]
fn promql_names_are_the_series_an_expression_reads() {
    let e = r#"histogram_quantile(0.95, sum by (client, server, le) (rate(traces_service_graph_request_server_seconds_bucket{instance=~"$instance"}[$__rate_interval])))"#;
    assert_eq!(promql_names(e), BTreeSet::from(["traces_service_graph_request_server_seconds_bucket".to_owned()]));
    let e = "sum by (instance, reason) (rate(ringtail_dropped_events_total{reason!~\".*ring_full\"}[10m]))\n  > on (instance) group_left\n0.01 * sum by (instance) (rate(ringtail_events_read_total[10m]))";
    assert_eq!(promql_names(e), BTreeSet::from(["ringtail_dropped_events_total".to_owned(), "ringtail_events_read_total".to_owned()]));
    assert_eq!(promql_names("up == 0 and on(job) absent(x_total offset 5m)"), BTreeSet::from(["up".to_owned(), "x_total".to_owned()]));
}

/// Every PromQL expression of the alert rules: (alert, expr).
fn rule_exprs() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(deploy("prometheus/ringtail-rules.yml")).expect("the rules file");
    let py = "import json,sys,yaml; d=yaml.safe_load(sys.stdin); print(json.dumps([[r['alert'], r['expr']] for g in d['groups'] for r in g['rules']]))";
    let out = Command::new(venv().join("bin/python"))
        .args(["-c", py])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().expect("stdin").write_all(text.as_bytes())?;
            c.wait_with_output()
        })
        .expect("python reads the rules");
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("the rules as JSON: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    v.as_array().expect("a list").iter().map(|r| (r[0].as_str().unwrap().to_owned(), r[1].as_str().unwrap().to_owned())).collect()
}

/// Every PromQL expression of the dashboard's panels: (panel, expr), and
/// the dashboard's own checks: JSON, unique ids, panels on the grid, every
/// query on the dashboard's Prometheus variable.
fn dashboard_exprs() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(deploy("grafana/ringtail-dashboard.json")).expect("the dashboard");
    let d: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    assert_eq!(d["uid"], "ringtail");
    let panels = d["panels"].as_array().expect("panels");
    let ids: BTreeSet<i64> = panels.iter().map(|p| p["id"].as_i64().expect("an id")).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    let mut exprs = Vec::new();
    for p in panels {
        let g = &p["gridPos"];
        assert!(g["x"].as_i64().unwrap() + g["w"].as_i64().unwrap() <= 24, "{} is off the grid", p["title"]);
        for t in p["targets"].as_array().into_iter().flatten() {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{}: a query on another datasource", p["title"]);
            exprs.push((p["title"].as_str().unwrap_or_default().to_owned(), t["expr"].as_str().expect("an expr").to_owned()));
        }
    }
    assert!(exprs.len() >= 15, "{exprs:?}");
    exprs
}

/// promtool accepts the rules, their unit tests pass, and every
/// dashboard expression parses (as a recording rule, Grafana's variables
/// given values).
#[test]
fn promtool_accepts_the_rules_their_tests_and_the_dashboards_queries() {
    if !have("promtool") {
        return;
    }
    let run = |args: &[&str], dir: &std::path::Path| {
        let out = Command::new("promtool").args(args).current_dir(dir).output().expect("promtool");
        assert!(
            out.status.success(),
            "promtool {args:?}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let dir = deploy("prometheus");
    let out = run(&["check", "rules", "ringtail-rules.yml"], &dir);
    assert!(out.contains("SUCCESS: 6 rules found"), "{out}");
    run(&["test", "rules", "ringtail-rules.test.yml"], &dir);
    // The dashboard's queries, as recording rules.
    let tmp = TempDir::new("dash");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, (_, e)) in dashboard_exprs().iter().enumerate() {
        let e = e.replace("$__rate_interval", "1m").replace("$instance", ".*");
        rules.push_str(&format!("      - record: dashboard_query_{i}\n        expr: {}\n", serde_json::to_string(&e).unwrap()));
    }
    std::fs::write(tmp.join("dashboard-rules.yml"), &rules).unwrap();
    run(&["check", "rules", "dashboard-rules.yml"], &tmp.0);
    // promtool is not lenient: a broken query fails.
    std::fs::write(
        tmp.join("broken.yml"),
        "groups:\n  - name: d\n    rules:\n      - record: x\n        expr: \"sum by (a (rate(x[1m]))\"\n",
    )
    .unwrap();
    let out = Command::new("promtool").args(["check", "rules", "broken.yml"]).current_dir(&tmp.0).output().unwrap();
    assert!(!out.status.success(), "promtool accepted a broken query");
}

/// The metric families of a Prometheus exposition, with their series'
/// names (`x_bucket`, `x_sum`, `x_count` for a histogram `x`).
fn exposition_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next().map(str::to_owned))
        .collect()
}

/// The Prometheus series names the OTLP metrics a receiver got become
/// (the OpenTelemetry-to-Prometheus translation: dots to underscores, the
/// unit `s` as `_seconds`, a monotonic sum's `_total`; histograms'
/// `_bucket`, `_sum`, `_count`).
fn otlp_as_prometheus(metrics: &[Value]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for m in metrics {
        let mut name = m["name"].as_str().unwrap_or_default().replace('.', "_");
        if m["unit"] == "s" && !name.ends_with("_seconds") {
            name.push_str("_seconds");
        }
        if m["unit"] == "ms" {
            name.push_str("_milliseconds");
        }
        match m["kind"].as_str().unwrap_or_default() {
            k if k.contains("Histogram") => {
                for s in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{s}"));
                }
            }
            k if k.contains("Sum") && !name.ends_with("_total") => {
                names.insert(format!("{name}_total"));
            }
            _ => {
                names.insert(name);
            }
        }
    }
    names
}

/// The latest value of a metric's data points at the receiver, by their
/// attributes (points are cumulative: the last push is the total).
fn otlp_latest(metrics: &[Value], name: &str) -> BTreeMap<String, Value> {
    let mut latest = BTreeMap::new();
    for m in metrics.iter().filter(|m| m["name"] == name) {
        for p in m["points"].as_array().into_iter().flatten() {
            let mut attrs: Vec<String> =
                p["attributes"].as_object().into_iter().flatten().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect();
            attrs.sort();
            latest.insert(attrs.join(","), p.clone());
        }
    }
    latest
}

/// A real client process calls a real server process N times, K of them
/// failing (500), through a real ringtail with span metrics on, to a real
/// OTLP receiver and to `/metrics`: one service-graph edge front → back
/// with exactly N calls and K failed, its two histograms' counts N and
/// sums the server and client spans' durations as the receiver got them;
/// span metrics exactly the spans by service, name, kind and status; the
/// same numbers over OTLP. Then every metric name a dashboard panel or an
/// alert rule reads is one this ringtail exported, on `/metrics` and over
/// OTLP (the Kubernetes actor runs, against the stand-in API server, so
/// that its counters are among them).
#[test]
fn service_graph_and_span_metrics_of_a_two_service_exchange_are_exact() {
    if !can_trace() || !Rotel::available() || !have("python3") {
        return;
    }
    let rotel = Rotel::start();
    let mut api = StandIn::new();
    api.start();
    let (port, prom) = (free_port(), free_port());
    let rt = Ringtail::start(&format!(
        "[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nexe_names = [\"^python3\"]\nopen_ports = [{port}]\n\
         [metrics]\nspan_metrics = true\n\
         [export.otlp]\nendpoint = \"http://127.0.0.1:{}\"\nprotocol = \"grpc\"\nmetrics_interval = \"500ms\"\n\
         [export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n\
         [kubernetes]\nkubeconfig = \"{}\"\nnode_name = \"node-a\"\n",
        rotel.grpc,
        api.kubeconfig().display()
    ));
    let script = fixture("graph_pair.py");
    let _server =
        Proc::spawn("back", Command::new("python3").arg(&script).args(["server", &port.to_string()]).env("OTEL_SERVICE_NAME", "back"));
    assert!(wait_port(port, Duration::from_secs(10)), "the server did not listen");
    let out = Command::new("python3")
        .arg(&script)
        .args(["client", &port.to_string(), &N.to_string(), &FAILING.to_string()])
        .env("OTEL_SERVICE_NAME", "front")
        .output()
        .expect("run the client");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("200={} 500={FAILING}", N - FAILING), "{out:?}");

    // /metrics: one edge, exact.
    let edge = [("client", "front"), ("server", "back"), ("connection_type", "")];
    let total = || metric_value(prom, "traces_service_graph_request_total", &edge[..2]);
    wait_until(WAIT, || total().filter(|n| *n >= N as f64)).unwrap_or_else(|| {
        panic!("the edge front → back: {:?} of {N} calls\ncounters:\n{}\nlog:\n{}", total(), rt.counters(), last_lines(&rt.log(), 30))
    });
    std::thread::sleep(SETTLE);
    let text = scrape(prom);
    let edges: Vec<&str> = text.lines().filter(|l| l.starts_with("traces_service_graph_request_total{")).collect();
    assert_eq!(
        edges,
        [format!("traces_service_graph_request_total{{client=\"front\",server=\"back\",connection_type=\"\"}} {N}")],
        "{text}"
    );
    assert_eq!(metric(&text, "traces_service_graph_request_failed_total", &edge), FAILING as f64);
    for h in ["server", "client"] {
        assert_eq!(metric(&text, &format!("traces_service_graph_request_{h}_seconds_count"), &edge), N as f64, "{h}");
    }

    // The spans at the receiver: N server spans of back, each the child of
    // one of N client spans of front; their durations are the histograms'.
    let spans = wait_until(WAIT, || {
        let s: Vec<Value> = rotel.spans().into_iter().filter(|s| on_port(s, port)).collect();
        (s.len() >= 2 * N).then_some(s)
    })
    .unwrap_or_else(|| panic!("spans on port {port}: {}", rotel.spans().iter().filter(|s| on_port(s, port)).count()));
    assert_eq!(spans.len(), 2 * N);
    let of = |service: &str, kind: i64| -> Vec<&Value> {
        spans.iter().filter(|s| res_attr(s, "service.name").as_deref() == Some(service) && s["kind"] == kind).collect()
    };
    let (servers, clients) = (of("back", 2), of("front", 3));
    assert_eq!((servers.len(), clients.len()), (N, N));
    let client_ids: BTreeSet<&str> = clients.iter().map(|s| s["span_id"].as_str().unwrap()).collect();
    assert!(servers.iter().all(|s| client_ids.contains(s["parent_span_id"].as_str().unwrap())), "every server span joined its caller");
    let seconds = |ss: &[&Value]| ss.iter().map(|s| (s["end"].as_u64().unwrap() - s["start"].as_u64().unwrap()) as f64 / 1e9).sum::<f64>();
    for (h, ss) in [("server", &servers), ("client", &clients)] {
        let sum = metric(&text, &format!("traces_service_graph_request_{h}_seconds_sum"), &edge);
        assert!((sum - seconds(ss)).abs() < 1e-6, "{h}: histogram sum {sum} s, spans {} s", seconds(ss));
    }

    // Span metrics: exactly the spans of both services, by name, kind, status.
    let mut want: BTreeMap<(String, String, String, String), u64> = BTreeMap::new();
    for s in servers.iter().chain(&clients) {
        let kind = if s["kind"] == 2 { "SPAN_KIND_SERVER" } else { "SPAN_KIND_CLIENT" };
        // (the receiver writes the status code: 2 or a name with "error")
        let code = s["status"].as_str().unwrap_or_default().to_lowercase();
        let status = if code.contains('2') || code.contains("error") { "STATUS_CODE_ERROR" } else { "STATUS_CODE_UNSET" };
        let key = (res_attr(s, "service.name").unwrap(), s["name"].as_str().unwrap().to_owned(), kind.to_owned(), status.to_owned());
        *want.entry(key).or_default() += 1;
    }
    assert_eq!(want.len(), 4, "back: GET /ok, GET /fail; front: GET, OK and failed: {want:?}");
    for ((service, name, kind, status), n) in &want {
        let labels =
            [("service", service.as_str()), ("span_name", name.as_str()), ("span_kind", kind.as_str()), ("status_code", status.as_str())];
        assert_eq!(metric(&text, "traces_span_metrics_calls_total", &labels), *n as f64, "{labels:?}\n{text}");
        assert_eq!(metric(&text, "traces_span_metrics_duration_seconds_count", &labels), *n as f64, "{labels:?}");
    }

    // The same numbers over OTLP, on ringtail's own resource.
    let key = "client=front,connection_type=,server=back";
    let pushed = || {
        let m = rotel.metrics();
        let done = otlp_latest(&m, "traces_service_graph_request_total").get(key).and_then(|p| p["value"].as_f64()) == Some(N as f64)
            && otlp_latest(&m, "traces_span_metrics_calls_total").len() >= 4;
        done.then_some(m)
    };
    let metrics = wait_until(WAIT, pushed)
        .unwrap_or_else(|| panic!("OTLP: {:?}", otlp_latest(&rotel.metrics(), "traces_service_graph_request_total")));
    assert_eq!(otlp_latest(&metrics, "traces_service_graph_request_failed_total")[key]["value"].as_f64(), Some(FAILING as f64));
    for h in ["traces_service_graph_request_server", "traces_service_graph_request_client"] {
        let p = &otlp_latest(&metrics, h)[key];
        assert_eq!(p["count"].as_u64(), Some(N as u64), "{h}");
    }
    let calls = otlp_latest(&metrics, "traces_span_metrics_calls_total");
    for ((service, name, kind, status), n) in &want {
        let k = format!("service={service},span_kind={kind},span_name={name},status_code={status}");
        assert_eq!(calls.get(&k).and_then(|p| p["value"].as_f64()), Some(*n as f64), "{k}: {calls:?}");
    }
    let graph = metrics.iter().find(|m| m["name"] == "traces_service_graph_request_total").unwrap();
    assert_eq!(graph["resource"]["service.name"], "ringtail", "the host's edges are on ringtail's own resource");

    // Every name a panel or a rule reads, on /metrics and over OTLP (each
    // component's own counters reach the exporter at its own interval: wait
    // for all of them, then name what is missing).
    let read: Vec<(String, String)> = dashboard_exprs()
        .into_iter()
        .map(|(t, e)| (format!("panel {t:?}"), e))
        .chain(rule_exprs().into_iter().map(|(a, e)| (format!("rule {a}"), e)))
        .flat_map(|(what, e)| promql_names(&e).into_iter().map(move |n| (what.clone(), n)))
        .collect();
    let missing_now = || {
        let exported = exposition_names(&scrape(prom));
        let over_otlp = otlp_as_prometheus(&rotel.metrics());
        let mut missing = Vec::new();
        for (what, name) in &read {
            if !exported.contains(name) {
                missing.push(format!("{what}: {name} is not on /metrics"));
            }
            if !over_otlp.contains(name) {
                missing.push(format!("{what}: {name} is not exported over OTLP"));
            }
        }
        (missing, exported, over_otlp)
    };
    let (missing, exported, over_otlp) = wait_until(WAIT, || {
        let now = missing_now();
        now.0.is_empty().then_some(now)
    })
    .unwrap_or_else(missing_now);
    assert!(missing.is_empty(), "{}\n(/metrics has {} names)", missing.join("\n"), exported.len());
    // ...and the check is not vacuous: a name ringtail does not export fails it.
    assert!(!exported.contains("traces_spanmetrics_latency_bucket") && !over_otlp.contains("ringtail_made_up_total"));
}

/// Debian's Prometheus on loopback, scraping one target every second,
/// with rule files; killed on drop.
struct Prometheus {
    _proc: Proc,
    port: u16,
    _dir: TempDir,
}

impl Prometheus {
    fn start(target: u16, rules: &str) -> Prometheus {
        let dir = TempDir::new("prom");
        std::fs::write(dir.join("rules.yml"), rules).unwrap();
        std::fs::write(
            dir.join("prometheus.yml"),
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yml]\nscrape_configs:\n  - job_name: ringtail\n    static_configs:\n      - targets: [\"127.0.0.1:{target}\"]\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let proc = Proc::spawn(
            "prometheus",
            Command::new("prometheus")
                .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
                .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .current_dir(&dir.0)
                .stdout(log.try_clone().unwrap())
                .stderr(log),
        );
        assert!(
            wait_port(port, Duration::from_secs(30)),
            "prometheus did not listen: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        Prometheus { _proc: proc, port, _dir: dir }
    }

    fn get(&self, path: &str) -> Value {
        // (curl: the API answers large results chunked)
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "10", &format!("http://127.0.0.1:{}{path}", self.port)])
            .output()
            .expect("curl");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{path}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
    }

    /// Alert name → state (`pending` or `firing`) of every active alert.
    fn alerts(&self) -> BTreeMap<String, String> {
        let v = self.get("/api/v1/alerts");
        v["data"]["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| (a["labels"]["alertname"].as_str().unwrap_or_default().to_owned(), a["state"].as_str().unwrap_or_default().to_owned()))
            .collect()
    }

    /// Series an instant query returns.
    fn series(&self, query: &str) -> usize {
        let q: String =
            query.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") }).collect();
        self.get(&format!("/api/v1/query?query={q}"))["data"]["result"].as_array().map_or(0, Vec::len)
    }
}

/// The alert rules, loaded as they are into a real Prometheus (only their
/// `for:` waits cut to 0s, so that a test need not wait ten minutes) that
/// scrapes a real ringtail whose OTLP collector is down: the rules that
/// should fire (spans dropped after their retries, metric pushes failing)
/// are seen firing through Prometheus' HTTP API; those that should not
/// (ring full, parent-wait timeouts, events dropped) are not, though their
/// series are there; and every rule evaluates without error.
#[test]
fn prometheus_fires_the_rules_that_should_fire_and_no_other() {
    if !can_trace() || !have("prometheus") || !have("curl") {
        return;
    }
    let (web, prom, dead) = (free_port(), free_port(), free_port());
    let www = TempDir::new("www");
    std::fs::write(www.join("index.html"), "hi").unwrap();
    let rt = Ringtail::start(&format!(
        "[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nopen_ports = [{web}]\n\
         [export]\nstdout = false\n[export.otlp]\nendpoint = \"http://127.0.0.1:{dead}\"\nprotocol = \"grpc\"\nmetrics_interval = \"500ms\"\ntimeout = \"200ms\"\n\
         [export.otlp.retry]\ninitial_backoff = \"50ms\"\nmax_backoff = \"100ms\"\nmax_elapsed = \"500ms\"\n\
         [export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n"
    ));
    let _web = python_http_server(web, &www.0);
    let rules = std::fs::read_to_string(deploy("prometheus/ringtail-rules.yml")).unwrap();
    let fast: String =
        rules.lines().map(|l| if l.trim_start().starts_with("for:") { "        for: 0s" } else { l }).collect::<Vec<_>>().join("\n");
    assert_ne!(fast, rules, "the rules have waits to cut");
    let p = Prometheus::start(prom, &fast);
    // Requests only once Prometheus has seen the counters at 0: a counter's
    // first sample is not an increase.
    assert!(
        wait_until(WAIT, || (p.series("ringtail_dropped_spans_total{reason=\"retries_exhausted\"}") > 0).then_some(())).is_some(),
        "prometheus never scraped ringtail"
    );
    let should_fire = ["RingtailSpansDropped", "RingtailExportFailing"];
    let firing = wait_until(Duration::from_secs(90), || {
        let st = Command::new("curl").args(["-s", "-o", "/dev/null", &format!("http://127.0.0.1:{web}/")]).status().unwrap();
        assert!(st.success());
        let a = p.alerts();
        should_fire.iter().all(|n| a.get(*n).map(String::as_str) == Some("firing")).then_some(a)
    })
    .unwrap_or_else(|| panic!("alerts: {:?}\ncounters:\n{}", p.alerts(), rt.counters()));
    // Those that should not fire do not, over real series.
    for (alert, series) in [
        ("RingtailRingFull", "ringtail_dropped_events_total{reason=\"ring_full\"}"),
        ("RingtailParentWaitTimeouts", "ringtail_parent_wait_timeouts_total"),
        ("RingtailEventsDropped", "ringtail_events_read_total"),
    ] {
        assert!(!firing.contains_key(alert), "{alert} is {:?}: {firing:?}\ncounters:\n{}", firing.get(alert), rt.counters());
        assert!(p.series(series) > 0, "{series} is not scraped: {alert} would be quiet for nothing");
    }
    // Every rule evaluated cleanly.
    let rules = p.get("/api/v1/rules");
    let health: Vec<(String, String)> = rules["data"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .map(|r| (r["name"].as_str().unwrap_or_default().to_owned(), r["health"].as_str().unwrap_or_default().to_owned()))
        .collect();
    assert_eq!(health.len(), 6, "{health:?}");
    assert!(health.iter().all(|(_, h)| h == "ok"), "{health:?}");
}
