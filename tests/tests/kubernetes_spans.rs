//! Kubernetes metadata on real spans, end to end: the stand-in API server
//! (`tests/fixtures/kube_apiserver.py`), real servers put into the cgroups
//! kubelet + containerd make under cgroup v2
//! (`kubepods.slice/.../cri-containerd-<id>.scope`) before they exec, and a
//! real ringtail (loader, span-actor, k8s-actor, exporter to rotel). Exact
//! resource attributes on exact span counts: a pod's, a relabelled pod's, a
//! pod deleted and created again under its name with a new container (never
//! the old identity), the API server down at start then up (spans flow,
//! counted undecorated, then decorated; and down mid-run), a Deployment's
//! pod named by its annotation, and selection by namespace.

use std::process::Stdio;
use std::time::Duration;

use ringtail_tests::cgroups::{container_id, v2_root, Cgroup};
use ringtail_tests::kube::{container, StandIn};
use ringtail_tests::*;
use serde_json::{json, Value};

const NODE: &str = "node-1";
const WAIT: Duration = Duration::from_secs(40);

fn id(n: u32) -> String {
    container_id(std::process::id() * 16 + n)
}

/// The cgroup kubelet + containerd (systemd driver, cgroup v2) make for
/// container `cid` of the pod `uid`.
fn pod_cgroup(v2: &std::path::Path, uid: &str, cid: &str) -> Cgroup {
    let pod = format!("kubepods-burstable-pod{}.slice", uid.replace('-', "_"));
    Cgroup::make(v2, &format!("kubepods.slice/kubepods-burstable.slice/{pod}/cri-containerd-{cid}.scope"))
}

/// A python http.server in `cg` on `port`, with `env`.
fn server_in(cg: &Cgroup, port: u16, dir: &TempDir, env: &[(&str, &str)]) -> Proc {
    let mut cmd = cg.command("python3");
    cmd.args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1", "--directory", dir.0.to_str().expect("utf-8")])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let p = Proc::spawn("python in a pod", &mut cmd);
    assert!(wait_port(port, Duration::from_secs(10)), "python did not listen on {port}");
    p
}

fn get(port: u16, path: &str) {
    let r = http_get(port, path, &[]).unwrap_or_else(|e| panic!("GET {path} on {port}: {e}"));
    assert!(r.status == 200 || r.status == 404, "GET {path}: {}", r.status);
}

/// The server spans of `path`, once there are `n` (then a moment for more).
fn spans_of(rotel: &Rotel, rt: &Ringtail, path: &str, n: usize) -> Vec<Value> {
    let of = |all: Vec<Value>| -> Vec<Value> {
        all.into_iter().filter(|s| s["kind"] == 2 && attr(s, "url.path").as_deref() == Some(path)).collect()
    };
    wait_until(WAIT, || (of(rotel.spans()).len() >= n).then_some(()))
        .unwrap_or_else(|| panic!("{n} spans of {path} never arrived: {:?}\n{}", of(rotel.spans()), rt.log()));
    std::thread::sleep(Duration::from_millis(500));
    let got = of(rotel.spans());
    assert_eq!(got.len(), n, "exactly {n} spans of {path}");
    got
}

/// The resource attributes a test checks (`k8s.*`, `service.*`,
/// `container.id`), sorted.
fn identity(span: &Value) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = span["resource"]
        .as_object()
        .expect("resource")
        .iter()
        .filter(|(k, _)| k.starts_with("k8s.") || k.starts_with("service.") || *k == "container.id")
        .map(|(k, v)| (k.clone(), v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string())))
        .collect();
    v.sort();
    v
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    v.sort();
    v
}

fn uid_of(obj: &Value) -> String {
    obj["metadata"]["uid"].as_str().expect("uid").to_owned()
}

fn config(api: &StandIn, rotel: &Rotel, prom: u16, extra: &str) -> String {
    format!(
        "[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nexe_names = [\"^python3\"]\n{extra}\n\
         [export.otlp]\nendpoint = \"http://127.0.0.1:{}\"\nprotocol = \"grpc\"\nmetrics_interval = \"500ms\"\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n\
         [kubernetes]\nkubeconfig = \"{}\"\nnode_name = \"{NODE}\"\nwell_known_labels = true\nmetadata_wait = \"1500ms\"\n",
        rotel.grpc,
        api.kubeconfig().display()
    )
}

fn ready() -> Option<std::path::PathBuf> {
    if !can_trace() || !Rotel::available() {
        return None;
    }
    let v2 = v2_root();
    if v2.is_none() {
        skip("no cgroup v2 hierarchy is mounted");
    }
    v2
}

