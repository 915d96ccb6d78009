//! The traces pipeline: one request per batch → bounded queue → send.
//!
//! `submit` never waits: it encodes the batch into one
//! `ExportTraceServiceRequest` (every service's resource in it) and queues
//! the bytes; a batch that does not fit in `export.queue_size` spans is
//! dropped and counted (`ringtail_dropped_spans_total{reason=
//! "queue_full"}`). One worker sends the queue in order, [`IN_FLIGHT`]
//! requests at a time; a request the backend refuses for good
//! (`rejected`) or that outlives `retry.max_elapsed` (`retries_exhausted`)
//! is dropped and counted too, and so are the spans a partial success
//! names (`partially_rejected`).
//! Every finished batch (sent or dropped) is reported on `done`, so the
//! receiver can acknowledge it upstream.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt as _};
use runtime_kit::counters::{Counter, Drops, Gauge, Registry};
use tokio::sync::{mpsc, Notify};

use super::client::{self, BufferPool, SendError, Signal, Transport};
use super::spans::TraceEncoder;
use super::OtlpConfig;
use crate::batch::Spans;

/// Requests sent at once: keeps the link busy while a receiver answers
/// (one at a time, a local collector's latency capped the rate below what
/// a traced nginx serves).
pub const IN_FLIGHT: usize = 4;

/// A request waiting to be sent; `key` names its batch for the ack.
struct Job {
    key: (u64, u64),
    body: Bytes,
    spans: usize,
}

struct Queue {
    jobs: VecDeque<Job>,
    /// Spans queued or being sent.
    spans: usize,
}

struct Stats {
    exported: Counter,
    queue_full: Drops,
    rejected: Drops,
    partial: Drops,
    exhausted: Drops,
    queue_len: Gauge,
}

/// The sending side, held by the receiver.
pub struct TraceSink {
    queue: Rc<RefCell<Queue>>,
    notify: Rc<Notify>,
    capacity: usize,
    stats: Rc<Stats>,
    encoder: TraceEncoder,
    pool: Rc<RefCell<BufferPool>>,
}

impl TraceSink {
    /// Starts the worker on the current thread's local task set.
    pub fn start(
        transport: Transport,
        cfg: &OtlpConfig,
        capacity: usize,
        registry: &Registry,
        done: mpsc::UnboundedSender<(u64, u64)>,
    ) -> TraceSink {
        let queue = Rc::new(RefCell::new(Queue { jobs: VecDeque::new(), spans: 0 }));
        let notify = Rc::new(Notify::new());
        let stats = Rc::new(Stats {
            exported: registry.counter("ringtail_spans_exported_total", &[]),
            queue_full: registry.drops("ringtail_dropped_spans_total", "queue_full"),
            rejected: registry.drops("ringtail_dropped_spans_total", "rejected"),
            partial: registry.drops("ringtail_dropped_spans_total", "partially_rejected"),
            exhausted: registry.drops("ringtail_dropped_spans_total", "retries_exhausted"),
            queue_len: registry.gauge("ringtail_export_queue_spans", &[]),
        });
        let pool = Rc::new(RefCell::new(BufferPool::default()));
        let worker = Worker { transport, retry: cfg.retry.clone(), pool: pool.clone() };
        tokio::task::spawn_local(worker.run(queue.clone(), notify.clone(), stats.clone(), done));
        TraceSink { queue, notify, capacity, stats, encoder: TraceEncoder::new(cfg.resource_attributes.clone()), pool }
    }

    /// Queues the request for the spans of `batch` marked for tracing
    /// (`spans` of them); `key` comes back on `done` once it is finished.
    /// False if nothing was queued: the queue was full (counted), or no span
    /// names a resource of its batch.
    pub fn submit(&mut self, key: (u64, u64), batch: &Spans<'_>, spans: usize) -> bool {
        if self.queue.borrow().spans + spans > self.capacity {
            self.stats.queue_full.add(spans as u64);
            return false;
        }
        // Encoded now: the queue holds request bytes, about half the memory
        // of the decoded batch.
        let mut buf = self.pool.borrow_mut().take();
        let n = self.encoder.encode(batch, &mut buf);
        // Spans that name no resource of their batch cannot be exported.
        self.stats.rejected.add(spans.saturating_sub(n) as u64);
        if n == 0 {
            return false;
        }
        let body = self.pool.borrow_mut().freeze(buf);
        let mut q = self.queue.borrow_mut();
        q.spans += n;
        q.jobs.push_back(Job { key, body, spans: n });
        self.stats.queue_len.set(q.spans as f64);
        drop(q);
        self.notify.notify_one();
        true
    }

    /// Spans waiting or being sent.
    pub fn queued(&self) -> usize {
        self.queue.borrow().spans
    }
}

struct Worker {
    transport: Transport,
    retry: ringtail_config::RetrySettings,
    pool: Rc<RefCell<BufferPool>>,
}

impl Worker {
    async fn run(self, queue: Rc<RefCell<Queue>>, notify: Rc<Notify>, stats: Rc<Stats>, done: mpsc::UnboundedSender<(u64, u64)>) {
        let mut sending = FuturesUnordered::new();
        loop {
            while sending.len() < IN_FLIGHT {
                let Some(job) = queue.borrow_mut().jobs.pop_front() else { break };
                sending.push(self.export(job, &stats));
            }
            let finished = tokio::select! {
                Some(finished) = sending.next() => finished,
                _ = notify.notified() => continue,
            };
            let (key, spans) = finished;
            {
                let mut q = queue.borrow_mut();
                q.spans = q.spans.saturating_sub(spans);
                stats.queue_len.set(q.spans as f64);
            }
            if done.send(key).is_err() {
                return; // the receiver is gone: shutting down
            }
        }
    }

    /// Sends one request; its key and span count once finished (sent or
    /// dropped and counted).
    async fn export(&self, job: Job, stats: &Stats) -> ((u64, u64), usize) {
        let n = job.spans as u64;
        // The transport's own deadline is max_elapsed; this outer limit only
        // guards against a request that never returns.
        let limit = self.retry.max_elapsed + self.retry.max_backoff + Duration::from_secs(5);
        let started = Instant::now();
        let result = tokio::time::timeout(limit, self.transport.send(Signal::Traces, job.body.clone(), &self.retry)).await;
        match result {
            Ok(Ok(response)) => match client::partial_success(&response) {
                None => stats.exported.add(n),
                Some((rejected, message)) => {
                    let rejected = rejected.min(n);
                    tracing::warn!(rejected, message, "the receiver kept only part of a trace export");
                    stats.partial.add(rejected);
                    stats.exported.add(n - rejected);
                }
            },
            Ok(Err(error)) => {
                tracing::warn!(%error, spans = n, elapsed = ?started.elapsed(), "trace export failed");
                match error {
                    SendError::Permanent { .. } => stats.rejected.add(n),
                    SendError::GaveUp { .. } => stats.exhausted.add(n),
                }
            }
            Err(_) => {
                tracing::warn!(spans = n, "trace export did not finish in time");
                stats.exhausted.add(n);
            }
        }
        self.pool.borrow_mut().give(job.body);
        (job.key, job.spans)
    }
}
