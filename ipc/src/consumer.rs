//! The consuming side of a stream: a task that owns the subscription to a
//! producer and the socket its acks go out on.
//!
//! It drops what it already delivered (a replay, a resend), delivers each
//! data message once and in the producer's order (a message that arrives
//! after a gap waits for the gap to be filled by the producer's resend or
//! replay: a stream such as HTTP/2's, whose header compression is a state
//! carried from one message to the next, is read wrong out of order), and acks — contiguously, paced as
//! [`crate::protocol::ack_due_at`] says — what the caller marks done with
//! [`Consumer::done`]. Both actors consume through it: the span-actor from
//! the loader, the exporter from the span-actor.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ipc_schema::{encode, Ack, Body, Component, Envelope};
use runtime_kit::counters::{Counter, Drops, Registry};
use runtime_kit::shutdown::Shutdown;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use zeromq::PubSocket;

use crate::protocol::{ack_due_at, InOrder, InboundSeq, Verdict, ACK_EVERY};
use crate::socket::{bind_pub, send, subscribe, Access};
use crate::IpcError;
use crate::HEARTBEAT;

/// Messages queued between the subscription and the task.
const SUBSCRIPTION: usize = 16;

/// How a consumer is set up.
pub struct ConsumerOptions {
    /// The producer's socket, subscribed to.
    pub path: PathBuf,
    /// Where to bind the ack socket.
    pub acks: PathBuf,
    /// Who may connect to the ack socket (the producer); `access.peer` (the
    /// producer's uid) is also the only other uid allowed behind its socket.
    pub access: Access,
    /// This process, as named in its acks.
    pub me: ipc_schema::Producer,
    /// The only component whose messages count; others are counted and dropped.
    pub producer: Component,
    /// Messages queued for the caller; beyond, the socket is not read.
    pub capacity: usize,
    /// Data messages delivered and not yet done, at most; beyond, the
    /// socket is not read (the producer keeps the rest). Set it to the
    /// producer's kept buffer (`pipeline.replay_batches`): it never holds
    /// back a producer that keeps to its own limit.
    pub max_outstanding: usize,
    /// Counts duplicates (replays, resends) that were not delivered…
    pub duplicates: Counter,
    /// …in the unit this returns for a message (batches, spans).
    pub duplicate_items: fn(&Body) -> u64,
}

/// A data message's identity, handed back to [`Consumer::done`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId {
    /// The producer instance.
    pub instance: u64,
    /// Its seq (from 1).
    pub seq: u64,
}

/// What the consumer delivers.
#[derive(Debug)]
pub enum Inbound {
    /// A data message not delivered before: handle it, then call
    /// [`Consumer::done`] with its id.
    Data { id: MessageId, body: Body },
    /// A heartbeat (health report): nothing to acknowledge.
    Transient(Body),
}

enum Control {
    Done(MessageId),
    Close,
}

/// The handle callers mark messages done through (cheap to clone).
#[derive(Clone)]
pub struct Consumer {
    control: mpsc::Sender<Control>,
    lost: Drops,
}

/// The running task; [`ConsumerTask::join`] waits for it to finish.
pub struct ConsumerTask {
    handle: JoinHandle<()>,
}

impl ConsumerTask {
    /// Waits for the task to end (after [`Consumer::close`]), at most
    /// `deadline`; true if it ended.
    pub async fn join(self, deadline: Duration) -> bool {
        tokio::time::timeout(deadline, self.handle).await.is_ok()
    }
}

impl Consumer {
    /// Binds the ack socket, subscribes and starts the task. The
    /// subscription stops reading at `shutdown`; the task goes on acking
    /// until [`Consumer::close`].
    pub async fn start(
        options: ConsumerOptions,
        registry: &Registry,
        shutdown: Shutdown,
    ) -> Result<(Consumer, ConsumerTask, mpsc::Receiver<Inbound>), IpcError> {
        let ack_socket = bind_pub(&options.acks, options.access, registry).await?;
        let input = subscribe(options.path.clone(), options.access, SUBSCRIPTION, registry, shutdown);
        let max = options.max_outstanding.max(1);
        // Every message delivered is done at most once, and at most `max`
        // of the current producer instance are outstanding (plus as many of
        // a previous one): `done` never finds this channel full.
        let (control, control_rx) = mpsc::channel(2 * max + 64);
        let (tx, rx) = mpsc::channel(options.capacity.max(1));
        let task = Task {
            ack_socket,
            ack_endpoint: ipc_schema::endpoints::ipc(&options.acks),
            me: options.me,
            producer: options.producer,
            seq: InboundSeq::default(),
            outstanding: 0,
            max,
            last_ack: None,
            arrived: None,
            order: InOrder::new(max),
            ready: VecDeque::new(),
            out_of_order: registry.counter("ringtail_ipc_out_of_order_total", &[]),
            duplicates: options.duplicates,
            duplicate_items: options.duplicate_items,
            unexpected: registry.drops("ringtail_ipc_rejected_total", "unexpected_message"),
        };
        let handle = tokio::spawn(task.run(input, control_rx, tx));
        let lost = registry.drops("ringtail_ipc_done_lost_total", "channel_full");
        Ok((Consumer { control, lost }, ConsumerTask { handle }, rx))
    }

    /// Marks a delivered data message handled: it is acknowledged once
    /// every message before it is too.
    pub fn done(&self, id: MessageId) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.control.try_send(Control::Done(id)) {
            // Cannot happen (see `start`); if it did, the producer would
            // keep this message and replay it to the next consumer.
            self.lost.add(1);
        }
    }

    /// Sends a last ack and ends the task; await [`ConsumerTask::join`].
    pub async fn close(&self) {
        let _ = self.control.send(Control::Close).await;
    }
}

