//! The loader's loop: ring buffer → batches → PUB socket.
//!
//! The kernel wakes us only when `wakeup_len` events' worth of bytes have
//! piled up (`kernel::wakeup_bytes`; or for an exec event); a
//! `flush_interval` timer drains whatever is below that threshold, so no
//! event waits longer than `flush_interval`. Records are cut into batches
//! of `batch_length`, or of as many bytes as `batch_length` HTTP events
//! (database records weigh up to 25 times more), or sent after
//! `batch_timeout`.
//!
//! The request ring is a write-ahead log (see `ring`): each batch is
//! published with the ring position just past its last event as its mark,
//! and the kernel's consumer position moves only up to the highest mark the
//! span-actor has received. Until then the events stay in the ring, where a
//! restarted loader finds them.

use std::collections::HashSet;
use std::os::fd::AsRawFd;
use std::time::Duration;

use aya::maps::{MapData, RingBuf};
use ipc_schema::{Body, RawBatch};
use ringtail_config::Settings;
use ringtail_ipc::{Producer, Progress, HEARTBEAT};
use runtime_kit::counters::{Counter, Drops, Gauge, Registry};
use runtime_kit::shutdown::Shutdown;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

use crate::discovery::Discovery;
use crate::discovery::Selected;
use crate::kernel::{c_string, EventRecord, HttpEvent, KernelCounter, ProcRecord, COMM_LEN, COUNTERS};
use crate::probes::Probes;
use crate::procinfo::ProcTable;
use crate::ring::WalRing;

/// Why the loop stopped.
#[derive(Debug, thiserror::Error)]
pub enum PumpError {
    #[error("cannot watch the ring buffer")]
    Poll {
        #[source]
        source: std::io::Error,
    },
}

/// Unix-epoch ns minus CLOCK_MONOTONIC ns, right now.
pub fn mono_to_unix_ns() -> i64 {
    let read = |clock| {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: ts is a valid, writable timespec.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        ts.tv_sec * 1_000_000_000 + ts.tv_nsec
    };
    // Bracket the realtime read with two monotonic reads and use their mean.
    let m1 = read(libc::CLOCK_MONOTONIC);
    let r = read(libc::CLOCK_REALTIME);
    let m2 = read(libc::CLOCK_MONOTONIC);
    r - (m1 + (m2 - m1) / 2)
}

/// Registers a ring buffer with the runtime's poller.
fn watch<R: std::os::fd::AsRawFd>(ring: R) -> Result<AsyncFd<R>, PumpError> {
    // SAFETY: the fd belongs to a ring buffer that outlives the AsyncFd:
    // the AsyncFd owns it (events), or the Pump does (execs, watched by its
    // number from `Pump::run`, which drops the AsyncFd before the Pump).
    unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }.map_err(|e| PumpError::Poll { source: e.into() })
}

/// Batches' worth of ring records one turn of the loop reads at most: a
/// ring that never empties (a flood) must not starve the loop's other work
/// (acks that release ring space, heartbeats, the flush timer).
const DRAIN_BATCHES: usize = 4;
/// Turns of reading at shutdown: 16 × 4 × 768 = 49,152 records with the
/// default batch length, a 32 MiB ring of 680-byte events.
const SHUTDOWN_TURNS: usize = 16;

struct Batch {
    /// The records read, in their wire layout (HTTP/2 records kept in ring
    /// order among themselves).
    raw: RawBatch,
    procs: Vec<(u32, u64, String)>,
    seen: HashSet<ProcKey>,
    deadline: Option<Instant>,
    /// The ring position just past the last event read.
    mark: u64,
}

impl Batch {
    fn len(&self) -> usize {
        self.raw.len()
    }

    fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }
}

