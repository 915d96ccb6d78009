//! Harness for ringtail's end-to-end tests: real processes, started and
//! stopped for real, on loopback. Every module's items are re-exported
//! here, so a test says `use ringtail_tests::*;`.
//!
//! # Layout
//! - [`ringtail`]: [`Ringtail`], the `ringtail` supervisor with a test
//!   configuration, its logs and standard output captured; its pinned
//!   probes and the stdout exporter's span lines.
//! - [`rotel`]: [`Rotel`], a real OTLP collector (rotel, from PyPI in
//!   `.venv`) whose processor hook writes every span and metric it receives
//!   as JSON lines; [`otlp`]: spans at the receiver (HTTP and messaging),
//!   counted exactly.
//! - [`proc`]: [`Proc`], any other process (HTTP servers, load generators),
//!   [`TempDir`], [`free_port`] and the waits.
//! - [`servers`]: python http.server, nginx, any program as a server, and
//!   [`http_get`], a raw HTTP/1.1 client, so requests are exactly what the
//!   test says; [`http1`]: keep-alive and pipelined HTTP/1.1 exchanges,
//!   responses read exactly; [`tls`]: certificates and a Python HTTPS
//!   server.
//! - [`golang`]: the Go toolchains and the Go fixtures built with each.
//! - [`metrics`]: Prometheus samples, resident memory, kernel map entries.
//! - [`machine`]: where the binaries, venv and fixtures are, and whether a
//!   test can run here (the loud skips below).
//! - [`kube`]: the stand-in Kubernetes API server and the k8s-actor run
//!   alone; [`cgroups`]: cgroups laid out as container runtimes lay them
//!   out; [`netns`]: a network namespace joined to the host's by a veth pair.
//! - here: [`on_both_backends!`] and [`test_path`], about the test
//!   executable itself.
//!
//! Tests that need root, BTF or a tool that is missing skip *loudly*: they
//! print `SKIPPED: <reason>` and return, never pass silently. With
//! `RINGTAIL_REQUIRE_ALL=1` (what `./ringtail.sh test`, and so CI, sets) a
//! skip is a failure instead: there every test must run.

pub use serde_json::Value;

pub mod cgroups;
pub mod golang;
pub mod http1;
pub mod kube;
pub mod machine;
pub mod metrics;
pub mod netns;
pub mod otlp;
pub mod proc;
pub mod ringtail;
pub mod rotel;
pub mod servers;
pub mod tls;

pub use golang::*;
pub use http1::{get, keepalive, read_response};
pub use machine::*;
pub use metrics::*;
pub use netns::VethNs;
pub use otlp::{expect_spans, expect_spans_by, k, key, msg_k, msg_key, on_port, Key, MsgKey, CLIENT, CONSUMER, PRODUCER, SERVER};
pub use proc::*;
pub use ringtail::*;
pub use rotel::*;
pub use servers::*;
pub use tls::{certificate, curl_status, python_tls, PY_TLS_SERVER};

/// Defines, for each named function `f(backend: &str)`, the tests
/// `socket::f` and `syscalls::f`: the same test on each capture backend
/// (`probe.backend`).
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod socket {
            $( #[test] fn $name() { super::$name("socket") } )*
        }
        mod syscalls {
            $( #[test] fn $name() { super::$name("syscalls") } )*
        }
    };
}

/// The name the test harness gives test `name` of the module whose
/// `module_path!()` is `module`, to run it alone (`--exact`): the tests of
/// the one end-to-end executable are named by their path below its root
/// (`attacks_ipc::flood_role`), and `--exact flood_role` runs none.
pub fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, below)) => format!("{below}::{name}"),
        None => name.to_owned(),
    }
}
