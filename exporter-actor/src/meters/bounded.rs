//! [`Bounded`]: series by key with a cap, past which they go to one
//! overflow series; written once for every store of series (a service's
//! histograms, the service graph's edges, the span metrics).
//!
//! A series is found by its key's hash and an equality its store supplies
//! (the store compares the span's own fields with the key it kept, so
//! that a span allocates nothing when its series exists). A new series is
//! kept while its store holds fewer than its cap and all stores together
//! fewer than [`super::MAX_SERIES`] (`total`, counted here as series are
//! made); past either it is recorded in the store's overflow series
//! (made once, counted in `total` too). Idle series are forgotten by
//! [`Bounded::evict`].

use hashbrown::HashTable;

/// A series' numbers: when they were last updated.
pub trait Recorded {
    /// The last update (Unix ns).
    fn last_ns(&self) -> u64;
}

#[derive(Debug)]
struct Entry<K, P> {
    hash: u64,
    key: K,
    point: P,
}

/// Series of keys `K` and numbers `P`, at most a cap of them, then one
/// overflow series.
#[derive(Debug)]
pub struct Bounded<K, P> {
    table: HashTable<Entry<K, P>>,
    overflow: Option<P>,
}

impl<K, P> Default for Bounded<K, P> {
    fn default() -> Self {
        Bounded { table: HashTable::new(), overflow: None }
    }
}

impl<K, P: Recorded> Bounded<K, P> {
    /// Records into the series whose key `is` (of hash `hash`) with
    /// `update`; when there is none, into a new one (`key()`, its numbers
    /// `new()`) while the store holds fewer than `cap` series and all
    /// stores fewer than [`super::MAX_SERIES`], else into the overflow
    /// series. False if it went to the overflow series.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn record(
        &mut self,
        hash: u64,
        is: impl Fn(&K) -> bool,
        key: impl FnOnce() -> K,
        new: impl Fn() -> P,
        update: impl FnOnce(&mut P),
        cap: usize,
        total: &mut usize,
    ) -> bool {
        if let Some(e) = self.table.find_mut(hash, |e| is(&e.key)) {
            update(&mut e.point);
            return true;
        }
        if self.table.len() < cap && *total < super::MAX_SERIES {
            let mut point = new();
            update(&mut point);
            self.table.insert_unique(hash, Entry { hash, key: key(), point }, |e| e.hash);
            *total += 1;
            return true;
        }
        if self.overflow.is_none() {
            *total += 1;
        }
        update(self.overflow.get_or_insert_with(new));
        false
    }

    /// Every series: its key (`None` for the overflow series) and numbers.
    pub fn series(&self) -> impl Iterator<Item = (Option<&K>, &P)> {
        self.table.iter().map(|e| (Some(&e.key), &e.point)).chain(self.overflow.iter().map(|p| (None, p)))
    }

    /// Series held, the overflow one included.
    pub fn len(&self) -> usize {
        self.table.len() + usize::from(self.overflow.is_some())
    }

    /// True when no series is held.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty() && self.overflow.is_none()
    }

    /// Forgets series last updated before `cutoff`; how many.
    pub fn evict(&mut self, cutoff: u64) -> usize {
        let before = self.len();
        self.table.retain(|e| e.point.last_ns() >= cutoff);
        if self.overflow.as_ref().is_some_and(|p| p.last_ns() < cutoff) {
            self.overflow = None;
        }
        before - self.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A count, last updated at a time.
    #[derive(Debug, Default)]
    struct Count {
        n: u64,
        last_ns: u64,
    }

    impl Recorded for Count {
        fn last_ns(&self) -> u64 {
            self.last_ns
        }
    }

    fn add(b: &mut Bounded<u32, Count>, k: u32, now: u64, cap: usize, total: &mut usize) -> bool {
        let update = |c: &mut Count| {
            c.n += 1;
            c.last_ns = now;
        };
        b.record(u64::from(k), |x| *x == k, || k, Count::default, update, cap, total)
    }

    fn counts(b: &Bounded<u32, Count>) -> Vec<(Option<u32>, u64)> {
        let mut v: Vec<_> = b.series().map(|(k, c)| (k.copied(), c.n)).collect();
        v.sort();
        v
    }

    #[test]
    fn past_its_cap_a_store_records_into_one_overflow_series() {
        let (mut b, mut total) = (Bounded::default(), 0);
        assert!(add(&mut b, 1, 1, 2, &mut total));
        assert!(add(&mut b, 1, 1, 2, &mut total));
        assert!(add(&mut b, 2, 1, 2, &mut total));
        assert!(!add(&mut b, 3, 1, 2, &mut total));
        assert!(!add(&mut b, 4, 1, 2, &mut total));
        // a series kept goes on being recorded
        assert!(add(&mut b, 2, 1, 2, &mut total));
        assert_eq!(counts(&b), [(None, 2), (Some(1), 2), (Some(2), 2)]);
        assert_eq!((b.len(), total), (3, 3), "the overflow series counts once");
    }

    #[test]
    fn past_the_total_of_every_store_too() {
        let mut total = super::super::MAX_SERIES - 1;
        let mut b = Bounded::default();
        assert!(add(&mut b, 1, 1, 10, &mut total));
        assert!(!add(&mut b, 2, 1, 10, &mut total));
        assert_eq!(total, super::super::MAX_SERIES + 1);
        assert_eq!(counts(&b), [(None, 1), (Some(1), 1)]);
    }

    #[test]
    fn idle_series_the_overflow_one_too_are_forgotten() {
        let (mut b, mut total) = (Bounded::default(), 0);
        add(&mut b, 1, 10, 1, &mut total);
        add(&mut b, 2, 10, 1, &mut total);
        add(&mut b, 1, 20, 1, &mut total);
        assert_eq!(b.evict(15), 1, "the overflow series, last updated at 10");
        assert_eq!(counts(&b), [(Some(1), 2)]);
        assert_eq!(b.evict(25), 1);
        assert!(b.is_empty());
        assert_eq!(b.len(), 0);
    }
}
