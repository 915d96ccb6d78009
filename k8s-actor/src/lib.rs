//! The k8s-actor: the Kubernetes metadata of this node's containers.
//!
//! Runs unprivileged (as `actors.k8s_user`, a user of its own: the only
//! one that may read the cluster credentials; no capabilities, like the
//! other actors), and only when `kubernetes` is on; it is the one ringtail
//! process that talks to the Kubernetes API server (never the root loader).
//! It watches the pods of its own node only (field selector
//! `spec.nodeName=<node>`: one list and one long watch per node, resumed
//! from the last resource version, relisted when it expired, with back-off
//! and jitter on errors; kube-rs' `watcher`), reads each pod's Job owner
//! once to find its CronJob, and publishes a snapshot of the node's
//! containers (container id → pod, owners, labels, annotations, and the
//! resource attributes the OpenTelemetry conventions derive from them) for
//! the span-actor, atomically, each time it changes.
//!
//! Nothing is kept of a Pod object but those facts (no reflector store of
//! whole objects): memory is bounded by `kubernetes.max_pods` and the
//! per-pod bounds of `ipc_schema::k8s`.
//!
//! # Layout
//! - [`credentials`]: the token or kubeconfig read only if no other
//!   unprivileged user may read it.
//! - [`pod`]: the facts kept of a Pod object, bounded; container ids out of
//!   `<runtime>://<id>`; the Deployment from its ReplicaSet's name.
//! - [`derive`]: facts → resource attributes (`k8s.*`, `service.*`), pure.
//! - [`table`]: the node's pods by uid, grace periods after deletion and
//!   container restarts, bounds, Job → CronJob cache; encodes the snapshot.
//! - [`publish`]: the files written whole and renamed, in a directory only
//!   the actors' uid can write.
//! - [`watch`]: the API client, the watch loop, Job reads, coalesced writes,
//!   counters and health.
//! - `main.rs`: configuration, start-up, readiness, shutdown.

pub mod credentials;
pub mod derive;
pub mod pod;
pub mod publish;
pub mod table;
pub mod watch;

use std::path::PathBuf;

/// Why the k8s-actor could not start or publish.
#[derive(Debug, thiserror::Error)]
pub enum K8sError {
    #[error("cannot make the k8s-actor's directory")]
    Directory {
        #[source]
        source: runtime_kit::dirs::DirError,
    },
    #[error("cannot publish {path}")]
    Publish {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read the kubeconfig {path} (kubernetes.kubeconfig; it must be readable by actors.user)")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error(
        "not in a Kubernetes pod (KUBERNETES_SERVICE_HOST and the service account's token): set kubernetes.kubeconfig, or kubernetes.enabled = false"
    )]
    InCluster {
        #[source]
        source: kube::config::InClusterError,
    },
    #[error("cannot make the Kubernetes API client")]
    Client {
        #[source]
        source: kube::Error,
    },
    #[error("cannot tell which node this is: kubernetes.node_name is empty, $NODE_NAME is not set and the host name is not a node name")]
    Node,
    #[error("cannot read the cluster credentials {path}")]
    Credentials {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the cluster credentials {path} are not the k8s-actor's alone ({why}; mode {mode:04o}): in a pod, mount the token as the chart does \
         (automountServiceAccountToken: false, a projected volume, fsGroup = actors.k8s_user's group); out of one, give the kubeconfig to actors.k8s_user, mode 0600"
    )]
    CredentialsExposed { path: PathBuf, why: String, mode: u32 },
}
