//! The facts ringtail keeps of a Pod object the API server sent: its
//! identity, its controller, its labels, its `resource.opentelemetry.io/`
//! annotations, and its containers that have an id (each runtime's
//! `<runtime>://<id>`, the same 64 hex digits the loader reads from the
//! process's cgroups). Everything else of the object (spec, managed fields,
//! conditions…) is dropped as soon as it is read.
//!
//! The object is the API server's, not to be trusted with ringtail's
//! memory: every list and string is bounded (`ipc_schema::k8s`), and what
//! goes over a bound is left out and counted by the caller through
//! [`Left`].

use std::collections::BTreeMap;

use ipc_schema::k8s::{self, MAX_ANNOTATIONS, MAX_CONTAINERS_PER_POD, MAX_LABELS, MAX_TEXT};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

/// The annotation prefix the conventions turn into resource attributes.
pub const ANNOTATION_PREFIX: &str = "resource.opentelemetry.io/";

/// The label the Deployment controller puts on its ReplicaSets' pods, and
/// at the end of their names (`<deployment>-<hash>`).
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// A pod's controller, as its `ownerReferences` name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Controller {
    pub kind: String,
    pub name: String,
}

/// One container of the pod with its runtime id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerFacts {
    pub id: String,
    pub name: String,
    /// The image as the pod's spec names it (empty if not found).
    pub image: String,
}

/// What ringtail keeps of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// `spec.nodeName` (empty while unscheduled).
    pub node: String,
    pub controller: Option<Controller>,
    pub labels: BTreeMap<String, String>,
    /// `resource.opentelemetry.io/<attribute>` annotations, by attribute.
    pub annotations: BTreeMap<String, String>,
    pub containers: Vec<ContainerFacts>,
}

/// Why a Pod object was not kept at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No uid, name or namespace, or one longer than any Kubernetes name.
    Invalid,
}

/// What was left out of a kept pod, to be counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Left {
    /// Labels beyond [`MAX_LABELS`] or too long.
    pub labels: u64,
    /// Annotations beyond [`MAX_ANNOTATIONS`] or too long.
    pub annotations: u64,
    /// Containers beyond [`MAX_CONTAINERS_PER_POD`].
    pub containers: u64,
    /// Container ids of no known runtime's form (`<runtime>://<64 hex>`).
    pub container_ids: u64,
}

/// The id in a `containerStatuses[].containerID`: `containerd://<id>`,
/// `cri-o://<id>`, `docker://<id>` (or any other runtime's `<name>://`),
/// if the id is 64 lowercase hex digits.
pub fn container_id(status_id: &str) -> Option<&str> {
    let (runtime, id) = status_id.split_once("://")?;
    let named = !runtime.is_empty() && runtime.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    (named && k8s::is_container_id(id)).then_some(id)
}

fn text_ok(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_TEXT
}

