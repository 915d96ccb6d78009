//! Replay, flow control and acknowledgement: how a slow or restarted
//! consumer loses no batch, and how memory stays bounded. Pure state, no
//! sockets: [`crate::Producer`] and [`crate::Consumer`] drive it.
//!
//! A producer numbers its data messages (`seq` from 1 per producer
//! instance) and keeps each one until the consumer acknowledges it:
//!
//! - **Flow control.** It sends only while fewer than [`WINDOW`] messages are
//!   in flight beyond what the consumer says it has *received*; the rest
//!   wait in the kept buffer, unsent. ZeroMQ's PUB socket has no high-water
//!   mark of its own, so this window is what bounds its queues.
//! - **Bounded.** The kept buffer holds at most `capacity` messages. When it
//!   is full the *newest* message is dropped and counted (the caller's drop
//!   counter, e.g. `ringtail_dropped_events_total{reason="backlog_full"}`).
//! - **Resend.** A message sent but not received within [`RESEND_AFTER`] is
//!   sent again (a PUB socket drops silently when a subscriber reconnects);
//!   the consumer drops what it already has.
//! - **Replay.** When acks come from a consumer instance the producer has not
//!   heard from (a restarted consumer, or the first one), everything kept is
//!   sent again, in order, within the window.
//!
//! - **Marks.** A caller may give each message a `mark`, a position in a
//!   log of its own that only grows (the loader: the ring buffer offset just
//!   past the batch's last event). The outbox reports the highest mark the
//!   consumer has *received*, so the caller may discard its log up to there:
//!   what was received is either handled by that consumer or, should it die,
//!   replayed from the kept buffer to its successor.
//!
//! Every message carries the producer's `floor`: the lowest seq it still
//! kept when the message was made (heartbeats: now). The consumer's acks are
//! contiguous from there: `received` (all up to it arrived) and `upto` (all
//! up to it handled), so a gap is never skipped. Heartbeats (seq 0) are never
//! kept, acked or deduplicated.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ipc_schema::envelope::EncodeError;
use ipc_schema::{encode, Ack, Body, Envelope, Producer};

use crate::HEARTBEAT;

/// A message sent but not acknowledged as received after this is sent again.
pub const RESEND_AFTER: Duration = Duration::from_secs(2);
/// Messages in flight beyond the consumer's `received`. With acks every
/// 20 ms this allows ~12,800 messages a second even with one event each;
/// memory stays bounded by the kept buffer (`pipeline.replay_batches`).
pub const WINDOW: u64 = 256;
/// The least time between two acks that say something new (a tenth of
/// [`WINDOW`] arriving sends one sooner): a consumer handed many small
/// messages acks them together. See [`ack_due_at`].
pub const ACK_EVERY: Duration = Duration::from_millis(20);

struct Kept<T> {
    seq: u64,
    mark: u64,
    bytes: Bytes,
    sent: Option<Instant>,
    tag: T,
}

/// Why [`Outbox::push`] did not keep a message; the caller's tag comes back.
#[derive(Debug)]
pub enum Refused<T> {
    /// The kept buffer is full: the newest message is the one dropped.
    Full(T),
    /// The message could not be encoded.
    Encode(T, EncodeError),
}

/// What [`Outbox::ack`] changed.
#[derive(Debug)]
pub struct Acked<T> {
    /// The ack came from a consumer instance not heard from before.
    pub new_consumer: bool,
    /// Tags of the messages the consumer has finished with, in seq order.
    pub settled: Vec<T>,
    /// The ack claimed more than was ever sent (a forged or corrupt ack): it
    /// was cut to what was sent.
    pub clamped: bool,
}

/// A producer's kept buffer: what to send, resend and forget.
pub struct Outbox<T> {
    me: Producer,
    next_seq: u64,
    kept: VecDeque<Kept<T>>,
    capacity: usize,
    consumer: Option<u64>,
    received: u64,
    received_mark: u64,
    /// The highest seq ever sent: no ack can honestly claim more.
    highest_sent: u64,
}

