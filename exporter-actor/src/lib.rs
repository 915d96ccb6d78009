//! The exporter-actor: span batches in; traces and metrics out over OTLP
//! (gRPC or HTTP/protobuf), a Prometheus scrape endpoint, and stdout.
//!
//! Runs unprivileged. It is the only ringtail process that talks to the
//! outside world, and it behaves like a well-made OpenTelemetry exporter:
//! bounded queue, retries with back-off within a time limit, permanent
//! errors not retried, every drop counted.
//!
//! # Layout
//! - [`receiver`]: the actix actor that takes span batches from the span
//!   consumer (`ringtail_ipc`, which drops replays by sequence), drops
//!   re-derived spans by id, feeds the sinks and marks batches done.
//! - [`meters`]: request-duration histograms and ringtail's own metrics in
//!   the OpenTelemetry SDK, read by both OTLP and Prometheus.
//! - [`resource`]: the OpenTelemetry resource of each traced service.
//! - [`sinks::otlp`]: configuration (file + `OTEL_*` environment),
//!   conversion to OTLP, the traces queue and the metrics push.
//! - [`sinks::prometheus`]: `GET /metrics` in the Prometheus text format.
//! - [`sinks::stdout`]: one line per span.

pub mod meters;
pub mod receiver;
pub mod resource;
pub mod sinks;
