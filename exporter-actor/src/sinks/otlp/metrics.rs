//! The metrics as OTLP `ExportMetricsServiceRequest`s, pushed every
//! `metrics_interval` (and once at shutdown).
//!
//! Per traced service, a `ResourceMetrics` with scope `ringtail` and its
//! `http.server.request.duration` / `http.client.request.duration`
//! histograms, the RPC ones of its gRPC calls (`rpc.*.call.duration`
//! and/or `rpc.*.duration`), `db.client.operation.duration` of its
//! database calls and `messaging.client.operation.duration` of its
//! messaging calls (cumulative, explicit buckets, sum, min, max), and the
//! messaging counters `messaging.client.sent.messages` and
//! `messaging.client.consumed.messages` (monotonic cumulative integer
//! sums, as an SDK's `u64` counter exports them); then
//! ringtail's own resource with every component's health points: counters
//! as monotonic cumulative sums named without `_total`, gauges as gauges;
//! and on it too the host's service graph and span metrics, named as OBI
//! names them over OTLP (`traces_service_graph_request_total`,
//! `traces_service_graph_request_server` in `s`...: see
//! [`crate::meters::graph`]).
//! Resources are packed into requests of about [`MAX_REQUEST`] bytes.

use std::collections::BTreeMap;

use bytes::Bytes;
use ipc_schema::health::PointKind;
use ipc_schema::MetricPoint;
use runtime_kit::counters::Registry;
use runtime_kit::shutdown::Shutdown;

use super::client::{self, Signal, Transport};
use super::spans::SCOPE_NAME;
use super::wire::{self, kv, message, opt_double, Out, Value, FIXED64, LEN};
use super::OtlpConfig;
use crate::meters::{graph, span_metrics, unix_ns, Histogram, Instrument, Key, Kind, Metrics, MetricsView, Point, OVERFLOW_ATTRIBUTE};
use crate::resource;

/// A request is closed once it holds this many bytes (receivers commonly
/// refuse more than 4 MiB).
pub const MAX_REQUEST: usize = 1 << 20;

// Field numbers (opentelemetry/proto/metrics/v1/metrics.proto).
const REQUEST_RESOURCE_METRICS: u32 = 1;
const RM_RESOURCE: u32 = 1;
const RM_SCOPE_METRICS: u32 = 2;
const SM_SCOPE: u32 = 1;
const SM_METRICS: u32 = 2;
const RESOURCE_ATTRIBUTES: u32 = 1;
const METRIC_NAME: u32 = 1;
const METRIC_DESCRIPTION: u32 = 2;
const METRIC_UNIT: u32 = 3;
const METRIC_GAUGE: u32 = 5;
const METRIC_SUM: u32 = 7;
const METRIC_HISTOGRAM: u32 = 9;
const DATA_POINTS: u32 = 1;
const TEMPORALITY: u32 = 2;
const SUM_MONOTONIC: u32 = 3;
const NDP_START: u32 = 2;
const NDP_TIME: u32 = 3;
const NDP_AS_DOUBLE: u32 = 4;
const NDP_AS_INT: u32 = 6;
const NDP_ATTRIBUTES: u32 = 7;
const HDP_START: u32 = 2;
const HDP_TIME: u32 = 3;
const HDP_COUNT: u32 = 4;
const HDP_SUM: u32 = 5;
const HDP_BUCKET_COUNTS: u32 = 6;
const HDP_BOUNDS: u32 = 7;
const HDP_ATTRIBUTES: u32 = 9;
const HDP_MIN: u32 = 11;
const HDP_MAX: u32 = 12;
/// `AGGREGATION_TEMPORALITY_CUMULATIVE`.
const CUMULATIVE: u64 = 2;

fn resource_field(o: &mut dyn Out, attrs: &resource::Attributes<'_>) {
    message(o, RM_RESOURCE, |o| {
        for (k, v) in attrs {
            kv(o, RESOURCE_ATTRIBUTES, k, *v);
        }
    });
}

fn histogram_point(o: &mut dyn Out, key: Option<&Key>, p: &Point, now: u64) {
    histogram_point_with(o, p, now, |o| match key {
        Some(k) => k.attributes(|name, v| kv(o, HDP_ATTRIBUTES, name, v)),
        None => kv(o, HDP_ATTRIBUTES, OVERFLOW_ATTRIBUTE.0, OVERFLOW_ATTRIBUTE.1),
    });
}

