//! [`ConnTable`]: the connections a protocol module follows, bounded
//! host-wide whatever the traced processes send; written once for every
//! protocol that keeps state per connection (HTTP/2, the databases).
//!
//! Two bounds, each named for what it bounds:
//! - at most `max_conns` connections: a new one past it evicts the oldest
//!   ([`ConnTable::make_room`], before [`ConnTable::insert`], hands it
//!   back, for its protocol to end);
//! - at most `budget` bytes of state in all (each entry's
//!   [`Held::held_bytes`] plus a fixed overhead an entry, counted again by
//!   [`ConnTable::recount`] after each change): past it
//!   [`ConnTable::shed`] forgets the connections that hold the most until
//!   what is left is under 7/8 of it, so that the ones to forget are
//!   chosen once in a while, not at every record. A flood of state sits in
//!   a few big connections and goes first; the small ones of ordinary
//!   clients stay.
//!
//! What a forgotten connection leaves behind (open streams, pending calls)
//! is its protocol's to end and count: the table only hands it back.

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;

/// What the budget is brought down to once exceeded (7/8 of it).
const LOW_WATER: (usize, usize) = (7, 8);

/// A connection: (loader instance or epoch, connection number).
pub type Key = (u64, u64);

/// A followed connection's state, which says what it holds.
pub trait Held {
    /// Bytes the state holds (its buffers, as allocated), as kept up to
    /// date by the protocol (cheap: called after every record).
    fn held_bytes(&self) -> usize;
}

/// One connection in the table: its protocol's state, its age, and what
/// it holds as last counted.
pub struct Slot<E> {
    pub entry: E,
    /// When it was first seen, in table order (the oldest is evicted first).
    born: u64,
    /// Its [`Held::held_bytes`] plus the table's overhead an entry, as last
    /// counted into [`ConnTable::bytes`].
    bytes: usize,
}

/// Connections by key, bounded in number and in bytes.
pub struct ConnTable<E> {
    conns: HashMap<Key, Slot<E>>,
    /// Connections by age (`born`); entries of connections gone since are
    /// skipped, and dropped once they outnumber the live ones.
    order: VecDeque<(Key, u64)>,
    born: u64,
    /// Bytes every connection holds (the sum of their [`Slot::bytes`]).
    bytes: usize,
    /// The most they may hold.
    budget: usize,
    /// The most connections followed at once.
    max_conns: usize,
    /// What an entry costs besides its state: its slot in the table and
    /// its place in the order.
    overhead: usize,
}

impl<E: Held> ConnTable<E> {
    /// A table of at most `max_conns` connections holding at most `budget`
    /// bytes, each entry counted `overhead` bytes besides its state.
    pub fn new(max_conns: usize, budget: usize, overhead: usize) -> ConnTable<E> {
        ConnTable { conns: HashMap::default(), order: VecDeque::new(), born: 0, bytes: 0, budget, max_conns, overhead }
    }

    /// Connections followed.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// True when none is followed.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Bytes they hold, all together, as last counted.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The most they may hold.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// The bytes an entry costs besides its state.
    pub fn overhead(&self) -> usize {
        self.overhead
    }

    /// Whether connection `key` is followed.
    pub fn contains(&self, key: &Key) -> bool {
        self.conns.contains_key(key)
    }

    /// Connection `key`'s state.
    pub fn get(&self, key: &Key) -> Option<&E> {
        self.conns.get(key).map(|s| &s.entry)
    }

    /// Connection `key`'s state, to change (then [`ConnTable::recount`]).
    pub fn get_mut(&mut self, key: &Key) -> Option<&mut E> {
        self.conns.get_mut(key).map(|s| &mut s.entry)
    }

    /// Every connection's state.
    pub fn values(&self) -> impl Iterator<Item = &E> {
        self.conns.values().map(|s| &s.entry)
    }

    /// When the table is full: its oldest connection, out of it, for its
    /// protocol to end (before a new one is inserted).
    pub fn make_room(&mut self) -> Option<(Key, E)> {
        if self.conns.len() < self.max_conns {
            return None;
        }
        self.pop_oldest()
    }

