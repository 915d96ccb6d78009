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

/// The ZeroMQ endpoint string for a socket path.
pub fn ipc(path: &Path) -> String {
    format!("ipc://{}", path.display())
}
