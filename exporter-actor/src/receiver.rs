//! The receiver actor: span batches in from the span-actor, out to every
//! sink; acks back once a batch is finished everywhere.
//!
//! Replays are dropped twice over: by sequence number (a replay from the
//! same span-actor; the span consumer does that) and by span id (the same
//! request re-derived by a restarted span-actor from the loader's replay), so a restart never
//! double-counts a request in traces or histograms.

use rustc_hash::FxHashSet as HashSet;
use std::io::Write;

use actix::prelude::*;
use ipc_schema::{Body, Component, SpanBatch};
use ringtail_ipc::{Consumer, Inbound, MessageId, HEARTBEAT};
use runtime_kit::component::Vital;
use runtime_kit::counters::{Counter, Drops, Registry};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::{ReceiverStream, UnboundedReceiverStream};
use tokio_stream::StreamExt as _;

use crate::batch::Spans;
use crate::meters::Meters;
use crate::sinks::otlp::traces::TraceSink;
use crate::sinks::stdout;

/// Span ids remembered to drop re-derived duplicates: more than a full
/// replay (`pipeline.replay_batches` × `pipeline.batch_length` by default).
const RECENT_IDS: usize = 1 << 17;

/// Recently seen span ids, in two generations: ids go into the young one;
/// when it holds half of `RECENT_IDS` it becomes the old one and the old one
/// is forgotten. No per-id eviction (which cost a tenth of this process).
#[derive(Default)]
pub struct RecentIds {
    young: HashSet<u64>,
    old: HashSet<u64>,
}

impl RecentIds {
    /// True if `id` was not seen recently (and remembers it).
    pub fn first_time(&mut self, id: u64) -> bool {
        if self.old.contains(&id) || !self.young.insert(id) {
            return false;
        }
        if self.young.len() >= RECENT_IDS / 2 {
            self.old = std::mem::take(&mut self.young);
            self.young.reserve(self.old.len());
        }
        true
    }
}

/// A finished trace export: (span-actor instance, seq).
struct Done((u64, u64));

/// Resolves once the traces queue is empty (shutdown: what was received is
/// exported, or dropped and counted).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Drain;

/// The receiver actor.
pub struct Receiver {
    recent: RecentIds,
    stdout: bool,
    meters: Meters,
    traces: Option<TraceSink>,
    consumer: Consumer,
    spans_in: Option<mpsc::Receiver<Inbound>>,
    done_in: Option<mpsc::UnboundedReceiver<(u64, u64)>>,
    drained: Vec<oneshot::Sender<()>>,
    registry: Registry,
    received: Counter,
    duplicates: Counter,
    unexpected: Drops,
    stdout_failed: Drops,
    malformed: Drops,
    vital: Option<Vital>,
}

impl Receiver {
    /// A receiver wired to its sinks; `consumer` delivers the span batches
    /// (`spans_in`) and acknowledges what is marked done.
    pub fn new(
        registry: &Registry,
        stdout: bool,
        meters: Meters,
        traces: Option<TraceSink>,
        consumer: Consumer,
        spans_in: mpsc::Receiver<Inbound>,
        done_in: mpsc::UnboundedReceiver<(u64, u64)>,
    ) -> Self {
        Receiver {
            recent: RecentIds::default(),
            stdout,
            meters,
            traces,
            consumer,
            spans_in: Some(spans_in),
            done_in: Some(done_in),
            drained: Vec::new(),
            registry: registry.clone(),
            received: registry.counter("ringtail_spans_received_total", &[]),
            duplicates: registry.counter("ringtail_spans_duplicate_total", &[]),
            unexpected: registry.drops("ringtail_ipc_rejected_total", "unexpected_message"),
            stdout_failed: registry.drops("ringtail_dropped_spans_total", "stdout_failed"),
            malformed: registry.drops("ringtail_dropped_spans_total", "malformed_batch"),
            vital: None,
        }
    }

    /// Stopping before shutdown ends the process (so that it is restarted).
    pub fn vital(self, vital: Vital) -> Self {
        Receiver { vital: Some(vital), ..self }
    }

