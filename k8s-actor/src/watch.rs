//! The watch: one list-then-watch of the node's pods (kube-rs' `watcher`:
//! paged list, watch from its resource version, resumed after the server
//! ends a watch, relisted when the version expired (410), errors retried
//! with exponential back-off and jitter, 0.8 s to 30 s), its events applied
//! to the [`NodeTable`], and the table written out when it changed, at
//! most every [`WRITE_EVERY`].
//!
//! A pod owned by a Job makes one GET of that Job (its CronJob owner);
//! a failed GET is tried again every [`JOB_RETRY`] while a pod refers to
//! the Job. API server unreachable, at start or later: the actor stays up,
//! counts, keeps the last table (`connected = false` in it), and catches up
//! when the watch comes back (a relist).
//!
//! Counters (`ringtail_k8s_*`, the k8s-actor's health, written next to the
//! snapshot every second it changed): `watch_errors_total{reason}`,
//! `reconnects_total`, `relists_total`, `api_reachable`, `pods`,
//! `containers`, `jobs`, `events_total{type}`, `snapshot_writes_total`,
//! `snapshot_generation`, `job_lookups_total{result}`,
//! `metadata_dropped_total{reason}` (see `table`).

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use ipc_schema::k8s::Stamp;
use ipc_schema::{endpoints, Body, Component, Envelope, Producer};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use runtime_kit::counters::{Counter, Drops, Gauge, Registry};
use runtime_kit::shutdown::Shutdown;
use tokio::time::Instant;

use crate::publish::Publisher;
use crate::table::{JobKey, NodeTable};
use crate::K8sError;

/// Writes of the snapshot are at least this far apart (changes in between
/// are coalesced into the next).
pub const WRITE_EVERY: Duration = Duration::from_millis(100);

/// How often the health file is written (when it changed).
pub const HEALTH_EVERY: Duration = Duration::from_secs(1);

/// How long a failed Job read waits before it is tried again.
pub const JOB_RETRY: Duration = Duration::from_secs(30);

/// How long one Job read may take.
const JOB_TIMEOUT: Duration = Duration::from_secs(5);

/// The k8s-actor's counters.
struct Counters {
    errors_list: Counter,
    errors_watch_start: Counter,
    errors_watch: Counter,
    errors_api: Counter,
    errors_version: Counter,
    reconnects: Counter,
    relists: Counter,
    reachable: Gauge,
    pods: Gauge,
    containers: Gauge,
    jobs: Gauge,
    applied: Counter,
    deleted: Counter,
    listed: Counter,
    writes: Counter,
    write_failed: Drops,
    generation: Gauge,
    job_found: Counter,
    job_none: Counter,
    job_error: Counter,
}

impl Counters {
    fn new(r: &Registry) -> Counters {
        let err = |reason| r.counter("ringtail_k8s_watch_errors_total", &[("reason", reason)]);
        let ev = |kind| r.counter("ringtail_k8s_events_total", &[("type", kind)]);
        let job = |result| r.counter("ringtail_k8s_job_lookups_total", &[("result", result)]);
        Counters {
            errors_list: err("list"),
            errors_watch_start: err("watch_start"),
            errors_watch: err("watch_stream"),
            errors_api: err("api_status"),
            errors_version: err("no_resource_version"),
            reconnects: r.counter("ringtail_k8s_reconnects_total", &[]),
            relists: r.counter("ringtail_k8s_relists_total", &[]),
            reachable: r.gauge("ringtail_k8s_api_reachable", &[]),
            pods: r.gauge("ringtail_k8s_pods", &[]),
            containers: r.gauge("ringtail_k8s_containers", &[]),
            jobs: r.gauge("ringtail_k8s_jobs", &[]),
            applied: ev("applied"),
            deleted: ev("deleted"),
            listed: ev("listed"),
            writes: r.counter("ringtail_k8s_snapshot_writes_total", &[]),
            write_failed: r.drops("ringtail_k8s_snapshot_write_failed_total", "write_failed"),
            generation: r.gauge("ringtail_k8s_snapshot_generation", &[]),
            job_found: job("cronjob"),
            job_none: job("no_cronjob"),
            job_error: job("error"),
        }
    }
}

