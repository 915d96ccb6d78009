//! Replay and acknowledgement: how a restart loses no batch.
//!
//! A producer numbers its data messages (`seq` from 1 per producer
//! instance) and keeps the last `capacity` of them until the consumer acks
//! them. The consumer acks "everything I received up to `upto` is handled".
//! When acks start coming from a consumer instance the producer has not
//! heard from (a restarted consumer, or the first one), it re-sends every
//! message it still holds; the consumer drops the ones it already handled.
//! Heartbeats (seq 0) are never kept, acked or deduplicated.
//!
//! Keeping is insurance, not a queue: when the buffer is full the oldest
//! message is forgotten (and counted), and it is only lost if the consumer
//! also dies before handling it.

use std::collections::{BTreeSet, VecDeque};
use std::path::PathBuf;

use bytes::Bytes;
use ipc_schema::{encode, Ack, Body, Envelope, Producer};
use zeromq::PubSocket;

use super::{send, IpcError};
use crate::counters::{Counter, Registry};

/// A PUB socket whose data messages can be replayed.
pub struct ReplayPublisher {
    socket: PubSocket,
    endpoint: String,
    producer: Producer,
    next_seq: u64,
    kept: VecDeque<(u64, Bytes)>,
    capacity: usize,
    consumer: Option<u64>,
    published: Counter,
    replayed: Counter,
    forgotten: Counter,
}

impl ReplayPublisher {
    /// Wraps a bound PUB socket.
    pub fn new(socket: PubSocket, path: PathBuf, producer: Producer, capacity: usize, registry: &Registry) -> Self {
        ReplayPublisher {
            socket,
            endpoint: ipc_schema::endpoints::ipc(&path),
            producer,
            next_seq: 1,
            kept: VecDeque::new(),
            capacity: capacity.max(1),
            consumer: None,
            published: registry.counter("ringtail_ipc_batches_published_total", &[]),
            replayed: registry.counter("ringtail_ipc_batches_replayed_total", &[]),
            forgotten: registry.counter("ringtail_ipc_replay_forgotten_total", &[]),
        }
    }

    /// This producer's identity.
    pub fn producer(&self) -> Producer {
        self.producer
    }

    /// Messages kept for replay.
    pub fn kept(&self) -> usize {
        self.kept.len()
    }

    /// Publishes a data message and keeps it for replay; returns its seq.
    pub async fn publish(&mut self, body: Body) -> Result<u64, IpcError> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let bytes = Bytes::from(
            encode(&Envelope::new(self.producer, seq, body)).map_err(|source| IpcError::Encode { source })?,
        );
        self.kept.push_back((seq, bytes.clone()));
        if self.kept.len() > self.capacity {
            self.kept.pop_front();
            self.forgotten.inc();
        }
        self.published.inc();
        send(&mut self.socket, &self.endpoint, bytes).await?;
        Ok(seq)
    }

    /// Publishes a message that is not kept (heartbeats, health reports).
    pub async fn publish_transient(&mut self, body: Body) -> Result<(), IpcError> {
        let bytes = Bytes::from(
            encode(&Envelope::new(self.producer, 0, body)).map_err(|source| IpcError::Encode { source })?,
        );
        send(&mut self.socket, &self.endpoint, bytes).await
    }

    /// Applies an ack from `from`: replays everything kept when `from` is a
    /// consumer instance not heard from before, then forgets what is acked.
    /// Returns how many messages were replayed.
    pub async fn handle_ack(&mut self, from: Producer, ack: Ack) -> Result<usize, IpcError> {
        if ack.for_instance != self.producer.instance {
            return Ok(0); // addressed to a previous life of this producer
        }
        let mut replayed = 0;
        if self.consumer != Some(from.instance) {
            self.consumer = Some(from.instance);
            let again: Vec<Bytes> = self.kept.iter().map(|(_, b)| b.clone()).collect();
            if !again.is_empty() {
                tracing::info!(endpoint = %self.endpoint, messages = again.len(), event = "replay", "new consumer: replaying kept messages");
            }
            for bytes in again {
                send(&mut self.socket, &self.endpoint, bytes).await?;
                self.replayed.inc();
                replayed += 1;
            }
        }
        while self.kept.front().is_some_and(|(s, _)| *s <= ack.upto) {
            self.kept.pop_front();
        }
        Ok(replayed)
    }
}

/// Consumer-side bookkeeping for one producer: which seqs were received,
/// which are handled, what to ack, what is a duplicate.
#[derive(Debug, Default)]
pub struct InboundSeq {
    instance: Option<u64>,
    pending: BTreeSet<u64>,
    done: BTreeSet<u64>,
    max_done: u64,
}