    /// The consumer's duplicate count, in spans (as the span-id dedup counts).
    pub fn duplicate_spans(body: &Body) -> u64 {
        match body {
            Body::Spans(b) => b.len() as u64,
            _ => 0,
        }
    }

    fn handle_spans(&mut self, id: MessageId, batch: SpanBatch) {
        let mut batch = match Spans::of(&batch) {
            Ok(b) => b,
            Err(error) => {
                // A peer's bytes: counted and let go (the batch is settled);
                // not a warning a batch, which a peer could flood the log with.
                tracing::debug!(%error, spans = batch.len(), "malformed span batch dropped");
                self.malformed.add(batch.len() as u64);
                self.consumer.done(id);
                return;
            }
        };
        let total = batch.spans.len();
        let recent = &mut self.recent;
        batch.spans.retain(|s| recent.first_time(s.span_id));
        let n = batch.spans.len();
        self.duplicates.add((total - n) as u64);
        self.received.add(n as u64);
        if self.stdout {
            let mut out = std::io::stdout().lock();
            if stdout::write(&batch, &mut out).is_err() {
                self.stdout_failed.add(n as u64);
            }
            let _ = out.flush();
        }
        self.meters.record_batch(&batch);
        let to_trace = batch.spans.iter().filter(|s| s.export_trace).count();
        match &mut self.traces {
            Some(sink) if to_trace > 0 => {
                if !sink.submit((id.instance, id.seq), &batch, to_trace) {
                    self.consumer.done(id); // dropped and counted: finished
                }
            }
            _ => self.consumer.done(id),
        }
    }
}

impl Actor for Receiver {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if let Some(rx) = self.spans_in.take() {
            ctx.add_stream(ReceiverStream::new(rx));
        }
        if let Some(rx) = self.done_in.take() {
            ctx.add_stream(UnboundedReceiverStream::new(rx).map(Done));
        }
        ctx.run_interval(HEARTBEAT, |act, _| {
            let own = act.registry.report();
            act.meters.update_health(own);
        });
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        if let Some(v) = &self.vital {
            v.stopped();
        }
    }
}

impl StreamHandler<Inbound> for Receiver {
    fn handle(&mut self, msg: Inbound, _: &mut Self::Context) {
        match msg {
            Inbound::Data { id, body: Body::Spans(batch) } => self.handle_spans(id, batch),
            Inbound::Data { id, .. } => {
                self.unexpected.add(1);
                self.consumer.done(id);
            }
            Inbound::Transient(Body::Health(report)) if report.component != Component::ExporterActor => self.meters.update_health(report),
            Inbound::Transient(_) => self.unexpected.add(1),
        }
    }

    fn finished(&mut self, _: &mut Self::Context) {}
}

impl StreamHandler<Done> for Receiver {
    fn handle(&mut self, Done((instance, seq)): Done, _: &mut Self::Context) {
        self.consumer.done(MessageId { instance, seq });
        if self.traces.as_ref().is_none_or(|t| t.queued() == 0) {
            for tx in self.drained.drain(..) {
                let _ = tx.send(());
            }
        }
    }

    fn finished(&mut self, _: &mut Self::Context) {}
}

impl Handler<Drain> for Receiver {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Drain, _: &mut Self::Context) -> Self::Result {
        if self.traces.as_ref().is_none_or(|t| t.queued() == 0) {
            return Box::pin(async {});
        }
        let (tx, rx) = oneshot::channel();
        self.drained.push(tx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{RecentIds, RECENT_IDS};

    #[test]
    fn recent_ids_are_remembered_for_at_least_half_the_window() {
        let mut r = RecentIds::default();
        let half = (RECENT_IDS / 2) as u64;
        assert!(r.first_time(1));
        assert!(!r.first_time(1));
        for id in 2..=half {
            assert!(r.first_time(id));
        }
        // 1 is in the old generation now: still a duplicate.
        assert!(!r.first_time(1));
        for id in half + 1..=2 * half {
            assert!(r.first_time(id));
        }
        // Two generations later it is forgotten; the newest are not.
        assert!(r.first_time(1));
        assert!(!r.first_time(2 * half));
    }
}
