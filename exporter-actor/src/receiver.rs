//! The receiver actor: span batches in from the span-actor, out to every
//! sink; acks back once a batch is finished everywhere.
//!
//! Replays are dropped twice over: by sequence number (a replay from the
//! same span-actor) and by span id (the same request re-derived by a
//! restarted span-actor from the loader's replay), so a restart never
//! double-counts a request in traces or histograms.

use rustc_hash::FxHashSet as HashSet;
use std::io::Write;
use std::time::Instant;

use actix::prelude::*;
use ipc_schema::{Ack, Body, Component, Envelope, SpanBatch};
use runtime_kit::counters::{Counter, Drops, Registry};
use runtime_kit::ipc::replay::{ack_due, next_ack_check, InboundSeq, Verdict, ACK_EVERY};
use runtime_kit::ipc::{AckSender, HEARTBEAT};
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, UnboundedReceiverStream};
use tokio_stream::StreamExt as _;

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

/// The receiver actor.
pub struct Receiver {
    inbound: InboundSeq,
    recent: RecentIds,
    stdout: bool,
    meters: Meters,
    traces: Option<TraceSink>,
    acks_out: Option<AckSender>,
    spans_in: Option<mpsc::Receiver<Envelope>>,
    done_in: Option<mpsc::UnboundedReceiver<(u64, u64)>>,
    last_ack: Option<(Ack, Instant)>,
    registry: Registry,
    received: Counter,
    duplicates: Counter,
    unexpected: Drops,
    stdout_failed: Drops,
}

impl Receiver {
    /// A receiver wired to its sinks.
    pub fn new(
        registry: &Registry,
        stdout: bool,
        meters: Meters,
        traces: Option<TraceSink>,
        acks_out: AckSender,
        spans_in: mpsc::Receiver<Envelope>,
        done_in: mpsc::UnboundedReceiver<(u64, u64)>,
    ) -> Self {
        Receiver {
            inbound: InboundSeq::default(),
            recent: RecentIds::default(),
            stdout,
            meters,
            traces,
            acks_out: Some(acks_out),
            spans_in: Some(spans_in),
            done_in: Some(done_in),
            last_ack: None,
            registry: registry.clone(),
            received: registry.counter("ringtail_spans_received_total", &[]),
            duplicates: registry.counter("ringtail_spans_duplicate_total", &[]),
            unexpected: registry.drops("ringtail_ipc_rejected_total", "unexpected_message"),
            stdout_failed: registry.drops("ringtail_dropped_spans_total", "stdout_failed"),
        }
    }

    fn handle_spans(&mut self, instance: u64, seq: u64, mut batch: SpanBatch) {
        if self.inbound.receive(seq) == Verdict::Duplicate {
            self.duplicates.add(batch.spans.len() as u64);
            return;
        }
        let before = batch.spans.len();
        let recent = &mut self.recent;
        batch.spans.retain(|s| recent.first_time(s.span_id));
        self.duplicates.add((before - batch.spans.len()) as u64);
        self.received.add(batch.spans.len() as u64);
        if self.stdout {
            let mut out = std::io::stdout().lock();
            if stdout::write(&batch, &mut out).is_err() {
                self.stdout_failed.add(batch.spans.len() as u64);
            }
            let _ = out.flush();
        }
        self.meters.record_batch(&batch);
        let to_trace = batch.spans.iter().filter(|s| s.export_trace).count();
        match &mut self.traces {
            Some(sink) if to_trace > 0 => {
                if !sink.submit((instance, seq), &batch, to_trace) {
                    self.inbound.done(seq); // dropped and counted: finished
                }
            }
            _ => self.inbound.done(seq),
        }
    }

    /// Considers the ack, then looks again soon while it moves and rarely
    /// when idle.
    fn ack_tick(&mut self, ctx: &mut Context<Self>) {
        self.send_ack(ctx);
        let next = next_ack_check(self.last_ack, self.inbound.ack());
        ctx.run_later(next, |act, ctx| act.ack_tick(ctx));
    }

    fn send_ack(&mut self, ctx: &mut Context<Self>) {
        let Some(ack) = self.inbound.ack() else { return };
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
                if res.is_ok() {
                    act.last_ack = Some((ack, Instant::now()));
                }
            }),
        );
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
        self.ack_tick(ctx);
        ctx.run_interval(HEARTBEAT, |act, _| {
            let own = act.registry.report();
            act.meters.update_health(own);
        });
    }
}

impl StreamHandler<Envelope> for Receiver {
    fn handle(&mut self, env: Envelope, ctx: &mut Self::Context) {
        // Any message of a span-actor (heartbeats, seq 0, too) tells us
        // which one to ack and what it no longer keeps.
        if env.producer.component == Component::SpanActor {
            self.inbound.observe(env.producer, env.floor);
        }
        match env.body {
            Body::Health(report) if report.component != Component::ExporterActor => self.meters.update_health(report),
            Body::Spans(batch) if env.producer.component == Component::SpanActor => {
                self.handle_spans(env.producer.instance, env.seq, batch);
                // Acked at once when enough arrived (see `ack_due`).
                self.send_ack(ctx);
            }
            _ => self.unexpected.add(1),
        }
    }

    fn finished(&mut self, _: &mut Self::Context) {}
}

impl StreamHandler<Done> for Receiver {
    fn handle(&mut self, Done((instance, seq)): Done, ctx: &mut Self::Context) {
        if self.inbound.instance() == Some(instance) {
            self.inbound.done(seq);
            self.send_ack(ctx);
        }
    }

    fn finished(&mut self, _: &mut Self::Context) {}
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
