//! The producing side of a stream: a task that owns the PUB socket and the
//! subscription to the consumer's acks, and keeps every data message until
//! it is acknowledged (see [`crate::protocol`] for the rules).
//!
//! Callers only send to the task, through a bounded channel: [`Producer::publish`]
//! waits while it is full, which is how a slow socket slows its producer.
//! Each data message carries a caller's tag; the task hands it back as a
//! [`Settled`] report once the consumer has finished with the message, or
//! when the message was dropped (and counted), so callers can release
//! whatever the message stood for. [`Producer::progress`] says the same in
//! two numbers (messages settled, and the highest mark received), for a
//! caller that paces itself by the kept buffer or keeps a write-ahead log
//! of its own (the loader's ring buffer).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ipc_schema::{Ack, Body, Component};
use runtime_kit::counters::{Counter, Drops, Gauge, Registry};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use zeromq::PubSocket;

use crate::protocol::{Outbox, Refused};
use crate::socket::{bind_pub, send, subscribe_acks, Access};
use crate::IpcError;

/// Commands queued for the task; beyond, `publish` waits.
const COMMANDS: usize = 16;
/// Acks queued between the ack subscription and the task.
const ACKS: usize = 64;
/// How often waiting and stale messages are looked at (resends are due
/// after [`crate::protocol::RESEND_AFTER`]; acks also send what waits).
const PUMP_EVERY: Duration = Duration::from_millis(100);

/// How a producer is set up.
pub struct ProducerOptions {
    /// Where to bind the PUB socket.
    pub path: PathBuf,
    /// Who may connect to it; `access.peer` (the consumer's uid) is also
    /// the only other uid allowed behind the ack socket.
    pub access: Access,
    /// The consumer's ack socket, subscribed to.
    pub acks: PathBuf,
    /// This process, as named in every message.
    pub me: ipc_schema::Producer,
    /// The only component whose acks count; others are counted and dropped.
    pub consumer: Component,
    /// Data messages kept for replay (`pipeline.replay_batches`).
    pub capacity: usize,
    /// Counts the items of messages dropped because the kept buffer was
    /// full (e.g. `ringtail_dropped_events_total{reason="backlog_full"}`).
    pub backlog_full: Drops,
    /// Counts the items of messages that could not be encoded.
    pub publish_failed: Drops,
}

/// What became of a data message, with the tag it was published with.
#[derive(Debug, PartialEq, Eq)]
pub enum Settled<T> {
    /// The consumer has finished with it.
    Acked(T),
    /// It was dropped (backlog full, or not encodable) and counted.
    Dropped(T),
}

impl<T> Settled<T> {
    /// The tag, whichever way the message went.
    pub fn into_tag(self) -> T {
        match self {
            Settled::Acked(t) | Settled::Dropped(t) => t,
        }
    }
}

/// How far a producer's messages have got; see [`Producer::progress`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Data messages settled so far, in total: acknowledged as handled, or
    /// dropped (and counted). Messages published minus this is what the
    /// command queue and the kept buffer hold.
    pub settled: u64,
    /// The highest mark ([`Producer::publish_marked`]) of a message a
    /// consumer has received; 0 before any. It never goes down.
    pub received_mark: u64,
}

enum Command<T> {
    Publish { body: Body, items: u64, tag: T, mark: u64 },
    Transient(Body),
    Close { linger: Duration },
}

/// The handle callers send through (cheap to clone).
pub struct Producer<T> {
    commands: mpsc::Sender<Command<T>>,
    me: ipc_schema::Producer,
    progress: watch::Receiver<Progress>,
}

impl<T> Clone for Producer<T> {
    fn clone(&self) -> Self {
        Producer { commands: self.commands.clone(), me: self.me, progress: self.progress.clone() }
    }
}

/// The running task; [`ProducerTask::join`] waits for it to finish.
pub struct ProducerTask {
    handle: JoinHandle<()>,
}

impl ProducerTask {
    /// Waits for the task to end (after [`Producer::close`]), at most
    /// `deadline`; true if it ended.
    pub async fn join(self, deadline: Duration) -> bool {
        tokio::time::timeout(deadline, self.handle).await.is_ok()
    }
}