/// Everything the loop owns.
pub struct Pump {
    probes: Probes,
    publisher: Producer<()>,
    progress: watch::Receiver<Progress>,
    /// The mark of the last batch published.
    published_mark: u64,
    discovery: Discovery,
    /// Process names: the start scan's, then the kernel's exec and fork records.
    procs: ProcTable,
    /// The `execs` ring (exec and fork records), read before every batch is
    /// named so that a process's records come before its requests.
    execs: RingBuf<MapData>,
    registry: Registry,
    batch: Batch,
    batch_length: usize,
    /// A batch is cut at this many bytes of records too: what
    /// `batch_length` HTTP events weigh. Database records are up to ~16
    /// KiB: counted in records alone, a batch of them would hold up to 25
    /// times the ring space until the span-actor has it, and the replay
    /// buffer (`replay_batches` batches) and the span-actor's batches up to
    /// 25 times the memory.
    batch_bytes: usize,
    batch_timeout: Duration,
    flush_interval: Duration,
    read: Counter,
    /// Turns of the loop that left records in the ring for the next one.
    drain_cut: Counter,
    /// Times the write-ahead position moved past unreceived batches (see
    /// [`commit`]).
    valve: Counter,
    /// The TLS attacher's reports (its counts), if it runs.
    attacher: Option<crate::attacher::Reports>,
    malformed: Drops,
    publish_failed: Drops,
    kernel_last: [u64; COUNTERS.len()],
    kernel_drops: Vec<Option<Drops>>,
    kernel_counts: Vec<Option<Counter>>,
    kernel_gauges: Vec<Option<Gauge>>,
}

impl Pump {
    /// Sets up the loop.
    pub fn new(
        probes: Probes,
        execs: RingBuf<MapData>,
        procs: ProcTable,
        attacher: Option<crate::attacher::Reports>,
        publisher: Producer<()>,
        settings: &Settings,
        registry: Registry,
    ) -> Pump {
        let kernel_drops = COUNTERS
            .iter()
            .map(|c| match c {
                KernelCounter::Drop(reason) => Some(registry.drops("ringtail_dropped_events_total", reason)),
                _ => None,
            })
            .collect();
        let kernel_counts = COUNTERS
            .iter()
            .map(|c| match c {
                KernelCounter::Count(name) => Some(registry.counter(name, &[])),
                KernelCounter::Refused(reason) => Some(registry.counter("ringtail_links_refused_total", &[("reason", reason)])),
                KernelCounter::NotPropagated(reason) => Some(registry.counter("ringtail_propagation_refused_total", &[("reason", reason)])),
                KernelCounter::NotCarried(reason) => Some(registry.counter("ringtail_carrier_not_carried_total", &[("reason", reason)])),
                _ => None,
            })
            .collect();
        let kernel_gauges = COUNTERS
            .iter()
            .map(|c| match c {
                KernelCounter::Gauge(name) => Some(registry.gauge(name, &[])),
                _ => None,
            })
            .collect();
        Pump {
            probes,
            progress: publisher.progress(),
            published_mark: 0,
            publisher,
            discovery: Discovery::new(&settings.discovery),
            procs,
            execs,
            batch: Batch { raw: RawBatch::default(), procs: Vec::new(), seen: HashSet::new(), deadline: None, mark: 0 },
            batch_length: settings.pipeline.batch_length,
            batch_bytes: batch_bytes(settings.pipeline.batch_length),
            batch_timeout: settings.pipeline.batch_timeout,
            flush_interval: settings.probe.flush_interval,
            read: registry.counter("ringtail_events_read_total", &[]),
            drain_cut: registry.counter("ringtail_ring_drain_cut_total", &[]),
            valve: registry.counter("ringtail_ring_released_unreceived_total", &[]),
            attacher,
            malformed: registry.drops("ringtail_dropped_events_total", "malformed_record"),
            publish_failed: registry.drops("ringtail_dropped_events_total", "publish_failed"),
            kernel_last: [0; COUNTERS.len()],
            kernel_drops,
            kernel_counts,
            kernel_gauges,
            registry,
        }
    }

