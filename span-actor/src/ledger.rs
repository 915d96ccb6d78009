//! When the span-actor may tell the loader "batch N is safe".
//!
//! A raw batch is safe once every span made from it is safe: acknowledged
//! by the exporter, or forgotten from our own replay buffer (which is
//! bounded). Until then the loader keeps the batch, so a span-actor that
//! dies loses nothing: the loader replays to its successor.

use rustc_hash::FxHashMap as HashMap;

use ipc_schema::{Ack, Producer};
use runtime_kit::ipc::replay::{InboundSeq, Verdict};

/// Raw batches in flight through this process.
#[derive(Default)]
pub struct Ledger {
    raw: InboundSeq,
    /// (loader instance, raw seq) → spans not yet safe, and whether the
    /// batch has been fully transformed.
    open: HashMap<(u64, u64), (usize, bool)>,
}

impl Ledger {
    /// Notes any message from the loader (heartbeats included) and its floor.
    pub fn observe(&mut self, loader: Producer, floor: u64) {
        if self.raw.observe(loader, floor) {
            self.open.clear();
        }
    }

    /// A raw batch arrived: handle it or skip it as a duplicate.
    pub fn received(&mut self, seq: u64) -> Verdict {
        let v = self.raw.receive(seq);
        if v == Verdict::New {
            if let Some(inst) = self.raw.instance() {
                self.open.insert((inst, seq), (0, false));
            }
        }
        v
    }

    /// `n` spans (or held events) came from a raw batch.
    pub fn add(&mut self, inst: u64, seq: u64, n: usize) {
        if let Some(e) = self.open.get_mut(&(inst, seq)) {
            e.0 += n;
        }
    }

    /// The raw batch is fully transformed.
    pub fn finish(&mut self, inst: u64, seq: u64) {
        if let Some(e) = self.open.get_mut(&(inst, seq)) {
            e.1 = true;
        }
        self.settle(inst, seq);
    }

    /// `n` spans of a raw batch became safe.
    pub fn release(&mut self, inst: u64, seq: u64, n: usize) {
        if let Some(e) = self.open.get_mut(&(inst, seq)) {
            e.0 = e.0.saturating_sub(n);
        }
        self.settle(inst, seq);
    }

    fn settle(&mut self, inst: u64, seq: u64) {
        if self.open.get(&(inst, seq)).is_some_and(|(n, fin)| *n == 0 && *fin) {
            self.open.remove(&(inst, seq));
            if self.raw.instance() == Some(inst) {
                self.raw.done(seq);
            }
        }
    }

    /// The ack for the loader, once it is known.
    pub fn ack(&self) -> Option<Ack> {
        self.raw.ack()
    }

    /// Raw batches not yet safe.
    pub fn open(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::Component;

    #[test]
    fn batch_is_safe_when_all_its_spans_are() {
        let mut l = Ledger::default();
        l.observe(Producer { component: Component::ProbeLoader, instance: 9 }, 1);
        assert_eq!(l.received(1), Verdict::New);
        assert_eq!(l.received(2), Verdict::New);
        l.add(9, 1, 3);
        l.finish(9, 1);
        l.finish(9, 2); // produced no spans: safe at once, but 1 is not
        assert_eq!(l.ack().unwrap().upto, 0);
        l.release(9, 1, 2);
        assert_eq!(l.ack().unwrap().upto, 0);
        l.release(9, 1, 1);
        assert_eq!(l.ack().unwrap().upto, 2);
        assert_eq!(l.open(), 0);
        assert_eq!(l.received(1), Verdict::Duplicate);
    }
}
