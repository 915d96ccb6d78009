//! `[kubernetes]`: the metadata of the pods of this node, from the
//! Kubernetes API server, on the spans of their containers.
//!
//! When it is on, the supervisor starts the `k8s-actor` (unprivileged, the
//! only ringtail process that talks to the API server): it watches the pods
//! of its own node and publishes, per container id, the pod's namespace,
//! name, uid, owners, labels and `resource.opentelemetry.io/` annotations
//! with the resource attributes the OpenTelemetry Kubernetes conventions
//! derive from them (docs/kubernetes.md, "Metadata").

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{duration_between, invalid, ConfigError};

/// Most pods `kubernetes.max_pods` may allow (a node runs 110 by default,
/// a few hundred when raised).
pub const MAX_PODS_LIMIT: usize = 10_000;

/// Whether Kubernetes metadata is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Enabled {
    /// On when running in a cluster (`KUBERNETES_SERVICE_HOST` is set, as
    /// in every pod) or when `kubernetes.kubeconfig` is given.
    #[default]
    Auto,
    /// On: the k8s-actor runs (and retries until the API server answers).
    On,
    /// Off: no k8s-actor, no Kubernetes attribute.
    Off,
}

impl Enabled {
    fn as_str(self) -> &'static str {
        match self {
            Enabled::Auto => "auto",
            Enabled::On => "true",
            Enabled::Off => "false",
        }
    }
}

