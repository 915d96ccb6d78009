//! `[export]`: where spans and metrics go (OTLP, Prometheus, stdout).
//! The `OTEL_*` environment overlay is the exporter's (it alone reads it),
//! with the same types.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::types::{empty_is_none, HeaderName, ListenAddr, OtlpEndpoint};
use crate::{duration_between, invalid, ConfigError};

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OtlpProtocol {
    /// OTLP/gRPC (port 4317 by convention).
    #[serde(rename = "grpc")]
    Grpc,
    /// OTLP/HTTP with protobuf bodies (port 4318 by convention).
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

impl OtlpProtocol {
    /// The spelling used in config and `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub fn as_str(self) -> &'static str {
        match self {
            OtlpProtocol::Grpc => "grpc",
            OtlpProtocol::HttpProtobuf => "http/protobuf",
        }
    }
}

/// Retry of failed OTLP exports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetrySettings {
    /// First delay after a retryable failure (doubles each time, with jitter).
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    /// Longest delay between attempts (a server's Retry-After may exceed it).
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
    /// Give up on a batch after this long; its spans are dropped and counted.
    #[serde(with = "humantime_serde")]
    pub max_elapsed: Duration,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(5),
            max_elapsed: Duration::from_secs(60),
        }
    }
}

/// OTLP export (off while `endpoint` is empty and no `OTEL_EXPORTER_OTLP_*`
/// endpoint variable is set).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpSettings {
    /// Base endpoint, e.g. `http://127.0.0.1:4317` (gRPC) or
    /// `http://127.0.0.1:4318` (HTTP: `/v1/traces` and `/v1/metrics` are
    /// appended). `https` turns TLS on. Empty = off.
    #[serde(with = "empty_is_none")]
    pub endpoint: Option<OtlpEndpoint>,
    /// Overrides `endpoint` for traces, used as is.
    #[serde(with = "empty_is_none")]
    pub traces_endpoint: Option<OtlpEndpoint>,
    /// Overrides `endpoint` for metrics, used as is.
    #[serde(with = "empty_is_none")]
    pub metrics_endpoint: Option<OtlpEndpoint>,
    /// gRPC or HTTP/protobuf: what the collector's port speaks.
    pub protocol: OtlpProtocol,
    /// Extra request headers (e.g. authentication).
    pub headers: BTreeMap<HeaderName, String>,
    /// Time limit of one export request.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// How failed exports are retried.
    pub retry: RetrySettings,
    /// Export spans.
    pub traces: bool,
    /// Export the duration histograms (HTTP requests, gRPC calls) and ringtail's own metrics.
    pub metrics: bool,
    /// How often metrics are pushed.
    #[serde(with = "humantime_serde")]
    pub metrics_interval: Duration,
}

impl Default for OtlpSettings {
    fn default() -> Self {
        OtlpSettings {
            endpoint: None,
            traces_endpoint: None,
            metrics_endpoint: None,
            protocol: OtlpProtocol::Grpc,
            headers: BTreeMap::new(),
            timeout: Duration::from_secs(10),
            retry: RetrySettings::default(),
            traces: true,
            metrics: true,
            metrics_interval: Duration::from_secs(60),
        }
    }
}

/// Prometheus scrape endpoint (off while `listen` is empty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct PrometheusSettings {
    /// Address to serve `/metrics` on, e.g. `127.0.0.1:9400`; empty = off.
    /// A loopback address unless `allow_remote`.
    #[serde(with = "empty_is_none")]
    pub listen: Option<ListenAddr>,
    /// Accept a `listen` address other hosts can reach (`0.0.0.0:9400`, a
    /// LAN address). Off by default: `/metrics` has no authentication and
    /// no TLS, and names the host's services, routes and peers; a remote
    /// scraper is better served through a proxy that adds both, or by OTLP.
    pub allow_remote: bool,
}

/// Where spans and metrics go.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExportSettings {
    /// Print one line per span on the exporter's standard output.
    pub stdout: bool,
    /// Spans held while the backend is slow or down; beyond it new spans
    /// are dropped and counted.
    pub queue_size: usize,
    /// OTLP export.
    pub otlp: OtlpSettings,
    /// The Prometheus scrape endpoint.
    pub prometheus: PrometheusSettings,
}

impl Default for ExportSettings {
    fn default() -> Self {
        ExportSettings { stdout: true, queue_size: 65536, otlp: OtlpSettings::default(), prometheus: PrometheusSettings::default() }
    }
}

impl ExportSettings {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let e = self;
        if !(1..=10_000_000).contains(&e.queue_size) {
            return Err(invalid("export.queue_size", "must be 1..=10000000", "65536", e.queue_size));
        }
        let limits = (Duration::from_millis(10), Duration::from_secs(600));
        duration_between("export.otlp.timeout", e.otlp.timeout, limits, "must be between 10ms and 10m", "\"10s\"")?;
        let r = &e.otlp.retry;
        if r.initial_backoff.is_zero() || r.initial_backoff > r.max_backoff {
            return Err(invalid(
                "export.otlp.retry.initial_backoff",
                "must be above 0 and at most max_backoff",
                "\"500ms\"",
                humantime::format_duration(r.initial_backoff),
            ));
        }
        if r.max_elapsed < e.otlp.timeout {
            return Err(invalid(
                "export.otlp.retry.max_elapsed",
                "must be at least export.otlp.timeout",
                "\"60s\"",
                humantime::format_duration(r.max_elapsed),
            ));
        }
        if let Some(listen) = e.prometheus.listen {
            if !listen.get().ip().is_loopback() && !e.prometheus.allow_remote {
                return Err(invalid(
                    "export.prometheus.listen",
                    "must be a loopback address (127.0.0.0/8, ::1) unless export.prometheus.allow_remote = true: \
                     /metrics has no authentication and names this host's services, routes and peers",
                    "\"127.0.0.1:9400\"",
                    listen,
                ));
            }
        }
        if e.otlp.metrics_interval < Duration::from_millis(100) {
            return Err(invalid(
                "export.otlp.metrics_interval",
                "must be at least 100ms",
                "\"60s\"",
                humantime::format_duration(e.otlp.metrics_interval),
            ));
        }
        Ok(())
    }
}
