//! The node's table: every pod the watch reported, by uid, in the form it
//! is published in (`ipc_schema::k8s::Pod`, attributes derived once, at
//! each change of the pod), plus what is kept for a while after it went.
//!
//! - A deleted pod (or one a relist no longer shows) stays
//!   `kubernetes.deleted_grace`, then goes: spans of its last requests are
//!   still on their way. A container id that leaves a pod's status (the
//!   container restarted: the new one has a new id) stays as long. An id
//!   is never given to another container, so what stays is never a stale
//!   identity for a live one.
//! - Bounded: at most `kubernetes.max_pods` pods (a pod in its grace period
//!   gives way to a new one first) and [`MAX_TABLE_BYTES`] of strings in
//!   all; what does not fit is left out and counted, as is what a pod holds
//!   beyond the per-pod bounds.
//! - A pod owned by a Job gets `k8s.cronjob.name` from the Job, read once
//!   by the watch (one GET per Job, [`NodeTable::resolve_job`]) and kept
//!   while a pod of the table refers to it: bounded by the pods.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use ipc_schema::k8s::{self, Container, Pod, SnapshotRef, Stamp, MAX_SNAPSHOT_BYTES, SNAPSHOT_VERSION};
use runtime_kit::counters::{Drops, Registry};

use crate::derive::{self, Rules};
use crate::pod::{Left, PodFacts};

/// Most bytes of strings the table holds (what the snapshot holds, with
/// room for msgpack's framing).
pub const MAX_TABLE_BYTES: usize = MAX_SNAPSHOT_BYTES * 3 / 4;

/// A Job, by namespace and name.
pub type JobKey = (String, String);

/// What the table leaves out, counted (and logged) by reason:
/// `ringtail_k8s_metadata_dropped_total{reason}`.
#[derive(Clone)]
pub struct Dropped {
    pub invalid_pod: Drops,
    pub other_node: Drops,
    pub too_many_pods: Drops,
    pub table_full: Drops,
    pub labels: Drops,
    pub annotations: Drops,
    pub annotation_reserved: Drops,
    pub containers: Drops,
    pub container_id: Drops,
}

impl Dropped {
    /// The counters in `registry`.
    pub fn new(registry: &Registry) -> Dropped {
        let d = |reason| registry.drops("ringtail_k8s_metadata_dropped_total", reason);
        Dropped {
            invalid_pod: d("invalid_pod"),
            other_node: d("other_node"),
            too_many_pods: d("too_many_pods"),
            table_full: d("table_full"),
            labels: d("label_over_bounds"),
            annotations: d("annotation_over_bounds"),
            annotation_reserved: d("annotation_reserved"),
            containers: d("too_many_containers"),
            container_id: d("container_id_unrecognized"),
        }
    }

    fn left(&self, l: Left) {
        self.labels.add(l.labels);
        self.annotations.add(l.annotations);
        self.containers.add(l.containers);
        self.container_id.add(l.container_ids);
    }
}

/// How the table is set up.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The node watched (pods of another are refused).
    pub node: String,
    pub rules: Rules,
    pub max_pods: usize,
    pub grace: Duration,
}

struct Entry {
    facts: PodFacts,
    /// Published form: its containers are the live ones, then `retired`'s.
    pod: Pod,
    bytes: usize,
    /// Set once deleted: when it goes.
    leaves_at: Option<Instant>,
    /// Containers no longer in the pod's status, and when they go.
    retired: Vec<(Container, Instant)>,
}

/// The node's pods.
pub struct NodeTable {
    limits: Limits,
    pods: HashMap<String, Entry>,
    jobs: HashMap<JobKey, Option<String>>,
    /// Uids seen since the current relist began (`None`: not listing).
    listing: Option<HashSet<String>>,
    bytes: usize,
    synced: bool,
    connected: bool,
    changed: bool,
    dropped: Dropped,
}

