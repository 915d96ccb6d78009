//! Publisher: cuts spans into batches, publishes them (kept for replay),
//! applies the exporter's acks, and acknowledges raw batches to the loader
//! once all their spans are safe. Also the heartbeat: this process's health
//! and the loader's, forwarded downhill.

use std::cell::RefCell;
use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use ipc_schema::config::Settings;
use ipc_schema::{Ack, Body, Component, Envelope, HealthReport, ServiceResource, SpanBatch};
use runtime_kit::counters::{Counter, Drops, Gauge, Registry};
use runtime_kit::ipc::replay::{ack_due, next_ack_check, ACK_EVERY};
use runtime_kit::ipc::{AckSender, ReplayPublisher, HEARTBEAT};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::PUBLISHER_MAILBOX;
use crate::ledger::Ledger;
use crate::transform::{Origin, Produced};

/// Spans for the next batch.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Spans(pub Vec<Produced>);

/// A loader health report to pass on.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ForwardHealth(pub HealthReport);

/// Publish what is pending now (shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Flush;

/// How often waiting and stale batches are (re)sent.
const PUMP_EVERY: Duration = Duration::from_millis(250);

/// The publisher actor.
pub struct Publisher {
    out: Option<ReplayPublisher>,
    acks_out: Option<AckSender>,
    exporter_acks: Option<mpsc::Receiver<Envelope>>,
    ledger: Rc<RefCell<Ledger>>,
    pending: Vec<Produced>,
    deadline: Option<SpawnHandle>,
    batch_length: usize,
    batch_timeout: Duration,
    /// span batch seq → how many spans of each raw batch it holds
    composition: BTreeMap<u64, Vec<(Origin, usize)>>,
    last_ack: Option<(Ack, Instant)>,
    loader_health: Option<HealthReport>,
    registry: Registry,
    published: Counter,
    publish_failed: Drops,
    unexpected: Drops,
    pending_gauge: Gauge,
}

impl Publisher {
    /// A publisher on `out`, acking the loader on `acks_out`.
    pub fn new(
        settings: &Settings,
        registry: &Registry,
        ledger: Rc<RefCell<Ledger>>,
        out: ReplayPublisher,
        acks_out: AckSender,
        exporter_acks: mpsc::Receiver<Envelope>,
    ) -> Self {
        Publisher {
            out: Some(out),
            acks_out: Some(acks_out),
            exporter_acks: Some(exporter_acks),
            ledger,
            pending: Vec::new(),
            deadline: None,
            batch_length: settings.pipeline.batch_length,
            batch_timeout: settings.pipeline.batch_timeout,
            composition: BTreeMap::new(),
            last_ack: None,
            loader_health: None,
            registry: registry.clone(),
            published: registry.counter("ringtail_spans_published_total", &[]),
            publish_failed: registry.drops("ringtail_dropped_spans_total", "publish_failed"),
            unexpected: registry.drops("ringtail_ipc_rejected_total", "unexpected_message"),
            pending_gauge: registry.gauge("ringtail_open_raw_batches", &[]),
        }
    }

    /// Publishes up to one batch of pending spans.
    fn flush(&mut self, ctx: &mut Context<Self>) {
        if let Some(h) = self.deadline.take() {
            ctx.cancel_future(h);
        }
        if self.pending.is_empty() {
            return;
        }
        let Some(mut out) = self.out.take() else {
            // A publish is in flight (cannot happen under ctx.wait); retry soon.
            self.deadline = Some(ctx.run_later(Duration::from_millis(1), |a, ctx| a.flush(ctx)));
            return;
        };
        let take = self.pending.len().min(self.batch_length);
        let spans: Vec<Produced> = self.pending.drain(..take).collect();
        let (batch, comp) = assemble(spans);
        let n = batch.spans.len();
        ctx.wait(
            async move {
                let res = out.publish(Body::Spans(batch), n as u64).await;
                (out, res)
            }
            .into_actor(self)
            .map(move |(out, res), act, ctx| {
                act.out = Some(out);
                match res {
                    Ok(Some(seq)) => {
                        act.published.add(n as u64);
                        act.composition.insert(seq, comp);
                    }
                    // Backlog full: dropped and counted by the publisher.
                    Ok(None) => act.release(&comp),
                    Err(error) => {
                        tracing::warn!(%error, "publish failed");
                        act.publish_failed.add(n as u64);
                        act.release(&comp);
                    }
                }
                if act.pending.len() >= act.batch_length {
                    act.flush(ctx);
                } else if !act.pending.is_empty() {
                    act.arm(ctx);
                }
            }),
        );
    }

    fn arm(&mut self, ctx: &mut Context<Self>) {
        if self.deadline.is_none() {
            self.deadline = Some(ctx.run_later(self.batch_timeout, |a, ctx| {
                a.deadline = None;
                a.flush(ctx);
            }));
        }
    }

    fn release(&mut self, comp: &[(Origin, usize)]) {
        let mut ledger = self.ledger.borrow_mut();
        for ((inst, seq), n) in comp {
            ledger.release(*inst, *seq, *n);
        }
    }

    /// Sends the raw ack when it changed, and at least every second (it is
    /// also the loader's sign that we are alive and subscribed).
    /// Considers the ack, then looks again soon while it moves and rarely
    /// when idle.
    fn ack_tick(&mut self, ctx: &mut Context<Self>) {
        self.send_raw_ack(ctx);
        let next = next_ack_check(self.last_ack, self.ledger.borrow().ack());
        ctx.run_later(next, |act, ctx| act.ack_tick(ctx));
    }

