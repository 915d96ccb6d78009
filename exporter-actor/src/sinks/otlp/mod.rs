//! OTLP export of traces and metrics, over gRPC or HTTP/protobuf.
//!
//! Requests are built straight from ringtail's own types into protobuf
//! bytes ([`spans`], [`metrics`], on the primitives of [`wire`]) and sent by
//! [`client`], which keeps opentelemetry-otlp's conventions (endpoints,
//! headers, TLS, timeouts, retries, throttling, partial success).
//!
//! Layers, outermost first: a bounded queue (in spans; when full the newest
//! batch is dropped and counted) → the retry (exponential back-off with
//! jitter, `Retry-After`/`RetryInfo` honoured, permanent errors not
//! retried, all within `retry.max_elapsed`) → the per-request timeout (on
//! the shared gRPC channel or HTTP client) → the send.

pub mod client;
pub mod config;
pub mod metrics;
pub mod spans;
pub mod traces;
pub mod wire;

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

pub use client::Transport;
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
}