    /// Runs until shutdown; then drains the ring and sends the last batch.
    /// Returns the request ring, for a last [`Pump::commit`] once the
    /// publisher has delivered what it could.
    pub async fn run(mut self, events: WalRing, mut shutdown: Shutdown) -> Result<(WalRing, watch::Receiver<Progress>), PumpError> {
        let poll = |source| PumpError::Poll { source };
        let mut events = watch(events)?;
        let mut execs = watch(self.execs.as_raw_fd())?;
        let mut flush = tokio::time::interval(self.flush_interval);
        flush.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let deadline = self.batch.deadline;
            tokio::select! {
                guard = events.readable_mut() => {
                    let mut guard = guard.map_err(poll)?;
                    // Cut short, the ring stays ready: the next turn goes on.
                    if self.drain(guard.get_inner_mut()).await {
                        guard.clear_ready();
                    }
                }
                guard = execs.readable_mut() => {
                    let mut guard = guard.map_err(poll)?;
                    self.drain_execs();
                    guard.clear_ready();
                }
                _ = flush.tick() => {
                    self.drain_execs();
                    // Cut short, the rest waits for the next wake-up or tick.
                    self.drain(events.get_mut()).await;
                }
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    self.send_batch().await;
                }
                changed = self.progress.changed() => {
                    if changed.is_ok() {
                        self.commit(events.get_mut());
                    }
                }
                _ = heartbeat.tick() => self.heartbeat().await,
                _ = shutdown.fired() => break,
            }
        }
        // What a full ring holds (4 MiB of 680-byte records by default),
        // not what a flood goes on writing meanwhile: that stays in the
        // pinned ring for the next loader.
        for _ in 0..SHUTDOWN_TURNS {
            if self.drain(events.get_mut()).await {
                break;
            }
        }
        self.send_batch().await;
        self.heartbeat().await;
        Ok((events.into_inner(), self.progress))
    }

    /// Releases to the kernel the ring space of every event the span-actor
    /// has received (and, when nothing is in flight, of what was read but
    /// made no event: malformed records).
    fn commit(&mut self, ring: &mut WalRing) {
        if commit(ring, &self.progress, self.published_mark, self.batch.is_empty()) {
            self.valve.inc();
        }
    }

    /// Reads the events in the ring, at most [`DRAIN_BATCHES`] batches'
    /// worth of records; true if the ring was emptied.
    async fn drain(&mut self, ring: &mut WalRing) -> bool {
        let mut budget = self.batch_length.saturating_mul(DRAIN_BATCHES);
        let emptied = loop {
            if budget == 0 {
                self.drain_cut.inc();
                break false;
            }
            budget -= 1;
            let Some(item) = ring.next() else { break true };
            let was_empty = self.batch.is_empty();
            let Some((key, comm)) = push_record(&mut self.batch.raw, item) else {
                self.malformed.add(1);
                continue;
            };
            if let Some(comm) = comm {
                if self.batch.seen.insert(key) {
                    self.batch.procs.push((key.0, key.1, c_string(&comm)));
                }
            }
            self.read.inc();
            if was_empty {
                self.batch.deadline = Some(Instant::now() + self.batch_timeout);
            }
            if self.batch.len() >= self.batch_length || self.batch.raw.record_bytes() >= self.batch_bytes {
                self.send_batch_at(ring.read_pos()).await;
            }
        };
        self.batch.mark = ring.read_pos();
        self.commit(ring);
        emptied
    }

    /// Learns new processes' names from exec and fork records, and selects
    /// newly exec'd processes whose executable matches.
    fn drain_execs(&mut self) {
        while let Some(item) = self.execs.next() {
            let Some(record) = ProcRecord::parse(&item) else {
                self.malformed.add(1);
                continue;
            };
            let ev = match record {
                ProcRecord::Fork(ev) => {
                    self.procs.fork(&ev);
                    continue;
                }
                ProcRecord::Exec(ev) => ev,
            };
            self.procs.exec(&ev);
            if !self.discovery.by_exe() {
                continue;
            }
            let (pid, path) = (ev.h.tgid, ev.path());
            if self.discovery.exe_matches(&path) {
                match self.probes.select_pid(pid, Selected::ByExe) {
                    Ok(()) => tracing::info!(pid, exe = %path, event = "selected", "tracing new process"),
                    Err(error) => tracing::warn!(pid, %error, "cannot select process"),
                }
            } else {
                self.probes.deselect_by_exe(pid);
            }
        }
    }

    /// Publishes the current batch, if any, marked with the ring position
    /// just past its last event.
    async fn send_batch(&mut self) {
        self.send_batch_at(self.batch.mark).await;
    }

    async fn send_batch_at(&mut self, mark: u64) {
        self.batch.deadline = None;
        if self.batch.is_empty() {
            return;
        }
        // The next batch's buffer starts at this one's size: it rarely grows.
        let next = RawBatch::with_capacity(self.batch.raw.record_bytes());
        let mut batch = std::mem::replace(&mut self.batch.raw, next);
        // Records of processes that started since the last read first.
        self.drain_execs();
        batch.processes = self.batch.procs.drain(..).map(|(pid, start, comm)| self.procs.get(pid, start, &comm)).collect();
        self.batch.seen.clear();
        let n = batch.len() as u64;
        batch.mono_to_unix_ns = mono_to_unix_ns();
        batch.epoch = self.probes.epoch();
        self.published_mark = mark;
        // A full backlog is counted by the producer task.
        if let Err(error) = self.publisher.publish_marked(Body::Raw(batch), n, (), mark).await {
            tracing::warn!(%error, "publish failed");
            self.publish_failed.add(n);
        }
        // Let the socket's own tasks run: a ring that never empties must not
        // starve them (that silently drops what they hold).
        tokio::task::yield_now().await;
    }

    /// Refreshes kernel counters and sends a health report (also the
    /// heartbeat subscribers use to notice a silent publisher).
    async fn heartbeat(&mut self) {
        // A load step left behind (it reported, then a thread of it waited
        // on a file that did not answer) is reaped once it ends.
        crate::step::reap();
        // What the TLS attacher last said it did (cumulative counts).
        if let Some(attacher) = &mut self.attacher {
            attacher.read_into(&self.registry);
        }
        let now = self.probes.counters();
        for (i, v) in now.iter().enumerate() {
            if let Some(Some(d)) = self.kernel_drops.get(i) {
                d.add(v.saturating_sub(self.kernel_last[i]));
            }
            if let Some(Some(c)) = self.kernel_counts.get(i) {
                c.set(*v);
            }
            if let Some(Some(g)) = self.kernel_gauges.get(i) {
                // Increments and decrements on different CPUs: the wrapped
                // sum is the signed level.
                g.set(*v as i64 as f64);
            }
        }
        self.kernel_last = now;
        for stat in self.probes.program_stats() {
            self.registry.counter("ringtail_probe_run_time_ns_total", &[("program", stat.name)]).set(stat.run_time.as_nanos() as u64);
            self.registry.counter("ringtail_probe_runs_total", &[("program", stat.name)]).set(stat.run_count);
        }
        let report = self.registry.report();
        if let Err(error) = self.publisher.transient(Body::Health(report)).await {
            tracing::debug!(%error, "heartbeat not sent");
        }
    }
}

