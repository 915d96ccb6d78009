//! Where each process binds its ZeroMQ sockets.
//!
//! With the pure-Rust `zeromq` crate only a connecting SUB socket
//! reconnects by itself, so every process *binds* what it publishes and
//! *connects* to what it consumes; whichever side restarts, the other side's
//! SUB finds it again.
//!
//! The privileged loader's sockets live in the runtime dir itself (owned by
//! root, not writable by the actors); the actors' sockets live in
//! `actors/` below it, a directory owned by the actors' user.

use std::path::{Path, PathBuf};

/// Raw event batches, bound by the loader (PUB).
pub fn raw_events(runtime_dir: &Path) -> PathBuf {
    runtime_dir.join("raw.sock")
}

/// The actors' own directory under the runtime dir.
pub fn actors_dir(runtime_dir: &Path) -> PathBuf {
    runtime_dir.join("actors")
}

/// Acks for raw batches, bound by the span-actor (PUB).
pub fn raw_acks(runtime_dir: &Path) -> PathBuf {
    actors_dir(runtime_dir).join("raw-ack.sock")
}

/// Span batches, bound by the span-actor (PUB).
pub fn spans(runtime_dir: &Path) -> PathBuf {
    actors_dir(runtime_dir).join("spans.sock")
}

/// Acks for span batches, bound by the exporter-actor (PUB).
pub fn span_acks(runtime_dir: &Path) -> PathBuf {
    actors_dir(runtime_dir).join("span-ack.sock")
}

/// The k8s-actor's directory in the runtime directory (made by the
/// supervisor: the k8s-actor's uid, the actors' group, 2750): the
/// Kubernetes metadata snapshot and the k8s-actor's health, which the
/// actors read and cannot write.
pub fn k8s_dir(runtime_dir: &Path) -> PathBuf {
    runtime_dir.join("k8s")
}

/// The Kubernetes metadata of the node's containers (`crate::k8s::Snapshot`),
/// replaced whole by a rename at each change.
pub fn k8s_snapshot(runtime_dir: &Path) -> PathBuf {
    k8s_dir(runtime_dir).join(K8S_SNAPSHOT)
}

/// The k8s-actor's health: an `Envelope` with a `Body::Health`, replaced
/// whole when it changes, for the span-actor to forward downhill.
pub fn k8s_health(runtime_dir: &Path) -> PathBuf {
    k8s_dir(runtime_dir).join(K8S_HEALTH)
}

/// File name of [`k8s_snapshot`] in [`k8s_dir`].
pub const K8S_SNAPSHOT: &str = "pods.msgpack";
/// File name of [`k8s_health`] in [`k8s_dir`].
pub const K8S_HEALTH: &str = "health.msgpack";

/// The ZeroMQ endpoint string for a socket path.
pub fn ipc(path: &Path) -> String {
    format!("ipc://{}", path.display())
}
