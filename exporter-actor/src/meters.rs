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
//! gRPC spans (those carrying `rpc.system.name` or `rpc.system`) go to the
//! RPC duration histograms of [`ipc_schema::rpc::METRICS`] instead, not to
//! the HTTP ones: the conventions' gRPC instrumentations record a call as
//! an RPC, and counting it twice would double every HTTP/2 dashboard. The
//! exporter is another process than the span-actor, which reads
//! `OTEL_SEMCONV_STABILITY_OPT_IN`; it learns the mode from the attributes
//! the span-actor chose for it: `rpc.system.name` means the stable set
//! (`rpc.*.call.duration`, s), `rpc.system` the experimental one
//! (`rpc.*.duration`, ms), both means `rpc/dup`. A series' attributes are
//! those the conventions list for the metric, taken from the span's:
//! stable `rpc.system.name`, `rpc.method`, `rpc.response.status_code`, `error.type`;
//! experimental `rpc.system`, `rpc.service`, `rpc.method`,
//! `rpc.grpc.status_code`; plus `server.address` and `server.port` on
//! client metrics only (on a server they would come from the peer's
//! `:authority`, as unbounded as a Host header). Methods the span-actor
//! calls `_OTHER` (and, in the experimental set, those a server answered
//! `UNIMPLEMENTED`) carry no service or method name.
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

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use hashbrown::HashTable;
use ipc_schema::rpc::{Set, METRICS};
use ipc_schema::{Attr, Component, HealthReport, HttpSpan, ServiceResource, SpanBatch, SpanKind};
use runtime_kit::counters::{Counter, Gauge, Registry};
use rustc_hash::{FxHashMap, FxHasher};

use crate::batch::Spans;
use crate::resource;
use crate::sinks::otlp::wire::{decimal, Value};

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

/// A duration histogram's instrument (HTTP, or RPC from [`METRICS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instrument {
    /// The OpenTelemetry name.
    pub name: &'static str,
    /// Its description.
    pub description: &'static str,
    /// Its unit (UCUM).
    pub unit: &'static str,
}

/// `http.server.request.duration`.
pub const SERVER_DURATION: Instrument =
    Instrument { name: "http.server.request.duration", description: "Duration of HTTP server requests.", unit: "s" };
/// `http.client.request.duration`.
pub const CLIENT_DURATION: Instrument =
    Instrument { name: "http.client.request.duration", description: "Duration of HTTP client requests.", unit: "s" };

/// Every histogram of a service, in the order [`ServiceHistograms::histogram`]
/// takes: the two HTTP ones, then [`METRICS`]' RPC ones.
pub fn instruments() -> impl Iterator<Item = Instrument> {
    [SERVER_DURATION, CLIENT_DURATION].into_iter().chain(METRICS.iter().map(|m| Instrument {
        name: m.name,
        description: m.description,
        unit: m.unit,
    }))
}

/// A cumulative histogram's numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The explicit bucket boundaries, in the instrument's unit.
    pub bounds: &'static [f64],
    /// When counting began (Unix ns).
    pub start_ns: u64,
    /// The last update (Unix ns, the batch's arrival).
    pub last_ns: u64,
    /// Measurements.
    pub count: u64,
    /// Their sum, in the instrument's unit.
    pub sum: f64,
    /// The smallest and largest.
    pub min: f64,
    pub max: f64,
    /// Per bucket (not cumulative, `bounds.len() + 1` of them):
    /// `buckets[i]` counts values in `(bounds[i-1], bounds[i]]`.
    pub buckets: Vec<u64>,
}

impl Point {
    fn new(now: u64, bounds: &'static [f64]) -> Point {
        Point {
            bounds,
            start_ns: now,
            last_ns: now,
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            buckets: vec![0; bounds.len() + 1],
        }
    }

    fn record(&mut self, v: f64, now: u64) {
        // Upper bounds are inclusive, as in the OpenTelemetry SDKs.
        let i = self.bounds.partition_point(|&b| b < v);
        self.buckets[i] += 1;
        self.count += 1;
        self.sum += v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.last_ns = now;
    }
}

/// What of a span makes up its histogram attributes: the spec's list,
/// never `url.path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesKey {
    method: Box<str>,
    status: u16,
    version: Box<str>,
    scheme: Box<str>,
    error: bool,
    /// `http.route` (server) or `server.address` (client).
    label: Option<Box<str>>,
    /// `server.port` (client spans only; 0 for server spans).
    port: u16,
    kind: SpanKind,
}