    /// Follows connection `key` (not followed yet; room made by
    /// [`ConnTable::make_room`]), counted until [`ConnTable::recount`] at
    /// nothing.
    pub fn insert(&mut self, key: Key, entry: E) {
        self.born += 1;
        if let Some(old) = self.conns.insert(key, Slot { entry, born: self.born, bytes: 0 }) {
            // (callers insert only keys they do not follow)
            self.bytes -= old.bytes;
        }
        self.order.push_back((key, self.born));
        if self.order.len() > 2 * self.conns.len() + 64 {
            let conns = &self.conns;
            self.order.retain(|(k, born)| conns.get(k).is_some_and(|s| s.born == *born));
        }
    }

    /// Forgets connection `key`, handing its state back.
    pub fn remove(&mut self, key: &Key) -> Option<E> {
        let slot = self.conns.remove(key)?;
        self.bytes -= slot.bytes;
        Some(slot.entry)
    }

    /// The oldest connection, out of the table.
    fn pop_oldest(&mut self) -> Option<(Key, E)> {
        while let Some((key, born)) = self.order.pop_front() {
            if self.conns.get(&key).is_some_and(|s| s.born == born) {
                return self.remove(&key).map(|e| (key, e));
            }
        }
        None
    }

    /// Counts again what connection `key` holds, after it changed.
    pub fn recount(&mut self, key: &Key) {
        if let Some(s) = self.conns.get_mut(key) {
            let now = s.entry.held_bytes() + self.overhead;
            self.bytes = self.bytes - s.bytes + now;
            s.bytes = now;
        }
    }

    /// Over the budget: forgets the connections that hold the most until
    /// what is left is under 7/8 of it, and hands them back, largest
    /// first (none while within it).
    pub fn shed(&mut self) -> Vec<(Key, E)> {
        if self.bytes <= self.budget {
            return Vec::new();
        }
        let target = self.budget / LOW_WATER.1 * LOW_WATER.0;
        let mut by_size: Vec<(usize, Key)> = self.conns.iter().map(|(k, s)| (s.bytes, *k)).collect();
        by_size.sort_unstable_by(|a, b| b.cmp(a));
        let mut gone = Vec::new();
        for (_, key) in by_size {
            if self.bytes <= target {
                break;
            }
            if let Some(e) = self.remove(&key) {
                gone.push((key, e));
            }
        }
        gone
    }

    /// Sets the budget (for tests).
    #[cfg(test)]
    pub fn set_budget(&mut self, budget: usize) {
        self.budget = budget;
    }

    /// Entries of the age order, live or not (for tests: it stays bounded).
    #[cfg(test)]
    pub fn order_len(&self) -> usize {
        self.order.len()
    }

