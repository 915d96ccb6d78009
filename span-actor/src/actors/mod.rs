//! The span-actor's actors, all on one arbiter (one thread):
//!
//! ```text
//! SUB raw.sock ─▶ Ingest ─▶ Builder ─▶ Publisher ─▶ PUB spans.sock
//!                (dedup)  (transform)  (batch, replay)   ▲
//!                                       ◀── acks ── SUB span-ack.sock
//!                                       ──▶ acks ──▶ PUB raw-ack.sock
//! ```
//!
//! Mailboxes are bounded. An actor that hands work on waits (`ctx.wait`)
//! until the next one has room, so a slow stage slows the one before it and
//! finally the socket; nothing is dropped between actors. What the
//! producers' PUB sockets drop in the end is replayed (see
//! `runtime_kit::ipc::replay`).

pub mod builder;
pub mod ingest;
pub mod publisher;

use std::cell::RefCell;
use std::rc::Rc;

use actix::{Actor, Addr};
use ipc_schema::config::Settings;
use ipc_schema::Envelope;
use runtime_kit::counters::Registry;
use runtime_kit::ipc::{AckSender, ReplayPublisher};
use tokio::sync::mpsc;

use crate::ledger::Ledger;
use crate::transform::Transformer;

/// Raw batches the builder may have queued.
pub const BUILDER_MAILBOX: usize = 8;
/// Span lists the publisher may have queued.
pub const PUBLISHER_MAILBOX: usize = 64;

/// The running actors.
pub struct Actors {
    pub ingest: Addr<ingest::Ingest>,
    pub builder: Addr<builder::Builder>,
    pub publisher: Addr<publisher::Publisher>,
}

/// Starts the three actors on the current arbiter.
pub fn start(
    settings: &Settings,
    registry: &Registry,
    raw: mpsc::Receiver<Envelope>,
    exporter_acks: mpsc::Receiver<Envelope>,
    spans: ReplayPublisher,
    raw_acks: AckSender,
) -> Actors {
    let ledger = Rc::new(RefCell::new(Ledger::default()));
    let publisher = publisher::Publisher::new(settings, registry, ledger.clone(), spans, raw_acks, exporter_acks).start();
    let builder = builder::Builder::new(Transformer::new(settings, registry), ledger.clone(), publisher.clone()).start();
    let ingest = ingest::Ingest::new(registry, ledger, builder.clone(), publisher.clone(), raw).start();
    Actors { ingest, builder, publisher }
}
