//! The span-actor: raw request events in, OpenTelemetry spans out.
//!
//! Runs unprivileged. Subscribes to the loader's raw batches, turns each
//! request into a SERVER or CLIENT span following the stable semantic
//! conventions (HTTP, RPC for gRPC, database calls), and publishes span batches to the
//! exporter-actor.
//!
//! # Layout
//! - [`operation`]: the interface every protocol implements:
//!   [`operation::Operation`], the one type every protocol module makes of
//!   its events, and [`operation::SpanParts`], what its conventions make
//!   of its call.
//! - [`http1`]: the HTTP/1.x module (pipelining; an `Upgrade: h2c`
//!   request handed back for the HTTP/2 module); [`http`]: request heads
//!   out of captured bytes.
//! - [`h2`]: the HTTP/2 and gRPC module: frames, HPACK, streams
//!   ([`h2::table`] follows every connection and makes operations of the
//!   streams; [`h2::grpc`] applies the RPC conventions).
//! - [`db`]: the database module: PostgreSQL, MySQL/MariaDB, Redis and
//!   memcached calls read off the wire (sanitized text, errors, pipelines),
//!   and the database conventions ([`db::judge`]), a family
//!   ([`db::FAMILY`]) of the stream table.
//! - [`messaging`]: the messaging module: Kafka, MQTT, RabbitMQ (AMQP
//!   0-9-1) and NATS calls read off a client's broker connection
//!   (PRODUCER/CONSUMER ops, `traceparent`s for links) and the messaging
//!   conventions ([`messaging::judge`]), a family ([`messaging::FAMILY`])
//!   of the stream table.
//! - [`stream_table`]: every byte-stream connection (a configured
//!   port's), bounded: each protocol family told by its first bytes or
//!   port ([`stream_table::FAMILIES`]), its records fed to that family's
//!   connection state, its calls made operations, linked to the request
//!   their send was made for.
//! - [`conn_table`]: the bounded connection table both [`h2::table`] and
//!   [`stream_table`] keep their connections in (the connection cap,
//!   eviction of the oldest, the byte budget and shedding of the largest).
//! - [`transform`]: batch by batch, records to their protocol's module and
//!   its operations into spans (`ipc_schema::Span`, what each was an
//!   `ipc_schema::Call`) by one path for every protocol
//!   ([`transform::Transformer`]'s `emit`): resource, the parts the call's
//!   conventions make (by its family's module), ids, parent/child
//!   linking, holding and publishing.
//! - [`graph`]: the service-graph edges put on server spans (the client
//!   end of the call each joined), kept apart from the trace join.
//! - [`semconv`]: the HTTP conventions: method, status and naming rules,
//!   and [`semconv::Http`], which makes an exchange's span parts (HTTP/1.x
//!   and HTTP/2 alike; an RPC's over it) with the routes and redaction.
//! - [`redact`]: query values under secret keys become `REDACTED` (or the
//!   query is dropped); what is exported of a request and what never is.
//! - [`routes`]: `http.route` from templates or the path heuristic, ignored
//!   routes, and the per-service cardinality cap.
//! - [`naming`]: `service.name` and the resource, cached per process.
//! - [`k8s`]: Kubernetes metadata on the resource, selection by it.
//! - [`ids`]: deterministic span and trace ids; the W3C `traceparent`.
//! - [`text`]: bytes from traced processes made safe text (one home).
//! - [`ledger`]: which raw batches are safe to acknowledge (owned by the
//!   publisher actor).
//! - [`actors`]: the actix actors (ingest → builder → publisher) and their
//!   bounded mailboxes, between the raw consumer and the spans producer
//!   (`ringtail_ipc`).
//!
//! # How a protocol plugs in
//! A protocol is a module that turns the kernel's records of its traffic
//! into [`operation::Operation`]s; it never builds another protocol's event
//! and nothing patches its spans afterwards. A new one (PostgreSQL, MySQL,
//! Redis, memcached...) implements:
//! 1. **Its records**: what the loader ships for it (a record type in
//!    `ipc_schema::raw` and `raw_wire`, read as hostile bytes), and its
//!    parser, with unit tests and a fuzz target (`fuzz/`).
//! 2. **Its state, bounded**: what it keeps between records (connections,
//!    requests waiting for answers), with a host-wide bound and a counter
//!    (`ringtail_dropped_events_total{reason}`) for everything it forgets,
//!    like [`http1::Http1`]; state per connection goes in a
//!    [`conn_table::ConnTable`] (its connection state says what it holds,
//!    [`conn_table::Held`]; the table bounds the connections and their
//!    bytes, `pipeline.conn_state_mb`, and hands back what it forgets for
//!    the protocol to end and count), like [`h2::table::H2Table`]. A
//!    byte-stream protocol (a configured port's, not HTTP: the kernel's
//!    [`ipc_schema::RawStream`] records) needs none of its own: it is a
//!    [`stream_table::Family`] (told by its bytes or port, a
//!    [`stream_table::StreamConn`] per connection) added to
//!    [`stream_table::FAMILIES`], and [`stream_table::StreamTable`] bounds,
//!    counts and links it, like [`db::FAMILY`].
//! 3. **`fn(record) -> Vec<Operation>`**: each finished exchange as an
//!    operation: `role` (SERVER/CLIENT), the [`operation::Conn`] (process,
//!    addresses: the peer), `seq`/`sub` (its place on the connection: the
//!    ids), its start and end, the kernel's `parent` hint and any
//!    propagated `traceparent`, and a [`operation::Call`]: the protocol's
//!    facts already judged by its conventions (for a database, a
//!    [`db::DbOp`]: its times and the `ipc_schema::DbCall` its span
//!    carries as it is; for gRPC, the `ipc_schema::RpcCall` the exporter's
//!    metrics take as data, so that the exporter re-derives nothing).
//! 4. **Its conventions**: a function of its module that makes the
//!    [`operation::SpanParts`] of its call: the span's name, status,
//!    server, peer and attributes, and its `ipc_schema::Call` (a variant of
//!    its own, with its wire form, for a new family), like
//!    [`semconv::Http::judge`] and [`db::judge`]. What it plugs into in
//!    [`transform`] is two lines: its records' dispatch in
//!    `Transformer::transform`, and, for a new family, an
//!    [`operation::Call`] variant whose arm of `Transformer::emit`'s one
//!    `match` calls that function; the resource, ids, timing, peer port,
//!    trace linking, holding and publishing are shared. The exporter's
//!    sinks and meters each match on `ipc_schema::Call` once
//!    (docs/architecture.md lists the files).
//! 5. **Its tests**: unit tests of the module, a transform test through
//!    [`transform::Transformer`], an end-to-end test in `tests/tests/`,
//!    and `tests/tests/semconv.rs` extended to exercise it (every key it
//!    emits is then checked against the conventions' registry).

pub mod actors;
pub mod conn_table;
pub mod db;
pub mod graph;
pub mod h2;
pub mod http;
pub mod http1;
pub mod ids;
pub mod k8s;
pub mod ledger;
pub mod messaging;
pub mod naming;
pub mod operation;
pub mod redact;
pub mod routes;
pub mod semconv;
pub mod stream_table;
pub mod text;
pub mod transform;