    /// [`ConnTable::bytes`] counted afresh (for tests).
    #[cfg(test)]
    pub fn bytes_recounted(&self) -> usize {
        self.conns.values().map(|s| s.entry.held_bytes() + self.overhead).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state that holds what it is told.
    struct Blob(usize);

    impl Held for Blob {
        fn held_bytes(&self) -> usize {
            self.0
        }
    }

    const OVERHEAD: usize = 100;

    /// The table's invariants: its count, its bounds.
    fn check(t: &ConnTable<Blob>) {
        assert_eq!(t.bytes(), t.bytes_recounted(), "bytes counted");
        assert!(t.len() <= t.max_conns);
        assert!(t.order_len() <= 2 * t.max_conns + 65, "order: {} for {} connections", t.order_len(), t.len());
    }

    fn put(t: &mut ConnTable<Blob>, key: Key, held: usize) -> Option<(Key, Blob)> {
        let evicted = t.make_room();
        t.insert(key, Blob(held));
        t.recount(&key);
        check(t);
        evicted
    }

    #[test]
    fn past_max_conns_the_oldest_is_evicted_and_handed_back() {
        let mut t = ConnTable::new(3, usize::MAX, OVERHEAD);
        for c in 0..3 {
            assert!(put(&mut t, (1, c), 10).is_none());
        }
        let (key, gone) = put(&mut t, (1, 3), 20).expect("the oldest goes");
        assert_eq!((key, gone.0), ((1, 0), 10));
        assert_eq!(t.len(), 3);
        assert_eq!(t.bytes(), 10 + 10 + 20 + 3 * OVERHEAD);
        // a connection removed is not evicted again: the next oldest live one is
        assert!(t.remove(&(1, 1)).is_some());
        assert!(put(&mut t, (1, 4), 1).is_none(), "room was made by the removal");
        assert_eq!(put(&mut t, (1, 5), 1).map(|(k, _)| k), Some((1, 2)));
        assert!(!t.contains(&(1, 0)) && !t.contains(&(1, 2)));
    }

    #[test]
    fn accounting_follows_every_change() {
        let mut t = ConnTable::new(100, usize::MAX, OVERHEAD);
        put(&mut t, (1, 1), 50);
        put(&mut t, (1, 2), 70);
        assert_eq!(t.bytes(), 120 + 2 * OVERHEAD);
        // grown, then shrunk
        t.get_mut(&(1, 1)).expect("followed").0 = 500;
        t.recount(&(1, 1));
        assert_eq!(t.bytes(), 570 + 2 * OVERHEAD);
        t.get_mut(&(1, 1)).expect("followed").0 = 5;
        t.recount(&(1, 1));
        check(&t);
        // not counted again until recounted: a removal takes what was counted
        t.get_mut(&(1, 2)).expect("followed").0 = 1_000;
        assert_eq!(t.remove(&(1, 2)).map(|b| b.0), Some(1_000));
        assert_eq!(t.bytes(), 5 + OVERHEAD);
        assert!(t.remove(&(1, 2)).is_none() && t.get(&(1, 2)).is_none());
        t.recount(&(1, 2)); // of a connection not followed: nothing
        assert_eq!(t.remove(&(1, 1)).map(|b| b.0), Some(5));
        assert_eq!((t.len(), t.bytes()), (0, 0));
    }

    #[test]
    fn over_the_budget_the_largest_go_until_under_seven_eighths() {
        let budget = 8_000;
        let mut t = ConnTable::new(100, budget, OVERHEAD);
        for c in 0..10 {
            put(&mut t, (1, c), 100);
        }
        assert!(t.shed().is_empty(), "within the budget nothing goes");
        // two big ones push it over: they go, the small ones stay
        put(&mut t, (1, 100), 4_000);
        put(&mut t, (1, 101), 3_000);
        assert!(t.bytes() > budget);
        let gone: Vec<Key> = t.shed().into_iter().map(|(k, _)| k).collect();
        assert_eq!(gone, [(1, 100)], "the largest first, only until under 7/8");
        assert!(t.bytes() <= budget / 8 * 7, "{} bytes left", t.bytes());
        assert_eq!(t.len(), 11);
        check(&t);
        // one grows past the budget alone: it goes, and only it
        t.get_mut(&(1, 3)).expect("followed").0 = 9_000;
        t.recount(&(1, 3));
        let gone: Vec<Key> = t.shed().into_iter().map(|(k, _)| k).collect();
        assert_eq!(gone, [(1, 3)]);
        assert!(t.contains(&(1, 101)));
        check(&t);
    }

    #[test]
    fn churn_leaves_nothing_behind() {
        let mut t = ConnTable::new(16, usize::MAX, OVERHEAD);
        for c in 0..50_000 {
            put(&mut t, (1, c), 10);
            assert!(t.remove(&(1, c)).is_some());
        }
        assert_eq!((t.len(), t.bytes()), (0, 0));
        assert!(t.order_len() <= 66, "{}", t.order_len());
        // and evicting by the thousand keeps the order bounded too
        for c in 0..50_000 {
            put(&mut t, (2, c), 10);
        }
        assert_eq!(t.len(), 16);
        assert!(t.order_len() <= 2 * 16 + 65);
    }
}
