//! The fleet install (`deploy/`): the Helm chart rendered by Helm's own
//! engine and, with the plain manifest and the Collector example, validated
//! against Kubernetes' published schemas; the DaemonSet as
//! docs/kubernetes.md says; the OCI image built from this machine's Debian
//! packages; and that image run as the DaemonSet says, each of its
//! capabilities shown needed.
//!
//! No cluster and no container runtime run here (`crun` cannot set
//! RLIMIT_NPROC in this sandbox), so the pod is played by a process: the
//! image's root file system (unpacked from the OCI archive buildah wrote)
//! read-only in a mount namespace of its own, with the DaemonSet's volumes
//! mounted where its `volumeMounts` say, the host's pid namespace (hostPID),
//! a network, UTS and IPC namespace of its own, chroot into it, then only the
//! capabilities of its `securityContext` in the bounding set, and its
//! `args` and `env` exec'd as the image's entrypoint. Not played: seccomp
//! (RuntimeDefault), AppArmor, cgroup limits, image pulls.
//!
//! # Layout
//! - `python` / `render` / `validate`: deploy/helm/render.py and
//!   kubernetes-validate from the test venv.
//! - `Variant`: value sets the chart is rendered with.
//! - `Image`: deploy/image/build.sh into scratch storage, then unpacked.
//! - `Pod`: the DaemonSet's container as a process (see above).
//! - the tests.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use ringtail_tests::tls::{python_tls, PY_TLS_SERVER};
use ringtail_tests::*;
use serde_json::Value;

/// Kubernetes versions the manifests are validated against: the chart's
/// oldest (`kubeVersion: >=1.30`, the first with `appArmorProfile`) and the
/// newest kubernetes-validate knows.
const KUBERNETES_VERSIONS: &[&str] = &["1.30.0", "1.37.0"];

/// The pod's capabilities with TLS on (the default), as docs/kubernetes.md's
/// table lists them.
const POD_CAPS: &[&str] = &[
    "CAP_BPF",
    "CAP_PERFMON",
    "CAP_SYS_PTRACE",
    "CAP_DAC_READ_SEARCH",
    "CAP_SETUID",
    "CAP_SETGID",
    "CAP_SETPCAP",
    "CAP_CHOWN",
    "CAP_KILL",
    "CAP_SYS_ADMIN",
    "CAP_CHECKPOINT_RESTORE",
];

/// The actors' uid the image's /etc/passwd gives `ringtail` (build.sh's default).
const ACTORS_UID: u32 = 7464;
/// The k8s-actor's uid and gid the image gives `ringtail-k8s` (build.sh's
/// default, the chart's `k8sActorUid`: the pod's fsGroup).
const K8S_UID: u32 = 7465;
/// Where the pod's service account token is.
const TOKEN_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

fn deploy_dir() -> PathBuf {
    workspace().join("deploy")
}

fn text(out: &Output) -> String {
    format!("status: {}\nstdout:\n{}\nstderr:\n{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The venv's python, when it has Helm's SDK and kubernetes-validate;
/// otherwise a loud skip.
fn python() -> Option<PathBuf> {
    let py = venv().join("bin/python");
    let ok =
        Command::new(&py).args(["-c", "import helm_python, kubernetes_validate"]).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    if !ok {
        skip(&format!(
            "{} lacks helm-python-sdk or kubernetes-validate (./ringtail.sh test installs them): the chart is not rendered",
            py.display()
        ));
        return None;
    }
    Some(py)
}

/// deploy/helm/render.py with `args`; panics on failure.
fn render_py(py: &Path, args: &[&str]) -> String {
    let out = Command::new(py).arg(deploy_dir().join("helm/render.py")).args(args).output().expect("run render.py");
    assert!(out.status.success(), "render.py {args:?} failed\n{}", text(&out));
    String::from_utf8(out.stdout).expect("render.py prints UTF-8")
}

/// The chart rendered with `values` (JSON) and linted: the YAML stream and
/// its objects.
fn render(py: &Path, values: &str) -> (String, Vec<Value>) {
    let yaml = render_py(py, &["--lint", "--values", values]);
    let objects: Vec<Value> = serde_json::from_str(&render_py(py, &["--json", "--values", values])).expect("render.py --json");
    (yaml, objects)
}

/// kubernetes-validate --strict on `file` for every version we support.
fn validate(file: &Path) -> Result<(), String> {
    for version in KUBERNETES_VERSIONS {
        let out = Command::new(venv().join("bin/kubernetes-validate"))
            .args(["--strict", "--quiet", "-k", version])
            .arg(file)
            .output()
            .expect("run kubernetes-validate");
        if !out.status.success() || !out.stderr.is_empty() || !out.stdout.is_empty() {
            return Err(format!("kubernetes-validate -k {version} {}:\n{}", file.display(), text(&out)));
        }
    }
    Ok(())
}

/// Value sets the chart is rendered with: the defaults and each switch.
const VARIANTS: &[(&str, &str)] = &[
    ("defaults", "{}"),
    ("no TLS", r#"{"tls": {"enabled": false}}"#),
    ("no Kubernetes metadata", r#"{"kubernetes": {"enabled": "false"}}"#),
    (
        "OTLP with headers, selection, more config",
        r#"{"otlp": {"endpoint": "http://otel-collector.observability:4317", "headersSecret": {"name": "otlp-auth", "key": "headers"}},
            "discovery": {"exe_names": ["^python3", "^nginx$"], "open_ports": [8080]},
            "probe": {"backend": "syscalls"},
            "config": {"log": {"level": "debug"}, "export.otlp": {"timeout": "5s"}},
            "env": [{"name": "RINGTAIL_EXPORT__QUEUE_SIZE", "value": "1024"}],
            "resources": {"limits": {"memory": "1Gi", "cpu": "1"}},
            "image": {"repository": "registry.example/ringtail", "tag": "0.1.0"}}"#,
    ),
];

/// The one object of `kind` (panics unless there is exactly one).
fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "expected one {kind}, got {}", found.len());
    found[0]
}

fn container(objects: &[Value]) -> &Value {
    let containers = &one(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers.as_array().map(Vec::len), Some(1), "one container: {containers}");
    &containers[0]
}

/// The pod's added capabilities, as `CAP_` names.
fn capabilities(objects: &[Value]) -> BTreeSet<String> {
    let sc = &container(objects)["securityContext"];
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]), "every capability dropped first");
    sc["capabilities"]["add"]
        .as_array()
        .expect("capabilities.add")
        .iter()
        .map(|c| format!("CAP_{}", c.as_str().expect("a capability name")))
        .collect()
}

fn env_of<'a>(objects: &'a [Value], name: &str) -> Option<&'a Value> {
    container(objects)["env"].as_array()?.iter().find(|e| e["name"] == name)
}

fn config_toml(objects: &[Value]) -> String {
    // (the dashboard's ConfigMap, prometheus.dashboard, holds no configuration)
    let configs: Vec<&Value> = objects.iter().filter(|o| o["kind"] == "ConfigMap" && o["data"]["ringtail.toml"].is_string()).collect();
    assert_eq!(configs.len(), 1, "one ConfigMap with ringtail.toml");
    configs[0]["data"]["ringtail.toml"].as_str().expect("ringtail.toml in the ConfigMap").to_owned()
}