fn text_bytes(p: &Pod) -> usize {
    const PER_STRING: usize = 8;
    let s = |x: &str| x.len() + PER_STRING;
    let pairs = |v: &[(String, String)]| v.iter().map(|(k, x)| s(k) + s(x)).sum::<usize>();
    s(&p.uid)
        + s(&p.namespace)
        + s(&p.name)
        + p.owners.iter().map(|o| s(&o.kind) + s(&o.name)).sum::<usize>()
        + pairs(&p.labels)
        + pairs(&p.annotations)
        + pairs(&p.resource)
        + p.containers.iter().map(|c| s(&c.id) + s(&c.name) + s(&c.image) + pairs(&c.resource)).sum::<usize>()
}

impl NodeTable {
    /// An empty table.
    pub fn new(limits: Limits, dropped: Dropped) -> NodeTable {
        NodeTable {
            limits,
            pods: HashMap::new(),
            jobs: HashMap::new(),
            listing: None,
            bytes: 0,
            synced: false,
            connected: false,
            changed: true,
            dropped,
        }
    }

    /// Pods held (those in their grace period included).
    pub fn pods(&self) -> usize {
        self.pods.len()
    }

    /// Container ids held.
    pub fn containers(&self) -> usize {
        self.pods.values().map(|e| e.pod.containers.len()).sum()
    }

    /// Whether the table changed since the last [`NodeTable::take_changed`].
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// The watch is up (or down).
    pub fn set_connected(&mut self, up: bool) {
        if self.connected != up {
            self.connected = up;
            self.changed = true;
        }
    }

    /// A relist begins: pods it does not show are gone once it ends.
    pub fn begin_list(&mut self) {
        self.listing = Some(HashSet::new());
    }

    /// The relist ended: what it did not show was deleted meanwhile.
    pub fn end_list(&mut self, now: Instant) {
        let Some(seen) = self.listing.take() else { return };
        let gone: Vec<String> =
            self.pods.iter().filter(|(uid, e)| e.leaves_at.is_none() && !seen.contains(*uid)).map(|(u, _)| u.clone()).collect();
        for uid in gone {
            self.leave(&uid, now);
        }
        if !self.synced {
            self.synced = true;
            self.changed = true;
        }
    }

    /// A pod added or changed (or listed). Returns the Job whose CronJob
    /// is not known yet, for the caller to read.
    pub fn apply(&mut self, obj: &k8s_openapi::api::core::v1::Pod, now: Instant) -> Option<JobKey> {
        let mut left = Left::default();
        let facts = match PodFacts::from_pod(obj, &mut left) {
            Ok(f) => f,
            Err(_) => {
                self.dropped.invalid_pod.add(1);
                return None;
            }
        };
        self.dropped.left(left);
        if facts.node != self.limits.node {
            // The field selector asked for this node's pods only.
            self.dropped.other_node.add(1);
            return None;
        }
        if let Some(seen) = &mut self.listing {
            seen.insert(facts.uid.clone());
        }
        if !self.pods.contains_key(&facts.uid) && self.pods.len() >= self.limits.max_pods && !self.evict_one_leaving() {
            self.dropped.too_many_pods.add(1);
            return None;
        }
        let job = facts.job().map(|j| (facts.namespace.clone(), j.to_owned()));
        let unknown_job = job.clone().filter(|k| !self.jobs.contains_key(k));
        self.store(facts, now);
        unknown_job
    }

