//! The span-actor: raw request events in, OpenTelemetry HTTP spans out.
//!
//! Runs unprivileged. Subscribes to the loader's raw batches, turns each
//! request into a SERVER or CLIENT span following the stable HTTP semantic
//! conventions, and publishes span batches to the exporter-actor.
//!
//! # Layout
//! - [`http`]: request heads (and pipelined ones) out of captured bytes;
//!   `traceparent`.
//! - [`semconv`]: method, status and naming rules of the conventions.
//! - [`redact`]: query values under secret keys become `REDACTED` (or the
//!   query is dropped); what is exported of a request and what never is.
//! - [`routes`]: `http.route` from templates or the path heuristic, ignored
//!   routes, and the per-service cardinality cap.
//! - [`naming`]: `service.name` and the resource, cached per process.
//! - [`k8s`]: Kubernetes metadata on the resource, selection by it.
//! - [`ids`]: deterministic span and trace ids.
//! - [`transform`]: the whole conversion, batch by batch, including
//!   parent/child linking and pipelining.
//! - [`ledger`]: which raw batches are safe to acknowledge (owned by the
//!   publisher actor).
//! - [`actors`]: the actix actors (ingest → builder → publisher) and their
//!   bounded mailboxes, between the raw consumer and the spans producer
//!   (`ringtail_ipc`).

pub mod actors;
pub mod h2;
pub mod http;
pub mod ids;
pub mod k8s;
pub mod ledger;
pub mod naming;
pub mod redact;
pub mod routes;
pub mod semconv;
pub mod transform;
