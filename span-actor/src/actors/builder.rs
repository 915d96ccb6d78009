//! Builder: runs the transformation and passes spans on; every 100 ms it
//! also lets go of client spans whose parent never came.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use ipc_schema::RawBatch;

use super::publisher::{Publisher, Spans};
use super::BUILDER_MAILBOX;
use crate::ledger::Ledger;
use crate::transform::Transformer;

/// Transform one raw batch from loader instance `inst`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Transform {
    pub inst: u64,
    pub seq: u64,
    pub batch: RawBatch,
}

/// The builder actor.
pub struct Builder {
    t: Transformer,
    ledger: Rc<RefCell<Ledger>>,
    publisher: Addr<Publisher>,
}

impl Builder {
    /// A builder feeding `publisher`.
    pub fn new(t: Transformer, ledger: Rc<RefCell<Ledger>>, publisher: Addr<Publisher>) -> Self {
        Builder { t, ledger, publisher }
    }

    fn hand_on(&mut self, spans: Vec<crate::transform::Produced>, ctx: &mut Context<Self>) {
        if spans.is_empty() {
            return;
        }
        // Wait for room in the publisher's mailbox before the next batch.
        ctx.wait(self.publisher.send(Spans(spans)).into_actor(self).map(|res, _, _| {
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
        ctx.run_interval(Duration::from_millis(100), |act, ctx| {
            let mut out = Vec::new();
            act.t.expire(Instant::now(), &mut out);
            act.hand_on(out, ctx);
        });
    }
}

impl Handler<Transform> for Builder {
    type Result = ();

    fn handle(&mut self, msg: Transform, ctx: &mut Self::Context) {
        let mut out = Vec::with_capacity(msg.batch.events.len());
        self.t.transform(msg.inst, msg.seq, &msg.batch, Instant::now(), &mut out, &mut self.ledger.borrow_mut());
        self.hand_on(out, ctx);
    }
}