fn label<'a>(s: &HttpSpan<&'a str>) -> Option<&'a str> {
    match s.kind {
        SpanKind::Server => s.route,
        SpanKind::Client => s.server_address,
    }
}

fn port(s: &HttpSpan<&str>) -> u16 {
    if s.kind == SpanKind::Client {
        s.server_port
    } else {
        0
    }
}

fn span_hash(s: &HttpSpan<&str>) -> u64 {
    let mut h = FxHasher::default();
    (&s.method, s.status, &s.protocol_version, &s.scheme, s.error, label(s), port(s)).hash(&mut h);
    h.finish()
}

impl SeriesKey {
    fn new(s: &HttpSpan<&str>) -> SeriesKey {
        SeriesKey {
            method: s.method.into(),
            status: s.status,
            version: s.protocol_version.into(),
            scheme: s.scheme.into(),
            error: s.error,
            label: label(s).map(Into::into),
            port: port(s),
            kind: s.kind,
        }
    }

    fn matches(&self, s: &HttpSpan<&str>) -> bool {
        self.status == s.status
            && self.error == s.error
            && self.port == port(s)
            && *self.method == *s.method
            && *self.version == *s.protocol_version
            && *self.scheme == *s.scheme
            && self.label.as_deref() == label(s)
    }

    /// The series' attributes, sorted by key (as the OpenTelemetry SDKs
    /// export them).
    pub fn attributes(&self, mut f: impl FnMut(&'static str, Value<'_>)) {
        let mut digits = [0u8; 20];
        if self.error {
            f("error.type", Value::Str(decimal(u64::from(self.status), &mut digits)));
        }
        f("http.request.method", Value::Str(&self.method));
        f("http.response.status_code", Value::Int(i64::from(self.status)));
        match self.kind {
            SpanKind::Server => {
                if let Some(r) = &self.label {
                    f("http.route", Value::Str(r));
                }
                f("network.protocol.version", Value::Str(&self.version));
            }
            SpanKind::Client => {
                f("network.protocol.version", Value::Str(&self.version));
                if let Some(a) = &self.label {
                    f("server.address", Value::Str(a));
                }
                f("server.port", Value::Int(i64::from(self.port)));
            }
        }
        f("url.scheme", Value::Str(&self.scheme));
    }
}

/// A value of an RPC series' attribute, borrowed from a span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum RpcValue<'a> {
    Str(&'a str),
    Int(i64),
}

/// An RPC series' attributes as the span has them, sorted by key.
type RpcAttrs<'a> = Vec<(&'static str, RpcValue<'a>)>;

fn rpc_attr<'a>(s: &'a HttpSpan<&'a str>, key: &str) -> Option<RpcValue<'a>> {
    s.attributes.iter().find(|(k, _)| *k == key).map(|(_, v)| match v {
        Attr::Str(v) => RpcValue::Str(v),
        Attr::Int(i) => RpcValue::Int(*i),
    })
}

/// Which RPC sets the span-actor chose for `s` (none: not a gRPC span).
fn rpc_sets(s: &HttpSpan<&str>) -> (bool, bool) {
    let has = |key: &str| s.attributes.iter().any(|(k, _)| *k == key);
    (has("rpc.system.name"), has("rpc.system"))
}

/// The attributes of `s`'s measurement in the histogram of `set`, sorted by
/// key (see the module doc for which, and why).
fn rpc_attributes<'a>(set: Set, s: &'a HttpSpan<&'a str>) -> RpcAttrs<'a> {
    let mut a = Vec::with_capacity(6);
    let mut put = |k: &'static str, v: Option<RpcValue<'a>>| {
        if let Some(v) = v {
            a.push((k, v));
        }
    };
    let method = rpc_attr(s, "rpc.method");
    match set {
        Set::Stable => {
            put("error.type", rpc_attr(s, "error.type"));
            put("rpc.method", method);
            put("rpc.response.status_code", rpc_attr(s, "rpc.response.status_code"));
            put("rpc.system.name", rpc_attr(s, "rpc.system.name"));
        }
        Set::Experimental => {
            let code = rpc_attr(s, "rpc.grpc.status_code");
            // What the span-actor calls `_OTHER`: in `rpc/dup` the shared
            // `rpc.method` says so; a server's UNIMPLEMENTED (12) does in any mode.
            let unimplemented = s.kind == SpanKind::Server && code == Some(RpcValue::Int(12));
            let (service, method) = match method {
                Some(RpcValue::Str(m)) if m != "_OTHER" && !unimplemented => {
                    // In `rpc/dup` the span's `rpc.method` is the stable,
                    // fully qualified one; the experimental one is its last part.
                    let short = m.rsplit_once('/').map_or(m, |(_, short)| short);
                    (rpc_attr(s, "rpc.service"), Some(RpcValue::Str(short)))
                }
                _ => (None, None),
            };
            put("rpc.grpc.status_code", code);
            put("rpc.method", method);
            put("rpc.service", service);
            put("rpc.system", rpc_attr(s, "rpc.system"));
        }
    }
    if s.kind == SpanKind::Client {
        put("server.address", s.server_address.map(RpcValue::Str));
        put("server.port", Some(RpcValue::Int(i64::from(s.server_port))));
    }
    a
}

