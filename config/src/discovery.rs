//! `[discovery]`: which processes are traced.

use serde::{Deserialize, Serialize};

use crate::types::{ExeRegex, Port};
use crate::{invalid, ConfigError};

/// Which processes are traced. All empty = every process but ringtail's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoverySettings {
    /// Trace processes listening on these TCP ports (and every request
    /// served on them).
    pub open_ports: Vec<Port>,
    /// Trace processes whose executable name matches one of these regexes.
    pub exe_names: Vec<ExeRegex>,
    /// Trace these process ids (and their children).
    pub pids: Vec<u32>,
    /// Kubernetes (with `[kubernetes]` on): keep the spans of the pods of
    /// these namespaces only. Selection by Kubernetes attributes happens in
    /// the span-actor (the root loader never talks to the API server): the
    /// loader traces what the rules above select, and the spans of
    /// processes whose pod is not selected are dropped, counted
    /// (`ringtail_k8s_unselected_spans_total{reason}`). With any `k8s_`
    /// inclusion rule set, processes of no known pod (host processes) are
    /// not kept. Every list given must match; within a list, any entry.
    pub k8s_namespaces: Vec<String>,
    /// Pod label selectors (`key=value` and `key` terms joined by `,`, all
    /// of them must match), e.g. `"app.kubernetes.io/name=checkout"`.
    pub k8s_pod_labels: Vec<String>,
    /// Names of a pod's owner (its ReplicaSet, Deployment, StatefulSet,
    /// DaemonSet, Job or CronJob).
    pub k8s_owners: Vec<String>,
    /// Container names (`k8s.container.name`).
    pub k8s_containers: Vec<String>,
    /// Never the pods of these namespaces (e.g. `"kube-system"`).
    pub k8s_exclude_namespaces: Vec<String>,
    /// Never the pods these label selectors match (e.g. ringtail's own:
    /// `"app.kubernetes.io/name=ringtail"`).
    pub k8s_exclude_pod_labels: Vec<String>,
}

/// A list of names, its key, the check of one, the rule and an example.
type NameRule<'a> = (&'static str, &'a Vec<String>, fn(&str) -> bool, &'static str, &'static str);

/// A DNS-1123 label (a namespace's or a container's name): 1 to 63 of
/// lowercase letters, digits and `-`, starting and ending with a letter or
/// digit.
fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=63).contains(&b.len()) && b.iter().all(|c| edge(c) || *c == b'-') && edge(&b[0]) && edge(&b[b.len() - 1])
}

/// A DNS-1123 subdomain (an owner's name): at most 253 bytes of labels
/// joined by `.`.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A label's name part or value: at most 63 of letters, digits, `-`, `_`,
/// `.`, starting and ending with a letter or digit (a value may be empty).
fn is_label_part(s: &str, empty_ok: bool) -> bool {
    let b = s.as_bytes();
    if b.is_empty() {
        return empty_ok;
    }
    let edge = |c: &u8| c.is_ascii_alphanumeric();
    b.len() <= 63 && b.iter().all(|c| edge(c) || matches!(c, b'-' | b'_' | b'.')) && edge(&b[0]) && edge(&b[b.len() - 1])
}

/// A label selector of equality terms: `key=value` or `key`, joined by `,`,
/// keys `[prefix/]name` as Kubernetes allows them.
pub fn is_label_selector(s: &str) -> bool {
    let term = |t: &str| {
        let (key, value) = match t.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (t.trim(), None),
        };
        let key_ok = match key.split_once('/') {
            Some((prefix, name)) => is_dns_subdomain(prefix) && is_label_part(name, false),
            None => is_label_part(key, false),
        };
        key_ok && value.is_none_or(|v| is_label_part(v, true))
    };
    !s.trim().is_empty() && s.split(',').all(term)
}

