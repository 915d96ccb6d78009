//! Kubernetes metadata on the resource of a containerised process's spans
//! (and so of its metrics), and selection by Kubernetes attributes.
//!
//! The k8s-actor publishes a snapshot of the node's pods by container id
//! (`ipc_schema::k8s`); [`Metadata`] reads it (`runtime_kit::k8s`, at most
//! every [`REFRESH`]) and [`crate::naming`] asks it, per process, for the
//! pod of the process's `container.id` (the kernel's word, from its
//! cgroups). Keyed by container id, never by pod name: a pod deleted and
//! created again under the same name, or a container restarted, has a new
//! container id, so no span of the new one gets the old one's identity,
//! and the naming cache is rebuilt whenever the snapshot changes.
//!
//! Waiting: the first requests of a new pod can come before the API
//! server's word reaches the k8s-actor. The builder holds a raw batch with
//! a process of a container the snapshot does not know ([`Metadata::missing`])
//! for at most `kubernetes.metadata_wait` (batches behind it wait with it:
//! their order matters to the transformation), then transforms it; a span
//! that goes out without its pod's metadata is counted
//! (`ringtail_k8s_undecorated_spans_total{reason}`), and its container is
//! not waited for again (it may not be a pod's: a container started
//! outside Kubernetes on the node). With the API server down, spans flow
//! the same way, undecorated and counted, until the metadata catches up.
//!
//! Selection (`discovery.k8s_*`) happens here, not in the root loader,
//! which never talks to the API server: the loader traces what its own
//! rules select, and spans of processes whose pod is not selected are
//! dropped here, counted (`ringtail_k8s_unselected_spans_total{reason}`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashSet as HashSet;

use ipc_schema::k8s::{ContainerView, Stamp, Table};
use ipc_schema::ServiceResource;
use ringtail_config::{DiscoverySettings, Settings};
use runtime_kit::counters::{Counter, Drops, Registry};
use runtime_kit::k8s::SnapshotReader;

/// How often the snapshot's stamp is looked at (a 32-byte read).
pub const REFRESH: Duration = Duration::from_millis(50);

/// Containers given up on (waited for in vain) remembered; past it the
/// set starts over (they may be waited for once more).
const GIVEN_UP: usize = 4096;

/// Why a containerised process's span went out without its pod's metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undecorated {
    /// No snapshot (yet): the k8s-actor has not written one.
    NoMetadata,
    /// The k8s-actor has not listed the pods since it started, or its
    /// watch is down: the container may be a pod's the API server knows.
    ApiUnreachable,
    /// The snapshot is current and has no such container.
    UnknownContainer,
}

impl Undecorated {
    const ALL: [Undecorated; 3] = [Undecorated::NoMetadata, Undecorated::ApiUnreachable, Undecorated::UnknownContainer];

    fn as_str(self) -> &'static str {
        match self {
            Undecorated::NoMetadata => "no_metadata",
            Undecorated::ApiUnreachable => "api_unreachable",
            Undecorated::UnknownContainer => "unknown_container",
        }
    }
}

/// Why a span was dropped by the Kubernetes selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unselected {
    /// Its pod matches an exclusion.
    Excluded,
    /// Its pod matches no inclusion rule.
    NotSelected,
    /// Inclusion rules are set and its pod is not known (a host process,
    /// or no metadata for its container).
    PodUnknown,
}

impl Unselected {
    const ALL: [Unselected; 3] = [Unselected::Excluded, Unselected::NotSelected, Unselected::PodUnknown];

    fn as_str(self) -> &'static str {
        match self {
            Unselected::Excluded => "excluded",
            Unselected::NotSelected => "not_selected",
            Unselected::PodUnknown => "pod_unknown",
        }
    }
}

/// The `discovery.k8s_*` rules: within a list any entry matches; every
/// list given must match; an exclusion wins.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    namespaces: Vec<String>,
    /// Each a selector: `key=value` or `key` pairs, all of them.
    pod_labels: Vec<Vec<(String, Option<String>)>>,
    owners: Vec<String>,
    containers: Vec<String>,
    exclude_namespaces: Vec<String>,
    exclude_pod_labels: Vec<Vec<(String, Option<String>)>>,
}

/// A label selector's terms (`a=b,c`), as the configuration checked them.
fn selector(s: &str) -> Vec<(String, Option<String>)> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| match t.split_once('=') {
            Some((k, v)) => (k.trim().to_owned(), Some(v.trim().to_owned())),
            None => (t.to_owned(), None),
        })
        .collect()
}