impl<T> Outbox<T> {
    /// An empty outbox keeping at most `capacity` messages.
    pub fn new(me: Producer, capacity: usize) -> Self {
        Outbox {
            me,
            next_seq: 1,
            kept: VecDeque::new(),
            capacity: capacity.max(1),
            consumer: None,
            received: 0,
            received_mark: 0,
            highest_sent: 0,
        }
    }

    /// The highest mark of a message some consumer has received (0 before
    /// any): it never goes down, not even when a new consumer appears, as
    /// what the old one received is kept until handled.
    pub fn received_mark(&self) -> u64 {
        self.received_mark
    }

    /// This producer's identity.
    pub fn producer(&self) -> Producer {
        self.me
    }

    /// Messages kept (in flight, waiting, or unacknowledged).
    pub fn kept(&self) -> usize {
        self.kept.len()
    }

    /// True when a consumer is known and has received everything kept.
    pub fn all_received(&self) -> bool {
        self.consumer.is_some() && self.kept.back().is_none_or(|k| k.seq <= self.received)
    }

    /// True once some consumer has acked.
    pub fn has_consumer(&self) -> bool {
        self.consumer.is_some()
    }

    fn floor(&self) -> u64 {
        self.kept.front().map_or(self.next_seq, |k| k.seq)
    }

    /// Numbers, encodes and keeps a data message; returns its seq.
    pub fn push(&mut self, body: Body, tag: T) -> Result<u64, Refused<T>> {
        self.push_marked(body, tag, 0)
    }

    /// [`Outbox::push`] with the caller's `mark` (see the module doc): marks
    /// must not decrease from one message to the next.
    pub fn push_marked(&mut self, body: Body, tag: T, mark: u64) -> Result<u64, Refused<T>> {
        if self.kept.len() >= self.capacity {
            return Err(Refused::Full(tag));
        }
        let seq = self.next_seq;
        let mut env = Envelope::new(self.me, seq, body);
        env.floor = self.floor().min(seq);
        let bytes = match encode(&env) {
            Ok(b) => Bytes::from(b),
            Err(e) => return Err(Refused::Encode(tag, e)),
        };
        self.next_seq += 1;
        self.kept.push_back(Kept { seq, mark, bytes, sent: None, tag });
        Ok(seq)
    }

    /// Encodes a message that is not kept (heartbeats, health reports).
    pub fn transient(&self, body: Body) -> Result<Bytes, EncodeError> {
        let mut env = Envelope::new(self.me, 0, body);
        env.floor = self.floor();
        encode(&env).map(Bytes::from)
    }

    /// What to send now: waiting messages the window allows, and ones sent
    /// `RESEND_AFTER` ago without being received (counted in `resent`).
    pub fn due(&mut self, now: Instant, resent: &mut u64) -> Vec<Bytes> {
        let limit = self.received.saturating_add(WINDOW);
        let mut out = Vec::new();
        for k in self.kept.iter_mut() {
            if k.seq > limit {
                break;
            }
            if k.seq <= self.received {
                continue;
            }
            match k.sent {
                None => {}
                Some(at) if now.duration_since(at) >= RESEND_AFTER => *resent += 1,
                Some(_) => continue,
            }
            k.sent = Some(now);
            self.highest_sent = self.highest_sent.max(k.seq);
            out.push(k.bytes.clone());
        }
        out
    }

