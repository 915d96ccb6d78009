//! Through the broker with no header: a Kafka consumer's messages linked
//! to the producer spans that sent them, for producer and consumer traced
//! by this ringtail — [`Producers`].
//!
//! A Produce's answer tells its client the offset the broker gave the
//! first message of each partition; a Fetch's answer carries each batch's
//! offsets. So a message is named by (broker, topic, partition, offset)
//! on both sides, and a producer span's offset ranges
//! ([`super::MsgOp::ranges`]) find the consumer spans that got those
//! messages.
//!
//! # Never a wrong link
//! - The broker is part of the name: the address and port the producer
//!   and the consumer connected to, as each saw it (two brokers of one
//!   cluster, or one broker reached by two addresses, make no link: the
//!   messages are counted unknown).
//! - Offsets restart when a topic is deleted and made again: a produced
//!   range overlapping ranges already kept replaces them (the newest
//!   write of an offset is the one a consumer can get).
//!
//! # Memory
//! At most [`MAX_RANGES`] ranges host-wide, the oldest forgotten first;
//! each names its partition once (a topic name of at most
//! [`super::MAX_NAME`] bytes, shared with the ranges of that partition):
//! about 16,384 × (64 B + a 300-byte name) ≈ 6 MiB at the very worst (a
//! range a partition, every name the longest), under 2 MiB for names of
//! common length.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use ipc_schema::SockAddr;
use rustc_hash::FxHashMap as HashMap;

use super::OffsetRange;

/// Produced ranges kept, host-wide (past it the oldest is forgotten).
pub const MAX_RANGES: usize = 16_384;

/// A partition of a topic of a broker.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Partition {
    broker: SockAddr,
    topic: String,
    partition: i32,
}

/// What is known of a partition's produced messages.
#[derive(Debug)]
struct Known<K> {
    /// Ranges by their base offset (none overlap): past their last
    /// offset, and their producer.
    ranges: BTreeMap<i64, (i64, Producer<K>)>,
    /// Past the highest offset a producer here was answered.
    high: i64,
}

/// A producer span: its context's key (the transformer's) and span id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Producer<K> {
    pub key: K,
    pub span_id: u64,
}

/// What is known of the producers of a consumer's messages.
#[derive(Debug, PartialEq, Eq)]
pub struct Found<K> {
    /// The producers of some of its messages, each once, at most
    /// `ipc_schema::MAX_LINKS` (a span's links).
    pub producers: Vec<Producer<K>>,
    /// Producers found past those.
    pub past_max: u64,
    /// Offsets received whose producer is not known (sent by a process
    /// not traced here, before ringtail started, or forgotten).
    pub unknown: u64,
    /// Some of those may still come: a producer of a partition is known,
    /// but no producer of it was answered as far as the messages go (its
    /// answer and the consumer's may reach ringtail in either order).
    pub may_come: bool,
}

/// The producer spans of recent Kafka messages, by the messages' names.
#[derive(Debug)]
pub struct Producers<K> {
    parts: HashMap<Arc<Partition>, Known<K>>,
    /// Every kept range, oldest first: (its partition, its base offset).
    order: VecDeque<(Arc<Partition>, i64)>,
}

impl<K> Default for Producers<K> {
    fn default() -> Self {
        Producers { parts: HashMap::default(), order: VecDeque::new() }
    }
}

impl<K: Copy + PartialEq> Producers<K> {
    /// Ranges kept.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The producer span `producer` sent the messages of `ranges` through
    /// `broker` (ranges of unknown base, < 0, are skipped).
    pub fn sent(&mut self, broker: SockAddr, ranges: &[OffsetRange], producer: Producer<K>) {
        for r in ranges {
            let Some(past) = r.end().filter(|_| r.base >= 0 && r.count > 0) else { continue };
            while self.order.len() >= MAX_RANGES {
                self.forget_oldest();
            }
            let part = Partition { broker, topic: r.topic.clone(), partition: r.partition };
            // (the key the partition's ranges already share, if any)
            let part = self.parts.get_key_value(&part).map_or_else(|| Arc::new(part), |(p, _)| p.clone());
            let known = self.parts.entry(part.clone()).or_insert(Known { ranges: BTreeMap::new(), high: i64::MIN });
            // The ranges it overlaps are of an earlier life of the topic.
            let stale: Vec<i64> = known.ranges.range(..past).rev().take_while(|(_, (end, _))| *end > r.base).map(|(b, _)| *b).collect();
            for b in stale {
                known.ranges.remove(&b);
            }
            known.ranges.insert(r.base, (past, producer));
            known.high = known.high.max(past);
            self.order.push_back((part, r.base));
        }
    }

    fn forget_oldest(&mut self) {
        let Some((part, base)) = self.order.pop_front() else { return };
        if let Some(known) = self.parts.get_mut(&part) {
            known.ranges.remove(&base);
            if known.ranges.is_empty() {
                self.parts.remove(&part);
            }
        }
    }

