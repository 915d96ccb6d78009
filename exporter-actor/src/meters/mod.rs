//! Metrics derived from spans, and ringtail's own, kept here so that the
//! OTLP push and the Prometheus scrape read the same numbers.
//!
//! Each traced service has `http.server.request.duration` and
//! `http.client.request.duration` histograms in seconds, with the spec's
//! default buckets and the attributes the spec lists: never `url.path`,
//! which is unbounded. A series is keyed by a small tuple (method, status,
//! route or server address, port, scheme, protocol version, error) and
//! found with one hash lookup per span; its counts are cumulative from the
//! series' start. Reading (push or scrape) changes nothing.
//!
//! gRPC spans (those with an [`ipc_schema::RpcCall`]) go to the RPC
//! duration histograms of [`ipc_schema::rpc::METRICS`] instead, not to the
//! HTTP ones: the conventions' gRPC instrumentations record a call as an
//! RPC, and counting it twice would double every HTTP/2 dashboard. The
//! span-actor (another process, which reads
//! `OTEL_SEMCONV_STABILITY_OPT_IN`) says in the call which sets to record
//! it in (stable `rpc.*.call.duration` in s, experimental
//! `rpc.*.duration` in ms, both for `rpc/dup`) and every value of their
//! attributes ([`rpc`]).
//!
//! Database calls (spans of a [`ipc_schema::Call::Db`], read from
//! PostgreSQL, MySQL, Redis or memcached traffic) go to
//! `db.client.operation.duration` ([`ipc_schema::db`]: seconds, the
//! conventions' buckets) and never to the HTTP client histogram: they are
//! no HTTP exchange. Its attributes are the call's ([`db`]), bounded like
//! every other histogram's (below).
//!
//! Messaging calls (spans of a [`ipc_schema::Call::Messaging`], read from
//! Kafka, RabbitMQ, NATS or MQTT traffic) go to
//! `messaging.client.operation.duration` (seconds, the conventions'
//! buckets) and their messages to the counters
//! `messaging.client.sent.messages` (a `send`'s) or
//! `messaging.client.consumed.messages` (a `receive`'s), with the
//! attributes of [`messaging`]. A counter's series is a [`Point`] with no
//! bucket bounds: its `sum` is the count.
//!
//! Each span is recorded by one `match` on its call, into the histograms
//! of its instruments: a service's histograms are one table, an instrument
//! a slot ([`instrument_table`]), which the store and the sinks read
//! without knowing the protocols.
//!
//! Bounded, and degrading gracefully rather than filling up for good:
//! - at most [`MAX_SERVICES`] services; a new one evicts the least
//!   recently updated (`ringtail_metric_services_evicted_total`), so a host
//!   with many short-lived processes never stops measuring new ones; only
//!   when every service was updated by the batch being recorded are the
//!   spans of more counted (`ringtail_metric_services_overflow_total`) and
//!   not measured;
//! - at most [`MAX_SERIES_PER_INSTRUMENT`] series per histogram of a service and
//!   [`MAX_SERIES`] in all; beyond, a span is measured in its histogram's
//!   overflow series (attribute `otel.metric.overflow = true`, as the
//!   OpenTelemetry SDKs do) and counted
//!   (`ringtail_metric_series_overflow_total`);
//! - a series not updated for the eviction time (10 export intervals, at
//!   least 10 minutes: see [`idle_limit`]) is forgotten, and so is a
//!   service left with none; if it comes back it starts again from zero
//!   with a new start time (a cumulative reset, which backends expect).
//!
//! Besides, for the host as a whole: the service graph ([`graph`], Tempo's
//! `traces_service_graph_*`, from the edges the span-actor put on server
//! spans and from database calls; `metrics.service_graph`, on by default)
//! and span metrics ([`span_metrics`], `traces_span_metrics_*`;
//! `metrics.span_metrics`, opt-in), bounded and evicted as the rest.
//!
//! # Layout
//! - [`http`]: the HTTP histograms' instruments and series keys.
//! - [`rpc`]: the RPC histograms' series keys, from the span's call.
//! - [`db`]: the database histogram's instrument and series keys, from the
//!   span's call.
//! - [`messaging`]: the messaging histogram's and counters' instruments
//!   and series attributes, from the span's call.
//! - [`store`]: the series store: a service's histograms, one an
//!   instrument of one table ([`instrument_table`]).
//! - [`bounded`]: series by key with their cardinality limits (a cap,
//!   then an overflow series), written once for the store, the graph and
//!   the span metrics.
//! - [`graph`]: the service graph's edges; [`span_metrics`]: span metrics.
//! - [`health`]: the components' health reports.
//! - here: [`Meters`] (recording, eviction), [`Metrics`] and
//!   [`MetricsView`] (what the sinks read).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use ipc_schema::rpc::{Set, METRICS};
use ipc_schema::{Call, Component, HealthReport, ServiceResource, Span, SpanBatch, SpanKind, Value};
use runtime_kit::counters::{Counter, Gauge, Registry};
use rustc_hash::FxHashMap;

use crate::batch::Spans;
use crate::resource;

pub mod bounded;
pub mod db;
pub mod graph;
pub mod health;
pub mod http;
pub mod messaging;
pub mod rpc;
pub mod span_metrics;
pub mod store;

pub use db::DbKey;
pub use http::{SeriesKey, CLIENT_DURATION, SERVER_DURATION};
pub use rpc::RpcKey;
pub use store::{Histogram, Point, ServiceHistograms};

/// The spec's default buckets for HTTP request durations, in seconds.
pub const DURATION_BUCKETS: [f64; 14] = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0];
/// Buckets of the HTTP histograms, the last one open-ended.
pub const BUCKETS: usize = DURATION_BUCKETS.len() + 1;
/// Services with their own histograms; spans of more are counted, not measured.
pub const MAX_SERVICES: usize = 1024;
/// Series of one histogram of one service (the OpenTelemetry SDKs' default
/// cardinality limit); more go to its overflow series.
pub const MAX_SERIES_PER_INSTRUMENT: usize = 2000;
/// Series in all (about 200 bytes each); more go to overflow series.
pub const MAX_SERIES: usize = 20_000;
/// Export intervals a series may stay idle before it is forgotten.
pub const IDLE_INTERVALS: u32 = 10;
/// The shortest idle time before a series is forgotten.
pub const MIN_IDLE: Duration = Duration::from_secs(600);

/// How long a series may go without an update before it is forgotten:
/// [`IDLE_INTERVALS`] export intervals (so its last value was pushed
/// several times), and never less than [`MIN_IDLE`] (so a scraper that
/// polls every few minutes sees it too).
pub fn idle_limit(export_interval: Duration) -> Duration {
    (export_interval * IDLE_INTERVALS).max(MIN_IDLE)
}

/// Nanoseconds since the Unix epoch.
pub fn unix_ns() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// How an instrument's series aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A cumulative histogram (durations).
    Histogram,
    /// A monotonic cumulative sum (a count of messages): its series'
    /// [`Point::sum`].
    Counter,
}