    /// Applies an ack from `from`: a consumer instance not heard from before
    /// gets everything kept again; what is handled is forgotten; the window
    /// moves on.
    /// An ack claiming more than was ever sent is cut to what was sent
    /// (`clamped`): a forged ack cannot settle, or skip the window past,
    /// messages the consumer never had.
    pub fn ack(&mut self, from: Producer, mut ack: Ack) -> Acked<T> {
        let mut out = Acked { new_consumer: false, settled: Vec::new(), clamped: false };
        if ack.for_instance != self.me.instance {
            return out; // addressed to a previous life of this producer
        }
        if ack.received > self.highest_sent || ack.upto > self.highest_sent {
            out.clamped = true;
            ack.received = ack.received.min(self.highest_sent);
            ack.upto = ack.upto.min(self.highest_sent);
        }
        out.new_consumer = self.consumer != Some(from.instance);
        if out.new_consumer {
            self.consumer = Some(from.instance);
            self.received = 0;
            for k in self.kept.iter_mut() {
                k.sent = None;
            }
        }
        self.received = self.received.max(ack.received);
        // Marks grow with seq: the last kept message received has the highest.
        if let Some(k) = self.kept.iter().take_while(|k| k.seq <= self.received).last() {
            self.received_mark = self.received_mark.max(k.mark);
        }
        while self.kept.front().is_some_and(|k| k.seq <= ack.upto) {
            if let Some(k) = self.kept.pop_front() {
                out.settled.push(k.tag);
            }
        }
        out
    }
}

/// Consumer-side bookkeeping for one producer instance: duplicates, and the
/// contiguous `received`/`upto` to acknowledge.
#[derive(Debug, Default)]
pub struct InboundSeq {
    instance: Option<u64>,
    floor: u64,
    /// All seqs up to this arrived.
    received: u64,
    arrived: BTreeSet<u64>,
    /// All seqs up to this are handled.
    upto: u64,
    handled: BTreeSet<u64>,
    pending: BTreeSet<u64>,
}

/// What to do with a received data message.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Handle it, then call [`InboundSeq::done`].
    New,
    /// Already received: skip it.
    Duplicate,
}

/// Advances `mark` over `set` while the next seq is in it.
fn advance(mark: &mut u64, set: &mut BTreeSet<u64>) {
    while set.remove(&(*mark + 1)) {
        *mark += 1;
    }
    // Anything at or below the mark is settled.
    while set.first().is_some_and(|s| *s <= *mark) {
        set.pop_first();
    }
}

impl InboundSeq {
    /// The producer instance being tracked, once one has been seen.
    pub fn instance(&self) -> Option<u64> {
        self.instance
    }

    /// Notes any message (heartbeats too) from `producer` with its `floor`;
    /// a new producer instance starts a fresh history. True if it was new.
    pub fn observe(&mut self, producer: Producer, floor: u64) -> bool {
        let new = self.instance != Some(producer.instance);
        if new {
            *self = InboundSeq { instance: Some(producer.instance), ..Default::default() };
        }
        if floor > self.floor {
            // Below the floor the producer keeps nothing: nothing to wait for.
            self.floor = floor;
            let settled = floor.saturating_sub(1);
            if self.received < settled {
                self.received = settled;
            }
            advance(&mut self.received, &mut self.arrived);
            if self.upto < settled && self.pending.first().is_none_or(|p| *p > settled) {
                self.upto = settled;
            }
            advance(&mut self.upto, &mut self.handled);
        }
        new
    }

    /// Classifies a data message (after [`InboundSeq::observe`]).
    pub fn receive(&mut self, seq: u64) -> Verdict {
        if seq == 0 || seq <= self.received || self.arrived.contains(&seq) {
            return Verdict::Duplicate;
        }
        self.arrived.insert(seq);
        advance(&mut self.received, &mut self.arrived);
        self.pending.insert(seq);
        Verdict::New
    }

    /// Marks a received seq handled.
    pub fn done(&mut self, seq: u64) {
        if self.pending.remove(&seq) {
            self.handled.insert(seq);
            advance(&mut self.upto, &mut self.handled);
        }
    }

    /// The ack to send.
    pub fn ack(&self) -> Option<Ack> {
        Some(Ack { for_instance: self.instance?, received: self.received, upto: self.upto })
    }
}