    fn send_raw_ack(&mut self, ctx: &mut Context<Self>) {
        let Some(ack) = self.ledger.borrow().ack() else { return };
        self.pending_gauge.set(self.ledger.borrow().open() as f64);
        if !ack_due(self.last_ack, ack, ACK_EVERY) {
            return;
        }
        let Some(mut acks_out) = self.acks_out.take() else { return };
        ctx.wait(
            async move {
                let res = acks_out.send(ack).await;
                (acks_out, res)
            }
            .into_actor(self)
            .map(move |(acks_out, res), act, _| {
                act.acks_out = Some(acks_out);
                match res {
                    Ok(()) => act.last_ack = Some((ack, Instant::now())),
                    Err(error) => tracing::debug!(%error, "ack not sent"),
                }
            }),
        );
    }

    fn pump(&mut self, ctx: &mut Context<Self>) {
        let Some(mut out) = self.out.take() else { return };
        ctx.wait(
            async move {
                if let Err(error) = out.pump().await {
                    tracing::debug!(%error, "pump failed");
                }
                out
            }
            .into_actor(self)
            .map(|out, act, _| act.out = Some(out)),
        );
    }

    fn heartbeat(&mut self, ctx: &mut Context<Self>) {
        let Some(mut out) = self.out.take() else { return };
        let mut reports = vec![self.registry.report()];
        reports.extend(self.loader_health.take());
        ctx.wait(
            async move {
                for r in reports {
                    if let Err(error) = out.publish_transient(Body::Health(r)).await {
                        tracing::debug!(%error, "heartbeat not sent");
                    }
                }
                out
            }
            .into_actor(self)
            .map(|out, act, _| act.out = Some(out)),
        );
    }
}

/// A span batch from produced spans (resources deduplicated), and how many
/// spans of each raw batch it holds.
pub fn assemble(spans: Vec<Produced>) -> (SpanBatch, Vec<(Origin, usize)>) {
    let mut batch = SpanBatch { resources: Vec::new(), spans: Vec::with_capacity(spans.len()) };
    let mut index: HashMap<*const ServiceResource, u32> = HashMap::default();
    let mut by_value: HashMap<Arc<ServiceResource>, u32> = HashMap::default();
    let mut comp: Vec<(Origin, usize)> = Vec::new();
    for p in spans {
        let ptr = Arc::as_ptr(&p.resource);
        let idx = match index.get(&ptr) {
            Some(i) => *i,
            None => {
                let i = *by_value.entry(p.resource.clone()).or_insert_with(|| {
                    batch.resources.push((*p.resource).clone());
                    (batch.resources.len() - 1) as u32
                });
                index.insert(ptr, i);
                i
            }
        };
        let mut span = p.span;
        span.resource = idx;
        batch.spans.push(span);
        match comp.last_mut() {
            Some((o, n)) if *o == p.origin => *n += 1,
            _ => comp.push((p.origin, 1)),
        }
    }
    (batch, comp)
}

impl Actor for Publisher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(PUBLISHER_MAILBOX);
        if let Some(rx) = self.exporter_acks.take() {
            ctx.add_stream(ReceiverStream::new(rx));
        }
        self.ack_tick(ctx);
        ctx.run_interval(PUMP_EVERY, |act, ctx| act.pump(ctx));
        ctx.run_interval(HEARTBEAT, |act, ctx| act.heartbeat(ctx));
    }
}

impl Handler<Spans> for Publisher {
    type Result = ();

    fn handle(&mut self, msg: Spans, ctx: &mut Self::Context) {
        self.pending.extend(msg.0);
        if self.pending.len() >= self.batch_length {
            self.flush(ctx);
        } else {
            self.arm(ctx);
        }
    }
}

impl Handler<ForwardHealth> for Publisher {
    type Result = ();

    fn handle(&mut self, msg: ForwardHealth, _: &mut Self::Context) {
        self.loader_health = Some(msg.0);
    }
}

impl Handler<Flush> for Publisher {
    type Result = ();

    fn handle(&mut self, _: Flush, ctx: &mut Self::Context) {
        self.flush(ctx);
        self.send_raw_ack(ctx);
    }
}

impl StreamHandler<Envelope> for Publisher {
    fn handle(&mut self, env: Envelope, ctx: &mut Self::Context) {
        if env.producer.component != Component::ExporterActor {
            self.unexpected.add(1);
            return;
        }
        let Body::Ack(ack) = env.body else {
            self.unexpected.add(1);
            return;
        };
        let Some(mut out) = self.out.take() else { return };
        let mine = ack.for_instance == out.producer().instance;
        ctx.wait(
            async move {
                if let Err(error) = out.handle_ack(env.producer, ack).await {
                    tracing::warn!(%error, "replay failed");
                }
                out
            }
            .into_actor(self)
            .map(move |out, act, ctx| {
                act.out = Some(out);
                if mine {
                    while act.composition.first_key_value().is_some_and(|(s, _)| *s <= ack.upto) {
                        if let Some((_, c)) = act.composition.pop_first() {
                            act.release(&c);
                        }
                    }
                    // Pass it on now if enough became safe (small batches
                    // at a high rate would otherwise fill the loader's
                    // replay buffer between two ticks).
                    act.send_raw_ack(ctx);
                }
            }),
        );
    }

    fn finished(&mut self, _: &mut Self::Context) {
        // The ack subscription only ends at shutdown.
    }
}