/// `ringtail check-config` on a rendered configuration: every component
/// checks its part, as at a pod's start.
fn check_config(toml: &str, dir: &TempDir, tag: &str) -> Output {
    let path = dir.join(&format!("{tag}.toml"));
    std::fs::write(&path, toml).expect("write the rendered configuration");
    Command::new(bin_dir().join("ringtail"))
        .arg("check-config")
        .arg("--config")
        .arg(&path)
        .env("RINGTAIL_BIN_DIR", bin_dir())
        .output()
        .expect("run ringtail check-config")
}

#[test]
fn chart_renders_and_every_manifest_validates() {
    let Some(py) = python() else { return };
    let dir = TempDir::new("deploy");

    // The plain manifest is the chart with its defaults, byte for byte.
    let plain = std::fs::read_to_string(deploy_dir().join("kubernetes/daemonset.yaml")).expect("read deploy/kubernetes/daemonset.yaml");
    assert_eq!(plain, render_py(&py, &["--plain"]), "deploy/kubernetes/daemonset.yaml is stale: deploy/helm/render.py --plain > it");
    validate(&deploy_dir().join("kubernetes/daemonset.yaml")).unwrap_or_else(|e| panic!("the plain manifest does not validate\n{e}"));
    validate(&deploy_dir().join("kubernetes/collector.yaml")).unwrap_or_else(|e| panic!("the Collector example does not validate\n{e}"));

    for (i, (name, values)) in VARIANTS.iter().enumerate() {
        let (yaml, objects) = render(&py, values);
        let file = dir.join(&format!("variant-{i}.yaml"));
        std::fs::write(&file, &yaml).expect("write the rendered chart");
        validate(&file).unwrap_or_else(|e| panic!("the chart rendered with {name} does not validate\n{e}\n{yaml}"));
        assert!(objects.iter().all(|o| o["metadata"]["name"].is_string()), "{name}: an object without a name");
    }

    // The validator rejects what Kubernetes would: a wrong type, and a field
    // the API does not have.
    let (yaml, _) = render(&py, "{}");
    for (what, broken) in [
        ("hostPID as a string", yaml.replacen("hostPID: true", "hostPID: \"yes\"", 1)),
        ("a misspelt field", yaml.replacen("readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true", 1)),
    ] {
        assert_ne!(broken, yaml, "{what}: nothing replaced");
        let file = dir.join("broken.yaml");
        std::fs::write(&file, broken).expect("write a broken manifest");
        assert!(validate(&file).is_err(), "kubernetes-validate accepted {what}");
    }

    // A value the chart does not accept stops the render with its name.
    let out = Command::new(&py)
        .arg(deploy_dir().join("helm/render.py"))
        .args(["--values", r#"{"kubernetes": {"enabled": "maybe"}}"#])
        .output()
        .expect("run render.py");
    assert!(!out.status.success() && text(&out).contains("kubernetes.enabled"), "kubernetes.enabled = maybe rendered\n{}", text(&out));
}

#[test]
fn daemonset_holds_what_the_docs_say() {
    let Some(py) = python() else { return };
    let dir = TempDir::new("deploy");
    let expected = |tls: bool| -> BTreeSet<String> {
        POD_CAPS.iter().filter(|c| tls || !["CAP_SYS_ADMIN", "CAP_CHECKPOINT_RESTORE"].contains(c)).map(|c| c.to_string()).collect()
    };

    // docs/kubernetes.md's privilege table lists exactly the pod's capabilities.
    let doc = std::fs::read_to_string(workspace().join("docs/kubernetes.md")).expect("read docs/kubernetes.md");
    let table: BTreeSet<String> =
        doc.lines().filter_map(|l| l.strip_prefix("| CAP_")?.split_once(' ').map(|(rest, _)| format!("CAP_{rest}"))).collect();
    assert_eq!(table, expected(true), "docs/kubernetes.md: the pod's capability table");

    let (_, objects) = render(&py, "{}");
    assert_eq!(capabilities(&objects), expected(true), "the DaemonSet's capabilities (TLS on)");
    let pod = &one(&objects, "DaemonSet")["spec"]["template"]["spec"];
    let c = container(&objects);
    let sc = &c["securityContext"];
    assert_eq!(sc["privileged"], false, "never privileged");
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["runAsUser"], 0, "root: the supervisor starts the loader and drops the actors itself");
    assert_eq!(pod["hostPID"], true);
    assert_ne!(pod["hostNetwork"], true, "the pod's own network");
    assert_eq!(
        env_of(&objects, "NODE_NAME").map(|e| &e["valueFrom"]["fieldRef"]["fieldPath"]),
        Some(&Value::from("spec.nodeName")),
        "NODE_NAME from the downward API"
    );
    // The mounts: what, where, how.
    let volumes = pod["volumes"].as_array().expect("volumes");
    let mounts: BTreeSet<(String, String, bool)> = c["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .map(|m| {
            let v = volumes.iter().find(|v| v["name"] == m["name"]).unwrap_or_else(|| panic!("no volume for {m}"));
            let source = if let Some(p) = v["hostPath"]["path"].as_str() {
                format!("hostPath {p}")
            } else if v["emptyDir"].is_object() {
                "emptyDir".to_owned()
            } else if v["configMap"].is_object() {
                "configMap".to_owned()
            } else if v["projected"].is_object() {
                "projected".to_owned()
            } else {
                panic!("unexpected volume {v}")
            };
            (m["mountPath"].as_str().expect("mountPath").to_owned(), source, m["readOnly"] == true)
        })
        .collect();
    let want: BTreeSet<(String, String, bool)> = [
        ("/etc/ringtail", "configMap", true),
        ("/run/ringtail", "emptyDir", false),
        ("/sys/fs/bpf", "hostPath /sys/fs/bpf", false),
        ("/sys/kernel/tracing", "hostPath /sys/kernel/tracing", true),
        (TOKEN_DIR, "projected", true),
    ]
    .iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), *c))
    .collect();
    assert_eq!(mounts, want, "the pod's mounts");
    // The cluster token (issue 44): never automounted (every process of the
    // container could read it, the span-actor and exporter included); the
    // k8s-actor's own, projected, group-readable only (0440; with fsGroup
    // the kubelet makes it 0640, root's and that group's), the group the
    // image's ringtail-k8s (the k8s-actor) alone has.
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(one(&objects, "ServiceAccount")["automountServiceAccountToken"], false);
    assert_eq!(pod["securityContext"]["fsGroup"], K8S_UID, "the token's group: the k8s-actor's");
    let token = volumes.iter().find(|v| v["projected"].is_object()).expect("the projected token");
    assert_eq!(token["projected"]["defaultMode"], 0o440, "the token readable by its group alone");
    let sources = &token["projected"]["sources"];
    assert_eq!(sources[0]["serviceAccountToken"]["path"], "token");
    assert!(sources[0]["serviceAccountToken"]["expirationSeconds"].as_u64().is_some_and(|s| s <= 3607), "a short-lived token");
    assert_eq!(sources[1]["configMap"]["name"], "kube-root-ca.crt");
    assert_eq!(sources[2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"], "metadata.namespace");
    let toml = config_toml(&objects);
    assert!(toml.contains("k8s_user = \"ringtail-k8s\"") && toml.contains("user = \"ringtail\""), "{toml}");
    assert_eq!(one(&objects, "ClusterRole")["rules"][0]["verbs"], serde_json::json!(["list", "watch"]), "read verbs only");
    // RBAC: pods list/watch and jobs get, nothing else.
    let rules = &one(&objects, "ClusterRole")["rules"];
    assert_eq!(
        rules,
        &serde_json::json!([
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]}
        ]),
        "the ClusterRole"
    );
    let binding = one(&objects, "ClusterRoleBinding");
    assert_eq!(binding["subjects"][0]["name"], one(&objects, "ServiceAccount")["metadata"]["name"]);
    assert_eq!(binding["roleRef"]["kind"], "ClusterRole");

    // TLS off: no CAP_SYS_ADMIN, and no privilege escalation either.
    let (_, objects) = render(&py, r#"{"tls": {"enabled": false}}"#);
    assert_eq!(capabilities(&objects), expected(false), "the DaemonSet's capabilities (TLS off)");
    assert_eq!(container(&objects)["securityContext"]["allowPrivilegeEscalation"], false);
    assert!(config_toml(&objects).contains("\n[tls]\nenabled = false\n"), "{}", config_toml(&objects));

    // Kubernetes metadata off: no RBAC object, no token, no fsGroup.
    let (_, objects) = render(&py, r#"{"kubernetes": {"enabled": "false"}}"#);
    assert!(objects.iter().all(|o| o["kind"] != "ClusterRole" && o["kind"] != "ClusterRoleBinding"), "RBAC without the metadata actor");
    let off = &one(&objects, "DaemonSet")["spec"]["template"]["spec"];
    assert_eq!(off["automountServiceAccountToken"], false);
    assert!(off["volumes"].as_array().expect("volumes").iter().all(|v| !v["projected"].is_object()), "a token without the metadata actor");
    assert!(off["securityContext"]["fsGroup"].is_null(), "fsGroup without the metadata actor");
    assert_eq!(one(&objects, "ServiceAccount")["automountServiceAccountToken"], false);

    // OTLP: the endpoint in the environment, the headers from the Secret.
    let otlp = VARIANTS.iter().find(|(name, _)| name.starts_with("OTLP with headers")).expect("the OTLP variant").1;
    let (_, objects) = render(&py, otlp);
    assert_eq!(
        env_of(&objects, "OTEL_EXPORTER_OTLP_ENDPOINT").map(|e| &e["value"]),
        Some(&Value::from("http://otel-collector.observability:4317"))
    );
    assert_eq!(
        env_of(&objects, "OTEL_EXPORTER_OTLP_HEADERS").map(|e| &e["valueFrom"]["secretKeyRef"]),
        Some(&serde_json::json!({"name": "otlp-auth", "key": "headers", "optional": true})),
        "the OTLP headers come from the Secret"
    );
    // By default too (the plain manifest): a Secret of a known name,
    // optional, so that the pod starts before anyone creates it.
    let (_, objects) = render(&py, "{}");
    assert_eq!(
        env_of(&objects, "OTEL_EXPORTER_OTLP_HEADERS").map(|e| &e["valueFrom"]["secretKeyRef"]),
        Some(&serde_json::json!({"name": "ringtail-otlp-headers", "key": "headers", "optional": true})),
        "the default OTLP headers Secret"
    );
    let (_, objects) = render(&py, r#"{"otlp": {"headersSecret": {"name": ""}}}"#);
    assert!(env_of(&objects, "OTEL_EXPORTER_OTLP_HEADERS").is_none(), "headersSecret.name empty: no headers");
    assert!(!config_toml(&objects).contains("otlp-auth"), "no secret in the ConfigMap");

    // Every rendered configuration is one ringtail accepts. [kubernetes]
    // (rendered only when not "auto") is the Kubernetes actor's section:
    // a build without it must refuse the section by name.
    let ringtail = bin_dir().join("ringtail");
    if !ringtail.exists() {
        skip(&format!("{} missing (run `cargo build --workspace`): the rendered configurations are not checked", ringtail.display()));
        return;
    }
    let defaults = check_config("", &dir, "empty");
    assert!(defaults.status.success(), "check-config of an empty file\n{}", text(&defaults));
    let knows_kubernetes = String::from_utf8_lossy(&defaults.stdout).contains("[kubernetes]");
    for (i, (name, values)) in VARIANTS.iter().enumerate() {
        let (_, objects) = render(&py, values);
        let toml = config_toml(&objects);
        let out = check_config(&toml, &dir, &format!("variant-{i}"));
        if toml.contains("[kubernetes]") && !knows_kubernetes {
            assert!(
                !out.status.success() && text(&out).contains("kubernetes"),
                "{name}: a build without the Kubernetes actor should refuse [kubernetes]\n{}",
                text(&out)
            );
        } else {
            assert!(out.status.success(), "{name}: ringtail check-config refuses the rendered configuration\n{toml}\n{}", text(&out));
        }
    }
}

/// The npm modules directory with @kubernetes-models/prometheus-operator
/// (the Prometheus Operator's CRD schemas), when installed; otherwise a
/// loud skip.
fn monitoring_schemas() -> Option<PathBuf> {
    let modules = venv().join("npm/node_modules");
    if !modules.join("@kubernetes-models/prometheus-operator/package.json").exists() || !have("node") || !have("promtool") {
        skip(&format!(
            "{} lacks @kubernetes-models/prometheus-operator, or node or promtool is missing (./ringtail.sh test installs them)",
            modules.display()
        ));
        return None;
    }
    Some(modules)
}

/// The chart installs what a Prometheus (Operator) needs to watch ringtail,
/// only on request: `/metrics` on the pod's port, a PodMonitor or a
/// ServiceMonitor (with its Service) scraping exactly ringtail's pods on
/// that port, the alert rules as a PrometheusRule (the rules file, which
/// promtool accepts), the dashboard in a ConfigMap for Grafana's sidecar.
/// The core objects validate against Kubernetes' schemas, the operator's
/// against its CRDs' (the npm package generated from them); a monitor
/// without `/metrics` is refused at render.
#[test]
fn the_chart_installs_prometheus_monitoring_on_request() {
    let Some(py) = python() else { return };
    let Some(modules) = monitoring_schemas() else { return };
    let dir = TempDir::new("deploy-mon");
    // Off by default: nothing of it, no port.
    let (_, objects) = render(&py, "{}");
    assert!(objects.iter().all(|o| o["apiVersion"] != "monitoring.coreos.com/v1" && o["kind"] != "Service"), "monitoring by default");
    assert!(container(&objects).get("ports").is_none(), "a port by default");
    assert!(!config_toml(&objects).contains("[export.prometheus]"));

    let values = r#"{"prometheus": {"enabled": true, "port": 9464, "podMonitor": {"enabled": true, "labels": {"release": "kps"}},
        "serviceMonitor": {"enabled": true, "interval": "15s"}, "rules": {"enabled": true}, "dashboard": {"enabled": true}}}"#;
    let (_, objects) = render(&py, values);
    // Core objects: Kubernetes' schemas; the operator's: its CRDs'.
    let (operator, core): (Vec<&Value>, Vec<&Value>) = objects.iter().partition(|o| o["apiVersion"] == "monitoring.coreos.com/v1");
    assert_eq!(
        operator.iter().map(|o| o["kind"].as_str().unwrap_or_default()).collect::<Vec<_>>(),
        ["PodMonitor", "ServiceMonitor", "PrometheusRule"]
    );
    let core_file = dir.join("core.yaml");
    std::fs::write(&core_file, core.iter().map(|o| o.to_string()).collect::<Vec<_>>().join("\n---\n")).expect("write core objects");
    validate(&core_file).unwrap_or_else(|e| panic!("the chart with monitoring does not validate\n{e}"));
    let objects_file = dir.join("objects.json");
    std::fs::write(&objects_file, serde_json::to_string(&objects).expect("JSON")).expect("write objects");
    let out = Command::new("node").arg(fixture("validate_monitoring.cjs")).arg(&modules).arg(&objects_file).output().expect("run node");
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("3 checked"), "the operator's objects\n{}", text(&out));
    // The validator refuses what the operator would: a bad interval, a rule without expr.
    for (what, bad) in [
        (
            "an interval the CRD's pattern refuses",
            serde_json::json!({"podMetricsEndpoints": [{"port": "metrics", "interval": "30 seconds"}], "selector": {}}),
        ),
        ("a rule without expr", serde_json::json!({"groups": [{"name": "g", "rules": [{"alert": "A"}]}]})),
    ] {
        let kind = if bad.get("groups").is_some() { "PrometheusRule" } else { "PodMonitor" };
        let o = serde_json::json!([{"apiVersion": "monitoring.coreos.com/v1", "kind": kind, "metadata": {"name": "x"}, "spec": bad}]);
        std::fs::write(&objects_file, o.to_string()).expect("write");
        let out = Command::new("node").arg(fixture("validate_monitoring.cjs")).arg(&modules).arg(&objects_file).output().expect("run node");
        assert!(!out.status.success(), "the CRD schemas accepted {what}");
    }

    // /metrics on the pod's port, from every address of the pod.
    let toml = config_toml(&objects);
    assert!(toml.contains("\n[export.prometheus]\nallow_remote = true\nlisten = \"0.0.0.0:9464\"\n"), "{toml}");
    if bin_dir().join("ringtail").exists() {
        let out = check_config(&toml, &dir, "monitoring");
        assert!(out.status.success(), "ringtail check-config refuses the rendered configuration\n{toml}\n{}", text(&out));
    }
    let ports = &container(&objects)["ports"];
    assert_eq!(ports, &serde_json::json!([{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]));
    // The monitors scrape exactly ringtail's pods, on that port.
    let pod_labels = &one(&objects, "DaemonSet")["spec"]["template"]["metadata"]["labels"];
    let selects = |selector: &Value| {
        selector.as_object().expect("matchLabels").iter().all(|(k, v)| pod_labels.get(k) == Some(v))
            && !selector.as_object().unwrap().is_empty()
    };
    let pm = one(&objects, "PodMonitor");
    assert!(selects(&pm["spec"]["selector"]["matchLabels"]), "{pm}");
    assert_eq!(pm["metadata"]["labels"]["release"], "kps");
    assert_eq!(pm["spec"]["podMetricsEndpoints"], serde_json::json!([{"port": "metrics", "path": "/metrics", "interval": "30s"}]));
    let svc = one(&objects, "Service");
    assert!(selects(&svc["spec"]["selector"]), "{svc}");
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "metrics");
    let sm = one(&objects, "ServiceMonitor");
    let svc_labels = &svc["metadata"]["labels"];
    assert!(sm["spec"]["selector"]["matchLabels"].as_object().unwrap().iter().all(|(k, v)| svc_labels.get(k) == Some(v)));
    assert_eq!(sm["spec"]["endpoints"], serde_json::json!([{"port": "metrics", "path": "/metrics", "interval": "15s"}]));
    // The rules are the rules file, and promtool accepts them as the
    // operator hands them to Prometheus.
    let rules_file = deploy_dir().join("prometheus/ringtail-rules.yml");
    let file: serde_json::Value = {
        let out = Command::new(&py)
            .args(["-c", "import json,sys,yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))"])
            .arg(&rules_file)
            .output()
            .expect("python");
        serde_json::from_slice(&out.stdout).expect("the rules file as JSON")
    };
    let spec = &one(&objects, "PrometheusRule")["spec"];
    assert_eq!(spec, &file, "the PrometheusRule is deploy/prometheus/ringtail-rules.yml");
    let from_chart = dir.join("rules-from-chart.yml");
    std::fs::write(&from_chart, spec.to_string()).expect("write");
    let out = Command::new("promtool").args(["check", "rules"]).arg(&from_chart).output().expect("promtool");
    assert!(out.status.success(), "promtool check rules on the PrometheusRule's spec\n{}", text(&out));
    // The dashboard, byte for byte.
    let dashboard = std::fs::read_to_string(deploy_dir().join("grafana/ringtail-dashboard.json")).expect("the dashboard");
    let cm = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["labels"]["grafana_dashboard"] == "1")
        .expect("the dashboard ConfigMap");
    assert_eq!(cm["data"]["ringtail.json"].as_str().map(str::trim_end), Some(dashboard.trim_end()));

    // A monitor of pods that serve no /metrics is refused by name.
    let out = Command::new(&py)
        .arg(deploy_dir().join("helm/render.py"))
        .args(["--values", r#"{"prometheus": {"serviceMonitor": {"enabled": true}}}"#])
        .output()
        .expect("run render.py");
    assert!(!out.status.success() && text(&out).contains("need prometheus.enabled"), "{}", text(&out));
}

/// The image, built by deploy/image/build.sh into scratch storage and
/// unpacked from its OCI archive.
struct Image {
    dir: TempDir,
    rootfs: PathBuf,
    config: Value,
}

impl Image {
    fn build() -> Image {
        let dir = TempDir::new("image");
        let archive = dir.join("ringtail.tar");
        let out = Command::new(deploy_dir().join("image/build.sh"))
            .arg("--bin-dir")
            .arg(bin_dir())
            .arg("--storage")
            .arg(dir.join("storage"))
            .arg("--output")
            .arg(format!("oci-archive:{}", archive.display()))
            .output()
            .expect("run deploy/image/build.sh");
        assert!(out.status.success(), "deploy/image/build.sh failed\n{}", text(&out));
        // Nothing of the build stays in its storage (containers, mounts).
        let _ = Command::new("buildah")
            .args(["--root", &dir.join("storage/root").display().to_string(), "--runroot", &dir.join("storage/run").display().to_string()])
            .args(["--storage-driver", "vfs", "rm", "--all"])
            .output();
        let _ = std::fs::remove_dir_all(dir.join("storage"));

        let oci = dir.join("oci");
        std::fs::create_dir_all(&oci).expect("mkdir oci");
        untar(&archive, &oci);
        let blob = |digest: &str| oci.join("blobs/sha256").join(digest.strip_prefix("sha256:").expect("a sha256 digest"));
        let read_json = |p: PathBuf| -> Value { serde_json::from_slice(&std::fs::read(&p).expect("read a blob")).expect("a JSON blob") };
        let index = read_json(oci.join("index.json"));
        let manifest = read_json(blob(index["manifests"][0]["digest"].as_str().expect("the manifest's digest")));
        let config = read_json(blob(manifest["config"]["digest"].as_str().expect("the config's digest")));
        let rootfs = dir.join("rootfs");
        std::fs::create_dir_all(&rootfs).expect("mkdir rootfs");
        for layer in manifest["layers"].as_array().expect("layers") {
            untar(&blob(layer["digest"].as_str().expect("a layer digest")), &rootfs);
        }
        let _ = std::fs::remove_dir_all(&oci);
        Image { dir, rootfs, config }
    }
}

fn untar(archive: &Path, into: &Path) {
    let out = Command::new("tar").arg("-xf").arg(archive).arg("-C").arg(into).arg("--same-owner").output().expect("run tar");
    assert!(out.status.success(), "tar -xf {}\n{}", archive.display(), text(&out));
}

/// Every file and symlink below `root`, relative.
fn files_below(root: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("read a directory of the image").flatten() {
            let t = e.file_type().expect("file type");
            if t.is_dir() {
                stack.push(e.path());
            } else {
                out.insert(e.path().strip_prefix(root).expect("below root").display().to_string());
            }
        }
    }
    out
}