impl<T: Send + 'static> Producer<T> {
    /// Binds the socket, subscribes to the acks and starts the task.
    /// Settled reports arrive on the returned receiver (`report` of them
    /// queued at most; dropping the receiver is fine when the tags do not
    /// matter).
    pub async fn start(
        options: ProducerOptions,
        report: usize,
        registry: &Registry,
    ) -> Result<(Producer<T>, ProducerTask, mpsc::Receiver<Settled<T>>), IpcError> {
        let socket = bind_pub(&options.path, options.access, registry).await?;
        // The ack subscription lives exactly as long as the task.
        let (stop_acks, acks_shutdown) = runtime_kit::shutdown::channel();
        let acks = subscribe_acks(options.acks.clone(), options.access, ACKS, registry, acks_shutdown);
        let (commands, commands_rx) = mpsc::channel(COMMANDS);
        let (reports_tx, reports_rx) = mpsc::channel(report.max(1));
        let (progress_tx, progress) = watch::channel(Progress::default());
        let me = options.me;
        let task = Task {
            progress: progress_tx,
            socket,
            endpoint: ipc_schema::endpoints::ipc(&options.path),
            outbox: Outbox::new(me, options.capacity),
            consumer: options.consumer,
            reports: VecDeque::new(),
            listening: true,
            published: registry.counter("ringtail_ipc_batches_published_total", &[]),
            resent: registry.counter("ringtail_ipc_batches_resent_total", &[]),
            kept: registry.gauge("ringtail_ipc_kept_batches", &[]),
            unexpected: registry.drops("ringtail_ipc_rejected_total", "unexpected_message"),
            forged_ack: registry.drops("ringtail_ipc_rejected_total", "ack_beyond_sent"),
            backlog_full: options.backlog_full,
            publish_failed: options.publish_failed,
        };
        let handle = tokio::spawn(async move {
            task.run(commands_rx, acks, reports_tx).await;
            stop_acks.fire();
        });
        Ok((Producer { commands, me, progress }, ProducerTask { handle }, reports_rx))
    }

    /// This producer's identity.
    pub fn producer(&self) -> ipc_schema::Producer {
        self.me
    }

    /// Queues a data message of `items` items (events, spans: the unit of
    /// the drop counters), waiting while the task's queue is full.
    pub async fn publish(&self, body: Body, items: u64, tag: T) -> Result<(), IpcError> {
        self.command(Command::Publish { body, items, tag, mark: 0 }).await
    }

    /// [`Producer::publish`] with a `mark`: the caller's position just past
    /// this message in a log of its own. Marks must not decrease from one
    /// message to the next; [`Progress::received_mark`] reports the highest
    /// one a consumer has received.
    pub async fn publish_marked(&self, body: Body, items: u64, tag: T, mark: u64) -> Result<(), IpcError> {
        self.command(Command::Publish { body, items, tag, mark }).await
    }

    /// How far the published messages have got. The value lives as long as
    /// the task (the last one stays readable after it ends).
    pub fn progress(&self) -> watch::Receiver<Progress> {
        self.progress.clone()
    }

    /// Queues a message that is not kept (heartbeats, health reports).
    pub async fn transient(&self, body: Body) -> Result<(), IpcError> {
        self.command(Command::Transient(body)).await
    }

    /// Asks the task to finish: what was queued before is sent, then it
    /// waits (at most `linger`) until a known consumer has received
    /// everything kept, and ends. Await [`ProducerTask::join`] after.
    pub async fn close(&self, linger: Duration) -> Result<(), IpcError> {
        self.command(Command::Close { linger }).await
    }

    async fn command(&self, c: Command<T>) -> Result<(), IpcError> {
        self.commands.send(c).await.map_err(|_| IpcError::Closed { endpoint: format!("{:?} producer", self.me.component) })
    }
}

struct Task<T> {
    progress: watch::Sender<Progress>,
    socket: PubSocket,
    endpoint: String,
    outbox: Outbox<T>,
    consumer: Component,
    reports: VecDeque<Settled<T>>,
    /// False once the report receiver is gone.
    listening: bool,
    published: Counter,
    resent: Counter,
    kept: Gauge,
    unexpected: Drops,
    /// Acks claiming more than was sent (clamped).
    forged_ack: Drops,
    backlog_full: Drops,
    publish_failed: Drops,
}

