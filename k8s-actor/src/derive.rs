//! From a pod's facts to resource attributes, as the OpenTelemetry
//! semantic conventions say (registry `k8s.*`, and the non-normative
//! "Specify resource attributes using Kubernetes annotations", which is
//! also how the OpenTelemetry Operator and the Collector's k8sattributes
//! processor do it). Pure: facts in, attributes out.
//!
//! Per pod:
//! - `k8s.namespace.name`, `k8s.pod.name`, `k8s.pod.uid`, `k8s.node.name`;
//! - the owners: `k8s.replicaset.name` and `k8s.deployment.name`,
//!   `k8s.statefulset.name`, `k8s.daemonset.name`, `k8s.job.name` and
//!   `k8s.cronjob.name`;
//! - `service.name`, the first found of: the annotation
//!   `resource.opentelemetry.io/service.name`, the labels
//!   `app.kubernetes.io/instance` then `app.kubernetes.io/name` (only with
//!   `kubernetes.well_known_labels`: the conventions make labels opt-in),
//!   the Deployment, ReplicaSet, StatefulSet, DaemonSet, CronJob, Job name,
//!   the pod's name (a pod always has one, so the conventions' last
//!   resort, the container's name, is never reached);
//! - `service.namespace`: the annotation, else the namespace;
//! - `service.version`: the annotation, else the label
//!   `app.kubernetes.io/version` (opt-in as above), else per container
//!   from its image (`<tag>@<digest>`, `<digest>` or `<tag>`);
//! - every other `resource.opentelemetry.io/<attribute>` annotation as
//!   `<attribute>`, except those naming what only Kubernetes or the kernel
//!   may say (`k8s.*`, `container.*`, `host.*`, `process.*`): a pod's
//!   author must not pass it off as another namespace's.
//!
//! Per container: `k8s.container.name`, `service.instance.id` (the
//! annotation, else `<namespace>.<pod>.<container>`), and
//! `service.version` from the image when the pod gave none.
//!
//! What the process itself sets (`OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`) wins over all of these: that is the
//! span-actor's to apply, as the conventions have it for values the
//! sender set.

use ipc_schema::k8s::{Owner, MAX_TEXT};

use crate::pod::{ContainerFacts, PodFacts};

/// The label the conventions take `service.name` from (opt-in).
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
/// …then this one, before it.
pub const LABEL_INSTANCE: &str = "app.kubernetes.io/instance";
/// The label the conventions take `service.version` from (opt-in).
pub const LABEL_VERSION: &str = "app.kubernetes.io/version";

/// How the derivation is configured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rules {
    /// `kubernetes.well_known_labels`.
    pub well_known_labels: bool,
}

/// The owners of a pod, top-down names per kind: its controller, and the
/// Deployment (by the ReplicaSet's name) or the CronJob (`cronjob`: read
/// from the Job by the caller) above it.
pub fn owners(pod: &PodFacts, cronjob: Option<&str>) -> Vec<Owner> {
    let Some(c) = &pod.controller else { return Vec::new() };
    let mut out = vec![Owner { kind: c.kind.clone(), name: c.name.clone() }];
    if let Some(d) = pod.deployment() {
        out.push(Owner { kind: "Deployment".into(), name: d.to_owned() });
    }
    if let (Some(cj), Some(_)) = (cronjob, pod.job()) {
        out.push(Owner { kind: "CronJob".into(), name: cj.to_owned() });
    }
    out
}

/// The `k8s.<kind>.name` attribute of an owner kind the conventions name.
fn owner_key(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "ReplicaSet" => "k8s.replicaset.name",
        "Deployment" => "k8s.deployment.name",
        "StatefulSet" => "k8s.statefulset.name",
        "DaemonSet" => "k8s.daemonset.name",
        "Job" => "k8s.job.name",
        "CronJob" => "k8s.cronjob.name",
        _ => return None,
    })
}