impl Serialize for Enabled {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Enabled {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Enabled;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("auto, true or false")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Enabled, E> {
                Ok(if v { Enabled::On } else { Enabled::Off })
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Enabled, E> {
                match v {
                    "auto" => Ok(Enabled::Auto),
                    "true" => Ok(Enabled::On),
                    "false" => Ok(Enabled::Off),
                    other => Err(E::invalid_value(serde::de::Unexpected::Str(other), &self)),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// Kubernetes metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesSettings {
    /// `"auto"` (on in a cluster: `KUBERNETES_SERVICE_HOST` set, or a
    /// `kubeconfig` given), `"true"` or `"false"`. Off, no process talks to
    /// the API server.
    pub enabled: Enabled,
    /// A kubeconfig file to reach the API server with (out of cluster; it
    /// must be readable by `actors.k8s_user`, which the k8s-actor runs as,
    /// and by no one else but root).
    /// Empty: the pod's service account (in cluster), as every in-cluster
    /// client does.
    pub kubeconfig: PathBuf,
    /// The node whose pods are watched (the field selector
    /// `spec.nodeName=<node>`: the API server sends this node's pods only).
    /// Empty: `$NODE_NAME` (the DaemonSet sets it from `spec.nodeName`),
    /// else this host's name.
    pub node_name: String,
    /// Most pods kept: a node's pods are bounded by the kubelet
    /// (`maxPods`, 110 by default), but the API server is not trusted to
    /// keep to it. Pods beyond it are left out, and counted.
    pub max_pods: usize,
    /// How long a deleted pod's containers (and a restarted container's
    /// previous id) keep their metadata: spans of their last requests are
    /// still on their way through the pipeline.
    #[serde(with = "humantime_serde")]
    pub deleted_grace: Duration,
    /// Derive `service.name`, `service.version` from the well-known labels
    /// `app.kubernetes.io/instance`, `app.kubernetes.io/name` and
    /// `app.kubernetes.io/version` (after the `resource.opentelemetry.io/`
    /// annotations, before the owners' names). The conventions make this
    /// opt-in: a label set for other tools becomes the service's name.
    pub well_known_labels: bool,
    /// How long the span-actor holds the spans of a container it has no
    /// metadata for yet (a new pod's first requests can come before the
    /// API server's word), before they go out without it, counted.
    #[serde(with = "humantime_serde")]
    pub metadata_wait: Duration,
}

impl Default for KubernetesSettings {
    fn default() -> Self {
        KubernetesSettings {
            enabled: Enabled::Auto,
            kubeconfig: PathBuf::new(),
            node_name: String::new(),
            max_pods: 1024,
            deleted_grace: Duration::from_secs(30),
            well_known_labels: false,
            metadata_wait: Duration::from_secs(2),
        }
    }
}

/// The in-cluster marker every pod's environment has.
pub const SERVICE_HOST_ENV: &str = "KUBERNETES_SERVICE_HOST";
/// Where a DaemonSet puts `spec.nodeName` (the downward API).
pub const NODE_NAME_ENV: &str = "NODE_NAME";

/// A DNS-1123 subdomain (a node's name): at most 253 bytes of lowercase
/// letters, digits, `-` and `.`, starting and ending with a letter or digit.
fn is_dns_subdomain(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 253
        && b.iter().all(|c| edge(c) || *c == b'-' || *c == b'.')
        && b.first().is_some_and(edge)
        && b.last().is_some_and(edge)
}

impl KubernetesSettings {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !self.kubeconfig.as_os_str().is_empty() && (!self.kubeconfig.is_absolute() || self.kubeconfig.file_name().is_none()) {
            return Err(invalid(
                "kubernetes.kubeconfig",
                "must be empty (the service account) or an absolute file path",
                "\"/etc/ringtail/kubeconfig\"",
                self.kubeconfig.display(),
            ));
        }
        if !self.node_name.is_empty() && !is_dns_subdomain(&self.node_name) {
            return Err(invalid(
                "kubernetes.node_name",
                "must be empty ($NODE_NAME, else the host name) or a node name (lowercase letters, digits, '-' and '.', at most 253)",
                "\"node-1\"",
                format!("{:?}", self.node_name),
            ));
        }
        if !(1..=MAX_PODS_LIMIT).contains(&self.max_pods) {
            return Err(invalid("kubernetes.max_pods", "must be 1..=10000", "1024", self.max_pods));
        }
        let grace = (Duration::ZERO, Duration::from_secs(600));
        duration_between("kubernetes.deleted_grace", self.deleted_grace, grace, "must be at most 10m", "\"30s\"")?;
        let wait = (Duration::ZERO, Duration::from_secs(60));
        duration_between("kubernetes.metadata_wait", self.metadata_wait, wait, "must be at most 1m", "\"2s\"")
    }

    /// Whether the metadata is on, given whether `KUBERNETES_SERVICE_HOST`
    /// is set (see [`KubernetesSettings::active`]).
    pub fn is_on(&self, in_cluster: bool) -> bool {
        match self.enabled {
            Enabled::On => true,
            Enabled::Off => false,
            Enabled::Auto => in_cluster || !self.kubeconfig.as_os_str().is_empty(),
        }
    }

    /// Whether the metadata is on in this process's environment: what the
    /// supervisor decides to start the k8s-actor on.
    pub fn active(&self) -> bool {
        self.is_on(std::env::var_os(SERVICE_HOST_ENV).is_some_and(|v| !v.is_empty()))
    }

    /// The kubeconfig to use, or `None` for the service account.
    pub fn kubeconfig(&self) -> Option<&Path> {
        (!self.kubeconfig.as_os_str().is_empty()).then_some(self.kubeconfig.as_path())
    }

    /// The node watched: `node_name`, else `env_node` (`$NODE_NAME`), else
    /// `host`; `None` if none of them is a node name.
    pub fn node(&self, env_node: Option<&str>, host: &str) -> Option<String> {
        [Some(self.node_name.as_str()), env_node, Some(host)]
            .into_iter()
            .flatten()
            .map(str::trim)
            .find(|n| !n.is_empty())
            .filter(|n| is_dns_subdomain(n))
            .map(str::to_owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Settings;

    #[test]
    fn auto_by_default_on_in_a_cluster_or_with_a_kubeconfig() {
        let s = Settings::from_toml("").expect("defaults");
        let k = &s.kubernetes;
        assert_eq!(k.enabled, Enabled::Auto);
        assert!(!k.is_on(false), "off on a plain host");
        assert!(k.is_on(true), "on in a pod");
        assert!(!k.well_known_labels, "the conventions make the labels opt-in");
        let with = Settings::from_toml("[kubernetes]\nkubeconfig = \"/etc/ringtail/kubeconfig\"\n").expect("valid");
        assert!(with.kubernetes.is_on(false));
        assert_eq!(with.kubernetes.kubeconfig(), Some(Path::new("/etc/ringtail/kubeconfig")));
        for (text, on_host, in_pod) in
            [("true", true, true), ("\"true\"", true, true), ("false", false, false), ("\"false\"", false, false)]
        {
            let s = Settings::from_toml(&format!("[kubernetes]\nenabled = {text}\n")).expect(text);
            assert_eq!((s.kubernetes.is_on(false), s.kubernetes.is_on(true)), (on_host, in_pod), "{text}");
        }
    }

    #[test]
    fn the_environment_turns_it_on_or_off() {
        for (value, want) in [("true", Enabled::On), ("false", Enabled::Off), ("auto", Enabled::Auto)] {
            let s = Settings::load_with_env(None, [("RINGTAIL_KUBERNETES__ENABLED".to_owned(), value.to_owned())]).expect(value);
            assert_eq!(s.kubernetes.enabled, want, "{value}");
        }
    }

    #[test]
    fn bad_values_name_key_rule_and_value() {
        let cases = [
            ("enabled = \"yes\"", "kubernetes.enabled: must be auto, true or false, e.g. \"auto\" (got \"yes\")"),
            (
                "kubeconfig = \"kubeconfig\"",
                "kubernetes.kubeconfig: must be empty (the service account) or an absolute file path, e.g. \"/etc/ringtail/kubeconfig\" (got kubeconfig)",
            ),
            (
                "node_name = \"Node_1\"",
                "kubernetes.node_name: must be empty ($NODE_NAME, else the host name) or a node name (lowercase letters, digits, '-' and '.', at most 253), e.g. \"node-1\" (got \"Node_1\")",
            ),
            ("max_pods = 0", "kubernetes.max_pods: must be 1..=10000, e.g. 1024 (got 0)"),
            ("max_pods = 10001", "kubernetes.max_pods: must be 1..=10000, e.g. 1024 (got 10001)"),
            ("deleted_grace = \"11m\"", "kubernetes.deleted_grace: must be at most 10m, e.g. \"30s\" (got 11m)"),
            ("metadata_wait = \"2m\"", "kubernetes.metadata_wait: must be at most 1m, e.g. \"2s\" (got 2m)"),
        ];
        for (line, want) in cases {
            let err = Settings::from_toml(&format!("[kubernetes]\n{line}\n")).unwrap_err().to_string();
            assert_eq!(err, want, "{line}");
        }
        let err = Settings::from_toml("[kubernetes]\nnode = \"x\"\n").unwrap_err().to_string();
        assert!(err.contains("node"), "unknown keys are refused: {err}");
    }

    #[test]
    fn the_node_is_the_setting_then_node_name_then_the_host() {
        let mut k = KubernetesSettings::default();
        assert_eq!(k.node(Some("node-a"), "host-b").as_deref(), Some("node-a"));
        assert_eq!(k.node(None, "host-b").as_deref(), Some("host-b"));
        assert_eq!(k.node(Some(""), "host-b").as_deref(), Some("host-b"));
        assert_eq!(k.node(None, "Not_A_Node"), None, "never a selector the API server would refuse");
        k.node_name = "node-c".into();
        assert_eq!(k.node(Some("node-a"), "host-b").as_deref(), Some("node-c"));
    }

    #[test]
    fn the_effective_configuration_round_trips() {
        let s = Settings::from_toml("[kubernetes]\nenabled = true\nmax_pods = 50\ndeleted_grace = \"1s\"\n").expect("valid");
        let again = Settings::from_toml(&s.to_toml()).expect("printed config loads");
        assert_eq!(again.kubernetes, s.kubernetes);
        assert!(s.to_toml().contains("enabled = \"true\""), "{}", s.to_toml());
    }
}