fn rpc_hash(a: &RpcAttrs<'_>) -> u64 {
    let mut h = FxHasher::default();
    a.hash(&mut h);
    h.finish()
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum OwnedValue {
    Str(Box<str>),
    Int(i64),
}

impl OwnedValue {
    fn borrow(&self) -> RpcValue<'_> {
        match self {
            OwnedValue::Str(s) => RpcValue::Str(s),
            OwnedValue::Int(i) => RpcValue::Int(*i),
        }
    }
}

/// An RPC series' attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcKey(Vec<(&'static str, OwnedValue)>);

impl RpcKey {
    fn new(a: &RpcAttrs<'_>) -> RpcKey {
        RpcKey(
            a.iter()
                .map(|(k, v)| {
                    let v = match v {
                        RpcValue::Str(s) => OwnedValue::Str((*s).into()),
                        RpcValue::Int(i) => OwnedValue::Int(*i),
                    };
                    (*k, v)
                })
                .collect(),
        )
    }

    fn matches(&self, a: &RpcAttrs<'_>) -> bool {
        self.0.len() == a.len() && self.0.iter().zip(a).all(|((k1, v1), (k2, v2))| k1 == k2 && v1.borrow() == *v2)
    }
}

/// A series' attributes: of an HTTP or an RPC histogram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    /// `http.*.request.duration`.
    Http(SeriesKey),
    /// `rpc.*`.
    Rpc(RpcKey),
}

impl Key {
    /// The series' attributes, sorted by key (as the OpenTelemetry SDKs
    /// export them).
    pub fn attributes(&self, mut f: impl FnMut(&'static str, Value<'_>)) {
        match self {
            Key::Http(k) => k.attributes(f),
            Key::Rpc(k) => {
                for (name, v) in &k.0 {
                    match v {
                        OwnedValue::Str(s) => f(name, Value::Str(s)),
                        OwnedValue::Int(i) => f(name, Value::Int(*i)),
                    }
                }
            }
        }
    }
}

/// The attribute of an overflow series.
pub const OVERFLOW_ATTRIBUTE: (&str, Value<'static>) = ("otel.metric.overflow", Value::Bool(true));

#[derive(Debug)]
struct Series {
    hash: u64,
    key: Key,
    point: Point,
}

/// One histogram of one service.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    table: HashTable<Series>,
    overflow: Option<Point>,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram { bounds, table: HashTable::new(), overflow: None }
    }

    /// Every series: its attributes (`None` for the overflow series) and numbers.
    pub fn series(&self) -> impl Iterator<Item = (Option<&Key>, &Point)> {
        self.table.iter().map(|s| (Some(&s.key), &s.point)).chain(self.overflow.iter().map(|p| (None, p)))
    }

    /// True when it has no series.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty() && self.overflow.is_none()
    }

    fn len(&self) -> usize {
        self.table.len() + usize::from(self.overflow.is_some())
    }

    /// Records `v` for HTTP span `s`; false if it went to the overflow series.
    fn record(&mut self, s: &HttpSpan<&str>, v: f64, now: u64, total: &mut usize) -> bool {
        let matches = |k: &Key| matches!(k, Key::Http(k) if k.matches(s));
        self.record_keyed(span_hash(s), matches, || Key::Http(SeriesKey::new(s)), v, now, total)
    }

    /// Records `v` in the series of RPC attributes `a`; false if it went
    /// to the overflow series.
    fn record_rpc(&mut self, a: &RpcAttrs<'_>, v: f64, now: u64, total: &mut usize) -> bool {
        let matches = |k: &Key| matches!(k, Key::Rpc(k) if k.matches(a));
        self.record_keyed(rpc_hash(a), matches, || Key::Rpc(RpcKey::new(a)), v, now, total)
    }

    fn record_keyed(
        &mut self,
        hash: u64,
        matches: impl Fn(&Key) -> bool,
        key: impl FnOnce() -> Key,
        v: f64,
        now: u64,
        total: &mut usize,
    ) -> bool {
        if let Some(series) = self.table.find_mut(hash, |x| matches(&x.key)) {
            series.point.record(v, now);
            return true;
        }
        let bounds = self.bounds;
        if self.table.len() < MAX_SERIES_PER_INSTRUMENT && *total < MAX_SERIES {
            let mut point = Point::new(now, bounds);
            point.record(v, now);
            self.table.insert_unique(hash, Series { hash, key: key(), point }, |x| x.hash);
            *total += 1;
            return true;
        }
        if self.overflow.is_none() {
            *total += 1;
        }
        self.overflow.get_or_insert_with(|| Point::new(now, bounds)).record(v, now);
        false
    }

    /// Forgets series last updated before `cutoff`; how many were forgotten.
    fn evict(&mut self, cutoff: u64) -> usize {
        let before = self.len();
        self.table.retain(|s| s.point.last_ns >= cutoff);
        if self.overflow.as_ref().is_some_and(|p| p.last_ns < cutoff) {
            self.overflow = None;
        }
        before - self.len()
    }
}