    /// Builds and stores `facts`' published form, retiring container ids
    /// it no longer has.
    fn store(&mut self, facts: PodFacts, now: Instant) {
        let cronjob = facts.job().and_then(|j| self.jobs.get(&(facts.namespace.clone(), j.to_owned())).cloned().flatten());
        let owners = derive::owners(&facts, cronjob.as_deref());
        let (resource, reserved) = derive::pod_resource(&facts, &owners, &self.limits.node, self.limits.rules);
        self.dropped.annotation_reserved.add(reserved);
        let live: Vec<Container> = facts
            .containers
            .iter()
            .map(|c| Container {
                id: c.id.clone(),
                name: c.name.clone(),
                image: c.image.clone(),
                resource: derive::container_resource(&facts, c, self.limits.rules),
            })
            .collect();
        let old = self.pods.remove(&facts.uid);
        let mut retired = Vec::new();
        if let Some(old) = &old {
            self.bytes -= old.bytes;
            let previous = old.pod.containers.iter().filter(|c| !old.retired.iter().any(|(r, _)| r.id == c.id));
            let leaving = previous.filter(|c| !live.iter().any(|l| l.id == c.id)).map(|c| (c.clone(), now + self.limits.grace));
            retired = old.retired.iter().filter(|(r, _)| !live.iter().any(|l| l.id == r.id)).cloned().chain(leaving).collect();
            if self.limits.grace.is_zero() {
                retired.clear();
            }
            retired.truncate(k8s::MAX_CONTAINERS_PER_POD.saturating_sub(live.len()));
        }
        let mut containers = live;
        containers.extend(retired.iter().map(|(c, _)| c.clone()));
        let pod = Pod {
            uid: facts.uid.clone(),
            namespace: facts.namespace.clone(),
            name: facts.name.clone(),
            owners,
            labels: facts.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            annotations: facts.annotations.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            resource,
            containers,
        };
        let bytes = text_bytes(&pod);
        if self.bytes + bytes > MAX_TABLE_BYTES || pod.check().is_err() {
            self.dropped.table_full.add(1);
            if let Some(old) = old {
                // The previous form stays (it fitted).
                self.bytes += old.bytes;
                self.pods.insert(facts.uid, old);
            }
            return;
        }
        let same = old.as_ref().is_some_and(|o| o.pod == pod);
        self.bytes += bytes;
        self.pods.insert(facts.uid.clone(), Entry { facts, pod, bytes, leaves_at: None, retired });
        if !same {
            self.changed = true;
        }
    }

    /// Makes room by dropping the pod in its grace period that would go
    /// first; false if none is.
    fn evict_one_leaving(&mut self) -> bool {
        let first = self.pods.iter().filter_map(|(u, e)| e.leaves_at.map(|t| (t, u.clone()))).min();
        match first {
            Some((_, uid)) => {
                self.remove(&uid);
                true
            }
            None => false,
        }
    }

    fn remove(&mut self, uid: &str) {
        if let Some(e) = self.pods.remove(uid) {
            self.bytes -= e.bytes;
            self.changed = true;
            if let Some(job) = e.facts.job() {
                let key = (e.facts.namespace.clone(), job.to_owned());
                if !self.references_job(&key) {
                    self.jobs.remove(&key);
                }
            }
        }
    }

    fn leave(&mut self, uid: &str, now: Instant) {
        if self.limits.grace.is_zero() {
            self.remove(uid);
        } else if let Some(e) = self.pods.get_mut(uid) {
            e.leaves_at.get_or_insert(now + self.limits.grace);
        }
    }

    /// A pod deleted: it stays its grace period.
    pub fn delete(&mut self, obj: &k8s_openapi::api::core::v1::Pod, now: Instant) {
        if let Some(uid) = obj.metadata.uid.as_deref() {
            self.leave(uid, now);
        }
    }

    /// Drops what has had its grace period; returns when the next thing
    /// goes, if anything is waiting.
    pub fn expire(&mut self, now: Instant) -> Option<Instant> {
        let due: Vec<String> = self.pods.iter().filter(|(_, e)| e.leaves_at.is_some_and(|t| t <= now)).map(|(u, _)| u.clone()).collect();
        for uid in due {
            self.remove(&uid);
        }
        for e in self.pods.values_mut() {
            if e.retired.iter().any(|(_, t)| *t <= now) {
                let gone: Vec<String> = e.retired.iter().filter(|(_, t)| *t <= now).map(|(c, _)| c.id.clone()).collect();
                e.retired.retain(|(_, t)| *t > now);
                e.pod.containers.retain(|c| !gone.contains(&c.id));
                let bytes = text_bytes(&e.pod);
                self.bytes = self.bytes - e.bytes + bytes;
                e.bytes = bytes;
                self.changed = true;
            }
        }
        self.pods.values().flat_map(|e| e.leaves_at.into_iter().chain(e.retired.iter().map(|(_, t)| *t))).min()
    }

    /// Whether a pod of the table has `job` as its controller.
    pub fn references_job(&self, job: &JobKey) -> bool {
        self.pods.values().any(|e| e.facts.namespace == job.0 && e.facts.job() == Some(job.1.as_str()))
    }

