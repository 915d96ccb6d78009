//! Ingest: takes the loader's messages from the raw consumer (which already
//! dropped replays) and hands raw batches to the builder, waiting while its
//! mailbox is full.

use actix::prelude::*;
use ipc_schema::Body;
use ringtail_ipc::{Consumer, Inbound};
use runtime_kit::component::Vital;
use runtime_kit::counters::{Counter, Drops, Registry};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::builder::{Builder, Transform};
use super::publisher::{ForwardHealth, Publisher};

/// The ingest actor.
pub struct Ingest {
    builder: Addr<Builder>,
    publisher: Addr<Publisher>,
    consumer: Consumer,
    raw: Option<mpsc::Receiver<Inbound>>,
    batches: Counter,
    unexpected: Drops,
    mailbox: Drops,
    vital: Vital,
}

impl Ingest {
    /// An ingest actor reading `raw`.
    pub fn new(
        registry: &Registry,
        builder: Addr<Builder>,
        publisher: Addr<Publisher>,
        consumer: Consumer,
        raw: mpsc::Receiver<Inbound>,
        vital: Vital,
    ) -> Self {
        Ingest {
            builder,
            publisher,
            consumer,
            raw: Some(raw),
            batches: registry.counter("ringtail_raw_batches_received_total", &[]),
            unexpected: registry.drops("ringtail_ipc_rejected_total", "unexpected_message"),
            mailbox: registry.drops("ringtail_dropped_events_total", "builder_stopped"),
            vital,
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

    fn stopped(&mut self, _: &mut Self::Context) {
        self.vital.stopped();
    }
}

impl StreamHandler<Inbound> for Ingest {
    fn handle(&mut self, msg: Inbound, ctx: &mut Self::Context) {
        match msg {
            Inbound::Data { id, body: Body::Raw(batch) } => {
                self.batches.inc();
                let events = batch.len() as u64;
                // Stop reading until the builder has room: back-pressure.
                ctx.wait(self.builder.send(Transform { id, batch }).into_actor(self).map(move |res, act, _| {
                    if res.is_err() {
                        act.mailbox.add(events);
                    }
                }));
            }
            Inbound::Data { id, .. } => {
                // Nothing to make from it: safe at once.
                self.unexpected.add(1);
                self.consumer.done(id);
            }
            Inbound::Transient(Body::Health(report)) => self.publisher.do_send(ForwardHealth(report)),
            Inbound::Transient(_) => self.unexpected.add(1),
        }
    }

    fn finished(&mut self, ctx: &mut Self::Context) {
        ctx.stop();
    }
}