impl DiscoverySettings {
    /// True when nothing narrows the selection.
    pub fn selects_all(&self) -> bool {
        self.open_ports.is_empty() && self.exe_names.is_empty() && self.pids.is_empty()
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        for (i, pid) in self.pids.iter().enumerate() {
            if *pid == 0 {
                return Err(invalid(format!("discovery.pids[{i}]"), "must be a process id above 0", "1234", pid));
            }
        }
        let names: [NameRule<'_>; 6] = [
            (
                "k8s_namespaces",
                &self.k8s_namespaces,
                is_dns_label,
                "must be a namespace name (1-63 lowercase letters, digits, '-')",
                "\"shop\"",
            ),
            (
                "k8s_exclude_namespaces",
                &self.k8s_exclude_namespaces,
                is_dns_label,
                "must be a namespace name (1-63 lowercase letters, digits, '-')",
                "\"kube-system\"",
            ),
            (
                "k8s_containers",
                &self.k8s_containers,
                is_dns_label,
                "must be a container name (1-63 lowercase letters, digits, '-')",
                "\"app\"",
            ),
            (
                "k8s_owners",
                &self.k8s_owners,
                is_dns_subdomain,
                "must be an owner's name (lowercase letters, digits, '-' and '.', at most 253)",
                "\"checkout\"",
            ),
            (
                "k8s_pod_labels",
                &self.k8s_pod_labels,
                is_label_selector,
                "must be a label selector: key=value or key terms joined by ','",
                "\"app.kubernetes.io/name=checkout\"",
            ),
            (
                "k8s_exclude_pod_labels",
                &self.k8s_exclude_pod_labels,
                is_label_selector,
                "must be a label selector: key=value or key terms joined by ','",
                "\"app.kubernetes.io/name=ringtail\"",
            ),
        ];
        for (key, list, ok, rule, example) in names {
            if let Some((i, bad)) = list.iter().enumerate().find(|(_, v)| !ok(v)) {
                return Err(invalid(format!("discovery.{key}[{i}]"), rule, example, format!("{bad:?}")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::Settings;

    #[test]
    fn kubernetes_selection_keys_load_and_bad_values_name_key_rule_and_value() {
        let s = Settings::from_toml(
            "[discovery]\nk8s_namespaces = [\"shop\"]\nk8s_pod_labels = [\"app.kubernetes.io/name=web,tier\"]\nk8s_owners = [\"web.v2\"]\nk8s_containers = [\"app\"]\nk8s_exclude_namespaces = [\"kube-system\"]\nk8s_exclude_pod_labels = [\"app=ringtail\"]\n",
        )
        .expect("valid");
        assert_eq!(s.discovery.k8s_pod_labels, vec!["app.kubernetes.io/name=web,tier".to_owned()]);
        assert!(s.discovery.selects_all(), "the loader's selection is not narrowed by Kubernetes rules");
        let cases = [
            ("k8s_namespaces = [\"Shop\"]", "discovery.k8s_namespaces[0]: must be a namespace name (1-63 lowercase letters, digits, '-'), e.g. \"shop\" (got \"Shop\")"),
            ("k8s_exclude_namespaces = [\"ok\", \"\"]", "discovery.k8s_exclude_namespaces[1]: must be a namespace name (1-63 lowercase letters, digits, '-'), e.g. \"kube-system\" (got \"\")"),
            ("k8s_containers = [\"a_b\"]", "discovery.k8s_containers[0]: must be a container name (1-63 lowercase letters, digits, '-'), e.g. \"app\" (got \"a_b\")"),
            ("k8s_owners = [\"-web\"]", "discovery.k8s_owners[0]: must be an owner's name (lowercase letters, digits, '-' and '.', at most 253), e.g. \"checkout\" (got \"-web\")"),
            ("k8s_pod_labels = [\"app in (a)\"]", "discovery.k8s_pod_labels[0]: must be a label selector: key=value or key terms joined by ',', e.g. \"app.kubernetes.io/name=checkout\" (got \"app in (a)\")"),
            ("k8s_exclude_pod_labels = [\"a=b,\"]", "discovery.k8s_exclude_pod_labels[0]: must be a label selector: key=value or key terms joined by ',', e.g. \"app.kubernetes.io/name=ringtail\" (got \"a=b,\")"),
        ];
        for (line, want) in cases {
            let err = Settings::from_toml(&format!("[discovery]\n{line}\n")).unwrap_err().to_string();
            assert_eq!(err, want, "{line}");
        }
        let env =
            Settings::load_with_env(None, [("RINGTAIL_DISCOVERY__K8S_EXCLUDE_NAMESPACES".to_owned(), "kube-system,monitoring".to_owned())])
                .expect("a list from the environment");
        assert_eq!(env.discovery.k8s_exclude_namespaces, vec!["kube-system".to_owned(), "monitoring".to_owned()]);
    }
}
