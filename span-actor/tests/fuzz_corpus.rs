//! The fuzz targets' checks (`fuzz/checks.rs`) replayed over the
//! checked-in corpus (`fuzz/seeds/<target>/`: hand-written hostile inputs
//! and every input a fuzzing run found crashing, kept as regression tests),
//! deterministically and on stable: the suite runs what fuzzing runs,
//! without nightly. FUZZING.md says how to fuzz for real.

#[path = "../fuzz/checks.rs"]
mod checks;

use std::path::PathBuf;

fn seeds(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no seeds in {}", dir.display());
    files.into_iter().map(|p| (p.clone(), std::fs::read(&p).expect("a seed file"))).collect()
}

/// Each seed, then each of its prefixes (a capture can be cut anywhere).
fn replay(target: &str, check: fn(&[u8])) -> usize {
    let mut runs = 0;
    for (path, data) in seeds(target) {
        eprintln!("{}", path.display());
        check(&data);
        for cut in 0..data.len().min(512) {
            check(&data[..cut]);
        }
        runs += 1;
    }
    runs
}

#[test]
fn http1_seeds() {
    assert!(replay("http1", checks::http1) >= 10);
}

#[test]
fn route_redact_seeds() {
    assert!(replay("route_redact", checks::route_redact) >= 2);
}

#[test]
fn config_seeds() {
    assert!(replay("config", checks::config) >= 3);
}

#[test]
fn ipc_decode_seeds_and_real_messages() {
    assert!(replay("ipc_decode", checks::ipc_decode) >= 4);
    use ipc_schema::{encode, Ack, Body, Component, Envelope, HealthReport, MetricPoint, Producer};
    let me = Producer { component: Component::ProbeLoader, instance: 7 };
    let bodies = [
        Body::Ack(Ack { for_instance: 7, received: 3, upto: 2 }),
        Body::Health(HealthReport {
            component: Component::SpanActor,
            instance: 9,
            points: vec![MetricPoint::counter("x_total", &[("reason", "r")], 3)],
        }),
    ];
    for body in bodies {
        let bytes = encode(&Envelope::new(me, 1, body)).expect("encodes");
        checks::ipc_decode(&bytes);
        for cut in 0..bytes.len() {
            checks::ipc_decode(&bytes[..cut]);
        }
    }
}
