//! Publisher: cuts spans into batches and publishes them through the spans
//! producer (which keeps them for replay); owns the ledger, so it marks a
//! raw batch done on the raw consumer once all its spans are safe. Also the
//! heartbeat: this process's health and the loader's, forwarded downhill.

use std::sync::Arc;
use std::time::Duration;

use rustc_hash::FxHashMap as HashMap;

use actix::prelude::*;
use ipc_schema::{Body, HealthReport, ServiceResource, SpanBatch};
use ringtail_config::Settings;
use ringtail_ipc::{Consumer, MessageId, Producer, Settled, HEARTBEAT};
use runtime_kit::component::Vital;
use runtime_kit::counters::{Counter, Drops, Gauge, Registry};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{Composition, PUBLISHER_MAILBOX};
use crate::ledger::Ledger;
use crate::transform::{Origin, Produced};

/// Spans for the next batch, and (from a transform) the raw batch they
/// came from with how many spans it made in all (published now or held).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Spans {
    pub spans: Vec<Produced>,
    pub made: Option<(MessageId, usize)>,
}

/// A loader health report to pass on.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ForwardHealth(pub HealthReport);

/// Publish everything pending now (shutdown); resolves once it is queued
/// on the producer.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Flush;

/// The publisher actor.
pub struct Publisher {
    out: Producer<Composition>,
    settled: Option<mpsc::Receiver<Settled<Composition>>>,
    raw: Consumer,
    ledger: Ledger,
    pending: Vec<Produced>,
    deadline: Option<SpawnHandle>,
    batch_length: usize,
    batch_timeout: Duration,
    loader_health: Option<HealthReport>,
    registry: Registry,
    published: Counter,
    publish_failed: Drops,
    open_gauge: Gauge,
    vital: Vital,
}

impl Publisher {
    /// A publisher on `out`, marking raw batches done on `raw`.
    pub fn new(
        settings: &Settings,
        registry: &Registry,
        out: Producer<Composition>,
        settled: mpsc::Receiver<Settled<Composition>>,
        raw: Consumer,
        vital: Vital,
    ) -> Self {
        Publisher {
            out,
            settled: Some(settled),
            raw,
            ledger: Ledger::default(),
            pending: Vec::new(),
            deadline: None,
            batch_length: settings.pipeline.batch_length,
            batch_timeout: settings.pipeline.batch_timeout,
            loader_health: None,
            registry: registry.clone(),
            published: registry.counter("ringtail_spans_published_total", &[]),
            publish_failed: registry.drops("ringtail_dropped_spans_total", "publish_failed"),
            open_gauge: registry.gauge("ringtail_open_raw_batches", &[]),
            vital,
        }
    }

    /// Cuts one batch off the pending spans.
    fn cut(&mut self) -> (SpanBatch, Composition) {
        let spans = if self.pending.len() <= self.batch_length {
            std::mem::take(&mut self.pending)
        } else {
            self.pending.drain(..self.batch_length).collect()
        };
        assemble(spans)
    }

