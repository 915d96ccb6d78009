//! The metrics as OTLP `ExportMetricsServiceRequest`s, pushed every
//! `metrics_interval` (and once at shutdown).
//!
//! Per traced service, a `ResourceMetrics` with scope `ringtail` and its
//! `http.server.request.duration` / `http.client.request.duration`
//! histograms, the RPC ones of its gRPC calls (`rpc.*.call.duration`
//! and/or `rpc.*.duration`) and `db.client.operation.duration` of its
//! database calls (cumulative, explicit buckets, sum, min, max); then
//! ringtail's own resource with every component's health points: counters
//! as monotonic cumulative sums named without `_total`, gauges as gauges.
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
use crate::meters::{unix_ns, Histogram, Instrument, Key, Metrics, MetricsView, Point, OVERFLOW_ATTRIBUTE};
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
        match key {
            Some(k) => k.attributes(|name, v| kv(o, HDP_ATTRIBUTES, name, v)),
            None => kv(o, HDP_ATTRIBUTES, OVERFLOW_ATTRIBUTE.0, OVERFLOW_ATTRIBUTE.1),
        }
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
    if by_name.is_empty() {
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
                    histogram_metric(o, inst, h, now);
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
