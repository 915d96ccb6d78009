//! The real exporter binary against a fake span-actor: a span batch whose
//! spans do not read (checked as they are read, not at decode) is counted
//! and let go, good batches still become spans, and the process stays up.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use ipc_schema::{endpoints, Body, Call, Component, Envelope, HttpCall, Producer, ServiceResource, Span, SpanBatch, SpanKind};
use ringtail_ipc::{self as ipc, Access};
use ringtail_tests::{free_port, metric_value};
use runtime_kit::counters::Registry;

fn span(id: u64, path: &str) -> Span {
    Span {
        resource: 0,
        kind: SpanKind::Server,
        trace_id: u128::from(id) | 1 << 64,
        span_id: id,
        parent_span_id: 0,
        trace_flags: 1,
        name: "GET".into(),
        start_unix_ns: 1_700_000_000_000_000_000,
        end_unix_ns: 1_700_000_000_001_000_000,
        error: false,
        server_address: None,
        server_port: 80,
        peer_address: "127.0.0.1".into(),
        peer_port: 5000,
        export_trace: true,
        export_metrics: true,
        attributes: Vec::new(),
        edge: None,
        links: Vec::new(),
        call: Call::Http(HttpCall {
            method: "GET".into(),
            method_original: None,
            route: None,
            path: path.into(),
            query: None,
            scheme: "http".into(),
            status: 200,
            client_address: "127.0.0.1".into(),
            client_port: 5000,
            protocol_version: "1.1".into(),
            user_agent: None,
        }),
    }
}

fn resource() -> ServiceResource {
    ServiceResource {
        service_name: "shop".into(),
        service_instance_id: "h:1".into(),
        host_name: "h".into(),
        pid: 1,
        executable_name: "shop".into(),
        extra: Vec::new(),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_span_batch_that_does_not_read_is_counted_and_the_next_is_exported() {
    let dir = PathBuf::from(format!("/tmp/ea-ipc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(endpoints::actors_dir(&dir)).unwrap();
    let prom = free_port();
    let cfg = dir.join("ringtail.toml");
    std::fs::write(
        &cfg,
        format!(
            "[pipeline]\nruntime_dir = \"{}\"\n[export]\nstdout = true\n[export.otlp]\nendpoint = \"\"\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n",
            dir.display()
        ),
    )
    .unwrap();
    let out = dir.join("stdout");
    let registry = Registry::new(Component::SpanActor, 1);
    let mut span_actor = ipc::bind_pub(&endpoints::spans(&dir), Access::private(), &registry).await.unwrap();
    let mut exporter = Command::new(env!("CARGO_BIN_EXE_ringtail-exporter-actor"))
        .arg("--config")
        .arg(&cfg)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let me = Producer { component: Component::SpanActor, instance: 42 };
    let mut exported = false;
    let mut counted = None;
    for round in 0..200u64 {
        // A batch with two spans, the second's path made invalid UTF-8: its
        // message decodes (the resources are fine), its spans do not read.
        let bad = SpanBatch::of(vec![resource()], &[span(10_000 + 2 * round, "/bad-a"), span(10_001 + 2 * round, "/bad-\u{7f}")]);
        // This producer keeps nothing (no resend, no replay): each message's
        // floor is its own seq, so the consumer waits for no earlier one.
        let keeps_nothing = |seq: u64, body: Body| Envelope { floor: seq, ..Envelope::new(me, seq, body) };
        let mut bad = ipc_schema::encode(&keeps_nothing(2 * round + 1, Body::Spans(bad))).unwrap();
        // The path's byte, not one of a span id's (0x277f has one too).
        let at = bad.windows(6).position(|w| w == b"/bad-\x7f").unwrap() + 5;
        bad[at] = 0xff;
        let good = SpanBatch::of(vec![resource()], &[span(20_000 + round, &format!("/good-{round}"))]);
        let good = ipc_schema::encode(&keeps_nothing(2 * round + 2, Body::Spans(good))).unwrap();
        for m in [bad, good] {
            ipc::send(&mut span_actor, "span-actor", Bytes::from(m)).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        exported = std::fs::read_to_string(&out).unwrap_or_default().contains("/good-");
        counted = metric_value(prom, "ringtail_dropped_spans_total", &[("component", "exporter-actor"), ("reason", "malformed_batch")]);
        if exported && counted.is_some_and(|n| n >= 2.0) {
            break;
        }
    }
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(exported, "no good batch exported:\n{text}");
    assert!(!text.contains("/bad-"), "a span of the malformed batch was exported:\n{text}");
    let n = counted.expect("the malformed batch counted");
    assert!(n >= 2.0 && n % 2.0 == 0.0, "both spans of each malformed batch counted: {n}");
    assert!(exporter.try_wait().unwrap().is_none(), "the exporter survived");
    let _ = exporter.kill();
    let _ = exporter.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
