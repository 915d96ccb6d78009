//! ringtail's end-to-end tests: real kernel probes, real servers and
//! clients, a real OTLP receiver (docs/testing.md). One test executable with
//! a module per area, not one per file: the harness (`ringtail_tests`) and
//! its dependencies are linked once, and the tests run one at a time in one
//! process (`--test-threads=1`: they share the kernel and the CPUs).
//!
//! The kernel matrix (`tests/kernels/`) runs this executable inside Debian's
//! own kernels, selecting the `kernels::` tests.

mod attacks_ipc;
mod attacks_loader;
mod attacks_tls;
mod capture;
mod containers;
mod data_path;
mod databases;
mod deploy;
mod export;
mod go_tls;
mod h2;
mod hostile;
mod kernels;
mod kubernetes;
mod kubernetes_spans;
mod messaging;
mod operators;
mod propagation;
mod security;
mod semconv;
mod service;
mod systemd_units;
mod tls;
mod tls_later;
mod traces;
mod walking_skeleton;
mod zero_loss;
