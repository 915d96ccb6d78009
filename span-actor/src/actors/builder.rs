//! Builder: runs the transformation and passes spans on, with what each raw
//! batch made; it also lets go of client spans whose parent never came (a
//! timer armed only while some wait). With Kubernetes metadata on, a raw
//! batch with a process of a container the metadata does not know yet waits
//! for it, a bounded time (`kubernetes.metadata_wait`; see `crate::k8s`),
//! and the batches behind it with it, in order.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use actix::prelude::*;
use ipc_schema::RawBatch;
use ringtail_ipc::MessageId;
use runtime_kit::component::Vital;

use super::publisher::{Publisher, Spans};
use super::BUILDER_MAILBOX;
use crate::transform::{Produced, Transformer};

/// The shortest wait of the expiry timer.
const EXPIRE_GRAIN: Duration = Duration::from_millis(100);

/// Transform one raw batch.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Transform {
    pub id: MessageId,
    pub batch: RawBatch,
}

/// Raw batches held for Kubernetes metadata at most; past it the oldest
/// is transformed at once (its containers' spans go out undecorated,
/// counted). Bounds what waiting holds to this many raw batches.
const MAX_WAITING: usize = 64;

/// The builder actor.
pub struct Builder {
    t: Transformer,
    publisher: Addr<Publisher>,
    expiry: Option<SpawnHandle>,
    /// Raw batches waiting for Kubernetes metadata (and those behind
    /// them), with when they stop waiting.
    waiting: VecDeque<(Instant, Transform)>,
    poll: Option<SpawnHandle>,
    vital: Vital,
}

impl Builder {
    /// A builder feeding `publisher`.
    pub fn new(t: Transformer, publisher: Addr<Publisher>, vital: Vital) -> Self {
        Builder { t, publisher, expiry: None, waiting: VecDeque::new(), poll: None, vital }
    }

    fn transform(&mut self, msg: Transform, ctx: &mut Context<Self>) {
        let mut out: Vec<Produced> = Vec::with_capacity(msg.batch.event_count());
        let made = self.t.transform(msg.id.instance, msg.id.seq, &msg.batch, Instant::now(), &mut out);
        // Sent even without spans: the publisher learns the batch is safe.
        self.hand_on(Spans { spans: out, made: Some((msg.id, made.total())) }, ctx);
        self.arm_expiry(ctx);
    }

    /// Transforms the waiting batches whose containers are known now, or
    /// whose wait is over (their containers are given up on), in order.
    fn drain(&mut self, ctx: &mut Context<Self>) {
        let now = Instant::now();
        while let Some(k8s) = self.t.naming_mut().k8s_mut() {
            k8s.refresh(now, false);
            let Some((due, front)) = self.waiting.front() else { break };
            let missing: Vec<String> = front
                .batch
                .processes
                .iter()
                .filter_map(|p| p.container_id.as_deref())
                .filter(|id| k8s.missing(id))
                .map(str::to_owned)
                .collect();
            if !missing.is_empty() && now < *due && self.waiting.len() <= MAX_WAITING {
                break;
            }
            for id in &missing {
                k8s.give_up(id);
            }
            let Some((_, msg)) = self.waiting.pop_front() else { break };
            self.transform(msg, ctx);
        }
        if !self.waiting.is_empty() && self.poll.is_none() {
            self.poll = Some(ctx.run_later(crate::k8s::REFRESH, |act, ctx| {
                act.poll = None;
                act.drain(ctx);
            }));
        }
    }

    /// Arms the expiry timer for the earliest held span (at most every
    /// `EXPIRE_GRAIN`, so a stream of held spans costs few wake-ups).
    fn arm_expiry(&mut self, ctx: &mut Context<Self>) {
        if self.expiry.is_some() {
            return;
        }
        let Some(due) = self.t.next_expiry() else { return };
        let wait = due.saturating_duration_since(Instant::now()).max(EXPIRE_GRAIN);
        self.expiry = Some(ctx.run_later(wait, |act, ctx| {
            act.expiry = None;
            let mut out = Vec::new();
            act.t.expire(Instant::now(), &mut out);
            if !out.is_empty() {
                act.hand_on(Spans { spans: out, made: None }, ctx);
            }
            act.arm_expiry(ctx);
        }));
    }

    fn hand_on(&mut self, spans: Spans, ctx: &mut Context<Self>) {
        // Wait for room in the publisher's mailbox before the next batch.
        ctx.wait(self.publisher.send(spans).into_actor(self).map(|res, _, _| {
            if res.is_err() {
                tracing::error!("publisher stopped; spans lost");
            }
        }));
    }
}

impl Actor for Builder {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(BUILDER_MAILBOX);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        self.vital.stopped();
    }
}

impl Handler<Transform> for Builder {
    type Result = ();

    fn handle(&mut self, msg: Transform, ctx: &mut Self::Context) {
        let now = Instant::now();
        let Some(k8s) = self.t.naming_mut().k8s_mut() else {
            return self.transform(msg, ctx);
        };
        k8s.refresh(now, false);
        let containers = || msg.batch.processes.iter().filter_map(|p| p.container_id.as_deref());
        if containers().any(|id| k8s.missing(id)) {
            k8s.count_wait();
        } else if self.waiting.is_empty() {
            return self.transform(msg, ctx);
        }
        self.waiting.push_back((now + k8s.wait(), msg));
        self.drain(ctx);
    }
}