/// The conventions' order of owners for `service.name`: the ancestor
/// before the descendant.
const NAME_ORDER: [&str; 6] = ["Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "CronJob", "Job"];

/// Attribute prefixes an annotation may not set: facts only Kubernetes or
/// the kernel may state.
const RESERVED: [&str; 4] = ["k8s.", "container.", "host.", "process."];

/// Attributes derived here in their own order (not copied from annotations).
const DERIVED: [&str; 4] = ["service.name", "service.namespace", "service.version", "service.instance.id"];

/// True if an annotation may set `attr`.
pub fn annotation_allowed(attr: &str) -> bool {
    attr.bytes().all(|b| b.is_ascii_graphic()) && !RESERVED.iter().any(|p| attr.starts_with(p))
}

fn pair(k: &str, v: &str) -> (String, String) {
    (k.to_owned(), v.to_owned())
}

/// The resource attributes of every container of `pod` (see the module
/// doc), given its `owners` and the node; the number of annotations left
/// out as reserved is returned with them.
pub fn pod_resource(pod: &PodFacts, owners: &[Owner], node: &str, rules: Rules) -> (Vec<(String, String)>, u64) {
    let mut out = vec![
        pair("k8s.namespace.name", &pod.namespace),
        pair("k8s.pod.name", &pod.name),
        pair("k8s.pod.uid", &pod.uid),
        pair("k8s.node.name", node),
    ];
    for o in owners {
        if let Some(key) = owner_key(&o.kind) {
            out.push(pair(key, &o.name));
        }
    }
    let label = |k: &str| rules.well_known_labels.then(|| pod.labels.get(k)).flatten().filter(|v| !v.is_empty());
    let annotation = |k: &str| pod.annotations.get(k);
    let by_owner = NAME_ORDER.iter().find_map(|kind| owners.iter().find(|o| o.kind == *kind)).map(|o| &o.name);
    let name = annotation("service.name").or_else(|| label(LABEL_INSTANCE)).or_else(|| label(LABEL_NAME)).or(by_owner).unwrap_or(&pod.name);
    out.push(pair("service.name", name));
    out.push(pair("service.namespace", annotation("service.namespace").unwrap_or(&pod.namespace)));
    if let Some(v) = annotation("service.version").or_else(|| label(LABEL_VERSION)) {
        out.push(pair("service.version", v));
    }
    let mut reserved = 0;
    for (k, v) in &pod.annotations {
        if DERIVED.contains(&k.as_str()) {
            continue;
        }
        if annotation_allowed(k) {
            out.push(pair(k, v));
        } else {
            reserved += 1;
        }
    }
    (out, reserved)
}

/// The resource attributes of `c` on top of its pod's.
pub fn container_resource(pod: &PodFacts, c: &ContainerFacts, rules: Rules) -> Vec<(String, String)> {
    let mut out = vec![pair("k8s.container.name", &c.name)];
    let instance = match pod.annotations.get("service.instance.id") {
        Some(id) => id.clone(),
        None => format!("{}.{}.{}", pod.namespace, pod.name, c.name),
    };
    if instance.len() <= MAX_TEXT {
        out.push(("service.instance.id".to_owned(), instance));
    }
    let pod_has_version = pod.annotations.contains_key("service.version")
        || (rules.well_known_labels && pod.labels.get(LABEL_VERSION).is_some_and(|v| !v.is_empty()));
    if !pod_has_version {
        if let Some(v) = image_version(&c.image) {
            out.push(("service.version".to_owned(), v));
        }
    }
    out
}

/// `service.version` from an image reference as the conventions derive it
/// (tag and digest as the distribution/reference grammar splits them:
/// `[host[:port]/]path[:tag][@digest]`): `<tag>@<digest>`, else
/// `<digest>`, else `<tag>`; none for a bare name.
pub fn image_version(image: &str) -> Option<String> {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d).filter(|d| d.contains(':'))),
        None => (image, None),
    };
    // A ':' after the last '/' starts the tag (one before it is a port).
    let tag = name.rfind(':').filter(|&i| !name[i..].contains('/')).map(|i| &name[i + 1..]).filter(|t| !t.is_empty());
    match (tag, digest) {
        (Some(t), Some(d)) => Some(format!("{t}@{d}")),
        (None, Some(d)) => Some(d.to_owned()),
        (Some(t), None) => Some(t.to_owned()),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::Controller;

    fn pod(controller: Option<(&str, &str)>, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> PodFacts {
        PodFacts {
            uid: "uid-1".into(),
            namespace: "shop".into(),
            name: "web-0".into(),
            node: "node-1".into(),
            controller: controller.map(|(kind, name)| Controller { kind: kind.into(), name: name.into() }),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            annotations: annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            containers: Vec::new(),
        }
    }

    fn get<'a>(attrs: &'a [(String, String)], key: &str) -> Option<&'a str> {
        attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    fn resource(p: &PodFacts, cronjob: Option<&str>, rules: Rules) -> Vec<(String, String)> {
        pod_resource(p, &owners(p, cronjob), "node-1", rules).0
    }

    #[test]
    fn owners_give_their_k8s_names_and_the_service_name_top_down() {
        let labels = [("pod-template-hash", "7d9f8c6b5")];
        type Case<'a> = (Option<(&'a str, &'a str)>, &'a [(&'a str, &'a str)], Option<&'a str>, &'a [(&'a str, &'a str)], &'a str);
        let cases: [Case; 6] = [
            (
                Some(("ReplicaSet", "checkout-7d9f8c6b5")),
                &labels,
                None,
                &[("k8s.replicaset.name", "checkout-7d9f8c6b5"), ("k8s.deployment.name", "checkout")],
                "checkout",
            ),
            (Some(("ReplicaSet", "handmade")), &[], None, &[("k8s.replicaset.name", "handmade")], "handmade"),
            (Some(("StatefulSet", "db")), &[], None, &[("k8s.statefulset.name", "db")], "db"),
            (Some(("DaemonSet", "agent")), &[], None, &[("k8s.daemonset.name", "agent")], "agent"),
            (
                Some(("Job", "report-29061720")),
                &[],
                Some("report"),
                &[("k8s.job.name", "report-29061720"), ("k8s.cronjob.name", "report")],
                "report",
            ),
            (None, &[], None, &[], "web-0"),
        ];
        for (controller, labels, cronjob, want_owners, want_name) in cases {
            let p = pod(controller, labels, &[]);
            let r = resource(&p, cronjob, Rules::default());
            let owner_attrs: Vec<(&str, &str)> = r
                .iter()
                .filter(|(k, _)| k.ends_with("set.name") || k.ends_with("job.name") || k.ends_with("ment.name"))
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            assert_eq!(owner_attrs, want_owners, "{controller:?}");
            assert_eq!(get(&r, "service.name"), Some(want_name), "{controller:?}");
            assert_eq!(get(&r, "service.namespace"), Some("shop"));
            assert_eq!(
                &r[..4],
                &[
                    pair("k8s.namespace.name", "shop"),
                    pair("k8s.pod.name", "web-0"),
                    pair("k8s.pod.uid", "uid-1"),
                    pair("k8s.node.name", "node-1")
                ]
            );
        }
        let job_alone = pod(Some(("Job", "once")), &[], &[]);
        assert_eq!(get(&resource(&job_alone, None, Rules::default()), "service.name"), Some("once"), "a Job no CronJob made");
    }

    #[test]
    fn the_annotation_then_the_labels_if_opted_in_then_the_owner_name_the_service() {
        let labels = [(LABEL_NAME, "shop-web"), (LABEL_INSTANCE, "shop-web-eu"), (LABEL_VERSION, "2.1")];
        let p = pod(Some(("StatefulSet", "web")), &labels, &[]);
        let off = resource(&p, None, Rules::default());
        assert_eq!((get(&off, "service.name"), get(&off, "service.version")), (Some("web"), None), "labels are opt-in");
        let on = Rules { well_known_labels: true };
        let r = resource(&p, None, on);
        assert_eq!((get(&r, "service.name"), get(&r, "service.version")), (Some("shop-web-eu"), Some("2.1")), "instance before name");
        let only_name = pod(Some(("StatefulSet", "web")), &[(LABEL_NAME, "shop-web")], &[]);
        assert_eq!(get(&resource(&only_name, None, on), "service.name"), Some("shop-web"));
        let annotated = pod(
            Some(("StatefulSet", "web")),
            &labels,
            &[("service.name", "checkout"), ("service.namespace", "payments"), ("service.version", "3.0")],
        );
        let r = resource(&annotated, None, on);
        assert_eq!(
            (get(&r, "service.name"), get(&r, "service.namespace"), get(&r, "service.version")),
            (Some("checkout"), Some("payments"), Some("3.0"))
        );
        assert_eq!(r.iter().filter(|(k, _)| k.starts_with("service.")).count(), 3, "each once");
    }

    #[test]
    fn other_annotations_become_attributes_but_never_kubernetes_or_kernel_facts() {
        let p = pod(
            None,
            &[],
            &[
                ("deployment.environment.name", "prod"),
                ("k8s.namespace.name", "kube-system"),
                ("container.id", "forged"),
                ("host.name", "elsewhere"),
                ("process.pid", "1"),
                ("team", "payments"),
                ("bad key", "x"),
            ],
        );
        let (r, reserved) = pod_resource(&p, &[], "node-1", Rules::default());
        assert_eq!(reserved, 5);
        assert_eq!(get(&r, "k8s.namespace.name"), Some("shop"), "the API server's word stands");
        assert_eq!(get(&r, "deployment.environment.name"), Some("prod"));
        assert_eq!(get(&r, "team"), Some("payments"));
        for k in ["container.id", "host.name", "process.pid", "bad key"] {
            assert_eq!(get(&r, k), None, "{k}");
        }
        assert_eq!(r.iter().filter(|(k, _)| k == "k8s.namespace.name").count(), 1);
    }

    #[test]
    fn a_container_gets_its_name_its_instance_id_and_its_image_s_version() {
        let c = |name: &str, image: &str| ContainerFacts { id: "a".repeat(64), name: name.into(), image: image.into() };
        let p = pod(None, &[], &[]);
        let r = container_resource(&p, &c("app", "registry.example:5000/shop/web:1.4@sha256:abcd"), Rules::default());
        assert_eq!(
            r,
            [pair("k8s.container.name", "app"), pair("service.instance.id", "shop.web-0.app"), pair("service.version", "1.4@sha256:abcd")]
        );
        let versioned = pod(None, &[], &[("service.version", "3.0"), ("service.instance.id", "web-zero")]);
        let r = container_resource(&versioned, &c("app", "web:1.4"), Rules::default());
        assert_eq!(r, [pair("k8s.container.name", "app"), pair("service.instance.id", "web-zero")], "the pod's version stands");
        let labelled = pod(None, &[(LABEL_VERSION, "2")], &[]);
        assert_eq!(
            get(&container_resource(&labelled, &c("a", "web:1"), Rules::default()), "service.version"),
            Some("1"),
            "label ignored when off"
        );
        assert_eq!(get(&container_resource(&labelled, &c("a", "web:1"), Rules { well_known_labels: true }), "service.version"), None);
    }

    #[test]
    fn image_references_split_as_the_reference_grammar_does() {
        for (image, want) in [
            ("nginx", None),
            ("nginx:1.25", Some("1.25")),
            ("docker.io/library/nginx:1.25", Some("1.25")),
            ("localhost:5000/app", None),
            ("localhost:5000/app:v2", Some("v2")),
            ("app@sha256:0123", Some("sha256:0123")),
            ("app:v2@sha256:0123", Some("v2@sha256:0123")),
            ("app:", None),
            ("", None),
        ] {
            assert_eq!(image_version(image).as_deref(), want, "{image}");
        }
    }
}
