//! Ingest: reads the loader's messages, drops duplicates (replays), and
//! hands raw batches to the builder, waiting while its mailbox is full.

use std::cell::RefCell;
use std::rc::Rc;

use actix::prelude::*;
use ipc_schema::{Body, Component, Envelope};
use runtime_kit::counters::{Counter, Drops, Registry};
use runtime_kit::ipc::replay::Verdict;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::builder::{Builder, Transform};
use super::publisher::{ForwardHealth, Publisher};
use crate::ledger::Ledger;

/// The ingest actor.
pub struct Ingest {
    ledger: Rc<RefCell<Ledger>>,
    builder: Addr<Builder>,
    publisher: Addr<Publisher>,
    raw: Option<mpsc::Receiver<Envelope>>,
    batches: Counter,
    duplicates: Counter,
    unexpected: Drops,
    mailbox: Drops,
}

impl Ingest {
    /// An ingest actor reading `raw`.
    pub fn new(registry: &Registry, ledger: Rc<RefCell<Ledger>>, builder: Addr<Builder>, publisher: Addr<Publisher>, raw: mpsc::Receiver<Envelope>) -> Self {
        Ingest {
            ledger,
            builder,
            publisher,
            raw: Some(raw),
            batches: registry.counter("ringtail_raw_batches_received_total", &[]),
            duplicates: registry.counter("ringtail_raw_batches_duplicate_total", &[]),
            unexpected: registry.drops("ringtail_ipc_rejected_total", "unexpected_message"),
            mailbox: registry.drops("ringtail_dropped_events_total", "builder_stopped"),
        }
    }
}

impl Actor for Ingest {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if let Some(rx) = self.raw.take() {
            ctx.add_stream(ReceiverStream::new(rx));
        }
    }
}

impl StreamHandler<Envelope> for Ingest {
    fn handle(&mut self, env: Envelope, ctx: &mut Self::Context) {
        if env.producer.component != Component::ProbeLoader {
            self.unexpected.add(1);
            return;
        }
        self.ledger.borrow_mut().observe(env.producer, env.floor);
        match env.body {
            Body::Raw(batch) => {
                if self.ledger.borrow_mut().received(env.seq) == Verdict::Duplicate {
                    self.duplicates.inc();
                    return;
                }
                self.batches.inc();
                let events = batch.events.len() as u64;
                let msg = Transform { inst: env.producer.instance, seq: env.seq, batch };
                // Stop reading until the builder has room: back-pressure.
                ctx.wait(self.builder.send(msg).into_actor(self).map(move |res, act, _| {
                    if res.is_err() {
                        act.mailbox.add(events);
                    }
                }));
            }
            Body::Health(report) => self.publisher.do_send(ForwardHealth(report)),
            Body::Spans(_) | Body::Ack(_) => self.unexpected.add(1),
        }
    }

    fn finished(&mut self, ctx: &mut Self::Context) {
        ctx.stop();
    }
}