/// One volume of the pod, mounted at `target` (inside the root).
enum Volume {
    /// A host directory bound in (hostPath, the ConfigMap's files, the
    /// projected token's files as the kubelet writes them).
    Bind { source: PathBuf, read_only: bool },
    /// A tmpfs (emptyDir).
    Tmpfs,
}

/// The DaemonSet's container, played by a process (see the file's doc).
struct Pod {
    rootfs: PathBuf,
    mounts: Vec<(String, Volume)>,
    /// The pod's fsGroup: a supplementary group of its processes, the
    /// group of its emptyDir (setgid, group-writable) and of the projected
    /// token, as the kubelet makes them.
    fs_group: Option<u32>,
    caps: Vec<String>,
    no_new_privs: bool,
    read_only_root: bool,
    argv: Vec<String>,
    env: Vec<(String, String)>,
}

impl Pod {
    /// The pod `objects` describe, run from `image`; the ConfigMap's files
    /// are written below `dir`.
    fn from_manifest(objects: &[Value], image: &Image, dir: &TempDir) -> Pod {
        let ds = one(objects, "DaemonSet");
        let spec = &ds["spec"]["template"]["spec"];
        assert_eq!(spec["hostPID"], true, "the play assumes hostPID");
        let c = container(objects);
        let volumes = spec["volumes"].as_array().expect("volumes");
        let fs_group = spec["securityContext"]["fsGroup"].as_u64().map(|g| g as u32);
        let mut mounts = Vec::new();
        for m in c["volumeMounts"].as_array().expect("volumeMounts") {
            let v = volumes.iter().find(|v| v["name"] == m["name"]).expect("the mount's volume");
            let read_only = m["readOnly"] == true;
            let volume = if let Some(p) = v["hostPath"]["path"].as_str() {
                Volume::Bind { source: PathBuf::from(p), read_only }
            } else if v["emptyDir"].is_object() {
                Volume::Tmpfs
            } else if let Some(name) = v["configMap"]["name"].as_str() {
                let cm = objects.iter().find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == name).expect("the ConfigMap");
                let files = dir.join("configmap");
                std::fs::create_dir_all(&files).expect("mkdir configmap");
                for (file, content) in cm["data"].as_object().expect("ConfigMap data") {
                    std::fs::write(files.join(file), content.as_str().expect("a string")).expect("write a ConfigMap file");
                }
                Volume::Bind { source: files, read_only }
            } else if v["projected"].is_object() {
                // As the kubelet writes a projected service account token
                // with fsGroup: the token root's and the group's, 0640; the
                // CA and the namespace defaultMode, the group's.
                use std::os::unix::fs::PermissionsExt;
                let files = dir.join("projected");
                std::fs::create_dir_all(&files).expect("mkdir projected");
                let group = fs_group.expect("a projected token comes with fsGroup");
                for (file, content, mode) in
                    [("token", "not-a-real-token", 0o640), ("ca.crt", "not-a-real-ca", 0o440), ("namespace", "ringtail", 0o440)]
                {
                    let path = files.join(file);
                    std::fs::write(&path, content).expect("write a projected file");
                    std::os::unix::fs::chown(&path, Some(0), Some(group)).expect("chown a projected file");
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod a projected file");
                }
                Volume::Bind { source: files, read_only }
            } else {
                panic!("a volume the play does not know: {v}")
            };
            mounts.push((m["mountPath"].as_str().expect("mountPath").to_owned(), volume));
        }
        let sc = &c["securityContext"];
        // Kubernetes: `args` replace the image's Cmd, the Entrypoint stays.
        let mut argv: Vec<String> = image.config["config"]["Entrypoint"]
            .as_array()
            .expect("an Entrypoint")
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect();
        argv.extend(c["args"].as_array().expect("args").iter().map(|a| a.as_str().unwrap().to_owned()));
        let mut env: Vec<(String, String)> = image.config["config"]["Env"]
            .as_array()
            .map(|e| e.iter().filter_map(|kv| kv.as_str()?.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned()))).collect())
            .unwrap_or_default();
        for e in c["env"].as_array().into_iter().flatten() {
            let value = if let Some(v) = e["value"].as_str() {
                v.to_owned()
            } else if e["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName" {
                "node-under-test".to_owned()
            } else if e["valueFrom"]["secretKeyRef"]["optional"] == true {
                // No Secret here: an optional one that is absent leaves
                // the variable out, as the kubelet does.
                continue;
            } else {
                panic!("an environment variable the play does not know: {e}")
            };
            env.push((e["name"].as_str().expect("a name").to_owned(), value));
        }
        Pod {
            rootfs: image.rootfs.clone(),
            mounts,
            fs_group,
            caps: capabilities(objects).into_iter().collect(),
            no_new_privs: sc["allowPrivilegeEscalation"] == false,
            read_only_root: sc["readOnlyRootFilesystem"] == true,
            argv,
            env,
        }
    }

    /// Starts the pod with `caps` (the manifest's, or fewer) and `env` on
    /// top of its own; its output goes to files in `dir`.
    fn spawn(&self, caps: &[&str], env: &[(&str, &str)], dir: &TempDir, tag: &str) -> PodRun {
        let c = |s: &str| CString::new(s).expect("no NUL");
        let p = |p: &Path| CString::new(p.as_os_str().as_bytes()).expect("no NUL");
        let root = p(&self.rootfs);
        let inside = |t: &str| p(&self.rootfs.join(t.trim_start_matches('/')));
        // (source, target, fstype, flags, data, read-only remount)
        type M = (Option<CString>, CString, Option<CString>, libc::c_ulong, Option<CString>, bool);
        let mut mounts: Vec<M> = vec![
            (Some(root.clone()), root.clone(), None, libc::MS_BIND | libc::MS_REC, None, self.read_only_root),
            // hostPID: a procfs of the host's pid namespace.
            (Some(c("proc")), inside("/proc"), Some(c("proc")), libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, None, false),
            // A container's /sys: the sysfs of its network namespace, read-only, no submounts.
            (
                Some(c("sysfs")),
                inside("/sys"),
                Some(c("sysfs")),
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                None,
                false,
            ),
            (Some(c("tmpfs")), inside("/dev"), Some(c("tmpfs")), libc::MS_NOSUID | libc::MS_NOEXEC, Some(c("mode=755,size=64k")), false),
        ];
        let devices = ["null", "zero", "random", "urandom", "full"];
        let device_files: Vec<(CString, CString)> =
            devices.iter().map(|d| (c(&format!("/dev/{d}")), inside(&format!("/dev/{d}")))).collect();
        let mut volumes: Vec<M> = Vec::new();
        for (target, v) in &self.mounts {
            // A mount point the image lacks is made, as a runtime makes it
            // before the root file system turns read-only.
            let point = self.rootfs.join(target.trim_start_matches('/'));
            if !point.exists() {
                std::fs::create_dir_all(&point).unwrap_or_else(|e| panic!("mkdir {}: {e}", point.display()));
            }
            volumes.push(match v {
                Volume::Bind { source, read_only } => {
                    (Some(p(source)), inside(target), None, libc::MS_BIND | libc::MS_REC, None, *read_only)
                }
                Volume::Tmpfs => {
                    // An emptyDir: 0777, and with fsGroup the group's, setgid.
                    let data = match self.fs_group {
                        Some(g) => format!("mode=2777,gid={g}"),
                        None => "mode=777".to_owned(),
                    };
                    (Some(c("tmpfs")), inside(target), Some(c("tmpfs")), libc::MS_NOSUID | libc::MS_NODEV, Some(c(&data)), false)
                }
            });
        }
        mounts.extend(volumes);
        let keep: Vec<i32> = caps.iter().map(|n| cap_number(n)).collect();
        let no_new_privs = self.no_new_privs;
        // The container's supplementary groups: the fsGroup, if any.
        let groups: Vec<libc::gid_t> = self.fs_group.into_iter().collect();
        let hostname = c("ringtail-pod-under-test");

        let out = std::fs::File::create(dir.join(&format!("pod-{tag}.out"))).expect("create the pod's stdout");
        let err_path = dir.join(&format!("pod-{tag}.err"));
        let err = std::fs::File::create(&err_path).expect("create the pod's stderr");
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..]).env_clear().stdin(Stdio::null()).stdout(out).stderr(err).current_dir("/");
        for (k, v) in self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).chain(env.iter().copied()) {
            cmd.env(k, v);
        }
        cmd.env("RUST_LOG", "info");
        // SAFETY: between fork and exec the closure makes raw system calls
        // only, on values prepared above (no allocation, no lock).
        unsafe {
            cmd.pre_exec(move || {
                let check = |r: libc::c_int| if r == -1 { Err(std::io::Error::last_os_error()) } else { Ok(()) };
                let opt = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
                check(libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWNET | libc::CLONE_NEWUTS | libc::CLONE_NEWIPC))?;
                check(libc::mount(std::ptr::null(), c"/".as_ptr(), std::ptr::null(), libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()))?;
                check(libc::sethostname(hostname.as_ptr(), hostname.as_bytes().len()))?;
                for (i, (source, target, fstype, flags, data, read_only)) in mounts.iter().enumerate() {
                    check(libc::mount(opt(source), target.as_ptr(), opt(fstype), *flags, opt(data).cast()))?;
                    if *read_only {
                        let remount = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
                        check(libc::mount(std::ptr::null(), target.as_ptr(), std::ptr::null(), remount, std::ptr::null()))?;
                    }
                    // The devices, once /dev is there (the 4th mount).
                    if i == 3 {
                        for (host, file) in &device_files {
                            let fd = libc::open(file.as_ptr(), libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC, 0o666);
                            check(fd)?;
                            libc::close(fd);
                            check(libc::mount(host.as_ptr(), file.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()))?;
                        }
                    }
                }
                check(libc::setgroups(groups.len(), groups.as_ptr()))?;
                check(libc::chroot(root.as_ptr()))?;
                check(libc::chdir(c"/".as_ptr()))?;
                // The container's capabilities: root keeps its bounding set
                // across exec, nothing inherited, nothing ambient.
                for cap in 0..=63 {
                    if !keep.contains(&cap) {
                        libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
                    }
                }
                check(libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0))?;
                if no_new_privs {
                    check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
                }
                Ok(())
            });
        }
        PodRun { proc: Proc::spawn("the pod", &mut cmd), out: dir.join(&format!("pod-{tag}.out")), err: err_path }
    }
}

