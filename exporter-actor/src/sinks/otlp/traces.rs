//! The traces pipeline: bounded queue → per-service exporters.
//!
//! `submit` never waits: a batch that does not fit in `export.queue_size`
//! spans is dropped and counted (`ringtail_dropped_spans_total{reason=
//! "queue_full"}`). One worker drains the queue in order; a batch the
//! backend refuses for good (`rejected`) or that outlives
//! `retry.max_elapsed` (`retries_exhausted`) is dropped and counted too.
//! Every finished batch (sent or dropped) is reported on `done`, so the
//! receiver can acknowledge it upstream.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipc_schema::{ServiceResource, SpanBatch};
use opentelemetry_otlp::SpanExporter;
use opentelemetry_sdk::trace::SpanExporter as _;
use runtime_kit::counters::{Counter, Drops, Gauge, Registry};
use tokio::sync::{mpsc, Notify};

use super::{convert, span_exporter, OtlpConfig, Transport};
use crate::resource;

/// Per-service exporters kept before the cache starts over.
const MAX_EXPORTERS: usize = 256;

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
            exhausted: registry.drops("ringtail_dropped_spans_total", "retries_exhausted"),
            queue_len: registry.gauge("ringtail_export_queue_spans", &[]),
        });
        let worker = Worker {
            transport,
            retry: cfg.retry.clone(),
            extra: cfg.resource_attributes.clone(),
            exporters: HashMap::new(),
            scope: convert::scope(),
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
    retry: ringtail_config::RetrySettings,
    extra: Vec<(String, String)>,
    exporters: HashMap<ServiceResource, SpanExporter>,
    scope: opentelemetry::InstrumentationScope,
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
        let batch = &job.batch;
        let mut groups: Vec<Vec<opentelemetry_sdk::trace::SpanData>> = vec![Vec::new(); batch.resources.len()];
        for s in batch.spans.iter().filter(|s| s.export_trace) {
            if let Some(g) = groups.get_mut(s.resource as usize) {
                g.push(convert::span_data(s, &self.scope));
            }
        }
        for (idx, spans) in groups.into_iter().enumerate() {
            if spans.is_empty() {
                continue;
            }
            let n = spans.len() as u64;
            let res = &batch.resources[idx];
            if !self.exporters.contains_key(res) {
                if self.exporters.len() >= MAX_EXPORTERS {
                    self.exporters.clear();
                }
                match span_exporter(&self.transport, &self.retry, &resource::service(res, &self.extra)) {
                    Ok(e) => {
                        self.exporters.insert(res.clone(), e);
                    }
                    Err(error) => {
                        tracing::warn!(%error, "cannot build exporter");
                        stats.rejected.add(n);
                        continue;
                    }
                }
            }
            let Some(exporter) = self.exporters.get(res) else { continue };
            let started = Instant::now();
            // The exporter's own deadline is max_elapsed; this outer limit
            // only guards against a request that never returns.
            let limit = self.retry.max_elapsed + self.retry.max_backoff + Duration::from_secs(5);
            match tokio::time::timeout(limit, exporter.export(spans)).await {
                Ok(Ok(())) => stats.exported.add(n),
                Ok(Err(error)) => {
                    // Retryable errors are retried until the deadline, so an
                    // early failure is one the backend refused for good.
                    let gave_up = started.elapsed() + self.retry.max_backoff >= self.retry.max_elapsed;
                    tracing::warn!(%error, spans = n, elapsed = ?started.elapsed(), "export failed");
                    if gave_up {
                        stats.exhausted.add(n);
                    } else {
                        stats.rejected.add(n);
                    }
                }
                Err(_) => {
                    tracing::warn!(spans = n, "export did not finish in time");
                    stats.exhausted.add(n);
                }
            }
        }
    }
}