/// The histograms of one traced service.
#[derive(Debug)]
pub struct ServiceHistograms {
    /// The service, as the span-actor described it.
    pub resource: ServiceResource,
    /// `http.server.request.duration`.
    pub server: Histogram,
    /// `http.client.request.duration`.
    pub client: Histogram,
    /// The RPC histograms, in [`METRICS`]' order.
    pub rpc: [Histogram; METRICS.len()],
    /// The last update (Unix ns): the least recent goes first when full.
    last_ns: u64,
}

impl ServiceHistograms {
    fn new(resource: ServiceResource, now: u64) -> ServiceHistograms {
        ServiceHistograms {
            resource,
            server: Histogram::new(&DURATION_BUCKETS),
            client: Histogram::new(&DURATION_BUCKETS),
            rpc: std::array::from_fn(|i| Histogram::new(METRICS[i].buckets)),
            last_ns: now,
        }
    }

    /// The `i`th histogram of [`instruments`].
    pub fn histogram(&self, i: usize) -> Option<&Histogram> {
        match i {
            0 => Some(&self.server),
            1 => Some(&self.client),
            _ => self.rpc.get(i - 2),
        }
    }

    /// Every histogram with its instrument, in [`instruments`]' order.
    pub fn histograms(&self) -> impl Iterator<Item = (Instrument, &Histogram)> {
        instruments().enumerate().filter_map(|(i, inst)| Some((inst, self.histogram(i)?)))
    }

    /// True when no histogram has a series.
    pub fn is_empty(&self) -> bool {
        self.server.is_empty() && self.client.is_empty() && self.rpc.iter().all(Histogram::is_empty)
    }

    fn len(&self) -> usize {
        self.server.len() + self.client.len() + self.rpc.iter().map(Histogram::len).sum::<usize>()
    }

    fn evict(&mut self, cutoff: u64) -> usize {
        self.server.evict(cutoff) + self.client.evict(cutoff) + self.rpc.iter_mut().map(|h| h.evict(cutoff)).sum::<usize>()
    }
}

/// Health reports, with the time each component's counting began.
#[derive(Debug, Default)]
struct Health {
    reports: BTreeMap<Component, HealthReport>,
    /// Per component: (instance, start time in Unix ns). A new instance
    /// (a restart) counts from zero again.
    starts: BTreeMap<Component, (u64, u64)>,
}