/// The number of a capability named `CAP_X` (linux/capability.h).
fn cap_number(name: &str) -> i32 {
    const NAMES: &[&str] = &[
        "CAP_CHOWN",
        "CAP_DAC_OVERRIDE",
        "CAP_DAC_READ_SEARCH",
        "CAP_FOWNER",
        "CAP_FSETID",
        "CAP_KILL",
        "CAP_SETGID",
        "CAP_SETUID",
        "CAP_SETPCAP",
        "CAP_LINUX_IMMUTABLE",
        "CAP_NET_BIND_SERVICE",
        "CAP_NET_BROADCAST",
        "CAP_NET_ADMIN",
        "CAP_NET_RAW",
        "CAP_IPC_LOCK",
        "CAP_IPC_OWNER",
        "CAP_SYS_MODULE",
        "CAP_SYS_RAWIO",
        "CAP_SYS_CHROOT",
        "CAP_SYS_PTRACE",
        "CAP_SYS_PACCT",
        "CAP_SYS_ADMIN",
        "CAP_SYS_BOOT",
        "CAP_SYS_NICE",
        "CAP_SYS_RESOURCE",
        "CAP_SYS_TIME",
        "CAP_SYS_TTY_CONFIG",
        "CAP_MKNOD",
        "CAP_LEASE",
        "CAP_AUDIT_WRITE",
        "CAP_AUDIT_CONTROL",
        "CAP_SETFCAP",
        "CAP_MAC_OVERRIDE",
        "CAP_MAC_ADMIN",
        "CAP_SYSLOG",
        "CAP_WAKE_ALARM",
        "CAP_BLOCK_SUSPEND",
        "CAP_AUDIT_READ",
        "CAP_PERFMON",
        "CAP_BPF",
        "CAP_CHECKPOINT_RESTORE",
    ];
    NAMES.iter().position(|n| *n == name).unwrap_or_else(|| panic!("unknown capability {name}")) as i32
}

