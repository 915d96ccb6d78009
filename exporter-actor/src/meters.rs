//! Metrics derived from spans, and ringtail's own, kept in the OpenTelemetry
//! SDK so that the OTLP push and the Prometheus scrape read the same numbers.
//!
//! Each traced service gets its own meter provider (a resource is per
//! provider) with `http.server.request.duration` and
//! `http.client.request.duration` histograms in seconds, with the spec's
//! default buckets and the attributes the spec lists: never `url.path`,
//! which is unbounded. Readers are cumulative manual readers: collecting
//! twice (push and scrape) is harmless.
//!
//! Services (a resource is per process: `process.pid`) are bounded: past
//! [`MAX_SERVICES`] the least recently recorded one is evicted (counted in
//! `ringtail_metric_services_evicted_total`), so a host with many
//! short-lived processes never stops measuring new ones. An evicted
//! service's samples since the last push or scrape are lost, and if it
//! comes back its cumulative series start again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use ipc_schema::health::PointKind;
use ipc_schema::{Component, HealthReport, HttpSpan, ServiceResource, SpanKind};
use opentelemetry::metrics::{Histogram, Meter, MeterProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, ManualReader, Pipeline, SdkMeterProvider, Temporality};
use runtime_kit::counters::{Counter, Registry};

use crate::resource;

/// The spec's default buckets for HTTP request durations, in seconds.
pub const DURATION_BUCKETS: [f64; 14] = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0];
/// Services with their own meters; past it the least recently used goes.
pub const MAX_SERVICES: usize = 1024;

/// A manual reader shared by the OTLP push and the Prometheus scrape.
#[derive(Debug, Clone)]
pub struct SharedReader(Arc<ManualReader>);

impl MetricReader for SharedReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline)
    }
    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

fn provider(res: opentelemetry_sdk::Resource) -> (SdkMeterProvider, SharedReader) {
    let reader = SharedReader(Arc::new(ManualReader::builder().with_temporality(Temporality::Cumulative).build()));
    let provider = SdkMeterProvider::builder().with_resource(res).with_reader(reader.clone()).build();
    (provider, reader)
}

struct Service {
    _provider: SdkMeterProvider,
    reader: SharedReader,
    /// When it last recorded, in [`Meters::tick`]s.
    last_used: u64,
    server: Histogram<f64>,
    client: Histogram<f64>,
}

/// Distinct histogram attribute sets remembered.
const ATTR_SETS: usize = 4096;

/// What of a span makes up its histogram attributes (the spec's list:
/// never `url.path`), and the attributes themselves.
struct CachedAttrs {
    kind: SpanKind,
    method: String,
    status: u16,
    version: String,
    scheme: String,
    error: bool,
    /// `http.route` (server) or `server.address` (client).
    label: Option<String>,
    port: u16,
    attrs: Vec<KeyValue>,
}

fn label(s: &HttpSpan) -> Option<&String> {
    match s.kind {
        SpanKind::Server => s.route.as_ref(),
        SpanKind::Client => s.server_address.as_ref(),
    }
}

fn attr_hash(s: &HttpSpan) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    (s.kind == SpanKind::Server, &s.method, s.status, &s.protocol_version, &s.scheme, s.error, label(s)).hash(&mut h);
    if s.kind == SpanKind::Client {
        s.server_port.hash(&mut h);
    }
    h.finish()
}