/// A consumer's delivery in the producer's order: a data message that
/// comes after a gap (the first ones lost while subscribing, a resend not
/// yet arrived) waits until the gap is filled — or the producer's floor
/// passes it (it keeps nothing below), or more than `cap` wait (then the
/// lowest goes on past the gap: counted by the caller).
#[derive(Debug)]
pub struct InOrder<T> {
    /// The seq to deliver next (0: no message of this producer instance yet).
    next: u64,
    held: BTreeMap<u64, T>,
    cap: usize,
}

impl<T> InOrder<T> {
    /// Holding at most `cap` messages.
    pub fn new(cap: usize) -> Self {
        InOrder { next: 0, held: BTreeMap::new(), cap: cap.max(1) }
    }

    /// A new producer instance: what waited is handed out, in its order
    /// (its gap will not be filled), and the order starts again.
    pub fn restart(&mut self, out: &mut impl FnMut(T)) {
        while let Some((_, m)) = self.held.pop_first() {
            out(m);
        }
        self.next = 0;
    }

    /// The producer keeps nothing below `floor` (any message's): nothing
    /// to wait for there.
    pub fn floor(&mut self, floor: u64, out: &mut impl FnMut(T)) {
        self.next = self.next.max(floor.max(1));
        self.release(out);
    }

    /// A new data message (not a duplicate): handed to `out` with all it
    /// lets through, in order, or held. True if a gap was given up on.
    pub fn push(&mut self, seq: u64, m: T, out: &mut impl FnMut(T)) -> bool {
        let mut gave_up = false;
        if seq > self.next {
            self.held.insert(seq, m);
            if self.held.len() > self.cap {
                gave_up = true;
                self.next = self.held.first_key_value().map_or(self.next, |(s, _)| *s);
            }
        } else {
            out(m);
            self.next = self.next.max(seq + 1);
        }
        self.release(out);
        gave_up
    }

    /// Messages waiting for a gap.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    fn release(&mut self, out: &mut impl FnMut(T)) {
        while let Some(entry) = self.held.first_entry() {
            let seq = *entry.key();
            if seq > self.next {
                break;
            }
            out(entry.remove());
            self.next = self.next.max(seq + 1);
        }
    }
}

