//! The series store, independent of any sink: one cumulative histogram
//! per series, series per instrument per service, with the cardinality
//! limits ([`MAX_SERIES_PER_INSTRUMENT`], [`super::MAX_SERIES`]: past them an
//! instrument's overflow series) and the idle eviction the module doc
//! describes. Sinks read it through [`super::MetricsView`].

use ipc_schema::{HttpCall, ServiceResource, Span};

use super::bounded::{Bounded, Recorded};
use super::db::{self, DbAttrs, DbKey};
use super::http::{self, SeriesKey};
use super::rpc::{self, RpcAttrs, RpcKey};
use super::{instrument_table, instruments, Instrument, Key, INSTRUMENTS, MAX_SERIES_PER_INSTRUMENT};

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
    pub(super) fn new(now: u64, bounds: &'static [f64]) -> Point {
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

    pub(super) fn record(&mut self, v: f64, now: u64) {
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

impl Recorded for Point {
    fn last_ns(&self) -> u64 {
        self.last_ns
    }
}

/// One histogram of one service.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    set: Bounded<Key, Point>,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram { bounds, set: Bounded::default() }
    }

    /// Every series: its attributes (`None` for the overflow series) and numbers.
    pub fn series(&self) -> impl Iterator<Item = (Option<&Key>, &Point)> {
        self.set.series()
    }

    /// True when it has no series.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    pub(super) fn len(&self) -> usize {
        self.set.len()
    }

    /// Records `v` for HTTP exchange `h` of span `s`; false if it went to
    /// the overflow series.
    pub(super) fn record(&mut self, s: &Span<&str>, h: &HttpCall<&str>, v: f64, now: u64, total: &mut usize) -> bool {
        let matches = |k: &Key| matches!(k, Key::Http(k) if k.matches(s, h));
        self.record_keyed(http::span_hash(s, h), matches, || Key::Http(SeriesKey::new(s, h)), v, now, total)
    }

    /// Records `v` in the series of RPC attributes `a`; false if it went
    /// to the overflow series.
    pub(super) fn record_rpc(&mut self, a: &RpcAttrs<'_>, v: f64, now: u64, total: &mut usize) -> bool {
        let matches = |k: &Key| matches!(k, Key::Rpc(k) if k.matches(a));
        self.record_keyed(rpc::hash(a), matches, || Key::Rpc(RpcKey::new(a)), v, now, total)
    }

    /// Records `v` in the series of messaging attributes `a` (a duration,
    /// or a counter's messages); false if it went to the overflow series.
    pub(super) fn record_msg(&mut self, a: &DbAttrs<'_>, v: f64, now: u64, total: &mut usize) -> bool {
        let matches = |k: &Key| matches!(k, Key::Msg(k) if k.matches(a));
        self.record_keyed(db::hash(a), matches, || Key::Msg(DbKey::new(a)), v, now, total)
    }

    /// Records `v` in the series of database attributes `a`; false if it
    /// went to the overflow series.
    pub(super) fn record_db(&mut self, a: &DbAttrs<'_>, v: f64, now: u64, total: &mut usize) -> bool {
        let matches = |k: &Key| matches!(k, Key::Db(k) if k.matches(a));
        self.record_keyed(db::hash(a), matches, || Key::Db(DbKey::new(a)), v, now, total)
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
        let bounds = self.bounds;
        self.set.record(hash, matches, key, || Point::new(now, bounds), |p| p.record(v, now), MAX_SERIES_PER_INSTRUMENT, total)
    }

    /// Forgets series last updated before `cutoff`; how many were forgotten.
    pub(super) fn evict(&mut self, cutoff: u64) -> usize {
        self.set.evict(cutoff)
    }
}

/// The histograms of one traced service: one an instrument, in
/// [`instruments`]' order (the meters pick theirs by the slots
/// [`super::HTTP_SERVER`], [`super::HTTP_CLIENT`], [`super::RPC`],
/// [`super::DB`] and the messaging ones); the store treats them all alike
/// (a counter is a histogram with no bucket bounds).
#[derive(Debug)]
pub struct ServiceHistograms {
    /// The service, as the span-actor described it.
    pub resource: ServiceResource,
    /// Its histograms, by instrument.
    pub histograms: [Histogram; INSTRUMENTS],
    /// The last update (Unix ns): the least recent goes first when full.
    pub(super) last_ns: u64,
}

impl ServiceHistograms {
    pub(super) fn new(resource: ServiceResource, now: u64) -> ServiceHistograms {
        let table = instrument_table();
        ServiceHistograms { resource, histograms: std::array::from_fn(|i| Histogram::new(table[i].1)), last_ns: now }
    }

    /// The `i`th histogram of [`instruments`].
    pub fn histogram(&self, i: usize) -> Option<&Histogram> {
        self.histograms.get(i)
    }

    /// Every histogram with its instrument, in [`instruments`]' order.
    pub fn histograms(&self) -> impl Iterator<Item = (Instrument, &Histogram)> {
        instruments().zip(&self.histograms)
    }

    /// True when no histogram has a series.
    pub fn is_empty(&self) -> bool {
        self.histograms.iter().all(Histogram::is_empty)
    }

    pub(super) fn len(&self) -> usize {
        self.histograms.iter().map(Histogram::len).sum()
    }

    pub(super) fn evict(&mut self, cutoff: u64) -> usize {
        self.histograms.iter_mut().map(|h| h.evict(cutoff)).sum()
    }
}