/// An instrument of a service: a duration histogram (HTTP, RPC from
/// [`METRICS`], database, messaging) or a counter (messaging's messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instrument {
    /// The OpenTelemetry name.
    pub name: &'static str,
    /// Its description.
    pub description: &'static str,
    /// Its unit (UCUM).
    pub unit: &'static str,
    /// A histogram or a counter.
    pub kind: Kind,
}

/// How many histograms a service has: one an instrument of [`instruments`].
pub const INSTRUMENTS: usize = MSG_CONSUMED + 1;
/// The slot of `http.server.request.duration` in [`instruments`] (and in
/// a service's [`ServiceHistograms::histograms`]).
pub const HTTP_SERVER: usize = 0;
/// The slot of `http.client.request.duration`.
pub const HTTP_CLIENT: usize = 1;
/// The slot of the first of [`METRICS`]' RPC histograms; the others follow
/// in their order.
pub const RPC: usize = 2;
/// The slot of `db.client.operation.duration`.
pub const DB: usize = RPC + METRICS.len();
/// The slot of `messaging.client.operation.duration`.
pub const MSG_DURATION: usize = DB + 1;
/// The slot of `messaging.client.sent.messages`.
pub const MSG_SENT: usize = DB + 2;
/// The slot of `messaging.client.consumed.messages`.
pub const MSG_CONSUMED: usize = DB + 3;

/// Every instrument of a service with its bucket boundaries, by slot: the
/// one table the store builds a service's histograms from and the sinks
/// name them by.
pub fn instrument_table() -> [(Instrument, &'static [f64]); INSTRUMENTS] {
    std::array::from_fn(|i| match i {
        HTTP_SERVER => (SERVER_DURATION, &DURATION_BUCKETS[..]),
        HTTP_CLIENT => (CLIENT_DURATION, &DURATION_BUCKETS[..]),
        DB => (db::DURATION, &ipc_schema::db::BUCKETS[..]),
        MSG_DURATION => (messaging::DURATION, &ipc_schema::messaging::duration::BUCKETS[..]),
        // A counter's series has no buckets: one, which its sum fills.
        MSG_SENT => (messaging::SENT, &[][..]),
        MSG_CONSUMED => (messaging::CONSUMED, &[][..]),
        _ => {
            let m = &METRICS[i - RPC];
            (Instrument { name: m.name, description: m.description, unit: m.unit, kind: Kind::Histogram }, m.buckets)
        }
    })
}

/// Every instrument of a service, in the order [`ServiceHistograms::histogram`]
/// takes: the two HTTP histograms, then [`METRICS`]' RPC ones, then
/// `db.client.operation.duration`, then the messaging duration and its
/// two counters.
pub fn instruments() -> impl Iterator<Item = Instrument> {
    instrument_table().into_iter().map(|(i, _)| i)
}

/// A series' attributes: of an HTTP, an RPC, the database or a messaging
/// instrument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    /// `http.*.request.duration`.
    Http(SeriesKey),
    /// `rpc.*`.
    Rpc(RpcKey),
    /// `db.client.operation.duration`.
    Db(DbKey),
    /// `messaging.client.*` (a sorted list of attributes, as the
    /// database's).
    Msg(DbKey),
}

impl Key {
    /// The series' attributes, sorted by key (as the OpenTelemetry SDKs
    /// export them).
    pub fn attributes(&self, f: impl FnMut(&'static str, Value<&str>)) {
        match self {
            Key::Http(k) => k.attributes(f),
            Key::Rpc(k) => k.attributes(f),
            Key::Db(k) | Key::Msg(k) => k.attributes(f),
        }
    }
}

/// The attribute of an overflow series.
pub const OVERFLOW_ATTRIBUTE: (&str, Value<&'static str>) = ("otel.metric.overflow", Value::Bool(true));

/// Every metric the exporter holds: what readers see.
#[derive(Debug)]
pub struct Metrics {
    services: Vec<Option<ServiceHistograms>>,
    index: FxHashMap<ServiceResource, usize>,
    free: Vec<usize>,
    series: usize,
    health: health::Health,
    /// The service graph's edges (the host's).
    graph: graph::Graph,
    /// Span metrics (the host's).
    span_metrics: span_metrics::SpanMetrics,
    /// ringtail itself, as a resource of its own metrics.
    me: ServiceResource,
    /// Attributes added to every resource (ringtail's `OTEL_RESOURCE_ATTRIBUTES`).
    extra: Vec<(String, String)>,
}

impl Metrics {
    /// Every service that has histograms.
    pub fn services(&self) -> impl Iterator<Item = &ServiceHistograms> {
        self.services.iter().flatten()
    }

    /// Series held, overflow series included.
    pub fn series_count(&self) -> usize {
        self.series
    }

    /// The service graph.
    pub fn graph(&self) -> &graph::Graph {
        &self.graph
    }

    /// The span metrics.
    pub fn span_metrics(&self) -> &span_metrics::SpanMetrics {
        &self.span_metrics
    }

    /// The latest health report of each component.
    pub fn health(&self) -> &BTreeMap<Component, HealthReport> {
        &self.health.reports
    }

    /// When a component's counters started (Unix ns; 0 if unknown).
    pub fn health_start(&self, c: Component) -> u64 {
        self.health.starts.get(&c).map_or(0, |(_, t)| *t)
    }

    /// The resource of a service's metrics.
    pub fn resource<'a>(&'a self, s: &'a ServiceHistograms) -> resource::Attributes<'a> {
        resource::service(&s.resource, &self.extra)
    }

    /// The resource of ringtail's own metrics.
    pub fn own_resource(&self) -> resource::Attributes<'_> {
        resource::ringtail(&self.me, &self.extra)
    }

    /// Evicts the service updated least recently, unless every service was
    /// updated at `now` (by the batch being recorded, whose cached slots
    /// must stay valid); whether one went.
    fn evict_least_recent(&mut self, now: u64) -> bool {
        let oldest = self.services.iter().enumerate().filter_map(|(i, s)| Some((s.as_ref()?.last_ns, i))).min();
        let Some((last, i)) = oldest.filter(|(last, _)| *last < now) else {
            return false;
        };
        let Some(svc) = self.services[i].take() else {
            return false;
        };
        tracing::debug!(pid = svc.resource.pid, last_ns = last, "least recently updated service's metrics evicted");
        self.series -= svc.len();
        self.index.remove(&svc.resource);
        self.free.push(i);
        true
    }

    /// The slot of `res`'s histograms, made if new (`evicted` counts a
    /// service evicted to make room); `None` if full.
    fn slot(&mut self, res: &ServiceResource, now: u64, evicted: &mut u64) -> Option<usize> {
        if let Some(&i) = self.index.get(res) {
            return Some(i);
        }
        if self.index.len() >= MAX_SERVICES {
            if !self.evict_least_recent(now) {
                return None;
            }
            *evicted += 1;
        }
        let svc = ServiceHistograms::new(res.clone(), now);
        let i = match self.free.pop() {
            Some(i) => {
                self.services[i] = Some(svc);
                i
            }
            None => {
                self.services.push(Some(svc));
                self.services.len() - 1
            }
        };
        self.index.insert(res.clone(), i);
        Some(i)
    }

    fn evict(&mut self, cutoff: u64) -> usize {
        let mut gone = self.graph.evict(cutoff) + self.span_metrics.evict(cutoff);
        for i in 0..self.services.len() {
            let Some(svc) = &mut self.services[i] else {
                continue;
            };
            gone += svc.evict(cutoff);
            if svc.is_empty() {
                self.index.remove(&svc.resource);
                self.services[i] = None;
                self.free.push(i);
            }
        }
        self.series -= gone;
        gone
    }
}

/// A cheap, shareable handle to read every metric (OTLP push, scrape).
#[derive(Clone, Debug)]
pub struct MetricsView {
    state: Arc<Mutex<Metrics>>,
}

impl MetricsView {
    /// Runs `f` on the metrics as they are now (recording waits meanwhile).
    pub fn read<R>(&self, f: impl FnOnce(&Metrics) -> R) -> R {
        f(&lock(&self.state))
    }
}

fn lock(state: &Mutex<Metrics>) -> MutexGuard<'_, Metrics> {
    // A poisoned lock only means a reader panicked mid-read; recording
    // never leaves the numbers half-updated across a panic point.
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// All metric state of the exporter, held by the receiver.
pub struct Meters {
    state: Arc<Mutex<Metrics>>,
    /// Per resource of the batch being recorded: its service slot, once looked up.
    slots: Vec<Option<Option<usize>>>,
    idle: Duration,
    next_sweep: u64,
    recorded: Counter,
    services_overflow: Counter,
    services_evicted: Counter,
    series_overflow: Counter,
    evicted: Counter,
    /// Services with histograms now (at most [`MAX_SERVICES`]).
    services: Gauge,
    /// Which of the host's derived metrics are recorded.
    derived: Derived,
}

/// Which metrics derived from spans for the host as a whole are recorded
/// (`[metrics]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Derived {
    /// The service graph ([`graph`]).
    pub service_graph: bool,
    /// Span metrics ([`span_metrics`]).
    pub span_metrics: bool,
}

