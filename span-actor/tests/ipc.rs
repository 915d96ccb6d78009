//! The real span-actor binary against a fake loader and a fake exporter:
//! garbage on its input is counted and skipped, valid batches still become
//! spans, and the process stays up.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use ipc_schema::{endpoints, Body, Component, ConnHead, Envelope, ProcessInfo, Producer, RawBatch, RawEvent, Role, SockAddr};
use ringtail_ipc::{self as ipc, Access};
use runtime_kit::counters::Registry;

fn addr(port: u16) -> SockAddr {
    let mut ip = [0u8; 16];
    ip[..4].copy_from_slice(&[127, 0, 0, 1]);
    SockAddr::from_bytes(false, ip, port)
}

fn batch() -> RawBatch {
    let ev = |conn: u64, path: &str| RawEvent {
        conn: ConnHead {
            role: Role::Server,
            pid: 4242,
            tid: 4242,
            fd: 3,
            proc_start_ns: 1,
            conn_id: conn,
            local: addr(8080),
            peer: addr(40000),
            tls: false,
        },
        seq: 1,
        parent: None,
        start_mono_ns: 1_000,
        end_mono_ns: 2_000,
        status: 200,
        request_len: 0,
        truncated: false,
        orphan: false,
        h2c: false,
        unlinked: false,
        propagated: None,
        kernel_ids: None,
        request: format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes(),
    };
    RawBatch::of(
        1_700_000_000_000_000_000,
        0,
        vec![ProcessInfo {
            pid: 4242,
            proc_start_ns: 1,
            comm: "fake".into(),
            exe_name: Some("fake-server".into()),
            exe_path: None,
            env_service_name: None,
            env_resource_attributes: None,
            container_id: None,
        }],
        &[ev(1, "/a"), ev(2, "/b")],
        &[],
        &[],
    )
}

#[tokio::test]
async fn garbage_is_counted_and_skipped_and_batches_still_flow() {
    let dir = PathBuf::from(format!("/tmp/sa-ipc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(endpoints::actors_dir(&dir)).unwrap();
    let cfg = dir.join("ringtail.toml");
    std::fs::write(&cfg, format!("[pipeline]\nruntime_dir = \"{}\"\nbatch_timeout = \"10ms\"\n", dir.display())).unwrap();

    let raw_path = endpoints::raw_events(&dir);
    let registry = Registry::new(Component::ExporterActor, 1);
    let mut loader = ipc::bind_pub(&raw_path, Access::private(), &registry).await.unwrap();
    let mut actor = Command::new(env!("CARGO_BIN_EXE_ringtail-span-actor"))
        .arg("--config")
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (trigger, shutdown) = runtime_kit::shutdown::channel();
    let mut spans = ipc::subscribe(endpoints::spans(&dir), Access::private(), 64, &registry, shutdown);

    let me = Producer { component: Component::ProbeLoader, instance: 99 };
    let good = Bytes::from(ipc_schema::encode(&Envelope::new(me, 1, Body::Raw(batch()))).unwrap());
    let wrong_sender = Bytes::from(
        ipc_schema::encode(&Envelope::new(Producer { component: Component::ExporterActor, instance: 5 }, 1, Body::Raw(batch()))).unwrap(),
    );
    let mut got = None;
    let mut health = None;
    for _ in 0..200 {
        for junk in [Bytes::from_static(b"\x00garbage"), Bytes::from_static(&[0x94, 0x01, 0xc1]), wrong_sender.clone(), good.clone()] {
            ipc::send(&mut loader, "loader", junk).await.unwrap();
        }
        while let Ok(Some(env)) = tokio::time::timeout(Duration::from_millis(50), spans.recv()).await {
            match env.body {
                Body::Spans(b) => got = Some(b),
                Body::Health(h) if h.component == Component::SpanActor => health = Some(h),
                _ => {}
            }
        }
        if got.is_some() && health.is_some() {
            break;
        }
    }
    let batch = got.expect("the valid raw batch became spans");
    let mut paths: Vec<&str> = batch.read().expect("reads").iter().map(|s| s.call.http().expect("an HTTP span").path).collect();
    paths.sort();
    assert_eq!(paths, ["/a", "/b"]);
    assert_eq!(batch.resources[0].service_name, "fake-server");
    let health = health.expect("health report");
    let rejected: f64 = health.points.iter().filter(|p| p.name == "ringtail_ipc_rejected_total").map(|p| p.value).sum();
    assert!(rejected >= 3.0, "garbage counted: {:?}", health.points);
    // Replays of the same seq are duplicates, not new spans.
    let dups: f64 = health.points.iter().filter(|p| p.name == "ringtail_raw_batches_duplicate_total").map(|p| p.value).sum();
    assert!(dups >= 1.0 || batch.len() == 2);
    assert!(actor.try_wait().unwrap().is_none(), "the span-actor survived the garbage");
    trigger.fire();
    let _ = actor.kill();
    let _ = actor.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