/// How the API server is reached.
pub async fn client(settings: &ringtail_config::KubernetesSettings) -> Result<Client, K8sError> {
    let config = match settings.kubeconfig() {
        Some(path) => {
            crate::credentials::check(path)?;
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|source| K8sError::Kubeconfig { path: path.to_owned(), source })?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|source| K8sError::Kubeconfig { path: path.to_owned(), source })?
        }
        None => {
            // kube reads the token from this path again (and again as the
            // kubelet rotates it): checked first, while it is this one.
            crate::credentials::check(Path::new(crate::credentials::SERVICE_ACCOUNT_TOKEN))?;
            kube::Config::incluster().map_err(|source| K8sError::InCluster { source })?
        }
    };
    Client::try_from(config).map_err(|source| K8sError::Client { source })
}

/// The watch loop and what it owns.
pub struct Watch {
    client: Client,
    node: String,
    table: NodeTable,
    publisher: Publisher,
    registry: Registry,
    instance: u64,
    generation: u64,
    counters: Counters,
    /// Ever reachable, and reachable now.
    was_up: bool,
    up: bool,
    /// Jobs whose read failed, to try again.
    retry_jobs: HashSet<JobKey>,
}

impl Watch {
    /// A watch of `node`'s pods into `table`, published by `publisher`.
    pub fn new(client: Client, node: String, table: NodeTable, publisher: Publisher, registry: &Registry, instance: u64) -> Watch {
        Watch {
            client,
            node,
            table,
            publisher,
            registry: registry.clone(),
            instance,
            generation: 0,
            counters: Counters::new(registry),
            was_up: false,
            up: false,
            retry_jobs: HashSet::new(),
        }
    }

    /// Writes the table as the next generation.
    fn write(&mut self) {
        let stamp = Stamp { instance: self.instance, generation: self.generation + 1 };
        let written = self.table.encode(stamp).map_err(|e| e.to_string()).and_then(|bytes| {
            self.publisher
                .replace(endpoints::K8S_SNAPSHOT, &bytes)
                .map_err(|e| format!("{e}: {}", std::error::Error::source(&e).map(ToString::to_string).unwrap_or_default()))
        });
        match written {
            Ok(()) => {
                self.generation += 1;
                self.counters.writes.inc();
                self.counters.generation.set(self.generation as f64);
            }
            Err(error) => {
                tracing::warn!(%error, "cannot write the Kubernetes metadata snapshot");
                self.counters.write_failed.add(1);
            }
        }
        self.counters.pods.set(self.table.pods() as f64);
        self.counters.containers.set(self.table.containers() as f64);
        self.counters.jobs.set(self.table.jobs() as f64);
    }

    /// Writes the health report (an envelope, as the loader's travel).
    fn write_health(&self, last: &mut Option<Vec<ipc_schema::MetricPoint>>) {
        let report = self.registry.report();
        if last.as_ref() == Some(&report.points) {
            return;
        }
        let points = report.points.clone();
        let env = Envelope::new(Producer { component: Component::K8sActor, instance: self.instance }, 0, Body::Health(report));
        match ipc_schema::encode(&env)
            .map_err(|e| e.to_string())
            .and_then(|b| self.publisher.replace(endpoints::K8S_HEALTH, &b).map_err(|e| e.to_string()))
        {
            Ok(()) => *last = Some(points),
            Err(error) => {
                tracing::warn!(%error, "cannot write the k8s-actor's health");
                self.counters.write_failed.add(1);
            }
        }
    }

    fn reached(&mut self) {
        if !self.up {
            self.up = true;
            if self.was_up {
                self.counters.reconnects.inc();
                tracing::info!(event = "api_reconnected", node = %self.node, "Kubernetes API server reachable again");
            } else {
                tracing::info!(event = "api_connected", node = %self.node, "Kubernetes API server reachable");
            }
            self.was_up = true;
            self.counters.reachable.set(1.0);
            self.table.set_connected(true);
        }
    }

    fn failed(&mut self, error: &watcher::Error) {
        let c = &self.counters;
        match error {
            watcher::Error::InitialListFailed(_) => c.errors_list.inc(),
            watcher::Error::WatchStartFailed(_) => c.errors_watch_start.inc(),
            watcher::Error::WatchFailed(_) => c.errors_watch.inc(),
            watcher::Error::WatchError(_) => c.errors_api.inc(),
            watcher::Error::NoResourceVersion => c.errors_version.inc(),
        }
        if self.up || !self.was_up {
            // Once per outage (the back-off retries keep counting above).
            tracing::warn!(event = "api_unreachable", node = %self.node, %error, "Kubernetes API server: watch failed; retrying with back-off");
        }
        self.up = false;
        self.counters.reachable.set(0.0);
        self.table.set_connected(false);
    }

