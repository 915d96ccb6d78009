//! The exporter-actor: span batches in; traces and metrics out over OTLP
//! (gRPC or HTTP/protobuf), a Prometheus scrape endpoint, and stdout.
//!
//! Runs unprivileged. It is the only ringtail process that talks to the
//! outside world, and it behaves like a well-made OpenTelemetry exporter:
//! bounded queue, retries with back-off within a time limit, permanent
//! errors not retried, every drop counted.
//!
//! # Layout
//! - [`batch`]: a received span batch read in place ([`batch::Spans`]:
//!   spans whose strings borrow from the message), what every sink takes.
//! - [`receiver`]: the actix actor that takes span batches from the span
//!   consumer (`ringtail_ipc`, which drops replays by sequence), drops
//!   re-derived spans by id, feeds the sinks and marks batches done.
//! - [`meters`]: the duration histograms derived from spans (HTTP
//!   requests, RPC calls, database calls in `db.client.operation.duration`;
//!   fixed buckets, one lookup per span, bounded, idle series evicted), the
//!   host's service graph (`traces_service_graph_*`, from the edges the
//!   span-actor put on server spans) and span metrics
//!   (`traces_span_metrics_*`, opt-in), and the health of every component,
//!   read by both OTLP and Prometheus.
//! - [`resource`]: the OpenTelemetry resource of each traced service.
//! - [`sinks::otlp`]: configuration (file + `OTEL_*` environment), OTLP
//!   protobuf written straight from span batches and metrics
//!   ([`sinks::otlp::wire`], [`sinks::otlp::spans`],
//!   [`sinks::otlp::metrics`]), the transport with its retries
//!   ([`sinks::otlp::client`]), the traces queue and the metrics push.
//! - [`sinks::prometheus`]: `GET /metrics` in the Prometheus text format.
//! - [`sinks::stdout`]: one line per span (database calls name their
//!   system, database and status instead of an HTTP request line).

pub mod batch;
pub mod digits;
pub mod meters;
pub mod receiver;
pub mod resource;
pub mod sinks;
