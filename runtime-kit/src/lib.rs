//! What every ringtail process needs to run, written once.
//!
//! `ipc-schema` is the data contract between the processes; this crate is the
//! shared plumbing around it, so that the loader and both actors start,
//! report readiness, log, count drops and shut down the same way (the wire
//! protocol itself lives in `ringtail-ipc`).
//!
//! # Layout
//! - [`component`]: the one `main` of every component: start-up steps,
//!   profiling at the component table's offset, readiness, socket files
//!   removed however it ends.
//! - [`cli`]: the `--config`/`--check` command line of every component.
//! - [`otel`]: the `k=v` lists of the OpenTelemetry environment variables.
//! - [`ready`]: tell the supervisor (status fd) or systemd (`NOTIFY_SOCKET`)
//!   that start-up finished.
//! - [`logging`]: `tracing` set-up, one line per lifecycle event.
//! - [`shutdown`]: a shutdown token passed into every task; SIGINT/SIGTERM
//!   trigger it.
//! - [`counters`]: a registry of counters and gauges that become
//!   [`ipc_schema::HealthReport`]s; drops are counted *and* logged there.
//! - [`memory`]: allocator tuning, so idle processes stay small.
//! - [`profiling`]: pprof CPU profiles and flame graphs on loopback, and
//!   the process's CPU time.
//! - [`users`]: user and group names to ids.
//! - [`dirs`]: directories made or opened safely (no symlink followed,
//!   nobody else's).
//! - [`files`]: files opened without trusting their names: regular files
//!   to inspect, socket files to connect to, `*at` helpers.
//! - [`text`]: text other users or the network chose, escaped for printing
//!   (logs, the stdout span line).
//! - [`http`]: a minimal GET server for `/metrics` and pprof.
//! - [`k8s`]: reading what the k8s-actor publishes (the Kubernetes
//!   metadata snapshot, its health), safely and bounded.

pub mod cli;
pub mod component;
pub mod counters;
pub mod dirs;
pub mod files;
pub mod http;
pub mod k8s;
pub mod logging;
pub mod memory;
pub mod otel;
pub mod profiling;
pub mod ready;
pub mod shutdown;
pub mod text;
pub mod users;

/// A random 64-bit id for this process start (names a producer instance).
pub fn instance_id() -> u64 {
    loop {
        let id: u64 = rand::random();
        if id != 0 {
            return id;
        }
    }
}
