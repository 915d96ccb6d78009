//! The span-actor's actors, all on one arbiter (one thread):
//!
//! ```text
//! raw Consumer ─▶ Ingest ─▶ Builder ─▶ Publisher ─▶ spans Producer
//! (task: SUB raw.sock,      (transform) (batch; the ledger)   (task: PUB spans.sock,
//!  dedup, PUB raw-ack.sock)                  ▲                 SUB span-ack.sock)
//!        ▲                                    └── settled ────────┘
//!        └──────────── done (raw batch safe) ──┘
//! ```
//!
//! Mailboxes are bounded. An actor that hands work on waits (`ctx.wait`)
//! until the next one has room, so a slow stage slows the one before it and
//! finally the socket; nothing is dropped between actors. The sockets belong
//! to `ringtail_ipc` tasks; the actors only send to them through bounded
//! channels.

pub mod builder;
pub mod ingest;
pub mod publisher;

use actix::{Actor, Addr};
use ringtail_config::Settings;
use ringtail_ipc::{Consumer, Inbound, Producer, Settled};
use runtime_kit::component::Vital;
use runtime_kit::counters::Registry;
use runtime_kit::shutdown::Shutdown;
use tokio::sync::mpsc;

use crate::transform::{Origin, Transformer};

/// Raw batches the builder may have queued.
pub const BUILDER_MAILBOX: usize = 8;
/// Span lists the publisher may have queued.
pub const PUBLISHER_MAILBOX: usize = 64;

/// What a span batch stands for: how many spans of each raw batch it holds.
pub type Composition = Vec<(Origin, usize)>;

/// The running actors.
pub struct Actors {
    pub ingest: Addr<ingest::Ingest>,
    pub builder: Addr<builder::Builder>,
    pub publisher: Addr<publisher::Publisher>,
}

/// The sockets' tasks, as the actors use them.
pub struct Wiring {
    /// Raw batches and the loader's heartbeats, deduplicated.
    pub raw: mpsc::Receiver<Inbound>,
    /// Marks raw batches safe.
    pub raw_consumer: Consumer,
    /// Publishes span batches.
    pub spans: Producer<Composition>,
    /// What became of them.
    pub settled: mpsc::Receiver<Settled<Composition>>,
    /// The process's shutdown: an actor stopping before it ends the
    /// process (restarted), never leaves it up and idle.
    pub shutdown: Shutdown,
}

/// Starts the three actors on the current arbiter.
pub fn start(settings: &Settings, registry: &Registry, wiring: Wiring) -> Actors {
    let Wiring { raw, raw_consumer, spans, settled, shutdown } = wiring;
    let vital = |name| Vital::new(name, shutdown.clone());
    let publisher = publisher::Publisher::new(settings, registry, spans, settled, raw_consumer.clone(), vital("publisher")).start();
    let builder = builder::Builder::new(Transformer::new(settings, registry), publisher.clone(), vital("builder")).start();
    let ingest = ingest::Ingest::new(registry, builder.clone(), publisher.clone(), raw_consumer, raw, vital("ingest")).start();
    Actors { ingest, builder, publisher }
}