impl<T: Send + 'static> Task<T> {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command<T>>,
        mut acks: mpsc::Receiver<(ipc_schema::Producer, Ack)>,
        reports_tx: mpsc::Sender<Settled<T>>,
    ) {
        let mut pump = tokio::time::interval(PUMP_EVERY);
        pump.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let linger = loop {
            tokio::select! {
                cmd = commands.recv() => match cmd {
                    Some(Command::Publish { body, items, tag, mark }) => self.publish(body, items, tag, mark).await,
                    Some(Command::Transient(body)) => self.transient(body).await,
                    Some(Command::Close { linger }) => break linger,
                    None => break Duration::ZERO,
                },
                Some((from, ack)) = acks.recv() => self.ack(from, ack).await,
                _ = pump.tick() => self.pump().await,
                permit = reports_tx.reserve(), if self.listening && !self.reports.is_empty() => match permit {
                    Ok(p) => {
                        if let Some(r) = self.reports.pop_front() {
                            p.send(r);
                        }
                    }
                    Err(_) => {
                        // Nobody listens for reports: stop keeping them.
                        self.listening = false;
                        self.reports.clear();
                    }
                },
            }
        };
        // Closing: let a known consumer receive what is kept, within `linger`.
        let deadline = tokio::time::Instant::now() + linger;
        while self.outbox.has_consumer() && !self.outbox.all_received() {
            tokio::select! {
                Some((from, ack)) = acks.recv() => self.ack(from, ack).await,
                _ = pump.tick() => self.pump().await,
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        for r in self.reports.drain(..) {
            let _ = reports_tx.try_send(r);
        }
        tracing::debug!(endpoint = %self.endpoint, kept = self.outbox.kept(), "producer stopped");
    }

    fn report(&mut self, r: Settled<T>) {
        self.progress.send_modify(|p| p.settled += 1);
        if self.listening {
            self.reports.push_back(r);
        }
    }

    async fn publish(&mut self, body: Body, items: u64, tag: T, mark: u64) {
        match self.outbox.push_marked(body, tag, mark) {
            Ok(_) => self.published.inc(),
            Err(Refused::Full(tag)) => {
                self.backlog_full.add(items);
                self.report(Settled::Dropped(tag));
            }
            Err(Refused::Encode(tag, error)) => {
                tracing::warn!(endpoint = %self.endpoint, %error, "publish failed");
                self.publish_failed.add(items);
                self.report(Settled::Dropped(tag));
            }
        }
        self.pump().await;
    }

    async fn transient(&mut self, body: Body) {
        match self.outbox.transient(body) {
            Ok(bytes) => {
                if let Err(error) = send(&mut self.socket, &self.endpoint, bytes).await {
                    tracing::debug!(%error, "heartbeat not sent");
                }
            }
            Err(error) => tracing::debug!(%error, "heartbeat not encoded"),
        }
    }

    async fn ack(&mut self, from: ipc_schema::Producer, ack: Ack) {
        if from.component != self.consumer {
            self.unexpected.add(1);
            return;
        }
        let acked = self.outbox.ack(from, ack);
        if acked.clamped {
            self.forged_ack.add(1);
        }
        if acked.new_consumer && self.outbox.kept() > 0 {
            tracing::info!(endpoint = %self.endpoint, messages = self.outbox.kept(), event = "replay", "new consumer: sending kept messages again");
        }
        let mark = self.outbox.received_mark();
        self.progress.send_if_modified(|p| {
            let moved = p.received_mark < mark;
            p.received_mark = p.received_mark.max(mark);
            moved
        });
        for tag in acked.settled {
            self.report(Settled::Acked(tag));
        }
        self.pump().await;
    }

    /// Sends what the window allows: waiting messages, and ones sent too
    /// long ago without being received.
    async fn pump(&mut self) {
        let mut resent = 0;
        let due = self.outbox.due(Instant::now(), &mut resent);
        self.resent.add(resent);
        self.kept.set(self.outbox.kept() as f64);
        for bytes in due {
            if let Err(error) = send(&mut self.socket, &self.endpoint, bytes).await {
                // Kept: sent again after RESEND_AFTER.
                tracing::debug!(%error, "send failed");
            }
        }
    }
}