/// A cumulative histogram data point whose attributes `attrs` writes
/// (as field `HDP_ATTRIBUTES`).
fn histogram_point_with(o: &mut dyn Out, p: &Point, now: u64, attrs: impl Fn(&mut dyn Out)) {
    message(o, DATA_POINTS, |o| {
        wire::fixed64(o, HDP_START, p.start_ns);
        wire::fixed64(o, HDP_TIME, now);
        wire::fixed64(o, HDP_COUNT, p.count);
        opt_double(o, HDP_SUM, p.sum);
        o.key(HDP_BUCKET_COUNTS, LEN);
        o.varint((p.buckets.len() * 8) as u64);
        for c in &p.buckets {
            o.put(&c.to_le_bytes());
        }
        o.key(HDP_BOUNDS, LEN);
        o.varint((p.bounds.len() * 8) as u64);
        for b in p.bounds {
            o.put(&b.to_le_bytes());
        }
        attrs(o);
        if p.count > 0 {
            opt_double(o, HDP_MIN, p.min);
            opt_double(o, HDP_MAX, p.max);
        }
    });
}

fn histogram_metric(o: &mut dyn Out, inst: Instrument, h: &Histogram, now: u64) {
    message(o, SM_METRICS, |o| {
        wire::opt_bytes(o, METRIC_NAME, inst.name.as_bytes());
        wire::opt_bytes(o, METRIC_DESCRIPTION, inst.description.as_bytes());
        wire::opt_bytes(o, METRIC_UNIT, inst.unit.as_bytes());
        message(o, METRIC_HISTOGRAM, |o| {
            for (key, p) in h.series() {
                histogram_point(o, key, p, now);
            }
            wire::uint(o, TEMPORALITY, CUMULATIVE);
        });
    });
}

/// A counter of a service (a messaging call's messages): a monotonic
/// cumulative sum, one integer point per series (its [`Point::sum`]).
fn counter_metric(o: &mut dyn Out, inst: Instrument, h: &Histogram, now: u64) {
    message(o, SM_METRICS, |o| {
        wire::opt_bytes(o, METRIC_NAME, inst.name.as_bytes());
        wire::opt_bytes(o, METRIC_DESCRIPTION, inst.description.as_bytes());
        wire::opt_bytes(o, METRIC_UNIT, inst.unit.as_bytes());
        message(o, METRIC_SUM, |o| {
            for (key, p) in h.series() {
                message(o, DATA_POINTS, |o| {
                    wire::fixed64(o, NDP_START, p.start_ns);
                    wire::fixed64(o, NDP_TIME, now);
                    // A oneof: written even when 0. Counts stay far below
                    // 2^53, where an f64 sum stops being exact.
                    o.key(NDP_AS_INT, FIXED64);
                    o.put(&(p.sum as i64).to_le_bytes());
                    match key {
                        Some(k) => k.attributes(|name, v| kv(o, NDP_ATTRIBUTES, name, v)),
                        None => kv(o, NDP_ATTRIBUTES, OVERFLOW_ATTRIBUTE.0, OVERFLOW_ATTRIBUTE.1),
                    }
                });
            }
            wire::uint(o, TEMPORALITY, CUMULATIVE);
            wire::uint(o, SUM_MONOTONIC, 1);
        });
    });
}

fn number_point(o: &mut dyn Out, p: &MetricPoint, start: u64, now: u64) {
    message(o, DATA_POINTS, |o| {
        wire::fixed64(o, NDP_START, start);
        wire::fixed64(o, NDP_TIME, now);
        o.key(NDP_AS_DOUBLE, FIXED64);
        o.put(&p.value.to_le_bytes());
        // Sorted by name, as the OpenTelemetry SDKs export attributes.
        let mut labels: Vec<&(String, String)> = p.labels.iter().collect();
        labels.sort_by(|a, b| a.0.cmp(&b.0));
        labels.dedup_by(|a, b| a.0 == b.0);
        for (k, v) in labels {
            kv(o, NDP_ATTRIBUTES, k, Value::Str(v));
        }
    });
}

/// A monotonic cumulative sum's data point: `value` since `start`, its
/// attributes written by `attrs` (as field `NDP_ATTRIBUTES`).
fn sum_point_with(o: &mut dyn Out, value: f64, start: u64, now: u64, attrs: impl Fn(&mut dyn Out)) {
    message(o, DATA_POINTS, |o| {
        wire::fixed64(o, NDP_START, start);
        wire::fixed64(o, NDP_TIME, now);
        o.key(NDP_AS_DOUBLE, FIXED64);
        o.put(&value.to_le_bytes());
        attrs(o);
    });
}