/// A process: tgid and start time.
type ProcKey = (u32, u64);

/// The bytes a batch is cut at: `batch_length` HTTP events' worth (as
/// the ring counts them, `kernel::HTTP_RECORD_BYTES`).
fn batch_bytes(batch_length: usize) -> usize {
    batch_length.saturating_mul(crate::kernel::HTTP_RECORD_BYTES as usize).max(1)
}

/// Writes one record of the events ring straight into the batch's wire
/// layout; returns its process and, when its process fields are its own,
/// the kernel's bytes of the process name (made a `String` only when a
/// batch names a process it has not named yet); `None` for a malformed
/// record.
fn push_record(raw: &mut RawBatch, item: &[u8]) -> Option<(ProcKey, Option<[u8; COMM_LEN]>)> {
    let h = match EventRecord::parse(item)? {
        EventRecord::Http(bytes) => {
            let ev = HttpEvent::parse(bytes)?;
            raw.push_event(&ev.raw_event()?);
            ev.h
        }
        EventRecord::H2(io, pieces) => {
            raw.push_h2(&io.h2(pieces)?);
            io.h
        }
        EventRecord::Stream(io, pieces) => {
            raw.push_stream(&io.stream(pieces)?);
            io.h
        }
    };
    // A close's process fields may be another task's.
    Some(((h.tgid, h.proc_start_ns), (!h.is_close()).then_some(h.comm)))
}

/// Moves the ring's consumer position to the highest mark received; past
/// everything read when nothing is in flight (`idle`: no open batch, and
/// the last batch published is received).
///
/// The pressure valve: when the kernel counts more than half the ring as
/// used (the span-actor receives slower than requests come), the position
/// moves past everything published, i.e. handed to the replay buffer, as
/// aya's reader would: the ring keeps taking events rather than dropping
/// them, at the price of what a `kill -9` of the loader would then lose
/// (the replay buffer's unreceived batches). Returns true if it opened.
pub fn commit(ring: &mut WalRing, progress: &watch::Receiver<Progress>, published_mark: u64, idle: bool) -> bool {
    let received = progress.borrow().received_mark;
    if idle && received >= published_mark {
        ring.commit(ring.read_pos());
        return false;
    }
    ring.commit(received);
    if ring.used() > ring.size() / 2 && published_mark > received {
        ring.commit(published_mark);
        return true;
    }
    false
}
