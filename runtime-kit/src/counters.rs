//! Counters and gauges a process reports about itself.
//!
//! Every drop anywhere goes through [`Registry::drops`]: one place that both
//! counts (`<name>{component, reason}`) and logs (at most once per reason per
//! 10 s, with the number since the last line), so no loss is silent.
//! Labels are fixed strings chosen by the code, never values from traffic.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ipc_schema::health::PointKind;
use ipc_schema::{Component, HealthReport, MetricPoint};

type Key = (&'static str, Vec<(&'static str, &'static str)>);

/// A monotonically increasing count.
#[derive(Clone, Debug, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one.
    pub fn inc(&self) {
        self.add(1);
    }

    /// Sets the value (for counts kept elsewhere, e.g. in the kernel).
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down (stored as f64 bits).
#[derive(Clone, Debug, Default)]
pub struct Gauge(Arc<AtomicU64>);

impl Gauge {
    /// Sets the value.
    pub fn set(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed);
    }

    /// The current value.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

/// Counts and logs one kind of drop.
#[derive(Clone, Debug)]
pub struct Drops {
    counter: Counter,
    component: &'static str,
    name: &'static str,
    reason: &'static str,
    last_log: Arc<Mutex<(Option<Instant>, u64)>>,
}

const DROP_LOG_EVERY: Duration = Duration::from_secs(10);

impl Drops {
    /// Records `n` dropped items.
    pub fn add(&self, n: u64) {
        if n == 0 {
            return;
        }
        self.counter.add(n);
        // A poisoned lock only loses a log line; the count above is kept.
        if let Ok(mut last) = self.last_log.lock() {
            last.1 += n;
            let due = last.0.is_none_or(|t| t.elapsed() >= DROP_LOG_EVERY);
            if due {
                tracing::warn!(
                    component = self.component,
                    metric = self.name,
                    reason = self.reason,
                    dropped = last.1,
                    total = self.counter.get(),
                    "dropped"
                );
                *last = (Some(Instant::now()), 0);
            }
        }
    }

    /// Total dropped so far.
    pub fn total(&self) -> u64 {
        self.counter.get()
    }
}

#[derive(Default)]
struct Inner {
    counters: BTreeMap<Key, Counter>,
    gauges: BTreeMap<Key, Gauge>,
}

/// All of a process's counters and gauges.
#[derive(Clone)]
pub struct Registry {
    component: Component,
    instance: u64,
    inner: Arc<Mutex<Inner>>,
}

impl Registry {
    /// An empty registry for one process start.
    pub fn new(component: Component, instance: u64) -> Self {
        Registry { component, instance, inner: Arc::default() }
    }

    /// The component this registry reports for.
    pub fn component(&self) -> Component {
        self.component
    }

    /// The counter `name{labels}` (created at 0 on first use). The
    /// `component` label is added to every point.
    pub fn counter(&self, name: &'static str, labels: &[(&'static str, &'static str)]) -> Counter {
        let mut inner = self.lock();
        inner.counters.entry((name, labels.to_vec())).or_default().clone()
    }

    /// The gauge `name{labels}`.
    pub fn gauge(&self, name: &'static str, labels: &[(&'static str, &'static str)]) -> Gauge {
        let mut inner = self.lock();
        inner.gauges.entry((name, labels.to_vec())).or_default().clone()
    }

    /// The drop counter `name{reason}`: counts and logs.
    pub fn drops(&self, name: &'static str, reason: &'static str) -> Drops {
        Drops {
            counter: self.counter(name, &[("reason", reason)]),
            component: self.component.name(),
            name,
            reason,
            last_log: Arc::new(Mutex::new((None, 0))),
        }
    }

    /// A snapshot of every point, as sent downhill.
    pub fn report(&self) -> HealthReport {
        let inner = self.lock();
        let component = self.component.name();
        let mut points = Vec::with_capacity(inner.counters.len() + inner.gauges.len());
        let labels = |l: &[(&str, &str)]| {
            std::iter::once(("component".to_owned(), component.to_owned()))
                .chain(l.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())))
                .collect::<Vec<_>>()
        };
        for ((name, l), c) in &inner.counters {
            points.push(MetricPoint { name: (*name).to_owned(), kind: PointKind::Counter, labels: labels(l), value: c.get() as f64 });
        }
        for ((name, l), g) in &inner.gauges {
            points.push(MetricPoint { name: (*name).to_owned(), kind: PointKind::Gauge, labels: labels(l), value: g.get() });
        }
        HealthReport { component: self.component, instance: self.instance, points }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The registry holds plain numbers; a panic elsewhere while holding
        // the lock cannot leave them inconsistent, so poison is ignored.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_has_component_label_and_values() {
        let r = Registry::new(Component::ExporterActor, 9);
        r.counter("ringtail_spans_exported_total", &[]).add(3);
        r.drops("ringtail_dropped_spans_total", "queue_full").add(2);
        r.gauge("ringtail_queue_length", &[]).set(5.0);
        let rep = r.report();
        assert_eq!(rep.instance, 9);
        let find = |n: &str| rep.points.iter().find(|p| p.name == n).unwrap().clone();
        assert_eq!(find("ringtail_spans_exported_total").value, 3.0);
        let d = find("ringtail_dropped_spans_total");
        assert_eq!(d.value, 2.0);
        assert!(d.labels.contains(&("reason".into(), "queue_full".into())));
        assert!(d.labels.contains(&("component".into(), "exporter-actor".into())));
        assert_eq!(find("ringtail_queue_length").value, 5.0);
    }

    #[test]
    fn same_name_and_labels_share_a_counter() {
        let r = Registry::new(Component::SpanActor, 1);
        r.counter("x", &[("a", "b")]).inc();
        r.counter("x", &[("a", "b")]).inc();
        assert_eq!(r.counter("x", &[("a", "b")]).get(), 2);
        assert_eq!(r.counter("x", &[("a", "c")]).get(), 0);
    }
}