fn labels_match(sel: &[(String, Option<String>)], labels: &[(String, String)]) -> bool {
    sel.iter().all(|(k, want)| labels.iter().any(|(lk, lv)| lk == k && want.as_ref().is_none_or(|w| w == lv)))
}

impl Selection {
    /// The rules of `discovery`.
    pub fn new(d: &DiscoverySettings) -> Selection {
        Selection {
            namespaces: d.k8s_namespaces.clone(),
            pod_labels: d.k8s_pod_labels.iter().map(|s| selector(s)).collect(),
            owners: d.k8s_owners.clone(),
            containers: d.k8s_containers.clone(),
            exclude_namespaces: d.k8s_exclude_namespaces.clone(),
            exclude_pod_labels: d.k8s_exclude_pod_labels.iter().map(|s| selector(s)).collect(),
        }
    }

    /// True if some inclusion rule is set (then a process of no known pod
    /// is not selected).
    pub fn includes(&self) -> bool {
        !(self.namespaces.is_empty() && self.pod_labels.is_empty() && self.owners.is_empty() && self.containers.is_empty())
    }

    /// True if no rule is set at all.
    pub fn is_empty(&self) -> bool {
        !self.includes() && self.exclude_namespaces.is_empty() && self.exclude_pod_labels.is_empty()
    }

    /// Whether a span of `view`'s container (`None`: no known pod) is kept.
    pub fn judge(&self, view: Option<&ContainerView<'_>>) -> Result<(), Unselected> {
        let Some(v) = view else {
            return if self.includes() { Err(Unselected::PodUnknown) } else { Ok(()) };
        };
        let pod = v.pod;
        if self.exclude_namespaces.contains(&pod.namespace) || self.exclude_pod_labels.iter().any(|s| labels_match(s, &pod.labels)) {
            return Err(Unselected::Excluded);
        }
        let ok = (self.namespaces.is_empty() || self.namespaces.contains(&pod.namespace))
            && (self.pod_labels.is_empty() || self.pod_labels.iter().any(|s| labels_match(s, &pod.labels)))
            && (self.owners.is_empty() || pod.owners.iter().any(|o| self.owners.contains(&o.name)))
            && (self.containers.is_empty() || self.containers.contains(&v.container.name));
        if ok {
            Ok(())
        } else {
            Err(Unselected::NotSelected)
        }
    }
}

/// What a process's resource became: its pod's (decorated), or why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Not in a container, or Kubernetes metadata is off.
    NotApplicable,
    Decorated,
    Undecorated(Undecorated),
}

/// The snapshot as the span-actor reads it, and what it counts.
pub struct Metadata {
    reader: SnapshotReader,
    wait: Duration,
    next_refresh: Option<Instant>,
    given_up: HashSet<String>,
    selection: Selection,
    undecorated: Vec<Drops>,
    unselected: Vec<Drops>,
    read_errors: Counter,
    waited: Counter,
}

impl Metadata {
    /// The metadata for these settings: `None` when Kubernetes metadata is
    /// off (the supervisor resolved `kubernetes.enabled` before handing
    /// the configuration over).
    pub fn new(settings: &Settings, registry: &Registry) -> Option<Metadata> {
        if !settings.kubernetes.active() {
            return None;
        }
        Some(Metadata::at(SnapshotReader::new(&settings.pipeline.runtime_dir), settings, registry))
    }

    /// Metadata read from `reader` (tests: any snapshot file).
    pub fn at(reader: SnapshotReader, settings: &Settings, registry: &Registry) -> Metadata {
        Metadata {
            reader,
            wait: settings.kubernetes.metadata_wait,
            next_refresh: None,
            given_up: HashSet::default(),
            selection: Selection::new(&settings.discovery),
            undecorated: Undecorated::ALL.iter().map(|r| registry.drops("ringtail_k8s_undecorated_spans_total", r.as_str())).collect(),
            unselected: Unselected::ALL.iter().map(|r| registry.drops("ringtail_k8s_unselected_spans_total", r.as_str())).collect(),
            read_errors: registry.counter("ringtail_k8s_snapshot_read_errors_total", &[]),
            waited: registry.counter("ringtail_k8s_metadata_waits_total", &[]),
        }
    }