/// A running pod: its process (the supervisor) and its output files.
struct PodRun {
    proc: Proc,
    out: PathBuf,
    err: PathBuf,
}

impl PodRun {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    fn events(&self, component: &str, event: &str) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.contains(&format!("component=\"{component}\"")) && l.contains(&format!("event=\"{event}\"")))
            .map(str::to_owned)
            .collect()
    }

    /// True once every component reported ready; false if the pod exited
    /// first, or a component exited before it was ready (the supervisor
    /// then restarts it, throttled, for ever: a crash loop).
    fn ready(&mut self) -> bool {
        wait_until(Duration::from_secs(60).mul_f64(time_scale()), || {
            let all = ["probe-loader", "span-actor", "exporter-actor"].iter().all(|c| {
                let started = self.events(c, "started").len();
                started > 0 && self.events(c, "ready").len() >= started
            });
            if all {
                return Some(true);
            }
            if ["probe-loader", "span-actor", "exporter-actor"].iter().any(|c| !self.events(c, "throttled").is_empty()) {
                return Some(false);
            }
            self.proc.child.try_wait().ok().flatten().map(|_| false)
        })
        .unwrap_or_else(|| panic!("the pod neither got ready nor exited in 60 s:\n{}", self.log()))
    }

    /// The host pid of `component`'s latest start.
    fn pid(&self, component: &str) -> Option<u32> {
        self.events(component, "started").last().and_then(|l| l.split(" pid=").nth(1)?.split(' ').next()?.parse().ok())
    }

    /// SIGTERM, as the kubelet stops a pod; true if it exited in time.
    fn stop(&mut self) -> bool {
        self.proc.stop(Duration::from_secs(20))
    }
}

