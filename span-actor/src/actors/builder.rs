//! Builder: runs the transformation and passes spans on, with what each raw
//! batch made; it also lets go of client spans whose parent never came (a
//! timer armed only while some wait).

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

/// The builder actor.
pub struct Builder {
    t: Transformer,
    publisher: Addr<Publisher>,
    expiry: Option<SpawnHandle>,
    vital: Vital,
}

impl Builder {
    /// A builder feeding `publisher`.
    pub fn new(t: Transformer, publisher: Addr<Publisher>, vital: Vital) -> Self {
        Builder { t, publisher, expiry: None, vital }
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
        let mut out: Vec<Produced> = Vec::with_capacity(msg.batch.event_count());
        let made = self.t.transform(msg.id.instance, msg.id.seq, &msg.batch, Instant::now(), &mut out);
        // Sent even without spans: the publisher learns the batch is safe.
        self.hand_on(Spans { spans: out, made: Some((msg.id, made.total())) }, ctx);
        self.arm_expiry(ctx);
    }
}