    /// `kubernetes.metadata_wait`.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// Reads the snapshot if it changed (at most every [`REFRESH`], unless
    /// `force`); a snapshot that cannot be read is counted and the one read
    /// before stays.
    pub fn refresh(&mut self, now: Instant, force: bool) {
        if !force && self.next_refresh.is_some_and(|t| now < t) {
            return;
        }
        self.next_refresh = Some(now + REFRESH);
        if let Err(error) = self.reader.refresh() {
            self.read_errors.inc();
            tracing::warn!(error = %error, event = "k8s_snapshot_unreadable", "Kubernetes metadata snapshot not read");
        }
    }

    /// The table read last.
    pub fn table(&self) -> Option<&Arc<Table>> {
        self.reader.table()
    }

    /// The stamp of the table read last.
    pub fn stamp(&self) -> Option<Stamp> {
        self.table().map(|t| t.stamp())
    }

    /// True if spans of container `id` should wait for its metadata: the
    /// table does not know it and it was not waited for in vain already.
    pub fn missing(&self, id: &str) -> bool {
        !self.given_up.contains(id) && self.table().is_none_or(|t| t.lookup(id).is_none())
    }

    /// The container `id` was waited for in vain: its spans go out as they
    /// are from now on (decorated as soon as the table has it).
    pub fn give_up(&mut self, id: &str) {
        if self.given_up.len() >= GIVEN_UP {
            self.given_up.clear();
        }
        self.given_up.insert(id.to_owned());
    }

    /// Counts a batch held for metadata.
    pub fn count_wait(&self) {
        self.waited.inc();
    }

    /// Why container `id`'s metadata is missing now.
    fn why_missing(&self) -> Undecorated {
        match self.table() {
            None => Undecorated::NoMetadata,
            Some(t) if !t.snapshot().synced || !t.snapshot().connected => Undecorated::ApiUnreachable,
            Some(_) => Undecorated::UnknownContainer,
        }
    }

    /// Counts `n` spans that went out without their pod's metadata.
    pub fn count_undecorated(&self, why: Undecorated, n: u64) {
        self.undecorated[why as usize].add(n);
    }

    /// Counts a span dropped by the selection.
    pub fn count_unselected(&self, why: Unselected) {
        self.unselected[why as usize].add(1);
    }

    /// The resource of a process of container `id` (`base`: what the
    /// process and the rules say; `explicit_name`: its `service.name` came
    /// from a rule or the process's own environment, which win), whether
    /// its spans are selected, and what became of it.
    pub fn decorate(&self, base: ServiceResource, id: &str, explicit_name: bool) -> (ServiceResource, Result<(), Unselected>, Outcome) {
        let view = self.table().and_then(|t| t.lookup(id));
        let selected = self.selection.judge(view.as_ref());
        match view {
            Some(v) => (decorate(base, &v, explicit_name), selected, Outcome::Decorated),
            None => (base, selected, Outcome::Undecorated(self.why_missing())),
        }
    }

    /// Whether a process outside any container is selected.
    pub fn judge_host(&self) -> Result<(), Unselected> {
        self.selection.judge(None)
    }
}

