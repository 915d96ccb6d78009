//! Kubernetes metadata: the k8s-actor against the stand-in API server
//! (`tests/fixtures/kube_apiserver.py`: the real list/watch protocol, Pod
//! and Job objects as a cluster returns them), alone (no eBPF), and under
//! the supervisor (started only when on, restarted alone, unprivileged).
//!
//! What is checked is the snapshot the span-actor will read, exactly:
//! every container's resource attributes, through the reader it will use.

use std::time::Duration;

use ipc_schema::k8s::Table;
use ipc_schema::HealthReport;
use ringtail_tests::kube::{container, Actor, StandIn};
use ringtail_tests::*;
use runtime_kit::k8s::{read_health, SnapshotReader};
use serde_json::json;

const NODE: &str = "node-1";

fn id(n: u32) -> String {
    ringtail_tests::cgroups::container_id(n)
}

/// The table once `pred` holds for it (the actor writes within ~100 ms of
/// a change; the deadline covers its back-off after an outage).
fn table_when(actor: &Actor, timeout: Duration, what: &str, pred: impl Fn(&Table) -> bool) -> Table {
    let mut reader = SnapshotReader::new(&actor.runtime_dir());
    let found = wait_until(timeout, || {
        let _ = reader.refresh();
        reader.table().filter(|t| pred(t)).map(|t| (**t).clone())
    });
    found.unwrap_or_else(|| {
        panic!("the snapshot never showed {what}; last: {:#?}\nactor log:\n{}", reader.table().map(|t| t.snapshot()), actor.log())
    })
}

