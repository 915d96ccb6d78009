//! OTLP export of traces and metrics, over gRPC or HTTP/protobuf, with
//! `opentelemetry-otlp`.
//!
//! Layers, outermost first: a bounded queue (in spans; when full the newest
//! batch is dropped and counted) → the exporter's retry (exponential
//! back-off with jitter, `Retry-After`/`RetryInfo` honoured, permanent
//! errors not retried, all within `retry.max_elapsed`) → the per-request
//! timeout (on the shared gRPC channel or HTTP client) → the send.
//!
//! One connection (channel or client) serves every service; each service
//! has its own exporter because the resource is per exporter.

pub mod config;
pub mod convert;
pub mod metrics;
pub mod traces;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::str::FromStr;

use opentelemetry_otlp::{MetricExporter, Protocol, RetryPolicy, SpanExporter, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::metrics::Temporality;
use ringtail_config::{OtlpProtocol, RetrySettings};
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

pub use config::OtlpConfig;

/// Why an OTLP exporter could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("invalid OTLP endpoint {endpoint}")]
    Endpoint {
        endpoint: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("cannot build the HTTP client")]
    HttpClient {
        #[source]
        source: reqwest::Error,
    },
    #[error("cannot build the OTLP exporter")]
    Build {
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// A shared connection to one endpoint.
#[derive(Clone)]
pub enum Transport {
    Grpc { channel: Channel, metadata: MetadataMap },
    Http { client: reqwest::Client, url: String, headers: HashMap<String, String> },
}

impl Transport {
    /// Connects (lazily) to `url` with the configured protocol, headers and
    /// per-request timeout. TLS when the scheme is https.
    pub fn new(url: &str, cfg: &OtlpConfig) -> Result<Transport, OtlpError> {
        match cfg.protocol {
            OtlpProtocol::Grpc => {
                let err = |source| OtlpError::Endpoint { endpoint: url.to_owned(), source };
                let mut ep = Endpoint::from_str(url)
                    .map_err(err)?
                    .timeout(cfg.timeout)
                    .connect_timeout(cfg.timeout.min(std::time::Duration::from_secs(5)));
                if url.starts_with("https://") {
                    ep = ep.tls_config(ClientTlsConfig::new().with_native_roots()).map_err(err)?;
                }
                let mut metadata = MetadataMap::new();
                for (k, v) in &cfg.headers {
                    // Validated by OtlpConfig::resolve.
                    if let (Ok(k), Ok(v)) = (MetadataKey::from_bytes(k.as_bytes()), MetadataValue::try_from(v.as_str())) {
                        metadata.insert(k, v);
                    }
                }
                Ok(Transport::Grpc { channel: ep.connect_lazy(), metadata })
            }
            OtlpProtocol::HttpProtobuf => {
                let client = reqwest::Client::builder().timeout(cfg.timeout).build().map_err(|source| OtlpError::HttpClient { source })?;
                Ok(Transport::Http { client, url: url.to_owned(), headers: cfg.headers.clone().into_iter().collect() })
            }
        }
    }
}

/// The exporter's own retry, bounded by `max_elapsed` (given to the
/// exporter as its deadline).
pub fn retry_policy(r: &RetrySettings) -> RetryPolicy {
    RetryPolicy::recommended()
        .with_max_retries(usize::MAX)
        .with_initial_delay(r.initial_backoff)
        .with_max_delay(r.max_backoff)
        .with_max_jitter(r.initial_backoff / 2)
}

/// A span exporter on `t` for one resource.
pub fn span_exporter(t: &Transport, retry: &RetrySettings, resource: &opentelemetry_sdk::Resource) -> Result<SpanExporter, OtlpError> {
    use opentelemetry_sdk::trace::SpanExporter as _;
    let build = |source| OtlpError::Build { source };
    let mut e = match t {
        Transport::Grpc { channel, metadata } => SpanExporter::builder()
            .with_tonic()
            .with_channel(channel.clone())
            .with_metadata(metadata.clone())
            .with_timeout(retry.max_elapsed)
            .with_retry_policy(retry_policy(retry))
            .build()
            .map_err(build)?,
        Transport::Http { client, url, headers } => SpanExporter::builder()
            .with_http()
            .with_http_client(client.clone())
            .with_endpoint(url.clone())
            .with_headers(headers.clone())
            .with_protocol(Protocol::HttpBinary)
            .with_timeout(retry.max_elapsed)
            .with_retry_policy(retry_policy(retry))
            .build()
            .map_err(build)?,
    };
    e.set_resource(resource);
    Ok(e)
}

/// A metric exporter on `t` (the resource travels with the data).
pub fn metric_exporter(t: &Transport, retry: &RetrySettings) -> Result<MetricExporter, OtlpError> {
    let build = |source| OtlpError::Build { source };
    match t {
        Transport::Grpc { channel, metadata } => MetricExporter::builder()
            .with_tonic()
            .with_channel(channel.clone())
            .with_metadata(metadata.clone())
            .with_temporality(Temporality::Cumulative)
            .with_timeout(retry.max_elapsed)
            .with_retry_policy(retry_policy(retry))
            .build()
            .map_err(build),
        Transport::Http { client, url, headers } => MetricExporter::builder()
            .with_http()
            .with_http_client(client.clone())
            .with_endpoint(url.clone())
            .with_headers(headers.clone())
            .with_protocol(Protocol::HttpBinary)
            .with_temporality(Temporality::Cumulative)
            .with_timeout(retry.max_elapsed)
            .with_retry_policy(retry_policy(retry))
            .build()
            .map_err(build),
    }
}