    /// What reading `job` found: the CronJob that owns it, or none (a Job
    /// made by hand, or one already gone). Its pods get their owners again.
    pub fn resolve_job(&mut self, job: JobKey, cronjob: Option<String>, now: Instant) {
        if !self.references_job(&job) {
            return; // its pods went meanwhile: nothing to keep it for
        }
        self.jobs.insert(job.clone(), cronjob);
        let pods: Vec<PodFacts> = self
            .pods
            .values()
            .filter(|e| e.facts.namespace == job.0 && e.facts.job() == Some(job.1.as_str()))
            .map(|e| e.facts.clone())
            .collect();
        for facts in pods {
            let leaves_at = self.pods.get(&facts.uid).and_then(|e| e.leaves_at);
            self.store(facts.clone(), now);
            if let Some(e) = self.pods.get_mut(&facts.uid) {
                e.leaves_at = leaves_at;
            }
        }
    }

    /// Jobs held (bounded by the pods referring to them).
    pub fn jobs(&self) -> usize {
        self.jobs.len()
    }

    /// The table as a snapshot stamped `stamp`, encoded (pods in
    /// namespace, name order).
    pub fn encode(&self, stamp: Stamp) -> Result<Vec<u8>, k8s::SnapshotError> {
        let mut pods: Vec<&Pod> = self.pods.values().map(|e| &e.pod).collect();
        pods.sort_by(|a, b| (&a.namespace, &a.name, &a.uid).cmp(&(&b.namespace, &b.name, &b.uid)));
        k8s::encode_ref(&SnapshotRef {
            version: SNAPSHOT_VERSION,
            stamp,
            node: &self.limits.node,
            synced: self.synced,
            connected: self.connected,
            pods,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::Component;

    const NODE: &str = "node-1";

    fn id(n: u32) -> String {
        format!("{n:064x}")
    }

    fn table(max_pods: usize, grace: Duration) -> (NodeTable, Registry) {
        let registry = Registry::new(Component::K8sActor, 1);
        let limits = Limits { node: NODE.into(), rules: Rules::default(), max_pods, grace };
        (NodeTable::new(limits, Dropped::new(&registry)), registry)
    }

    fn pod(uid: &str, name: &str, containers: &[(&str, u32)], owner: Option<(&str, &str)>) -> k8s_openapi::api::core::v1::Pod {
        let statuses: Vec<serde_json::Value> = containers
            .iter()
            .map(|(n, i)| serde_json::json!({"name": n, "containerID": format!("containerd://{}", id(*i)), "image": "i", "imageID": "i", "ready": true, "restartCount": 0}))
            .collect();
        let owners: Vec<serde_json::Value> = owner
            .iter()
            .map(|(k, n)| serde_json::json!({"apiVersion": "v1", "kind": k, "name": n, "uid": "o", "controller": true}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"uid": uid, "name": name, "namespace": "ns", "ownerReferences": owners},
            "spec": {"nodeName": NODE, "containers": []},
            "status": {"containerStatuses": statuses}
        }))
        .unwrap()
    }

    fn snapshot(t: &NodeTable) -> k8s::Table {
        k8s::Table::new(k8s::decode(&t.encode(Stamp { instance: 1, generation: 1 }).unwrap()).unwrap())
    }

    fn dropped(r: &Registry, reason: &str) -> f64 {
        r.report()
            .points
            .iter()
            .find(|p| p.name == "ringtail_k8s_metadata_dropped_total" && p.labels.contains(&("reason".into(), reason.into())))
            .map_or(0.0, |p| p.value)
    }

    #[test]
    fn a_restarted_container_s_old_id_stays_its_grace_then_goes() {
        let (mut t, _) = table(10, Duration::from_secs(30));
        let t0 = Instant::now();
        t.apply(&pod("u1", "web-0", &[("app", 1)], None), t0);
        assert!(t.take_changed());
        t.apply(&pod("u1", "web-0", &[("app", 1)], None), t0);
        assert!(!t.take_changed(), "the same pod again changes nothing");
        t.apply(&pod("u1", "web-0", &[("app", 2)], None), t0);
        assert!(t.take_changed());
        let s = snapshot(&t);
        assert_eq!(s.lookup(&id(2)).map(|v| v.container.name.as_str()), Some("app"));
        assert_eq!(s.lookup(&id(1)).map(|v| v.pod.name.as_str()), Some("web-0"), "the old id's spans in flight still find their pod");
        assert_eq!(t.expire(t0 + Duration::from_secs(29)), Some(t0 + Duration::from_secs(30)));
        t.expire(t0 + Duration::from_secs(30));
        let s = snapshot(&t);
        assert!(s.lookup(&id(1)).is_none() && s.lookup(&id(2)).is_some());
        assert_eq!(t.containers(), 1);
    }

    #[test]
    fn a_deleted_pod_and_one_a_relist_no_longer_shows_stay_their_grace() {
        let (mut t, _) = table(10, Duration::from_secs(5));
        let t0 = Instant::now();
        let a = pod("ua", "a", &[("c", 1)], None);
        t.apply(&a, t0);
        t.apply(&pod("ub", "b", &[("c", 2)], None), t0);
        t.delete(&a, t0);
        t.begin_list();
        t.apply(&pod("uc", "c", &[("c", 3)], None), t0);
        t.end_list(t0);
        assert_eq!(t.pods(), 3, "all still there");
        assert!(snapshot(&t).lookup(&id(1)).is_some());
        assert_eq!(t.expire(t0 + Duration::from_secs(5)), None);
        let s = snapshot(&t);
        assert!(s.lookup(&id(1)).is_none() && s.lookup(&id(2)).is_none() && s.lookup(&id(3)).is_some());
        assert!(s.snapshot().synced);
    }

    #[test]
    fn bounds_leave_out_and_count_and_pods_leaving_give_way() {
        let (mut t, r) = table(2, Duration::from_secs(60));
        let t0 = Instant::now();
        let a = pod("ua", "a", &[("c", 1)], None);
        t.apply(&a, t0);
        t.apply(&pod("ub", "b", &[("c", 2)], None), t0);
        t.apply(&pod("uc", "c", &[("c", 3)], None), t0);
        assert_eq!((t.pods(), dropped(&r, "too_many_pods")), (2, 1.0));
        t.delete(&a, t0);
        t.apply(&pod("uc", "c", &[("c", 3)], None), t0);
        assert_eq!(t.pods(), 2, "the leaving pod gave way");
        assert!(snapshot(&t).lookup(&id(3)).is_some());
        let mut other = pod("ud", "d", &[], None);
        other.spec.as_mut().unwrap().node_name = Some("node-2".into());
        t.apply(&other, t0);
        assert_eq!(dropped(&r, "other_node"), 1.0);
    }

    #[test]
    fn a_job_s_cronjob_is_kept_while_its_pods_are() {
        let (mut t, _) = table(10, Duration::ZERO);
        let t0 = Instant::now();
        let p = pod("uj", "report-1-x", &[("c", 1)], Some(("Job", "report-1")));
        let wanted = t.apply(&p, t0);
        assert_eq!(wanted, Some(("ns".to_owned(), "report-1".to_owned())));
        let attr = |t: &NodeTable, k: &str| {
            snapshot(t).lookup(&id(1)).and_then(|v| v.resource().find(|(a, _)| *a == k).map(|(_, v)| v.to_owned()))
        };
        assert_eq!(attr(&t, "k8s.cronjob.name"), None);
        t.resolve_job(("ns".into(), "report-1".into()), Some("report".into()), t0);
        assert_eq!(attr(&t, "k8s.cronjob.name").as_deref(), Some("report"));
        assert_eq!(attr(&t, "service.name").as_deref(), Some("report"));
        assert_eq!(t.apply(&p, t0), None, "read once");
        t.delete(&p, t0);
        assert_eq!((t.pods(), t.jobs()), (0, 0), "the Job goes with its last pod");
        t.resolve_job(("ns".into(), "late".into()), None, t0);
        assert_eq!(t.jobs(), 0, "an answer for a Job no pod refers to is not kept");
    }
}
