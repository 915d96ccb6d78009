//! The Prometheus text format, named by the OpenTelemetry-to-Prometheus
//! convention: dots become underscores, the unit is appended
//! (`http.server.request.duration` + `s` →
//! `http_server_request_duration_seconds`; an annotation unit such as
//! `{message}` adds nothing), histograms become `_bucket`, `_sum` and
//! `_count`, counters get `_total` (`messaging.client.sent.messages` →
//! `messaging_client_sent_messages_total`). The resource's `service.name` and
//! `service.instance.id` become `service_name` and `service_instance_id`
//! labels (Prometheus keeps `job` and `instance` for the scrape target),
//! then the series' attributes sorted by name. The host's derived metrics
//! (service graph, span metrics) carry their own labels only, as Tempo
//! writes them ([`render_derived`]).

use std::collections::BTreeMap;
use std::fmt::Write;

use ipc_schema::health::PointKind;
use ipc_schema::{Component, HealthReport};

use crate::meters::{graph, instruments, span_metrics, Kind, Metrics, Point, OVERFLOW_ATTRIBUTE};
use ipc_schema::Value;

/// A metric or label name made Prometheus-safe.
pub fn sanitize(name: &str) -> String {
    let mut out: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == ':' { c } else { '_' }).collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

fn unit_suffix(unit: &str) -> &'static str {
    match unit {
        "s" => "_seconds",
        "ms" => "_milliseconds",
        "By" => "_bytes",
        _ => "",
    }
}

/// A label value or help text: its control characters (a service name is
/// any local user's choice) escaped as text first, so a scrape shown on a
/// terminal carries no escape sequence; then the format's own escapes.
fn escape(v: &str) -> String {
    runtime_kit::text::printable(v).replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn labels<'a>(pairs: impl Iterator<Item = (String, String)> + 'a) -> String {
    let mut s = String::new();
    for (i, (k, v)) in pairs.enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{}=\"{}\"", sanitize(&k), escape(&v));
    }
    s
}

fn fmt_f64(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{v}")
    }
}

fn value_text(v: Value<&str>) -> String {
    match v {
        Value::Str(s) => s.to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
    }
}

/// Renders each service's instruments: the duration histograms (HTTP,
/// then RPC, database, messaging) and the messaging counters.
pub fn render_metrics(m: &Metrics, out: &mut String) {
    for (i, inst) in instruments().enumerate() {
        let (total, kind) = match inst.kind {
            Kind::Histogram => ("", "histogram"),
            Kind::Counter => ("_total", "counter"),
        };
        let name = format!("{}{}{total}", sanitize(inst.name), unit_suffix(inst.unit));
        let mut header = false;
        for svc in m.services() {
            let Some(hist) = svc.histogram(i) else { continue };
            for (key, p) in hist.series() {
                if !header {
                    let _ = writeln!(out, "# HELP {name} {}", escape(inst.description));
                    let _ = writeln!(out, "# TYPE {name} {kind}");
                    header = true;
                }
                let mut pairs = vec![
                    ("service.name".to_owned(), svc.resource.service_name.clone()),
                    ("service.instance.id".to_owned(), svc.resource.service_instance_id.clone()),
                ];
                match key {
                    Some(k) => k.attributes(|k, v| pairs.push((k.to_owned(), value_text(v)))),
                    None => pairs.push((OVERFLOW_ATTRIBUTE.0.to_owned(), value_text(OVERFLOW_ATTRIBUTE.1))),
                }
                let base = labels(pairs.into_iter());
                match inst.kind {
                    Kind::Histogram => histogram_lines(out, &name, &base, p),
                    Kind::Counter => {
                        let _ = writeln!(out, "{name}{{{base}}} {}", fmt_f64(p.sum));
                    }
                }
            }
        }
    }
}