/// Writes a derived series key's labels (edge or span-metrics key).
type Labels<K> = fn(&K, &mut dyn FnMut(&'static str, Value<&str>));

/// A derived series' attributes: its key's (`labels` writes them as data
/// point field `field`), or the overflow attribute.
fn derived_attrs<K>(o: &mut dyn Out, field: u32, key: Option<&K>, labels: Labels<K>) {
    match key {
        Some(k) => labels(k, &mut |n, v| kv(o, field, n, v)),
        None => kv(o, field, OVERFLOW_ATTRIBUTE.0, OVERFLOW_ATTRIBUTE.1),
    }
}

/// A counter of the derived metrics: one point per series.
fn derived_sum<K>(o: &mut dyn Out, name: &str, series: &[(Option<&K>, u64, u64)], labels: Labels<K>, now: u64) {
    message(o, SM_METRICS, |o| {
        wire::opt_bytes(o, METRIC_NAME, name.as_bytes());
        message(o, METRIC_SUM, |o| {
            for &(key, value, start) in series {
                sum_point_with(o, value as f64, start, now, |o| derived_attrs(o, NDP_ATTRIBUTES, key, labels));
            }
            wire::uint(o, TEMPORALITY, CUMULATIVE);
            wire::uint(o, SUM_MONOTONIC, 1);
        });
    });
}

/// A histogram of the derived metrics (unit `s`): one point per series.
fn derived_histogram<K>(o: &mut dyn Out, name: &str, series: &[(Option<&K>, &Point)], labels: Labels<K>, now: u64) {
    message(o, SM_METRICS, |o| {
        wire::opt_bytes(o, METRIC_NAME, name.as_bytes());
        wire::opt_bytes(o, METRIC_UNIT, b"s");
        message(o, METRIC_HISTOGRAM, |o| {
            for &(key, p) in series {
                histogram_point_with(o, p, now, |o| derived_attrs(o, HDP_ATTRIBUTES, key, labels));
            }
            wire::uint(o, TEMPORALITY, CUMULATIVE);
        });
    });
}

fn edge_labels(k: &graph::EdgeKey, f: &mut dyn FnMut(&'static str, Value<&str>)) {
    k.labels(f)
}

fn span_labels(k: &span_metrics::SpanKey, f: &mut dyn FnMut(&'static str, Value<&str>)) {
    k.labels(f)
}

/// The host's service graph and span metrics, as OBI names them over OTLP.
fn derived_metrics(o: &mut dyn Out, m: &Metrics, now: u64) {
    let g = m.graph();
    if !g.is_empty() {
        let edges: Vec<_> = g.edges().collect();
        let sums = |v: fn(&graph::EdgePoint) -> u64| edges.iter().map(|(k, p)| (*k, v(p), p.server.start_ns)).collect::<Vec<_>>();
        let hists = |server: bool| edges.iter().map(|(k, p)| (*k, if server { &p.server } else { &p.client })).collect::<Vec<_>>();
        derived_sum(o, graph::REQUEST_TOTAL, &sums(|p| p.server.count), edge_labels, now);
        derived_sum(o, graph::REQUEST_FAILED_TOTAL, &sums(|p| p.failed), edge_labels, now);
        derived_histogram(o, graph::SERVER, &hists(true), edge_labels, now);
        derived_histogram(o, graph::CLIENT, &hists(false), edge_labels, now);
    }
    let sm = m.span_metrics();
    if !sm.is_empty() {
        let series: Vec<_> = sm.series().collect();
        let calls: Vec<_> = series.iter().map(|(k, p)| (*k, p.count, p.start_ns)).collect();
        derived_sum(o, span_metrics::CALLS_TOTAL, &calls, span_labels, now);
        derived_histogram(o, span_metrics::DURATION, &series, span_labels, now);
    }
}

/// One metric of ringtail's own: its kind, and each point with the start
/// time of its component.
type Family<'a> = (PointKind, Vec<(&'a MetricPoint, u64)>);

/// Writes ringtail's own `ResourceMetrics` (nothing when no component
/// reported yet).
fn own_metrics(o: &mut Vec<u8>, m: &Metrics, now: u64) {
    // Every point of every component, by metric name.
    let mut by_name: BTreeMap<&str, Family<'_>> = BTreeMap::new();
    for (component, report) in m.health() {
        let start = m.health_start(*component);
        for p in &report.points {
            let name = match p.kind {
                PointKind::Counter => p.name.strip_suffix("_total").unwrap_or(&p.name),
                PointKind::Gauge => p.name.as_str(),
            };
            by_name.entry(name).or_insert_with(|| (p.kind, Vec::new())).1.push((p, start));
        }
    }
    if by_name.is_empty() && m.graph().is_empty() && m.span_metrics().is_empty() {
        return;
    }
    let attrs = m.own_resource();
    message(o, REQUEST_RESOURCE_METRICS, |o| {
        resource_field(o, &attrs);
        message(o, RM_SCOPE_METRICS, |o| {
            wire::scope(o, SM_SCOPE, SCOPE_NAME, "");
            for (name, (kind, points)) in &by_name {
                message(o, SM_METRICS, |o| {
                    wire::opt_bytes(o, METRIC_NAME, name.as_bytes());
                    let (field, sum) = match kind {
                        PointKind::Counter => (METRIC_SUM, true),
                        PointKind::Gauge => (METRIC_GAUGE, false),
                    };
                    message(o, field, |o| {
                        // A name used as a counter by one component and a
                        // gauge by another keeps the first kind seen.
                        for (p, start) in points.iter().filter(|(p, _)| p.kind == *kind) {
                            number_point(o, p, *start, now);
                        }
                        if sum {
                            wire::uint(o, TEMPORALITY, CUMULATIVE);
                            wire::uint(o, SUM_MONOTONIC, 1);
                        }
                    });
                });
            }
            derived_metrics(o, m, now);
        });
    });
}

/// Encodes every metric as of `now` (Unix ns) into requests.
pub fn encode(m: &Metrics, now: u64) -> Vec<Vec<u8>> {
    let mut requests = Vec::new();
    let mut cur = Vec::new();
    for svc in m.services() {
        if svc.is_empty() {
            continue;
        }
        let attrs = m.resource(svc);
        message(&mut cur, REQUEST_RESOURCE_METRICS, |o| {
            resource_field(o, &attrs);
            message(o, RM_SCOPE_METRICS, |o| {
                wire::scope(o, SM_SCOPE, SCOPE_NAME, "");
                for (inst, h) in svc.histograms().filter(|(_, h)| !h.is_empty()) {
                    match inst.kind {
                        Kind::Histogram => histogram_metric(o, inst, h, now),
                        Kind::Counter => counter_metric(o, inst, h, now),
                    }
                }
            });
        });
        if cur.len() >= MAX_REQUEST {
            requests.push(std::mem::take(&mut cur));
        }
    }
    own_metrics(&mut cur, m, now);
    if !cur.is_empty() {
        requests.push(cur);
    }
    requests
}

/// Starts the push loop on the current thread's local task set; the task
/// ends after the push at shutdown.
pub fn start(
    transport: Transport,
    cfg: &OtlpConfig,
    view: MetricsView,
    registry: &Registry,
    mut shutdown: Shutdown,
) -> tokio::task::JoinHandle<()> {
    let pushed = registry.counter("ringtail_metric_exports_total", &[]);
    let failed = registry.counter("ringtail_metric_export_failures_total", &[]);
    let rejected = registry.counter("ringtail_metric_points_rejected_total", &[]);
    let interval = cfg.metrics_interval;
    let retry = cfg.retry.clone();
    tokio::task::spawn_local(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first tick is immediate: nothing to send yet
        loop {
            let last = tokio::select! {
                _ = tick.tick() => false,
                _ = shutdown.fired() => true,
            };
            let requests = view.read(|m| encode(m, unix_ns()));
            for body in requests {
                match transport.send(Signal::Metrics, Bytes::from(body), &retry).await {
                    Ok(response) => {
                        pushed.inc();
                        if let Some((n, message)) = client::partial_success(&response) {
                            rejected.add(n);
                            tracing::warn!(rejected = n, message, "the receiver kept only part of a metrics export");
                        }
                    }
                    Err(error) => {
                        failed.inc();
                        tracing::warn!(%error, "metric export failed");
                    }
                }
            }
            if last {
                return;
            }
        }
    })
}
