//! The Prometheus text format, named by the OpenTelemetry-to-Prometheus
//! convention: dots become underscores, the unit is appended
//! (`http.server.request.duration` + `s` →
//! `http_server_request_duration_seconds`), histograms become `_bucket`,
//! `_sum` and `_count`. The resource's `service.name` and
//! `service.instance.id` become `service_name` and `service_instance_id`
//! labels (Prometheus keeps `job` and `instance` for the scrape target).

use std::collections::BTreeMap;
use std::fmt::Write;

use ipc_schema::health::PointKind;
use ipc_schema::{Component, HealthReport};
use opentelemetry::{Key, KeyValue};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};

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

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
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

/// Renders SDK metrics (the request-duration histograms).
pub fn render_metrics(all: &[ResourceMetrics], out: &mut String) {
    // Group samples by metric name so each gets one HELP/TYPE header.
    let mut families: BTreeMap<String, (String, String, Vec<String>)> = BTreeMap::new();
    for rm in all {
        let res = rm.resource();
        let res_labels: Vec<(String, String)> = ["service.name", "service.instance.id"]
            .iter()
            .filter_map(|k| res.get(&Key::from_static_str(k)).map(|v| ((*k).to_owned(), v.to_string())))
            .collect();
        for sm in rm.scope_metrics() {
            for m in sm.metrics() {
                let AggregatedMetrics::F64(MetricData::Histogram(h)) = m.data() else {
                    continue;
                };
                let name = format!("{}{}", sanitize(m.name()), unit_suffix(m.unit()));
                let fam = families.entry(name.clone()).or_insert_with(|| (m.description().to_owned(), "histogram".into(), Vec::new()));
                for dp in h.data_points() {
                    let attrs: Vec<(String, String)> = res_labels
                        .iter()
                        .cloned()
                        .chain(dp.attributes().map(|KeyValue { key, value, .. }| (key.to_string(), value.to_string())))
                        .collect();
                    let base = labels(attrs.into_iter());
                    let sep = if base.is_empty() { "" } else { "," };
                    let mut cumulative = 0u64;
                    let bounds: Vec<f64> = dp.bounds().collect();
                    for (i, c) in dp.bucket_counts().enumerate() {
                        cumulative += c;
                        let le = bounds.get(i).copied().map(fmt_f64).unwrap_or_else(|| "+Inf".into());
                        fam.2.push(format!("{name}_bucket{{{base}{sep}le=\"{le}\"}} {cumulative}"));
                    }
                    fam.2.push(format!("{name}_sum{{{base}}} {}", fmt_f64(dp.sum())));
                    fam.2.push(format!("{name}_count{{{base}}} {}", dp.count()));
                }
            }
        }
    }
    for (name, (help, kind, lines)) in families {
        let _ = writeln!(out, "# HELP {name} {}", escape(&help));
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for l in lines {
            out.push_str(&l);
            out.push('\n');
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