/// `Uid:` of /proc/PID/status: real, effective, saved, filesystem.
fn uids(pid: u32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .map(|l| l.split_whitespace().filter_map(|u| u.parse().ok()).collect())
        .unwrap_or_default()
}

#[test]
fn image_builds_and_runs_as_the_daemonset_says() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip("needs root: buildah stores the image as root, and the pod is played with mounts and chroot");
        return;
    }
    if !have("buildah") || !have("tar") {
        return;
    }
    for b in ["ringtail", "ringtail-probe-loader", "ringtail-span-actor", "ringtail-exporter-actor"] {
        if !bin_dir().join(b).exists() {
            skip(&format!("{} missing (run `cargo build --workspace`): no image built", bin_dir().join(b).display()));
            return;
        }
    }
    let image = Image::build();

    // What it runs: the entrypoint with the chart's arguments, as root
    // (the supervisor drops the actors itself).
    let config = &image.config["config"];
    assert_eq!(config["Entrypoint"], serde_json::json!(["/usr/local/bin/ringtail"]), "{config}");
    assert_eq!(config["Cmd"], serde_json::json!(["--config", "/etc/ringtail/ringtail.toml", "run"]), "{config}");
    assert_eq!(config["User"], "0:0", "{config}");

    // What it holds: the binaries, the C library they link and nothing
    // else (no shell, no package manager); no eBPF object beside the loader.
    let files = files_below(&image.rootfs);
    let libraries: BTreeSet<&str> = [
        "lib/x86_64-linux-gnu/libc.so.6",
        "lib/x86_64-linux-gnu/libm.so.6",
        "lib/x86_64-linux-gnu/libgcc_s.so.1",
        "lib64/ld-linux-x86-64.so.2",
    ]
    .into();
    let binaries: BTreeSet<String> =
        files.iter().filter(|f| f.starts_with("usr/local/bin/")).map(|f| f.trim_start_matches("usr/local/bin/").to_owned()).collect();
    for b in ["ringtail", "ringtail-probe-loader", "ringtail-span-actor", "ringtail-exporter-actor"] {
        assert!(binaries.contains(b), "{b} is not in the image: {files:?}");
    }
    assert!(binaries.iter().all(|b| b.starts_with("ringtail")), "a binary that is not ringtail's (the tests' servers?): {binaries:?}");
    let others: BTreeSet<&String> = files
        .iter()
        .filter(|f| !f.starts_with("usr/local/bin/") && !libraries.contains(f.as_str()))
        .filter(|f| !["etc/passwd", "etc/group", "etc/nsswitch.conf", "etc/ringtail/ringtail.toml"].contains(&f.as_str()))
        .collect();
    assert!(others.is_empty(), "the image holds more than it should: {others:?}");
    for lib in &libraries {
        assert!(files.contains(*lib), "{lib} is not in the image: {files:?}");
    }
    let passwd = std::fs::read_to_string(image.rootfs.join("etc/passwd")).expect("the image's /etc/passwd");
    assert!(passwd.lines().any(|l| l.starts_with(&format!("ringtail:x:{ACTORS_UID}:{ACTORS_UID}:"))), "{passwd}");
    assert!(passwd.lines().any(|l| l.starts_with(&format!("ringtail-k8s:x:{K8S_UID}:{K8S_UID}:"))), "{passwd}");
    // Each binary runs with the image's libraries alone (chroot).
    let version = env!("CARGO_PKG_VERSION");
    for b in &binaries {
        let out =
            Command::new("chroot").arg(&image.rootfs).arg(format!("/usr/local/bin/{b}")).arg("--version").output().expect("run chroot");
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains(version),
            "{b} --version in the image\n{}",
            text(&out)
        );
    }

    // The pod, as the chart's defaults describe it (plus a pin directory
    // of the test's own: RINGTAIL_ variables are how a pod overrides).
    if !can_trace() || !have("python3") || !have("curl") || !have("openssl") {
        return;
    }
    let Some(py) = python() else { return };
    let (_, objects) = render(&py, "{}");
    let dir = TempDir::new("pod");
    let pod = Pod::from_manifest(&objects, &image, &dir);
    let pins = test_pin_dir();
    let pin_env = pins.display().to_string();
    let env = [("RINGTAIL_PROBE__PIN_DIR", pin_env.as_str())];
    // An HTTPS server of the node, running before the pod: its libssl is
    // found through /proc/PID/map_files of the host's pid namespace.
    let port = free_port();
    let (_certs, _server) = python_tls("https server on the node", PY_TLS_SERVER, port, &[]);
    let get = |path: &str| {
        let st =
            Command::new("curl").args(["-sk", "-o", "/dev/null", &format!("https://127.0.0.1:{port}{path}")]).status().expect("run curl");
        assert!(st.success(), "curl {path}");
    };

    let caps: Vec<&str> = pod.caps.iter().map(String::as_str).collect();
    let mut run = pod.spawn(&caps, &env, &dir, "all");
    assert!(run.ready(), "the pod with the DaemonSet's capabilities {caps:?} did not get ready:\n{}", run.log());
    get("/from-the-node");
    let spans = wait_until(Duration::from_secs(20).mul_f64(time_scale()), || {
        let spans = span_lines(&run.stdout());
        spans.iter().any(|s| s.kind == "SERVER" && s.path == "/from-the-node").then_some(spans)
    })
    .unwrap_or_else(|| panic!("no span of the node's HTTPS request from the pod; stdout:\n{}\nlog:\n{}", run.stdout(), run.log()));
    assert_eq!(spans.iter().filter(|s| s.kind == "SERVER" && s.path == "/from-the-node" && s.status == 200).count(), 1, "{spans:?}");
    let log = run.log();
    assert!(
        log.contains("event=\"tls_attached\"") && !log.contains("tls_attach_failed"),
        "the TLS uprobes did not attach in the pod:\n{log}"
    );
    assert!(log.contains("kept=none"), "the loader kept capabilities in the pod:\n{log}");
    for actor in ["span-actor", "exporter-actor"] {
        let pid = run.pid(actor).unwrap_or_else(|| panic!("no pid for {actor}:\n{log}"));
        assert_eq!(uids(pid), vec![ACTORS_UID; 4], "{actor} should run as the image's user ringtail");
        // Not the pod's fsGroup: the token's group is not theirs.
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let groups = status.lines().find_map(|l| l.strip_prefix("Groups:")).unwrap_or("").trim().to_owned();
        assert_eq!(groups, ACTORS_UID.to_string(), "{actor}'s groups: its own alone, never the token's {K8S_UID}");
    }
    // The token: root's and the k8s-actor's group's, read by neither the
    // actors' uid nor any other.
    let token = std::fs::metadata(dir.join("projected/token")).expect("the projected token");
    {
        use std::os::unix::fs::MetadataExt;
        assert_eq!((token.uid(), token.gid(), token.mode() & 0o777), (0, K8S_UID, 0o640));
    }
    let actors: Vec<u32> = ["span-actor", "exporter-actor"].iter().filter_map(|a| run.pid(a)).collect();
    assert!(run.stop(), "the pod did not stop on SIGTERM:\n{}", run.log());
    assert!(run.log().contains("event=\"pins_removed\""), "the pod did not remove its pins on a clean stop:\n{}", run.log());
    // The supervisor stopped the actors itself (SIGTERM to another uid:
    // CAP_KILL), within its grace.
    let log = run.log();
    assert!(!log.contains("did not stop in time"), "the supervisor could not stop the actors:\n{log}");
    for actor in ["span-actor", "exporter-actor"] {
        assert!(!run.events(actor, "stopped").is_empty(), "the supervisor did not see {actor} stop:\n{log}");
    }
    assert!(
        actors.iter().all(|p| !Path::new(&format!("/proc/{p}")).exists()),
        "the actors {actors:?} outlived the pod's supervisor:\n{log}"
    );
    let _ = std::fs::remove_dir_all(&pins);

    // Without each capability: what docs/kubernetes.md says happens.
    for missing in &caps {
        let fewer: Vec<&str> = caps.iter().copied().filter(|c| c != missing).collect();
        // What the pod says when it cannot run without `missing`.
        let failure = |missing: &str| match missing {
            "CAP_SYS_PTRACE" | "CAP_DAC_READ_SEARCH" => Some("CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH for probe.read_process_env"),
            "CAP_SETGID" => Some("cannot join the actors' group"),
            "CAP_SETPCAP" => Some("cannot drop capabilities"),
            "CAP_SETUID" => Some("setresuid"),
            "CAP_CHOWN" => Some("to the actors"),
            _ => None,
        };
        let mut run = pod.spawn(&fewer, &env, &dir, missing);
        let ready = run.ready();
        let actors: Vec<u32> = ["span-actor", "exporter-actor"].iter().filter_map(|a| run.pid(a)).collect();
        // A crash loop: the first component to fail may not be the one
        // whose message is expected (the actors fail without CAP_SETGID
        // too); the loader says its own when it gets there.
        if let (false, Some(text)) = (ready, failure(missing)) {
            wait_until(Duration::from_secs(20).mul_f64(time_scale()), || run.log().contains(text).then_some(()));
        }
        run.stop();
        let log = run.log();
        let _ = std::fs::remove_dir_all(&pins);
        let expected = match *missing {
            "CAP_KILL" => {
                // The supervisor's SIGTERM and SIGKILL cannot reach the
                // actors (another uid), nor can their parent-death signal,
                // which the kernel checks against the exiting supervisor's
                // credentials: they outlive it (a real runtime would kill
                // the container's cgroup; a restarted actor could not be).
                assert!(ready, "without CAP_KILL the pod should start:\n{log}");
                assert!(log.contains("did not stop in time"), "without CAP_KILL the supervisor should fail to stop the actors:\n{log}");
                let alive: Vec<u32> = actors.iter().copied().filter(|p| Path::new(&format!("/proc/{p}")).exists()).collect();
                for p in &alive {
                    // SAFETY: kill has no memory-safety preconditions.
                    unsafe { libc::kill(*p as i32, libc::SIGKILL) };
                }
                assert!(!alive.is_empty(), "without CAP_KILL the actors {actors:?} should outlive the supervisor:\n{log}");
                continue;
            }
            "CAP_BPF" | "CAP_PERFMON" => {
                // CAP_SYS_ADMIN stands in for both (and with TLS off the
                // pod has no CAP_SYS_ADMIN: then the loader stops).
                assert!(ready, "without {missing}, CAP_SYS_ADMIN should stand in for it:\n{log}");
                let fewer: Vec<&str> = fewer.iter().copied().filter(|c| *c != "CAP_SYS_ADMIN").collect();
                let mut run = pod.spawn(&fewer, &env, &dir, &format!("{missing}-sys_admin"));
                let ready = run.ready();
                run.stop();
                let _ = std::fs::remove_dir_all(&pins);
                assert!(!ready, "the pod got ready without {missing} and CAP_SYS_ADMIN:\n{}", run.log());
                assert!(run.log().contains("needs CAP_BPF and CAP_PERFMON"), "without {missing} and CAP_SYS_ADMIN:\n{}", run.log());
                continue;
            }
            "CAP_SYS_ADMIN" => {
                assert!(ready, "without CAP_SYS_ADMIN the pod should still run:\n{log}");
                if log.contains("event=\"tls_attacher_started\"") && log.contains("kind=\"perf events\"") {
                    assert!(
                        log.contains("event=\"tls_attacher_caps\" missing=CAP_SYS_ADMIN"),
                        "the attacher should say what it lacks:\n{log}"
                    );
                    // Uprobes as perf events: perf_event_open(2) refuses
                    // them to CAP_BPF + CAP_PERFMON alone.
                    assert!(
                        log.contains("tls_attach_failed") && !log.contains("event=\"tls_attached\""),
                        "without CAP_SYS_ADMIN perf-event uprobes should not attach:\n{log}"
                    );
                } else {
                    // uprobe_multi links (6.6+) need CAP_BPF and CAP_PERFMON
                    // alone, map_files CAP_CHECKPOINT_RESTORE: the attacher
                    // does not keep CAP_SYS_ADMIN, nor miss it.
                    assert!(
                        log.contains("event=\"tls_attached\"")
                            && !log.contains("tls_attach_failed")
                            && !log.contains("missing=CAP_SYS_ADMIN"),
                        "without CAP_SYS_ADMIN uprobe_multi links should still attach:\n{log}"
                    );
                }
                continue;
            }
            "CAP_CHECKPOINT_RESTORE" => {
                assert!(ready, "without CAP_CHECKPOINT_RESTORE the pod should still run:\n{log}");
                if !log.contains("kind=\"perf events\"") {
                    // (map_files closed: a mapped file is found by its name)
                    assert!(
                        log.contains("missing=CAP_CHECKPOINT_RESTORE") && log.contains("event=\"tls_attached\""),
                        "without CAP_CHECKPOINT_RESTORE the attacher should say so and attach all the same:\n{log}"
                    );
                }
                continue;
            }
            other => failure(other)
                .unwrap_or_else(|| panic!("the DaemonSet grants {other}, which this test does not know: say here what it is for")),
        };
        assert!(!ready, "the pod got ready without {missing}: drop it from the DaemonSet\n{log}");
        assert!(log.contains(expected), "without {missing} the pod should fail with {expected:?}:\n{log}");
    }
    drop(image.dir);
}