impl Default for Derived {
    /// As `[metrics]`'s defaults: the service graph only.
    fn default() -> Self {
        Derived { service_graph: true, span_metrics: false }
    }
}

impl Meters {
    /// Meters whose resources get `extra` attributes; series idle for
    /// [`MIN_IDLE`] are forgotten (see [`Meters::evict_idle_after`]).
    pub fn new(extra: Vec<(String, String)>, host: &str, registry: &Registry) -> Meters {
        let state = Metrics {
            services: Vec::new(),
            index: FxHashMap::default(),
            free: Vec::new(),
            series: 0,
            health: health::Health::default(),
            graph: graph::Graph::default(),
            span_metrics: span_metrics::SpanMetrics::default(),
            me: resource::ringtail_process(host),
            extra,
        };
        Meters {
            state: Arc::new(Mutex::new(state)),
            slots: Vec::new(),
            idle: MIN_IDLE,
            next_sweep: 0,
            recorded: registry.counter("ringtail_metric_samples_total", &[]),
            services_overflow: registry.counter("ringtail_metric_services_overflow_total", &[]),
            services_evicted: registry.counter("ringtail_metric_services_evicted_total", &[]),
            series_overflow: registry.counter("ringtail_metric_series_overflow_total", &[]),
            evicted: registry.counter("ringtail_metric_series_evicted_total", &[]),
            services: registry.gauge("ringtail_metric_services", &[]),
            derived: Derived::default(),
        }
    }

    /// Records the host's derived metrics that `derived` turns on.
    pub fn derive(mut self, derived: Derived) -> Meters {
        self.derived = derived;
        self
    }

    /// Forgets series idle for `idle` (e.g. [`idle_limit`] of the export interval).
    pub fn evict_idle_after(mut self, idle: Duration) -> Meters {
        self.idle = idle;
        self
    }

    /// A handle for readers of the metrics.
    pub fn view(&self) -> MetricsView {
        MetricsView { state: self.state.clone() }
    }

    /// Records the duration of every span of `batch` that counts in the
    /// metrics.
    pub fn record_batch(&mut self, batch: &Spans<'_>) {
        self.record_batch_at(batch, unix_ns());
    }

    /// [`Meters::record_batch`] at time `now` (Unix ns).
    pub fn record_batch_at(&mut self, batch: &Spans<'_>, now: u64) {
        let state = Arc::clone(&self.state);
        let mut st = lock(&state);
        self.sweep(&mut st, now);
        self.slots.clear();
        self.slots.resize(batch.resources.len(), None);
        let (mut recorded, mut no_service, mut overflow, mut evicted_services) = (0u64, 0u64, 0u64, 0u64);
        for s in batch.spans.iter().filter(|s| s.export_metrics) {
            let r = s.resource as usize;
            let Some(res) = batch.resources.get(r) else {
                continue;
            };
            // The host's: an edge, a span's name; whatever the service cap.
            if self.derived.service_graph {
                if let Some(o) = graph::edge_of(res, s) {
                    let Metrics { graph, series, .. } = &mut *st;
                    overflow += u64::from(!graph.record(&o, now, series));
                }
            }
            if self.derived.span_metrics {
                let Metrics { span_metrics, series, .. } = &mut *st;
                overflow += u64::from(!span_metrics.record(res, s, now, series));
            }
            let Some(cached) = self.slots.get_mut(r) else {
                continue;
            };
            let slot = *cached.get_or_insert_with(|| st.slot(&batch.resources[r], now, &mut evicted_services));
            let Some(slot) = slot else {
                no_service += 1;
                continue;
            };
            let ns = s.end_unix_ns.saturating_sub(s.start_unix_ns) as f64;
            let Metrics { services, series, .. } = &mut *st;
            // Slots handed out by `slot` hold a service until `evict`, which
            // does not run while a batch is recorded.
            let Some(svc) = services[slot].as_mut() else {
                continue;
            };
            svc.last_ns = now;
            recorded += 1;
            // Each call in its own conventions' histograms: an RPC or a
            // database call is never measured as an HTTP request.
            let h = &mut svc.histograms;
            match &s.call {
                Call::Http(http) => {
                    let slot = match s.kind {
                        SpanKind::Server => HTTP_SERVER,
                        SpanKind::Client | SpanKind::Producer | SpanKind::Consumer => HTTP_CLIENT,
                    };
                    overflow += u64::from(!h[slot].record(s, http, ns / 1e9, now, series));
                }
                Call::Rpc(_, call) => {
                    for (m, hist) in METRICS.iter().zip(&mut h[RPC..DB]) {
                        let wanted = match m.set {
                            Set::Stable => call.stable,
                            Set::Experimental => call.experimental,
                        };
                        if wanted && m.kind == s.kind && !hist.record_rpc(&rpc::attributes(m.set, s, call), ns / m.ns_per_unit, now, series)
                        {
                            overflow += 1;
                        }
                    }
                }
                Call::Db(call) => {
                    overflow += u64::from(!h[DB].record_db(&db::attributes(s, call), ns / ipc_schema::db::NS_PER_UNIT, now, series));
                }
                Call::Messaging(call) => {
                    let a = messaging::attributes(messaging::Metric::Duration, s, call);
                    let secs = ns / ipc_schema::messaging::duration::NS_PER_UNIT;
                    overflow += u64::from(!h[MSG_DURATION].record_msg(&a, secs, now, series));
                    if let Some(m) = messaging::counted(call) {
                        let slot = if m == messaging::Metric::Sent { MSG_SENT } else { MSG_CONSUMED };
                        let a = messaging::attributes(m, s, call);
                        overflow += u64::from(!h[slot].record_msg(&a, messaging::messages(call), now, series));
                    }
                }
            }
        }
        self.services.set(st.index.len() as f64);
        drop(st);
        self.recorded.add(recorded);
        self.services_overflow.add(no_service);
        self.services_evicted.add(evicted_services);
        self.series_overflow.add(overflow);
    }