/// `base` with `view`'s pod's and container's attributes: `service.name`
/// the pod's unless the process's or a rule's (`explicit_name`),
/// `service.instance.id` the container's (the conventions'
/// `<namespace>.<pod>.<container>`, or the pod's annotation), what the
/// process set in `OTEL_RESOURCE_ATTRIBUTES` before the pod's values,
/// except `k8s.*`, which only Kubernetes says.
pub fn decorate(mut base: ServiceResource, view: &ContainerView<'_>, explicit_name: bool) -> ServiceResource {
    let mut attrs: Vec<(String, String)> = Vec::with_capacity(base.extra.len() + 16);
    for (k, v) in view.resource() {
        match k {
            "service.name" if !explicit_name => base.service_name = v.to_owned(),
            "service.instance.id" => base.service_instance_id = v.to_owned(),
            "service.name" => {}
            _ if k.starts_with("k8s.") => attrs.push((k.to_owned(), v.to_owned())),
            _ => {}
        }
    }
    attrs.extend(base.extra.drain(..).filter(|(k, _)| !k.starts_with("k8s.")));
    for (k, v) in view.resource() {
        if !matches!(k, "service.name" | "service.instance.id") && !k.starts_with("k8s.") && !attrs.iter().any(|(a, _)| a == k) {
            attrs.push((k.to_owned(), v.to_owned()));
        }
    }
    base.extra = attrs;
    base
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::k8s::{Container, Owner, Pod, Snapshot};

    const ID: &str = "3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a";

    fn pair(k: &str, v: &str) -> (String, String) {
        (k.to_owned(), v.to_owned())
    }

    fn pod(ns: &str, labels: Vec<(String, String)>) -> Pod {
        Pod {
            uid: "u-1".into(),
            namespace: ns.into(),
            name: "web-1".into(),
            owners: vec![Owner { kind: "StatefulSet".into(), name: "web".into() }],
            labels,
            annotations: vec![],
            resource: vec![
                pair("k8s.namespace.name", ns),
                pair("k8s.pod.name", "web-1"),
                pair("k8s.statefulset.name", "web"),
                pair("service.name", "web"),
                pair("service.namespace", ns),
                pair("deployment.environment.name", "prod"),
            ],
            containers: vec![Container {
                id: ID.into(),
                name: "app".into(),
                image: "web:1".into(),
                resource: vec![pair("k8s.container.name", "app"), pair("service.instance.id", &format!("{ns}.web-1.app"))],
            }],
        }
    }

    fn base() -> ServiceResource {
        ServiceResource {
            service_name: "python3".into(),
            service_instance_id: "h:7".into(),
            host_name: "h".into(),
            pid: 7,
            executable_name: "python3".into(),
            extra: vec![pair("k8s.namespace.name", "kube-system"), pair("deployment.environment.name", "dev"), pair("container.id", ID)],
        }
    }

    #[test]
    fn the_pod_s_attributes_the_process_s_own_first_but_never_its_k8s_claims() {
        let mut s = Snapshot::empty(Stamp { instance: 1, generation: 1 }, "n".into());
        s.pods.push(pod("shop", vec![]));
        let t = Table::new(s);
        let v = t.lookup(ID).unwrap();
        let r = decorate(base(), &v, false);
        assert_eq!(r.service_name, "web");
        assert_eq!(r.service_instance_id, "shop.web-1.app");
        assert_eq!(
            r.extra,
            vec![
                pair("k8s.namespace.name", "shop"),
                pair("k8s.pod.name", "web-1"),
                pair("k8s.statefulset.name", "web"),
                pair("k8s.container.name", "app"),
                pair("deployment.environment.name", "dev"),
                pair("container.id", ID),
                pair("service.namespace", "shop"),
            ]
        );
        assert_eq!(decorate(base(), &v, true).service_name, "python3", "the process's OTEL_SERVICE_NAME or a rule wins");
    }

    #[test]
    fn selection_includes_excludes_and_pods_unknown() {
        let mut s = Snapshot::empty(Stamp { instance: 1, generation: 1 }, "n".into());
        s.pods.push(pod("shop", vec![pair("tier", "front"), pair("app", "web")]));
        let t = Table::new(s);
        let v = t.lookup(ID);
        let rules = |f: &dyn Fn(&mut DiscoverySettings)| {
            let mut d = DiscoverySettings::default();
            f(&mut d);
            Selection::new(&d)
        };
        assert_eq!(rules(&|_| {}).judge(v.as_ref()), Ok(()));
        assert_eq!(rules(&|_| {}).judge(None), Ok(()));
        assert_eq!(rules(&|d| d.k8s_namespaces = vec!["shop".into()]).judge(v.as_ref()), Ok(()));
        assert_eq!(rules(&|d| d.k8s_namespaces = vec!["other".into()]).judge(v.as_ref()), Err(Unselected::NotSelected));
        assert_eq!(rules(&|d| d.k8s_namespaces = vec!["shop".into()]).judge(None), Err(Unselected::PodUnknown));
        assert_eq!(rules(&|d| d.k8s_pod_labels = vec!["tier=front,app".into()]).judge(v.as_ref()), Ok(()));
        assert_eq!(rules(&|d| d.k8s_pod_labels = vec!["tier=back".into()]).judge(v.as_ref()), Err(Unselected::NotSelected));
        assert_eq!(rules(&|d| d.k8s_owners = vec!["web".into()]).judge(v.as_ref()), Ok(()));
        assert_eq!(rules(&|d| d.k8s_containers = vec!["sidecar".into()]).judge(v.as_ref()), Err(Unselected::NotSelected));
        assert_eq!(
            rules(&|d| {
                d.k8s_namespaces = vec!["shop".into()];
                d.k8s_exclude_pod_labels = vec!["app=web".into()];
            })
            .judge(v.as_ref()),
            Err(Unselected::Excluded)
        );
        assert_eq!(rules(&|d| d.k8s_exclude_namespaces = vec!["shop".into()]).judge(v.as_ref()), Err(Unselected::Excluded));
        assert_eq!(
            rules(&|d| d.k8s_exclude_namespaces = vec!["kube-system".into()]).judge(None),
            Ok(()),
            "exclusions only drop known pods"
        );
    }
}
