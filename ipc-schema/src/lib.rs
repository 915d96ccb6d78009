//! What ringtail's processes say to each other.
//!
//! Data flows downhill: `probe-loader` (privileged) publishes [`RawBatch`]es,
//! `span-actor` turns them into [`SpanBatch`]es, `exporter-actor` sends those
//! out. What flows back up is an [`Ack`]: a fixed, tiny shape that only lets
//! the sender forget what it was keeping for replay.
//!
//! This crate holds data, not behaviour: types, version constants, and
//! encoding with size limits. (The configuration is `ringtail-config`; the
//! protocol that moves these messages is `ringtail-ipc`.)
//!
//! # Layout
//! - [`component`]: the component table (name, binary, privilege,
//!   profiling port offset) every process and the supervisor use.
//! - [`envelope`]: the versioned [`Envelope`] every message travels in, and
//!   [`encode`]/[`decode`] (msgpack, bounded, never panicking).
//! - [`raw`]: request events as the kernel saw them, plus process metadata.
//! - [`raw_wire`]: a raw batch's hand-written wire layout (every request
//!   passes through one: written by the loader as it reads the kernel's
//!   records, read by the span-actor without copying them).
//! - [`span`]: finished spans of every protocol (one [`Span`], what it was a [`Call`]), grouped by service resource.
//! - [`text`]: [`Text`], a span's string as the span-actor makes it
//!   (a literal, shared or owned: most are one of a few literals).
//! - [`db`]: the database call duration metric's definition, shared by
//!   the span-actor and the exporter.
//! - [`messaging`]: the messaging metrics' definitions (the call
//!   duration histogram, the sent and consumed message counters) and the
//!   values of `messaging.system` and `messaging.operation.type`.
//! - [`rpc`]: the RPC duration metrics' definitions (names, units,
//!   boundaries), shared by the span-actor and the exporter.
//! - [`span_wire`]: a span batch's hand-written wire layout (the busiest
//!   message: serde's generic path cost half the exporter's instructions);
//!   `wire` holds the primitives both layouts share.
//! - [`health`]: each process's own counters, carried downhill to the exporter.
//! - [`endpoints`]: where each process binds its sockets under the runtime dir.
//! - [`k8s`]: the Kubernetes metadata of the node's containers, as the
//!   k8s-actor publishes it (a snapshot file) and the span-actor reads it.

pub mod component;
pub mod db;
pub mod endpoints;
pub mod envelope;
pub mod health;
pub mod k8s;
pub mod messaging;
pub mod raw;
pub mod raw_wire;
pub mod rpc;
pub mod span;
pub mod span_wire;
pub mod text;
mod wire;

pub use component::{Component, ComponentInfo, COMPONENTS};
pub use envelope::{decode, decode_ack, encode, Ack, Body, DecodeError, Envelope, Producer};
pub use health::{HealthReport, MetricPoint};
pub use raw::{ConnHead, Links, ProcessInfo, RawBatch, RawEvent, RawH2, RawStream, Role, SockAddr};
pub use span::{Call, DbCall, Edge, HttpCall, MsgCall, RpcCall, ServiceResource, Span, SpanBatch, SpanKind, SpanLink, Value, MAX_LINKS};
pub use text::Text;
pub use wire::WireError;

/// Version of the message layout. A receiver rejects any other version with
/// [`DecodeError::Version`] instead of misreading it.
pub const SCHEMA_VERSION: u16 = 14;

/// Largest message any receiver accepts, in bytes. A batch of the largest
/// configurable length with every capture full stays well below it.
pub const MAX_MESSAGE_BYTES: usize = 32 << 20;

/// Largest ack a producer accepts, in bytes, checked before decoding (an
/// ack of the largest values encodes to well under 100 bytes).
pub const MAX_ACK_BYTES: usize = 256;
