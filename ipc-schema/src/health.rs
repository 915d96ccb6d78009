//! Each process's own counters and gauges, carried downhill so that the
//! exporter can publish all of ringtail's health in one place.

use serde::{Deserialize, Serialize};

use crate::Component;

/// Whether a point only grows (counter) or goes up and down (gauge).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PointKind {
    Counter,
    Gauge,
}

/// One named value with bounded labels (never a value such as a path or pid).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricPoint {
    /// Prometheus-style name, e.g. `ringtail_dropped_events_total`.
    pub name: String,
    pub kind: PointKind,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl MetricPoint {
    /// A counter point.
    pub fn counter(name: &str, labels: &[(&str, &str)], value: u64) -> Self {
        MetricPoint {
            name: name.to_owned(),
            kind: PointKind::Counter,
            labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            value: value as f64,
        }
    }

    /// A gauge point.
    pub fn gauge(name: &str, labels: &[(&str, &str)], value: f64) -> Self {
        MetricPoint {
            name: name.to_owned(),
            kind: PointKind::Gauge,
            labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            value,
        }
    }
}

/// A full snapshot of one process's points (cumulative: the latest replaces
/// the previous one of the same component).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthReport {
    pub component: Component,
    pub instance: u64,
    pub points: Vec<MetricPoint>,
}