/// How many handled seqs are remembered for deduplication.
const DONE_WINDOW: usize = 1 << 16;

/// What to do with a received data message.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Handle it, then call [`InboundSeq::done`].
    New,
    /// Already received: skip it.
    Duplicate,
}

impl InboundSeq {
    /// The producer instance being tracked, once one has been seen.
    pub fn instance(&self) -> Option<u64> {
        self.instance
    }

    /// Notes any message (heartbeats too) from `producer`; a new producer
    /// instance starts a fresh history. Returns true if it was new.
    pub fn observe(&mut self, producer: Producer) -> bool {
        if self.instance == Some(producer.instance) {
            return false;
        }
        *self = InboundSeq { instance: Some(producer.instance), ..Default::default() };
        true
    }

    /// Classifies a data message (call [`InboundSeq::observe`] first).
    pub fn receive(&mut self, seq: u64) -> Verdict {
        if seq == 0 || self.pending.contains(&seq) || self.done.contains(&seq) {
            return Verdict::Duplicate;
        }
        self.pending.insert(seq);
        Verdict::New
    }

    /// Marks a received seq handled.
    pub fn done(&mut self, seq: u64) {
        if self.pending.remove(&seq) {
            self.done.insert(seq);
            self.max_done = self.max_done.max(seq);
            while self.done.len() > DONE_WINDOW {
                self.done.pop_first();
            }
        }
    }

    /// The ack to send: everything received up to this is handled.
    pub fn ack(&self) -> Option<Ack> {
        let instance = self.instance?;
        let upto = match self.pending.first() {
            Some(first) => first.saturating_sub(1).min(self.max_done),
            None => self.max_done,
        };
        Some(Ack { for_instance: instance, upto })
    }
}

/// The consumer's side of the ack channel: a PUB socket acks go out on.
pub struct AckSender {
    socket: PubSocket,
    endpoint: String,
    me: Producer,
}

impl AckSender {
    /// Wraps a bound PUB socket.
    pub fn new(socket: PubSocket, path: PathBuf, me: Producer) -> Self {
        AckSender { socket, endpoint: ipc_schema::endpoints::ipc(&path), me }
    }

    /// Sends an ack.
    pub async fn send(&mut self, ack: Ack) -> Result<(), IpcError> {
        let bytes = Bytes::from(
            encode(&Envelope::new(self.me, 0, Body::Ack(ack))).map_err(|source| IpcError::Encode { source })?,
        );
        send(&mut self.socket, &self.endpoint, bytes).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::Component;

    fn producer(instance: u64) -> Producer {
        Producer { component: Component::ProbeLoader, instance }
    }

    #[test]
    fn dedup_and_ack_follow_handling() {
        let mut s = InboundSeq::default();
        assert!(s.observe(producer(1)));
        assert_eq!(s.ack().unwrap().upto, 0);
        assert_eq!(s.receive(1), Verdict::New);
        assert_eq!(s.receive(2), Verdict::New);
        assert_eq!(s.receive(1), Verdict::Duplicate);
        s.done(2);
        // 1 is still pending: nothing up to 2 may be forgotten yet.
        assert_eq!(s.ack().unwrap().upto, 0);
        s.done(1);
        assert_eq!(s.ack().unwrap(), Ack { for_instance: 1, upto: 2 });
        assert_eq!(s.receive(2), Verdict::Duplicate);
    }

    #[test]
    fn replays_below_the_first_seen_seq_are_new() {
        // A restarted consumer first sees live seq 50, then the replay of 10..=50.
        let mut s = InboundSeq::default();
        s.observe(producer(7));
        assert_eq!(s.receive(50), Verdict::New);
        s.done(50);
        for seq in 10..50 {
            assert_eq!(s.receive(seq), Verdict::New, "{seq}");
        }
        assert_eq!(s.receive(50), Verdict::Duplicate);
        assert_eq!(s.ack().unwrap().upto, 9);
        for seq in 10..50 {
            s.done(seq);
        }
        assert_eq!(s.ack().unwrap().upto, 50);
    }

    #[test]
    fn new_producer_instance_starts_fresh() {
        let mut s = InboundSeq::default();
        s.observe(producer(1));
        s.receive(1);
        s.done(1);
        assert!(s.observe(producer(2)));
        assert_eq!(s.receive(1), Verdict::New);
        assert_eq!(s.ack().unwrap().for_instance, 2);
        assert!(!s.observe(producer(2)));
    }
}