impl CachedAttrs {
    fn new(s: &HttpSpan) -> Self {
        let mut attrs = Vec::with_capacity(7);
        attrs.push(KeyValue::new("http.request.method", s.method.clone()));
        attrs.push(KeyValue::new("http.response.status_code", i64::from(s.status)));
        attrs.push(KeyValue::new("network.protocol.version", s.protocol_version.clone()));
        attrs.push(KeyValue::new("url.scheme", s.scheme.clone()));
        if s.error {
            attrs.push(KeyValue::new("error.type", s.status.to_string()));
        }
        match s.kind {
            SpanKind::Server => {
                if let Some(r) = &s.route {
                    attrs.push(KeyValue::new("http.route", r.clone()));
                }
            }
            SpanKind::Client => {
                if let Some(a) = &s.server_address {
                    attrs.push(KeyValue::new("server.address", a.clone()));
                }
                attrs.push(KeyValue::new("server.port", i64::from(s.server_port)));
            }
        }
        CachedAttrs {
            kind: s.kind,
            method: s.method.clone(),
            status: s.status,
            version: s.protocol_version.clone(),
            scheme: s.scheme.clone(),
            error: s.error,
            label: label(s).cloned(),
            port: if s.kind == SpanKind::Client { s.server_port } else { 0 },
            attrs,
        }
    }

    fn matches(&self, s: &HttpSpan) -> bool {
        self.kind == s.kind
            && self.status == s.status
            && self.error == s.error
            && self.method == s.method
            && self.version == s.protocol_version
            && self.scheme == s.scheme
            && self.label.as_ref() == label(s)
            && self.port == if s.kind == SpanKind::Client { s.server_port } else { 0 }
    }
}

/// The latest health report of each component.
pub type HealthState = Arc<Mutex<BTreeMap<Component, HealthReport>>>;

/// A cheap, shareable handle to read every meter (OTLP push, scrape).
#[derive(Clone)]
pub struct MetricsView {
    readers: Arc<Mutex<Vec<SharedReader>>>,
    health: HealthState,
}

impl MetricsView {
    /// Collects every provider: what is pushed or scraped.
    pub fn collect(&self) -> Vec<ResourceMetrics> {
        let readers = self.readers.lock().unwrap_or_else(|p| p.into_inner()).clone();
        readers
            .iter()
            .filter_map(|r| {
                let mut rm = ResourceMetrics::default();
                r.collect(&mut rm).ok().map(|_| rm)
            })
            .collect()
    }

