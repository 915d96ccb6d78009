//! The traces pipeline: bounded queue → one request per batch → send.
//!
//! `submit` never waits: a batch that does not fit in `export.queue_size`
//! spans is dropped and counted (`ringtail_dropped_spans_total{reason=
//! "queue_full"}`). One worker drains the queue in order, encodes each
//! batch into one `ExportTraceServiceRequest` (every service's resource in
//! it) and sends it; a batch the backend refuses for good (`rejected`) or
//! that outlives `retry.max_elapsed` (`retries_exhausted`) is dropped and
//! counted too, and so are the spans a partial success names
//! (`partially_rejected`).
//! Every finished batch (sent or dropped) is reported on `done`, so the
//! receiver can acknowledge it upstream.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipc_schema::SpanBatch;
use runtime_kit::counters::{Counter, Drops, Gauge, Registry};
use tokio::sync::{mpsc, Notify};

use super::client::{self, RequestBuffer, SendError, Signal, Transport};
use super::spans::TraceEncoder;
use super::OtlpConfig;

/// A batch waiting for export; `key` names it for the ack.
pub struct TraceJob {
    pub key: (u64, u64),
    pub batch: Arc<SpanBatch>,
    pub spans: usize,
}

struct Queue {
    jobs: VecDeque<TraceJob>,
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
}

impl TraceSink {
    /// Starts the worker on the current thread's local task set.
    pub fn start(transport: Transport, cfg: &OtlpConfig, capacity: usize, registry: &Registry, done: mpsc::UnboundedSender<(u64, u64)>) -> TraceSink {
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
        let worker = Worker {
            transport,
            retry: cfg.retry.clone(),
            encoder: TraceEncoder::new(cfg.resource_attributes.clone()),
            buf: RequestBuffer::default(),
        };
        tokio::task::spawn_local(worker.run(queue.clone(), notify.clone(), stats.clone(), done));
        TraceSink { queue, notify, capacity, stats }
    }

    /// Queues a batch; false if it was dropped because the queue is full.
    pub fn submit(&self, job: TraceJob) -> bool {
        let mut q = self.queue.borrow_mut();
        if q.spans + job.spans > self.capacity {
            self.stats.queue_full.add(job.spans as u64);
            return false;
        }
        q.spans += job.spans;
        q.jobs.push_back(job);
        self.stats.queue_len.set(q.spans as f64);
        drop(q);
        self.notify.notify_one();
        true
    }

    /// Spans waiting.
    pub fn queued(&self) -> usize {
        self.queue.borrow().spans
    }
}

struct Worker {
    transport: Transport,
    retry: ipc_schema::config::RetrySettings,
    encoder: TraceEncoder,
    buf: RequestBuffer,
}

impl Worker {
    async fn run(mut self, queue: Rc<RefCell<Queue>>, notify: Rc<Notify>, stats: Rc<Stats>, done: mpsc::UnboundedSender<(u64, u64)>) {
        loop {
            let job = queue.borrow_mut().jobs.pop_front();
            let Some(job) = job else {
                notify.notified().await;
                continue;
            };
            self.export(&job, &stats).await;
            {
                let mut q = queue.borrow_mut();
                q.spans = q.spans.saturating_sub(job.spans);
                stats.queue_len.set(q.spans as f64);
            }
            if done.send(job.key).is_err() {
                return; // the receiver is gone: shutting down
            }
        }
    }

    async fn export(&mut self, job: &TraceJob, stats: &Stats) {
        let mut buf = self.buf.take();
        let n = self.encoder.encode(&job.batch, &mut buf) as u64;
        // Spans that name no resource of their batch cannot be exported.
        stats.rejected.add((job.spans as u64).saturating_sub(n));
        if n == 0 {
            return;
        }
        let body = self.buf.freeze(buf);
        // The transport's own deadline is max_elapsed; this outer limit only
        // guards against a request that never returns.
        let limit = self.retry.max_elapsed + self.retry.max_backoff + Duration::from_secs(5);
        let started = Instant::now();
        let result = tokio::time::timeout(limit, self.transport.send(Signal::Traces, body, &self.retry)).await;
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
    }
}
