//! Span metrics (`metrics.span_metrics`, opt-in), in the names of the
//! OpenTelemetry Collector's spanmetrics connector as OBI emits them
//! (its `application_span_otel` feature): `traces_span_metrics_calls_total`
//! and `traces_span_metrics_duration_seconds`, with Tempo's label names
//! `service`, `span_name`, `span_kind` and `status_code` (values as both
//! write them: `SPAN_KIND_SERVER`, `SPAN_KIND_CLIENT`; `STATUS_CODE_ERROR`,
//! `STATUS_CODE_UNSET`: ringtail never sets a span's status OK).
//!
//! Every span that counts in the metrics (not of a route ignored for
//! metrics) is counted and timed in the series of its service (the
//! `service.name` of its resource: all processes of a service together, as
//! Tempo aggregates), its name, kind and status. Span names are bounded
//! already (`{method} {http.route}` with routes capped per service; a
//! database call's `db.query.summary`); the series are bounded as every
//! other ([`MAX_SPAN_SERIES`], then an overflow series, counted). Over OTLP
//! as OBI names them: `traces_span_metrics_calls_total` (a counter) and
//! `traces_span_metrics_duration` (unit `s`), on ringtail's own resource;
//! buckets OBI's ([`super::graph::BUCKETS`]).

use ipc_schema::{ServiceResource, Span, SpanKind, Value};

use super::bounded::Bounded;
use super::graph::BUCKETS;
use super::Point;

/// `traces_span_metrics_calls_total` (a counter; the same name over OTLP).
pub const CALLS_TOTAL: &str = "traces_span_metrics_calls_total";
/// The spans' durations: OTLP name (unit `s`); on Prometheus
/// `traces_span_metrics_duration_seconds`.
pub const DURATION: &str = "traces_span_metrics_duration";
/// Series kept; more go to the overflow series.
pub const MAX_SPAN_SERIES: usize = 5000;

/// A span-metrics series' labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanKey {
    pub service: Box<str>,
    pub span_name: Box<str>,
    pub kind: SpanKind,
    pub error: bool,
}

impl SpanKey {
    /// Its labels, in Tempo's order.
    pub fn labels(&self, mut f: impl FnMut(&'static str, Value<&str>)) {
        f("service", Value::Str(&self.service));
        f("span_name", Value::Str(&self.span_name));
        f("span_kind", Value::Str(kind(self.kind)));
        f("status_code", Value::Str(status(self.error)));
    }
}

/// The span kind as Tempo and OBI label it.
pub fn kind(k: SpanKind) -> &'static str {
    match k {
        SpanKind::Server => "SPAN_KIND_SERVER",
        SpanKind::Client => "SPAN_KIND_CLIENT",
        SpanKind::Producer => "SPAN_KIND_PRODUCER",
        SpanKind::Consumer => "SPAN_KIND_CONSUMER",
    }
}

/// The span status as Tempo and OBI label it.
pub fn status(error: bool) -> &'static str {
    if error {
        "STATUS_CODE_ERROR"
    } else {
        "STATUS_CODE_UNSET"
    }
}

/// Every span-metrics series of the host.
#[derive(Debug, Default)]
pub struct SpanMetrics {
    set: Bounded<SpanKey, Point>,
}

fn hash(service: &str, name: &str, kind: SpanKind, error: bool) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    (service, name, kind, error).hash(&mut h);
    h.finish()
}

impl SpanMetrics {
    /// Counts and times span `s` of `res` at `now`; false if it went to
    /// the overflow series. `total` as [`super::graph::Graph::record`].
    pub fn record(&mut self, res: &ServiceResource, s: &Span<&str>, now: u64, total: &mut usize) -> bool {
        let secs = s.end_unix_ns.saturating_sub(s.start_unix_ns) as f64 / 1e9;
        let (service, name) = (res.service_name.as_str(), s.name);
        let h = hash(service, name, s.kind, s.error);
        let is = |k: &SpanKey| k.kind == s.kind && k.error == s.error && &*k.span_name == name && &*k.service == service;
        let key = || SpanKey { service: service.into(), span_name: name.into(), kind: s.kind, error: s.error };
        self.set.record(h, is, key, || Point::new(now, &BUCKETS), |p| p.record(secs, now), MAX_SPAN_SERIES, total)
    }

    /// Every series (`None`: the overflow series): its count is the calls.
    pub fn series(&self) -> impl Iterator<Item = (Option<&SpanKey>, &Point)> {
        self.set.series()
    }

    /// Series held, the overflow one included.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// True when no series is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets series last updated before `cutoff`; how many.
    pub fn evict(&mut self, cutoff: u64) -> usize {
        self.set.evict(cutoff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(name: &str) -> ServiceResource {
        ServiceResource {
            service_name: name.into(),
            service_instance_id: format!("h:{name}"),
            host_name: "h".into(),
            pid: 1,
            executable_name: name.into(),
            extra: vec![],
        }
    }

    #[test]
    fn a_series_per_service_name_kind_and_status() {
        let mut m = SpanMetrics::default();
        let mut total = 0;
        let ok = crate::meters::tests::span("/a", 3, 200);
        let failed = crate::meters::tests::span("/a", 20, 500);
        let mut client = crate::meters::tests::span("/a", 1, 200);
        client.kind = SpanKind::Client;
        for (r, s) in [("web", &ok), ("web", &ok), ("web", &failed), ("web", &client), ("api", &ok)] {
            assert!(m.record(&res(r), &s.as_borrowed(), 1, &mut total));
        }
        let mut got: Vec<(String, u64)> = m
            .series()
            .map(|(k, p)| {
                let mut l = Vec::new();
                k.expect("no overflow").labels(|n, v| l.push(format!("{n}={v:?}")));
                (l.join(","), p.count)
            })
            .collect();
        got.sort();
        let want = |svc: &str, kind: &str, status: &str, n: u64| {
            (format!("service=Str(\"{svc}\"),span_name=Str(\"GET /a\"),span_kind=Str(\"{kind}\"),status_code=Str(\"{status}\")"), n)
        };
        assert_eq!(
            got,
            [
                want("api", "SPAN_KIND_SERVER", "STATUS_CODE_UNSET", 1),
                want("web", "SPAN_KIND_CLIENT", "STATUS_CODE_UNSET", 1),
                want("web", "SPAN_KIND_SERVER", "STATUS_CODE_ERROR", 1),
                want("web", "SPAN_KIND_SERVER", "STATUS_CODE_UNSET", 2),
            ]
        );
        assert_eq!(total, 4);
    }

    #[test]
    fn series_past_the_cap_overflow() {
        let mut m = SpanMetrics::default();
        let mut total = 0;
        let mut over = 0;
        for i in 0..MAX_SPAN_SERIES + 3 {
            let s = crate::meters::tests::span(&format!("/r{i}"), 1, 200);
            over += usize::from(!m.record(&res("web"), &s.as_borrowed(), 1, &mut total));
        }
        assert_eq!((m.len(), over, total), (MAX_SPAN_SERIES + 1, 3, MAX_SPAN_SERIES + 1));
        assert_eq!(m.series().filter(|(k, _)| k.is_none()).map(|(_, p)| p.count).sum::<u64>(), 3);
    }
}