    /// Publishes `batches` in order, to run under `ctx.wait` (it waits for
    /// room in the producer's queue).
    fn publish(&self, batches: Vec<(SpanBatch, Composition)>) -> impl ActorFuture<Self, Output = ()> + 'static {
        let out = self.out.clone();
        async move {
            let mut published = 0u64;
            let mut failed = 0u64;
            for (batch, comp) in batches {
                let n = batch.len() as u64;
                match out.publish(Body::Spans(batch), n, comp).await {
                    Ok(()) => published += n,
                    Err(error) => {
                        // The producer task is gone (shutdown): its
                        // compositions are moot, the raw batches are replayed.
                        tracing::warn!(%error, "publish failed");
                        failed += n;
                    }
                }
            }
            (published, failed)
        }
        .into_actor(self)
        .map(|(published, failed), act, _| {
            act.published.add(published);
            act.publish_failed.add(failed);
        })
    }

    /// Publishes up to one batch of pending spans.
    fn flush(&mut self, ctx: &mut Context<Self>) {
        if let Some(h) = self.deadline.take() {
            ctx.cancel_future(h);
        }
        if self.pending.is_empty() {
            return;
        }
        let batch = self.cut();
        ctx.wait(self.publish(vec![batch]).map(|(), act, ctx| {
            if act.pending.len() >= act.batch_length {
                act.flush(ctx);
            } else if !act.pending.is_empty() {
                act.arm(ctx);
            }
        }));
    }

    fn arm(&mut self, ctx: &mut Context<Self>) {
        if self.deadline.is_none() {
            self.deadline = Some(ctx.run_later(self.batch_timeout, |a, ctx| {
                a.deadline = None;
                a.flush(ctx);
            }));
        }
    }

    /// `n` spans of `origin` are safe; the raw batch may be too.
    fn release(&mut self, origin: Origin, n: usize) {
        if self.ledger.release(origin, n) {
            self.raw.done(MessageId { instance: origin.0, seq: origin.1 });
        }
        self.open_gauge.set(self.ledger.open() as f64);
    }

    fn heartbeat(&mut self, ctx: &mut Context<Self>) {
        let mut reports = vec![self.registry.report()];
        reports.extend(self.loader_health.take());
        let out = self.out.clone();
        ctx.wait(
            async move {
                for r in reports {
                    if let Err(error) = out.transient(Body::Health(r)).await {
                        tracing::debug!(%error, "heartbeat not sent");
                    }
                }
            }
            .into_actor(self),
        );
    }
}

/// A span batch from produced spans (resources deduplicated), and how many
/// spans of each raw batch it holds.
pub fn assemble(mut spans: Vec<Produced>) -> (SpanBatch, Vec<(Origin, usize)>) {
    // ~200 bytes a span in the wire layout: sized once, rarely grown.
    let mut batch = SpanBatch::with_capacity(256 * spans.len());
    let mut index: HashMap<*const ServiceResource, u32> = HashMap::default();
    let mut by_value: HashMap<Arc<ServiceResource>, u32> = HashMap::default();
    let mut comp: Vec<(Origin, usize)> = Vec::new();
    // By reference: a span is written where it lies, never moved (a move
    // copies the whole struct, the RPC fields included: 2.6% of an HTTP/1
    // event's instructions in the transform bench).
    for p in &mut spans {
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
        p.span.resource = idx;
        batch.push(&p.span);
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
        if let Some(rx) = self.settled.take() {
            ctx.add_stream(ReceiverStream::new(rx));
        }
        ctx.run_interval(HEARTBEAT, |act, ctx| act.heartbeat(ctx));
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        self.vital.stopped();
    }
}

impl Handler<Spans> for Publisher {
    type Result = ();

    fn handle(&mut self, msg: Spans, ctx: &mut Self::Context) {
        if let Some((id, n)) = msg.made {
            // Before any of its spans can be published (and settled).
            if self.ledger.made((id.instance, id.seq), n) {
                self.raw.done(id);
            }
            self.open_gauge.set(self.ledger.open() as f64);
        }
        if msg.spans.is_empty() {
            return;
        }
        if self.pending.is_empty() {
            self.pending = msg.spans;
        } else {
            self.pending.extend(msg.spans);
        }
        // A raw batch's spans leave at once: the loader has batched them
        // already (by `batch_length` or `batch_timeout`), and waiting here
        // for a full batch would hold them (and the raw batch they came
        // from, kept by the loader until they are exported) up to another
        // `batch_timeout`. Only the spans released on their own (held for
        // a parent that never came) wait to travel with others.
        if self.pending.len() >= self.batch_length || msg.made.is_some() {
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
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: Flush, ctx: &mut Self::Context) -> Self::Result {
        if let Some(h) = self.deadline.take() {
            ctx.cancel_future(h);
        }
        let mut batches = Vec::new();
        while !self.pending.is_empty() {
            batches.push(self.cut());
        }
        Box::pin(self.publish(batches))
    }
}

impl StreamHandler<Settled<Composition>> for Publisher {
    fn handle(&mut self, s: Settled<Composition>, _: &mut Self::Context) {
        // Acknowledged by the exporter, or dropped and counted by the
        // producer: either way its spans are settled.
        for (origin, n) in s.into_tag() {
            self.release(origin, n);
        }
    }

    fn finished(&mut self, _: &mut Self::Context) {
        // The reports only end with the producer, at shutdown.
    }
}