/// When a consumer's ack is next due; `arrived` is when the first message
/// it has not yet acked as received arrived (None: none since the last).
/// Each ack wakes the producer, and every wake-up of either costs tens of
/// microseconds on a virtual machine, so an ack goes out when it says
/// something the producer acts on, and the consumer sleeps until exactly
/// then (no polling):
///
/// - never sent one: now (also "I am here": the producer replays to it);
/// - a tenth of the window arrived since the last one: now (flow control);
/// - more handled (`upto` moved): [`ACK_EVERY`] after the last one, so at
///   once when messages come less often than that (the usual case: one ack
///   a batch, sent when the batch is done, which says received too);
/// - only more received: [`ACK_EVERY`] after the first of it arrived — a
///   message is usually handled sooner, and the ack that says so covers
///   both; one held longer is still acked far within [`RESEND_AFTER`], and
///   the producer's marks (the loader's ring) move on with it;
/// - nothing new: [`HEARTBEAT`] after the last one (a liveness signal).
pub fn ack_due_at(last: Option<(Ack, Instant)>, current: Ack, arrived: Option<Instant>, now: Instant) -> Instant {
    let Some((prev, sent)) = last else { return now };
    if prev.for_instance != current.for_instance || current.received >= prev.received.saturating_add(WINDOW / 10) {
        return now;
    }
    let heartbeat = sent + HEARTBEAT;
    if current.upto != prev.upto {
        (sent + ACK_EVERY).min(heartbeat)
    } else if current.received != prev.received {
        arrived.map_or(now, |t| t + ACK_EVERY).min(heartbeat)
    } else {
        heartbeat
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::{Component, HealthReport};

    fn producer(instance: u64) -> Producer {
        Producer { component: Component::ProbeLoader, instance }
    }

    #[test]
    fn dedup_and_acks_are_contiguous() {
        let mut s = InboundSeq::default();
        assert!(s.observe(producer(1), 1));
        assert_eq!(s.ack().unwrap(), Ack { for_instance: 1, received: 0, upto: 0 });
        assert_eq!(s.receive(1), Verdict::New);
        assert_eq!(s.receive(3), Verdict::New); // 2 went missing
        assert_eq!(s.receive(1), Verdict::Duplicate);
        s.done(1);
        s.done(3);
        // 2 has not arrived: neither received nor handled may pass it.
        assert_eq!(s.ack().unwrap(), Ack { for_instance: 1, received: 1, upto: 1 });
        assert_eq!(s.receive(2), Verdict::New); // resent
        assert_eq!(s.ack().unwrap().received, 3);
        assert_eq!(s.ack().unwrap().upto, 1);
        s.done(2);
        assert_eq!(s.ack().unwrap().upto, 3);
        assert_eq!(s.receive(3), Verdict::Duplicate);
    }

    #[test]
    fn a_new_consumer_starts_at_the_producers_floor() {
        // The producer still keeps 10..; a restarted consumer first sees 50.
        let mut s = InboundSeq::default();
        s.observe(producer(7), 10);
        assert_eq!(s.receive(50), Verdict::New);
        s.done(50);
        assert_eq!(s.ack().unwrap(), Ack { for_instance: 7, received: 9, upto: 9 });
        for seq in 10..50 {
            assert_eq!(s.receive(seq), Verdict::New, "{seq}");
            s.done(seq);
        }
        assert_eq!(s.ack().unwrap(), Ack { for_instance: 7, received: 50, upto: 50 });
    }

    #[test]
    fn a_rising_floor_settles_what_the_producer_gave_up() {
        let mut s = InboundSeq::default();
        s.observe(producer(1), 1);
        s.receive(5);
        s.done(5);
        s.observe(producer(1), 5); // 1..4 are gone for good
        assert_eq!(s.ack().unwrap(), Ack { for_instance: 1, received: 5, upto: 5 });
    }

    #[test]
    fn new_producer_instance_starts_fresh() {
        let mut s = InboundSeq::default();
        s.observe(producer(1), 1);
        s.receive(1);
        s.done(1);
        assert!(s.observe(producer(2), 1));
        assert_eq!(s.receive(1), Verdict::New);
        assert_eq!(s.ack().unwrap().for_instance, 2);
        assert!(!s.observe(producer(2), 1));
    }

    #[test]
    fn acks_are_paced() {
        let a = |r, u| Ack { for_instance: 1, received: r, upto: u };
        let t = Instant::now();
        assert_eq!(ack_due_at(None, a(0, 0), None, t), t, "the first one at once");
        let just = Some((a(1, 1), t));
        assert_eq!(ack_due_at(just, a(1, 1), None, t), t + HEARTBEAT, "unchanged: a heartbeat");
        assert_eq!(ack_due_at(just, a(1, 2), None, t), t + ACK_EVERY, "more handled, too soon");
        let came = t + Duration::from_millis(5);
        assert_eq!(ack_due_at(just, a(2, 1), Some(came), came), came + ACK_EVERY, "received only: paced from its arrival");
        assert_eq!(ack_due_at(just, a(1 + WINDOW / 10, 1), Some(t), t), t, "a tenth of the window arrived");
        let other = Ack { for_instance: 2, ..a(1, 1) };
        assert_eq!(ack_due_at(just, other, None, t), t, "another producer instance");
        let old = t - Duration::from_millis(60);
        let later = Some((a(1, 1), old));
        assert_eq!(ack_due_at(later, a(2, 2), Some(t), t), old + ACK_EVERY, "handled, the last long ago: due already");
        let quiet = t - Duration::from_secs(5);
        assert_eq!(ack_due_at(Some((a(1, 1), quiet)), a(2, 1), Some(t), t), quiet + HEARTBEAT, "never later than a heartbeat");
    }

    fn body() -> Body {
        Body::Health(HealthReport { component: Component::ProbeLoader, instance: 1, points: Vec::new() })
    }

    fn seqs(bytes: &[Bytes]) -> Vec<u64> {
        bytes.iter().map(|b| ipc_schema::decode(b).unwrap().seq).collect()
    }

    #[test]
    fn the_received_mark_follows_received_not_handled_and_never_goes_down() {
        let me = Producer { component: Component::ProbeLoader, instance: 42 };
        let mut o: Outbox<()> = Outbox::new(me, 10);
        for mark in [100, 250, 250, 400] {
            o.push_marked(body(), (), mark).unwrap();
        }
        assert_eq!(o.received_mark(), 0, "nothing received yet");
        assert_eq!(o.due(Instant::now(), &mut 0).len(), 4, "sent: acks for them are honest");
        let c1 = Producer { component: Component::SpanActor, instance: 7 };
        o.ack(c1, Ack { for_instance: 42, received: 2, upto: 0 });
        assert_eq!(o.received_mark(), 250, "received, though not handled: its consumer has it");
        assert_eq!(o.kept(), 4, "kept until handled");
        // Received and handled in one ack: the mark is taken before forgetting.
        o.ack(c1, Ack { for_instance: 42, received: 3, upto: 3 });
        assert_eq!(o.received_mark(), 250);
        // A new consumer starts from nothing, but what the old one received
        // is still kept (and will be replayed): the mark stays.
        let c2 = Producer { component: Component::SpanActor, instance: 8 };
        o.ack(c2, Ack { for_instance: 42, received: 0, upto: 0 });
        assert_eq!(o.received_mark(), 250);
        o.ack(c2, Ack { for_instance: 42, received: 4, upto: 4 });
        assert_eq!(o.received_mark(), 400);
        assert_eq!(o.kept(), 0);
    }

    #[test]
    fn forged_acks_beyond_what_was_sent_are_clamped() {
        let me = Producer { component: ipc_schema::Component::ProbeLoader, instance: 1 };
        let consumer = Producer { component: ipc_schema::Component::SpanActor, instance: 9 };
        let mut o = Outbox::new(me, 10);
        for tag in 1..=3u64 {
            o.push(body(), tag).unwrap();
        }
        let t0 = Instant::now();
        let mut resent = 0;
        // Nothing sent yet: a claim of everything settles nothing.
        let a = o.ack(consumer, Ack { for_instance: 1, received: u64::MAX, upto: u64::MAX });
        assert!(a.clamped && a.settled.is_empty());
        assert_eq!(o.kept(), 3);
        // The window did not overflow: all three go out.
        assert_eq!(o.due(t0, &mut resent).len(), 3);
        let a = o.ack(consumer, Ack { for_instance: 1, received: u64::MAX, upto: 2 });
        assert!(a.clamped);
        assert_eq!(a.settled, vec![1, 2]);
        let a = o.ack(consumer, Ack { for_instance: 1, received: 3, upto: 3 });
        assert!(!a.clamped);
        assert_eq!(a.settled, vec![3]);
    }

    #[test]
    fn in_order_holds_past_a_gap_until_it_is_filled() {
        let mut o = InOrder::new(4);
        let mut got = Vec::new();
        // Joined mid-stream: the first message seen is 5, the floor 3: 3
        // and 4 are kept by the producer and come (replayed) later.
        o.floor(3, &mut |m| got.push(m));
        assert!(!o.push(5, 5, &mut |m| got.push(m)));
        assert!(!o.push(6, 6, &mut |m| got.push(m)));
        assert_eq!(got, Vec::<u64>::new(), "5 and 6 wait for 3 and 4");
        o.push(3, 3, &mut |m| got.push(m));
        assert_eq!(got, [3]);
        o.push(4, 4, &mut |m| got.push(m));
        assert_eq!(got, [3, 4, 5, 6], "the gap filled lets the held ones through, in order");
        o.push(7, 7, &mut |m| got.push(m));
        assert_eq!(got, [3, 4, 5, 6, 7]);
        // A floor past a gap: nothing to wait for below it.
        o.push(9, 9, &mut |m| got.push(m));
        o.floor(9, &mut |m| got.push(m));
        assert_eq!(got, [3, 4, 5, 6, 7, 9]);
        // More than the cap wait: the lowest goes on past the gap.
        for s in 11..=15 {
            let gave_up = o.push(s, s, &mut |m| got.push(m));
            assert_eq!(gave_up, s == 15, "{s}");
        }
        assert_eq!(&got[6..], [11, 12, 13, 14, 15]);
        // A new producer instance: what waited goes out, the order restarts.
        o.push(20, 20, &mut |m| got.push(m));
        o.restart(&mut |m| got.push(m));
        assert_eq!(*got.last().unwrap(), 20);
        assert_eq!(o.held(), 0);
        o.floor(1, &mut |m| got.push(m));
        o.push(1, 1, &mut |m| got.push(m));
        assert_eq!(*got.last().unwrap(), 1);
    }

    #[test]
    fn window_backlog_resend_and_replay() {
        let me = Producer { component: Component::ProbeLoader, instance: 42 };
        let mut o: Outbox<u64> = Outbox::new(me, 300);
        let mut resent = 0;
        // 350 messages: 300 kept, the 50 newest refused with their tags.
        let mut full = Vec::new();
        for i in 0..350 {
            if let Err(Refused::Full(tag)) = o.push(body(), i) {
                full.push(tag);
            }
        }
        assert_eq!(full, (300..350).collect::<Vec<_>>());
        let t0 = Instant::now();
        // Without any ack only the window goes out.
        assert_eq!(seqs(&o.due(t0, &mut resent)), (1..=WINDOW).collect::<Vec<_>>());
        assert!(o.due(t0, &mut resent).is_empty(), "nothing twice");
        // A consumer appears having received and handled 1..=100.
        let consumer = Producer { component: Component::SpanActor, instance: 7 };
        let acked = o.ack(consumer, Ack { for_instance: 42, received: 100, upto: 100 });
        assert!(acked.new_consumer);
        assert_eq!(acked.settled, (0..100).collect::<Vec<_>>(), "tags settle in order");
        assert_eq!(o.kept(), 200);
        let replayed = o.due(t0, &mut resent);
        assert_eq!(seqs(&replayed), (101..=300).collect::<Vec<_>>(), "everything kept beyond `received`, in order");
        for b in &replayed {
            let env = ipc_schema::decode(b).unwrap();
            // A replayed message carries the floor of when it was made: a
            // lower bound; heartbeats carry the current one.
            assert!(env.floor <= env.seq, "floor");
        }
        // Nothing received beyond 250: after RESEND_AFTER the rest goes again.
        let acked = o.ack(consumer, Ack { for_instance: 42, received: 250, upto: 120 });
        assert!(!acked.new_consumer);
        assert_eq!(acked.settled.len(), 20);
        assert!(!o.all_received());
        assert_eq!(seqs(&o.due(t0 + RESEND_AFTER, &mut resent)), (251..=300).collect::<Vec<_>>());
        assert_eq!(resent, 50);
        let hb = ipc_schema::decode(&o.transient(body()).unwrap()).unwrap();
        assert_eq!((hb.seq, hb.floor), (0, 121), "heartbeats carry the current floor");
        // Acks for another producer instance change nothing.
        let acked = o.ack(consumer, Ack { for_instance: 1, received: 500, upto: 500 });
        assert!(acked.settled.is_empty());
        assert_eq!(o.kept(), 180);
        o.ack(consumer, Ack { for_instance: 42, received: 300, upto: 120 });
        assert!(o.all_received());
    }
}