/// One histogram series' lines (`_bucket`, `_sum`, `_count`) under labels `base`.
fn histogram_lines(out: &mut String, name: &str, base: &str, p: &Point) {
    let sep = if base.is_empty() { "" } else { "," };
    let mut cumulative = 0u64;
    for (i, c) in p.buckets.iter().enumerate() {
        cumulative += c;
        let le = p.bounds.get(i).copied().map(fmt_f64).unwrap_or_else(|| "+Inf".into());
        let _ = writeln!(out, "{name}_bucket{{{base}{sep}le=\"{le}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{name}_sum{{{base}}} {}", fmt_f64(p.sum));
    let _ = writeln!(out, "{name}_count{{{base}}} {}", p.count);
}

/// A derived series' labels, as `put` gives them (`None`: the overflow series').
fn derived_labels(put: Option<impl FnOnce(&mut Vec<(String, String)>)>) -> String {
    let mut pairs = Vec::new();
    match put {
        Some(put) => put(&mut pairs),
        None => pairs.push((OVERFLOW_ATTRIBUTE.0.to_owned(), value_text(OVERFLOW_ATTRIBUTE.1))),
    }
    labels(pairs.into_iter())
}

fn edge_labels(k: Option<&graph::EdgeKey>) -> String {
    derived_labels(k.map(|k| move |pairs: &mut Vec<(String, String)>| k.labels(|n, v| pairs.push((n.to_owned(), value_text(v))))))
}

fn span_labels(k: Option<&span_metrics::SpanKey>) -> String {
    derived_labels(k.map(|k| move |pairs: &mut Vec<(String, String)>| k.labels(|n, v| pairs.push((n.to_owned(), value_text(v))))))
}

/// Renders the service graph and span metrics, under Tempo's names
/// (`traces_service_graph_request_server_seconds`,
/// `traces_span_metrics_duration_seconds`...) and labels only.
pub fn render_derived(m: &Metrics, out: &mut String) {
    let g = m.graph();
    if !g.is_empty() {
        let edges: Vec<(String, &graph::EdgePoint)> = g.edges().map(|(k, p)| (edge_labels(k), p)).collect();
        let counter = |out: &mut String, name: &str, help: &str, v: &dyn Fn(&graph::EdgePoint) -> u64| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            for (l, p) in &edges {
                let _ = writeln!(out, "{name}{{{l}}} {}", v(p));
            }
        };
        counter(out, graph::REQUEST_TOTAL, "Calls between two services (service graph).", &|p| p.server.count);
        counter(out, graph::REQUEST_FAILED_TOTAL, "Failed calls between two services (service graph).", &|p| p.failed);
        for (name, help, server) in [
            (graph::SERVER, "Server-side duration of calls between two services (service graph).", true),
            (graph::CLIENT, "Client-side duration of calls between two services (service graph).", false),
        ] {
            let name = format!("{name}_seconds");
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} histogram");
            for (l, p) in &edges {
                histogram_lines(out, &name, l, if server { &p.server } else { &p.client });
            }
        }
    }
    let sm = m.span_metrics();
    if !sm.is_empty() {
        let series: Vec<(String, &Point)> = sm.series().map(|(k, p)| (span_labels(k), p)).collect();
        let name = span_metrics::CALLS_TOTAL;
        let _ = writeln!(out, "# HELP {name} Spans by service, name, kind and status (span metrics).");
        let _ = writeln!(out, "# TYPE {name} counter");
        for (l, p) in &series {
            let _ = writeln!(out, "{name}{{{l}}} {}", p.count);
        }
        let name = format!("{}_seconds", span_metrics::DURATION);
        let _ = writeln!(out, "# HELP {name} Span durations by service, name, kind and status (span metrics).");
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (l, p) in &series {
            histogram_lines(out, &name, l, p);
        }
    }
}

/// Renders ringtail's own counters and gauges, under the names the
/// components gave them.
pub fn render_health(reports: &BTreeMap<Component, HealthReport>, out: &mut String) {
    let mut families: BTreeMap<&str, (PointKind, Vec<String>)> = BTreeMap::new();
    for r in reports.values() {
        for p in &r.points {
            let fam = families.entry(p.name.as_str()).or_insert_with(|| (p.kind, Vec::new()));
            let l = labels(p.labels.iter().cloned());
            fam.1.push(format!("{}{{{l}}} {}", sanitize(&p.name), fmt_f64(p.value)));
        }
    }
    for (name, (kind, lines)) in families {
        let t = match kind {
            PointKind::Counter => "counter",
            PointKind::Gauge => "gauge",
        };
        let _ = writeln!(out, "# TYPE {} {t}", sanitize(name));
        for l in lines {
            out.push_str(&l);
            out.push('\n');
        }
    }
}
