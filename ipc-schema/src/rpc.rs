//! The RPC duration metrics of the OpenTelemetry semantic conventions, as
//! data: the span-actor picks the set(s) by `OTEL_SEMCONV_STABILITY_OPT_IN`
//! and puts their attributes on gRPC spans; the exporter, another process,
//! records those spans into these instruments. One table, read by both.
//!
//! Stable (semconv `docs/rpc/rpc-metrics.md`): `rpc.server.call.duration`
//! and `rpc.client.call.duration` in `s`, with advised boundaries.
//! Experimental (semconv up to 1.37): `rpc.server.duration` and
//! `rpc.client.duration` in `ms`, no advised boundaries (the SDK default
//! ones, which were made for milliseconds).

use crate::SpanKind;

/// One of the two sets, for metrics (each set has its own instrument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Set {
    /// The stable conventions.
    Stable,
    /// The experimental conventions.
    Experimental,
}

/// A duration histogram of the conventions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Metric {
    /// Which set it belongs to.
    pub set: Set,
    /// The side it measures (`rpc.server.*` or `rpc.client.*`).
    pub kind: SpanKind,
    /// Instrument name.
    pub name: &'static str,
    /// UCUM unit.
    pub unit: &'static str,
    /// Instrument description.
    pub description: &'static str,
    /// Explicit bucket boundaries, in `unit`.
    pub buckets: &'static [f64],
    /// Nanoseconds per `unit` (divide a duration in ns by this).
    pub ns_per_unit: f64,
}

/// The stable sets' advised boundaries (seconds).
pub const STABLE_BUCKETS: [f64; 14] = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0];
/// The SDK default boundaries, used for the experimental ms histograms.
pub const EXPERIMENTAL_BUCKETS: [f64; 15] =
    [0.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0, 7500.0, 10000.0];

pub const METRICS: [Metric; 4] = [
    Metric {
        set: Set::Stable,
        kind: SpanKind::Server,
        name: "rpc.server.call.duration",
        unit: "s",
        description: "Measures the duration of an incoming Remote Procedure Call (RPC).",
        buckets: &STABLE_BUCKETS,
        ns_per_unit: 1e9,
    },
    Metric {
        set: Set::Stable,
        kind: SpanKind::Client,
        name: "rpc.client.call.duration",
        unit: "s",
        description: "Measures the duration of an outgoing Remote Procedure Call (RPC).",
        buckets: &STABLE_BUCKETS,
        ns_per_unit: 1e9,
    },
    Metric {
        set: Set::Experimental,
        kind: SpanKind::Server,
        name: "rpc.server.duration",
        unit: "ms",
        description: "Measures the duration of inbound RPC.",
        buckets: &EXPERIMENTAL_BUCKETS,
        ns_per_unit: 1e6,
    },
    Metric {
        set: Set::Experimental,
        kind: SpanKind::Client,
        name: "rpc.client.duration",
        unit: "ms",
        description: "Measures the duration of outbound RPC.",
        buckets: &EXPERIMENTAL_BUCKETS,
        ns_per_unit: 1e6,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_metric_per_set_and_side_with_sorted_bounds() {
        for set in [Set::Stable, Set::Experimental] {
            for kind in [SpanKind::Server, SpanKind::Client] {
                assert_eq!(METRICS.iter().filter(|m| m.set == set && m.kind == kind).count(), 1);
            }
        }
        for m in METRICS {
            assert!(m.buckets.windows(2).all(|w| w[0] < w[1]), "{}", m.name);
            let side = if m.kind == SpanKind::Server { "rpc.server." } else { "rpc.client." };
            assert!(m.name.starts_with(side), "{}", m.name);
        }
    }
}