struct Task {
    ack_socket: PubSocket,
    ack_endpoint: String,
    me: ipc_schema::Producer,
    producer: Component,
    seq: InboundSeq,
    /// Data messages of the current producer instance delivered, not done.
    outstanding: usize,
    max: usize,
    last_ack: Option<(Ack, Instant)>,
    /// When the first data message not yet acked as received arrived.
    arrived: Option<Instant>,
    /// Data messages that came after a gap, waiting for it (at most `max`).
    order: InOrder<Inbound>,
    /// What is ready for the caller, in order.
    ready: VecDeque<Inbound>,
    /// Messages delivered past a gap because too many waited for it.
    out_of_order: Counter,
    duplicates: Counter,
    duplicate_items: fn(&Body) -> u64,
    unexpected: Drops,
}

impl Task {
    async fn run(mut self, mut input: mpsc::Receiver<Envelope>, mut control: mpsc::Receiver<Control>, tx: mpsc::Sender<Inbound>) {
        let mut reading = true;
        let check = tokio::time::sleep(HEARTBEAT);
        tokio::pin!(check);
        loop {
            tokio::select! {
                permit = tx.reserve(), if !self.ready.is_empty() => match permit {
                    Ok(p) => {
                        if let Some(m) = self.ready.pop_front() {
                            p.send(m);
                        }
                    }
                    // The caller is gone: nothing more to deliver.
                    Err(_) => {
                        self.ready.clear();
                        reading = false;
                    }
                },
                env = input.recv(), if reading && self.ready.is_empty() && self.outstanding < self.max => match env {
                    Some(env) => {
                        self.accept(env);
                        self.settle(check.as_mut()).await;
                    }
                    None => reading = false, // shutdown
                },
                c = control.recv() => match c {
                    Some(Control::Done(id)) => {
                        if self.seq.instance() == Some(id.instance) {
                            self.outstanding = self.outstanding.saturating_sub(1);
                            self.seq.done(id.seq);
                        }
                        self.settle(check.as_mut()).await;
                    }
                    Some(Control::Close) | None => break,
                },
                _ = &mut check => self.settle(check.as_mut()).await,
            }
        }
        if let Some(ack) = self.seq.ack() {
            self.send_ack(ack).await;
        }
        tracing::debug!(endpoint = %self.ack_endpoint, "consumer stopped");
    }

    /// Tracks a message; queues what is ready for the caller, in order.
    fn accept(&mut self, env: Envelope) {
        if env.producer.component != self.producer {
            self.unexpected.add(1);
            return;
        }
        // Any message (heartbeats, seq 0, too) tells us which instance to
        // ack and what it no longer keeps.
        if self.seq.observe(env.producer, env.floor) {
            // The previous instance's dones no longer count (see `run`), nor
            // do what waited for its gaps, handed out now.
            self.outstanding = 0;
            let ready = &mut self.ready;
            self.order.restart(&mut |m| ready.push_back(m));
        }
        let (ready, outstanding) = (&mut self.ready, &mut self.outstanding);
        let mut deliver = |m: Inbound| {
            if matches!(m, Inbound::Data { .. }) {
                *outstanding += 1;
            }
            ready.push_back(m);
        };
        self.order.floor(env.floor, &mut deliver);
        if env.seq == 0 {
            deliver(Inbound::Transient(env.body));
            return;
        }
        match self.seq.receive(env.seq) {
            Verdict::New => {
                self.arrived.get_or_insert_with(Instant::now);
                let m = Inbound::Data { id: MessageId { instance: env.producer.instance, seq: env.seq }, body: env.body };
                if self.order.push(env.seq, m, &mut deliver) {
                    self.out_of_order.inc();
                }
            }
            Verdict::Duplicate => self.duplicates.add((self.duplicate_items)(&env.body)),
        }
    }

    /// Sends the ack if it is due, and sets `check` to when it is next
    /// due (`ack_due_at`): the task wakes for nothing else.
    async fn settle(&mut self, mut check: std::pin::Pin<&mut tokio::time::Sleep>) {
        let now = Instant::now();
        let next = match self.seq.ack() {
            None => now + HEARTBEAT,
            Some(ack) => {
                if ack_due_at(self.last_ack, ack, self.arrived, now) <= now {
                    self.send_ack(ack).await;
                }
                let due = ack_due_at(self.last_ack, ack, self.arrived, now);
                // (still due: the send failed; try again a little later)
                if due > now {
                    due
                } else {
                    now + ACK_EVERY
                }
            }
        };
        let next = tokio::time::Instant::from_std(next);
        // A timer reset to later still wakes the runtime at its old time
        // (tokio moves it then): a new one does not.
        if next > check.deadline() {
            check.set(tokio::time::sleep_until(next));
        } else {
            check.reset(next);
        }
    }

    async fn send_ack(&mut self, ack: Ack) {
        let bytes = match encode(&Envelope::new(self.me, 0, Body::Ack(ack))) {
            Ok(b) => Bytes::from(b),
            Err(error) => {
                tracing::debug!(%error, "ack not encoded");
                return;
            }
        };
        match send(&mut self.ack_socket, &self.ack_endpoint, bytes).await {
            Ok(()) => {
                self.last_ack = Some((ack, Instant::now()));
                self.arrived = None;
            }
            Err(error) => tracing::debug!(%error, "ack not sent"),
        }
    }
}