impl PodFacts {
    /// Reads `pod`; `left` counts what was left out.
    pub fn from_pod(pod: &Pod, left: &mut Left) -> Result<PodFacts, Refused> {
        let meta = &pod.metadata;
        let field = |v: &Option<String>| v.as_deref().filter(|s| text_ok(s)).map(str::to_owned).ok_or(Refused::Invalid);
        let uid = field(&meta.uid)?;
        let namespace = field(&meta.namespace)?;
        let name = field(&meta.name)?;
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).filter(|n| n.len() <= MAX_TEXT).unwrap_or_default();
        let owners = meta.owner_references.as_deref().unwrap_or_default();
        let controller = owners
            .iter()
            .find(|o| o.controller == Some(true))
            .or_else(|| owners.first())
            .filter(|o| text_ok(&o.kind) && text_ok(&o.name))
            .map(|o| Controller { kind: o.kind.clone(), name: o.name.clone() });
        let mut labels = BTreeMap::new();
        for (k, v) in meta.labels.iter().flatten() {
            if labels.len() < MAX_LABELS && text_ok(k) && v.len() <= MAX_TEXT {
                labels.insert(k.clone(), v.clone());
            } else {
                left.labels += 1;
            }
        }
        let mut annotations = BTreeMap::new();
        for (k, v) in meta.annotations.iter().flatten() {
            let Some(attr) = k.strip_prefix(ANNOTATION_PREFIX) else {
                continue; // not ours: never kept
            };
            if annotations.len() < MAX_ANNOTATIONS && text_ok(attr) && text_ok(v) {
                annotations.insert(attr.to_owned(), v.clone());
            } else {
                left.annotations += 1;
            }
        }
        let spec = pod.spec.as_ref();
        let image_of = |container: &str| -> String {
            let regular = spec.into_iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()));
            let found = regular.filter(|c| c.name == container).find_map(|c| c.image.clone()).or_else(|| {
                spec.and_then(|s| s.ephemeral_containers.as_ref())
                    .and_then(|e| e.iter().filter(|c| c.name == container).find_map(|c| c.image.clone()))
            });
            found.filter(|i| i.len() <= MAX_TEXT).unwrap_or_default()
        };
        let status = pod.status.as_ref();
        let statuses: Vec<&ContainerStatus> = status
            .into_iter()
            .flat_map(|s| {
                s.init_container_statuses
                    .iter()
                    .flatten()
                    .chain(s.container_statuses.iter().flatten())
                    .chain(s.ephemeral_container_statuses.iter().flatten())
            })
            .collect();
        let mut containers = Vec::new();
        for cs in statuses {
            let Some(raw) = cs.container_id.as_deref().filter(|s| !s.is_empty()) else {
                continue; // not started yet: no id to find it by
            };
            let Some(id) = container_id(raw) else {
                left.container_ids += 1;
                continue;
            };
            if containers.len() >= MAX_CONTAINERS_PER_POD || !text_ok(&cs.name) {
                left.containers += 1;
                continue;
            }
            containers.push(ContainerFacts { id: id.to_owned(), name: cs.name.clone(), image: image_of(&cs.name) });
        }
        Ok(PodFacts { uid, namespace, name, node, controller, labels, annotations, containers })
    }

    /// The Deployment of a pod whose controller is a ReplicaSet: the
    /// Deployment controller names its ReplicaSets `<deployment>-<hash>`
    /// and labels their pods `pod-template-hash=<hash>`, so the name is
    /// exact when both agree (a ReplicaSet made by hand has no such label,
    /// and no Deployment).
    pub fn deployment(&self) -> Option<&str> {
        let rs = self.controller.as_ref().filter(|c| c.kind == "ReplicaSet")?;
        let hash = self.labels.get(POD_TEMPLATE_HASH).filter(|h| !h.is_empty())?;
        let base = rs.name.strip_suffix(hash.as_str())?.strip_suffix('-')?;
        (!base.is_empty()).then_some(base)
    }

    /// The Job of a pod whose controller is one (its CronJob, if any, is
    /// found by reading the Job).
    pub fn job(&self) -> Option<&str> {
        self.controller.as_ref().filter(|c| c.kind == "Job").map(|c| c.name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a";

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).expect("a Pod object")
    }

    #[test]
    fn each_runtime_s_container_id_form_gives_the_bare_id() {
        for runtime in ["containerd", "cri-o", "docker"] {
            assert_eq!(container_id(&format!("{runtime}://{ID}")), Some(ID), "{runtime}");
        }
        for bad in [
            ID.to_owned(),
            format!("containerd://{}", &ID[1..]),
            format!("containerd://{}", ID.to_uppercase()),
            format!("://{ID}"),
            format!("Docker://{ID}"),
        ] {
            assert_eq!(container_id(&bad), None, "{bad}");
        }
    }

    #[test]
    fn a_deployment_s_pod_keeps_what_matters_and_finds_its_deployment() {
        let p = pod(serde_json::json!({
            "metadata": {
                "name": "checkout-7d9f8c6b5-x2x4q", "namespace": "shop", "uid": "6f1d0b0e-3c1a-4b7e-9d0a-1f2e3d4c5b6a",
                "labels": {"app.kubernetes.io/name": "checkout", "pod-template-hash": "7d9f8c6b5"},
                "annotations": {"resource.opentelemetry.io/deployment.environment.name": "prod", "kubectl.kubernetes.io/restartedAt": "x"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "checkout-7d9f8c6b5", "uid": "u", "controller": true, "blockOwnerDeletion": true}]
            },
            "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "registry.example/checkout:1.4"}], "initContainers": [{"name": "migrate", "image": "registry.example/migrate:2"}]},
            "status": {
                "initContainerStatuses": [{"name": "migrate", "containerID": format!("containerd://{}", "a".repeat(64)), "image": "i", "imageID": "i", "ready": false, "restartCount": 0}],
                "containerStatuses": [{"name": "app", "containerID": format!("containerd://{ID}"), "image": "i", "imageID": "i", "ready": true, "restartCount": 0}]
            }
        }));
        let mut left = Left::default();
        let f = PodFacts::from_pod(&p, &mut left).unwrap();
        assert_eq!(left, Left::default());
        assert_eq!((f.namespace.as_str(), f.name.as_str(), f.node.as_str()), ("shop", "checkout-7d9f8c6b5-x2x4q", "node-1"));
        assert_eq!(f.controller, Some(Controller { kind: "ReplicaSet".into(), name: "checkout-7d9f8c6b5".into() }));
        assert_eq!(f.deployment(), Some("checkout"));
        assert_eq!(f.annotations.into_iter().collect::<Vec<_>>(), [("deployment.environment.name".to_owned(), "prod".to_owned())]);
        let c: Vec<(&str, &str, &str)> = f.containers.iter().map(|c| (c.id.as_str(), c.name.as_str(), c.image.as_str())).collect();
        assert_eq!(c, [(&*"a".repeat(64), "migrate", "registry.example/migrate:2"), (ID, "app", "registry.example/checkout:1.4")]);
    }

    #[test]
    fn a_replicaset_without_the_deployment_s_hash_has_no_deployment() {
        let mut f = PodFacts {
            uid: "u".into(),
            namespace: "n".into(),
            name: "p".into(),
            node: String::new(),
            controller: Some(Controller { kind: "ReplicaSet".into(), name: "web-abc12".into() }),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            containers: Vec::new(),
        };
        assert_eq!(f.deployment(), None, "no pod-template-hash: a ReplicaSet made by hand");
        f.labels.insert(POD_TEMPLATE_HASH.into(), "zzz".into());
        assert_eq!(f.deployment(), None, "a hash that is not the name's end");
        f.labels.insert(POD_TEMPLATE_HASH.into(), "abc12".into());
        assert_eq!(f.deployment(), Some("web"));
        f.controller = Some(Controller { kind: "ReplicaSet".into(), name: "-abc12".into() });
        assert_eq!(f.deployment(), None);
    }

    #[test]
    fn what_goes_over_a_bound_is_left_out_and_counted() {
        let labels: serde_json::Map<String, serde_json::Value> =
            (0..MAX_LABELS + 3).map(|i| (format!("l{i:03}"), serde_json::Value::from("v"))).collect();
        let mut annotations: serde_json::Map<String, serde_json::Value> =
            (0..MAX_ANNOTATIONS + 2).map(|i| (format!("{ANNOTATION_PREFIX}a{i:03}"), serde_json::Value::from("v"))).collect();
        annotations.insert(format!("{ANNOTATION_PREFIX}big"), "x".repeat(MAX_TEXT + 1).into());
        let statuses: Vec<serde_json::Value> = (0..MAX_CONTAINERS_PER_POD + 1)
            .map(|i| serde_json::json!({"name": format!("c{i}"), "containerID": format!("containerd://{:064x}", i), "image": "i", "imageID": "i", "ready": true, "restartCount": 0}))
            .chain([serde_json::json!({"name": "odd", "containerID": "rkt://1234", "image": "i", "imageID": "i", "ready": true, "restartCount": 0})])
            .chain([serde_json::json!({"name": "waiting", "image": "i", "imageID": "i", "ready": false, "restartCount": 0})])
            .collect();
        let p = pod(serde_json::json!({
            "metadata": {"name": "p", "namespace": "n", "uid": "u", "labels": labels, "annotations": annotations},
            "status": {"containerStatuses": statuses}
        }));
        let mut left = Left::default();
        let f = PodFacts::from_pod(&p, &mut left).unwrap();
        assert_eq!((f.labels.len(), f.annotations.len(), f.containers.len()), (MAX_LABELS, MAX_ANNOTATIONS, MAX_CONTAINERS_PER_POD));
        assert_eq!(left, Left { labels: 3, annotations: 3, containers: 1, container_ids: 1 });
    }

    #[test]
    fn a_pod_without_identity_is_refused() {
        for meta in [
            serde_json::json!({"name": "p", "namespace": "n"}),
            serde_json::json!({"uid": "u", "namespace": "n"}),
            serde_json::json!({"uid": "u", "name": "p"}),
        ] {
            let p = pod(serde_json::json!({ "metadata": meta }));
            assert_eq!(PodFacts::from_pod(&p, &mut Left::default()), Err(Refused::Invalid), "{meta}");
        }
    }
}