fn counter(prom: u16, name: &str, labels: &[(&str, &str)]) -> f64 {
    metric_value(prom, name, labels).unwrap_or(0.0)
}

#[test]
fn spans_carry_their_pod_s_identity_by_container_id_through_relabels_deletes_and_restarts() {
    let Some(v2) = ready() else { return };
    let www = TempDir::new("k8s-www");
    let mut api = StandIn::new();
    api.start();
    let (a, side, b) = (id(1), id(2), id(3));
    let pod = |label: &str, cid: &str, uid: Option<&str>| {
        json!({
            "namespace": "shop", "name": "web-0", "node": NODE, "uid": uid,
            "owner": {"kind": "StatefulSet", "name": "web"},
            "labels": {"app.kubernetes.io/name": label, "app.kubernetes.io/version": "1.2"},
            "containers": [container("app", cid, "web:1.2"), container("side", &side, "side:1")]
        })
    };
    let first = api.pod(pod("web-app", &a, None));
    let uid = uid_of(&first);
    let rotel = Rotel::start();
    let prom = free_port();
    let rt = Ringtail::start(&config(&api, &rotel, prom, ""));

    let (port, side_port) = (free_port(), free_port());
    let cg = pod_cgroup(&v2, &uid, &a);
    let mut app = server_in(&cg, port, &www, &[]);
    let side_cg = pod_cgroup(&v2, &uid, &side);
    let _side = server_in(&side_cg, side_port, &www, &[("OTEL_SERVICE_NAME", "sidecar-svc")]);
    let common = |cid: &str, uid: &str| -> Vec<(&'static str, String)> {
        vec![
            ("k8s.namespace.name", "shop".into()),
            ("k8s.pod.name", "web-0".into()),
            ("k8s.pod.uid", uid.into()),
            ("k8s.node.name", NODE.into()),
            ("k8s.statefulset.name", "web".into()),
            ("service.namespace", "shop".into()),
            ("service.version", "1.2".into()),
            ("container.id", cid.into()),
        ]
    };
    let expect = |cid: &str, uid: &str, more: &[(&'static str, String)]| {
        let mut v: Vec<(String, String)> =
            common(cid, uid).into_iter().chain(more.iter().cloned()).map(|(k, v)| (k.to_owned(), v)).collect();
        v.sort();
        v
    };

    for _ in 0..3 {
        get(port, "/first");
    }
    get(side_port, "/side");
    let spans = spans_of(&rotel, &rt, "/first", 3);
    let want = expect(
        &a,
        &uid,
        &[("k8s.container.name", "app".into()), ("service.name", "web-app".into()), ("service.instance.id", "shop.web-0.app".into())],
    );
    for s in &spans {
        assert_eq!(identity(s), want, "{s}");
    }
    // The metrics of its spans: under the same resource.
    let metric = wait_until(WAIT, || {
        rotel
            .metrics()
            .into_iter()
            .find(|m| m["name"] == "http.server.request.duration" && res_attr(m, "container.id").as_deref() == Some(a.as_str()))
    })
    .unwrap_or_else(|| {
        panic!("no metric with the pod's resource: {:?}", rotel.metrics().iter().map(|m| m["resource"].clone()).collect::<Vec<_>>())
    });
    assert_eq!(identity(&metric), want, "{metric}");
    // The container's own OTEL_SERVICE_NAME comes first; the rest is its pod's.
    let side_span = spans_of(&rotel, &rt, "/side", 1);
    assert_eq!(
        identity(&side_span[0]),
        expect(
            &side,
            &uid,
            &[
                ("k8s.container.name", "side".into()),
                ("service.name", "sidecar-svc".into()),
                ("service.instance.id", "shop.web-0.side".into())
            ]
        )
    );

    // Relabelled: the next spans carry the new name (once the watch has
    // told), and exactly those after it.
    api.pod(pod("web-renamed", &a, None));
    let mut n = 0;
    wait_until(WAIT, || {
        n += 1;
        let path = format!("/probe-relabel-{n}");
        get(port, &path);
        let s = wait_until(Duration::from_secs(10), || {
            rotel.spans().into_iter().find(|s| attr(s, "url.path").as_deref() == Some(path.as_str()))
        })?;
        (res_attr(&s, "service.name").as_deref() == Some("web-renamed")).then_some(())
    })
    .unwrap_or_else(|| panic!("the relabel never showed on spans\n{}", rt.log()));
    for _ in 0..2 {
        get(port, "/relabelled");
    }
    let renamed = expect(
        &a,
        &uid,
        &[("k8s.container.name", "app".into()), ("service.name", "web-renamed".into()), ("service.instance.id", "shop.web-0.app".into())],
    );
    for s in spans_of(&rotel, &rt, "/relabelled", 2) {
        assert_eq!(identity(&s), renamed, "{s}");
    }

    // Deleted, and created again under its name (a StatefulSet's pod): a
    // new uid, a new container id. Its first requests are served before
    // the API server has the new pod: their spans wait for it
    // (`metadata_wait`), then carry the new pod's identity.
    api.delete("shop", "web-0");
    app.stop(Duration::from_secs(5));
    drop(cg);
    let uid2 = "0f0e0d0c-0b0a-4909-8807-060504030201".to_owned();
    assert_ne!(uid2, uid);
    let cg2 = pod_cgroup(&v2, &uid2, &b);
    let _app2 = server_in(&cg2, port, &www, &[]);
    for _ in 0..3 {
        get(port, "/restarted");
    }
    std::thread::sleep(Duration::from_millis(300)); // the API server learns of the pod later
    let again = api.pod(pod("web-renamed", &b, Some(&uid2)));
    assert_eq!(uid_of(&again), uid2);
    let renewed = expect(
        &b,
        &uid2,
        &[("k8s.container.name", "app".into()), ("service.name", "web-renamed".into()), ("service.instance.id", "shop.web-0.app".into())],
    );
    for s in spans_of(&rotel, &rt, "/restarted", 3) {
        assert_eq!(identity(&s), renewed, "never the old pod's identity: {s}");
    }
    // Nothing went out undecorated in all this.
    let undecorated = counter(prom, "ringtail_k8s_undecorated_spans_total", &[]);
    assert_eq!(undecorated, 0.0, "{}", scrape(prom));
}

#[test]
fn the_api_server_down_at_start_and_mid_run_spans_flow_counted_undecorated_and_are_decorated_once_it_is_up() {
    let Some(v2) = ready() else { return };
    let www = TempDir::new("k8s-www");
    let mut api = StandIn::new();
    api.start();
    let cid = id(4);
    let obj = api.pod(json!({"namespace": "shop", "name": "api-5c4b", "node": NODE, "containers": [container("api", &cid, "api:3")]}));
    let uid = uid_of(&obj);
    api.kill();

    let rotel = Rotel::start();
    let prom = free_port();
    let rt = Ringtail::start(&config(&api, &rotel, prom, ""));
    let port = free_port();
    let cg = pod_cgroup(&v2, &uid, &cid);
    let _server = server_in(&cg, port, &www, &[]);
    for _ in 0..3 {
        get(port, "/down");
    }
    for s in spans_of(&rotel, &rt, "/down", 3) {
        let pid = res_attr(&s, "process.pid").expect("pid");
        let exe = res_attr(&s, "process.executable.name").expect("exe");
        let host = res_attr(&s, "host.name").expect("host");
        let undecorated = pairs(&[("container.id", &cid), ("service.name", &exe), ("service.instance.id", &format!("{host}:{pid}"))]);
        assert_eq!(identity(&s), undecorated, "undecorated while the API server is down: {s}");
    }
    let counted = wait_until(WAIT, || {
        let n = counter(prom, "ringtail_k8s_undecorated_spans_total", &[]);
        (n >= 3.0).then_some(n)
    });
    assert_eq!(counted, Some(3.0), "{}", scrape(prom));
    let waited = counter(prom, "ringtail_k8s_metadata_waits_total", &[]);
    assert!(waited >= 1.0, "the first batch waited for metadata: {}", scrape(prom));

    api.start();
    let mut n: u32 = 0;
    wait_until(Duration::from_secs(60), || {
        n += 1;
        let path = format!("/probe-up-{n}");
        get(port, &path);
        let s = wait_until(Duration::from_secs(10), || {
            rotel.spans().into_iter().find(|s| attr(s, "url.path").as_deref() == Some(path.as_str()))
        })?;
        res_attr(&s, "k8s.pod.uid").is_some().then_some(())
    })
    .unwrap_or_else(|| panic!("metadata never caught up\n{}", rt.log()));
    for _ in 0..2 {
        get(port, "/up");
    }
    let want = pairs(&[
        ("k8s.namespace.name", "shop"),
        ("k8s.pod.name", "api-5c4b"),
        ("k8s.pod.uid", &uid),
        ("k8s.node.name", NODE),
        ("k8s.container.name", "api"),
        ("service.name", "api-5c4b"),
        ("service.namespace", "shop"),
        ("service.version", "3"),
        ("service.instance.id", "shop.api-5c4b.api"),
        ("container.id", &cid),
    ]);
    for s in spans_of(&rotel, &rt, "/up", 2) {
        assert_eq!(identity(&s), want, "{s}");
    }

    // Down mid-run: the pods known keep their metadata, a container the
    // API server never told of still has its spans go out, counted.
    // Undecorated so far: the 3 above and every probe before the last.
    let before = f64::from(3 + n - 1);
    api.kill();
    let other = id(7);
    let other_cg = pod_cgroup(&v2, "1e2d3c4b-5a69-4788-9796-a5b4c3d2e1f0", &other);
    let other_port = free_port();
    let _other = server_in(&other_cg, other_port, &www, &[]);
    for _ in 0..2 {
        get(port, "/known-while-down");
        get(other_port, "/unknown-while-down");
    }
    for s in spans_of(&rotel, &rt, "/known-while-down", 2) {
        assert_eq!(identity(&s), want, "{s}");
    }
    for s in spans_of(&rotel, &rt, "/unknown-while-down", 2) {
        assert_eq!(res_attr(&s, "container.id").as_deref(), Some(other.as_str()));
        assert_eq!(res_attr(&s, "k8s.pod.name"), None, "{s}");
    }
    let counted = wait_until(WAIT, || {
        let n = counter(prom, "ringtail_k8s_undecorated_spans_total", &[]);
        (n >= before + 2.0).then_some(n)
    });
    assert_eq!(counted, Some(before + 2.0), "{}", scrape(prom));
}

#[test]
fn selection_by_namespace_keeps_a_deployment_s_pod_named_by_its_annotation_and_counts_the_others() {
    let Some(v2) = ready() else { return };
    let www = TempDir::new("k8s-www");
    let mut api = StandIn::new();
    api.start();
    let (web, dns) = (id(5), id(6));
    let w = api.pod(json!({
        "namespace": "shop", "name": "checkout-7d9f8c6b5-x2x4q", "node": NODE,
        "owner": {"kind": "ReplicaSet", "name": "checkout-7d9f8c6b5"},
        "labels": {"pod-template-hash": "7d9f8c6b5", "app.kubernetes.io/name": "by-label"},
        "annotations": {"resource.opentelemetry.io/service.name": "checkout-svc", "resource.opentelemetry.io/k8s.namespace.name": "kube-system"},
        "containers": [container("web", &web, "web:1")]
    }));
    let d = api.pod(json!({"namespace": "kube-system", "name": "dns-1", "node": NODE, "containers": [container("dns", &dns, "dns:1")]}));
    let rotel = Rotel::start();
    let prom = free_port();
    let rt = Ringtail::start(&config(
        &api,
        &rotel,
        prom,
        "k8s_namespaces = [\"shop\", \"kube-system\"]\nk8s_exclude_namespaces = [\"kube-system\"]\n",
    ));
    let (wp, dp, hp) = (free_port(), free_port(), free_port());
    let (wcg, dcg) = (pod_cgroup(&v2, &uid_of(&w), &web), pod_cgroup(&v2, &uid_of(&d), &dns));
    let _w = server_in(&wcg, wp, &www, &[]);
    let _d = server_in(&dcg, dp, &www, &[]);
    let _h = python_http_server(hp, &www.0);
    for _ in 0..3 {
        get(wp, "/selected");
        get(dp, "/excluded");
        get(hp, "/host");
    }
    // A Deployment's pod (via its ReplicaSet), named by its annotation
    // before its label; an annotation cannot claim another namespace.
    let want = pairs(&[
        ("k8s.namespace.name", "shop"),
        ("k8s.pod.name", "checkout-7d9f8c6b5-x2x4q"),
        ("k8s.pod.uid", &uid_of(&w)),
        ("k8s.node.name", NODE),
        ("k8s.replicaset.name", "checkout-7d9f8c6b5"),
        ("k8s.deployment.name", "checkout"),
        ("k8s.container.name", "web"),
        ("service.name", "checkout-svc"),
        ("service.namespace", "shop"),
        ("service.version", "1"),
        ("service.instance.id", "shop.checkout-7d9f8c6b5-x2x4q.web"),
        ("container.id", &web),
    ]);
    for s in spans_of(&rotel, &rt, "/selected", 3) {
        assert_eq!(identity(&s), want, "{s}");
    }
    let counted = wait_until(WAIT, || {
        let e = counter(prom, "ringtail_k8s_unselected_spans_total", &[("reason", "excluded")]);
        let u = counter(prom, "ringtail_k8s_unselected_spans_total", &[("reason", "pod_unknown")]);
        (e >= 3.0 && u >= 3.0).then_some((e, u))
    });
    assert_eq!(counted, Some((3.0, 3.0)), "{}", scrape(prom));
    let others: Vec<Value> =
        rotel.spans().into_iter().filter(|s| matches!(attr(s, "url.path").as_deref(), Some("/excluded") | Some("/host"))).collect();
    assert!(others.is_empty(), "spans of unselected pods went out: {others:?}");
}
