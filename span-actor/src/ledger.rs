//! When the span-actor may tell the loader "batch N is safe".
//!
//! A raw batch is safe once every span made from it is safe: acknowledged
//! by the exporter, or forgotten from our own replay buffer (which is
//! bounded). Until then the loader keeps the batch, so a span-actor that
//! dies loses nothing: the loader replays to its successor.
//!
//! The publisher actor is the ledger's one owner: it learns what each raw
//! batch made (from the builder) and what became safe (from its producer's
//! settled reports), and marks safe batches done on the raw consumer.

use rustc_hash::FxHashMap as HashMap;

use crate::transform::Origin;

/// Raw batches whose spans are not all safe yet.
#[derive(Default)]
pub struct Ledger {
    /// The loader instance of the newest batch: older instances' batches
    /// are forgotten (a restarted loader replays nothing of its previous life).
    instance: Option<u64>,
    /// (loader instance, raw seq) → spans (sent or held) not yet safe.
    open: HashMap<Origin, usize>,
}

impl Ledger {
    /// A raw batch was transformed and `n` spans (published or held) came
    /// from it. True if it is safe at once (it made none).
    pub fn made(&mut self, origin: Origin, n: usize) -> bool {
        if self.instance != Some(origin.0) {
            self.instance = Some(origin.0);
            self.open.retain(|o, _| o.0 == origin.0);
        }
        if n == 0 {
            return true;
        }
        *self.open.entry(origin).or_default() += n;
        false
    }

    /// `n` spans of a raw batch became safe. True if that made the whole
    /// batch safe.
    pub fn release(&mut self, origin: Origin, n: usize) -> bool {
        let Some(left) = self.open.get_mut(&origin) else { return false };
        *left = left.saturating_sub(n);
        if *left == 0 {
            self.open.remove(&origin);
            return true;
        }
        false
    }

    /// Raw batches not yet safe.
    pub fn open(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_is_safe_when_all_its_spans_are() {
        let mut l = Ledger::default();
        assert!(!l.made((9, 1), 3));
        assert!(l.made((9, 2), 0), "produced no spans: safe at once");
        assert!(!l.release((9, 1), 2));
        assert_eq!(l.open(), 1);
        assert!(l.release((9, 1), 1));
        assert_eq!(l.open(), 0);
        assert!(!l.release((9, 1), 1), "once");
    }

    #[test]
    fn a_new_loader_instance_forgets_the_old_ones() {
        let mut l = Ledger::default();
        l.made((1, 1), 2);
        l.made((2, 1), 1);
        assert_eq!(l.open(), 1);
        assert!(!l.release((1, 1), 2));
    }
}