/// Every metric the exporter holds: what readers see.
#[derive(Debug)]
pub struct Metrics {
    services: Vec<Option<ServiceHistograms>>,
    index: FxHashMap<ServiceResource, usize>,
    free: Vec<usize>,
    series: usize,
    health: Health,
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
        let mut gone = 0;
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
            health: Health::default(),
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
        }
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
            let (stable, experimental) = rpc_sets(s);
            if stable || experimental {
                for (m, hist) in METRICS.iter().zip(&mut svc.rpc) {
                    let wanted = match m.set {
                        Set::Stable => stable,
                        Set::Experimental => experimental,
                    };
                    if wanted && m.kind == s.kind && !hist.record_rpc(&rpc_attributes(m.set, s), ns / m.ns_per_unit, now, series) {
                        overflow += 1;
                    }
                }
                continue;
            }
            let hist = match s.kind {
                SpanKind::Server => &mut svc.server,
                SpanKind::Client => &mut svc.client,
            };
            if !hist.record(s, ns / 1e9, now, series) {
                overflow += 1;
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
    pub fn record<S: AsRef<str>>(&mut self, res: &ServiceResource, s: &HttpSpan<S>) {
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

    fn res(name: &str) -> ServiceResource {
        ServiceResource {
            service_name: name.into(),
            service_instance_id: "h:1".into(),
            host_name: "h".into(),
            pid: 1,
            executable_name: name.into(),
            extra: vec![],
        }
    }

    pub(crate) fn span(route: &str, ms: u64, status: u16) -> HttpSpan {
        HttpSpan {
            resource: 0,
            kind: SpanKind::Server,
            trace_id: 1,
            span_id: 1,
            parent_span_id: 0,
            trace_flags: 1,
            name: format!("GET {route}"),
            start_unix_ns: 1_000,
            end_unix_ns: 1_000 + ms * 1_000_000,
            method: "GET".into(),
            method_original: None,
            route: Some(route.into()),
            path: "/x/1".into(),
            query: None,
            scheme: "http".into(),
            status,
            error: status >= 500,
            server_address: None,
            server_port: 80,
            client_address: "a".into(),
            client_port: 1,
            peer_address: "a".into(),
            peer_port: 1,
            protocol_version: "1.1".into(),
            user_agent: None,
            export_trace: true,
            export_metrics: true,
            attributes: Vec::new(),
        }
    }

    /// A gRPC span of `method` (`pkg.Svc/Method`) with the attributes the
    /// span-actor gives it in the mode of the `stable` / `experimental` sets.
    pub(crate) fn grpc_span(kind: SpanKind, ms: u64, stable: bool, experimental: bool, method: &str, code: i64) -> HttpSpan {
        let mut s = span("/", ms, 200);
        s.kind = kind;
        s.route = None;
        s.method = "POST".into();
        s.path = format!("/{method}");
        s.protocol_version = "2".into();
        s.server_address = Some("api".into());
        s.server_port = 50051;
        let (service, short) = method.split_once('/').unwrap_or(("", method));
        let str = |k: &str, v: &str| (k.to_owned(), Attr::Str(v.to_owned()));
        if experimental {
            s.attributes.push(str("rpc.system", "grpc"));
            s.attributes.push(str("rpc.service", service));
            if !stable {
                s.attributes.push(str("rpc.method", short));
            }
            s.attributes.push(("rpc.grpc.status_code".to_owned(), Attr::Int(code)));
        }
        if stable {
            let name = match code {
                0 => "OK",
                5 => "NOT_FOUND",
                12 => "UNIMPLEMENTED",
                _ => "INTERNAL",
            };
            s.attributes.push(str("rpc.system.name", "grpc"));
            s.attributes.push(str("rpc.method", if kind == SpanKind::Server && code == 12 { "_OTHER" } else { method }));
            s.attributes.push(str("rpc.response.status_code", name));
            if code != 0 {
                s.attributes.push(str("error.type", name));
            }
        }
        s
    }

    /// Every series of RPC histogram `i` of the only service:
    /// (attributes as text, count, sum).
    fn rpc_series(m: &Meters, i: usize) -> Vec<(Vec<String>, u64, f64)> {
        m.view().read(|m| {
            let svc = m.services().next().expect("one service");
            let mut v: Vec<_> = svc.rpc[i]
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
        let http = m.view().read(|m| m.services().map(|s| s.server.len() + s.client.len()).sum::<usize>());
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
        let spans: Vec<HttpSpan> =
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
                for (k, p) in svc.server.series() {
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
        let spans: Vec<HttpSpan> = (0..MAX_SERIES_PER_INSTRUMENT + 5).map(|i| span(&format!("/r{i}"), 1, 200)).collect();
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
        let spans: Vec<HttpSpan> = (0..resources.len())
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
        let batch = |spans: Vec<HttpSpan>| SpanBatch::of(vec![res("old"), res("new")], &spans);
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
        c.scheme = "https".into();
        let mut keys = Vec::new();
        SeriesKey::new(&c.as_borrowed()).attributes(|k, _| keys.push(k));
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
        SeriesKey::new(&span("/", 1, 200).as_borrowed()).attributes(|k, _| keys.push(k));
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