fn attrs(t: &Table, container: &str) -> Vec<(String, String)> {
    let v = t.lookup(container).unwrap_or_else(|| panic!("container {container} not in {:#?}", t.snapshot()));
    v.resource().map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

fn attr(t: &Table, container: &str, key: &str) -> Option<String> {
    t.lookup(container)?.resource().find(|(k, _)| *k == key).map(|(_, v)| v.to_owned())
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The value of the point `name` whose labels include `labels`.
fn point(h: &HealthReport, name: &str, labels: &[(&str, &str)]) -> f64 {
    h.points
        .iter()
        .filter(|p| p.name == name && labels.iter().all(|(k, v)| p.labels.iter().any(|(a, b)| a == k && b == v)))
        .map(|p| p.value)
        .sum()
}

fn health_when(actor: &Actor, what: &str, pred: impl Fn(&HealthReport) -> bool) -> HealthReport {
    wait_until(Duration::from_secs(20), || read_health(&actor.runtime_dir()).ok().flatten().filter(|h| pred(h)))
        .unwrap_or_else(|| panic!("the health never showed {what}: {:#?}\n{}", read_health(&actor.runtime_dir()), actor.log()))
}

fn uid_of(obj: &serde_json::Value) -> String {
    obj["metadata"]["uid"].as_str().expect("uid").to_owned()
}

fn settings(api: &StandIn, extra: &str) -> String {
    format!("kubeconfig = \"{}\"\nnode_name = \"{NODE}\"\n{extra}", api.kubeconfig().display())
}

#[test]
fn the_node_s_pods_are_published_with_their_owners_and_the_conventions_attributes() {
    let mut api = StandIn::new();
    api.start();
    let deploy = api.pod(json!({
        "namespace": "shop", "name": "checkout-7d9f8c6b5-x2x4q", "node": NODE,
        "owner": {"kind": "ReplicaSet", "name": "checkout-7d9f8c6b5"},
        "labels": {"app.kubernetes.io/name": "checkout-app", "app.kubernetes.io/version": "9.9", "pod-template-hash": "7d9f8c6b5"},
        "annotations": {"resource.opentelemetry.io/deployment.environment.name": "prod", "kubectl.kubernetes.io/restartedAt": "2026-11-30T10:00:00Z"},
        "containers": [
            {"name": "migrate", "id": id(2), "image": "registry.example/shop/migrate:3", "init": true},
            container("app", &id(1), "registry.example:5000/shop/checkout:1.4.2"),
        ]
    }));
    let sts = api.pod(json!({
        "namespace": "shop", "name": "db-0", "node": NODE, "owner": {"kind": "StatefulSet", "name": "db"},
        "containers": [container("postgres", &id(3), "postgres@sha256:0f3c")]
    }));
    let ds = api.pod(json!({
        "namespace": "kube-system", "name": "node-agent-x7k2p", "node": NODE, "owner": {"kind": "DaemonSet", "name": "node-agent"},
        "containers": [{"name": "agent", "id": id(4), "image": "agent", "runtime": "cri-o"}]
    }));
    api.job("batch", "report-29061720", Some("report"));
    let cron = api.pod(json!({
        "namespace": "batch", "name": "report-29061720-kq7ds", "node": NODE, "owner": {"kind": "Job", "name": "report-29061720"},
        "containers": [{"name": "report", "id": id(5), "image": "report:2", "runtime": "docker"}]
    }));
    let bare = api.pod(json!({
        "namespace": "default", "name": "debug", "node": NODE,
        "annotations": {"resource.opentelemetry.io/service.name": "debug-shell", "resource.opentelemetry.io/k8s.namespace.name": "kube-system"},
        "containers": [container("shell", &id(6), "busybox")]
    }));
    api.pod(json!({"namespace": "shop", "name": "elsewhere", "node": "node-2", "containers": [container("app", &id(7), "x:1")]}));
    let actor = Actor::start(&settings(&api, ""), &[]);
    let t = table_when(&actor, Duration::from_secs(30), "five pods and their CronJob", |t| {
        t.snapshot().synced && t.snapshot().pods.len() == 5 && attr(t, &id(5), "k8s.cronjob.name").is_some()
    });
    let s = t.snapshot();
    assert!(s.connected && s.node == NODE);
    let deploy_uid = uid_of(&deploy);
    let pod_attrs = |uid: &str, ns: &str, name: &str| {
        vec![
            ("k8s.namespace.name".to_owned(), ns.to_owned()),
            ("k8s.pod.name".to_owned(), name.to_owned()),
            ("k8s.pod.uid".to_owned(), uid.to_owned()),
            ("k8s.node.name".to_owned(), NODE.to_owned()),
        ]
    };
    let mut want = pod_attrs(&deploy_uid, "shop", "checkout-7d9f8c6b5-x2x4q");
    want.extend(pairs(&[
        ("k8s.replicaset.name", "checkout-7d9f8c6b5"),
        ("k8s.deployment.name", "checkout"),
        ("service.name", "checkout"),
        ("service.namespace", "shop"),
        ("deployment.environment.name", "prod"),
        ("k8s.container.name", "app"),
        ("service.instance.id", "shop.checkout-7d9f8c6b5-x2x4q.app"),
        ("service.version", "1.4.2"),
    ]));
    assert_eq!(attrs(&t, &id(1)), want, "Deployment via its ReplicaSet; labels are opt-in, so not the service's name");
    let init = attrs(&t, &id(2));
    assert_eq!(
        &init[init.len() - 3..],
        pairs(&[
            ("k8s.container.name", "migrate"),
            ("service.instance.id", "shop.checkout-7d9f8c6b5-x2x4q.migrate"),
            ("service.version", "3")
        ])
    );
    let pod = t.lookup(&id(1)).unwrap().pod;
    assert_eq!(
        pod.labels,
        pairs(&[("app.kubernetes.io/name", "checkout-app"), ("app.kubernetes.io/version", "9.9"), ("pod-template-hash", "7d9f8c6b5")])
    );
    assert_eq!(pod.annotations, pairs(&[("deployment.environment.name", "prod")]), "only resource.opentelemetry.io/ annotations");

    let mut want = pod_attrs(&uid_of(&sts), "shop", "db-0");
    want.extend(pairs(&[
        ("k8s.statefulset.name", "db"),
        ("service.name", "db"),
        ("service.namespace", "shop"),
        ("k8s.container.name", "postgres"),
        ("service.instance.id", "shop.db-0.postgres"),
        ("service.version", "sha256:0f3c"),
    ]));
    assert_eq!(attrs(&t, &id(3)), want, "StatefulSet");
    let mut want = pod_attrs(&uid_of(&ds), "kube-system", "node-agent-x7k2p");
    want.extend(pairs(&[
        ("k8s.daemonset.name", "node-agent"),
        ("service.name", "node-agent"),
        ("service.namespace", "kube-system"),
        ("k8s.container.name", "agent"),
        ("service.instance.id", "kube-system.node-agent-x7k2p.agent"),
    ]));
    assert_eq!(attrs(&t, &id(4)), want, "DaemonSet, a CRI-O container id");
    let mut want = pod_attrs(&uid_of(&cron), "batch", "report-29061720-kq7ds");
    want.extend(pairs(&[
        ("k8s.job.name", "report-29061720"),
        ("k8s.cronjob.name", "report"),
        ("service.name", "report"),
        ("service.namespace", "batch"),
        ("k8s.container.name", "report"),
        ("service.instance.id", "batch.report-29061720-kq7ds.report"),
        ("service.version", "2"),
    ]));
    assert_eq!(attrs(&t, &id(5)), want, "CronJob via its Job, a Docker container id");
    let mut want = pod_attrs(&uid_of(&bare), "default", "debug");
    want.extend(pairs(&[
        ("service.name", "debug-shell"),
        ("service.namespace", "default"),
        ("k8s.container.name", "shell"),
        ("service.instance.id", "default.debug.shell"),
    ]));
    assert_eq!(attrs(&t, &id(6)), want, "a bare pod named by its annotation, which cannot pose as another namespace");
    assert!(t.lookup(&id(7)).is_none(), "another node's pod");
    let owners: Vec<(&str, &str)> = t.lookup(&id(5)).unwrap().pod.owners.iter().map(|o| (o.kind.as_str(), o.name.as_str())).collect();
    assert_eq!(owners, [("Job", "report-29061720"), ("CronJob", "report")]);

    // What the API server saw: this node's pods only, one list, one GET of
    // the Job, the token.
    let requests = api.requests();
    let pods: Vec<_> = requests.iter().filter(|r| r["path"] == "/api/v1/pods").collect();
    assert!(pods.iter().all(|r| r["query"]["fieldSelector"] == format!("spec.nodeName={NODE}")), "{pods:?}");
    assert_eq!(pods.iter().filter(|r| r["query"]["watch"].is_null()).count(), 1, "one list: {pods:?}");
    assert!(pods.iter().any(|r| r["query"]["watch"] == "true"), "then a watch: {pods:?}");
    let jobs: Vec<_> = requests.iter().filter(|r| r["path"].as_str().is_some_and(|p| p.contains("/jobs/"))).collect();
    assert_eq!(jobs.len(), 1, "the Job is read once: {jobs:?}");
    assert_eq!(jobs[0]["path"], "/apis/batch/v1/namespaces/batch/jobs/report-29061720");
    let h = health_when(&actor, "the counts", |h| point(h, "ringtail_k8s_pods", &[]) == 5.0);
    assert_eq!(point(&h, "ringtail_k8s_containers", &[]), 6.0);
    assert_eq!(
        point(&h, "ringtail_k8s_events_total", &[("type", "listed")]) + point(&h, "ringtail_k8s_events_total", &[("type", "applied")]),
        5.0
    );
    assert_eq!(point(&h, "ringtail_k8s_job_lookups_total", &[("result", "cronjob")]), 1.0);
    assert_eq!(point(&h, "ringtail_k8s_metadata_dropped_total", &[("reason", "annotation_reserved")]), 1.0);
    assert_eq!(point(&h, "ringtail_k8s_api_reachable", &[]), 1.0);
    assert!(point(&h, "ringtail_k8s_snapshot_writes_total", &[]) >= 2.0);
}

#[test]
fn label_and_annotation_changes_deletions_and_restarts_follow_and_nothing_stale_stays() {
    let mut api = StandIn::new();
    api.start();
    let pod = |annotations: serde_json::Value, c: &str| {
        json!({
            "namespace": "shop", "name": "web-0", "node": NODE, "owner": {"kind": "StatefulSet", "name": "web"},
            "labels": {"app.kubernetes.io/name": "storefront"}, "annotations": annotations,
            "containers": [container("app", c, "web:1")]
        })
    };
    let first = api.pod(pod(json!({}), &id(10)));
    let actor = Actor::start(&settings(&api, "deleted_grace = \"3s\"\nwell_known_labels = true"), &[]);
    let t = table_when(&actor, Duration::from_secs(30), "web-0", |t| t.lookup(&id(10)).is_some());
    assert_eq!(attr(&t, &id(10), "service.name").as_deref(), Some("storefront"), "the label, opted in");

    api.pod(pod(json!({"resource.opentelemetry.io/service.name": "shop-web", "resource.opentelemetry.io/team": "payments"}), &id(10)));
    let t =
        table_when(&actor, Duration::from_secs(10), "the annotation", |t| attr(t, &id(10), "service.name").as_deref() == Some("shop-web"));
    assert_eq!(attr(&t, &id(10), "team").as_deref(), Some("payments"));
    api.pod(pod(json!({}), &id(10)));
    let t = table_when(&actor, Duration::from_secs(10), "the annotation removed", |t| {
        attr(t, &id(10), "service.name").as_deref() == Some("storefront")
    });
    assert_eq!(attr(&t, &id(10), "team"), None);

    // The container restarts: a new id, the same pod.
    api.pod(pod(json!({}), &id(11)));
    let t = table_when(&actor, Duration::from_secs(10), "the new container id", |t| t.lookup(&id(11)).is_some());
    assert_eq!(attr(&t, &id(11), "k8s.pod.uid"), Some(uid_of(&first)));
    assert!(t.lookup(&id(10)).is_some(), "the old id stays its grace period (spans in flight)");
    table_when(&actor, Duration::from_secs(10), "the old id gone after its grace", |t| {
        t.lookup(&id(10)).is_none() && t.lookup(&id(11)).is_some()
    });

    // Deleted, then a pod of the same name (a StatefulSet's replacement):
    // new uid, new container.
    api.delete("shop", "web-0");
    let h = health_when(&actor, "the delete", |h| point(h, "ringtail_k8s_events_total", &[("type", "deleted")]) == 1.0);
    assert_eq!(point(&h, "ringtail_k8s_events_total", &[("type", "deleted")]), 1.0);
    let t = table_when(&actor, Duration::from_secs(5), "the deleted pod, still", |t| t.lookup(&id(11)).is_some());
    assert_eq!(attr(&t, &id(11), "k8s.pod.uid"), Some(uid_of(&first)));
    let mut again = pod(json!({}), &id(12));
    again["uid"] = json!("0b7c2d3e-0000-4000-8000-00000000beef");
    api.pod(again);
    let t = table_when(&actor, Duration::from_secs(10), "the deleted pod gone, its successor there", |t| {
        t.lookup(&id(11)).is_none() && t.lookup(&id(12)).is_some()
    });
    assert_eq!(attr(&t, &id(12), "k8s.pod.uid").as_deref(), Some("0b7c2d3e-0000-4000-8000-00000000beef"));
    assert_eq!(t.snapshot().pods.len(), 1);
}

#[test]
fn the_api_server_down_at_start_and_mid_run_the_actor_stays_up_counts_and_catches_up() {
    let mut api = StandIn::new();
    let mut actor = Actor::start(&settings(&api, "deleted_grace = \"1s\""), &[]);
    // Down at start: an empty table that says so, ready all the same.
    let t = table_when(&actor, Duration::from_secs(20), "an unsynced table", |t| !t.snapshot().synced);
    assert!(!t.snapshot().connected && t.snapshot().pods.is_empty());
    let h = health_when(&actor, "failed lists", |h| point(h, "ringtail_k8s_watch_errors_total", &[("reason", "list")]) >= 1.0);
    assert_eq!(point(&h, "ringtail_k8s_api_reachable", &[]), 0.0);
    assert!(actor.log().contains("event=\"ready\""), "ready without the API server:\n{}", actor.log());

    api.start();
    api.pod(json!({"namespace": "shop", "name": "a", "node": NODE, "containers": [container("app", &id(20), "a:1")]}));
    api.pod(json!({"namespace": "shop", "name": "b", "node": NODE, "containers": [container("app", &id(21), "b:1")]}));
    table_when(&actor, Duration::from_secs(60), "both pods once the API server is up", |t| {
        t.snapshot().synced && t.snapshot().connected && t.lookup(&id(20)).is_some() && t.lookup(&id(21)).is_some()
    });

    // Down mid-run: the table stays (and says it is not current).
    api.kill();
    let t = table_when(&actor, Duration::from_secs(30), "the watch down", |t| !t.snapshot().connected);
    assert!(t.lookup(&id(20)).is_some() && t.lookup(&id(21)).is_some(), "what was known stays");
    assert!(actor.proc.child.try_wait().unwrap().is_none(), "the actor stays up:\n{}", actor.log());
    // Meanwhile b is deleted; the restarted server has no history of it,
    // so the actor must relist to learn.
    api.edit_state(|s| {
        s["pods"].as_object_mut().unwrap().remove("shop/b");
    });
    api.start();
    table_when(&actor, Duration::from_secs(60), "b gone after the relist, a kept", |t| {
        t.snapshot().connected && t.lookup(&id(20)).is_some() && t.lookup(&id(21)).is_none()
    });
    api.pod(json!({"namespace": "shop", "name": "c", "node": NODE, "containers": [container("app", &id(22), "c:1")]}));
    table_when(&actor, Duration::from_secs(20), "a pod added after the outage", |t| t.lookup(&id(22)).is_some());
    let h = health_when(&actor, "a reconnect", |h| point(h, "ringtail_k8s_reconnects_total", &[]) >= 1.0);
    assert!(point(&h, "ringtail_k8s_relists_total", &[]) >= 2.0, "{h:#?}");
    assert_eq!(point(&h, "ringtail_k8s_api_reachable", &[]), 1.0);
    assert!(actor.proc.stop(Duration::from_secs(10)), "an orderly stop");
}

#[test]
fn an_expired_watch_relists_and_events_keep_coming() {
    let mut api = StandIn::new();
    api.start();
    api.pod(json!({"namespace": "shop", "name": "a", "node": NODE, "containers": [container("app", &id(30), "a:1")]}));
    let actor = Actor::start(&settings(&api, ""), &[]);
    table_when(&actor, Duration::from_secs(30), "a", |t| t.lookup(&id(30)).is_some());
    health_when(&actor, "the first list", |h| point(h, "ringtail_k8s_relists_total", &[]) == 1.0);
    api.expire();
    let h = health_when(&actor, "a relist after 410 Gone", |h| point(h, "ringtail_k8s_relists_total", &[]) >= 2.0);
    assert!(point(&h, "ringtail_k8s_watch_errors_total", &[("reason", "api_status")]) >= 1.0, "{h:#?}");
    api.pod(json!({"namespace": "shop", "name": "b", "node": NODE, "containers": [container("app", &id(31), "b:1")]}));
    table_when(&actor, Duration::from_secs(30), "b after the relist", |t| t.lookup(&id(31)).is_some() && t.lookup(&id(30)).is_some());
}

#[test]
fn off_it_publishes_nothing_and_removes_what_an_earlier_run_left() {
    let dir = TempDir::new("k8soff");
    let run = dir.join("run");
    let k8s = ipc_schema::endpoints::k8s_dir(&run);
    std::fs::create_dir_all(&k8s).unwrap();
    for f in [ipc_schema::endpoints::k8s_snapshot(&run), ipc_schema::endpoints::k8s_health(&run)] {
        std::fs::write(f, b"an earlier run's").unwrap();
    }
    // auto, outside a cluster, no kubeconfig: off.
    let mut actor = Actor::start_in(dir, "enabled = \"auto\"", &[]);
    let status = wait_until(Duration::from_secs(20), || actor.proc.child.try_wait().ok().flatten()).expect("it exits");
    assert!(status.success(), "{status}: {}", actor.log());
    assert!(actor.log().contains("event=\"disabled\""), "{}", actor.log());
    assert_eq!(std::fs::read_dir(&k8s).unwrap().count(), 0, "an earlier run's metadata is not taken for this node's");
}

fn status_field(pid: u32, name: &str) -> String {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    st.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_owned()).unwrap_or_else(|| panic!("{name} missing"))
}

#[test]
fn the_supervisor_starts_it_only_when_on_restarts_it_alone_and_it_runs_unprivileged() {
    use std::os::unix::fs::MetadataExt;
    if !can_trace() {
        return;
    }
    // auto, outside a cluster: no k8s-actor at all.
    let rt = Ringtail::start("[discovery]\nopen_ports = [1]\n");
    assert!(rt.events("k8s-actor", "started").is_empty(), "started while off:\n{}", rt.log());
    assert!(rt.log().contains("event=\"k8s_off\""), "{}", rt.log());
    drop(rt);

    let mut api = StandIn::new();
    api.start();
    api.pod(json!({"namespace": "shop", "name": "web-0", "node": NODE, "owner": {"kind": "StatefulSet", "name": "web"}, "containers": [container("app", &id(40), "web:1")]}));
    let rt = Ringtail::start(&format!(
        "[discovery]\nopen_ports = [1]\n[kubernetes]\nkubeconfig = \"{}\"\nnode_name = \"{NODE}\"\n",
        api.kubeconfig().display()
    ));
    let pid = rt.pid("k8s-actor").unwrap_or_else(|| panic!("no k8s-actor:\n{}", rt.log()));
    for uid in status_field(pid, "Uid:").split_whitespace() {
        assert_ne!(uid, "0", "the k8s-actor runs as root");
    }
    for g in status_field(pid, "Gid:").split_whitespace() {
        assert_ne!(g, "0", "the k8s-actor has gid 0");
    }
    for cap in ["CapEff:", "CapPrm:", "CapBnd:", "CapAmb:"] {
        assert_eq!(status_field(pid, cap), "0000000000000000", "{cap}");
    }
    assert_eq!(status_field(pid, "NoNewPrivs:"), "1");
    // Its own user (actors.k8s_user), neither the actors' uid nor group,
    // and no other group: it alone may read the cluster credentials.
    let (k8s_uid, k8s_gid) = k8s_actor_ids().expect("the harness makes ringtail-k8s");
    let span_actor = rt.pid("span-actor").expect("span-actor pid");
    let actors_uid: u32 = status_field(span_actor, "Uid:").split_whitespace().next().unwrap().parse().unwrap();
    let actors_gid: u32 = status_field(span_actor, "Gid:").split_whitespace().next().unwrap().parse().unwrap();
    assert_eq!(status_field(pid, "Uid:"), format!("{k8s_uid}\t{k8s_uid}\t{k8s_uid}\t{k8s_uid}"));
    assert_eq!(status_field(pid, "Gid:"), format!("{k8s_gid}\t{k8s_gid}\t{k8s_gid}\t{k8s_gid}"));
    assert_eq!(status_field(pid, "Groups:"), k8s_gid.to_string());
    assert!(k8s_uid != actors_uid && k8s_gid != actors_gid, "the k8s-actor shares the actors' user or group");
    // The kubeconfig is its alone; the span-actor cannot read it.
    let kubeconfig = std::fs::metadata(api.kubeconfig()).unwrap();
    assert_eq!((kubeconfig.uid(), kubeconfig.mode() & 0o777), (k8s_uid, 0o600));

    // Its snapshot: written by its uid in the directory the supervisor
    // gave it (its uid, the actors' group, 2750), readable by the actors'
    // group, with the node's pod.
    let run = rt.dir.join("run");
    let path = ipc_schema::endpoints::k8s_snapshot(&run);
    let snapshot = || std::fs::read(&path).ok().and_then(|b| ipc_schema::k8s::decode(&b).ok());
    let s = wait_until(Duration::from_secs(30), || snapshot().filter(|s| s.synced && !s.pods.is_empty()))
        .unwrap_or_else(|| panic!("no snapshot with the pod:\n{}", rt.log()));
    assert_eq!(Table::new(s.clone()).lookup(&id(40)).map(|v| v.pod.name.clone()).as_deref(), Some("web-0"));
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!((meta.uid(), meta.gid(), meta.mode() & 0o777), (k8s_uid, actors_gid, 0o640));
    let dir = std::fs::metadata(ipc_schema::endpoints::k8s_dir(&run)).unwrap();
    assert_eq!((dir.uid(), dir.gid(), dir.mode() & 0o7777), (k8s_uid, actors_gid, 0o2750));

    // kill -9: it alone comes back, and publishes a new instance's table.
    let others: Vec<(&str, u32)> = ["probe-loader", "span-actor", "exporter-actor"].into_iter().map(|c| (c, rt.pid(c).unwrap())).collect();
    let readies = rt.events("k8s-actor", "ready").len();
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    wait_until(Duration::from_secs(10), || (rt.events("k8s-actor", "ready").len() > readies).then_some(()))
        .unwrap_or_else(|| panic!("the k8s-actor did not come back:\n{}", rt.log()));
    assert_ne!(rt.pid("k8s-actor"), Some(pid));
    for (c, p) in others {
        assert_eq!(rt.pid(c), Some(p), "{c} was restarted too");
    }
    wait_until(Duration::from_secs(30), || snapshot().filter(|n| n.stamp.instance != s.stamp.instance && n.synced && !n.pods.is_empty()))
        .unwrap_or_else(|| panic!("no table from the restarted k8s-actor:\n{}", rt.log()));
}
