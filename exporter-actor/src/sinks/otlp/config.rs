//! The effective OTLP configuration: `[export.otlp]` from the file, then the
//! standard `OTEL_*` environment variables on top, as the issue and most
//! agents do (the environment of a deployment wins over a baked-in file).
//!
//! | variable | overrides |
//! |---|---|
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | `endpoint` (HTTP: `/v1/traces`, `/v1/metrics` appended) |
//! | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | `traces_endpoint` (used as is) |
//! | `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` | `metrics_endpoint` (used as is) |
//! | `OTEL_EXPORTER_OTLP_PROTOCOL` | `protocol` (`grpc` or `http/protobuf`) |
//! | `OTEL_EXPORTER_OTLP_HEADERS` | `headers` (merged, `k=v,k2=v2`, percent-encoded) |
//! | `OTEL_EXPORTER_OTLP_TIMEOUT` | `timeout` (milliseconds) |
//! | `OTEL_METRIC_EXPORT_INTERVAL` | `metrics_interval` (milliseconds) |
//! | `OTEL_RESOURCE_ATTRIBUTES` | added to every exported resource |

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use ringtail_config::{ConfigError, HeaderName, OtlpEndpoint, OtlpProtocol, OtlpSettings, RetrySettings};

/// OTLP export as it will run.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpConfig {
    /// Where traces go (full URL for HTTP); `None` = traces not exported.
    /// Shown (`Display`, `Debug`) without its user information.
    pub traces_endpoint: Option<OtlpEndpoint>,
    /// Where metrics go; `None` = metrics not exported over OTLP.
    pub metrics_endpoint: Option<OtlpEndpoint>,
    pub protocol: OtlpProtocol,
    pub headers: BTreeMap<String, String>,
    /// Time limit of one request.
    pub timeout: Duration,
    pub retry: RetrySettings,
    pub metrics_interval: Duration,
    /// Attributes added to every resource (from `OTEL_RESOURCE_ATTRIBUTES`).
    pub resource_attributes: Vec<(String, String)>,
}

fn bad(var: &str, rule: &'static str, example: &'static str, value: &str) -> ConfigError {
    ConfigError::Invalid { key: var.to_owned(), rule, example, value: format!("{value:?}") }
}

fn millis(env: &HashMap<String, String>, var: &str) -> Result<Option<Duration>, ConfigError> {
    match env.get(var) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|ms| *ms > 0)
            .map(|ms| Some(Duration::from_millis(ms)))
            .ok_or_else(|| bad(var, "must be a number of milliseconds above 0", "10000", v)),
    }
}

pub use runtime_kit::otel::parse_pairs;

/// An endpoint variable, by the OpenTelemetry rule (`OtlpEndpoint::from_env`).
fn env_url(var: &str, url: &str) -> Result<OtlpEndpoint, ConfigError> {
    OtlpEndpoint::from_env(url).map_err(|r| ConfigError::rejected(var, r))
}

impl OtlpConfig {
    /// Resolves file settings and the environment.
    pub fn resolve(s: &OtlpSettings, env: &HashMap<String, String>) -> Result<OtlpConfig, ConfigError> {
        let protocol = match env.get("OTEL_EXPORTER_OTLP_PROTOCOL").map(|p| p.trim()) {
            None => s.protocol,
            Some("grpc") => OtlpProtocol::Grpc,
            Some("http/protobuf") => OtlpProtocol::HttpProtobuf,
            Some(other) => return Err(bad("OTEL_EXPORTER_OTLP_PROTOCOL", "must be grpc or http/protobuf", "grpc", other)),
        };
        // An empty variable leaves the file's value, as an unset one does.
        let var = |name: &str| env.get(name).filter(|v| !v.is_empty());
        let base = match env.get("OTEL_EXPORTER_OTLP_ENDPOINT") {
            Some(url) if url.is_empty() => None,
            Some(url) => Some(env_url("OTEL_EXPORTER_OTLP_ENDPOINT", url)?),
            None => s.endpoint.clone(),
        };
        let signal = |name: &str, file: &Option<OtlpEndpoint>, path: &str| -> Result<Option<OtlpEndpoint>, ConfigError> {
            if let Some(url) = var(name) {
                return Ok(Some(env_url(name, url)?));
            }
            if let Some(url) = file {
                return Ok(Some(url.clone()));
            }
            Ok(base.as_ref().map(|base| match protocol {
                OtlpProtocol::Grpc => base.clone(),
                OtlpProtocol::HttpProtobuf => base.join(path),
            }))
        };
        let traces_endpoint = if s.traces { signal("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &s.traces_endpoint, "v1/traces")? } else { None };
        let metrics_endpoint =
            if s.metrics { signal("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", &s.metrics_endpoint, "v1/metrics")? } else { None };
        let mut headers: BTreeMap<String, String> = s.headers.iter().map(|(k, v)| (k.as_str().to_owned(), v.clone())).collect();
        if let Some(h) = env.get("OTEL_EXPORTER_OTLP_HEADERS") {
            for (k, v) in parse_pairs(h) {
                let bad_header =
                    || bad("OTEL_EXPORTER_OTLP_HEADERS", "must be valid header names and values", "authorization=Bearer%20x", &k);
                let name: HeaderName = k.parse().map_err(|_| bad_header())?;
                headers.insert(name.as_str().to_owned(), v);
            }
        }
        // Values travel as HTTP/2 and gRPC metadata: visible ASCII.
        for (k, v) in &headers {
            if http::HeaderValue::from_str(v).is_err() {
                return Err(bad("OTEL_EXPORTER_OTLP_HEADERS", "must be valid header names and values", "authorization=Bearer%20x", k));
            }
        }
        let timeout = millis(env, "OTEL_EXPORTER_OTLP_TIMEOUT")?.unwrap_or(s.timeout);
        let metrics_interval = millis(env, "OTEL_METRIC_EXPORT_INTERVAL")?.unwrap_or(s.metrics_interval);
        let resource_attributes = env.get("OTEL_RESOURCE_ATTRIBUTES").map(|v| parse_pairs(v)).unwrap_or_default();
        Ok(OtlpConfig {
            traces_endpoint,
            metrics_endpoint,
            protocol,
            headers,
            timeout,
            retry: s.retry.clone(),
            metrics_interval,
            resource_attributes,
        })
    }
}