    /// Records one span's duration (a batch of one).
    pub fn record<S: AsRef<str>>(&mut self, res: &ServiceResource, s: &Span<S>) {
        let mut s = s.to_owned_span();
        s.resource = 0;
        self.record_batch(&Spans::of_own(&SpanBatch::of(vec![res.clone()], &[s])));
    }

    /// Forgets idle series, at most every tenth of the idle time.
    fn sweep(&mut self, st: &mut Metrics, now: u64) {
        if now < self.next_sweep {
            return;
        }
        let idle = self.idle.as_nanos() as u64;
        self.next_sweep = now + (idle / 10).max(1_000_000_000);
        let gone = st.evict(now.saturating_sub(idle));
        self.services.set(st.index.len() as f64);
        self.evicted.add(gone as u64);
        if gone > 0 {
            tracing::debug!(series = gone, "idle metric series forgotten");
        }
    }

    /// Stores a component's health (exported with every push and scrape),
    /// and forgets idle series when due.
    pub fn update_health(&mut self, report: HealthReport) {
        self.update_health_at(report, unix_ns());
    }

    /// [`Meters::update_health`] at time `now` (Unix ns).
    pub fn update_health_at(&mut self, report: HealthReport, now: u64) {
        let state = Arc::clone(&self.state);
        let mut st = lock(&state);
        let start = st.health.starts.entry(report.component).or_insert((report.instance, now));
        if start.0 != report.instance {
            *start = (report.instance, now);
        }
        st.health.reports.insert(report.component, report);
        self.sweep(&mut st, now);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The resource of a service `name` (its executable too) on host `h`.
    pub(crate) fn res(name: &str) -> ServiceResource {
        ServiceResource {
            service_name: name.into(),
            service_instance_id: "h:1".into(),
            host_name: "h".into(),
            pid: 1,
            executable_name: name.into(),
            extra: vec![],
        }
    }

    pub(crate) fn span(route: &str, ms: u64, status: u16) -> Span {
        Span {
            resource: 0,
            kind: SpanKind::Server,
            trace_id: 1,
            span_id: 1,
            parent_span_id: 0,
            trace_flags: 1,
            name: format!("GET {route}"),
            start_unix_ns: 1_000,
            end_unix_ns: 1_000 + ms * 1_000_000,
            error: status >= 500,
            server_address: None,
            server_port: 80,
            peer_address: "a".into(),
            peer_port: 1,
            export_trace: true,
            export_metrics: true,
            attributes: Vec::new(),
            edge: None,
            links: Vec::new(),
            call: Call::Http(ipc_schema::HttpCall {
                method: "GET".into(),
                method_original: None,
                route: Some(route.into()),
                path: "/x/1".into(),
                query: None,
                scheme: "http".into(),
                status,
                client_address: "a".into(),
                client_port: 1,
                protocol_version: "1.1".into(),
                user_agent: None,
            }),
        }
    }

    /// The HTTP exchange of span `s` (of an HTTP or RPC call), to change.
    pub(crate) fn http_mut(s: &mut Span) -> &mut ipc_schema::HttpCall {
        match &mut s.call {
            Call::Http(h) | Call::Rpc(h, _) => h,
            other => panic!("not an HTTP span: {other:?}"),
        }
    }

    /// The database call of span `s`, to change.
    pub(crate) fn db_mut(s: &mut Span) -> Option<&mut ipc_schema::DbCall> {
        match &mut s.call {
            Call::Db(c) => Some(c),
            _ => None,
        }
    }

    /// A gRPC span of `method` (`pkg.Svc/Method`) with the attributes the
    /// span-actor gives it in the mode of the `stable` / `experimental` sets.
    pub(crate) fn grpc_span(kind: SpanKind, ms: u64, stable: bool, experimental: bool, method: &str, code: i64) -> Span {
        let mut s = span("/", ms, 200);
        s.kind = kind;
        let h = http_mut(&mut s);
        h.route = None;
        h.method = "POST".into();
        h.path = format!("/{method}");
        h.protocol_version = "2".into();
        s.server_address = Some("api".into());
        s.server_port = 50051;
        let (service, short) = method.split_once('/').unwrap_or(("", method));
        let str = |k: &str, v: &str| (k.to_owned(), Value::Str(v.to_owned()));
        // What the span-actor decides: UNIMPLEMENTED on a server is _OTHER.
        let name = match code {
            0 => "OK",
            5 => "NOT_FOUND",
            12 => "UNIMPLEMENTED",
            _ => "INTERNAL",
        };
        let recognised = !(kind == SpanKind::Server && code == 12);
        let rpc = ipc_schema::RpcCall {
            stable,
            experimental,
            system: "grpc".to_owned(),
            method: if recognised { method.to_owned() } else { "_OTHER".to_owned() },
            service_method: recognised.then(|| (service.to_owned(), short.to_owned())),
            code: Some(code as i32),
            status: Some(name.to_owned()),
            error_type: (code != 0).then(|| name.to_owned()),
        };
        if let Call::Http(h) = &s.call {
            s.call = Call::Rpc(h.clone(), rpc);
        }
        if experimental {
            s.attributes.push(str("rpc.system", "grpc"));
            s.attributes.push(str("rpc.service", service));
            if !stable {
                s.attributes.push(str("rpc.method", short));
            }
            s.attributes.push(("rpc.grpc.status_code".to_owned(), Value::Int(code)));
        }
        if stable {
            s.attributes.push(str("rpc.system.name", "grpc"));
            s.attributes.push(str("rpc.method", if recognised { method } else { "_OTHER" }));
            s.attributes.push(str("rpc.response.status_code", name));
            if code != 0 {
                s.attributes.push(str("error.type", name));
            }
        }
        s
    }

    /// A PostgreSQL call as the span-actor makes it: `SELECT` on `users` of
    /// database `shop` (server `db.internal:5432`), failed with SQLSTATE
    /// `code` when given.
    pub(crate) fn db_span(ms: u64, code: Option<&str>) -> Span {
        let mut s = span("/", ms, 0);
        s.kind = SpanKind::Client;
        s.name = "SELECT users".into();
        s.error = code.is_some();
        s.server_address = Some("db.internal".into());
        s.server_port = 5432;
        s.peer_address = "10.0.0.5".into();
        s.peer_port = 5432;
        s.call = Call::Db(ipc_schema::DbCall {
            system: ipc_schema::db::system::POSTGRESQL.into(),
            namespace: Some("shop".into()),
            operation: Some("SELECT".into()),
            collection: Some("users".into()),
            query_text: Some("SELECT * FROM users WHERE id = $1".into()),
            query_summary: Some("SELECT users".into()),
            status_code: code.map(Into::into),
            error_type: code.map(Into::into),
            returned_rows: code.is_none().then_some(1),
        });
        s
    }

    /// A messaging span of `ms` milliseconds: a Kafka call of operation
    /// type `op_type` on topic `orders` (PRODUCER for a send, CONSUMER for
    /// a receive, CLIENT else), of `count` messages, failed with `error`,
    /// linked to one producer.
    pub(crate) fn msg_span(ms: u64, op_type: Option<&str>, count: Option<u64>, error: Option<&str>) -> Span {
        let mut s = span("/", ms, 0);
        s.kind = match op_type {
            Some("send") => SpanKind::Producer,
            Some("receive") => SpanKind::Consumer,
            _ => SpanKind::Client,
        };
        let op = match op_type {
            Some("send") => "send",
            Some("receive") => "poll",
            _ => "commit",
        };
        s.name = format!("{op} orders");
        s.error = error.is_some();
        s.server_address = Some("10.0.0.9".into());
        s.server_port = 9092;
        s.peer_address = "10.0.0.9".into();
        s.peer_port = 9092;
        s.links = vec![ipc_schema::SpanLink { trace_id: 0xabc, span_id: 0xdef, trace_flags: 1 }];
        s.call = Call::Messaging(ipc_schema::MsgCall {
            system: ipc_schema::messaging::system::KAFKA.into(),
            operation_type: op_type.map(Into::into),
            operation_name: op.into(),
            destination: Some("orders".into()),
            partition: Some("0".into()),
            consumer_group: (op_type != Some("send")).then(|| "billing".into()),
            client_id: Some("rt-1".into()),
            error_type: error.map(Into::into),
            kafka_offset: Some(42),
            message_count: count,
            ..ipc_schema::MsgCall::default()
        });
        s
    }

    /// The messaging call of span `s`, to change.
    pub(crate) fn msg_mut(s: &mut Span) -> &mut ipc_schema::MsgCall {
        match &mut s.call {
            Call::Messaging(c) => c,
            other => panic!("not a messaging span: {other:?}"),
        }
    }

    /// Every series of instrument `slot` of the only service: (attributes
    /// as text, count, sum).
    fn slot_series(m: &Meters, slot: usize) -> Vec<(Vec<String>, u64, f64)> {
        m.view().read(|m| {
            let svc = m.services().next().expect("one service");
            let mut v: Vec<_> = svc.histograms[slot]
                .series()
                .map(|(k, p)| {
                    let mut a = Vec::new();
                    if let Some(k) = k {
                        k.attributes(|n, v| a.push(format!("{n}={v:?}")));
                    }
                    (a, p.count, p.sum)
                })
                .collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        })
    }

    #[test]
    fn messaging_calls_go_to_the_messaging_duration_and_their_messages_to_the_counters() {
        let registry = Registry::new(Component::ExporterActor, 1);
        let mut m = Meters::new(vec![], "h", &registry);
        let mut inbox = msg_span(4, Some("send"), None, None);
        msg_mut(&mut inbox).destination = Some("_INBOX.x7Yq".into());
        msg_mut(&mut inbox).temporary = true;
        let spans = vec![
            msg_span(5, Some("send"), Some(3), None),
            msg_span(20, Some("send"), Some(2), None),
            msg_span(2, Some("send"), None, Some("NOT_LEADER_OR_FOLLOWER")),
            msg_span(7, Some("receive"), Some(7), None),
            msg_span(1, None, None, None),
            inbox,
        ];
        m.record_batch_at(&Spans::of_own(&SpanBatch::of(vec![res("s")], &spans)), 1);
        assert_eq!(registry.counter("ringtail_metric_samples_total", &[]).get(), 6);
        let none =
            m.view().read(|m| m.services().map(|s| s.histograms[..MSG_DURATION].iter().map(Histogram::len).sum::<usize>()).sum::<usize>());
        assert_eq!(none, 0, "a messaging call is in no HTTP, RPC or database histogram");
        let str = |k: &str, v: &str| format!("{k}=Str({v:?})");
        let port = "server.port=Int(9092)".to_owned();
        let base = |op: &str| {
            vec![
                str("messaging.destination.name", "orders"),
                str("messaging.destination.partition.id", "0"),
                str("messaging.operation.name", op),
            ]
        };
        // The duration: every call; the operation type, the consumer group
        // (not a producer's); no destination name of a temporary one.
        let d = slot_series(&m, MSG_DURATION);
        let send = [
            base("send"),
            vec![
                str("messaging.operation.type", "send"),
                str("messaging.system", "kafka"),
                str("server.address", "10.0.0.9"),
                port.clone(),
            ],
        ]
        .concat();
        let find =
            |v: &[(Vec<String>, u64, f64)], a: &[String]| v.iter().find(|s| s.0 == a).cloned().unwrap_or_else(|| panic!("{a:?} in {v:?}"));
        assert_eq!(d.len(), 5, "{d:?}");
        let ok = find(&d, &send);
        assert_eq!(ok.1, 2);
        assert!((ok.2 - 0.025).abs() < 1e-12, "seconds: {ok:?}");
        let failed = [vec![str("error.type", "NOT_LEADER_OR_FOLLOWER")], send.clone()].concat();
        assert_eq!(find(&d, &failed).1, 1);
        let poll = [
            vec![str("messaging.consumer.group.name", "billing")],
            base("poll"),
            vec![
                str("messaging.operation.type", "receive"),
                str("messaging.system", "kafka"),
                str("server.address", "10.0.0.9"),
                port.clone(),
            ],
        ]
        .concat();
        assert_eq!(find(&d, &poll).1, 1);
        let inbox = vec![
            str("messaging.destination.partition.id", "0"),
            str("messaging.operation.name", "send"),
            str("messaging.operation.type", "send"),
            str("messaging.system", "kafka"),
            str("server.address", "10.0.0.9"),
            port.clone(),
        ];
        assert_eq!(find(&d, &inbox).1, 1, "a temporary destination's name is no metric attribute");
        // The counters: a send's messages (one when the count is unknown),
        // a receive's; no operation type, no consumer group on sent; a
        // commit moves no message.
        let sent = slot_series(&m, MSG_SENT);
        let sent_ok = [base("send"), vec![str("messaging.system", "kafka"), str("server.address", "10.0.0.9"), port.clone()]].concat();
        assert_eq!(find(&sent, &sent_ok).2, 5.0);
        let sent_failed = [vec![str("error.type", "NOT_LEADER_OR_FOLLOWER")], sent_ok.clone()].concat();
        assert_eq!(find(&sent, &sent_failed).2, 1.0);
        assert_eq!(sent.len(), 3, "{sent:?}");
        let consumed = slot_series(&m, MSG_CONSUMED);
        let consumed_ok = [
            vec![str("messaging.consumer.group.name", "billing")],
            base("poll"),
            vec![str("messaging.system", "kafka"), str("server.address", "10.0.0.9"), port],
        ]
        .concat();
        assert_eq!(consumed, vec![(consumed_ok, 1, 7.0)]);
        // Never the client id, the offset or the per-message numbers.
        for (a, _, _) in [d, sent, consumed].concat() {
            assert!(
                a.iter().all(|k| !k.starts_with("messaging.client.id")
                    && !k.starts_with("messaging.kafka")
                    && !k.starts_with("messaging.batch")),
                "{a:?}"
            );
        }
        let names: Vec<_> = instruments().map(|i| (i.name, i.unit, i.kind)).collect();
        assert_eq!(names[MSG_DURATION], ("messaging.client.operation.duration", "s", Kind::Histogram));
        assert_eq!(names[MSG_SENT], ("messaging.client.sent.messages", "{message}", Kind::Counter));
        assert_eq!(names[MSG_CONSUMED], ("messaging.client.consumed.messages", "{message}", Kind::Counter));
        let bounds = m.view().read(|m| m.services().flat_map(|s| s.histograms[MSG_DURATION].series()).map(|(_, p)| p.bounds).next());
        assert_eq!(bounds, Some(&ipc_schema::messaging::duration::BUCKETS[..]));
    }

    /// Every series of the database histogram of the only service:
    /// (attributes as text, count, sum).
    fn db_series(m: &Meters) -> Vec<(Vec<String>, u64, f64)> {
        m.view().read(|m| {
            let svc = m.services().next().expect("one service");
            let mut v: Vec<_> = svc.histograms[DB]
                .series()
                .map(|(k, p)| {
                    let mut a = Vec::new();
                    match k {
                        Some(k) => k.attributes(|n, v| a.push(format!("{n}={v:?}"))),
                        None => a.push("overflow".to_owned()),
                    }
                    (a, p.count, p.sum)
                })
                .collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        })
    }

    #[test]
    fn database_calls_go_to_the_db_histogram_one_series_per_attribute_set_not_to_http() {
        let registry = Registry::new(Component::ExporterActor, 1);
        let mut m = Meters::new(vec![], "h", &registry);
        let mut orders = db_span(3, None);
        if let Some(c) = db_mut(&mut orders) {
            c.collection = Some("orders".into());
            c.query_summary = Some("SELECT orders".into());
        }
        let mut http_client = span("/", 5, 200);
        http_client.kind = SpanKind::Client;
        let mut unmeasured = db_span(1, None);
        unmeasured.export_metrics = false;
        let spans = vec![db_span(5, None), db_span(20, None), db_span(2, Some("42601")), orders, http_client, unmeasured];
        m.record_batch_at(&Spans::of_own(&SpanBatch::of(vec![res("s")], &spans)), 1);
        assert_eq!(registry.counter("ringtail_metric_samples_total", &[]).get(), 5);
        let (server, client) = m.view().read(|m| {
            m.services().map(|s| (s.histograms[HTTP_SERVER].len(), s.histograms[HTTP_CLIENT].len())).next().expect("one service")
        });
        assert_eq!((server, client), (0, 1), "only the HTTP client span is an HTTP request");
        let client_count =
            m.view().read(|m| m.services().flat_map(|s| s.histograms[HTTP_CLIENT].series()).map(|(_, p)| p.count).sum::<u64>());
        assert_eq!(client_count, 1, "no database call in http.client.request.duration");
        let db = db_series(&m);
        let common = |summary: &str, collection: &str| {
            vec![
                format!("db.collection.name=Str(\"{collection}\")"),
                "db.namespace=Str(\"shop\")".to_owned(),
                "db.operation.name=Str(\"SELECT\")".to_owned(),
                format!("db.query.summary=Str(\"{summary}\")"),
            ]
        };
        let tail = ["db.system.name=Str(\"postgresql\")", "server.address=Str(\"db.internal\")", "server.port=Int(5432)"];
        let ok: Vec<String> = common("SELECT users", "users").into_iter().chain(tail.map(String::from)).collect();
        let orders: Vec<String> = common("SELECT orders", "orders").into_iter().chain(tail.map(String::from)).collect();
        let mut failed = common("SELECT users", "users");
        failed.push("db.response.status_code=Str(\"42601\")".to_owned());
        failed.push(tail[0].to_owned());
        failed.push("error.type=Str(\"42601\")".to_owned());
        failed.extend(tail[1..].iter().map(|t| t.to_string()));
        assert_eq!(db.len(), 3, "{db:?}");
        let find = |a: &[String]| db.iter().find(|s| s.0 == a).unwrap_or_else(|| panic!("{a:?} in {db:?}"));
        assert_eq!(find(&ok).1, 2);
        assert!((find(&ok).2 - 0.025).abs() < 1e-12, "seconds: {db:?}");
        assert_eq!(find(&orders).1, 1);
        assert_eq!(find(&failed).1, 1);
        let bounds = m.view().read(|m| m.services().flat_map(|s| s.histograms[DB].series()).map(|(_, p)| p.bounds).next());
        assert_eq!(bounds, Some(&ipc_schema::db::BUCKETS[..]));
        let names: Vec<_> = instruments().map(|i| i.name).collect();
        assert_eq!(names[DB], "db.client.operation.duration");
        let db_hist = m.view().read(|m| m.services().next().and_then(|s| s.histogram(DB).map(Histogram::len)));
        assert_eq!(db_hist, Some(3), "instruments() and histogram(i) agree");
    }

    #[test]
    fn database_series_are_bounded_like_the_others() {
        let registry = Registry::new(Component::ExporterActor, 1);
        // (the database edge of the service graph is a series too: graph.rs's tests)
        let off = Derived { service_graph: false, span_metrics: false };
        let mut m = Meters::new(vec![], "h", &registry).evict_idle_after(Duration::from_secs(100)).derive(off);
        let spans: Vec<Span> = (0..MAX_SERIES_PER_INSTRUMENT + 3)
            .map(|i| {
                let mut s = db_span(1, None);
                if let Some(c) = db_mut(&mut s) {
                    c.collection = Some(format!("t{i}"));
                }
                s
            })
            .collect();
        m.record_batch_at(&Spans::of_own(&SpanBatch::of(vec![res("s")], &spans)), 1);
        let db = db_series(&m);
        assert_eq!(db.len(), MAX_SERIES_PER_INSTRUMENT + 1);
        let overflow: Vec<_> = db.iter().filter(|s| s.0 == ["overflow"]).collect();
        assert_eq!(overflow.len(), 1);
        assert_eq!(overflow[0].1, 3);
        assert_eq!(registry.counter("ringtail_metric_series_overflow_total", &[]).get(), 3);
        assert_eq!(m.view().read(|m| m.series_count()), MAX_SERIES_PER_INSTRUMENT + 1);
        // Idle database series are forgotten as the others are.
        let s = 1_000_000_000u64;
        m.record_batch_at(&Spans::of_own(&SpanBatch::of(vec![res("s")], &[db_span(1, Some("42601"))])), 200 * s);
        assert_eq!(m.view().read(|m| m.series_count()), 1);
        assert_eq!(registry.counter("ringtail_metric_series_evicted_total", &[]).get(), MAX_SERIES_PER_INSTRUMENT as u64 + 1);
    }

    /// Every series of RPC histogram `i` of the only service:
    /// (attributes as text, count, sum).
    fn rpc_series(m: &Meters, i: usize) -> Vec<(Vec<String>, u64, f64)> {
        m.view().read(|m| {
            let svc = m.services().next().expect("one service");
            let mut v: Vec<_> = svc.histograms[RPC + i]
                .series()
                .map(|(k, p)| {
                    let mut a = Vec::new();
                    match k {
                        Some(k) => k.attributes(|n, v| a.push(format!("{n}={v:?}"))),
                        None => a.push("overflow".to_owned()),
                    }
                    (a, p.count, p.sum)
                })
                .collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        })
    }

    fn index(name: &str) -> usize {
        METRICS.iter().position(|m| m.name == name).expect("an RPC metric")
    }

    #[test]
    fn grpc_spans_go_to_the_rpc_histograms_of_the_mode_their_attributes_say() {
        let registry = Registry::new(Component::ExporterActor, 1);
        let mut m = Meters::new(vec![], "h", &registry);
        let spans = vec![
            grpc_span(SpanKind::Server, 5, true, false, "demo.Items/Get", 0),
            grpc_span(SpanKind::Server, 5, true, false, "demo.Items/Get", 0),
            grpc_span(SpanKind::Server, 20, true, false, "demo.Items/Get", 5),
            grpc_span(SpanKind::Client, 5, false, true, "demo.Items/Get", 0),
            grpc_span(SpanKind::Client, 7, true, true, "demo.Items/List", 0),
        ];
        m.record_batch_at(&Spans::of_own(&SpanBatch::of(vec![res("s")], &spans)), 1);
        assert_eq!(registry.counter("ringtail_metric_samples_total", &[]).get(), 5);
        let http =
            m.view().read(|m| m.services().map(|s| s.histograms[HTTP_SERVER].len() + s.histograms[HTTP_CLIENT].len()).sum::<usize>());
        assert_eq!(http, 0, "a gRPC call is measured as an RPC, not also as an HTTP request");
        let server = rpc_series(&m, index("rpc.server.call.duration"));
        assert_eq!(server.len(), 2, "{server:?}");
        let ok = &server[1];
        assert_eq!(ok.0, ["rpc.method=Str(\"demo.Items/Get\")", "rpc.response.status_code=Str(\"OK\")", "rpc.system.name=Str(\"grpc\")"]);
        assert_eq!(ok.1, 2);
        assert!((ok.2 - 0.010).abs() < 1e-12, "seconds: {ok:?}");
        assert_eq!(server[0].0[0], "error.type=Str(\"NOT_FOUND\")");
        assert!(rpc_series(&m, index("rpc.server.duration")).is_empty(), "no experimental attributes, no experimental metric");
        let client_exp = rpc_series(&m, index("rpc.client.duration"));
        assert_eq!(client_exp.len(), 2, "{client_exp:?}");
        assert_eq!(
            client_exp[0].0,
            [
                "rpc.grpc.status_code=Int(0)",
                "rpc.method=Str(\"Get\")",
                "rpc.service=Str(\"demo.Items\")",
                "rpc.system=Str(\"grpc\")",
                "server.address=Str(\"api\")",
                "server.port=Int(50051)"
            ]
        );
        assert!((client_exp[0].2 - 5.0).abs() < 1e-9, "milliseconds: {client_exp:?}");
        // rpc/dup: the experimental method is the last part of the stable one.
        assert_eq!(client_exp[1].0[1], "rpc.method=Str(\"List\")");
        let client = rpc_series(&m, index("rpc.client.call.duration"));
        assert_eq!(client.len(), 1, "only the dup span has the stable set");
        assert_eq!(client[0].0.last().map(String::as_str), Some("server.port=Int(50051)"));
    }

    #[test]
    fn unrecognised_methods_name_no_method_and_series_overflow() {
        let registry = Registry::new(Component::ExporterActor, 1);
        let mut m = Meters::new(vec![], "h", &registry);
        let spans =
            vec![grpc_span(SpanKind::Server, 1, false, true, "x.Y/Nope", 12), grpc_span(SpanKind::Server, 1, true, true, "x.Y/Nope", 12)];
        m.record_batch_at(&Spans::of_own(&SpanBatch::of(vec![res("s")], &spans)), 1);
        let exp = rpc_series(&m, index("rpc.server.duration"));
        assert_eq!(exp, [(vec!["rpc.grpc.status_code=Int(12)".to_owned(), "rpc.system=Str(\"grpc\")".to_owned()], 2, 2.0)]);
        let stable = rpc_series(&m, index("rpc.server.call.duration"));
        assert_eq!(stable[0].0[1], "rpc.method=Str(\"_OTHER\")");
        let spans: Vec<Span> =
            (0..MAX_SERIES_PER_INSTRUMENT + 3).map(|i| grpc_span(SpanKind::Server, 1, true, false, &format!("p.S/M{i}"), 0)).collect();
        m.record_batch_at(&Spans::of_own(&SpanBatch::of(vec![res("s")], &spans)), 2);
        let stable = rpc_series(&m, index("rpc.server.call.duration"));
        assert_eq!(stable.len(), MAX_SERIES_PER_INSTRUMENT + 1);
        let overflow: Vec<_> = stable.iter().filter(|s| s.0 == ["overflow"]).collect();
        assert_eq!(overflow.len(), 1);
        assert_eq!(overflow[0].1, 4, "the _OTHER series and MAX - 1 methods fit, the last 4 do not");
        assert_eq!(registry.counter("ringtail_metric_series_overflow_total", &[]).get(), 4);
    }

    fn points(m: &Meters) -> Vec<(String, Option<String>, Point)> {
        m.view().read(|m| {
            let mut v = Vec::new();
            for svc in m.services() {
                for (k, p) in svc.histograms[HTTP_SERVER].series() {
                    let route = k.map(|k| {
                        let mut r = None;
                        k.attributes(|name, v| {
                            if name == "http.route" {
                                r = Some(format!("{v:?}"));
                            }
                        });
                        r.unwrap_or_default()
                    });
                    v.push((svc.resource.service_name.clone(), route, p.clone()));
                }
            }
            v.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
            v
        })
    }

    #[test]
    fn buckets_sum_min_max() {
        let registry = Registry::new(Component::ExporterActor, 1);
        let mut m = Meters::new(vec![], "h", &registry);
        let spans = vec![span("/a", 5, 200), span("/a", 3, 200), span("/a", 20_000, 200)];
        m.record_batch_at(&Spans::of_own(&SpanBatch::of(vec![res("s")], &spans)), 7);
        let p = points(&m);
        assert_eq!(p.len(), 1);
        let p = &p[0].2;
        assert_eq!(p.count, 3);
        assert_eq!(p.buckets[0], 2, "5 ms is in the first bucket (upper bound inclusive)");
        assert_eq!(p.buckets[BUCKETS - 1], 1);
        assert!((p.sum - 20.008).abs() < 1e-9 && p.min == 0.003 && p.max == 20.0, "{p:?}");
        assert_eq!((p.start_ns, p.last_ns), (7, 7));
        assert_eq!(registry.counter("ringtail_metric_samples_total", &[]).get(), 3);
    }

    #[test]
    fn caps_overflow_and_are_counted() {
        let registry = Registry::new(Component::ExporterActor, 1);
        let mut m = Meters::new(vec![], "h", &registry);
        let spans: Vec<Span> = (0..MAX_SERIES_PER_INSTRUMENT + 5).map(|i| span(&format!("/r{i}"), 1, 200)).collect();
        m.record_batch_at(&Spans::of_own(&SpanBatch::of(vec![res("s")], &spans)), 1);
        let p = points(&m);
        assert_eq!(p.len(), MAX_SERIES_PER_INSTRUMENT + 1);
        let overflow: Vec<_> = p.iter().filter(|x| x.1.is_none()).collect();
        assert_eq!(overflow.len(), 1);
        assert_eq!(overflow[0].2.count, 5);
        assert_eq!(registry.counter("ringtail_metric_series_overflow_total", &[]).get(), 5);
        // A new service past the cap evicts the least recently updated
        // one ("s"); past that, services of the batch itself stay: the
        // rest are counted, not measured.
        let resources: Vec<_> = (0..MAX_SERVICES + 2).map(|i| res(&format!("svc{i}"))).collect();
        let spans: Vec<Span> = (0..resources.len())
            .map(|i| {
                let mut s = span("/", 1, 200);
                s.resource = i as u32;
                s
            })
            .collect();
        m.record_batch_at(&Spans::of_own(&SpanBatch::of(resources, &spans)), 2);
        assert_eq!(m.view().read(|m| m.services().count()), MAX_SERVICES);
        assert_eq!(registry.gauge("ringtail_metric_services", &[]).get(), MAX_SERVICES as f64);
        assert_eq!(registry.counter("ringtail_metric_services_evicted_total", &[]).get(), 1);
        assert_eq!(registry.counter("ringtail_metric_services_overflow_total", &[]).get(), 2);
        assert!(!m.view().read(|m| m.services().any(|s| s.resource.service_name == "s")));
    }

    #[test]
    fn idle_series_and_services_are_forgotten_and_come_back_from_zero() {
        let registry = Registry::new(Component::ExporterActor, 1);
        let mut m = Meters::new(vec![], "h", &registry).evict_idle_after(Duration::from_secs(100));
        let s = 1_000_000_000u64;
        let batch = |spans: Vec<Span>| SpanBatch::of(vec![res("old"), res("new")], &spans);
        let mut newer = span("/b", 1, 200);
        newer.resource = 1;
        m.record_batch_at(&Spans::of_own(&batch(vec![span("/a", 1, 200), span("/a", 1, 200)])), s);
        m.record_batch_at(&Spans::of_own(&batch(vec![newer.clone()])), 60 * s);
        // At 150 s, "old" (last seen at 1 s) has been idle for more than 100 s.
        m.record_batch_at(&Spans::of_own(&batch(vec![newer.clone()])), 150 * s);
        let p = points(&m);
        assert_eq!(p.iter().map(|x| x.0.as_str()).collect::<Vec<_>>(), ["new"], "{p:?}");
        assert_eq!(registry.counter("ringtail_metric_series_evicted_total", &[]).get(), 1);
        assert_eq!(m.view().read(|m| m.series_count()), 1);
        m.record_batch_at(&Spans::of_own(&batch(vec![span("/a", 1, 200)])), 151 * s);
        let p = points(&m);
        let old = p.iter().find(|x| x.0 == "old").map(|x| &x.2).cloned();
        assert_eq!(old.map(|p| (p.count, p.start_ns)), Some((1, 151 * s)), "a new start, counted from zero");
    }

    #[test]
    fn attributes_are_the_specs_sorted_by_key() {
        let mut c = span("/", 1, 503);
        c.kind = SpanKind::Client;
        c.server_address = Some("api".into());
        c.server_port = 8443;
        http_mut(&mut c).scheme = "https".into();
        let mut keys = Vec::new();
        let b = c.as_borrowed();
        SeriesKey::new(&b, b.call.http().expect("an HTTP span")).attributes(|k, _| keys.push(k));
        assert_eq!(
            keys,
            [
                "error.type",
                "http.request.method",
                "http.response.status_code",
                "network.protocol.version",
                "server.address",
                "server.port",
                "url.scheme"
            ]
        );
        let mut keys = Vec::new();
        let s = span("/", 1, 200);
        let b = s.as_borrowed();
        SeriesKey::new(&b, b.call.http().expect("an HTTP span")).attributes(|k, _| keys.push(k));
        assert_eq!(keys, ["http.request.method", "http.response.status_code", "http.route", "network.protocol.version", "url.scheme"]);
    }

    #[test]
    fn a_restarted_component_counts_from_a_new_start() {
        let registry = Registry::new(Component::ExporterActor, 1);
        let mut m = Meters::new(vec![], "h", &registry);
        let report = |instance| HealthReport { component: Component::SpanActor, instance, points: vec![] };
        let start = |m: &Meters| m.view().read(|m| m.health_start(Component::SpanActor));
        m.update_health_at(report(1), 10);
        m.update_health_at(report(1), 20);
        assert_eq!(start(&m), 10);
        m.update_health_at(report(2), 30);
        assert_eq!(start(&m), 30);
    }
}