    /// The producers of the messages of `ranges`, received through
    /// `broker`.
    pub fn find(&self, broker: SockAddr, ranges: &[OffsetRange]) -> Found<K> {
        let mut found = Found { producers: Vec::new(), past_max: 0, unknown: 0, may_come: false };
        for r in ranges {
            let Some(past) = r.end().filter(|_| r.base >= 0) else { continue };
            let part = Partition { broker, topic: r.topic.clone(), partition: r.partition };
            let Some(known) = self.parts.get(&part) else {
                found.unknown += u64::from(r.count);
                continue;
            };
            let mut covered = 0u64;
            for (base, (end, producer)) in known.ranges.range(..past).rev().take_while(|(_, (end, _))| *end > r.base) {
                covered += end.min(&past).abs_diff(*base.max(&r.base));
                if found.producers.contains(producer) {
                    continue;
                }
                if found.producers.len() < ipc_schema::MAX_LINKS {
                    found.producers.push(*producer);
                } else {
                    found.past_max += 1;
                }
            }
            found.unknown += u64::from(r.count).saturating_sub(covered);
            found.may_come |= known.high < past;
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(port: u16) -> SockAddr {
        SockAddr { v6: false, ip: 0x7f00_0001 << 96, port }
    }

    fn range(topic: &str, partition: i32, base: i64, count: u32) -> OffsetRange {
        OffsetRange { topic: topic.into(), partition, base, count }
    }

    fn p(key: u32) -> Producer<u32> {
        Producer { key, span_id: u64::from(key) + 100 }
    }

    #[test]
    fn a_consumers_messages_find_the_spans_that_produced_them() {
        let mut m = Producers::default();
        m.sent(broker(9092), &[range("orders", 0, 0, 3)], p(1));
        m.sent(broker(9092), &[range("orders", 0, 3, 2), range("orders", 1, 0, 1)], p(2));
        // One fetch of offsets 1..5 of partition 0: both producers.
        let f = m.find(broker(9092), &[range("orders", 0, 1, 4)]);
        assert_eq!(f, Found { producers: vec![p(2), p(1)], past_max: 0, unknown: 0, may_come: false });
        // Past what was produced: unknown, and a producer may still come.
        let f = m.find(broker(9092), &[range("orders", 0, 4, 3)]);
        assert_eq!(f, Found { producers: vec![p(2)], past_max: 0, unknown: 2, may_come: true });
        // Another broker, topic or partition: nothing.
        for (b, t, part) in [(9093, "orders", 0), (9092, "order", 0), (9092, "orders", 2)] {
            let f = m.find(broker(b), &[range(t, part, 0, 1)]);
            assert_eq!(f, Found { producers: vec![], past_max: 0, unknown: 1, may_come: false }, "{b} {t} {part}");
        }
        // A range the answer gave no offset is not kept.
        m.sent(broker(9092), &[range("orders", 1, -1, 5)], p(3));
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn offsets_of_a_topic_made_again_replace_the_old_ones() {
        let mut m = Producers::default();
        m.sent(broker(9092), &[range("t", 0, 0, 10)], p(1));
        m.sent(broker(9092), &[range("t", 0, 2, 2)], p(2));
        let f = m.find(broker(9092), &[range("t", 0, 0, 10)]);
        assert_eq!(f.producers, vec![p(2)]);
        assert_eq!(f.unknown, 8);
    }

    #[test]
    fn a_span_links_to_at_most_max_links_producers_the_rest_counted() {
        let mut m = Producers::default();
        for i in 0..20u32 {
            m.sent(broker(9092), &[range("t", 0, i64::from(i), 1)], p(i));
        }
        let f = m.find(broker(9092), &[range("t", 0, 0, 20)]);
        assert_eq!((f.producers.len(), f.past_max, f.unknown), (ipc_schema::MAX_LINKS, 4, 0));
    }

    #[test]
    fn the_oldest_ranges_go_first_and_memory_stays_bounded() {
        let mut m = Producers::default();
        for i in 0..(MAX_RANGES as u32 + 10) {
            m.sent(broker(9092), &[range("t", (i % 7) as i32, i64::from(i), 1)], p(i));
        }
        assert_eq!(m.len(), MAX_RANGES);
        assert_eq!(m.find(broker(9092), &[range("t", 0, 0, 1)]).unknown, 1);
        let last = MAX_RANGES as u32 + 9;
        assert_eq!(m.find(broker(9092), &[range("t", (last % 7) as i32, i64::from(last), 1)]).producers, vec![p(last)]);
        let kept: usize = m.parts.values().map(|k| k.ranges.len()).sum();
        assert_eq!(kept, MAX_RANGES);
    }

    #[test]
    fn hostile_offsets_neither_overflow_nor_link() {
        let mut m = Producers::default();
        m.sent(broker(9092), &[range("t", 0, i64::MAX - 1, 5), range("t", 0, 0, 0)], p(1));
        assert!(m.is_empty());
        let f = m.find(broker(9092), &[range("t", 0, i64::MAX, u32::MAX), range("t", 0, -5, 3)]);
        assert_eq!(f, Found { producers: vec![], past_max: 0, unknown: 0, may_come: false });
    }
}
