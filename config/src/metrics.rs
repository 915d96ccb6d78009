//! `[metrics]`: the metrics ringtail derives from spans besides the
//! conventions' duration histograms (which are always on): the service
//! graph and span metrics, in the names Grafana Tempo's metrics generator
//! and OpenTelemetry eBPF Instrumentation (OBI) give them.

use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// Which metrics are derived from spans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSettings {
    /// Service-graph metrics (`traces_service_graph_request_total`,
    /// `…_failed_total`, `…_server_seconds`, `…_client_seconds`, labels
    /// `client`, `server`, `connection_type`) from the calls ringtail knows
    /// both ends of for certain: a server span joined to the client span on
    /// this host that sent its request, and a database call (its server is
    /// the address it went to). On by default: a few series per pair of
    /// services, bounded like every other series. The span-actor keeps the
    /// client end of each recent call for its server span (~384 KiB, only
    /// when on).
    pub service_graph: bool,
    /// Span metrics (`traces_span_metrics_calls_total`,
    /// `traces_span_metrics_duration_seconds`, labels `service`,
    /// `span_name`, `span_kind`, `status_code`): every span counted and
    /// timed by its name. Opt-in: a series per distinct span name, and the
    /// per-request histograms already measure the same requests.
    pub span_metrics: bool,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        MetricsSettings { service_graph: true, span_metrics: false }
    }
}

impl MetricsSettings {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }
}