    /// Reads `job` and gives the table its CronJob.
    async fn read_job(&mut self, job: JobKey) {
        let api: Api<Job> = Api::namespaced(self.client.clone(), &job.0);
        match tokio::time::timeout(JOB_TIMEOUT, api.get_opt(&job.1)).await {
            Ok(Ok(found)) => {
                let cronjob = found.and_then(|j| {
                    let refs = j.metadata.owner_references.unwrap_or_default();
                    refs.into_iter().find(|o| o.kind == "CronJob" && o.controller != Some(false)).map(|o| o.name)
                });
                if cronjob.is_some() { &self.counters.job_found } else { &self.counters.job_none }.inc();
                self.retry_jobs.remove(&job);
                self.table.resolve_job(job, cronjob, Instant::now().into_std());
            }
            Ok(Err(error)) => {
                tracing::debug!(%error, namespace = %job.0, "cannot read a Job (RBAC: jobs get)");
                self.counters.job_error.inc();
                self.retry_jobs.insert(job);
            }
            Err(_) => {
                self.counters.job_error.inc();
                self.retry_jobs.insert(job);
            }
        }
    }

    /// Runs until `shutdown`; `ready` is called once the first (empty,
    /// unsynced) snapshot is out, whether or not the API server answers.
    pub async fn run(mut self, mut shutdown: Shutdown, ready: impl FnOnce()) -> Result<(), K8sError> {
        let api: Api<Pod> = Api::all(self.client.clone());
        let config = watcher::Config::default().fields(&format!("spec.nodeName={}", self.node));
        let mut events = watcher(api, config).default_backoff().boxed();
        self.write();
        let mut health = None;
        self.write_health(&mut health);
        ready();
        let mut pending = false;
        let mut last_write = Instant::now();
        let mut next_expiry: Option<Instant> = None;
        let mut health_tick = tokio::time::interval(HEALTH_EVERY);
        let mut retry_tick = tokio::time::interval(JOB_RETRY);
        retry_tick.reset();
        loop {
            let write_at = pending.then_some(last_write + WRITE_EVERY);
            tokio::select! {
                _ = shutdown.fired() => break,
                event = events.next() => {
                    let now = Instant::now().into_std();
                    match event {
                        Some(Ok(event)) => {
                            self.reached();
                            match event {
                                Event::Init => {
                                    self.counters.relists.inc();
                                    self.table.begin_list();
                                }
                                Event::InitApply(pod) => {
                                    self.counters.listed.inc();
                                    if let Some(job) = self.table.apply(&pod, now) {
                                        self.read_job(job).await;
                                    }
                                }
                                Event::InitDone => self.table.end_list(now),
                                Event::Apply(pod) => {
                                    self.counters.applied.inc();
                                    if let Some(job) = self.table.apply(&pod, now) {
                                        self.read_job(job).await;
                                    }
                                }
                                Event::Delete(pod) => {
                                    self.counters.deleted.inc();
                                    self.table.delete(&pod, now);
                                }
                            }
                        }
                        Some(Err(error)) => self.failed(&error),
                        None => break, // the watcher never ends on its own
                    }
                    next_expiry = self.table.expire(now).map(Instant::from_std);
                }
                _ = tokio::time::sleep_until(write_at.unwrap_or_else(Instant::now)), if write_at.is_some() => {
                    pending = false;
                    last_write = Instant::now();
                    self.write();
                }
                _ = tokio::time::sleep_until(next_expiry.unwrap_or_else(Instant::now)), if next_expiry.is_some() => {
                    next_expiry = self.table.expire(Instant::now().into_std()).map(Instant::from_std);
                }
                _ = health_tick.tick() => self.write_health(&mut health),
                _ = retry_tick.tick() => {
                    let due: Vec<JobKey> = self.retry_jobs.drain().filter(|j| self.table.references_job(j)).collect();
                    for job in due {
                        self.read_job(job).await;
                    }
                }
            }
            if self.table.take_changed() {
                pending = true;
            }
        }
        if pending {
            self.write();
        }
        self.write_health(&mut health);
        Ok(())
    }
}