    /// The latest health report of each component.
    pub fn health(&self) -> BTreeMap<Component, HealthReport> {
        self.health.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// All metric state of the exporter.
pub struct Meters {
    services: HashMap<ServiceResource, Service>,
    readers: Arc<Mutex<Vec<SharedReader>>>,
    self_meter: Meter,
    _self_provider: SdkMeterProvider,
    health: HealthState,
    registered: HashSet<String>,
    extra: Vec<(String, String)>,
    attr_sets: rustc_hash::FxHashMap<u64, CachedAttrs>,
    recorded: Counter,
    evicted: Counter,
    /// Counts recordings: the services' clock for least-recently-used.
    tick: u64,
}

impl Meters {
    /// Meters whose resources get `extra` attributes.
    pub fn new(extra: Vec<(String, String)>, host: &str, registry: &Registry) -> Meters {
        let (self_provider, self_reader) = provider(resource::ringtail(host, &extra));
        let self_meter = self_provider.meter("ringtail");
        Meters {
            services: HashMap::new(),
            readers: Arc::new(Mutex::new(vec![self_reader])),
            self_meter,
            _self_provider: self_provider,
            health: Arc::default(),
            registered: HashSet::new(),
            extra,
            attr_sets: rustc_hash::FxHashMap::default(),
            recorded: registry.counter("ringtail_metric_samples_total", &[]),
            evicted: registry.counter("ringtail_metric_services_evicted_total", &[]),
            tick: 0,
        }
    }

    /// A handle for readers of the metrics.
    pub fn view(&self) -> MetricsView {
        MetricsView { readers: self.readers.clone(), health: self.health.clone() }
    }

    fn service(&mut self, res: &ServiceResource) -> Option<&Service> {
        self.tick += 1;
        if !self.services.contains_key(res) {
            if self.services.len() >= MAX_SERVICES {
                self.evict_least_recent();
            }
            let (p, reader) = provider(resource::service(res, &self.extra));
            let meter = p.meter("ringtail");
            let hist = |name: &'static str, what: &'static str| {
                meter.f64_histogram(name).with_unit("s").with_description(what).with_boundaries(DURATION_BUCKETS.to_vec()).build()
            };
            let server = hist("http.server.request.duration", "Duration of HTTP server requests.");
            let client = hist("http.client.request.duration", "Duration of HTTP client requests.");
            self.readers.lock().unwrap_or_else(|p| p.into_inner()).push(reader.clone());
            self.services.insert(res.clone(), Service { _provider: p, reader, last_used: 0, server, client });
        }
        let svc = self.services.get_mut(res)?;
        svc.last_used = self.tick;
        Some(svc)
    }

    /// Drops the service that recorded longest ago, and its reader.
    fn evict_least_recent(&mut self) {
        let Some(oldest) = self.services.iter().min_by_key(|(_, s)| s.last_used).map(|(k, _)| k.clone()) else { return };
        if let Some(gone) = self.services.remove(&oldest) {
            self.readers.lock().unwrap_or_else(|p| p.into_inner()).retain(|r| !Arc::ptr_eq(&r.0, &gone.reader.0));
            self.evicted.inc();
        }
    }

    /// Services with meters now.
    pub fn services(&self) -> usize {
        self.services.len()
    }

    /// Records one span's duration.
    pub fn record(&mut self, res: &ServiceResource, s: &HttpSpan) {
        if !s.export_metrics {
            return;
        }
        let seconds = s.end_unix_ns.saturating_sub(s.start_unix_ns) as f64 / 1e9;
        // The attribute set, built once per distinct combination: building
        // it per span (seven allocations) cost more than the recording.
        let key = attr_hash(s);
        let hit = self.attr_sets.get(&key).is_some_and(|c| c.matches(s));
        if !hit {
            if self.attr_sets.len() >= ATTR_SETS {
                self.attr_sets.clear();
            }
            self.attr_sets.insert(key, CachedAttrs::new(s));
        }
        let Some(svc) = self.service(res) else { return };
        let hist = match s.kind {
            SpanKind::Server => svc.server.clone(),
            SpanKind::Client => svc.client.clone(),
        };
        // Inserted above when missing.
        let Some(attrs) = self.attr_sets.get(&key) else { return };
        hist.record(seconds, &attrs.attrs);
        self.recorded.inc();
    }

    /// Stores a component's health and makes sure each of its metrics is
    /// exported over OTLP too.
    pub fn update_health(&mut self, report: HealthReport) {
        let names: Vec<(String, PointKind)> = report.points.iter().map(|p| (p.name.clone(), p.kind)).collect();
        // A poisoned lock only means a reader panicked mid-read; the map is intact.
        self.health.lock().unwrap_or_else(|p| p.into_inner()).insert(report.component, report);
        for (name, kind) in names {
            if self.registered.insert(name.clone()) {
                self.register(name, kind);
            }
        }
    }

    fn register(&mut self, name: String, kind: PointKind) {
        let state = self.health.clone();
        let key = name.clone();
        let points = move || -> Vec<(f64, Vec<KeyValue>)> {
            let state = state.lock().unwrap_or_else(|p| p.into_inner());
            state
                .values()
                .flat_map(|r| r.points.iter())
                .filter(|p| p.name == key)
                .map(|p| (p.value, p.labels.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone())).collect()))
                .collect()
        };
        // The SDK keeps the callback for the provider's life.
        match kind {
            PointKind::Counter => {
                let otel_name = name.strip_suffix("_total").unwrap_or(&name).to_owned();
                let _ = self
                    .self_meter
                    .f64_observable_counter(otel_name)
                    .with_callback(move |o| points().into_iter().for_each(|(v, a)| o.observe(v, &a)))
                    .build();
            }
            PointKind::Gauge => {
                let _ = self
                    .self_meter
                    .f64_observable_gauge(name)
                    .with_callback(move |o| points().into_iter().for_each(|(v, a)| o.observe(v, &a)))
                    .build();
            }
        }
    }
}
